"""Fine-tuning audit 21 (a long run on a shared cluster: what survives a kill -9, and what the files say).

With the default `--save-every 0` a fine-tuning saved its only checkpoint at the end, so a kill -9 (the OOM killer, a
preempted node) lost the whole run: it now checkpoints at every dev evaluation (`train.keep_last` bounds the disk).
A kill between save_best's two renames left no best/ (the previous best lay in a copy the next save removed); one
after a new best but before the checkpoint recording it left best/ newer than the resumed run's record (metrics.json
named one step, best/ held another): best/ is now put back to the model the checkpoint records. metrics.json and
train_log.json held bare NaN, which is not JSON: they hold null.

The kills are simulated in-process, at a point the test picks (an exception no code catches, raised from the step
hook or from the rename that swaps best/ in), never by timing."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch

from conftest import save_tiny_pretrained
from train_fixtures import StubTokenizer, finetune_config, synthetic_task


class Killed(BaseException):
    """Stands for kill -9: nothing in the run catches it, so nothing is saved or cleaned up on its way out (the
    lock on --out goes, as the kernel drops a killed process's locks)."""


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny21"))


def _config(max_steps: int, eval_every: int = 2, save_every: int = 0, keep_last: int = 1):
    from dataclasses import replace

    cfg = finetune_config(max_steps=max_steps)
    return cfg.replace(train=replace(cfg.train, eval_every=eval_every, save_every=save_every, keep_last=keep_last))


def _scored(scores):
    """The synthetic task whose evaluations score `scores` in turn (the best model is the test's choice)."""
    spec = synthetic_task()
    values = iter(scores)
    spec.eval_sets[0].score = lambda out: {"accuracy": next(values)}
    return spec


def _run(spec, model, cfg, out, resume=False, hook=None, monkeypatch=None):
    """run_finetune; `hook(loop, step)` is called after each step (it may raise `Killed`)."""
    from albertlm.tasks import finetune

    if hook is not None:
        make = finetune.make_finetune_loop

        def make_with_hook(*args, **kwargs):
            loop = make(*args, **kwargs)
            before = loop.on_step
            loop.on_step = lambda step, metrics: (before(step, metrics), hook(loop, step))
            return loop

        monkeypatch.setattr(finetune, "make_finetune_loop", make_with_hook)
    try:
        return finetune.run_finetune(spec, model, StubTokenizer(), cfg, out, log=lambda *a: None, resume=resume)
    finally:
        if hook is not None:
            monkeypatch.setattr(finetune, "make_finetune_loop", make)


def _kill_at(step_to_kill):
    def hook(loop, step):
        if step == step_to_kill:
            raise Killed
    return hook


def _weights(directory):
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _best_copies(out):
    return sorted(p.name for p in out.iterdir() if p.name.startswith(".tmp-best"))


# ------------------------------------------------------------------------- checkpoints by default
def test_a_default_run_checkpoints_at_every_evaluation_and_resumes_after_a_kill(tiny_model, tmp_path, monkeypatch):
    """--save-every 0 (the default) saved only at the end: killed at step 5 of 6 the run had no checkpoint and
    `--resume` was refused. Now each dev evaluation (steps 2, 4) saves one, one is kept (keep_last 1), and the
    resumed run ends as an uninterrupted one."""
    whole = _run(synthetic_task(), tiny_model, _config(6), tmp_path / "whole")
    out = tmp_path / "killed"
    with pytest.raises(Killed):
        _run(synthetic_task(), tiny_model, _config(6), out, hook=_kill_at(5), monkeypatch=monkeypatch)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000004"]
    resumed = _run(synthetic_task(), tiny_model, _config(6), out, resume=True)
    assert resumed["best"] == whole["best"] and resumed["train_loss_last"] == whole["train_loss_last"]
    assert _same_weights(_weights(out / "best"), _weights(tmp_path / "whole" / "best"))
    # the disk it takes stays bounded: one checkpoint, no copy of an earlier best left behind
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000006"]
    assert _best_copies(out) == [] and _best_copies(tmp_path / "whole") == []


# ------------------------------------------------------------------------------------ best/ after a kill
def test_a_kill_between_the_renames_of_best_loses_no_best_model(tiny_model, tmp_path, monkeypatch):
    """Killed after best/ (step 2) was renamed aside and before the new one (step 4) took its name, the run left no
    best/; the resumed run's first save removed the aside copy, and a resumed run that found nothing better ended
    without any best model. Now the step-2 model the checkpoint records is put back."""
    out = tmp_path / "run"
    cfg = _config(6, save_every=2, keep_last=5)
    real_replace, swaps = os.replace, []

    def replace(src, dst):
        if os.path.basename(dst) == "best":
            swaps.append(src)
            if len(swaps) == 2:
                raise Killed
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        _run(_scored([0.5, 0.75]), tiny_model, cfg, out)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not (out / "best").exists()
    metrics = _run(_scored([0.25, 0.25]), tiny_model, cfg, out, resume=True)
    assert metrics["best"]["step"] == 2
    assert _same_weights(_weights(out / "best"), _weights(out / "checkpoints" / "step_00000002"))
    assert _best_copies(out) == []


def _writing(spec, written: list):
    """`spec` whose dev set writes its logits to dev_predictions.txt (each content also appended to `written`)."""
    def write(out, out_dir):
        written.append(repr(out["logits"].tolist()))
        (out_dir / "dev_predictions.txt").write_text(written[-1])
    spec.eval_sets[0].write = write
    return spec


def test_a_shorter_resume_puts_back_the_best_its_checkpoint_records(tiny_model, tmp_path, monkeypatch):
    """Killed at step 7 after step 6's evaluation replaced best/ (the newest checkpoint, step 4, records step 2 as
    the best), then resumed with --max-steps 5: nothing better came, and metrics.json said best step 2 while best/
    and the dev predictions were the killed run's step-6 model's (of a step the resumed run never trained). best/
    is step 2's model again, and the dev predictions its."""
    out = tmp_path / "run"
    held, written = {}, []

    def hook(loop, step):
        if step == 2:
            held["step 2"] = {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}
        if step == 7:
            raise Killed

    with pytest.raises(Killed):
        _run(_writing(_scored([0.5, 0.25, 0.75]), written), tiny_model, _config(8, save_every=4), out, hook=hook,
             monkeypatch=monkeypatch)
    assert len(written) == 2 and written[0] != written[1]       # steps 2 and 6
    metrics = _run(_writing(_scored([0.25, 0.25]), []), tiny_model, _config(5, save_every=4), out, resume=True)
    assert metrics["best"]["step"] == 2 and metrics["step"] == 5
    assert _same_weights(_weights(out / "best"), held["step 2"])
    assert (out / "dev_predictions.txt").read_text() == written[0]
    assert json.loads((out / "best" / "task.json").read_text())["step"] == 2
    assert _best_copies(out) == []


# --------------------------------------------------------------------------------------------- the files
def _strict_json(path):
    """Parse as JSON readers other than Python's do: a bare NaN / Infinity is an error."""
    def refuse(name):
        raise ValueError(f"{path.name}: {name} is not JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_metrics_json_holds_null_not_nan(tiny_model, tmp_path):
    """A dev metric of NaN (every evaluation) was written as a bare NaN: jq, JSON.parse and most readers refuse
    metrics.json and train_log.json. They hold null now; the run's own return value keeps the number."""
    out = tmp_path / "run"
    metrics = _run(_scored([math.nan] * 3), tiny_model, _config(6), out)
    assert math.isnan(metrics["best"]["dev"]["accuracy"])
    written = _strict_json(out / "metrics.json")
    assert written["best"]["dev"]["accuracy"] is None and written["best"]["step"] == 2
    assert [h["dev"]["accuracy"] for h in _strict_json(out / "train_log.json")["history"]] == [None] * 3
    assert written["step"] == 6
