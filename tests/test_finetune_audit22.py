"""Fine-tuning audit 22 (a user's own data, re-saved from real GLUE rows): a CSV of STS-B scores fine-tuned without
--regression became one class per distinct score (41 classes from 120 rows, no word); a label column pandas wrote as
floats (an integer column that once held a gap: 1.0, 0.0) was refused as "not a class name"; `predict --dev` on a
file without labels said only "no column 'label'"; `evaluate` printed a bare `Infinity` (not JSON) for the MSE of
huge regression predictions."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, shared_path


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _tsv_rows(*parts: str, n: int) -> list[list[str]]:
    """The first n rows (after the header line) of a shared GLUE file, split on tabs."""
    return [line.split("\t") for line in shared_path(*parts).read_text(encoding="utf-8").splitlines()[1:n + 1]]


def _sts_csv(path: Path, n: int) -> Path:
    """STS-B train pairs as a user's CSV: s1, s2, score (the gold similarity, 0-5 with fractions)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["s1", "s2", "score"])
        writer.writerows([row[7], row[8], row[9]] for row in _tsv_rows("glue", "STS-B", "train.tsv", n=n))
    return path


def _cola_jsonl(path: Path, n: int, start: int = 0) -> Path:
    """CoLA rows as pandas writes an integer label column that held a gap: {"sentence": ..., "acceptable": 1.0}."""
    rows = _tsv_rows("glue", "CoLA", "train.tsv", n=start + n)[start:]
    path.write_text("".join(json.dumps({"sentence": row[3], "acceptable": float(row[1])}) + "\n" for row in rows),
                    encoding="utf-8")
    return path


def _stdout_json(text: str) -> dict:
    """stdout parsed as strict JSON (a bare NaN / Infinity is refused, as jq refuses it)."""
    def refuse(constant):
        raise AssertionError(f"not JSON: {constant} on stdout")
    return json.loads(text, parse_constant=refuse)


def test_real_number_labels_without_regression_are_refused(tmp_path, capsys):
    """120 STS-B rows as a CSV, fine-tuned as classes: 41 classes, one per distinct score, trained without a word
    (and a dev score not among them was then "not in the label set" of 41 numbers)."""
    path = _sts_csv(tmp_path / "sts.csv", 120)
    columns = classify.Columns("s1", "s2", "score")
    with pytest.raises(DataError, match=r"sts\.csv:3: label '3\.800' is a real number .*--regression"):
        classify.label_set(classify.read_examples(path, columns))
    # as JSON numbers the first fraction is named where it is read
    jsonl = tmp_path / "sts.jsonl"
    jsonl.write_text("".join(json.dumps({"s1": a, "s2": b, "score": float(s)}) + "\n"
                             for a, b, s in csv.reader(path.open(encoding="utf-8")) if s != "score"))
    with pytest.raises(DataError, match=r"sts\.jsonl:2: label 3\.8 .* real number.*--regression"):
        classify.read_examples(jsonl, columns)
    # with --regression they are the values; with --labels the user's own classes
    assert [e.label for e in classify.read_examples(path, columns, regression=True)][:2] == [5.0, 3.8]
    assert classify.label_set(classify.read_examples(path, columns), ["3.8", "5.0"]) == ("3.8", "5.0")
    # scoring a predictions file against such a gold file without --regression: accuracy of exact score matches
    preds = tmp_path / "dev_predictions.tsv"
    preds.write_text("id\tprediction\n" + "".join(f"{i}\t2.5\n" for i in range(120)))
    code = main(["evaluate", "classify", "--predictions", str(preds), "--dev", str(path), "--label-column", "score"])
    assert_one_error(capsys, code, "is a real number", "--regression")


def test_a_label_column_pandas_wrote_as_floats_is_its_classes(tmp_path):
    """{"acceptable": 1.0}: refused as "not a class name (a string or an integer)"; it is class 1, the same class as
    the 1 of an integer column (a training file and a dev file saved by different tools)."""
    floats = classify.read_examples(_cola_jsonl(tmp_path / "dev.jsonl", 20), classify.Columns("sentence", None,
                                                                                             "acceptable"))
    assert {e.label for e in floats} == {"0", "1"}
    ints = tmp_path / "train.jsonl"
    ints.write_text("".join(json.dumps({"sentence": e.text_a, "acceptable": int(e.label)}) + "\n" for e in floats))
    labels = classify.label_set(classify.read_examples(ints, classify.Columns("sentence", None, "acceptable")))
    assert labels == ("0", "1")
    assert classify.label_ids(floats, labels) == [int(e.label) for e in floats]
    # numbers written with a point sort by value, as integers do: 2.0 before 10.0
    rows = [classify.TextExample(str(i), "x", None, label, f"f:{i}") for i, label in enumerate(["10.0", "2.0", "1.0"])]
    assert classify.label_set(rows) == ("1.0", "2.0", "10.0")


