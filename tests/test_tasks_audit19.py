"""Task data audit 19, as a user preparing RACE for fine-tuning and prediction: `predict race` refused a user's
own passages without answers; a split lacking a level asked for (the shared data has no dev/high) reported the
other level's accuracy as `accuracy` without a word; `finetune race --split train` counted the training questions'
truncations twice; nothing was shown while a large set was tokenized; `predict race --data-dir` of the folder
holding RACE/ said "no data to predict" instead of naming RACE/."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.config.task import FinetuneConfig
from albertlm.tasks.specs import race_spec
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path


class Letters:
    """A tokenizer of one id per letter: enough for features, no files."""
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + ord(c) - 97 if "a" <= c <= "z" else 31 for c in t.lower()] for t in texts]


CFG = FinetuneConfig(max_seq_length=64)


def _unanswered(root: Path, split: str, name: str, empty_list: bool = False) -> Path:
    """root/<split>/high/<name>: the shared dev passage 73 (2 questions) with its answers taken away."""
    data = json.loads(shared_path("race", "RACE", "dev", "middle", "73.txt").read_text(encoding="utf-8"))
    del data["answers"]
    if empty_list:
        data["answers"] = []
    path = root / split / "high" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_passages_without_answers_are_predicted_not_scored(tmp_path):
    _unanswered(tmp_path, "test", "1.txt")
    _unanswered(tmp_path, "test", "2.txt", empty_list=True)
    spec = race_spec(tmp_path, Letters(), CFG, training=False, eval_splits=("test",))
    (test,) = spec.eval_sets
    assert test.score is None and [f.label for f in test.features] == [None] * 4
    test.write({"logits": np.eye(4)[[1, 2, 3, 0]]}, tmp_path)
    assert json.loads((tmp_path / "test_predictions.json").read_text()) == {
        "high/1.txt#0": "B", "high/1.txt#1": "C", "high/2.txt#0": "D", "high/2.txt#1": "A"}
    assert not (tmp_path / "test_metrics.json").exists() and spec.warnings == []
    _unanswered(tmp_path, "train", "1.txt")                    # training questions still need their answers
    with pytest.raises(DataError, match="missing field 'answers'"):
        race_spec(tmp_path, Letters(), CFG, training=True)


def test_a_split_with_and_without_answers_is_refused_naming_the_passage(tmp_path):
    shutil.copytree(shared_path("race", "RACE", "dev"), tmp_path / "dev")
    _unanswered(tmp_path, "dev", "5.txt")
    with pytest.raises(DataError, match=r"dev: 2 of the 13 questions have no answer \(first high/5\.txt#0"):
        race_spec(tmp_path, Letters(), CFG, training=False)


def test_a_level_missing_from_the_scored_split_is_said():
    spec = race_spec(shared_path("race", "RACE"), Letters(), CFG, training=True)   # dev/ has middle/ only
    assert spec.warnings == ["RACE dev has no high passages: its accuracy is over middle alone "
                             "(--levels middle,high)"]
    assert race_spec(shared_path("race", "RACE"), Letters(), CFG, ("middle",), training=False).warnings == []


def test_split_train_while_fine_tuning_counts_the_training_questions_once():
    spec = race_spec(shared_path("race", "RACE"), Letters(), CFG, training=True, eval_splits=("train",))
    (train,) = spec.eval_sets
    assert train.features is spec.train and len(spec.train) == 22
    assert spec.problems.counts == {"passage truncated to max_seq_length": 22,
                                    "question+option truncated to max_qa_length": 3}


def test_predicting_the_folder_holding_race_names_it():
    with pytest.raises(DataError, match=r"no dev/ directory .*give the RACE directory itself: .*race[/\\]RACE$"):
        race_spec(shared_path("race"), Letters(), CFG, training=False)
    with pytest.raises(DataError, match=r"no test/ directory"):      # --split test where there is none
        race_spec(shared_path("race", "RACE"), Letters(), CFG, training=False, eval_splits=("test",))


def test_tokenizing_a_set_is_shown_on_a_terminal_unless_no_progress(monkeypatch, capsys):
    monkeypatch.setattr("albertlm.training.metrics._terminal", lambda: True)
    for shown in (True, False):
        cfg = CFG.replace(train=dataclasses.replace(CFG.train, progress=shown))
        spec = race_spec(shared_path("race", "RACE"), Letters(), cfg, training=True)
        assert len(spec.train) == 22 and len(spec.eval_sets[0].features) == 11
        err = capsys.readouterr().err
        assert ("tokenize RACE train" in err and "tokenize RACE dev" in err) is shown and (err == "") is not shown
    monkeypatch.setenv("LOCAL_RANK", "1")              # torchrun's other ranks: the first one's bar only
    monkeypatch.setenv("WORLD_SIZE", "2")              # (torchrun sets it; LOCAL_RANK past it is no launch)
    race_spec(shared_path("race", "RACE"), Letters(), CFG, training=True)
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def race_run(tmp_path_factory):
    """A tiny RACE model fine-tuned one step on the shared data (RUN/best)."""
    from albertlm.cli.main import main

    root = tmp_path_factory.mktemp("race_run")
    (root / "pre").mkdir()
    model = save_tiny_pretrained(root / "pre")
    assert main(["finetune", "race", "--data-dir", str(shared_path("race", "RACE")), "--model", str(model),
                 "--out", str(root / "run"), "--max-steps", "1", "--batch-size", "2", "--max-seq-length", "64",
                 "--no-progress"]) == 0
    return root / "run"


def test_predict_says_the_missing_level_and_predicts_unanswered_passages(race_run, tmp_path, capsys):
    from albertlm.cli.main import main

    capsys.readouterr()
    assert main(["predict", "race", "--data-dir", str(shared_path("race", "RACE")), "--model", str(race_run),
                 "--out", str(tmp_path / "p1"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["dev"]["num_middle"] == 11
    assert "albertlm predict: warning: RACE dev has no high passages" in captured.err
    _unanswered(tmp_path / "mine", "test", "1.txt")
    assert main(["predict", "race", "--data-dir", str(tmp_path / "mine"), "--model", str(race_run),
                 "--out", str(tmp_path / "p2"), "--no-progress"]) == 0
    assert "dev" not in json.loads(capsys.readouterr().out)
    assert sorted(json.loads((tmp_path / "p2" / "test_predictions.json").read_text())) == ["high/1.txt#0",
                                                                                          "high/1.txt#1"]
    assert main(["predict", "race", "--data-dir", str(shared_path("race")), "--model", str(race_run),
                 "--out", str(tmp_path / "p3")]) == 2
    assert_one_error(capsys, 2, "give the RACE directory itself")
