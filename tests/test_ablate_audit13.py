"""`albertlm ablate` audit: what an --out already holds is checked against the plan, the paper's tables place rows
by configuration, option ranges, model fields that conflict with the scale, one-line job failures, a corpus
with more characters than the smoke scale's vocabulary, a second grid into one --out, and claims a grid cannot
measure. Nothing here pretrains: the suite functions are driven with written files."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from albertlm.errors import UserError
from albertlm.experiments import grids
from albertlm.experiments.scales import get_scale
from conftest import shared_path


def _corpus(tmp: Path, lines: list[str] | None = None) -> Path:
    corpus = tmp / "corpus"
    corpus.mkdir(exist_ok=True)
    text = "\n".join(lines or ["One sentence here.", "Another sentence there.", "", "A second document."]) + "\n"
    (corpus / "train.txt").write_text(text, encoding="utf-8")
    (corpus / "heldout.txt").write_text(text, encoding="utf-8")
    return corpus


def _suite(tmp: Path, grid: list | str, out: str = "out", **scale):
    from albertlm.experiments.runner import make_suite

    if isinstance(grid, list):
        path = tmp / f"grid-{abs(hash(json.dumps(grid)))}.json"
        path.write_text(json.dumps(grid))
        grid = str(path)
    return make_suite(tmp / out, get_scale("smoke", **scale), grid, _corpus(tmp), shared_path("glue"))


def _fake_finished(suite, job) -> None:
    """A finished job's result.json, as the runner writes it (kind, seed, model, task)."""
    directory = suite.out / job.directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "result.json").write_text(json.dumps({"kind": job.kind, "seed": job.seed, "model": job.run.model,
                                                       "task": job.run.task, "variant": job.run.variant}))


# ------------------------------------------------------------------------------ what an --out already holds
def test_an_edited_grid_is_refused_where_a_finished_job_holds_another_model(tmp_path):
    from albertlm.experiments.runner import check_recorded, plan_jobs

    first = _suite(tmp_path, [{"name": "mine", "embedding": 128}])
    for job in plan_jobs(first.runs):
        _fake_finished(first, job)
    check_recorded(first, plan_jobs(first.runs))           # the same plan: its finished jobs are its own
    edited = _suite(tmp_path, [{"name": "mine", "embedding": 128, "model": {"ffn_size": 100}}])
    assert [r.name for r in edited.runs] == [r.name for r in first.runs]   # the same run name ...
    with pytest.raises(UserError, match=r"holds another run than the grid plans under that name "
                                        r"\(model.ffn_size: 128 there, 100 now\)"):
        check_recorded(edited, plan_jobs(edited.runs))     # ... is another model: refused, not reported


def test_run_suite_refuses_an_edited_grid_before_writing_anything(tmp_path):
    from albertlm.experiments.runner import plan_jobs, run_suite

    first = _suite(tmp_path, [{"name": "mine", "sharing": "none"}])
    for job in plan_jobs(first.runs):
        _fake_finished(first, job)
    edited = _suite(tmp_path, [{"name": "mine", "sharing": "all"}])
    with pytest.raises(UserError, match="model.sharing: none there, all now"):
        run_suite(edited, log=lambda *a: None)
    assert not (edited.out / "prepared").exists() and not (edited.out / "suite.json").exists()


def test_a_second_grid_into_one_out_adds_its_runs_to_the_plan(tmp_path):
    from albertlm.experiments.runner import _write_json, merged_plan, plan_jobs

    first = _suite(tmp_path, "table5")
    first.out.mkdir()
    _write_json(first.out / "suite.json", merged_plan(first, plan_jobs(first.runs)))
    second = _suite(tmp_path, "figure1")
    plan = merged_plan(second, plan_jobs(second.runs))
    assert plan["grids"] == ["table5", "figure1"]
    names = [r["name"] for r in plan["runs"]]
    assert names[:3] == ["E128-all-none-s1", "E128-all-nsp-s1", "E128-all-sop-s1"] and "E768-none-sop-s1" in names
    assert len(names) == len(set(names)) == 4                       # the shared ALBERT run once
    shared = next(r for r in plan["runs"] if r["name"] == "E128-all-sop-s1")
    assert set(shared["grids"]) >= {"table5", "figure1"}
    dirs = [j["dir"] for j in plan["jobs"]]
    assert len(dirs) == len(set(dirs)) and "runs/E128-all-nsp-s1" in dirs and "runs/E768-none-sop-s1" in dirs
    # a grid whose run of the same name is another model
    _write_json(first.out / "suite.json", {**json.loads((first.out / "suite.json").read_text()),
                                           "runs": [{**r, "model": {**r["model"], "ffn_size": 7}}
                                                    for r in plan["runs"]]})
    with pytest.raises(UserError, match="has a run E128-all-sop-s1 of another configuration"):
        merged_plan(second, plan_jobs(second.runs))


