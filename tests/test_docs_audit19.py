"""Docs audit 19: docs/{data,finetuning,interop,tokenization,training,validation}.md against the code, as a new user
reads them. Every `albertlm` command of their code blocks is parsed whole by its command's parser (values,
choices and positionals, not only the option names `test_docs_audit14` checks; training.md too, which that file
leaves out); the names the Python snippets import exist and their calls' keywords are in the signatures; the
record layout data.md gives is `record_dtype`'s; validation.md's "Known gaps" claim no gap the code has closed.
Parsing and imports only: seconds, CPU-only."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest

from test_docs_audit14 import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["docs/data.md", "docs/finetuning.md", "docs/interop.md", "docs/tokenization.md", "docs/training.md",
        "docs/validation.md"]


def _text(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def _blocks(text: str) -> list[tuple[int, str, str]]:
    """(first line, language, body) of every fenced code block."""
    found, language, body, start = [], None, [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if language is None:
                language, body, start = line.strip()[3:] or "text", [], number + 1
            else:
                found.append((start, language, "\n".join(body)))
                language = None
        elif language is not None:
            body.append(line)
    return found


# ------------------------------------------------------------------------------------------------ commands
def _commands(doc: str) -> list[tuple[str, list[str]]]:
    """Every `albertlm <command> ...` (also after `$ `, in a pipeline, or `torchrun ... -m albertlm`) of the doc's
    shell blocks, as (line, words after `albertlm`): continuations joined, comments dropped, a synopsis's optional
    `[...]` groups left out and `...` placeholders read as a value."""
    found = []
    for _, language, body in _blocks(_text(doc)):
        if language.startswith("python"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if not re.search(r"(?:^\s*(?:\$\s+)?|[|;&]\s*|-m\s+)albertlm [a-z]+\b(?!:)", line):
                continue                   # output ("albertlm data: warning: ..."), a file layout's "albertlm evaluate"
            line = re.sub(r"\s\[--[^\]]*\]", "", line)           # synopsis: [--from auto|tf|hf|albertlm]
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in words + [";"]:
                if word in (";", "|", "&&"):
                    if "albertlm" in command:
                        rest = command[command.index("albertlm") + 1:]
                        found.append((line.strip(), [w if w != "..." else "x" for w in rest]))
                    command = []
                else:
                    command.append(word)
    return found


def test_the_docs_code_blocks_hold_commands():
    """The extraction works: every doc with commands gives them, training.md's torchrun lines included."""
    counts = {doc: len(_commands(doc)) for doc in DOCS}
    assert counts["docs/data.md"] >= 5 and counts["docs/finetuning.md"] >= 10 and counts["docs/interop.md"] >= 10
    assert counts["docs/tokenization.md"] >= 5 and counts["docs/training.md"] >= 9
    assert sum(words[0] == "pretrain" for _, words in _commands("docs/training.md")) >= 7


@pytest.mark.parametrize("doc", [d for d in DOCS if d != "docs/validation.md"])
def test_every_command_in_the_docs_code_blocks_parses(doc):
    """What a user copies from these pages is accepted by the command's own parser as a whole: an option renamed,
    a choice dropped (`--compile`, `--precision`, `--pooling`, `--quantize`), a positional added or a value of
    the wrong type fails here, not in the user's shell. Nothing runs."""
    from albertlm.cli.main import COMMANDS

    refused = []
    for line, (name, *rest) in _commands(doc):
        assert name in COMMANDS, line
        try:
            _parser(name, rest).parse_args(rest)
        except SystemExit:
            refused.append(line)
    assert not refused, refused


# ------------------------------------------------------------------------------------------ Python snippets
def _python_snippets() -> list[tuple[str, int, ast.Module]]:
    return [(doc, start, ast.parse(body)) for doc in DOCS for start, language, body in _blocks(_text(doc))
            if language.startswith("python")]


