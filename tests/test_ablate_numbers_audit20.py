"""`albertlm ablate`, audit 20: the numbers the suite computes and reports, each against a reference computed
here. The report's protocol line named SST-2's and STS-B's metrics whatever the scale fine-tuned on (the gpu
scale's RTE and CoLA); one seed's "sample standard deviation" was 0.0 in results.json; the Figure 1 table did
not say when a model's seed mean was over another number of seeds than 2; claim 3's "at most 3 points" failed
at exactly 3 points (floats); the report did not say that the paper counts the pooler in its shared rows only.
Nothing here pretrains: the report is written from result.json files made here."""
from __future__ import annotations

import json
import math

import pytest
import torch

from albertlm.experiments.scales import FinetuneTask
from test_report_audit18 import _claim, _planned, _row, _write


def _report(suite) -> tuple[str, dict]:
    """The report written for `suite`: report.md and results.json, read as the UTF-8 they are written in (the
    report has "±" and "²"; test_report_audit18's `_report` reads the locale's encoding, ASCII under LC_ALL=C
    without Python's UTF-8 mode)."""
    from albertlm.experiments.report import write_report

    write_report(suite.out, warn=lambda message: None)
    return ((suite.out / "report.md").read_text(encoding="utf-8"),
            json.loads((suite.out / "results.json").read_text(encoding="utf-8")))


def _with_transitions(suite, job, l2: list[float], cosine: list[float]) -> None:
    """Add Figure 1's measurements to a job's result.json (as the runner records them)."""
    path = suite.out / job.directory / "result.json"
    result = json.loads(path.read_text())
    result["transitions"] = {"l2": l2, "cosine": cosine}
    path.write_text(json.dumps(result))


# ------------------------------------------------------------------------------------- which metric is reported
def test_the_protocol_line_names_each_fine_tuning_tasks_metric(tmp_path):
    """The gpu scale fine-tunes RTE and CoLA too; the report said "SST-2 accuracy, STS-B mean of Pearson and
    Spearman" for any scale, so CoLA's Matthews correlation read as an unnamed number."""
    tasks = (FinetuneTask("rte", "RTE", 0, 1.0), FinetuneTask("cola", "CoLA", 0, 1.0), FinetuneTask("stsb", "STS-B"))
    suite, jobs = _planned(tmp_path, [{"name": "a"}], finetune_tasks=tasks)
    _write(suite, jobs["a-s1"], {"rte": 0.55, "cola": 0.1, "stsb": 0.2})
    report, results = _report(suite)
    protocol = next(line for line in report.splitlines() if line.startswith("Scale **smoke**"))
    assert ("dev scores of the best epoch (RTE accuracy, CoLA Matthews correlation, STS-B mean of Pearson and "
            "Spearman (best epoch by Pearson)), x100." in protocol), protocol
    assert "SST-2" not in protocol
    # the Avg is the mean of the three tasks' scores (STS-B's already the mean of its two correlations)
    assert results["aggregate"]["variants"]["a"]["ft_avg"]["mean"] == pytest.approx((0.55 + 0.1 + 0.2) / 3)


# -------------------------------------------------------------------------------------- one seed, two seeds
def test_one_seed_has_no_sample_standard_deviation(tmp_path):
    """With one seed results.json gave "sd": 0.0, a spread of nothing measured as none; two seeds give the
    sample (n - 1) standard deviation."""
    suite, jobs = _planned(tmp_path, [{"name": "a"}], seeds=(1, 2))
    _write(suite, jobs["a-s1"], {"sst2": 0.8}, mlm_acc=0.12)
    for seed, score in ((1, 0.70), (2, 0.74)):
        _write(suite, jobs[f"scratch-a-s{seed}"], {"sst2": score})
    report, results = _report(suite)
    one = results["aggregate"]["variants"]["a"]
    assert one["mlm_acc"]["n"] == 1 and one["mlm_acc"]["sd"] is None and one["ft_avg"]["sd"] is None
    assert _row(report, "No pretraining", "a")[2:] == ["80.0 (1)", "80.0 (1)", "72.0 ± 2.8", "+8.0"]
    assert (suite.out / "downstream.png").is_file()            # drawn without an error bar for the one seed
    two = results["aggregate"]["shapes"]["scratch-a"]["ft_avg"]
    reference = math.sqrt(((0.70 - 0.72) ** 2 + (0.74 - 0.72) ** 2) / (2 - 1))
    assert two["n"] == 2 and two["sd"] == pytest.approx(reference) and two["mean"] == pytest.approx(0.72)


