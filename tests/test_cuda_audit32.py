"""Audit 32: the training paths that only run on a GPU, exercised through CPU equivalents (no GPU here).

fp16 loss scaling runs on the CPU with `torch.amp.GradScaler("cpu")` and fp16 autocast, which this torch build has:
the loop's refusal of fp16 on a CPU (`precision.check_precision`) is lifted for these tests only, so the loop's own
scaler code (scale, unscale_ once per step before clipping, step, update, the state in the checkpoint) runs as it
would on a GPU. Host-to-device copies in the step are found by a dispatch mode: on a GPU each tensor made from host
data (`aten.lift_fresh`) and copied over waits for the device's queue; on a CPU it costs nothing, so it is the op
that is looked for, not the time. The GPU's compute capability is monkeypatched where the code only branches on it.
"""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from albertlm.training import loop as loop_module
from albertlm.training import precision, trainer
from albertlm.training.distributed import DistInfo
from albertlm.training.loop import TrainingDiverged
from albertlm.training.pretrain import make_loop
from test_train import datasets
from train_fixtures import tiny_run, weights_of


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture
def fp16_on_cpu(monkeypatch):
    """fp16 allowed on the CPU: the loop then builds its `GradScaler("cpu")` and fp16 autocast as on a GPU."""
    monkeypatch.setattr(precision, "check_precision", lambda *args, **kwargs: None)
    monkeypatch.setattr(trainer, "check_precision", lambda *args, **kwargs: None)


def _fp16_loop(run_dir: Path, overflow_at, *, max_steps: int = 6, resume: bool = False, stop_at=None, save_every=1):
    """A tiny fp16 pretraining loop whose gradients are made infinite at the steps (from 1) in `overflow_at` (a
    hook on one weight's gradient: the whole step's gradient then overflows, as an fp16 backward can). A fresh run
    starts from a loss scale of 4 (growth every 2 clean steps) so that the scale both backs off and grows in a
    few steps. Returns the loop and {step: (loss, scale after the step, lr of the step, grad norm)}."""
    loop = make_loop(tiny_run(max_steps=max_steps, precision="fp16", save_every=save_every, log_every=0), run_dir,
                     datasets(), DistInfo(), resume)
    assert isinstance(loop.scaler, torch.amp.GradScaler)
    if not resume:
        loop.scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    weight = next(loop.raw_model.parameters())
    weight.register_hook(lambda g: g * float("inf") if loop.state.step + 1 in overflow_at else g)
    seen = {}
    real_step = loop.train_step

    def train_step(micro_batches, before_sync=None):
        result = real_step(micro_batches, before_sync)
        seen[loop.state.step + 1] = (result.loss, loop.scaler.get_scale(), result.lr, result.grad_norm)
        return result

    loop.train_step = train_step

    def on_step(step, metrics):
        if step == stop_at:
            raise KeyboardInterrupt

    loop.on_step = on_step
    return loop, seen


