"""Audit 17b: what a user sees while and after `albertlm pretrain` / `albertlm finetune` run. Before: the last
word of a run was `done: run directory ...` (no steps, time, throughput, loss or checkpoint said), and without a
progress bar (--no-progress, nohup, sbatch, a pipe) stdout showed no training loss between evaluations. Each test
failed before its fix."""
from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from albertlm.training import metrics as metrics_module
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import make_loop
from albertlm.training.trainer import open_logger
from conftest import save_tiny_pretrained
from test_train import datasets
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data, slow_evaluations_and_saves, tiny_run

TINY = [*TINY_PRETRAIN_ARGS, "--save-every", "0", "--warmup-steps", "1", "--lr", "0.01", "--train.tensorboard=false"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """32-token SOP data from 200 lines of shared text, albert-base-v2's SentencePiece."""
    return alice_sop_data(tmp_path_factory.mktemp("audit17b_data"))


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _block(printed: str, header: str) -> list[str]:
    """The summary's lines: its header and the indented lines under it."""
    lines = printed.splitlines()
    start = lines.index(header)
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


# ------------------------------------------------------------------------ 1. the summary of a finished run
def test_a_finished_run_ends_with_its_summary_printed_and_recorded(data, tmp_path, capsys):
    """At the end: the step reached of the total, the steps / examples / tokens trained in how long, the training
    tokens/s, the last training loss and evaluation, the newest checkpoint; once more for a resumed run (its own
    steps). The record (split "summary" in metrics.jsonl) is read by none of the curves: not `albertlm plot`,
    not ablation's curve reader, not TensorBoard."""
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data), "--eval-data", str(data), "--out", str(out), *TINY,
                 "--max-steps", "3", "--log-every", "2", "--train.eval_batches", "1", "--no-progress",
                 "--train.tensorboard=true"]) == 0
    printed = capsys.readouterr().out
    block = _block(printed, "summary: done at step 3 of 3")
    assert printed.strip().splitlines()[-1].startswith("done: run directory")     # the CLI's line stays last
    records = _records(out)
    train = [r for r in records if r["split"] == "train"]
    last_eval = [r for r in records if r["split"] == "eval"][-1]
    summary = records[-1]
    newest = str(out / "checkpoints" / "step_00000003")
    assert summary["split"] == "summary" and summary["status"] == "done" and summary["step"] == 3
    assert summary["total_steps"] == 3 and summary["first_step"] == 1 and summary["steps_trained"] == 3
    assert summary["examples_trained"] == 12                           # 3 steps of --batch-size 4
    assert summary["tokens_trained"] == train[-1]["tokens"] > 0
    assert summary["loss"] == pytest.approx(train[-1]["loss"]) and summary["loss_step"] == 3
    assert summary["checkpoint"] == newest
    assert 0 < summary["train_s"] <= summary["wall_s"]
    # train_s is recorded to the millisecond, tokens_per_s from the unrounded time: on a fast machine 3 tiny
    # steps take a few tens of ms, where a rel=1e-2 comparison would fail on the rounding alone
    low, high = summary["train_s"] - 5e-4, summary["train_s"] + 5e-4
    assert summary["tokens_trained"] / high * 0.999 <= summary["tokens_per_s"] \
        <= summary["tokens_trained"] / max(low, 1e-9) * 1.001, summary
    text = "\n".join(block)
    assert "steps 1-3 in " in text and f"12 examples, {train[-1]['tokens']:,.0f} tokens" in text
    assert "tokens/s while training" in text
    assert f"{train[-1]['loss']:.4f} (training, step 3)" in text
    assert "evaluation  step 3: " in text and f"sop_acc {last_eval['sop_acc']:.4f}" in text
    assert f"checkpoint  {newest}" in text

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from albertlm.experiments.runner import _curve

    assert [r["step"] for r in _curve(out)] == [2, 3]
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert not [tag for tag in events.Tags()["scalars"] if tag.startswith("summary/")]
    assert main(["plot", str(out)]) == 0 and (out / "curves.png").is_file()

    capsys.readouterr()
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "5", "--no-progress"]) == 0
    block = _block(capsys.readouterr().out, "summary: done at step 5 of 5")
    assert "steps 4-5 in " in block[1] and " 8 examples" in block[1]
    summaries = [r for r in _records(out) if r["split"] == "summary"]
    assert [(r["first_step"], r["step"], r["examples_trained"]) for r in summaries] == [(1, 3, 12), (4, 5, 8)]


# -------------------------------------------------------------- 2. a run stopped early: its summary says how
def _logged_loop(run_dir: Path, **train):
    loop = make_loop(tiny_run(**train), run_dir, datasets(), DistInfo(), False)
    open_logger(loop)
    return loop


