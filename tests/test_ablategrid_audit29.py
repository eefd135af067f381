"""`albertlm ablate` audit 29: a researcher's own grid file (Korean / Chinese corpus, own tokenizer, smoke scale).

A variant named in the file ("sop", "nsp" of one shape) recorded its own name's baseline (`scratch-nsp`), which
the plan never runs (it runs one baseline per shape, named after the first variant of it): the report compared
that model with nothing and claim 5 read "so far" for ever. `embedding: 768` (E = H) beside another
`model.hidden_size` was the scale's H, neither E = H nor labelled so; `model.type_vocab_size: 1` failed every
job after the preparation; an unknown key (`embeding`, a ModelConfig field beside the variant's keys, `lr` or
`seed`, which a suite sets for every run alike) said nothing of what was meant; `--list-jobs` showed two
variants differing in `model` fields (num_groups) as the same. Nothing pretrains here."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.experiments import grids
from albertlm.experiments.scales import get_scale
from conftest import assert_one_error
from test_ablate_audit13 import _corpus, _suite
from test_report_audit18 import _write


def _grid(tmp_path, variants: list) -> str:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(variants))
    return str(path)


# ------------------------------------------------------------------------------------------ baselines by shape
def test_a_named_variants_result_names_the_baseline_its_shape_planned(tmp_path, monkeypatch):
    """Two variants of a grid file with one shape, "sop" and "nsp": the plan runs one baseline, scratch-sop; the
    NSP run's result said "scratch-nsp" (its own name), so the report found no baseline for it."""
    from albertlm.experiments import evaluation, runner
    from albertlm.experiments.report import aggregate

    suite = _suite(tmp_path, [{"name": "sop"}, {"name": "nsp", "task": "nsp"}])
    planned = {job.name: job for job in runner.plan_jobs(suite.runs)}
    assert sorted(planned) == ["nsp-s1", "scratch-sop-s1", "sop-s1"]   # one baseline for the one shape

    def pretrain_run(suite, run, run_dir):
        return {"status": "done", "checkpoint": f"runs/{run.name}/checkpoints/step_00000020", "seconds": 1.0}

    monkeypatch.setattr(runner, "pretrain_run", pretrain_run)
    monkeypatch.setattr(evaluation, "intrinsic", lambda *a, **k: {"mlm_acc": 0.1, "sop_acc": 0.5, "nsp_acc": 0.5})
    monkeypatch.setattr(evaluation, "transitions_of_checkpoint", lambda *a, **k: {})
    monkeypatch.setattr(runner, "_curve", lambda run_dir: [])
    monkeypatch.setattr(runner, "finetune_all",
                        lambda suite, model, out, seed: {"sst2": {"score": 0.6, "scores": [0.6], "seeds": [seed]}})
    result = runner.run_job(suite, planned["nsp-s1"])
    assert f"{result['shape']}-s1" == "scratch-sop-s1"
    assert runner.run_job(suite, planned["sop-s1"])["shape"] == "scratch-sop"
    _write(suite, planned["scratch-sop-s1"], {"sst2": 0.5})
    data = {"suite": {"scale": suite.scale.to_dict()}, "scratch": {"scratch-sop-s1": json.loads(
        (suite.out / "scratch" / "scratch-sop-s1" / "result.json").read_text())}, "pretrain": {
        name: json.loads((suite.out / "runs" / name / "result.json").read_text()) for name in ("sop-s1", "nsp-s1")}}
    agg = aggregate(data, suite.scale)
    assert agg["shapes"].get(agg["variants"]["nsp"]["shape"]) is not None   # the report's scratch column


# ------------------------------------------------------------------------------- refused before anything runs
def test_e_equals_h_beside_another_hidden_size_is_refused(tmp_path):
    """`embedding: 768` is E = H at the scale's H (smoke: 32); with model.hidden_size 64 the run had E = 32, H = 64
    and was labelled E768. Refused at expansion; model.embedding_size, or another paper E, stays allowed."""
    with pytest.raises(UserError, match=r"embedding 768 is the paper's E = H.*model\.hidden_size is 64: give "
                                        r"model\.embedding_size \(64 for E = H\)"):
        _suite(tmp_path, [{"embedding": 768, "model": {"hidden_size": 64}}])
    runs = _suite(tmp_path, [{"model": {"hidden_size": 64, "embedding_size": 64}},
                             {"embedding": 128, "model": {"hidden_size": 64}},
                             {"embedding": 768, "model": {"hidden_size": 32}}]).runs   # the scale's own H
    assert [(r.model["embedding_size"], r.model["hidden_size"]) for r in runs] == [(64, 64), (12, 64), (32, 32)]


