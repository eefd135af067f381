"""Audit 21 of the shared training loop (pretraining and fine-tuning both run it).

A second Ctrl-C (or SIGTERM) during a dev evaluation saved the step's checkpoint with that evaluation missing, and
`--resume` started after it: a fine-tuning's train_log.json lacked the step's evaluation and its best model could be
the wrong one; a pretraining's metrics.jsonl lacked the step's eval record. The checkpoint now says its evaluation
was interrupted (and holds what the state was before it), and the resumed run evaluates that step first.

Signals are delivered by calling the handler the loop installed, from inside the evaluation: never by timing."""
from __future__ import annotations

import json
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import make_loop
from albertlm.training.trainer import open_logger
from conftest import save_tiny_pretrained
from test_train import datasets
from train_fixtures import StubTokenizer, finetune_config, synthetic_task, tiny_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("loop21"))


def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():   # the loop installs no handler there
        pytest.skip("signal handlers need the main thread")


def _signal_twice() -> None:
    """What a user's second Ctrl-C (here: SIGTERM, then SIGINT) does: the loop's own handler, called twice."""
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    signal.getsignal(signal.SIGINT)(signal.SIGINT, None)


def _records(run_dir: Path, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in r.items() if k != "time"} for r in map(json.loads, lines) if r["split"] == split]


# ------------------------------------------------------------ 1. a second signal during a dev evaluation
def _finetune(out: Path, model: Path, scores: list[float], interrupt_at: int = 0, resume: bool = False) -> dict:
    """6 steps, a dev evaluation (and, save-every 0, a checkpoint) every 2; evaluation k scores scores[k] and writes
    dev_predictions.txt; with `interrupt_at` = k, the second signal comes while evaluation k writes its files."""
    from albertlm.tasks import finetune

    spec, values, calls = synthetic_task(), iter(scores), []
    spec.eval_sets[0].score = lambda outputs: {"accuracy": next(values)}

    def write(outputs, out_dir):
        calls.append(1)
        if len(calls) == interrupt_at:
            _signal_twice()
        (out_dir / "dev_predictions.txt").write_text(repr(outputs["logits"].tolist()))

    spec.eval_sets[0].write = write
    cfg = finetune_config(max_steps=6)
    cfg = cfg.replace(train=replace(cfg.train, eval_every=2))
    return finetune.run_finetune(spec, model, StubTokenizer(), cfg, out, log=lambda *a: None, resume=resume)


def test_a_second_signal_during_a_finetune_evaluation_is_evaluated_again_on_resume(tiny_model, tmp_path, capsys):
    """Stopped while step 4's evaluation (the new best) wrote its files, the run saved step 4 with that evaluation
    in its history and as its best but its dev predictions unwritten, or (stopped earlier in it) without it at all;
    the resumed run went on to step 6. Now the resumed run evaluates step 4 again: the same history, best model and
    dev predictions as a run never stopped."""
    _main_thread_only()
    whole = _finetune(tmp_path / "whole", tiny_model, [0.5, 0.75, 0.25])
    out = tmp_path / "cut"
    assert _finetune(out, tiny_model, [0.5, 0.75], interrupt_at=2) == {"status": "interrupted"}
    said = capsys.readouterr().out
    resumed = _finetune(out, tiny_model, [0.75, 0.25], resume=True)
    said += capsys.readouterr().out
    log = {run: json.loads((run / "train_log.json").read_text()) for run in (tmp_path / "whole", out)}
    assert log[out]["history"] == log[tmp_path / "whole"]["history"]
    assert log[out]["losses"] == log[tmp_path / "whole"]["losses"]
    assert resumed["best"] == whole["best"] and whole["best"]["step"] == 4
    assert (out / "dev_predictions.txt").read_text() == (tmp_path / "whole" / "dev_predictions.txt").read_text()
    from safetensors.torch import load_file

    mine, theirs = (load_file(str(run / "best" / "model.safetensors")) for run in (out, tmp_path / "whole"))
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert "interrupted during the evaluation of step 4" in said and "evaluating step 4 first" in said


