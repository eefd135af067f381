"""Multi-process training as a user runs it (torchrun on CPU, gloo, and RANK/WORLD_SIZE set by hand): a rank
that fails alone stops the others with one line naming its error (before: gloo's "Connection closed by peer"
traceback on the others and the failing rank's own message said by nobody); a process group that cannot form
(a port in use, MASTER_ADDR missing, RANK not set, a rank that never joins) is one line, not a traceback
after a silent wait. Every subprocess has a hard timeout, so a hang fails the test instead of blocking it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import shared_path

BIN = Path(sys.executable).parent
ALBERTLM, TORCHRUN = BIN / "albertlm", BIN / "torchrun"
TIMEOUT = 300   # a hang guard only: a torchrun launch (three processes importing torch) took 48 s on a loaded
                # 2-core machine, and CI runs another test file beside it
TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--batch-size", "8", "--lr", "0.01", "--warmup-steps", "1",
        "--save-every", "0", "--log-every", "1", "--train.progress=false", "--train.tensorboard=false"]

pytestmark = pytest.mark.skipif(not ALBERTLM.is_file(), reason=f"albertlm is not installed beside {sys.executable}")
needs_torchrun = pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun is not installed")


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return dict(env, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)


def _run(argv: list, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env or _env(),
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"still running after {TIMEOUT} s (a hang): {exc.stderr!r:.2000}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "albertlm pretrain: error:" in line]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    text = shared_path("text", "sample_text.txt")
    root = tmp_path_factory.mktemp("audit15")
    for argv in (["tokenizer", "train", "--input", text, "--vocab-size", "400", "--out", root / "tok"],
                 ["data", "build", "--input", text, "--tokenizer", root / "tok", "--out", root / "data",
                  "--max-seq-length", "32", "--no-progress"]):
        proc = _run([ALBERTLM, *argv])
        assert proc.returncode == 0, proc.stderr
    return root / "data"


# ------------------------------------------------------------------ the process group cannot form: one line
def test_master_port_in_use_is_one_line(data, tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = _env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        proc = _run([ALBERTLM, "pretrain", "--data", data, "--out", tmp_path / "run", *TINY, "--max-steps", "1"], env)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and "already in use" in lines[0] and str(port) in lines[0], proc.stderr[-2000:]


@pytest.mark.parametrize("env, phrase", [
    ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"),
    ({"WORLD_SIZE": "2"}, "RANK is not"),
    ({"RANK": "0", "WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not a whole number"),
], ids=["no-master-addr", "no-rank", "bad-world-size"])
def test_rank_and_world_size_set_by_hand_wrongly_is_one_line(data, tmp_path, env, phrase):
    proc = _run([ALBERTLM, "pretrain", "--data", data, "--out", tmp_path / "run", *TINY, "--max-steps", "1"],
                _env(**env))
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and phrase in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_a_rank_that_never_joins_is_one_line_after_the_timeout_not_a_traceback(tmp_path):
    """Rank 0 of 2 started by hand, rank 1 never: after --dist.timeout_minutes (here 3 s) a UserError that says
    what to do (was: torch's DistStoreError traceback, after a default wait of 30 minutes)."""
    code = textwrap.dedent("""
        from albertlm.errors import UserError
        from albertlm.training.distributed import init_distributed
        try:
            init_distributed("gloo", "cpu", timeout_minutes=0.05)
        except UserError as exc:
            print("USER ERROR:", exc)
    """)
    proc = _run([sys.executable, "-c", code], _env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2",
                                                    MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())))
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "USER ERROR:" in proc.stdout and "not all 2 processes joined" in proc.stdout, proc.stdout
    assert "1/2" in proc.stdout and "RANK 0 to 1" in proc.stdout


# ------------------------------------------------------------------------- one rank fails, all stop, one line
DRIVER = textwrap.dedent('''
    """`albertlm` as torchrun runs it, with rank 1 made to fail alone: its data unreadable at its 4th
    micro-batch ("step"), or its model not buildable ("setup")."""
    import os
    import sys

    from albertlm.errors import UserError

    if os.environ.get("RANK") == "1":
        if os.environ["AUDIT_FAIL"] == "step":
            from albertlm.data import loader

            original, calls = loader.PretrainingDataset.__getitems__, []

            def broken(self, keys):
                calls.append(1)
                if len(calls) > 3:
                    raise UserError("shard-00000.bin: record 7 is damaged (AUDIT)")
                return original(self, keys)

            loader.PretrainingDataset.__getitems__ = broken
        else:
            from albertlm.training import pretrain

            def broken(run, **_):
                raise UserError("cannot read the starting weights (AUDIT)")

            pretrain.build_model = broken

    from albertlm.cli.main import main

    sys.exit(main())
''')


@needs_torchrun
@pytest.mark.parametrize("when", ["step", "setup"])
def test_one_rank_failing_alone_stops_both_with_its_message_in_one_line(data, tmp_path, when):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    src = str(Path(__import__("albertlm").__file__).resolve().parents[1])   # this checkout's code in the ranks
    # TMPDIR: torchrun leaves a torchelastic_* folder of its workers' logs in the temporary directory, one a run
    (tmp_path / "tmp").mkdir()
    env = _env(AUDIT_FAIL=when, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
               TMPDIR=str(tmp_path / "tmp"))
    proc = _run([TORCHRUN, "--standalone", "--nproc-per-node", "2", driver, "pretrain", "--data", data,
                 "--out", tmp_path / "run", *TINY, "--max-steps", "8", "--dist.backend", "gloo",
                 "--dist.device", "cpu"], env)
    assert proc.returncode != 0
    assert "[rank0]: Traceback" not in proc.stderr and "[rank1]: Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert "Connection closed by peer" not in proc.stderr, proc.stderr[-4000:]
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-4000:]
    assert "rank 1 stopped" in lines[0] and "(AUDIT)" in lines[0], lines[0]
    assert "rank 0 stopped too" in lines[0], lines[0]


@pytest.mark.parametrize("env, says", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, True),           # refused as not a number: someone must say so
    ({"RANK": "5", "WORLD_SIZE": "2"}, True),             # refused as past WORLD_SIZE
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, False),
    ({"RANK": "1", "WORLD_SIZE": "2"}, False),
    ({"RANK": "0", "WORLD_SIZE": "2"}, True),
])
def test_a_wrongly_set_rank_still_reports_its_error(monkeypatch, env, says):
    from albertlm.errors import reports_here

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert reports_here() == says


def test_the_other_ranks_log_no_warnings(monkeypatch):
    """The model loader's logged warnings ("freshly initialised weights") were printed once per rank."""
    import logging
    import sys
    import types

    from albertlm.cli.main import main

    logger = logging.getLogger("albertlm")
    level = logger.level
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    seen = []   # the logger's level while the command runs (since audit26 it is put back after the command)
    probe = types.ModuleType("albertlm_probe_audit15")
    probe.add_arguments = lambda parser, command: parser.add_argument("--preset")
    probe.run = lambda args, command: seen.append(logger.getEffectiveLevel()) or 0
    monkeypatch.setitem(sys.modules, probe.__name__, probe)
    monkeypatch.setattr("albertlm.cli.main._module_for", lambda command, rest: probe.__name__)
    try:
        assert main(["params", "--preset", "albert-base"]) == 0
        assert len(seen) == 1 and seen[0] >= logging.ERROR, seen
    finally:
        logger.setLevel(level)
