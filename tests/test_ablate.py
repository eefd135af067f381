"""`albertlm ablate`: grids, the layer-transition metric against a direct computation, and a 2-run micro-grid
end to end at the smoke scale (prepare -> pretrain -> evaluate -> fine-tune + baselines -> report), a rerun
that skips finished jobs, and a killed job that is redone alone."""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from albertlm.experiments import grids
from albertlm.experiments.scales import get_scale
from conftest import shared_path

# ------------------------------------------------------------------------------------------------ grids


def test_paper_grid_is_the_union_without_duplicates():
    scale = get_scale("cpu")
    paper = grids.expand(grids.resolve_grids("paper"), scale)
    keys = [json.dumps([r.model, r.task, r.seed], sort_keys=True) for r in paper]
    assert len(keys) == len(set(keys))
    union = {k for name in grids.PAPER_ORDER
             for k in (json.dumps([r.model, r.task, r.seed], sort_keys=True)
                       for r in grids.expand(grids.resolve_grids(name), scale))}
    assert set(keys) == union
    # 8 (table 3) + 4 new (table 4) + 2 new (table 5) + 1 new (dropout), each with the scale's 2 seeds
    assert len(paper) == 15 * 2
    sop = next(r for r in paper if r.name == "E128-all-sop-s1")
    assert set(sop.grids) == {"table5", "table4", "figure1", "table3", "dropout"}
    assert paper[0].grids[0] == "table5"             # priority: table 5 first


def test_every_run_of_a_grid_has_the_same_budget_and_size():
    scale = get_scale("cpu")
    runs = grids.expand(grids.resolve_grids("table4"), scale)
    sizes = {(r.model["hidden_size"], r.model["num_layers"], r.model["vocab_size"]) for r in runs}
    assert sizes == {(64, 4, 4000)}
    assert {r.model["embedding_size"] for r in runs} == {32, 64}     # ALBERT's E at this scale, and E = H
    assert {r.model["sharing"] for r in runs} == {"all", "attention", "ffn", "none"}
    first = grids.expand(grids.resolve_grids("table3"), get_scale("cpu-v1"))   # the first cpu scale, kept
    assert {r.model["embedding_size"] for r in first} == {8, 16, 32, 64}
    # two fine-tuning runs per model at the cpu scale (one STS-B fine-tuning seed moved its score by about 10
    # points); the first scale had one, as its recorded grid was run
    assert scale.finetune_seed_list(2) == [2, 1002] and get_scale("cpu-v1").finetune_seed_list(2) == [2]


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_user_grid_file(tmp_path, suffix):
    path = tmp_path / f"mine{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"variants": [{"name": "two-groups", "model": {"num_groups": 2}},
                                                  {"embedding": 768, "sharing": "none", "task": "nsp"}]}))
    else:
        path.write_text('[[variants]]\nname = "two-groups"\nmodel = { num_groups = 2 }\n\n'
                        '[[variants]]\nembedding = 768\nsharing = "none"\ntask = "nsp"\n')
    runs = grids.expand(grids.resolve_grids(str(path)), replace(get_scale("cpu"), seeds=(7,)))
    assert [r.name for r in runs] == ["two-groups-s7", "E768-none-nsp-s7"]
    assert runs[0].model["num_groups"] == 2 and runs[1].model["embedding_size"] == 64


def test_bad_grid_is_one_clear_error(tmp_path):
    from albertlm.errors import UserError

    with pytest.raises(UserError, match="not one of"):
        grids.resolve_grids("table6")
    bad = tmp_path / "bad.json"
    for text, message in (('[{"sharing": "some"}]', "sharing must be one of"),
                          ('[{"embedding": "big"}]', "embedding must be an integer"),
                          ('[{"embedding": 128.7}]', "embedding must be an integer"),
                          ('[{"dropout": "false"}]', "dropout must be true or false"),
                          ('[{"model": {"num_layers": [3]}}]', "'model' values must be numbers"),
                          ('[{"name": "../../escape"}]', "it names the run's directory"),
                          ('[{"name": "a"}, {"name": "a", "task": "nsp"}]', "both named 'a'; give one"),
                          ('[{}, {"embedding": 128}]', "variants 0 and 1 are the same variant")):
        bad.write_text(text)
        with pytest.raises(UserError, match=re.escape(message)):
            grids.resolve_grids(str(bad))


