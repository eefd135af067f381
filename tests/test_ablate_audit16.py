"""`albertlm ablate`, second audit: a result.json cut short or edited by hand (the report leaves it out and names
it, a run refuses it in one line), a suite moved or copied elsewhere (its fine-tuning samples are found in it,
a copy without its checkpoints is refused before anything is written when it must fine-tune again), two names
for one configuration in a grid file, `--list-jobs` against what --out holds, and claim 5 with one pretraining
seed. Nothing here pretrains: the suite functions are driven with written files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.errors import UserError
from albertlm.experiments.scales import get_scale
from conftest import shared_path


def _corpus(tmp: Path) -> Path:
    corpus = tmp / "corpus"
    corpus.mkdir(exist_ok=True)
    text = "One sentence here.\nAnother sentence there.\n\nA second document.\n"
    (corpus / "train.txt").write_text(text, encoding="utf-8")
    (corpus / "heldout.txt").write_text(text, encoding="utf-8")
    return corpus


def _suite(tmp: Path, grid: str = "table5", out: str = "out", **scale):
    from albertlm.experiments.runner import make_suite

    return make_suite(tmp / out, get_scale("smoke", **scale), grid, _corpus(tmp), shared_path("glue"))


def _settings(suite) -> dict:
    """prepared.json's data settings, as the runner records them."""
    s = suite.scale
    return {"vocab_size": s.vocab_size, "max_seq_length": s.max_seq_length, "masking": s.masking,
            "dupe_factor": s.dupe_factor, "corpus_chars": s.corpus_chars, "heldout_chars": s.heldout_chars,
            "finetune_tasks": [t.__dict__ for t in s.finetune_tasks],
            "train": str(suite.train_text), "heldout": str(suite.heldout_text)}


def _finished(suite, jobs=None) -> list:
    """Every (or the given) job finished, its result.json as the runner writes it, and suite.json."""
    from albertlm.experiments.runner import _write_json, merged_plan, plan_jobs, shape_name

    planned = plan_jobs(suite.runs)
    suite.out.mkdir(parents=True, exist_ok=True)
    for i, job in enumerate(planned if jobs is None else jobs):
        directory = suite.out / job.directory
        directory.mkdir(parents=True, exist_ok=True)
        result = {"kind": job.kind, "name": job.name, "seed": job.seed, "model": job.run.model, "params": 1000,
                  "shape": shape_name(job.run),
                  "finetune": {"sst2": {"score": 0.5 + i / 100, "seeds": [job.seed], "seed": job.seed}}}
        if job.kind == "pretrain":
            result.update(task=job.run.task, variant=job.run.variant, grids=list(job.run.grids),
                          intrinsic={"mlm_acc": 0.1 + i / 100, "sop_acc": 0.5, "nsp_acc": 0.5, "mlm_loss": 5.0},
                          pretrain={"seconds": 1.0, "checkpoint": f"{job.directory}/checkpoints/step_00000020"})
        (directory / "result.json").write_text(json.dumps(result))
    _write_json(suite.out / "suite.json", merged_plan(suite, planned))
    return planned


# --------------------------------------------------------------------------- a damaged result.json
def test_report_only_leaves_out_a_damaged_result_names_it_and_exits_1(tmp_path, capsys):
    from albertlm.cli.main import main

    suite = _suite(tmp_path)
    _finished(suite)
    cut = suite.out / "runs" / "E128-all-nsp-s1" / "result.json"
    cut.write_text(cut.read_text()[:60])                         # cut short
    edited = suite.out / "runs" / "E128-all-none-s1" / "result.json"
    edited.write_text(json.dumps({k: v for k, v in json.loads(edited.read_text()).items() if k != "intrinsic"}))
    capsys.readouterr()
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 2
    assert str(cut) in err and str(edited) in err and "left out of the report" in err and "'intrinsic'" in err
    report = (suite.out / "report.md").read_text()
    assert "**Left out:** 2 result files" in report and "runs/E128-all-nsp-s1/result.json" in report
    results = json.loads((suite.out / "results.json").read_text())
    assert sorted(results["runs"]) == ["E128-all-sop-s1"] and sorted(results["scratch"]) == ["scratch-E128-all-s1"]
    assert set(results["unreadable"]) == {str(cut), str(edited)}
    assert "Finished: 1 pretraining run and 1 no-pretraining baseline of 4 jobs planned" in report


