"""The lead's follow-ups of the thirty-first session's audits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from albertlm.cli.main import main

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
RACE = SHARED / "race" / "RACE"


def test_race_predictions_on_a_split_missing_a_level_warn_as_fine_tuning_does(tmp_path, capsys):
    """`evaluate race --predictions` on the shared dev split (middle/ only) scored middle alone without a word,
    where docs/finetuning.md says a warning is given (fine-tuning's `_note_missing_levels` gives it)."""
    root = tmp_path / "RACE"
    shutil.copytree(RACE / "dev", root / "dev")
    answers = {}
    for path in sorted((root / "dev" / "middle").glob("*.txt")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for i, answer in enumerate(record["answers"]):
            answers[f"middle/{path.name}#{i}"] = answer
    predictions = tmp_path / "dev_predictions.json"
    predictions.write_text(json.dumps(answers), encoding="utf-8")
    code = main(["evaluate", "race", "--data-dir", str(root), "--predictions", str(predictions)])
    out = capsys.readouterr()
    assert code == 0
    assert "RACE dev has no high passages: its accuracy is over middle alone" in out.err + out.out
    # asked for middle alone: nothing to say
    code = main(["evaluate", "race", "--data-dir", str(root), "--predictions", str(predictions), "--levels", "middle"])
    out = capsys.readouterr()
    assert code == 0 and "has no high" not in out.err + out.out


def test_tokenizers_take_and_save_to_home_paths(tmp_path, monkeypatch):
    """A tokenizer built from `~/...` and saved to `~/...` (a notebook's paths): the constructors said no such
    file, and `save("~/t")` wrote into a folder named `~` in the working directory."""
    from albertlm.tokenization.sentencepiece import SentencePieceTokenizer
    from albertlm.tokenization.wordpiece import WordPieceTokenizer

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    shutil.copy(SHARED / "spm" / "albert-base-v2_spiece.model", home / "spiece.model")
    shutil.copy(SHARED / "vocab" / "albert_zh_vocab.txt", home / "vocab.txt")
    sp = SentencePieceTokenizer("~/spiece.model")
    sp.save("~/sp_out")
    wp = WordPieceTokenizer("~/vocab.txt")
    wp.save("~/wp_out")
    assert (home / "sp_out" / "spiece.model").is_file() and (home / "wp_out" / "vocab.txt").is_file()
    assert not (work / "~").exists()


def test_a_killed_saves_folder_without_a_lock_is_removed_by_the_next_save(tmp_path):
    """A save killed between making its staging folder and its lock file moved nothing aside: the folder of the
    dead process stayed in the model directory for good (docs3_31's finding). The next save removes it; one with
    an `.earlier` folder (something to put back) is not touched by this path."""
    import subprocess
    import sys

    from albertlm.config import ModelConfig
    from albertlm.model import io
    from albertlm.model.heads import AlbertForSequenceClassification

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    directory = tmp_path / "model"
    empty = directory / f"{io._stage_prefix(child.pid)}abcd1234"
    empty.mkdir(parents=True)
    config = ModelConfig(vocab_size=30, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2, ffn_size=16,
                         max_position_embeddings=16)
    AlbertForSequenceClassification(config).save_pretrained(directory)
    assert not empty.exists()
    assert (directory / "config.json").is_file()
