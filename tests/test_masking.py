"""n-gram MLM masking: p(n) = (1/n)/sum(1/k), masking rate and budget, whole words, 80/10/10, seeding.

The one masking path is the vectorised `mask_batch` (builder and loader alike); `greedy_ngrams` below is
the per-instance loop it is checked against, draw for draw."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import bisect

from albertlm.data.masking import (MaskingConfig, MaskingVocab, _ngram_cdf, mask_batch, ngram_probabilities,
                                   ngram_sizes, num_to_predict, replacement_ids, select_ngrams_batch, word_index)
from conftest import shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(scope="module")
def tokenizer():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path(*SPM))


@pytest.fixture(scope="module")
def real_sequences(tokenizer):
    """128-token windows of real English (Alice in Wonderland) as [CLS] ... [SEP]."""
    lines = Path(shared_path("text", "gutenberg", "carroll-alice.txt")).read_text().splitlines()
    ids = np.fromiter((t for row in tokenizer.encode_batch(lines) for t in row), dtype=np.int64)
    body = 126
    windows = ids[: ids.size // body * body].reshape(-1, body)
    return [np.concatenate(([tokenizer.cls_id], w, [tokenizer.sep_id])) for w in windows]


def greedy_ngrams(bounds: list[int], budget: int, max_ngram: int, keys: np.ndarray,
                  size_draws: np.ndarray) -> list[tuple[int, int]]:
    """The reference: google's greedy selection, one instance at a time, given its uniform draws (one
    order key and one size draw per word); returns the chosen (first word, n)."""
    num_words = len(bounds) - 1
    order = np.argsort(keys).tolist()
    cdf = _ngram_cdf(max_ngram)
    covered = bytearray(num_words)
    chosen, total = [], 0
    for start in order:
        if total >= budget:
            break
        n = min(bisect.bisect_right(cdf, size_draws[start]) + 1, num_words - start)  # clipped at the last word
        while n > 1 and total + bounds[start + n] - bounds[start] > budget:
            n -= 1
        size = bounds[start + n] - bounds[start]
        if total + size > budget or any(covered[start:start + n]):
            continue
        covered[start:start + n] = b"\x01" * n
        chosen.append((start, n))
        total += size
    return chosen


def mask_sequence(tokens, special, vocab, cfg, rng):
    """One sequence through the batched masker: (sorted positions, what the model sees there)."""
    batch = mask_batch(tokens[None], np.array([tokens.size]), special[None], vocab, cfg, rng, vocab.random_ids)
    count = int(batch.counts[0])
    return batch.positions[0, :count], batch.inputs[0, :count]


def _batched_selection(lengths_per_row, budgets, max_ngram, rng):
    """Covered words of `select_ngrams_batch` for rows of word lengths."""
    rows = len(lengths_per_row)
    num_words = np.array([len(x) for x in lengths_per_row])
    wmax = max(int(num_words.max()), 1)
    bounds = np.zeros((rows, wmax + 1 + max_ngram), dtype=np.int64)
    for i, lengths in enumerate(lengths_per_row):
        cum = np.concatenate(([0], np.cumsum(lengths)))
        bounds[i, :len(cum)], bounds[i, len(cum):] = cum, cum[-1]
    keys, sizes = rng.random((rows, wmax)), rng.random((rows, wmax))
    return select_ngrams_batch(bounds, num_words, np.asarray(budgets), max_ngram, keys, sizes)


def _vocab(tokenizer) -> MaskingVocab:
    special = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id)
    return MaskingVocab(np.asarray(tokenizer.word_start_mask(), dtype=bool), tokenizer.mask_id, special)


def _special(tokens: np.ndarray) -> np.ndarray:
    special = np.zeros(tokens.size, dtype=bool)
    special[[0, tokens.size - 1]] = True
    return special


def test_ngram_probabilities_are_harmonic():
    np.testing.assert_allclose(ngram_probabilities(3), [6 / 11, 3 / 11, 2 / 11])
    np.testing.assert_allclose(ngram_probabilities(1), [1.0])


def test_ngram_size_draws_follow_one_over_n():
    draws = ngram_sizes(np.random.default_rng(0).random(200_000), 3)
    observed = np.bincount(draws, minlength=4)[1:]
    expected = ngram_probabilities(3) * draws.size
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # a wrong distribution (uniform) is rejected by the same test
    assert stats.chisquare(observed, np.full(3, draws.size / 3)).pvalue < 1e-6


def test_budget_matches_google():
    cfg = MaskingConfig()
    assert num_to_predict(128, cfg) == 19  # round(19.2)
    assert num_to_predict(512, cfg) == 20  # the cap
    assert num_to_predict(3, cfg) == 1  # at least one
    assert num_to_predict(512, MaskingConfig(max_predictions_per_seq=80)) == 77
    assert num_to_predict(100, MaskingConfig(masked_lm_prob=0.0)) == 0


def test_mask_rate_and_runs_on_real_text(tokenizer, real_sequences):
    """The issue's measurements of google's builder: 14.8% of tokens, runs of 1/2/3 tokens ~50/26/16%."""
    vocab, cfg, rng = _vocab(tokenizer), MaskingConfig(), np.random.default_rng(1)
    masked, tokens, runs = 0, 0, []
    for _ in range(3):
        for seq in real_sequences:
            positions, _ = mask_sequence(seq, _special(seq), vocab, cfg, rng)
            assert positions.size == 19
            masked, tokens = masked + positions.size, tokens + seq.size
            breaks = np.flatnonzero(np.diff(positions) != 1)
            runs.extend(np.diff(np.concatenate(([0], breaks + 1, [positions.size]))).tolist())
    assert masked / tokens == pytest.approx(0.148, abs=0.001)
    shares = np.bincount(runs)[1:4] / len(runs)
    np.testing.assert_allclose(shares, [0.50, 0.26, 0.16], atol=0.03)


def test_chosen_ngrams_respect_budget_and_never_overlap():
    """On the reference's n-grams (n <= 3, inside the row, disjoint, within budget) for the same draws
    that give the batched selection's covered words."""
    rng = np.random.default_rng(2)
    rows = [rng.integers(1, 4, size=int(rng.integers(1, 60))) for _ in range(300)]
    budgets = [int(rng.integers(1, 25)) for _ in rows]
    draws = np.random.default_rng(3)
    covered = _batched_selection(rows, budgets, 3, draws)
    draws = np.random.default_rng(3)
    wmax = max(len(r) for r in rows)
    keys, sizes = draws.random((len(rows), wmax)), draws.random((len(rows), wmax))
    for i, (lengths, budget) in enumerate(zip(rows, budgets)):
        bounds = [0, *np.cumsum(lengths).tolist()]
        chosen = greedy_ngrams(bounds, budget, 3, keys[i, :lengths.size], sizes[i, :lengths.size])
        words = [w for start, n in chosen for w in range(start, start + n)]
        assert len(words) == len(set(words))
        assert all(1 <= n <= 3 and start + n <= lengths.size for start, n in chosen)
        assert sum(lengths[w] for w in words) <= budget
        assert sorted(words) == np.flatnonzero(covered[i]).tolist()