def test_variants_that_differ_only_in_model_fields_are_separate_runs_and_baselines(tmp_path):
    """Two variants with the same E, sharing and task but another ModelConfig field are two models: their runs
    and no-pretraining baselines get their own names (they used to share one directory)."""
    from albertlm.errors import UserError
    from albertlm.experiments.runner import plan_jobs

    path = tmp_path / "layers.json"
    path.write_text('[{}, {"model": {"num_layers": 3}}, {"model": {"num_layers": 1}}]')
    runs = grids.expand(grids.resolve_grids(str(path)), get_scale("smoke"))
    assert [r.name for r in runs] == ["E128-all-sop-s1", "E128-all-sop-num_layers3-s1", "E128-all-sop-num_layers1-s1"]
    jobs = plan_jobs(runs)
    scratch = [j.name for j in jobs if j.kind == "scratch"]
    assert scratch == ["scratch-E128-all-s1", "scratch-E128-all-num_layers3-s1", "scratch-E128-all-num_layers1-s1"]
    assert len({j.directory for j in jobs}) == len(jobs)
    path.write_text('[{"name": "E1-x-nsp", "model": {"num_layers": 3}}, {"name": "E1-x-sop"}]')
    with pytest.raises(UserError, match="same no-pretraining baseline name 'scratch-E1-x'"):
        plan_jobs(grids.expand(grids.resolve_grids(str(path)), get_scale("smoke")))


def test_parameter_counts_match_the_paper():
    from albertlm.config.presets import get_preset
    from albertlm.experiments.evaluation import count_parameters

    assert abs(count_parameters(get_preset("albert-base")) - 11.7e6) < 0.1e6
    assert abs(count_parameters(get_preset("bert-base")) - 109.1e6) < 0.1e6


