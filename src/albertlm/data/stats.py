"""Summaries of a built data directory (`albertlm data stats`) and readable instances (`albertlm data inspect`).

Statistics stream over the shards block by block, read into one reused buffer (`shard_blocks`: plain reads, not a
memory map), so they run in bounded memory on any size of data."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from albertlm.data.shards import changed_shard, damage_message, damaged_rows, open_shards, read_meta
from albertlm.errors import UserError

# records per block: 8192 keep a block's arrays (an int64 copy of its ids among them) to a few MB at T=128 (33 MB of
# ids at T=512); 65536 made 67 MB of ids at T=128, and larger blocks were no faster
BLOCK = 8192
MAX_RUN_BIN = 6  # runs of 6 or more tokens share the last bin


@dataclass
class DataStats:
    num_instances: int = 0
    num_tokens: int = 0
    num_masked: int = 0
    num_short: int = 0  # length < max_seq_length
    num_unk: int = 0    # real tokens that are the tokenizer's unknown token (dupe copies included)
    replaced_mask: int = 0
    replaced_random: int = 0
    replaced_kept: int = 0
    labels: Counter = field(default_factory=Counter)
    lengths: Counter = field(default_factory=Counter)  # bin start -> count
    masked_runs: Counter = field(default_factory=Counter)  # contiguous masked run length -> count

    def as_dict(self, max_seq_length: int) -> dict:
        n, runs = max(self.num_instances, 1), max(sum(self.masked_runs.values()), 1)
        masked = max(self.num_masked, 1)
        return {
            "num_instances": self.num_instances,
            "num_tokens": self.num_tokens,
            "mean_length": self.num_tokens / n,
            "short_fraction": self.num_short / n,
            "mask_rate": self.num_masked / max(self.num_tokens, 1),
            "unk_tokens": self.num_unk,
            "unk_rate": self.num_unk / max(self.num_tokens, 1),
            "masked_per_instance": self.num_masked / n,
            "replacement": {"mask": self.replaced_mask / masked, "random": self.replaced_random / masked,
                            "kept": self.replaced_kept / masked},
            "labels": {str(k): v for k, v in sorted(self.labels.items())},
            "length_histogram": {_bin_name(k, max_seq_length): v for k, v in sorted(self.lengths.items())},
            "masked_run_lengths": {(str(k) if k < MAX_RUN_BIN else f"{k}+"): v / runs
                                   for k, v in sorted(self.masked_runs.items())},
        }


def _bin_width(max_seq_length: int) -> int:
    return max(1, max_seq_length // 8)


def _bin_name(start: int, max_seq_length: int) -> str:
    if start >= max_seq_length:
        return str(max_seq_length)
    return f"{start}-{min(start + _bin_width(max_seq_length), max_seq_length) - 1}"


def compute_stats(directory) -> tuple[dict, DataStats]:
    """The build's meta and its statistics; a record no build writes (a damaged shard) is a UserError naming
    the instance and its shard (`shards.damaged_rows`)."""
    meta = read_meta(directory)
    stats = DataStats()
    tokenizer = meta["tokenizer"]
    mask_id, unk_id, vocab = tokenizer.get("mask_id"), tokenizer.get("unk_id"), tokenizer["vocab_size"]
    T, P = meta["max_seq_length"], meta["max_predictions_per_seq"]
    for number, first, block in shard_blocks(directory, meta):
        bad = damaged_rows(block, T, P, vocab)
        if bad.any():
            raise UserError(damage_message(directory, first + int(np.argmax(bad)), number, T, P, vocab))
        _add_block(stats, block, T, mask_id, unk_id)
    return meta, stats


def shard_blocks(directory, meta: dict, block: int | None = None):
    """(shard number, index of the block's first instance in the whole build, records) for every block of at most
    `block` records of every shard, in order, read with plain reads into one buffer that each block reuses (the
    records are good until the next block is asked for). A memory map of the shards, which `data stats` read
    through, kept every page it had touched in the process's resident memory until the map was dropped: its peak
    RSS grew with the shard (140 MB for a 19 MB shard, 334 MB for a 203 MB one). The shards
    are checked as the readers check them (`open_shards`: missing, wrong size), and a shard changed since then
    (rebuilt, copied over, cut shorter: `changed_shard`) is a one-line error, never another file's records."""
    directory, block = os.fspath(directory), block or BLOCK
    maps = open_shards(directory, meta)   # checks every listed shard and stamps it; no shard is mapped here
    buffer = np.empty(max(1, min(block, max(maps.counts, default=1))), dtype=maps.dtype)
    first = 0
    for number, count in enumerate(maps.counts):
        path = os.path.join(directory, meta["shards"][number]["file"])
        changed = (f"shard {path} changed while it was read (rebuilt or copied over?); read the data again once it "
                   "is complete")
        try:
            handle = open(path, "rb")
        except OSError as exc:
            raise UserError(f"shard {path} cannot be read any more ({exc.strerror or exc}): moved or deleted since the "
                            "data was opened?") from None
        with handle:
            if changed_shard(directory, meta, number, maps.stamps[number]) is not None:
                raise UserError(changed)
            for start in range(0, count, block):
                records = buffer[:min(block, count - start)]
                if handle.readinto(records.view(np.uint8)) != records.nbytes:   # cut shorter since it was checked
                    raise UserError(changed)
                yield number, first + start, records
        first += count


def _add_block(stats: DataStats, block: np.ndarray, max_seq_length: int, mask_id: int | None,
               unk_id: int | None = None) -> None:
    lengths = block["length"].astype(np.int64)
    stats.num_instances += block.size
    stats.num_tokens += int(lengths.sum())
    if unk_id is not None:
        real = np.arange(block["input_ids"].shape[1]) < lengths[:, None]
        stats.num_unk += int(np.count_nonzero((block["input_ids"] == unk_id) & real))
    stats.num_short += int((lengths < max_seq_length).sum())
    stats.labels.update(block["label"].tolist())
    width = _bin_width(max_seq_length)
    bins = np.where(lengths >= max_seq_length, max_seq_length, lengths // width * width)
    stats.lengths.update(bins.tolist())
    counts = block["num_masked"].astype(np.int64)
    valid = np.arange(block["masked_positions"].shape[1]) < counts[:, None]
    stats.num_masked += int(counts.sum())
    positions = block["masked_positions"].astype(np.int64)
    shown = block["masked_inputs"][valid].astype(np.int64)
    original = np.take_along_axis(block["input_ids"], positions, axis=1)[valid].astype(np.int64)
    stats.replaced_mask += int((shown == mask_id).sum())
    stats.replaced_kept += int(((shown == original) & (shown != mask_id)).sum())
    stats.replaced_random += int(((shown != original) & (shown != mask_id)).sum())
    stats.masked_runs.update(np.minimum(run_lengths(positions, valid, max_seq_length), MAX_RUN_BIN).tolist())


def run_lengths(positions: np.ndarray, valid: np.ndarray, max_seq_length: int) -> np.ndarray:
    """Lengths of runs of adjacent masked positions, over all rows (a run never crosses rows)."""
    rows = np.nonzero(valid)[0]
    flat = rows * (max_seq_length + 1) + positions[valid]
    if flat.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], np.diff(flat) != 1)))
    return np.diff(np.append(starts, flat.size))


