"""GLUE / classify audit 20: a transformers MNLI classifier whose id2label names its classes in `datasets`' order
(entailment, neutral, contradiction) is read by those names, not in GLUE's order (every prediction named another
class); a document longer than csv's 131072-character field limit is read from CSV and TSV as from JSONL; a
Parquet file (the Hub's format) is named, with the way to convert it; a JSON lines / CSV export given to `glue`
points to `classify`."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify, glue
from albertlm.tasks.tables import DataError
from conftest import save_tiny_pretrained, shared_path

MNLI_HEAD = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
             "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
HF_MNLI = {"0": "entailment", "1": "neutral", "2": "contradiction"}   # datasets' glue/mnli ClassLabel


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _hf_order_mnli_model(directory: Path, pretrained: Path) -> Path:
    """An MNLI classifier converted from transformers (labels.json: its id2label) that always picks output 0,
    which it names 'entailment'; no task.json (not one of our runs)."""
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification

    model = AlbertForSequenceClassification.from_pretrained(pretrained, num_labels=3)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))
    model.save_pretrained(directory)
    shutil.copy(pretrained / "vocab.txt", directory / "vocab.txt")
    (directory / "labels.json").write_text(json.dumps({"id2label": HF_MNLI,
                                                       "problem_type": "single_label_classification"}))
    return directory


def test_a_transformers_mnli_model_is_read_by_its_class_names(tmp_path, capsys):
    pretrained = save_tiny_pretrained(tmp_path)
    model = _hf_order_mnli_model(tmp_path / "hf_mnli", pretrained)
    gold = ["entailment", "entailment", "neutral", "contradiction"]
    rows = [MNLI_HEAD + ["gold_label"]] + [[i, i, f"{i}e", "fiction", "( a )", "( b )", "(R a)", "(R b)",
                                            "good film", "bad plot", label] for i, label in enumerate(gold)]
    dev = tmp_path / "dev_matched.tsv"
    dev.write_text("\n".join("\t".join(map(str, row)) for row in rows) + "\n", encoding="utf-8")
    out = tmp_path / "pred"
    assert main(["predict", "glue", "--task", "mnli", "--model", str(model), "--dev", str(dev), "--out", str(out),
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["dev_matched"]["accuracy"] == 0.5   # entailment twice of four
    written = (out / "dev_matched_predictions.tsv").read_text().split("\n")[1:-1]
    assert [line.split("\t")[1] for line in written] == ["entailment"] * 4   # was contradiction, GLUE's first
    assert "entailment, neutral, contradiction" in captured.err


def test_the_class_order_of_a_model_by_its_names():
    mnli, cola = glue.get_task("mnli"), glue.get_task("cola")
    assert glue.model_class_order(mnli, HF_MNLI) == [2, 0, 1]
    assert glue.model_class_order(glue.get_task("ax"), HF_MNLI) == [2, 0, 1]
    assert glue.model_class_order(mnli, {"0": "CONTRADICTION", "1": "Entailment", "2": "neutral"}) is None
    assert glue.model_class_order(mnli, {str(i): f"LABEL_{i}" for i in range(3)}) is None
    assert glue.model_class_order(cola, {"0": "unacceptable", "1": "acceptable"}) is None   # datasets' = GLUE's
    assert glue.model_class_order(cola, {"0": "acceptable", "1": "unacceptable"}) == [1, 0]
    assert glue.model_class_order(glue.get_task("stsb"), {"0": "LABEL_0"}) is None


@pytest.fixture
def csv_default_field_limit():
    """csv's own field limit (131072) for the test, whatever an earlier test or library raised it to (the reader
    raises it, process-wide, when it reads), and the process's limit back after."""
    before = csv.field_size_limit(131072)
    yield
    csv.field_size_limit(before)


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_document_longer_than_csvs_field_limit_is_read(tmp_path, suffix, csv_default_field_limit):
    """A 150 kB text (cut to max_seq_length later): "field larger than field limit (131072)" in CSV and TSV,
    while the same rows as JSON lines read."""
    article = " ".join(shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8").split())
    assert len(article) > 131072
    path = tmp_path / f"long{suffix}"
    rows = [["text", "label"], [article, "novel"], ["a short one", "note"]]
    if suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
    else:    # read with quoting off: the text's quotes are its own
        path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")
    examples = classify.read_examples(path, classify.Columns("text"))
    assert [(len(e.text_a), e.label) for e in examples] == [(len(article), "novel"), (11, "note")]


def _hub_sst2(directory: Path, n: int = 6) -> tuple[Path, Path, list]:
    """The shared SST-2 dev rows as the Hugging Face Hub keeps glue/sst2 (Parquet: sentence, label, idx) and as
    `Dataset.save_to_disk` writes them (an Arrow IPC stream)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    rows = [(sentence, int(label)) for sentence, label in (line.split("\t") for line in lines)]
    table = pa.table({"sentence": [r[0] for r in rows], "label": [r[1] for r in rows], "idx": list(range(n))})
    parquet = directory / "validation-00000-of-00001.parquet"
    pq.write_table(table, parquet, row_group_size=4)
    arrow = directory / "data-00000-of-00001.arrow"
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=4)
    return parquet, arrow, rows


def test_parquet_and_arrow_exports_are_read_as_classify_data(tmp_path):
    """The Hub's Parquet files and save_to_disk's Arrow: "cannot tell the format from the suffix" (and a
    Parquet file named .tsv was "not UTF-8 text"), though pyarrow is a dependency and `data build` reads both."""
    parquet, arrow, rows = _hub_sst2(tmp_path)
    columns = classify.Columns("sentence", None, "label", "idx")
    for path in (parquet, arrow):
        examples = classify.read_examples(path, columns)
        assert [(e.text_a, e.label, e.guid) for e in examples] == [(s, str(y), str(i)) for i, (s, y) in
                                                                   enumerate(rows)]
        assert examples[4].where == f"{path}:5"
    renamed = tmp_path / "dev.tsv"
    renamed.write_bytes(parquet.read_bytes())
    # (since the twenty-fourth session `glue` reads the Hub's files itself: tests/test_glue_hub_audit24.py)
    assert [(e.text_a, e.label) for e in glue.read_examples("sst2", renamed)] == [(s, str(y)) for s, y in rows]
    with pytest.raises(DataError, match=r"no column 'text' .*'sentence'"):
        classify.read_examples(parquet, classify.Columns("text"))


@pytest.mark.parametrize("name, text", [
    ("sst2_train.jsonl", '{"sentence": "good film", "label": 1, "idx": 0}\n'),
    ("sst2_train.csv", "sentence,label,idx\ngood film,1,0\n"),
])
def test_an_export_given_to_glue_is_read(tmp_path, name, text):
    """A Hugging Face datasets export read as GLUE's TSV: "1 tab-separated fields, sst2 needs 2" and no more; then a
    pointer to `classify`; since the twenty-fourth session `glue` reads it in datasets' columns."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert [(e.text_a, e.label, e.guid) for e in glue.read_examples("sst2", path)] == [("good film", "1", "0")]
