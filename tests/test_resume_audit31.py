"""Audit 31: exact resume of `albertlm pretrain` after a crash, as a user whose multi-day run is killed (SIGKILL, OOM,
node loss) at arbitrary moments. By hand: real `albertlm pretrain` processes on Alice SOP data killed with SIGKILL at
random moments (start-up, mid-step, during an evaluation or a checkpoint's write) and relaunched with
`--resume-or-start` until done, with DataLoader workers, bf16 + activation checkpointing + dynamic masking: every run
ended with the uninterrupted run's records (loss, lr, grad_norm, every step once), checkpoints, weights and optimizer
state, bit for bit. What failed is here. Each test failed before its fix unless its docstring says it pins what was
already right."""
from __future__ import annotations

import os
import signal

import pytest

from albertlm.training import checkpoint as ckpt
from albertlm.training.loop import UNLOGGED
from test_train_audit16 import _loop, _records


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _train_windows(run) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in _records(run) if r["split"] == "train"]


@pytest.mark.parametrize("stop_at", [6, 5])
def test_a_stop_at_a_save_step_inside_a_log_window_does_not_log_its_steps_twice(tmp_path, stop_at):
    """--save-every 3 with --log-every 4, stopped by SIGTERM at step 6: step 6's scheduled checkpoint kept the window
    of steps 5-6 (`loop.UNLOGGED`, for a kill -9 after it), then the stop logged that window as a record at step 6
    (`_log_unlogged`), and the resumed run went on with the window the checkpoint kept: its record at 8 covered steps
    5-8, so steps 5 and 6 were in two records. Now the resumed run leaves a window whose step has its record, and
    goes on as after a stop at step 5 (no checkpoint there): its record at 8 covers 6-8, resp. 7-8, once each."""
    settings = dict(max_steps=8, save_every=3, log_every=4)
    run = tmp_path / "run"
    loop = _loop(run, **settings)
    loop.on_step = lambda step, metrics: step == stop_at and os.kill(os.getpid(), signal.SIGTERM)
    assert loop.run() == "interrupted"
    assert UNLOGGED in ckpt.load_train_state(ckpt.step_dir(run, 6)).extra if stop_at == 6 else True
    resumed = _loop(run, resume=True, **settings)
    steps = []
    resumed.on_step = lambda step, metrics: steps.append(step)
    assert resumed.run() == "done"
    assert [step for step, _ in _train_windows(run)] == [4, stop_at, 8]

    # the record at 8 is that of steps `stop_at`+1 to 8 alone: an uninterrupted run logging every `stop_at` steps has
    # that window last, value for value
    whole = tmp_path / "whole"
    assert _loop(whole, **{**settings, "log_every": stop_at}).run() == "done"
    assert [step for step, _ in _train_windows(whole)] == [stop_at, 8]
    assert _train_windows(whole)[-1] == _train_windows(run)[-1]
    assert steps == list(range(stop_at + 1, 9))


def test_a_kill_while_a_redone_evaluation_is_recorded_does_not_log_it_twice(tmp_path, monkeypatch):
    """Two signals during the evaluation of step 2 save it as not evaluated; the `--resume` evaluates it first, logs
    it and rewrites the checkpoint's state to say so (`_record_evaluated`: the optimizer state again, seconds for a
    big model). A kill -9 during that rewrite left the evaluation's record, which the next resume keeps (it is of the
    step resumed at), and that resume evaluated and logged the step again: two eval records of step 2 in
    metrics.jsonl (and TensorBoard). Now the evaluation is done again without a second record."""
    import threading

    from test_lead_audit24 import _Killed
    from test_train_audit22 import _run_with_evaluations

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    assert _run_with_evaluations(tmp_path, False, stop_in_evaluation=True) == ("interrupted", 1)

    def killed(directory, state):
        raise _Killed
    with monkeypatch.context() as patched:
        patched.setattr(ckpt, "rewrite_train_state", killed)
        with pytest.raises(_Killed):
            _run_with_evaluations(tmp_path, True)
    assert _run_with_evaluations(tmp_path, True) == ("done", 1)      # evaluated again, as the checkpoint says
    assert _run_with_evaluations(tmp_path, True) == ("done", 0)      # and recorded as done now
    evaluations = [r["step"] for r in _records(tmp_path) if r["split"] == "eval"]
    assert evaluations == [2]


def test_a_kill_while_an_old_checkpoint_is_pruned_leaves_no_partial_checkpoint(tmp_path, monkeypatch):
    """--train.keep_last 2, killed (kill -9: found by real kills of `albertlm pretrain`) while step 3's save removed
    step 1: `shutil.rmtree` had deleted some of its files, and the `step_00000001` left (empty, here) was taken for a
    checkpoint for good: the finished run kept three, and a damaged newest checkpoint's advice could name the
    partial one as the one to go on from. Now a pruned checkpoint is renamed out of the `step_*` names first; the
    resume removes what a kill leaves of it."""
    import shutil

    from test_lead_audit24 import _Killed

    settings = dict(max_steps=4, save_every=1, log_every=1, keep_last=2)
    real = shutil.rmtree

    def killed_midway(path, *args, **kwargs):
        files = sorted(p.path for p in os.scandir(path) if p.is_file()) if os.path.isdir(path) else []
        if "step_00000001" in os.path.basename(path) and files:   # the pruned checkpoint (not a save's own)
            os.unlink(files[0])                # one file gone, then the kill
            raise _Killed
        real(path, *args, **kwargs)

    loop = _loop(tmp_path, **settings)
    with monkeypatch.context() as patched:
        patched.setattr(ckpt.shutil, "rmtree", killed_midway)
        with pytest.raises(_Killed):
            loop.run()
    loop.logger.close()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000002", "step_00000003"]
    assert ckpt.latest_checkpoint(tmp_path) == ckpt.step_dir(tmp_path, 3)
    assert _loop(tmp_path, resume=True, **settings).run() == "done"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000003", "step_00000004"]
