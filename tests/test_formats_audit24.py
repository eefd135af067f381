"""Audit 24 (formats): the files users have, mostly from Hugging Face `datasets` and from dumps.

1. A CSV corpus (`Dataset.to_csv`, pandas, a spreadsheet) for `data build` / `tokenizer train`: it was read as
   plain text, so the header, the CSV quotes, the ids and every other column were built into the data without a
   word; it is read as a table now, its `--text-field` column one document a row (the same documents as the same
   texts as JSON lines), and a header without that column is one line before the build starts.
2. `datasets` writes -1 for a missing ClassLabel (every row of a test split): such a file given to `classify` as
   training, dev or gold data was trained on as one class "-1" (a warning only) or scored as accuracy 0; it is
   refused naming what -1 means, and a stray -1 in a dev file says so too.
3. A `datasets` export of a GLUE task given to `glue` (Parquet, a save_to_disk folder, a tab-separated to_csv) was
   refused naming the `classify` options (the TSV's `sentence1, sentence2, label, idx` read `idx` as RTE's label);
   `glue` now reads it in datasets' columns (tests/test_glue_hub_audit24.py).
"""
from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.cli.main import main
from albertlm.data.corpus import CorpusCounts, check_inputs, read_documents
from albertlm.errors import UserError
from albertlm.tasks import classify, glue
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, shared_path
from test_corpus_formats import alice_paragraphs
from test_data_audit22 import _build

# texts as a Hub dataset holds them: commas, quotes and a paragraph break inside one record
EXTRA = ['He said "no, never" and left, slowly. Then he came back.',
         "First paragraph here. It has two sentences.\n\nSecond paragraph, after a blank line."]


def _texts(n: int = 80) -> list[str]:
    return alice_paragraphs()[:n] + EXTRA


def _write_csv(path: Path, header: list[str], rows: list[list], encoding: str = "utf-8",
               lineterminator: str = "\n") -> Path:
    """As pandas' / datasets' to_csv writes it (minimal quoting), or Excel's "CSV UTF-8" (BOM, CRLF)."""
    with path.open("w", newline="", encoding=encoding) as handle:
        writer = csv.writer(handle, lineterminator=lineterminator)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": text, "id": k}) + "\n" for k, text in enumerate(texts)),
                    encoding="utf-8")
    return path


def _documents(path: Path, **kwargs) -> tuple[list[list[str]], CorpusCounts]:
    counts = CorpusCounts()
    return [doc.sentences for doc in read_documents([path], counts=counts, **kwargs)], counts


# -- 1. CSV corpora ---------------------------------------------------------------------------------------------
def test_a_csv_corpus_gives_the_documents_of_the_same_texts_as_json_lines(tmp_path):
    texts = _texts()
    expected, _ = _documents(_jsonl(tmp_path / "a.jsonl", texts))
    assert len(expected) == len(texts)
    rows = [[k, text, "x"] for k, text in enumerate(texts)]
    plain = _write_csv(tmp_path / "a.csv", ["id", "text", "source"], rows)
    excel = _write_csv(tmp_path / "excel.csv", ["id", " text", "source"], rows, "utf-8-sig", "\r\n")
    packed = tmp_path / "b.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, excel, packed):
        check_inputs([path])
        documents, counts = _documents(path)
        assert documents == expected, path
        assert counts.formats == {"csv": 1} and counts.examples == {}
    # the quotes and commas are the text's own, the header and the other columns no text at all
    flat = [s for doc in _documents(plain)[0] for s in doc]
    assert 'He said "no, never" and left, slowly.' in flat
    assert not any(s.startswith(('"', "id,", "0,")) or s.endswith(",x") for s in flat)


def test_a_csv_build_is_the_json_lines_build_byte_for_byte(tmp_path, capsys):
    texts = _texts(40)
    (tmp_path / "in").mkdir()
    jsonl = _jsonl(tmp_path / "in" / "a.jsonl", texts)
    table = _write_csv(tmp_path / "in" / "a.csv", ["text", "id"], [[t, k] for k, t in enumerate(texts)])
    assert _build([jsonl], tmp_path / "from_jsonl") == 0
    assert _build([table], tmp_path / "from_csv") == 0
    err = capsys.readouterr().err
    assert "(csv: 1)" in err and "look like tables" not in err
    for name in ("shard-00000.bin", "word_starts.npy"):
        assert (tmp_path / "from_csv" / name).read_bytes() == (tmp_path / "from_jsonl" / name).read_bytes()


def test_a_csv_header_without_the_text_column_is_one_line_before_the_build(tmp_path, capsys):
    reviews = _write_csv(tmp_path / "reviews.csv", ["review", "stars"], [["Good film. Loved it.", 5]])
    with pytest.raises(UserError, match=r"reviews\.csv has no column 'text' in its header line \(columns: 'review', "
                                        r"'stars'\); choose one with --text-field"):
        check_inputs([reviews])
    check_inputs([reviews], text_field="review")
    semicolons = tmp_path / "excel.csv"
    semicolons.write_text("text;label\nGood film. Loved it.;5\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"columns: 'text;label'\).*separated by ';'"):
        check_inputs([semicolons])
    assert _build([reviews], tmp_path / "out") == 2
    assert_one_error(capsys, 2, "reviews.csv has no column 'text'", "--text-field")
    assert not (tmp_path / "out").exists()


