"""CLI follow-ups of audit 31 (clifollow31), after the metavar table (`config.overrides.METAVARS`, test_cli_audit31.py).

1. finetune / predict / evaluate <family>: their own options showed argparse's words (`--out OUT`, `--tokenizer
   TOKENIZER`, `--recipe RECIPE`, `--predictions PREDICTIONS`) where the generated ones say DIR, PATH, NAME, FILE;
   predict / evaluate listed --precision and --no-progress under "train options: the training loop (shared with
   pretraining)" and --device under "dist options", and offered the training file --train, which they never read.
2. GLUE's --task said "(required)" in the help of predict, evaluate and finetune (--resume), which take the run's.
3. export onnx: `--opset OPSET`.
4. convert SRC DST where DST is an existing directory on another file system (a mount point): staged beside DST,
   the conversion failed after all its work with "cannot write DST: Invalid cross-device link".
5. data build's summary gave the text's tokens and the instances' without comparing them: now the share kept, as
   `data stats` says it (sop / none; not nsp).
"""
from __future__ import annotations

import argparse
import errno
import os
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import alice_documents, assert_one_error
from test_cli_audit31 import _usage, tiny  # noqa: F401  (tiny: conftest's tiny model, read only)
from test_cliargs_audit23 import _exit_code
from test_databuild_audit29 import _build
from test_docs_audit14 import _parser, _subparsers

FAMILIES = ("glue", "squad", "race", "classify")


def _family(command: str, family: str) -> argparse.ArgumentParser:
    return _subparsers(_parser(command, [family]))[family]


# ------------------------------------------------------------------------------------------------ 1. metavars
@pytest.mark.parametrize("words", [["export"], ["finetune"], ["predict"], ["evaluate"], ["convert"]])
def test_no_option_shows_argparse_s_own_word(words):
    """An option taking a value names what it takes (DIR, PATH, FILE, NAME, MODEL, N, {choices}), not its
    destination in capitals (`--out OUT`, `--tokenizer TOKENIZER`, `--opset OPSET`)."""
    parser = _parser(words[0], [])
    parsers = [parser, *_subparsers(parser).values()]
    if words[0] == "evaluate":
        parsers += [_family("evaluate", family) for family in FAMILIES]
    vague = sorted({f"{p.prog} {a.option_strings[0]}" for p in parsers for a in p._actions
                    if a.option_strings and a.nargs != 0 and a.metavar is None and not a.choices})
    assert not vague, vague


@pytest.mark.parametrize("words, shown", [
    (["finetune", "glue"], ["--model MODEL --out DIR", "[--recipe NAME]", "[--tokenizer PATH]",
                            "[--dev PATH [PATH ...]]", "[--test PATH [PATH ...]]"]),
    (["finetune", "classify"], ["--model MODEL --out DIR", "[--recipe NAME]", "[--tokenizer PATH]"]),
    (["predict", "glue"], ["--model MODEL --out DIR [--tokenizer PATH]", "[--dev PATH [PATH ...]]"]),
    (["evaluate", "squad"], ["[--model MODEL]", "[--predictions FILE]", "[--out DIR]", "[--tokenizer PATH]"]),
    (["evaluate", "glue"], ["[--score RUN [RUN ...]]", "[--predictions FILE]"]),
    (["export", "onnx"], ["[--opset N]"]),
])
def test_the_task_and_export_usage_lines_name_what_each_option_takes(words, shown):
    """(The GLUE --dev / --test PATH passed before: METAVARS names list options too, so task_commands' own renaming
    of them, `_name_values`, is gone.)"""
    usage = _usage(*words)
    missing = [word for word in shown if word not in usage]
    assert not missing, (missing, usage)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("family", FAMILIES)
def test_predict_and_evaluate_list_their_options_under_one_heading(command, family):
    """--precision, --device and --no-progress are how the model is run: "evaluation options", beside
    --max-seq-length and --eval-batch-size, not the fine-tuning config's "train options" / "dist options"."""
    parser = _family(command, family)
    titles = [group.title for group in parser._action_groups]
    assert "train options" not in titles and "dist options" not in titles, titles
    group = next(group for group in parser._action_groups if group.title == "evaluation options")
    flags = {action.option_strings[0] for action in group._group_actions}
    assert {"--precision", "--device", "--no-progress", "--max-seq-length", "--eval-batch-size"} <= flags, flags
    text = parser.format_help()
    assert "the training loop" not in text and "evaluation options:" in text


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("family", ["glue", "squad", "classify"])
def test_predict_and_evaluate_do_not_offer_a_training_file(command, family):
    """--train is not read by predict or evaluate: left out of their usage and help, and still taken (a script that
    gives finetune's data options to predict as they are goes on working; nothing was ever read from it)."""
    parser = _family(command, family)
    usage, text = " ".join(parser.format_usage().split()), parser.format_help()
    assert "--train " not in usage and "--train PATH" not in text, usage
    needed = ["--model", "M"] + (["--out", "O"] if command == "predict" else [])
    parser.parse_args([*needed, "--train", "train.tsv"])   # no SystemExit
    assert "[--train PATH]" in _usage("finetune", family)


