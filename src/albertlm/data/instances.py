"""Sentence pairs from tokenized documents: SOP (ALBERT), NSP (BERT) or one segment (MLM only).

google-research `create_instances_from_document` semantics, with its flaws fixed:
- a chunk gathers whole sentences until it reaches a target length: ``max_num_tokens`` (max_seq_length - 3,
  or - 2 without a second segment), or with probability ``short_seq_prob`` a length drawn uniformly from
  [2, max_num_tokens]. The target is drawn afresh for every chunk (google draws it once per document, so at
  length 512 about half of its instances come out short instead of ~10%);
- segment A is the chunk's first ``a_end`` sentences (``a_end`` uniform in [1, sentences - 1]), B the rest;
  the longer side is truncated one token at a time from a random end until the pair fits;
- **one-sentence chunks** (a document of one sentence, a last lone sentence, a sentence longer than the
  target) are cut inside the sentence at a random whole-word boundary into A and B, then treated like any
  other chunk, so SOP labels stay 50/50. google instead pairs such a chunk with a random other document and
  labels it "swapped" (59% of its SOP labels end up 1). A one-token chunk cannot be cut and is dropped
  (counted as ``dropped_chunks``);
- sentences longer than ``max_num_tokens`` are first cut into pieces of that size (``long_sentences_cut``);
- NSP negatives with no other document (a corpus of one document) come from the same document outside the
  chunk and the sentence after it (google's fallback starts B anywhere, A itself and A's true next included).
Labels: SOP 1 = swapped (B before A), 0 = in order; NSP 1 = B from another document, 0 = B follows A;
``none`` gives one segment ``[CLS] chunk [SEP]`` and label -100.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Sequence

import numpy as np

SENTENCE_TASKS = ("sop", "nsp", "none")
NO_LABEL = -100


@dataclass(frozen=True)
class InstanceConfig:
    max_seq_length: int = 512
    sentence_task: str = "sop"
    short_seq_prob: float = 0.1

    def __post_init__(self):
        if self.sentence_task not in SENTENCE_TASKS:
            raise ValueError(f"sentence_task must be one of {SENTENCE_TASKS}, got {self.sentence_task!r}")
        if not 8 <= self.max_seq_length <= 65535:
            raise ValueError(f"max_seq_length must be in [8, 65535], got {self.max_seq_length}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")

    @property
    def max_num_tokens(self) -> int:
        """Room for text: [CLS] A [SEP] B [SEP], or [CLS] A [SEP] without a sentence task."""
        return self.max_seq_length - (2 if self.sentence_task == "none" else 3)


@dataclass
class TokenizedDocument:
    tokens: np.ndarray  # (num_tokens,) int32, all sentences back to back
    offsets: list[int]  # sentence i is tokens[offsets[i]:offsets[i + 1]]; no empty sentence

    def __post_init__(self):
        self.num_sentences = len(self.offsets) - 1


@dataclass
class Pair:
    a: np.ndarray
    b: np.ndarray | None  # None when there is no sentence task
    label: int  # see the module docstring


@dataclass
class InstanceCounts:
    """Per-build tallies, summed over workers (every field is an int or a dict of ints).

    `text_tokens` counts the tokens of the tokenized documents (each once, whatever the dupe factor),
    `unk_tokens` how many of them are the tokenizer's unknown token, `unk_sentences` the sentences holding
    one, and `unk_characters` the characters that alone encode to it, counted in a sample of those sentences
    (`albertlm.data.build.count_unknown`)."""

    instances: int = 0
    short_targets: int = 0
    one_sentence_chunks: int = 0
    dropped_chunks: int = 0
    long_sentences_cut: int = 0
    empty_documents: int = 0
    nsp_same_document: int = 0
    text_tokens: int = 0
    unk_tokens: int = 0
    unk_sentences: int = 0
    labels: dict[int, int] = field(default_factory=dict)
    unk_characters: dict[str, int] = field(default_factory=dict)

    def add(self, other: "InstanceCounts") -> None:
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, dict):
                for key, value in theirs.items():
                    mine[key] = mine.get(key, 0) + value
            else:
                setattr(self, f.name, mine + theirs)


def make_document(sentence_ids: Sequence[Sequence[int]], max_sentence_tokens: int,
                  counts: InstanceCounts) -> TokenizedDocument | None:
    """Concatenate tokenized sentences, dropping empty ones and cutting long ones; None if no tokens."""
    lengths = [len(ids) for ids in sentence_ids]
    tokens = np.fromiter((t for ids in sentence_ids for t in ids), dtype=np.int32, count=sum(lengths))
    return document_from_lengths(tokens, lengths, max_sentence_tokens, counts)


def document_from_lengths(tokens: np.ndarray, lengths: Sequence[int], max_sentence_tokens: int,
                          counts: InstanceCounts) -> TokenizedDocument | None:
    """`make_document` for sentences already concatenated in `tokens` with the given lengths."""
    if tokens.size == 0:
        counts.empty_documents += 1
        return None
    offsets = [0]
    for length in lengths:
        if length == 0:
            continue
        pieces = -(-length // max_sentence_tokens)
        counts.long_sentences_cut += pieces > 1
        start = offsets[-1]
        offsets.extend(min(start + k * max_sentence_tokens, start + length) for k in range(1, pieces + 1))
    return TokenizedDocument(tokens, offsets)


def draw_target(cfg: InstanceConfig, rng: np.random.Generator) -> tuple[int, bool]:
    """The next chunk's target length, and whether it is a short one (counted when a chunk uses it: the draw
    after a document's last chunk goes unused)."""
    if cfg.short_seq_prob > 0 and rng.random() < cfg.short_seq_prob:
        return int(rng.integers(2, cfg.max_num_tokens + 1)), True
    return cfg.max_num_tokens, False


