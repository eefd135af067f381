"""Audit 24, the operator of a long pretraining run: `albertlm evaluate` under torchrun, `albertlm plot` of a
run that has logged nothing it can draw, the progress bar under a time budget, the full-disk line of a
checkpoint, and (checks that found nothing wrong) the ETA after a resume and tokens/s under accumulation.
The first four failed before their fixes; the last two passed before."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training import metrics as metrics_module
from albertlm.training.metrics import MetricsLogger
from conftest import assert_one_error
from test_train_audit16 import _loop, _records
from train_fixtures import alice_sop_data

BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ---------------------------------------------------------------------------- 1. evaluate under torchrun
@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed")
def test_evaluate_under_torchrun_shares_the_data_and_prints_the_numbers_once(tmp_path):
    """`torchrun --nproc-per-node 2 -m albertlm evaluate CKPT --data D --json`: each process evaluated all of the
    data on its own and printed the result, so stdout held two JSON objects (a script's json.loads failed) and
    W processes did W times the work. Now the processes share the batches, rank 0 prints once, and the numbers
    are those of one process on the whole data."""
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training.evaluate import evaluate_checkpoint

    data = alice_sop_data(tmp_path)                 # albert-base-v2's SentencePiece: 30,000 pieces
    model = tmp_path / "model"
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_layers=1, num_heads=2,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(model)
    alone = evaluate_checkpoint(model, data, batch_size=4, device="cpu")
    # TMPDIR: torchrun leaves a torchelastic_* folder of its workers' logs in the temporary directory, one a run
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "albertlm", "evaluate",
                           str(model), "--data", str(data), "--batch-size", "4", "--json", "--no-progress",
                           "--device", "cpu"], capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    shared = json.loads(lines[0])
    assert shared.keys() == alone.keys()
    for key, value in alone.items():
        assert shared[key] == (value if isinstance(value, str) else pytest.approx(value, rel=1e-5)), key


class _Counted(Exception):
    """Raised where the evaluation would start: the progress count is what is checked."""


def test_evaluate_progress_counts_the_batches_of_this_process(monkeypatch):
    """Under torchrun rank r of W evaluates batches r, r + W, ...: its progress counts those, not all of them
    (its bar would stop at half way). 10 examples in batches of 2 are batches 0-4: rank 1 of 2 has 1 and 3."""
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training import evaluate as evaluate_module
    from albertlm.training.distributed import DistInfo

    class Held:                                   # what `_evaluate_checkpoint` reads of a dataset before it runs
        meta = {"tokenizer": {"vocab_size": 10}, "max_seq_length": 8}

        def __len__(self) -> int:
            return 10

    def counted(batches, total, *args, **kwargs):
        raise _Counted(total)

    tiny = ModelConfig(vocab_size=10, embedding_size=8, hidden_size=8, num_layers=1, num_heads=1, ffn_size=8,
                       max_position_embeddings=16)
    monkeypatch.setattr(evaluate_module, "show_progress", counted)
    monkeypatch.setattr(evaluate_module, "pretraining_heads", lambda source: (True, True))
    monkeypatch.setattr(evaluate_module, "check_trained_tokenizer", lambda *a: None)
    monkeypatch.setattr(evaluate_module, "check_tokenizer_beside", lambda *a: None)
    monkeypatch.setattr("albertlm.model.io.resolve_checkpoint", lambda path: Path(path))
    monkeypatch.setattr("albertlm.training.pretrain.open_dataset", lambda path: Held())
    monkeypatch.setattr(AlbertForPreTraining, "from_pretrained", classmethod(lambda cls, source: cls(tiny)))
    for info, batches in ((DistInfo(rank=1, world_size=2), 2), (DistInfo(rank=0, world_size=2), 3), (DistInfo(), 5)):
        with pytest.raises(_Counted) as counted_total:
            evaluate_module._evaluate_checkpoint("model", "data", 2, 0, "fp32", info, True)
        assert counted_total.value.args == (batches,)


# ----------------------------------------------------------------------- 2. plot with nothing to draw
@pytest.mark.parametrize("content", ["", "\n\n", '{"step": 10, "split": "train", "time": 17'])
def test_plot_of_a_run_killed_before_its_first_record_says_so(tmp_path, capsys, content):
    """An empty metrics.jsonl (a run killed before its first --log-every), or one whose only line was being written
    when the run was killed: `no metrics in RUN (expected RUN/metrics.jsonl)`, as if the file were missing."""
    (tmp_path / "metrics.jsonl").write_text(content)
    assert_one_error(capsys, main(["plot", str(tmp_path)]), f"{tmp_path / 'metrics.jsonl'} holds no record yet")
    assert not (tmp_path / "curves.png").exists()


def test_plot_of_a_run_without_training_or_evaluation_records_is_one_line_not_an_empty_image(tmp_path, capsys):
    """A run with --log-every 0 and no --eval-data records only its summary: `albertlm plot` wrote four empty
    panels to curves.png, printed its path and exited 0."""
    from albertlm.data import loader
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import Datasets, make_loop
    from albertlm.training.trainer import open_logger
    from train_fixtures import SyntheticPretraining, tiny_run

    train = SyntheticPretraining(n=32)
    loop = make_loop(tiny_run(max_steps=2, log_every=0), tmp_path, Datasets(train, None, loader.collate, train.meta),
                     DistInfo(), False)
    open_logger(loop)
    assert loop.run() == "done"
    assert [r["split"] for r in _records(tmp_path)] == ["summary"]
    capsys.readouterr()
    assert_one_error(capsys, main(["plot", str(tmp_path)]), "holds no training or evaluation numbers to draw",
                     "only summary records", "--log-every 0")
    assert not (tmp_path / "curves.png").exists()


# ------------------------------------------------------------------ 3. the progress bar under a budget
def test_the_progress_bar_says_when_the_time_budget_ends_before_the_run(tmp_path, monkeypatch):
    """Under --train.max_minutes the log lines say `time budget ends in ...` when the budget ends the run first,
    but the bar (on a terminal) showed tqdm's ETA of the whole run alone: 1h56m for the demo's 8-minute budget."""
    monkeypatch.setattr(metrics_module, "_terminal", lambda: True)
    logger = MetricsLogger(tmp_path, max_steps=10_000, tensorboard=False)
    try:
        logger._started -= 10.0                      # as if the first step took 10 s: the run needs ~28 h more
        logger.advance(1, 3.0, 1000.0)
        assert "time budget" not in logger.bar.postfix          # no budget: tqdm's ETA is the run's
        logger.deadline = time.monotonic() + 8 * 60
        logger.advance(2, 3.0, 1000.0)
        assert "loss 3.0000" in logger.bar.postfix and "time budget ends in 7m" in logger.bar.postfix, \
            logger.bar.postfix
        logger.deadline = time.monotonic() + 1e9     # a budget that outlasts the run: nothing said
        logger.advance(3, 3.0, 1000.0)
        assert "time budget" not in logger.bar.postfix
    finally:
        logger.close()


# ------------------------------------------------------------------- 4. a checkpoint on a full disk
def test_a_checkpoint_the_disk_cannot_hold_names_the_one_resume_goes_on_from(tmp_path, monkeypatch):
    """The line said which checkpoint is still complete, not that `--resume` goes on from it (the metrics.jsonl
    and TensorBoard lines of a full disk say what to do); the resumed run then logs every step once."""
    real = ckpt._write_trainer_state

    def full_disk(directory, state):
        if state.step == 4:
            (directory / "trainer_state.pt").write_bytes(b"\0" * 100)     # part of it, then no room
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(directory, state)

    monkeypatch.setattr(ckpt, "_write_trainer_state", full_disk)
    settings = dict(max_steps=6, save_every=2, log_every=1)
    with pytest.raises(UserError) as failed:
        _loop(tmp_path, **settings).run()
    assert str(failed.value) == (f"{ckpt.step_dir(tmp_path, 4)}: cannot write the checkpoint (No space left on "
                                 f"device; is the disk full?); the newest complete checkpoint is "
                                 f"{ckpt.step_dir(tmp_path, 2)}, which `--resume` goes on from")
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_00000002"]
    monkeypatch.setattr(ckpt, "_write_trainer_state", real)
    assert _loop(tmp_path, resume=True, **settings).run() == "done"
    assert [(r["step"], r["split"]) for r in _records(tmp_path) if r["split"] == "train"] == \
        [(step, "train") for step in range(1, 7)]


# --------------------------------------------------------- 5. checks that found nothing wrong (passed before)
def test_the_eta_of_a_resumed_run_counts_its_own_steps_only(tmp_path, monkeypatch):
    """Resumed at step 90 of 100, 5 steps in 10 s: the 5 steps left take 10 s more (counting the 90 resumed steps
    as done in those 10 s would say 0.5 s). The logger's clock is stopped: a loaded machine pausing this process
    for half a second between the logger's start and its line made the ETA 11s."""
    clock = [1000.0]
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    logger = MetricsLogger(tmp_path, max_steps=100, start_step=90, tensorboard=False, progress=False)
    try:
        clock[0] += 10.0
        assert logger._train_line(95, {"loss": 3.0}).endswith("loss 3.0000, ETA 10s")
        assert "ETA" not in logger._train_line(100, {"loss": 3.0})
    finally:
        logger.close()


def test_tokens_per_second_counts_the_real_tokens_of_every_micro_batch(tmp_path):
    """The tokens a record's tokens/s divides are the non-padding tokens of the whole global batch, the same with
    gradient accumulation (4 micro-batches of 2) as without, and equal to the batches' attention masks."""
    from albertlm.training.loop import shuffled_batches
    from test_train import datasets

    steps, batch, seed = 3, 8, 7                   # tiny_run's seed
    train = datasets().train
    order = shuffled_batches(len(train), batch, seed)(0)[:steps]
    expected = float(sum(train[int(i)]["attention_mask"].sum() for ids in order for i in ids))
    assert expected < steps * batch * len(train[0]["attention_mask"])      # the data has padding
    counted = []
    for micro in (0, 2):
        loop = _loop(tmp_path / f"micro{micro}", max_steps=steps, micro=micro, log_every=1)
        assert loop.run() == "done"
        counted.append(loop.state.extra["tokens"])
        records = [r for r in _records(tmp_path / f"micro{micro}") if r["split"] == "train"]
        assert sum(r["tokens_per_s"] * r["window_s"] for r in records) == pytest.approx(expected, rel=1e-6)
    assert counted == [expected, expected]
