"""Docs audit 22: README.md and docs/*.md against what this session's changes made the code do, as a new user
reads them. README's command list shows every `albertlm` command (`info`, `tokenizer info` and `predict` were
missing); every `--flag` of an `albertlm` command line in docs/paper.md and docs/training.md is an option of that
command's parser (test_docs_audit14 checks the other pages' flags, not these two); the messages and orders the
docs quote for a GLUE prediction given twice, `data build --workers` above the usable cores and GLUE's metric order
are the code's. Parsing, one small file read and one function call: seconds, CPU-only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import test_docs_audit14 as audit14

ROOT = Path(__file__).resolve().parents[1]


def _text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------- README's command list
def _pipeline_block(readme: str) -> str:
    """The code block under README's "The pipeline from the command line"."""
    match = re.search(r"## The pipeline from the command line.*?```bash\n(.*?)```", readme, re.S)
    assert match, "README.md has no pipeline block"
    return match.group(1)


def _commands_missing(block: str) -> list[str]:
    """The `albertlm` commands (and subcommands) the block never shows: every command, every subcommand of a
    command whose subcommands are tools (tokenizer, data, export), and at least one task family of finetune,
    predict and evaluate."""
    from albertlm.cli.main import COMMANDS, TASK_NAMES

    shown = {(m.group(1), m.group(2)) for m in re.finditer(r"(?:^|\s)albertlm ([a-z-]+)(?: ([a-z-]+))?", block,
                                                               re.M)}
    missing = []
    for command in COMMANDS:
        subcommands = set(audit14._subparsers(audit14._parser(command, [])))
        if not any(name == command for name, _ in shown):
            missing.append(command)
        elif subcommands and subcommands <= set(TASK_NAMES):
            if not any(name == command and sub in TASK_NAMES for name, sub in shown):
                missing.append(f"{command} <task>")
        else:
            missing += [f"{command} {sub}" for sub in sorted(subcommands) if (command, sub) not in shown]
    return missing


def test_readme_command_list_shows_every_command():
    """README's pipeline is where a new user learns the CLI: `albertlm info`, `albertlm tokenizer info` and
    `albertlm predict` were in `albertlm --help` but not there."""
    block = _pipeline_block(_text("README.md"))
    assert _commands_missing(block) == []
    without_predict = "\n".join(line for line in block.splitlines() if "albertlm predict" not in line)
    assert _commands_missing(without_predict) == ["predict"]          # the check sees a command left out


# --------------------------------------------------------------------------- options in paper.md / training.md
def _unknown_options(monkeypatch, docs: list[str], text=None) -> list[str]:
    """test_docs_audit14's option check run over `docs` (their text replaced by `text` when given)."""
    monkeypatch.setattr(audit14, "DOCS", docs)
    if text is not None:
        monkeypatch.setattr(audit14, "_text", lambda name: text)
    try:
        audit14.test_every_documented_command_subcommand_and_option_exists()
    except AssertionError as error:
        return str(error).splitlines()[:-1] or [str(error)]
    return []


def test_paper_and_training_md_command_options_exist(monkeypatch):
    """`albertlm ablate ... --tokenizer PATH` (paper.md) and `albertlm pretrain ... --init-from` (training.md):
    each flag of their command lines is one the command's parser has; a planted wrong flag is found."""
    assert len([c for c in audit14._albertlm_commands(_text("docs/paper.md")) if c[1][0] == "ablate"]) >= 5
    assert _unknown_options(monkeypatch, ["docs/paper.md", "docs/training.md"]) == []
    planted = "```bash\nalbertlm ablate --corpus c --out o --tokenizr my.model\n```\n"
    found = _unknown_options(monkeypatch, ["docs/paper.md"], planted)
    assert any("--tokenizr" in line for line in found), found


# ------------------------------------------------------------------------------ what the docs quote of the code
def test_finetuning_md_quotes_the_duplicate_glue_prediction_error(tmp_path):
    """finetuning.md: `evaluate glue --predictions` refuses an index given twice, with the message it quotes."""
    from albertlm.tasks import glue
    from albertlm.tasks.tables import DataError

    quoted = re.search(r"`FILE(:\d+: a second prediction for index [^`]+)`", _text("docs/finetuning.md"))
    assert quoted, "finetuning.md does not say that a GLUE prediction given twice is refused"
    path = tmp_path / "p.tsv"
    path.write_text("index\tprediction\n0\tentailment\n1\tentailment\n0\tnot_entailment\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        glue.read_predictions(glue.get_task("rte"), path)
    assert str(error.value) == f"{path}{quoted.group(1)}"


def test_data_md_quotes_the_workers_warning(monkeypatch, capsys):
    """data.md's bad-input table: `--workers` above the usable cores is cut, with the warning it quotes."""
    from albertlm.data import build
    from albertlm.errors import program_named

    quoted = re.search(r"`(albertlm data: warning: --workers (\d+) is more than the (\d+) CPU core[^`]+)`",
                       _text("docs/data.md"))
    assert quoted, "data.md's table does not show the --workers warning"
    monkeypatch.setattr(build, "available_cores", lambda: int(quoted.group(3)))
    with program_named("albertlm data"):      # as `albertlm data build` runs it
        assert build.usable_workers(int(quoted.group(2))) == int(quoted.group(3))
    assert capsys.readouterr().err.strip() == quoted.group(1)


def test_finetuning_md_glue_metric_order_is_the_codes():
    """finetuning.md names the order GLUE metrics are listed in (the task's own first); glue_metrics keeps it."""
    from albertlm.tasks.metrics import glue_metrics

    text = re.sub(r"\s+", " ", _text("docs/finetuning.md"))
    quoted = re.search(r"CoLA: `([^`]+)`; MRPC and QQP: `([^`]+)`; STS-B: `([^`]+)`", text)
    assert quoted, "finetuning.md does not give the GLUE metrics' order"
    labels, preds = [0, 1, 1, 0, 1], [0, 1, 0, 0, 1]
    for tasks, names in zip((["cola"], ["mrpc", "qqp"], ["stsb"]), quoted.groups()):
        for task in tasks:
            assert list(glue_metrics(task, labels, preds)) == names.split(", "), task
