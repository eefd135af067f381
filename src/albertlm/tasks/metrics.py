"""Official task metrics.

GLUE metrics come from scikit-learn / scipy (the libraries GLUE's own scorer and transformers use), imported by
the metrics that need them when they are computed; accuracy is computed here as scikit-learn computes it (its
import alone was most of scoring a predictions file's time).
The SQuAD metrics follow the official evaluation scripts exactly (v1.1 `evaluate-v1.1.py`,
v2.0 `evaluate-v2.0.py`): no library implements them, so they are written here from the definition.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Iterable, Mapping, Sequence

import numpy as np

from albertlm.errors import UserError

# ---------------------------------------------------------------------------------------------- GLUE


def accuracy(labels: Sequence, preds: Sequence) -> float:
    """scikit-learn's `accuracy_score`, computed here as it computes it (`np.average(y_true == y_pred)`) for the
    usual input, class ids or class names of the same length: importing scikit-learn took 3.4 s of the 5.5 s that
    scoring an SST-2 predictions file took on a loaded machine. Anything else (float labels, other shapes, no
    rows, ids beside names) goes to scikit-learn, which checks it (and refuses what it refuses)."""
    gold, pred = np.asarray(labels), np.asarray(preds)
    if (gold.ndim == pred.ndim == 1 and len(gold) == len(pred) > 0
            and (gold.dtype.kind in "iu" and pred.dtype.kind in "iu" or gold.dtype.kind == pred.dtype.kind == "U")):
        return float(np.average(gold == pred))
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(labels, preds))


def matthews(labels: Sequence[int], preds: Sequence[int]) -> float:
    """Matthews correlation; 0.0 where it is undefined (labels and predictions all one class), without the
    multi-line warning scikit-learn prints then (it would break `evaluate`'s one-line stderr)."""
    import warnings

    from sklearn.metrics import matthews_corrcoef

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "A single label was found in 'y_true' and 'y_pred'"
        return float(matthews_corrcoef(labels, preds))


def binary_f1(labels: Sequence[int], preds: Sequence[int]) -> float:
    """F1 of the positive class (label 1), GLUE's MRPC / QQP definition."""
    from sklearn.metrics import f1_score

    return float(f1_score(labels, preds, pos_label=1, average="binary", zero_division=0.0))


def pearson_spearman(labels: Sequence[float], preds: Sequence[float]) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr

    labels, preds = np.asarray(labels, dtype=np.float64), np.asarray(preds, dtype=np.float64)
    if np.ptp(labels) == 0 or np.ptp(preds) == 0:  # constant input: correlation undefined, report 0
        return {"pearson": 0.0, "spearman": 0.0, "corr": 0.0}
    pearson = float(pearsonr(preds, labels)[0])
    spearman = float(spearmanr(preds, labels)[0])
    return {"pearson": pearson, "spearman": spearman, "corr": (pearson + spearman) / 2}


# which metrics each GLUE task reports (the GLUE paper, Table 1); the first is the one used to pick
# the best dev checkpoint
GLUE_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",), "sst2": ("accuracy",), "mrpc": ("f1", "accuracy"), "qqp": ("f1", "accuracy"),
    "stsb": ("pearson", "spearman"), "mnli": ("accuracy",), "qnli": ("accuracy",),
    "rte": ("accuracy",), "wnli": ("accuracy",), "ax": ("mcc",),
}


def glue_metrics(task: str, labels: Sequence, preds: Sequence) -> dict[str, float]:
    """The official metrics of one GLUE task; labels/preds are class ids (or scores for STS-B). The task's own
    metrics come first, in GLUE's order (GLUE_METRICS: CoLA's MCC, MRPC's F1 then accuracy, STS-B's Pearson then
    Spearman), then the others: the order a run's log lines and every metrics dict show them in."""
    if task == "stsb":
        out = pearson_spearman(labels, preds)
    else:
        out = {"accuracy": accuracy(labels, preds)}
        if task in ("cola", "ax"):
            out["mcc"] = matthews(labels, preds)
        if task in ("mrpc", "qqp"):
            out["f1"] = binary_f1(labels, preds)
            out["acc_and_f1"] = (out["f1"] + out["accuracy"]) / 2
    return {**{name: out[name] for name in GLUE_METRICS.get(task, ()) if name in out}, **out}


