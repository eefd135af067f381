"""The training step reads from the device once, at its end: forward, backward, clipping and the optimizer's
update are all queued first, then the next batch is read on the host (while a GPU would still be working),
then the step's numbers come back in one transfer. A read between backward and the update (the loss for the
NaN check, the gradient norm as a float) left the GPU idle while the host queued the rest. On the CPU there
is nothing asynchronous, so the order of events is what is checked: every host read of a tensor is counted."""
from __future__ import annotations

import pytest
import torch

from albertlm.training.distributed import DistInfo
from albertlm.training.loop import TrainingDiverged
from albertlm.training.pretrain import make_loop
from test_train import datasets
from train_fixtures import tiny_run


def test_host_reads_come_after_the_update_and_the_next_batch(tmp_path, monkeypatch):
    """Within each step: no host read of a tensor before the optimizer's update is queued; the next step's
    batch is read (on the host) between the update and the first read; after the last step, no batch is read."""
    loop = make_loop(tiny_run(max_steps=3, log_every=0), tmp_path, datasets(), DistInfo(), False)
    events = []
    for name in ("tolist", "item", "__float__", "__bool__"):
        real = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _real=real: (events.append("read"), _real(self, *a))[1])
    real_update = loop.optimizer.step
    monkeypatch.setattr(loop.optimizer, "step", lambda *a, **k: (events.append("update"), real_update(*a, **k))[1])
    real_steps = loop.data.steps

    def steps(start):
        for batches in real_steps(start):
            events.append("fetch")
            yield batches

    monkeypatch.setattr(loop.data, "steps", steps)
    real_train_step = loop.train_step

    def train_step(micro_batches, before_sync=None):
        events.append("begin")
        result = real_train_step(micro_batches, before_sync)
        events.append("end")
        return result

    loop.train_step = train_step
    loop.save = lambda: None
    loop.run()
    text = "|".join(events)
    inside = [chunk.split("|end")[0].strip("|").split("|") for chunk in text.split("begin")[1:]]
    assert len(inside) == 3
    for i, step in enumerate(inside):
        update = step.index("update")
        assert "read" not in step[:update], (i, step)
        rest = step[update + 1:]
        if i < 2:
            assert rest[0] == "fetch" and "read" in rest and "fetch" not in rest[1:], (i, step)
        else:
            assert "fetch" not in rest and "read" in rest, (i, step)


def test_a_nan_loss_still_stops_the_run_and_saves_nothing_of_that_step(tmp_path):
    run = tiny_run(max_steps=4, save_every=2)
    loop = make_loop(run, tmp_path, datasets(), DistInfo(), False)

    def poison(step, metrics):   # after step 3 (not saved: no checkpoint holds NaN weights)
        if step == 3:
            with torch.no_grad():
                next(loop.model.parameters()).fill_(float("nan"))

    loop.on_step = poison
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 4 .*that step is not saved.*step_00000002"):
        loop.run()
    assert sorted(p.name for p in tmp_path.glob("checkpoints/step_*")) == ["step_00000002"]


def test_dropout_seeding_draws_as_torch_manual_seed_without_calling_it(tmp_path, monkeypatch):
    """Each micro-batch's dropout seed went through torch.manual_seed, which also queues a lazy seed for every
    accelerator type not in use, each with a formatted stack (~1.7 ms per call here, ~7% of a tiny model's
    step). `seed_generators` seeds the generators dropout draws from, the same way."""
    from albertlm.training.trainer import seed_generators

    seed_generators(1234)
    ours = torch.rand(5)
    torch.manual_seed(1234)
    assert torch.equal(ours, torch.rand(5))

    def refuse(*a, **k):
        raise AssertionError("torch.manual_seed called in the training step")

    loop = make_loop(tiny_run(max_steps=2, dropout=0.1), tmp_path, datasets(), DistInfo(), False)
    monkeypatch.setattr(torch, "manual_seed", refuse)
    loop.save = lambda: None
    loop.run()


def test_a_run_that_saved_no_checkpoint_is_named_so(tmp_path):
    """A run that stopped before its first checkpoint left only its logs: the refusal says so, and does not
    offer --resume as "continue" (there is nothing to continue; it starts again from step 0)."""
    from albertlm.errors import UserError
    from albertlm.training.checkpoint import check_run_dir

    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(UserError, match=r"already holds a run that saved no checkpoint \(metrics.jsonl\).*--overwrite"
                                        r".*--resume to start again from step 0"):
        check_run_dir(tmp_path, resume=False)
    assert check_run_dir(tmp_path, resume=False, overwrite=True) == [tmp_path / "metrics.jsonl"]
