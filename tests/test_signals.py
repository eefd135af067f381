"""Signals and budgets on a real `albertlm pretrain` process (the installed command, a tiny tokenizer and data
built from ../shared/data, a few seconds each): SIGTERM or SIGINT mid-run saves the last completed step and
exits non-zero, and `--resume` then ends with exactly the weights of an uninterrupted run; so does a
`--train.max_minutes` stop. Under `torchrun` (2 gloo processes) a SIGTERM to the launcher stops both ranks at
the same step, and the resumed run equals an uninterrupted one; a checkpoint that rank 0 cannot write (a
full disk, made with RLIMIT_FSIZE) stops both ranks with one error instead of leaving rank 1 in a barrier.

Every process runs with one intra-op thread, so its arithmetic is the same run to run and the weights are
compared exactly."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import shared_path

BIN = Path(sys.executable).parent
ALBERTLM, TORCHRUN = BIN / "albertlm", BIN / "torchrun"
STEPS = 40
TIMEOUT = 300
TRAIN = ["--preset", "albert-tiny", "--max-steps", str(STEPS), "--batch-size", "8", "--lr", "0.01",
         "--warmup-steps", "2", "--save-every", "0", "--log-every", "1", "--seed", "3", "--train.progress=false",
         "--train.tensorboard=false", "--model.hidden_dropout=0.1"]   # dropout: the RNG must be restored too

pytestmark = pytest.mark.skipif(not ALBERTLM.is_file(), reason=f"the albertlm command is not installed beside "
                                                               f"{sys.executable}")


def _env(tmp: Path | None = None) -> dict:
    """The children's environment; `tmp` (made here) their TMPDIR: torchrun leaves a torchelastic_* folder of its
    workers' logs in the temporary directory, one a run, which a test's own folder keeps out of /tmp."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
    return env


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 400-piece tokenizer and 32-token SOP data from the shared sample text (about a second)."""
    text = shared_path("text", "sample_text.txt")
    root = tmp_path_factory.mktemp("signals")
    for argv in (["tokenizer", "train", "--input", str(text), "--vocab-size", "400", "--out", str(root / "tok")],
                 ["data", "build", "--input", str(text), "--tokenizer", str(root / "tok"), "--out", str(root / "data"),
                  "--max-seq-length", "32", "--no-progress"]):
        proc = subprocess.run([str(ALBERTLM), *argv], capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
        assert proc.returncode == 0, proc.stderr
    return root / "data"


def _pretrain(data: Path, out: Path, *extra: str) -> list[str]:
    return [str(ALBERTLM), "pretrain", "--data", str(data), "--out", str(out), *TRAIN, *extra]


def _torchrun(data: Path, out: Path, *extra: str) -> list[str]:
    return [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "albertlm", "pretrain", "--data", str(data),
            "--out", str(out), *TRAIN, "--dist.backend", "gloo", "--dist.device", "cpu", *extra]


def _run(argv: list[str], tmp: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=_env(tmp), timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, **kwargs)


def _logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:    # a line being written
            continue
        if record.get("split") == "train":
            steps.append(record["step"])
    return steps


def _signal_mid_run(argv: list[str], run_dir: Path, signum: int, after_step: int = 3,
                    tmp: Path | None = None) -> subprocess.CompletedProcess:
    """Start the run, send `signum` to it once `after_step` steps are logged, wait for it to end."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp),
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline and len(_logged_steps(run_dir)) < after_step:
        time.sleep(0.005)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\nTIMEOUT: still running {TIMEOUT} s after the signal (a hang)"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _checkpoints(run_dir: Path) -> list[str]:
    root = run_dir / "checkpoints"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def _weights(run_dir: Path, step: int = STEPS) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def _assert_same_weights(got: dict, want: dict, exact: bool = True) -> None:
    import torch

    assert got.keys() == want.keys()
    for name in want:
        if exact:
            assert torch.equal(got[name], want[name]), name
        else:
            torch.testing.assert_close(got[name], want[name], atol=2e-5, rtol=1e-4, msg=name)


