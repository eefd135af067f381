"""Audit 18 of `albertlm data build` on the real data of ../shared/data: SIGTERM (`kill`, `timeout`, a scheduler
cancelling the job) ended the build at once, leaving `.building-all` with its partial shards and the worker
processes waiting for work forever; workers outlived a build killed outright; `--masked-lm-prob nan` (or inf) was
a ValueError traceback; `--max-ngram` above the sequence length was accepted (10**8 a MemoryError traceback, 2*10**5
a minute for nine instances); a `.json` file holding one JSON document was read to its end twice, to say only that
no instances were built."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from conftest import ROOT, assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


def _build(inputs, out: Path, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress", *extra])


# -- a build with two workers, stopped from outside ------------------------------------------------------------
def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's exit is reaped by whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _children(parent: int) -> list[int]:
    """The processes whose parent is `parent`, from /proc/*/stat: whichever thread started them (a thread's own
    /proc/PID/task/TID/children lists only the children that thread started, and needs CONFIG_PROC_CHILDREN)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue                                  # ended meanwhile
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def _is_pool_worker(pid: int) -> bool:
    """A process started by multiprocessing's spawn (a pool worker, not its resource tracker)."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _running_build(tmp_path: Path):
    """A CLI build with --workers 2 on the Gutenberg books, once its two workers run and it writes into --out
    (the process, its child processes: the two workers and multiprocessing's resource tracker)."""
    out = tmp_path / "out"
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))    # this checkout's code, whatever is installed
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from albertlm.cli.main import main; sys.exit(main(sys.argv[1:]))",
         "data", "build", "--input", str(shared_path("text", "gutenberg")), "--tokenizer", str(shared_path(*SPM)),
         "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "10", "--workers", "2", "--no-progress"],
        cwd=ROOT, env=env, start_new_session=True, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240     # a loaded machine is slow to start; the loop ends as soon as they run
    while time.monotonic() < deadline and proc.poll() is None:
        children = _children(proc.pid)
        if sum(map(_is_pool_worker, children)) >= 2 and (out / ".building-all").is_dir():
            return proc, out, children
        time.sleep(0.05)
    proc.kill()
    _, err = proc.communicate()
    pytest.fail(f"the build's workers did not start (exit {proc.returncode}): {err[-2000:]}")


def _wait_gone(pids: list[int], seconds: float = 60) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(map(_alive, pids)):
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _end(proc: subprocess.Popen, pids: list[int]) -> None:
    """What a failing check left running: the build (its Popen, which knows whether it was reaped) and its
    children, each only while it still runs multiprocessing (a process id of one that ended may have been
    given to another process since)."""
    if proc.poll() is None:
        proc.kill()
    for pid in pids:
        try:
            if _alive(pid) and b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def test_sigterm_stops_a_build_as_ctrl_c_does_workers_ended_nothing_left(tmp_path):
    proc, out, children = _running_build(tmp_path)
    try:
        assert proc.poll() is None, "the build ended before SIGTERM"
        proc.send_signal(signal.SIGTERM)          # `kill PID`, `timeout`: the main process only
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (proc.returncode, err)
        assert err == "albertlm data: interrupted\n", err
        assert not out.exists()                   # no .building-all with partial shards
        assert _wait_gone(children) == []         # no worker left waiting for work
    finally:
        _end(proc, children)


def test_the_workers_of_a_build_killed_outright_end_too(tmp_path):
    proc, out, children = _running_build(tmp_path)
    try:
        proc.kill()                               # SIGKILL, the out-of-memory killer: no cleanup can run
        proc.communicate(timeout=60)
        assert _wait_gone(children) == []         # the workers see their parent gone and leave
        assert (out / ".building-all").is_dir()   # (documented: the next build of this part removes it)
    finally:
        _end(proc, children)


# -- settings refused in one line --------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_masked_lm_prob_that_is_not_a_probability_is_one_line(tmp_path, capsys, value):
    code = _build([shared_path("text", "sample_text.txt")], tmp_path / "out", f"--masked-lm-prob={value}")
    assert_one_error(capsys, code, "masked_lm_prob must be in [0, 1]", value)
    assert not (tmp_path / "out").exists()


def test_max_ngram_above_the_sequence_length_is_refused_and_a_long_one_is_fast(tmp_path, capsys):
    from albertlm.data.masking import ngram_probabilities, ngram_sizes

    code = _build([shared_path("text", "sample_text.txt")], tmp_path / "out", "--max-ngram", "65")
    assert_one_error(capsys, code, "--max-ngram must be <= --max-seq-length 64, got 65")
    assert not (tmp_path / "out").exists()
    # T itself is allowed; the sizes are drawn with one binary search (the bounds, as before, 1/n)
    assert _build([shared_path("text", "sample_text.txt")], tmp_path / "out", "--max-ngram", "64") == 0
    assert json.loads((tmp_path / "out" / "meta.json").read_text())["masking"]["max_ngram"] == 64
    cdf = ngram_probabilities(3).cumsum()
    draws = [0.0, cdf[0] - 1e-12, cdf[0], cdf[1] - 1e-12, cdf[1], 1 - 1e-12]
    assert ngram_sizes(np.array(draws), 3).tolist() == [1, 1, 2, 2, 3, 3]
    assert ngram_sizes(np.array([0.0, 0.99]), 1).tolist() == [1, 1]


# -- a .json file that is one JSON document -----------------------------------------------------------------
def test_a_json_file_holding_one_document_is_refused_before_the_build(tmp_path, capsys):
    text = shared_path("text", "sample_text.txt").read_text(encoding="utf-8")
    records = [{"text": text}] * 3
    one_line = tmp_path / "records.json"                  # datasets' to_json(lines=False), pandas orient=records
    one_line.write_text(json.dumps(records))
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps({"data": records}, indent=2))
    for path, where in ((one_line, "a JSON array, not an object"), (pretty, "not JSON")):
        assert_one_error(capsys, _build([path], tmp_path / "out"), f"{path} is not JSON lines", where,
                         "one object per line")
        assert not (tmp_path / "out").exists()
    assert_one_error(capsys, _build([shared_path("squad", "sample.json")], tmp_path / "out"), "is not JSON lines")
    # JSON lines whose first lines are damaged still build from the records after them
    good = tmp_path / "good.jsonl"
    good.write_text("not json\n[1, 2]\n" + "".join(json.dumps(r) + "\n" for r in records))
    assert _build([good], tmp_path / "out") == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["counts"]["corpus"]["bad_json_lines"] == 2 and meta["counts"]["corpus"]["documents"] == 3
