"""Docs audit 30, second pass: docs/{training,finetuning,validation}.md and the README against the thirtieth
session's second wave (commits c1e5e37, 9862b99, 3df4633, 5232b92, e8c8f17, 8c6a3ff).

What the pages quote is what the code says: evaluate's closing line (`cli.train_commands._scored_line`) and the
keys `--json` adds with `--max-batches`, a NaN metric written as `null`; the refusal of a run's record given as
`--config`; the `--max-seq-length` default `predict` / `evaluate --help` shows; the unknown-option hints
validation.md's row quotes; `plot`'s usage; the case-only label warning. What they say a function does it does on a
tiny input: LAMB's bias correction counts each tensor's own steps (torch's Adam on a tensor that joins late), a
renamed MNLI mismatched test file is `MNLI-mm.tsv` by its genres (the five the page names), a ClassLabel Parquet
file trains on its names in id order, the demo's `--out` check refuses what the pages say and takes an earlier
demo's. The README's transformers floor is the extras'. No page still says what these commits changed.
Function calls on tiny inputs: a few seconds, CPU-only."""
from __future__ import annotations

import argparse
import inspect
import json
import math
import tomllib
from pathlib import Path

import pytest
import torch

import test_docs_audit14 as audit14
from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error
from test_cliargs_audit23 import _exit_code
from test_docs_audit26 import _flat
from test_docs_audit28 import _quote, check_validation_row
from test_glue_audit30 import MISMATCHED, _hub_split, _mnli_file
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------ training.md: evaluate
def test_evaluates_closing_lines_are_what_training_md_quotes():
    from albertlm.cli.train_commands import _scored_line

    limited = argparse.Namespace(max_batches=2, batch_size=4)
    quoted = _quote("docs/training.md", "(scored the first 8 of the data's 182 examples")
    said = _scored_line({"examples": 8, "data_examples": 182, "masked_tokens": 40}, limited)
    assert quoted == f"({said}; sentence task of the data: sop)", (quoted, said)
    quoted = _quote("docs/training.md", "scored all 182 examples of the data")
    for o in (argparse.Namespace(max_batches=0, batch_size=32), argparse.Namespace(max_batches=1000, batch_size=32)):
        assert _scored_line({"examples": 182, "data_examples": 182, "masked_tokens": 892}, o) == quoted


def test_evaluates_json_counts_and_null_are_what_training_md_says(monkeypatch):
    from albertlm.cli import train_commands
    from albertlm.cli.task_commands import finite
    from albertlm.training import pretrain

    text = _flat("docs/training.md")
    assert "with `--max-batches`, `--json` adds the same counts as `examples`, `data_examples` and `masked_tokens`" \
           in text
    monkeypatch.setattr(pretrain, "open_dataset", lambda path: range(182))
    scored = train_commands._scored(argparse.Namespace(data="D"), {"examples": 8, "masked_tokens": 40})
    assert scored == {"examples": 8, "data_examples": 182, "masked_tokens": 40}
    assert "shown = {**metrics, **scored} if o.max_batches else metrics" in \
        inspect.getsource(train_commands._evaluate)
    assert "`--json` writes a NaN metric as `null`" in text
    assert json.dumps(finite({"mlm_acc": math.nan, "sop_acc": 0.5}), allow_nan=False) == \
        '{"mlm_acc": null, "sop_acc": 0.5}'