# ------------------------------------------------------------------------------------ rows by configuration
def test_paper_rows_go_by_configuration_not_by_name():
    from albertlm.experiments.report import paper_rows

    scale = get_scale("smoke")
    base = grids.base_model(scale)
    albert = base.replace(**grids.Variant(embedding=128, sharing="all").model_overrides(scale)).to_dict()
    bert = base.replace(**grids.Variant(embedding=768, sharing="none").model_overrides(scale)).to_dict()
    rows = paper_rows({"mine": {"model": albert, "task": "sop"}, "bert-like": {"model": bert, "task": "sop"},
                       "other": {"model": {**albert, "ffn_size": 1}, "task": "sop"}}, scale)
    assert rows == {"E128-all-sop": "mine", "E768-none-sop": "bert-like"}


def test_a_paper_label_for_another_configuration_is_refused(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps([{"name": "E128-all-sop", "embedding": 768}]))
    with pytest.raises(UserError, match="is the paper's label of another configuration"):
        grids.resolve_grids(str(path))
    path.write_text(json.dumps([{"name": "E128-all-sop", "embedding": 128, "sharing": "all"}]))
    assert grids.resolve_grids(str(path))[0].variants[0].label == "E128-all-sop"   # its own configuration


# --------------------------------------------------------------------------------------------- grid files
def test_grid_files_that_are_not_utf8_or_have_unknown_keys(tmp_path):
    path = tmp_path / "g.json"
    path.write_bytes(b'[{"name": "caf\xe9"}]')
    with pytest.raises(UserError, match="not UTF-8 text"):
        grids.resolve_grids(str(path))
    path.write_text(json.dumps({"variants": [{}], "seeds": [1, 2]}))
    with pytest.raises(UserError, match=r"unknown key\(s\) seeds"):
        grids.resolve_grids(str(path))


@pytest.mark.parametrize("model, message", [
    ({"vocab_size": 100}, "model.vocab_size cannot be set"),
    ({"max_position_embeddings": 16}, "below the scale's sequence length T=32"),
    ({"num_heads": 3}, "grid g, variant E128-all-sop-num_heads3: "),          # ModelConfig's own refusal
])
def test_model_fields_that_conflict_with_the_scale_are_refused_at_expansion(tmp_path, model, message):
    path = tmp_path / "g.json"
    path.write_text(json.dumps([{"model": model}]))
    with pytest.raises(UserError, match=message):
        grids.expand(grids.resolve_grids(str(path)), get_scale("smoke"))


