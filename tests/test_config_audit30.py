"""Config audit 30, as a user who drives every command from the command line and from config files.

Found: `ablate --seeds 1,2` (how a user writes a list) was "cannot read '1,2' as int"; `ablate --report-only
--glue-dir X` and `--report-only --report false` were taken and ignored (a hand-kept list of refused options left
them out); `--help` said a default twice where the field's comment says it in words (`pretraining seeds (default:
the scale's) (default: none)`, SQuAD's `--version` and `--null-threshold`), showed bools as Python writes them
(`default: False`) and a number list as `ITEM`; pretrain's model options showed albert-base's values without saying
that --preset, the data's tokenizer and --init-from set them; `--config run.yaml` said only "not valid JSON
(Expecting value: line 1 column 1)".

Pinned (no change needed): every option of every config read from the command line and back from the JSON its
run saves gives the same config (Nones, lists, nested sections); a pretraining run's saved run_config.json given
back as --config resolves to the same config; pretrain's and finetune's `--help` defaults are the configs they
start from."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
import typing

import pytest

from albertlm.cli.main import main
from albertlm.config.overrides import (Options, _choices, _is_list, _is_optional, _strip_optional, add_options,
                                       build, flatten, leaf_keys, option_name, read_options)
from conftest import assert_one_error
from test_cliargs_audit23 import _exit_code
from test_docs_audit14 import _parser, _subparsers


def _read(cls: type, argv: list[str]):
    from albertlm.cli.main import Parser

    parser, options = Parser(prog="t"), Options(cls)
    add_options(parser, options)
    return read_options(parser.parse_args(argv), options)


def _walk(parser: argparse.ArgumentParser, name: str):
    """(command words, action) of every option of `parser` and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _walk(child, f"{name} {sub}")
        else:
            yield name, action


def _all_actions():
    from albertlm.cli.main import COMMANDS

    for command in COMMANDS:
        for rest in ([], ["glue"]) if command == "evaluate" else ([],):
            yield from _walk(_parser(command, rest), command)


# ------------------------------------------------------------------------------------------------ lists
def test_a_number_list_takes_commas_and_a_text_list_keeps_them():
    from albertlm.cli.ablate_commands import AblateOptions
    from albertlm.data.build import BuildConfig

    assert _read(AblateOptions, ["--out", "o", "--seeds", "1,2"]).seeds == [1, 2]
    assert _read(AblateOptions, ["--out", "o", "--seeds", "1,2", "3", "--seeds", "4,"]).seeds == [1, 2, 3, 4]
    assert _read(AblateOptions, ["--out", "o", "--seeds", "1", "2"]).seeds == [1, 2]
    inputs = _read(BuildConfig, ["--inputs", "a,b.txt", "c.txt", "--tokenizer", "t", "--out", "o"]).inputs
    assert inputs == ["a,b.txt", "c.txt"]           # a file name may hold a comma


def test_ablate_seeds_written_with_a_comma_reach_the_seed_checks(tmp_path, capsys):
    """Before: `--seeds: cannot read '1,2' as int (a whole number)`."""
    code = main(["ablate", "--out", str(tmp_path / "o"), "--corpus", str(tmp_path), "--seeds", "1,1"])
    assert_one_error(capsys, code, "--seeds 1 1: a seed is given twice")
    code = main(["ablate", "--out", str(tmp_path / "o"), "--corpus", str(tmp_path), "--seeds", "1,-2"])
    assert_one_error(capsys, code, "--seeds: -2 is out of range")
    assert not (tmp_path / "o").exists()


def test_a_number_list_is_shown_as_numbers_in_the_usage():
    usage = _parser("ablate", []).format_usage()
    assert "--seeds N [N ...]" in usage and "ITEM" not in usage, usage


# ---------------------------------------------------------------------------------------- --report-only
@pytest.mark.parametrize("argv, flag", [(["--glue-dir", "elsewhere"], "--glue-dir"),
                                        (["--report", "false"], "--report"),
                                        (["--seeds", "1,2"], "--seeds")])
