"""The training loop on a tiny ALBERT: loss falls, accumulation is exact, resume is exact (also after a
Ctrl-C, a fault inside a save and a SIGKILL during a save), NaN stops cleanly, logs and plots are written."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from albertlm.data import loader
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.loop import TrainingDiverged
from albertlm.training.pretrain import Datasets, make_loop, resolve_run
from albertlm.training.schedule import lr_at
from train_fixtures import SyntheticPretraining, tiny_run

TESTS = Path(__file__).resolve().parent


def datasets(n=64, sop=True):
    ds = SyntheticPretraining(n=n, sop=sop)
    held_out = SyntheticPretraining(n=16, seed=1, sop=sop)
    return Datasets(train=ds, eval=held_out, collate=loader.collate, meta=ds.meta)


def train(run, run_dir, resume=False, stop_at=None, data=None, logger=None):
    """Runs the loop; returns (status, {step: metrics}, model)."""
    loop = make_loop(run, Path(run_dir), data or datasets(), DistInfo(), resume, logger=logger)
    seen = {}

    def on_step(step, metrics):
        seen[step] = metrics
        if stop_at is not None and step == stop_at:
            raise KeyboardInterrupt

    loop.on_step = on_step
    return loop.run(), seen, loop.model


def test_schedule_warmup_then_linear_decay_to_zero():
    assert lr_at(0, 1.0, 4, 100) == pytest.approx(0.25)
    assert lr_at(3, 1.0, 4, 100) == pytest.approx(1.0)
    assert lr_at(50, 1.0, 4, 100) == pytest.approx(0.5)
    assert lr_at(100, 1.0, 4, 100) == 0.0
    assert lr_at(75, 1.0, 0, 100, power=2.0) == pytest.approx(0.0625)


def test_loss_falls(tmp_path):
    run = tiny_run(max_steps=25)
    run.optim.lr = 0.05
    _, seen, _ = train(run, tmp_path)
    first, last = seen[1]["loss"], sum(seen[s]["loss"] for s in (23, 24, 25)) / 3
    assert last < first - 1.0, (first, last)
    assert 0 <= seen[25]["mlm_acc"] <= 1 and "sop_acc" in seen[25]


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    _, big, m1 = train(tiny_run(max_steps=3, batch_size=8), tmp_path / "a")
    _, acc, m2 = train(tiny_run(max_steps=3, batch_size=8, micro=2), tmp_path / "b")
    for step in big:
        assert acc[step]["loss"] == pytest.approx(big[step]["loss"], abs=1e-5)
    for (name, p), q in zip(m1.named_parameters(), m2.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=name)


def test_mlm_only_data_has_no_sentence_loss(tmp_path):
    _, seen, _ = train(tiny_run(max_steps=2), tmp_path, data=datasets(sop=False))
    assert "sop_acc" not in seen[2] and seen[2]["loss"] == pytest.approx(seen[2]["mlm_loss"])


def _same_weights(a, b):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0, msg=name)


def test_ctrl_c_saves_and_resume_is_exact(tmp_path):
    """N steps, Ctrl-C (checkpoint), resume to 2N == 2N uninterrupted; with dropout so the RNG matters."""
    N = 4
    _, full, full_model = train(tiny_run(max_steps=2 * N, dropout=0.1), tmp_path / "full")
    status, first, _ = train(tiny_run(max_steps=2 * N, dropout=0.1), tmp_path / "cut", stop_at=N)
    assert status == "interrupted" and ckpt.latest_checkpoint(tmp_path / "cut").name == f"step_{N:08d}"
    status, second, resumed_model = train(tiny_run(max_steps=2 * N, dropout=0.1), tmp_path / "cut", resume=True)
    assert status == "done" and sorted(second) == list(range(N + 1, 2 * N + 1))
    for step in range(1, 2 * N + 1):
        got = (first | second)[step]
        assert got["loss"] == pytest.approx(full[step]["loss"], abs=1e-6), step
    _same_weights(full_model, resumed_model)


def test_fault_inside_a_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    run = tiny_run(max_steps=6, save_every=2)
    _, full, full_model = train(tiny_run(max_steps=6, save_every=2), tmp_path / "full")
    real_write, calls = ckpt._write_trainer_state, []

    def failing_write(directory, state):
        calls.append(state.step)
        if state.step == 4:
            raise OSError("disk full (injected)")
        real_write(directory, state)

    monkeypatch.setattr(ckpt, "_write_trainer_state", failing_write)
    with pytest.raises(UserError, match="step_00000004: cannot write the checkpoint.*injected.*newest complete "
                                         "checkpoint is .*step_00000002"):
        train(run, tmp_path / "cut")
    monkeypatch.setattr(ckpt, "_write_trainer_state", real_write)
    root = tmp_path / "cut" / "checkpoints"
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())   # the half-written one is removed
    assert ckpt.latest_checkpoint(tmp_path / "cut").name == "step_00000002"
    _, resumed, model = train(tiny_run(max_steps=6, save_every=2), tmp_path / "cut", resume=True)
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())
    for step in (3, 4, 5, 6):
        assert resumed[step]["loss"] == pytest.approx(full[step]["loss"], abs=1e-6)
    _same_weights(full_model, model)


KILL_SCRIPT = """
import sys, time
from pathlib import Path
import torch
from albertlm.data import loader
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import Datasets, make_loop
from train_fixtures import SyntheticPretraining, tiny_run

