"""The user-facing docs against the code: what README.md and docs/{model,data,tokenization,finetuning,interop,
validation}.md show must be what the commands and modules do.

Every `albertlm <command> ... --flag` in them (code blocks and inline code) must name a command, a subcommand and
options its argparse parser accepts; benchmark options must exist in the script; the parameter tables and the
Table 3/4 numbers must be what the presets count; the recipe table must be `PAPER_TABLE`; the `data build` option
table's defaults must be the parser's; the modules and functions the docs name must exist. Parsing only, no
subprocesses and no training: seconds, CPU-only.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "docs/model.md", "docs/data.md", "docs/tokenization.md", "docs/finetuning.md",
        "docs/interop.md", "docs/validation.md"]


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------- commands and options
def _snippets(text: str) -> list[tuple[int, str]]:
    """(line, text) of every code-block line (backslash continuations joined) and every inline code span."""
    out, in_code, buf, start = [], False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            if buf:
                buf += " " + line.strip()
            else:
                buf, start = line, number
            if buf.rstrip().endswith("\\"):
                buf = buf.rstrip()[:-1]
                continue
            out.append((start, buf))
            buf = ""
        else:
            out += [(number, span) for span in re.findall(r"`([^`\n]+)`", line)]
    return out


def _albertlm_commands(text: str) -> list[tuple[int, list[str]]]:
    """The argument words of every `albertlm ...` / `python -m albertlm ...` / `torchrun ... -m albertlm ...`
    invocation: comments, pipes and `;` split off, `[...]` optional groups and `...` placeholders dropped."""
    found = []
    for number, snippet in _snippets(text):
        snippet = re.sub(r"\s#.*$", "", snippet)            # shell comment
        snippet = re.sub(r"^\s*\$\s*", "", snippet)          # a prompt
        for part in re.split(r"\s*(?:\||;|&&)\s*", snippet):
            match = re.search(r"(?:^|\s|/)(?:albertlm|-m albertlm)\s+(\S.*)$", part.strip())
            if not match or re.match(r"(from|import)\s", part.strip()):   # Python, not a command
                continue
            words = match.group(1).replace("[", " ").replace("]", " ").replace("...", " ")
            try:
                words = shlex.split(words)
            except ValueError:
                continue
            if words and not words[0].endswith(":") and not any(w.startswith(("-", "<")) for w in words[:1]) \
                    and not (len(words) > 1 and words[1].startswith("<")):     # `evaluate <family> ...`
                found.append((number, words))
    return found


def _parser(command: str, rest: list[str]) -> argparse.ArgumentParser:
    from albertlm.cli import main

    module = importlib.import_module(main._module_for(command, rest))
    parser = main.Parser(prog=f"albertlm {command}")
    module.add_arguments(parser, command)
    return parser


def _subparsers(parser) -> dict:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices if actions else {}


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _documented_commands():
    return [(doc, number, words) for doc in DOCS for number, words in _albertlm_commands(_text(doc))]


def test_the_docs_show_commands_at_all():
    """The extraction itself works: README alone shows dozens of commands, every doc file some."""
    commands = _documented_commands()
    assert len([c for c in commands if c[0] == "README.md"]) >= 30
    for doc in ("README.md", "docs/data.md", "docs/tokenization.md", "docs/finetuning.md", "docs/interop.md"):
        assert any(c[0] == doc for c in commands), doc


def test_every_documented_command_subcommand_and_option_exists():
    """`albertlm <cmd> [<sub>] --flag` as the docs write it: the command, the subcommand (tokenizer train,
    data build, finetune glue, export onnx, ...) and each option exist in that parser (no documented option
    that argparse would refuse; no renamed subcommand)."""
    from albertlm.cli.main import COMMANDS

    problems = []
    for doc, number, words in _documented_commands():
        command, rest = words[0], words[1:]
        if command not in COMMANDS:
            problems.append(f"{doc}:{number}: unknown command {command!r} in {' '.join(words)!r}")
            continue
        parser = _parser(command, rest)
        positionals = [w for w in rest if not w.startswith("-")]
        choices = _subparsers(parser)
        if choices:
            if not positionals or positionals[0] not in choices:
                if positionals and not positionals[0].startswith("<"):
                    problems.append(f"{doc}:{number}: {command} has no subcommand {positionals[:1]} "
                                    f"(choices: {', '.join(choices)})")
                continue
            parser = choices[positionals[0]]
        known = _options(parser)
        for word in rest:
            flag = word.split("=", 1)[0]
            if re.fullmatch(r"--[A-Za-z][\w.-]*", flag) or re.fullmatch(r"-[A-Za-z]", flag):
                if flag not in known:
                    problems.append(f"{doc}:{number}: albertlm {' '.join(words[:2])}: no option {flag}")
    assert not problems, "\n".join(problems)


def test_options_named_in_prose_exist_somewhere():
    """An `--option` the docs mention outside a command line (e.g. `--train.keep_last 2`, `--eval-every`) is an
    option of some albertlm command, a benchmark script, the demo or spm_train (tokenization.md quotes it)."""
    from albertlm.cli.main import COMMANDS, TASK_NAMES

    known: set[str] = set()

    def add(parser):
        known.update(_options(parser))
        for sub in _subparsers(parser).values():
            add(sub)

    for command in COMMANDS:
        add(_parser(command, []))
    for task in TASK_NAMES:
        add(_parser("evaluate", [task]))
    for script in (ROOT / "benchmarks").glob("*.py"):
        known.update(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", script.read_text()))
    known.update(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", (ROOT / "src/albertlm/demo.py").read_text()))
    known.add("--nproc-per-node")                                  # torchrun's own
    historical = {"--grad-accum"}                                   # finetuning.md: what --micro-batch-size replaced
    problems = []
    for doc in DOCS:
        for number, line in enumerate(_text(doc).splitlines(), 1):
            for flag in re.findall(r"(?<![\w-])(--[a-z][\w.-]*[\w])", line):
                if "_" in flag and "." not in flag:
                    continue                      # spm_train's --pad_id style (ours: dashes, or --section.field)
                if flag not in known and flag not in historical and flag != "--dist":   # `--dist.*`
                    problems.append(f"{doc}:{number}: {flag}")
    assert not problems, "options the docs name that nothing accepts:\n" + "\n".join(problems)


def test_benchmark_commands_use_options_the_scripts_have():
    """`benchmarks/X.py --flag` in the docs: the script exists and declares the flag."""
    problems = []
    for doc in DOCS:
        for number, snippet in _snippets(_text(doc)):
            for script, args in re.findall(r"(benchmarks/\w+\.py)((?:\s+--?[\w-]+(?:\s+[^\s`|;-][^\s`|;]*)?)*)",
                                           snippet):
                path = ROOT / script
                if not path.is_file():
                    problems.append(f"{doc}:{number}: no {script}")
                    continue
                declared = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", path.read_text()))
                for flag in re.findall(r"(--[\w-]+)", args):
                    if flag not in declared:
                        problems.append(f"{doc}:{number}: {script} has no {flag}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------- parameter counts
def _count(cfg) -> int:
    import torch

    from albertlm.model.albert import AlbertModel

    with torch.device("meta"):
        return sum(p.numel() for p in AlbertModel(cfg).parameters())


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


@pytest.mark.parametrize("doc", ["README.md", "docs/model.md"])
def test_parameter_tables_are_what_the_presets_count(doc):
    """The preset tables (`| name | L | H | E | ... | 11.7M | ...`) state each preset's shape and count."""
    from albertlm.config.presets import MODEL_PRESETS

    rows = 0
    for line in _text(doc).splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or cells[0] not in MODEL_PRESETS:
            continue
        cfg = MODEL_PRESETS[cells[0]]
        rows += 1
        assert [cells[1], cells[2], cells[3]] == [str(cfg.num_layers), str(cfg.hidden_size),
                                                 str(cfg.embedding_size)], line
        assert cfg.sharing in cells, line
        assert _millions(_count(cfg)) in cells, (line, _millions(_count(cfg)))
    assert rows >= 7


