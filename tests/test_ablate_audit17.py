"""`albertlm ablate` audit 17: an --out whose every job failed (nothing measured: no result, no checkpoint) is
continued with the corrected options, another scale included, and what the failed jobs left that the new plan
cannot use (their directories, prepared data of other data settings) moves to OUT/replaced/ and is made again;
a stopping suite's worker starts no queued job and no next step of its job (a SIGTERM during a training loop's
last step, or between loops, stopped nothing before the suite killed the worker 30 s later). Nothing here
pretrains: the suite functions are driven with written files."""
from __future__ import annotations

import json
import shutil
import threading

import pytest

from albertlm.errors import UserError
from test_ablate_audit13 import _suite


# ------------------------------------------------------------------------ an --out where nothing was measured
def _failed_first_run(tmp_path, fingerprint: bool = False, **scale):
    """What a first run whose every job failed before its first checkpoint leaves: suite.json, the prepared
    data's record, each pretraining's run config and log, each baseline's random model."""
    from albertlm.config.model import ModelConfig
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}], **scale)
    planned = runner.plan_jobs(suite.runs)
    suite.prepared.mkdir(parents=True)
    runner._write_json(suite.out / "suite.json", runner.merged_plan(suite, planned))
    record = {"settings": runner.prepare_settings(suite), "glue": runner.glue_paths(suite)}
    if fingerprint:                                     # the corpus files' digests (a record of this audit on)
        record["corpus_files"] = runner.corpus_fingerprint(suite)
    runner._write_json(suite.prepared / "prepared.json", record)
    for job in planned:
        directory = suite.out / job.directory
        directory.mkdir(parents=True)
        (directory / "output.log").write_text("Traceback (most recent call last): ...\n")
        if job.kind == "pretrain":
            s = suite.scale
            (directory / "run_config.json").write_text(json.dumps({
                "model": job.run.model, "data": {"path": str(suite.data("train", job.run.task))},
                "train": {"seed": job.seed, "max_steps": s.max_steps, "batch_size": s.batch_size}}))
        else:
            (directory / "init").mkdir()               # a random model's config (its weights are not read)
            ModelConfig(**job.run.model).to_json(directory / "init" / "config.json")
    return suite, planned


def _fake_jobs(monkeypatch, runner) -> list:
    """Jobs that finish at once; a fresh preparation records its settings (nothing is built)."""
    prepared = []

    def prepare_fresh(suite, settings, log, workers):
        suite.prepared.mkdir(parents=True, exist_ok=True)
        prepared.append(settings)
        summary = {"settings": settings, "glue": runner.glue_paths(suite)}
        runner._write_json(suite.prepared / "prepared.json", summary)
        return summary

    monkeypatch.setattr(runner, "_prepare_fresh", prepare_fresh)
    monkeypatch.setattr(runner, "run_job", lambda suite, job: {"finetune": {}, "intrinsic": {}})
    return prepared


def test_a_suite_whose_every_job_failed_takes_the_corrected_scale(tmp_path, monkeypatch):
    """The corrected command (here --max-steps and --vocab-size) was refused as "another scale" although nothing
    had been measured at the old one; now it runs, its plan replaces the old, and the prepared data (of another
    vocabulary) and the failed jobs' directories move to OUT/replaced/ instead of being reused."""
    from albertlm.experiments import runner

    _, old_jobs = _failed_first_run(tmp_path)
    fixed = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}], max_steps=7, vocab_size=500)
    prepared = _fake_jobs(monkeypatch, runner)
    states = runner.preview(fixed)                       # the listing accepts it as the run does
    assert [state for _, state in states] == ["to-run"] * len(states)
    logged: list[str] = []
    summary = runner.run_suite(fixed, log=logged.append)
    assert summary["failed"] == {} and len(summary["finished"]) == len(runner.plan_jobs(fixed.runs))
    plan = json.loads((fixed.out / "suite.json").read_text())
    assert plan["scale"]["max_steps"] == 7 and plan["scale"]["vocab_size"] == 500
    assert {r["model"]["vocab_size"] for r in plan["runs"]} == {500}            # the old plan's runs are gone
    assert [p["vocab_size"] for p in prepared] == [500]                        # made again for V=500
    stamps = list((fixed.out / "replaced").iterdir())
    assert len(stamps) == 1
    old = json.loads((stamps[0] / "prepared" / "prepared.json").read_text())
    assert old["settings"]["vocab_size"] == 400                                # kept aside, not reused
    for job in old_jobs:                                                       # another run: moved aside
        assert (stamps[0] / job.directory / "output.log").is_file()
    assert any("moved to" in line for line in logged)


