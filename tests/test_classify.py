"""A user's own data: CSV / TSV / JSONL readers, label sets, and errors that name the file and line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from albertlm.errors import UserError
from albertlm.tasks import classify, metrics
from albertlm.tasks.features import Feature, bucket_batches, collate, encode_pairs
from conftest import shared_path


@pytest.fixture
def sst_rows():
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text().splitlines()[1:31]
    return [line.split("\t") for line in lines]


def test_csv_tsv_jsonl_read_the_same(tmp_path, sst_rows):
    import csv

    with (tmp_path / "d.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(sst_rows)
    (tmp_path / "d.tsv").write_text("text\tlabel\n" + "\n".join("\t".join(r) for r in sst_rows) + "\n")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t, "label": int(l)}) + "\n" for t, l in sst_rows))
    columns = classify.Columns("text", None, "label")
    read = [classify.read_examples(tmp_path / name, columns) for name in ("d.csv", "d.tsv", "d.jsonl")]
    assert [[(e.text_a, e.label) for e in r] for r in read[1:]] == [[(e.text_a, e.label) for e in read[0]]] * 2
    assert classify.label_set(read[0]) == ("0", "1") and len(read[0]) == 30


def test_regression_pairs_and_errors(tmp_path):
    path = tmp_path / "sts.jsonl"
    path.write_text('{"a": "x y", "b": "y", "score": 3.5}\n{"a": "z", "b": "w", "score": "high"}\n')
    columns = classify.Columns("a", "b", "score")
    with pytest.raises(UserError, match=r"sts\.jsonl:2: label 'high' is not a number"):
        classify.read_examples(path, columns, regression=True)
    with pytest.raises(UserError, match=r"sts\.jsonl:1: no column 'txt'"):
        classify.read_examples(path, classify.Columns("txt", None, "score"))
    path.write_text('{"a": "x", "b": "y", "score": 1}\nnot json\n')
    with pytest.raises(UserError, match=r"sts\.jsonl:2: not valid JSON"):
        classify.read_examples(path, columns)
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("text,label\nhello,pos\nbye,neg\nhm,meh\n")
    examples = classify.read_examples(csv_path, classify.Columns("text"))
    with pytest.raises(UserError, match=r"m\.csv:4: label 'meh' is not in the label set"):
        classify.label_ids(examples, ["neg", "pos"])
    assert classify.label_ids(examples[:2], ["neg", "pos"]) == [1, 0]


def test_multiclass_metrics():
    out = metrics.classification_metrics([0, 1, 2, 2], [0, 2, 2, 2], 3)
    assert out["accuracy"] == 0.75
    # per-class F1: class 0 = 1, class 1 = 0, class 2 = 2*2/(2+3) = 0.8
    assert out["macro_f1"] == pytest.approx((1 + 0 + 0.8) / 3)


class WordTokenizer:
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + len(w) for w in t.split()] for t in texts]


def test_pairs_truncate_longest_first_and_batches_pad_to_their_longest():
    pairs, cut = encode_pairs(WordTokenizer(), ["a bb ccc dddd", "a"], ["x y z", None], max_length=8)
    (ids0, types0), (ids1, types1) = pairs
    assert cut == 1 and len(ids0) == 8 and list(types0) == [0, 0, 0, 0, 0, 1, 1, 1]
    assert list(ids1) == [2, 6, 3] and list(types1) == [0, 0, 0]
    features = [Feature(ids, types, i, i % 2) for i, (ids, types) in enumerate(pairs)]
    batch = collate(features, pad_id=0)
    assert batch["input_ids"].shape == (2, 8) and batch["attention_mask"][1].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    lengths = np.random.default_rng(0).integers(3, 200, 640)
    batches = bucket_batches(lengths, 32, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(640))
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert padded < 0.6 * len(lengths) * lengths.max()   # far less padding than one global width
