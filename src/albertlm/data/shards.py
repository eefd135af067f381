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
from typing import Any, Sequence

import numpy as np

from albertlm.errors import UserError, read_json_object

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
            try:
                self._handle.close()
            except OSError:           # flushing the buffer fails again on a full disk
                pass
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
    """`path` replaced whole, UTF-8 whatever the locale; the temporary file is on disk before the rename (a crash
    right after it leaves the new file or the old one, never an empty one)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _part_metas(directory: Path) -> list[Path]:
    return sorted(directory.glob("meta.part-*-of-*.json"))


def part_meta_name(shard_index: int, num_shards: int) -> str:
    return f"meta.part-{shard_index:05d}-of-{num_shards:05d}.json"


def read_meta(directory: str | os.PathLike) -> dict:
    """The dataset's meta: `meta.json`, or the merged metas of a complete `--num-shards K` set of parts (a
    directory holding both is refused: the parts were ignored without a word).
    Each file is checked (`check_meta`): damage is a UserError naming the file and the field; so are parts
    built with different settings (`settings_difference`)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"not a data directory: {directory}")
    single = directory / META_FILE
    parts = _part_metas(directory)
    if single.exists() and parts:     # never written so by a build (each replaces the other): copied together
        more = ", ..." if len(parts) > 1 else ""
        raise UserError(f"{directory} holds two builds: {META_FILE} (a single build) and {len(parts)} part meta(s) "
                        f"({parts[0].name}{more}; copied together by hand?): keep one: remove "
                        f"{META_FILE} and shard-*.bin, or meta.part-*.json and part-*-shard-*.bin (or rebuild the "
                        "data into a new directory)")
    if single.exists():
        return _read_meta_file(single)
    if not parts:
        staging = sorted(directory.glob(".building-*"))
        hint = (f" (an unfinished or stopped build left {staging[0].name}; run the build again)" if staging
                else " (an unfinished build: it has .tmp files)" if any(directory.glob("*.tmp")) else "")
        raise UserError(f"no {META_FILE} in {directory}{hint}; build it with `albertlm data build`")
    metas = [_read_meta_file(p, part=True) for p in parts]
    for path, meta in zip(parts, metas):
        if path.name != part_meta_name(meta["shard_index"], meta["num_shards"]):
            raise UserError(f"{path}: it holds part {meta['shard_index']} of {meta['num_shards']}, unlike its "
                            "name (a renamed file? rebuild the data)")
        difference = settings_difference(meta, metas[0])
        if difference:
            advice = CORPUS_ADVICE if difference.startswith("corpus ") else "build every part with the same settings"
            raise UserError(f"{path}: built with other settings than {parts[0].name} ({difference}); {advice}")
    total = metas[0]["num_shards"]
    found = sorted(m["shard_index"] for m in metas)
    if found != list(range(total)):
        missing = sorted(set(range(total)) - set(found))
        first = missing[0]
        raise UserError(f"{directory} holds parts {found} of {total}; missing {missing}: build "
                        f"{'each' if len(missing) > 1 else 'it'} there (--num-shards {total} --shard-index {first}"
                        f"{', ...' if len(missing) > 1 else ''}) or copy its files ({part_meta_name(first, total)} and "
                        f"part-{first:05d}-of-{total:05d}-shard-*.bin) from the machine that built it")
    return merge_metas(sorted(metas, key=lambda m: m["shard_index"]))


# what must be equal in the parts of one build (`inputs` is left out: each machine may mount them elsewhere)
PART_SETTINGS = ("format_version", "num_shards", "max_seq_length", "max_predictions_per_seq", "sentence_task",
                 "masking", "short_seq_prob", "dupe_factor", "seed", "chunk_chars")
TOKENIZER_IDENTITY = ("kind", "vocab_size", "vocab_sha256", "pad_id", "unk_id", "cls_id", "sep_id", "mask_id")


def tokenizer_difference(meta: dict, other: dict) -> str | None:
    """How the tokenizers recorded in two metas differ ("tokenizer vocab_size 30000 vs 99"), or None.
    Only what both record is compared (older builds have no vocab_sha256)."""
    mine, theirs = meta.get("tokenizer") or {}, other.get("tokenizer") or {}
    for key in TOKENIZER_IDENTITY:
        if key in mine and key in theirs and mine[key] != theirs[key]:
            what = "vocabulary (vocab_sha256)" if key == "vocab_sha256" else key
            return f"tokenizer {what} {_short(mine[key])} vs {_short(theirs[key])}, tokenizers " \
                   f"{mine.get('path', '?')} vs {theirs.get('path', '?')}"
    return None


