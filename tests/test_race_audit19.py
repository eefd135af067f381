"""RACE audit 19, as a new user preparing the data: google-research's `all.txt` (run_race.py reads
RACE/<split>/<level>/all.txt, one passage per line) beside the passage files was "not valid JSON (line 2: Extra
data)" and alone could not be read; macOS `._13.txt` copies and a directory named `*.txt` stopped the read; an
empty article was trained and scored on; `finetune race --data-dir RACE/dev` trained on the dev split; `--levels ""`
said "no passages found under /"; google-research's --data_dir (the folder holding RACE/) got no hint."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import race
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path


def _copy_dev(tmp_path: Path) -> Path:
    """tmp_path/RACE/dev/middle holding the three shared dev passages (13, 34, 73); returns RACE."""
    root = tmp_path / "RACE"
    shutil.copytree(shared_path("race", "RACE", "dev"), root / "dev")
    return root


def _all_txt(level_dir: Path) -> Path:
    """google-research's all.txt: the level's passage files, one JSON object per line."""
    lines = [path.read_text(encoding="utf-8") for path in sorted(level_dir.glob("[0-9]*.txt"))]
    (level_dir / "all.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return level_dir / "all.txt"


def _summary(examples):
    return [(e.qid, e.level, e.label, e.options) for e in examples]


def test_all_txt_beside_the_passage_files_is_not_read_again(tmp_path):
    root = _copy_dev(tmp_path)
    expected = _summary(race.read_race(root, "dev"))
    _all_txt(root / "dev" / "middle")
    assert _summary(race.read_race(root, "dev")) == expected and len(expected) == 11


def test_all_txt_alone_is_read_with_the_passage_files_question_ids(tmp_path):
    root = _copy_dev(tmp_path)
    expected = _summary(race.read_race(root, "dev"))
    _all_txt(root / "dev" / "middle")
    for path in (root / "dev" / "middle").glob("[0-9]*.txt"):
        path.unlink()
    assert _summary(race.read_race(root, "dev")) == expected          # middle13.txt -> middle/13.txt#0 ...


def test_all_txt_repeating_a_passage_id_is_refused_naming_its_line(tmp_path):
    level = tmp_path / "RACE" / "dev" / "high"
    level.mkdir(parents=True)
    passage = shared_path("race", "RACE", "dev", "middle", "73.txt").read_text(encoding="utf-8")
    (level / "all.txt").write_text(passage + "\n" + passage + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"all\.txt:2: passage id middle73\.txt repeats line 1"):
        race.read_race(tmp_path / "RACE", "dev")


def test_hidden_copies_and_directories_named_txt_are_not_passages(tmp_path):
    root = _copy_dev(tmp_path)
    level = root / "dev" / "middle"
    (level / "._13.txt").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")   # AppleDouble
    (level / "notes.txt").mkdir()
    assert len(race.read_race(root, "dev")) == 11


@pytest.mark.parametrize("article", ["", " \n\t "], ids=["empty", "blank"])   # ids a shell can pass back
def test_an_empty_article_is_refused_naming_the_file(tmp_path, capsys, article):
    level = tmp_path / "RACE" / "dev" / "middle"
    level.mkdir(parents=True)
    passage = json.loads(shared_path("race", "RACE", "dev", "middle", "73.txt").read_text(encoding="utf-8"))
    (level / "5.txt").write_text(json.dumps({**passage, "article": article}), encoding="utf-8")
    predictions = tmp_path / "p.json"
    predictions.write_text(json.dumps({"middle/5.txt#0": "D", "middle/5.txt#1": "B"}))
    code = main(["evaluate", "race", "--data-dir", str(tmp_path / "RACE"), "--predictions", str(predictions)])
    assert_one_error(capsys, code, "5.txt", "the article is empty")


def test_finetune_on_a_held_out_split_directory_is_refused(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    dev = shared_path("race", "RACE", "dev")
    code = main(["finetune", "race", "--data-dir", str(dev), "--model", str(model), "--out", str(tmp_path / "run"),
                 "--max-steps", "1", "--max-seq-length", "64"])
    assert_one_error(capsys, code, "RACE's dev split", f"--data-dir {dev.parent}")
    assert not (tmp_path / "run" / "best").exists()


def test_no_level_and_the_folder_above_race_are_named(tmp_path):
    root = _copy_dev(tmp_path)
    with pytest.raises(DataError, match="no RACE level to read; levels are middle, high"):
        race.read_race(root, "dev", levels=())
    with pytest.raises(DataError, match=f"give the RACE directory itself: {root}"):
        race.read_race(tmp_path, "dev")


def test_test_predictions_are_scored_against_the_test_answers(tmp_path, capsys):
    """`evaluate race --predictions runs/race/test_predictions.json` without --split scored the test predictions
    against dev's answers (the ids carry no split; dev/ and test/ hold files of the same names): 0.0 where the
    run had 1.0. The file's name now gives the split, and a --split contradicting it is refused."""
    root = tmp_path / "RACE"
    for split, answer in (("dev", "A"), ("test", "B")):
        (root / split / "middle").mkdir(parents=True)
        passage = {"id": "middle1.txt", "article": "Tom has a red ball.", "questions": ["What colour is it?"],
                   "options": [["blue", "red", "green", "black"]], "answers": [answer]}
        (root / split / "middle" / "1.txt").write_text(json.dumps(passage), encoding="utf-8")
    predictions = tmp_path / "test_predictions.json"
    predictions.write_text(json.dumps({"middle/1.txt#0": "B"}), encoding="utf-8")
    assert main(["evaluate", "race", "--data-dir", str(root), "--levels", "middle", "--predictions",
                 str(predictions)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0
    code = main(["evaluate", "race", "--data-dir", str(root), "--levels", "middle", "--split", "dev",
                 "--predictions", str(predictions)])
    assert_one_error(capsys, code, "--split dev", "test predictions")
