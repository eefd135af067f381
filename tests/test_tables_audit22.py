"""tables audit 22 (reading a user's table for fine-tuning and prediction): a one-column CSV / TSV row whose only
cell is empty (`""`) was skipped as a blank line, so the predictions file had a line fewer than the input and every
later row's default id (its row number) shifted; a `Dataset.save_to_disk` folder given as a file was refused with
"cannot tell the format from the suffix"."""
from __future__ import annotations

from pathlib import Path

import pytest

from albertlm.tasks import classify
from albertlm.tasks.tables import DataError, Problems, read_records


def _test_rows(path: Path) -> tuple[list[classify.TextExample], dict]:
    """A file to predict, read as `predict classify --test FILE` reads it: (its examples, its notes)."""
    problems = Problems()
    examples = classify.read_examples(path, classify.Columns("text", label=None), with_labels=False,
                                      problems=problems, split="test")
    return examples, problems.to_dict()


@pytest.mark.parametrize("suffix, empty", [(".csv", '""'), (".csv", "   "), (".tsv", "  ")])
def test_an_empty_row_of_a_one_column_file_keeps_its_place(tmp_path, suffix, empty):
    """`text\\na\\n""\\nb`: the `""` row was dropped and `b` got id 1 (the row number of the empty one); it is now
    row 1 with an empty text, counted as such, and a truly blank line is still no row."""
    path = tmp_path / f"test{suffix}"
    path.write_text(f"text\nfirst\n{empty}\nthird\n\nfourth\n", encoding="utf-8")
    examples, notes = _test_rows(path)
    assert [(e.guid, e.text_a.strip()) for e in examples] == [("0", "first"), ("1", ""), ("2", "third"),
                                                               ("3", "fourth")]
    assert notes == {"empty text (test)": {"count": 1, "first": [f"{path}:3"]}}


def test_a_row_of_empty_cells_between_rows_is_a_row(tmp_path):
    """`,` between two rows of a two-column file was skipped (the ids after it shifted, a labelled file trained on
    one row fewer without a word); rows of empty cells after the last row (a spreadsheet export's tail) shift
    nothing and are still left out."""
    path = tmp_path / "test.csv"
    path.write_text("text,other\na,x\n,\nb,y\n,\n,\n", encoding="utf-8")
    assert [row for row, _ in read_records(path)] == [2, 3, 4]
    examples, notes = _test_rows(path)
    assert [e.text_a for e in examples] == ["a", "", "b"]
    assert notes["empty text (test)"]["count"] == 1
    labelled = tmp_path / "train.csv"
    labelled.write_text("text,label\na,x\n,\nb,y\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{labelled}:3: no label in column 'label'"):
        classify.read_examples(labelled, classify.Columns("text"))


def _saved(folder: Path, texts: list[str], shards: int = 1, shuffled: bool = False) -> Path:
    import datasets

    data = datasets.Dataset.from_dict({"text": texts, "label": ["pos" if i % 2 else "neg" for i in range(len(texts))]})
    (data.shuffle(seed=0) if shuffled else data).save_to_disk(str(folder), num_shards=shards)
    return folder


def test_a_save_to_disk_folder_is_read_in_its_rows_order(tmp_path):
    """`--train DIR` of `Dataset.save_to_disk(DIR)` was "cannot tell the format from the suffix": its Arrow files
    are read in the order state.json lists them, rows numbered through them (a shuffled dataset keeps its order)."""
    datasets = pytest.importorskip("datasets")
    texts = [f"text {i}" for i in range(7)]
    folder = _saved(tmp_path / "saved", texts, shards=2, shuffled=True)
    expected = datasets.load_from_disk(str(folder))["text"]
    examples = classify.read_examples(folder, classify.Columns("text"))
    assert [e.text_a for e in examples] == expected and sorted(expected) == texts
    assert [e.where for e in examples] == [f"{folder}:{row}" for row in range(1, 8)]


def test_other_folders_are_named_for_what_they_are(tmp_path):
    """A DatasetDict folder names its splits' folders; a folder of something else says it is a folder."""
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["x", "y"]})
    datasets.DatasetDict({"train": one, "test": one}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataError, match=r"DatasetDict folder .*: .*dd/train, .*dd/test"):
        list(read_records(tmp_path / "dd"))
    with pytest.raises(DataError, match=r"a folder, not a file"):
        list(read_records(tmp_path))
    (tmp_path / "dd" / "train" / "state.json").write_text('{"_data_files": [{"filename": "gone.arrow"}]}')
    with pytest.raises(DataError, match=r"not in the folder: gone.arrow"):
        list(read_records(tmp_path / "dd" / "train"))
