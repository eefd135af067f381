"""SQuAD: the official metric on hand-worked cases, the readers on ../shared/data/squad, sliding windows,
and v2.0 post-processing on dev-v2.0-small.json (14 questions, 6 unanswerable)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from albertlm.errors import UserError
from albertlm.tasks import metrics, squad
from albertlm.tasks.tables import Problems
from conftest import shared_path

# ------------------------------------------------------- the official definition, worked out by hand


def test_normalize_answer():
    assert metrics.normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert metrics.normalize_answer("an apple a day") == "apple day"
    assert metrics.normalize_answer("theater") == "theater"          # articles only as whole words
    assert metrics.normalize_answer("  ") == ""


def test_exact_and_f1_by_hand():
    assert metrics.exact_match("Denmark, Iceland and Norway", "denmark iceland and norway") == 1
    assert metrics.exact_match("France", "in France") == 0
    # gold [cat, sat, on, mat], pred [cat, sat]: P = 1, R = 1/2, F1 = 2/3
    assert metrics.f1("the cat sat on the mat", "cat sat") == pytest.approx(2 / 3)
    # repeated tokens count min(2, 3) = 2 times: P = R = 2/3
    assert metrics.f1("x x y", "x x x") == pytest.approx(2 / 3)
    assert metrics.f1("x", "y") == 0.0
    # v2.0: both empty -> 1, one empty -> 0; v1.1 has no special case
    assert metrics.f1("", "") == 1.0 and metrics.f1("", "x") == 0.0 and metrics.f1("x", "") == 0.0
    assert metrics.f1_v1("", "") == 0.0


def test_v1_scores_take_max_over_golds_and_count_missing():
    golds = {"q1": ["Paris", "the city of Paris"], "q2": ["1066"], "q3": ["Rollo"]}
    preds = {"q1": "city of Paris", "q2": "in 1066 AD"}
    out = metrics.squad_v1_scores(golds, preds)
    # q1: EM 1, F1 1; q2: EM 0, F1 = 2 * (1/3 * 1) / (1/3 + 1) = 0.5; q3 missing: 0, still counted
    assert out["exact_match"] == pytest.approx(100 / 3)
    assert out["f1"] == pytest.approx(100 * 1.5 / 3)
    assert out["total"] == 3 and out["missing"] == 1


def test_v2_scores_and_threshold_sweep_by_hand():
    golds = {"q1": ["a1x"], "q2": [], "q3": ["right"], "q4": ["the", "Rome"]}
    preds = {"q1": "a1x", "q2": "foo", "q3": "wrong", "q4": "rome"}
    na = {"q1": 0.2, "q2": 0.9, "q3": 0.5, "q4": 0.1}
    out = metrics.squad_v2_scores(golds, preds, na)
    # threshold 1.0: nothing nulled. q1 1, q2 0 (gold ''), q3 0, q4 1 ('the' normalises to '' and is dropped)
    assert out["exact"] == pytest.approx(50.0) and out["total"] == 4
    assert out["HasAns_exact"] == pytest.approx(200 / 3) and out["HasAns_total"] == 3
    assert out["NoAns_exact"] == 0.0 and out["NoAns_total"] == 1
    # sweep from all-null (1 right: q2); q4 +1 -> 2 (0.1), q1 +1 -> 3 (0.2), q3 +0, q2 -1
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.2
    nulled = metrics.squad_v2_scores(golds, preds, na, na_prob_thresh=0.4)   # q2, q3 become ''
    assert nulled["exact"] == pytest.approx(75.0) and nulled["NoAns_exact"] == 100.0


# ----------------------------------------------------------------------------------------- readers


def test_readers_nested_and_flat_agree():
    nested = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))
    flat = squad.read_squad(shared_path("squad", "sample.json"))
    assert len(nested) == len(flat) == 14
    assert sum(e.is_impossible for e in nested) == sum(e.is_impossible for e in flat) == 6
    assert [e.qid for e in nested] == [e.qid for e in flat]
    def answer_sets(examples):
        return {qid: set(texts) for qid, texts in squad.gold_answers(examples).items()}

    nested_sets, flat_sets = answer_sets(nested), answer_sets(flat)
    assert all(nested_sets[q] <= flat_sets[q] for q in flat_sets)   # flat lists every annotator's answer
    assert sum(not answers for answers in flat_sets.values()) == 6
    for e in nested:
        for text, start in e.answers:
            assert e.context[start:start + len(text)] == text


def test_answer_offset_mismatch(tmp_path):
    data = {"data": [{"title": "t", "paragraphs": [{"context": "Rollo met Charles in 911.",
                                                   "qas": [{"id": "q1", "question": "Who?",
                                                            "answers": [{"text": "Charles", "answer_start": 3}]}]}]}]}
    path = tmp_path / "train.json"
    path.write_text(json.dumps(data))
    problems = Problems()
    (example,) = squad.read_squad(path, problems)           # the text exists: re-anchored, counted
    assert example.answers == [("Charles", 10)] and problems.counts["answer offset corrected"] == 1
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = "Pippin"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"train\.json: question q1: answer 'Pippin' at offset 3"):
        squad.read_squad(path)


# ---------------------------------------------------------------------------- windows and offsets


@pytest.fixture(scope="module")
def albert_tokenizer():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def test_window_starts():
    assert squad.window_starts(10, 20, 5) == [0]
    assert squad.window_starts(300, 100, 40) == [0, 40, 80, 120, 160, 200]
    assert squad.window_starts(101, 100, 128) == [0, 100]


def test_piece_spans_map_back_to_characters():
    assert squad.piece_spans("Normandy,", ["▁norman", "dy", ","], 10) == [(10, 16), (16, 18), (18, 19)]
    assert squad.piece_spans("Ωx", ["▁", "<unk>", "x"], 0) == [(0, 0), (0, 1), (1, 2)]
    assert squad.piece_spans("naïve", ["▁nai", "ve"], 0) == [(0, 3), (3, 5)]  # re-synced on the next piece


def _oracle_logits(features):
    """Logits that point at each training label (the answer span, or [CLS] for no answer)."""
    starts, ends = [], []
    for f in features:
        s, e = np.full(f.length, -10.0), np.full(f.length, -10.0)
        s[f.label[0]] += 20
        e[f.label[1]] += 20
        starts.append(s)
        ends.append(e)
    return starts, ends


def test_v2_postprocessing_on_dev_small(albert_tokenizer):
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))
    settings = squad.SquadSettings(max_seq_length=96, doc_stride=32)     # several windows per question
    features = squad.build_features(albert_tokenizer, examples, settings, training=True)
    assert len(features) > 2 * len(examples)
    assert all(f.length <= 96 for f in features)
    starts, ends = _oracle_logits(features)
    preds = squad.postprocess(examples, features, starts, ends, albert_tokenizer, settings)
    answerable = [e for e in examples if not e.is_impossible]
    for e in answerable:   # the span maps back to the original characters exactly
        assert preds[e.qid].best.text == e.answers[0][0]
    for e in examples:     # null-odds: negative for answerable, positive for unanswerable
        assert (preds[e.qid].score_diff > 0) == e.is_impossible
    golds = squad.gold_answers(examples)
    tuned = squad.tune_threshold(golds, preds)
    assert tuned["exact"] == tuned["f1"] == 100.0
    assert tuned["HasAns_total"] == 8 and tuned["NoAns_total"] == 6
    final = squad.final_predictions(preds, "2.0", tuned["null_threshold"])
    assert sum(1 for text in final.values() if text == "") == 6
    # without a null option (v1.1 rules) the unanswerable ones get their best span
    assert all(final_v1 for final_v1 in squad.final_predictions(preds, "1.1").values())


def test_window_labels_point_inside_their_window(albert_tokenizer):
    examples = squad.read_squad(shared_path("squad", "sample.json"))
    settings = squad.SquadSettings(max_seq_length=64, doc_stride=16, max_query_length=12)
    problems = Problems()
    features = squad.build_features(albert_tokenizer, examples, settings, True, problems)
    for f in features:
        doc = f.extra["doc_offset"]
        assert f.input_ids[0] == albert_tokenizer.cls_id and f.input_ids[doc - 1] == albert_tokenizer.sep_id
        assert (f.token_type_ids[:doc] == 0).all() and (f.token_type_ids[doc:] == 1).all()
        assert f.label == (0, 0) or doc <= f.label[0] <= f.label[1] < f.length - 1
    assert problems.counts["question truncated to max_query_length"] >= 1



def test_null_threshold_applied_gives_the_best_f1_when_answering_nothing_is_best():
    """Our null odds (null - best span logits) are negative here; answering nothing everywhere is best, so
    the threshold must lie below every odds (not the official script's 0.0, meant for probabilities)."""
    golds = {"q1": [], "q2": [], "q3": ["right"]}
    preds = {"q1": squad.ExamplePrediction(squad.SpanPrediction("foo", 5.0), null_score=4.0),
             "q2": squad.ExamplePrediction(squad.SpanPrediction("bar", 5.0), null_score=3.0),
             "q3": squad.ExamplePrediction(squad.SpanPrediction("wrong", 5.0), null_score=2.0)}
    tuned = squad.tune_threshold(golds, preds)
    assert tuned["best_f1"] == pytest.approx(200 / 3)
    assert tuned["null_threshold"] < -3.0
    written = squad.final_predictions(preds, "2.0", tuned["null_threshold"])   # what predictions.json holds
    assert written == {"q1": "", "q2": "", "q3": ""}
    assert tuned["f1"] == pytest.approx(tuned["best_f1"])
    assert metrics.squad_v2_scores(golds, written)["f1"] == pytest.approx(tuned["best_f1"])
    # probabilities (all > 0) keep the official script's 0.0
    spans = {q: p.best.text for q, p in preds.items()}
    official = metrics.squad_v2_scores(golds, spans, {"q1": 0.9, "q2": 0.8, "q3": 0.7})
    assert official["best_f1_thresh"] == 0.0 and official["best_f1"] == pytest.approx(200 / 3)
