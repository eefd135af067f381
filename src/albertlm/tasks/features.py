"""Token features shared by every task: `[CLS] a [SEP] b [SEP]` pairs, length-bucketed batches, and a
collate that pads each batch only to its own longest sequence (not to 512).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np


@dataclass
class Feature:
    """One model input: ids and token types (T,) or (C, T) for multiple choice, a label, and the
    index of the example it came from (several windows can share one SQuAD example)."""

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    example_index: int
    label: Any = None
    extra: dict | None = None  # task data the model does not see (SQuAD offsets, positions)

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[-1])


def truncate_pair(a: list[int], b: list[int], max_tokens: int) -> bool:
    """Trim the longer of the two lists from the end until both fit (BERT's `_truncate_seq_pair`).
    Returns whether anything was cut."""
    cut = False
    while len(a) + len(b) > max_tokens:
        (a if len(a) > len(b) else b).pop()  # ties cut b, as BERT does
        cut = True
    return cut


def build_pair(cls_id: int, sep_id: int, a: list[int], b: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
    """`[CLS] a [SEP] (b [SEP])` and token types 0 for the first segment, 1 for the second."""
    ids = [cls_id, *a, sep_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, sep_id]
        types += [1] * (len(b) + 1)
    return np.asarray(ids, dtype=np.int64), np.asarray(types, dtype=np.int64)


def encode_pairs(tokenizer, texts_a: Sequence[str], texts_b: Sequence[str | None] | None,
                 max_length: int, cut: list[int] | None = None) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Encode many (a, b) pairs with the tokenizer's native batch call; returns the pairs and how
    many were truncated to `max_length` (their positions are appended to `cut` when it is given)."""
    ids_a = tokenizer.encode_batch(list(texts_a))
    has_b = texts_b is not None and any(t is not None for t in texts_b)
    ids_b = tokenizer.encode_batch([t or "" for t in texts_b]) if has_b else [None] * len(ids_a)
    pairs, num_truncated = [], 0
    for k, (a, b) in enumerate(zip(ids_a, ids_b)):
        a = list(a)
        b = list(b) if b is not None and texts_b[k] is not None else None
        budget = max_length - (3 if b is not None else 2)
        if truncate_pair(a, b if b is not None else [], budget):
            num_truncated += 1
            if cut is not None:
                cut.append(k)
        pairs.append(build_pair(tokenizer.cls_id, tokenizer.sep_id, a, b))
    return pairs, num_truncated


UNK_WARN_SHARE = 0.05      # a split whose text's tokens are this share (or more) the unknown token is warned of
UNK_SAMPLE_TEXTS = 64      # texts holding the unknown token whose characters are looked at (per split)


class UnknownTally:
    """The tokenizer's unknown token in the texts of one split, as `data build` counts it in a corpus: a Korean
    file saved by macOS (decomposed Hangul) or a vocabulary for another language turns most of the text into
    `[UNK]`, and the model predicts from nothing without a word. Counts the texts' tokens and unknown ones, keeps
    the first text holding one, and, for the first UNK_SAMPLE_TEXTS such texts, which characters encode to it on
    their own (`data.build.tally_unknown_characters`)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.unk_id = getattr(tokenizer, "unk_id", None)
        self.tokens = self.unknown = self.texts_with = 0
        self.first: str | None = None
        self.characters: dict[str, int] = {}
        self._cache: dict[str, bool] = {}

    def add(self, texts: Sequence[str], encoded: Sequence[Sequence[int]]) -> None:
        from albertlm.data.build import tally_unknown_characters

        for text, ids in zip(texts, encoded):
            self.tokens += len(ids)
            found = (ids if isinstance(ids, list) else list(ids)).count(self.unk_id) if self.unk_id is not None else 0
            if not found:
                continue
            self.unknown += found
            self.first = self.first if self.first is not None else text
            if self.texts_with < UNK_SAMPLE_TEXTS:
                tally_unknown_characters(text, self.tokenizer, self._cache, self.characters)
            self.texts_with += 1

    def warning(self, what: str) -> str | None:
        """One line naming the split `what` when UNK_WARN_SHARE or more of its tokens are unknown (else None), in
        `data build`'s words (`data.build.unknown_token_warning`: decomposed Hangul is told to convert to NFC)."""
        from albertlm.data.build import unknown_token_warning

        share = self.unknown / max(self.tokens, 1)
        if not self.unknown or share < UNK_WARN_SHARE:
            return None
        name = self.tokenizer.id_to_token(self.unk_id)
        chars = sorted(self.characters.items(), key=lambda item: (-item[1], item[0]))
        first = self.first if len(self.first) <= 60 else self.first[:57] + "..."
        return (f"{what}: {unknown_token_warning(share, name, chars)} ({self.unknown:,} of {self.tokens:,} tokens, "
                f"in {self.texts_with:,} text(s); first: {first!r})")


class _WatchedTokenizer:
    """A tokenizer whose batch calls advance a progress bar by the texts they encode (in chunks, so that the bar
    moves during one large call) and/or count the unknown token (`UnknownTally`); everything else is the
    tokenizer's own."""

    CHUNK = 4096

    def __init__(self, tokenizer, bar=None, unknown: UnknownTally | None = None) -> None:
        self._tokenizer, self._bar, self._unknown = tokenizer, bar, unknown

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        out: list[list[int]] = []
        for start in range(0, len(texts), self.CHUNK):
            chunk = texts[start:start + self.CHUNK]
            encoded = self._tokenizer.encode_batch(chunk)
            out += encoded
            if self._unknown is not None:
                self._unknown.add(chunk, encoded)
            if self._bar is not None:
                self._bar.update(len(chunk))
        return out


@contextlib.contextmanager
def tokenizing(tokenizer, what: str, show: bool = True, warnings: list[str] | None = None):
    """The tokenizer to build a task's features with, showing how many texts are tokenized (`tokenize RACE train:
    351,468 texts`): reading and tokenizing a full RACE or SQuAD set takes a minute or two. Drawn on stderr when it
    is a terminal and `show` (`--no-progress` hides it), as the evaluation's bar, and cleared when done, so that
    an error stays the only line; elsewhere (a log, a pipe) no bar. With `warnings`, the unknown token is counted
    in the texts encoded, and a line naming `what` is appended when UNK_WARN_SHARE or more of their tokens are
    unknown (`UnknownTally`; the spec's warnings are printed once the run or prediction has worked)."""
    from albertlm.errors import reports_here
    from albertlm.training.metrics import _terminal

    unknown = UnknownTally(tokenizer) if warnings is not None else None
    with contextlib.ExitStack() as stack:
        bar = None
        if show and _terminal() and reports_here():   # under torchrun, one bar per machine (its first rank)
            from tqdm.auto import tqdm

            bar = stack.enter_context(tqdm(unit="text", desc=f"tokenize {what}", dynamic_ncols=True, leave=False,
                                           unit_scale=True))
        yield tokenizer if bar is None and unknown is None else _WatchedTokenizer(tokenizer, bar, unknown)
    line = unknown.warning(what) if unknown is not None else None
    if line:
        warnings.append(line)


def bucket_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator | None,
                   bucket_batches_count: int = 50) -> list[np.ndarray]:
    """Indices grouped into batches of similar length.

    Training (rng given): shuffle, sort within buckets of `bucket_batches_count` batches, cut into
    batches and shuffle the batches, so batches are random but padding is small. Evaluation (rng None):
    one global sort by length; callers restore the original order by index.
    """
    lengths = np.asarray(lengths)
    if rng is None:
        order = np.argsort(lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    order = rng.permutation(len(lengths))
    span = batch_size * bucket_batches_count
    batches = []
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


# the features predicted at a time (`finetune.predict_windows`): each window is sorted by length and cut into batches
# on its own, so that a set read a window at a time (`FeatureWindows`) needs memory for one window, and its batches,
# hence its outputs bit for bit, are those of the same set held whole. A set of up to this many features is one
# window: its batches are one sort of the whole set, as before windows (GLUE's and SQuAD's dev sets, RACE's; QQP's
# 40k dev pairs are three windows)
PREDICT_WINDOW = 16384


class FeatureWindows:
    """A set's features made a window (`PREDICT_WINDOW`) at a time from its rows and dropped once predicted, never
    held all at once: `predict` on a file of millions of rows. `len` is the number of features (counted when the
    rows were checked); `windows()` reads the rows again and yields each window's features in input order, every
    window but the last of `PREDICT_WINDOW` features. `check`, where set, is called with each window before it is
    predicted (`finetune.check_positions`: the length its model's positions cover)."""

    def __init__(self, count: int, make: Callable[[], Iterator[list[Feature]]]) -> None:
        self.count, self._make = count, make
        self.check: Callable[[list[Feature]], None] | None = None

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Feature]:
        """Every feature, the rows read again (a window at a time)."""
        for window in self._make():
            yield from window

    def windows(self) -> Iterator[list[Feature]]:
        for window in self._make():
            if self.check is not None:
                self.check(window)
            yield window