def test_a_run_refuses_a_damaged_result_in_one_line_before_writing(tmp_path):
    from albertlm.experiments.runner import run_suite

    suite = _suite(tmp_path)
    _finished(suite)
    before = (suite.out / "suite.json").read_text()
    (suite.out / "scratch" / "scratch-E128-all-s1" / "result.json").write_text('{"kind": "scratch", "se')
    with pytest.raises(UserError, match=r"scratch-E128-all-s1/result.json: a job's result is not readable JSON"):
        run_suite(suite, log=lambda *a: None)
    (suite.out / "scratch" / "scratch-E128-all-s1" / "result.json").write_text("[1, 2]")
    with pytest.raises(UserError, match=r"not a readable job result \(a JSON list.*remove it to run that job again"):
        run_suite(suite, log=lambda *a: None)
    assert not (suite.out / "prepared").exists() and (suite.out / "suite.json").read_text() == before


# ------------------------------------------------------------------------------- a moved or copied suite
def test_a_moved_suite_reads_its_own_finetuning_samples(tmp_path):
    """prepared.json recorded the sample's absolute path: after a move it pointed at the old place (gone: every
    fine-tuning failed; a copy: silently the other suite's file)."""
    from albertlm.experiments.runner import _write_json, prepare

    suite = _suite(tmp_path)
    suite.prepared.mkdir(parents=True)
    old = "/elsewhere/out/prepared/glue/SST-2/train.tsv"
    _write_json(suite.prepared / "prepared.json",
                {"settings": _settings(suite),
                 "glue": {"sst2": {"train": old, "dev": ["/elsewhere/glue/SST-2/dev.tsv"]}}})
    saved = prepare(suite, log=lambda *a: None)
    sample = suite.prepared / "glue" / "SST-2" / "train.tsv"
    assert saved["glue"]["sst2"]["train"] == str(sample)
    dev = saved["glue"]["sst2"]["dev"]            # (../shared may be a symbolic link: compare the files)
    assert len(dev) == 1 and Path(dev[0]).resolve() == shared_path("glue", "SST-2", "dev.tsv").resolve()
    assert len(sample.read_text(encoding="utf-8").splitlines()) == 1 + 200      # the scale's seeded sample
    assert json.loads((suite.prepared / "prepared.json").read_text())["glue"] == saved["glue"]


def test_other_data_settings_name_what_differs(tmp_path):
    from albertlm.experiments.runner import _write_json, prepare

    suite = _suite(tmp_path)
    suite.prepared.mkdir(parents=True)
    _write_json(suite.prepared / "prepared.json", {"settings": {**_settings(suite), "train": "/old/train.txt"},
                                                   "glue": {}})
    with pytest.raises(UserError, match=r"other data settings \(scale or corpus: train: /old/train.txt there, "):
        prepare(suite, log=lambda *a: None)


def test_more_finetuning_of_a_copy_without_checkpoints_is_refused_before_writing(tmp_path):
    from albertlm.experiments.runner import plan_jobs, run_suite

    suite = _suite(tmp_path)
    _finished(suite)                                            # result.json files only: no checkpoint, no init
    before = (suite.out / "suite.json").read_text()
    more = _suite(tmp_path, finetune_seeds=2)
    with pytest.raises(UserError, match=r"3 finished pretraining runs must be fine-tuned again .* their models are "
                                        r"gone \(first: .*E128-all-none-s1/checkpoints/step_00000020\)"):
        run_suite(more, log=lambda *a: None)
    assert not (suite.out / "prepared").exists() and (suite.out / "suite.json").read_text() == before
    from albertlm.experiments.runner import check_models_kept

    check_models_kept(suite, plan_jobs(suite.runs))              # nothing to fine-tune again: fine
    for job in plan_jobs(suite.runs):                            # with the checkpoints kept, only baselines lack
        if job.kind == "pretrain":                               # their models: those are made again from the seed
            checkpoint = suite.out / job.directory / "checkpoints" / "step_00000020"
            checkpoint.mkdir(parents=True)
            (checkpoint / "config.json").write_text("{}")
    check_models_kept(more, plan_jobs(more.runs))


# ---------------------------------------------------------------------------------------------- grid files
def test_two_names_for_one_configuration_are_refused(tmp_path):
    """The second variant vanished: the suite deduplicates runs by configuration, and its name was in no report."""
    from albertlm.experiments.grids import expand, resolve_grids

    path = tmp_path / "g.json"
    for grid in ([{"name": "a"}, {"name": "b"}],
                 [{"task": "nsp"}, {"task": "nsp", "model": {"embedding_size": 12}}]):   # E=128 is 12 at smoke
        path.write_text(json.dumps(grid))
        with pytest.raises(UserError, match="are the same configuration at scale smoke"):
            expand(resolve_grids(str(path)), get_scale("smoke"))
    path.write_text(json.dumps([{"name": "a"}, {"name": "b", "task": "nsp"}]))
    assert [r.name for r in expand(resolve_grids(str(path)), get_scale("smoke"))] == ["a-s1", "b-s1"]
    assert len(expand(resolve_grids("paper"), get_scale("smoke"))) == 15    # the named grids' shared runs: once


