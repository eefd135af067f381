"""`albertlm ablate` report, audit 18: a run whose fine-tuning of one task is missing (a --refinetune cut short)
has no Avg instead of an Avg of fewer tasks; a claim that holds on fewer seeds than the suite plans holds so
far; a planned variant without a finished run is listed (as not finished) in the tables of every variant.
Nothing here pretrains: the report is written from result.json files made here."""
from __future__ import annotations

import json
import statistics

from albertlm.experiments.scales import FinetuneTask
from test_ablate_audit13 import _suite

TWO_TASKS = (FinetuneTask("sst2", 200, 1.0), FinetuneTask("stsb", 200, 1.0))


def _planned(tmp_path, grid, **scale):
    """A suite of `grid` at the smoke scale with its suite.json written, and its jobs by name."""
    from albertlm.experiments.runner import _write_json, merged_plan, plan_jobs

    suite = _suite(tmp_path, grid, **scale)
    planned = plan_jobs(suite.runs)
    suite.out.mkdir(parents=True)
    _write_json(suite.out / "suite.json", merged_plan(suite, planned))
    return suite, {job.name: job for job in planned}


def _write(suite, job, finetune: dict[str, float], **intrinsic) -> None:
    """A finished job's result.json with these fine-tuning scores (and held-out accuracies, for a pretraining)."""
    from albertlm.experiments.runner import shape_name

    directory = suite.out / job.directory
    directory.mkdir(parents=True, exist_ok=True)
    result = {"kind": job.kind, "name": job.name, "seed": job.seed, "model": job.run.model, "params": 1000,
              "shape": shape_name(job.run),
              "finetune": {t: {"score": s, "seeds": [job.seed]} for t, s in finetune.items()}}
    if job.kind == "pretrain":
        result.update(task=job.run.task, variant=job.run.variant, grids=list(job.run.grids),
                      intrinsic={"mlm_acc": 0.1, "sop_acc": 0.5, "nsp_acc": 0.5, "mlm_loss": 5.0, **intrinsic},
                      pretrain={"seconds": 1.0, "checkpoint": f"{job.directory}/checkpoints/step_00000020"})
    (directory / "result.json").write_text(json.dumps(result))


def _report(suite) -> tuple[str, dict]:
    from albertlm.experiments.report import write_report

    write_report(suite.out, warn=lambda message: None)
    return ((suite.out / "report.md").read_text(encoding="utf-8"),
            json.loads((suite.out / "results.json").read_text(encoding="utf-8")))


def _row(report: str, section: str, first: str) -> list[str]:
    """The cells of the row starting with `first` in the report section whose title starts with `section`."""
    text = report.split(f"## {section}")[1].split("\n## ")[0]
    line = next(x for x in text.splitlines() if x.startswith(f"| {first} |"))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _claim(report: str, key: str) -> str:
    return next(x for x in report.splitlines() if x.startswith(f"{key}. "))


# ----------------------------------------------------------------------- an Avg over fewer tasks than the others
def test_a_run_missing_a_tasks_finetuning_has_no_avg(tmp_path):
    """After a --refinetune of STS-B cut short, seed 2's result held SST-2 only: its "Avg" was its SST-2 score
    (80.0) averaged with seed 1's mean of SST-2 and STS-B (45.0): 62.5 ± 24.7, and Δ Avg +22.5 over scratch."""
    suite, jobs = _planned(tmp_path, [{"name": "a"}], seeds=(1, 2), finetune_tasks=TWO_TASKS)
    _write(suite, jobs["a-s1"], {"sst2": 0.8, "stsb": 0.1})
    _write(suite, jobs["a-s2"], {"sst2": 0.8})                        # its STS-B being fine-tuned again
    for seed in (1, 2):
        _write(suite, jobs[f"scratch-a-s{seed}"], {"sst2": 0.7, "stsb": 0.1})
    report, results = _report(suite)
    row = _row(report, "No pretraining", "a")               # name, seeds, SST-2, STS-B, Avg, scratch, Δ
    assert row[2:5] == ["80.0 ± 0.0", "10.0 (1)", "45.0 (1)"], row
    assert row[5:] == ["40.0 ± 0.0", "+5.0"], row
    avg = results["aggregate"]["variants"]["a"]["ft_avg"]
    assert avg["n"] == 1 and avg["values"] == [statistics.fmean([0.8, 0.1])]


