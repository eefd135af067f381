"""Audit 22 of `albertlm pretrain` as a demanding user: what `--init-from` trains with (the checkpoint's dropout
was replaced by the preset's without a word) and what a resumed `--init-from` run records (run_config.json lost
where it started), a finished run whose last evaluation was interrupted (evaluated again at every `--resume`),
NaN in metrics.jsonl (not JSON for strict readers), and the long-warmup warning of a resumed run (it advised the
--warmup-steps that `--resume` refuses). Each test failed before its fix."""
from __future__ import annotations

import json
import math
import shutil
import signal
import threading
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import make_loop
from albertlm.training.trainer import open_logger
from test_train import datasets
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data, tiny_run

DROPOUTS = ("hidden_dropout", "attention_dropout", "classifier_dropout")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Real SOP data (Alice, albert-base-v2's SentencePiece) and a checkpoint of TINY_PRETRAIN_ARGS' model for
    that vocabulary, saved with dropout 0.1 (the albert-tiny preset has 0)."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("train22")
    data = alice_sop_data(root, lines=120)
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_layers=1, num_heads=2, ffn_size=37,
                         max_position_embeddings=64, hidden_dropout=0.1, attention_dropout=0.1,
                         classifier_dropout=0.1)
    AlbertForPreTraining(config).save_pretrained(root / "source")
    return {"data": data, "source": root / "source"}


def _pretrain(sources, out: Path, *extra: str) -> int:
    return main(["pretrain", "--data", str(sources["data"]), "--out", str(out), *TINY_PRETRAIN_ARGS,
                 "--warmup-steps", "1", "--no-progress", *extra])