# ------------------------------------------------------------------ training.md: optimizer and clipping
def test_bias_correction_counts_each_tensors_own_steps_as_training_md_says():
    """A tensor without a gradient at the first step (it joins later): LAMB with bias correction, no trust ratio
    and no decay moves both tensors as torch's Adam does."""
    from albertlm.training.lamb import Lamb

    assert "no bias correction (`optim.bias_correction=true` adds Adam's, counting each tensor's own steps as " \
           "torch's Adam does)" in _flat("docs/training.md")
    torch.manual_seed(0)
    start = [torch.randn(3, dtype=torch.float64), torch.randn(2, dtype=torch.float64)]
    grads = [[torch.randn(3, dtype=torch.float64), None]] + \
            [[torch.randn(3, dtype=torch.float64), torch.randn(2, dtype=torch.float64)] for _ in range(2)]
    moved = []
    for make in (lambda p: Lamb(p, lr=0.1, eps=1e-6, weight_decay=0.0, trust_ratio=False, bias_correction=True),
                 lambda p: torch.optim.Adam(p, lr=0.1, eps=1e-6)):
        params = [w.clone().requires_grad_() for w in start]
        optimizer = make(params)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = None if g is None else g.clone()
            optimizer.step()
        moved.append([p.detach() for p in params])
    for ours, adam in zip(*moved):
        torch.testing.assert_close(ours, adam, rtol=1e-12, atol=1e-12)


def test_the_clipping_bullets_google_claims_are_what_the_tests_check():
    text = _flat("docs/training.md")
    assert "google-research's ALBERT `optimization.py` has no gradient accumulation: its one clip is of a core's " \
           "whole batch, which on one device is ours (tests/test_trainmath_audit30.py checks accumulation with a " \
           "short last micro-batch, 2 gloo processes and every update of a short run against google's formulas)" \
           in text
    source = (ROOT / "tests/test_trainmath_audit30.py").read_text(encoding="utf-8")
    for name in ("def test_an_accumulated_update_with_a_short_last_micro_batch_is_googles_whole_batch_update",
                 "def test_two_torchrun_processes_train_the_weights_of_one_process",
                 "def test_every_update_of_a_short_run_is_googles_rate_and_googles_lamb"):
        assert name in source, name


# ------------------------------------------------------------------ a run's record as --config
def test_a_runs_record_given_as_config_is_refused_as_the_pages_say(tmp_path, capsys):
    training, finetuning = _flat("docs/training.md"), _flat("docs/finetuning.md")
    assert "A run's record given as `--config` (a fine-tuning run's `run_config.json`, `metrics.json` or " \
           "`best/task.json`; to `finetune`, a pretraining run's `run_config.json`) is refused in one line naming " \
           "whose it is" in training and "`cli.train_commands.check_config_records`" in training
    assert "A run's record given as `--config` is refused in one line naming whose it is and the way on" in finetuning
    run = tmp_path / "ft"
    (run / "best").mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps({"family": "glue", "task": "rte", "optim": {}, "train": {}}))
    (run / "best" / "task.json").write_text(json.dumps({"family": "glue", "task": "rte", "labels": ["a", "b"]}))
    (tmp_path / "pt").mkdir()
    (tmp_path / "pt" / "run_config.json").write_text(json.dumps({"model": {"vocab_size": 30}, "data": {"path": "d"},
                                                                 "optim": {}}))
    assert_one_error(capsys, main(["pretrain", "--out", str(tmp_path / "o"), "--config", str(run / "run_config.json")]),
                     "a fine-tuning run's record of itself", 'copy its "optim" and "train" sections')
    finetune = ["finetune", "glue", "--task", "rte", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "o")]
    assert_one_error(capsys, main([*finetune, "--config", str(run / "best" / "task.json")]),
                     "a fine-tuned model's record", f"--out {run} --resume` continues that run",
                     "metrics.json's \"config\" section's")
    assert_one_error(capsys, main([*finetune, "--config", str(tmp_path / "pt" / "run_config.json")]),
                     "a pretraining run's config", f"--model {tmp_path / 'pt'} fine-tunes")
    # a pretraining run's config given to pretrain is a config (refused later for other reasons, not as a record)
    from albertlm.cli.train_commands import _record_line

    assert _record_line(tmp_path / "pt" / "run_config.json", {"model": {}, "data": {}}, "pretrain") is None


# ------------------------------------------------------------------ finetuning.md: predict / evaluate --help
@pytest.mark.parametrize("command, family, length", [("predict", "glue", 128), ("evaluate", "classify", 128),
                                                     ("predict", "squad", 384), ("evaluate", "race", 512)])
