"""Configuration audit 18 (the command line's front door): a list option given twice takes both (`data build
--input a --input b` built from b alone), `--config` given twice reads both files (the first was dropped), a
config file with a byte-order mark is read (Notepad writes one), `--config RUN_DIR` names the run_config.json
inside, and a config built in Python is checked by type as the command line's is (`TrainConfig(max_steps=2.0)`
ran, then its run_config.json could not be resumed)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.config import ConfigError, ModelConfig
from albertlm.config.run import DistConfig, OptimConfig, RunConfig, TrainConfig
from albertlm.config.task import FinetuneConfig
from conftest import assert_one_error, shared_path

BOM = b"\xef\xbb\xbf"


def _dry_run(capsys, tmp_path: Path, *argv: str) -> dict:
    assert main(["pretrain", "--out", str(tmp_path / "unused"), "--dry-run", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _config(tmp_path: Path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


# ------------------------------------------------------------------ 1. a repeated list option
def test_a_list_option_given_twice_takes_the_items_of_both(tmp_path, capsys):
    """Before: `--input a.txt --input b.txt` built from b.txt alone, without a word."""
    text = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").split("\n\n")
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n\n".join(text[:2]) + "\n", encoding="utf-8")
    second.write_text("\n\n".join(text[2:4]) + "\n", encoding="utf-8")
    out = tmp_path / "data"
    assert main(["data", "build", "--input", str(first), "--input", str(second), "--tokenizer",
                 str(shared_path("spm", "albert-base-v2_spiece.model")), "--out", str(out), "--max-seq-length", "32",
                 "--dupe-factor", "1", "--no-progress"]) == 0, capsys.readouterr().err
    meta = json.loads((out / "meta.json").read_text())
    assert [Path(p).name for p in meta["inputs"]] == ["a.txt", "b.txt"]


# ------------------------------------------------------------------ 2. --config twice, a BOM, a directory
def test_config_given_twice_reads_both_files_the_later_winning(tmp_path, capsys):
    """Before: the first --config file was dropped without a word (max_steps 125000, the recipe's)."""
    steps = _config(tmp_path, "steps.json", {"train": {"max_steps": 5, "seed": 7}})
    batch = _config(tmp_path, "batch.json", {"train": {"batch_size": 8, "seed": 9}})
    run = _dry_run(capsys, tmp_path, "--preset", "albert-tiny", "--config", steps, "--config", batch)
    assert (run["train"]["max_steps"], run["train"]["batch_size"], run["train"]["seed"]) == (5, 8, 9)
    # each file brings what its keys imply: a later file's epochs resets an earlier file's max_steps
    epochs = _config(tmp_path, "epochs.json", {"train": {"epochs": 2}})
    run = _dry_run(capsys, tmp_path, "--preset", "albert-tiny", "--config", steps, "--config", epochs)
    assert (run["train"]["max_steps"], run["train"]["epochs"]) == (0, 2.0)


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path, capsys):
    """Before: `not valid JSON (Unexpected UTF-8 BOM ...)` for a file Windows Notepad saved."""
    path = tmp_path / "bom.json"
    path.write_bytes(BOM + b'{"train": {"max_steps": 4}}')
    assert _dry_run(capsys, tmp_path, "--preset", "albert-tiny", "--config", str(path))["train"]["max_steps"] == 4
    model = tmp_path / "config.json"
    model.write_bytes(BOM + json.dumps(ModelConfig(vocab_size=99).to_dict()).encode())
    assert ModelConfig.from_json(model).vocab_size == 99


def test_config_naming_a_run_directory_points_at_its_run_config(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run_config.json").write_text("{}")
    code = main(["pretrain", "--out", str(tmp_path / "new"), "--dry-run", "--config", str(tmp_path / "run")])
    assert_one_error(capsys, code, "is a directory", f"did you mean {tmp_path / 'run' / 'run_config.json'}?")


# ------------------------------------------------------------------ 3. configs built in Python
@pytest.mark.parametrize("make,phrase", [
    (lambda: TrainConfig(max_steps=2e0), "train.max_steps=2.0: must be a whole number (int), not float"),
    (lambda: TrainConfig(max_steps="5"), "train.max_steps='5': must be a whole number"),
    (lambda: TrainConfig(progress="false"), "train.progress='false': must be true or false"),
    (lambda: OptimConfig(lr=True), "optim.lr=True: must be a number, not bool"),
    (lambda: DistConfig(device=0), "dist.device=0: must be text"),
    (lambda: RunConfig(model={"hidden_size": 64}), "model={'hidden_size': 64}: must be a ModelConfig"),
    (lambda: FinetuneConfig(max_seq_length=128.0), "max_seq_length=128.0: must be a whole number"),
])
def test_a_config_built_in_python_is_checked_by_type(make, phrase):
    """Before: TrainConfig(max_steps=2.0) trained and wrote `"max_steps": 2.0` to run_config.json, which
    `--resume` and `--config` then refused; a string was a TypeError traceback from a comparison."""
    with pytest.raises(ConfigError) as info:
        make()
    assert phrase in str(info.value)


def test_the_types_a_config_takes_are_still_taken():
    assert OptimConfig(lr=1).lr == 1                        # an int is a number
    assert FinetuneConfig(hidden_dropout=None).hidden_dropout is None
    assert TrainConfig(max_steps=3, epochs=2).epochs == 2


# ------------------------------------------------------------------ 4. the front door
@pytest.mark.parametrize("argv,phrases", [
    (["pretrian", "--out", "x"], ["unknown command 'pretrian' (did you mean pretrain?)", "the commands are params"]),
    (["--lr", "1", "pretrain"], ["'--lr' is not a command: give the command first", "pretrain"]),
])
def test_an_unknown_command_is_one_line(argv, phrases, capsys):
    """Before: the error line, a blank line and the 17 lines of the usage on stderr (every other error is one
    line; under torchrun the other ranks said one line); an option before the command was an 'unknown command'."""
    assert_one_error(capsys, main(argv), *phrases)


def test_an_option_spelled_with_one_dash_names_the_one_meant(capsys):
    with pytest.raises(SystemExit) as done:
        main(["pretrain", "--out", "x", "-lr", "0.1"])
    assert_one_error(capsys, done.value.code, "unrecognized arguments: -lr 0.1 (did you mean --lr?)")