# ------------------------------------------------------------------------------------- fp16 loss scaling
def test_fp16_resume_is_exact_with_the_loss_scale_and_its_growth_tracker(tmp_path, fp16_on_cpu):
    """The scaler's state (scale and growth tracker) goes into every checkpoint and back on `--resume`: a run stopped
    at step 3 (the scale backed off twice, at steps 2 and 3) and resumed ends with the uninterrupted run's weights,
    bit for bit, and its scale at every step."""
    whole, seen_whole = _fp16_loop(tmp_path / "whole", {2, 3})
    assert whole.run() == "done"
    first, seen_first = _fp16_loop(tmp_path / "cut", {2, 3}, stop_at=3)
    assert first.run() == "interrupted"
    rest, seen_rest = _fp16_loop(tmp_path / "cut", {2, 3}, resume=True)
    assert rest.state.step == 3 and rest.scaler.get_scale() == seen_whole[3][1] == 1.0
    assert rest.run() == "done"
    assert {**seen_first, **seen_rest} == seen_whole
    assert [seen_whole[s][1] for s in range(1, 7)] == [4.0, 2.0, 1.0, 1.0, 2.0, 2.0]
    assert rest.scaler.state_dict() == whole.scaler.state_dict()
    ours, theirs = weights_of(rest), weights_of(whole)
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_an_fp16_overflow_skips_the_update_counts_the_step_and_moves_the_schedule_on(tmp_path, fp16_on_cpu):
    """What the loop does with a step whose gradients overflow, as google's global step and torch's amp recipe
    (which steps its lr scheduler every iteration) do: the update is skipped (weights and the optimizer's moments
    exactly as before), the step is counted (its batch is used up) and the next step takes the schedule's next
    rate; the infinite gradient norm is the scaler's to handle, not `TrainingDiverged`. Clipping came after
    unscale_ (the norm of a clean step is the true one, not times the scale)."""
    loop, seen = _fp16_loop(tmp_path, {3}, max_steps=4, save_every=0)
    before = {}

    def keep(step, metrics):
        if step == 2:
            before.update(weights=weights_of(loop), moments=[
                {k: v.clone() for k, v in s.items() if isinstance(v, torch.Tensor)}
                for s in loop.optimizer.state.values()])
        if step == 3:
            after = weights_of(loop)
            assert all(torch.equal(after[k], before["weights"][k]) for k in after)
            for was, now in zip(before["moments"], loop.optimizer.state.values()):
                assert all(torch.equal(was[k], now[k]) for k in was)

    loop.on_step = keep
    assert loop.run() == "done" and loop.state.step == 4
    assert seen[3][3] == float("inf") and all(0 < seen[s][3] < 1e3 for s in (1, 2, 4))
    assert [seen[s][2] for s in range(1, 5)] == [loop.plan.lr_at(s) for s in range(4)]
    assert seen[3][1] == seen[2][1] / 2


def test_fp16_steps_that_overflow_at_every_scale_stop_the_run(tmp_path, fp16_on_cpu):
    """Gradients that are infinite or NaN whatever the scale (a NaN made in the backward pass) had every step skipped
    for good, the loss finite and nothing said but a null grad_norm in the records: the run trained nothing for
    as long as it ran. `loop.MAX_OVERFLOWS` skipped steps in a row now stop it with `TrainingDiverged`."""
    count = getattr(loop_module, "MAX_OVERFLOWS", 24)     # (the same run, unstopped, before it existed)
    loop, seen = _fp16_loop(tmp_path, set(range(1, 100)), max_steps=count + 4, save_every=0)
    with pytest.raises(TrainingDiverged, match=rf"fp16 loss scaling skipped {count} steps in a row \(steps 1 to "
                                               rf"{count}\).*infinite or NaN at every loss scale.*--precision bf16"):
        loop.run()
    assert loop.state.step == count - 1 and len(seen) == count - 1   # the last one raised
    # a run whose overflows stop before that goes on (the scale backs off, then grows again)
    ok, _ = _fp16_loop(tmp_path / "ok", set(range(1, count)), max_steps=count + 2, save_every=0)
    assert ok.run() == "done"


# ------------------------------------------------------------------------------- host tensors in the step
class _HostTensors(TorchDispatchMode):
    """Records where (albertlm function:line) each tensor is made from host data while armed. torch's own optimizers
    are left out: on the CPU AdamW runs its foreach path, whose step counters are host tensors; on CUDA the loop
    gives it the fused kernel (`lamb.build_optimizer`), whose counters live on the device."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.made = True, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.armed and func is torch.ops.aten.lift_fresh.default:
            stack = traceback.extract_stack()
            ours = [f for f in stack if "albertlm" in f.filename]
            if not any(f"torch{sep}optim{sep}" in f.filename for f in stack for sep in "/\\"):
                self.made.append(f"{ours[-1].name}:{ours[-1].lineno}" if ours else "?")
        return func(*args, **(kwargs or {}))


def _queued_host_tensors(loop) -> list[str]:
    """The tensors made from host data while each step is queued: from the step's start until it reads the next
    batch (`before_sync`); what comes after the step's one sync is host work."""
    real = loop.train_step
    made = []

    def train_step(micro_batches, before_sync=None):
        with _HostTensors() as mode:
            def disarm():
                mode.armed = False
                if before_sync is not None:
                    before_sync()
            result = real(micro_batches, disarm)
        made.extend(mode.made)
        return result

    loop.train_step = train_step
    loop.save = lambda: None
    loop.run()
    return made


