"""RACE audit 21, as a user running Table 14's RACE end to end (finetune, predict, evaluate, export): test
predictions scored with `--data-dir RACE/dev` (a split directory, which evaluate takes) were scored against dev's
answers; a passage file saved twice (`13 (1).txt`, an exact copy) counted its questions twice in training and
accuracy; a question+option cut to --max-qa-length lost its start without a word (SQuAD counts its question
cuts); a passage file named with digits that are no number (`².txt`) was a ValueError traceback, and `013.txt` /
`13.txt` came in the directory listing's order."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import race
from albertlm.tasks.tables import DataError, Problems
from conftest import assert_one_error, shared_path


def _passage(answer: str = "A", pid: str = "middle1.txt") -> dict:
    return {"id": pid, "article": "Tom has a red ball.", "questions": ["What colour is it?"],
            "options": [["blue", "red", "green", "black"]], "answers": [answer]}


def _write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_test_predictions_on_the_dev_directory_are_refused(tmp_path, capsys):
    """`evaluate race --data-dir RACE/dev --predictions test_predictions.json` read RACE/dev as the test split
    (accuracy 0.0 where the test answers give 1.0); `predict --data-dir RACE/dev --split test` named dev's
    predictions test_predictions.json."""
    root = tmp_path / "RACE"
    _write(root / "dev" / "middle" / "1.txt", _passage("A"))
    _write(root / "test" / "middle" / "1.txt", _passage("B"))
    predictions = tmp_path / "test_predictions.json"
    predictions.write_text(json.dumps({"middle/1.txt#0": "B"}), encoding="utf-8")
    code = main(["evaluate", "race", "--data-dir", str(root / "dev"), "--predictions", str(predictions)])
    assert_one_error(capsys, code, "RACE's dev split, not its test split", f"--data-dir {root}")
    with pytest.raises(DataError, match="RACE's test split, not its dev split"):
        race.read_race(root / "test", "dev")
    assert [e.label for e in race.read_race(root / "test", "test")] == [1]       # its own split: read
    shutil.copytree(root / "test", tmp_path / "mine")                             # a name no split has: --split
    assert [e.label for e in race.read_race(tmp_path / "mine", "test")] == [1]
    assert len(race.read_race(shared_path("race", "RACE", "dev"), "dev")) == 11


def test_a_passage_saved_twice_is_refused_naming_both_files(tmp_path):
    level = tmp_path / "RACE" / "dev" / "middle"
    shutil.copytree(shared_path("race", "RACE", "dev", "middle"), level)
    shutil.copy(level / "13.txt", level / "13 (1).txt")
    with pytest.raises(DataError, match=r"13 \(1\)\.txt: a copy of 13\.txt \(passage id middle13\.txt\)"):
        race.read_race(tmp_path / "RACE", "dev")
    passage = json.loads((level / "13.txt").read_text(encoding="utf-8"))
    _write(level / "13 (1).txt", {**passage, "answers": []})            # one id, other content: read
    assert len(race.read_race(tmp_path / "RACE", "dev", answers=False)) == 16


class Letters:
    """One id per character: enough for the lengths."""
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + ord(c) % 20 for c in t] for t in texts]


def test_a_question_cut_to_max_qa_length_is_counted():
    dev = race.read_race(shared_path("race", "RACE"), "dev")
    problems = Problems()
    race.build_features(Letters(), dev, max_seq_length=512, max_qa_length=20, problems=problems, split="dev")
    assert problems.counts["question+option truncated to max_qa_length"] == 11
    assert problems.examples["question+option truncated to max_qa_length"][0] == "dev/middle/13.txt#0"
    problems = Problems()
    race.build_features(Letters(), dev, max_seq_length=512, max_qa_length=512, problems=problems, split="dev")
    assert "question+option truncated to max_qa_length" not in problems.counts


def test_passage_file_order_is_the_names_not_the_listing(tmp_path, monkeypatch):
    level = tmp_path / "RACE" / "dev" / "middle"
    for name in ("013.txt", "13.txt", "2.txt", "\u00b2.txt"):
        _write(level / name, _passage(pid=f"middle{name}"))
    glob = Path.glob
    orders = []
    for reverse in (False, True):
        monkeypatch.setattr(Path, "glob", lambda self, pattern: sorted(glob(self, pattern), reverse=reverse))
        orders.append([e.qid for e in race.read_race(tmp_path / "RACE", "dev")])
    assert orders[0] == orders[1] == ["middle/2.txt#0", "middle/013.txt#0", "middle/13.txt#0", "middle/\u00b2.txt#0"]


def test_a_level_directory_or_a_passage_file_names_what_to_give(tmp_path, capsys):
    middle = shared_path("race", "RACE", "dev", "middle")
    code = main(["evaluate", "race", "--data-dir", str(middle), "--predictions", str(tmp_path / "p.json")])
    assert_one_error(capsys, code, "is one level", f"--data-dir {middle.parent} --levels middle")
    with pytest.raises(DataError, match=r"13\.txt is a file: give the RACE directory"):
        race.read_race(middle / "13.txt", "dev")
