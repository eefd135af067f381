"""GLUE audit 30 (a researcher submitting every GLUE task and AX to gluebenchmark.com) and two classify follow-ups.

MNLI's mismatched test set in a file whose name says neither set (`test.tsv`, a renamed copy) was written as
MNLI-m.tsv, the matched set's submission file, which the server scores against the matched answers: its genre
column tells the two sets apart (five genres each), and now names the file when the name does not. `finetune
classify` on labels that differ only in case (`Positive` / `positive`) trained them as two classes without a word:
one warning line. A Hugging Face Parquet / Arrow file whose label column is a `ClassLabel` trained on its ids and
named the classes "0", "1" (predictions, task.json): the names in the file's schema are the classes now, the ids
of dev files with the same names read as those classes; an earlier run's "0", "1" keeps reading ids."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import classify, glue, specs
from albertlm.tasks.tables import DataError
from conftest import TINY_WORDS, save_tiny_pretrained

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags
from test_glue_audit17 import MNLI, MNLI_COLUMNS, W, _glue_model, _tsv
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)

CFG = FinetuneConfig(max_seq_length=16)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit30_glue"))


# ------------------------------------------------------------------------- MNLI's two test sets by their genres

def _mnli_file(path: Path, genres: list[str], labelled: bool = False) -> Path:
    """GLUE's MNLI layout (download_glue_data.py): test files end at sentence2; dev files add five annotator
    labels and gold_label."""
    extra = [f"label{k}" for k in range(1, 6)] + ["gold_label"] if labelled else []
    return _tsv(path, [MNLI_COLUMNS + extra, *[[i, 100 + i, f"{i}n", genre, "( a )", "( b )", "(ROOT a)", "(ROOT b)",
                                               W[i % 6], W[(i + 1) % 6], *([MNLI[i % 3]] * 6 if labelled else [])]
                                              for i, genre in enumerate(genres)]])


MATCHED = ["fiction", "government", "slate", "telephone", "travel", "slate"]
MISMATCHED = ["facetoface", "letters", "nineeleven", "oup", "verbatim", "letters"]


def test_mnli_sets_are_told_by_their_genres(tmp_path):
    """glue.mnli_set: the set every row's genre is of; None for mixed or other genres, or a Hub export."""
    assert glue.mnli_set(_mnli_file(tmp_path / "a.tsv", MATCHED)) == "matched"
    assert glue.mnli_set(_mnli_file(tmp_path / "b.tsv", MISMATCHED)) == "mismatched"
    assert glue.mnli_set(_mnli_file(tmp_path / "c.tsv", MISMATCHED, labelled=True)) == "mismatched"
    assert glue.mnli_set(_mnli_file(tmp_path / "d.tsv", MATCHED[:3] + MISMATCHED[:3])) is None
    assert glue.mnli_set(_mnli_file(tmp_path / "e.tsv", ["snli"] * 3)) is None
    assert glue.mnli_set(_tsv(tmp_path / "f.tsv", [["index", "sentence1", "sentence2"], [0, W[0], W[1]]])) is None
    assert glue.mnli_set(tmp_path / "nowhere.tsv") is None


@pytest.mark.parametrize("name, genres, expected", [
    ("test.tsv", MISMATCHED, "MNLI-mm.tsv"),             # a renamed copy: the genres say which set
    ("mnli_test.tsv.gz", MISMATCHED, "MNLI-mm.tsv"),
    ("test.tsv", MATCHED, "MNLI-m.tsv"),
    ("test.tsv", MATCHED[:3] + MISMATCHED[:3], "MNLI-m.tsv"),   # neither set: as before
    ("test_mismatched.tsv", MATCHED, "MNLI-mm.tsv"),     # a name that says its set is taken at its word
    ("test_matched.tsv", MISMATCHED, "MNLI-m.tsv"),
])
def test_an_mnli_test_files_submission_name(tmp_path, name, genres, expected):
    path = _mnli_file(tmp_path / "plain.tsv", genres)
    if name.endswith(".gz"):
        import gzip

        target = tmp_path / name
        target.write_bytes(gzip.compress(path.read_bytes()))
        path = target
    else:
        path = path.rename(tmp_path / name)
    assert specs._submission_name(glue.get_task("mnli"), path) == expected


