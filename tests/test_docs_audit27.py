"""Docs audit 27: README.md and docs/*.md against what the twenty-seventh session made the code do. Every `--flag`
the sections this session wrote name is an option of the command the section is about (`pretrain --initializer`,
`--optim.warmup_style` of pretrain and every fine-tuning family, `evaluate glue --score`, `info --config`, `export
onnx --config`, ...); the messages the pages quote are the code's (a choice given as a flag, fp16 on a CPU for
predict / evaluate, the precision note, `evaluate glue --score`'s leaderboard line and refusals); the new
validation.md rows name functions that hold their checks; no page still says that SIGUSR1 / SIGHUP end a command at
once outside a training loop (they stop as Ctrl-C does, `errors.STOP_SIGNALS`); README's summary of the
twenty-seventh session's None model at 4x tokens is paper.md's numbers, and paper.md's claim-2 paragraph its own
table's; the recipe-warmup, `params` and `glue_score` examples are what the code gives; the test files the pages cite
exist. Parsers, a few function calls and metrics.json files written here: a few seconds, CPU-only."""
from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest

import test_docs_audit14 as audit14
from conftest import assert_one_error
from test_docs_audit26 import _flat, _options
from test_glue_audit27 import _metrics_json

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("glue", "squad", "race", "classify")
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w.-]*[\w])")


def _section(doc: str, start: str, end: str) -> str:
    """The flattened text of `doc` from `start` up to `end` (both must be there, in that order)."""
    text = _flat(doc)
    assert start in text, (doc, start)
    rest = text[text.index(start):]
    assert end in rest, (doc, end)
    return rest[:rest.index(end)]


# ------------------------------------------------------------------ options of the sections this session wrote
# (page, where the section starts, where it ends, the commands whose options it names: (command, subcommand))
_SECTIONS = [
    ("docs/finetuning.md", "**GLUE's score**", "## SQuAD v1.1 / v2.0", [("evaluate", "glue")]),
    ("docs/finetuning.md", "- `--precision fp16` needs a CUDA device", "## Python",
     [("finetune", "glue"), ("predict", "glue"), ("evaluate", "glue")]),
    ("docs/finetuning.md", "`--epochs` (or `--max-steps`, which wins", "`--weight-decay`", [("finetune", "glue")]),
    ("docs/finetuning.md", "`--recipe paper` picks the task's row", "## Against google-research's",
     [("finetune", family) for family in FAMILIES]),
    ("docs/finetuning.md", "- `--out` naming a fine-tuning run's directory", "- `--tokenizer` naming another",
     [("predict", "glue"), ("evaluate", "glue")]),
    ("docs/finetuning.md", "| learning rate | `polynomial_decay(lr, step, train_step", "| clipping |",
     [("finetune", family) for family in FAMILIES]),
    ("docs/interop.md", "`albertlm info SRC [--json] [--config FILE]`", "Python: `from albertlm.interop.tf import",
     [("info", None)]),
    ("docs/interop.md", "- MODEL is an albertlm or transformers directory, a run directory, or a google-research TF",
     "- Every class exports", [("export", "onnx")]),
    ("docs/interop.md", "MODEL is our checkpoint directory, a transformers ALBERT directory", "- fill-mask: each",
     [("embed", None), ("fill-mask", None)]),
    ("docs/training.md", "| `--initializer` |", "### Command-line options, for developers", [("pretrain", None)]),
    ("docs/training.md", "`--optim.warmup_style google` takes google's warmup instead", "Steps are optimizer updates",
     [("pretrain", None)] + [("finetune", family) for family in FAMILIES]),
    ("docs/training.md", "| initial weights |", "gradients, each normalised", [("pretrain", None)]),
    ("docs/training.md", "except a choice given as a flag", "and every number must be finite", [("pretrain", None)]),
    ("docs/model.md", "Models are initialised as transformers does", "Outputs are a", [("pretrain", None)]),
    ("docs/model.md", "`albertlm params` shows the paper's number", "## Config validation", [("params", None)]),
    ("docs/paper.md", "A JSON grid file that gives a key twice", "`--report-only` reads the suite", [("ablate", None)]),
    ("docs/paper.md", "### The None model with four times the tokens", "## The cpu grid with a third",
     [("ablate", None)]),
    ("docs/data.md", "a first chunk that is a single document", "A corpus of many smaller", [("data", "build")]),
    ("docs/validation.md", "| a misspelt command, subcommand or choice |", "| `make demo`",
     [("pretrain", None), ("data", "build")]),
]


# a section's flags named as what the command does not take ("`predict` has no `--overwrite`")
NOT_OPTIONS = {"- `--out` naming a fine-tuning run's directory": {"--overwrite"}}


