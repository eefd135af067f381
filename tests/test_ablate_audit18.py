"""`albertlm ablate` audit 18: a second `albertlm ablate` on the same --out while one runs is refused in one line
(both prepared the same data, trained the same jobs and wrote suite.json and the report at once; the per-run lock
only failed the second one's copy of the running pretraining, as a misleading job failure); a variant renamed in
its grid file between two runs into one --out is refused (it was trained again under its new name, with a second
baseline of its shape); a grid file's `model` that sets what the variant's own keys set (sharing, embedding size,
dropout) is refused instead of one of the two being ignored; a variant's bad value names its file. Nothing here
pretrains: the suite functions are driven with written files and fake jobs."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path
from test_ablate_audit13 import _corpus, _suite
from test_ablate_audit16 import _finished
from test_ablate_budget import _fake_runs


@contextlib.contextmanager
def _another_suite_runs(out):
    """What a running `albertlm ablate` holds on its --out: an advisory lock on the directory."""
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def _ablate(tmp_path, *extra: str) -> int:
    grid = tmp_path / "mine.json"
    grid.write_text(json.dumps([{"name": "a"}]))
    return main(["ablate", "--scale", "smoke", "--grid", str(grid), "--corpus", str(_corpus(tmp_path)),
                 "--glue-dir", str(shared_path("glue")), "--out", str(tmp_path / "out"), "--report", "false",
                 *extra])


# ----------------------------------------------------------------------------------- one suite per --out at once
def test_a_second_ablate_on_a_running_suite_is_one_line_and_touches_nothing(tmp_path, capsys, monkeypatch):
    from albertlm.experiments import runner

    started = _fake_runs(monkeypatch, runner, 0.0)
    out = tmp_path / "out"
    out.mkdir()
    with _another_suite_runs(out):
        assert_one_error(capsys, _ablate(tmp_path), f"--out {out}: another `albertlm ablate` is running this suite")
        assert started == [] and list(out.iterdir()) == []            # nothing prepared, planned or run
        assert _ablate(tmp_path, "--list-jobs") == 0                 # a listing reads the suite meanwhile
        capsys.readouterr()
    assert _ablate(tmp_path) == 0 and started == ["a-s1", "scratch-a-s1"]   # once the first one has ended
    with _another_suite_runs(out):                                   # the run let the lock go when it ended
        pass


def test_two_suites_that_made_out_at_once_run_one_of_them(tmp_path, monkeypatch):
    """--out did not exist when both started: the lock is taken as soon as the run has made it."""
    from albertlm.experiments import runner

    started = _fake_runs(monkeypatch, runner, 0.0)
    suite = _suite(tmp_path, [{"name": "a"}])
    plan, held = runner.merged_plan, contextlib.ExitStack()

    def the_other_one_first(*args):                  # the other command makes --out and locks it meanwhile
        suite.out.mkdir()
        held.enter_context(_another_suite_runs(suite.out))
        return plan(*args)

    monkeypatch.setattr(runner, "merged_plan", the_other_one_first)
    with held, pytest.raises(UserError, match="another `albertlm ablate` is running this suite"):
        runner.run_suite(suite, log=lambda *a: None)
    assert started == [] and list(suite.out.iterdir()) == []   # left to the other one (not removed under it)


# ------------------------------------------------------------------------------- a variant renamed between runs
def test_a_variant_renamed_between_two_runs_into_one_out_is_refused(tmp_path, monkeypatch):
    from albertlm.experiments import runner

    first = _suite(tmp_path, [{"name": "e128-all"}])
    _finished(first)                                  # its run and baseline finished, suite.json written
    before = (first.out / "suite.json").read_text()
    started = _fake_runs(monkeypatch, runner, 0.0)
    renamed = _suite(tmp_path, [{"name": "albert-small"}, {"name": "b", "task": "nsp"}])
    for call in (runner.preview, lambda s: runner.run_suite(s, log=lambda *a: None)):
        with pytest.raises(UserError, match=r"variant 'albert-small' is the same configuration .* as run e128-all-s1 "
                                            r"of its plan \(suite.json, variant 'e128-all'\), which a suite trains "
                                            r"once: name the variant 'e128-all'"):
            call(renamed)
    assert started == [] and (first.out / "suite.json").read_text() == before
    kept = _suite(tmp_path, [{"name": "e128-all"}, {"name": "b", "task": "nsp"}])   # its old name: the new one runs
    assert runner.run_suite(kept, log=lambda *a: None)["finished"] == ["b-s1"]


# ------------------------------------------------------------------------------------------------- grid files
@pytest.mark.parametrize("variant, message", [
    ({"sharing": "all", "model": {"sharing": "none"}}, "model.sharing is the variant's own key 'sharing'"),
    ({"model": {"sharing": "none"}}, "model.sharing is the variant's own key 'sharing'"),
    ({"embedding": 128, "model": {"embedding_size": 24}}, "model.embedding_size and 'embedding' both set the "
                                                          "embedding size"),
    ({"dropout": True, "model": {"attention_dropout": 0.3}}, "model.attention_dropout and 'dropout' both set the "
                                                             "dropout rate"),
    ({"dropout": False, "model": {"hidden_dropout": 0.3}}, "model.hidden_dropout and 'dropout' both set"),
    ({"name": "mine", "sharing": "ALL"}, r"sharing must be one of all, attention, ffn, none, got 'ALL'"),
    ({"embedding": 100}, r"embedding is the paper's E, .*, got 100"),
    ({"task": "mlm"}, r"task must be one of none, nsp, sop, got 'mlm'"),
])
def test_a_grid_files_contradiction_or_bad_value_names_the_file_and_variant(tmp_path, variant, message):
    from albertlm.experiments.grids import resolve_grids

    path = tmp_path / "g.json"
    path.write_text(json.dumps([variant]))
    with pytest.raises(UserError, match=f"^{re.escape(str(path))}: variant 0: .*{message}"):
        resolve_grids(str(path))


def test_a_models_own_rate_or_size_is_kept_only_without_the_variants_key(tmp_path):
    from albertlm.experiments.grids import expand, resolve_grids
    from albertlm.experiments.scales import get_scale

    path = tmp_path / "g.json"
    path.write_text(json.dumps([{"name": "d3", "dropout": False, "model": {"hidden_dropout": 0.3}}]))
    with pytest.raises(UserError, match="both set the dropout rate"):     # no dropout, and 0.3: which one?
        resolve_grids(str(path))
    path.write_text(json.dumps([{"name": "d3", "model": {"hidden_dropout": 0.3}},
                                {"name": "e24", "model": {"embedding_size": 24}}]))
    runs = expand(resolve_grids(str(path)), get_scale("smoke"))
    assert runs[0].model["hidden_dropout"] == 0.3 and runs[1].model["embedding_size"] == 24