# ------------------------------------------------------------------------------ a claim judged on too few seeds
def test_claim_5_on_fewer_seeds_than_planned_holds_only_so_far(tmp_path):
    """Seeds 1-3 planned, seed 3 of the model not finished: claim 5 read **holds** on seeds 1 and 2."""
    suite, jobs = _planned(tmp_path, [{"name": "a"}], seeds=(1, 2, 3))
    for seed in (1, 2):
        _write(suite, jobs[f"a-s{seed}"], {"sst2": 0.8 + seed / 100})
    for seed in (1, 2, 3):
        _write(suite, jobs[f"scratch-a-s{seed}"], {"sst2": 0.5 + seed / 100})
    report, results = _report(suite)
    assert "**holds so far** (measured with fewer seeds than planned (a 2 of 3, its baseline 3 of 3), each " \
           "variant above its baseline;" in _claim(report, "5"), _claim(report, "5")
    assert results["claims"]["5"]["holds"] is None
    _write(suite, jobs["a-s3"], {"sst2": 0.9})
    assert "**holds** (" in _claim(_report(suite)[0], "5")             # every seed planned: holds


def test_claim_2_on_fewer_seeds_than_planned_holds_only_so_far(tmp_path):
    """table5 with seeds 1-3, the NSP model's seed 3 failed: claim 2 read **holds** on its seeds 1 and 2."""
    suite, jobs = _planned(tmp_path, "table5", seeds=(1, 2, 3))
    scores = {"sop": 0.9, "nsp": 0.6, "none": 0.5}
    for name, job in jobs.items():
        if job.kind == "pretrain" and name != "E128-all-nsp-s3":
            _write(suite, job, {"sst2": scores[job.run.task] + job.seed / 100})
    report, results = _report(suite)
    line = _claim(report, "2")
    assert "**holds so far** (measured with fewer seeds than planned (E128-all-nsp 2 of 3);" in line, line
    assert results["claims"]["2"]["holds"] is None
    _write(suite, jobs["E128-all-nsp-s3"], {"sst2": 0.61})
    report, results = _report(suite)
    assert "**holds** (" in _claim(report, "2") and results["claims"]["2"]["holds"] is True


# ------------------------------------------------------------------------------ a variant without a finished run
def test_a_planned_variant_without_a_finished_run_is_listed_as_not_finished(tmp_path):
    """Every seed of a user grid's variant `b` failed: `b` was in no table of the report at all."""
    suite, jobs = _planned(tmp_path, [{"name": "a"}, {"name": "b", "sharing": "none", "task": "nsp"}])
    _write(suite, jobs["a-s1"], {"sst2": 0.8})
    report, _ = _report(suite)
    row = _row(report, "Every pretrained model", "b")
    assert row[:5] == ["b", "nsp", str(jobs["b-s1"].run.model["embedding_size"]), "none", "none finished"], row
    assert set(row[5:]) == {"–"}
    row = _row(report, "No pretraining", "b")
    assert row[1] == "none finished" and set(row[2:]) == {"–"}, row
    assert _row(report, "No pretraining", "a")[1] == "1"


# ---------------------------------------------------------------------------------------------------- plots
def test_the_downstream_plots_legend_names_both_series_when_the_first_model_has_no_avg(tmp_path, monkeypatch):
    """The legend named "pretrained" only from the first model's point: a first model without an Avg (not
    fine-tuned yet, a task missing) left the pretrained series unnamed in downstream.png."""
    from albertlm.experiments import report

    legends = {}

    def save(fig, path, plt):
        legend = fig.axes[0].get_legend()
        legends[path.name] = sorted(t.get_text() for t in legend.get_texts()) if legend else []
        plt.close(fig)
        return path

    monkeypatch.setattr(report, "_save", save)
    avg = report.summary([0.6, 0.62])
    agg = {"variants": {"a": {"shape": "x"}, "b": {"shape": "y", "ft_avg": avg}},
           "shapes": {"y": {"ft_avg": report.summary([0.5, 0.52])}}}
    report.plots(agg, {"pretrain": {}}, tmp_path)
    assert legends["downstream.png"] == ["no pretraining", "pretrained"]
