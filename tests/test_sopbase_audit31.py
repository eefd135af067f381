"""The segment-length baseline beside every SOP / NSP accuracy (audit 31). The SOP label is partly predicted by the
two segments' lengths alone: a chunk gathers sentences until one crosses its target length, so the chunk's last
sentence, always in B, tends to be its longest, and "A longer than B" hints at a swapped pair (on the ablation
suite's data 56.5% held out; on the demo's 61.3%). The report and the demo printed chance (50%) beside SOP
accuracies as the only reference. `evaluation.length_baseline` measures it (the rule and a table fitted on the
training data), the report prints it (cached in prepared/, computed for an old suite without the cache) and the
demo prints the rule's accuracy beside its SOP accuracy. Tiny data built from the shared Alice text; no training."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import alice_documents, shared_path
from test_report_audit18 import _claim, _planned, _write
from test_ablate_numbers_audit20 import _report


def _build(root: Path, name: str, task: str, lines: int, seed: int) -> Path:
    """root/name: 32-token `task` data from the first `lines` lines of Alice, albert-base-v2's SentencePiece."""
    from albertlm.data.build import BuildConfig, build

    folder = root / f"{name}_text"
    folder.mkdir(parents=True)
    text = alice_documents(folder, lines)
    build(BuildConfig(inputs=[str(text)], tokenizer=str(shared_path("spm", "albert-base-v2_spiece.model")),
                      out=str(root / name), max_seq_length=32, sentence_task=task, dupe_factor=2, seed=seed,
                      progress=False))
    return root / name


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lengths")
    plan = {"train_sop": ("sop", 300), "heldout_sop": ("sop", 120), "train_nsp": ("nsp", 300),
            "heldout_nsp": ("nsp", 120), "train_none": ("none", 60)}
    return {name: _build(root, name, task, lines, seed) for seed, (name, (task, lines)) in enumerate(plan.items())}


def _pairs(data: Path) -> list[tuple[int, int, int]]:
    """(len A, len B, label) of every instance, counted from its token ids: the tokens between [CLS] and the
    first [SEP], and between the first and the second [SEP] (specials are never masked)."""
    from albertlm.data.loader import PretrainingDataset

    dataset = PretrainingDataset(data)
    sep = dataset.meta["tokenizer"]["sep_id"]
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        ids = [int(t) for t, m in zip(item["input_ids"], item["attention_mask"]) if m]
        first, second = (j for j, t in enumerate(ids) if t == sep)
        assert second == len(ids) - 1
        out.append((first - 1, second - first - 1, int(item["sentence_order_label"])))
    return out