def test_report_only_refuses_every_option_it_would_ignore(tmp_path, capsys, argv, flag):
    """Before: `--report-only --glue-dir X` and `--report-only --report false` wrote the report, the option ignored."""
    (tmp_path / "suite.json").write_text("{}")
    code = main(["ablate", "--out", str(tmp_path), "--report-only", *argv])
    assert_one_error(capsys, code, "--report-only writes the report", f"{flag} cannot be used with it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite.json"]


# ------------------------------------------------------------------------------------------------- help
def test_no_option_says_its_default_twice():
    """`--seeds`: "pretraining seeds (default: the scale's) (default: none)"; SQuAD's --version "default: the version
    the data shows (default: none)"."""
    doubled = [f"{name} {action.option_strings[0]}: {action.help}" for name, action in _all_actions()
               if action.help and len(re.findall(r"\bdefault:", action.help, re.IGNORECASE)) > 1]
    assert not doubled, doubled
    seeds = next(a for name, a in _all_actions() if name == "ablate" and "--seeds" in a.option_strings)
    assert seeds.help.endswith("--seeds 1 2 or --seeds 1,2 (default: the scale's)"), seeds.help


def test_a_bool_default_is_shown_as_it_is_typed():
    helps = {a.option_strings[0]: a.help for a in _parser("ablate", [])._actions if a.option_strings}
    assert helps["--report"].endswith("(default: true)") and helps["--list-jobs"].endswith("(default: false)")
    assert not [a.help for _, a in _all_actions() if a.help and re.search(r"\(default: (True|False)\)", a.help)]


