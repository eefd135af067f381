"""Question answering and multiple choice, audit 17: SQuAD's character offsets of compatibility characters that
decompose to capitals (`™`, `℃`, modifier letters), a bare "▁" piece (no characters) chosen as the best span
and repeated texts in the n-best list, RACE levels named twice; and, end to end, that gold answers score 100
(oracle logits through windows and post-processing, scored by the CLI)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tasks import race, squad
from albertlm.tasks.tables import Problems
from conftest import shared_path


@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


# ------------------------------------------------------------------------------------ SQuAD offsets

@pytest.mark.parametrize("word, pieces, expected", [
    # `™` folds to `TM`: 't' covered all of it and 'm' nothing
    ("™", ["▁", "t", "m"], [(0, 0), (0, 1), (0, 1)]),
    # `℃` folds to `°C`: '<unk>' ran on over the comma, 'c' and ',' were left empty at the word's end
    ("5℃,", ["▁5", "<unk>", "c", ","], [(0, 1), (1, 2), (1, 2), (2, 3)]),
    # modifier capitals (wikitext-2 test has `力加勝北区ᴵᴺᵀᵃছজটডণত`): '<unk>' took the whole word
    ("区ᴵᴺᵀᵃছ", ["▁", "<unk>", "in", "ta", "<unk>"], [(0, 0), (0, 1), (1, 3), (3, 5), (5, 6)]),
])
def test_compatibility_characters_that_decompose_to_capitals_keep_their_own_span(word, pieces, expected):
    assert squad.piece_spans(word, pieces, 0) == expected


def test_real_tokenizer_pieces_of_capital_compatibility_characters(spm):
    """The same through the tokenizer: every piece of `5℃,` and `™` covers the characters it came from."""
    context = "It was 5℃, a ™ mark."
    tokens = squad.tokenize_contexts(spm, [context])[0]
    pieces = [(spm.id_to_token(i), context[s:e]) for i, (s, e) in zip(tokens.ids, tokens.spans)]
    assert (",", ",") in pieces and ("c", "℃") in pieces and ("m", "™") in pieces, pieces


# --------------------------------------------------------------------------------- SQuAD n-best

def _window(spm, context: str, n_best: int = 5):
    example = squad.SquadExample("q", "What?", context, [])
    settings = squad.SquadSettings(max_seq_length=32, doc_stride=8, max_query_length=8, n_best_size=n_best)
    features = squad.build_features(spm, [example], settings, training=False)
    assert len(features) == 1
    return example, features, settings, [spm.id_to_token(int(i)) for i in features[0].input_ids]


def test_a_bare_piece_is_never_the_best_span_and_nbest_texts_are_distinct(spm):
    """`(decomposed` is `▁`, `(`, `de`, `composed`: a span on the bare `▁` alone has no text. It was the best
    non-null span (v1.1 predicted '', a certain 0; v2.0 an abstention), and `▁`..`(` repeated `(`'s text."""
    example, features, settings, tokens = _window(spm, "The accent (decomposed) is near.")
    bare = tokens.index("▁")
    assert tokens[bare + 1] == "("
    start, end = np.zeros(len(tokens)), np.zeros(len(tokens))
    start[bare], end[bare] = 5.0, 5.0          # the bare piece alone: score 10, no text
    start[bare + 1], end[bare + 1] = 4.0, 3.0  # `▁`..`(` scores 8, `(`..`(` 7: both read "("
    prediction = squad.postprocess([example], features, [start], [end], spm, settings)["q"]
    assert prediction.best.text == "(" and prediction.best.score == pytest.approx(8.0)
    texts = [span.text for span in prediction.nbest]
    assert "" not in texts and len(texts) == len(set(texts)), texts
    assert squad.final_predictions({"q": prediction}, "1.1") == {"q": "("}
    assert prediction.score_diff == pytest.approx(0.0 - 8.0)    # null ([CLS]: 0 + 0) minus the best span


