"""SQuAD audit 31, as a user who fine-tunes on v1.1 / v2.0 and submits to the official evaluator.

Found: a v1.1 `nbest_predictions.json` gave a question without a valid span an empty list (BERT's run_squad and
transformers write one "empty" stand-in entry; readers of `nbest[qid][0]` failed); the warning for questions
without a prediction said v2.0 leaves them out "as the official v2.0 script does", which stops with a KeyError on
them. Checked and holding (these tests passed before): every number `evaluate squad --predictions --na-probs`
prints is the official evaluate-v2.0.py's on tricky predictions (empty strings, unicode punctuation, articles,
whitespace, several golds, ties, an unanswerable-only file); fine-tuning's dev metrics and files are what the
official script makes of its files (BERT's and google's heads); the best span over many overlapping windows of a
long context is BERT write_predictions' (max context, max_answer_length, no span in the question); Chinese
(no spaces) and Korean answers map back to their exact characters with a SentencePiece model trained on them,
whose spans are sentencepiece's own; a resumed run with google's v2.0 head writes the same files.
"""
from __future__ import annotations

import json
import math
import random
import shutil

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.tasks import squad
from albertlm.training.checkpoint import step_dir
from conftest import save_tiny_pretrained, shared_path
from test_cjk_audit16 import _korean_lines
from test_squad_audit23 import _f1_v2, _normalize, official_find_best_thresh
from test_squadj_audit26 import SMALL


# --------------------------------------------------- evaluate-v2.0.py's main, transcribed (with its KeyError)