def _shown_defaults(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest key -> the default `--help` prints for every generated option."""
    out = {}
    for action in parser._actions:
        shown = re.search(r"\(default: ([^)]*)\)$", action.help or "")
        if shown and action.dest.startswith("config:"):
            out[action.dest.split(":", 2)[2]] = shown.group(1)
    return out


def _as_shown(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None or value == "" or value == []:
        return "none"
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def test_pretrain_help_defaults_are_the_config_it_starts_from():
    """(pin) Every `(default: X)` of `pretrain --help` is the paper recipe with albert-base's model (what a run without
    options trains), and the model section says where its values really come from (it said only "the architecture")."""
    from albertlm.config.presets import get_preset
    from albertlm.config.run import paper_recipe

    start = flatten(paper_recipe(get_preset("albert-base")).replace(preset="albert-base").to_dict())
    shown = _shown_defaults(_parser("pretrain", []))
    assert len(shown) >= len(start) - 2                        # all but the paths with none
    wrong = {key: (text, start[key]) for key, text in shown.items() if text != _as_shown(start[key])}
    assert not wrong, wrong
    group = next(g for g in _parser("pretrain", [])._action_groups if g.title == "model options")
    assert all(word in group.description for word in ("--preset", "albert-base", "--data's tokenizer", "--init-from"))


@pytest.mark.parametrize("family", ["glue", "squad", "race", "classify"])
def test_finetune_help_defaults_are_the_familys(family):
    """(pin) SQuAD's 384 / 3e-5 / 2 epochs and RACE's 512 / 1e-5 are what `finetune squad --help` and `race` print."""
    from albertlm.tasks.recipes import FAMILY_DEFAULTS

    start = flatten(FAMILY_DEFAULTS[family].to_dict())
    shown = _shown_defaults(_subparsers(_parser("finetune", [family]))[family])
    wrong = {key: (text, start[key]) for key, text in shown.items() if key in start and text != _as_shown(start[key])}
    assert not wrong and {"optim.lr", "train.epochs", "max_seq_length"} <= shown.keys(), wrong


# ---------------------------------------------------------------------------------------------- --config
@pytest.mark.parametrize("name, body, kind", [("c.yaml", "train:\n  max_steps: 5\n", "YAML"),
                                              ("c.toml", "[train]\nmax_steps = 5\n", "TOML")])
def test_a_yaml_or_toml_config_file_is_told_it_must_be_json(tmp_path, capsys, name, body, kind):
    path = tmp_path / name
    path.write_text(body)
    code = _exit_code(["pretrain", "--out", str(tmp_path / "run"), "--dry-run", "--config", str(path)])
    assert_one_error(capsys, code, f"a --config file is JSON, not {kind}", '{"train": {"max_steps": 1000}')
    bad = tmp_path / "bad.json"
    bad.write_text("{train: 1}")
    code = _exit_code(["pretrain", "--out", str(tmp_path / "run"), "--dry-run", "--config", str(bad)])
    assert_one_error(capsys, code, "bad.json: not valid JSON")


# ------------------------------------------------------------------------------------------- round trips
def _other(kind, value):
    """A value of `kind` other than `value` (the default) that its config accepts."""
    choices = _choices(kind)
    if choices:
        return next(c for c in choices if c not in (value, ""))
    base = _strip_optional(kind)
    if _is_optional(kind) and value is not None:
        return None
    if base is bool:
        return not value
    if base is int:
        return value + 1 if value >= 1 else 1
    if base is float:
        return value / 2 if value else 0.0625
    if _is_list(base):
        return [5, 6] if typing.get_args(base)[0] is int else ["a b", "c,d"]
    return "auto" if value == "auto" else "x y,z none"


def _typed(value) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("cls_name", ["RunConfig", "FinetuneConfig", "AblateOptions", "GlueOptions"])
def test_every_field_survives_the_command_line_and_the_saved_json(cls_name):
    """(pin) Each leaf set to another value on the command line reads as that value, and the config written as JSON
    (run_config.json) reads back equal: Nones (`--hidden-dropout none`), lists, text with commas and spaces."""
    from albertlm.cli.ablate_commands import AblateOptions
    from albertlm.config.run import RunConfig
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks.options import OPTIONS

    cls = {"RunConfig": RunConfig, "FinetuneConfig": FinetuneConfig, "AblateOptions": AblateOptions,
           "GlueOptions": OPTIONS["glue"]}[cls_name]
    required = {f.name: "r" for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    default = flatten(dataclasses.asdict(build(cls, required)))
    fixed = ("model.hidden_size", "model.num_heads", "model.num_groups", "dist.device")   # tied to other fields
    checked = 0
    for key, kind in leaf_keys(cls).items():
        if key in fixed:
            continue
        value = _other(kind, default[key])
        argv = [f"{option_name(k)}=r" for k in required if k != key]
        argv += [option_name(key), *map(_typed, value)] if _is_list(kind) else [f"{option_name(key)}={_typed(value)}"]
        got = _read(cls, argv)
        assert flatten(dataclasses.asdict(got))[key] == value, (key, argv)
        saved = json.loads(json.dumps(dataclasses.asdict(got)))
        assert build(cls, flatten(saved)) == got, key
        checked += 1
    assert checked >= 6


def test_a_runs_saved_config_given_back_resolves_to_the_same_run(tmp_path, capsys):
    """(pin) A dry run's printed config (what run_config.json records) given back as --config, and as the base of
    `RunConfig.from_dict`, is the same config; an option on top of it wins."""
    from albertlm.config.run import RunConfig

    argv = ["--preset", "albert-tiny", "--model.hidden_size=32", "--model.num_heads=4", "--lr", "1e-4",
            "--optim.warmup_ratio", "0.25", "--train.epochs", "2.5", "--no-progress", "--initializer",
            "truncated_normal", "--seed", "7", "--dist.timeout_minutes", "9"]
    assert main(["pretrain", "--out", str(tmp_path / "a"), "--dry-run", *argv]) == 0
    first = json.loads(capsys.readouterr().out)
    (tmp_path / "run_config.json").write_text(json.dumps(first))
    assert RunConfig.from_dict(first).to_dict() == first
    assert main(["pretrain", "--out", str(tmp_path / "b"), "--dry-run", "--config",
                 str(tmp_path / "run_config.json")]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert main(["pretrain", "--out", str(tmp_path / "c"), "--dry-run", "--config", str(tmp_path / "run_config.json"),
                 "--max-steps", "3"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert (third["train"]["max_steps"], third["train"]["epochs"], third["model"]) == (3, 2.5, first["model"])