def _saved_run(out: Path) -> dict:
    return json.loads((out / "run_config.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------- 1. --init-from: the checkpoint's dropout
def test_init_from_trains_with_the_checkpoints_dropout_unless_one_is_given(sources, tmp_path, capsys):
    """`--init-from` a checkpoint trained with dropout 0.1: the run trained with the preset's 0 and said nothing
    (its architecture came from the checkpoint, its dropout from the preset). Now the checkpoint's settings are
    kept unless a dropout is given, and a given one that differs is named in one note as the run starts."""
    base = ["--init-from", str(sources["source"]), "--max-steps", "1"]
    assert _pretrain(sources, tmp_path / "dry", *base, "--dry-run") == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert {k: model[k] for k in DROPOUTS} == dict.fromkeys(DROPOUTS, 0.1)

    out = tmp_path / "given"
    assert _pretrain(sources, out, *base, "--model.hidden_dropout", "0") == 0
    said = capsys.readouterr().out
    model = _saved_run(out)["model"]
    assert (model["hidden_dropout"], model["attention_dropout"]) == (0.0, 0.1)
    notes = [line for line in said.splitlines() if line.startswith("note: --init-from")]
    assert len(notes) == 1 and "hidden_dropout 0 (the checkpoint's: 0.1)" in notes[0], said
    assert "attention_dropout" not in notes[0]


# ---------------------------------------------------- 2. a resumed --init-from run: where it started
def test_a_resumed_init_from_run_still_records_its_starting_checkpoint(sources, tmp_path, capsys):
    """The first `--resume` of an `--init-from` run rewrote run_config.json (and its next checkpoints') with
    init_from "": the record of where the run started was lost, and that run_config.json given as --config
    (docs: any run's is a valid one) trained from scratch. Now it is kept, and the resume neither reads nor needs
    the starting checkpoint (it may be gone by then)."""
    source = tmp_path / "source"
    shutil.copytree(sources["source"], source)
    out = tmp_path / "run"
    assert _pretrain(sources, out, "--init-from", str(source), "--max-steps", "1") == 0
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2", "--no-progress"]) == 0
    recorded = [_saved_run(out)["init_from"]] + [json.loads((c / "run_config.json").read_text())["init_from"]
                                                 for c in ckpt.list_checkpoints(out)]
    assert recorded == [str(source)] * 3, recorded
    shutil.rmtree(source)
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3", "--no-progress"]) == 0
    assert "note: --init-from" not in capsys.readouterr().out        # a resumed run trains its own weights
    assert _saved_run(out)["init_from"] == str(source)


# ------------------------------------------- 3. a finished run's interrupted last evaluation, done once
def _run_with_evaluations(run_dir: Path, resume: bool, stop_in_evaluation: bool = False) -> tuple[str, int]:
    """A 2-step run evaluated at step 2 (its last); returns (status, evaluations done). With
    `stop_in_evaluation`, two signals arrive during the evaluation (the loop's own handler, called directly)."""
    loop = make_loop(tiny_run(max_steps=2, eval_every=2, log_every=1), run_dir, datasets(), DistInfo(), resume)
    open_logger(loop)
    evaluate, done = loop.evaluate_fn, []

    def counted():
        done.append(1)
        if stop_in_evaluation:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.getsignal(signum)(signum, None)
        return evaluate()

    loop.evaluate_fn = counted
    return loop.run(), len(done)


def test_a_finished_runs_interrupted_last_evaluation_is_done_once(tmp_path):
    """Stopped during the evaluation of its last step, the run's checkpoint said "not evaluated"; each `--resume`
    then evaluated that step again (and appended its record to metrics.jsonl again), since the checkpoint was
    never rewritten. Now the first resume records the evaluation in the checkpoint and a second one finds
    nothing to do."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    assert _run_with_evaluations(tmp_path, False, stop_in_evaluation=True) == ("interrupted", 1)
    assert _run_with_evaluations(tmp_path, True) == ("done", 1)
    assert _run_with_evaluations(tmp_path, True) == ("done", 0)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines if json.loads(line)["split"] == "eval"] == [2]
    from albertlm.training.loop import UNEVALUATED

    assert UNEVALUATED not in ckpt.load_train_state(ckpt.latest_checkpoint(tmp_path)).extra


# ---------------------------------------------------------- 4. metrics.jsonl: strict JSON
def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_metrics_jsonl_holds_null_for_nan_and_infinity(tmp_path):
    """A NaN score (a Pearson correlation of constant predictions) or an infinite gradient norm (an fp16 step the
    loss scaler skips) was written as NaN / Infinity: not JSON for jq, JavaScript or any strict reader. Now null,
    as the other JSON files of a run; `albertlm plot` still draws the run."""
    from albertlm.training.metrics import MetricsLogger, read_metrics
    from albertlm.training.plots import plot_run

    logger = MetricsLogger(tmp_path, 2, tensorboard=False, progress=False)
    logger.log(1, "train", {"loss": 2.5, "mlm_loss": 2.0, "lr": 0.1, "grad_norm": math.inf})
    logger.log(2, "train", {"loss": 2.0, "mlm_loss": 1.5, "lr": 0.05, "grad_norm": 1.0})
    logger.log(2, "eval", {"dev/pearson": math.nan, "mlm_loss": 1.75})
    logger.close()
    records = [_strict(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["grad_norm"] is None and records[2]["dev/pearson"] is None
    assert records[2]["mlm_loss"] == 1.75
    assert [r["step"] for r in read_metrics(tmp_path)] == [2, 1, 2]
    assert plot_run(tmp_path).is_file()


# ---------------------------------------------------- 5. the long-warmup warning of a resumed run
def test_the_long_warmup_warning_of_a_resumed_run_advises_what_resume_allows():
    """`--resume --max-steps 10` of a run with the recipe's 3125 warmup steps was told to "pass a smaller
    --warmup-steps", which `--resume` then refused. Now it is told what it may do."""
    from albertlm.training.loop import Plan
    from albertlm.training.pretrain import long_warmup_warning

    plan = Plan(total_steps=10, warmup_steps=3125, eval_every=10, lr=0.00176)
    assert "pass a smaller --warmup-steps" in long_warmup_warning(plan)
    said = long_warmup_warning(plan, resumed=True)
    assert "pass a smaller --warmup-steps" not in said and "--max-steps above 3125" in said, said
    assert "--overwrite" in said