# the nine tasks of GLUE's score, the leaderboard's first column (the diagnostic set, AX, is shown beside it, not in it)
GLUE_SCORE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def glue_score(results: Mapping[str, Mapping[str, float] | Sequence[Mapping[str, float]]]) -> dict:
    """GLUE's overall score of per-task results, as the GLUE benchmark computes it: the mean of the tasks' scores,
    where a task with two metrics scores their mean (MRPC and QQP: F1 and accuracy; STS-B: Pearson and Spearman;
    the rest their one metric, GLUE_METRICS) and MNLI the mean of its matched and mismatched scores.

    `results` maps a task (`cola`, ..., `wnli`) to its metrics as `glue_metrics` returns them (a run's best dev
    metrics), or to a list of them whose task scores are averaged (MNLI's matched and mismatched). Returns
    {"score": the mean over the tasks given, "tasks": each task's score in GLUE's order, "missing": the tasks of
    the nine not given}: with any missing, the score is not GLUE's (BERT's papers leave out WNLI, for one). The
    values are on the metrics' scale (0-1); the leaderboard shows them times 100. A task outside the nine, a
    metric missing or a NaN (a diverged run) is a UserError."""
    unknown = [task for task in results if task not in GLUE_SCORE_TASKS]
    if unknown:
        raise UserError(f"{unknown[0]!r} is not one of GLUE's scored tasks ({', '.join(GLUE_SCORE_TASKS)}; the "
                        "diagnostic set ax is reported beside the score, not in it)")
    if not results:
        raise UserError("no task results to score")
    tasks = {}
    for task in (task for task in GLUE_SCORE_TASKS if task in results):
        given = results[task]
        sets = [given] if isinstance(given, Mapping) else list(given) if isinstance(given, (list, tuple)) else [given]
        if not sets:
            raise UserError(f"{task}: no metrics")
        per_set = []
        for scores in sets:
            if not isinstance(scores, Mapping):    # a bare number: which metric it is cannot be told
                raise UserError(f"{task}: {scores!r} is not a task's metrics; give them by name, e.g. "
                                f"{{{', '.join(repr(name) + ': ...' for name in GLUE_METRICS[task])}}}")
            lacking = [name for name in GLUE_METRICS[task] if name not in scores]
            if lacking:
                raise UserError(f"{task}: no {', '.join(lacking)} among its metrics ({', '.join(scores) or 'none'}); "
                                f"GLUE scores it by {' and '.join(GLUE_METRICS[task])}")
            # metrics.json writes a NaN as null
            values = [float("nan") if scores[name] is None else float(scores[name]) for name in GLUE_METRICS[task]]
            if not all(np.isfinite(values)):
                raise UserError(f"{task}: {dict(zip(GLUE_METRICS[task], values))} is not a score (a diverged run?)")
            per_set.append(sum(values) / len(values))
        tasks[task] = sum(per_set) / len(per_set)
    return {"score": sum(tasks.values()) / len(tasks), "tasks": tasks,
            "missing": [task for task in GLUE_SCORE_TASKS if task not in tasks]}


def classification_metrics(labels: Sequence[int], preds: Sequence[int], num_labels: int) -> dict[str, float]:
    """Accuracy and macro F1 for a user's own multi-class data (and, for two classes, the F1 of class 1), then
    the Matthews correlation (scikit-learn's, multi-class too; 0 where undefined): the metrics `finetune
    classify --best-metric` may keep the best model by (`tasks.options.BEST_METRICS`).

    Macro F1 averages over the classes that occur in the gold labels or the predictions, as scikit-learn's
    `f1_score(average="macro")` does: a class of the label set that the dev file never uses and the model
    never predicts has no F1 to average (counting it as 0 would lower the score by the label set's size)."""
    from sklearn.metrics import f1_score

    out = {"accuracy": accuracy(labels, preds),
           "macro_f1": float(f1_score(labels, preds, average="macro", zero_division=0.0))}
    if num_labels == 2:
        out["f1"] = binary_f1(labels, preds)
    out["mcc"] = matthews(labels, preds)
    return out


def regression_metrics(labels: Sequence[float], preds: Sequence[float]) -> dict[str, float]:
    from sklearn.metrics import mean_squared_error

    out = pearson_spearman(labels, preds)
    out["mse"] = float(mean_squared_error(labels, preds))
    return out


# --------------------------------------------------------------------------------------------- SQuAD