@pytest.mark.parametrize("doc, start, end, commands", _SECTIONS, ids=[f"{s[0]}:{s[1][:30]}" for s in _SECTIONS])
def test_every_flag_a_section_names_is_an_option_of_its_command(doc, start, end, commands):
    flags = {flag for flag in FLAG.findall(_section(doc, start, end))
             if not ("_" in flag and "." not in flag)}      # google's scripts' flags (`--num_train_epochs`)
    known = set().union(*(_options(command, sub) for command, sub in commands))
    absent = NOT_OPTIONS.get(start, set())                   # named as an option the command does not have
    assert not flags - known - absent, (doc, start, sorted(flags - known - absent), commands)
    assert not absent & known, (doc, start, absent & known)


# (the command and subcommand, the option the pages give it)
_GIVEN = [
    *[(("finetune", family), "--optim.warmup_style") for family in FAMILIES],
    (("pretrain", None), "--optim.warmup_style"), (("pretrain", None), "--initializer"),
    (("evaluate", "glue"), "--score"), (("info", None), "--config"), (("export", "onnx"), "--config"),
    (("convert", None), "--config"), (("predict", "glue"), "--precision"), (("evaluate", "glue"), "--precision"),
    (("embed", None), "--tokenizer"), (("fill-mask", None), "--tokenizer"), (("data", "build"), "--sentence-task"),
    (("ablate", None), "--finetune-seeds"), (("ablate", None), "--glue-dir"),
]


@pytest.mark.parametrize("command, flag", _GIVEN)
def test_the_options_this_sessions_pages_give_a_command_are_its_options(command, flag):
    assert flag in _options(*command), (command, flag)


def test_predict_and_evaluate_have_no_overwrite_as_finetuning_md_says():
    """finetuning.md: "`predict` has no `--overwrite`; give another `--out`" (a run's folder as --out is refused)."""
    assert "`predict` has no `--overwrite`; give another `--out` (`RUN/predictions`)" in _flat("docs/finetuning.md")
    for command in ("predict", "evaluate"):
        for family in FAMILIES:
            assert "--overwrite" not in _options(command, family), (command, family)


def test_the_initializer_and_warmup_style_choices_are_the_pages():
    """training.md's table: `--initializer` normal | truncated_normal (default normal), `--optim.warmup_style`
    albertlm | google (default albertlm)."""
    import typing

    from albertlm.config.run import OptimConfig, RunConfig
    from albertlm.training.schedule import WARMUP_STYLES

    hints = typing.get_type_hints(RunConfig)
    assert typing.get_args(hints["initializer"]) == ("normal", "truncated_normal")
    assert RunConfig().initializer == "normal" and OptimConfig().warmup_style == "albertlm"
    assert WARMUP_STYLES == ("albertlm", "google")
    text = _flat("docs/training.md")
    assert "`normal` (transformers') or `truncated_normal` (google-research's" in text
    assert "`albertlm` (warmup update k at lr × (k+1)/warmup) or `google` (lr × k/warmup" in text


# ------------------------------------------------------------------ messages the pages quote
def test_training_md_quotes_the_refused_choice_flag(capsys):
    from albertlm.cli.main import main

    quoted = "--precision: train.precision='bf61': must be one of fp32, bf16, fp16 (did you mean bf16?)"
    assert quoted in _flat("docs/training.md")
    with pytest.raises(SystemExit) as stopped:
        raise SystemExit(main(["pretrain", "--precision", "bf61", "--out", "unused"]))
    assert_one_error(capsys, stopped.value.code, quoted)


def test_finetuning_md_quotes_predicts_fp16_refusal_and_precision_note(tmp_path):
    import argparse

    import torch

    from albertlm.cli.task_commands import _precision_note
    from albertlm.errors import UserError
    from albertlm.training.precision import check_precision

    text = _flat("docs/finetuning.md")
    quoted = "fp16 needs a CUDA device; use --precision fp32 or bf16 on CPU"
    assert f"(`{quoted}`;" in text
    with pytest.raises(UserError) as refused:
        check_precision("fp16", torch.device("cpu"), training=False)
    assert str(refused.value) == quoted
    note = _precision_note(argparse.Namespace(command="evaluate"), Path("runs/race/best"), {"precision": "bf16"},
                           "fp32")
    assert note is not None and note.split(": ", 1)[1] in text, note
    assert _precision_note(argparse.Namespace(command="predict"), Path("m"), {"precision": "fp32"}, "fp32") is None


