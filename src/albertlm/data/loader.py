"""Read built shards for training: a map-style dataset and the collate function that makes batches of it.

    ds = PretrainingDataset("data/wiki128", dynamic_masking=False, seed=0)
    item = ds[i]                      # one padded instance: a dict of numpy arrays
    batch = collate([ds[i] for i in range(32)])   # dict of torch tensors (see `collate`), and where the real tokens are

The order, rank sharding and resumable position belong to the training loop's sampler
(`albertlm.training.loop.StepData`), which reads this dataset through a torch DataLoader. With
`dynamic_masking=True` every example gets new masks each epoch: the sampler asks for `(epoch, index)` keys
(index: the example's place in the whole data set) and each example's masks are drawn from its own generator,
`example_rng(seed, epoch, index)`, with the build's masking settings. An example's masks therefore do not
depend on the batch it is read in, so they are the same for any number of processes, micro-batch size or
accumulation, and on a resume with another layout. `__getitems__` still masks a whole micro-batch in one call
of `masking.mask_records`, the builder's own vectorised masking, given one generator per row. Without
dynamic masking the static masks stored by the build are used. torch is imported only inside `collate`.
"""
from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from albertlm.data.masking import MaskingConfig, MaskingVocab, mask_records
from albertlm.data.shards import (WORD_STARTS_FILE, changed_shard, damage_message, damaged_rows, open_shards,
                                  read_meta, unchanged)
from albertlm.errors import UserError

BATCH_KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions", "masked_lm_ids",
              "masked_lm_weights", "sentence_order_label")
# the last word of every dynamic-masking seed: a non-zero constant, so no other stream seeded by a prefix of
# (seed, epoch, ...) (the sampler's order is `default_rng([seed, epoch])`) is the same stream; numpy's
# SeedSequence pads short entropy with zeros, so [s, e] and [s, e, 0] would otherwise coincide
DYNAMIC_MASKING_STREAM = 0x6D61736B   # "mask"


def example_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of an example's dynamic masks in an epoch: a function of these three numbers only."""
    return np.random.default_rng([seed, epoch, index, DYNAMIC_MASKING_STREAM])


def load_word_starts(directory: Path, vocab_size: int) -> np.ndarray:
    """The build's (V,) bool table of word-start tokens (`word_starts.npy`), which dynamic masking needs; a
    missing or damaged file is a UserError (every build writes it beside the shards, and every part the same
    one: parts copied together from several machines need it copied too)."""
    path = directory / WORD_STARTS_FILE
    if not path.is_file():
        raise UserError(f"{directory} has no {WORD_STARTS_FILE}, which dynamic masking needs (every build and "
                        f"every part writes it beside the shards: copy it along with the shards, or rebuild the "
                        "data with `albertlm data build`)")
    try:
        word_start = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        raise UserError(f"{path} is damaged (no readable .npy array); rebuild the data with `albertlm data build`") \
            from None
    if word_start.dtype != np.bool_ or word_start.shape != (vocab_size,):
        raise UserError(f"{path} holds a {word_start.dtype} array of shape {word_start.shape}, not the "
                        f"({vocab_size},) bool table of this build's vocabulary (another build's file?); "
                        "rebuild the data with `albertlm data build`")
    return word_start


