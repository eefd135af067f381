"""Audit 25, signals: Slurm's pre-emption notice (`#SBATCH --signal=USR1@120`, `scancel --signal=USR1`) and the
SIGHUP of an ssh session closed under a run started without nohup stop a training loop as SIGTERM does: the
step in progress finishes, a checkpoint of it is saved, the command says `stopped by SIGUSR1 at step N` and
exits 130, and `--resume` ends with the weights of an uninterrupted run. Both had their default action: the
process ended at once (exit -10 / -1), every step since the last checkpoint lost. Under torchrun a SIGUSR1 to
one rank alone stops both ranks after the same step.

The real-process runs reuse tests/test_signals.py's data, commands and comparisons."""
from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from albertlm.training import loop as loop_module
from albertlm.training.distributed import DistInfo
from test_signals import (ALBERTLM, STEPS, TIMEOUT, TORCHRUN, _assert_same_weights, _check_stopped_and_saved,
                          _checkpoints, _logged_steps, _pretrain, _run, _signal_mid_run, _torchrun, _weights, data)

__all__ = ["data"]   # the module-scoped fixture of tests/test_signals.py (the tokenizer and data built once here)


@pytest.fixture(scope="module", autouse=True)
def _stop_signals_not_ignored():
    """A test session started under nohup (SIGHUP ignored; the lead's fresh-clone CI check is) hands the ignore on
    to every run it starts, and an ignored SIGHUP / SIGUSR1 stays ignored (`loop.stop_signals`): these tests send
    both, so they run with both at their defaults (module scope: before the module's runs are started)."""
    before = {signum: signal.signal(signum, signal.SIG_DFL) for signum in (signal.SIGHUP, signal.SIGUSR1)}
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)

NEW = ("SIGUSR1", "SIGHUP")


def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")


@pytest.mark.parametrize("signame", NEW)
def test_stop_on_signals_takes_slurms_usr1_and_a_hangup_and_restores_the_handler(signame, capfd):
    """In-process: the signal is a stop request (named, said once), and the handler in place before comes back.
    Before, the previous handler (here a recorder; by default the kill) took it and the loop never heard."""
    _main_thread_only()
    signum = getattr(signal, signame)
    got: list[int] = []

    def recorder(num, frame):
        got.append(num)

    previous = signal.signal(signum, recorder)
    try:
        with loop_module.stop_on_signals(DistInfo()) as request:
            signal.raise_signal(signum)
            assert request.name == signame and request.signum == signum
        assert got == []
        assert signal.getsignal(signum) is recorder      # restored after the loop
        signal.raise_signal(signum)
        assert got == [signum]
    finally:
        signal.signal(signum, previous)
    assert f"{signame}: stopping after this step to save a checkpoint" in capfd.readouterr().err


@pytest.fixture(scope="module")
def new_signal_runs(data, tmp_path_factory):
    """In parallel: the uninterrupted run and runs stopped by SIGUSR1 and SIGHUP; then both resumed."""
    root = tmp_path_factory.mktemp("sigs")
    jobs = {"full": lambda: _run(_pretrain(data, root / "full"))}
    for name in NEW:
        jobs[name] = lambda name=name: _signal_mid_run(_pretrain(data, root / name), root / name,
                                                       getattr(signal, name))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        first = {name: f.result() for name, f in futures.items()}
    assert first["full"].returncode == 0, first["full"].stderr[-2000:]
    stopped_at = {name: _check_stopped_and_saved(first[name], root / name, name) for name in NEW}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, [str(ALBERTLM), "pretrain", "--out", str(root / name), "--resume"])
                   for name in NEW}
        resumed = {name: f.result() for name, f in futures.items()}
    return root, first, resumed, stopped_at


@pytest.mark.parametrize("signame", NEW)
def test_usr1_or_hangup_mid_run_saves_exits_130_and_resume_is_exact(signame, new_signal_runs):
    root, first, resumed, stopped_at = new_signal_runs
    step = stopped_at[signame]
    said = first[signame].stdout + first[signame].stderr
    assert f"stopped by {signame} at step {step}: saved" in said, said[-2000:]
    assert "albertlm pretrain: interrupted" not in said       # the loop's stop, not a KeyboardInterrupt
    proc = resumed[signame]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resuming from {root / signame / 'checkpoints' / f'step_{step:08d}'}" in proc.stdout + proc.stderr
    _assert_same_weights(_weights(root / signame), _weights(root / "full"))
    logged = _logged_steps(root / signame)
    assert sorted(set(logged)) == list(range(1, STEPS + 1)) and len(logged) == STEPS   # every step once


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


