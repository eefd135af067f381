"""`albertlm ablate` report, audit 29: a researcher's own grid file (self-named variants, model fields beyond E
and sharing). A suite run before commit 8392650 recorded, for a grid file's second self-named variant of a shape
("nsp" beside "sop"), a baseline of its own name ("scratch-nsp") that the plan never ran: its scratch cell and Δ
read –, and claim 5 never measured it. The models table showed two variants that differ only in `model` fields
(num_groups, dropout) alike. Nothing here pretrains: the report is written from result.json files made here, as
in the earlier report audits (`_write` records a run's shape as the runner did before 8392650)."""
from __future__ import annotations

import json

import pytest

from test_ablate_numbers_audit20 import _report
from test_report_audit18 import _claim, _planned, _row, _write


def _section(report: str, title: str) -> list[str]:
    """The markdown table lines of the report section whose title starts with `title`."""
    text = report.split(f"## {title}")[1].split("\n## ")[0]
    return [line for line in text.splitlines() if line.startswith("|")]


# ------------------------------------------------------------------------------ a baseline found by its model
def test_an_old_suites_self_named_variants_find_the_baseline_of_their_model(tmp_path):
    """Variants "sop" and "nsp" of one shape, and "two" / "two-nsp" of another (num_groups 2): the plan runs
    scratch-sop and scratch-two; the NSP runs recorded scratch-nsp and scratch-two-nsp. Each now finds the
    baseline of its own model (not merely any baseline), and claim 5 measures all four."""
    grid = [{"name": "sop"}, {"name": "nsp", "task": "nsp"},
            {"name": "two", "model": {"num_groups": 2}}, {"name": "two-nsp", "task": "nsp", "model": {"num_groups": 2}}]
    suite, jobs = _planned(tmp_path, grid, seeds=(1, 2))
    assert sorted(n for n, j in jobs.items() if j.kind == "scratch") == [
        "scratch-sop-s1", "scratch-sop-s2", "scratch-two-s1", "scratch-two-s2"]
    gain = {"sop": 0.8, "nsp": 0.7, "two": 0.9, "two-nsp": 0.85}
    for seed in (1, 2):
        for name, score in gain.items():
            _write(suite, jobs[f"{name}-s{seed}"], {"sst2": score + seed / 100})
        _write(suite, jobs[f"scratch-sop-s{seed}"], {"sst2": 0.5 + seed / 100})
        _write(suite, jobs[f"scratch-two-s{seed}"], {"sst2": 0.6 + seed / 100})
    report, results = _report(suite)
    variants = results["aggregate"]["variants"]
    assert {name: variants[name]["shape"] for name in gain} == {
        "sop": "scratch-sop", "nsp": "scratch-sop", "two": "scratch-two", "two-nsp": "scratch-two"}
    assert _row(report, "No pretraining", "nsp")[-2:] == ["51.5 ± 0.7", "+20.0"]
    assert _row(report, "No pretraining", "two-nsp")[-2:] == ["61.5 ± 0.7", "+25.0"]
    assert results["claims"]["5"]["per_variant"] == dict.fromkeys(gain, True)
    assert "**holds** (" in _claim(report, "5"), _claim(report, "5")
    # the recorded shape stays in each run's own result (results.json's runs), as the file says
    assert results["runs"]["nsp-s1"]["shape"] == "scratch-nsp"


def test_a_variants_baseline_not_finished_yet_is_not_another_models(tmp_path):
    """scratch-two not finished: "two-nsp" (num_groups 2) is not compared with scratch-sop, the only baseline
    there is (its model is another)."""
    suite, jobs = _planned(tmp_path, [{"name": "sop"}, {"name": "two-nsp", "task": "nsp",
                                                          "model": {"num_groups": 2}}], seeds=(1, 2))
    for seed in (1, 2):
        _write(suite, jobs[f"sop-s{seed}"], {"sst2": 0.8 + seed / 100})
        _write(suite, jobs[f"two-nsp-s{seed}"], {"sst2": 0.8 + seed / 100})
        _write(suite, jobs[f"scratch-sop-s{seed}"], {"sst2": 0.5 + seed / 100})
    report, results = _report(suite)
    assert _row(report, "No pretraining", "two-nsp")[-2:] == ["–", "–"]
    assert results["claims"]["5"]["per_variant"] == {"sop": True, "two-nsp": None}


