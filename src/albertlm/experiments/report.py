"""The suite's report: `report.md` with tables laid out like the paper's (Tables 3, 4, 5, the dropout
table and Figure 1), the paper's numbers beside ours, parameter counts, mean ± sample standard deviation
over seeds (n shown); PNG plots; `results.json` with every number. Written from the result.json files
that exist, so a suite cut short still gets a report of what finished; each file is replaced whole
(`_write_atomic`), so a rewrite that fails leaves the previous one.

The paper's downstream numbers are SQuAD / MNLI / SST-2 / RACE dev scores of base-size models; ours are
GLUE dev scores of the tasks the scale fine-tunes on. Only SST-2 is common; the paper's Avg is shown for
the ranking, not as a number to match.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable

from albertlm.errors import json_object_or_empty, warning_line
from albertlm.experiments.grids import GRIDS, NAMED, PAPER_ORDER, PAPER_VARIANTS, Variant, base_model, full_model
from albertlm.experiments.scales import PAPER_E, Scale

# ------------------------------------------------------------------------ the paper's numbers (arXiv v6)
# Checked against the text of arXiv 1909.11942v6 (Tables 3, 4, 5 and 8).
# (parameters in M, SST-2 dev, Avg of SQuAD1.1 / SQuAD2.0 / MNLI / SST-2 / RACE, each SQuAD first the mean of
# its F1 and EM, as the paper computes it); None = not transcribed
PAPER_TABLE3 = {("none", 64): (87, 91.5, 81.3), ("none", 128): (89, 91.5, 81.7), ("none", 256): (93, 91.9, 81.8),
                ("none", 768): (108, 92.8, 82.3), ("all", 64): (10, 89.4, 79.0), ("all", 128): (12, 90.3, 80.1),
                ("all", 256): (16, 90.3, 79.6), ("all", 768): (31, 90.6, 79.8)}
# One model, two printed Avgs: not-shared E = 128 is 81.7 in Table 3 and 81.6 in Table 4 (its MNLI 83.7 vs 83.2);
# each table keeps its own, so the cost of all-sharing at E = 128 is Table 4's 81.6 - 80.1 = 1.5
PAPER_TABLE4 = {(768, "all"): (31, 90.6, 79.8), (768, "attention"): (83, 91.4, 81.6),
                (768, "ffn"): (57, 90.8, 79.5), (768, "none"): (108, 92.8, 82.3),
                (128, "all"): (12, 90.3, 80.1), (128, "attention"): (64, 91.9, 81.7),
                (128, "ffn"): (38, 91.7, 80.2), (128, "none"): (89, 91.5, 81.6)}
# sentence task -> (MLM, NSP, SOP intrinsic accuracy, SST-2, Avg)
PAPER_TABLE5 = {"none": (54.9, 52.4, 53.3, 89.9, 79.0), "nsp": (54.5, 90.5, 52.0, 91.1, 79.2),
                "sop": (54.0, 78.9, 86.5, 90.3, 80.1)}
# Table 8 (ALBERT-xxlarge, around 1M steps): dropout -> (SST-2, Avg)
PAPER_DROPOUT = {True: (96.3, 90.4), False: (96.5, 90.7)}
TASK_NAMES = {"none": "None", "nsp": "NSP", "sop": "SOP"}
SHARING_NAMES = {"all": "all-shared", "attention": "shared-attention", "ffn": "shared-FFN", "none": "not-shared"}


# ------------------------------------------------------------------------------------------------ stats
def summary(values: Iterable[float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n - 1), min, max and n of the measured values (None and NaN left out);
    one value has no sample standard deviation: its `sd` is None (null in results.json), not 0."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return {"n": 0}
    return {"mean": statistics.fmean(vals), "sd": statistics.stdev(vals) if len(vals) > 1 else None,
            "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def cell(s: dict | None, scale: float = 100.0, digits: int = 1) -> str:
    if not s or not s.get("n"):
        return "–"
    text = f"{s['mean'] * scale:.{digits}f}"
    if s["n"] > 1:
        text += f" ± {s['sd'] * scale:.{digits}f}"
    return text + f" ({s['n']})" if s["n"] != 2 else text


def paper(value) -> str:
    return "n/t" if value is None else f"{value}"


def _tokens(n: int) -> str:
    """A token count: 4.9M, or in full below 0.1M (the smoke scale's 5,120 is not "0.0M")."""
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n:,}"


_METRIC_WORDS = {"accuracy": "accuracy", "mcc": "Matthews correlation", "f1": "F1", "pearson": "Pearson",
                 "spearman": "Spearman"}


def _metrics_text(tasks: Iterable[str]) -> str:
    """What each task's score is (GLUE's official metrics, `tasks.metrics.GLUE_METRICS`, as the runner scores them):
    "SST-2 accuracy, STS-B mean of Pearson and Spearman (best epoch by Pearson)", "CoLA Matthews correlation"."""
    from albertlm.tasks.metrics import GLUE_METRICS

    parts = []
    for task in tasks:
        names = [_METRIC_WORDS.get(n, n) for n in GLUE_METRICS.get(task, ())]
        if len(names) > 1:
            parts.append(f"{_task_title(task)} mean of {' and '.join(names)} (best epoch by {names[0]})")
        elif names:
            parts.append(f"{_task_title(task)} {names[0]}")
    return ", ".join(parts)


def _finetuning_text(scale: dict) -> str:
    """The report's sentence on a scale's fine-tuning protocol (its tasks, samples, epochs, rate, seeds, metrics)."""
    tasks = scale["finetune_tasks"]
    return ("Fine-tuning: " + ", ".join(f"{_task_title(t['name'])} ({t['max_train'] or 'all'} train examples, "
                                        f"{t['epochs']} epochs)" for t in tasks)
            + f", lr {scale['finetune_lr']}, batch {scale['finetune_batch_size']}, "
            + _finetune_seeds_text(scale.get("finetune_seeds", 1))
            + f"; dev scores of the best epoch ({_metrics_text(t['name'] for t in tasks)}), x100.")


def _finetune_seeds_text(n: int) -> str:
    if n == 1:
        return "one fine-tuning seed per model (the model's own)"
    return (f"{n} fine-tuning seeds per model (the model's seed, +1000, ...), a model's score their mean, so the "
            f"spread below is over pretraining seeds")


# -------------------------------------------------------------------------------------------- load
def load_results(out: Path) -> dict[str, Any]:
    """suite.json and every job's result.json; a result that cannot be read (cut short, edited by hand, another
    kind's) is left out and listed in `unreadable` (path: why), so the report of the others is still written."""
    from albertlm.experiments.runner import read_json, result_problem

    suite = read_json(out / "suite.json", "the suite's plan") if (out / "suite.json").is_file() else {}
    if not isinstance(suite, dict):
        suite = {}
    # directories: a result's folder by its name (a pretraining's derived results are cached there)
    results: dict[str, Any] = {"pretrain": {}, "scratch": {}, "unreadable": {}, "directories": {}}
    for kind, folder in (("pretrain", "runs"), ("scratch", "scratch")):
        for path in sorted((out / folder).glob("*/result.json")):
            try:
                r = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                results["unreadable"][str(path)] = f"not readable JSON: {exc}"
                continue
            why = result_problem(r, kind)
            if why:
                results["unreadable"][str(path)] = why
                continue
            results[kind][r["name"]] = r
            results["directories"][r["name"]] = path.parent
    return {"suite": suite, **results}


def downstream_scores(result: dict, tasks: Iterable[str] | None = None) -> dict[str, float]:
    """A run's score of each task it was fine-tuned on, and their mean `avg` when it has every one of `tasks`
    (the suite's): a run whose fine-tuning of a task is missing (a --refinetune cut short drops the redone task
    from each result until it is fine-tuned again) has no Avg, rather than an Avg of fewer tasks beside the
    other seeds' Avg of all of them."""
    scores = {t: r["score"] for t, r in (result.get("finetune") or {}).items()}
    want = set(scores) if tasks is None else set(tasks)
    if scores and want and want <= set(scores):
        scores["avg"] = statistics.fmean(scores[t] for t in sorted(want))
    return scores


def suite_tasks(data: dict) -> list[str]:
    """The tasks a run's Avg is over: the suite's fine-tuning tasks (suite.json's scale) and every task a
    finished run was fine-tuned on (the report's task columns), so every Avg is the mean of the same tasks."""
    scale = (data.get("suite") or {}).get("scale") or {}
    named = {t.get("name") for t in scale.get("finetune_tasks") or [] if isinstance(t, dict)}
    found = {t for kind in ("pretrain", "scratch") for r in data.get(kind, {}).values()
             for t in (r.get("finetune") or {})}
    return sorted(t for t in named | found if isinstance(t, str))


