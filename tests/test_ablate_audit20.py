"""`albertlm ablate` audit 20: SIGTERM stops a suite as Ctrl-C does wherever it comes (exit 130, `interrupted`, a
half-made preparation removed, the old report kept; it was the default action outside a training loop: exit
143, no word, a half-made preparation left); the report's files are replaced whole (a failed rewrite kept half
of the old ones); results.json and the report name every grid run into one --out (results.json named the last
one); claim 3 is judged and reported by its two halves (one verdict for both, and none at all for Table 3's
grid, which measures the first half). Nothing here pretrains: the suite functions are driven with written files
or stand-ins."""
from __future__ import annotations

import signal
import threading

import pytest

from albertlm.cli.main import main
from conftest import shared_path
from test_ablate_audit13 import _corpus, _suite
from test_ablate_numbers_audit20 import _report   # report.md read as UTF-8 whatever the locale
from test_report_audit18 import _claim, _planned, _write


# ------------------------------------------------------------------------------------------------ SIGTERM
@pytest.fixture
def default_sigterm():
    """SIGTERM at its default action for the test (as in a shell), the test runner's own handler back after."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def _terminate() -> None:
    """What `kill PID` does to the suite here; at the default action it would end the test run, so that is an
    assertion error instead."""
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "SIGTERM would end the process at once"
    signal.raise_signal(signal.SIGTERM)
    raise AssertionError("SIGTERM did not stop the suite")


@pytest.mark.parametrize("where", ["prepare", "job", "report"])
def test_sigterm_stops_the_suite_as_ctrl_c_does(tmp_path, monkeypatch, capsys, default_sigterm, where):
    """SIGTERM outside a training loop (the tokenizer's training, an evaluation, the report) ended the process with
    143 and no word, leaving a half-made preparation; now: `interrupted`, exit 130, how to continue, nothing
    half-made, the old report kept, SIGTERM's default action back."""
    from albertlm.experiments import report, runner

    out = tmp_path / "suite"

    def prepare_fresh(suite, settings, log, workers):
        (suite.prepared / "corpus").mkdir(parents=True)      # a preparation under way
        if where == "prepare":
            _terminate()
        summary = {"settings": settings, "glue": runner.glue_paths(suite)}
        runner._write_json(suite.prepared / "prepared.json", summary)
        return summary

    def run_job(suite, job):
        if where == "job":
            _terminate()
        return {"finetune": {}, "intrinsic": {}}

    def plots(agg, data, directory):
        _terminate()

    monkeypatch.setattr(runner, "_prepare_fresh", prepare_fresh)
    monkeypatch.setattr(runner, "run_job", run_job)
    monkeypatch.setattr(report, "plots", plots)
    if where == "report":                                   # a suite with a report of its own
        out.mkdir()
        (out / "report.md").write_text("the old report\n")
    code = main(["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(_corpus(tmp_path)),
                 "--out", str(out), "--glue-dir", str(shared_path("glue"))])
    captured = capsys.readouterr()
    assert code == 130 and captured.err.strip().splitlines()[-1] == "albertlm ablate: interrupted"
    assert "Traceback" not in captured.err and "FAILED" not in captured.err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if where == "prepare":                                  # nothing of the half-made suite is left
        assert not out.exists()
    elif where == "job":
        assert "rerun the command to continue" in captured.out and (out / "prepared" / "prepared.json").is_file()
    else:
        assert (out / "report.md").read_text() == "the old report\n"
        assert not [p.name for p in out.iterdir() if p.name.startswith(".tmp-")]


# ------------------------------------------------------------------------------------ the report's files
def test_a_report_that_cannot_be_written_whole_keeps_the_old_one(tmp_path):
    """A rewrite that failed midway (a full disk, here a file size limit) left the plots and report truncated
    (each was rewritten in place); now each file is the old one or the new one, and no temporary file stays."""
    resource = pytest.importorskip("resource")
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    from albertlm.experiments.report import write_report

    suite, jobs = _planned(tmp_path, "figure1")
    for job in jobs.values():
        _write(suite, job, {"sst2": 0.6 if job.kind == "pretrain" else 0.5})
    written = write_report(suite.out, warn=lambda message: None)
    before = {p.name: p.read_bytes() for p in written}
    assert "downstream.png" in before and all(len(b) > 512 for b in before.values())
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (512, limits[1]))
    try:
        with pytest.raises(OSError):
            write_report(suite.out, warn=lambda message: None)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert {name: (suite.out / name).read_bytes() for name in before} == before
    assert not [p.name for p in suite.out.iterdir() if p.name.startswith(".tmp-")]


