"""The lead's follow-ups of the thirtieth session's audits."""
from __future__ import annotations

import json

import torch

from albertlm.model.albert import AlbertForPreTraining
from albertlm.training.pretrain import PretrainingObjective
from test_skip_padding import config, padded_batch


def test_the_pretraining_objective_counts_a_minus_100_id_for_nothing_as_the_model_does():
    """A caller's own batch may mark a slot "no label" with -100 and a weight of 1 (transformers' convention):
    the objective counted it as a miss of class 0 in its loss, accuracy and denominator, where the model's own
    `mlm_loss` (since the thirtieth session) counts it for nothing. Both now agree."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(config("all")).eval()
    batch = dict(padded_batch())
    ids, weights = batch["masked_lm_ids"].clone(), batch["masked_lm_weights"].clone()
    assert (weights > 0).sum() >= 3
    slot = (weights > 0).nonzero()[0]
    ids[tuple(slot)] = -100           # weight stays 1
    batch["masked_lm_ids"] = ids
    objective = PretrainingObjective(skip_padding=False)
    denominators = objective.denominators([batch])
    assert denominators[0].item() == weights.sum().item() - 1
    with torch.no_grad():
        _, stats = objective.forward(model, batch, denominators)
        out = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "masked_lm_positions",
                                             "masked_lm_ids", "masked_lm_weights", "sentence_order_label")})
    summary = objective.summarize(stats)
    torch.testing.assert_close(torch.tensor(summary["mlm_loss"]), out["mlm_loss"].float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.tensor(summary["mlm_acc"]), out["mlm_accuracy"].float(), atol=1e-6, rtol=0)


def test_evaluate_classify_scores_a_hub_parquet_gold_file_by_its_class_names(tmp_path, capsys):
    """A run trained on a ClassLabel Parquet file predicts class names (glue30); `evaluate classify --predictions`
    read the gold file's ids as the labels "0", "1" and stopped ("label '1' is not in the label set"): the gold
    file's ids are its ClassLabel names too."""
    from albertlm.cli.main import main
    from test_glue_audit30 import _hub_split

    names = ["negative", "positive"]
    gold = _hub_split(tmp_path / "dev.parquet", [1, 0, 1, 1], names)
    predictions = tmp_path / "dev_predictions.tsv"
    predictions.write_text("id\tprediction\tp_negative\tp_positive\n0\tpositive\t0.2\t0.8\n1\tpositive\t0.4\t0.6\n"
                           "2\tpositive\t0.1\t0.9\n3\tnegative\t0.7\t0.3\n")
    code = main(["evaluate", "classify", "--predictions", str(predictions), "--dev", str(gold)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["accuracy"] == 0.5


def test_the_8x_sop_section_states_the_means_of_its_seed_rows():
    """paper.md's 8x SOP section: the mean ± sd line follows from the per-seed table (Avg, held-out SOP and NSP,
    MLM), Δ is over the scratch column's mean, every SOP seed beats every scratch seed (claim 5), and README
    quotes the same means."""
    import re
    import statistics
    from pathlib import Path

    from test_docs_audit27 import _flat

    text = Path(__file__).resolve().parents[1].joinpath("docs", "paper.md").read_text(encoding="utf-8")
    start = text.index("### The SOP model with eight times the tokens")
    section = text[start:text.index("\n## ", start)]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if re.match(r"\| [1-4] \|", line)]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]

    def first(cell: str) -> float:
        return float(cell.split()[0])

    columns = {"MLM": 1, "SOP": 2, "NSP": 3, "Avg": 7, "scratch": 8}
    values = {name: [first(r[i]) for r in rows] for name, i in columns.items()}
    flat = " ".join(section.split())
    for name, said in (("MLM", "MLM"), ("SOP", "held-out SOP"), ("NSP", "the SOP model on NSP"),
                       ("Avg", "downstream Avg"), ("scratch", "scratch")):
        mean, sd = re.search(rf"{said} (\d+\.\d) ± (\d+\.\d)", flat).groups()
        assert abs(statistics.mean(values[name]) - float(mean)) <= 0.06, name
        assert abs(statistics.stdev(values[name]) - float(sd)) <= 0.06, name
    delta = float(re.search(r"Δ \+(\d+\.\d)", flat).group(1))
    assert abs(statistics.mean(values["Avg"]) - statistics.mean(values["scratch"]) - delta) <= 0.11
    assert min(values["Avg"]) > max(values["scratch"])
    readme = _flat("README.md")
    assert "60.1 ± 1.0 held out" in readme and "54.8 ± 0.8 on NSP" in readme and "47.4 ± 1.3" in readme