# what every part counts of the corpus it read: each reads the whole corpus, so these are the same in every part
# of one build; a part that differs read other text (each machine given its own share of the files, or another
# copy of the corpus), and the union of the parts would silently miss most of the text
CORPUS_IDENTITY = ("files", "documents", "sentences", "chars")


def settings_difference(meta: dict, other: dict) -> str | None:
    """The first build setting in which two part metas differ, as "NAME A vs B" (for an object such as
    `masking`, its first differing field: "masking.mode token vs ngram"), or None. Then the tokenizer
    (`tokenizer_difference`), then the corpus the parts read (`corpus_difference`)."""
    for key in PART_SETTINGS:
        default = FORMAT_VERSION if key == "format_version" else None
        mine, theirs = meta.get(key, default), other.get(key, default)
        if mine != theirs:
            if isinstance(mine, dict) and isinstance(theirs, dict):
                field = next(k for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k))
                return f"{key}.{field} {_short(mine.get(field))} vs {_short(theirs.get(field))}"
            return f"{key} {_short(mine)} vs {_short(theirs)}"
    return tokenizer_difference(meta, other) or corpus_difference(meta, other)


def corpus_difference(meta: dict, other: dict) -> str | None:
    """How the corpora two parts read differ ("corpus documents 1 vs 2"), or None. Every part of
    a `--num-shards K` build reads the whole corpus and keeps its own chunks, so the counts of what was read
    (`CORPUS_IDENTITY`) are the same in all of them; only what both metas record is compared."""
    mine = (meta.get("counts") or {}).get("corpus") or {}
    theirs = (other.get("counts") or {}).get("corpus") or {}
    for key in CORPUS_IDENTITY:
        if key in mine and key in theirs and mine[key] != theirs[key]:
            return f"corpus {key} {_short(mine[key])} vs {_short(theirs[key])}"
    return None


CORPUS_ADVICE = ("every part reads the whole corpus and keeps its own share of it: give every machine the same "
                 "--input (not a share of the files each), or the parts together miss most of the text")


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _read_meta_file(path: Path, part: bool = False) -> dict:
    meta = read_json_object(path, "a data build's meta.json", hint="rebuild the data")
    check_meta(meta, path, part)
    return meta


def check_meta(meta, source: object, part: bool = False) -> None:
    """The fields readers rely on, with their types and ranges, and their consistency (shard counts add up
    to num_instances; shard files are plain names in the data directory). A UserError names `source`."""
    def fail(what: str):
        raise UserError(f"{source}: {what} (a damaged or hand-edited meta file? rebuild the data)")

    def integer(container: dict, key: str, low: int, high: int | None = None, where: str = "") -> int:
        value = container.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            fail(f"{where}{key} is {value!r}, expected an integer {bound}")
        return value

    if not isinstance(meta, dict):
        fail(f"expected a JSON object, got {type(meta).__name__}")
    version = meta.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        fail(f"format_version {version!r}: this albertlm reads format {FORMAT_VERSION}")
    length = integer(meta, "max_seq_length", 1, 65535)  # lengths and positions are stored as uint16
    integer(meta, "max_predictions_per_seq", 0, length)
    tokenizer = meta.get("tokenizer")
    if not isinstance(tokenizer, dict):
        fail(f"tokenizer is {tokenizer!r}, expected an object with vocab_size and the special ids")
    vocab = integer(tokenizer, "vocab_size", 1, 2**31 - 1, "tokenizer.")
    for key in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"):
        if key in tokenizer:
            integer(tokenizer, key, 0, vocab - 1, "tokenizer.")
    for key in ("masking", "counts"):
        if key in meta and not isinstance(meta[key], dict):
            fail(f"{key} is {meta[key]!r}, expected an object")
    shards = meta.get("shards")
    if not isinstance(shards, list):
        fail(f"shards is {shards!r}, expected a list of {{file, num_instances}}")
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict):
            fail(f"shards[{i}] is {shard!r}, expected {{file, num_instances}}")
        name = shard.get("file")
        if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
            fail(f"shards[{i}].file is {name!r}, expected a file name in the data directory")
        integer(shard, "num_instances", 0, where=f"shards[{i}].")
    total = sum(shard["num_instances"] for shard in shards)
    if "num_instances" in meta and integer(meta, "num_instances", 0) != total:
        fail(f"num_instances is {meta['num_instances']}, but its shards hold {total}")
    if part:
        shards_total = integer(meta, "num_shards", 1)
        integer(meta, "shard_index", 0, shards_total - 1)


