"""Sentence pairs: SOP swap and 50/50 labels, one-sentence chunks, truncation, short targets, NSP and none."""
from __future__ import annotations

import numpy as np
import pytest

from albertlm.data.instances import (InstanceConfig, InstanceCounts, TokenizedDocument, create_pairs,
                                     make_document, truncate_pair)

WORD_START = np.ones(1_000_000, dtype=bool)  # every token starts a word


def _document(sentence_lengths, first_id=10) -> TokenizedDocument:
    """Token ids increase through the document, so order and provenance can be read off the ids."""
    counts = InstanceCounts()
    ids, start = [], first_id
    for length in sentence_lengths:
        ids.append(list(range(start, start + length)))
        start += length
    return make_document(ids, 10_000, counts)


def _pairs(doc, cfg, seed, pick_other=None, counts=None):
    return create_pairs(doc, cfg, np.random.default_rng(seed), WORD_START, pick_other, counts)


def test_sop_label_one_means_swapped_and_labels_are_balanced():
    rng = np.random.default_rng(0)
    cfg = InstanceConfig(max_seq_length=64, sentence_task="sop")
    labels = []
    for seed in range(200):
        doc = _document(rng.integers(3, 20, size=30))
        for pair in _pairs(doc, cfg, seed):
            assert pair.a.size >= 1 and pair.b.size >= 1
            assert pair.a.size + pair.b.size <= cfg.max_num_tokens
            if pair.label == 0:
                assert pair.a.max() < pair.b.min()
            else:
                assert pair.b.max() < pair.a.min()
            labels.append(pair.label)
    assert len(labels) > 1000
    assert np.mean(labels) == pytest.approx(0.5, abs=0.03)


def test_one_sentence_documents_are_cut_in_two_and_stay_balanced():
    cfg = InstanceConfig(max_seq_length=64, sentence_task="sop")
    labels, counts = [], InstanceCounts()
    for seed in range(1000):
        doc = _document([12])
        (pair,) = _pairs(doc, cfg, seed, counts=counts)
        both = np.sort(np.concatenate([pair.a, pair.b]))
        np.testing.assert_array_equal(both, np.arange(10, 22))  # the sentence, split, nothing else
        labels.append(pair.label)
    assert counts.one_sentence_chunks == 1000
    assert np.mean(labels) == pytest.approx(0.5, abs=0.05)  # google's fallback gives ~1.0 here


def test_one_token_document_is_dropped_and_counted():
    counts = InstanceCounts()
    assert _pairs(_document([1]), InstanceConfig(max_seq_length=64), 0, counts=counts) == []
    assert counts.dropped_chunks == 1


def _google_truncation_sizes(len_a, len_b, max_num_tokens):
    """The loop of google's truncate_seq_pair, counting only sizes (front/back does not change them)."""
    while len_a + len_b > max_num_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncation_matches_google_sizes_and_keeps_contiguous_spans():
    rng = np.random.default_rng(1)
    fronts = 0
    for _ in range(2000):
        len_a, len_b, limit = (int(x) for x in rng.integers(1, 300, size=3))
        limit = max(limit, 2)
        a, b = np.arange(len_a), np.arange(1000, 1000 + len_b)
        ta, tb = truncate_pair(a, b, limit, rng)
        assert (ta.size, tb.size) == _google_truncation_sizes(len_a, len_b, limit)
        for kept, full in ((ta, a), (tb, b)):
            assert kept.size == 0 or np.array_equal(kept, np.arange(kept[0], kept[0] + kept.size))
            assert kept.size == 0 or (kept[0] >= full[0] and kept[-1] <= full[-1])
        fronts += int(ta.size < len_a and ta[0] > 0)
    assert fronts > 200  # truncation happens at both ends


def test_short_targets_are_drawn_per_instance():
    """One long document at 512: ~10% of instances are short (google: all or none per document)."""
    rng = np.random.default_rng(2)
    doc = _document(rng.integers(10, 40, size=20_000))
    cfg = InstanceConfig(max_seq_length=512, short_seq_prob=0.1)
    counts = InstanceCounts()
    pairs = _pairs(doc, cfg, 3, counts=counts)
    lengths = np.array([p.a.size + p.b.size for p in pairs])
    short = np.mean(lengths < cfg.max_num_tokens - 40)
    assert short == pytest.approx(0.1, abs=0.03)
    assert counts.short_targets / counts.instances == pytest.approx(0.1, abs=0.03)
    no_short = _pairs(doc, InstanceConfig(max_seq_length=512, short_seq_prob=0.0), 3)
    assert np.mean([p.a.size + p.b.size < cfg.max_num_tokens - 40 for p in no_short]) < 0.01


def test_long_sentences_are_cut_to_fit():
    counts = InstanceCounts()
    doc = make_document([list(range(10, 1010))], 125, counts)
    assert counts.long_sentences_cut == 1
    assert max(np.diff(doc.offsets)) == 125 and doc.offsets[-1] == 1000
    pairs = _pairs(doc, InstanceConfig(max_seq_length=128), 0)
    assert len(pairs) == 8 and all(p.a.size + p.b.size == 125 for p in pairs)


def test_nsp_takes_random_next_from_another_document_half_the_time():
    rng = np.random.default_rng(4)
    cfg = InstanceConfig(max_seq_length=64, sentence_task="nsp")
    docs = [_document(rng.integers(3, 15, size=40), first_id=10 + 100_000 * k) for k in range(6)]
    labels = []
    for position, doc in enumerate(docs):
        others = [d for k, d in enumerate(docs) if k != position]
        pick = lambda r: others[int(r.integers(0, len(others)))]  # noqa: E731
        for seed in range(40):
            for pair in _pairs(doc, cfg, 1000 * position + seed, pick):
                same_doc = pair.b.min() // 100_000 == position
                if pair.label == 0:
                    assert same_doc and pair.a.max() < pair.b.min()
                else:
                    assert not same_doc
                assert pair.a.min() // 100_000 == position
                labels.append(pair.label)
    assert np.mean(labels) == pytest.approx(0.5, abs=0.03)


def test_mlm_only_has_one_segment_and_no_label():
    cfg = InstanceConfig(max_seq_length=64, sentence_task="none")
    assert cfg.max_num_tokens == 62
    pairs = _pairs(_document([30] * 20), cfg, 5)
    assert pairs and all(p.b is None and p.label == -100 and p.a.size <= 62 for p in pairs)
    # each instance is one contiguous span; spans follow the document order
    for p in pairs:
        np.testing.assert_array_equal(p.a, np.arange(p.a[0], p.a[0] + p.a.size))
    assert all(x.a[-1] < y.a[0] for x, y in zip(pairs, pairs[1:]))


def test_pairs_are_seeded():
    doc = _document(np.random.default_rng(6).integers(3, 20, size=50))
    cfg = InstanceConfig(max_seq_length=64)
    first, again, other = _pairs(doc, cfg, 9), _pairs(doc, cfg, 9), _pairs(doc, cfg, 10)
    assert [(p.a.tolist(), p.b.tolist(), p.label) for p in first] == [(p.a.tolist(), p.b.tolist(), p.label) for p in again]
    assert [p.label for p in first] != [p.label for p in other]
