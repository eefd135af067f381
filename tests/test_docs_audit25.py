"""Docs audit 25: README.md and docs/*.md against what the twenty-fifth session made the code do, as a new user
reads them. Every quoted `albertlm <command>: warning|error|note:` line names a real command in the one form the
CLI prints (no `albertlm: warning:`, no subcommand in it); no page still says fine-tuning's dev evaluation runs on
rank 0 alone (it is shared across the ranks under torchrun); the warning finetuning.md quotes for a `--model`
holding google's SQuAD v2.0 head trained with `--squad-head bert` is the code's, and without `--squad-head` such a
model keeps its head, as the page says; README's notes name google's v2.0 head instead of saying it is missing.
Text reads and one function call: well under a second, CPU-only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]


def _flat(doc: str) -> str:
    """The page's text with every run of whitespace one space (quotes wrap across lines)."""
    return re.sub(r"\s+", " ", (ROOT / doc).read_text(encoding="utf-8"))


@pytest.mark.parametrize("doc", PAGES)
def test_quoted_message_lines_name_a_real_command_in_the_one_form(doc):
    from albertlm.cli.main import COMMANDS

    text = _flat(doc)
    assert not re.search(r"albertlm: (warning|error|note):", text), "the old program-only form"
    assert not re.search(r"albertlm [a-z-]+ [a-z-]+: (warning|error|note):", text), "a subcommand in the prefix"
    named = set(re.findall(r"albertlm ([a-z-]+): (?:warning|error|note):", text))
    assert named <= set(COMMANDS), sorted(named - set(COMMANDS))


@pytest.mark.parametrize("doc", PAGES)
def test_no_page_says_finetunings_dev_evaluation_runs_on_rank_0_alone(doc):
    text = _flat(doc)
    assert not re.search(r"dev evaluations? (?:\([^)]*\) )?(?:run )?on rank 0", text)
    assert not re.search(r"dev evaluations?[^.]{0,80}rank 0 alone", text)


def test_finetuning_md_quotes_the_squad_head_warning_and_the_kept_head(monkeypatch, capsys):
    from albertlm.cli import task_commands
    from albertlm.cli.main import Parser
    from albertlm.config.task import FinetuneConfig
    from albertlm.errors import program_named

    monkeypatch.setattr(task_commands, "_squad_head", lambda model: "xlnet")   # a --model holding google's head
    parser = Parser(prog="albertlm finetune")
    task_commands.add_arguments(parser, "finetune")
    common = ["squad", "--train", "t.json", "--model", "M", "--out", "o"]
    with program_named("albertlm finetune"):
        kept = task_commands._squad_head_of_model(parser.parse_args(common), FinetuneConfig(), Path("M"))
        assert kept.squad_head == "xlnet" and capsys.readouterr().err == ""
        told = parser.parse_args([*common, "--squad-head", "bert"])
        assert task_commands._squad_head_of_model(told, FinetuneConfig(), Path("M")).squad_head == "bert"
    line = capsys.readouterr().err.strip()
    quoted = re.search(r"\(`(albertlm finetune: warning: M holds .*?) \.\.\.`", _flat("docs/finetuning.md"))
    assert quoted and line.startswith(quoted.group(1)), (quoted and quoted.group(1), line)


def test_readme_notes_name_googles_squad_v2_head():
    text = _flat("README.md")
    assert "not google's separate answer-verifier head" not in text
    assert "--squad-head xlnet" in text and "--recipe squad2.0" in text