@pytest.mark.parametrize("doc", ["README.md", "docs/model.md"])
def test_table3_and_table4_numbers_are_what_the_presets_count(doc):
    from albertlm.config.presets import get_preset

    text = " ".join(_text(doc).split())
    match = re.search(r"not-shared ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)M.*?all-shared ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+)M",
                      text)
    assert match, "Table 3 sentence not found"
    for i, E in enumerate((64, 128, 256, 768)):
        assert float(match.group(1 + i)) == round(_count(get_preset("albert-base", embedding_size=E,
                                                                    sharing="none")) / 1e6, 1), E
        assert float(match.group(5 + i)) == round(_count(get_preset("albert-base", embedding_size=E,
                                                                    sharing="all")) / 1e6, 1), E
    match = re.search(r"Table 4 \(E = 768: all ([\d.]+)M?, attention ([\d.]+)M?, (?:FFN|ffn) ([\d.]+)M?, none ([\d.]+)M?;"
                      r" E = 128: ([\d.]+)[/,] ?([\d.]+)[/,] ?([\d.]+)[/,] ?([\d.]+)M", text)
    assert match, "Table 4 sentence not found"
    for j, E in enumerate((768, 128)):
        for i, sharing in enumerate(("all", "attention", "ffn", "none")):
            assert float(match.group(1 + 4 * j + i)) == round(
                _count(get_preset("albert-base", embedding_size=E, sharing=sharing)) / 1e6, 1), (E, sharing)


