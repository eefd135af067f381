"""CLI audit 31, as a user who reads every `--help`: usage lines that say what each option takes and which are required.

Found: most text options showed `TEXT` (`--tokenizer TEXT`, `--data TEXT`, `--task TEXT`, `--device TEXT`) where a
directory, a file, a column's name or one of a few words is wanted; SQuAD's `--version {,1.1,2.0}` offered an empty
choice; `ablate --out` and `evaluate --data` showed as optional (`[--out TEXT]`) though required; pretrain's `--out
OUT`, params' `--preset PRESET` and the positionals `checkpoint` / `directory` named nothing; `tokenizer train` listed
its SentencePiece-only options among the others without saying `--kind wordpiece` refuses them, and took
`--kind wordpiece --verbose` silently (no log to show); `convert --tokenizer DIR` said "no such file" where every
other command's --tokenizer takes a directory; embed/fill-mask's `--device` did not say its default.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from albertlm.cli.main import COMMANDS, TASK_NAMES, main
from conftest import assert_one_error, save_tiny_pretrained
from test_cliargs_audit23 import _exit_code
from test_docs_audit14 import _parser, _subparsers


def _parsers():
    """(command words, parser) of every command, subcommand and task family (evaluate's too)."""
    for command in COMMANDS:
        for rest in [[]] + ([[family] for family in TASK_NAMES] if command == "evaluate" else []):
            parser = _parser(command, rest)
            subs = _subparsers(parser)
            if rest:
                yield f"{command} {rest[0]}", subs[rest[0]]
                continue
            yield command, parser
            for name, sub in subs.items():
                yield f"{command} {name}", sub


def _usage(command: str, *rest: str) -> str:
    parser = _parser(command, list(rest))
    if rest:
        parser = _subparsers(parser)[rest[0]]
    return " ".join(parser.format_usage().split())


# ------------------------------------------------------------------------------------------------ metavars
def test_no_generated_option_shows_text_or_item():
    """Every option generated from a config field (every command's) says what it takes: `--corpus TEXT`,
    `--task TEXT`, `--labels TEXT`, ... were 119 TEXTs over the commands' help."""
    vague = sorted({f"{name}: {'/'.join(action.option_strings)} {action.metavar}" for name, parser in _parsers()
                    for action in parser._actions
                    if action.dest.startswith("config:") and action.metavar in ("TEXT", "ITEM", "V")})
    assert not vague, vague


@pytest.mark.parametrize("words, shown", [
    (["pretrain"], ["--out DIR", "[--data DIR]", "[--eval-data DIR]", "[--preset NAME]", "[--init-from DIR]",
                    "[--dist.device {auto,cpu,cuda,cuda:N}]"]),
    (["evaluate"], ["--data DIR", "[--device {auto,cpu,cuda,cuda:N}]", "MODEL"]),
    (["info"], ["[--config FILE] MODEL"]),
    (["params"], ["[--preset NAME]"]),
    (["data", "inspect"], ["[--tokenizer PATH] DIR"]),
    (["data", "stats"], ["[--json] DIR"]),
    (["ablate"], ["--out DIR", "[--grid NAME|FILE]", "[--corpus DIR]", "[--tokenizer PATH]", "[--glue-dir DIR]"]),
    (["finetune", "glue"], ["[--task {cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli,ax}]", "[--data-dir DIR]",
                            "[--train PATH]", "[--device {auto,cpu,cuda,cuda:N}]"]),
    (["predict", "squad"], ["[--version {1.1,2.0}]", "[--dev PATH]", "[--null-threshold X|recorded]"]),
    (["evaluate", "squad"], ["[--na-probs FILE]"]),
    (["evaluate", "race"], ["[--data-dir DIR]", "[--levels LEVEL[,LEVEL]]", "[--split {train,dev,test}]"]),
    (["finetune", "classify"], ["[--train PATH]", "[--text-column NAME]", "[--text-pair-column NAME]",
                                "[--label-column NAME]", "[--id-column NAME]", "[--labels A,B,...]"]),
    (["convert"], ["[--tokenizer PATH]"]),
])
def test_the_usage_line_names_what_each_option_takes(words, shown):
    usage = _usage(*words)
    missing = [word for word in shown if word not in usage]
    assert not missing, (missing, usage)


def test_the_glue_task_choices_are_the_glue_tasks():
    """The metavar's list (`config.overrides` imports no task module) is tasks.glue's table."""
    from albertlm.config.overrides import GLUE_TASK_NAMES
    from albertlm.tasks.glue import TASKS

    assert list(GLUE_TASK_NAMES) == list(TASKS)


def test_the_race_split_choices_are_races():
    from albertlm.config.overrides import METAVARS
    from albertlm.tasks.race import SPLITS

    assert METAVARS["split"] == "{" + ",".join(SPLITS) + "}"


def test_a_not_given_choice_is_not_offered():
    """`--version {,1.1,2.0}`: the empty choice is the field's "not given" (the data decides)."""
    for command in ("finetune", "predict", "evaluate"):
        usage = _usage(command, "squad")
        assert "[--version {1.1,2.0}]" in usage and "{," not in usage, usage


# ------------------------------------------------------------------------------------------------ required
@pytest.mark.parametrize("words, flag", [(["ablate"], "--out DIR"), (["evaluate"], "--data DIR"),
                                         (["data", "build"], "--tokenizer PATH")])
def test_a_required_option_is_shown_required(words, flag):
    """data build's passed before (its command set them one by one; `Options.required` now)."""
    usage = _usage(*words)
    assert f" {flag}" in usage and f"[{flag}" not in usage, usage


@pytest.mark.parametrize("argv, named", [(["ablate"], "--out"), (["evaluate", "run"], "--data"),
                                         (["ablate", "--corpus", "c"], "--out")])
def test_a_missing_required_option_is_one_line_naming_it(argv, named, capsys):
    """(Passed before: `build` said it once the options were read; now argparse, in the same one line.)"""
    assert_one_error(capsys, _exit_code(argv), f"the following arguments are required: {named}")


@pytest.mark.parametrize("command", ["finetune", "predict", "evaluate"])
def test_the_glue_task_stays_optional_where_a_run_records_it(command):
    """(Passed before.) `predict glue` / `evaluate glue --model` / `finetune glue --resume` read --task from the run's
    record and `evaluate glue --score` needs none: argparse may not require it."""
    usage = _usage(command, "glue")
    assert "[--task " in usage, usage


# ------------------------------------------------------------------------------------------- tokenizer train
def test_the_sentencepiece_only_options_are_grouped_as_such():
    from albertlm.cli.tokenizer_commands import SENTENCEPIECE_ONLY

    train = _subparsers(_parser("tokenizer", []))["train"]
    group = next(g for g in train._action_groups if g.title == "SentencePiece options")
    assert "--kind wordpiece refuses them" in group.description
    assert {a.option_strings[0] for a in group._group_actions} == {flag for flag, _ in SENTENCEPIECE_ONLY.values()}


def test_wordpiece_refuses_verbose(tmp_path, capsys):
    """It trained and showed nothing: the tokenizers trainer has no log for --verbose to show."""
    text = tmp_path / "a.txt"
    text.write_text("the film was good\nthe plot was bad\n" * 20, encoding="utf-8")
    code = main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(text), "--vocab-size", "40", "--out",
                 str(tmp_path / "wp"), "--verbose"])
    assert_one_error(capsys, code, "--verbose", "unused by --kind wordpiece")
    assert not (tmp_path / "wp").exists()


