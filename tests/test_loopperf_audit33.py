"""Audit 33 (loopperf): the host work of a pretraining step around the model.

On a GPU an eager step is bound by the host: every aten op the loop dispatches outside the model is a kernel
launch and Python time. These tests count, on the CPU, the aten ops `Loop.train_step` dispatches itself (not
inside the objective's forward, the backward, or the clip + optimizer update) and its host reads of tensors."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import make_loop
from test_train import datasets
from train_fixtures import tiny_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


class _Counter(TorchDispatchMode):
    """Counts the aten ops dispatched while `self.on` and not inside an excluded region."""

    def __init__(self):
        super().__init__()
        self.on, self.inside, self.ops, self.names = False, 0, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and not self.inside:
            self.ops += 1
            self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def excluded(self):
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1


def _own_ops_per_step(tmp_path: Path, monkeypatch, steps: int = 4, **train) -> tuple[float, list[str]]:
    loop = make_loop(tiny_run(max_steps=steps, **train), tmp_path / "run", datasets(), DistInfo(), False)
    counter = _Counter()

    def excluding(fn):
        def wrapped(*args, **kwargs):
            with counter.excluded():
                return fn(*args, **kwargs)
        return wrapped

    forward, update, step = loop.objective.forward, loop._clip_and_update, loop.train_step
    monkeypatch.setattr(loop.objective, "forward", excluding(forward))
    monkeypatch.setattr(loop, "_clip_and_update", excluding(update))
    monkeypatch.setattr(torch.Tensor, "backward", excluding(torch.Tensor.backward))

    def counted_step(micro_batches, before_sync=None):
        counter.on = True
        try:   # (the next step's batch, read in `before_sync`, is the data loader's work, not the step's)
            return step(micro_batches, before_sync=excluding(before_sync) if before_sync else None)
        finally:
            counter.on = False

    monkeypatch.setattr(loop, "train_step", counted_step)
    monkeypatch.setattr(loop, "save", lambda: None)
    with counter:
        assert loop.run() == "done"
    return counter.ops / steps, counter.names


def test_a_step_without_stand_in_dispatches_no_weighting_ops(tmp_path, monkeypatch):
    """A step on one process with one micro-batch: its own ops are the objective's denominators, the token count,
    the stats' and counts' one tensor and the host copy of its numbers (20 here; 23 before). The stand-in's weight (`* 1.0` on the
    denominators, the loss and each micro-batch's token count) cost three more ops per step, on a GPU three kernel
    launches, for the one step in many that has a stand-in (a multi-process run's short last batch)."""
    per_step, names = _own_ops_per_step(tmp_path, monkeypatch)
    assert per_step <= 20, (per_step, names[: int(per_step)])


def test_accumulation_adds_no_weighting_op_per_micro_batch(tmp_path, monkeypatch):
    """Two micro-batches per step: the token count of each is added as it is, not multiplied by the weight 1
    (the second micro-batch adds 12 ops here, its denominators' and tokens' sums; 14 before)."""
    one, _ = _own_ops_per_step(tmp_path / "a", monkeypatch)
    two, names = _own_ops_per_step(tmp_path / "b", monkeypatch, micro=4)
    assert two - one <= 12, (one, two, names[: int(two)])


def test_a_step_reads_the_device_once(tmp_path, monkeypatch):
    """The step's numbers (stats, tokens, examples, gradient norm) come back in one transfer (`tolist`), after all
    of its work is queued; no `.item()` or other read inside the step."""
    reads = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.Tensor, name, spy)
    loop = make_loop(tiny_run(max_steps=3), tmp_path / "run", datasets(), DistInfo(), False)
    step = loop.train_step
    per_step = []

    def counted_step(*args, **kwargs):
        before = len(reads)
        result = step(*args, **kwargs)
        per_step.append(reads[before:])
        return result

    monkeypatch.setattr(loop, "train_step", counted_step)
    monkeypatch.setattr(loop, "save", lambda: None)
    assert loop.run() == "done"
    # the one transfer, then the loss summarised from the host copy (`_check_finite`: a CPU tensor)
    assert all(r[0] == "tolist" and r.count("item") == 0 for r in per_step), per_step
