"""review audit 30 (an independent review of this session's commits e62133a..e8c8f17): what the new code does
in cases its own tests left out.

- `classify._one_spelling` / `label_ids` (aff69e6) told two labels apart by `float(label)`: two integer class ids
  past 2**53 (18-digit user or product ids, as an author-identification file has) are one float, so the training
  label set kept one of them and every row of the other trained as it, without a word (two classes became one).
- `scoring.score_classify` (9862b99) takes the predictions file's p_<label> columns as the label set: a gold file
  holding a class the model does not know, scored before as a wrong prediction (and still so without p_ columns),
  is now "label 'other' is not in the label set ['spam', 'ham']", a set the user never gave.
- `tables.open_text` (aff69e6) decompresses a file whose first bytes are bzip2's magic `BZh`, which is ASCII: a
  plain CSV whose header starts with those three letters is "cannot decompress it (bz2: Invalid data stream)".
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify


def _examples(labels: list[str]) -> list[classify.TextExample]:
    return [classify.TextExample(str(i), f"text {i}", None, label, f"train.csv:{i + 2}")
            for i, label in enumerate(labels)]


def test_two_integer_labels_beyond_a_floats_digits_stay_two_classes():
    labels = ["123456789012345678", "123456789012345679", "5"]
    assert float(labels[0]) == float(labels[1])          # what the spelling check compared
    examples = _examples(labels)
    label_set = classify.label_set(examples)
    assert len(label_set) == 3
    assert sorted(classify.label_ids(examples, label_set)) == [0, 1, 2]


def test_one_number_spelt_two_ways_is_still_one_class():
    """What the fix must keep (aff69e6's case): `1`, `1.0` and `01` are one class, spelt `1`."""
    examples = _examples(["1", "1.0", "01", "2"])
    assert classify.label_set(examples) == ("1", "2")
    assert classify.label_ids(examples, ("1", "2")) == [0, 0, 0, 1]


def _gold_and_predictions(tmp_path: Path) -> tuple[Path, Path, Path]:
    dev = tmp_path / "dev.csv"
    with open(dev, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([["text", "label"], ["a", "spam"], ["b", "ham"], ["c", "other"]])
    rows = [("0", "spam", 0.9), ("1", "ham", 0.2), ("2", "ham", 0.3)]
    with_p = tmp_path / "dev_predictions.tsv"
    with_p.write_text("id\tprediction\tp_spam\tp_ham\n"
                      + "".join(f"{i}\t{p}\t{s}\t{1 - s:.1f}\n" for i, p, s in rows), encoding="utf-8")
    without_p = tmp_path / "old_predictions.tsv"
    without_p.write_text("id\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p, _ in rows), encoding="utf-8")
    return dev, with_p, without_p


def test_a_gold_class_the_model_lacks_is_a_wrong_prediction_without_p_columns(tmp_path, capsys):
    """The behaviour before 9862b99, still that of a predictions file without p_<label> columns."""
    dev, _, without_p = _gold_and_predictions(tmp_path)
    assert main(["evaluate", "classify", "--predictions", str(without_p), "--dev", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(2 / 3)


def test_a_gold_class_the_model_lacks_is_a_wrong_prediction_with_p_columns(tmp_path, capsys):
    dev, with_p, _ = _gold_and_predictions(tmp_path)
    assert main(["evaluate", "classify", "--predictions", str(with_p), "--dev", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(2 / 3)


def test_a_plain_csv_whose_header_starts_with_bzh_is_read_as_text(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("BZh,label\nfirst text,1\nsecond text,2\n", encoding="utf-8")
    examples = classify.read_examples(path, classify.Columns("BZh"))
    assert [(e.text_a, e.label) for e in examples] == [("first text", "1"), ("second text", "2")]