def aggregate(data: dict, scale: Scale | None = None) -> dict[str, Any]:
    """Per variant (pretrained) and per shape (scratch): every metric over seeds; `paper`: which variant is
    each of the paper's configurations (by its model and sentence task at `scale`, not by its name)."""
    out: dict[str, Any] = {"variants": {}, "shapes": {}}
    tasks = suite_tasks(data)
    groups: dict[str, list[dict]] = {}
    for r in data["pretrain"].values():
        groups.setdefault(r["variant"], []).append(r)
    for variant, runs in groups.items():
        row: dict[str, Any] = {"params": runs[0]["params"], "task": runs[0]["task"], "shape": runs[0]["shape"],
                               "model": runs[0]["model"], "seeds": sorted(r["seed"] for r in runs)}
        for key in ("mlm_acc", "sop_acc", "nsp_acc", "mlm_loss"):
            row[key] = summary(r["intrinsic"].get(key) for r in runs)
        for task in ("sop", "nsp"):     # the sentence head against the length rule (`length_rule_numbers`)
            for field, key in LENGTH_RULE_KEYS.items():
                row[key.format(task=task)] = summary(_rule_number(r, task, field) for r in runs)
        scores = [downstream_scores(r, tasks) for r in runs]
        for key in sorted({k for s in scores for k in s}):
            row[f"ft_{key}"] = summary(s.get(key) for s in scores)
        row["transitions"] = _mean_transitions(runs)
        row["pretrain_minutes"] = summary(r["pretrain"]["seconds"] / 60 for r in runs)
        out["variants"][variant] = row
    shapes: dict[str, list[dict]] = {}
    for r in data["scratch"].values():
        shapes.setdefault(r["shape"], []).append(r)
    for shape, runs in shapes.items():
        scores = [downstream_scores(r, tasks) for r in runs]
        row = {"params": runs[0]["params"], "model": runs[0]["model"], "seeds": sorted(r["seed"] for r in runs)}
        for key in sorted({k for s in scores for k in s}):
            row[f"ft_{key}"] = summary(s.get(key) for s in scores)
        row["transitions"] = _mean_transitions(runs)
        out["shapes"][shape] = row
    for row in out["variants"].values():
        row["shape"] = baseline_of(row, out["shapes"])
    out["paper"] = paper_rows(out["variants"], scale)
    return out


# a field of `evaluation.length_rule_numbers` -> its aggregate's name, per held-out task
LENGTH_RULE_KEYS = {"balanced_acc": "{task}_balanced_acc", "agree": "{task}_rule_agree",
                    "acc_rule_right": "{task}_acc_rule_right", "acc_rule_wrong": "{task}_acc_rule_wrong"}


def _rule_number(result: dict, task: str, field: str) -> float | None:
    """A run's `intrinsic.length_rule[task][field]` (None where it has none: not measured, or not available)."""
    rule = (result.get("intrinsic") or {}).get("length_rule")
    numbers = rule.get(task) if isinstance(rule, dict) else None
    value = numbers.get(field) if isinstance(numbers, dict) else None
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def baseline_of(row: dict, shapes: dict[str, dict]) -> str:
    """The no-pretraining baseline (a key of `shapes`) of a pretrained variant's `row`: the `shape` its runs
    recorded when that baseline has its model, else the baseline whose model is the variant's (the runner's
    `shape_key`: the same model, whatever the sentence task). Before commit 8392650 a grid file's second
    self-named variant of a shape ("nsp" beside "sop") recorded a baseline of its own name ("scratch-nsp") that
    the plan never runs (it runs "scratch-sop"): its scratch cell, Δ and claim 5 were never measured. With no
    baseline of its model (not finished yet), the recorded name stays."""
    recorded = shapes.get(row["shape"])
    key = _model_key(row.get("model"))
    if recorded is not None and _model_key(recorded.get("model")) == key:
        return row["shape"]
    same = sorted(name for name, s in shapes.items() if _model_key(s.get("model")) == key)
    return same[0] if same else row["shape"]


def _model_key(model: dict | None) -> str:
    return json.dumps(full_model(model or {}), sort_keys=True)


def paper_rows(variants: dict[str, dict], scale: Scale | None) -> dict[str, str]:
    """The paper's configuration (its label, E128-all-sop) -> the variant whose runs have that configuration's
    model and sentence task at `scale` (a user variant may have any name; a name is no configuration).
    Without a scale (no suite.json), by label."""
    if scale is None:
        return {label: label for label in variants if label in PAPER_VARIANTS}
    base = base_model(scale)
    by_config: dict[tuple[str, str], str] = {}
    for label, row in variants.items():
        key = (_model_key(row.get("model")), row.get("task"))
        if key not in by_config or label in PAPER_VARIANTS:   # the paper's own label first
            by_config[key] = label
    out = {}
    for label, variant in PAPER_VARIANTS.items():
        try:
            model = base.replace(**variant.model_overrides(scale)).to_dict()
        except Exception:
            continue
        found = by_config.get((_model_key(model), variant.task))
        if found is not None:
            out[label] = found
    return out


def row_of(agg: dict, variant: Variant) -> dict | None:
    """The aggregated row of one of the paper's configurations, or None when no run has it."""
    label = (agg.get("paper") or {}).get(variant.label) if "paper" in agg else variant.label
    return agg["variants"].get(label) if label else None


def _mean_transitions(runs: list[dict]) -> dict[str, Any]:
    """Each layer's L2 and cosine, the mean over the seeds measured, the angle in degrees of that mean cosine
    (`angle`: the paper's Figure 1 plots the cosine as an angle), `n`: how many seeds that is, and `roughness`:
    each seed's own `roughness` of its L2 and cosine (claim 4 compares the seeds, not only their means)."""
    found = [r["transitions"] for r in runs if r.get("transitions")]
    if not found:
        return {}
    out: dict[str, Any] = {k: [statistics.fmean(t[k][i] for t in found) for i in range(len(found[0][k]))]
                           for k in ("l2", "cosine")}
    return {**out, "angle": [angle_degrees(c) for c in out["cosine"]], "n": len(found),
            "roughness": {k: [roughness(t[k]) for t in found] for k in ("l2", "cosine")}}


def angle_degrees(cosine: float) -> float:
    """The angle in degrees whose cosine is `cosine` (clamped to [-1, 1]: a mean of float cosines may pass 1 by
    a rounding error)."""
    return math.degrees(math.acos(max(-1.0, min(1.0, cosine))))


# ------------------------------------------------------------------------------------------- tables
def _tasks(agg: dict) -> list[str]:
    keys = {k[3:] for row in [*agg["variants"].values(), *agg["shapes"].values()] for k in row if k.startswith("ft_")}
    return sorted(keys - {"avg"}) + (["avg"] if "avg" in keys else [])


def _downstream_cells(row: dict | None, tasks: list[str]) -> list[str]:
    return [cell((row or {}).get(f"ft_{t}")) for t in tasks]


def _scale_e(scale: Scale | None, e: int) -> str:
    return f"{e} (ours {scale.embedding_sizes[PAPER_E.index(e)]})" if scale else str(e)


def table3(agg, tasks, scale, downstream: bool = True) -> list[str]:
    """`downstream` False (a suite without fine-tuning, `intrinsic_only`): the downstream columns (ours, the
    scratch baselines' and the paper's) are left out, as in every paper table below."""
    head = ["ALBERT base", "E", "Params (ours)", "Params (paper)", "MLM", *[_task_title(t) for t in tasks],
            "scratch Avg", "paper SST-2", "paper Avg"]
    rows = []
    for sharing in ("none", "all"):
        for e in PAPER_E:
            row = row_of(agg, Variant(embedding=e, sharing=sharing))
            p = PAPER_TABLE3[(sharing, e)]
            rows.append([SHARING_NAMES[sharing], _scale_e(scale, e), _params(row), f"{p[0]}M", cell(_get(row, "mlm_acc")),
                         *_downstream_cells(row, tasks), _scratch_avg(agg, row), paper(p[1]), paper(p[2])])
    return _md(*_intrinsic(head, rows, 5, downstream))


def table4(agg, tasks, scale, downstream: bool = True) -> list[str]:
    head = ["ALBERT base", "model", "Params (ours)", "Params (paper)", "MLM", *[_task_title(t) for t in tasks],
            "scratch Avg", "paper SST-2", "paper Avg"]
    rows = []
    for e in (768, 128):
        for sharing in ("all", "attention", "ffn", "none"):
            row = row_of(agg, Variant(embedding=e, sharing=sharing))
            p = PAPER_TABLE4[(e, sharing)]
            rows.append([f"E={_scale_e(scale, e)}", SHARING_NAMES[sharing], _params(row), f"{p[0]}M",
                         cell(_get(row, "mlm_acc")), *_downstream_cells(row, tasks), _scratch_avg(agg, row),
                         paper(p[1]), paper(p[2])])
    return _md(*_intrinsic(head, rows, 5, downstream))


