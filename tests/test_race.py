"""RACE reader on ../shared/data/race/RACE, the `_` filling rule, multiple-choice features, metrics."""
from __future__ import annotations

import json

import numpy as np
import pytest

from albertlm.errors import UserError
from albertlm.tasks import race
from conftest import shared_path


def test_reader_counts_levels_and_labels():
    root = shared_path("race", "RACE")
    train = race.read_race(root, "train")
    dev = race.read_race(root, "dev")
    assert len(train) == 22 and len(dev) == 11
    assert sum(e.level == "high" for e in train) == 12 and sum(e.level == "middle" for e in train) == 10
    assert {e.level for e in dev} == {"middle"}
    assert [e.label for e in dev[:5]] == [0, 2, 0, 3, 1]             # middle/13.txt: A C A D B
    assert dev[0].qid == "middle/13.txt#0" and all(len(e.options) == 4 for e in train + dev)
    assert len(race.read_race(root, "train", levels=("high",))) == 12


def test_question_with_option():
    assert race.question_with_option("The boy  _  .", "ran away") == "The boy  ran away  ."
    assert race.question_with_option("Where is it?", "In a book.") == "Where is it? In a book."


def test_missing_field_and_bad_answer_name_the_file(tmp_path):
    level = tmp_path / "RACE" / "dev" / "middle"
    level.mkdir(parents=True)
    source = json.loads(shared_path("race", "RACE", "dev", "middle", "73.txt").read_text())
    broken = {k: v for k, v in source.items() if k != "options"}
    (level / "1.txt").write_text(json.dumps(broken))
    with pytest.raises(UserError, match=r"1\.txt: missing field 'options'"):
        race.read_race(tmp_path / "RACE", "dev")
    (level / "1.txt").write_text(json.dumps({**source, "answers": ["D", "E"]}))
    with pytest.raises(UserError, match=r"1\.txt: question 1: answer 'E'"):
        race.read_race(tmp_path / "RACE", "dev")
    with pytest.raises(UserError, match="no test/ directory"):
        race.read_race(tmp_path / "RACE", "test")


class CharTokenizer:
    """One id per character (a-z -> 5..30, others 31): enough to check layout and truncation."""
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + ord(c) - 97 if "a" <= c <= "z" else 31 for c in t.lower()] for t in texts]


def test_features_are_four_choices_cut_to_fit():
    dev = race.read_race(shared_path("race", "RACE"), "dev")
    features = race.build_features(CharTokenizer(), dev, max_seq_length=100, max_qa_length=20)
    f = features[0]
    assert f.input_ids.shape[0] == 4 and f.input_ids.shape[1] <= 100 and f.label == 0
    for c, option in enumerate(dev[0].options):
        row = f.input_ids[c]
        seps = np.flatnonzero(row == 3)
        assert row[0] == 2 and len(seps) == 2
        qa = race.question_with_option(dev[0].question, option)
        assert len(row[seps[0] + 1:seps[1]]) == min(20, len(qa))          # question+option kept (its end)
        assert (f.token_type_ids[c, seps[0] + 1:seps[1] + 1] == 1).all()


def test_metrics_per_level():
    examples = race.read_race(shared_path("race", "RACE"), "train")
    labels = [e.label for e in examples]
    preds = [(l if e.level == "high" else (l + 1) % 4) for e, l in zip(examples, labels)]
    out = race.race_metrics(examples, preds)
    assert out["accuracy_high"] == 1.0 and out["accuracy_middle"] == 0.0
    assert out["accuracy"] == pytest.approx(12 / 22)
