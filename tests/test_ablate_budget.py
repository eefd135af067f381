"""`ablate --max-minutes`: no job starts once the budget has passed (the running one finishes, the rest are
postponed and said so), so a suite can run in slices of a machine's time and continue on a rerun."""
from __future__ import annotations

import time

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from test_ablate_audit13 import _corpus, _suite


class _Clock:
    """The runner's `time` module with a clock that only the jobs move: a loaded machine that pauses the test
    between the suite's start and its first job (as CI's can, for more than the 0.1 s budget) changes nothing."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


def _fake_runs(monkeypatch, runner, seconds: float) -> list[str]:
    """Jobs that take `seconds` of the runner's clock and return a finished result; preparation is skipped."""
    started, clock = [], _Clock()

    def run_job(suite, job):
        started.append(job.name)
        clock.now += seconds
        return {"finetune": {}, "intrinsic": {}}

    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setattr(runner, "run_job", run_job)
    monkeypatch.setattr(runner, "prepare", lambda *a, **k: {})
    return started


def test_no_job_starts_after_the_budget(tmp_path, monkeypatch):
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}, {"name": "c", "task": "none"}])
    started = _fake_runs(monkeypatch, runner, 0.3)
    logged = []
    summary = runner.run_suite(suite, jobs=1, log=logged.append, max_minutes=0.1 / 60)   # 0.1 s
    planned = [j.name for j in runner.plan_jobs(suite.runs)]
    assert started == planned[:1]                           # the first started in time and finished
    assert summary["finished"] == planned[:1] and summary["postponed"] == planned[1:]
    assert summary["failed"] == {}
    assert f"{len(planned) - 1} jobs not started; rerun the command to continue" in logged[-1]


def test_without_a_budget_every_job_runs(tmp_path, monkeypatch):
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "a"}, {"name": "b", "task": "nsp"}])
    started = _fake_runs(monkeypatch, runner, 0.0)
    summary = runner.run_suite(suite, jobs=1, log=lambda *a: None)
    assert started == [j.name for j in runner.plan_jobs(suite.runs)] and summary["postponed"] == []


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_budget_is_one_line(tmp_path, capsys, value):
    code = main(["ablate", "--scale", "smoke", "--grid", "table5", "--corpus", str(_corpus(tmp_path)),
                 "--out", str(tmp_path / "out"), "--max-minutes", value])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--max-minutes must be a finite number >= 0" in err
    assert not (tmp_path / "out").exists()


def test_run_suite_refuses_a_negative_budget(tmp_path):
    from albertlm.experiments import runner

    with pytest.raises(UserError, match="max_minutes"):
        runner.run_suite(_suite(tmp_path, [{"name": "a"}]), max_minutes=-1)
