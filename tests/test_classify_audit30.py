"""classify audit 30 (a user's own labelled files, start to finish): a class written as `1` in some rows and `1.0`
in others (a file joined from pandas exports) became two classes, a 5-star file trained as 10 without a word;
`evaluate classify --predictions` sorted the labels itself, so its two-class F1 was the other class's than the run's
when the model's order was given with --labels (same file, same metric name, 0.0 against 0.667); a `.csv.gz`,
`.jsonl.xz` or `.tsv.bz2` was "cannot tell the format from the suffix"; a Parquet file with two columns of one name
was read from the last of them, silently (a CSV's is refused); a header-less file's error listed its first row as
column names without saying so; a list label (multi-label data) said only "not a class name"."""
from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify
from albertlm.tasks.tables import DataError
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained

COLUMNS = classify.Columns("text")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _rows(n: int, stars: list, start: int = 0) -> list[list]:
    """n rows of tiny-vocabulary texts with star labels cycling through `stars` (unbalanced when it repeats)."""
    return [[" ".join(TINY_WORDS[(start + i + k) % len(TINY_WORDS)] for k in range(1 + (start + i) % 5)),
             stars[(start + i) % len(stars)]] for i in range(n)]


def _csv(path: Path, rows: list, opener=open, header=("text", "label")) -> Path:
    with opener(path, "wt", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_a_class_spelt_as_one_number_two_ways_is_one_class(tmp_path):
    """`1` and `1.0` in one training file were the classes '1' and '1.0' (ten classes of five stars); now one class
    per number, spelt the shortest way, and a dev file writing `2.0` (or `02`) where training wrote `2` is that
    class, as a JSON 2.0 already was."""
    rows = _rows(20, [1, 5, 5, 2, "1.0", 4, "5.0", 3, "2.0", 5])
    train = classify.read_examples(_csv(tmp_path / "train.csv", rows), COLUMNS)
    labels = classify.label_set(train)
    assert labels == ("1", "2", "3", "4", "5")
    assert classify.label_ids(train, labels) == [{"1": 0, "2": 1, "3": 2, "4": 3, "5": 4}[str(row[1])[0]]
                                                 for row in rows]
    dev = classify.read_examples(_csv(tmp_path / "dev.csv", [["good", "2.0"], ["bad", "02"], ["fine", "5"]]),
                                 COLUMNS)
    assert classify.label_ids(dev, labels) == [1, 1, 4]
    # a number that is no class is still named, with its file and line
    with pytest.raises(DataError, match=r"unseen\.csv:2: label '6\.0' is not in the label set"):
        classify.label_ids(classify.read_examples(_csv(tmp_path / "unseen.csv", [["good", "6.0"]]), COLUMNS),
                           labels)
    # a test split of -1 written as floats (`-1.0`, pandas) is refused as a labelled file, as `-1` is
    with pytest.raises(DataError, match="every label in column 'label' is -1"):
        classify.read_examples(_csv(tmp_path / "test.csv", [["good", "-1.0"], ["bad", "-1"]]), COLUMNS)


def test_scoring_a_predictions_file_keeps_the_models_label_order(tmp_path, capsys):
    """A model fine-tuned with `--labels spam,ham` writes `p_spam  p_ham`: its F1 is ham's (the second class).
    `evaluate classify --predictions` sorted the labels (ham, spam) and gave spam's F1 under the same name; it now
    reads the order from the p_<label> columns (and a file without them is scored as before)."""
    from sklearn.metrics import f1_score

    gold = ["spam", "ham", "ham", "spam", "ham", "ham"]
    preds = ["spam", "spam", "ham", "spam", "spam", "spam"]
    dev = _csv(tmp_path / "dev.csv", [[f"text {i}", label] for i, label in enumerate(gold)])
    lines = ["id\tprediction\tp_spam\tp_ham"] + [f"{i}\t{p}\t{0.9 if p == 'spam' else 0.1}\t"
                                                  f"{0.1 if p == 'spam' else 0.9}" for i, p in enumerate(preds)]
    (tmp_path / "dev_predictions.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["evaluate", "classify", "--predictions", str(tmp_path / "dev_predictions.tsv"), "--dev", str(dev)]
    assert main(args) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["f1"] == pytest.approx(f1_score(gold, preds, pos_label="ham"))   # 0.4; spam's is 0.75
    assert main([*args, "--labels", "spam,ham"]) == 0
    assert json.loads(capsys.readouterr().out) == scored
    # without p_ columns (an older file, or one made by hand): the sorted labels, as before
    (tmp_path / "old.tsv").write_text("\n".join(line.rsplit("\t", 2)[0] for line in lines) + "\n")
    assert main([*args[:3], str(tmp_path / "old.tsv"), *args[4:]]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(f1_score(gold, preds, pos_label="spam"))


@pytest.mark.parametrize("suffix, opener", [(".csv.gz", gzip.open), (".tsv.bz2", bz2.open), (".jsonl.xz", lzma.open)])
def test_a_compressed_file_reads_as_its_plain_copy(tmp_path, suffix, opener):
    """`train.csv.gz` was "cannot tell the format from the suffix" (a gzip file named .csv: "not UTF-8 text"). A
    BOM, a quoted line break and Hangul come through as in the plain file."""
    rows = [["좋은 영화", "pos"], ["line one\nline two", "neg"], ['he said "hi"', "pos"]]
    plain = tmp_path / f"plain{suffix.rsplit('.', 1)[0]}"
    with open(plain, "w", newline="", encoding="utf-8-sig") as handle:
        if plain.suffix == ".jsonl":
            handle.writelines(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows)
        else:
            writer = csv.writer(handle, delimiter="\t" if plain.suffix == ".tsv" else ",")
            writer.writerows([["text", "label"], *rows])
    packed = tmp_path / f"packed{suffix}"
    with opener(packed, "wb") as handle:
        handle.write(plain.read_bytes())
    read = [(e.text_a, e.label, e.where.rsplit(":", 1)[1]) for e in classify.read_examples(packed, COLUMNS)]
    assert read == [(e.text_a, e.label, e.where.rsplit(":", 1)[1]) for e in classify.read_examples(plain, COLUMNS)]
    assert [text for text, _, _ in read] == [text for text, _ in rows]
    # a file cut short is one error naming it, not a traceback or a silently shorter file
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(packed.read_bytes()[:-12])
    with pytest.raises(DataError, match=rf"cut{suffix.replace('.', '[.]')}: cannot decompress it"):
        classify.read_examples(cut, COLUMNS)


def test_a_headerless_file_says_its_first_row_was_read_as_the_header(tmp_path):
    """CoLA-style rows without a header line: the error listed 'good film', '1' as the columns, and nothing more."""
    path = tmp_path / "reviews.tsv"
    path.write_text("good film\t1\nbad plot\t0\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"reviews\.tsv:2: no column 'text' .*first line is read as the header.*"
                                        r"add a header line naming the columns, e\.g\. text<TAB>label"):
        classify.read_examples(path, COLUMNS)
    # a real header with a misspelt name still gets the nearest name
    path.write_text("txt\tlabel\ngood film\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"did you mean 'txt'\?$"):
        classify.read_examples(path, COLUMNS)


def test_a_parquet_file_with_two_columns_of_one_name_is_refused(tmp_path):
    """A CSV header naming a column twice is refused; a Parquet file's rows kept the last of the two columns (its
    texts were the other column's, without a word)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table([pa.array(["good film", "bad plot"]), pa.array(["x", "y"]), pa.array([1, 0])],
                            names=["text", "text", "label"]), path)
    with pytest.raises(DataError, match=r"dup\.parquet: the file has two columns named 'text'"):
        classify.read_examples(path, COLUMNS)


def test_a_list_label_says_multi_label_is_not_supported(tmp_path):
    path = tmp_path / "tags.jsonl"
    path.write_text(json.dumps({"text": "good film", "label": ["sports", "politics"]}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"tags\.jsonl:1: .*not a class name.*multi-label classification is not "
                                        "supported"):
        classify.read_examples(path, COLUMNS)


def test_stars_from_compressed_files_train_predict_and_score_as_sklearn(tmp_path, capsys):
    """1..5 stars, unbalanced, training labels spelt `3` and `3.0`, a gzip CSV to train on and an xz JSON lines dev
    file of float labels: the model's labels are the five stars in numeric order; the run's dev metrics are
    scikit-learn's on its own dev_predictions.tsv, and `evaluate --predictions` gives the same numbers."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    stars = [5, 5, 1, 5, 4, "5.0", 3, 5, "3.0", 2, 5, "1.0"]
    train = _csv(tmp_path / "train.csv.gz", _rows(36, stars), opener=gzip.open)
    dev_rows = _rows(18, [5, 1, 5, 3, 5, 2, 4, 5, 5], start=3)
    dev = tmp_path / "dev.jsonl.xz"
    with lzma.open(dev, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"text": text, "label": float(label)}) + "\n" for text, label in dev_rows)
    out = tmp_path / "run"
    code = main(["finetune", "classify", "--train", str(train), "--dev", str(dev), "--model", str(model), "--out",
                 str(out), "--max-steps", "3", "--batch-size", "8", "--max-seq-length", "16", "--lr", "0.01",
                 "--no-progress", "--train.tensorboard", "false"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert json.loads((out / "best" / "task.json").read_text())["labels"] == ["1", "2", "3", "4", "5"]
    lines = (out / "dev_predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0].split("\t") == ["id", "prediction", "p_1", "p_2", "p_3", "p_4", "p_5"]
    preds = [line.split("\t")[1] for line in lines[1:]]
    gold = [str(label) for _, label in dev_rows]
    run = json.loads((out / "metrics.json").read_text())["best"]["dev"]
    assert run["accuracy"] == pytest.approx(accuracy_score(gold, preds))
    assert run["macro_f1"] == pytest.approx(f1_score(gold, preds, average="macro", zero_division=0.0))
    assert run["mcc"] == pytest.approx(matthews_corrcoef(gold, preds))
    assert main(["evaluate", "classify", "--predictions", str(out / "dev_predictions.tsv"), "--dev", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out) == pytest.approx(run)
    # a dev label the model has no class for is one line naming file and line
    bad = _csv(tmp_path / "bad.csv", [["good film", "3"], ["bad plot", "6"]])
    assert main(["predict", "classify", "--model", str(out), "--dev", str(bad), "--out", str(tmp_path / "p")]) == 2
    assert_one_error(capsys, 2, "bad.csv:3", "label '6' is not in the label set")