def test_whole_words_are_masked_entirely_and_specials_never(tokenizer, real_sequences):
    vocab, cfg, rng = _vocab(tokenizer), MaskingConfig(), np.random.default_rng(3)
    for seq in real_sequences[:100]:
        special = _special(seq)
        positions, _ = mask_sequence(seq, special, vocab, cfg, rng)
        assert not special[positions].any()
        words, _ = word_index(seq[None], ~special[None], vocab.word_start, cfg)
        words = words[0]
        lengths = np.bincount(words[words >= 0])
        hit = np.zeros(lengths.size, dtype=int)
        np.add.at(hit, words[positions], 1)
        touched = hit > 0
        assert (hit[touched] == lengths[touched]).all()


def test_token_mode_masks_single_tokens_ignoring_words():
    cfg = MaskingConfig(mode="token")
    vocab = MaskingVocab(np.zeros(50, dtype=bool), 4, (0, 1, 2, 3, 4))  # no word starts: one giant "word"
    seq = np.concatenate(([2], np.arange(5, 50), [3]))
    positions, _ = mask_sequence(seq, _special(seq), vocab, cfg, np.random.default_rng(4))
    assert positions.size == num_to_predict(seq.size, cfg)
    ngram = mask_sequence(seq, _special(seq), vocab, MaskingConfig(), np.random.default_rng(4))[0]
    assert ngram.size == 0  # the whole sequence is one word longer than the budget


