"""The one config-to-options mechanism (`config/overrides.py`): field comments are the help, Literal fields
list their choices, --config FILE < command line, no silent wins, one validation in the config, one-line
errors; and every command's --help explains every option."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Literal

import pytest

from albertlm.cli.main import COMMANDS, Parser, main
from albertlm.config.overrides import Options, add_options, field_docs, read_options
from albertlm.errors import UserError


def _parsers(parser: argparse.ArgumentParser, name: str):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_of_every_command_is_explained(command):
    import importlib

    module = importlib.import_module(COMMANDS[command][0])
    parser = Parser(prog=f"albertlm {command}")
    module.add_arguments(parser, command)
    for name, sub in _parsers(parser, command):
        for action in sub._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            text = (action.help or "").split("(default:")[0].replace("(required)", "").strip()
            assert len(text) >= 2, f"albertlm {name}: {'/'.join(action.option_strings) or action.dest} has no help"
        sub.format_help()   # renders (no % formatting accidents)


@dataclass
class Inner:
    mode: Literal["a", "b"] = "a"        # how it runs
    rate: float = 0.5                    # a rate


@dataclass
class Outer:
    name: str                            # required, no default
    # comment lines above a field
    # are part of its help
    count: int = 2                       # and so is its trailing comment
    inner: Inner = field(default_factory=Inner)   # the nested section
    files: list[str] = field(default_factory=list)  # some files
    flag: bool = False                   # a switch

    def __post_init__(self):
        from albertlm.config.model import require
        from albertlm.config.overrides import check_choices

        check_choices(self.inner, "inner.")
        require(self.count >= 0, "count", self.count, "must be >= 0")


OPTIONS = Options(Outer, plain={"--rate": "inner.rate"}, aliases={"--file": "files"}, negations={"--no-flag": "flag"},
                  config_file=True)


def _read(argv, base=None):
    parser = Parser(prog="t")
    add_options(parser, OPTIONS)
    return read_options(parser.parse_args(argv), OPTIONS, base)


def test_comments_are_the_help_and_literals_the_choices(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")      # argparse wraps the help at $COLUMNS (a CI may set it narrow)
    docs = field_docs(Outer)
    assert docs["count"] == "comment lines above a field are part of its help and so is its trailing comment"
    parser = Parser(prog="t")
    add_options(parser, OPTIONS)
    text = parser.format_help()
    assert "--inner.mode {a,b}" in text and "how it runs (default: a)" in text and "--rate X, --inner.rate X" in text
    assert "required, no default (required)" in text and "--no-flag" in text


def test_values_are_typed_and_the_command_line_beats_the_file(tmp_path):
    cfg = _read(["--name", "x", "--rate", "0.25", "--files", "a", "b", "--flag"])
    assert (cfg.name, cfg.inner.rate, cfg.files, cfg.flag, cfg.count) == ("x", 0.25, ["a", "b"], True, 2)
    (tmp_path / "c.json").write_text(json.dumps({"name": "f", "count": 7, "inner": {"rate": 0.125, "mode": "b"}}))
    cfg = _read(["--config", str(tmp_path / "c.json"), "--inner.rate=0.75"])
    assert (cfg.name, cfg.count, cfg.inner.rate, cfg.inner.mode) == ("f", 7, 0.75, "b")
    base = Outer(name="base", count=9)
    assert _read(["--count", "3"], base).name == "base" and _read([], base).count == 9


@pytest.mark.parametrize("argv,message", [
    (["--name", "x", "--rate", "0.1", "--inner.rate=0.2"], "--rate and --inner.rate set inner.rate to different"),
    (["--name", "x", "--files", "a", "--file", "b"], "--files and --file set files to different"),
    (["--name", "x", "--flag", "--no-flag"], "--flag and --no-flag set flag"),
    (["--name", "x", "--count", "two"], "count: cannot read 'two' as int"),
    (["--name", "x", "--count", "-1"], "count=-1: must be >= 0"),
    (["--name", "x", "--inner.mode", "c"], "inner.mode='c': must be one of a, b"),
    ([], "the following arguments are required: --name"),
])
def test_bad_values_and_silent_wins_are_errors(argv, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        _read(argv)


def test_agreeing_spellings_are_fine_and_a_repeated_option_keeps_its_last_value():
    assert _read(["--name", "x", "--rate", "0.1", "--inner.rate=0.1"]).inner.rate == 0.1
    assert _read(["--name", "x", "--count", "3", "--count", "4"]).count == 4
    assert _read(["--name", "x", "--rate", "0.1", "--inner.rate=0.3", "--rate", "0.3"]).inner.rate == 0.3


def test_unknown_keys_suggest_the_nearest(tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps({"inner": {"rat": 1}}))
    with pytest.raises(UserError, match="did you mean inner.rate"):
        _read(["--name", "x", "--config", str(tmp_path / "c.json")])
    with pytest.raises(SystemExit) as exc:
        _read(["--name", "x", "--inner.rat=1"])
    assert exc.value.code == 2 and "did you mean --inner.rate" in capsys.readouterr().err


def _dry_run(capsys, *argv) -> dict:
    assert main(["pretrain", "--out", "unused", "--dry-run", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_pretrain_precedence_recipe_file_flags(tmp_path, capsys):
    run = _dry_run(capsys, "--preset", "albert-tiny")
    assert run["optim"]["lr"] == 0.00176 and run["model"]["hidden_size"] == 64 and run["train"]["compile"] == "none"
    (tmp_path / "c.json").write_text(json.dumps({"optim": {"lr": 0.5}, "train": {"max_steps": 7}}))
    run = _dry_run(capsys, "--preset", "albert-tiny", "--config", str(tmp_path / "c.json"), "--lr", "0.25",
                   "--compile", "max-autotune", "--model.hidden_size=32", "--model.num_heads", "2")
    assert (run["optim"]["lr"], run["train"]["max_steps"], run["train"]["compile"]) == (0.25, 7, "max-autotune")
    assert run["model"]["hidden_size"] == 32


def test_a_saved_run_config_with_a_label_preset_runs_again(tmp_path, capsys):
    """`albertlm ablate` labels its runs' preset "ablate": their run_config.json, which sets the whole model,
    is a valid --config for `albertlm pretrain`; a half-given model with an unknown preset is still refused."""
    saved = _dry_run(capsys, "--preset", "albert-tiny", "--model.hidden_size=32", "--model.num_heads=2", "--lr=0.125")
    saved["preset"] = "ablate"
    (tmp_path / "run_config.json").write_text(json.dumps(saved))
    again = _dry_run(capsys, "--config", str(tmp_path / "run_config.json"))
    assert again == saved
    del saved["model"]["ffn_size"]
    (tmp_path / "partial.json").write_text(json.dumps(saved))
    assert main(["pretrain", "--out", "unused", "--dry-run", "--config", str(tmp_path / "partial.json")]) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'ablate'" in err and len(err.splitlines()) == 1


def test_pretrain_conflicts_and_bad_values_are_one_line(capsys):
    for argv, message in ((["--lr", "1e-3", "--optim.lr=2e-3"], "--lr and --optim.lr set optim.lr to different"),
                          (["--precision", "fp8"], "train.precision='fp8': must be one of fp32, bf16, fp16"),
                          (["--compile", "fast"], "train.compile='fast'")):
        assert main(["pretrain", "--out", "unused", "--dry-run", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("albertlm pretrain: error: ") and message in err and len(err.splitlines()) == 1, err
    with pytest.raises(SystemExit) as exc:                  # argparse's own usage errors: exit 2 as before
        main(["pretrain", "--out", "unused", "--optim.weigth_decay=0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith("albertlm pretrain: error: unrecognized") and "did you mean --optim.weight_decay" in err


def test_finetune_compile_and_resume_flags_exist(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "glue", "--help"])
    text = capsys.readouterr().out
    for flag in ("--compile", "--train.compile", "--resume", "--micro-batch-size", "--dist.backend", "--config"):
        assert flag in text, flag


def test_squad_scoring_options(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "squad", "--help"])
    text = capsys.readouterr().out
    assert "--na-probs" in text and "--na-prob-thresh" in text and "null_odds.json" in text


def test_no_progress_is_spelled_alike_in_every_long_running_command(capsys):
    assert _dry_run(capsys, "--preset", "albert-tiny")["train"]["progress"] is True
    assert _dry_run(capsys, "--preset", "albert-tiny", "--no-progress")["train"]["progress"] is False
    for argv in (["pretrain"], ["finetune", "glue"], ["evaluate"], ["embed"]):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        assert "--no-progress" in capsys.readouterr().out, argv


class _ClosedPipe:
    """A stdout whose reader has gone (`albertlm --help | head -1`)."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_help_quietly(monkeypatch, capsys):
    from albertlm.cli.main import main

    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["--help"]) == 0                 # the top-level usage (printed before any command is chosen)
    with pytest.raises(SystemExit) as done:     # a command's argparse help (argparse exits 0 itself)
        main(["params", "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().err == ""