def test_a_file_without_labels_given_as_dev_says_to_give_it_with_test(tmp_path, capsys):
    """`predict --dev unlabelled.csv` (or a gold file that is none): "no column 'label' (columns: 'rid', 'review')"
    left the user to guess; GLUE's reader says to give such a file with --test."""
    rows = _tsv_rows("glue", "SST-2", "dev.tsv", n=6)
    gold = tmp_path / "unlabelled.csv"
    with gold.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["rid", "review"], *([f"r{i}", row[0]] for i, row in enumerate(rows))])
    preds = tmp_path / "p.tsv"
    preds.write_text("id\tprediction\n" + "".join(f"r{i}\t1\n" for i in range(6)))
    code = main(["evaluate", "classify", "--predictions", str(preds), "--dev", str(gold), "--id-column", "rid",
                 "--text-column", "review"])
    assert_one_error(capsys, code, "no column 'label'", "without labels", "--test")
    # a misspelt label column keeps its own hint (the nearest name), not this one
    with pytest.raises(DataError, match=r"did you mean 'review'\?$"):
        classify.read_examples(gold, classify.Columns("review", None, "reveiw"))


def test_evaluate_prints_strict_json_for_an_infinite_score(tmp_path, capsys):
    """The MSE of predictions around 1e200 overflows: stdout held `"mse": Infinity`, which no JSON reader takes."""
    gold = _sts_csv(tmp_path / "sts.csv", 8)
    preds = tmp_path / "dev_predictions.tsv"
    preds.write_text("id\tprediction\n" + "".join(f"{i}\t{(i + 1) * 1e200}\n" for i in range(8)))
    with pytest.warns(RuntimeWarning):   # numpy's overflow in scikit-learn's mean_squared_error
        code = main(["evaluate", "classify", "--predictions", str(preds), "--dev", str(gold), "--label-column",
                     "score", "--regression"])
    assert code == 0
    metrics = _stdout_json(capsys.readouterr().out)
    assert metrics["mse"] is None and metrics["pearson"] == pytest.approx(metrics["pearson"])


def test_a_parquet_of_float_labels_fine_tunes_and_predicts(tmp_path, capsys):
    """The journey end to end with the real albert-base-v2 spiece.model on a tiny random model: training rows in a
    Parquet file whose labels pandas made floats, dev rows as JSONL floats, an unlabelled CSV to predict."""
    import csv
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    torch.manual_seed(0)
    model = tmp_path / "model"
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=24, max_position_embeddings=64)).save_pretrained(model)
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), model / "spiece.model")
    rows = [json.loads(line) for line in _cola_jsonl(tmp_path / "t.jsonl", 24).read_text().splitlines()]
    train = pa.table({"sentence": [r["sentence"] for r in rows],                 # a float64 label column,
                      "acceptable": pa.array([r["acceptable"] for r in rows], pa.float64())})   # as pandas writes
    pq.write_table(train, tmp_path / "train.parquet")
    dev = _cola_jsonl(tmp_path / "dev.jsonl", 8, start=100)
    test = tmp_path / "test.csv"
    with open(test, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["sentence"]] + [[r["sentence"]] for r in rows[:5]])
    out = tmp_path / "run"
    code = main(["finetune", "classify", "--train", str(tmp_path / "train.parquet"), "--dev", str(dev),
                 "--text-column", "sentence", "--label-column", "acceptable", "--model", str(model), "--out",
                 str(out), "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "32", "--no-progress",
                 "--train.tensorboard", "false"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert json.loads((out / "best" / "task.json").read_text())["labels"] == ["0", "1"]
    assert main(["predict", "classify", "--model", str(out), "--test", str(test), "--out", str(tmp_path / "p"),
                 "--no-progress"]) == 0
    lines = (tmp_path / "p" / "test_predictions.tsv").read_text().splitlines()
    assert lines[0] == "id\tprediction\tp_0\tp_1" and len(lines) == 6
    assert {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