# ---------------------------------------------------------------------------------------------- --list-jobs
def test_list_jobs_shows_what_a_run_would_do_and_refuses_what_it_would_refuse(tmp_path, capsys):
    from albertlm.cli.main import main
    from albertlm.experiments.runner import plan_jobs

    suite = _suite(tmp_path)
    planned = plan_jobs(suite.runs)
    _finished(suite, [j for j in planned if j.name in ("E128-all-none-s1", "scratch-E128-all-s1")])
    (suite.out / "runs" / "E128-all-nsp-s1" / "checkpoints" / "step_00000007").mkdir(parents=True)
    kept = suite.out / "runs" / "E128-all-none-s1" / "checkpoints" / "step_00000020"
    kept.mkdir(parents=True)
    (kept / "config.json").write_text("{}")
    argv = ["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(_corpus(tmp_path)),
            "--out", str(suite.out), "--list-jobs"]
    before = sorted(p.relative_to(suite.out) for p in suite.out.rglob("*"))
    capsys.readouterr()
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    state = {line.split()[1]: line.split()[-1] for line in lines[:-1]}
    assert state == {"E128-all-none-s1": "done", "E128-all-nsp-s1": "resume@7", "E128-all-sop-s1": "to-run",
                     "scratch-E128-all-s1": "done"}
    assert lines[-1] == "4 jobs: 2 done, 0 to fine-tune again, 1 to resume, 1 to run"
    assert main([*argv, "--finetune-seeds", "2", "--max-jobs", "1"]) == 0   # more seeds: the finished fine-tune again
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(" fine-tune") and lines[-1].startswith("4 jobs: 0 done, 2 to fine-tune again")
    assert main([*argv, "--max-steps", "30"]) == 2                # a run would refuse another scale: so does the list
    err = capsys.readouterr().err
    assert "another scale (max_steps: 20 there, 30 now" in err and "Traceback" not in err
    assert sorted(p.relative_to(suite.out) for p in suite.out.rglob("*")) == before   # it wrote nothing


# -------------------------------------------------------------------------------------------------- claims
def test_claim_5_with_one_pretraining_seed_says_it_cannot_be_measured(tmp_path):
    from albertlm.experiments.report import write_report

    suite = _suite(tmp_path)                                     # smoke: one pretraining seed
    _finished(suite)
    report = write_report(suite.out)[0].read_text()
    claims = {line[:2]: line for line in report.splitlines() if line[:3] in ("1. ", "5. ")}
    assert "**not measured by this grid** (it compares seeds and the suite has 1 pretraining seed (--seeds);" \
           in claims["5."]
    assert "1 pretraining seed (--seeds); NSP-trained" in claims["1."]   # the parenthesis closed, not eaten
    results = json.loads((suite.out / "results.json").read_text())
    assert "1 pretraining seed" in results["claims"]["5"]["why"] and results["claims"]["5"]["holds"] is None


def test_the_smoke_scale_token_budget_is_not_reported_as_zero(tmp_path):
    from albertlm.experiments.report import write_report

    suite = _suite(tmp_path)
    _finished(suite)
    report = write_report(suite.out)[0].read_text()
    assert "20 steps x 8 sequences = 5,120 tokens per run" in report and "0.0M tokens" not in report


def test_the_curves_plot_every_finished_model_from_its_first_finished_seed():
    """A model whose run of the suite's first seed had not finished was missing from pretraining_curves.png."""
    from albertlm.experiments import report

    curve = [{"step": 10, "loss": 5.0, "mlm_acc": 0.1}]
    runs = {"a-s1": {"variant": "a", "seed": 1, "train_curve": curve},
            "a-s2": {"variant": "a", "seed": 2, "train_curve": [{"step": 10, "loss": 6.0}]},
            "b-s2": {"variant": "b", "seed": 2, "train_curve": curve}}        # b's seed-1 run is not finished
    picked = report.first_seed_curves({"pretrain": runs})
    assert picked == {"a": curve, "b": curve}


def test_a_stopped_parallel_suite_says_how_to_continue(tmp_path, monkeypatch):
    """With --jobs 2, Ctrl-C / SIGTERM printed only "interrupted" (one job at a time says to rerun)."""
    from albertlm.experiments import runner

    suite = _suite(tmp_path)

    def stopped(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "prepare", lambda *a, **k: {})
    monkeypatch.setattr(runner, "_run_parallel", stopped)
    logs: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        runner.run_suite(suite, jobs=2, log=logs.append)
    assert "stopped after 0 jobs of 4; rerun the command to continue" in logs[-1]
