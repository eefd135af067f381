"""Demo audit 28 (a new user's `make install` + `make demo` on a fresh clone of a busy shared 2-core machine): the
probe that times the demo's steps on torch's threads only, a stale summary.json left beside a stopped second demo,
and pretraining's `--resume` hint in the demo. No training: the probe's loop and the demo's stages are stand-ins;
seconds, CPU-only."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from albertlm import demo
from test_readme_audit17 import _Clock
from test_readme_audit19 import EVAL_AT_7, _run_demo
from test_readme_audit21 import _corpus_stand_in


@pytest.fixture
def two_threads():
    """torch on two threads (the 2-core machine's default), the caller's count put back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def _probe(monkeypatch, tmp_path, seconds: dict[int, float], steps: int = 14, status: str = "done"):
    """`demo.fit_steps` on a stand-in loop whose steps take `seconds[threads]` for the threads torch runs on when
    the step starts (the first step 5 s: a warm-up). The loop runs `steps` steps and returns `status`."""
    from albertlm.training import pretrain

    clock = _Clock()

    class Loop:
        on_step = None
        save = None

        def run(self) -> str:
            for step in range(1, steps + 1):
                clock.now += 5.0 if step == 1 else seconds[1 if torch.get_num_threads() == 1 else 2]
                self.on_step(step, {})
            return status

    monkeypatch.setattr(pretrain, "make_loop", lambda *a, **k: Loop())
    monkeypatch.setattr(pretrain, "open_datasets", lambda run: None)
    monkeypatch.setattr(demo, "time", clock)
    run = demo.run_config(demo.FULL, 2000, tmp_path / "train", tmp_path / "heldout", demo.FULL.max_steps)
    return demo.fit_steps(run, demo.FULL, tmp_path / "probe")


# ------------------------------------------------------------------------------------------------ threads
def test_probe_trains_on_one_thread_where_two_wait_for_each_other(monkeypatch, tmp_path, two_threads):
    """`make demo` on the busy shared 2-core machine (load 8-10): "3.01 s/step here, so 149 steps of 32 sequences
    fit 7.5 min", and 149 steps ended at the unigram baseline (held-out MLM 4.5% against 4.4%). The same steps took
    1.2-1.6 s on torch's two threads and 0.20-0.25 s on one (the threads wait for each other when the cores are
    taken). The probe now times half its steps on one thread and trains on the faster."""
    steps, seconds = _probe(monkeypatch, tmp_path, {2: 1.5, 1: 0.25})
    assert seconds == pytest.approx(0.25 * 1.1)
    assert steps == demo.steps_for(demo.FULL, demo.FULL.train_minutes, 0.25 * 1.1)
    assert torch.get_num_threads() == 1


def test_probe_keeps_torchs_threads_where_they_are_faster(monkeypatch, tmp_path, two_threads):
    steps, seconds = _probe(monkeypatch, tmp_path, {2: 0.07, 1: 0.1})
    assert seconds == pytest.approx(0.07 * 1.1) and torch.get_num_threads() == 2


def test_probe_stopped_by_ctrl_c_puts_torchs_threads_back(monkeypatch, tmp_path, two_threads):
    """Ctrl-C in the probe's one-thread half: the demo ends (KeyboardInterrupt), torch's threads are as they were."""
    with pytest.raises(KeyboardInterrupt):
        _probe(monkeypatch, tmp_path, {2: 1.5, 1: 0.25}, steps=9, status="interrupted")
    assert torch.get_num_threads() == 2


def test_demo_says_its_threads_and_puts_a_callers_back(monkeypatch, tmp_path, capsys, two_threads):
    """Line 4 names the threads pretraining runs on (one, where the probe found it faster than torch's default),
    and `demo.main` called in-process (the tests, a notebook) leaves torch's thread count as it found it."""
    fit_steps_for = demo.steps_for

    def probe_chose_one_thread(*args):        # the stand-in probe leaves one thread set, as `fit_steps` does
        torch.set_num_threads(1)
        return fit_steps_for(*args)

    monkeypatch.setattr(demo, "steps_for", probe_chose_one_thread)
    _, printed, _ = _run_demo(monkeypatch, tmp_path, capsys, 0.25, [EVAL_AT_7])
    line = next(line for line in printed.splitlines() if "4/6 pretraining" in line)
    assert "(adamw, lr 0.002, 1 thread: faster here than 2; stopped at" in line, line
    assert torch.get_num_threads() == 2


# ------------------------------------------------------------------------------------------- a second demo
def test_a_stopped_second_demo_leaves_no_summary_of_the_first(monkeypatch, tmp_path, capsys):
    """A second `make demo` stopped by Ctrl-C (or an error) before its end left the first one's summary.json beside
    its own half-made files: a new tokenizer and data, no run/ once pretraining had begun, and a summary naming a
    checkpoint that was gone and numbers no model there had."""
    out = tmp_path / "demo_run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"steps": 149, "mlm_accuracy": 0.045}))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "write_corpus", _corpus_stand_in)
    monkeypatch.setattr(demo, "train_tokenizer", interrupted)
    assert demo.main(["--out", str(out)]) == 130
    assert not (out / "summary.json").exists()


def test_pretraining_stopped_in_the_demo_says_what_resume_means_there(monkeypatch, tmp_path, capsys):
    """Ctrl-C in the demo's pretraining: the run's own words end "`--resume` continues from there", but the demo
    has no --resume and starts over when run again; the demo's last line says which command resumes the run."""
    from albertlm.training import pretrain

    monkeypatch.setattr(demo, "write_corpus", _corpus_stand_in)
    monkeypatch.setattr(demo, "train_tokenizer", lambda corpus_path, path, vocab: path)
    monkeypatch.setattr(demo, "build_data", lambda *a, **k: {"num_instances": 10, "tokenizer": {"vocab_size": 2000}})
    monkeypatch.setattr(demo, "fit_steps", lambda run, size, scratch: (0, 0.5))
    monkeypatch.setattr(pretrain, "pretrain", lambda run, run_dir: "interrupted")
    out = tmp_path / "demo_run"
    assert demo.main(["--quick", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"albertlm pretrain --out {out / 'run'} --resume" in err, err
    assert "the demo starts over when run again" in err