# ------------------------------------------------------------------------------------------- the baseline
def test_length_rule_and_fitted_table_equal_a_direct_count(built):
    """The rule "label 1 when A is longer than B" and the fitted table P(label | len A, len B) (with its back-off
    to A's share of the pair, then to the overall rate) recomputed here pair by pair from the token ids."""
    from albertlm.experiments.evaluation import length_baseline

    for task in ("sop", "nsp"):
        train, held = _pairs(built[f"train_{task}"]), _pairs(built[f"heldout_{task}"])
        assert {label for _, _, label in held} == {0, 1}
        got = length_baseline(built[f"train_{task}"], built[f"heldout_{task}"], min_count=3, share_bins=4)
        assert got["task"] == task and got["heldout_instances"] == len(held)
        rule = sum((a > b) == (label == 1) for a, b, label in held) / len(held)
        assert got["rule_acc"] == pytest.approx(rule)
        cells, ones, bins, bin_ones = Counter(), Counter(), Counter(), Counter()
        share = lambda a, b: min(a * 4 // (a + b), 3)  # noqa: E731
        for a, b, label in train:
            cells[a, b] += 1
            ones[a, b] += label
            bins[share(a, b)] += 1
            bin_ones[share(a, b)] += label
        overall = sum(label for _, _, label in train) / len(train)
        right = thin = 0
        for a, b, label in held:
            if cells[a, b] >= 3:
                p = ones[a, b] / cells[a, b]
            else:
                thin += 1
                p = bin_ones[share(a, b)] / bins[share(a, b)] if bins[share(a, b)] >= 3 else overall
            right += (p > 0.5) == (label == 1)
        assert got["fitted_acc"] == pytest.approx(right / len(held))
        assert got["fitted_backed_off"] == pytest.approx(thin / len(held)) and got["train_instances"] == len(train)
        lo, hi = got["rule_ci95"]
        assert lo < rule < hi and hi - lo == pytest.approx(2 * 1.96 * (rule * (1 - rule) / len(held)) ** 0.5)
    # the rule alone without training data; an evenly spaced training sample, the same every time
    alone = length_baseline(None, built["heldout_sop"])
    assert alone["fitted_acc"] is None and alone["train_instances"] == 0
    sampled = length_baseline(built["train_sop"], built["heldout_sop"], max_train=50)
    assert sampled["train_instances"] == 50 and sampled == length_baseline(built["train_sop"], built["heldout_sop"],
                                                                           max_train=50)


def test_length_baseline_refuses_data_without_two_segments_or_another_tasks_training(built):
    from albertlm.errors import UserError
    from albertlm.experiments.evaluation import length_baseline

    with pytest.raises(UserError, match="'none' data: no second segment"):
        length_baseline(None, built["train_none"])
    with pytest.raises(UserError, match="is nsp data and .* sop data"):
        length_baseline(built["train_nsp"], built["heldout_sop"])


# ---------------------------------------------------------------------------------------------- the report
def _suite_with_data(tmp_path, built, tasks=("train_sop", "heldout_sop", "heldout_nsp")):
    """A table5 suite of two seeds with every pretraining finished (SOP model: 60% on SOP, 56% on NSP) and the
    given prepared data sets (no train_nsp by default: the NSP baseline is then the rule alone)."""
    suite, jobs = _planned(tmp_path, "table5", seeds=(1, 2))
    for job in jobs.values():
        if job.kind == "pretrain":
            mine = job.run.task == "sop"
            _write(suite, job, {"sst2": 0.8}, sop_acc=0.60 if mine else 0.52, nsp_acc=0.56 if mine else 0.7)
    for name in tasks:
        shutil.copytree(built[name], suite.out / "prepared" / "data" / name)
    return suite


def test_report_prints_the_length_baseline_beside_the_mlm_baseline_claim_1_and_table_5(tmp_path, built):
    from albertlm.experiments.evaluation import length_baseline

    suite = _suite_with_data(tmp_path, built)
    report, results = _report(suite)
    sop = length_baseline(built["train_sop"], built["heldout_sop"])
    nsp = length_baseline(None, built["heldout_nsp"])
    bar = {"sop": max(sop["rule_acc"], sop["fitted_acc"]), "nsp": nsp["rule_acc"]}
    short = f"SOP {bar['sop'] * 100:.1f}%, NSP {bar['nsp'] * 100:.1f}%"
    head = report.split("## Claims")[0]
    paragraph = next(line for line in head.splitlines() if line.startswith("Sentence-task baseline"))
    assert f"SOP **{bar['sop'] * 100:.1f}%** ({sop['heldout_instances']} held-out pairs: " in paragraph
    assert f"{sop['fitted_acc'] * 100:.1f}% [" in paragraph
    assert f"fitted on {sop['train_instances']} training pairs" in paragraph
    assert (f"NSP **{bar['nsp'] * 100:.1f}%** ({nsp['heldout_instances']} held-out pairs: no training data to fit on, "
            f"{nsp['rule_acc'] * 100:.1f}% [") in paragraph
    assert f"segment-length baseline, not in the rule: {short})" in _claim(report, "1")
    assert "**holds** (" in _claim(report, "1")                       # the rule itself is unchanged
    table5 = report.split("## Table 5")[1].split("\n## ")[0]
    assert f"segment lengths alone (no token read; chance 50%): {short};" in table5
    assert results["sentence_length_baseline"]["sop"] == sop                 # (floats survive JSON exactly)
    cached = json.loads((suite.out / "prepared" / "length_baseline.json").read_text())
    assert cached["nsp"]["rule_acc"] == pytest.approx(nsp["rule_acc"]) and cached["nsp"]["fitted_acc"] is None


def test_report_only_on_an_old_suite_computes_the_missing_cache_or_says_not_available(tmp_path, built, capsys):
    """A suite prepared before the baseline existed has no prepared/length_baseline.json: `--report-only`
    computes it (and again where the cache lacks a fit now possible); with no prepared data it says so."""
    from albertlm.cli.main import main

    suite = _suite_with_data(tmp_path, built, ("train_sop", "heldout_sop", "heldout_nsp", "train_nsp"))
    cache = suite.out / "prepared" / "length_baseline.json"
    assert not cache.exists()
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    saved = json.loads(cache.read_text())
    assert saved["nsp"]["fitted_acc"] is not None and saved["sop"]["train_instances"] > 0
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    assert f"SOP **{max(saved['sop']['rule_acc'], saved['sop']['fitted_acc']) * 100:.1f}%**" in report
    # a cache written when train_nsp was missing is computed again now that it is there
    cache.write_text(json.dumps({"sop": saved["sop"], "nsp": dict(saved["nsp"], fitted_acc=None)}))
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    assert json.loads(cache.read_text())["nsp"]["fitted_acc"] == pytest.approx(saved["nsp"]["fitted_acc"])
    shutil.rmtree(suite.out / "prepared")
    capsys.readouterr()
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    assert capsys.readouterr().err == ""
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    assert ("Sentence-task baseline: the held-out SOP / NSP label predicted from the two segments' lengths alone, "
            "no token read (`evaluation.length_baseline`): not available (no prepared held-out SOP or NSP data in "
            "prepared/data).") in report
    assert "segment-length baseline, not in the rule: not available)" in _claim(report, "1")
    assert json.loads((suite.out / "results.json").read_text())["sentence_length_baseline"] is None


# ------------------------------------------------------------------------------------------------ the demo
def test_demo_prints_the_length_rules_sop_accuracy_and_keeps_it_in_its_summary(monkeypatch, tmp_path, capsys, built):
    """The demo's stages are stand-ins (test_readme_audit19's) but its data/ holds real SOP data: the summary
    line says what segment lengths alone give, not only chance."""
    from albertlm.demo import MARK
    from albertlm.experiments.evaluation import length_baseline
    from test_readme_audit19 import EVAL_AT_7, _run_demo

    out = tmp_path / "demo"
    (out / "data").mkdir(parents=True)
    (out / MARK).write_text("an earlier demo's\n")
    shutil.copytree(built["train_sop"], out / "data" / "train")
    shutil.copytree(built["heldout_sop"], out / "data" / "heldout")
    summary, printed, _ = _run_demo(monkeypatch, tmp_path, capsys, 0.5, [EVAL_AT_7])
    want = length_baseline(built["train_sop"], built["heldout_sop"])
    assert summary["sop_length_baseline_accuracy"] == round(want["rule_acc"], 4)
    assert summary["sop_length_fitted_accuracy"] == round(want["fitted_acc"], 4)
    line = next(line for line in printed.splitlines() if "held-out SOP accuracy" in line)
    assert line.endswith(f"80.0%   (50% by chance, {round(want['rule_acc'], 4):.1%} from segment lengths alone)"), line