# ----------------------------------------------------------------------------------------------- Figure 1
def test_the_figure_1_table_names_a_seed_count_other_than_2(tmp_path):
    """ALBERT measured with seeds 1 and 2, BERT with seed 1 only (seed 2 not finished): the table's seed means
    looked alike; every other cell of the report names a count other than 2."""
    suite, jobs = _planned(tmp_path, "figure1", seeds=(1, 2))
    albert = {1: ([3.0, 2.0, 1.5], [0.8, 0.9, 0.95]), 2: ([5.0, 2.0, 1.0], [0.9, 0.9, 0.97])}
    for seed, (l2, cosine) in albert.items():
        _write(suite, jobs[f"E128-all-sop-s{seed}"], {"sst2": 0.8})
        _with_transitions(suite, jobs[f"E128-all-sop-s{seed}"], l2, cosine)
    _write(suite, jobs["E768-none-sop-s1"], {"sst2": 0.8})
    _with_transitions(suite, jobs["E768-none-sop-s1"], [2.0, 4.0, 1.0], [0.9, 0.7, 0.95])
    report, results = _report(suite)
    table = report.split("## Figure 1")[1].split("\n## ")[0]
    head = next(line for line in table.splitlines() if line.startswith("| layer"))
    assert head == "| layer | ALBERT L2 | BERT L2 (1) | ALBERT cos | BERT cos (1) | ALBERT angle ° | BERT angle ° (1) |", head
    assert _row(report, "Figure 1", "1") == ["1", "4.000", "2.000", "0.850", "0.900", "31.8", "25.8"]
    # claim 4 on the seed means: mean |change| over layers 2..3 is |1.25 - 2| vs |1 - 4|, |0.96 - 0.9| vs |0.95 - 0.7|
    claim = results["claims"]["4"]
    assert claim["albert_roughness"] == pytest.approx({"l2": 0.75, "cosine": 0.06})
    assert claim["bert_roughness"] == pytest.approx({"l2": 3.0, "cosine": 0.25})
    assert claim["holds"] is None and claim["why"].startswith("holds so far")   # BERT has 1 of its 2 seeds


def test_layer_transitions_are_one_mean_over_every_real_token_of_every_batch(tiny_config):
    """Two batches with different amounts of padding: each layer's number is the mean over all real tokens
    (not the mean of batch means), the padding left out; checked against per-token vectors taken by hand."""
    from albertlm.experiments.evaluation import layer_transitions
    from albertlm.model.albert import AlbertForPreTraining, attention_bias

    torch.manual_seed(1)
    model = AlbertForPreTraining(tiny_config.replace(num_layers=3)).eval()     # all-shared: one block 3 times
    batches = []
    for rows, length, real in ((2, 9, (9, 4)), (3, 6, (1, 6, 2))):
        mask = (torch.arange(length)[None, :] < torch.tensor(real)[:, None]).long()
        batches.append({"input_ids": torch.randint(5, 99, (rows, length)), "attention_mask": mask,
                        "token_type_ids": torch.zeros(rows, length, dtype=torch.long)})
    got = layer_transitions(model, batches)
    l2 = [[] for _ in range(3)]
    cos = [[] for _ in range(3)]
    with torch.no_grad():
        enc = model.albert.encoder
        for batch in batches:
            mask = batch["attention_mask"]
            x = model.albert.embeddings(batch["input_ids"], batch["token_type_ids"])
            for layer, (a, f) in enumerate(enc.plan):
                y = enc.ffns[f](enc.attentions[a](x, attention_bias(mask)))
                for b, t in mask.nonzero().tolist():
                    u, v = x[b, t].double(), y[b, t].double()
                    l2[layer].append(float((v - u).norm()))
                    cos[layer].append(float(u @ v / (u.norm() * v.norm())))
                x = y
    assert len(l2[0]) == 9 + 4 + 1 + 6 + 2
    assert got["l2"] == pytest.approx([sum(v) / len(v) for v in l2], rel=1e-5)
    assert got["cosine"] == pytest.approx([sum(v) / len(v) for v in cos], rel=1e-5)