# ------------------------------------------------------------------------------------- Figure 1 metric
def test_layer_transitions_match_a_direct_computation(tiny_config):
    from albertlm.experiments.evaluation import layer_transitions
    from albertlm.model.albert import AlbertForPreTraining, attention_bias

    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config.replace(sharing="none")).eval()
    ids = torch.randint(5, 99, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0                                    # padding is not counted
    types = torch.zeros_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    got = layer_transitions(model, [batch])

    with torch.no_grad():                              # by hand: the plan's blocks one after another
        enc = model.albert.encoder
        x = model.albert.embeddings(ids, types)
        l2, cos = [], []
        for a, f in enc.plan:
            y = enc.attentions[a](x, attention_bias(mask))
            y = enc.ffns[f](y)
            real = mask.bool()
            xs, ys = x[real], y[real]
            l2.append(float(torch.linalg.vector_norm(ys - xs, dim=-1).mean()))
            cos.append(float((xs * ys).sum(-1).div(xs.norm(dim=-1) * ys.norm(dim=-1)).mean()))
            x = y
    assert len(got["l2"]) == tiny_config.num_layers
    assert got["l2"] == pytest.approx(l2, rel=1e-5)
    assert got["cosine"] == pytest.approx(cos, rel=1e-5)
    assert model.albert.encoder.run_block.__name__ == "run_block"   # the hook is removed afterwards


# ------------------------------------------------------------------------------------------- micro-grid
def _corpus(tmp: Path) -> Path:
    """Alice in Wonderland cut into chapters: 10 for training, 2 held out."""
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8")
    from albertlm.data.corpus import split_sentences

    chapters = [c for c in re.split(r"\nCHAPTER ", text) if len(c) > 2000]
    docs = ["\n".join(split_sentences(" ".join(c.split()))) + "\n" for c in chapters]
    out = tmp / "corpus"
    out.mkdir()
    (out / "train.txt").write_text("\n".join(docs[:-2]), encoding="utf-8")
    (out / "heldout.txt").write_text("\n".join(docs[-2:]), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    from albertlm.experiments.runner import make_suite, run_suite

    glue = shared_path("glue")
    shared_path("glue", "SST-2", "train.tsv")
    tmp = tmp_path_factory.mktemp("ablate")
    grid = tmp / "micro.json"
    grid.write_text(json.dumps([{"embedding": 128, "sharing": "all"}, {"embedding": 768, "sharing": "none"}]))
    scale = get_scale("smoke", max_steps=6)
    suite = make_suite(tmp / "out", scale, str(grid), _corpus(tmp), glue)
    first = run_suite(suite, jobs=1, log=lambda *a: None)
    return suite, first


def test_micro_grid_runs_end_to_end(micro):
    suite, summary = micro
    assert summary["failed"] == {}
    assert summary["finished"] == ["E128-all-sop-s1", "E768-none-sop-s1", "scratch-E128-all-s1",
                                   "scratch-E768-none-s1"]
    result = json.loads((suite.out / "runs" / "E128-all-sop-s1" / "result.json").read_text())
    for key in ("mlm_acc", "sop_acc", "nsp_acc"):
        assert 0.0 <= result["intrinsic"][key] <= 1.0
    assert len(result["transitions"]["l2"]) == suite.scale.num_layers
    assert 0.0 <= result["finetune"]["sst2"]["score"] <= 1.0
    scratch = json.loads((suite.out / "scratch" / "scratch-E128-all-s1" / "result.json").read_text())
    assert scratch["model"] == result["model"] and "sst2" in scratch["finetune"]


def test_report_has_every_table(micro):
    from albertlm.experiments.report import write_report

    suite, _ = micro
    paths = write_report(suite.out)
    report = (suite.out / "report.md").read_text()
    for heading in ("## Table 5", "## Table 4", "## Table 3", "## Dropout", "## Figure 1", "## No pretraining",
                    "## Claims", "## Every pretrained model"):
        assert heading in report
    assert "| not-shared |" in report and "86.5" in report        # our rows beside the paper's numbers
    assert "MLM baseline" in report
    assert "Finished: 2 pretraining runs and 2 no-pretraining baselines of 4 jobs planned." in report
    assert any(p.name == "figure1.png" for p in paths)
    results = json.loads((suite.out / "results.json").read_text())
    assert set(results["runs"]) == {"E128-all-sop-s1", "E768-none-sop-s1"}
    assert set(results["claims"]) == {"1", "2", "3", "4", "5"}
    assert 0.0 < results["mlm_unigram_baseline"]["acc"] < 1.0


def test_a_user_grids_report_lists_its_own_variants(micro, tmp_path):
    """Variants of a user grid that are none of the paper's: the paper's tables are left out (they would be
    all '–'), and every variant's size and held-out accuracy are in the report all the same."""
    from albertlm.experiments.report import write_report

    suite, _ = micro
    out = tmp_path / "out"
    shutil.copytree(suite.out, out)
    for path in (out / "runs").glob("*/result.json"):
        result = json.loads(path.read_text())
        result["variant"] = "mine-" + result["variant"]
        result["model"]["ffn_size"] += 1            # another model than the paper's (rows go by configuration)
        path.write_text(json.dumps(result))
    report = (write_report(out)[0]).read_text()
    assert "## Table 5" not in report and "## Figure 1" not in report
    section = report.split("## Every pretrained model")[1].split("## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| mine-")]
    assert len(rows) == 2 and all(re.search(r"\| 0\.\d{3}M \| \d+\.\d \(1\) \| \d+\.\d \(1\) \| \d+\.\d \(1\) \|", r)
                                  for r in rows), rows


def test_rerun_skips_finished_jobs_and_redoes_a_lost_one(micro):
    from albertlm.experiments.runner import run_suite

    suite, _ = micro
    again = run_suite(suite, jobs=1, log=lambda *a: None)
    assert again["finished"] == [] and again["skipped"] == again["planned"] == 4
    (suite.out / "scratch" / "scratch-E768-none-s1" / "result.json").unlink()   # as if killed before the end
    third = run_suite(suite, jobs=1, log=lambda *a: None)
    assert third["finished"] == ["scratch-E768-none-s1"] and third["skipped"] == 3


def test_more_finetuning_seeds_add_only_the_new_runs(micro, monkeypatch, tmp_path):
    """A finished suite rerun with finetune_seeds=2 fine-tunes every model once more (seed + 1000) from its kept
    checkpoint, pretrains nothing, keeps the first run's score and reports the mean; a third run skips all."""
    import albertlm.experiments.runner as runner

    suite, _ = micro
    shutil.copytree(suite.out, tmp_path / "out")
    more = replace(suite, out=tmp_path / "out", scale=replace(suite.scale, finetune_seeds=2))
    before = json.loads((more.out / "runs" / "E128-all-sop-s1" / "result.json").read_text())
    monkeypatch.setattr(runner, "pretrain_run", lambda *a, **k: pytest.fail("pretrained again"))
    summary = runner.run_suite(more, jobs=1, log=lambda *a: None)
    assert summary["failed"] == {} and summary["skipped"] == 0 and len(summary["finished"]) == 4
    after = json.loads((more.out / "runs" / "E128-all-sop-s1" / "result.json").read_text())
    sst2 = after["finetune"]["sst2"]
    assert sst2["seeds"] == [1, 1001] and sst2["scores"][0] == before["finetune"]["sst2"]["score"]
    assert sst2["score"] == pytest.approx(sum(sst2["scores"]) / 2)
    assert after["intrinsic"] == before["intrinsic"]
    assert (more.out / "scratch" / "scratch-E768-none-s1" / "finetune" / "sst2-s1001" / "result.json").is_file()
    again = runner.run_suite(more, jobs=1, log=lambda *a: None)
    assert again["finished"] == [] and again["skipped"] == 4
    assert runner.run_suite(suite, jobs=1, log=lambda *a: None)["skipped"] == 4   # fewer seeds: nothing to do


def test_more_pretraining_seeds_are_the_suites_and_its_reports(micro, monkeypatch, tmp_path):
    """--seeds 1 2 on a suite run with the scale's seed 1: not another scale, the new seed's runs are planned, and
    suite.json and the report state the seeds the suite ran with, not the scale's default."""
    import albertlm.experiments.runner as runner
    from albertlm.experiments.report import write_report

    suite, _ = micro
    shutil.copytree(suite.out, tmp_path / "out")
    more = runner.make_suite(tmp_path / "out", suite.scale, suite.grid, suite.train_text.parent, suite.glue_dir,
                             seeds=(1, 2))
    assert suite.scale.seeds == (1,) and more.scale.seeds == (1, 2)
    assert sorted(r.name for r in more.runs) == ["E128-all-sop-s1", "E128-all-sop-s2", "E768-none-sop-s1",
                                                 "E768-none-sop-s2"]
    assert runner.check_same_scale(more) == []
    monkeypatch.setattr(runner, "job_done", lambda suite, job: job.seed == 1)
    summary = runner.run_suite(more, jobs=1, log=lambda *a: None, max_jobs=1)   # one seed-2 job, then stop
    assert summary["failed"] == {} and summary["skipped"] == 4 and len(summary["finished"]) == 1
    assert json.loads((more.out / "suite.json").read_text())["scale"]["seeds"] == [1, 2]
    write_report(more.out)
    assert "pretraining seeds [1, 2]" in (more.out / "report.md").read_text()


def test_another_finetuning_protocol_needs_refinetune_and_pretrains_nothing(micro, monkeypatch, tmp_path):
    """A finished suite continued under another fine-tuning protocol (here SST-2 on 100 rows for 2 epochs, not 200
    for 1) is refused without --refinetune; with it, the old fine-tunings move to OUT/replaced/, every model is
    fine-tuned again from its kept weights with the new protocol, nothing is pretrained, and a rerun skips all."""
    import albertlm.experiments.runner as runner
    from albertlm.errors import UserError

    suite, _ = micro
    shutil.copytree(suite.out, tmp_path / "out")
    task = replace(suite.scale.finetune_tasks[0], max_train=100, epochs=2.0)
    other = replace(suite, out=tmp_path / "out", scale=replace(suite.scale, finetune_tasks=(task,)))
    job = other.out / "runs" / "E128-all-sop-s1"
    before = json.loads((job / "result.json").read_text())
    with pytest.raises(UserError, match="another protocol \\(sst2 epochs: 1.0 there, 2.0 now, max_train: 200 there, 100 now\\): add "
                                        "--refinetune"):
        runner.run_suite(other, jobs=1, log=lambda *a: None)
    monkeypatch.setattr(runner, "pretrain_run", lambda *a, **k: pytest.fail("pretrained again"))
    summary = runner.run_suite(other, jobs=1, log=lambda *a: None, refinetune=True)
    assert summary["failed"] == {} and summary["skipped"] == 0 and len(summary["finished"]) == 4
    after = json.loads((job / "result.json").read_text())
    assert after["intrinsic"] == before["intrinsic"] and after["pretrain"] == before["pretrain"]
    run = after["finetune"]["sst2"]["runs"][0]
    assert run["train_examples"] == 100 and before["finetune"]["sst2"]["runs"][0]["train_examples"] == 200

    def last_step(directory):
        return max(json.loads(line)["step"] for line in (directory / "metrics.jsonl").read_text().splitlines())

    old = next((other.out / "replaced").glob("*/runs/E128-all-sop-s1/finetune/sst2-s1"))
    assert json.loads((old / "result.json").read_text()) == before["finetune"]["sst2"]["runs"][0]
    assert last_step(job / "finetune" / "sst2-s1") == 2 * 7 and last_step(old) == 13   # 100 rows x 2 epochs, batch 16
    assert runner.run_suite(other, jobs=1, log=lambda *a: None)["skipped"] == 4
    assert json.loads((other.out / "prepared" / "prepared.json").read_text())["settings"]["finetune_tasks"][0][
        "max_train"] == 100


def test_cli_finetune_lr_changes_the_protocol_and_needs_refinetune(micro, capsys, tmp_path):
    """--finetune-lr on a finished suite is another fine-tuning protocol: refused without --refinetune (one line,
    exit 2, the suite untouched); a bad value is refused before anything runs."""
    from albertlm.cli.main import main

    suite, _ = micro
    shutil.copytree(suite.out, tmp_path / "out")
    before = (tmp_path / "out" / "suite.json").read_text()
    common = ["ablate", "--grid", suite.grid, "--scale", "smoke", "--max-steps", "6", "--corpus",
              str(suite.train_text.parent), "--glue-dir", str(suite.glue_dir), "--out", str(tmp_path / "out")]
    capsys.readouterr()
    assert main(common + ["--finetune-lr", "5e-4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "finetune_lr: 0.001 there, 0.0005 now): add --refinetune" in err
    assert (tmp_path / "out" / "suite.json").read_text() == before
    assert main(common + ["--finetune-lr", "-1"]) == 2
    assert "--finetune-lr must be a finite number >= 0 (0 = the default), got -1.0" in capsys.readouterr().err
    assert main(common + ["--finetune-seeds", "-2"]) == 2
    assert "--finetune-seeds must be >= 0" in capsys.readouterr().err
    assert main(common) == 0                          # without it, the scale's lr: the same protocol, all skipped
    assert "0 jobs run, 4 skipped, 0 failed" in capsys.readouterr().out


def test_which_finetunings_a_protocol_change_makes_stale():
    from albertlm.experiments.runner import _changed_finetuning

    sst2 = {"name": "sst2", "dir_name": "SST-2", "max_train": 8000, "epochs": 2.0}
    stsb = {"name": "stsb", "dir_name": "STS-B", "max_train": 0, "epochs": 3.0}
    old = {"finetune_tasks": [sst2, stsb], "finetune_lr": 1e-3, "finetune_batch_size": 32, "finetune_seq_length": 64}
    assert _changed_finetuning(old, old) == ([], "")
    longer = dict(old, finetune_tasks=[sst2, dict(stsb, epochs=10.0)])
    assert _changed_finetuning(old, longer) == (["stsb"], "stsb epochs: 3.0 there, 10.0 now")
    assert _changed_finetuning(old, dict(old, finetune_tasks=[sst2])) == (["stsb"], "stsb is no longer fine-tuned")
    assert _changed_finetuning(old, dict(old, finetune_tasks=[sst2, stsb, dict(stsb, name="rte")]))[0] == []  # added
    assert _changed_finetuning(old, dict(old, finetune_lr=5e-4)) == (["sst2", "stsb"], "finetune_lr: 0.001 there, "
                                                                                      "0.0005 now")


def test_a_suite_at_another_scale_is_refused(micro):
    from albertlm.errors import UserError
    from albertlm.experiments.runner import run_suite

    suite, _ = micro
    before = (suite.out / "suite.json").read_text()
    with pytest.raises(UserError, match="another scale \\(max_steps: 6 there, 7 now"):
        run_suite(replace(suite, scale=replace(suite.scale, max_steps=7)), jobs=1, log=lambda *a: None)
    assert (suite.out / "suite.json").read_text() == before


def test_cli_lists_the_jobs(capsys, tmp_path):
    from albertlm.cli.main import main

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "train.txt").write_text("a\n")
    (corpus / "heldout.txt").write_text("b\n")
    assert main(["ablate", "--grid", "table5", "--scale", "cpu", "--corpus", str(corpus), "--out",
                 str(tmp_path / "o"), "--list-jobs"]) == 0
    out = capsys.readouterr().out
    assert out.count("pretrain") == 6 and out.count("scratch ") == 2
    assert '"embedding_size": 32' in out
    assert main(["ablate", "--grid", "table5", "--scale", "cpu-v1", "--corpus", str(corpus), "--out",
                 str(tmp_path / "v1"), "--list-jobs"]) == 0
    assert '"embedding_size": 16' in capsys.readouterr().out
    assert main(["ablate", "--grid", "table9", "--corpus", str(corpus), "--out", str(tmp_path / "o")]) == 2


def test_cli_refuses_what_is_not_a_suite_before_running(capsys, tmp_path):
    """--report-only on a directory that is no suite, --out naming a file, and a --glue-dir without the scale's
    tasks: one line each, exit 2, nothing written."""
    from albertlm.cli.main import main

    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "train.txt").write_text("a\n")
    (corpus / "heldout.txt").write_text("b\n")
    capsys.readouterr()
    assert main(["ablate", "--out", str(tmp_path), "--report-only"]) == 2
    assert "not an ablation suite (no suite.json)" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(corpus), "--out",
                 str(tmp_path / "afile")]) == 2
    assert "is a file, not a suite directory" in capsys.readouterr().err
    assert main(["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(corpus), "--out",
                 str(tmp_path / "o"), "--glue-dir", str(tmp_path)]) == 2
    assert "no SST-2 folder" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_quiet_suite_keeps_a_fine_tunings_output_in_its_directory(micro, capfd, tmp_path):
    """The suite's output is one line per job: what a fine-tuning prints (eval lines, data notes, saved checkpoints,
    warnings) goes to output.log beside it, not to the terminal; a suite that is not quiet shows it."""
    from albertlm.experiments.runner import OUTPUT, finetune_one

    suite, _ = micro
    task = suite.scale.finetune_tasks[0]
    model_dir = suite.out / "scratch" / "scratch-E128-all-s1" / "init"
    capfd.readouterr()
    finetune_one(suite, model_dir, task, 7, tmp_path / "ft")
    assert capfd.readouterr() == ("", "")
    kept = (tmp_path / "ft" / OUTPUT).read_text()
    assert "eval: dev/accuracy" in kept and "note: " in kept and "saved " in kept
    finetune_one(replace(suite, quiet=False), model_dir, task, 7, tmp_path / "loud")
    assert "eval: dev/accuracy" in capfd.readouterr().out and not (tmp_path / "loud" / OUTPUT).exists()