def merge_metas(metas: list[dict]) -> dict:
    """One meta for the union of part builds (shards in part order). The instance and token counts are
    summed over the parts (each part counts the chunks it built); the corpus counts are the first part's,
    since every part reads the whole corpus (summing them would count each document K times)."""
    merged = dict(metas[0])
    merged["shards"] = [shard for meta in metas for shard in meta["shards"]]
    merged["num_instances"] = sum(meta["num_instances"] for meta in metas)
    counts = [meta.get("counts") or {} for meta in metas]
    merged["counts"] = _sum_counts([{k: v for k, v in c.items() if k != "corpus"} for c in counts])
    if "corpus" in counts[0]:
        merged["counts"]["corpus"] = counts[0]["corpus"]
    merged["shard_index"], merged["num_shards"] = None, len(metas)
    return merged


def _sum_counts(counts: list[dict]) -> dict:
    """Numbers summed key by key (nested objects too); any other value (a name, an example) is the first."""
    out: dict = {}
    for c in counts:
        for key, value in c.items():
            if isinstance(value, dict):
                out[key] = _sum_counts([out.get(key, {}), value])
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and \
                    isinstance(out.get(key, 0), (int, float)):
                out[key] = out.get(key, 0) + value
            else:
                out.setdefault(key, value)
    return out


def damaged_rows(records: np.ndarray, max_seq_length: int, max_predictions: int, vocab_size: int = 0,
                 static_masks: bool = True) -> np.ndarray:
    """(n,) bool: the records no build writes (a damaged or overwritten shard): a length outside [1, T],
    token ids outside the vocabulary (when `vocab_size` is known), and with `static_masks` a masked count
    above P or used masked slots with a position outside [0, T) or an id outside the vocabulary."""
    T, P = max_seq_length, max_predictions
    lengths = records["length"].astype(np.int64)
    bad = (lengths < 1) | (lengths > T)
    if vocab_size:
        ids = records["input_ids"].astype(np.int64)
        bad |= ((ids < 0) | (ids >= vocab_size)).any(1)
    if static_masks:
        counts = records["num_masked"].astype(np.int64)
        bad |= (counts < 0) | (counts > P)
        used = np.arange(P) < counts[:, None]
        positions = records["masked_positions"][:, :P].astype(np.int64)
        bad |= (used & ((positions < 0) | (positions >= T))).any(1)
        if vocab_size:
            masked = records["masked_inputs"][:, :P].astype(np.int64)
            bad |= (used & ((masked < 0) | (masked >= vocab_size))).any(1)
    return bad


def damage_message(directory, index: int, shard: int, max_seq_length: int, max_predictions: int,
                   vocab_size: int = 0) -> str:
    """The one-line error for a damaged record (see `damaged_rows`). `shard` is its place in the meta's list;
    the file is named too (in a `--num-shards` build shard 5 may be `part-00001-of-00002-shard-00000.bin`, and
    there is no `shard-00005.bin` to look at)."""
    try:
        name = read_meta(directory)["shards"][shard]["file"]
    except (UserError, OSError, IndexError, KeyError, TypeError):
        name = None
    where = f" (file {name})" if name else ""
    return (f"{directory}: instance {index} (in shard {shard}) is damaged{where}: values no build writes (length, "
            f"masked slots or token ids out of range for max_seq_length {max_seq_length}, {max_predictions} masked "
            f"slots{f', {vocab_size} tokens' if vocab_size else ''}); rebuild the data with `albertlm data build`")


MAX_OPEN_SHARDS = 64   # the fewest memory maps a reader keeps at once (`ShardMaps`, `map_budget`); each holds a descriptor