def test_replacement_is_80_10_10_and_never_special():
    rng = np.random.default_rng(5)
    original = rng.integers(5, 1000, size=200_000)
    random_ids = np.arange(5, 1000)
    shown = replacement_ids(original, 4, random_ids, MaskingConfig(), rng)
    is_mask = shown == 4
    kept = shown == original
    randomised = ~is_mask & ~kept
    assert is_mask.mean() == pytest.approx(0.8, abs=0.005)
    assert kept.mean() == pytest.approx(0.1 + 0.1 / 995, abs=0.005)
    assert randomised.mean() == pytest.approx(0.1, abs=0.005)
    assert (shown[randomised] >= 5).all()


def test_masking_is_seeded(tokenizer, real_sequences):
    vocab, cfg, seq = _vocab(tokenizer), MaskingConfig(), real_sequences[0]
    a = mask_sequence(seq, _special(seq), vocab, cfg, np.random.default_rng(7))
    b = mask_sequence(seq, _special(seq), vocab, cfg, np.random.default_rng(7))
    c = mask_sequence(seq, _special(seq), vocab, cfg, np.random.default_rng(8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_batched_selection_agrees_with_the_reference_draw_for_draw():
    """The builder's vectorised greedy selection equals the per-instance Python loop on the same draws."""
    rng = np.random.default_rng(10)
    rows, max_ngram = 400, 3
    num_words = rng.integers(0, 60, size=rows)
    wmax = int(num_words.max())
    bounds = np.zeros((rows, wmax + 1 + max_ngram), dtype=np.int64)
    budgets = rng.integers(1, 25, size=rows)
    keys, sizes = rng.random((rows, wmax)), rng.random((rows, wmax))
    reference = np.zeros((rows, wmax), dtype=bool)
    for i, count in enumerate(num_words):
        cum = np.concatenate(([0], np.cumsum(rng.integers(1, 4, size=count))))
        bounds[i, :count + 1], bounds[i, count + 1:] = cum, cum[-1]
        for start, n in greedy_ngrams(cum.tolist(), int(budgets[i]), max_ngram, keys[i, :count], sizes[i, :count]):
            reference[i, start:start + n] = True
    np.testing.assert_array_equal(select_ngrams_batch(bounds, num_words, budgets, max_ngram, keys, sizes), reference)


def test_batched_masking_on_real_text(tokenizer, real_sequences):
    vocab, cfg = _vocab(tokenizer), MaskingConfig()
    tokens = np.stack(real_sequences)
    lengths = np.full(len(tokens), tokens.shape[1])
    special = np.zeros(tokens.shape, dtype=bool)
    special[:, [0, -1]] = True
    batch = mask_batch(tokens, lengths, special, vocab, cfg, np.random.default_rng(11), vocab.random_ids)
    assert (batch.counts == 19).all()
    runs = []
    for row, count in zip(batch.positions, batch.counts):
        positions = row[:count]
        assert (np.diff(positions) > 0).all() and positions.min() > 0 and positions.max() < tokens.shape[1] - 1
        breaks = np.flatnonzero(np.diff(positions) != 1)
        runs.extend(np.diff(np.concatenate(([0], breaks + 1, [count]))).tolist())
    np.testing.assert_allclose(np.bincount(runs)[1:4] / len(runs), [0.50, 0.26, 0.16], atol=0.03)
    shown = batch.inputs[:, :19]
    original = np.take_along_axis(tokens, batch.positions[:, :19], axis=1)
    assert (shown == vocab.mask_id).mean() == pytest.approx(0.8, abs=0.03)
    assert (shown == original).mean() == pytest.approx(0.1, abs=0.02)
