"""Audit 27: the pretraining loop as a user pretraining on their own corpus sees it (`albertlm data build` +
`albertlm pretrain`), against google-research's optimization.py / lamb_optimizer.py / run_pretraining.py. Each
test failed before its fix unless its docstring says it pins what was already right."""
from __future__ import annotations

import errno
import io
import sys

import pytest

from albertlm.training import checkpoint as ckpt
from albertlm.training.loop import UNLOGGED
from test_lead_audit24 import _Killed
from test_train_audit16 import _loop, _records


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def test_a_resumed_runs_summary_counts_its_own_steps_not_the_checkpoints_window(tmp_path):
    """--save-every 3 --log-every 2, killed at step 5 (kill -9, an out-of-memory, a node lost), resumed from step 3,
    whose checkpoint keeps step 3's window for the next record (`loop.UNLOGGED`). The resumed run's summary said
    "trained steps 4-6: 48 examples" for 3 steps of 8 (the checkpoint kept the first invocation's running total of
    examples, added to this one's), counted step 3's tokens, and its training time held the first invocation's
    window seconds (train_s above wall_s). Now the summary is the invocation's own; the step-4 record still covers
    steps 3-4, time included, as the run never stopped."""
    settings = dict(max_steps=6, save_every=3, log_every=2)
    loop = _loop(tmp_path, **settings)

    def killed_at_step_5(step, metrics):
        if step == 5:
            raise _Killed

    loop.on_step = killed_at_step_5
    with pytest.raises(_Killed):
        loop.run()
    saved = ckpt.step_dir(tmp_path, 3)
    state = ckpt.load_train_state(saved)
    assert state.extra[UNLOGGED]["steps"] == 1
    state.extra[UNLOGGED]["seconds"] += 1000.0      # the first invocation's window took long (a slow first step)
    ckpt.rewrite_train_state(saved, state)

    resumed = _loop(tmp_path, resume=True, **settings)
    assert resumed.run() == "done"
    records = _records(tmp_path)
    summary = records[-1]
    assert (summary["split"], summary["first_step"], summary["step"], summary["steps_trained"]) == \
        ("summary", 4, 6, 3)
    assert summary["examples_trained"] == 3 * 8
    assert summary["tokens_trained"] == pytest.approx(resumed.state.extra["tokens"] - state.extra["tokens"])
    assert 0 < summary["train_s"] <= summary["wall_s"] < 1000
    step_4 = [r for r in records if r["split"] == "train" and r["step"] == 4]
    assert len(step_4) == 1 and step_4[0]["window_s"] >= 1000      # the record's window: steps 3-4


class _GoneConsole:
    """stdout after its reader left (`albertlm pretrain ... | tee log` in an ssh session that closed: tee ended with
    it) or its terminal hung up: every write fails."""

    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no descriptor")


def test_a_console_that_went_away_does_not_stop_the_run_or_lose_its_steps(tmp_path, monkeypatch):
    """The session's SIGHUP asks the run to save and stop, but the first line printed after it (the record of the
    steps since the last one) raised BrokenPipeError before the checkpoint was written, and the CLI took it for
    `| head` and exited 0: the steps since the last save were lost, with a success status. A console gone before the
    run started (the config's print) ended it at once, exit 0, nothing trained. Now the console costs only its lines:
    here a stop asked for after step 2 (KeyboardInterrupt between steps, as the handler's stop) saves step 2 and
    exits 130, every record in metrics.jsonl."""
    from albertlm.cli.main import main
    from albertlm.training import loop as loop_module
    from test_train_audit17b import TINY
    from train_fixtures import alice_sop_data

    data = alice_sop_data(tmp_path, lines=60)
    after_step = loop_module.Loop.after_step

    def stop_after_step_2(self, window):
        after_step(self, window)
        if self.state.step == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop_module.Loop, "after_step", stop_after_step_2)
    monkeypatch.setattr(sys, "stdout", _GoneConsole())
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data), "--out", str(out), *TINY, "--max-steps", "6",
                 "--log-every", "5", "--no-progress"]) == 130
    assert ckpt.latest_checkpoint(out) == ckpt.step_dir(out, 2)
    assert [(r["split"], r["step"]) for r in _records(out)] == [("train", 2), ("summary", 2)]