def test_csv_rows_that_hold_no_text_are_counted_and_long_fields_read(tmp_path):
    """A short row is a bad row naming its line, an empty cell an empty record, blank lines no rows; a field
    over csv's 131072-character limit is read, and the caller's limit is back after."""
    book = " ".join(alice_paragraphs())
    assert len(book) > 131072
    path = tmp_path / "rows.csv"
    path.write_text(f'id,text\n1,First row. It is fine.\n\n2,""\n3\n4,"{book.replace(chr(34), 2 * chr(34))}"\n',
                    encoding="utf-8")
    before = csv.field_size_limit(131072)
    try:
        documents, counts = _documents(path)
        assert csv.field_size_limit() == 131072
    finally:
        csv.field_size_limit(before)
    assert documents[0] == ["First row.", "It is fine."]
    assert len(documents) == 2 and sum(map(len, documents[1])) > 100000
    assert (counts.bad_rows, counts.empty_records) == (1, 1)
    assert counts.examples["bad_rows"] == f"{path} line 5: 1 field(s), no column 'text' (the header has 2)"
    assert counts.examples["empty_records"] == f"{path} line 4: column 'text' is empty"


def test_tokenizer_train_reads_a_csv_column_as_it_reads_json_lines(tmp_path, capsys):
    """`tokenizer train` finds and reads its input as `data build` does: the CSV's column, not its lines."""
    texts = _texts()
    table = _write_csv(tmp_path / "a.csv", ["id", "body"], list(enumerate(texts)))
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text("".join(json.dumps({"body": text}) + "\n" for text in texts), encoding="utf-8")
    said = []
    for path in (table, jsonl):
        assert main(["tokenizer", "train", "--input", str(path), "--text-field", "body", "--vocab-size", "200",
                     "--out", str(tmp_path / path.stem)]) == 0
        said.append(next(line for line in capsys.readouterr().out.splitlines() if "sentences" in line))
    assert said[0].split(" MB, ")[1].split(" in ")[0] == said[1].split(" MB, ")[1].split(" in ")[0]


# -- 2. datasets' -1: a row without a label -----------------------------------------------------------------------
def _sst2_split(path: Path, test: bool) -> Path:
    """Shared SST-2 dev rows as `Dataset.to_csv` / to_json write glue/sst2 (sentence, label, idx; -1 in test)."""
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:9]
    rows = [[s, -1 if test else int(y), k] for k, (s, y) in enumerate(line.split("\t") for line in lines)]
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(("sentence", "label", "idx"), row))) + "\n" for row in rows))
        return path
    return _write_csv(path, ["sentence", "label", "idx"], rows)


SST2 = classify.Columns("sentence", None, "label", "idx")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_test_split_of_minus_ones_is_no_labelled_file(tmp_path, suffix):
    test = _sst2_split(tmp_path / f"test{suffix}", test=True)
    for regression in (False, True):
        with pytest.raises(DataError, match=r"test\.\w+:\d: every label in column 'label' is -1, which Hugging Face "
                                            r"datasets writes for a row without a label .*predicted \(--test\)"):
            classify.read_examples(test, SST2, regression=regression)
    assert len(classify.read_examples(test, SST2, with_labels=False)) == 8    # as --test it is read
    train = classify.read_examples(_sst2_split(tmp_path / f"train{suffix}", test=False), SST2)
    labels = classify.label_set(train)
    mixed = classify.read_examples(test, SST2, with_labels=False)
    mixed[3].label = "-1"
    with pytest.raises(DataError, match=r"label '-1' is not in the label set \['0', '1'\], which Hugging Face"):
        classify.label_ids(mixed[3:4], labels)


def test_scoring_against_a_test_split_is_refused_not_zero(tmp_path, capsys):
    """`evaluate classify --dev test.csv --predictions ...`: accuracy 0.0, macro F1 0.0, exit 0."""
    test = _sst2_split(tmp_path / "test.csv", test=True)
    predictions = tmp_path / "test_predictions.tsv"
    predictions.write_text("id\tprediction\n" + "".join(f"{k}\t1\n" for k in range(8)), encoding="utf-8")
    code = main(["evaluate", "classify", "--dev", str(test), "--predictions", str(predictions),
                 "--text-column", "sentence", "--id-column", "idx"])
    assert_one_error(capsys, code, "test.csv:2: every label in column 'label' is -1")


# -- 3. a datasets export given to glue ----------------------------------------------------------------------------
def test_a_datasets_export_given_to_glue_is_read_in_datasets_columns(tmp_path):
    """(Pinned the refusal naming the `classify` options until `glue` read the Hub's GLUE, which
    tests/test_glue_hub_audit24.py checks; here the same files are read, label numbers in datasets' order.)"""
    table = pa.table({"sentence1": ["A man sleeps."], "sentence2": ["Someone rests."], "label": [0], "idx": [0]})
    parquet = tmp_path / "validation-00000-of-00001.parquet"
    pq.write_table(table, parquet)
    read = [("A man sleeps.", "Someone rests.", "entailment")]
    assert [(e.text_a, e.text_b, e.label) for e in glue.read_examples("rte", parquet)] == read
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text("{}")
    with pytest.raises(DataError, match=r"state\.json: lists no data files"):
        glue.read_examples("mnli", saved, has_labels=False)
    # Dataset.to_csv(sep="\t"): RTE's `idx` column was read as its label ("label '0' is not one of rte's labels")
    tsv = tmp_path / "rte_train.tsv"
    tsv.write_text("sentence1\tsentence2\tlabel\tidx\nA man sleeps.\tSomeone rests.\t0\t0\n", encoding="utf-8")
    assert [(e.text_a, e.text_b, e.label) for e in glue.read_examples("rte", tsv)] == read
    sst2 = tmp_path / "sst2_train.jsonl"
    sst2.write_text('{"sentence": "good film", "label": 1, "idx": 0}\n', encoding="utf-8")
    assert [(e.text_a, e.label) for e in glue.read_examples("cola", sst2)] == [("good film", "1")]
    # GLUE's own files are read as before
    assert len(glue.read_examples("sst2", shared_path("glue", "SST-2", "dev.tsv"))) == 872
