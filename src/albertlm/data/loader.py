"""Read built shards for training: a map-style dataset, a collate function and a resumable, rank-aware loader.

    ds = PretrainingDataset("data/wiki128", dynamic_masking=False, seed=0)
    loader = PretrainingLoader(ds, batch_size=32, seed=0, rank=0, world_size=1)
    for batch in loader:            # endless by default (epochs=None); len(loader) = batches per epoch
        ...                         # batch: dict of torch tensors (see `collate`)
    state = loader.state_dict()     # exact cursor: counts the batches handed out, not the prefetched ones
    loader.load_state_dict(state)   # the next batch is the one that would have followed

Each epoch visits a fresh permutation (seeded by seed and epoch); rank r of w takes every w-th index of
it (all ranks the same count). With `dynamic_masking=True` each instance gets a new mask every epoch,
drawn from an rng seeded by (seed, epoch, index) with the build's masking settings; otherwise the static
mask stored by the build is used. torch is imported only inside the functions that need it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from albertlm.data.masking import MaskingConfig, MaskingVocab, mask_sequence
from albertlm.data.shards import WORD_STARTS_FILE, open_shards, read_meta

BATCH_KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions", "masked_lm_ids",
              "masked_lm_weights", "sentence_order_label")


class PretrainingDataset:
    """Instances of a built data directory; `ds[i]` is a dict of numpy arrays (one padded instance).

    An index may also be a pair `(i, epoch)`, which the loader uses to give dynamic masking its epoch."""

    def __init__(self, directory: str | os.PathLike, dynamic_masking: bool = False, seed: int = 0):
        self.directory = Path(directory)
        self.meta = read_meta(self.directory)
        self._shards = open_shards(self.directory, self.meta)
        self._ends = np.cumsum([len(s) for s in self._shards])
        self.max_seq_length = int(self.meta["max_seq_length"])
        self.max_predictions = int(self.meta["max_predictions_per_seq"])
        self.dynamic_masking, self.seed = dynamic_masking, seed
        self.epoch = 0
        self._random_ids = None
        if dynamic_masking:
            tok = self.meta["tokenizer"]
            special = tuple(tok[k] for k in ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id"))
            word_start = np.load(self.directory / WORD_STARTS_FILE)
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
        self._shards = open_shards(self.directory, self.meta)
        if self.dynamic_masking:
            self._random_ids = self._vocab.random_ids

    def set_epoch(self, epoch: int) -> None:
        """Epoch for dynamic masking of plain integer indices."""
        self.epoch = epoch

    def record(self, index: int) -> np.void:
        """The raw stored record (see `albertlm.data.shards`)."""
        if not 0 <= index < len(self):
            raise IndexError(f"instance {index} out of range for {len(self)} instances")
        shard = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[shard - 1]) if shard else 0
        return self._shards[shard][index - start]

    def __getitem__(self, index: int | tuple[int, int]) -> dict[str, np.ndarray]:
        index, epoch = index if isinstance(index, tuple) else (index, self.epoch)
        rec = self.record(int(index))
        length, boundary = int(rec["length"]), int(rec["type_boundary"])
        original = rec["input_ids"].astype(np.int64)
        if self.dynamic_masking:
            positions, inputs = self._dynamic_mask(original[:length], boundary, int(index), epoch)
        else:
            count = int(rec["num_masked"])
            positions = rec["masked_positions"][:count].astype(np.int64)
            inputs = rec["masked_inputs"][:count].astype(np.int64)
        return self._item(original, length, boundary, positions, inputs, int(rec["label"]))

    def _dynamic_mask(self, tokens: np.ndarray, boundary: int, index: int, epoch: int):
        special = np.zeros(tokens.size, dtype=bool)
        special[[0, boundary - 1, tokens.size - 1]] = True
        rng = np.random.default_rng([self.seed, epoch, index])
        return mask_sequence(tokens, special, self._vocab, self._masking, rng, self._random_ids)

    def _item(self, original, length, boundary, positions, inputs, label) -> dict[str, np.ndarray]:
        T, P = self.max_seq_length, self.max_predictions
        input_ids = original.copy()
        input_ids[positions] = inputs
        arange = np.arange(T)
        slots = np.zeros(P, dtype=np.int64)
        masked_ids, weights = slots.copy(), np.zeros(P, dtype=np.float32)
        slots[:positions.size], masked_ids[:positions.size], weights[:positions.size] = positions, original[positions], 1.0
        return {
            "input_ids": input_ids,
            "token_type_ids": ((arange >= boundary) & (arange < length)).astype(np.int64),
            "attention_mask": (arange < length).astype(np.int64),
            "masked_lm_positions": slots,
            "masked_lm_ids": masked_ids,
            "masked_lm_weights": weights,
            "sentence_order_label": np.array(label, dtype=np.int64),
        }


def collate(items: Sequence[dict[str, np.ndarray]]) -> dict:
    """Stack instances into the batch dict of torch tensors the model takes (int64; weights float32)."""
    import torch

    return {key: torch.from_numpy(np.stack([item[key] for item in items])) for key in BATCH_KEYS}


class _EpochBatches:
    """Index batches of one epoch for one rank, from batch `start` on (lazy: no list of 10M tuples)."""

    def __init__(self, order: np.ndarray, batch_size: int, epoch: int, start: int, drop_last: bool):
        self.order, self.batch_size, self.epoch, self.start = order, batch_size, epoch, start
        full, rest = divmod(order.size, batch_size)
        self.total = full + (1 if rest and not drop_last else 0)

    def __len__(self) -> int:
        return max(0, self.total - self.start)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for b in range(self.start, self.total):
            yield [(i, self.epoch) for i in self.order[b * self.batch_size:(b + 1) * self.batch_size].tolist()]


class PretrainingLoader:
    """Batches of a PretrainingDataset for one rank, with an exact resumable cursor (see the module docstring).

    `num_workers` > 0 uses torch DataLoader worker processes; the cursor still counts only batches that
    this iterator has yielded."""

    def __init__(self, dataset: PretrainingDataset, batch_size: int, *, shuffle: bool = True, seed: int = 0,
                 rank: int = 0, world_size: int = 1, drop_last: bool = True, num_workers: int = 0,
                 epochs: int | None = None):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if len(dataset) // world_size < (batch_size if drop_last else 1):
            raise ValueError(f"{len(dataset)} instances are too few for {world_size} rank(s) x batch {batch_size}")
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed
        self.rank, self.world_size, self.drop_last = rank, world_size, drop_last
        self.num_workers, self.epochs = num_workers, epochs
        self.epoch, self.batch_in_epoch = 0, 0

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return len(self._batches(0, 0))

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.dataset)
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        return order[self.rank::self.world_size][:n // self.world_size]

    def _batches(self, epoch: int, start: int) -> _EpochBatches:
        return _EpochBatches(self._order(epoch), self.batch_size, epoch, start, self.drop_last)

    def __iter__(self) -> Iterator[dict]:
        from torch.utils.data import DataLoader

        while self.epochs is None or self.epoch < self.epochs:
            batches = self._batches(self.epoch, self.batch_in_epoch)
            loader = DataLoader(self.dataset, batch_sampler=batches, collate_fn=collate, num_workers=self.num_workers)
            for batch in loader:
                self.batch_in_epoch += 1
                yield batch
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "seed": self.seed,
                "batch_size": self.batch_size, "world_size": self.world_size, "num_instances": len(self.dataset)}

    def load_state_dict(self, state: dict) -> None:
        """Resume at the saved cursor; the order must be the same one (seed, batch size, ranks, data)."""
        mine = {"seed": self.seed, "batch_size": self.batch_size, "world_size": self.world_size,
                "num_instances": len(self.dataset)}
        for key, value in mine.items():
            if key in state and state[key] != value:
                raise ValueError(f"cannot resume: saved {key}={state[key]} but this loader has {value}")
        self.epoch, self.batch_in_epoch = int(state["epoch"]), int(state["batch_in_epoch"])