# ------------------------------------------------------------------------------------------------ convert
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """conftest's tiny AlbertForPreTraining with its vocab.txt (read only)."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def test_convert_takes_a_tokenizer_directory(tiny, tmp_path, capsys):
    """`--tokenizer my-wp` (a folder `tokenizer train` wrote) was "no such file"."""
    folder = tmp_path / "my-wp"
    folder.mkdir()
    words = (tiny / "vocab.txt").read_text(encoding="utf-8")
    (folder / "vocab.txt").write_text(words, encoding="utf-8")
    assert main(["convert", str(tiny), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(folder)]) == 0
    assert f"{folder / 'vocab.txt'} -> vocab.txt" in capsys.readouterr().out
    assert (tmp_path / "hf" / "vocab.txt").read_text(encoding="utf-8") == words


def test_convert_says_a_folder_without_a_tokenizer_holds_none(tiny, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main(["convert", str(tiny), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(tmp_path / "empty")])
    assert_one_error(capsys, code, f"--tokenizer {tmp_path / 'empty'}: no tokenizer in this directory")
    assert not (tmp_path / "hf").exists()


# --------------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", ["embed", "fill-mask"])
def test_the_inference_device_says_its_default(command):
    device = next(a for a in _parser(command, [])._actions if "--device" in a.option_strings)
    assert device.default == "auto" and device.help.endswith("(default: auto)"), device.help


def test_positionals_are_named_as_the_other_commands_name_them():
    """`albertlm evaluate [...] checkpoint`, `info [...] directory`: MODEL as fill-mask, embed and export say."""
    for words in (["evaluate"], ["info"], ["data", "inspect"], ["data", "stats"]):
        usage = _usage(*words)
        assert not re.search(r" (checkpoint|directory)$", usage), usage