# ------------------------------------------------------------------------------- what else a variant changes
def test_the_models_table_names_the_model_fields_a_variant_changes(tmp_path):
    """"one" and "two" (num_groups 2) read alike: sop, E 12, all, seeds 1; now a column says num_groups=2, and
    the dropout variant's rates; a planned variant not finished ("groups3") says its fields too."""
    suite, jobs = _planned(tmp_path, [{"name": "one"}, {"name": "two", "model": {"num_groups": 2}},
                                      {"name": "drop", "dropout": True},
                                      {"name": "groups3", "model": {"num_groups": 3, "num_layers": 3}}])
    for name in ("one", "two", "drop"):
        _write(suite, jobs[f"{name}-s1"], {"sst2": 0.8})
    report, _ = _report(suite)
    head = _section(report, "Every pretrained model")[0]
    assert head.startswith("| pretrained model | task | E | sharing | other model fields | seeds | Params |"), head
    assert _row(report, "Every pretrained model", "one")[4] == "–"
    assert _row(report, "Every pretrained model", "two")[4] == "num_groups=2"
    assert _row(report, "Every pretrained model", "drop")[4] == "hidden_dropout=0.1, attention_dropout=0.1"
    row = _row(report, "Every pretrained model", "groups3")
    assert row[4:6] == ["num_layers=3, num_groups=3", "none finished"], row


@pytest.mark.parametrize("grid", ["table5", "table4", "table3", "figure1"])
def test_the_paper_grids_models_table_keeps_its_columns(tmp_path, grid):
    """The paper's grids other than dropout vary E, sharing and the sentence task only: no column of other
    fields (the layout the paper's runs had). (A pure check: passes before the change too.)"""
    suite, jobs = _planned(tmp_path, grid)
    for name, job in jobs.items():
        if job.kind == "pretrain":
            _write(suite, job, {"sst2": 0.8})
    report, _ = _report(suite)
    assert _section(report, "Every pretrained model")[0] == (
        "| pretrained model | task | E | sharing | seeds | Params | MLM | NSP | SOP | MLM loss |")


def test_without_the_suites_scale_the_column_names_the_fields_that_differ():
    """No suite.json (no scale to say the base model): the fields the models do not share."""
    from albertlm.experiments.report import other_fields

    models = [{"embedding_size": 12, "num_groups": 1, "num_layers": 2}, {"embedding_size": 16, "num_groups": 2,
                                                                        "num_layers": 2}]
    assert other_fields(models, None) == [{"num_groups": 1}, {"num_groups": 2}]
    assert other_fields(models[:1], None) == [{}]


# ------------------------------------------------------------------------------------ a corpus not in English
def test_downstream_claims_of_a_korean_corpus_say_they_are_judged_on_english_glue(tmp_path):
    """A Korean corpus: the report's note says its GLUE scores say little, yet claim 5 read a plain **does not
    hold** (of Korean pretraining, on English fine-tuning). The downstream claims measured (5 here) now say what
    they are judged on; claim 1 (held-out SOP / NSP accuracy) and the unmeasured ones do not."""
    suite, jobs = _planned(tmp_path, [{"name": "sop"}, {"name": "nsp", "task": "nsp"}], seeds=(1, 2))
    for seed in (1, 2):
        for name in ("sop", "nsp"):
            _write(suite, jobs[f"{name}-s{seed}"], {"sst2": 0.5}, sop_acc=0.9 if name == "sop" else 0.5,
                   nsp_acc=0.7 if name == "sop" else 0.9)
        _write(suite, jobs[f"scratch-sop-s{seed}"], {"sst2": 0.5 + seed / 100})
    (suite.out / "prepared").mkdir()
    (suite.out / "prepared" / "prepared.json").write_text(json.dumps({"latin_share": 0.03}))
    report, _ = _report(suite)
    said = "judged on English GLUE scores of models pretrained on a corpus that is likely not English"
    assert "likely not English" in report.split("## Claims")[0]                    # the note, as before
    assert said in _claim(report, "5") and "**does not hold** (" in _claim(report, "5"), _claim(report, "5")
    assert said not in _claim(report, "1") and "**holds** (" in _claim(report, "1"), _claim(report, "1")
    assert said not in _claim(report, "2")                                         # not measured by this grid
    (suite.out / "prepared" / "prepared.json").write_text(json.dumps({"latin_share": 0.97}))
    assert said not in _report(suite)[0]
