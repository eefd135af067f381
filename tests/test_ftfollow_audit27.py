"""Fine-tuning follow-ups, audit 27.

GLUE's overall score had a Python function only (`glue.runs_glue_score`): `albertlm evaluate glue --score RUN ...`
prints it (JSON on stdout as every `evaluate`, the leaderboard's line times 100 on stderr, the missing tasks and a run
the time budget stopped said in warnings). A run fine-tuned in bf16 records its scores in bf16, but `predict` /
`evaluate` run in fp32 unless told (a tiny RACE run: accuracy 0.273 for the recorded 0.364): the run now records its
precision (best/task.json, each step's run_config.json) and predict / evaluate say in a note when they run in
another one, and how to reproduce the recorded scores.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import glue
from conftest import assert_one_error, save_tiny_pretrained

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags
from test_docs_audit26 import _flat
from test_glue_audit17 import W, _tsv
from test_glue_audit27 import BERT_LARGE, _metrics_json


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory) -> Path:
    """A real 2-step RTE run fine-tuned with --precision bf16, evaluated at each step (its data in RUN/../rte)."""
    import torch

    root = tmp_path_factory.mktemp("audit27_ftfollow")
    pretrained = save_tiny_pretrained(root)
    rows = [["index", "sentence1", "sentence2", "label"],
            *[[i, W[i % 6], W[(i + 1) % 6], ("entailment", "not_entailment")[i % 2]] for i in range(8)]]
    _tsv(root / "rte" / "train.tsv", rows)
    _tsv(root / "rte" / "dev.tsv", rows)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["finetune", "glue", "--task", "RTE", "--data-dir", str(root / "rte"), "--model", str(pretrained),
                     "--out", str(root / "run"), "--max-steps", "2", "--eval-every", "1", "--precision", "bf16",
                     *QUICK]) == 0
    finally:
        torch.set_num_threads(before)
    return root / "run"


def _err_lines(capsys) -> tuple[dict, list[str]]:
    out = capsys.readouterr()
    return json.loads(out.out), [line for line in out.err.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------- evaluate glue --score

def test_evaluate_glue_score_prints_glues_score_of_runs(bf16_run, tmp_path, capsys):
    """`evaluate glue --score` over a real RTE run and written metrics.json: stdout is `runs_glue_score`'s result as
    JSON, stderr the leaderboard's line (x100) and a warning naming the tasks missing; all nine: GLUE's 80.5 and no
    warning; a run the time budget stopped is scored with a warning saying so."""
    stsb = _metrics_json(tmp_path / "stsb", "stsb", {"step": 3, "dev": {"corr": 0.55, "pearson": 0.6, "spearman": 0.5}})
    runs = [str(bf16_run), str(stsb / "metrics.json")]
    capsys.readouterr()
    assert main(["evaluate", "glue", "--score", runs[0], "--score", runs[1]]) == 0   # both taken, as `--score A B`
    printed, err = _err_lines(capsys)
    assert printed == json.loads(json.dumps(glue.runs_glue_score(runs)))
    rte = printed["tasks"]["rte"]
    assert printed["runs"] == {"stsb": runs[1], "rte": runs[0]}
    assert err[0] == f"GLUE dev score {100 * (0.55 + rte) / 2:.1f} (STS-B 55.0, RTE {100 * rte:.1f})", err
    assert len(err) == 2 and err[1] == ("albertlm evaluate: warning: not GLUE's score: no run of CoLA, SST-2, MRPC, "
                                        "QQP, MNLI, QNLI, WNLI; this is the mean over the 2 task(s) given (GLUE's "
                                        "is over all nine)"), err

    # the nine tasks of the published BERT-large row: GLUE's score, nothing missing, no warning
    nine = []
    for task, scores in BERT_LARGE.items():
        best = ({"step": 1, "dev_matched": scores[0], "dev_mismatched": scores[1]} if task == "mnli"
                else {"step": 1, "dev": scores})
        nine.append(str(_metrics_json(tmp_path / "nine" / task, task, best)))
    assert main(["evaluate", "glue", "--score", *nine]) == 0
    printed, err = _err_lines(capsys)
    assert printed["missing"] == [] and round(100 * printed["score"], 1) == 80.5
    assert len(err) == 1 and err[0].startswith("GLUE dev score 80.5 (CoLA 60.5, SST-2 94.9, MRPC 87."), err

    # a run stopped by --train.max_minutes: its best so far, said
    record = json.loads((stsb / "metrics.json").read_text())
    (stsb / "metrics.json").write_text(json.dumps({**record, "status": "budget", "step": 3, "total_steps": 10}))
    assert main(["evaluate", "glue", "--score", str(stsb)]) == 0
    printed, err = _err_lines(capsys)
    assert printed["tasks"] == {"stsb": pytest.approx(0.55)}
    assert any(f"{stsb}: the run stopped at step 3 of 10 (status 'budget'): its best dev metrics so far" in line
               for line in err), err


@pytest.mark.parametrize("extra, named", [
    (["--model", "m"], "--model is not used with it"),
    (["--predictions", "p.tsv", "--out", "o"], "--predictions, --out are not used with it"),
    (["--task", "rte", "--max-seq-length", "16", "--precision", "bf16"], "--task, --max-seq-length, --precision are"),
])
def test_evaluate_glue_score_with_what_it_does_not_use_is_one_line(tmp_path, capsys, extra, named):
    run = _metrics_json(tmp_path / "cola", "cola", {"step": 1, "dev": {"mcc": 0.3, "accuracy": 0.7}})
    assert_one_error(capsys, main(["evaluate", "glue", "--score", str(run), *extra]),
                     "--score reads each run's metrics.json and runs no model", named)


def test_evaluate_glue_score_refusals_are_one_line(tmp_path, capsys):
    squad = _metrics_json(tmp_path / "squad", "", {"step": 1, "dev": {"f1": 80.0}}, family="squad")
    assert_one_error(capsys, main(["evaluate", "glue", "--score", str(squad)]),
                     "not the metrics.json of a `finetune glue` run (a squad run)")
    assert_one_error(capsys, main(["evaluate", "glue", "--score", str(tmp_path / "nowhere")]), "no metrics.json")
    diverged = _metrics_json(tmp_path / "stsb", "stsb", {"step": 3, "dev": {"pearson": None, "spearman": None}})
    assert_one_error(capsys, main(["evaluate", "glue", "--score", str(diverged)]), "a diverged run")
    assert_one_error(capsys, main(["evaluate", "glue"]), "give either --model CHECKPOINT or --predictions FILE",
                     "--score RUN")


# ------------------------------------------------------------------------------------ the recorded precision

def _note(lines: list[str]) -> list[str]:
    return [line for line in lines if ": note: " in line]


def test_a_bf16_run_records_its_precision_and_predict_in_fp32_says_so(bf16_run, capsys):
    """best/task.json and the step's run_config.json record bf16; `evaluate --model RUN` in fp32 says in one note
    that the recorded scores are bf16's and how to reproduce them; with --precision bf16 no note, and the recorded
    dev score back."""
    data = ["--data-dir", str(bf16_run.parent / "rte")]
    assert json.loads((bf16_run / "best" / "task.json").read_text())["precision"] == "bf16"
    step = bf16_run / "checkpoints" / "step_00000002"
    assert json.loads((step / "run_config.json").read_text())["precision"] == "bf16"
    recorded = json.loads((bf16_run / "metrics.json").read_text())["best"]["dev"]

    capsys.readouterr()
    assert main(["evaluate", "glue", *data, "--model", str(bf16_run)]) == 0
    _, err = _err_lines(capsys)
    best = bf16_run / "best"
    assert _note(err) == [f"albertlm evaluate: note: {best} was fine-tuned in bf16; its recorded scores come from bf16 "
                          "(give --precision bf16 to reproduce them); evaluating in fp32"], err
    # the line docs/finetuning.md quotes is this one
    assert _note(err)[0].replace(str(best), "runs/race/best") in _flat("docs/finetuning.md")

    assert main(["evaluate", "glue", *data, "--model", str(bf16_run), "--precision", "bf16"]) == 0
    printed, err = _err_lines(capsys)
    assert _note(err) == [] and printed["dev"] == recorded

    # a step checkpoint: its run_config.json's record
    assert main(["predict", "glue", *data, "--model", str(step), "--out", str(bf16_run.parent / "pred")]) == 0
    _, err = _err_lines(capsys)
    assert _note(err) == [f"albertlm predict: note: {step} was fine-tuned in bf16; its recorded scores come from bf16 "
                          "(give --precision bf16 to reproduce them); predicting in fp32"], err


def test_a_best_saved_before_the_record_takes_the_runs_metrics_json(bf16_run, tmp_path, capsys):
    """A run's best/ saved before task.json recorded the precision: the run's metrics.json config says it (a run
    keeps its precision on --resume). A best/ copied away from its run, without a record: no note (none is known)."""
    old = tmp_path / "old"
    shutil.copytree(bf16_run, old, ignore=shutil.ignore_patterns("checkpoints"))
    info = json.loads((old / "best" / "task.json").read_text())
    del info["precision"]
    (old / "best" / "task.json").write_text(json.dumps(info))
    data = ["--data-dir", str(bf16_run.parent / "rte")]
    capsys.readouterr()
    assert main(["evaluate", "glue", *data, "--model", str(old)]) == 0
    _, err = _err_lines(capsys)
    assert len(_note(err)) == 1 and re.search(r"old/best was fine-tuned in bf16; .* evaluating in fp32$", _note(err)[0])
    shutil.copytree(old / "best", tmp_path / "alone")
    assert main(["evaluate", "glue", *data, "--model", str(tmp_path / "alone")]) == 0
    _, err = _err_lines(capsys)
    assert _note(err) == [], err