def _pretrain(run_dir: Path, resume: bool = False, interrupt_at: int = 0) -> str:
    """4 steps, evaluated every 2; with `interrupt_at` = k, the second signal comes during evaluation k."""
    loop = make_loop(tiny_run(max_steps=4, eval_every=2, log_every=2), run_dir, datasets(), DistInfo(), resume)
    open_logger(loop)
    evaluate, calls = loop.evaluate_fn, []

    def interrupted():
        calls.append(1)
        if len(calls) == interrupt_at:
            _signal_twice()
        return evaluate()

    loop.evaluate_fn = interrupted
    return loop.run()


@pytest.mark.parametrize("at", [1, 2])
def test_a_second_signal_during_a_pretraining_evaluation_is_evaluated_again_on_resume(tmp_path, at):
    """--eval-every 2: stopped during step 2's (or the last step's) evaluation, metrics.jsonl never got its eval
    record; the resumed run (of a finished run: nothing to train) did not evaluate it. Now every evaluation of the
    uninterrupted run is in the file, with the same numbers, once."""
    _main_thread_only()
    assert _pretrain(tmp_path / "whole") == "done"
    assert _pretrain(tmp_path / "cut", interrupt_at=at) == "interrupted"
    assert _pretrain(tmp_path / "cut", resume=True) == "done"
    assert _records(tmp_path / "cut", "eval") == _records(tmp_path / "whole", "eval")
    assert [r["step"] for r in _records(tmp_path / "cut", "eval")] == [2, 4]
    losses = [[r["loss"] for r in _records(tmp_path / run, "train")] for run in ("cut", "whole")]
    assert losses[0] == losses[1] and len(losses[0]) == 2


# ------------------------------------------------- 2. a NaN gradient under a finite loss
def _nan_gradient_at(step: int):
    """The pretraining objective, but the update `step` (from 1) gets NaN gradients while its loss stays finite
    (what an overflow in the backward pass does)."""
    from albertlm.training.pretrain import PretrainingObjective

    class Objective(PretrainingObjective):
        state = None

        def forward(self, model, batch, denominators):
            loss, stats = super().forward(model, batch, denominators)
            if model.training and self.state.step == step - 1:
                weight = next(model.parameters())
                loss = loss + 0.0 * torch.sqrt(weight.flatten()[0] * 0)     # d sqrt(x)/dx at 0: inf; x 0: NaN
            return loss, stats

    return Objective()


@pytest.mark.parametrize("clip_norm", [1.0, 0.0])
def test_a_nan_gradient_never_saves_nan_weights_as_the_last_good_checkpoint(tmp_path, clip_norm):
    """Step 2's gradient was NaN under a finite loss: the update made every weight NaN, step 2's checkpoint saved
    them, and step 3's NaN loss then named that checkpoint "the last good checkpoint" (resuming from it diverged at
    once). Now the run stops at step 2 (clipping on: its gradient norm is NaN) or refuses to save NaN weights
    (clipping off), and no checkpoint holds them."""
    from albertlm.training import checkpoint as ckpt
    from albertlm.training.loop import TrainingDiverged

    run = tiny_run(max_steps=4, save_every=2)
    run = run.replace(optim=replace(run.optim, clip_norm=clip_norm))
    objective = _nan_gradient_at(2)
    loop = make_loop(run, tmp_path, datasets(), DistInfo(), False, objective=objective)
    objective.state = loop.state
    with pytest.raises(TrainingDiverged) as caught:
        loop.run()
    said = str(caught.value)
    assert ("the gradient norm is nan" if clip_norm else "the weights of step 2 hold NaN") in said, said
    assert "step 2" in said and "no checkpoint was saved yet" in said
    assert ckpt.list_checkpoints(tmp_path) == []


# ------------------------------------------------- 3. a stop on a step its schedule saves
def test_a_stop_asked_for_on_a_save_step_says_saved_once(tmp_path, capsys):
    """SIGTERM during step 2 of a --save-every 2 run (fine-tuning's default saves at every evaluation): the step's
    checkpoint was written by the schedule, then "saved" again by the stop (a no-op write said twice). Now once."""
    _main_thread_only()
    loop = make_loop(tiny_run(max_steps=4, save_every=2, log_every=0), tmp_path, datasets(), DistInfo(), False)
    open_logger(loop)
    loop.on_step = lambda step, metrics: step == 2 and signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    assert loop.run() == "interrupted"
    out = capsys.readouterr().out
    step_2 = tmp_path / "checkpoints" / "step_00000002"
    assert out.count(f"saved {step_2}\n") == 1, out
    assert f"stopped by SIGTERM at step 2: saved {step_2}" in out