def test_a_stopped_fine_tuning_records_no_result(micro, monkeypatch, tmp_path):
    """A fine-tuning stopped by SIGTERM / Ctrl-C / the budget returns {"status": ...}: the job must fail (a rerun
    redoes it), not record a score of 0 as finished."""
    import albertlm.tasks.finetune as finetune
    from albertlm.experiments.runner import finetune_one

    suite, _ = micro
    monkeypatch.setattr(finetune, "run_finetune", lambda *a, **k: {"status": "interrupted"})
    task = suite.scale.finetune_tasks[0]
    model_dir = suite.out / "scratch" / "scratch-E128-all-s1" / "init"
    with pytest.raises(RuntimeError, match="stopped: interrupted"):
        finetune_one(suite, model_dir, task, 1, tmp_path / "ft")
    assert not (tmp_path / "ft" / "result.json").exists()


def test_a_signal_stops_a_serial_suite_not_only_its_job(micro, monkeypatch, tmp_path):
    """With --jobs 1 the jobs run in this process, whose training loop turns SIGTERM / Ctrl-C into "interrupted":
    the suite must stop there (and the CLI exit 130), not record a failure and start the next job."""
    import albertlm.training.pretrain as pretrain
    from albertlm.experiments.runner import run_suite

    suite, _ = micro
    shutil.copytree(suite.out, tmp_path / "out")
    copy = replace(suite, out=tmp_path / "out")
    for job in ("runs/E128-all-sop-s1", "scratch/scratch-E768-none-s1"):
        (copy.out / job / "result.json").unlink()
    monkeypatch.setattr(pretrain, "pretrain", lambda *a, **k: "interrupted")
    with pytest.raises(KeyboardInterrupt):
        run_suite(copy, jobs=1, log=lambda *a: None)
    assert not (copy.out / "scratch" / "scratch-E768-none-s1" / "result.json").exists()   # not started