# ----------------------------------------------------------------------------------------------- options
@pytest.mark.parametrize("args, message", [
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--max-jobs", "-1"], "--max-jobs must be >= 0 (0 = the default), got -1"),
    (["--threads", "-2"], "--threads must be >= 0"),
    (["--finetune-lr", "nan"], "--finetune-lr must be a finite number >= 0"),
    (["--finetune-lr", "inf"], "--finetune-lr must be a finite number >= 0"),
    (["--seeds", "-1"], r"--seeds: -1 is out of range"),
    (["--seeds", str(2**40)], "is out of range"),
    (["--seeds", "1", "1"], "a seed is given twice"),
    (["--vocab-size", "50"], "--vocab-size must be at least 100"),
])
def test_cli_option_ranges(capsys, tmp_path, args, message):
    from albertlm.cli.main import main

    corpus = _corpus(tmp_path)
    rc = main(["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(corpus), "--out",
               str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_report_only_refuses_options_that_would_change_a_run(capsys, tmp_path):
    from albertlm.cli.main import main

    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "suite.json").write_text("{}")
    assert main(["ablate", "--out", str(tmp_path / "o"), "--report-only", "--corpus", "x", "--jobs", "2"]) == 2
    assert "--corpus, --jobs cannot be used with it" in capsys.readouterr().err
    assert main(["ablate", "--out", str(tmp_path / "o"), "--report-only", "--vocab-size", "800"]) == 2
    assert "--vocab-size cannot be used with it" in capsys.readouterr().err


def test_an_empty_corpus_file_is_named(tmp_path):
    from albertlm.experiments.runner import corpus_files

    corpus = _corpus(tmp_path)
    (corpus / "heldout.txt").write_text("\n\n   \n")
    with pytest.raises(UserError, match=r"heldout.txt has no text \(one sentence per line"):
        corpus_files(corpus)


# ------------------------------------------------------------------------------------------------ failures
def test_a_jobs_user_error_is_one_line_on_stderr(tmp_path, monkeypatch):
    from albertlm.experiments import runner

    suite = _suite(tmp_path, [{"name": "mine"}])
    job = runner.plan_jobs(suite.runs)[0]

    def bad(suite, job):
        raise UserError("the model cannot be built:\nnum_heads must divide H")

    monkeypatch.setattr(runner, "run_job", bad)
    name, result, error = runner._job_in_worker(suite, job)
    assert (name, result) == (job.name, None) and error == "the model cannot be built: num_heads must divide H"
    logged, errors, failed = [], [], {}
    runner._note(logged.append, errors.append, name, result, error, 0.0, failed, [], [])
    assert logged == [] and len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].endswith(f"FAILED {job.name}: {error}") and failed == {job.name: error}
    monkeypatch.setattr(runner, "run_job", lambda s, j: 1 / 0)        # a bug keeps its traceback
    error = runner._job_in_worker(suite, job)[2]
    assert "Traceback" in error and "ZeroDivisionError" in error


# ------------------------------------------------------------------------------------ a non-English corpus
def _korean(path: Path, rows: int) -> Path:
    lines = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:rows]
    path.write_text("\n".join(c for line in lines for c in line.split("\t")[:2]) + "\n", encoding="utf-8")
    return path