def test_evaluate_glue_score_prints_the_line_finetuning_md_shows(tmp_path, monkeypatch, capsys):
    """finetuning.md: JSON (score, tasks, missing, runs) on stdout, `GLUE dev score S (CoLA c, ...)` on stderr in
    GLUE's order with two-metric tasks and MNLI by their mean, a warning naming the missing tasks and one per run the
    time budget stopped; `--score` with --out (or a data option) and a second run of a task: one line, exit 2."""
    import json

    from albertlm.cli.main import main

    monkeypatch.chdir(tmp_path)
    _metrics_json(Path("runs/stsb"), "stsb", {"step": 4, "dev": {"pearson": 0.9, "spearman": 0.88}})
    _metrics_json(Path("runs/cola"), "cola", {"step": 4, "dev": {"mcc": 0.605}})
    _metrics_json(Path("runs/mnli"), "mnli", {"step": 4, "dev_matched": {"accuracy": 0.8},
                                              "dev_mismatched": {"accuracy": 0.82}, "diagnostic": {"mcc": 0.3}})
    stopped = Path("runs/rte/metrics.json")
    _metrics_json(stopped.parent, "rte", {"step": 5, "dev": {"accuracy": 0.7}})
    stopped.write_text(json.dumps({**json.loads(stopped.read_text()), "status": "budget", "step": 5,
                                   "total_steps": 10}))
    assert main(["evaluate", "glue", "--score", "runs/stsb", "runs/cola", "runs/mnli", "runs/rte"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert set(result) == {"score", "tasks", "missing", "runs"}
    assert result["tasks"] == {"cola": 0.605, "stsb": 0.89, "mnli": 0.81, "rte": 0.7}
    lines = err.splitlines()
    assert lines[0] == "GLUE dev score 75.1 (CoLA 60.5, STS-B 89.0, MNLI 81.0, RTE 70.0)", lines
    assert "warning: not GLUE's score: no run of SST-2, MRPC, QQP, QNLI, WNLI" in err
    assert "runs/rte: the run stopped at step 5 of 10" in err
    text = _flat("docs/finetuning.md")
    assert "`GLUE dev score 80.5 (CoLA 60.5, SST-2 94.9, MRPC 87.4, ...)`" in text
    assert "\"status\": \"budget\"` in its metrics.json) is scored by its best so far, with a warning" in text
    for argv, phrase in ((["runs/cola", "--out", "o"], "--out is not used with it"),
                         (["runs/cola", "--task", "rte"], "--task is not used with it"),
                         (["runs/cola", "runs/cola"], "are both cola runs"),
                         (["runs/none"], "no metrics.json")):
        with pytest.raises(SystemExit) as refused:
            raise SystemExit(main(["evaluate", "glue", "--score", *argv]))
        assert_one_error(capsys, refused.value.code, phrase)


def test_glue_score_takes_the_shapes_finetuning_md_gives():
    """finetuning.md's `glue_score({"cola": {"mcc": 0.55}, "mnli": [{"accuracy": ...}, {"accuracy": ...}], ...})`:
    a task's metrics as `evaluate` prints them, MNLI a list of its two (plain numbers are not that shape)."""
    from albertlm.tasks.metrics import glue_score

    text = _flat("docs/finetuning.md")
    assert 'glue_score({"cola": {"mcc": 0.55}, "mnli": [{"accuracy": 0.85}, {"accuracy": 0.84}], ...})' in text
    assert "[matched, mismatched]" not in text
    result = glue_score({"cola": {"mcc": 0.55}, "mnli": [{"accuracy": 0.85}, {"accuracy": 0.84}]})
    assert result["tasks"] == {"cola": 0.55, "mnli": pytest.approx(0.845)}
    assert result["score"] == pytest.approx((0.55 + 0.845) / 2)


# ------------------------------------------------------------------ validation.md: the rows this session added
# (a phrase of the row, the function its 'where' cell names, a phrase of that function's check)
_ROWS = [
    ("| GLUE `--task` |", "albertlm.tasks.glue.get_task", "_nearest_task"),
    ("| a family's training data |", "albertlm.tasks.registry._classify_spec", "needs --train FILE"),
    ("| a family's training data |", "albertlm.tasks.registry._squad_spec", "no SQuAD file to read"),
    ("| `predict` / `evaluate --model --out` |", "albertlm.cli.task_commands._check_out_keeps_run",
     "best\" / TASK_FILE"),
    ("| `evaluate glue --score RUN ...` |", "albertlm.tasks.glue.runs_glue_score", "give one run per task"),
    ("| `evaluate glue --score RUN ...` |", "albertlm.cli.task_commands._glue_score", "not used with it"),
    ("| `embed` / `fill-mask --tokenizer` |", "albertlm.tasks.inference.check_own_tokenizer", "tokenizer_difference"),
    ("| `convert DST` / `export onnx --out DIR` holding a TF checkpoint |",
     "albertlm.cli.convert_commands.held_tf_checkpoint", "variables"),
    ("| TF checkpoint (`.index` + `.data-*`) |", "albertlm.interop.tf_checkpoint.TFCheckpoint.check_data_files",
     "truncated"),
    ("| a missing package |", "albertlm.cli.main.missing_dependency", "pip install"),
    ("| a misspelt command, subcommand or choice |", "albertlm.config.overrides._check_flag_choice", "_did_you_mean"),
    ("| a misspelt command, subcommand or choice |", "albertlm.cli.main._refuse_a_misspelt_task", "did you mean"),
    ("| `make demo` / `python -m albertlm.demo` |", "albertlm.demo.check_dependencies", "matplotlib"),
    ("| `ablate` grid files |", "albertlm.experiments.grids.read_grid_file", "read_table_file"),
    ("| SIGINT / SIGTERM / SIGUSR1 / SIGHUP |", "albertlm.errors.sigterm_stops", "STOP_SIGNALS"),
]


@pytest.mark.parametrize("row, where, check", _ROWS)
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    import inspect

    rows = [line for line in (ROOT / "docs/validation.md").read_text(encoding="utf-8").splitlines()
            if line.startswith(row)]
    assert len(rows) == 1, row
    name = where.split(".")[-1]
    assert f"`{name}`" in rows[0] or f".{name}`" in rows[0], (row, where)
    function = audit14._resolve(where)
    assert function is not None, where
    assert check in inspect.getsource(function), (where, check)


# ------------------------------------------------------------------ signals outside a training loop
_STALE_SIGNAL_PHRASES = ("outside a loop they still end the process at once", "still ends at once on them",
                         "SIGUSR1 and SIGHUP still end the process")


@pytest.mark.parametrize("doc", ["README.md", "docs/training.md", "docs/finetuning.md", "docs/paper.md",
                                 "docs/validation.md", "docs/data.md"])
def test_no_page_says_sigusr1_or_sighup_end_a_command_at_once_outside_a_loop(doc):
    """Since the twenty-seventh session `errors.sigterm_stops` (every command) takes SIGUSR1 and SIGHUP as it takes
    SIGTERM: `interrupted`, exit 130, where they have their default action (not under nohup)."""
    from albertlm.errors import STOP_SIGNALS

    assert set(STOP_SIGNALS) == {"SIGTERM", "SIGUSR1", "SIGHUP"}
    text = _flat(doc)
    assert not [phrase for phrase in _STALE_SIGNAL_PHRASES if phrase in text], doc


def test_validation_md_and_paper_md_say_what_the_stop_signals_do_outside_a_loop():
    assert ("outside a training loop (setting up, the last files, any other command) SIGTERM, SIGUSR1 and SIGHUP "
            "stop as Ctrl-C does: `interrupted`, exit 130") in _flat("docs/validation.md")
    assert ("the whole suite, with `--jobs N` or serial, outside a training loop too (`interrupted`, exit 130), "
            "unless the process ignores them") in _flat("docs/paper.md")


# ------------------------------------------------------------------ README and paper.md: the None model at 4x
def _raw_section(doc: str, start: str, end: str) -> str:
    """The text of `doc` (lines as written) from the line starting with `start` up to the one starting with `end`."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert f"\n{start}" in text and f"\n{end}" in text, (doc, start, end)
    rest = text[text.index(f"\n{start}"):]
    return rest[:rest.index(f"\n{end}")]


def _rows(section: str, model: str) -> list[list[str]]:
    """The cells of a section's table rows whose first cell is `model`."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|")]
    return [row for row in rows if row[0] == model]


def _seed_rows(section: str, model: str) -> dict[int, float]:
    """{seed: Avg} of a per-seed table's rows for `model` (the Avg is the last column's first number)."""
    return {int(row[1]): float(row[-1].split()[0]) for row in _rows(section, model) if row[1].isdigit()}


def test_readme_and_claim_2_state_the_none_model_at_4x_as_paper_md_measured():
    paper = _flat("docs/paper.md")
    sop_nsp = _raw_section("docs/paper.md", "### SOP and NSP with four times the tokens",
                           "### The None model with four times the tokens")
    none = _raw_section("docs/paper.md", "### The None model with four times the tokens",
                        "### A third seed of the three models")   # (a section of its own since session 28)
    none_seeds, sop_seeds = _seed_rows(none, "None"), _seed_rows(sop_nsp, "SOP")
    scratch = _seed_rows(sop_nsp, "scratch")
    assert set(none_seeds) == set(sop_seeds) == set(scratch) == {1, 2}
    report = [row for row in _rows(none, "None") if "±" in row[1]]     # the suite's report: mean ± sd over seeds
    assert len(report) == 1, report
    mean, sd = (float(x) for x in report[0][-2].split(" ± "))
    gain = float(report[0][-1].replace("−", "-"))
    seeds = list(none_seeds.values())
    assert abs(statistics.mean(seeds) - mean) <= 0.06 and abs(statistics.stdev(seeds) - sd) <= 0.1, (seeds, mean, sd)
    assert gain == pytest.approx(mean - statistics.mean(scratch.values()), abs=0.11)
    # claim 2's paragraph: the None model's mean, sd and seeds as the section's tables
    hi, lo = max(seeds), min(seeds)
    assert f"the None model run at 4x in the twenty-seventh session ({mean} ± {sd}; seeds {hi} and {lo})" in paper
    # "seeds on both sides of SOP's" / "straddles": below SOP's lower seed and above its higher one
    assert lo < min(sop_seeds.values()) and hi > max(sop_seeds.values())
    assert lo > max(scratch.values())          # claim 5 "holds for all three"
    readme = _flat("README.md")
    assert f"an MLM-only model at 4x ({gain:+.1f}) has seeds on both sides of SOP's" in readme
    assert "(SOP and NSP only, two seeds)" not in readme   # the 4x grid has a None model since this session


# ------------------------------------------------------------------ examples the pages give
def test_the_recipe_warmup_shares_finetuning_md_gives():
    """finetuning.md: with `--epochs` a recipe's warmup is its table's share of the run: RTE 200 of 800 steps (25%),
    RACE 1000 of 12000; the 3-epoch RTE run of 201 steps is on the shared RTE's 2,127 pairs (234 on GLUE's 2,490)."""
    import math

    from albertlm.tasks import recipes

    text = _flat("docs/finetuning.md")
    assert "RTE 200 of 800 steps, 25%; RACE 1000 of 12000" in text
    for name, warmup, steps in (("rte", 200, 800), ("race", 1000, 12000)):
        cfg = recipes.recipe(name)
        assert (cfg.optim.warmup_steps, cfg.train.max_steps) == (warmup, steps), name
        shared = recipes.warmup_as_share(cfg)
        assert shared.optim.warmup_steps == -1 and shared.optim.warmup_ratio == pytest.approx(warmup / steps)
    assert "(201 steps on the 2,127 pairs of `../shared/data`'s RTE `train.tsv`, 234 on GLUE's 2,490;" in text
    assert 3 * math.ceil(2127 / 32) == 201 and 3 * math.ceil(2490 / 32) == 234


def test_params_keeps_the_paper_row_model_md_names(capsys):
    """model.md: `albertlm params --preset albert-base-v1 --hidden-dropout 0`: 12M in the paper column, and with
    --json `overrides` the fields given, a preset's own value too (the row marked `*`)."""
    import json

    from albertlm.cli.main import main

    text = _flat("docs/model.md")
    assert "(`albertlm params --preset albert-base-v1 --hidden-dropout 0`: 12M)" in text
    assert "`overrides` the fields given (the table marks such a row `*`, even where the value given is the " \
           "preset's own)" in text
    assert main(["params", "--preset", "albert-base-v1", "--hidden-dropout", "0"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:2] == ["albert-base-v1", "*"] and "12M" in row, row
    assert main(["params", "--preset", "albert-base", "--hidden-size", "768", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    shown = shown[0] if isinstance(shown, list) else shown
    assert shown["overrides"] == {"hidden_size": 768} and shown["paper"] == 12


def test_model_md_says_the_pad_row_is_drawn_like_any_other():
    """model.md: initialised as transformers does but for the padding token's embedding row, which transformers
    zeroes (its Embedding's padding_idx) and ours draws like any other."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertModel

    assert "but for the padding token's embedding row, which transformers zeroes" in _flat("docs/model.md")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2, ffn_size=20,
                      max_position_embeddings=16)
    word = next(m for m in AlbertModel(cfg).modules() if isinstance(m, torch.nn.Embedding))
    assert word.padding_idx is None and word.weight[cfg.pad_token_id].abs().sum() > 0


def test_the_test_files_the_pages_cite_exist():
    missing = []
    for doc in ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]:
        for name in set(re.findall(r"tests/(test_\w+\.py)", (ROOT / doc).read_text(encoding="utf-8"))):
            if not (ROOT / "tests" / name).is_file():
                missing.append(f"{doc}: tests/{name}")
    assert not missing, missing