def test_predict_on_a_renamed_mismatched_test_file_writes_mnli_mm(pretrained, tmp_path, capsys):
    """End to end: `predict glue --task mnli --test test.tsv` on the mismatched test set wrote MNLI-m.tsv; now
    MNLI-mm.tsv, beside the matched set's MNLI-m.tsv from another renamed file, and the dev sets scored as
    scikit-learn scores their written predictions."""
    from sklearn.metrics import accuracy_score

    model = _glue_model(tmp_path / "best", pretrained, "mnli")
    mm = _mnli_file(tmp_path / "mm" / "test.tsv", MISMATCHED)
    m = _mnli_file(tmp_path / "m" / "test.tsv", MATCHED)
    dev = _mnli_file(tmp_path / "dev_mismatched.tsv", MISMATCHED, labelled=True)
    out = tmp_path / "out"
    code = main(["predict", "glue", "--task", "mnli", "--model", str(model), "--test", str(mm), "--test", str(m),
                 "--dev", str(dev), "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    printed = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in (out / "submission").iterdir()) == ["MNLI-m.tsv", "MNLI-mm.tsv"]
    for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
        lines = (out / "submission" / name).read_text().splitlines()
        assert lines[0] == "index\tprediction" and [line.split("\t")[0] for line in lines[1:]] == list("012345")
        assert {line.split("\t")[1] for line in lines[1:]} <= set(MNLI)
    predicted = [line.split("\t")[1] for line in (out / "dev_mismatched_predictions.tsv").read_text().splitlines()[1:]]
    gold = [e.label for e in glue.read_examples("mnli", dev)]
    assert printed["dev_mismatched"]["accuracy"] == pytest.approx(accuracy_score(gold, predicted))


# ------------------------------------------------------------------------- classify: labels differing in case

def _classify_csv(path: Path, labels: list[str]) -> Path:
    import csv

    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows([[" ".join(TINY_WORDS[(i + k) % len(TINY_WORDS)] for k in range(1 + i % 3)), label]
                          for i, label in enumerate(labels)])
    return path


def test_training_labels_differing_only_in_case_are_said_once(tiny_tokenizer, tmp_path):
    """`Positive` (2 rows) and `positive` (3 rows) trained as two classes without a word; they still are (the file
    says so), with one warning line naming each pair's spellings and rows; one spelling per label says nothing."""
    labels = ["positive", "Positive", "negative", "positive", "Positive", "positive", "NEGATIVE", "negative"]
    train = _classify_csv(tmp_path / "train.csv", labels)
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), train_file=train)
    said = [line for line in spec.warnings if "differ only in case" in line]
    assert said == ["train.csv: labels that differ only in case are 4 classes, not 2: 'NEGATIVE' (1 row) and "
                    "'negative' (2 rows); 'Positive' (2 rows) and 'positive' (3 rows); if they are one class, write it "
                    "one way in the file"], spec.warnings
    assert spec.info["labels"] == ["NEGATIVE", "Positive", "negative", "positive"]
    plain = _classify_csv(tmp_path / "plain.csv", ["positive", "negative", "positive"])
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), train_file=plain)
    assert not [line for line in spec.warnings if "differ only in case" in line]
    # a label set given is the user's: nothing said
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), train_file=train,
                               labels=["positive", "Positive", "negative", "NEGATIVE"])
    assert not [line for line in spec.warnings if "differ only in case" in line]


# ------------------------------------------------------------------- classify: a ClassLabel column's names

def _hub_split(path: Path, labels: list[int], names: list[str], kind: str = "parquet") -> Path:
    """A `datasets` split with a ClassLabel label column, written by datasets itself (Parquet, or save_to_disk)."""
    import datasets

    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=names)})
    texts = [" ".join(TINY_WORDS[(i + k) % len(TINY_WORDS)] for k in range(1 + i % 3)) for i in range(len(labels))]
    data = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
    if kind == "parquet":
        data.to_parquet(str(path))
    else:
        data.save_to_disk(str(path))
    return path


def test_class_label_names_are_read_from_the_schema(tmp_path):
    names = ["negative", "positive"]
    parquet = _hub_split(tmp_path / "train.parquet", [0, 1, 1], names)
    saved = _hub_split(tmp_path / "saved", [0, 1, 1], names, kind="folder")
    assert specs.class_label_names(parquet, "label") == names
    assert specs.class_label_names(saved, "label") == names
    arrow = next(saved.glob("*.arrow"))
    assert specs.class_label_names(arrow, "label") == names
    assert specs.class_label_names(parquet, "text") is None           # a Value column
    csv_file = _classify_csv(tmp_path / "x.csv", ["0", "1"])
    assert specs.class_label_names(csv_file, "label") is None
    assert specs.class_label_names(tmp_path / "missing.parquet", "label") is None
    # names no label set can hold: the ids as before
    assert specs.class_label_names(_hub_split(tmp_path / "comma.parquet", [0, 1], ["good, very", "bad"]),
                                   "label") is None


