"""Tasks audit 22, as a user of `finetune|predict|evaluate race|glue` with real data: RACE exported from the
Hugging Face Hub (`ehovy/race`: one row per question, `validation` for dev, as JSON lines, Parquet or CSV) was
"no dev/ directory"; `predict race --max-qa-length` (or `--max-seq-length`) other than the model was fine-tuned
with was used without a word; a GLUE predictions file giving one index twice was scored with the later line, in
silence; GLUE's metrics came in an order of their own (accuracy before CoLA's MCC and MRPC's F1)."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import glue, metrics, race
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path

HF_COLUMNS = ["example_id", "article", "answer", "question", "options"]   # the Hub's ehovy/race


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _hf_rows(split: str) -> list[dict]:
    """The shared RACE passages of a split as the Hub's rows, one per question."""
    rows = []
    for level in race.LEVELS:
        for path in race.passage_files(shared_path("race", "RACE", split) / level):
            passage = json.loads(path.read_text(encoding="utf-8"))
            for question, options, answer in zip(passage["questions"], passage["options"], passage["answers"]):
                rows.append({"example_id": passage["id"], "article": passage["article"], "answer": answer,
                             "question": question, "options": options})
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _seen(examples) -> list[tuple]:
    return [(e.qid, e.level, e.article, e.question, e.options, e.label) for e in examples]