def test_training_curve_keeps_the_latest_record_of_a_resumed_step(tmp_path):
    from albertlm.experiments.runner import _curve

    rows = [{"step": 1, "split": "train", "mlm_acc": 0.1}, {"step": 2, "split": "train", "mlm_acc": 0.2},
            {"step": 2, "split": "eval", "mlm_acc": 0.3}, {"step": 2, "split": "train", "mlm_acc": 0.25}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step"')  # killed mid-line
    assert _curve(tmp_path) == [{"step": 1, "mlm_acc": 0.1}, {"step": 2, "mlm_acc": 0.25}]


def test_unigram_baseline_matches_a_direct_count(micro):
    """The MLM baseline: the most frequent training target at every held-out masked slot, and the smoothed
    unigram cross-entropy, recomputed here instance by instance."""
    import math
    from collections import Counter

    from albertlm.data.loader import PretrainingDataset
    from albertlm.experiments.evaluation import unigram_baseline
    from albertlm.experiments.report import mlm_baseline

    suite, _ = micro
    train, heldout = suite.data("train", "sop"), suite.data("heldout", "sop")

    def targets(dataset):
        return [int(t) for i in range(len(dataset)) for t, w in
                zip(dataset[i]["masked_lm_ids"], dataset[i]["masked_lm_weights"]) if w > 0]

    counts = Counter(targets(PretrainingDataset(train)))
    held = targets(PretrainingDataset(heldout))
    vocab = PretrainingDataset(train).meta["tokenizer"]["vocab_size"]
    top = max(counts, key=lambda t: (counts[t], -t))
    total = sum(counts.values()) + 0.5 * vocab
    got = unigram_baseline(train, heldout)
    assert got["acc"] == pytest.approx(sum(t == top for t in held) / len(held))
    assert got["loss"] == pytest.approx(-sum(math.log((counts[t] + 0.5) / total) for t in held) / len(held))
    assert got["heldout_targets"] == len(held) and got["train_targets"] == sum(counts.values())
    assert 0.0 < got["acc"] < 0.5
    sampled = unigram_baseline(train, heldout, max_train=50)       # an evenly spaced sample of the training data
    assert sampled["train_targets"] < got["train_targets"]
    assert mlm_baseline(suite.out) == pytest.approx(got)           # the report's, cached
    assert (suite.out / "prepared" / "unigram_baseline.json").is_file()


def test_preparation_uses_the_cores_for_a_large_corpus(tmp_path, monkeypatch):
    """The data build before any job gets every core (up to 16) for a corpus worth it, one per job below
    that: on the gpu scale's 16-core machine 3 workers took ~5 minutes, 14 took ~25 s (same bytes)."""
    from albertlm.experiments import runner

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.txt").write_text("a b c\n" * 10)
    (corpus / "heldout.txt").write_text("a b c\n")
    suite = runner.make_suite(tmp_path / "out", runner.get_scale("smoke"), "table5", corpus, tmp_path)
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert runner.prepare_workers(suite, 1) == 1 and runner.prepare_workers(suite, 3) == 3
    monkeypatch.setattr(runner, "PREPARE_PARALLEL_CHARS", 10)
    assert runner.prepare_workers(suite, 1) == 16 and runner.prepare_workers(suite, 20) == 20
    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert runner.prepare_workers(suite, 1) == 2


def test_report_counts_one_run_in_the_singular(micro, tmp_path):
    import shutil

    from albertlm.experiments.report import write_report

    suite, _ = micro
    copy = tmp_path / "suite"
    shutil.copytree(suite.out, copy, ignore=shutil.ignore_patterns("*.safetensors", "prepared"))
    shutil.rmtree(copy / "runs" / "E768-none-sop-s1")
    shutil.rmtree(copy / "scratch" / "scratch-E768-none-s1")
    write_report(copy)
    assert "Finished: 1 pretraining run and 1 no-pretraining baseline of 4 jobs planned." in (
        copy / "report.md").read_text()