def test_one_token_type_is_refused_at_expansion(tmp_path):
    """Every sequence has segments A and B: type_vocab_size 1 failed each job on its first batch, after the
    preparation (minutes at the cpu scale)."""
    with pytest.raises(UserError, match=r"variant E128-all-sop-type_vocab_size1: model\.type_vocab_size=1: .* at "
                                        r"least 2"):
        _suite(tmp_path, [{"model": {"type_vocab_size": 1}}])


@pytest.mark.parametrize("variant, said", [
    ({"embeding": 64}, "unknown key(s) embeding (did you mean embedding?)"),
    ({"num_groups": 2}, 'num_groups is a ModelConfig field: give it under "model"'),
    ({"num_layrs": 3}, "(did you mean model.num_layers?)"),
    ({"lr": 0.01}, "lr: the scale sets it for every run of a suite alike"),
    ({"masking": "ngram"}, "masking: the scale sets it"),
    ({"seed": 2}, "seed: the pretraining seeds are the command's --seeds"),
    ({"zzz": 1}, "(a variant's keys: name, embedding, sharing, task, dropout, model)"),
])
def test_an_unknown_variant_key_says_what_was_meant(tmp_path, variant, said):
    path = tmp_path / "g.json"
    path.write_text(json.dumps([variant]))
    with pytest.raises(UserError) as refused:
        grids.resolve_grids(str(path))
    assert said in str(refused.value) and "variant 0" in str(refused.value)


def test_a_learning_rate_under_model_says_it_is_the_scales(tmp_path):
    with pytest.raises(UserError, match=r"model\.lr is no ModelConfig field \(lr: the scale sets it"):
        grids.expand(grids.resolve_grids(_grid(tmp_path, [{"model": {"lr": 0.01}}])), get_scale("smoke"))


def test_the_cli_refuses_a_bad_variant_in_one_line_with_a_korean_path(tmp_path, capsys):
    """The whole check through the command, a grid file and a corpus under Korean names: one line, exit 2,
    nothing written."""
    corpus = _corpus(tmp_path)
    grid = tmp_path / "격자.json"
    grid.write_text(json.dumps([{"name": "큰", "model": {"type_vocab_size": 1}}]), encoding="utf-8")
    out = tmp_path / "결과"
    code = main(["ablate", "--grid", str(grid), "--scale", "smoke", "--corpus", str(corpus), "--out", str(out)])
    assert_one_error(capsys, code, "격자.json: variant 0: name '큰' must be letters")
    grid.write_text(json.dumps([{"name": "big", "model": {"type_vocab_size": 1}}]), encoding="utf-8")
    code = main(["ablate", "--grid", str(grid), "--scale", "smoke", "--corpus", str(corpus), "--out", str(out)])
    assert_one_error(capsys, code, "grid 격자, variant big: model.type_vocab_size=1")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ --list-jobs
def test_list_jobs_shows_the_model_fields_a_variant_changes(tmp_path, capsys):
    """Two variants that differ in num_groups only were listed with the same E, sharing and dropout."""
    corpus = _corpus(tmp_path)
    grid = _grid(tmp_path, [{"name": "one"}, {"name": "two", "model": {"num_groups": 2}}])
    assert main(["ablate", "--grid", grid, "--scale", "smoke", "--corpus", str(corpus), "--out",
                 str(tmp_path / "o"), "--list-jobs"]) == 0
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()[:-1]}
    assert '"num_groups": 2' in lines["two-s1"] and '"num_groups": 2' in lines["scratch-two-s1"]
    assert "num_groups" not in lines["one-s1"] and '"embedding_size": 12' in lines["one-s1"]


def test_a_yaml_grid_file_is_named_as_such(tmp_path):
    """A .yaml grid was read as JSON: "not valid JSON: Expecting value: line 1 column 1"."""
    path = tmp_path / "grid.yaml"
    path.write_text("- name: a\n  embedding: 128\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"grid\.yaml: a grid file is JSON or TOML, not YAML"):
        grids.resolve_grids(str(path))