def test_a_hugging_face_race_export_reads_as_the_passage_files(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    original = {split: race.read_race(shared_path("race", "RACE"), split) for split in ("train", "dev")}
    _write_jsonl(tmp_path / "jsonl" / "validation.jsonl", _hf_rows("dev"))
    _write_jsonl(tmp_path / "jsonl" / "train.jsonl", _hf_rows("train"))
    rows = _hf_rows("train")      # the Hub's snapshot: all/train-00000-of-00002.parquet, a passage across shards
    (tmp_path / "hub" / "all").mkdir(parents=True)
    (tmp_path / "hub" / "middle").mkdir()   # the Hub's per-level configs beside all/
    pq.write_table(pa.Table.from_pylist(rows[:4]), tmp_path / "hub" / "all" / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[4:]), tmp_path / "hub" / "all" / "train-00001-of-00002.parquet")
    (tmp_path / "csv").mkdir()
    with (tmp_path / "csv" / "race_validation.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, HF_COLUMNS)     # the options as pandas' to_csv writes a list
        writer.writeheader()
        writer.writerows({**row, "options": str(row["options"])} for row in _hf_rows("dev"))
    assert _seen(race.read_race(tmp_path / "jsonl", "dev")) == _seen(original["dev"])
    assert _seen(race.read_race(tmp_path / "jsonl", "train")) == _seen(original["train"])
    assert _seen(race.read_race(tmp_path / "hub", "train")) == _seen(original["train"])
    assert _seen(race.read_race(tmp_path / "csv", "dev")) == _seen(original["dev"])
    assert [e.qid for e in race.read_race(tmp_path / "jsonl", "train", ("high",))][:2] == ["high/123.txt#0",
                                                                                         "high/123.txt#1"]
    predictions = tmp_path / "dev_predictions.json"
    predictions.write_text(json.dumps({e.qid: race.LETTERS[e.label] for e in original["dev"]}), encoding="utf-8")
    assert main(["evaluate", "race", "--data-dir", str(tmp_path / "csv"), "--predictions", str(predictions)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0


@pytest.mark.parametrize("change, message", [
    ({"example_id": "13.txt"}, r"validation\.jsonl:1: example_id 13\.txt names no level"),
    ({"options": ["a", "b"]}, r"validation\.jsonl:1: 2 options, RACE has a list of 4"),
    ({"answer": "E"}, r"validation\.jsonl:1: answer 'E' is not one of A, B, C, D"),
    ({"options": None}, r"options of type NoneType"),
])
def test_a_bad_hugging_face_race_row_is_named(tmp_path, change, message):
    row = _hf_rows("dev")[0]
    _write_jsonl(tmp_path / "validation.jsonl", [{**row, **change}])
    with pytest.raises(DataError, match=message):
        race.read_race(tmp_path, "dev")


def test_two_exports_of_one_split_are_refused(tmp_path):
    rows = _hf_rows("dev")
    _write_jsonl(tmp_path / "validation.jsonl", rows)
    _write_jsonl(tmp_path / "dev.json", rows)
    with pytest.raises(DataError, match=r"dev\.json and validation\.jsonl are two exports of one split"):
        race.read_race(tmp_path, "dev")
    (tmp_path / "dev.json").unlink()
    _write_jsonl(tmp_path / "validation.jsonl", [rows[0], {**rows[1], "article": "Another text."}])
    with pytest.raises(DataError, match=r"validation\.jsonl:2: example_id middle13\.txt has another article than "
                                        r"at .*validation\.jsonl:1"):
        race.read_race(tmp_path, "dev")


def _race_model(directory: Path, pretrained: Path) -> Path:
    """A RACE model as a fine-tuning run's best/ (a multiple-choice head, task.json with its lengths)."""
    from albertlm.model.heads import AlbertForMultipleChoice

    AlbertForMultipleChoice.from_pretrained(pretrained).save_pretrained(directory)
    shutil.copy(pretrained / "vocab.txt", directory / "vocab.txt")
    (directory / "task.json").write_text(json.dumps({"family": "race", "levels": ["middle", "high"],
                                                     "max_qa_length": 16, "max_seq_length": 48}))
    return directory


def test_predict_race_at_other_lengths_than_the_model_says_so(tmp_path, capsys):
    model = _race_model(tmp_path / "best", save_tiny_pretrained(tmp_path))
    args = ["predict", "race", "--model", str(model), "--data-dir", str(shared_path("race", "RACE")),
            "--no-progress", "--out"]
    assert main([*args, str(tmp_path / "same")]) == 0
    assert "fine-tuned with" not in capsys.readouterr().err      # the recorded lengths: nothing to say
    assert main([*args, str(tmp_path / "other"), "--max-qa-length", "40", "--max-seq-length", "64"]) == 0
    err = capsys.readouterr().err
    assert "warning: --max-qa-length 40: the model was fine-tuned with 16" in err
    assert "warning: --max-seq-length 64: the model was fine-tuned with 48" in err


def test_a_glue_prediction_given_twice_is_refused(tmp_path, capsys):
    dev = shared_path("glue", "CoLA", "val.tsv")
    rows = len(dev.read_text(encoding="utf-8").splitlines())
    predictions = tmp_path / "dev_predictions.tsv"
    predictions.write_text("index\tprediction\n" + "".join(f"{i}\t0\n" for i in range(rows)) + "5\t1\n",
                           encoding="utf-8")
    code = main(["evaluate", "glue", "--task", "cola", "--dev", str(dev), "--predictions", str(predictions)])
    assert_one_error(capsys, code, f"dev_predictions.tsv:{rows + 2}: a second prediction for index 5",
                     "the first at line 7")
    with pytest.raises(DataError, match="a second prediction for index 5"):
        glue.read_predictions(glue.get_task("cola"), predictions)


def test_glue_metrics_put_the_tasks_own_first():
    gold, preds = [0, 1, 1, 0, 1], [0, 1, 0, 0, 1]
    assert list(metrics.glue_metrics("cola", gold, preds)) == ["mcc", "accuracy"]
    assert list(metrics.glue_metrics("mrpc", gold, preds)) == ["f1", "accuracy", "acc_and_f1"]
    assert list(metrics.glue_metrics("stsb", [0.0, 1.0, 2.5], [0.5, 1.0, 2.0])) == ["pearson", "spearman", "corr"]
    assert list(metrics.glue_metrics("rte", gold, preds)) == ["accuracy"]
