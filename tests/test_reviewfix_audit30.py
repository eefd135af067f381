"""Fixes of review audit 30 (tests/test_review_audit30.py pins the reviewer's own cases), and what they needed.

- `remove_killed_temporaries` took "this host name, process id not alive" for a killed embed: containers of one host
  name on a shared folder (docker --network host) each have their own process ids, so one could remove another's
  live temporary file. The writer now holds an exclusive `fcntl.flock` on its temporary file for its whole life
  (`hold_temporary`), the cleaner removes only a file whose lock it can take, and a second writer of the same
  temporary name (another container, the same process id) is one error line, not two embeddings in one file.
- Labels are numbers by their exact value (`classify._exact`, a Decimal): 18-digit ids sort by value, a fraction past
  a float's digits is a fraction, and `1e-999999999` is no billion-digit Fraction to build.
- `evaluate --predictions` with p_<label> columns: a gold class the model lacks is added after the model's labels,
  one spelt another way (`1.0` for the model's `1`) is the model's class.
- bzip2 is told by `BZh`, a level digit and a block or end-of-stream magic: a text whose first line starts `BZh` is
  read as text by `data build` and `embed` too (`corpus.compression_of`), while bzip2 files, empty ones included,
  are still read decompressed."""
from __future__ import annotations

import bz2
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.cli import infer_commands
from albertlm.cli.main import main
from albertlm.data import corpus
from albertlm.tasks import classify
from conftest import assert_one_error
from test_infer_audit30 import _embed, sst2, tiny  # noqa: F401  (fixtures)
from test_review_audit30 import _examples

fcntl = pytest.importorskip("fcntl") if os.name == "posix" else None
posix_locks = pytest.mark.skipif(fcntl is None, reason="fcntl.flock is POSIX's")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ----------------------------------------------------------------------- 4. a killed embed's temporary file
def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])   # waited for: its pid is no process's now
    child.wait()
    return child.pid


def _holder(path: Path) -> subprocess.Popen:
    """A live process holding `path`'s flock until its stdin closes (another container's embed, as far as the lock
    can tell); returned once it holds the lock (it says so on stdout)."""
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=300)
    proc.stdout.close()


@posix_locks
def test_a_temporary_file_whose_lock_a_live_process_holds_is_kept_though_its_names_pid_is_dead(tmp_path):
    out = tmp_path / "e.npy"
    dead = _dead_pid()
    held = infer_commands.temporary_name(out, dead)
    held.write_bytes(b"\x93NUMPY another container's live embedding")
    holder = _holder(held)
    try:
        assert holder.pid != dead
        assert infer_commands.remove_killed_temporaries(out) == []
        assert held.read_bytes() == b"\x93NUMPY another container's live embedding"
    finally:
        _release(holder)
    assert infer_commands.remove_killed_temporaries(out) == [held]   # its lock free now: a killed run's leftover
    assert not held.exists()


@posix_locks
def test_embed_holds_its_temporary_files_lock_while_it_writes(tiny, sst2, tmp_path, monkeypatch, capsys):
    out = tmp_path / "e.jsonl"
    seen = []
    write = infer_commands.write_jsonl

    def checked(path, *args):   # is its lock free to another open of it, a cleaner's (flock is per open file)
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = False
        finally:
            os.close(fd)
        seen.append((Path(path), free))
        return write(path, *args)

    monkeypatch.setattr(infer_commands, "write_jsonl", checked)
    assert _embed(tiny, sst2, out, "--no-progress") == 0
    assert seen == [(infer_commands.temporary_name(out), False)]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 40
    assert not list(tmp_path.glob(".tmp-*"))


@posix_locks
def test_a_second_writer_of_the_same_temporary_name_is_one_error_line_and_writes_nothing(tiny, sst2, tmp_path,
                                                                                           monkeypatch, capsys):
    """Another container of this host name whose embed has this process id writes the same temporary file: both
    wrote into it before (one array over the other); now the second is refused and the first's file is as it was."""
    monkeypatch.setattr(infer_commands, "_HOLD_WAIT_S", 0.0, raising=False)
    out = tmp_path / "sub" / "e.npy"
    out.parent.mkdir()
    theirs = infer_commands.temporary_name(out)
    theirs.write_bytes(b"\x93NUMPY theirs")
    holder = _holder(theirs)
    try:
        code = _embed(tiny, sst2, out, "--no-progress")
        assert theirs.read_bytes() == b"\x93NUMPY theirs"
    finally:
        _release(holder)
    assert_one_error(capsys, code, f"--out {out}: its temporary file {theirs} is being written by another process")
    assert not out.exists()


