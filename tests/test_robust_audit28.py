"""Audit 28, writes that fail: each command that writes, run on a full disk (a file size limit, RLIMIT_FSIZE, with
SIGXFSZ ignored so a write past it fails with EFBIG, as `ulimit -f` does under Python) over an earlier good output.
Promised: one line `albertlm <cmd>: error: ...` naming the path and the reason, exit 2, no traceback, and nothing
lost (the earlier output byte for byte as it was, no half-written file under an output's name).

The pure checks (the earlier output kept) passed before this audit; the other cases are the bugs found, fixed
by the lead (each test failed before the fix):
- `tokenizer train` (SentencePiece): sentencepiece's C++ writer gives no error for a model it could not write
  whole, and the truncated spiece.model reached protobuf's parser: DecodeError's traceback;
- `convert` (to transformers and from it): safetensors' SafetensorError is no OSError: a traceback;
- `export onnx`: `albertlm export: error: [Errno 27] File too large`, naming no path;
- GLUE predictions (`predict glue`, `evaluate glue --out`, `finetune glue`'s dev_predictions.tsv and submission):
  written in place, so a full disk truncated the earlier submission to a shorter one that reads as complete.
"""
from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error_line, save_tiny_pretrained, shared_path
from test_bad_input_commands import _digest
from test_flakes_audit17 import _env   # os.environ without a launch's variables, one thread

TIMEOUT = 600   # a hang guard only: convert and export import torch, on a machine that may be loaded

# `python -m albertlm ARGV` whose first argument is the file size limit, set in the child before albertlm is
# imported: not a preexec_fn, which is not safe in a process with threads (the two conversions below start from two
# threads at once, beside torch's own) and can deadlock the forked child before it runs anything
LIMITED = ("import resource, runpy, signal, sys; limit = int(sys.argv.pop(1)); "
           "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
           "runpy.run_module('albertlm', run_name='__main__', alter_sys=True)")


def _albertlm(argv: list[str], limit: int | None = None) -> subprocess.CompletedProcess:
    """`python -m albertlm ARGV` on one thread, with no RANK / LOCAL_RANK / WORLD_SIZE of the environment the tests
    run in (they would silence its error line); `limit`: the largest file it may write, in bytes (a full disk)."""
    command = [sys.executable, "-m", "albertlm"] if limit is None else [sys.executable, "-c", LIMITED, str(limit)]
    try:
        return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(argv, -1, "", f"TIMEOUT after {TIMEOUT} s (a hang): {exc}")


def _no_temporary_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if "tmp" in p.name.lower())


# --------------------------------------------------------------------------------------------- tokenizer train
def test_sentencepiece_training_on_a_full_disk_is_one_line(tmp_path):
    """spiece.model truncated at the limit reached `_reproducible_model`'s protobuf parse: a DecodeError traceback
    (exit 1). The model is ~245 kB for 400 pieces (its normalizer's character map), so 64 kB cuts it."""
    out = tmp_path / "tok"
    proc = _albertlm(["tokenizer", "train", "--input", str(shared_path("text", "sample_text.txt")),
                      "--vocab-size", "400", "--out", str(out)], limit=64_000)
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))   # nothing that looks like a tokenizer
    assert_one_error_line(proc, [str(out)])


def test_wordpiece_overwrite_on_a_full_disk_keeps_the_earlier_tokenizer(tmp_path):
    """Pure check (passed before): the earlier tokenizer stays whole and the error names --out."""
    text = shared_path("text", "sample_text.txt")
    out = tmp_path / "wp"
    first = _albertlm(["tokenizer", "train", "--kind", "wordpiece", "--input", str(text), "--vocab-size", "300",
                       "--out", str(out)])
    assert first.returncode == 0, first.stderr[-2000:]
    before = _digest(out)
    proc = _albertlm(["tokenizer", "train", "--kind", "wordpiece", "--input", str(text), "--vocab-size", "400",
                      "--out", str(out), "--overwrite"], limit=1024)
    assert_one_error_line(proc, [str(out), "cannot write the tokenizer", "File too large"])
    assert _digest(out) == before and not _no_temporary_files(out)


# ------------------------------------------------------------------------------------------------- data build
def test_data_build_overwrite_on_a_full_disk_keeps_the_earlier_build(tmp_path):
    """Pure check (passed before): `data build --overwrite` failing on a full disk removes only its own files."""
    text, tok = shared_path("text", "sample_text.txt"), shared_path("spm", "albert-base-v2_spiece.model")
    out = tmp_path / "data"
    argv = ["data", "build", "--input", str(text), "--tokenizer", str(tok), "--out", str(out),
            "--max-seq-length", "32", "--no-progress"]
    first = _albertlm(argv)
    assert first.returncode == 0, first.stderr[-2000:]
    before = _digest(out)
    proc = _albertlm([*argv, "--overwrite", "--seed", "7"], limit=4096)
    assert_one_error_line(proc, [str(out), "cannot write the data", "File too large"])
    assert _digest(out) == before and not [p.name for p in out.iterdir() if p.name.startswith(".")]