# ---------------------------------------------------------------------------------------------- RACE

def test_race_levels_named_twice_read_each_passage_once():
    """`--levels middle,middle` read every middle passage twice: num_middle doubled, training saw them twice."""
    root = shared_path("race", "RACE")
    once = race.read_race(root, "dev", ("middle",))
    assert [e.qid for e in race.read_race(root, "dev", ("middle", "middle"))] == [e.qid for e in once]
    both = race.read_race(root, "train", ("high", "middle", "high"))
    high, middle = race.read_race(root, "train", ("high",)), race.read_race(root, "train", ("middle",))
    assert [e.qid for e in both] == [e.qid for e in high + middle]


# ------------------------------------------------------------------------- gold answers score 100

def _with_odd_paragraph(path, tmp_path):
    """dev-v2.0-small.json plus a paragraph of odd characters, two spaces, a wrong answer_start and a long
    question."""
    data = json.loads(path.read_text(encoding="utf-8"))
    context = "Zürich  café: it was 5℃, hot. The Acme™ brand sells 北京烤鸭 and 🍕 in naïve résumé style."
    qas = [("5℃", 3), ("Acme™", context.index("Acme")), ("北京烤鸭", context.index("北")), ("🍕", 0),
           ("naïve résumé", context.index("naïve")), ("Zürich  café", 0)]
    data["data"].append({"title": "odd", "paragraphs": [{"context": context, "qas": [
        {"id": f"odd{k}", "question": "What is it, " * (8 if k == 0 else 1), "is_impossible": False,
         "answers": [{"text": text, "answer_start": start}]} for k, (text, start) in enumerate(qas)]}]})
    out = tmp_path / "dev.json"
    out.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return out


def test_oracle_logits_through_small_windows_give_back_every_answer_exactly(spm, tmp_path, capsys):
    """Logits pointing at each training label, through windows far shorter than the contexts (answers cut by
    window edges, questions longer than max_query_length), post-processed: every answer comes back as its exact
    text (`5℃` was `5℃,`), every unanswerable question is null, and the files score 100 with the CLI scorer
    (the official v2.0 metric; predictions.json {id: text, '' = no answer} and null_odds.json)."""
    data = _with_odd_paragraph(shared_path("squad", "dev-v2.0-small.json"), tmp_path)
    problems = Problems()
    examples = squad.read_squad(data, problems)
    assert problems.counts["answer offset corrected"] == 2
    settings = squad.SquadSettings(max_seq_length=40, doc_stride=8, max_query_length=12, max_answer_length=100)
    features = squad.build_features(spm, examples, settings, training=True, problems=problems)
    assert len(features) > 5 * len(examples)
    assert problems.counts["question truncated to max_query_length"] >= 2
    starts, ends = [], []
    for feature in features:
        start, end = np.full(feature.length, -10.0), np.full(feature.length, -10.0)
        a, b = feature.label
        start[a], end[b] = (5.0, 5.0) if (a, b) == (0, 0) else (10.0, 10.0)
        starts.append(start)
        ends.append(end)
    predictions = squad.postprocess(examples, features, starts, ends, spm, settings)
    final = squad.final_predictions(predictions, "2.0", 0.0)
    assert final == {e.qid: e.answers[0][0] if e.answers else "" for e in examples}
    golds = squad.gold_answers(examples)
    assert squad.tune_threshold(golds, predictions)["f1"] == 100.0

    preds, odds = tmp_path / "predictions.json", tmp_path / "null_odds.json"
    preds.write_text(json.dumps(final, ensure_ascii=False), encoding="utf-8")
    odds.write_text(json.dumps(squad.null_odds(predictions)))
    assert main(["evaluate", "squad", "--data", str(data), "--predictions", str(preds), "--na-probs", str(odds)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact"] == out["f1"] == out["best_f1"] == 100.0 and out["total"] == 20
    assert out["HasAns_total"] == 14 and out["NoAns_exact"] == 100.0