def table5(agg, tasks, scale, downstream: bool = True) -> list[str]:
    head = ["SP task", "MLM", "NSP", "NSP length-balanced", "SOP", "SOP length-balanced", "paper MLM / NSP / SOP",
            *[_task_title(t) for t in tasks], "paper SST-2", "paper Avg"]
    rows = []
    for task in ("none", "nsp", "sop"):
        row = row_of(agg, Variant(task=task))
        p = PAPER_TABLE5[task]
        rows.append([TASK_NAMES[task], cell(_get(row, "mlm_acc")), cell(_get(row, "nsp_acc")),
                     _balanced_cell(row, "nsp"), cell(_get(row, "sop_acc")), _balanced_cell(row, "sop"),
                     f"{p[0]} / {p[1]} / {p[2]}", *_downstream_cells(row, tasks), paper(p[3]), paper(p[4])])
    return _md(*_intrinsic(head, rows, 7, downstream))


def _intrinsic(head: list[str], rows: list[list[str]], columns: int, downstream: bool):
    """A paper table's head and rows, cut to its first `columns` (the intrinsic ones) when `downstream` is False:
    a suite without fine-tuning has no downstream cell to show, and the paper's downstream numbers nothing of
    ours to be compared with."""
    if downstream:
        return head, rows
    return head[:columns], [r[:columns] for r in rows]


def _balanced_cell(row: dict | None, task: str) -> str:
    """A variant's length-balanced accuracy on `task`'s held-out data: "–" when no run of it finished, "not
    available" when its finished runs have none (no checkpoint or no held-out data to compute it from)."""
    if row is None:
        return "–"
    s = row.get(f"{task}_balanced_acc")
    return cell(s) if s and s.get("n") else "not available"


def _mean_percent(s: dict | None) -> str:
    return f"{s['mean'] * 100:.1f}%" if s and s.get("n") else "–"


def length_balanced_lines(agg: dict, missing: dict[str, str]) -> list[str]:
    """The paragraph under Table 5: what the length-balanced accuracy is, each variant's numbers behind it, and
    the runs it is not available for (`missing`: name -> why)."""
    text = ("Length-balanced accuracy: the sentence head's held-out accuracy where the rule \"label 1 when A is "
            "longer than B\" is right and where it is wrong, averaged (`evaluation.length_rule_numbers`), i.e. its "
            "accuracy on pairs where the segment lengths are no cue (the rule at chance): a head that only follows "
            "the rule scores 50% on it, one blind to lengths its raw accuracy.")
    parts = []
    for task in ("none", "nsp", "sop"):
        row = row_of(agg, Variant(task=task))
        for data in ("sop", "nsp"):
            if not row or not (row.get(f"{data}_balanced_acc") or {}).get("n"):
                continue
            mean = {key: _mean_percent(row.get(f"{data}_{key}")) for key in
                    ("rule_agree", "acc_rule_right", "acc_rule_wrong", "balanced_acc", "acc")}
            parts.append(f"{TASK_NAMES[task]} model on {TASK_NAMES[data]}: {mean['rule_agree']} of its answers are "
                         f"the rule's, accuracy {mean['acc_rule_right']} where the rule is right and "
                         f"{mean['acc_rule_wrong']} where it is wrong, length-balanced {mean['balanced_acc']} (raw "
                         f"{mean['acc']})")
    if parts:
        text += " Seed means: " + "; ".join(parts) + "."
    if missing:
        text += (" Not available for " + "; ".join(f"`{name}` ({why})" for name, why in sorted(missing.items()))
                 + ".")
    return [text, ""]


def dropout_table(agg, tasks, scale, downstream: bool = True) -> list[str]:
    head = ["ALBERT", "MLM", "SOP", *[_task_title(t) for t in tasks], "paper SST-2", "paper Avg"]
    rows = []
    for flag in (True, False):
        row = row_of(agg, Variant(dropout=flag))
        p = PAPER_DROPOUT[flag]
        rows.append(["With dropout" if flag else "Without dropout", cell(_get(row, "mlm_acc")),
                     cell(_get(row, "sop_acc")), *_downstream_cells(row, tasks), p[0], p[1]])
    return _md(*_intrinsic(head, rows, 3, downstream))


def figure1_table(agg) -> list[str]:
    models = _figure1_models(agg)
    if not models:
        return ["(not measured yet)"]
    layers = max(len(t["l2"]) for _, t in models)
    # the seed count beside a model's name when it is not 2, as in every other table's cells
    seeds = {name: f" ({t['n']})" if t.get("n", 2) != 2 else "" for name, t in models}
    # beside the cosine, its angle in degrees: the paper's Figure 1 plots the angle (arccos of the seed mean)
    head = ["layer", *[f"{name} L2{seeds[name]}" for name, _ in models],
            *[f"{name} cos{seeds[name]}" for name, _ in models],
            *[f"{name} angle °{seeds[name]}" for name, _ in models]]
    rows = [[str(i + 1), *[f"{t['l2'][i]:.3f}" for _, t in models], *[f"{t['cosine'][i]:.3f}" for _, t in models],
             *[f"{angle_degrees(t['cosine'][i]):.1f}" for _, t in models]] for i in range(layers)]
    return _md(head, rows)


def _figure1_models(agg) -> list[tuple[str, dict]]:
    out = []
    for variant, name in ((Variant(embedding=128, sharing="all"), "ALBERT"),
                          (Variant(embedding=768, sharing="none"), "BERT")):
        row = row_of(agg, variant)
        if row and row.get("transitions"):
            out.append((name, row["transitions"]))
    return out


def unfinished_jobs(data: dict) -> list[str]:
    """The jobs suite.json plans (in its order) that have no readable result.json: running, not started, failed
    or damaged (`load_results`' `unreadable`), so a partial suite's report says which seeds its cells lack."""
    done = {*data.get("pretrain", {}), *data.get("scratch", {})}
    jobs = (data.get("suite") or {}).get("jobs") or []
    return [j["name"] for j in jobs if isinstance(j, dict) and isinstance(j.get("name"), str) and j["name"] not in done]


def unfinished_variants(agg: dict, suite: dict) -> dict[str, dict]:
    """The variants suite.json plans that have no finished run (not run yet, or every seed failed): their
    task and model, so the tables of every variant list them as not finished instead of leaving them out."""
    out: dict[str, dict] = {}
    for r in suite.get("runs") or []:
        if isinstance(r, dict) and isinstance(r.get("variant"), str) and r["variant"] not in agg["variants"]:
            out.setdefault(r["variant"], {"task": r.get("task") or "–", "model": r.get("model") or {}})
    return out


def models_table(agg, unfinished: dict[str, dict] | None = None, scale: Scale | None = None) -> list[str]:
    """Every pretrained variant: its size and held-out accuracy (a user grid's variants appear nowhere else);
    a planned variant without a finished run (`unfinished_variants`) is a row of –. When a variant's model
    differs in more than E and sharing from the scale's (`other_fields`: num_groups, dropout...), a column says
    how, so two variants that differ there do not read alike; without such a variant, no such column."""
    head = ["pretrained model", "task", "E", "sharing", "seeds", "Params", "MLM", "NSP", "SOP", "MLM loss"]
    rows = [[label, row["task"], str(row["model"].get("embedding_size", "–")), row["model"].get("sharing", "–"),
             ",".join(map(str, row["seeds"])), _params(row), cell(row.get("mlm_acc")), cell(row.get("nsp_acc")),
             cell(row.get("sop_acc")), cell(row.get("mlm_loss"), scale=1.0, digits=3)]
            for label, row in agg["variants"].items()]
    for label, v in (unfinished or {}).items():
        model = v["model"]
        rows.append([label, str(v["task"]), str(model.get("embedding_size", "–")), str(model.get("sharing", "–")),
                     "none finished", *["–"] * 5])
    others = other_fields([row["model"] for row in agg["variants"].values()]
                          + [v["model"] for v in (unfinished or {}).values()], scale)
    if any(others):
        head.insert(4, "other model fields")
        for r, changed in zip(rows, others):
            r.insert(4, ", ".join(f"{k}={v}" for k, v in changed.items()) or "–")
    return _md(head, rows)


# shown in their own columns of the models table
_OWN_COLUMNS = ("embedding_size", "sharing")


def other_fields(models: list[dict], scale: Scale | None) -> list[dict[str, Any]]:
    """Each model's fields (ModelConfig's order) other than E and sharing whose value is not the scale's base
    model's (`base_model`: what a variant changes, {"num_groups": 2, "hidden_dropout": 0.1, ...}); without a
    scale (no suite.json), the fields whose values differ among `models`."""
    full = [full_model(m or {}) for m in models]
    full = [m if isinstance(m, dict) else {} for m in full]
    if scale is not None:
        base = base_model(scale).to_dict()
        return [{k: v for k, v in m.items() if k not in _OWN_COLUMNS and (k not in base or base[k] != v)}
                for m in full]
    names = [k for k in dict.fromkeys(k for m in full for k in m) if k not in _OWN_COLUMNS]
    varied = [k for k in names if len({json.dumps(m.get(k), sort_keys=True) for m in full}) > 1]
    return [{k: m[k] for k in varied if k in m} for m in full]