def open_shards(directory: str | os.PathLike, meta: dict,
                stamps: list[tuple[int, int, int, int]] | None = None) -> "ShardMaps":
    """Read-only memory maps of every shard listed in meta, checked now (missing, wrong size) and mapped when first
    indexed (`ShardMaps`: as many at once as `map_budget` allows). A shard mapped later must still be the file found now,
    or the one of `stamps` (`shard_stamps`: where the data was opened in another process)."""
    directory = Path(directory)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    found = []
    for shard in meta["shards"]:
        path = directory / shard["file"]
        expected = shard["num_instances"] * dtype.itemsize
        if not path.is_file():
            raise UserError(f"shard {path} is missing (listed in the build's meta file): copy it along with the "
                            "meta, or rebuild the data with `albertlm data build`")
        found.append(_stamp(path))
        size = found[-1][0]
        if size != expected:
            raise UserError(f"shard {path} has the wrong size: {size} bytes, expected {expected} ("
                            f"{shard['num_instances']} records of {dtype.itemsize} bytes; cut short or changed in a "
                            "copy?): copy it again, or rebuild the data with `albertlm data build`")
    return ShardMaps(directory, meta, dtype, found if stamps is None else stamps)


def map_budget(shards: int) -> int:
    """How many shard maps a reader keeps at once (`ShardMaps.capacity`): every shard where the descriptor limit
    leaves room, after raising this process's soft limit (`ulimit -n`, often 1024) toward its hard one as far as two
    descriptors a shard (what Go's runtime and many servers do at start-up; the hard limit is never passed); else half
    the soft limit, and never fewer than MAX_OPEN_SHARDS. The training sampler reads the whole data in a random
    order: with fewer maps than shards most reads mapped a shard again (2.7x slower reads over 534 shards with 64)."""
    try:
        import resource
    except ImportError:     # no POSIX limits (Windows): the fixed cache
        return min(shards, MAX_OPEN_SHARDS) if shards else MAX_OPEN_SHARDS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * shards + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):
                pass
    if soft == resource.RLIM_INFINITY:
        return max(shards, MAX_OPEN_SHARDS)
    return max(MAX_OPEN_SHARDS, min(shards, soft // 2))


class ShardMaps:
    """The shards of a build as a sequence of read-only memory maps (np.memmap of its records), each mapped when
    first indexed and at most `map_budget` kept (every shard where the descriptor limit allows): a map holds a file descriptor (Python's mmap keeps a copy of
    it), so mapping every shard at once failed with `OSError: [Errno 24] Too many open files` once a build had more
    shards than the descriptor limit (`ulimit -n`, often 1024: `--records-per-shard`, many `--num-shards` parts or a
    large corpus), in the loader as in `data stats`. A map dropped from the cache closes when no record read from
    it is left. A shard mapped later than the data was opened must be the file stamped then (`stamps`), else it is
    a UserError (`changed_shard`'s), never another file's records under the same meta."""

    def __init__(self, directory: Path, meta: dict, dtype: np.dtype, stamps: list[tuple[int, int, int, int]]):
        from collections import OrderedDict

        self.directory, self.meta, self.dtype, self.stamps = directory, meta, dtype, stamps
        self.counts = [int(shard["num_instances"]) for shard in meta["shards"]]
        self._maps: OrderedDict[int, np.ndarray] = OrderedDict()
        self._files: OrderedDict[int, object] = OrderedDict()   # `read`'s open shards (raw files), as the maps
        self.capacity = map_budget(len(self.counts))

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index: int) -> np.ndarray:
        index = range(len(self))[index]
        found = self._maps.get(index)
        if found is not None:
            self._maps.move_to_end(index)
            return found
        found = self._map(index)
        self._maps[index] = found
        while len(self._maps) > self.capacity:
            self._maps.popitem(last=False)
        return found

    def read(self, index: int, rows: Sequence[int]) -> np.ndarray:
        """Records `rows` of shard `index` (places in the shard, in any order, repeats allowed): `read_many` of one
        shard."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        return self.read_many(np.full(rows.size, index, dtype=np.int64), rows)

    def read_many(self, shards: Sequence[int], rows: Sequence[int]) -> np.ndarray:
        """Record `rows[k]` of shard `shards[k]` for every k (in that order, repeats allowed), copied out of the files
        with positional reads (`_read_at`: `os.preadv`, or `os.pread` where there is none), not through a memory map:
        a shard cut shorter between the loader's check of its stamp and the read (a copy begun over it, `rsync
        --inplace`) is a short read here, the one-line "changed" error, where a map's read past the new end killed
        the process with SIGBUS. One read per run of near records of a shard (`read_runs`: at most `NEAR_BYTES` of
        other records apart, at most `RUN_BYTES` a read), not one per record: a micro-batch of a sequential
        evaluation is one read a shard, where it was one system call (and its Python) per row. Opened files are kept
        as the maps are (at most `capacity`, the least recently read closed first); a file is checked against its
        stamp when it is opened."""
        shards = np.asarray(shards, dtype=np.int64).reshape(-1)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty(rows.size, dtype=self.dtype)
        if not rows.size:
            return out
        if shards.min() < 0 or shards.max() >= len(self.counts):
            raise IndexError(f"shard {int(shards[np.argmax((shards < 0) | (shards >= len(self.counts)))])} out of "
                             f"range for {len(self.counts)} shards")
        counts = np.asarray(self.counts, dtype=np.int64)[shards]
        bad = (rows < 0) | (rows >= counts)
        if bad.any():
            k = int(np.argmax(bad))
            raise IndexError(f"row {int(rows[k])} out of range for shard {int(shards[k])} of {int(counts[k])} "
                             "records")
        size = self.dtype.itemsize
        view = out.view(np.uint8).reshape(rows.size, size)
        order, starts, ends = read_runs(shards, rows, size)
        ordered = rows[order]
        firsts, counts = ordered[starts], ends - starts
        spans = ordered[ends - 1] - firsts + 1
        # a run read straight into the batch's rows: no record between or repeated, asked for in the file's order
        breaks = np.concatenate([[0], np.cumsum(np.diff(order) != 1)])
        direct = (spans == counts) & (breaks[ends - 1] == breaks[starts])
        for a, b, index, first, span, straight, at in zip(
                starts.tolist(), ends.tolist(), shards[order[starts]].tolist(), firsts.tolist(), spans.tolist(),
                direct.tolist(), order[starts].tolist()):
            handle = self._handle(index)
            if straight:
                got = _read_at(handle, handle.fileno(), view[at:at + span].reshape(-1), first * size)
            else:
                buffer = np.empty(span * size, dtype=np.uint8)
                got = _read_at(handle, handle.fileno(), buffer, first * size)
                if got == buffer.size:
                    view[order[a:b]] = buffer.reshape(span, size)[ordered[a:b] - first]
            if got != span * size:
                path = self.directory / self.meta["shards"][index]["file"]
                raise UserError(changed_shard(self.directory, self.meta, index, self.stamps[index])
                                or f"shard {path} changed while this run reads it: it ends before record "
                                   f"{first + got // size}")
        return out

    def _handle(self, index: int):
        """Shard `index`'s open file (`read_many`'s), opened and checked (`_open`) when not kept."""
        handle = self._files.get(index)
        if handle is None:
            handle = self._open(index)
            self._files[index] = handle
            while len(self._files) > self.capacity:
                self._files.popitem(last=False)   # (closed as its last reference goes)
        else:
            self._files.move_to_end(index)
        return handle

    def close(self) -> None:
        """Drop the maps and close the files (`__del__` does it when the object goes)."""
        self._maps.clear()
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __del__(self) -> None:
        # closed here, not left to each file's own finaliser: that one warns "unclosed file" (a ResourceWarning,
        # which pytest.warns and -W error count) for every shard read
        try:
            self.close()
        except Exception:       # an interpreter shutting down may have torn down what close() uses
            pass

    def _open(self, index: int):
        """Shard `index` opened for reading, checked against its stamp (a UserError when it is another file)."""
        path = self.directory / self.meta["shards"][index]["file"]
        handle = open(path, "rb", buffering=0)
        try:
            if _stamp_of(os.fstat(handle.fileno())) != tuple(self.stamps[index]):
                raise UserError(changed_shard(self.directory, self.meta, index, self.stamps[index])
                                or f"shard {path} changed since the data was opened; start over on the new data")
        except BaseException:
            handle.close()
            raise
        return handle

    def _map(self, index: int) -> np.ndarray:
        if not self.counts[index]:  # mmap refuses empty files
            return np.zeros(0, dtype=self.dtype)
        with self._open(index) as handle:
            return np.memmap(handle, dtype=self.dtype, mode="r", shape=(self.counts[index],))


NEAR_BYTES = 8192        # records at most this many bytes of other records apart are read together (`read_runs`)
RUN_BYTES = 8 << 20      # the most bytes one read of `ShardMaps.read` asks for


def read_runs(shards: np.ndarray, rows: np.ndarray, record_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """How `ShardMaps.read_many` reads record `rows[k]` of shard `shards[k]`: (order, starts, ends), where `order`
    sorts the records by shard, then row, and run j, `order[starts[j]:ends[j]]`, is read with one positional read
    of its shard, from the run's first record to its last: records of a shard at most `NEAR_BYTES` of other records
    apart share a run (the bytes between are read too, into a buffer dropped after: cheaper than another system
    call), and no run spans more than `RUN_BYTES`."""
    order = np.lexsort((rows, shards))
    ordered = rows[order]
    gap = NEAR_BYTES // record_size + 1
    block = max(1, RUN_BYTES // record_size)
    cut = np.flatnonzero((np.diff(shards[order]) != 0) | (np.diff(ordered) > gap)
                         | (np.diff(ordered // block) != 0)) + 1
    return order, np.concatenate([[0], cut]), np.concatenate([cut, [rows.size]])


def _read_at(handle, fd: int, buffer: np.ndarray, offset: int) -> int:
    """Read len(buffer) bytes at `offset` of the file into `buffer` (a contiguous uint8 array); the bytes read
    (fewer only at the file's end). A positional read: `os.preadv` into the buffer, or `os.pread` copied into it
    where there is no preadv (macOS before 11, NetBSD, ...): neither uses the file position, so processes sharing
    the descriptor after a fork (DataLoader workers) do not disturb each other. Seek and read only where there is
    neither (Windows, whose workers are spawned and reopen the files). A short read before the file's end (a
    signal, a network file system) is read on from where it stopped; only a read of nothing ends it."""
    size, done = len(buffer), 0
    while done < size:
        if hasattr(os, "preadv"):
            got = os.preadv(fd, [buffer[done:]], offset + done)
        elif hasattr(os, "pread"):
            data = os.pread(fd, size - done, offset + done)
            got = len(data)
            buffer[done:done + got] = np.frombuffer(data, dtype=np.uint8)
        else:
            handle.seek(offset + done)
            got = handle.readinto(buffer[done:]) or 0
        if not got:   # the file's end
            break
        done += got
    return done


def shard_stamps(directory: str | os.PathLike, meta: dict) -> list[tuple[int, int, int, int]]:
    """(size, mtime in ns, inode, device) of every shard listed in meta, as opened (`open_shards`): what
    `changed_shard` compares them with later."""
    directory = Path(directory)
    return [_stamp(directory / shard["file"]) for shard in meta["shards"]]


def _stamp(path: Path) -> tuple[int, int, int, int]:
    return _stamp_of(path.stat())


def _stamp_of(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def unchanged(path: Path, stamp: tuple[int, int, int, int]) -> bool:
    """Whether the file at `path` is still the one stamped (`shard_stamps`): `changed_shard`'s test without its
    message, for a path the caller keeps (the loader checks every shard a micro-batch reads)."""
    try:
        return _stamp(path) == stamp
    except OSError:
        return False


def changed_shard(directory: str | os.PathLike, meta: dict, index: int, stamp: tuple[int, int, int, int]) -> str | None:
    """The one-line error for shard `index` when its file is no longer the one stamped (`shard_stamps`) when the
    data was opened, or None. A shard rebuilt or copied over while a run reads it through its memory map
    (`albertlm data build --overwrite` into the run's --data, `cp` or `rsync --inplace` of another copy) is other
    data under the run's position, and a file cut shorter under a memory map ends the process with SIGBUS, without a
    word, at the first read past its new end: checked before the shard is read."""
    path = Path(directory) / meta["shards"][index]["file"]
    try:
        now = _stamp(path)
    except OSError as exc:
        what = f"it cannot be read any more ({exc.strerror or exc})"
    else:
        if now == stamp:
            return None
        if now[0] != stamp[0]:
            what = f"its size went from {stamp[0]} to {now[0]} bytes"
        elif now[2:] != stamp[2:]:
            what = "another file took its place (rebuilt?)"
        else:
            what = "it was written to (its modification time changed)"
    return (f"shard {path} changed while this run reads it: {what}; the data was rebuilt or copied over in place "
            "(reading a file changed under its memory map can kill the process with SIGBUS), so the run stopped: put "
            "the data back as it was and `--resume` (build new data into another directory), or start over on the new "
            "data")