def test_a_run_stopped_by_a_signal_or_its_time_budget_ends_with_its_summary(tmp_path, capsys):
    """SIGTERM (a scheduler's notice) after step 2, and a time budget used up after step 1: the summary says
    which, at what step, and names the checkpoint just saved. A second Ctrl-C that leaves the step unsaved prints
    the summary (naming no checkpoint) but records none: metrics.jsonl stays empty, so the corrected command may
    still run in that directory."""
    if threading.current_thread() is not threading.main_thread():   # no handler there: the SIGTERM would end
        pytest.skip("signal handlers need the main thread")          # the test process (an xdist worker)
    loop = _logged_loop(tmp_path / "signal", max_steps=6, log_every=4)
    loop.on_step = lambda step, m: step == 2 and os.kill(os.getpid(), signal.SIGTERM)
    assert loop.run() == "interrupted"
    capsys.readouterr()      # (the handler's notice on stderr)
    # printed by `run` through the logger; read back from the record
    summary = _records(tmp_path / "signal")[-1]
    assert (summary["split"], summary["status"], summary["step"], summary["steps_trained"]) == \
        ("summary", "interrupted", 2, 2)
    assert summary["checkpoint"] == str(ckpt.step_dir(tmp_path / "signal", 2))

    loop = _logged_loop(tmp_path / "budget", max_steps=6, log_every=4, max_minutes=1e-9)
    assert loop.run() == "budget"
    printed = capsys.readouterr().out
    block = _block(printed, "summary: stopped by the time budget at step 1 of 6")
    assert printed.index("time budget of") < printed.index("summary: stopped")     # after the stop's own line
    assert block[-1] == f"  checkpoint  {ckpt.step_dir(tmp_path / 'budget', 1)}"
    assert _records(tmp_path / "budget")[-1]["status"] == "budget"

    loop = _logged_loop(tmp_path / "hard", max_steps=3, log_every=0)
    real_steps, reads = loop.data.steps, []

    def steps(start):
        for batches in real_steps(start):
            reads.append(start)
            if len(reads) == 3:      # during step 2, after its update: not saved
                raise KeyboardInterrupt
            yield batches

    loop.data.steps = steps
    assert loop.run() == "interrupted"
    block = _block(capsys.readouterr().out, "summary: stopped by a signal at step 1 of 3")
    assert block[-1] == "  checkpoint  none saved"
    assert (tmp_path / "hard" / "metrics.jsonl").read_text() == ""


# ----------------------------------------------- 3. the summary's tokens/s is the training's, pauses left out
def test_the_summary_tokens_per_second_leaves_out_evaluations_and_checkpoints(tmp_path, monkeypatch):
    """Each evaluation and save takes 1000 s of a fake clock (as in test_train_audit17): the summary's training
    time stays that of the steps, also when the time budget's own evaluation and save end the run."""
    for name, settings in (("done", dict(max_steps=3, eval_every=1, save_every=1, log_every=2)),
                           ("budget", dict(max_steps=3, log_every=0, max_minutes=1e-9))):
        loop = slow_evaluations_and_saves(_logged_loop(tmp_path / name, **settings), monkeypatch)
        assert loop.run() == name
        summary = _records(tmp_path / name)[-1]
        assert summary["split"] == "summary" and summary["train_s"] < 500, summary
        assert summary["tokens_per_s"] > summary["tokens_trained"] / 500


# ------------------------------------------------- 4. a line per training record when there is no bar
def test_without_a_progress_bar_each_training_record_is_a_line(data, tmp_path, capsys, monkeypatch):
    """--no-progress (and a progress bar asked for where stderr is no terminal: nohup, sbatch, a pipe) showed no
    training loss between evaluations; now each --log-every record is one line on stdout. With the bar drawn,
    there is no second copy of its numbers."""
    run = ["pretrain", "--data", str(data), *TINY, "--max-steps", "4", "--log-every", "2"]
    for name, extra in (("off", ["--no-progress"]), ("no-terminal", [])):
        assert main([*run, "--out", str(tmp_path / name), *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        train = [line for line in lines if " train: " in line]
        assert [line.split(" train: ")[0] for line in train] == ["step 2/4", "step 4/4"], name
        loss = [r["loss"] for r in _records(tmp_path / name) if r["split"] == "train"]
        for line, value in zip(train, loss):
            assert f"loss {value:.4f}" in line and "lr " in line and " tok/s" in line, line
        assert "ETA " in train[0] and "ETA" not in train[1]     # nothing left after the last step

    monkeypatch.setattr(metrics_module, "_terminal", lambda: True)
    assert main([*run, "--out", str(tmp_path / "terminal")]) == 0
    captured = capsys.readouterr()
    assert " train: " not in captured.out and "summary: done at step 4 of 4" in captured.out
    assert "tok/s" in captured.err                                  # the bar's postfix


# ---------------------------------------------------------------------------------- 5. fine-tuning too
def test_finetune_prints_its_training_lines_and_summary_too(tmp_path, capsys):
    """`albertlm finetune` runs the same loop: a line per --log-every record without a bar, the summary (with
    the dev metrics of the last evaluation) before its JSON result, and the summary record."""
    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"the film was {'good' if i % 2 else 'bad'}",
                                        "label": "pos" if i % 2 else "neg"}) + "\n" for i in range(12)))
    out = tmp_path / "ft"
    assert main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--out", str(out), "--batch-size", "4", "--max-seq-length", "16", "--max-steps", "3",
                 "--log-every", "2", "--train.progress=false", "--train.tensorboard=false"]) == 0
    printed = capsys.readouterr().out
    assert [line.split(" train: ")[0] for line in printed.splitlines() if " train: " in line] == \
        ["step 2/3", "step 3/3"]
    block = _block(printed, "summary: done at step 3 of 3")
    assert "steps 1-3 in " in block[1] and " 12 examples" in block[1]
    assert any(line.startswith("  evaluation  step 3: dev/accuracy ") for line in block)
    assert printed.index("summary: done") < printed.index('"best"')          # the JSON result stays last
    summary = _records(out)[-1]
    assert summary["split"] == "summary" and summary["examples_trained"] == 12