def format_stats(summary: dict, meta: dict) -> str:
    lines = [
        f"instances          {summary['num_instances']:,} in {len(meta['shards'])} shard(s), "
        f"max length {meta['max_seq_length']}, task {meta['sentence_task']}",
        f"tokens             {summary['num_tokens']:,} (mean length {summary['mean_length']:.1f}, "
        f"short {summary['short_fraction']:.1%})",
        f"unknown tokens     {summary['unk_tokens']:,} ({summary['unk_rate']:.2%} of tokens)",
        f"masked             {summary['mask_rate']:.2%} of tokens, {summary['masked_per_instance']:.2f} per instance "
        f"(cap {meta['max_predictions_per_seq']})",
        "replacement        " + ", ".join(f"{k} {v:.1%}" for k, v in summary["replacement"].items()),
        "sentence labels    " + ", ".join(f"{k}: {v:,}" for k, v in summary["labels"].items()),
        "masked runs        " + ", ".join(f"{k}: {v:.1%}" for k, v in summary["masked_run_lengths"].items()),
        "length histogram",
    ]
    kept = text_kept(summary, meta)
    if kept is not None:
        lines.insert(2, f"text kept          {kept}")
    peak = max(summary["length_histogram"].values(), default=1)
    for name, count in summary["length_histogram"].items():
        lines.append(f"  {name:>11}  {count:>10,}  {'#' * max(1, round(40 * count / peak)) if count else ''}")
    return "\n".join(lines)


def text_kept(summary: dict, meta: dict) -> str | None:
    """How much of the tokenized text the instances hold: the text's tokens in the records (their tokens less
    [CLS] and [SEP]) against the text's tokens (`counts.instances.text_tokens`, each document once) times the dupe
    factor. Truncation to each instance's target length cuts the rest (docs/data.md, "What an instance is": 14.6% of
    five books at T=128), and one-token chunks are dropped. `data stats` and the build's summary (`text kept:`)
    print it. Exact for `sop` and `none`, whose records hold only their own document's text; None for `nsp`
    (a random next B is another document's text, and a pair's unused sentences go back) and for a build recorded
    before text_tokens was counted."""
    text = (meta.get("counts") or {}).get("instances", {}).get("text_tokens")
    special = {"sop": 3, "none": 2}.get(meta.get("sentence_task"))
    if not text or special is None:
        return None
    dupe = int(meta.get("dupe_factor") or 1)
    held = summary["num_tokens"] - special * summary["num_instances"]
    return (f"{held / (text * dupe):.1%} of the text's tokens ({held:,} of {text:,}"
            f"{f' x {dupe} passes' if dupe > 1 else ''}); truncation to each instance's target length cut the "
            "rest (each pass elsewhere)")


LABEL_NAMES = {"sop": {0: "in order", 1: "swapped"}, "nsp": {0: "is next", 1: "random next"}}


def format_instance(index: int, record: np.void, meta: dict, id_to_token) -> str:
    """One instance as text: segments split at [SEP], masked tokens as [shown→original]."""
    length, count = int(record["length"]), int(record["num_masked"])
    ids = record["input_ids"][:length].tolist()
    shown = dict(zip(record["masked_positions"][:count].tolist(), record["masked_inputs"][:count].tolist()))
    label = int(record["label"])
    name = LABEL_NAMES.get(meta["sentence_task"], {}).get(label, "no sentence task")
    pieces = []
    for position, token in enumerate(ids):
        text = id_to_token(token)
        if position in shown:
            seen = shown[position]
            text = f"[{id_to_token(seen) if seen != token else '='}→{text}]"
        pieces.append(text)
    body = " ".join(pieces)
    return (f"#{index}  length {length}  segment A {int(record['type_boundary']) - 2} tokens  masked {count}  "
            f"label {label} ({name})\n  {body}")