# ------------------------------------------------------------------------------- several grids, one --out
def test_results_json_and_the_report_name_every_grid_run_into_one_out(tmp_path):
    """`table5`, then `figure1` into one --out: results.json named only `figure1` (its `grid`), and each run the
    grid it was first run under; now `grids` lists both, a run both plan names both, and so does the report."""
    from albertlm.experiments.runner import _write_json, merged_plan, plan_jobs

    suite, jobs = _planned(tmp_path, "table5", seeds=(1, 2))
    again = _suite(tmp_path, "figure1", seeds=(1, 2))
    _write_json(suite.out / "suite.json", merged_plan(again, plan_jobs(again.runs)))
    _write(suite, jobs["E128-all-sop-s1"], {"sst2": 0.6})
    report, results = _report(suite)
    assert results["grids"] == ["table5", "figure1"] and results["grid"] == "figure1"
    assert results["runs"]["E128-all-sop-s1"]["grids"] == ["table5", "figure1"]
    assert "Grids run into this directory: `table5`, `figure1`" in report


# ---------------------------------------------------------------------------------------------- claim 3
def _sharing_suite(tmp_path, grid: str, avg: dict[str, float]):
    """`grid` at the smoke scale with 2 seeds, every pretraining run finished with the downstream Avg `avg` of
    its sharing (seed 2 a little above seed 1)."""
    suite, jobs = _planned(tmp_path, grid, seeds=(1, 2))
    for job in jobs.values():
        if job.kind == "pretrain":
            _write(suite, job, {"sst2": avg[job.run.model["sharing"]] + 0.002 * job.seed})
    return suite


def test_claim_3_is_judged_and_reported_by_its_halves(tmp_path):
    """All-shared costs 1 point (the first half holds) and shared-FFN is above shared-attention beyond the spread
    (the second does not): the report said only 'does not hold'; now it names which half holds."""
    suite = _sharing_suite(tmp_path, "table4", {"none": 0.50, "all": 0.49, "attention": 0.45, "ffn": 0.48})
    report, results = _report(suite)
    claim = results["claims"]["3"]
    assert claim["holds"] is False
    assert claim["parts"] == {"all_shared_cost": True, "ffn_below_attention": False}
    line = _claim(report, "3")
    assert "**does not hold**" in line and "all-shared's cost: holds" in line
    assert "shared-FFN below shared-attention: does not hold" in line


def test_table_3s_grid_measures_the_first_half_of_claim_3(tmp_path):
    """Table 3's grid has all-shared and not-shared at both E: a 5-point cost was 'not measured by this grid'
    (the claim waited for Table 4's shared-attention and shared-FFN runs); now it does not hold, and says why."""
    suite = _sharing_suite(tmp_path, "table3", {"none": 0.55, "all": 0.50})
    report, results = _report(suite)
    claim = results["claims"]["3"]
    assert claim["holds"] is False and claim["parts"]["all_shared_cost"] is False
    assert claim["parts"]["ffn_below_attention"] is None
    assert round(claim["all_shared_cost"]["768"], 1) == 5.0
    line = _claim(report, "3")
    assert "**does not hold**" in line and "all-shared's cost: does not hold (5.0 and 5.0 Avg points" in line
    # the same cost within 3 points: the first half holds, the second is not measured by this grid
    (tmp_path / "small").mkdir()
    suite = _sharing_suite(tmp_path / "small", "table3", {"none": 0.51, "all": 0.50})
    report, results = _report(suite)
    assert results["claims"]["3"]["holds"] is None
    line = _claim(report, "3")
    assert "**not measured by this grid**" in line and "all-shared's cost: holds" in line
