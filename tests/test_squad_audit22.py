"""SQuAD audit 22, as a researcher reproducing ALBERT's SQuAD v2 runs: the metrics of fine-tuning and `evaluate
--model` lacked the official script's `best_f1_thresh`; a flat record whose `answers` is the official layout's list
of {text, answer_start} objects was refused; an `answer_start` written as 10.0 (pandas) was refused; the SQuAD
section of docs/finetuning.md did not say that the v2.0 head is BERT's null span, not google's answer_class."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import squad
from albertlm.tasks.tables import DataError

CONTEXT = "Rollo met Charles in 911."


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _nested(answer_start) -> dict:
    return {"data": [{"title": "t", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Charles", "answer_start": answer_start}]}]}]}]}


# ----------------------------------------------------------------------------------------- metrics keys

def test_tuned_metrics_name_the_threshold_best_f1_thresh_as_the_official_script():
    """Fine-tuning's dev metrics had best_exact, best_exact_thresh and best_f1 but not best_f1_thresh."""
    golds = {"a": ["Charles"], "b": [], "c": ["911"]}
    preds = {"a": squad.ExamplePrediction(squad.SpanPrediction("Charles", 5.0), null_score=1.0),
             "b": squad.ExamplePrediction(squad.SpanPrediction("Rollo", 1.0), null_score=2.0),
             "c": squad.ExamplePrediction(squad.SpanPrediction("Rollo", 2.0), null_score=1.5)}
    metrics = squad.tune_threshold(golds, preds)
    assert metrics["best_f1_thresh"] == metrics["null_threshold"]
    assert {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(metrics)


# ------------------------------------------------------------------------------------------ reading files

def test_a_flat_record_with_the_official_answer_objects_is_read(tmp_path, capsys):
    """{"id", "question", "context", "answers": [{"text", "answer_start"}]} (a flattened official file) was
    refused as "'answers' is a list"."""
    records = [{"id": "q1", "question": "Who?", "context": CONTEXT,
                "answers": [{"text": "Charles", "answer_start": 10}, {"text": "Charles", "answer_start": 10}]},
               {"id": "q2", "question": "When?", "context": CONTEXT, "answers": []}]
    gold = _write(tmp_path / "flat.json", {"data": records})
    examples = squad.read_squad(gold)
    assert [(e.qid, e.answers, e.is_impossible) for e in examples] == [
        ("q1", [("Charles", 10), ("Charles", 10)], False), ("q2", [], True)]
    preds = _write(tmp_path / "predictions.json", {"q1": "Charles", "q2": ""})
    assert main(["evaluate", "squad", "--data", str(gold), "--predictions", str(preds)]) == 0
    assert json.loads(capsys.readouterr().out)["exact"] == 100.0


def test_a_flat_record_with_answers_of_another_shape_is_still_one_error(tmp_path):
    record = {"id": "q1", "question": "Who?", "context": CONTEXT, "answers": [{"text": "Charles"}, "Charles"]}
    with pytest.raises(DataError, match="'answers' is a list.*list of"):
        squad.read_squad(_write(tmp_path / "flat.json", {"data": [record]}))


def test_an_answer_start_written_as_a_whole_float_is_that_offset(tmp_path):
    """`"answer_start": 10.0` (a file passed through pandas) was refused as not a character offset."""
    (example,) = squad.read_squad(_write(tmp_path / "dev.json", _nested(10.0)))
    assert example.answers == [("Charles", 10)] and isinstance(example.answers[0][1], int)
    with pytest.raises(DataError, match="'answer_start' is 10.5"):
        squad.read_squad(_write(tmp_path / "dev.json", _nested(10.5)))


# ------------------------------------------------------------------------------------------------- docs

def _squad_section() -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "finetuning.md").read_text(encoding="utf-8")
    return text.split("## SQuAD v1.1 / v2.0", 1)[1].split("\n## ", 1)[0]


def test_the_docs_say_the_v2_head_is_not_googles_answer_class():
    """A researcher reproducing ALBERT's SQuAD 2.0 numbers read nothing in docs/finetuning.md about the v2 head
    differing from google-research's run_squad_v2.py (README said it in one line)."""
    section = _squad_section()
    assert "run_squad_v2.py" in section and "answer_class" in section
    assert "best_f1_thresh" in section