def test_count_tokens_of_a_batch_without_a_mask_is_a_fill_on_its_device():
    """`count_tokens` of a batch without attention_mask made `torch.tensor(n, device=...)`: on a GPU a copy from
    the host that waits for the device's queue, once per micro-batch. Now a fill (`new_full`)."""
    batch = {"input_ids": torch.zeros(3, 5, dtype=torch.long)}
    with _HostTensors() as mode:
        tokens = loop_module.count_tokens(batch)
    assert mode.made == [] and tokens.dtype == torch.float32 and tokens.item() == 15.0
    with_mask = {"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0, 0]] * 2)}
    assert loop_module.count_tokens(with_mask).item() == 4.0


def test_a_pretraining_step_queues_no_tensor_made_on_the_host(tmp_path):
    """Every micro-batch's forward, backward, the all-reduce, clipping and the update are queued without a tensor
    built from host numbers (each a host-to-device copy and a wait on a GPU), so the host runs ahead of the device
    until the step's one read."""
    loop = make_loop(tiny_run(max_steps=2, micro=2, log_every=0), tmp_path, datasets(), DistInfo(), False)
    assert _queued_host_tensors(loop) == []


def test_a_finetuning_step_queues_no_tensor_made_on_the_host(tmp_path):
    from albertlm.tasks.finetune import make_finetune_loop
    from conftest import save_tiny_pretrained
    from train_fixtures import StubTokenizer, finetune_config, synthetic_task

    model_dir = save_tiny_pretrained(tmp_path)
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), finetune_config(max_steps=2, micro=4),
                              tmp_path / "run", DistInfo())
    loop.evaluate_fn = None
    assert sorted(set(_queued_host_tensors(loop))) == []


# ----------------------------------------------------------------------------------- bf16 on older GPUs
def test_bf16_on_a_gpu_before_ampere_is_said_to_run_emulated(monkeypatch, capsys):
    """bf16 on a T4 or V100 (compute capability 7.x) runs emulated, slower than fp16, and nothing said so (the CPU's
    emulation had its line). Now the same one line, naming the GPU's capability and fp16; none from 8.0 on."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    for capability, warned in (((7, 5), True), ((7, 0), True), ((8, 0), False), ((9, 0), False)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        precision.warn_emulated_bf16("bf16", torch.device("cuda", 0))
        precision.warn_emulated_bf16("fp16", torch.device("cuda", 0))     # fp16 is what it advises: nothing said
        err = capsys.readouterr().err
        if warned:
            assert err.count("\n") == 1 and f"cuda:0 has compute capability {capability[0]}.{capability[1]}" in err
            assert "bf16 runs emulated and is slower than fp16 here: use --precision fp16" in err
        else:
            assert err == ""
        assert precision.gpu_has_bf16("cuda:0") is not warned


# ------------------------------------------------------------------------------------------ RNG states
def test_the_rng_capture_starts_no_cuda_in_a_process_that_does_not_use_it(monkeypatch):
    """`capture_rng` (after every step) asked for every GPU's generator state wherever CUDA was available: a CPU run
    on a machine with GPUs (`--dist.device cpu`) started CUDA for it. A process using CUDA still saves them all."""
    from albertlm.training import checkpoint as ckpt

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all",
                        lambda: asked.append(True) or [torch.zeros(16, dtype=torch.uint8)])
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert set(ckpt.capture_rng()) == {"cpu"} and asked == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert set(ckpt.capture_rng()) == {"cpu", "cuda"} and asked == [True]
