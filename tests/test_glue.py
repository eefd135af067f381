"""GLUE readers on the real files in ../shared/data, metrics against independent formulas, submission format."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import rankdata

from albertlm.errors import UserError
from albertlm.tasks import glue, metrics
from albertlm.tasks.tables import Problems
from conftest import shared_path


@pytest.mark.parametrize("task,path,rows,labels", [
    ("cola", ("glue", "CoLA", "train.tsv"), 7250, {"0": 2162, "1": 5088}),   # no header
    ("cola", ("glue", "CoLA", "val.tsv"), 1301, {"0": 366, "1": 935}),
    ("rte", ("glue", "RTE", "train.tsv"), 2127, {"entailment": 1078, "not_entailment": 1049}),  # header
    ("rte", ("glue", "RTE", "val.tsv"), 363, {"entailment": 171, "not_entailment": 192}),       # no header
    ("sst2", ("glue", "SST-2", "train.tsv"), 67349, {"0": 29780, "1": 37569}),
    ("sst2", ("glue", "SST-2", "dev.tsv"), 872, {"0": 428, "1": 444}),
    ("wnli", ("glue", "WNLI", "train.tsv"), 565, {"0": 288, "1": 277}),
    ("wnli", ("glue", "WNLI", "val.tsv"), 70, {"0": 35, "1": 35}),
    ("mrpc", ("glue", "MRPC", "msr_paraphrase_train.txt"), 4076, {"0": 1323, "1": 2753}),    # BOM
    ("mrpc", ("glue_samples", "MRPC", "dev.tsv"), 6, {"0": 3, "1": 3}),
])
def test_reader_rows_and_labels(task, path, rows, labels):
    examples = glue.read_examples(task, shared_path(*path))
    assert len(examples) == rows
    assert Counter(e.label for e in examples) == labels
    assert all(e.text_a.strip() for e in examples)


def test_headers_and_bom_are_not_rows():
    cola = glue.read_examples("cola", shared_path("glue", "CoLA", "train.tsv"))
    assert cola[0].text_a == "Our friends won't buy this analysis, let alone the next one we propose."
    assert cola[0].text_b is None
    rte = glue.read_examples("rte", shared_path("glue", "RTE", "val.tsv"))
    assert rte[0].guid == "2" and rte[0].text_b.startswith("Herceptin can be used")
    mrpc = glue.read_examples("mrpc", shared_path("glue", "MRPC", "msr_paraphrase_train.txt"))
    assert mrpc[0].text_a.startswith("Amrozi accused his brother")
    assert mrpc[0].text_b.startswith('Referring to him as only "the witness"')  # quotes kept (no CSV quoting)


def test_stsb_is_regression():
    train = glue.read_examples("stsb", shared_path("glue", "STS-B", "train.tsv"))
    dev = glue.read_examples("stsb", shared_path("glue", "STS-B", "dev.tsv"))
    assert (len(train), len(dev)) == (5749, 1500)
    scores = glue.label_ids(glue.get_task("stsb"), train)
    assert min(scores) == 0.0 and max(scores) == 5.0 and train[0].label == 5.0
    assert train[0].text_a == "A plane is taking off." and train[0].text_b == "An air plane is taking off."


def test_split_discovery_uses_val_when_dev_is_absent():
    task = glue.get_task("CoLA")
    assert [p.name for p in glue.find_split(task, shared_path("glue", "CoLA"), "dev")] == ["val.tsv"]
    assert [p.name for p in glue.find_split(task, shared_path("glue", "SST-2"), "dev")] == ["dev.tsv"]
    mrpc = glue.get_task("mrpc")
    assert [p.name for p in glue.find_split(mrpc, shared_path("glue", "MRPC"), "train")] == \
        ["msr_paraphrase_train.txt"]
    assert glue.get_task("mnli").dev_files == ("dev_matched.tsv", "dev_mismatched.tsv")


def test_bad_rows_name_file_and_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tonly one field\n")
    with pytest.raises(UserError, match=r"train\.tsv:3: 2 tab-separated fields"):
        glue.read_examples("rte", path)
    problems = Problems()
    assert len(glue.read_examples("rte", path, problems=problems)) == 1
    assert problems.counts["malformed row skipped"] == 1 and problems.examples["malformed row skipped"][0].endswith(":3")
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tcontradiction\n")
    with pytest.raises(UserError, match=r"train\.tsv:3: label 'contradiction' is not one of rte's labels"):
        glue.read_examples("rte", path)
    with pytest.raises(UserError, match="unknown GLUE task"):
        glue.get_task("sst3")


def test_submission_round_trip(tmp_path):
    task = glue.get_task("rte")
    examples = glue.read_examples(task, shared_path("glue", "RTE", "val.tsv"))[:5]
    glue.write_submission(task, examples, [0, 1, 1, 0, 1], tmp_path / "RTE.tsv", by_guid=True)
    lines = (tmp_path / "RTE.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and lines[1] == "2\tentailment" and lines[2] == "7\tnot_entailment"
    stsb = glue.get_task("stsb")
    glue.write_submission(stsb, examples, [1.23456, 4.0, 0.0, 5.0, 2.5], tmp_path / "STS-B.tsv")
    assert glue.read_predictions(stsb, tmp_path / "STS-B.tsv") == {"0": 1.23456, "1": 4.0, "2": 0.0, "3": 5.0, "4": 2.5}


# --- metrics against formulas written independently of scikit-learn / scipy ---------------------------------


def _mcc(y, p):
    tp = np.sum((y == 1) & (p == 1)); tn = np.sum((y == 0) & (p == 0))
    fp = np.sum((y == 0) & (p == 1)); fn = np.sum((y == 1) & (p == 0))
    return (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classification_metrics_match_formulas(seed):
    rng = np.random.default_rng(seed)
    y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    out = metrics.glue_metrics("mrpc", y, p)
    tp = np.sum((y == 1) & (p == 1))
    assert out["accuracy"] == pytest.approx(np.mean(y == p))
    assert out["f1"] == pytest.approx(2 * tp / (np.sum(y == 1) + np.sum(p == 1)))
    assert metrics.glue_metrics("cola", y, p)["mcc"] == pytest.approx(_mcc(y, p))
    y3, p3 = rng.integers(0, 3, 100), rng.integers(0, 3, 100)
    assert metrics.glue_metrics("mnli", y3, p3) == {"accuracy": pytest.approx(np.mean(y3 == p3))}


@pytest.mark.parametrize("seed", [0, 1])
def test_correlations_match_formulas(seed):
    rng = np.random.default_rng(seed)
    y = rng.uniform(0, 5, 300)
    p = y + rng.normal(0, 1.5, 300)
    out = metrics.glue_metrics("stsb", y, p)
    assert out["pearson"] == pytest.approx(np.corrcoef(y, p)[0, 1])
    assert out["spearman"] == pytest.approx(np.corrcoef(rankdata(y), rankdata(p))[0, 1])
    assert metrics.glue_metrics("stsb", y, np.ones_like(y))["pearson"] == 0.0  # constant: defined as 0


class WordTokenizer:
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + len(w) % 90 for w in t.split()] for t in texts]


def _mnli_row(i, n_cols, label):
    cells = [str(i), "p", "p", "g", "s1", "s2", "s3", "s4", f"premise {i}", f"hypothesis {i}"]
    cells += ["x"] * (n_cols - len(cells) - 1)
    return "\t".join(cells + ([label] if label else [])) + "\n"


def test_mnli_layout_matched_mismatched_and_ax(tmp_path):
    """MNLI's train (12 columns) and dev (16 columns) keep gold_label last; test and AX have no label."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks.specs import glue_spec

    labels = ["entailment", "neutral", "contradiction"]
    header = "\t".join(["index"] + [f"c{i}" for i in range(10)] + ["gold_label"]) + "\n"
    (tmp_path / "train.tsv").write_text(header + "".join(_mnli_row(i, 12, labels[i % 3]) for i in range(9)))
    dev_header = "\t".join(["index"] + [f"c{i}" for i in range(14)] + ["gold_label"]) + "\n"
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        (tmp_path / name).write_text(dev_header + "".join(_mnli_row(i, 16, labels[i % 3]) for i in range(6)))
    (tmp_path / "test_matched.tsv").write_text("index\t" + "\t".join(f"c{i}" for i in range(9)) + "\n"
                                               + "".join(_mnli_row(i, 11, None)[:-1] + "\n" for i in range(4)))
    (tmp_path / "diagnostic.tsv").write_text("index\tsentence1\tsentence2\n0\tA man.\tA person.\n1\tx\ty\n")
    cfg = FinetuneConfig(max_seq_length=16)
    spec = glue_spec("mnli", WordTokenizer(), cfg, data_dir=tmp_path,
                     test_files=[tmp_path / "test_matched.tsv", tmp_path / "diagnostic.tsv"])
    assert len(spec.train) == 9 and spec.model_overrides == {"num_labels": 3}
    assert [s.name for s in spec.eval_sets] == ["dev_matched", "dev_mismatched", "test:test_matched.tsv",
                                                "test:diagnostic.tsv"]
    assert [f.label for f in spec.train[:3]] == [1, 2, 0]   # entailment, neutral, contradiction ids
    logits = np.eye(3)[[1, 2, 0, 1, 2, 0]]
    assert spec.eval_sets[0].score({"logits": logits})["accuracy"] == 1.0
    for eval_set, rows in ((spec.eval_sets[2], 4), (spec.eval_sets[3], 2)):
        eval_set.write({"logits": np.eye(3)[[0] * rows]}, tmp_path)
    assert (tmp_path / "submission" / "MNLI-m.tsv").read_text().splitlines()[1] == "0\tcontradiction"
    assert (tmp_path / "submission" / "AX.tsv").read_text().splitlines() == \
        ["index\tprediction", "0\tcontradiction", "1\tcontradiction"]


def test_recipes_and_flag_precedence():
    import argparse

    from albertlm.cli import task_commands
    from albertlm.tasks.recipes import recipe

    rte = recipe("RTE")
    assert (rte.optim.lr, rte.train.batch_size, rte.train.max_steps, rte.optim.warmup_steps) == \
        (3e-5, 32, 800, 200)  # run_glue.sh
    assert recipe("race-v2").optim.lr == 1e-5 and recipe("race-v2").hidden_dropout == 0.0
    parser = argparse.ArgumentParser()
    task_commands.add_arguments(parser, "finetune")
    args = parser.parse_args(["glue", "--task", "rte", "--model", "m", "--out", "o", "--recipe", "paper",
                              "--lr", "1e-4", "--epochs", "2"])
    args.command = "finetune"
    cfg = task_commands._config(args, "glue")
    assert (cfg.optim.lr, cfg.train.batch_size, cfg.train.max_steps, cfg.train.epochs, cfg.optim.warmup_steps) == \
        (1e-4, 32, 0, 2.0, -1)
    assert cfg.optim.warmup_ratio == 0.25   # --epochs: the table's warmup as its share of the run (200 of 800)
    with pytest.raises(UserError, match="unknown recipe"):
        recipe("imagenet")