class PretrainingDataset:
    """Instances of a built data directory; `ds[i]` (or `ds[(epoch, i)]`) is a dict of numpy arrays (one
    padded instance). With dynamic masking the epoch in the key chooses the masks."""

    def __init__(self, directory: str | os.PathLike, dynamic_masking: bool = False, seed: int = 0):
        self.directory = Path(directory)
        self.meta = read_meta(self.directory)
        self._shards = open_shards(self.directory, self.meta)   # checked now, mapped when first read
        self._stamps = self._shards.stamps   # the files as opened (`check_unchanged`)
        self._ends = np.cumsum(self._shards.counts, dtype=np.int64)
        self._paths = [self.directory / shard["file"] for shard in self.meta["shards"]]
        self.max_seq_length = int(self.meta["max_seq_length"])
        self.max_predictions = int(self.meta["max_predictions_per_seq"])
        self.dynamic_masking, self.seed = dynamic_masking, seed
        self._random_ids = None
        if dynamic_masking:
            tok = self.meta["tokenizer"]
            special = tuple(tok[k] for k in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"))
            word_start = load_word_starts(self.directory, tok["vocab_size"])
            self._vocab = MaskingVocab(word_start, tok["mask_id"], special)
            self._random_ids = self._vocab.random_ids
            self._masking = MaskingConfig(**self.meta["masking"])

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getstate__(self) -> dict:
        """Pickle without the memory maps (a pickled np.memmap would copy the whole shard into the
        message); DataLoader workers started by spawn/forkserver reopen them."""
        state = dict(self.__dict__)
        state["_shards"] = state["_random_ids"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        # the files the parent opened, or nothing: a worker started later must not read a rebuilt shard's records
        # under the parent's meta and position
        self.check_unchanged(range(len(self.meta["shards"])))
        self._shards = open_shards(self.directory, self.meta, self._stamps)
        if self.dynamic_masking:
            self._random_ids = self._vocab.random_ids

    def check_unchanged(self, shards) -> None:
        """A UserError when one of `shards` (places in the meta's list) is no longer the file opened
        (`shards.changed_shard`): checked before their records are read."""
        for shard in np.asarray(shards, dtype=np.int64).reshape(-1).tolist():
            # `changed_shard`'s test on a path built once, and its message where the file differs
            same = unchanged(self._paths[shard], self._stamps[shard])
            message = None if same else changed_shard(self.directory, self.meta, shard, self._stamps[shard])
            if message:
                raise UserError(message)

    def record(self, index: int) -> np.void:
        """The raw stored record (see `albertlm.data.shards`)."""
        if not 0 <= index < len(self):
            raise IndexError(f"instance {index} out of range for {len(self)} instances")
        shard = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[shard - 1]) if shard else 0
        return self._shards.read(shard, [index - start])[0]

    def records(self, indices: Sequence[int]) -> np.ndarray:
        """The raw stored records at `indices` (in their order), read from the shard files with positional reads
        (`shards.ShardMaps.read_many`: one read per run of near records of a shard), not through memory maps: a
        shard cut shorter under the run between the check of its stamp and the read is the one-line "changed"
        error, not SIGBUS."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        bad = (indices < 0) | (indices >= len(self))
        if bad.any():
            index = int(indices[int(np.argmax(bad))])
            raise IndexError(f"instance {index} out of range for {len(self)} instances")
        shards = np.searchsorted(self._ends, indices, side="right")
        starts = np.concatenate([[0], self._ends])[shards]
        return self._shards.read_many(shards, indices - starts)

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, np.ndarray]:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[int | tuple[int, int]]) -> "Instances":
        """Several instances at once (the DataLoader hands over a whole micro-batch): a key is an index or
        an `(epoch, index)` pair (an index alone is epoch 0); dynamic masks are drawn for all of them in one
        vectorised call, each row from its own `example_rng`, so each equals `self[key]` alone."""
        pairs = np.array([key if isinstance(key, tuple) else (0, key) for key in keys], dtype=np.int64).reshape(-1, 2)
        records = self.records(pairs[:, 1])   # (an index out of range is an IndexError)
        # after the read, so that a shard written over while it was read is caught too (the reads copy the records)
        self.check_unchanged(np.unique(np.searchsorted(self._ends, pairs[:, 1], side="right")))
        self._check(records, pairs[:, 1])
        tokens = records["input_ids"].astype(np.int64)
        lengths = records["length"].astype(np.int64)
        boundaries = records["type_boundary"].astype(np.int64)
        if self.dynamic_masking:
            rngs = [example_rng(self.seed, epoch, index) for epoch, index in pairs.tolist()]
            masked = mask_records(tokens, lengths, boundaries, self._vocab, self._masking, rngs, self._random_ids)
            positions, inputs, counts = masked.positions, masked.inputs, masked.counts
        else:
            positions, inputs = records["masked_positions"], records["masked_inputs"]
            counts = records["num_masked"]
        columns = self._instances(tokens, lengths, boundaries, positions.astype(np.int64), inputs.astype(np.int64),
                                  counts.astype(np.int64), records["label"].astype(np.int64))
        return Instances(columns)

    def _check(self, records: np.ndarray, indices: np.ndarray) -> None:
        """Records the build could not have written (a damaged or overwritten shard) are a UserError naming the
        instance and its shard, not an IndexError deep in the batch assembly, or ids past the vocabulary that
        the model's embedding fails on (on a GPU, a device-side assert). See `shards.damaged_rows`."""
        T, P = self.max_seq_length, self.max_predictions
        vocab = int(self.meta.get("tokenizer", {}).get("vocab_size") or 0)
        bad = damaged_rows(records, T, P, vocab, static_masks=not self.dynamic_masking)
        if bad.any():
            index = int(indices[int(np.argmax(bad))])
            shard = int(np.searchsorted(self._ends, index, side="right"))
            raise UserError(damage_message(self.directory, index, shard, T, P, vocab))

    def check_records(self, records: np.ndarray, indices: Sequence[int]) -> None:
        """A UserError naming the first damaged record of `records` (stored records at `indices`), if any."""
        self._check(np.asarray(records).reshape(-1), np.asarray(indices, dtype=np.int64).reshape(-1))

    def _instances(self, original, lengths, boundaries, positions, inputs, counts, labels) -> dict[str, np.ndarray]:
        """The model's inputs for I rows: masked ids, token types, attention mask and P masked slots."""
        P = self.max_predictions
        arange = np.arange(self.max_seq_length)
        used = np.arange(P) < counts[:, None]                                   # (I, P)
        slots = np.where(used, positions[:, :P], 0)
        input_ids = original.copy()
        rows, cols = np.nonzero(used)
        input_ids[rows, slots[rows, cols]] = inputs[:, :P][rows, cols]
        return {
            "input_ids": input_ids,
            "token_type_ids": ((arange >= boundaries[:, None]) & (arange < lengths[:, None])).astype(np.int64),
            "attention_mask": (arange < lengths[:, None]).astype(np.int64),
            "masked_lm_positions": slots,
            "masked_lm_ids": np.where(used, np.take_along_axis(original, slots, axis=1), 0),
            "masked_lm_weights": used.astype(np.float32),
            "sentence_order_label": labels,
        }


class Instances(Sequence):
    """What `PretrainingDataset.__getitems__` returns: a sequence of instances (`items[k]`: one instance's dict of
    numpy arrays, views of the batch's, built when asked for; a slice: a list of them) held as the batch's arrays
    (`columns`: key -> (I, ...) array, row k instance k), which `collate` hands to torch as they are. A dict per row
    built for every micro-batch, then stacked again by `collate`, was most of the loader's host time a batch."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, np.ndarray]):
        self.columns = columns

    def __len__(self) -> int:
        return len(self.columns["input_ids"])

    def __getitem__(self, row):
        if isinstance(row, slice):
            return [self[k] for k in range(len(self))[row]]
        row = range(len(self))[row]     # (an IndexError past the end, as a list's)
        return {key: value[row] for key, value in self.columns.items()}


def collate(items: Sequence[dict[str, np.ndarray]]) -> dict:
    """Stack instances into the batch dict of torch tensors the model takes (int64; weights float32).
    `token_index` (N,) holds the flat positions b * T + t of its N real tokens, computed here on the host, so
    the model can skip the padding without a device sync (`model.albert.Packing`); N == B * T (a shape, known
    without a sync) says the batch has no padding at all, and pretraining then passes no mask."""
    import torch

    if isinstance(items, Instances):   # a micro-batch of `__getitems__`: its arrays are the batch's
        batch = {key: torch.from_numpy(np.ascontiguousarray(items.columns[key])) for key in BATCH_KEYS}
    else:
        batch = {key: torch.from_numpy(np.stack([item[key] for item in items])) for key in BATCH_KEYS}
    batch["token_index"] = torch.from_numpy(np.flatnonzero(batch["attention_mask"].numpy().reshape(-1)))
    return batch