def scratch_table(agg, tasks, unfinished: dict[str, dict] | None = None) -> list[str]:
    """Claim 5: every pretrained variant against the no-pretraining baseline of its shape (a planned variant
    without a finished run is a row of –)."""
    head = ["pretrained model", "seeds", *[_task_title(t) for t in tasks], "scratch (same shape)", "Δ Avg"]
    rows = []
    for label, row in agg["variants"].items():
        base = agg["shapes"].get(row["shape"])
        delta = "–"
        if base and row.get("ft_avg", {}).get("n") and base.get("ft_avg", {}).get("n"):
            delta = points((row['ft_avg']['mean'] - base['ft_avg']['mean']) * 100, sign=True)
        rows.append([label, ",".join(map(str, row["seeds"])), *_downstream_cells(row, tasks),
                     cell((base or {}).get("ft_avg")), delta])
    rows += [[label, "none finished", *["–"] * (len(tasks) + 2)] for label in unfinished or {}]
    return _md(head, rows)


def points(value: float, sign: bool = False) -> str:
    """A difference in points to one decimal, "+1.7"; one that one decimal would show as "-0.0" or "+0.0" (a
    small negative or positive difference, or none) gets two decimals, "-0.03", and no difference at all (below
    0.005) reads "0.0", with no sign to read a direction into."""
    if round(value, 1) != 0:
        return f"{value:+.1f}" if sign else f"{value:.1f}"
    if round(value, 2) != 0:
        return f"{value:+.2f}" if sign else f"{value:.2f}"
    return "0.0"