def test_the_max_seq_length_default_help_shows_is_what_finetuning_md_quotes(command, family, length):
    quoted = _quote("docs/finetuning.md", "the length the model was fine-tuned with")
    assert quoted.endswith(", else 128") and "; 384 for SQuAD, 512 for RACE" in _flat("docs/finetuning.md")
    parser = audit14._subparsers(audit14._parser(command, [family]))[family]
    action = next(a for a in parser._actions if "--max-seq-length" in a.option_strings)
    assert action.help.endswith(f"(default: {quoted.removesuffix('128')}{length})"), action.help


# ------------------------------------------------------------------ validation.md: unknown options, demo, evaluate
_ROWS = [
    ("| an unrecognized argument |", "albertlm.cli.main._unknown_option_hint", "MEANT_ELSEWHERE"),
    ("| `make demo` / `python -m albertlm.demo` |", "albertlm.demo.check_out", "nothing there says a demo wrote"),
    ("| `evaluate CKPT --data` (pretraining data) |", "albertlm.training.evaluate.not_finite_accuracies", "nan"),
    ("| `evaluate CKPT --data` (pretraining data) |", "albertlm.cli.train_commands._scored_line", "scored the first"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:20]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_the_second_wave_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


@pytest.mark.parametrize("argv, quoted", [
    (["pretrain", "--out", "O", "--no-tensorboard"], "(did you mean --train.tensorboard=false?)"),
    (["pretrain", "--out", "O", "--no-compile"], "(did you mean --compile none?)"),
    (["evaluate", "RUN", "--data", "D", "--no-json"], "(--json is off unless given: leave it out)"),
])
def test_the_no_option_hints_are_what_validation_md_quotes(argv, quoted, capsys):
    """(validation.md names no `--no-...` flag: tests/test_docs_audit14.py refuses options that nothing accepts.)"""
    assert "an option written with `no-` before its name where it has no such negation" in \
        _flat("docs/validation.md") and f"`{quoted}`" in _flat("docs/validation.md")
    assert_one_error(capsys, _exit_code(argv), f"{argv[-1]} {quoted}")


@pytest.mark.parametrize("argv, said", [
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--preset", "albert-base"],
     "fine-tuning takes its model from --model"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--init-from", "C"], "did you mean --model"),
    (["pretrain", "--out", "O", "--recipe", "paper"], "pretrain always starts from the paper recipe"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--eval-data", "D"], "did you mean --dev"),
    (["predict", "squad", "--model", "M", "--out", "O", "--eval-data", "D"], "did you mean --dev"),
])
def test_another_commands_option_is_told_as_validation_md_says(argv, said, capsys):
    row = next(line for line in (ROOT / "docs/validation.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| an unrecognized argument |"))
    assert said in row.replace("`", ""), said
    assert_one_error(capsys, _exit_code(argv), said)


def test_the_demos_out_is_checked_as_the_pages_say(tmp_path):
    from albertlm.demo import MARK, check_out

    assert MARK == ".albertlm-demo"
    assert "`--out` takes a new or empty directory or an earlier demo's, marked by the `.albertlm-demo` it writes " \
           "first" in _flat("docs/training.md")
    row = _flat("docs/validation.md")
    assert "an `--out` that is a file, holds other files than an earlier demo's, or holds only the demo's names " \
           "(`corpus/`, `tokenizer/`, `data/`, `run/`, ...) with no sign a demo wrote them (no `.albertlm-demo`, " \
           "`summary.json` or demo `run/`) refused" in row
    check_out(tmp_path / "new")                                   # new
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty")                                 # empty
    (tmp_path / "file").write_text("x")
    mine, other, demo, old = (tmp_path / name for name in ("mine", "other", "demo", "old"))
    (mine / "run").mkdir(parents=True)                           # a user's run/: the demo would delete it
    (other / "notes.txt").parent.mkdir()
    (other / "notes.txt").write_text("x")
    (demo / "run").mkdir(parents=True)
    (demo / MARK).write_text("")
    (old / "run").mkdir(parents=True)                            # a demo of before the mark: its summary.json
    (old / "summary.json").write_text("{}")
    for refused, words in ((tmp_path / "file", "is a file"), (mine, "nothing there says a demo wrote"),
                           (other, "holds other files than an earlier demo's")):
        with pytest.raises(UserError, match=words):
            check_out(refused)
    check_out(demo)
    check_out(old)
    assert (mine / "run").is_dir()


# ------------------------------------------------------------------ training.md: plot's usage
def test_plots_usage_is_what_training_md_shows():
    usage = audit14._parser("plot", []).format_usage()
    assert "[--out OUT] RUN_DIR [RUN_DIR ...]" in usage, usage
    assert "`albertlm plot [--out OUT] RUN_DIR [RUN_DIR ...]`" in _flat("docs/training.md")


# ------------------------------------------------------------------ finetuning.md: MNLI, ClassLabel, case
def test_a_renamed_mnli_mismatched_test_file_is_told_by_the_genres_finetuning_md_names(tmp_path):
    from albertlm.tasks import glue, specs

    text = _flat("docs/finetuning.md")
    assert "is the mismatched one when every row's genre is one of the mismatched set's five, facetoface, letters, " \
           "nineeleven, oup, verbatim: `glue.mnli_set`" in text
    assert glue.MNLI_GENRES["mismatched"] == ("facetoface", "letters", "nineeleven", "oup", "verbatim")
    path = _mnli_file(tmp_path / "test.tsv", MISMATCHED)
    assert specs._submission_name(glue.get_task("mnli"), path) == "MNLI-mm.tsv"


def test_a_class_label_file_trains_on_its_names_as_finetuning_md_says(tiny_tokenizer, tmp_path):  # noqa: F811
    from albertlm.tasks import classify, specs
    from albertlm.config.task import FinetuneConfig

    text = _flat("docs/finetuning.md")
    assert "whose label column is a `ClassLabel` trains on its class names, in its id order (the names its schema " \
           "records, a class the training split lacks included" in text
    names = ["negative", "neutral", "positive"]
    train = _hub_split(tmp_path / "train.parquet", [2, 0, 2, 0], names)
    spec = specs.classify_spec(tiny_tokenizer, FinetuneConfig(max_seq_length=16), classify.Columns("text"),
                               train_file=train)
    assert spec.info["labels"] == names and [f.label for f in spec.train] == [2, 0, 2, 0]


def test_the_case_only_label_warning_is_what_finetuning_md_quotes():
    from albertlm.tasks import classify, specs

    quoted = _quote("docs/finetuning.md", "labels that differ only in case are 2 classes, not 1: ")
    head, tail = quoted.split("...")
    examples = [classify.TextExample(guid=str(i), text_a="a", text_b=None, label=label, where=f"train.csv:{i + 2}")
                for i, label in enumerate(["Positive", "positive", "positive"])]
    said = specs._case_only_labels(examples, "train.csv")
    assert said.startswith(f"train.csv: {head}") and said.endswith(tail), (said, quoted)


# ------------------------------------------------------------------ README: the test extras' transformers
def test_the_readmes_transformers_floor_is_the_extras():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for name in ("test", "bench"):
        assert "transformers>=5" in extras[name], (name, extras[name])
    assert "the test extras ask for transformers 5 or newer, the oracle whose behaviour the tests pin, as does " \
           "`.[bench]`" in _flat("README.md")


# ------------------------------------------------------------------ what the pages said before these commits
_STALE = [
    ("docs/training.md", "no bias correction (`optim.bias_correction=true` adds it)"),
    ("docs/training.md", "`albertlm plot RUN_DIR` draws"),
    ("docs/finetuning.md", "(a test file whose name holds `mismatched` is the mismatched one)"),
    ("docs/validation.md", "an `--out` holding other files than an earlier demo's refused"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_the_second_wave_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