def feature_windows(features) -> Iterator[Sequence[Feature]]:
    """The windows `predict` takes `features` in: a `FeatureWindows`'s own, else slices of `PREDICT_WINDOW`."""
    if isinstance(features, FeatureWindows):
        yield from features.windows()
        return
    for start in range(0, len(features), PREDICT_WINDOW):
        yield features[start:start + PREDICT_WINDOW]


def window_batch_count(count: int, batch_size: int) -> int:
    """The batches `predict` runs for `count` features (each window cut into batches on its own): a progress total."""
    full, rest = divmod(count, PREDICT_WINDOW)
    return full * -(-PREDICT_WINDOW // batch_size) + -(-rest // batch_size)


def collate(features: Sequence[Feature], pad_id: int, label_dtype=None, pad_to: int | None = None) -> dict:
    """Pad a batch to its longest sequence (or to `pad_to`); (B, T) or (B, C, T) torch tensors."""
    import torch

    width = pad_to or max(f.length for f in features)
    shape = (len(features), *features[0].input_ids.shape[:-1], width)
    ids = np.full(shape, pad_id, dtype=np.int64)
    types = np.zeros(shape, dtype=np.int64)
    mask = np.zeros(shape, dtype=np.int64)
    for i, f in enumerate(features):
        n = f.length
        ids[i, ..., :n] = f.input_ids
        types[i, ..., :n] = f.token_type_ids
        mask[i, ..., :n] = _real_positions(f.input_ids, pad_id) if f.input_ids.ndim > 1 else 1
    batch = {"input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
             "attention_mask": torch.from_numpy(mask)}
    if features[0].label is not None:
        labels = np.asarray([f.label for f in features])
        batch["labels"] = torch.as_tensor(labels, dtype=label_dtype)
    return batch


def _real_positions(ids: np.ndarray, pad_id: int) -> np.ndarray:
    """The attention mask of multiple-choice rows (C, T) padded on the right to the example's longest choice:
    each row is real up to its last non-pad token (its [SEP]). Not `ids != pad_id`: a `<pad>` typed in the text
    encodes to pad_id and is an input like any other token, as transformers' tokenizer masks it."""
    real = ids != pad_id
    ends = np.where(real.any(axis=-1), ids.shape[-1] - np.argmax(real[..., ::-1], axis=-1), 0)
    return np.arange(ids.shape[-1]) < ends[..., None]


def iterate_batches(features: Sequence[Feature], batches: Sequence[np.ndarray], pad_id: int,
                    label_dtype=None) -> Iterator[tuple[np.ndarray, dict]]:
    for index in batches:
        yield index, collate([features[i] for i in index], pad_id, label_dtype)