def normalize_answer(text: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official scripts, same order)."""
    text = text.lower()
    exclude = set(string.punctuation)
    text = "".join(ch for ch in text if ch not in exclude)
    text = re.sub(r"\b(a|an|the)\b", " ", text, flags=re.UNICODE)
    return " ".join(text.split())


def exact_match(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1(gold: str, pred: str) -> float:
    """Token F1 of normalized answers; an empty side scores 1 only when both are empty (v2.0 script)."""
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(pred).split()
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    num_same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred_tokens), num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_v1(gold: str, pred: str) -> float:
    """v1.1 script: no special case for empty answers (an empty prediction scores 0)."""
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(pred).split()
    num_same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if num_same == 0:
        return 0.0
    precision, recall = num_same / len(pred_tokens), num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(golds: Mapping[str, list[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """`evaluate-v1.1.py`: max over gold answers; a question without a prediction scores 0 and counts.
    A question without gold answers (a v2.0 file) or no question at all is a UserError, not a crash."""
    if not golds:
        raise UserError("no gold questions to score against")
    unanswerable = next((qid for qid, answers in golds.items() if not answers), None)
    if unanswerable is not None:
        raise UserError(f"question {unanswerable!r} has no gold answer, which SQuAD v1.1 does not allow "
                        "(a v2.0 file? score it as version 2.0)")
    em = f1_sum = 0.0
    for qid, answers in golds.items():
        if qid not in preds:
            continue
        em += max(exact_match(a, preds[qid]) for a in answers)
        f1_sum += max(f1_v1(a, preds[qid]) for a in answers)
    total = len(golds)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1_sum / total, "total": total,
            "missing": sum(1 for q in golds if q not in preds)}


def squad_v2_raw_scores(golds: Mapping[str, list[str]], preds: Mapping[str, str]):
    """Per-question EM and F1 (`get_raw_scores`): golds that normalize to '' are dropped; none left
    means the question is unanswerable and the gold is ''. Questions without a prediction are skipped."""
    exact, f1s = {}, {}
    for qid, answers in golds.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        if qid not in preds:
            continue
        exact[qid] = max(exact_match(a, preds[qid]) for a in answers)
        f1s[qid] = max(f1(a, preds[qid]) for a in answers)
    return exact, f1s


def apply_no_answer_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                              has_answer: Mapping[str, bool], threshold: float) -> dict[str, float]:
    """Where the no-answer probability exceeds the threshold the prediction becomes '' (official script)."""
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else s for qid, s in scores.items()}


def find_best_threshold(preds: Mapping[str, str], scores: Mapping[str, float],
                        na_probs: Mapping[str, float], has_answer: Mapping[str, bool],
                        strict: bool = False) -> tuple[float, float]:
    """Sweep the no-answer threshold over the sorted na_probs (official `find_best_thresh`).

    The sweep starts from "every prediction is null". The official script counts every unanswerable gold
    question as right there, predicted or not, over a denominator of the predicted ones; `strict` counts
    questions without a prediction as wrong at every threshold, over all gold questions (`scores` holds them).

    The threshold returned gives the best score when applied (null where the odds exceed it). For "every
    prediction null" that is one below the lowest odds: the official script's 0.0 assumes probabilities,
    and our null odds (null minus best span logits) are usually negative. With positive odds it stays 0.0."""
    current = best = sum(1 for qid in has_answer if not has_answer[qid] and (not strict or qid in preds))
    lowest = min((na_probs[qid] for qid in scores if qid in preds and qid in na_probs), default=0.0)
    best_threshold = 0.0 if lowest > 0.0 else lowest - 1.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores or qid not in preds:
            continue
        if has_answer[qid]:
            current += scores[qid]
        else:
            current += -1 if preds[qid] else 0
        if current > best:
            best, best_threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), best_threshold


def _mean_dict(exact: Mapping[str, float], f1s: Mapping[str, float], qids: Iterable[str] | None = None):
    qids = list(exact) if qids is None else list(qids)
    total = len(qids)
    return {"exact": 100.0 * sum(exact[q] for q in qids) / total,
            "f1": 100.0 * sum(f1s[q] for q in qids) / total, "total": total}


def squad_v2_scores(golds: Mapping[str, list[str]], preds: Mapping[str, str],
                    na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0,
                    strict: bool = False) -> dict:
    """`evaluate-v2.0.py`: exact/f1 overall, HasAns_* and NoAns_*, and with na_probs the best
    thresholds (best_exact, best_exact_thresh, best_f1, best_f1_thresh).

    Like the official script, questions without a prediction are left out (`missing` counts them);
    `strict` scores them as wrong instead (0 EM and F1, whatever the threshold). No prediction matching a
    gold question, or null odds missing for a predicted one, is a UserError."""
    # as `bool(qa['answers'])` in the official script: a gold text of "" still makes the question HasAns
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    exact_raw, f1_raw = squad_v2_raw_scores(golds, preds)
    if not exact_raw:
        raise UserError(f"none of the {len(preds)} predictions is for one of the {len(golds)} gold questions "
                        "(different question ids)")
    probs = dict(na_probs) if na_probs is not None else {qid: 0.0 for qid in exact_raw}
    lacking = next((qid for qid in exact_raw if qid not in probs), None)
    if lacking is not None:
        raise UserError(f"no null odds for question {lacking!r}")
    missing = [qid for qid in golds if qid not in preds]
    exact = apply_no_answer_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1s = apply_no_answer_threshold(f1_raw, probs, has_answer, na_prob_thresh)
    if strict:  # after the threshold: a question without a prediction is wrong whatever its odds
        for raw in (exact_raw, f1_raw, exact, f1s):
            raw.update(dict.fromkeys(missing, 0.0))
    out = _mean_dict(exact, f1s)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in exact if has_answer[q] == wanted]
        if qids:
            out.update({f"{name}_{k}": v for k, v in _mean_dict(exact, f1s, qids).items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = find_best_threshold(preds, exact_raw, probs, has_answer, strict)
        out["best_f1"], out["best_f1_thresh"] = find_best_threshold(preds, f1_raw, probs, has_answer, strict)
    out["missing"] = len(missing)
    if strict:
        out["strict"] = True
    return out