def _albertlm_names(tree: ast.Module) -> dict[str, object]:
    """What the snippet's `from albertlm... import a` / `import albertlm...` bind (an ImportError or a missing
    name fails the test)."""
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("albertlm"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    importlib.import_module(f"{node.module}.{alias.name}")    # a submodule
                names[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("albertlm"):
                    names[alias.asname or alias.name.split(".")[0]] = importlib.import_module(
                        alias.asname and alias.name or alias.name.split(".")[0])
    return names


def _callee(node: ast.expr, names: dict[str, object]):
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _callee(node.value, names)
        if owner is not None:
            if not hasattr(owner, node.attr):
                raise AssertionError(f"{getattr(owner, '__name__', owner)} has no {node.attr}")
            return getattr(owner, node.attr)
    return None


def test_python_snippets_import_and_call_what_exists():
    """docs/{data,finetuning,tokenization}.md's snippets: each `from albertlm... import` works, and each call of
    an albertlm function or class they show (`PretrainingDataset(path, dynamic_masking=, seed=)`,
    `specs.glue_spec(task, tok, cfg, data_dir=)`, `finetune.run_finetune(...)`, ...) fits its signature."""
    snippets = _python_snippets()
    assert {doc for doc, _, _ in snippets} >= {"docs/data.md", "docs/finetuning.md", "docs/tokenization.md"}
    checked, problems = 0, []
    for doc, line, tree in snippets:
        names = _albertlm_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            target = _callee(node.func, names)
            if target is None or not callable(target):
                continue
            signature = inspect.signature(target)
            try:
                signature.bind_partial(*[None] * len(node.args), **{k.arg: None for k in node.keywords if k.arg})
            except TypeError as exc:
                problems.append(f"{doc}:{line}: {ast.unparse(node)}: {exc} {signature}")
            checked += 1
    assert checked >= 8
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------------- data layout
def test_data_md_record_fields_and_size_are_record_dtypes():
    """'One record (`albertlm.data.shards.record_dtype`): `input_ids` ..., `length`, `type_boundary`,
    `num_masked`, `masked_positions`, `masked_inputs`, `label`. ... At T=128, P=20 a record is 344 bytes.'"""
    from albertlm.data.shards import record_dtype

    text = " ".join(_text("docs/data.md").split())
    paragraph = text[text.index("One record (`albertlm.data.shards.record_dtype`)"):]
    paragraph = paragraph[:paragraph.index("The masked input is")]
    documented = re.findall(r"`([a-z_]+)`", paragraph)
    dtype = record_dtype(128, 20, 30000)
    assert documented == list(dtype.names)
    size = re.search(r"At T=128, P=20 a record is (\d+) bytes", text)
    assert size and int(size.group(1)) == dtype.itemsize


# ------------------------------------------------------------------------------------------ validation.md
def _known_gaps() -> str:
    text = _text("docs/validation.md")
    return " ".join(text[text.index("## Known gaps"):].split())


def test_validation_md_lists_no_closed_gap_for_model_config_types():
    """validation.md's "Known gaps" said `ModelConfig(initializer_range="x")` built in code raises TypeError; it has
    been a one-line ConfigError (a UserError) since configs built in Python are type-checked. The closed gap is now
    a row of the checks table."""
    from albertlm.config import ModelConfig
    from albertlm.errors import UserError

    with pytest.raises(UserError, match="initializer_range"):
        ModelConfig(initializer_range="x")
    with pytest.raises(UserError, match="num_layers"):
        ModelConfig(num_layers="2")
    assert "initializer_range" not in _known_gaps() and "raises TypeError" not in _known_gaps()
    assert "a `ModelConfig` built in code" in _text("docs/validation.md")


def test_validation_md_finetune_gap_says_what_runs_before_the_settings_check():
    """The remaining gap said finetune "tokenizes" before a bad SquadSettings / RACE length is reported; it loads
    the model and tokenizer (RACE: reads the training passages), and `race.check_lengths` runs before any
    `encode_batch` (as `SquadSettings` is made before the SQuAD file is read)."""
    from albertlm.tasks import race

    gaps = _known_gaps()
    assert "tokenizes before" not in gaps
    assert "before any text is tokenized" in gaps
    source = inspect.getsource(race.build_features)
    assert source.index("check_lengths(") < source.index("encode_batch(")
