"""Masked-LM masking: whole-word n-grams (ALBERT) or single tokens (BERT); pure functions, rng passed in.

The algorithm follows google-research/albert `create_masked_lm_predictions`:
- the budget is ``min(max_predictions_per_seq, max(1, round(length * masked_lm_prob)))`` where ``length``
  counts [CLS] and [SEP] too (so 19 of 128 tokens, 14.8%);
- candidates are whole words (a word starts at a SentencePiece ``▁`` piece or a WordPiece piece without
  ``##``; [CLS]/[SEP]/padding are never candidates); n-gram starts are visited in random order, each draws
  n <= max_ngram with p(n) = (1/n) / sum_k 1/k (6/11, 3/11, 2/11 for 3), clipped at the last word;
  n shrinks while the n-gram would overrun the budget, and an n-gram touching an already masked word is
  skipped;
- each chosen token becomes [MASK] with p 0.8, a random token with p 0.1, itself with p 0.1.
Unlike google's code every draw comes from the ``numpy.random.Generator`` passed in (google mixes a
seeded ``random.Random`` with numpy's unseeded global RNG), and random replacements never pick special ids.
The batched functions take one generator for the whole block (the builder's static masks) or one per row
(the loader's dynamic masks: a row then draws exactly what masking it alone would, so its masks do not
depend on the other rows of its batch).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

MASKING_MODES = ("ngram", "token")

# what the batched masking draws from: one generator for a block of rows, or one generator per row
Rngs = Union[np.random.Generator, Sequence[np.random.Generator]]


@dataclass(frozen=True)
class MaskingConfig:
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    max_ngram: int = 3  # N; "token" mode uses single tokens, ignoring word boundaries
    mode: str = "ngram"
    mask_prob: float = 0.8  # the rest is split evenly between a random token and the original one

    def __post_init__(self):
        if not 0.0 <= self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in [0, 1], got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
        if self.max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {self.max_ngram}")
        if self.mode not in MASKING_MODES:
            raise ValueError(f"masking mode must be one of {MASKING_MODES}, got {self.mode!r}")


def ngram_probabilities(max_ngram: int) -> np.ndarray:
    """p(n) for n = 1..N, proportional to 1/n (favouring short n-grams, as ALBERT does)."""
    inverse = 1.0 / np.arange(1, max_ngram + 1)
    return inverse / inverse.sum()


def num_to_predict(length: int, cfg: MaskingConfig) -> int:
    """Masking budget of a sequence of `length` tokens (specials included, as google counts them)."""
    if cfg.masked_lm_prob == 0:
        return 0
    return min(cfg.max_predictions_per_seq, max(1, int(round(length * cfg.masked_lm_prob))))


@functools.lru_cache(maxsize=None)
def _ngram_cdf(max_ngram: int) -> tuple[float, ...]:
    return tuple(np.cumsum(ngram_probabilities(max_ngram))[:-1].tolist())  # the last bound (1.0) is implied


def ngram_sizes(uniform: np.ndarray, max_ngram: int) -> np.ndarray:
    """n in 1..max_ngram for uniform draws, p(n) proportional to 1/n: 1 + the cdf bounds the draw passed (one
    binary search each, not a pass over the draws per bound)."""
    return 1 + np.searchsorted(np.asarray(_ngram_cdf(max_ngram)), uniform, side="right").astype(np.int64)


def replacement_ids(original: np.ndarray, mask_id: int, random_ids: np.ndarray, cfg: MaskingConfig,
                    rng: np.random.Generator) -> np.ndarray:
    """What the model sees at masked positions: [MASK] (80%), a random non-special token (10%), or the
    original token (10%). One uniform draw per token decides both the case and, rescaled, the random id."""
    return _replace(original, mask_id, random_ids, cfg, rng.random(original.size))


def _replace(original: np.ndarray, mask_id: int, random_ids: np.ndarray, cfg: MaskingConfig,
             draws: np.ndarray) -> np.ndarray:
    """`replacement_ids` given its uniform draws (one per token)."""
    keep_cut = cfg.mask_prob + (1.0 - cfg.mask_prob) / 2
    out = original.copy()
    out[draws < cfg.mask_prob] = mask_id
    randomised = (draws >= cfg.mask_prob) & (draws < keep_cut)
    scale = random_ids.size / max(keep_cut - cfg.mask_prob, 1e-12)
    picks = ((draws[randomised] - cfg.mask_prob) * scale).astype(np.int64)
    out[randomised] = random_ids[np.minimum(picks, random_ids.size - 1)]
    return out


@dataclass(frozen=True)
class MaskingVocab:
    """The vocabulary facts masking needs, so the loader can mask without the tokenizer."""

    word_start: np.ndarray  # bool (V,)
    mask_id: int
    special_ids: tuple[int, ...]

    @property
    def random_ids(self) -> np.ndarray:
        ids = np.arange(self.word_start.size)
        return ids[~np.isin(ids, self.special_ids)]


# -- many sequences at once: the one masking path ---------------------------------------------------------
# The builder (static masks) and the loader (dynamic masks) mask blocks of rows together: the greedy
# algorithm above, run for all rows in lock-step rounds (round r visits every row's r-th start), so a
# per-instance Python loop becomes ~a dozen numpy operations per round. tests/test_masking.py keeps the
# per-instance loop as the reference it must agree with, draw for draw.


@dataclass
class MaskedBatch:
    positions: np.ndarray  # (I, P) sorted masked positions, 0-padded
    inputs: np.ndarray  # (I, P) what the model sees there
    counts: np.ndarray  # (I,) used slots


def word_index(tokens: np.ndarray, candidate: np.ndarray, word_start: np.ndarray, cfg: MaskingConfig):
    """Per position, the index of its whole word among the row's candidates (-1 elsewhere); words per row.

    A word starts at a word-start token, or at a candidate not preceded by a candidate (after [CLS]/[SEP])."""
    starts = candidate.copy()
    if cfg.mode == "ngram":
        starts &= word_start[tokens]
        starts[:, 1:] |= candidate[:, 1:] & ~candidate[:, :-1]
        starts[:, 0] |= candidate[:, 0]
    index = np.cumsum(starts, axis=1) - 1
    return np.where(candidate, index, -1), starts.sum(axis=1)


def select_ngrams_batch(bounds: np.ndarray, num_words: np.ndarray, budgets: np.ndarray, max_ngram: int,
                        keys: np.ndarray, size_draws: np.ndarray) -> np.ndarray:
    """Covered words (I, Wmax) of the greedy selection for every row: bounds (I, Wmax + 1 + max_ngram) cumulative
    token counts (edge-padded), keys/size_draws (I, Wmax) uniforms (only the first num_words[i] matter)."""
    rows_n, wmax = keys.shape
    rows = np.arange(rows_n)
    columns = np.arange(wmax)
    keys = np.where(columns < num_words[:, None], keys, 2.0)  # padding words sort last
    order = np.argsort(keys, axis=1)
    covered = np.zeros((rows_n, wmax + max_ngram), dtype=bool)
    total = np.zeros(rows_n, dtype=np.int64)
    for r in range(wmax):
        active = (total < budgets) & (r < num_words)
        if not active.any():
            break
        start = order[:, r]
        drawn = np.minimum(ngram_sizes(size_draws[rows, start], max_ngram), num_words - start)
        base = bounds[rows, start]
        n = np.zeros(rows_n, dtype=np.int64)
        for k in range(1, max_ngram + 1):  # the largest k <= drawn that fits the budget (google shrinks n)
            n += (k <= drawn) & (total + bounds[rows, start + k] - base <= budgets)
        hit = np.zeros(rows_n, dtype=bool)
        for k in range(max_ngram):
            hit |= (k < n) & covered[rows, start + k]
        accept = active & (n > 0) & ~hit
        for k in range(max_ngram):
            take = accept & (k < n)
            covered[rows[take], start[take] + k] = True
        total += np.where(accept, bounds[rows, start + n] - base, 0)
    return covered[:, :wmax]


def _selection_draws(rng: Rngs, num_words: np.ndarray, wmax: int) -> np.ndarray:
    """(2, I, wmax) uniforms: each word's order key, then its n-gram size draw. One generator draws them in
    bulk; one generator per row draws 2 x max(words, 1) for its row, what that row masked alone draws."""
    if isinstance(rng, np.random.Generator):
        return rng.random((2, len(num_words), wmax))
    draws = np.ones((2, len(num_words), wmax))           # past a row's words: never read
    for row, (generator, words) in enumerate(zip(rng, num_words.tolist())):
        width = max(words, 1)
        draws[:, row, :width] = generator.random((2, width))
    return draws


def _replacement_draws(rng: Rngs, counts: np.ndarray) -> np.ndarray:
    """One uniform per masked token, rows in order (positions ascend within a row); per row: its own."""
    if isinstance(rng, np.random.Generator):
        return rng.random(int(counts.sum()))
    return np.concatenate([generator.random(count) for generator, count in zip(rng, counts.tolist())] or [[]])


def mask_batch(tokens: np.ndarray, lengths: np.ndarray, special: np.ndarray, vocab: MaskingVocab,
               cfg: MaskingConfig, rng: Rngs, random_ids: np.ndarray) -> MaskedBatch:
    """Mask rows of `tokens` (I, T) at once: `lengths` (I,) real tokens, `special` (I, T) marks [CLS]/[SEP].

    The budget comes from each row's length, whole-word n-grams are chosen greedily, then 80/10/10.
    `rng` is one generator, whose draws are made in bulk for the block, or a sequence of I generators, one
    per row: then row i's masks are those of `mask_batch` on row i alone with `rng[i]`, whatever the other
    rows are."""
    rows_n, width = tokens.shape
    if not isinstance(rng, np.random.Generator) and len(rng) != rows_n:
        raise ValueError(f"{len(rng)} generators for {rows_n} rows")
    candidate = (np.arange(width) < lengths[:, None]) & ~special
    word, num_words = word_index(tokens, candidate, vocab.word_start, cfg)
    wmax = max(int(num_words.max(initial=0)), 1)
    max_ngram = cfg.max_ngram if cfg.mode == "ngram" else 1
    flat_word = np.nonzero(candidate)[0] * (wmax + 1) + word[candidate]
    word_len = np.bincount(flat_word, minlength=rows_n * (wmax + 1)).reshape(rows_n, wmax + 1)
    bounds = np.zeros((rows_n, wmax + 1 + max_ngram), dtype=np.int64)
    bounds[:, 1:wmax + 1] = np.cumsum(word_len[:, :wmax], axis=1)
    bounds[:, wmax + 1:] = bounds[:, wmax:wmax + 1]
    budgets = np.array([num_to_predict(int(n), cfg) for n in lengths], dtype=np.int64)
    draws = _selection_draws(rng, num_words, wmax)
    covered = select_ngrams_batch(bounds, num_words, budgets, max_ngram, draws[0], draws[1])
    masked = candidate & np.take_along_axis(covered, np.maximum(word, 0), axis=1)
    counts = masked.sum(axis=1)
    row_of, position = np.nonzero(masked)  # row-major: positions ascend within a row
    slot = np.cumsum(masked, axis=1)[row_of, position] - 1
    positions = np.zeros((rows_n, cfg.max_predictions_per_seq), dtype=np.int64)
    positions[row_of, slot] = position
    inputs = np.zeros_like(positions)
    inputs[row_of, slot] = _replace(tokens[row_of, position].astype(np.int64), vocab.mask_id, random_ids, cfg,
                                    _replacement_draws(rng, counts))
    return MaskedBatch(positions, inputs, counts)


def mask_records(tokens: np.ndarray, lengths: np.ndarray, boundaries: np.ndarray, vocab: MaskingVocab,
                 cfg: MaskingConfig, rng: Rngs, random_ids: np.ndarray) -> MaskedBatch:
    """Mask built `[CLS] A [SEP] B [SEP]` rows: `boundaries` (I,) is where segment B starts, so [CLS] is at
    0 and the [SEP]s at boundary - 1 and length - 1 (the layout `albertlm.data.shards` stores). `rng`: one
    generator for the block, or one per row (see `mask_batch`)."""
    special = np.zeros(tokens.shape, dtype=bool)
    rows = np.arange(tokens.shape[0])
    special[rows, 0] = special[rows, boundaries - 1] = special[rows, lengths - 1] = True
    return mask_batch(tokens, lengths, special, vocab, cfg, rng, random_ids)