def _task_title(task: str) -> str:
    return {"sst2": "SST-2", "stsb": "STS-B", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA", "avg": "Avg"}.get(task, task)


def _params(row) -> str:
    return f"{row['params'] / 1e6:.3f}M" if row else "–"


def _get(row, key):
    return (row or {}).get(key)


def _scratch_avg(agg, row) -> str:
    if not row:
        return "–"
    return cell(agg["shapes"].get(row["shape"], {}).get("ft_avg"))


def _md(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return lines


# -------------------------------------------------------------------------------------------- claims
def _separated(a: dict | None, b: dict | None) -> bool | None:
    """a above b beyond the seeds' spread: a's lowest seed above b's highest (None: not both measured with
    at least 2 seeds: one seed has no spread to compare with)."""
    if not a or not b or a.get("n", 0) < 2 or b.get("n", 0) < 2:
        return None
    return a["min"] > b["max"]


def claims(agg, planned: dict | None = None, downstream: bool = True) -> dict[str, dict]:
    """Automatic checks of claims 1-5 with the rule each uses; docs/paper.md gives the judgement. `planned`:
    the paper's configurations the suite's grids plan (their labels) and its seed count, so a claim its grids
    can never measure says so instead of "not measured yet". `downstream` False (a suite without fine-tuning,
    `intrinsic_only`): the claims judged on downstream scores (2, 3 and 5) are `NO_FINETUNING`."""
    v = agg["variants"]
    get = lambda variant, key: (row_of(agg, variant) or {}).get(key)  # noqa: E731
    out = {}
    nsp_on_sop, sop_on_nsp = get(Variant(task="nsp"), "sop_acc"), get(Variant(task="sop"), "nsp_acc")
    rule1 = ("NSP-trained on SOP: every seed < 60%; SOP-trained on NSP: every seed > 55% and above every "
             "NSP-trained seed on SOP")
    if nsp_on_sop and sop_on_nsp and nsp_on_sop.get("n", 0) >= 2 and sop_on_nsp.get("n", 0) >= 2:
        near = nsp_on_sop["max"] < 0.6
        above = sop_on_nsp["min"] > 0.55 and sop_on_nsp["min"] > nsp_on_sop["max"]
        out["1"] = {"holds": near and above, "rule": rule1,
                    "nsp_model_on_sop": nsp_on_sop, "sop_model_on_nsp": sop_on_nsp}
    else:
        out["1"] = {"holds": None, "rule": rule1 + "; needs 2 seeds of the NSP and SOP models"}
    sop, nsp, none = (get(Variant(task=t), "ft_avg") for t in ("sop", "nsp", "none"))
    s_n, s_0 = _separated(sop, nsp), _separated(sop, none)
    out["2"] = {"holds": None if s_n is None or s_0 is None else (s_n and s_0),
                "rule": "downstream Avg of the SOP model: lowest seed above the highest seed of NSP and of None",
                "sop": sop, "nsp": nsp, "none": none,
                "mean_order": None if None in (sop, nsp, none) or not all(x.get("n") for x in (sop, nsp, none))
                else [k for k, _ in sorted((("sop", sop), ("nsp", nsp), ("none", none)), key=lambda kv: -kv[1]["mean"])]}
    rows = {s: get(Variant(embedding=e, sharing=s), "ft_avg") for e in (768,) for s in SHARING_NAMES}
    rows128 = {s: get(Variant(embedding=128, sharing=s), "ft_avg") for s in SHARING_NAMES}
    out["3"] = {"holds": None, "rule": "all-shared at most 3 points (Avg) below not-shared at both E (the paper: "
                "2.5 and 1.5), and shared-FFN below shared-attention beyond the seeds' spread at both E",
                "E768": rows, "E128": rows128}
    # its two halves, each judged as soon as its four configurations have 2+ seeds (Table 3's grid measures the
    # first): the claim does not hold when either half does not, holds when both do
    both = (rows, rows128)
    measured = lambda *sharings: all(rr[k] and rr[k].get("n", 0) >= 2 for rr in both for k in sharings)  # noqa: E731
    small_cost = ffn_worse = None
    if measured("none", "all"):   # "at most 3 points", in points: 0.50 - 0.47 is 3.0000000000000027 in floats
        small_cost = all(round((rr["none"]["mean"] - rr["all"]["mean"]) * 100, 9) <= 3 for rr in both)
        out["3"]["all_shared_cost"] = {str(e): (rr["none"]["mean"] - rr["all"]["mean"]) * 100
                                       for e, rr in ((768, rows), (128, rows128))}
    if measured("attention", "ffn"):
        ffn_worse = all(_separated(rr["attention"], rr["ffn"]) for rr in both)
    out["3"]["parts"] = {"all_shared_cost": small_cost, "ffn_below_attention": ffn_worse}
    out["3"]["holds"] = False if False in (small_cost, ffn_worse) else (True if small_cost and ffn_worse else None)
    models = dict(_figure1_models(agg))
    rule4 = ("mean |change between consecutive layers| (layers 2..L) of L2 and of cosine smaller for ALBERT than "
             "for BERT (seed means), and every ALBERT seed's below every BERT seed's (2+ seeds of each)")
    if len(models) == 2:
        albert, bert = models["ALBERT"], models["BERT"]
        measurable = all(roughness(m[k]) is not None for m in (albert, bert) for k in ("l2", "cosine"))
        out["4"] = {"holds": None if not measurable else
                    roughness(albert["l2"]) < roughness(bert["l2"]) and
                    roughness(albert["cosine"]) < roughness(bert["cosine"]),
                    "rule": rule4,
                    "albert_roughness": {k: roughness(albert[k]) for k in ("l2", "cosine")},
                    "bert_roughness": {k: roughness(bert[k]) for k in ("l2", "cosine")}}
        if not measurable:
            out["4"]["why"] = "not measured: the models have fewer than 3 layers, so no change between layers 2..L"
    else:
        out["4"] = {"holds": None, "rule": rule4 + "; needs the ALBERT and the BERT run"}
    checks = {}
    for label, row in v.items():
        base = agg["shapes"].get(row["shape"])
        checks[label] = _separated(row.get("ft_avg"), (base or {}).get("ft_avg"))
    measured = {k: c for k, c in checks.items() if c is not None}
    out["5"] = {"holds": (all(measured.values()) if measured else None),  # any measured failure = does not hold
                "rule": "each pretrained variant's downstream Avg: lowest seed above the highest scratch seed",
                "per_variant": checks, "measured": len(measured), "variants": len(checks)}
    if not downstream:
        for key in DOWNSTREAM_CLAIMS:
            out[key] = {"holds": None, "why": NO_FINETUNING, "rule": out[key]["rule"]}
    if planned is not None:
        _why_unmeasured(out, planned)
        _short_of_seeds(out, agg, planned)
    if len(models) == 2:
        _claim4_seeds(out["4"], models["ALBERT"], models["BERT"])
    return out


# the claims whose rules compare downstream (fine-tuning) scores, and what they say in a suite without fine-tuning
DOWNSTREAM_CLAIMS = ("2", "3", "5")
NO_FINETUNING = "not measured (no fine-tuning task in this scale)"


def intrinsic_only(scale: dict | None, tasks: list[str]) -> bool:
    """Whether a suite fine-tuned nothing: its scale (suite.json's) has no fine-tuning task (a scale file's
    `finetune_tasks = []`) and no finished job has a downstream score (`tasks`: the report's task columns)."""
    return isinstance(scale, dict) and scale.get("finetune_tasks") == [] and not tasks


def _claim4_seeds(c: dict, albert: dict, bert: dict) -> None:
    """Claim 4 holds on the seed means only when the seeds say so too: one seed of either model has no spread
    ("holds on one seed"), and seeds whose roughness overlaps (an ALBERT seed as rough as a BERT seed, in L2 or
    cosine) read "holds on the seed means only", as the other claims ask every seed beyond the others'. A claim
    already "so far" (seeds still to come) stays so; an aggregate without per-seed values keeps the means' verdict."""
    if c.get("holds") is not True:
        return
    a, b = albert.get("roughness"), bert.get("roughness")
    if not a or not b:
        return
    counts = f"ALBERT {len(a['l2'])} seed{'s' * (len(a['l2']) != 1)}, BERT {len(b['l2'])}"
    if min(len(a["l2"]), len(b["l2"])) < 2:
        c.update(holds=None, why=f"holds on one seed: the seed means of {counts}, with no spread to compare "
                                 f"the difference with (run 2 or more --seeds)")
    elif not all(max(a[k]) < min(b[k]) for k in ("l2", "cosine")):
        c.update(holds=None, why=f"holds on the seed means only: an ALBERT seed's change between layers is not "
                                 f"below every BERT seed's ({counts})")


def roughness(t: list[float]) -> float | None:
    """Mean absolute change between consecutive layers, after the first layer; None below 3 layers (there is
    no change to measure)."""
    return statistics.fmean(abs(t[i + 1] - t[i]) for i in range(1, len(t) - 1)) if len(t) > 2 else None


# the paper configurations each claim needs, and whether it compares seeds (2 or more needed)
_CLAIM_NEEDS = {"1": ((Variant(task="nsp"), Variant(task="sop")), True),
                "2": ((Variant(task="sop"), Variant(task="nsp"), Variant(task="none")), True),
                "3": (tuple(Variant(embedding=e, sharing=s) for e in (768, 128) for s in SHARING_NAMES), True),
                "4": ((Variant(embedding=128, sharing="all"), Variant(embedding=768, sharing="none")), False)}


def _why_unmeasured(out: dict, planned: dict) -> None:
    """An unmeasured claim's reason: its grids have no run of a configuration it needs, or one seed only."""
    for key, (needs, seeds) in _CLAIM_NEEDS.items():
        if out[key]["holds"] is not None or out[key].get("why"):
            continue
        missing = [v.label for v in needs if v.label not in planned["labels"]]
        if missing:
            out[key]["why"] = f"not measured by this grid (it plans no {missing[0]} run)"
        elif seeds and planned["seeds"] < 2:
            out[key]["why"] = _ONE_SEED.format(n=planned["seeds"])
    # claim 5 compares every model's seeds with its baseline's: with one pretraining seed it never can
    if out["5"]["holds"] is None and not out["5"].get("why") and planned["seeds"] < 2:
        out["5"]["why"] = _ONE_SEED.format(n=planned["seeds"])
    # "every pretrained model": a suite cut short has measured some of them; one below its baseline is enough to
    # say the claim does not hold, but all of them above theirs only says so of those measured
    total = len(planned.get("variants") or ())
    if out["5"]["holds"] and out["5"]["measured"] < total:
        out["5"].update(holds=None, why=f"holds so far: {out['5']['measured']} of the {total} pretrained variants "
                                        f"planned measured (2+ seeds of it and of its baseline), each above its "
                                        f"baseline")


_ONE_SEED = "not measured by this grid: it compares seeds and the suite has {n} pretraining seed (--seeds)"

# the metric each claim that compares seeds judges a configuration by (claim 1: the NSP model on SOP, the SOP
# model on NSP)
_CLAIM_METRIC = {"1": {"E128-all-nsp": "sop_acc", "E128-all-sop": "nsp_acc"}, "2": {}, "3": {}}


def _short_of_seeds(out: dict, agg: dict, planned: dict) -> None:
    """A claim that holds on fewer seeds than the suite plans (a seed's run not finished, or failed) holds so
    far: its rules ask every seed to be beyond the others', and a seed still to come can break that. Claim 4
    compares seed means: on fewer seeds than planned it holds, or does not hold, so far."""
    want = lambda label: (planned.get("variant_seeds") or {}).get(label, planned["seeds"])  # noqa: E731
    for key in ("1", "2", "3"):
        if out[key]["holds"] is not True:
            continue
        short = []
        for variant in _CLAIM_NEEDS[key][0]:
            label = (agg.get("paper") or {}).get(variant.label, variant.label)
            s = (agg["variants"].get(label) or {}).get(_CLAIM_METRIC[key].get(variant.label, "ft_avg")) or {}
            if s.get("n", 0) < want(label):
                short.append(f"{label} {s.get('n', 0)} of {want(label)}")
        if short:
            out[key].update(holds=None, why=f"holds so far: measured with fewer seeds than planned "
                                            f"({', '.join(short)})")
    # claim 3's first half compares seed means (all-shared's cost in points): when the claim fails on that half
    # alone (shared-FFN's half is not measured, or holds), a seed still to come can move the means either way
    # (the second half's failure, seeds that do not separate, stays failed whatever seed comes)
    if out["3"]["holds"] is False and (out["3"].get("parts") or {}).get("ffn_below_attention") is not False:
        short = []
        for variant in (Variant(embedding=e, sharing=s) for e in (768, 128) for s in ("none", "all")):
            label = (agg.get("paper") or {}).get(variant.label, variant.label)
            n = ((agg["variants"].get(label) or {}).get("ft_avg") or {}).get("n", 0)
            if n < want(label):
                short.append(f"{label} {n} of {want(label)}")
        if short:
            out["3"].update(holds=None, why=f"does not hold so far: all-shared's cost is a difference of seed means "
                                            f"over fewer seeds than planned ({', '.join(short)})")
    # claim 4 compares seed means (no spread), so a verdict either way can change with a seed still to come
    if out["4"]["holds"] is not None:
        short = []
        for variant in _CLAIM_NEEDS["4"][0]:
            label = (agg.get("paper") or {}).get(variant.label, variant.label)
            n = ((agg["variants"].get(label) or {}).get("transitions") or {}).get("n")
            if n is not None and n < want(label):      # (an aggregate without a count: as figure1_table, not short)
                short.append(f"{label} {n} of {want(label)}")
        if short:
            verdict = "holds so far" if out["4"]["holds"] else "does not hold so far"
            out["4"].update(holds=None, why=f"{verdict}: seed means over fewer seeds than planned "
                                            f"({', '.join(short)})")
    if out["5"]["holds"] is not True:
        return
    short = []
    for label, row in agg["variants"].items():
        base = (agg["shapes"].get(row["shape"]) or {}).get("ft_avg") or {}
        mine = (row.get("ft_avg") or {}).get("n", 0)
        if mine < want(label) or base.get("n", 0) < planned["seeds"]:
            short.append(f"{label} {mine} of {want(label)}, its baseline {base.get('n', 0)} of {planned['seeds']}")
    if short:
        out["5"].update(holds=None, why=f"holds so far: measured with fewer seeds than planned "
                                        f"({'; '.join(short)}), each variant above its baseline")


def planned_paper_configs(suite: dict, scale: Scale | None) -> dict | None:
    """The paper's configurations that the suite's plan (suite.json's runs) holds, its seed count and all its
    variants (the paper's and a grid file's)."""
    runs = suite.get("runs")
    if not runs or scale is None:
        return None
    variants = {r["name"]: {"model": r.get("model"), "task": r.get("task")} for r in runs}
    variant_seeds: dict[str, set] = {}
    for r in runs:
        variant_seeds.setdefault(r.get("variant"), set()).add(r.get("seed"))
    return {"labels": set(paper_rows(variants, scale)), "seeds": len({r.get("seed") for r in runs}),
            "variants": set(variant_seeds), "variant_seeds": {k: len(v) for k, v in variant_seeds.items()}}


def _claim3_parts(c: dict) -> str:
    """Claim 3's halves in words, "all-shared's cost: holds (2.5 and 0.5 Avg points at E=H and E=128); shared-FFN
    below shared-attention: does not hold; ", so a verdict on the whole says which half it rests on ("" while
    neither half is measured)."""
    parts = c.get("parts") or {}
    if all(v is None for v in parts.values()):
        return ""
    words = {True: "holds", False: "does not hold", None: "not measured"}
    cost = c.get("all_shared_cost") or {}
    numbers = (f" ({points(cost['768'])} and {points(cost['128'])} Avg points at the paper's E=768 and E=128)"
               if "768" in cost and "128" in cost else "")
    return (f"all-shared's cost: {words[parts.get('all_shared_cost')]}{numbers}; shared-FFN below shared-attention: "
            f"{words[parts.get('ffn_below_attention')]}; ")


def _verdict(c: dict) -> str:
    if c.get("holds") is None and c.get("why"):
        return c["why"].split(" (")[0].split(":")[0]
    return {True: "holds", False: "does not hold", None: "not measured yet"}[c.get("holds")]


# ---------------------------------------------------------------------------------------------- plots
def plots(agg: dict, data: dict, out: Path) -> list[Path]:
    """figure1.png, downstream.png and pretraining_curves.png, each when it has something to draw (no
    downstream.png in a suite without fine-tuning: no downstream score, no baseline)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    models = _figure1_models(agg)
    if models:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for name, t in models:
            layers = range(1, len(t["l2"]) + 1)
            axes[0].plot(layers, t["l2"], marker="o", label=name)
            axes[1].plot(layers, [angle_degrees(c) for c in t["cosine"]], marker="o", label=name)
        # as the paper's Figure 1: the cosine similarity drawn as an angle in degrees (report.md has both)
        axes[0].set(title="L2 distance (input vs output embedding)", xlabel="layer", ylabel="L2 distance")
        axes[1].set(title="cosine similarity, as an angle (the paper's axis)", xlabel="layer",
                    ylabel="angle between input and output (degrees)")
        for ax in axes:
            ax.set_xticks(range(1, max(len(t["l2"]) for _, t in models) + 1))   # layers are whole numbers
            ax.legend()
            ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out / "figure1.png", plt))
    scored = any(k.startswith("ft_") for row in [*agg["variants"].values(), *agg["shapes"].values()] for k in row)
    if agg["variants"] and scored:
        labels = list(agg["variants"])
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(labels) + 2), 4))
        named: set[str] = set()      # each series in the legend once, from its first point (not the first model's)

        def legend(name: str) -> str | None:
            first = name not in named
            named.add(name)
            return name if first else None

        for i, label in enumerate(labels):
            row = agg["variants"][label]
            s = row.get("ft_avg")
            if s and s.get("n"):
                ax.errorbar(i, s["mean"] * 100, yerr=_bar(s), fmt="o", color="C0", label=legend("pretrained"))
                ax.scatter([i] * len(s["values"]), [x * 100 for x in s["values"]], s=8, color="C0", alpha=0.4)
            base = agg["shapes"].get(row["shape"], {}).get("ft_avg")
            if base and base.get("n"):
                ax.errorbar(i + 0.2, base["mean"] * 100, yerr=_bar(base), fmt="x", color="C3",
                            label=legend("no pretraining"))
                ax.scatter([i + 0.2] * len(base["values"]), [x * 100 for x in base["values"]], s=8, color="C3",
                           alpha=0.4)      # its seeds too, as the pretrained model's
        ax.set_xticks(range(len(labels)), labels, rotation=70, ha="right", fontsize=7)
        ax.set(ylabel="downstream Avg (dev, x100)", title="pretrained vs the same shape from scratch")
        if named:
            ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, out / "downstream.png", plt))
    curves = first_seed_curves(data)
    if curves:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        # the MLM loss, not the training loss: that one adds the sentence task's loss (about ln 2 nats while the
        # head guesses), so a model trained without one (None) drew far below the others for the same MLM
        for i, (label, rows) in enumerate(sorted(curves.items())):
            color = f"C{i % 10}"      # one colour per model in both panels (the legend is the left one's)
            acc = [r for r in rows if "mlm_acc" in r and "step" in r]
            axes[0].plot([r["step"] for r in acc], [r["mlm_acc"] * 100 for r in acc], label=label, lw=0.8,
                         color=color)
            loss = [r for r in rows if "mlm_loss" in r and "step" in r]
            axes[1].plot([r["step"] for r in loss], [r["mlm_loss"] for r in loss], label=label, lw=0.8, color=color)
        axes[0].set(title="training MLM accuracy (each model's first seed)", xlabel="step",
                    ylabel="MLM accuracy (%, training batches)")
        axes[1].set(title="training MLM loss (each model's first seed)", xlabel="step",
                    ylabel="MLM loss (nats, training batches)")
        axes[0].legend(fontsize=6, ncol=2)
        fig.tight_layout()
        written.append(_save(fig, out / "pretraining_curves.png", plt))
    return written


def _bar(s: dict) -> float | None:
    """An error bar of one sample standard deviation (x100), none for a single seed (no spread measured)."""
    return None if s.get("sd") is None else s["sd"] * 100


def first_seed_curves(data: dict) -> dict[str, list[dict]]:
    """Each pretrained variant's training curve from its lowest finished seed (a variant whose run of the suite's
    first seed has not finished, or failed, is still plotted from its next one)."""
    curves: dict[str, tuple[int, list[dict]]] = {}
    for r in data["pretrain"].values():
        if r.get("train_curve") and (r["variant"] not in curves or r["seed"] < curves[r["variant"]][0]):
            curves[r["variant"]] = (r["seed"], r["train_curve"])
    return {variant: curve for variant, (_, curve) in curves.items()}


def _save(fig, path: Path, plt) -> Path:
    try:
        return _write_atomic(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------------------- report
def write_report(out: str | Path, warn=None) -> list[Path]:
    """report.md, results.json and the plots of the suite in `out`, from the result.json files that exist; each
    result that cannot be read is left out, named in the report and passed to `warn` (default: stderr)."""
    out = Path(out)
    data = load_results(out)
    warn = warn or (lambda message: print(message, file=sys.stderr, flush=True))
    for path, why in data["unreadable"].items():
        warn(warning_line(f"{path}: left out of the report ({why}); remove it to run that job again"))
    scale_dict = data["suite"].get("scale")
    scale = _scale_from(scale_dict)
    no_length_rule = fill_length_rules(out, data, warn)
    agg = aggregate(data, scale)
    tasks = _tasks(agg)
    downstream = not intrinsic_only(scale_dict, tasks)
    checked = claims(agg, planned_paper_configs(data["suite"], scale), downstream)
    lines = [f"# Ablation report: `{out}`", ""]
    if scale_dict:
        named = f" as changed by the scale file `{scale_dict['file']}`" if scale_dict.get("file") else ""
        lines += [f"Scale **{scale_dict['name']}**{named}: H={scale_dict['hidden_size']}, L={scale_dict['num_layers']}, "
                  f"A={scale_dict['num_heads']}, I={4 * scale_dict['hidden_size']}, V={scale_dict['vocab_size']}, "
                  f"T={scale_dict['max_seq_length']}, {scale_dict['max_steps']} steps x {scale_dict['batch_size']} "
                  f"sequences = {_tokens(scale_dict['tokens_per_run'])} tokens per run, {scale_dict['optimizer']} "
                  f"lr {scale_dict['lr']}, {scale_dict['masking']} masking; E values {scale_dict['embedding_sizes']} "
                  f"stand for the paper's {list(PAPER_E)}; pretraining seeds {scale_dict['seeds']}. "
                  + (_finetuning_text(scale_dict) if scale_dict.get("finetune_tasks") else
                     "Fine-tuning: none (no fine-tuning task in this scale): the models are compared by their "
                     "held-out MLM, SOP and NSP accuracy and their layer transitions; no downstream scores, no "
                     "no-pretraining baselines."), ""]
    grids = _suite_grids(data["suite"])
    if grids:
        lines += [f"Grid{'s' * (len(grids) != 1)} run into this directory: {', '.join(f'`{g}`' for g in grids)}"
                  + (" (its plan is the union of theirs)" if len(grids) > 1 else "") + ".", ""]
    lines += corpus_facts(out, downstream)
    planned = len(data["suite"].get("jobs", []))
    runs, baselines = len(data['pretrain']), len(data['scratch'])
    cells = ("Cells are mean ± sample standard deviation over seeds (the count in parentheses when it is not 2); "
             "– = not finished. ")
    params = ("Params (ours): embeddings + encoder + pooler, heads apart; the paper's shared rows count the pooler, "
              "its not-shared rows leave it out (H² + H, 0.59M at its H = 768).")
    if downstream:
        lines += [f"Finished: {runs} pretraining run{'s' * (runs != 1)} and {baselines} no-pretraining "
                  f"baseline{'s' * (baselines != 1)} of {planned} job{'s' * (planned != 1)} planned. {cells}Paper "
                  f"columns: the paper's ALBERT-base (Tables 3-5) and ALBERT-xxlarge (Table 8) numbers; its Avg is "
                  f"over SQuAD1.1, SQuAD2.0, MNLI, SST-2 and RACE, ours over the tasks above, so compare orderings, "
                  f"not values. {params}", ""]
    else:
        lines += [f"Finished: {runs} pretraining run{'s' * (runs != 1)} of {planned} job{'s' * (planned != 1)} "
                  f"planned (no fine-tuning task in this scale: no no-pretraining baselines, and the tables leave "
                  f"out every downstream column, the paper's too). {cells}Paper columns: the paper's ALBERT-base "
                  f"held-out accuracies and sizes. {params}", ""]
    missing = unfinished_jobs(data)
    if missing:
        lines += [f"**Not finished:** {len(missing)} of the {planned} jobs planned (running, not started, failed, or "
                  f"left out below; a rerun of the suite runs them): {', '.join(f'`{name}`' for name in missing)}. "
                  f"The cells below are over the seeds that finished (their count in parentheses when it is not 2; "
                  f"the seeds column of the last two tables names them).", ""]
    if data["unreadable"]:
        lines += [f"**Left out:** {len(data['unreadable'])} result file{'s' * (len(data['unreadable']) != 1)} that "
                  f"cannot be read (remove one to run its job again): "
                  + "; ".join(f"`{Path(p).relative_to(out) if Path(p).is_relative_to(out) else p}` ({why})"
                              for p, why in data["unreadable"].items()) + ".", ""]
    baseline = mlm_baseline(out)
    if baseline:
        lines += [f"MLM baseline: predicting every masked held-out token from its frequency in the training data "
                  f"(no context) scores **{baseline['acc'] * 100:.1f}%** accuracy, cross-entropy "
                  f"{baseline['loss']:.2f} nats, on the same held-out slots as the MLM columns below; an MLM "
                  f"accuracy near it means the model learned little beyond token frequencies.", ""]
    lengths, lengths_why = sentence_length_baselines(out, warn)
    lines += [_length_sentence(lengths, lengths_why), ""]
    lines += ["## Claims (automatic checks; rules beside each)", ""]
    # claims 2, 3 and 5 compare downstream (GLUE) scores: of models pretrained on a corpus that is not English
    # they read as plain verdicts on the corpus ("does not hold") beside the note that those scores say little
    foreign = not_english(out)
    for key, title in (("1", "NSP-trained model near chance on SOP, SOP-trained well above chance on NSP"),
                       ("2", "SOP better downstream than NSP and than no sentence task"),
                       ("3", "all-shared costs little; sharing FFN costs more than sharing attention"),
                       ("4", "ALBERT's layer transitions smoother than BERT's"),
                       ("5", "every pretrained model beats the same shape from scratch")):
        c = checked[key]
        why = c.get("why", "") if c.get("holds") is None else ""
        detail = why[len(_verdict(c)):] if why else ""   # " (it plans no ... run)" or ": it compares seeds ..."
        detail = detail[2:-1] if detail.startswith(" (") and detail.endswith(")") else detail.lstrip(" :")
        parts = _claim3_parts(c) if key == "3" else ""
        judged = foreign and key in ("2", "3", "5") and not _verdict(c).startswith("not measured")
        caveat = _NOT_ENGLISH_CLAIM if judged else ""
        # claim 1's rule keeps its thresholds (< 60%, > 55%): the segment-length baseline is printed beside it only
        # and so is the length-balanced accuracy of the two heads it judges
        beside = (f"; length-balanced accuracy (a length-follower's 50%), not in the rule: {_claim1_balanced(agg)}"
                  f"; segment-length baseline, not in the rule: {_length_short(lengths)}" if key == "1" else "")
        lines.append(f"{key}. {title}: **{_verdict(c)}** ({caveat}{detail + '; ' if detail else ''}{parts}"
                     f"{c['rule']}{beside})")
    lines += [""]
    sections = [("Table 5: sentence-prediction task (intrinsic accuracy on held-out SOP and NSP data"
                 + (", downstream)" if downstream else ")"), table5(agg, tasks, scale, downstream)),
                ("Table 4: cross-layer parameter sharing", table4(agg, tasks, scale, downstream)),
                ("Table 3: embedding size E", table3(agg, tasks, scale, downstream)),
                ("Dropout (the paper's Table 8, ALBERT-xxlarge)", dropout_table(agg, tasks, scale, downstream)),
                ("Figure 1: input vs output embedding of each layer (held-out data, seed mean)", figure1_table(agg))]
    if any(g not in NAMED for g in grids or [None]):   # a user grid: only the paper's tables it has a configuration of
        used = [any(row_of(agg, v) for v in GRIDS[name].variants)
                for name in ("table5", "table4", "table3", "dropout", "figure1")]
        sections = [section for section, keep in zip(sections, used) if keep]
    unfinished = unfinished_variants(agg, data["suite"])
    sections += [("Every pretrained model: parameters and held-out accuracy",
                  models_table(agg, unfinished, scale))]
    if downstream:   # (a suite without fine-tuning has no baselines: they are random models fine-tuned)
        sections += [("No pretraining: every pretrained model vs the same shape trained from scratch",
                      scratch_table(agg, tasks, unfinished))]
    for title, table in sections:
        lines += [f"## {title}", "", *table, ""]
        if title.startswith("Table 5:"):
            lines += [f"Held-out accuracy from the segment lengths alone (no token read; chance 50%): "
                      f"{_length_short(lengths)}; see the sentence-task baseline above the claims.", ""]
            lines += length_balanced_lines(agg, no_length_rule)
    pngs = plots(agg, data, out)
    lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    report = out / "report.md"
    _write_atomic(report, lambda tmp: tmp.write_text("\n".join(lines) + "\n", encoding="utf-8"))
    results = out / "results.json"
    planned_grids = {r.get("name"): r.get("grids") for r in data["suite"].get("runs") or [] if isinstance(r, dict)}
    runs = {name: {**r, "grids": planned_grids.get(name) or r.get("grids")} for name, r in data["pretrain"].items()}
    # downstream: null when measured; in a suite without fine-tuning, why not (as claims 2, 3 and 5 say)
    text = json.dumps({"scale": scale_dict, "grid": data["suite"].get("grid"), "grids": grids, "claims": checked,
                       "downstream": None if downstream else NO_FINETUNING,
                       "mlm_unigram_baseline": baseline, "sentence_length_baseline": lengths,
                       "unreadable": data["unreadable"], "unfinished": missing,
                       "aggregate": agg, "runs": runs, "scratch": data["scratch"]},
                      indent=1, sort_keys=True, default=str) + "\n"
    _write_atomic(results, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return [report, results, *pngs]


def _suite_grids(suite: dict) -> list[str]:
    """Every grid run into the suite's --out, in order (suite.json's `grids`; an older one names only `grid`)."""
    grids = suite.get("grids") or ([suite["grid"]] if suite.get("grid") else [])
    return [str(g) for g in grids] if isinstance(grids, list) else []


def _write_atomic(path: Path, write) -> Path:
    """`write(tmp)` fills a temporary file beside `path`, which then replaces `path`: a report rewritten from a
    rerun is the old one or the new one, never half of one (a full disk, a kill while it writes); the
    temporary file goes when the write fails."""
    import os

    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def mlm_baseline(out: Path) -> dict | None:
    """The unigram baseline of the suite's held-out MLM accuracy (`evaluation.unigram_baseline`), computed
    once from its prepared data and kept in prepared/unigram_baseline.json; None without prepared data."""
    cache = out / "prepared" / "unigram_baseline.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    train, heldout = out / "prepared" / "data" / "train_sop", out / "prepared" / "data" / "heldout_sop"
    if not (train.is_dir() and heldout.is_dir()):
        return None
    from albertlm.experiments.evaluation import unigram_baseline

    baseline = unigram_baseline(train, heldout)
    _write_atomic(cache, lambda tmp: tmp.write_text(json.dumps(baseline, indent=2) + "\n", encoding="utf-8"))
    return baseline


LENGTH_BASELINE_FILE = "length_baseline.json"   # in prepared/, beside unigram_baseline.json


def sentence_length_baselines(out: Path, warn=None) -> tuple[dict[str, dict] | None, str]:
    """The segment-length baseline of the suite's held-out SOP and NSP accuracy (`evaluation.length_baseline`)
    for each held-out sentence set in prepared/data: the rule "label 1 when A is longer than B" and the table
    P(label | len A, len B) fitted on the same task's training data (the rule alone where that is missing).
    Computed once and kept in prepared/length_baseline.json; a suite prepared before the file existed gets it
    at its next report (`--report-only` too). ({task: baseline}, "") or (None, why it is not available):
    no prepared held-out data, or data the baseline cannot be read from (also passed to `warn`)."""
    from albertlm.errors import UserError

    data = out / "prepared" / "data"
    # task -> whether its training data is there to fit on
    present = {task: (data / f"train_{task}").is_dir() for task in ("sop", "nsp")
               if (data / f"heldout_{task}").is_dir()}
    cache = out / "prepared" / LENGTH_BASELINE_FILE
    saved = json_object_or_empty(cache)     # missing, cut short or edited: {}, computed again
    if (saved and all(isinstance(v, dict) for v in saved.values())
            and all(task in saved and (saved[task].get("fitted_acc") is not None or not fit)
                    for task, fit in present.items())):
        return saved, ""
    if not present:
        return None, "no prepared held-out SOP or NSP data in prepared/data"
    from albertlm.experiments.evaluation import length_baseline

    try:
        baselines = {task: length_baseline(data / f"train_{task}" if fit else None, data / f"heldout_{task}")
                     for task, fit in present.items()}
    except UserError as exc:
        if warn:
            warn(warning_line(f"the segment-length baseline is left out of the report: {exc}"))
        return None, str(exc)
    _write_atomic(cache, lambda tmp: tmp.write_text(json.dumps(baselines, indent=2) + "\n", encoding="utf-8"))
    return baselines, ""


def _length_bar(b: dict) -> float | None:
    """A task's segment-length baseline as one number: the better of the fitted table and the rule (None: no
    held-out pair to score)."""
    return max((x for x in (b.get("rule_acc"), b.get("fitted_acc")) if x is not None), default=None)


def _percent(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _length_short(baselines: dict[str, dict] | None) -> str:
    """"SOP 56.5%, NSP 53.8%" (each the better of the fitted table and the rule), or "not available"."""
    if not baselines:
        return "not available"
    return ", ".join(f"{TASK_NAMES.get(t, t)} {_percent(_length_bar(b))}" for t, b in baselines.items())


def _length_sentence(baselines: dict[str, dict] | None, why: str) -> str:
    """The report's paragraph on the segment-length baseline, beside the MLM baseline's."""
    head = ("Sentence-task baseline: the held-out SOP / NSP label predicted from the two segments' lengths alone, "
            "no token read (`evaluation.length_baseline`)")
    if not baselines:
        return f"{head}: not available ({why})."

    def ci(interval) -> str:
        return f" [{interval[0] * 100:.1f}, {interval[1] * 100:.1f}]" if interval else ""

    parts = []
    for task, b in baselines.items():
        fitted = (f"{_percent(b['fitted_acc'])}{ci(b['fitted_ci95'])} by P(label | len A, len B) fitted on "
                  f"{b['train_instances']} training pairs, " if b.get("fitted_acc") is not None else
                  "no training data to fit on, " if b.get("heldout_instances") else "")
        parts.append(f"{TASK_NAMES.get(task, task)} **{_percent(_length_bar(b))}** ({b['heldout_instances']} "
                     f"held-out pairs: {fitted}{_percent(b['rule_acc'])}{ci(b['rule_ci95'])} by the rule)")
    return (f"{head}, the better of a table fitted on the task's training data and the rule \"label 1 when A is "
            f"longer than B\" (SOP 1 = swapped, NSP 1 = B from another document): {'; '.join(parts)}. Chance is "
            "50%, but the sentence that closes a chunk, always in B, crosses the chunk's target length and so tends "
            "to be its longest: an SOP or NSP accuracy near these numbers says the head learned little beyond "
            "segment lengths.")


LENGTH_RULE_FILE = "length_rule.json"   # in a pretraining run's directory, beside its result.json


def fill_length_rules(out: Path, data: dict, warn=None) -> dict[str, str]:
    """Each finished pretraining's `intrinsic.length_rule` (`evaluation.length_rule_agreement`: its sentence head
    against the length rule on the held-out SOP and NSP data), in `data` (not in its result.json): a run
    evaluated before the job recorded it gets it from its final checkpoint and the suite's prepared held-out
    data, computed once and kept in its directory's length_rule.json (`--report-only` too; again when the
    checkpoint or the held-out sets differ from the kept file's; the kept numbers stay when the checkpoint is
    pruned later). Returns {run name: why it is not available}: its checkpoint gone before it was computed, no
    prepared held-out data, or one the numbers cannot be computed from (also passed to `warn`)."""
    from albertlm.errors import UserError

    prepared = out / "prepared" / "data"
    heldout = {task: prepared / f"heldout_{task}" for task in ("sop", "nsp") if (prepared / f"heldout_{task}").is_dir()}
    missing: dict[str, str] = {}
    for name, result in data["pretrain"].items():
        intrinsic = result["intrinsic"]
        if isinstance(intrinsic.get("length_rule"), dict) and intrinsic["length_rule"]:
            continue                                    # recorded by the job's own evaluation
        checkpoint = (result.get("pretrain") or {}).get("checkpoint")
        if not heldout:
            missing[name] = "no prepared held-out SOP or NSP data in prepared/data"
            continue
        # a task whose accuracy is NaN (NaN outputs) has no numbers, as in `evaluation.intrinsic`
        scored = {task: path for task, path in heldout.items()
                  if not (isinstance(intrinsic.get(f"{task}_acc"), float) and math.isnan(intrinsic[f"{task}_acc"]))}
        cache = data.get("directories", {}).get(name, out / "runs" / name) / LENGTH_RULE_FILE
        saved = json_object_or_empty(cache)     # missing, cut short or edited: {}, computed again
        if not (saved.get("checkpoint") == checkpoint
                and isinstance(saved.get("length_rule"), dict) and set(saved["length_rule"]) == set(scored)):
            if not isinstance(checkpoint, str) or not (out / checkpoint / "config.json").is_file():
                missing[name] = (f"its final checkpoint {checkpoint} is missing" if isinstance(checkpoint, str)
                                 else "no final checkpoint recorded")
                continue
            from albertlm.experiments.evaluation import length_rule_agreement

            try:
                numbers = length_rule_agreement(out / checkpoint, scored) if scored else {}
            except (UserError, OSError) as exc:
                if warn:
                    warn(warning_line(f"{name}: its length-balanced accuracy is left out of the report: {exc}"))
                missing[name] = str(exc)
                continue
            saved = {"checkpoint": checkpoint, "length_rule": numbers}
            text = json.dumps(saved, indent=2) + "\n"
            _write_atomic(cache, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        intrinsic["length_rule"] = {task: saved["length_rule"].get(task) for task in heldout}
    return missing


def _claim1_balanced(agg: dict) -> str:
    """Claim 1's two accuracies, length-balanced: "NSP-trained on SOP 51.0 ± 0.5, SOP-trained on NSP 53.0 ± 0.6"."""
    parts = []
    for model, data in (("nsp", "sop"), ("sop", "nsp")):
        row = row_of(agg, Variant(task=model))
        parts.append(f"{TASK_NAMES[model]}-trained on {TASK_NAMES[data]} {_balanced_cell(row, data)}")
    return ", ".join(parts)


