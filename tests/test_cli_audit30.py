"""Audit 30 of command-line follow-ups: what the commands say, and what their help and hints promise.

- `albertlm plot` declares its RUN_DIR list itself (a stopgap in `cli.main` widened it after the parser was made);
- `albertlm evaluate --max-batches N` printed its numbers as if of all the data (the first 8 of 160 examples
  looked like all of them): the text says how many examples were scored, and --json adds them; its --json wrote
  a NaN metric as a bare `NaN`, which strict JSON readers (jq, JavaScript's JSON.parse) refuse: null now, as the
  task commands' metrics JSON;
- predict / evaluate <family> --help said `--max-seq-length ... (default: 128)` (384 SQuAD, 512 RACE) while the
  default is the length the model was fine-tuned with; GLUE's --dev / --test showed the metavar ITEM;
- a run's record given as --config (a fine-tuning run's run_config.json, metrics.json or best/task.json; a
  pretraining run's to finetune) said only "unknown config key 'family'" ('model.vocab_size');
- an unknown option's hint: `finetune --preset` was offered --resume, `--no-tensorboard` --train.tensorboard
  (which turns it on), `--no-compile` --compile; `pretrain --recipe` and `finetune --eval-data` got none.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from albertlm.cli.main import COMMANDS, main
from conftest import assert_one_error
from test_cliargs_audit23 import _exit_code
from test_docs_audit14 import _parser, _subparsers
from test_startup_audit28 import _torch_loaded_by
from train_fixtures import alice_sop_data


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _strict(text: str):
    """JSON as strict readers take it: a bare NaN or Infinity is refused."""
    def refuse(word):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------------------------ 1. plot
def test_plot_declares_its_several_run_directories_itself():
    """`plot`'s own parser takes RUN_DIR [RUN_DIR ...] (tests/test_loopplot_audit30.py draws them); the stopgap in
    `cli.main` that widened it after the parser was made is gone."""
    from albertlm.cli import main as cli_main

    run_dir = next(a for a in _parser("plot", [])._actions if a.dest == "run_dir")
    assert run_dir.nargs == "+" and run_dir.metavar == "RUN_DIR" and "needs --out" in run_dir.help
    assert not hasattr(cli_main, "_plot_takes_several_runs")


# -------------------------------------------------------------------------------------------- 2. evaluate
@pytest.fixture(scope="module")
def pretraining(tmp_path_factory) -> dict:
    """{"data": Alice as 32-token SOP data (albert-base-v2's 30,000 pieces), "model": a tiny AlbertForPreTraining,
    "nan": the same with NaN position embeddings (NaN outputs)}."""
    import math

    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("cli30_eval")
    data = alice_sop_data(root)
    torch.manual_seed(0)
    model = AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_layers=1,
                                             num_heads=2, ffn_size=37, max_position_embeddings=64))
    model.save_pretrained(root / "model")
    with torch.no_grad():
        model.albert.embeddings.position.weight.fill_(math.nan)
    model.save_pretrained(root / "nan")
    return {"data": str(data), "model": str(root / "model"), "nan": str(root / "nan")}


def test_evaluate_says_how_much_of_the_data_it_scored(pretraining, capsys):
    """--max-batches 2 of 4: the first 8 examples, said in the text and in --json (`examples`, `data_examples`);
    without --max-batches, the text says all of them and the JSON keeps its keys."""
    from albertlm.training.pretrain import open_dataset

    total = len(open_dataset(pretraining["data"]))
    assert total > 8
    argv = ["evaluate", pretraining["model"], "--data", pretraining["data"], "--device", "cpu", "--no-progress"]
    capsys.readouterr()
    assert main([*argv, "--max-batches", "2", "--batch-size", "4"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(rf"\(scored the first 8 of the data's {total:,} examples(, \d+ masked tokens)?: "
                        r"--max-batches 2, batch size 4; sentence task of the data: sop\)", last), last
    assert main([*argv, "--max-batches", "2", "--batch-size", "4", "--json"]) == 0
    metrics = _strict(capsys.readouterr().out)
    assert (metrics["examples"], metrics["data_examples"], metrics["sentence_task"]) == (8, total, "sop"), metrics
    assert main([*argv, "--max-batches", "1000"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(rf"\(scored all {total:,} examples of the data(, \d+ masked tokens)?; sentence task of the "
                        r"data: sop\)", last), last
    assert main([*argv, "--json"]) == 0
    assert set(_strict(capsys.readouterr().out)) == {"mlm_loss", "mlm_acc", "loss", "sop_loss", "sop_acc",
                                                     "sentence_task"}


def test_evaluate_json_writes_a_nan_metric_as_null(pretraining, capsys):
    """NaN outputs: the metrics are NaN (with evaluate's one warning); --json wrote `NaN`, not JSON."""
    capsys.readouterr()
    with pytest.warns(UserWarning, match="NaN outputs"):
        assert main(["evaluate", pretraining["nan"], "--data", pretraining["data"], "--device", "cpu",
                     "--no-progress", "--max-batches", "1", "--json"]) == 0
    metrics = _strict(capsys.readouterr().out)
    assert all(metrics[key] is None for key in ("mlm_loss", "mlm_acc", "loss", "sop_loss", "sop_acc")), metrics
    assert metrics["examples"] == 32 and metrics["sentence_task"] == "sop"


# ----------------------------------------------------------------------------------- 3. predict/evaluate help
@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("family, length", [("glue", 128), ("squad", 384), ("race", 512), ("classify", 128)])
def test_the_length_predict_reads_at_is_said_to_be_the_models(command, family, length):
    parser = _subparsers(_parser(command, [family]))[family]
    shown = next(a.help for a in parser._actions if "--max-seq-length" in a.option_strings)
    assert shown.startswith("tokens per example") and f"(default: {length})" not in shown, shown
    assert shown.endswith(f"(default: the length the model was fine-tuned with (its task.json; a transformers "
                          f"directory's tokenizer_config.json), else {length})"), shown


def test_finetune_keeps_the_familys_length_as_its_default():
    parser = _subparsers(_parser("finetune", ["squad"]))["squad"]
    assert next(a.help for a in parser._actions if "--max-seq-length" in a.option_strings).endswith("(default: 384)")


@pytest.mark.parametrize("command", ["finetune", "predict", "evaluate"])
def test_glue_dev_and_test_take_paths(command):
    parser = _subparsers(_parser(command, ["glue"]))["glue"]
    usage = parser.format_usage()
    assert "[--dev PATH [PATH ...]]" in usage and "[--test PATH [PATH ...]]" in usage and "ITEM" not in usage, usage


# --------------------------------------------------------------------------- 4. a run's record as --config
def _fine_tuning_records(root: Path) -> dict[str, Path]:
    """A fine-tuning run's records as `albertlm finetune` writes them (a step's run_config.json, metrics.json,
    best/task.json) and a pretraining run's run_config.json."""
    from albertlm.config.presets import get_preset
    from albertlm.config.run import paper_recipe
    from albertlm.tasks.recipes import FAMILY_DEFAULTS

    settings = FAMILY_DEFAULTS["glue"].to_dict()
    about = {"family": "glue", "task": "cola", "labels": ["0", "1"], "max_seq_length": 16,
             "tokenizer": str(root / "tok"), "precision": "fp32"}
    files = {"run_config": root / "ft" / "checkpoints" / "step_00000001" / "run_config.json",
             "metrics": root / "ft" / "metrics.json", "task": root / "ft" / "best" / "task.json",
             "pretraining": root / "pt" / "run_config.json"}
    bodies = {"run_config": {**about, "model": str(root / "model"), **settings},
              "metrics": {"best": {"dev": {"mcc": 0.0}, "step": 1}, "config": settings, "family": "glue"},
              "task": {**about, "step": 1},
              "pretraining": paper_recipe(get_preset("albert-tiny")).replace(preset="albert-tiny").to_dict()}
    for name, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(bodies[name]))
    return files


@pytest.mark.parametrize("command, record, phrases", [
    ("finetune", "run_config", ["is a fine-tuning run's record of itself", "not a config file",
                                "`albertlm finetune glue ... --out {ft} --resume` continues that run",
                                'copy its "optim" and "train" sections']),
    ("finetune", "metrics", ["is a fine-tuning run's metrics.json", "--out {ft} --resume",
                             'save its "config" section as a JSON file of its own']),
    ("finetune", "task", ["is a fine-tuned model's record", "holds no settings", "--out {ft} --resume",
                          "copy {ft}/metrics.json's \"config\" section's \"optim\""]),
    ("finetune", "pretraining", ["is a pretraining run's config (its model and data sections)",
                                 "fine-tuning takes its model from --model (--model {pt} fine-tunes",
                                 '"optim" and "train" sections are pretraining\'s']),
    ("pretrain", "run_config", ["is a fine-tuning run's record of itself", "not a pretraining config",
                                'copy its "optim" and "train" sections']),
])
def test_a_runs_record_given_as_config_says_whose_it_is(tmp_path, capsys, command, record, phrases):
    """Each said only "unknown config key 'family'" (or 'best', or 'model.vocab_size'); nothing is written."""
    files = _fine_tuning_records(tmp_path)
    out = tmp_path / "new"
    argv = (["finetune", "glue", "--task", "cola", "--model", str(tmp_path / "model")] if command == "finetune"
            else ["pretrain", "--data", str(tmp_path / "data")])
    code = main([*argv, "--out", str(out), "--config", str(files[record])])
    assert_one_error(capsys, code, f"--config {files[record]}",
                     *(p.format(ft=tmp_path / "ft", pt=tmp_path / "pt") for p in phrases))
    assert not out.exists()


def test_a_pretraining_runs_config_is_still_a_pretraining_config(tmp_path, capsys):
    """(Passed before.) Given to pretrain, a pretraining run's run_config.json is read as before."""
    files = _fine_tuning_records(tmp_path)
    code = main(["pretrain", "--out", str(tmp_path / "new"), "--config", str(files["pretraining"]), "--dry-run"])
    assert code == 0 and '"preset": "albert-tiny"' in capsys.readouterr().out


# ------------------------------------------------------------------------------------ 5. unknown options
@pytest.mark.parametrize("argv, hint", [
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--preset", "albert-base"],
     "--preset albert-base (fine-tuning takes its model from --model: a pretrained checkpoint"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--preset=albert-base"],
     "(fine-tuning takes its model from --model"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--init-from", "C"],
     "(did you mean --model? fine-tuning starts from"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--no-tensorboard"],
     "--no-tensorboard (did you mean --train.tensorboard=false?)"),
    (["pretrain", "--out", "O", "--no-tensorboard"], "(did you mean --train.tensorboard=false?)"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--no-skip-bad-rows"],
     "(did you mean --skip-bad-rows=false?)"),
    (["pretrain", "--out", "O", "--no-compile"], "(did you mean --compile none?)"),
    (["evaluate", "RUN", "--data", "D", "--no-json"], "(--json is off unless given: leave it out)"),
    (["pretrain", "--out", "O", "--recipe", "paper"], "--recipe paper (pretrain always starts from the paper recipe"),
    (["finetune", "glue", "--task", "cola", "--model", "M", "--out", "O", "--eval-data", "D"],
     "--eval-data D (did you mean --dev?)"),
    (["finetune", "classify", "--train", "T", "--model", "M", "--out", "O", "--eval-data", "D"],
     "(did you mean --dev?)"),
    (["predict", "squad", "--model", "M", "--out", "O", "--eval-data", "D"], "(did you mean --dev?)"),
])
def test_an_unknown_option_is_told_what_was_meant(argv, hint, capsys):
    assert_one_error(capsys, _exit_code(argv), "unrecognized arguments:", hint)