def test_a_class_label_file_trains_on_its_class_names(tiny_tokenizer, tmp_path):
    """The Hub's ClassLabel column (ids 0..K-1) made the classes "0", "1", "2"; now its names, in its id order (a
    class the training split lacks is still one), and a dev file's ids read by its own names (another order
    too); a CSV dev file of names scores against them."""
    names = ["negative", "neutral", "positive"]
    train = _hub_split(tmp_path / "train.parquet", [0, 2, 2, 0, 0, 2], names)
    dev = _hub_split(tmp_path / "dev.parquet", [1, 0, 2], ["positive", "negative", "neutral"])
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), train_file=train, dev_file=dev)
    assert spec.info["labels"] == names and spec.model_overrides["num_labels"] == 3
    assert [f.label for f in spec.train] == [0, 2, 2, 0, 0, 2]
    dev_set = spec.eval_sets[0]
    # dev ids 1, 0, 2 are negative, positive, neutral: ids 0, 2, 1 of the run
    assert [f.label for f in dev_set.features] == [0, 2, 1]
    logits = np.eye(3, dtype=np.float32)[[0, 2, 1]]
    assert dev_set.score({"logits": logits})["accuracy"] == 1.0
    written = dev_set.write({"logits": logits}, tmp_path)[0].read_text().splitlines()
    assert [line.split("\t")[1] for line in written[1:]] == ["negative", "positive", "neutral"]
    # predict / evaluate with the run's labels (task.json): a Parquet dev file's ids by its names, a CSV's names
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), dev_file=dev, labels=names,
                               training=False)
    assert [f.label for f in spec.eval_sets[0].features] == [0, 2, 1]
    named = _classify_csv(tmp_path / "dev.csv", ["positive", "neutral"])
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), dev_file=named, labels=names,
                               training=False)
    assert [f.label for f in spec.eval_sets[0].features] == [2, 1]


def test_an_earlier_runs_class_ids_keep_reading_ids(tiny_tokenizer, tmp_path):
    """A run trained before (labels "0", "1", "2" in task.json) or given `--labels 0,1,2` reads a ClassLabel file's
    ids as those classes, as it did; a file of other names keeps its ids, which are then no classes of the run."""
    names = ["negative", "neutral", "positive"]
    dev = _hub_split(tmp_path / "dev.parquet", [1, 0, 2], names)
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), dev_file=dev, labels=["0", "1", "2"],
                               training=False)
    assert [f.label for f in spec.eval_sets[0].features] == [1, 0, 2]
    train = _hub_split(tmp_path / "train.parquet", [0, 1, 2, 1], names)
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), train_file=train, labels=["0", "1", "2"])
    assert spec.info["labels"] == ["0", "1", "2"] and [f.label for f in spec.train] == [0, 1, 2, 1]
    # a dev file of two of the run's three classes: by their names; of other names: its ids, named as unknown
    two = _hub_split(tmp_path / "two.parquet", [0, 1], ["negative", "positive"])
    spec = specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), dev_file=two, labels=names,
                               training=False)
    assert [f.label for f in spec.eval_sets[0].features] == [0, 2]
    other = _hub_split(tmp_path / "other.parquet", [0, 1], ["bad", "good"])
    with pytest.raises(DataError, match=r"other.parquet:1: label '0' is not in the label set"):
        specs.classify_spec(tiny_tokenizer, CFG, classify.Columns("text"), dev_file=other, labels=names,
                            training=False)


def test_finetune_classify_on_a_hub_parquet_file_names_its_classes(pretrained, tmp_path, capsys):
    """End to end: task.json and the predictions file name the ClassLabel's classes, not 0 and 1."""
    names = ["negative", "positive"]
    train = _hub_split(tmp_path / "train.parquet", [0, 1, 1, 0, 1, 0], names)
    dev = _hub_split(tmp_path / "dev.parquet", [1, 0, 1], names)
    out = tmp_path / "run"
    code = main(["finetune", "classify", "--train", str(train), "--dev", str(dev), "--model", str(pretrained),
                 "--out", str(out), "--max-steps", "1", *QUICK])
    assert code == 0, capsys.readouterr().err
    task = json.loads(next(out.rglob("task.json")).read_text())
    assert task["labels"] == names
    rows = (out / "dev_predictions.tsv").read_text().splitlines()
    assert rows[0].split("\t") == ["id", "prediction", "p_negative", "p_positive"]
    assert {row.split("\t")[1] for row in rows[1:]} <= set(names)
