"""SQuAD audit 23, as a researcher comparing every file with google-research/BERT's run_squad and the official
evaluate-v1.1.py / evaluate-v2.0.py: v2.0's nbest_predictions.json had no "" (null) entry, which BERT's and
transformers' files hold with its score; a gold answer that is not in its context stopped `evaluate --predictions`
(the official scripts score it by its text); a v1.1 file read under the default `--version 2.0` was scored and
predicted as v2.0 without a word (the file's own version can be read from it); odds tied at the tuned null
threshold gave a `best_f1` that applying the threshold did not give; predictions for ids not in the gold file were
ignored without a word. Also checked (passing before): v1.1 fine-tuning end to end on windows shorter than the
contexts, its files scored by the official v1.1 algorithm; unicode answers scored as the official scripts; a
question's leading whitespace costs no tokens."""
from __future__ import annotations

import collections
import json
import re
import string
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks import squad
from conftest import save_tiny_pretrained, shared_path


# ------------------------------------------------------------------ the official scripts, transcribed

def _normalize(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s, flags=re.UNICODE)
    return " ".join(s.split())


def _f1_v1(prediction: str, truth: str) -> float:
    p, g = _normalize(prediction).split(), _normalize(truth).split()
    same = sum((collections.Counter(p) & collections.Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def official_v1(dataset: list, predictions: dict) -> dict:
    """evaluate-v1.1.py's evaluate(dataset, predictions)."""
    f1 = exact = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                truths = [a["text"] for a in qa["answers"]]
                exact += max(float(_normalize(predictions[qa["id"]]) == _normalize(t)) for t in truths)
                f1 += max(_f1_v1(predictions[qa["id"]], t) for t in truths)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _f1_v2(gold: str, pred: str) -> float:
    g, p = _normalize(gold).split(), _normalize(pred).split()
    if not g or not p:
        return float(g == p)
    return _f1_v1(pred, gold)


def official_v2(dataset: list, preds: dict) -> dict:
    """evaluate-v2.0.py's exact / f1 (no null odds)."""
    exact, f1 = {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["id"] not in preds:
                    continue
                golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
                exact[qa["id"]] = max(float(_normalize(a) == _normalize(preds[qa["id"]])) for a in golds)
                f1[qa["id"]] = max(_f1_v2(a, preds[qa["id"]]) for a in golds)
    return {"exact": 100.0 * sum(exact.values()) / len(exact), "f1": 100.0 * sum(f1.values()) / len(f1)}


def official_find_best_thresh(preds, scores, na_probs, qid_to_has_ans):
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = best_score = num_no_ans
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        diff = scores[qid] if qid_to_has_ans[qid] else (-1 if preds[qid] else 0)
        cur_score += diff
        if cur_score > best_score:
            best_score, best_thresh = cur_score, na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


# ----------------------------------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _v11(path: Path) -> Path:
    """dev-v2.0-small.json as a v1.1 file: its answerable questions, no is_impossible, "version": "1.1"."""
    data = json.loads(shared_path("squad", "dev-v2.0-small.json").read_text(encoding="utf-8"))
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{k: v for k, v in qa.items() if k != "is_impossible"}
                                for qa in paragraph["qas"] if not qa.get("is_impossible")]
    data["version"] = "1.1"
    return _write(path, data)


def _err_lines(capsys) -> tuple[str, list[str]]:
    captured = capsys.readouterr()
    return captured.out, [line for line in captured.err.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- 1. n-best null entry

def _one_window(spm, context: str, start_at: dict[int, float], end_at: dict[int, float], null: tuple[float, float],
                n_best_size: int = 20):
    example = squad.SquadExample("q", "Which one?", context, [])
    settings = squad.SquadSettings(max_seq_length=32, max_query_length=8, n_best_size=n_best_size)
    (feature,) = squad.build_features(spm, [example], settings, training=False)
    x = feature.extra
    start, end = np.full(feature.length, -20.0), np.full(feature.length, -20.0)
    for token, value in start_at.items():
        start[x["doc_offset"] + token] = value
    for token, value in end_at.items():
        end[x["doc_offset"] + token] = value
    start[0], end[0] = null
    return squad.postprocess([example], [feature], [start], [end], spm, settings)


def test_v2_nbest_holds_the_null_answer_with_its_score_as_bert_writes_it(spm):
    """BERT run_squad --version_2_with_negative and transformers' postprocess_qa_predictions list "" among the n
    best with the [CLS] logits (in its place by score, else appended) and give it its share of the softmax."""
    # context tokens: ▁roll o ▁met ▁charles ▁in ▁911 .  -> spans "Rollo met" (5+4), "Charles" (3+3); null 2+2.5
    preds = _one_window(spm, "Rollo met Charles in 911.", {0: 5.0, 3: 3.0}, {2: 4.0, 3: 3.0}, (2.0, 2.5))
    entries = squad.nbest_json(preds, "2.0")["q"]
    texts = [e["text"] for e in entries]
    assert texts[0] == "Rollo met" and "" in texts
    null = entries[texts.index("")]
    assert (null["start_logit"], null["end_logit"], null["score"]) == (2.0, 2.5, 4.5)
    scores = [e["score"] for e in entries]
    assert scores == sorted(scores, reverse=True)                       # in its place by score
    probs = np.exp(np.array(scores) - max(scores))
    assert [e["probability"] for e in entries] == pytest.approx(list(probs / probs.sum()))
    assert "" not in [e["text"] for e in squad.nbest_json(preds, "1.1")["q"]]   # BERT's v1.1 file: spans only
    # a null below every one of the n best is appended after them (n_best_size 2: two spans, then "")
    low = _one_window(spm, "Rollo met Charles in 911.", {0: 5.0, 3: 3.0}, {2: 4.0, 3: 3.0}, (-9.0, -9.0), 2)
    assert [e["text"] for e in squad.nbest_json(low, "2.0")["q"]][-1] == ""
    assert len(squad.nbest_json(low, "2.0")["q"]) == 3
    # a null among the n best takes the place of the last span (n_best_size 2: "Rollo met", "")
    high = _one_window(spm, "Rollo met Charles in 911.", {0: 5.0, 3: 3.0}, {2: 4.0, 3: 3.0}, (4.0, 4.0), 2)
    assert [e["text"] for e in squad.nbest_json(high, "2.0")["q"]] == ["Rollo met", ""]


# ----------------------------------------------------------------- 2. gold answers not in the context

def test_a_gold_answer_not_in_its_context_is_scored_by_its_text(tmp_path, capsys):
    """The official scripts read the gold texts only; `evaluate --predictions` stopped with a DataError."""
    gold = _v11(tmp_path / "v11.json")
    data = json.loads(gold.read_text(encoding="utf-8"))
    qa = data["data"][0]["paragraphs"][0]["qas"][0]
    qa["answers"].append({"text": "the Duchy of Atlantis", "answer_start": 3})     # nowhere in the context
    _write(gold, data)
    ids = [q["id"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    preds = _write(tmp_path / "predictions.json", {qid: "Duchy of Atlantis" if qid == qa["id"] else "France"
                                                   for qid in ids})
    assert main(["evaluate", "squad", "--version", "1.1", "--data", str(gold), "--predictions", str(preds)]) == 0
    out, err = _err_lines(capsys)
    metrics = json.loads(out)
    expected = official_v1(data["data"], json.loads(preds.read_text(encoding="utf-8")))
    assert metrics["exact_match"] == pytest.approx(expected["exact_match"]) and metrics["exact_match"] > 0
    assert metrics["f1"] == pytest.approx(expected["f1"])
    assert len(err) == 1 and "1 gold answer not in its context" in err[0] and qa["id"] in err[0], err
    with pytest.raises(UserError, match="is not in the context"):      # training still needs its place
        squad.read_squad(gold)


# -------------------------------------------------------------------------------- 3. the version

def test_the_version_a_file_shows(tmp_path):
    v11 = squad.read_squad(_v11(tmp_path / "v11.json"))
    assert squad.detect_version(v11)[0] == "1.1"
    assert squad.detect_version(squad.read_squad(shared_path("squad", "dev-v2.0-small.json")))[0] == "2.0"
    assert squad.detect_version(squad.read_squad(shared_path("squad", "sample.json")))[0] == "2.0"
    # datasets' "squad" (v1.1) export: flat records, no version, every question answered, no is_impossible
    flat = [{"id": e.qid, "question": e.question, "context": e.context,
             "answers": {"text": [t for t, _ in e.answers], "answer_start": [s for _, s in e.answers]}} for e in v11]
    lines = tmp_path / "train.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in flat), encoding="utf-8")
    assert squad.detect_version(squad.read_squad(lines)) == ("1.1", "every question has an answer and none has "
                                                             "v2.0's is_impossible field")
    # a v2.0 file of answerable questions still says so by its is_impossible fields
    marked = [dict(r, is_impossible=False) for r in flat]
    assert squad.detect_version(squad.read_squad(_write(tmp_path / "m.json", marked)))[0] == "2.0"
    # new questions (no answers, no field, no version) show none: --version must be given
    unlabelled = [dict(r, answers={"text": [], "answer_start": []}) for r in flat]
    unlabelled_examples = squad.read_squad(_write(tmp_path / "new.json", unlabelled))
    assert squad.detect_version(unlabelled_examples)[0] is None
    with pytest.raises(UserError, match="which SQuAD version.*give --version 1.1 or --version 2.0"):
        squad.resolve_version("", [("new.json", unlabelled_examples)])
    assert squad.resolve_version("2.0", [("new.json", unlabelled_examples)]) == "2.0"
    with pytest.raises(UserError, match="disagree"):
        squad.resolve_version(None, [("v11.json", v11), ("sample.json", squad.read_squad(
            shared_path("squad", "sample.json")))])


def test_a_v1_1_file_scored_without_a_version_is_scored_as_v1_1(tmp_path, capsys):
    """No version: the gold file's own (v1.1 metrics, a missing prediction scores 0 as evaluate-v1.1.py), also for
    the CLI, whose --version has no default; `--version 2.0` given on a v1.1 file says what it does, in one
    warning line."""
    gold = _v11(tmp_path / "v11.json")
    data = json.loads(gold.read_text(encoding="utf-8"))["data"]
    ids = [q["id"] for a in data for p in a["paragraphs"] for q in p["qas"]]
    preds = _write(tmp_path / "predictions.json", {qid: "Normans" for qid in ids[:-1]})
    result = squad.evaluate_files(gold, preds, None)
    assert result.version == "1.1" and result.metrics["exact_match"] == official_v1(data, {
        qid: "Normans" for qid in ids[:-1]})["exact_match"]
    assert main(["evaluate", "squad", "--data", str(gold), "--predictions", str(preds)]) == 0
    out, err = _err_lines(capsys)
    assert "exact_match" in out and not [line for line in err if "looks like a SQuAD v1.1 file" in line], err
    assert main(["evaluate", "squad", "--version", "2.0", "--data", str(gold), "--predictions", str(preds)]) == 0
    _, err = _err_lines(capsys)
    note = [line for line in err if "looks like a SQuAD v1.1 file" in line]
    assert len(note) == 1 and "give --version 1.1" in note[0] and "version\" is 1.1" in note[0], err


# ---------------------------------------------------------------------------- 4. ties at the threshold

def test_odds_tied_at_the_tuned_threshold_give_the_best_f1_when_applied():
    """A answered right and B unanswerable but answered, both at odds 0.5: the official sweep counts A alone
    (best_f1 100 at 0.5), but a threshold answers or nulls them together, and predictions.json scored 50."""
    golds = {"a": ["Charles"], "b": []}
    preds = {"a": squad.ExamplePrediction(squad.SpanPrediction("Charles", 1.0), null_score=1.5),
             "b": squad.ExamplePrediction(squad.SpanPrediction("Rollo", 1.0), null_score=1.5)}
    metrics = squad.tune_threshold(golds, preds)
    assert metrics["f1"] == pytest.approx(metrics["best_f1"]) == pytest.approx(50.0)
    assert metrics["exact"] == pytest.approx(metrics["best_exact"])
    applied = squad.final_predictions(preds, "2.0", metrics["null_threshold"])
    assert official_v2([{"paragraphs": [{"qas": [{"id": "a", "answers": [{"text": "Charles"}]},
                                                 {"id": "b", "answers": []}]}]}], applied)["f1"] == 50.0


def test_without_ties_the_threshold_is_the_official_sweeps():
    rng = np.random.default_rng(0)
    golds, preds = {}, {}
    for i in range(60):
        qid = f"q{i}"
        golds[qid] = ["alpha beta"] if rng.random() < 0.7 else []
        text = ["alpha beta", "alpha beta", "beta", "gamma"][rng.integers(4)]
        preds[qid] = squad.ExamplePrediction(squad.SpanPrediction(text, float(rng.normal())),
                                             null_score=float(rng.normal()))
    metrics = squad.tune_threshold(golds, preds)
    spans = {q: p.best.text for q, p in preds.items()}
    odds = squad.null_odds(preds)
    assert len(set(odds.values())) == len(odds)
    has = {q: bool(a) for q, a in golds.items()}
    f1s = {q: max(_f1_v2(a, spans[q]) for a in (golds[q] or [""])) for q in golds}
    best, thresh = official_find_best_thresh(spans, f1s, odds, has)
    assert best > 100.0 * sum(not h for h in has.values()) / len(has)   # better than answering nothing
    assert (metrics["best_f1"], metrics["best_f1_thresh"]) == (pytest.approx(best), thresh)
    assert metrics["f1"] == pytest.approx(best)


# --------------------------------------------------------------- predictions for ids not in the data

def test_predictions_for_ids_not_in_the_gold_file_are_named(tmp_path, capsys):
    gold = shared_path("squad", "dev-v2.0-small.json")
    ids = [e.qid for e in squad.read_squad(gold)]
    preds = _write(tmp_path / "predictions.json", {**dict.fromkeys(ids, ""), "from-another-file": "x"})
    assert main(["evaluate", "squad", "--data", str(gold), "--predictions", str(preds)]) == 0
    _, err = _err_lines(capsys)
    assert len(err) == 1 and "1 prediction for question ids that are not in the gold file" in err[0], err
    assert "from-another-file" in err[0] and "ignored" in err[0]


# ------------------------------------------------------------------------------- checks that held

@pytest.mark.parametrize("gold, pred", [("Gr\u00f6\u00dfe\u00a0Stadt", "gr\u00f6\u00dfe stadt"),
                                        ("  the  caf\u00e9 ", "Caf\u00e9!"), ("1\u20442", "\u00bd"),
                                        ("\u3000\u6771\u4eac", "\u6771\u4eac")])
def test_unicode_and_whitespace_answers_score_as_the_official_scripts(gold, pred):
    from albertlm.tasks.metrics import squad_v1_scores, squad_v2_scores

    data = [{"paragraphs": [{"qas": [{"id": "q", "answers": [{"text": gold}]}]}]}]
    v1 = squad_v1_scores({"q": [gold]}, {"q": pred})
    assert (v1["exact_match"], v1["f1"]) == pytest.approx(tuple(official_v1(data, {"q": pred}).values()))
    v2 = squad_v2_scores({"q": [gold]}, {"q": pred})
    assert (v2["exact"], v2["f1"]) == pytest.approx(tuple(official_v2(data, {"q": pred}).values()))


def test_a_questions_leading_whitespace_costs_no_tokens(spm):
    """google-research / transformers strip it (some SQuAD questions start with spaces); ours never keeps it."""
    context = "Rollo met Charles in 911."
    plain = squad.SquadExample("q", "Who met Charles?", context, [])
    spaced = squad.SquadExample("q", " \u00a0\t Who met Charles?", context, [])
    settings = squad.SquadSettings(max_seq_length=32, max_query_length=8)
    (a,), (b,) = (squad.build_features(spm, [e], settings, training=False) for e in (plain, spaced))
    assert a.input_ids.tolist() == b.input_ids.tolist()


@pytest.fixture(scope="module")
def v11_run(tmp_path_factory):
    """`finetune squad --version 1.1` of a tiny model on the v1.1 file, windows far shorter than its contexts."""
    root = tmp_path_factory.mktemp("audit23_squad")
    (root / "base").mkdir()
    model = save_tiny_pretrained(root / "base")
    data = _v11(root / "v11.json")
    argv = ["finetune", "squad", "--version", "1.1", "--train", str(data), "--dev", str(data), "--model",
            str(model), "--out", str(root / "run"), "--max-seq-length", "40", "--doc-stride", "8",
            "--max-query-length", "12", "--max-steps", "3", "--batch-size", "8", "--eval-batch-size", "64",
            "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    return root, data


def test_v1_1_end_to_end_files_scored_by_the_official_v1_1_algorithm(v11_run, capsys):
    root, data = v11_run
    run = root / "run"
    final = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    predictions = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    assert not (run / "null_odds.json").exists() and all(predictions.values())
    dataset = json.loads(data.read_text(encoding="utf-8"))["data"]
    official = official_v1(dataset, predictions)
    assert set(predictions) == {q["id"] for a in dataset for p in a["paragraphs"] for q in p["qas"]}
    nbest = json.loads((run / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert all(entries[0]["text"] == predictions[qid] and all(e["text"] for e in entries)
               for qid, entries in nbest.items())
    capsys.readouterr()
    assert main(["evaluate", "squad", "--version", "1.1", "--data", str(data), "--predictions",
                 str(run / "predictions.json")]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert (scored["exact_match"], scored["f1"]) == pytest.approx((official["exact_match"], official["f1"]))
    dev = final["best"]["dev"]      # the run's best dev evaluation, whose predictions these are
    assert (dev["exact_match"], dev["f1"]) == pytest.approx((official["exact_match"], official["f1"]))
    problems = final["problems"]    # the windows (8 tokens apart) cut answers: counted, not lost
    assert "exact" not in dev and all("(train)" in k or "(dev)" in k for k in problems)
    # predict with the run's model: the version it recorded (1.1), the same answers, scored the same
    out = root / "predicted"
    assert main(["predict", "squad", "--model", str(run), "--dev", str(data), "--out", str(out),
                 "--device", "cpu", "--no-progress"]) == 0
    assert json.loads((out / "predictions.json").read_text(encoding="utf-8")) == predictions