def official_v2_eval(dataset: list, preds: dict, na_probs: dict | None = None, na_prob_thresh: float = 1.0) -> dict:
    """evaluate-v2.0.py: get_raw_scores, apply_no_ans_threshold, make_eval_dict (HasAns / NoAns over every gold
    question: a missing prediction is a KeyError there) and, with a na_prob file, find_all_best_thresh."""
    has_ans = {qa["id"]: bool(qa["answers"]) for a in dataset for p in a["paragraphs"] for qa in p["qas"]}
    exact_raw, f1_raw = {}, {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                golds = [a["text"] for a in qa["answers"] if _normalize(a["text"])] or [""]
                if qa["id"] not in preds:
                    continue
                pred = preds[qa["id"]]
                exact_raw[qa["id"]] = max(int(_normalize(a) == _normalize(pred)) for a in golds)
                f1_raw[qa["id"]] = max(_f1_v2(a, pred) for a in golds)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in preds}

    def thresholded(scores):
        return {q: float(not has_ans[q]) if probs[q] > na_prob_thresh else s for q, s in scores.items()}

    def eval_dict(exact, f1, qids=None):
        qids = qids or list(exact)
        return {"exact": 100.0 * sum(exact[k] for k in qids) / len(qids),
                "f1": 100.0 * sum(f1[k] for k in qids) / len(qids), "total": len(qids)}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = eval_dict(exact, f1)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, v in has_ans.items() if v == wanted]
        if qids:
            out.update({f"{name}_{k}": v for k, v in eval_dict(exact, f1, qids).items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = official_find_best_thresh(preds, exact_raw, probs, has_ans)
        out["best_f1"], out["best_f1_thresh"] = official_find_best_thresh(preds, f1_raw, probs, has_ans)
    return out


def _write(path, data):
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _evaluate(capsys, tmp_path, dataset: list, preds: dict, odds: dict | None, *extra: str) -> tuple[dict, str]:
    gold = _write(tmp_path / "gold.json", {"version": "v2.0", "data": dataset})
    argv = ["evaluate", "squad", "--data", str(gold), "--predictions", str(_write(tmp_path / "p.json", preds))]
    if odds is not None:
        argv += ["--na-probs", str(_write(tmp_path / "odds.json", odds))]
    capsys.readouterr()
    assert main([*argv, *extra]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


CONTEXT = ("The  Normans (Norman: Nourmands; French: Normands) were the people who in the 10th and 11th "
           "centuries gave their name to Normandy, a region in France \u2014 \u201cthe land\u201d.")


def _qa(qid: str, *texts: str) -> dict:
    if not texts:
        return {"id": qid, "question": "?", "answers": [], "is_impossible": True}
    return {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": CONTEXT.index(t)} for t in texts],
            "is_impossible": False}


TRICKY = [{"title": "N", "paragraphs": [{"context": CONTEXT, "qas": [
    _qa("a", "Normandy", "a region in France"), _qa("b", "10th and 11th centuries"), _qa("c"), _qa("d", "The"),
    _qa("e", "\u201cthe land\u201d"), _qa("f"), _qa("g", "The  Normans", "Normans")]}]}]
PREDICTIONS = {   # case, articles, punctuation, an NBSP, unicode quotes, '' for answerable and unanswerable
    "mixed": ({"a": "a Region in FRANCE!", "b": "10th  and\u00a011th", "c": "", "d": "", "e": "the land",
               "f": "Normans", "g": "the normans"},
              {"a": -3.0, "b": -1.5, "c": 2.0, "d": -1.5, "e": 0.3, "f": -0.2, "g": -4.0}),
    "ties": ({"a": "Normandy", "b": "", "c": "z", "d": "w", "e": "\u201cthe land\u201d", "f": "", "g": "Normans"},
             {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.1, "e": 0.5, "f": 0.5, "g": 0.2}),
    "probabilities": ({"a": "in France", "b": "11th centuries", "c": "", "d": "the", "e": "land", "f": "",
                       "g": "Normans (Norman"}, {"a": 0.1, "b": 0.9, "c": 0.7, "d": 0.4, "e": 0.2, "f": 0.95,
                                                "g": 0.05}),
}


@pytest.mark.parametrize("case", sorted(PREDICTIONS))
@pytest.mark.parametrize("thresh", [None, "0.3"])
def test_evaluate_prints_the_official_v2_numbers_on_tricky_predictions(case, thresh, capsys, tmp_path):
    preds, odds = PREDICTIONS[case]
    extra = ("--na-prob-thresh", thresh) if thresh else ()
    official = official_v2_eval(TRICKY, preds, odds, float(thresh or 1.0))
    ours, _ = _evaluate(capsys, tmp_path, TRICKY, preds, odds, *extra)
    assert {k: ours[k] for k in official} == official      # exactly: the same sums in the same order
    plain, _ = _evaluate(capsys, tmp_path, TRICKY, preds, None)
    official = official_v2_eval(TRICKY, preds)
    assert {k: plain[k] for k in official} == official


def test_an_unanswerable_only_file_is_scored_as_the_official_script(capsys, tmp_path):
    dataset = [{"title": "N", "paragraphs": [{"context": CONTEXT, "qas": [_qa("u1"), _qa("u2"), _qa("u3")]}]}]
    preds, odds = {"u1": "", "u2": "Normans", "u3": ""}, {"u1": 0.2, "u2": 0.9, "u3": 0.5}
    ours, _ = _evaluate(capsys, tmp_path, dataset, preds, odds, "--na-prob-thresh", "0.5")
    official = official_v2_eval(dataset, preds, odds, 0.5)
    assert "HasAns_total" not in official and {k: ours[k] for k in official} == official


def test_a_missing_prediction_is_not_said_to_be_left_out_as_the_official_script_does(capsys, tmp_path):
    """The official v2.0 script prints 'Missing prediction' and then fails with a KeyError (HasAns / NoAns are over
    every gold question); the warning said it leaves them out as that script does."""
    preds = {k: v for k, v in PREDICTIONS["mixed"][0].items() if k != "b"}
    with pytest.raises(KeyError):
        official_v2_eval(TRICKY, preds)
    _, err = _evaluate(capsys, tmp_path, TRICKY, preds, None)
    (line,) = [line for line in err.splitlines() if "no prediction for" in line]
    assert "left out of the scores" in line and "KeyError" in line
    assert "as the official v2.0 script does" not in line


# ------------------------------------------------ nbest_predictions.json of a question without a valid span

@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def test_a_v1_1_question_without_a_valid_span_has_berts_one_stand_in_nbest_entry(spm):
    """Every top start / end in the question: no span is valid. BERT's run_squad and transformers write one entry
    (text "empty", logits 0); the v1.1 list was empty (`nbest[qid][0]` failed), while v2.0 lists the null."""
    example = squad.SquadExample("q", "Who met whom in the year nine hundred and eleven?", "Rollo met Charles.",
                                 [("Rollo", 0)])
    settings = squad.SquadSettings(max_seq_length=40, max_query_length=20, n_best_size=3)
    (feature,) = squad.build_features(spm, [example], settings, training=False)
    start, end = np.zeros(feature.length), np.zeros(feature.length)
    start[1:4] = end[1:4] = 5.0
    preds = squad.postprocess([example], [feature], [start], [end], spm, settings)
    assert squad.final_predictions(preds, "1.1") == {"q": ""}
    for version in ("1.1", None, "2.0"):
        (entry,) = squad.nbest_json(preds, version)["q"]
        assert entry["text"] == "" and entry["probability"] == 1.0
        assert set(entry) == {"text", "probability", "start_logit", "end_logit", "score"}
        assert all(isinstance(entry[k], float) for k in ("probability", "start_logit", "end_logit", "score"))


# ------------------------------------------------------------- a long context in many overlapping windows

def _bert_write_predictions(context_tokens: int, query_len: int, settings: squad.SquadSettings, logits):
    """BERT run_squad's doc spans, _check_is_max_context and write_predictions' prelim search, written apart from
    squad.py: the (score, first token, last token) of every candidate, best first (a stable sort, as BERT's)."""
    window = settings.max_seq_length - query_len - 3
    spans, start = [], 0
    while start < context_tokens:
        length = min(context_tokens - start, window)
        spans.append((start, length))
        if start + length == context_tokens:
            break
        start += min(length, settings.doc_stride)

    def is_max_context(w: int, position: int) -> bool:
        best, best_w = None, None
        for k, (s, n) in enumerate(spans):
            if s <= position <= s + n - 1:
                score = min(position - s, s + n - 1 - position) + 0.01 * n
                if best is None or score > best:
                    best, best_w = score, k
        return best_w == w

    prelim = []
    for w, (s, n) in enumerate(spans):
        start_logits, end_logits = logits[w]
        offset = query_len + 2
        best_starts = [i for i, _ in sorted(enumerate(start_logits), key=lambda x: x[1], reverse=True)]
        best_ends = [i for i, _ in sorted(enumerate(end_logits), key=lambda x: x[1], reverse=True)]
        for a in best_starts[:settings.n_best_size]:
            for b in best_ends[:settings.n_best_size]:
                if not (offset <= a < offset + n and offset <= b < offset + n):   # token_to_orig_map
                    continue
                if not is_max_context(w, s + a - offset) or b < a or b - a + 1 > settings.max_answer_length:
                    continue
                prelim.append((start_logits[a] + end_logits[b], s + a - offset, s + b - offset))
    return spans, sorted(prelim, key=lambda x: x[0], reverse=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_best_span_of_a_long_context_is_berts_over_all_windows(spm, seed):
    words = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").split()
    context = " ".join(words[:260])
    example = squad.SquadExample("q", "What is it?", context, [])
    settings = squad.SquadSettings(max_seq_length=48, doc_stride=7, max_query_length=8, n_best_size=12,
                                   max_answer_length=6)
    features = squad.build_features(spm, [example], settings, training=False)
    (ctx,) = squad.tokenize_contexts(spm, [context])
    query_len = features[0].extra["doc_offset"] - 2
    assert len(ctx.ids) > 5 * (settings.max_seq_length - query_len - 3) and len(features) > 30
    rng = np.random.default_rng(seed)
    logits = []
    for feature in features:
        start, end = rng.normal(size=feature.length), rng.normal(size=feature.length)
        start[: query_len + 2] += 1.5     # the question and [CLS] score high: never a span's start or end
        end[: query_len + 2] += 1.5
        logits.append((start, end))
    spans, prelim = _bert_write_predictions(len(ctx.ids), query_len, settings, logits)
    assert [(f.extra["doc_start"], f.extra["doc_length"]) for f in features] == spans
    preds = squad.postprocess([example], features, [s for s, _ in logits], [e for _, e in logits], spm, settings)
    nbest, seen = [], set()
    for score, first, last in prelim:           # BERT's n-best: each final text once
        a, b = squad._visible(context, ctx.spans[first][0], ctx.spans[last][1])
        if context[a:b] and context[a:b] not in seen:
            seen.add(context[a:b])
            nbest.append((context[a:b], pytest.approx(score), a))
    got = [(s.text, s.score, s.start_char) for s in preds["q"].nbest]
    assert got == nbest[: settings.n_best_size]
    assert preds["q"].null_score == pytest.approx(min(float(s[0] + e[0]) for s, e in logits))
    best = preds["q"].best
    assert context[best.start_char:best.end_char] == best.text


def test_a_span_across_a_window_edge_is_found_in_the_window_that_holds_it(spm):
    """The answer's first token sits in the last positions of one window and its last token beyond it: only a
    later window holds both, and the span is predicted from there."""
    words = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").split()
    context = " ".join(words[:120])
    example = squad.SquadExample("q", "What is it?", context, [])
    settings = squad.SquadSettings(max_seq_length=40, doc_stride=12, max_query_length=8)
    features = squad.build_features(spm, [example], settings, training=False)
    (ctx,) = squad.tokenize_contexts(spm, [context])
    first = features[1]
    a = first.extra["doc_start"] + first.extra["doc_length"] - 2       # two tokens before window 1 ends
    b = a + 4                                                          # three tokens after
    starts, ends = [], []
    for feature in features:
        x = feature.extra
        start, end = np.full(feature.length, -9.0), np.full(feature.length, -9.0)
        for token, row in ((a, start), (b, end)):
            if x["doc_start"] <= token < x["doc_start"] + x["doc_length"]:
                row[x["doc_offset"] + token - x["doc_start"]] = 9.0
        starts.append(start)
        ends.append(end)
    preds = squad.postprocess([example], features, starts, ends, spm, settings)
    lo, hi = squad._visible(context, ctx.spans[a][0], ctx.spans[b][1])
    assert preds["q"].best.text == context[lo:hi] and preds["q"].best.start_char == lo
    too_long = squad.SquadSettings(max_seq_length=40, doc_stride=12, max_query_length=8, max_answer_length=4)
    assert squad.postprocess([example], features, starts, ends, spm, too_long)["q"].best.text != context[lo:hi]


# ------------------------------------------------ Chinese (no spaces) and Korean with their own SentencePiece

@pytest.fixture(scope="module")
def cjk_spm(tmp_path_factory):
    """A SentencePiece model trained on the Chinese news and KorNLI sentences (as `albertlm tokenizer train`)."""
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    root = tmp_path_factory.mktemp("cjk")
    zh = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8")
    (root / "corpus.txt").write_text(zh + "\n" + "\n".join(_korean_lines(800)) + "\n", encoding="utf-8")
    train_sentencepiece([root / "corpus.txt"], root / "spm", SentencePieceTrainOptions(vocab_size=2500, num_threads=1),
                        show_progress=False)
    return load_tokenizer(root / "spm")


def _cjk_contexts() -> list[str]:
    zh = [line for line in shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
          if len(line) > 80 and " " not in line.strip()][:25]
    ko = _korean_lines(300)
    return zh + [" ".join(ko[i:i + 12]) for i in range(0, 300, 12)]


def _piece_bounds(tokenizer, text: str) -> list[tuple[int, int]]:
    """Each piece's character span as sentencepiece itself gives it (its byte offsets, in characters)."""
    raw = text.encode("utf-8")
    chars = lambda offset: len(raw[:offset].decode("utf-8"))      # noqa: E731
    return [(chars(p.begin), chars(p.end)) for p in tokenizer.sp.encode(text, return_type="proto").pieces]


def test_cjk_piece_spans_are_sentencepieces_own(cjk_spm):
    """Each token's character span is the one sentencepiece gives its piece (a bare "▁" zero-width at its word)."""
    contexts = [c for c in _cjk_contexts() if "\u2026" not in c]   # "…" is three "." pieces: each covers it whole
    assert cjk_spm.preprocess(contexts[0]) == contexts[0]     # cased, accents kept: offsets in the same text
    compared = 0
    for context, ctx in zip(contexts, squad.tokenize_contexts(cjk_spm, contexts)):
        theirs = [(s + a, s + b) for s, e in squad.split_words(context)
                  for a, b in _piece_bounds(cjk_spm, context[s:e])]
        assert ctx.spans == theirs, context[:40]
        compared += len(theirs)
    assert compared > 3000


def test_cjk_answers_are_labelled_and_predicted_as_their_exact_characters(cjk_spm):
    """Answers of one to four pieces at character offsets, in contexts of many windows (stride 10): the label
    covers the answer exactly, and a model whose logits peak there predicts exactly the answer's characters."""
    rng = random.Random(0)
    examples = []
    for c, context in enumerate(_cjk_contexts()):
        bounds = sorted({i for span in _piece_bounds(cjk_spm, context) for i in span})
        for k in range(4):
            i = rng.randrange(len(bounds) - 1)
            a, b = bounds[i], bounds[min(len(bounds) - 1, i + rng.randint(1, 4))]
            while a < b and context[a].isspace():
                a += 1
            while b > a and context[b - 1].isspace():
                b -= 1
            if a < b:
                examples.append(squad.SquadExample(f"{c}-{k}", "무엇? 什么?", context, [(context[a:b], a)]))
    settings = squad.SquadSettings(max_seq_length=48, doc_stride=10, max_query_length=8)
    features = squad.build_features(cjk_spm, examples, settings, training=True)
    tokens = dict(zip((e.context for e in examples), squad.tokenize_contexts(cjk_spm, [e.context for e in examples])))
    starts, ends, labelled = [], [], set()
    for feature in features:
        example, x = examples[feature.example_index], feature.extra
        start, end = np.full(feature.length, -5.0), np.full(feature.length, -5.0)
        if feature.label != (0, 0):
            first, last = (x["doc_start"] + t - x["doc_offset"] for t in feature.label)
            ctx = tokens[example.context]
            a, b = squad._visible(example.context, ctx.spans[first][0], ctx.spans[last][1])
            assert (example.context[a:b], a) == example.answers[0], example.qid
            start[feature.label[0]], end[feature.label[1]] = 5.0, 5.0
            labelled.add(example.qid)
        starts.append(start)
        ends.append(end)
    assert len(labelled) == len(examples) > 150
    preds = squad.postprocess(examples, features, starts, ends, cjk_spm, settings)
    for example in examples:
        best = preds[example.qid].best
        assert (best.text, best.start_char) == example.answers[0], example.qid


# ---------------------------------------- fine-tuning's files: the official script's numbers, resumed runs

def _argv(base, out, head: str) -> list[str]:
    data = str(shared_path("squad", "dev-v2.0-small.json"))
    return ["finetune", "squad", "--version", "2.0", "--train", data, "--dev", data, "--model", str(base), "--out",
            str(out), "--squad-head", head, "--batch-size", "8", "--eval-batch-size", "64", "--lr", "1e-3",
            "--max-steps", "6", "--eval-every", "3", "--save-every", "2", "--train.keep_last", "6", *SMALL]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny SQuAD v2.0 runs with BERT's and google's heads: {head: run directory}, and the base model."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("audit31_squad")
        (root / "base").mkdir()
        base = save_tiny_pretrained(root / "base")
        out = {}
        for head in ("bert", "xlnet"):
            out[head] = root / head
            assert main(_argv(base, out[head], head)) == 0
    finally:
        torch.set_num_threads(before)
    return base, out


@pytest.mark.parametrize("head", ["bert", "xlnet"])
def test_fine_tuning_files_are_what_the_official_tools_read(runs, head, capsys):
    _, out = runs
    run = out[head]
    dataset = json.loads(shared_path("squad", "dev-v2.0-small.json").read_text(encoding="utf-8"))["data"]
    ids = [qa["id"] for a in dataset for p in a["paragraphs"] for qa in p["qas"]]
    preds = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    odds = json.loads((run / "null_odds.json").read_text(encoding="utf-8"))
    nbest = json.loads((run / "nbest_predictions.json").read_text(encoding="utf-8"))
    assert list(preds) == list(odds) == list(nbest) == ids                 # every gold id, in file order
    assert all(isinstance(v, str) for v in preds.values())
    assert all(isinstance(v, float) and math.isfinite(v) for v in odds.values())
    logits = ("start_logit", "end_logit") if head == "bert" else ("start_log_prob", "end_log_prob")
    for qid, entries in nbest.items():
        assert entries and all(set(e) == {"text", "probability", "score", *logits} for e in entries)
        assert all(isinstance(e["text"], str) and all(isinstance(e[k], float) for k in e if k != "text")
                   for e in entries)
        assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
        if preds[qid]:
            assert preds[qid] == next(e["text"] for e in entries if e["text"])
    dev = json.loads((run / "metrics.json").read_text(encoding="utf-8"))["best"]["dev"]
    official = official_v2_eval(dataset, preds)            # predictions.json: the tuned threshold applied
    assert {k: dev[k] for k in official} == official
    # the sweep over null_odds.json (no further null at the official 1.0: a threshold above every odds)
    swept = official_v2_eval(dataset, preds, odds, na_prob_thresh=max(odds.values()) + 1.0)
    for key in ("best_f1", "best_exact"):     # equal without ties; with them the official one may be half a tie's
        tied = len(set(odds.values())) < len(odds)
        assert dev[key] == pytest.approx(swept[key]) or (tied and dev[key] < swept[key])
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(shared_path("squad", "dev-v2.0-small.json")), "--predictions",
                 str(run / "predictions.json")]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert {k: scored[k] for k in official} == official


@pytest.mark.parametrize("head", ["xlnet"])
def test_a_resumed_run_with_googles_head_writes_the_same_files(runs, head, tmp_path, capsys):
    """Killed after step 4's checkpoint (step 3 evaluated), resumed: the same predictions, null odds and n-best
    lists (BERT's head: tests/test_ftstep_audit26.py)."""
    base, out = runs
    killed = tmp_path / "run"
    shutil.copytree(out[head], killed)
    shutil.rmtree(step_dir(killed, 6))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*_argv(base, killed, head), "--resume"]) == 0
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    for name in ("predictions.json", "null_odds.json", "nbest_predictions.json", "best/task.json",
                 "train_log.json"):
        assert (killed / name).read_text() == (out[head] / name).read_text(), name
    assert json.loads((killed / "metrics.json").read_text())["best"] == json.loads(
        (out[head] / "metrics.json").read_text())["best"]