def test_a_korean_corpus_lowers_the_character_coverage_or_names_a_larger_scale(tmp_path):
    from albertlm.experiments.runner import train_tokenizer

    notes = []
    got = train_tokenizer(_korean(tmp_path / "small.txt", 300), tmp_path / "tok", 400, "smoke", notes.append)
    assert got["character_coverage"] < got["default_coverage"]     # SentencePiece's default fails at V = 400
    assert len(notes) == 1 and "more distinct characters than V=400" in notes[0]
    big = _korean(tmp_path / "big.txt", 3000)
    with pytest.raises(UserError, match=r"even at character coverage 0.98 .*give --vocab-size \d+ or more, or a "
                                        r"larger scale") as refused:
        train_tokenizer(big, tmp_path / "tok2", 400, "smoke", notes.append)
    suggested = int(str(refused.value).split("--vocab-size ")[1].split()[0])
    assert train_tokenizer(big, tmp_path / "tok2", suggested, "smoke", notes.append)["character_coverage"] >= 0.98
    english = tmp_path / "en.txt"
    english.write_text(shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8"))
    quiet = []
    got = train_tokenizer(english, tmp_path / "tok3", 400, "smoke", quiet.append)
    assert got["character_coverage"] == got["default_coverage"] and quiet == []


def test_the_report_says_when_the_tokenizer_does_not_fit_the_glue_text(tmp_path):
    from types import SimpleNamespace

    from albertlm.experiments.report import corpus_facts
    from albertlm.experiments.runner import glue_token_fit, latin_share, train_tokenizer

    facts, fits = {}, {}
    for language, text in (("ko", _korean(tmp_path / "ko.txt", 300)),
                           ("en", shared_path("text", "gutenberg", "carroll-alice.txt"))):
        out = tmp_path / language
        tokenizer = train_tokenizer(text, out / "prepared" / "tokenizer", 400, "smoke", lambda *a: None)
        glue = {"sst2": {"train": str(shared_path("glue", "SST-2", "train.tsv"))}}
        fits[language] = fit = glue_token_fit(SimpleNamespace(tokenizer=out / "prepared" / "tokenizer"), glue)
        (out / "prepared" / "prepared.json").write_text(json.dumps(
            {"settings": {"vocab_size": 400}, "tokenizer": tokenizer, "glue_tokens": fit,
             "latin_share": latin_share(text)}))
        facts[language] = "\n".join(corpus_facts(out))
    assert "lowered from the default" in facts["ko"] and "it is likely not English" in facts["ko"]
    assert "lowered" not in facts["en"] and "not English" not in facts["en"]
    assert "character coverage 0.99995" in facts["en"]
    # even a 400-piece English tokenizer keeps most English words whole; the Korean one spells them all
    assert fits["en"]["spelled_word_share"] < 0.1 and fits["ko"]["spelled_word_share"] > 0.9
    assert fits["ko"]["unk_share"] > 0.1 > fits["en"]["unk_share"]


def test_latin_share(tmp_path):
    from albertlm.experiments.runner import latin_share

    path = tmp_path / "t.txt"
    for text, share in (("Hello, world!", 1.0), ("안녕하세요 world", 5 / 10), ("中文 abc", 3 / 5), ("123 !", None)):
        path.write_text(text, encoding="utf-8")
        assert latin_share(path) == (pytest.approx(share) if share is not None else None)


# -------------------------------------------------------------------------------------------------- claims
def _agg(labels: list[str], layers: int) -> dict:
    transitions = {"l2": [1.0 + i % 2 for i in range(layers)], "cosine": [0.5] * layers}
    return {"variants": {label: {"transitions": transitions, "shape": "x"} for label in labels}, "shapes": {}}


def test_claims_a_grid_cannot_measure_say_so():
    from albertlm.experiments.report import _verdict, claims

    planned = {"labels": {"E128-all-sop", "E768-none-sop"}, "seeds": 2}       # figure1's configurations only
    out = claims(_agg(["E128-all-sop", "E768-none-sop"], 2), planned)
    assert _verdict(out["1"]) == "not measured by this grid" and "E128-all-nsp" in out["1"]["why"]
    assert _verdict(out["2"]) == "not measured by this grid"
    assert _verdict(out["4"]) == "not measured" and "fewer than 3 layers" in out["4"]["why"]
    out = claims(_agg(["E128-all-sop", "E768-none-sop"], 4), planned)
    assert out["4"]["holds"] is not None                          # 4 layers: smoothness is measured
    one_seed = {"labels": {v.label for v in grids.GRIDS["table5"].variants}, "seeds": 1}
    out = claims(_agg([], 4), one_seed)
    assert "1 pretraining seed" in out["1"]["why"] and out["1"]["holds"] is None
    assert _verdict(claims(_agg([], 4))["1"]) == "not measured yet"   # without a plan: as before


def test_the_report_states_why_a_claim_is_not_measured(tmp_path):
    from albertlm.experiments.report import write_report
    from albertlm.experiments.runner import merged_plan, plan_jobs

    suite = _suite(tmp_path, "figure1")
    suite.out.mkdir()
    (suite.out / "suite.json").write_text(json.dumps(merged_plan(suite, plan_jobs(suite.runs))))
    report = write_report(suite.out)[0].read_text()
    line = next(x for x in report.splitlines() if x.startswith("1. "))
    assert "**not measured by this grid**" in line and "it plans no E128-all-nsp run" in line
    line = next(x for x in report.splitlines() if x.startswith("3. "))
    assert "**not measured by this grid**" in line


def test_scale_from_suite_json_keeps_the_recorded_model_fields():
    from albertlm.experiments.report import _scale_from

    recorded = {**get_scale("smoke").to_dict(), "hidden_size": 48, "embedding_sizes": [8, 12, 16, 48]}
    scale = _scale_from(json.loads(json.dumps(recorded)))
    assert scale.hidden_size == 48 and scale.embedding_sizes == (8, 12, 16, 48)
    assert replace(scale, hidden_size=32, embedding_sizes=(8, 12, 16, 32)) == get_scale("smoke")


def test_a_corpus_too_small_for_the_vocabulary_is_one_line(tmp_path):
    from albertlm.experiments.runner import train_tokenizer

    path = tmp_path / "tiny.txt"
    path.write_text("One sentence here.\nAnother sentence there.\n")
    with pytest.raises(UserError, match=r"^the corpus is too small for scale smoke's vocabulary: SentencePiece "
                                        r"makes at most \d+ pieces of its text, not V=400; give a larger corpus$"):
        train_tokenizer(path, tmp_path / "tok", 400, "smoke", lambda *a: None)