@pytest.mark.parametrize("argv, hint", [
    (["pretrain", "--out", "O", "--no-progres"], "(did you mean --no-progress?)"),     # a negation that exists
    (["pretrain", "--out", "O", "--no_progress"], "(did you mean --no-progress?)"),
    (["pretrain", "--out", "O", "--learning-rate", "1"], "(did you mean --lr?)"),
    (["pretrain", "--out", "O", "--eval_data", "D"], "(did you mean --eval-data?)"),    # pretrain's own
])
def test_the_nearest_option_is_still_offered(argv, hint, capsys):
    """(Passed before.)"""
    assert_one_error(capsys, _exit_code(argv), hint)


# ----------------------------------------------------------------------------------------- 6. help
def test_every_subcommands_help_loads_no_torch():
    """A guard (torch-free before this audit too): every command's and subcommand's --help, each family of the
    task commands included."""
    commands = []
    for command in COMMANDS:
        commands.append([command, "--help"])
        families = ["glue", "squad", "race", "classify"] if command == "evaluate" else []
        for sub in families or _subparsers(_parser(command, [])):
            commands.append([command, sub, "--help"])
    results = _torch_loaded_by(commands)
    assert len(results) == len(commands) > 30
    assert [(argv, code, torch) for argv, code, torch, _ in results if code != 0 or torch] == [], results


def test_evaluate_counts_the_masked_tokens_it_scored(pretraining, capsys):
    """(With training/evaluate.py's `counts`.) The masked tokens of the first 8 examples, as the data holds them."""
    import numpy as np

    from albertlm.training.pretrain import open_dataset

    dataset = open_dataset(pretraining["data"])
    items = [dataset[i] for i in range(8)]
    masked = sum(int(((np.asarray(it["masked_lm_weights"]) > 0) & (np.asarray(it["masked_lm_ids"]) != -100)).sum())
                 for it in items)
    capsys.readouterr()
    assert main(["evaluate", pretraining["model"], "--data", pretraining["data"], "--device", "cpu", "--no-progress",
                 "--max-batches", "2", "--batch-size", "4", "--json"]) == 0
    assert _strict(capsys.readouterr().out)["masked_tokens"] == masked > 8
    assert main(["evaluate", pretraining["model"], "--data", pretraining["data"], "--device", "cpu", "--no-progress",
                 "--max-batches", "2", "--batch-size", "4"]) == 0
    assert f"examples, {masked} masked tokens:" in capsys.readouterr().out.splitlines()[-1]
