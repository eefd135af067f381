"""Audit 16 of the configuration as a demanding user: `--config FILE` values of the wrong type (a traceback),
keys given twice or flat in the file, the command line's `--train.epochs` losing to the file's `max_steps`,
`--model.*` silently dropped under `--init-from`, `--model.type_vocab_size=1` on SOP data (an IndexError at the
first step), a hand-edited run_config.json with `"batch_size": 4.0` (a TypeError on --resume), and
`albertlm params --num-groups 3` blaming a preset the user did not name. Each test failed before its fix."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import alice_documents, assert_one_error, save_tiny_pretrained, shared_path

TINY = ["--preset", "albert-tiny", "--dry-run"]


def _file(tmp_path: Path, content: str, name: str = "c.json") -> Path:
    path = tmp_path / name
    path.write_text(content)
    return path


def _dry_run(tmp_path: Path, capsys, *extra: str) -> dict:
    """The resolved config a dry run prints."""
    assert main(["pretrain", "--out", str(tmp_path / "run"), *TINY, *extra]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def sop_data(tmp_path_factory) -> Path:
    """32-token SOP data from 120 lines of Alice (albert-base-v2's SentencePiece)."""
    root = tmp_path_factory.mktemp("audit16_config")
    text = alice_documents(root, 120)
    assert main(["data", "build", "--input", str(text), "--tokenizer",
                 str(shared_path("spm", "albert-base-v2_spiece.model")), "--out", str(root / "sop"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    return root / "sop"


# ------------------------------------------------------------------ 1. file values read as their types
@pytest.mark.parametrize("content, phrase", [('{"init_from": ["a"]}', "init_from: expected str"),
                                             ('{"preset": 3}', "preset: expected str"),
                                             ('{"train": {"max_steps": 10.0}}', "train.max_steps: expected int")])
def test_a_config_file_value_of_the_wrong_type_is_one_line_naming_the_file(tmp_path, capsys, content, phrase):
    """Before: `"init_from": ["a"]` and `"preset": 3` were TypeError tracebacks; the int error named no file."""
    path = _file(tmp_path, content)
    code = main(["pretrain", "--out", str(tmp_path / "run"), "--dry-run", "--config", str(path)])
    assert_one_error(capsys, code, str(path), phrase)


# ------------------------------------------------------------------ 2. no silent wins inside the file
@pytest.mark.parametrize("content, phrase", [
    ('{"optim": {"lr": 0.01}, "optim.lr": 0.02}', "'optim.lr' is given twice"),
    ('{"optim": {"lr": 0.01}, "optim": {"eps": 1e-6}}', "'optim' is given twice")])
def test_a_key_given_twice_in_the_file_is_refused(tmp_path, capsys, content, phrase):
    """Before: the last spelling won silently (lr 0.02; the first "optim" object was dropped)."""
    code = main(["pretrain", "--out", str(tmp_path / "run"), *TINY, "--config", str(_file(tmp_path, content))])
    assert_one_error(capsys, code, phrase)


@pytest.mark.parametrize("content, phrase", [('{"lr": 0.01}', "did you mean optim.lr?"),
                                             ('{"train": {"lr": 0.01}}', "did you mean optim.lr?"),
                                             ('{"optim": 0.01}', "'optim' is a section")])
def test_a_misplaced_file_key_names_where_it_belongs(tmp_path, capsys, content, phrase):
    """Before: `unknown config key 'lr'` with no suggestion; `"optim": 0.01` suggested `optim.lr`."""
    code = main(["pretrain", "--out", str(tmp_path / "run"), *TINY, "--config", str(_file(tmp_path, content))])
    assert_one_error(capsys, code, phrase)


# ------------------------------------------------------------------ 3. the command line wins over the file
def test_the_command_lines_epochs_wins_over_the_files_max_steps(tmp_path, capsys):
    """Before: max_steps 100 from the file stayed, so `--train.epochs 2` was recorded and ignored."""
    path = _file(tmp_path, '{"train": {"max_steps": 100}, "optim": {"warmup_steps": 10}}')
    run = _dry_run(tmp_path, capsys, "--config", str(path), "--train.epochs", "2", "--optim.warmup_ratio", "0.1")
    assert (run["train"]["max_steps"], run["train"]["epochs"]) == (0, 2.0)
    assert (run["optim"]["warmup_steps"], run["optim"]["warmup_ratio"]) == (-1, 0.1)
    # given on the command line too, the deferred-to field keeps its value
    run = _dry_run(tmp_path, capsys, "--config", str(path), "--train.epochs", "2", "--max-steps", "7")
    assert run["train"]["max_steps"] == 7


# ------------------------------------------------------------------ 4. --init-from and --model.*
def test_init_from_refuses_a_model_option_it_would_drop(tmp_path, capsys):
    """Before: `--model.num_layers 7` was dropped without a word (the run trained the checkpoint's 2 layers)."""
    (tmp_path / "ckpt").mkdir()
    checkpoint = save_tiny_pretrained(tmp_path / "ckpt")
    base = ["pretrain", "--out", str(tmp_path / "run"), "--dry-run", "--init-from", str(checkpoint)]
    assert_one_error(capsys, main([*base, "--model.num_layers", "7"]), "--model.num_layers 7", "num_layers=2",
                     "--init-from")
    # the dropouts are the run's own; the checkpoint's own value is no change
    assert main([*base, "--model.hidden_dropout", "0.2", "--model.num_layers", "2"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert (run["model"]["num_layers"], run["model"]["hidden_dropout"]) == (2, 0.2)


# ------------------------------------------------------------------ 5. one token type on sentence pairs
def test_one_token_type_on_sop_data_is_refused_before_training(sop_data, tmp_path, capsys):
    """Before: the dry run passed and the run stopped at step 1 with an IndexError traceback (embedding)."""
    code = main(["pretrain", "--out", str(tmp_path / "run"), *TINY, "--data", str(sop_data),
                 "--model.type_vocab_size", "1"])
    assert_one_error(capsys, code, "type_vocab_size=1", "sop", "--sentence-task none")
    # a batch the 116 instances hold: the dry run checks that too (test_train_audit20)
    assert _dry_run(tmp_path, capsys, "--data", str(sop_data), "--batch-size", "8")["model"]["type_vocab_size"] == 2


# ------------------------------------------------------------------ 6. a saved run config of the wrong type
def test_a_saved_run_config_with_a_mistyped_value_is_refused():
    """Before: RunConfig.from_dict took `"batch_size": 4.0`, and `pretrain --resume` stopped in the data order
    with `TypeError: 'float' object cannot be interpreted as an integer`."""
    from albertlm.config.run import RunConfig

    with pytest.raises(UserError, match="train.batch_size: expected int, got 4.0"):
        RunConfig.from_dict({"train": {"batch_size": 4.0}})
    with pytest.raises(UserError, match="did you mean train.max_steps"):
        RunConfig.from_dict({"train": {"max_stepz": 4}})
    run = RunConfig.from_dict({"train": {"batch_size": 8}, "optim": {"lr": 1}})   # ints for floats are fine
    assert run.train.batch_size == 8 and run.optim.lr == 1.0
    assert RunConfig.from_dict(run.to_dict()) == run


def test_resume_with_a_mistyped_run_config_is_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run_config.json").write_text('{"train": {"batch_size": 4.0}}')
    code = main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3"])
    assert_one_error(capsys, code, "run_config.json", "train.batch_size: expected int")


# ------------------------------------------------------------------ 7. params names the preset
def test_params_override_error_names_the_preset(capsys):
    """Before: `num_groups=3: must divide num_layers=4`, with no word of which of the shown presets has 4 layers."""
    code = main(["params", "--preset", "albert-base", "--preset", "albert-tiny", "--num-groups", "3"])
    assert_one_error(capsys, code, "num_groups=3: must divide num_layers=4 (preset albert-tiny)")
