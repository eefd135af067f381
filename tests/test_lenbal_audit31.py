"""The length-balanced accuracy of each sentence head (audit 31). The held-out SOP / NSP label is partly told by
the two segments' lengths (the rule "label 1 when A is longer than B": 56.5% on the ablation suite's SOP data),
and the suite's SOP models give the rule's answer 73-76% of the time: their raw held-out accuracy mixes what they
read with what the lengths hint. `evaluation.intrinsic` now records, per held-out set, how often the head answers
as the rule, its accuracy where the rule is right and where it is wrong, and their mean (the accuracy on a set
where the rule is at chance: 50% for a pure length-follower); the report prints it in Table 5 and beside claim 1,
and computes it from the final checkpoint for a suite evaluated before (kept in the run's length_rule.json), or
says it is not available. Each number against a count written here from the model's own answers."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from test_ablate_numbers_audit20 import _report
from test_eval_audit30 import data  # noqa: F401  (the fixture: tiny model, Alice SOP and NSP data)
from test_report_audit18 import _claim, _planned, _row, _write
from test_sopbase_audit31 import _pairs


@torch.no_grad()
def _direct(model_dir: str, data_dir: str) -> dict:
    """The numbers counted here: the full model on one example at a time (no packing, no [CLS]-only last layer),
    the rule and the labels from the token ids (`_pairs`)."""
    from albertlm.data.loader import PretrainingDataset
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(model_dir).eval()
    dataset = PretrainingDataset(data_dir)
    answers = []
    for i in range(len(dataset)):
        item = {k: torch.as_tensor(v) for k, v in dataset[i].items()}
        out = model(item["input_ids"][None], item["attention_mask"][None], item["token_type_ids"][None])
        answers.append(int(out["sop_logits"][0].argmax()))
    pairs = _pairs(data_dir)
    rule = [int(a > b) for a, b, _ in pairs]
    labels = [label for _, _, label in pairs]
    right = [i for i in range(len(pairs)) if rule[i] == labels[i]]
    wrong = [i for i in range(len(pairs)) if rule[i] != labels[i]]
    on_right = sum(answers[i] == labels[i] for i in right) / len(right)
    on_wrong = sum(answers[i] == labels[i] for i in wrong) / len(wrong)
    return {"instances": len(pairs), "rule_acc": len(right) / len(pairs),
            "acc": sum(a == y for a, y in zip(answers, labels)) / len(pairs),
            "agree": sum(a == r for a, r in zip(answers, rule)) / len(pairs),
            "acc_rule_right": on_right, "acc_rule_wrong": on_wrong, "balanced_acc": (on_right + on_wrong) / 2,
            "rule_right": len(right), "rule_wrong": len(wrong)}


# ------------------------------------------------------------------------------------------------ the numbers
def test_length_rule_numbers_of_a_table_and_of_a_pure_length_follower():
    """The definition, on counts: the mean of the accuracies where the rule is right and wrong (each half 1/2,
    not weighted by its size); a head answering as the rule scores 50% whatever the rule's own accuracy, one
    that is always right 100%; an accuracy over no pair is None, and so is the mean."""
    import numpy as np

    from albertlm.experiments.evaluation import length_rule_numbers, length_rule_table

    got = length_rule_numbers(np.array([[3, 1], [2, 6]]))   # [rule wrong / right][head wrong / right]
    assert got == {"instances": 12, "rule_acc": 8 / 12, "acc": 7 / 12, "agree": 9 / 12, "acc_rule_right": 6 / 8,
                   "acc_rule_wrong": 1 / 4, "balanced_acc": (6 / 8 + 1 / 4) / 2, "rule_right": 8, "rule_wrong": 4}
    a, b = np.array([5, 2, 7, 3, 9, 4]), np.array([3, 6, 1, 3, 2, 8])
    labels = np.array([1, 0, 0, 1, 1, 1])
    follower = length_rule_numbers(length_rule_table((a > b).astype(int), a, b, labels))
    assert follower["agree"] == 1 and follower["balanced_acc"] == 0.5 and follower["rule_acc"] == 3 / 6
    oracle = length_rule_numbers(length_rule_table(labels, a, b, labels))
    assert oracle["balanced_acc"] == 1 and oracle["agree"] == 0.5
    one_sided = length_rule_numbers(np.array([[0, 0], [1, 3]]))
    assert one_sided["acc_rule_wrong"] is None and one_sided["balanced_acc"] is None and one_sided["acc"] == 0.75


def test_intrinsic_records_the_heads_agreement_with_the_length_rule_as_a_direct_count(data, one_thread):  # noqa: F811
    """`intrinsic` (each pretraining job's held-out evaluation) has `length_rule`: per held-out set, the numbers
    counted here from the model's answers one example at a time, for any batch size (7: the last batch partial);
    its own accuracy is the evaluation's."""
    from albertlm.experiments.evaluation import intrinsic, length_rule_agreement

    heldout = {"sop": data["sop"], "nsp": data["nsp"]}
    out = intrinsic(data["model"], heldout, device="cpu")
    for task in ("sop", "nsp"):
        want = _direct(data["model"], data[task])
        assert 0 < want["acc_rule_right"] < 1 and 0 < want["acc_rule_wrong"] < 1, want   # a head worth counting
        assert want["balanced_acc"] != pytest.approx(want["acc"], abs=1e-3)
        got = out["length_rule"][task]
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == pytest.approx(value, abs=1e-12), key
        assert got["acc"] == pytest.approx(out[f"{task}_acc"], abs=1e-12)
    assert length_rule_agreement(data["model"], heldout, batch_size=7, device="cpu") == out["length_rule"]
    json.dumps(out, allow_nan=False)                       # result.json: plain numbers and dicts


def test_intrinsic_has_no_length_numbers_where_the_head_gave_nan(data, one_thread):  # noqa: F811
    """NaN outputs: the accuracy is NaN (test_eval_audit30), and the rule's numbers None, not an argmax of NaNs."""
    import math

    from albertlm.experiments.evaluation import intrinsic
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(data["model"])
    with torch.no_grad():
        model.albert.embeddings.position.weight.fill_(math.nan)
    model.save_pretrained(data["root"] / "nan_lenbal")
    with pytest.warns(UserWarning, match="NaN outputs"):
        out = intrinsic(data["root"] / "nan_lenbal", {"sop": data["sop"]}, device="cpu")
    assert math.isnan(out["sop_acc"]) and out["length_rule"] == {"sop": None}


# ------------------------------------------------------------------------------------------------- the report
def _numbers(balanced: float, agree: float = 0.75) -> dict:
    return {"instances": 100, "rule_acc": 0.56, "acc": 0.6, "agree": agree, "acc_rule_right": balanced + 0.25,
            "acc_rule_wrong": balanced - 0.25, "balanced_acc": balanced, "rule_right": 56, "rule_wrong": 44}


def test_report_prints_the_length_balanced_accuracy_in_table_5_and_beside_claim_1(tmp_path):
    """Results recorded by the jobs: Table 5 has the seed mean ± sd beside each raw accuracy, its paragraph the
    numbers behind it, claim 1 both of its accuracies length-balanced, and the claim's verdict is unchanged."""
    suite, jobs = _planned(tmp_path, "table5", seeds=(1, 2))
    balanced = {("sop", 1): (0.58, 0.53), ("sop", 2): (0.56, 0.52), ("nsp", 1): (0.51, 0.9), ("nsp", 2): (0.49, 0.88)}
    for job in jobs.values():
        if job.kind == "pretrain":
            mine = job.run.task == "sop"
            rule = None
            if job.run.task != "none":
                on_sop, on_nsp = balanced[job.run.task, job.seed]
                rule = {"sop": _numbers(on_sop), "nsp": _numbers(on_nsp, agree=0.7)}
            _write(suite, job, {"sst2": 0.8}, sop_acc=0.60 if mine else 0.52, nsp_acc=0.56 if mine else 0.7,
                   **({"length_rule": rule} if rule else {}))
    report, results = _report(suite)
    sop_row = _row(report, "Table 5", "SOP")        # SP task, MLM, NSP, NSP balanced, SOP, SOP balanced, ...
    assert sop_row[2:6] == ["56.0 ± 0.0", "52.5 ± 0.7", "60.0 ± 0.0", "57.0 ± 1.4"], sop_row
    assert _row(report, "Table 5", "NSP")[2:6] == ["70.0 ± 0.0", "89.0 ± 1.4", "52.0 ± 0.0", "50.0 ± 1.4"]
    assert _row(report, "Table 5", "None")[3] == "not available" == _row(report, "Table 5", "None")[5]
    assert ("length-balanced accuracy (a length-follower's 50%), not in the rule: NSP-trained on SOP 50.0 ± 1.4, "
            "SOP-trained on NSP 52.5 ± 0.7; segment-length baseline") in _claim(report, "1")
    assert "**holds** (" in _claim(report, "1")
    table5 = report.split("## Table 5")[1].split("\n## ")[0]
    assert ("SOP model on NSP: 70.0% of its answers are the rule's, accuracy 77.5% where the rule is right and "
            "27.5% where it is wrong, length-balanced 52.5% (raw 56.0%)") in table5
    assert "a head that only follows the rule scores 50% on it" in table5
    agg = results["aggregate"]["variants"]["E128-all-sop"]
    assert agg["nsp_balanced_acc"]["values"] == [0.53, 0.52] and agg["sop_rule_agree"]["mean"] == 0.75


def _old_suite(tmp_path, data, checkpoints=(1, 2)):  # noqa: F811
    """A table5 suite whose two SOP runs finished before `intrinsic` recorded the rule's numbers, with the held-out
    data prepared and the final checkpoints of the seeds in `checkpoints` (the fixture's model)."""
    suite, jobs = _planned(tmp_path, "table5", seeds=(1, 2))
    for seed in (1, 2):
        job = jobs[f"E128-all-sop-s{seed}"]
        _write(suite, job, {"sst2": 0.8}, sop_acc=0.6, nsp_acc=0.56)
        if seed in checkpoints:
            shutil.copytree(data["model"], suite.out / job.directory / "checkpoints" / "step_00000020")
    for task in ("sop", "nsp"):
        shutil.copytree(data[task], suite.out / "prepared" / "data" / f"heldout_{task}")
    return suite, jobs


def test_report_only_computes_an_old_suites_numbers_from_its_checkpoints_once(tmp_path, data, capsys,  # noqa: F811
                                                                              one_thread):
    """`--report-only` on a suite whose results lack them: computed from each run's final checkpoint and the
    prepared held-out data, kept in the run's length_rule.json (result.json untouched), read from there next time
    (the checkpoint pruned meanwhile)."""
    from albertlm.cli.main import main

    suite, jobs = _old_suite(tmp_path, data)
    before = (suite.out / jobs["E128-all-sop-s1"].directory / "result.json").read_text()
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    assert capsys.readouterr().err == ""
    want = {task: _direct(data["model"], data[task]) for task in ("sop", "nsp")}
    for seed in (1, 2):
        directory = suite.out / jobs[f"E128-all-sop-s{seed}"].directory
        kept = json.loads((directory / "length_rule.json").read_text())
        assert kept["checkpoint"] == f"{jobs[f'E128-all-sop-s{seed}'].directory}/checkpoints/step_00000020"
        for task in ("sop", "nsp"):
            assert kept["length_rule"][task] == pytest.approx(want[task], abs=1e-12)
    assert (suite.out / jobs["E128-all-sop-s1"].directory / "result.json").read_text() == before
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    cells = [f"{want[task]['balanced_acc'] * 100:.1f} ± 0.0" for task in ("nsp", "sop")]
    assert _row(report, "Table 5", "SOP")[3] == cells[0] and _row(report, "Table 5", "SOP")[5] == cells[1]
    assert f"SOP-trained on NSP {cells[0]}; segment-length baseline" in _claim(report, "1")
    results = json.loads((suite.out / "results.json").read_text())
    assert results["runs"]["E128-all-sop-s2"]["intrinsic"]["length_rule"]["nsp"] == pytest.approx(want["nsp"])
    for seed in (1, 2):
        shutil.rmtree(suite.out / jobs[f"E128-all-sop-s{seed}"].directory / "checkpoints")
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    assert (suite.out / "report.md").read_text(encoding="utf-8") == report


def test_a_run_without_its_final_checkpoint_is_not_available(tmp_path, data, capsys, one_thread):  # noqa: F811
    """Seed 2's checkpoint is gone (pruned, still training elsewhere): its numbers are "not available", said with
    why, the other seed's are computed; with no seed left, the cell and claim 1 say "not available"; without
    prepared held-out data, that is the reason given."""
    from albertlm.cli.main import main

    suite, jobs = _old_suite(tmp_path, data, checkpoints=(1,))
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    assert capsys.readouterr().err == ""
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    one = _direct(data["model"], data["sop"])["balanced_acc"]
    assert _row(report, "Table 5", "SOP")[5] == f"{one * 100:.1f} (1)"
    assert ("Not available for `E128-all-sop-s2` (its final checkpoint "
            "runs/E128-all-sop-s2/checkpoints/step_00000020 is missing).") in report
    assert not (suite.out / jobs["E128-all-sop-s2"].directory / "length_rule.json").exists()
    shutil.rmtree(suite.out / jobs["E128-all-sop-s1"].directory)
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    assert _row(report, "Table 5", "SOP")[3] == "not available" == _row(report, "Table 5", "SOP")[5]
    assert "SOP-trained on NSP not available; segment-length baseline" in _claim(report, "1")
    shutil.rmtree(suite.out / "prepared")
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 0
    report = (suite.out / "report.md").read_text(encoding="utf-8")
    assert ("Not available for `E128-all-sop-s2` (no prepared held-out SOP or NSP data in prepared/data)."
            in report)