# ---------------------------------------------------------------------------------------------------- claim 3
def test_claim_3_at_exactly_three_points_holds(tmp_path):
    """"All-shared at most 3 points below not-shared": 50.0 vs 47.0 at both E is 3 points, but 0.50 - 0.47 is
    0.030000000000000027 in floats, so the half read "does not hold"."""
    suite, jobs = _planned(tmp_path, "table3", seeds=(1, 2))
    for name, job in jobs.items():
        if job.kind == "pretrain":
            _write(suite, job, {"sst2": 0.50 if job.run.model["sharing"] == "none" else 0.47})
    report, results = _report(suite)
    assert results["claims"]["3"]["parts"]["all_shared_cost"] is True, results["claims"]["3"]
    assert results["claims"]["3"]["all_shared_cost"] == pytest.approx({"768": 3.0, "128": 3.0})
    assert "all-shared's cost: holds (3.0 and 3.0 Avg points" in _claim(report, "3")


# ----------------------------------------------------------------------------------------- parameter counts
def test_parameter_counts_against_the_papers_tables_and_the_reports_note(tmp_path):
    """Ours count the pooler in every row; the paper's Tables 3 and 4 count it in their shared rows only. At the
    paper's size (the gpu scale: H 768, L 12, V 30000) ours less the pooler (H² + H) round to the not-shared rows,
    ours to the shared ones; the report's two transcriptions of the paper agree with the presets'; the report
    says how each side counts (it said nothing, and the docs called ours "the paper's way")."""
    from albertlm.config.presets import ABLATION_PARAMS
    from albertlm.experiments import report
    from albertlm.experiments.evaluation import count_parameters
    from albertlm.experiments.grids import PAPER_VARIANTS, base_model
    from albertlm.experiments.scales import get_scale

    scale = get_scale("gpu")
    pooler = 768 * 768 + 768
    for variant in PAPER_VARIANTS.values():
        key = (variant.embedding, variant.sharing)
        if key not in ABLATION_PARAMS:
            continue
        ours = count_parameters(base_model(scale).replace(**variant.model_overrides(scale)))
        counted = ours - pooler if variant.sharing == "none" else ours
        assert round(counted / 1e6) == ABLATION_PARAMS[key], (variant.label, ours)
    for (sharing, e), row in report.PAPER_TABLE3.items():
        assert row[0] == ABLATION_PARAMS[(e, sharing)]
    for key, row in report.PAPER_TABLE4.items():
        assert row[0] == ABLATION_PARAMS[key]
    suite, jobs = _planned(tmp_path, [{"name": "a"}])
    _write(suite, jobs["a-s1"], {"sst2": 0.8})
    text, _ = _report(suite)
    assert ("Params (ours): embeddings + encoder + pooler, heads apart; the paper's shared rows count the pooler, "
            "its not-shared rows leave it out") in text


# ------------------------------------------------------------------------------------ the same budget for all
def test_every_pretraining_job_of_the_paper_grid_gets_the_same_budget_order_and_seeds():
    """Every job of `paper` at the cpu scale: the same steps, batch, optimizer, schedule, precision and held-out
    evaluation; its seed one of the scale's; its data the prepared data of its sentence task; every variant
    with every seed, every shape's baseline with every seed."""
    from pathlib import Path

    from albertlm.experiments import grids
    from albertlm.experiments.runner import Suite, plan_jobs, run_config
    from albertlm.experiments.scales import get_scale

    scale = get_scale("cpu")
    runs = grids.expand(grids.resolve_grids("paper"), scale)
    suite = Suite(Path("/nowhere"), scale, "paper", runs, Path("t"), Path("h"), Path("g"))
    jobs = plan_jobs(runs)
    settings = set()
    for job in jobs:
        if job.kind != "pretrain":
            continue
        cfg = run_config(suite, job.run, job.run.task)
        assert cfg.train.seed == job.seed and job.seed in scale.seeds
        assert cfg.data.path.endswith(f"train_{job.run.task}")
        assert cfg.data.eval_path.endswith("heldout_nsp" if job.run.task == "nsp" else "heldout_sop")
        settings.add(json.dumps([cfg.train.max_steps, cfg.train.batch_size, cfg.train.micro_batch_size,
                                 cfg.train.precision, cfg.train.eval_every, cfg.train.eval_batches,
                                 cfg.optim.to_dict() if hasattr(cfg.optim, "to_dict") else repr(cfg.optim),
                                 cfg.model.max_position_embeddings, cfg.model.vocab_size], default=str))
    assert len(settings) == 1, settings
    assert len({r.variant for r in runs}) == 15 and len(runs) == 15 * len(scale.seeds)
    baselines = [job for job in jobs if job.kind == "scratch"]
    shapes = {job.run.shape_key for job in jobs if job.kind == "pretrain"}
    assert len(baselines) == len(shapes) * len(scale.seeds) == 13 * 2
    assert {(job.run.shape_key, job.seed) for job in baselines} == {(s, seed) for s in shapes for seed in scale.seeds}
