"""Audit 32 of multi-node pretraining as a cluster user (torchrun, gloo on the CPU).

1. An elastic restart (`torchrun --max-restarts 1`, a rank killed with SIGKILL mid-run, the command given
   `--resume-or-start`) failed instead of resuming: torchrun's agent keeps one store for the whole job, and the
   restarted ranks formed their process group over the keys the first attempt's group had left there (gloo read
   the killed rank's old address: "Gloo connectFullMesh failed ... Connection refused", exit 2). Each attempt now
   forms its group under keys of its own (`distributed.attempt_store`), and the restarted run ends with the
   uninterrupted run's weights bit for bit.
2. `srun -n 2 albertlm pretrain ...` without torchrun started two runs of one process each into the same --out:
   one trained alone without a word, the other said `another run is writing there now`. Refused in one line.
Each test failed before its fix."""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch.distributed as dist

from albertlm.training import distributed
from conftest import assert_one_error
from test_data_audit18 import _children
from test_distributed_audit21 import agent_store, clean_launch  # noqa: F401  (fixtures)
from test_signals import ALBERTLM, TORCHRUN, _env, _logged_steps, _weights, data  # noqa: F401  (data: a fixture)

STEPS = 8
TIMEOUT = 300     # each wait (two torchruns of two ranks each: about 30 s alone, far more on 2 loaded cores)
TRAIN = ["--preset", "albert-tiny", "--max-steps", str(STEPS), "--batch-size", "8", "--lr", "0.01",
         "--warmup-steps", "2", "--save-every", "2", "--log-every", "1", "--seed", "3", "--train.progress=false",
         "--train.tensorboard=false", "--model.hidden_dropout=0.1", "--dist.backend", "gloo", "--dist.device", "cpu",
         "--dist.timeout_minutes", "2"]


# ------------------------------------------------------------ 1. an elastic restart resumes, bit for bit
def test_each_elastic_attempt_forms_its_process_group_under_keys_of_its_own(agent_store):   # noqa: F811
    agent_store.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    first = distributed.attempt_store(datetime.timedelta(seconds=10))
    first.set("default_pg/rank_1", "the first attempt's rank 1")
    first.set(f"{distributed.FAILURE_KEY}1", "rank 1 stopped at step 3: its message")
    agent_store.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    again = distributed.attempt_store(datetime.timedelta(seconds=10))
    assert not again.check(["default_pg/rank_1"]) and not again.check([f"{distributed.FAILURE_KEY}1"])
    agent_store.delenv("TORCHELASTIC_USE_AGENT_STORE")                 # set by hand: rank 0 hosts a new store
    assert distributed.attempt_store(datetime.timedelta(seconds=10)) is None


def _torchrun(data_dir: Path, out: Path, *extra: str) -> list[str]:
    return [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", *extra, "-m", "albertlm", "pretrain",
            "--data", str(data_dir), "--out", str(out), *TRAIN, "--resume-or-start"]


def _start(argv: list[str], log: Path, tmp: Path) -> subprocess.Popen:
    """torchrun in a session of its own (its workers too), its output into `log` (not a pipe nobody reads while
    the test waits for a step)."""
    with open(log, "w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=_env(tmp),
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _finish(proc: subprocess.Popen, log: Path) -> str:
    """torchrun's output once it ends; on a hang it is killed with its workers (torchrun killed alone leaves its
    workers running, holding their ports and the CPU, after the test)."""
    try:
        proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        return log.read_text() + "\nTIMEOUT (a hang)"
    return log.read_text()


def _kill_session(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _run(argv: list[str], log: Path, tmp: Path) -> tuple[int, str]:
    proc = _start(argv, log, tmp)
    try:
        out = _finish(proc, log)
    finally:
        _kill_session(proc)
    return proc.returncode, out


def _kill_rank_after(proc: subprocess.Popen, rank: int, run_dir: Path, step: int) -> bool:
    """SIGKILL torchrun's worker of RANK `rank` once `step` is logged; False if the run ended first."""
    deadline = time.monotonic() + TIMEOUT
    while proc.poll() is None and time.monotonic() < deadline and max(_logged_steps(run_dir), default=0) < step:
        time.sleep(0.01)
    for pid in _children(proc.pid):          # /proc/*/stat: no `ps` needed
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            os.kill(pid, signal.SIGKILL)
            return True
    return False


@pytest.mark.skipif(not TORCHRUN.is_file() or not Path("/proc/self/environ").is_file(),
                    reason="torchrun and /proc are needed")
def test_a_rank_killed_under_torchrun_max_restarts_resumes_as_the_uninterrupted_run(data, tmp_path):   # noqa: F811
    full_dir, run_dir, tmp = tmp_path / "full", tmp_path / "elastic", tmp_path / "tmp"
    with ThreadPoolExecutor(max_workers=1) as pool:
        full = pool.submit(_run, _torchrun(data, full_dir), tmp_path / "full.log", tmp)
        proc = _start(_torchrun(data, run_dir, "--max-restarts", "1"), tmp_path / "elastic.log", tmp)
        try:
            killed = _kill_rank_after(proc, 1, run_dir, 3)
            out = _finish(proc, tmp_path / "elastic.log")
        finally:
            _kill_session(proc)
        code, full_out = full.result()
        assert code == 0, full_out[-3000:]
    if not killed:
        pytest.skip("the run ended before rank 1 could be killed")
    # the restarted group formed and resumed from the newest checkpoint (the fault: connectFullMesh failed)
    assert proc.returncode == 0, out[-4000:]
    assert "resuming from" in out and "connectFullMesh" not in out, out[-4000:]
    _weights_equal(_weights(run_dir, STEPS), _weights(full_dir, STEPS))
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "train"]
    assert steps == list(range(1, STEPS + 1))                         # each step logged once, in order


def _weights_equal(got: dict, want: dict) -> None:
    import torch

    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name


# ------------------------------------------------------------------ 2. srun tasks without torchrun
def test_srun_tasks_without_a_distributed_launch_are_refused_in_one_line(clean_launch, tmp_path, capsys):  # noqa: F811
    from albertlm.cli.main import main

    clean_launch.setenv("SLURM_PROCID", "1")
    clean_launch.setenv("SLURM_STEP_NUM_TASKS", "2")
    for extra in (["--dry-run"], []):
        code = main(["pretrain", "--preset", "albert-tiny", "--out", str(tmp_path / "run"), *extra])
        assert_one_error(capsys, code, "task SLURM_PROCID=1 of the 2 tasks srun started", "torchrun")
    assert not (tmp_path / "run").exists()
    clean_launch.setenv("SLURM_STEP_NUM_TASKS", "1")                  # `srun -n 1`, the batch script: a run
    assert distributed.launch_settings() == (0, 1, 0)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "1"), ("LOCAL_RANK", "0")):   # torchrun under srun
        clean_launch.setenv(name, value)
    clean_launch.setenv("SLURM_STEP_NUM_TASKS", "2")
    assert distributed.launch_settings() == (1, 2, 0)
    assert not dist.is_initialized()