def _scale_from(d: dict | None) -> Scale | None:
    """The suite's scale: the named one with the model fields suite.json records (what the runs' models are)."""
    if not d:
        return None
    from dataclasses import replace

    from albertlm.experiments.scales import get_scale

    try:
        scale = get_scale(d["name"])
        fields = ("hidden_size", "num_layers", "num_heads", "embedding_sizes", "vocab_size", "max_seq_length",
                  "dropout")
        return replace(scale, **{k: tuple(d[k]) if isinstance(d[k], list) else d[k] for k in fields if k in d})
    except Exception:
        return None


# below this share of ASCII Latin letters among the corpus's letters, the corpus is not English (GLUE's language)
ENGLISH_LATIN_SHARE = 0.5


_NOT_ENGLISH_CLAIM = ("judged on English GLUE scores of models pretrained on a corpus that is likely not English: "
                      "see the note above; ")


def not_english(out: Path) -> bool:
    """Whether the suite's corpus is likely not English (prepared.json's share of Latin letters below
    `ENGLISH_LATIN_SHARE`), so that its downstream (GLUE) scores say little of it (`corpus_facts`' note)."""
    path = out / "prepared" / "prepared.json"
    try:
        latin = json.loads(path.read_text(encoding="utf-8")).get("latin_share") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(latin, (int, float)) and latin < ENGLISH_LATIN_SHARE