def truncate_pair(a: np.ndarray, b: np.ndarray | None, max_num_tokens: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """google's rule (drop one token from the longer side, from the front or back with p 0.5, repeat),
    computed in closed form: equal lengths lose from B first, so B takes the odd token."""
    len_a, len_b = a.size, (0 if b is None else b.size)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return a, b
    gap = min(excess, abs(len_a - len_b))
    rest = excess - gap
    cut_a = (gap if len_a > len_b else 0) + rest // 2
    cut_b = excess - cut_a
    if b is None:
        cut_a, cut_b = excess, 0
    return _cut(a, cut_a, rng), (None if b is None else _cut(b, cut_b, rng))


def _cut(x: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    if count == 0:
        return x
    front = int(rng.binomial(count, 0.5))
    return x[front:x.size - (count - front)]


def split_point(tokens: np.ndarray, word_start: np.ndarray, rng: np.random.Generator) -> int | None:
    """A random cut inside one sentence, at a whole-word boundary if there is one; None if < 2 tokens."""
    if tokens.size < 2:
        return None
    inner = np.flatnonzero(word_start[tokens[1:]]) + 1
    if inner.size == 0:
        return int(rng.integers(1, tokens.size))
    return int(inner[rng.integers(0, inner.size)])


PickOther = Callable[[np.random.Generator], "TokenizedDocument | None"]


def create_pairs(doc: TokenizedDocument, cfg: InstanceConfig, rng: np.random.Generator, word_start: np.ndarray,
                 pick_other: PickOther | None = None, counts: InstanceCounts | None = None) -> list[Pair]:
    """All pairs of one document (one pass; call again with a new rng for each dupe).

    `word_start` is the vocabulary's (V,) whole-word-start table; `pick_other(rng)` returns another
    document for NSP negatives (or None when there is none)."""
    counts = counts if counts is not None else InstanceCounts()
    offsets, pairs = doc.offsets, []
    start, i, length = 0, 0, 0
    target, short = draw_target(cfg, rng)
    while i < doc.num_sentences:
        length += offsets[i + 1] - offsets[i]
        if i == doc.num_sentences - 1 or length >= target:
            counts.short_targets += short
            pair, i = _chunk_pair(doc, start, i + 1, target, cfg, rng, word_start, pick_other, counts)
            if pair is not None:
                pairs.append(pair)
                counts.labels[pair.label] = counts.labels.get(pair.label, 0) + 1
            start, length = i, 0
            target, short = draw_target(cfg, rng)
        else:
            i += 1
    counts.instances += len(pairs)
    return pairs


def _chunk_pair(doc, start, end, target, cfg, rng, word_start, pick_other, counts) -> tuple[Pair | None, int]:
    """The pair made from sentences [start, end); returns it and the sentence where the next chunk begins."""
    tokens, offsets = doc.tokens, doc.offsets
    chunk = tokens[offsets[start]:offsets[end]]
    if cfg.sentence_task == "none":
        a, _ = truncate_pair(chunk, None, cfg.max_num_tokens, rng)
        return Pair(a, None, NO_LABEL), end
    several = end - start >= 2
    a_end = start + int(rng.integers(1, end - start)) if several else end
    if cfg.sentence_task == "nsp" and pick_other is not None and rng.random() < 0.5:
        # google puts the chunk's unused sentences back: the next chunk starts after A
        a = tokens[offsets[start]:offsets[a_end]]
        return _random_next(a, doc, start, end, target, cfg, rng, pick_other, counts), a_end
    if several:
        cut = offsets[a_end] - offsets[start]
    else:
        cut = split_point(chunk, word_start, rng)
        if cut is None:
            counts.dropped_chunks += 1
            return None, end
        counts.one_sentence_chunks += 1   # (cut in two: a dropped one-token chunk is not)
    a, b, label = chunk[:cut], chunk[cut:], 0
    if cfg.sentence_task == "sop" and rng.random() < 0.5:
        a, b, label = b, a, 1
    a, b = truncate_pair(a, b, cfg.max_num_tokens, rng)
    return Pair(a, b, label), end


def _random_next(a, doc, start, end, target, cfg, rng, pick_other, counts) -> Pair:
    """NSP negative: B is taken from a random sentence of another document onwards, up to the target.

    With no other document within reach (a corpus of one document), B comes from the same document, counted
    as `nsp_same_document`, outside the chunk [start, end) and the sentence after it, and a B starting before
    the chunk stops where it begins: google's fallback draws from anywhere in the document, so some of its
    "random next" B were A itself or A's true next sentence (2.7% of the negatives of a 200-sentence document
    at T=64). Only a document of no other sentences is drawn from anywhere."""
    other = pick_other(rng)
    stop = None
    if other is None:
        counts.nsp_same_document += 1
        other = doc
        before, after = start, max(0, doc.num_sentences - end - 1)
        if before + after:
            first = int(rng.integers(0, before + after))
            first, stop = (first, start) if first < before else (first - before + end + 1, None)
        else:
            first = int(rng.integers(0, doc.num_sentences))
    else:
        first = int(rng.integers(0, other.num_sentences))
    stop = other.num_sentences if stop is None else stop
    target_b = target - a.size
    last = first + 1
    while last < stop and other.offsets[last] - other.offsets[first] < target_b:
        last += 1
    b = other.tokens[other.offsets[first]:other.offsets[last]]
    a, b = truncate_pair(a, b, cfg.max_num_tokens, rng)
    return Pair(a, b, 1)
