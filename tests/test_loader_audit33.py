"""Audit 33 of the loader's host cost per batch (area loader).

1. shards.ShardMaps.read did one positional read (`os.preadv`) per record: a micro-batch of contiguous records (a
   sequential evaluation) was one system call, and its Python, per row. Now one read per run of near records
   (`shards.read_runs`), every stamp, length and damage check kept.
2. loader: `__getitems__` built a dict per row and `collate` stacked them again; now `__getitems__` returns
   `Instances` (the batch's arrays, a row's dict built only when asked for) and `collate` takes the arrays.

The batches must not change by a single bit: they are compared with the path of HEAD before this change (kept here:
`_per_record_read` is its `ShardMaps.read`, a list of per-row dicts its `__getitems__`'s result, `collate` of a list
its stacking) over many steps of a shuffled order across several shards, static and dynamic masks, DataLoader
workers 0 and 2, and a resume in the middle of an epoch.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from albertlm.data import shards as shards_module
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.data.shards import _read_at, changed_shard, read_meta, record_dtype
from albertlm.errors import UserError
from conftest import alice_documents
from test_databuild_audit29 import _build

BATCH = 12


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A T=32 build of 25-record shards (several shards; the loader's word_starts.npy for dynamic masks)."""
    root = tmp_path_factory.mktemp("loader33")
    out = root / "data"
    assert _build([alice_documents(root, 240)], out, "--records-per-shard", "25") == 0
    return out


def _stored(directory) -> np.ndarray:
    meta = read_meta(directory)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    return np.concatenate([np.fromfile(directory / s["file"], dtype=dtype) for s in meta["shards"]])


def _per_record_read(self, index, rows):
    """HEAD's `ShardMaps.read` before this change: one positional read per record, in the order asked."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    out = np.empty(rows.size, dtype=self.dtype)
    if not rows.size:
        return out
    if rows.min() < 0 or rows.max() >= self.counts[index]:
        raise IndexError(f"rows {rows.min()}..{rows.max()} out of range for shard {index}")
    handle = self._files.get(index)
    if handle is None:
        handle = self._files[index] = self._open(index)
    size, fd = self.dtype.itemsize, handle.fileno()
    view = out.view(np.uint8).reshape(rows.size, size)
    for k, row in enumerate(rows.tolist()):
        if _read_at(handle, fd, view[k], row * size) != size:
            raise UserError(changed_shard(self.directory, self.meta, index, self.stamps[index]) or "short read")
    return out


def _per_record_records(self, indices):
    """HEAD's `PretrainingDataset.records` before this change: each shard's rows by `_per_record_read`."""
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    bad = (indices < 0) | (indices >= len(self))
    if bad.any():
        raise IndexError(f"instance {int(indices[int(np.argmax(bad))])} out of range")
    shards = np.searchsorted(self._ends, indices, side="right")
    starts = np.concatenate([[0], self._ends])[shards]
    out = np.empty(indices.size, dtype=self._shards.dtype)
    for shard in np.unique(shards).tolist():
        where = np.flatnonzero(shards == shard)
        out[where] = _per_record_read(self._shards, shard, indices[where] - starts[where])
    return out


def _reference_batches(directory, dynamic: bool, plan: list[list]) -> list[dict]:
    """The batches of `plan` (micro-batches of dataset keys) by the path before this change."""
    mp = pytest.MonkeyPatch()
    mp.setattr(PretrainingDataset, "records", _per_record_records)
    try:
        ds = PretrainingDataset(directory, dynamic_masking=dynamic, seed=7)
        return [collate(list(ds.__getitems__(keys))) for keys in plan]   # per-row dicts, stacked
    finally:
        mp.undo()


def _same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and torch.equal(got[k], want[k])
        for k in want)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_training_batches_are_bit_identical_to_the_per_record_path(built, dynamic, workers, one_thread):
    """A pure check (passes before and after): StepData's batches, as training reads them (shuffled, 3 epochs,
    micro-batches across several shards), from step 0 and resumed mid-epoch, are the old path's to the bit."""
    from albertlm.training.loop import StepData, shuffled_batches

    ds = PretrainingDataset(built, dynamic_masking=dynamic, seed=7)
    assert len(ds.meta["shards"]) >= 4

    def data():
        return StepData(ds, collate, shuffled_batches(len(ds), BATCH, 3), micro_batches=2, num_workers=workers,
                        epoch_keys=dynamic)

    per_epoch = data().steps_per_epoch
    steps = 3 * per_epoch
    plan = [part for parts in _take(data().plan(0), steps) for part in parts]
    want = _reference_batches(built, dynamic, plan)
    got = [b for micro in _take(data().steps(0), steps) for b in micro]
    assert len(got) == len(want) == 2 * steps
    assert all(_same(g, w) for g, w in zip(got, want))
    start = per_epoch + per_epoch // 2       # a resume in the middle of the second epoch
    resumed = [b for micro in _take(data().steps(start), steps - start) for b in micro]
    assert all(_same(g, w) for g, w in zip(resumed, want[2 * start:]))


def _take(iterator, count: int) -> list:
    return [next(iterator) for _ in range(count)]