# ----------------------------------------------------------------------------------------------------- convert
@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """The conftest tiny model (44 kB of weights, a WordPiece vocab.txt) and its transformers export."""
    root = tmp_path_factory.mktemp("robust")
    (root / "model").mkdir()
    save_tiny_pretrained(root / "model")
    assert main(["convert", str(root / "model"), str(root / "hf"), "--to", "hf"]) == 0   # in process: no torch import
    return root


@pytest.fixture(scope="module")
def failed_conversions(model) -> dict[str, tuple[subprocess.CompletedProcess, Path, dict, dict]]:
    """Each direction over an earlier conversion (--overwrite; from transformers: over a copy of the albertlm
    model) with an 8000-byte file limit: config.json fits, model.safetensors does not. The two run at once.
    name: (the process, its DST, DST's digest before, after)."""
    ours = model / "ours"
    shutil.copytree(model / "model", ours)
    cases = {"to hf": (["convert", str(model / "model"), str(model / "hf"), "--to", "hf"], model / "hf"),
             "from hf": (["convert", str(model / "hf"), str(ours)], ours)}
    before = {name: _digest(dst) for name, (_, dst) in cases.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = dict(zip(cases, pool.map(lambda case: _albertlm([*case[0], "--overwrite"], limit=8000),
                                          cases.values())))
    return {name: (procs[name], dst, before[name], _digest(dst)) for name, (_, dst) in cases.items()}


@pytest.mark.parametrize("name", ["to hf", "from hf"])
def test_convert_on_a_full_disk_keeps_the_earlier_conversion(name, failed_conversions, model):
    """Pure check (passed before): the staging folder beside DST is removed and DST is as it was."""
    proc, dst, before, after = failed_conversions[name]
    assert proc.returncode != 0 and after == before
    assert not [p.name for p in model.iterdir() if p.name.endswith(".convert-tmp")]


@pytest.mark.parametrize("name", ["to hf", "from hf"])
def test_convert_on_a_full_disk_is_one_line(name, failed_conversions):
    proc, dst, _, _ = failed_conversions[name]
    assert_one_error_line(proc, [str(dst), "File too large"])


# ------------------------------------------------------------------------------------------------- export onnx
@pytest.fixture(scope="module")
def failed_export(model) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """An export (~93 kB) with --overwrite over an earlier file (any bytes: --overwrite does not read it), with an
    8000-byte file limit: (the process, --out, its digest before)."""
    pytest.importorskip("onnx")
    out = model / "m.onnx"
    out.write_bytes(b"the user's earlier export")
    before = _digest(out)
    return _albertlm(["export", "onnx", str(model / "model"), "--out", str(out), "--no-verify", "--overwrite"],
                     limit=8000), out, before


def test_export_onnx_on_a_full_disk_keeps_the_earlier_export(failed_export, model):
    """Pure check (passed before): the earlier file whole, no staging folder left beside it."""
    proc, out, before = failed_export
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert _digest(out) == before
    assert not [p.name for p in model.iterdir() if p.name.startswith(".tmp-export-")]


def test_export_onnx_on_a_full_disk_names_the_out(failed_export):
    proc, out, _ = failed_export
    assert_one_error_line(proc, [str(out), "File too large"])


# ------------------------------------------------------------------------------------------- GLUE predictions
def test_glue_submission_on_a_full_disk_keeps_the_earlier_one(tmp_path):
    """`predict glue` rewrote submission/RTE.tsv in place: with a 2 kB file limit the 7 kB earlier file was left as
    its first 2048 bytes (a shorter submission that reads as complete) and the error line was
    `albertlm predict: error: [Errno 27] File too large`. The file is written the way the command writes it."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    from albertlm.tasks import glue

    task = glue.get_task("rte")
    examples = [glue.Example(str(i), f"premise {i}", f"hypothesis {i}", None, f"test.tsv:{i + 2}")
                for i in range(400)]
    path = tmp_path / "RTE.tsv"
    glue.write_submission(task, examples, [0] * 400, path, by_guid=True)
    before = path.read_bytes()
    assert len(before) > 4096
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, limits[1]))
    try:
        with pytest.raises(Exception) as failed:    # noqa: PT011 (the CLI's UserError after the fix, OSError before)
            glue.write_submission(task, examples, [1] * 400, path, by_guid=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RTE.tsv"]
    assert str(path) in str(failed.value), str(failed.value)