def test_a_changed_step_count_keeps_prepared_data_that_does_not_depend_on_it(tmp_path, monkeypatch):
    """--max-steps changes no prepared data: it is kept (not made again); a measured --out is still refused."""
    from albertlm.experiments import runner

    suite, _ = _failed_first_run(tmp_path)
    prepared = _fake_jobs(monkeypatch, runner)
    fixed = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}], max_steps=7)
    checkpoint = suite.out / "runs" / "a-s1" / "checkpoints" / "step_00000003"
    checkpoint.mkdir(parents=True)                       # something was measured there: the scale is kept
    with pytest.raises(UserError, match=r"another scale \(max_steps: 20 there, 7 now"):
        runner.run_suite(fixed, log=lambda *a: None)
    shutil.rmtree(checkpoint.parent)
    finetuned = suite.out / "scratch" / "scratch-E128-all-s1" / "finetune" / "sst2-s1" / "result.json"
    finetuned.parent.mkdir(parents=True)
    finetuned.write_text("{}")                           # a baseline's finished fine-tuning is a measurement too
    with pytest.raises(UserError, match="another scale"):
        runner.preview(fixed)
    shutil.rmtree(finetuned.parent.parent)
    summary = runner.run_suite(fixed, log=lambda *a: None)
    assert summary["failed"] == {} and prepared == []   # the same data settings: prepared/ is kept
    assert json.loads((suite.prepared / "prepared.json").read_text())["settings"]["vocab_size"] == 400
    assert json.loads((fixed.out / "suite.json").read_text())["scale"]["max_steps"] == 7
    stamp = next((fixed.out / "replaced").iterdir())
    assert not (stamp / "prepared").exists() and (stamp / "runs" / "a-s1" / "run_config.json").is_file()
    assert not (stamp / "scratch").exists()              # the baseline's model is the same: kept


def test_a_corpus_corrected_in_place_is_prepared_again_when_nothing_was_measured(tmp_path, monkeypatch):
    """Every job failed on the corpus (say, too little held-out text); corrected in the same file, the rerun
    reused the data prepared from the old text (the record knew the path only) and failed the same way."""
    from albertlm.experiments import runner

    _failed_first_run(tmp_path, fingerprint=True)
    again = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}])
    prepared = _fake_jobs(monkeypatch, runner)
    with (again.heldout_text).open("a", encoding="utf-8") as f:
        f.write("\nA third document, held out.\n")
    runner.run_suite(again, log=lambda *a: None)
    assert len(prepared) == 1                            # made again from the corrected text
    stamp = next((again.out / "replaced").iterdir())
    assert (stamp / "prepared" / "prepared.json").is_file() and not (stamp / "runs").exists()


# ------------------------------------------------------------------------------- a stopping suite's workers
@pytest.fixture
def stopping(monkeypatch):
    """This process as a worker of `_run_parallel`: the suite's stop event."""
    from albertlm.experiments import runner

    event = threading.Event()
    monkeypatch.setattr(runner, "_STOP", event, raising=False)
    return event


def test_a_stopping_worker_starts_no_queued_job(tmp_path, monkeypatch, stopping):
    """A worker whose job stopped on the signal went on to the job queued for it, which ran until the suite
    killed it 30 s later; now it starts none (nor does any worker once the suite set the event)."""
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}])
    first, second = runner.plan_jobs(suite.runs)[:2]
    started = []

    def run_job(suite, job):
        started.append(job.name)
        raise runner.Stopped("pretraining stopped: interrupted")

    monkeypatch.setattr(runner, "run_job", run_job)
    with pytest.raises(runner.Stopped):
        runner._job_in_worker(suite, first)
    assert stopping.is_set()
    with pytest.raises(runner.Stopped, match="not started"):
        runner._job_in_worker(suite, second)
    assert started == [first.name]


def test_a_signal_between_training_loops_stops_the_job(tmp_path, monkeypatch, stopping):
    """SIGTERM in a worker outside a training loop (an evaluation, a fine-tuning's set-up) stops its job at once
    (Stopped, the suite's event set); an idle worker ends quietly."""
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}])
    job = runner.plan_jobs(suite.runs)[0]

    def run_job(suite, job):
        runner._worker_signalled(15, None)              # what the worker's handler does with SIGTERM
        raise AssertionError("not reached")

    monkeypatch.setattr(runner, "run_job", run_job)
    with pytest.raises(runner.Stopped, match="stopped by a signal"):
        runner._job_in_worker(suite, job)
    assert stopping.is_set() and runner._IN_JOB is False
    with pytest.raises(SystemExit):
        runner._worker_signalled(15, None)


