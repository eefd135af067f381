"""classify audit 18 (a user's own CSV / TSV / JSONL): an Excel export separated by ';' says so instead of
naming one column 'text;label'; a misspelt column suggests the nearest; a header name with stray spaces or
saved decomposed (NFD Korean) is the column; a label holding a comma (the label set is recorded
comma-separated) or a tab is refused; an id column with a repeated, empty or tabbed id is refused
(the predictions file is written and scored by id: the second row's prediction replaced the first's)."""
from __future__ import annotations

import csv
import json
import unicodedata
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, shared_path

COLUMNS = classify.Columns("text", None, "label")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _kornli(n: int) -> list[list[str]]:
    """The first n (sentence1, sentence2, gold_label) rows of the shared KorNLI dev file."""
    lines = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t") for line in lines[1:n + 1]]


def _csv(path: Path, header: list[str], rows: list[list], **dialect) -> Path:
    with path.open("w", newline="", encoding=dialect.pop("encoding", "utf-8")) as handle:
        writer = csv.writer(handle, **dialect)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_an_excel_export_separated_by_semicolons_names_the_separator(tmp_path):
    """BOM, ';' and CRLF (Excel in a ';' locale): the error said only "no column 'text' (columns:
    'text;label')"."""
    rows = [[a, label] for a, _, label in _kornli(6)]
    path = _csv(tmp_path / "excel.csv", ["text", "label"], rows, delimiter=";", lineterminator="\r\n",
                encoding="utf-8-sig")
    with pytest.raises(DataError, match=r"excel\.csv:2: no column 'text' .*separated by ';'.*\.tsv"):
        classify.read_examples(path, COLUMNS)
    # the same rows tab-separated in a .tsv read, BOM and CRLF included
    tsv = _csv(tmp_path / "excel.tsv", ["text", "label"], rows, delimiter="\t", lineterminator="\r\n",
               encoding="utf-8-sig", quoting=csv.QUOTE_NONE, quotechar=None, escapechar=None)
    assert [e.label for e in classify.read_examples(tsv, COLUMNS)] == [row[1] for row in rows]


def test_a_misspelt_column_suggests_the_nearest(tmp_path):
    rows = [[f"r{i}", a, label] for i, (a, _, label) in enumerate(_kornli(4))]
    path = _csv(tmp_path / "reviews.csv", ["id", "review", "stars"], rows)
    with pytest.raises(DataError, match=r"no column 'reveiw' .*did you mean 'review'\?"):
        classify.read_examples(path, classify.Columns("reveiw", None, "stars"))
    with pytest.raises(DataError, match=r"no column 'Stars' .*did you mean 'stars'\?"):
        classify.read_examples(path, classify.Columns("review", None, "Stars"))
    with pytest.raises(DataError, match=r"no column 'zzz' \(columns: 'id', 'review', 'stars'\)$"):
        classify.read_examples(path, classify.Columns("review", None, "zzz"))


def test_a_header_with_stray_spaces_or_in_nfd_is_the_column(tmp_path):
    """`text, label` (a space after the comma) and a Korean header saved decomposed (macOS): the column typed
    in NFC was 'not there', in a message listing a name that looks the same."""
    rows = _kornli(4)
    nfd = unicodedata.normalize("NFD", "리뷰")
    assert nfd != "리뷰"
    path = _csv(tmp_path / "k.csv", [nfd, " 문장2", " label "], rows)
    read = classify.read_examples(path, classify.Columns("리뷰", "문장2", "label"))
    assert [(e.text_a, e.text_b, e.label) for e in read] == [tuple(row) for row in rows]
    jsonl = tmp_path / "k.jsonl"
    jsonl.write_text("".join(json.dumps({nfd: a, "label ": label}, ensure_ascii=False) + "\n"
                             for a, _, label in rows), encoding="utf-8")
    assert [e.text_a for e in classify.read_examples(jsonl, classify.Columns("리뷰"))] == [r[0] for r in rows]


def test_a_repeated_empty_or_tabbed_id_is_refused(tmp_path, capsys):
    """Predictions are written and scored by id: with two rows of id 0 the second's prediction replaced the
    first's when `evaluate classify --predictions` scored them (a silently wrong accuracy)."""
    rows = _kornli(4)
    ids = classify.Columns("text", None, "label", "id")
    dup = _csv(tmp_path / "dup.csv", ["id", "text", "label"], [[i % 3, a, label] for i, (a, _, label)
                                                              in enumerate(rows)])
    with pytest.raises(DataError, match=r"dup\.csv:5: id 0 \(column 'id'\) is also the id of line 2"):
        classify.read_examples(dup, ids)
    assert [e.guid for e in classify.read_examples(dup, ids, unique_ids=False)] == ["0", "1", "2", "0"]
    preds = tmp_path / "preds.tsv"
    preds.write_text("id\tprediction\n0\tneutral\n1\tcontradiction\n2\tentailment\n")
    capsys.readouterr()
    code = main(["evaluate", "classify", "--dev", str(dup), "--id-column", "id", "--predictions", str(preds)])
    assert_one_error(capsys, code, "is also the id of line 2")
    for name, record, phrase in (("empty", {"id": " ", "text": "a", "label": "x"}, "no id in column 'id'"),
                                 ("tab", {"id": "a\tb", "text": "a", "label": "x"}, "tab or line break")):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(record) + "\n")
        with pytest.raises(DataError, match=phrase):
            classify.read_examples(path, ids)


def test_a_label_with_a_comma_or_tab_is_refused(tmp_path):
    """The label set is recorded and given comma-separated: a class 'good, very' came back from task.json as
    the labels 'good' and 'very', and `predict classify --model RUN` named the wrong class."""
    path = _csv(tmp_path / "comma.csv", ["text", "label"], [["the film was good", "good, very"],
                                                            ["the film was bad", "bad"]])
    with pytest.raises(DataError, match=r"comma\.csv:2: label 'good, very' .*comma.*rename"):
        classify.read_examples(path, COLUMNS)
    tab = tmp_path / "tab.jsonl"
    tab.write_text(json.dumps({"text": "a", "label": "x\ty"}) + "\n")
    with pytest.raises(DataError, match=r"tab\.jsonl:1: label 'x\\ty'"):
        classify.read_examples(tab, COLUMNS)
    assert [e.label for e in classify.read_examples(path, COLUMNS, with_labels=False)] == [None, None]


def test_a_training_file_may_repeat_ids(tmp_path):
    """Training rows' ids are never written out: augmented copies sharing an id are trained on, not refused (the
    unique-id rule is for files whose predictions are written or scored by id)."""
    from albertlm.tasks import classify
    from albertlm.tasks.specs import classify_spec
    from albertlm.tokenization import load_tokenizer

    train = tmp_path / "train.csv"
    train.write_text("id,text,label\n1,good words,pos\n1,good words again,pos\n2,bad words,neg\n")
    columns = classify.Columns(text="text", label="label", id="id")
    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    from albertlm.config.task import FinetuneConfig

    spec = classify_spec(tokenizer, FinetuneConfig(), columns, train_file=train)
    assert len(spec.train) == 3