def corpus_facts(out: Path, downstream: bool = True) -> list[str]:
    """The tokenizer's facts from prepared.json (the one given with --tokenizer, or the one trained on the corpus
    with its character coverage), and a note when the corpus is not written in Latin letters, so that the
    (English) GLUE fine-tuning says little about it (no note in a suite without fine-tuning: `downstream` False)."""
    path = out / "prepared" / "prepared.json"
    if not path.is_file():
        return []
    prepared = json.loads(path.read_text())
    lines = []
    tok = prepared.get("tokenizer") or {}
    settings = prepared.get("settings") or {}
    if tok.get("given"):
        kind = {"sentencepiece": "SentencePiece", "wordpiece": "WordPiece"}.get(tok.get("kind"), tok.get("kind"))
        lines.append(f"Tokenizer: given with `--tokenizer {tok['given']}` ({kind}, V={tok.get('vocab_size')}), "
                     f"not trained on the corpus.")
    elif tok:
        coverage = tok.get("character_coverage")
        lowered = coverage != tok.get("default_coverage")
        lines.append(f"Tokenizer: SentencePiece unigram, V={settings.get('vocab_size')}, trained on the corpus "
                     f"with character coverage {coverage}"
                     + (f" (lowered from the default {tok.get('default_coverage')}: the corpus has more distinct "
                        f"characters than V allows; the rarest become <unk>)." if lowered else ".")
                     + (" Lowercased; accents and marks kept (the corpus is mostly not Latin letters: ALBERT's "
                        "accent stripping would turn ガ into カ)." if tok.get("keep_accents") else ""))
    latin, fit = prepared.get("latin_share"), prepared.get("glue_tokens") or {}
    if latin is not None and latin < ENGLISH_LATIN_SHARE and downstream:
        cut = (f" Its tokenizer spells {fit['spelled_word_share'] * 100:.0f}% of GLUE's words of 3+ letters "
               f"letter by letter and makes {fit['unk_share'] * 100:.0f}% of GLUE's tokens <unk>."
               if fit.get("words") else "")
        lines.append(f"**Note:** {latin * 100:.0f}% of the corpus's letters are Latin: it is likely not English, "
                     f"and the downstream tasks (GLUE) are.{cut} The downstream (fine-tuning) scores below say "
                     f"little about this corpus; compare the held-out MLM / SOP / NSP accuracies instead.")
    return lines + [""] if lines else []


__all__ = ["write_report", "aggregate", "claims", "GRIDS", "PAPER_ORDER", "base_model"]
