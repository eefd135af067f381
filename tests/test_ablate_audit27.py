"""`albertlm ablate` audit 27 (a Korean user's own grid file, a Chinese corpus with a WordPiece vocab): a key
given twice in a JSON grid file is refused (json kept the last value without a word); a rerun with fewer
fine-tuning seeds than the suite ran with keeps the suite's count (its report said the smaller count beside
scores averaged over the larger); a rerun with another --glue-dir, or its files edited, under fine-tunings
already measured is refused (the new jobs were fine-tuned on other data and averaged with the old). Nothing here
pretrains: the suite functions are driven with written files."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path
from test_ablate_audit13 import _corpus, _suite
from test_ablate_audit17 import _fake_jobs
from test_report_audit18 import _planned, _write


def _quiet(*_args) -> None:
    pass


# ------------------------------------------------------------------------------------ a JSON key given twice
@pytest.mark.parametrize("text, key", [
    ('[{"embedding": 64, "sharing": "none", "sharing": "all"}]', "sharing"),
    ('{"variants": [{"embedding": 64}], "variants": [{"embedding": 256}]}', "variants"),
    ('[{"model": {"num_layers": 3, "num_layers": 2}}]', "num_layers"),
])
def test_a_key_given_twice_in_a_json_grid_file_is_refused(tmp_path, capsys, text, key):
    """{"sharing": "none", ..., "sharing": "all"} planned an all-shared run under the user's not-shared intent (json
    keeps the last value silently; a TOML file with a key twice was already refused by its reader)."""
    from albertlm.experiments.grids import resolve_grids

    path = tmp_path / "ko_grid.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=rf"ko_grid.json: key '{key}' is given twice in one object"):
        resolve_grids(str(path))
    argv = ["ablate", "--grid", str(path), "--scale", "smoke", "--corpus", str(_corpus(tmp_path)),
            "--out", str(tmp_path / "out"), "--list-jobs"]
    assert_one_error(capsys, main(argv), f"key '{key}' is given twice")


# ------------------------------------------------------------------------------ fewer fine-tuning seeds
def test_a_rerun_with_fewer_finetuning_seeds_keeps_the_suites_count(tmp_path, monkeypatch):
    """A suite run with --finetune-seeds 2, rerun without it (the scale's 1): suite.json and the report said "one
    fine-tuning seed per model" while the finished models' scores were means over 2, and a model finished by the
    rerun got 1, averaged beside them. The suite keeps its larger count (as it keeps every pretraining seed)."""
    from albertlm.experiments import runner

    suite2, jobs = _planned(tmp_path, [{"name": "a"}], finetune_seeds=2)
    _write(suite2, jobs["a-s1"], {"sst2": 0.8})
    result = suite2.out / "runs" / "a-s1" / "result.json"
    done = json.loads(result.read_text())
    done["finetune"]["sst2"]["seeds"] = [1, 1001]          # finished with both fine-tuning seeds
    result.write_text(json.dumps(done))
    again = _suite(tmp_path, [{"name": "a"}])                # the command without --finetune-seeds
    assert again.scale.finetune_seeds == 1
    assert dict((job.name, state) for job, state in runner.preview(again)) == {"a-s1": "done",
                                                                               "scratch-a-s1": "to-run"}
    _fake_jobs(monkeypatch, runner)
    seen = []
    monkeypatch.setattr(runner, "run_job", lambda suite, job: seen.append(suite.scale.finetune_seeds) or {})
    lines = []
    runner.run_suite(again, log=lines.append)
    assert seen == [2]                                         # the baseline is fine-tuned with both seeds too
    assert json.loads((again.out / "suite.json").read_text())["scale"]["finetune_seeds"] == 2
    assert any("was fine-tuned with 2 seeds per model, not 1: every model gets 2" in line for line in lines)
    assert runner.kept_finetune_seeds(again) == 2
    more = _suite(tmp_path, [{"name": "a"}], finetune_seeds=3)   # more than the suite's: the command's count
    assert runner.kept_finetune_seeds(more) == 0


# ------------------------------------------------------------------------------------ another --glue-dir
def _glue(root, rows: list[str]):
    """A GLUE folder with an SST-2 train file of `rows` and the shared SST-2 dev file."""
    (root / "SST-2").mkdir(parents=True)
    (root / "SST-2" / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    shutil.copyfile(shared_path("glue", "SST-2", "dev.tsv"), root / "SST-2" / "dev.tsv")
    return root


def test_a_rerun_with_other_glue_files_under_measured_finetunings_is_refused(tmp_path):
    """A rerun given another --glue-dir whose SST-2 differs (here two labels flipped) re-drew the suite's SST-2
    sample from it without a word: the new jobs were fine-tuned on other data than the finished ones and the
    report averaged both. Now a run and --list-jobs refuse it in one line before writing anything; a copy of the
    same files elsewhere (a moved GLUE folder) continues, as does a change before any fine-tuning finished."""
    from albertlm.experiments import runner

    rows = [f"sentence number {i} here\t{i % 2}" for i in range(10)]
    first = _glue(tmp_path / "glue", rows)
    flipped = _glue(tmp_path / "flipped", [r.replace("\t0", "\t1") if i < 2 else r for i, r in enumerate(rows)])
    copy = _glue(tmp_path / "copy", rows)
    suite, jobs = _planned(tmp_path, [{"name": "a"}])
    suite = replace(suite, glue_dir=first)
    suite.prepared.mkdir()
    record = {"settings": runner.prepare_settings(suite), "glue": runner.prepare_glue(suite),
              "corpus_files": runner.corpus_fingerprint(suite)}
    runner._write_json(suite.prepared / "prepared.json", record)   # (a record older than the GLUE digests)
    runner.prepare(suite, log=_quiet)                                # a rerun records them
    moved = replace(suite, glue_dir=flipped)
    sample = suite.prepared / "glue" / "SST-2" / "train.tsv"
    runner.prepare(moved, log=_quiet)                                # nothing fine-tuned yet: the new files do
    assert "sentence number 0 here\t1" in sample.read_text(encoding="utf-8")
    runner.prepare(suite, log=_quiet)                                # (and back)
    assert "sentence number 0 here\t0" in sample.read_text(encoding="utf-8")
    _write(suite, jobs["a-s1"], {"sst2": 0.8})
    (suite.out / "runs" / "a-s1" / "finetune" / "sst2-s1").mkdir(parents=True)
    (suite.out / "runs" / "a-s1" / "finetune" / "sst2-s1" / "result.json").write_text('{"score": 0.8}')
    before = {p.relative_to(suite.out): p.read_bytes() for p in suite.out.rglob("*") if p.is_file()}
    message = r"--glue-dir .*flipped: SST-2's training file is not the one .*'s fine-tunings of sst2 read"
    with pytest.raises(UserError, match=message):
        runner.preview(moved)
    with pytest.raises(UserError, match=message):
        runner.run_suite(moved, log=_quiet)
    assert {p.relative_to(suite.out): p.read_bytes() for p in suite.out.rglob("*") if p.is_file()} == before
    assert [state for _, state in runner.preview(replace(suite, glue_dir=copy))] == ["done", "to-run"]
    gone = replace(suite, glue_dir=tmp_path / "nowhere")                # --list-jobs needs no GLUE folder
    assert [state for _, state in runner.preview(gone)] == ["done", "to-run"]
    assert runner.glue_change(moved, json.loads((suite.prepared / "prepared.json").read_text())["glue_files"],
                              stale=["sst2"]) == ""           # --refinetune of SST-2 fine-tunes it all again
