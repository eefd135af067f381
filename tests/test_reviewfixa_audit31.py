"""Fixes of review31's findings in the loader's reads (area reviewfixa31; the findings' own tests are in
tests/test_review_audit31.py).

shards._read_at: where `os.preadv` is missing it reads with `os.pread` (no file position, as preadv), seek + read
only where neither exists; a short positional read before the file's end (a signal, a network file system) is read
on from where it stopped, not called the "changed while this run reads it" error. A shard really cut shorter is
still that error on every path.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.data.shards import read_meta, record_dtype
from albertlm.errors import UserError
from test_data_audit31 import shards  # noqa: F401  (shards: a fixture, a build of several shards)


def _stored(directory) -> np.ndarray:
    meta = read_meta(directory)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    return np.concatenate([np.fromfile(directory / s["file"], dtype=dtype) for s in meta["shards"]])


def _order(count: int) -> list[int]:
    return [int(i) for i in np.random.default_rng(0).permutation(count)] + [0, count - 1]


@pytest.mark.parametrize("call", ["preadv", "pread"])
def test_a_short_positional_read_before_the_files_end_is_read_on(shards, monkeypatch, call):  # noqa: F811
    """A read returning fewer bytes than asked, the file unchanged, was "shard ... changed while this run reads it:
    it ends before record N" (preadv), or never a positional read at all where preadv is missing (pread)."""
    from albertlm.data.loader import PretrainingDataset

    stored = _stored(shards)
    calls: list[int] = []
    if call == "preadv":
        real_preadv = os.preadv

        def short_preadv(fd, buffers, offset):   # at most 100 bytes a call (a record is several hundred)
            calls.append(1)
            return real_preadv(fd, [memoryview(buffers[0]).cast("B")[:100]], offset)

        monkeypatch.setattr(os, "preadv", short_preadv)
    else:
        real_pread = os.pread
        monkeypatch.delattr(os, "preadv", raising=False)

        def short_pread(fd, size, offset):
            calls.append(1)
            return real_pread(fd, min(size, 100), offset)

        monkeypatch.setattr(os, "pread", short_pread)
    ds = PretrainingDataset(shards)
    order = _order(len(ds))
    assert ds.records(order).tobytes() == stored[order].tobytes()
    assert len(calls) > len(order)   # every record in several reads


def test_without_preadv_or_pread_the_records_are_still_read(shards, monkeypatch):  # noqa: F811
    """Windows (no positional reads; its DataLoader workers are spawned and reopen the files): seek + read."""
    from albertlm.data.loader import PretrainingDataset

    stored = _stored(shards)
    monkeypatch.delattr(os, "preadv", raising=False)
    monkeypatch.delattr(os, "pread", raising=False)
    ds = PretrainingDataset(shards)
    order = _order(len(ds))
    assert ds.records(order).tobytes() == stored[order].tobytes()


@pytest.mark.parametrize("missing", [(), ("preadv",), ("preadv", "pread")])
def test_a_shard_cut_shorter_under_the_read_is_still_the_changed_error(shards, monkeypatch, missing):  # noqa: F811
    """The read on from a short read stops at the file's end (a read of nothing): a truncated shard is the
    one-line error on every path, not a loop."""
    from albertlm.data.loader import PretrainingDataset

    for name in missing:
        monkeypatch.delattr(os, name, raising=False)
    ds = PretrainingDataset(shards)
    ds.records([10])
    ds.check_unchanged = lambda shards: None   # the truncation lands after the check
    shard = shards / read_meta(shards)["shards"][0]["file"]
    with open(shard, "r+b") as handle:
        handle.truncate(handle.seek(0, os.SEEK_END) // 2)
    with pytest.raises(UserError, match=f"shard {shard} changed while this run reads it: its size went from"):
        ds.records([20])


def test_a_glue_predict_refused_for_a_too_long_test_file_writes_nothing(tmp_path, capsys, one_thread):
    """GLUE's dev and test files are streamed as classify's are (`FeatureWindows`, checked a window at a time as it
    is predicted): MNLI's mismatched dev set predicted, then a test row longer than the model's 64 positions at
    --max-seq-length 128 refused in one line; dev_mismatched_predictions.tsv was written before the refusal."""
    from conftest import save_tiny_pretrained
    from test_glue_audit17 import W, _glue_model
    from test_glue_audit30 import MISMATCHED, _mnli_file

    model = _glue_model(tmp_path / "best", save_tiny_pretrained(tmp_path), "mnli")
    dev = _mnli_file(tmp_path / "dev_mismatched.tsv", MISMATCHED, labelled=True)
    test = _mnli_file(tmp_path / "test_mismatched.tsv", MISMATCHED)
    lines = test.read_text(encoding="utf-8").splitlines()
    row = lines[-1].split("\t")
    row[8] = " ".join([W[0]] * 200)     # sentence1 of the last row: past the model's positions
    test.write_text("\n".join([*lines[:-1], "\t".join(row)]) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = main(["predict", "glue", "--task", "mnli", "--model", str(model), "--dev", str(dev), "--test", str(test),
                 "--out", str(out), "--max-seq-length", "128", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "its position embeddings cover 64 tokens" in err, err
    assert not out.exists() or sorted(p.name for p in out.rglob("*")) == []