# ------------------------------------------------------------------------------- 1. labels by exact value
def test_integer_labels_past_a_floats_digits_sort_by_value():
    labels = ["100000000000000000", "99999999999999999", "5"]
    assert float(labels[0]) == float(labels[1])
    assert classify.label_set(_examples(labels)) == ("5", "99999999999999999", "100000000000000000")


def test_a_label_with_a_fraction_past_a_floats_digits_is_a_real_number():
    with pytest.raises(classify.DataError, match="label '123456789012345678.5' is a real number"):
        classify.label_set(_examples(["123456789012345678", "123456789012345678.5"]))


def test_a_number_with_a_huge_negative_exponent_is_refused_at_once():
    """A Fraction of `1e-999999999` is a billion-digit integer: the label set hung (not with a Decimal)."""
    with pytest.raises(classify.DataError, match="label '1e-999999999' is a real number"):
        classify.label_set(_examples(["0", "1e-999999999"]))


# --------------------------------------------------- 2. a gold class the model lacks, with p_<label> columns
def test_gold_labels_spelt_otherwise_or_unknown_to_the_model_score_against_the_models_order(tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\na\t1.0\nb\t02\nc\t3\nd\t2\n", encoding="utf-8")
    predictions = tmp_path / "dev_predictions.tsv"
    predictions.write_text("id\tprediction\tp_2\tp_1\n0\t1\t0.1\t0.9\n1\t2\t0.8\t0.2\n2\t2\t0.7\t0.3\n"
                           "3\t1\t0.4\t0.6\n", encoding="utf-8")
    assert main(["evaluate", "classify", "--predictions", str(predictions), "--dev", str(dev)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["accuracy"] == pytest.approx(2 / 4)
    assert "f1" not in scores   # three classes: no two-class F1
    assert classify.other_labels(_examples(["1.0", "02", "3", "2", "03", "x"]), ["2", "1"]) == ["3", "x"]


# ----------------------------------------------------------------------------- 3. bzip2 by its whole header
@pytest.mark.parametrize("data, kind", [(bz2.compress(b"a\n"), "bz2"), (bz2.compress(b""), "bz2"),
                                        (bz2.compress(b"a\n", 1), "bz2"), (b"BZh,label\n", None),
                                        (b"BZh9 is text\n", None), (b"BZh91AX&SY\n", None), (b"BZh", None)],
                         ids=["bzip2", "bzip2-empty", "bzip2-level-1", "csv-header", "level-then-text", "no-magic",
                              "BZh-alone"])
def test_compression_of_takes_bzip2_by_its_level_and_magic(data, kind):
    assert corpus.compression_of(data[:10]) == kind
    assert corpus.compression_of(data[:8]) == kind   # callers that read 8 bytes check what they have


def test_a_text_starting_bzh_is_read_as_text_by_the_corpus_reader_and_embed(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("BZh is how a bzip2 file starts.\nThis file is text.\n", encoding="utf-8")
    documents = list(corpus.read_documents([path]))
    assert [d.sentences for d in documents] == [["BZh is how a bzip2 file starts.", "This file is text."]]
    assert infer_commands.input_format(path) == ("lines", None)


def test_bzip2_csv_files_are_still_read_decompressed(tmp_path):
    path = tmp_path / "train.csv.bz2"
    path.write_bytes(bz2.compress(b"text,label\nfirst,1\nsecond,2\n"))
    examples = classify.read_examples(path, classify.Columns("text"))
    assert [(e.text_a, e.label) for e in examples] == [("first", "1"), ("second", "2")]
    empty = tmp_path / "dev.csv"
    empty.write_bytes(bz2.compress(b""))
    with pytest.raises(classify.DataError) as caught:
        classify.read_examples(empty, classify.Columns("text"))
    assert "decompress" not in str(caught.value) and "UTF-8" not in str(caught.value), caught.value
