"""Fixed-length instance records in flat binary shards, memory-mapped for reading; `meta.json` is the index.

One record per instance (little-endian, no padding between fields):
  input_ids          (T,) uint16 (int32 when V >= 65536)  the UNMASKED ids, [CLS] A [SEP] B [SEP], 0-padded
  length             uint16   real tokens (the rest is padding)
  type_boundary      uint16   positions < type_boundary have token type 0, the rest of the real ones 1
  num_masked         uint16   used slots of the two arrays below
  masked_positions   (P,) uint16  sorted positions of the static mask
  masked_inputs      (P,) ids     what the model sees there ([MASK], a random id or the original id)
  label              int16    sentence label (1 = swapped / random next, 0 = in order, -100 = none)
The masked input is `input_ids` with `masked_inputs` written at `masked_positions`; the targets are
`input_ids[masked_positions]`. Keeping the unmasked ids lets the loader draw a fresh mask per epoch.

Atomicity: a shard is written as `<name>.tmp` and renamed when complete; `meta.json` (written last,
also via rename) lists the complete shards. A crashed build leaves no `meta.json` and only `.tmp` files,
which the reader never opens.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import UserError

META_FILE = "meta.json"
WORD_STARTS_FILE = "word_starts.npy"
FORMAT_VERSION = 1


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 65536 else np.dtype("<i4")


def record_dtype(max_seq_length: int, max_predictions: int, vocab_size: int) -> np.dtype:
    ids = id_dtype(vocab_size)
    return np.dtype([
        ("input_ids", ids, (max_seq_length,)),
        ("length", "<u2"),
        ("type_boundary", "<u2"),
        ("num_masked", "<u2"),
        ("masked_positions", "<u2", (max_predictions,)),
        ("masked_inputs", ids, (max_predictions,)),
        ("label", "<i2"),
    ])


class ShardWriter:
    """Appends record arrays to `shard-NNNNN.bin` files of at most `records_per_shard` records."""

    def __init__(self, directory: Path, dtype: np.dtype, records_per_shard: int, prefix: str = "shard"):
        self.directory, self.dtype, self.prefix = Path(directory), dtype, prefix
        self.records_per_shard = max(1, records_per_shard)
        self.shards: list[dict[str, Any]] = []
        self._handle = None
        self._count = 0

    def write(self, records: np.ndarray) -> None:
        assert records.dtype == self.dtype
        while records.size:
            if self._handle is None:
                self._open()
            take = min(records.size, self.records_per_shard - self._count)
            self._handle.write(records[:take].tobytes())
            self._count += take
            records = records[take:]
            if self._count == self.records_per_shard:
                self._finish()

    def close(self) -> list[dict[str, Any]]:
        if self._handle is not None:
            self._finish()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (its .tmp file); finished shards stay but no meta lists them."""
        if self._handle is not None:
            self._handle.close()
            self._tmp_path.unlink(missing_ok=True)
            self._handle = None

    def _open(self) -> None:
        name = f"{self.prefix}-{len(self.shards):05d}.bin"
        self._path = self.directory / name
        self._tmp_path = self.directory / (name + ".tmp")
        self._handle = open(self._tmp_path, "wb")
        self._count = 0

    def _finish(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        os.replace(self._tmp_path, self._path)
        self.shards.append({"file": self._path.name, "num_instances": self._count})
        self._handle = None


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _part_metas(directory: Path) -> list[Path]:
    return sorted(directory.glob("meta.part-*-of-*.json"))


def read_meta(directory: str | os.PathLike) -> dict:
    """The dataset's meta: `meta.json`, or the merged metas of a complete `--num-shards K` set of parts."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"not a data directory: {directory}")
    single = directory / META_FILE
    if single.exists():
        return json.loads(single.read_text())
    parts = _part_metas(directory)
    if not parts:
        hint = " (an unfinished build: it has .tmp files)" if any(directory.glob("*.tmp")) else ""
        raise UserError(f"no {META_FILE} in {directory}{hint}; build it with `albertlm data build`")
    metas = [json.loads(p.read_text()) for p in parts]
    total = metas[0]["num_shards"]
    found = sorted(m["shard_index"] for m in metas)
    if found != list(range(total)):
        missing = sorted(set(range(total)) - set(found))
        raise UserError(f"{directory} holds parts {found} of {total}; missing {missing}")
    return merge_metas(sorted(metas, key=lambda m: m["shard_index"]))


def merge_metas(metas: list[dict]) -> dict:
    """One meta for the union of part builds (shards in part order, counts summed)."""
    merged = dict(metas[0])
    merged["shards"] = [shard for meta in metas for shard in meta["shards"]]
    merged["num_instances"] = sum(meta["num_instances"] for meta in metas)
    merged["counts"] = _sum_counts([meta["counts"] for meta in metas])
    merged["shard_index"], merged["num_shards"] = None, len(metas)
    return merged


def _sum_counts(counts: list[dict]) -> dict:
    out: dict = {}
    for c in counts:
        for key, value in c.items():
            if isinstance(value, dict):
                out[key] = _sum_counts([out.get(key, {}), value])
            else:
                out[key] = out.get(key, 0) + value
    return out


def open_shards(directory: str | os.PathLike, meta: dict) -> list[np.ndarray]:
    """Read-only memory maps of every shard listed in meta (no data is read until indexed)."""
    directory = Path(directory)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    maps = []
    for shard in meta["shards"]:
        path = directory / shard["file"]
        expected = shard["num_instances"] * dtype.itemsize
        if not path.exists() or path.stat().st_size != expected:
            raise UserError(f"shard {path} is missing or has the wrong size (expected {expected} bytes)")
        maps.append(np.memmap(path, dtype=dtype, mode="r", shape=(shard["num_instances"],)))
    return maps