# --------------------------------------------------------------------------------------- defaults and recipes
def test_data_build_option_table_defaults_are_the_parsers():
    """docs/data.md's `| --option | default | meaning |` table: every option exists in `data build` and a
    literal default is the one `--help` prints."""
    parser = _subparsers(_parser("data", []))["build"]
    by_flag = {o: a for a in parser._actions for o in a.option_strings}
    checked = 0
    for line in _text("docs/data.md").splitlines():
        match = re.match(r"\| `(--[\w-]+)[^`]*` \| ([^|]*) \|", line)
        if not match:
            continue
        flag, default = match.group(1), match.group(2).strip().strip("`")
        assert flag in by_flag, line
        if default in ("", "required") or not re.fullmatch(r"[\w.]+", default):
            continue
        printed = re.search(r"\(default: ([^)]*)\)\s*$", by_flag[flag].help or "")
        assert printed, flag
        assert printed.group(1).lower() == default.lower(), (flag, default, printed.group(1))
        checked += 1
    assert checked >= 12


def test_recipe_table_is_paper_table():
    """docs/finetuning.md's recipe table row by row against `albertlm.tasks.recipes.PAPER_TABLE`."""
    from albertlm.tasks.recipes import PAPER_TABLE

    rows = {}
    for line in _text("docs/finetuning.md").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in PAPER_TABLE:
            rows[cells[0]] = (float(cells[1]), int(cells[2]), float(cells[3]), float(cells[4]), int(cells[5]),
                              int(cells[6]), int(cells[7]))
    assert rows == PAPER_TABLE


def test_finetuning_family_defaults_sentence():
    """'Without a recipe the defaults are lr 2e-5, batch 32, 3 epochs, 10% warmup, max length 128 (SQuAD: 3e-5,
    2 epochs, 384; RACE: 1e-5, 2 epochs, 512)'."""
    from albertlm.tasks.recipes import FAMILY_DEFAULTS

    text = " ".join(_text("docs/finetuning.md").split())
    match = re.search(r"Without a recipe the defaults are lr ([\de.-]+), batch (\d+), (\d+) epochs, (\d+)% warmup, "
                      r"max length (\d+) \(SQuAD: ([\de.-]+), (\d+) epochs, (\d+); RACE: ([\de.-]+), (\d+) epochs, "
                      r"(\d+)\)", text)
    assert match
    glue, squad, race = FAMILY_DEFAULTS["glue"], FAMILY_DEFAULTS["squad"], FAMILY_DEFAULTS["race"]
    assert float(match.group(1)) == glue.optim.lr and int(match.group(2)) == glue.train.batch_size
    assert float(match.group(3)) == glue.train.epochs and float(match.group(4)) / 100 == glue.optim.warmup_ratio
    assert int(match.group(5)) == glue.max_seq_length == FAMILY_DEFAULTS["classify"].max_seq_length
    assert (float(match.group(6)), float(match.group(7)), int(match.group(8))) == (
        squad.optim.lr, squad.train.epochs, squad.max_seq_length)
    assert (float(match.group(9)), float(match.group(10)), int(match.group(11))) == (
        race.optim.lr, race.train.epochs, race.max_seq_length)


# ------------------------------------------------------------------------------------- names the docs give
_PACKAGES = ["", "tasks.", "data.", "training.", "model.", "interop.", "cli.", "config.", "tokenization.",
             "experiments."]


