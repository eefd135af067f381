"""Audit 27 of the pretraining-data builder's instances and masking, against google-research/albert's
create_pretraining_data.py: NSP negatives of a first chunk that is one document, and google's own masking loop
(ported as written) as an oracle for the n-gram masking's distributions on real text."""
from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np

from albertlm.cli.main import main
from albertlm.data.loader import PretrainingDataset
from albertlm.data.masking import MaskingConfig, MaskingVocab, mask_batch
from conftest import alice_documents, shared_path
from test_masking import SPM, real_sequences, tokenizer  # noqa: F401  (fixtures)


def _build_nsp(text, out, *extra) -> dict:
    code = main(["data", "build", "--input", str(text), "--tokenizer", str(shared_path(*SPM)), "--out", str(out),
                 "--max-seq-length", "64", "--dupe-factor", "1", "--sentence-task", "nsp", "--chunk-chars", "2000",
                 "--no-progress", *extra])
    assert code == 0
    return json.loads((out / "meta.json").read_text()) if (out / "meta.json").exists() else {}


def test_nsp_first_chunk_of_one_document_draws_random_next_from_the_next_chunk(tmp_path, capsys):
    """Two documents, each a chunk of its own (a corpus of books): the first chunk has no previous chunk to take
    negatives from, and every 'random next' B of its document came from that document itself (counted as
    nsp_same_document: a quarter of the negatives of the five Gutenberg books). It now takes excerpts of the
    next chunk's documents; the parts of a 2-part build still make up the single build."""
    text = alice_documents(tmp_path, 400)
    meta = _build_nsp(text, tmp_path / "one")
    counts = meta["counts"]["instances"]
    assert counts["labels"]["1"] > 0
    assert counts["nsp_same_document"] == 0, counts
    single = PretrainingDataset(tmp_path / "one")
    for index in (0, 1):
        _build_nsp(text, tmp_path / "parts", "--num-shards", "2", "--shard-index", str(index))
    parts = PretrainingDataset(tmp_path / "parts")
    capsys.readouterr()
    assert sorted(bytes(single.record(i)) for i in range(len(single))) == \
        sorted(bytes(parts.record(i)) for i in range(len(parts)))


def test_a_corpus_of_one_document_still_builds_nsp_from_itself(tmp_path, capsys):
    """No other document anywhere: the same-document fallback stays (and is counted)."""
    path = tmp_path / "one.txt"
    path.write_text("\n".join(shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:200]))
    meta = _build_nsp(path, tmp_path / "out")
    capsys.readouterr()
    assert meta["counts"]["instances"]["nsp_same_document"] > 0


def _google_masked_positions(tokens: list[int], word_start: np.ndarray, special: set, max_predictions: int,
                             rng: random.Random, nprng: np.random.RandomState) -> list[int]:
    """google-research/albert create_masked_lm_predictions (ngram 3, favor_shorter_ngram, whole words), as
    written there, minus the 80/10/10 (positions only)."""
    cand_indexes: list[list[int]] = []
    for i, token in enumerate(tokens):
        if token in special:
            continue
        if cand_indexes and not word_start[token] and tokens[i - 1] not in special:
            cand_indexes[-1].append(i)   # (albertlm: a word never spans [SEP]; google's does, rarely)
        else:
            cand_indexes.append([i])
    num_to_predict = min(max_predictions, max(1, int(round(len(tokens) * 0.15))))
    ngrams = np.arange(1, 4, dtype=np.int64)
    pvals = 1. / np.arange(1, 4)
    pvals /= pvals.sum(keepdims=True)
    ngram_indexes = [[cand_indexes[idx:idx + n] for n in ngrams] for idx in range(len(cand_indexes))]
    rng.shuffle(ngram_indexes)
    masked: list[int] = []
    covered: set = set()
    for cand_index_set in ngram_indexes:
        if len(masked) >= num_to_predict:
            break
        n = nprng.choice(ngrams[:len(cand_index_set)],
                         p=pvals[:len(cand_index_set)] / pvals[:len(cand_index_set)].sum(keepdims=True))
        index_set = sum(cand_index_set[n - 1], [])
        n -= 1
        while len(masked) + len(index_set) > num_to_predict:
            if n == 0:
                break
            index_set = sum(cand_index_set[n - 1], [])
            n -= 1
        if len(masked) + len(index_set) > num_to_predict or any(i in covered for i in index_set):
            continue
        covered.update(index_set)
        masked.extend(index_set)
    return sorted(masked)


def _runs(positions: list[int]) -> Counter:
    runs, length = Counter(), 0
    for k, position in enumerate(positions):
        length = length + 1 if k and position == positions[k - 1] + 1 else 1
        if k + 1 == len(positions) or positions[k + 1] != position + 1:
            runs[min(length, 5)] += 1
    return runs


def test_ngram_masking_matches_googles_loop_in_distribution_on_real_text(tokenizer, real_sequences):  # noqa: F811
    """Measured over the ~280 128-token windows of Alice in Wonderland, masked 4 times each by both: the same number of masked tokens
    (the budget is always met) and the same histogram of contiguous masked runs (google 1/2/3 tokens about
    51/26/16%) within 1.5 points; never [CLS]/[SEP], never part of a word."""
    word_start = np.asarray(tokenizer.word_start_mask(), dtype=bool)
    special_ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id)
    vocab = MaskingVocab(word_start, tokenizer.mask_id, special_ids)
    cfg = MaskingConfig(0.15, 20, 3)
    rows = np.stack(real_sequences)
    rows = np.concatenate([rows] * 4)
    special = np.isin(rows, [tokenizer.cls_id, tokenizer.sep_id])
    ours = mask_batch(rows, np.full(len(rows), rows.shape[1]), special, vocab, cfg, np.random.default_rng(5),
                      vocab.random_ids)
    rng, nprng = random.Random(5), np.random.RandomState(5)
    ours_runs, google_runs, ours_total, google_total = Counter(), Counter(), 0, 0
    for row, tokens in enumerate(rows.tolist()):
        mine = ours.positions[row, :ours.counts[row]].tolist()
        theirs = _google_masked_positions(tokens, word_start, {tokenizer.cls_id, tokenizer.sep_id}, 20, rng, nprng)
        ours_runs += _runs(mine)
        google_runs += _runs(theirs)
        ours_total, google_total = ours_total + len(mine), google_total + len(theirs)
        assert not special[row, mine].any()
        for position in mine:   # whole words: a masked continuation piece follows a masked piece
            if not word_start[tokens[position]] and not special[row, position - 1]:
                assert position - 1 in mine
    assert ours_total == google_total == 19 * len(rows)
    for length in (1, 2, 3, 4):
        ours_share = ours_runs[length] / sum(ours_runs.values())
        google_share = google_runs[length] / sum(google_runs.values())
        assert abs(ours_share - google_share) < 0.015, (length, ours_runs, google_runs)
