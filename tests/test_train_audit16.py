"""Audit 16 of long `albertlm pretrain` runs: TensorBoard after a resume, a second Ctrl-C between the update and
the step's count, the training records of a run stopped by its time budget or a signal, and a full disk while
logging. Each test failed before its fix."""
from __future__ import annotations

import errno
import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.metrics import drop_records_after
from albertlm.training.pretrain import make_loop
from albertlm.training.trainer import open_logger
from test_train import datasets
from train_fixtures import tiny_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _loop(run_dir: Path, resume: bool = False, logged: bool = True, **train):
    loop = make_loop(tiny_run(**train), run_dir, datasets(), DistInfo(), resume)
    if logged:
        open_logger(loop)        # metrics.jsonl (+ TensorBoard when asked), as `pretrain()` does
    return loop


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------- 1. TensorBoard across a resume
def test_tensorboard_keeps_the_records_of_the_step_a_run_resumes_from(tmp_path):
    """A run resumed from its step-2 checkpoint (a kill after step 4, before its save) must show step 2's
    evaluation in TensorBoard, as metrics.jsonl does. Before: `purge_step=2` hid every event of step >= 2,
    so with --save-every = --eval-every (both 1000 by default) every resume lost the evaluation it resumed at."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    settings = dict(max_steps=4, save_every=2, eval_every=2, log_every=2, tensorboard=True)
    assert _loop(tmp_path, **settings).run() == "done"
    shutil.rmtree(ckpt.step_dir(tmp_path, 4))                  # killed after step 4, before its checkpoint
    # TensorBoard reads event files in name order: time in seconds, host, pid, then a per-process counter that
    # sorts "10" before "9"; a resume within the same second of the same process could be read first
    time.sleep(1.05)
    assert _loop(tmp_path, resume=True, **settings).run() == "done"
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/loss")] == [2, 4]
    assert [e.step for e in events.Scalars("train/loss")] == [2, 4]
    assert [(r["step"], r["split"]) for r in _records(tmp_path)] == [(2, "train"), (2, "eval"), (4, "train"),
                                                                   (4, "eval"), (4, "summary")]


# ----------------------------------------------- 2. a second Ctrl-C after the update, before the count
def test_a_second_ctrl_c_after_the_update_never_saves_weights_ahead_of_their_step(tmp_path, capsys):
    """The loop reads the next batch (and, on a GPU, waits for the step's work) after the optimizer's update and
    before it counts the step. A KeyboardInterrupt there (a second Ctrl-C) saved the updated weights as the
    checkpoint of the step before: `--resume` then did that update twice. Now that step is not saved."""
    reference = _loop(tmp_path / "ref", logged=False, max_steps=3, save_every=1, log_every=0)
    assert reference.run() == "done"
    loop = _loop(tmp_path / "run", logged=False, max_steps=3, save_every=0, log_every=0)
    real_steps, reads = loop.data.steps, []

    def steps(start):
        for batches in real_steps(start):
            reads.append(start)
            if len(reads) == 3:     # read 1: step 1's batch; 2: fetched during step 1; 3: during step 2
                raise KeyboardInterrupt
            yield batches

    loop.data.steps = steps
    assert loop.run() == "interrupted"
    saved = ckpt.list_checkpoints(tmp_path / "run")
    for path in saved:            # whatever was saved must be what the uninterrupted run had at that step
        step = ckpt.load_train_state(path).step
        weights = load_file(str(path / "model.safetensors"))
        expected = load_file(str(ckpt.step_dir(tmp_path / "ref", step) / "model.safetensors"))
        assert all(torch.equal(weights[k], expected[k]) for k in expected), f"{path.name} holds other weights"
    assert not saved
    assert "interrupted during step 2: not saved" in capsys.readouterr().out


# ------------------------------------------------ 3. the training records of a run stopped early
@pytest.mark.parametrize("how", ["budget", "ctrl-c"])
def test_a_run_stopped_early_logs_the_steps_since_its_last_training_record(tmp_path, capsys, how):
    """--log-every 5 and a stop at step 2 (the time budget, or a Ctrl-C raised between steps): steps 1-2 were in
    no record (the resumed run starts a new window), and a budget stop did not say how to go on."""
    settings = dict(max_steps=6, log_every=5)
    if how == "budget":
        settings["max_minutes"] = 1e-9                     # used up after the first step
    loop = _loop(tmp_path, **settings)
    if how == "ctrl-c":
        def on_step(step, metrics):
            if step == 2:
                raise KeyboardInterrupt
        loop.on_step = on_step
    stopped = loop.run()
    assert stopped == ("budget" if how == "budget" else "interrupted")
    at = loop.state.step
    train = [r for r in _records(tmp_path) if r["split"] == "train"]
    assert [r["step"] for r in train] == [at]
    assert train[0]["tokens"] == pytest.approx(loop.state.extra["tokens"])
    if how == "budget":
        assert "`--resume` goes on from there" in capsys.readouterr().out
    resumed = _loop(tmp_path, resume=True, max_steps=6, log_every=5)
    assert resumed.run() == "done"
    tokens = [r["tokens"] for r in _records(tmp_path) if r["split"] == "train"]
    assert [r["step"] for r in _records(tmp_path) if r["split"] == "train"] == [at, 5, 6]
    assert tokens == sorted(tokens)


# ------------------------------------------------------------------- 4. a full disk while logging
class _FullDisk:
    """metrics.jsonl on a full disk: the write fails, and so does the flush at close (the record is still buffered)."""

    def __init__(self, f):
        self.f = f

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    @property
    def closed(self):
        return self.f.closed

    def close(self):
        self.f.close()
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_logging_is_one_line_naming_the_file_and_the_checkpoint(tmp_path):
    """Before: `[Errno 28] No space left on device`, naming neither the file nor what to resume from."""
    loop = _loop(tmp_path, max_steps=4, save_every=1, log_every=2)
    real = loop.logger.jsonl
    loop.logger.jsonl = _FullDisk(real)
    with pytest.raises(UserError) as caught:
        loop.run()
    message = str(caught.value)
    assert "metrics.jsonl" in message and "step 2" in message and "No space left" in message
    assert str(ckpt.step_dir(tmp_path, 1)) in message and "--resume" in message


def test_a_full_disk_while_dropping_a_killed_runs_records_keeps_the_file(tmp_path, monkeypatch):
    """Before: an OSError without the file's name, and a half-written `metrics.jsonl.tmp` left beside it."""
    path = tmp_path / "metrics.jsonl"
    text = "".join(json.dumps({"step": s, "split": "train"}) + "\n" for s in (1, 2, 3))
    path.write_text(text)
    real_write = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real_write(self, data[:10], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(UserError, match="metrics.jsonl.*No space left"):
        drop_records_after(path, 1)
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