def _resolve(name: str):
    """`albertlm.x.y`, `x.y` or `module.func` relative to one of albertlm's packages; None if nothing has it."""
    name = name[len("albertlm."):] if name.startswith("albertlm.") else name
    for prefix in _PACKAGES:
        parts = ("albertlm." + prefix + name).rstrip(".").split(".")
        for i in range(len(parts), 1, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            try:
                for attribute in parts[i:]:
                    obj = getattr(obj, attribute)
                return obj
            except AttributeError:
                break
    head, _, rest = name.partition(".")
    if head[:1].isupper():                 # `Class.method` named without its module: any albertlm module's class
        for module in _all_modules():
            obj = getattr(module, head, None)
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attribute in filter(None, rest.split(".")):
                    obj = getattr(obj, attribute, None)
                if obj is not None:
                    return obj
    return None


def _all_modules():
    import pkgutil

    import albertlm

    modules = []
    for info in pkgutil.walk_packages(albertlm.__path__, "albertlm."):
        if ".cli." in info.name or info.name.endswith((".demo", "__main__")):
            continue
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError:
            continue
    return modules


def test_albertlm_names_in_the_docs_exist():
    """Every `albertlm.a.b` the docs cite (a module, class or function) can be imported."""
    problems = []
    for doc in DOCS:
        for number, line in enumerate(_text(doc).splitlines(), 1):
            for name in re.findall(r"`(albertlm(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", line):
                if _resolve(name) is None:
                    problems.append(f"{doc}:{number}: {name}")
    assert not problems, "\n".join(problems)


def test_validation_md_where_column_names_exist():
    """docs/validation.md's 'where' column: each `module.function`, `Class.method` and bare name (read in the
    module named before it in the cell) exists, so the table cannot point at renamed or removed checks."""
    problems = []
    for number, line in enumerate(_text("docs/validation.md").splitlines(), 1):
        if not line.startswith("|") or line.count("|") < 4 or set(line) <= set("|- "):
            continue
        cell = line.rstrip().rstrip("|").split("|")[-1]
        module = None
        for span in re.findall(r"`([^`]+)`", cell):
            name = re.sub(r"\(.*\)$", "", span.strip()).split(" ")[0]
            if not re.fullmatch(r"[A-Za-z_][\w.]*", name) or name == "where":
                continue
            head = name.split(".")[0]
            if "." in name and not (module is not None and hasattr(module, head)):
                obj = _resolve(name)
                if obj is None:
                    problems.append(f"validation.md:{number}: {name}")
                    continue
                module = obj if inspect.ismodule(obj) else inspect.getmodule(obj)
            else:
                obj = module
                for attribute in name.split("."):
                    obj = getattr(obj, attribute, None) if obj is not None else None
                if obj is None:
                    problems.append(f"validation.md:{number}: {name} (in {getattr(module, '__name__', None)})")
    assert not problems, "\n".join(problems)


def test_readme_layout_lists_files_that_exist():
    """README's 'How the code is laid out' block: every file it names is there."""
    text = _text("README.md")
    block = text[text.index("src/albertlm/\n"):]
    block = block[:block.index("```")]
    problems = []
    for line in block.splitlines()[1:]:
        match = re.match(r"^  ([\w/]+(?:\.py)?(?: [\w]+\.py)*)\s{2,}", line)
        if match:
            names = match.group(1).split()
            folder = names[0].rsplit("/", 1)[0] if "/" in names[0].rstrip("/") else ""
            for i, name in enumerate(names):
                path = ROOT / "src/albertlm" / (name if i == 0 else f"{folder}/{name}")
                if not path.exists():
                    problems.append(str(path.relative_to(ROOT)))
        elif re.match(r"^[a-z]\w*/", line) or re.match(r"^tools/\S+", line):
            path = ROOT / line.split()[0]
            if not path.exists():
                problems.append(line.split()[0])
    assert not problems, problems


def test_tokenization_md_file_table_names_what_each_module_defines():
    """docs/tokenization.md's module table: `train_sentencepiece()`, `train_wordpiece()`, `load_tokenizer`,
    `build_pair()`, the options classes and the protocol's methods are where it says."""
    from albertlm.tokenization import base, load, sentencepiece, wordpiece

    assert callable(sentencepiece.train_sentencepiece) and callable(wordpiece.train_wordpiece)
    assert sentencepiece.SentencePieceOptions and wordpiece.WordPieceOptions and callable(base.build_pair)
    assert callable(load.load_tokenizer)
    row = next(line for line in _text("docs/tokenization.md").splitlines() if line.startswith("| `base.py`"))
    for method in re.findall(r"`([a-z]\w*)`", row.split("|")[2].split(";")[0]):
        assert hasattr(base.Tokenizer, method), method