real = ckpt._write_trainer_state
def slow_write(directory, state):   # widen the window in which a kill lands mid-save
    if state.step >= 3:
        time.sleep(30)
    real(directory, state)
ckpt._write_trainer_state = slow_write
ds = SyntheticPretraining(n=64)
data = Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta)
make_loop(tiny_run(max_steps=6, save_every=1, dropout=0.1), Path(sys.argv[1]), data, DistInfo(), False).run()
"""


def test_sigkill_during_a_save_leaves_a_usable_checkpoint(tmp_path):
    run_dir = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(run_dir)], env=env)
    tmp_dir = run_dir / "checkpoints" / f".tmp-step_00000003-{proc.pid}"
    deadline = time.time() + 120
    while not (tmp_dir / "model.safetensors").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert tmp_dir.exists(), "the kill did not land inside the save"
    assert ckpt.latest_checkpoint(run_dir).name == "step_00000002"
    _, full, full_model = train(tiny_run(max_steps=6, dropout=0.1), tmp_path / "full")
    _, resumed, model = train(tiny_run(max_steps=6, save_every=1, dropout=0.1), run_dir, resume=True)
    assert sorted(resumed) == [3, 4, 5, 6]
    for step in resumed:
        assert resumed[step]["loss"] == pytest.approx(full[step]["loss"], abs=1e-6)
    _same_weights(full_model, model)


def test_nan_loss_stops_naming_the_step(tmp_path):
    run = tiny_run(max_steps=6, save_every=2)
    loop = make_loop(run, tmp_path, datasets(), DistInfo(), False)

    def poison(step, metrics):   # after step 3 (not saved: no checkpoint holds NaN weights)
        if step == 3:
            with torch.no_grad():
                next(loop.model.parameters()).fill_(float("nan"))

    loop.on_step = poison
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 4.*step_00000002"):
        loop.run()
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000002"
    state = ckpt.load_train_state(ckpt.latest_checkpoint(tmp_path))
    assert state.step == 2


def test_keep_last_and_logs_and_plot(tmp_path):
    from albertlm.training.metrics import MetricsLogger, read_metrics
    from albertlm.training.plots import plot_run

    run = tiny_run(max_steps=5, save_every=1, keep_last=2, eval_every=2)
    logger = MetricsLogger(tmp_path, run.train.max_steps, tensorboard=True, progress=False)
    train(run, tmp_path, logger=logger)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000004", "step_00000005"]
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records if r["split"] == "eval"] == [2, 4, 5]
    assert {"loss", "mlm_acc", "sop_acc", "lr", "tokens_per_s", "data_wait_frac"} <= set(records[-1])
    assert any((tmp_path / "tensorboard").iterdir())
    png = plot_run(tmp_path)
    assert png.stat().st_size > 10_000
    saved = json.loads((ckpt.latest_checkpoint(tmp_path) / "config.json").read_text())
    assert saved["hidden_size"] == 32


def test_fp16_on_cpu_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="fp16 needs a CUDA"):
        make_loop(tiny_run(precision="fp16"), tmp_path, datasets(), DistInfo(), False)


def test_bf16_autocast_trains(tmp_path):
    _, seen, model = train(tiny_run(max_steps=3, precision="bf16", activation_checkpointing=True), tmp_path)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float32 and seen[3]["loss"] < 10


def test_init_from_a_saved_model(tmp_path):
    from albertlm.model.albert import AlbertForPreTraining

    torch.manual_seed(3)
    source = AlbertForPreTraining(tiny_run().model)
    source.save_pretrained(tmp_path / "init")
    run = tiny_run(max_steps=1)
    run.init_from = str(tmp_path / "init")
    run.model = run.model.replace(hidden_size=64)          # ignored: the checkpoint's config wins
    run = resolve_run(run, tmp_path / "run")                # a new config; the given one is not changed
    loop = make_loop(run, tmp_path / "run", datasets(), DistInfo(), False)
    assert run.model.hidden_size == 32
    for (name, p), q in zip(loop.model.named_parameters(), source.parameters()):
        torch.testing.assert_close(p, q, msg=name)