# ------------------------------------------------------------------------------------------------ 2. GLUE --task
@pytest.mark.parametrize("command", ["finetune", "predict", "evaluate"])
def test_the_glue_task_help_says_when_it_is_needed(command):
    action = next(a for a in _family(command, "glue")._actions if "--task" in a.option_strings)
    assert "(required)" not in action.help and "(default:" not in action.help, action.help
    assert "default: the one the model's run recorded" in action.help and "evaluate --predictions" in action.help


@pytest.mark.parametrize("argv", [["finetune", "glue", "--model", "{tmp}/none", "--out", "{tmp}/run"],
                                  ["evaluate", "glue", "--dev", "{tmp}/dev.tsv", "--predictions", "{tmp}/p.tsv"]])
def test_a_missing_glue_task_is_still_one_line(argv, tmp_path, capsys):
    """(Passed before.) A new run, or a predictions file, without --task."""
    code = _exit_code([word.format(tmp=tmp_path) for word in argv])
    assert_one_error(capsys, code, "the following arguments are required: --task")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ 4. convert
def test_convert_into_a_directory_on_another_file_system(tiny, tmp_path, capsys, monkeypatch):
    """DST, an existing directory on another file system than its folder: the files are staged inside it, so that
    they move in by rename (here a rename across DST's edge fails as it does at a mount point, as in
    test_onnx_audit31.py). A second conversion with --overwrite swaps its files in the same way; nothing staged is
    left, inside DST or beside it."""
    out = tmp_path / "volume"
    out.mkdir()
    edge = os.path.realpath(out)
    rename = os.replace

    def inside(path) -> bool:
        return os.path.realpath(path).startswith(edge + os.sep)

    def across_the_mount(src, dst, *args, **kwargs):
        if inside(src) != inside(dst):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", across_the_mount)
    assert main(["convert", str(tiny), str(out), "--to", "hf"]) == 0, capsys.readouterr().err
    first = sorted(p.name for p in out.iterdir())
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(first) and not [n for n in first if n[0] == "."]
    assert main(["convert", str(tiny), str(out), "--to", "hf", "--overwrite"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["volume"]


def test_convert_into_a_new_directory_stages_beside_it(tiny, tmp_path, capsys):
    """(Passed before.) A DST that does not exist is the staged folder renamed; the folders made for it stay, and no
    staging folder is left."""
    dst = tmp_path / "made" / "hf"
    assert main(["convert", str(tiny), str(dst), "--to", "hf"]) == 0, capsys.readouterr().err
    assert (dst / "config.json").is_file() and sorted(p.name for p in dst.parent.iterdir()) == ["hf"]


# ------------------------------------------------------------------------------------------------ 5. data build
def _said(text: str, start: str) -> list[str]:
    return [line[len(start):].strip() for line in text.splitlines() if line.startswith(start)]


def test_the_build_summary_says_how_much_of_the_text_the_instances_hold(tmp_path, capsys):
    """The share `data stats` prints, in the build's summary (T=32: most pairs are truncated); nsp, whose records
    hold other documents' text, says none."""
    text = alice_documents(tmp_path, 300)
    capsys.readouterr()
    assert _build([text], tmp_path / "sop") == 0
    built = _said(capsys.readouterr().err, "text kept:")
    assert main(["data", "stats", str(tmp_path / "sop")]) == 0
    stats = _said(capsys.readouterr().out, "text kept")
    assert len(built) == 1 and built == stats, (built, stats)
    assert 30 < float(built[0].split("%")[0]) < 95

    assert _build([text], tmp_path / "nsp", "--sentence-task", "nsp") == 0
    err = capsys.readouterr().err
    assert "wrote " in err and "text kept" not in err


def test_the_build_summary_counts_every_pass(tmp_path, capsys):
    """With --dupe-factor 2 and nothing truncated (short documents), the instances hold the text twice: 100.0% of
    it, x 2 passes."""
    from albertlm.data.shards import read_meta
    from conftest import shared_path

    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()
    short = tmp_path / "short.txt"
    short.write_text("".join(f"{line.strip()}\n\n" for line in lines[200:260] if 20 < len(line.strip()) < 60))
    assert _build([short], tmp_path / "short", "--max-seq-length", "64", "--dupe-factor", "2",
                  "--sentence-task", "none") == 0
    text = read_meta(tmp_path / "short")["counts"]["instances"]["text_tokens"]
    assert _said(capsys.readouterr().err, "text kept:") == [
        f"100.0% of the text's tokens ({2 * text:,} of {text:,} x 2 passes); truncation to each instance's target "
        "length cut the rest (each pass elsewhere)"]


def test_format_summary_without_the_build_settings_says_no_share():
    """A caller of `format_summary(summary)` alone (no sentence task known) gets the lines it had."""
    from albertlm.cli.data_commands import format_summary
    from albertlm.data.build import BuildSummary

    counts = {"corpus": {"files": 1, "documents": 1, "sentences": 2, "formats": {}},
              "instances": {"labels": {}, "short_targets": 0, "one_sentence_chunks": 0, "empty_documents": 0,
                            "dropped_chunks": 0, "long_sentences_cut": 0, "nsp_same_document": 0,
                            "text_tokens": 10, "unk_tokens": 0},
              "tokens": {"tokens": 13, "masked": 2}}
    said = format_summary(BuildSummary(str(Path("out")), 1, 1, 0.1, counts))
    assert "text kept" not in said
    assert "text kept: 100.0% of the text's tokens (10 of 10)" in format_summary(
        BuildSummary("out", 1, 1, 0.1, counts), "sop")