def test_odd_micro_batches_are_bit_identical_and_the_rows_lazy(built):
    """Sequential, reversed, repeated and out-of-range-shaped key lists; a row of `__getitems__` is `ds[key]`; its
    slice a list of rows; past its end an IndexError."""
    n = len(PretrainingDataset(built))
    plans = [list(range(n)), list(range(n - 1, -1, -1)), [5, 5, 5, 30, 4, 6], list(range(0, n, 2)), [n - 1],
             list(range(20, 31)), [int(i) for i in np.random.default_rng(0).permutation(n)]]
    for dynamic in (False, True):
        ds = PretrainingDataset(built, dynamic_masking=dynamic, seed=7)
        keys = [[(1, i) for i in p] if dynamic else p for p in plans]
        want = _reference_batches(built, dynamic, keys)
        for k, w in zip(keys, want):
            items = ds.__getitems__(k)
            assert _same(collate(items), w) and _same(collate(list(items)), w)
            assert len(items) == len(k)
            for key, row in zip(k[:3], items):
                one = ds[key]
                assert one.keys() == row.keys() and all(np.array_equal(one[f], row[f]) for f in one)
            backwards = [r["input_ids"].tolist() for r in list(items)[::-1]]
            assert [r["input_ids"].tolist() for r in items[::-1]] == backwards
            with pytest.raises(IndexError):
                items[len(k)]


def _count_reads(monkeypatch) -> list:
    calls: list = []
    real = os.preadv

    def counted(fd, buffers, offset):
        calls.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", counted)
    return calls


@pytest.mark.skipif(not hasattr(os, "preadv"), reason="counts os.preadv calls")
def test_contiguous_records_are_one_read_a_shard(built, monkeypatch):
    """25 records of one shard were 25 preadv calls, a 50-record sequential micro-batch over 3 shards 50; now one
    read per shard."""
    stored = _stored(built)
    ds = PretrainingDataset(built)
    calls = _count_reads(monkeypatch)
    assert ds.records(list(range(25, 50))).tobytes() == stored[25:50].tobytes()
    assert len(calls) == 1, calls
    calls.clear()
    batch = collate(ds.__getitems__(list(range(10, 60))))       # shards 0, 1 and 2
    assert len(calls) == 3, calls
    assert batch["input_ids"].shape[0] == 50
    calls.clear()
    order = [int(i) for i in np.random.default_rng(1).permutation(range(50, 75))]   # one shard, shuffled
    assert ds.records(order).tobytes() == stored[order].tobytes()
    assert len(calls) == 1, calls


@pytest.mark.skipif(not hasattr(os, "preadv"), reason="counts os.preadv calls")
def test_near_records_share_a_read_far_ones_do_not_and_a_read_is_bounded(built, monkeypatch):
    stored = _stored(built)
    size = stored.dtype.itemsize
    ds = PretrainingDataset(built)
    calls = _count_reads(monkeypatch)
    rows = [0, 3, 24, 3, 12]                                    # near (within NEAR_BYTES), a repeat, out of order
    assert ds.records(rows).tobytes() == stored[rows].tobytes() and len(calls) == 1
    monkeypatch.setattr(shards_module, "NEAR_BYTES", 2 * size)  # at most 2 records between
    calls.clear()
    assert ds.records(rows).tobytes() == stored[rows].tobytes()
    assert sorted(calls) == [0, 12 * size, 24 * size], calls   # {0, 3}, {12}, {24}
    monkeypatch.setattr(shards_module, "RUN_BYTES", 10 * size)  # a read of at most 10 records
    calls.clear()
    assert ds.records(list(range(25))).tobytes() == stored[:25].tobytes()
    assert sorted(calls) == [0, 10 * size, 20 * size], calls


def test_a_shard_cut_shorter_under_a_grouped_read_is_still_the_changed_error(built, tmp_path):
    import shutil

    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    ds = PretrainingDataset(copy)
    ds.records([1])
    ds.check_unchanged = lambda shards: None   # the truncation lands after the check
    shard = copy / read_meta(copy)["shards"][0]["file"]
    with open(shard, "r+b") as handle:
        handle.truncate(handle.seek(0, os.SEEK_END) // 2)
    with pytest.raises(UserError, match=f"shard {shard} changed while this run reads it: its size went from"):
        ds.records(list(range(0, 25)))
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(shards_module, "changed_shard", lambda *a: None)   # the stamp alike: the read's own word
    try:
        with pytest.raises(UserError, match=r"it ends before record 12\b"):
            ds.records(list(range(5, 20)))
    finally:
        monkeypatch.undo()


def test_a_micro_batch_is_collated_from_its_arrays_not_restacked_from_rows(built, monkeypatch):
    """`collate` of `__getitems__`'s micro-batch stacked B per-row dicts back into the arrays they were cut from
    (np.stack per key); now it takes the arrays. A list of instances is still stacked (bit-identical above)."""
    from albertlm.data import loader

    ds = PretrainingDataset(built)
    want = collate(list(ds.__getitems__(list(range(8, 40)))))

    class NoStack:
        def __getattr__(self, name):
            if name == "stack":
                raise AssertionError("collate stacked per-row arrays")
            return getattr(np, name)

    monkeypatch.setattr(loader, "np", NoStack())
    assert _same(collate(ds.__getitems__(list(range(8, 40)))), want)