def test_a_signal_in_the_last_pretraining_step_stops_before_evaluation(tmp_path, monkeypatch, stopping):
    """The loop's handler took a SIGTERM that came during the last step and the run ended "done": the worker
    went on to evaluate and fine-tune; now the job stops after the pretraining, and no fine-tuning starts."""
    from albertlm.experiments import evaluation, runner

    suite = _suite(tmp_path, [{"name": "a"}])
    job = runner.plan_jobs(suite.runs)[0]

    def pretrain_run(suite, run, run_dir):
        stopping.set()                                  # the suite stopped while the last step ran
        return {"status": "done", "checkpoint": "runs/a-s1/checkpoints/step_00000020"}

    evaluated = []
    monkeypatch.setattr(runner, "pretrain_run", pretrain_run)
    monkeypatch.setattr(evaluation, "intrinsic", lambda *a, **k: evaluated.append(a) or {})
    with pytest.raises(runner.Stopped, match="a-s1 pretrained"):
        runner.run_job(suite, job)
    assert evaluated == [] and not (suite.out / job.directory / "result.json").exists()
    with pytest.raises(runner.Stopped, match="not started"):
        runner.finetune_one(suite, suite.out, suite.scale.finetune_tasks[0], 1, tmp_path / "ft")
    assert not (tmp_path / "ft").exists()


# ----------------------------------------------------------------------------------- claims of a partial suite
def _result(suite, job, score: float) -> None:
    """A finished job's result.json as the runner writes it, with this downstream score."""
    from albertlm.experiments.runner import shape_name

    directory = suite.out / job.directory
    directory.mkdir(parents=True, exist_ok=True)
    result = {"kind": job.kind, "name": job.name, "seed": job.seed, "model": job.run.model, "params": 1000,
              "shape": shape_name(job.run), "finetune": {"sst2": {"score": score, "seeds": [job.seed]}}}
    if job.kind == "pretrain":
        result.update(task=job.run.task, variant=job.run.variant, grids=list(job.run.grids),
                      intrinsic={"mlm_acc": 0.1, "sop_acc": 0.5, "nsp_acc": 0.5, "mlm_loss": 5.0},
                      pretrain={"seconds": 1.0, "checkpoint": f"{job.directory}/checkpoints/step_00000020"})
    (directory / "result.json").write_text(json.dumps(result))


def test_claim_5_of_a_suite_cut_short_holds_only_so_far(tmp_path):
    """"Every pretrained model beats the same shape from scratch" read **holds** when one of the two variants
    planned had finished (the other not run yet); now it says it holds so far, for 1 of the 2."""
    from albertlm.experiments.report import write_report
    from albertlm.experiments.runner import _write_json, merged_plan, plan_jobs

    suite = _suite(tmp_path, [{"name": "a"}, {"name": "b", "sharing": "none"}], seeds=(1, 2))
    planned = plan_jobs(suite.runs)
    suite.out.mkdir(parents=True)
    _write_json(suite.out / "suite.json", merged_plan(suite, planned))
    jobs = {job.name: job for job in planned}
    for name, score in (("a-s1", 0.8), ("a-s2", 0.81), ("scratch-a-s1", 0.5), ("scratch-a-s2", 0.51)):
        _result(suite, jobs[name], score)

    def claim_5() -> str:
        write_report(suite.out)
        return next(line for line in (suite.out / "report.md").read_text().splitlines() if line.startswith("5. "))

    line = claim_5()
    assert "**holds so far** (1 of the 2 pretrained variants planned measured" in line, line
    results = json.loads((suite.out / "results.json").read_text())["claims"]["5"]
    assert results["holds"] is None and results["per_variant"] == {"a": True}
    for name, score in (("b-s1", 0.7), ("b-s2", 0.71), ("scratch-b-s1", 0.5), ("scratch-b-s2", 0.51)):
        _result(suite, jobs[name], score)
    assert "**holds** (" in claim_5()                    # every variant measured
    _result(suite, jobs["b-s2"], 0.4)                    # one seed below its baseline: does not hold
    assert "**does not hold** (" in claim_5()


def test_a_suite_json_that_is_not_an_object_is_one_line(tmp_path):
    """A hand-edited suite.json holding a list was an AttributeError traceback in the checks of a rerun."""
    from albertlm.errors import UserError
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}])
    suite.out.mkdir(parents=True, exist_ok=True)
    (suite.out / "suite.json").write_text("[1, 2]\n")
    assert runner.check_same_scale(suite) == []          # nothing measured: the plan is not read
    with pytest.raises(UserError, match=r"suite\.json.*expected a JSON object \(the suite's plan\), got list"):
        runner.merged_plan(suite, [])


def test_a_result_without_pretraining_seconds_is_left_out_of_the_report_in_one_line(tmp_path, capsys):
    """The report reads result["pretrain"]["seconds"]; a hand-edited result without it was a KeyError traceback."""
    from albertlm.cli.main import main
    from test_ablate_audit16 import _finished, _suite as _suite16

    suite = _suite16(tmp_path)
    _finished(suite)
    edited = suite.out / "runs" / "E128-all-sop-s1" / "result.json"
    result = json.loads(edited.read_text())
    del result["pretrain"]["seconds"]
    edited.write_text(json.dumps(result))
    capsys.readouterr()
    assert main(["ablate", "--out", str(suite.out), "--report-only"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(edited) in err and "'seconds'" in err