@pytest.mark.skipif(not TORCHRUN.is_file() or not Path("/proc/self/task").is_dir(),
                    reason="torchrun is not installed, or no /proc to find its ranks")
def test_usr1_to_one_torchrun_rank_stops_both_ranks_after_the_same_step(data, tmp_path):
    """Slurm signals the processes it launched; a `kill -USR1` of one rank (or a notice that reaches one rank
    first) stops every rank after the same step through the loop's per-step all-reduce, as SIGTERM does."""
    import subprocess

    from test_signals import _env

    run_dir = tmp_path / "ddp-usr1"
    argv = _torchrun(data, run_dir)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path / "tmp"),
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline and len(_logged_steps(run_dir)) < 3:
            time.sleep(0.005)
        ranks = _children(proc.pid)
        assert len(ranks) == 2, ranks
        os.kill(ranks[1], signal.SIGUSR1)              # one rank only (rank order does not matter)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    said = out + err
    assert proc.returncode != 0, said[-3000:]         # torchrun's ChildFailedError: a rank ended 130
    assert "KeyboardInterrupt" not in said and "stopped at once" not in said, said[-3000:]
    names = _checkpoints(run_dir)
    assert len(names) == 1 and 1 <= int(names[0].split("_")[1]) < STEPS, names
    step = int(names[0].split("_")[1])
    assert max(_logged_steps(run_dir)) == step
    # rank 0 says where it stopped; the signal came to the other rank
    assert f"stopped by a signal on another rank at step {step}" in said or f"stopped by SIGUSR1 at step {step}" \
        in said, said[-3000:]


# ------------------------------------------------------------------------------- albertlm ablate's suite
def test_the_suites_stop_signals_are_the_training_loops():
    """The suite names its signals itself (its process does not import torch): the same as the loop's."""
    from albertlm.experiments import runner

    assert set(runner._suite_stop_signals()) | {signal.SIGINT} == set(loop_module.stop_signals())


@pytest.mark.parametrize("signame", NEW)
def test_a_parallel_suite_stops_on_usr1_or_a_hangup_and_restores_the_handler(signame, monkeypatch):
    """`_run_parallel` (ablate --jobs N) took SIGTERM only: a SIGUSR1 or SIGHUP to the suite's process ended it
    at once, its workers left running. Now it stops as SIGTERM does (KeyboardInterrupt: the stop event set, the
    workers told), and the handler before it comes back. The pool is a stand-in: the signal comes while a job is
    submitted."""
    from concurrent.futures import Future

    from albertlm.experiments import runner

    _main_thread_only()
    signum = getattr(signal, signame)
    got: list[int] = []

    class Pool:
        _processes: dict = {}

        def __init__(self, **kwargs) -> None:
            pass

        def submit(self, fn, *args) -> Future:
            signal.raise_signal(signum)
            done: Future = Future()
            done.set_result(("job", None, ""))
            return done

        def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
            pass

    def recorder(num, frame):
        got.append(num)

    monkeypatch.setattr(runner, "ProcessPoolExecutor", Pool)
    previous = signal.signal(signum, recorder)
    try:
        with pytest.raises(KeyboardInterrupt):
            runner._run_parallel(None, [object()], 2, lambda *a: None)
        assert got == [] and signal.getsignal(signum) is recorder
    finally:
        signal.signal(signum, previous)


@pytest.mark.parametrize("signame", NEW)
def test_a_suite_worker_stops_on_usr1_or_a_hangup_outside_a_training_loop(signame, monkeypatch):
    """A worker of `_run_parallel` between training loops: the signal stops its job as SIGTERM does."""
    from albertlm.experiments import runner

    _main_thread_only()
    signum = getattr(signal, signame)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, *loop_module.stop_signals())}
    monkeypatch.setattr(runner, "_STOP", None)
    try:
        runner._worker_init(threading.Event())
        assert signal.getsignal(signum) is runner._worker_signalled
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