def _check_stopped_and_saved(proc: subprocess.CompletedProcess, run_dir: Path, what: str) -> int:
    """The run stopped non-zero after saving its last completed step, which is < STEPS; returns that step."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 130, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert f"stopped by {what}" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    names = _checkpoints(run_dir)
    assert len(names) == 1 and not names[0].startswith(".tmp"), names
    step = int(names[0].split("_")[1])
    assert 1 <= step < STEPS, f"the signal landed after the last step ({step}); the test proves nothing"
    assert max(_logged_steps(run_dir)) == step          # the last completed step, no step lost or half-done
    return step


@pytest.fixture(scope="module")
def single_runs(data, tmp_path_factory):
    """Run in parallel: the uninterrupted run, runs stopped by SIGTERM, by SIGINT and by the time budget."""
    root = tmp_path_factory.mktemp("single")
    jobs = {
        "full": lambda: _run(_pretrain(data, root / "full")),
        "SIGTERM": lambda: _signal_mid_run(_pretrain(data, root / "SIGTERM"), root / "SIGTERM", signal.SIGTERM),
        "SIGINT": lambda: _signal_mid_run(_pretrain(data, root / "SIGINT"), root / "SIGINT", signal.SIGINT),
        "budget": lambda: _run(_pretrain(data, root / "budget", "--train.max_minutes=0.0005")),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        first = {name: f.result() for name, f in futures.items()}
    assert first["full"].returncode == 0, first["full"].stderr[-2000:]
    # the resumed runs (the saved config is the base; the budget run drops its budget)
    resumes = {"SIGTERM": [], "SIGINT": [], "budget": ["--train.max_minutes=0"]}
    stopped_at = {}
    for name in resumes:
        if name != "budget":
            stopped_at[name] = _check_stopped_and_saved(first[name], root / name, name)
    stopped_at["budget"] = _checkpoints(root / "budget")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, [str(ALBERTLM), "pretrain", "--out", str(root / name), "--resume", *extra])
                   for name, extra in resumes.items()}
        resumed = {name: f.result() for name, f in futures.items()}
    return root, first, resumed, stopped_at


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_mid_run_saves_the_last_step_and_resume_is_exact(signame, single_runs):
    root, _, resumed, stopped_at = single_runs
    proc = resumed[signame]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resuming from {root / signame / 'checkpoints' / f'step_{stopped_at[signame]:08d}'}" in \
        proc.stdout + proc.stderr
    _assert_same_weights(_weights(root / signame), _weights(root / "full"))
    logged = _logged_steps(root / signame)
    assert sorted(set(logged)) == list(range(1, STEPS + 1)) and len(logged) == STEPS   # every step once


def test_time_budget_stop_then_resume_is_exact(single_runs):
    root, first, resumed, stopped_at = single_runs
    stop = first["budget"]
    assert stop.returncode == 0 and "time budget of 0.0005 min used up" in stop.stdout + stop.stderr, \
        (stop.stdout + stop.stderr)[-2000:]
    names = stopped_at["budget"]
    assert len(names) == 1 and int(names[0].split("_")[1]) < STEPS, names
    assert resumed["budget"].returncode == 0, resumed["budget"].stderr[-2000:]
    _assert_same_weights(_weights(root / "budget"), _weights(root / "full"))


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed")
def test_two_gloo_processes_stopped_by_sigterm_and_resumed_equal_an_uninterrupted_run(data, tmp_path):
    run_dir, full_dir = tmp_path / "ddp", tmp_path / "ddp-full"
    with ThreadPoolExecutor(max_workers=2) as pool:
        full = pool.submit(_run, _torchrun(data, full_dir), tmp_path / "tmp")
        stop = pool.submit(_signal_mid_run, _torchrun(data, run_dir), run_dir, signal.SIGTERM,
                           tmp=tmp_path / "tmp").result()
        assert full.result().returncode == 0, full.result().stderr[-3000:]
    # torchrun forwards the SIGTERM to both ranks; they agree on a step, rank 0 saves, both exit 130
    assert "stopped by SIGTERM" in stop.stdout + stop.stderr, (stop.stdout + stop.stderr)[-3000:]
    assert stop.returncode != 0
    names = _checkpoints(run_dir)
    assert len(names) == 1 and 1 <= int(names[0].split("_")[1]) < STEPS, names
    assert max(_logged_steps(run_dir)) == int(names[0].split("_")[1])
    proc = _run(_torchrun(data, run_dir, "--resume"), tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same_weights(_weights(run_dir), _weights(full_dir))


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # writes past the limit fail with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))


@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed")
def test_a_checkpoint_rank_0_cannot_write_stops_both_ranks(data, tmp_path):
    run_dir = tmp_path / "full-disk"
    started = time.monotonic()
    proc = _run(_torchrun(data, run_dir, "--max-steps", "4"), tmp_path / "tmp", preexec_fn=_limit_file_size)
    assert time.monotonic() - started < TIMEOUT
    assert proc.returncode != 0
    assert f"albertlm pretrain: error: {run_dir / 'checkpoints' / 'step_00000004'}: cannot write the checkpoint" \
        in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.count("cannot write the checkpoint") == 1, proc.stderr[-3000:]   # one line, rank 0's
    assert "rank 0 could not write the checkpoint of step 4" not in proc.stderr         # rank 1 keeps quiet
    assert _checkpoints(run_dir) == []                   # the half-written directory is gone
