"""Typed config dataclasses -> command-line options: the one mechanism every command uses.

A command hands `add_options(parser, Options(...))` its config class; every leaf field becomes an option:

- a top-level field is `--field-name` (`--max-seq-length 128`); a field of a nested section is
  `--section.field` (`--optim.lr=1e-3`, `--model.hidden_size 64`); `Options.plain` gives a nested field
  a short name too (`--lr` is `--optim.lr`) and `Options.aliases` a second spelling (`--data` = `--dev`);
- the help text is the field's comment in the source (the line's trailing `# ...` and any comment lines
  right above it), then the default; a `Literal[...]` field shows its choices; a bool field reads
  `--flag`, `--flag=false` (and `--no-flag` where the command declares one); a text field shows what it takes
  by its name (`METAVARS`: `--out DIR`, `--tokenizer PATH`, `--task {cola,...}`), and with `Options.required` a
  field without a default is a required option (`--out DIR`, not `[--out DIR]`, in the usage line);
- values are read here (text -> the field's type; one that is not is named by the flag typed and its other
  spellings: `--max-steps/--train.max_steps: cannot read '1.5' as int (a whole number)`) and validated once,
  by the config class itself (`__post_init__`): the CLI holds no ranges or choices of its own. A value those
  checks refuse is said with where it was given (`build`): the flag typed and its other spellings before the
  check's message (`--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0`), or the --config file's
  name (`bad.json: optim.lr=-1.0: must be positive`). The one
  exception is a `Literal` field's choices (the type lists them): a flag's value outside them is refused as it
  is read, named by the flag typed, with the nearest choice (`--precision: train.precision='bf61': must be one
  of ... (did you mean bf16?)`).

Precedence, lowest first: the command's base config (dataclass defaults, a preset, a recipe, a resumed
run's saved config) < `--config FILE` (JSON, nested like the saved run_config.json; repeatable, a later file
winning) < the command line.
There are no silent wins: two spellings of one key on the command line (`--lr 1e-3 --optim.lr=2e-3`, or
`--dev a --data b`) with different values are an error, as is an unknown key in the file or an unknown
option; repeating the same option keeps its last value, as argparse always has, except that a list option
takes the items of every occurrence (`--input a --input b` is both files), and a list of numbers its items
written with commas too (`--seeds 1,2`: a text item keeps its commas); in the file, a key given
twice (repeated in one object, or both dotted and nested) is an error. The file's values are read as their
fields' types when it is read (an error names the file). Setting a field that another one defers to resets
that one unless it is given too, layer by layer (`--epochs 2` over a recipe's or the file's `max_steps`: see
`IMPLIES` on the config classes, and `given_values`).

To move a plain-argparse command onto this: gather its options in a dataclass with a comment per field,
call `add_options(parser, Options(ThatClass))` in `add_arguments`, and `read_options(args, options)` in
`run` to get the instance (see docs/training.md, "Command-line options").
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import inspect
import io
import json
import re
import tokenize
import typing
from pathlib import Path
from typing import Any, Callable, Iterator

from albertlm.errors import UserError

DEST = "config:"      # argparse dest prefix of the generated options


# ------------------------------------------------------------------------------------------- fields
def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def is_section(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def leaf_keys(cls: type, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> type of every leaf field under `cls` (nested sections flattened)."""
    out: dict[str, Any] = {}
    for name, kind in field_types(cls).items():
        if is_section(kind):
            out.update(leaf_keys(kind, f"{prefix}{name}."))
        else:
            out[prefix + name] = kind
    return out


@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: comment lines right above it + its trailing comment."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        trailing = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
                    if tok.type == tokenize.COMMENT}
        own = {f.name for f in dataclasses.fields(klass)} & set(vars(klass).get("__annotations__", {}))
        for number, line in enumerate(lines, start=1):
            match = re.match(r"\s+(\w+)\s*:", line)
            if not match or match.group(1) not in own or match.group(1) in docs:
                continue
            above, k = [], number - 1
            while k >= 1 and lines[k - 1].strip().startswith("#"):
                above.insert(0, lines[k - 1].strip().lstrip("#").strip())
                k -= 1
            after = trailing.get(number, "").lstrip("#").strip() if not line.strip().startswith("#") else ""
            docs[match.group(1)] = " ".join(part for part in (*above, after) if part)
    return docs


def field_doc(cls: type, key: str) -> str:
    """The comment of a dotted key's field."""
    *sections, name = key.split(".")
    for section in sections:
        cls = field_types(cls)[section]
    return field_docs(cls).get(name, "")


def _choices(kind: Any) -> tuple | None:
    kind = _strip_optional(kind)
    return typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None


def _strip_optional(kind: Any) -> Any:
    args = typing.get_args(kind)
    if type(None) in args and len(args) == 2:
        return next(a for a in args if a is not type(None))
    return kind


def _is_optional(kind: Any) -> bool:
    return type(None) in typing.get_args(kind)


def _is_list(kind: Any) -> bool:
    return typing.get_origin(_strip_optional(kind)) in (list, tuple)


def check_choices(obj: Any, prefix: str = "") -> None:
    """Every `Literal` field of a config holds one of its choices (called by the configs' validation)."""
    from albertlm.config.model import ConfigError

    for name, kind in field_types(type(obj)).items():
        choices = _choices(kind)
        value = getattr(obj, name)
        if choices and not (value is None and _is_optional(kind)) and value not in choices:
            raise ConfigError(f"{prefix}{name}={value!r}: must be one of {_listed(choices)}"
                              f"{_did_you_mean(value, choices)}")


def _listed(choices: tuple) -> str:
    """The choices as the error lists them ("" is a field's "not given", as the option's help shows it)."""
    return ", ".join(str(c) for c in choices if c != "")


def nearest_choice(value: Any, choices: Any) -> str | None:
    """The choice a mistyped value most likely meant: the same letters in other case, the one choice it begins
    (`2` -> `2.0`), else difflib's nearest (`bf61` -> `bf16`, `spo` -> `sop`); None when none is near."""
    text = str(value).strip()
    names = [str(c) for c in choices if str(c) != ""]
    same = [c for c in names if c.lower() == text.lower()]
    begun = [c for c in names if text and c.lower().startswith(text.lower())]
    if same or len(begun) == 1:
        return (same or begun)[0]
    close = difflib.get_close_matches(text.lower(), [c.lower() for c in names], n=1)
    return next((c for c in names if c.lower() == close[0]), None) if close else None


def _did_you_mean(value: Any, choices: Any) -> str:
    near = nearest_choice(value, choices)
    return f" (did you mean {near}?)" if near is not None else ""


def _check_flag_choice(flag: str, key: str, kind: Any, value: Any) -> None:
    """A `Literal` option given a value outside its choices, refused as the flag is read and named as the user
    typed it, with the nearest choice: `--precision bf61` said `train.precision='bf61': must be one of ...` (the
    field, no hint), and data build's `--sentence-task spo` `sentence_task must be one of ('sop', 'nsp', 'none')`.
    The field follows a flag that is not its dotted key (a --config file spells it so). A field whose choices hold ""
    (not given: the command decides, as `finetune squad --version` by the data) is left to the command's own check,
    which knows more (`--version v1.1`: give --version 1.1)."""
    from albertlm.config.model import ConfigError

    choices = _choices(kind)
    if not choices or "" in choices or value in choices or (value is None and _is_optional(kind)):
        return
    named = f"{flag}={value!r}" if flag == f"--{key}" else f"{flag}: {key}={value!r}"
    raise ConfigError(f"{named}: must be one of {_listed(choices)}{_did_you_mean(value, choices)}")


TRUE_WORDS = ("1", "true", "yes", "on")       # how a bool is spelt on the command line or in a file
FALSE_WORDS = ("0", "false", "no", "off")
_KIND_NAMES = {int: "a whole number (int)", float: "a number", bool: "true or false (bool)", str: "text (str)"}


def check_types(obj: Any, prefix: str = "") -> None:
    """Every field of a config holds its declared type, as the command line and `--config` files already ensure
    (`coerce`): for a config built in Python (`TrainConfig(max_steps=2e0)` recorded `2.0` in run_config.json,
    which a resume then refused; `TrainConfig(max_steps="5")` was a TypeError traceback). A bool is not an int,
    an int is a float, None only where the field is optional; a section must be its class."""
    import numbers

    from albertlm.config.model import ConfigError

    for name, kind in field_types(type(obj)).items():
        value = getattr(obj, name)
        if value is None and _is_optional(kind):
            continue
        base = _strip_optional(kind)
        if is_section(base):
            ok, want = isinstance(value, base), f"a {base.__name__}"
        elif _is_list(base):
            ok, want = isinstance(value, (list, tuple)), "a list"
        elif base is int:
            ok, want = isinstance(value, numbers.Integral) and not isinstance(value, bool), _KIND_NAMES[int]
        elif base is float:
            ok, want = isinstance(value, numbers.Real) and not isinstance(value, bool), _KIND_NAMES[float]
        elif base in (bool, str):
            ok, want = isinstance(value, base), _KIND_NAMES[base]
        else:                             # Literal (check_choices), Any
            continue
        if not ok:
            raise ConfigError(f"{prefix}{name}={value!r}: must be {want}, not {type(value).__name__}")


# ------------------------------------------------------------------------------------------- values
# what a value of each type is written as (`--max-steps 1.5`: an int is a whole number)
_READ_AS = {int: " (a whole number)", float: " (a number)",
            bool: f" ({', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)})"}


def coerce(value: Any, kind: Any, key: str) -> Any:
    """A command-line string (or a JSON value) as the field's declared type."""
    if _is_optional(kind):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        kind = _strip_optional(kind)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (list, tuple):
        if not isinstance(value, (str, list, tuple)):
            raise UserError(f"{key}: expected a list, got {value!r}")
        inner = args[0] if args else str
        items = value.split(",") if isinstance(value, str) else list(value)
        if inner is not str:    # `--seeds 1,2` (a word of the command line): was "cannot read '1,2' as int"; a
            # text item stays whole (a file name may hold a comma)
            items = [part for item in items for part in (item.split(",") if isinstance(item, str) else [item])]
        return origin(coerce(item, inner, key) for item in items if item != "")
    if not isinstance(value, str):
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if kind in (int, float, bool, str) and not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise UserError(f"{key}: expected {kind.__name__}, got {value!r}")
        return value
    try:
        if kind is bool:
            low = value.lower()
            if low in TRUE_WORDS:
                return True
            if low in FALSE_WORDS:
                return False
            raise ValueError(value)
        if kind is int:
            return int(value)
        if kind is float:
            return float(value)
    except ValueError:
        raise UserError(f"{key}: cannot read {value!r} as {kind.__name__}{_READ_AS.get(kind, '')}") from None
    return value


def build(base: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """A new config: `base` (an instance, or a class whose defaults are used) with dotted `values` set;
    the config's own `__post_init__` validates the result. Where `values` came from `given_values` (or
    `command_line_values`), a value the checks refuse is said with where it was given: the flag as typed and its
    other spellings (`--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0`; it said the field alone,
    not the flag typed), or the --config file that set it (`bad.json: optim.lr=-1.0: must be positive`)."""
    with sources_named(values):
        return _build(base, values, prefix)


class Flags(str):
    """Where a key was given on the command line: the flag as typed, then the key's other spellings
    (`--max-steps/--train.max_steps`), as an error names it (a --config file's source is its path)."""


@contextlib.contextmanager
def sources_named(values: dict[str, Any]) -> Iterator[None]:
    """A UserError raised inside is said with where the value it names was given (`GivenValues.sources`: the flags
    typed, or the --config file): for checks that take `values` other than through `build` (`params`' presets)."""
    try:
        yield
    except UserError as exc:
        source = _source_of(str(exc), getattr(values, "sources", {}))
        if source is None:
            raise
        raise type(exc)(f"{source}: {exc}") from None


def _named_keys(message: str) -> list[str]:
    """The fields a check's message names, in order: `key=value` (the configs' `require`; a section's own checks
    name its fields without the section, `hidden_size=64: must be divisible by num_heads=5`), a leading
    `field must ...` (data build's `max_seq_length must be in [8, 65535], got 3`) or a leading `--flag ...`."""
    named = []
    lead = re.match(r"(--)?([A-Za-z_][\w.-]*)(?= must\b|:|=)", message)
    if lead:
        named.append(lead.group(2).replace("-", "_") if lead.group(1) else lead.group(2))
    return named + re.findall(r"([A-Za-z_][\w.]*)=", message)


def _source_of(message: str, sources: dict[str, str]) -> str | None:
    """Where the first key a message names was given (its flags, or its --config file), unless the message says so
    already; None where it names no given key."""
    if not sources:
        return None
    for named in _named_keys(message):
        keys = [key for key in sources if key == named] or [key for key in sources if key.endswith("." + named)]
        if not keys:
            continue
        source = sources[keys[0]]
        said = source.split("/") if isinstance(source, Flags) else [source]
        if message.startswith(tuple(said)):      # `--dupe-factor must be >= 1` names its flag already
            return None
        return source
    return None


def _build(base: Any, values: dict[str, Any], prefix: str = "") -> Any:
    cls = base if isinstance(base, type) else type(base)
    kwargs: dict[str, Any] = {}
    missing = []
    for f in dataclasses.fields(cls):
        kind = field_types(cls)[f.name]
        sub = {k[len(f.name) + 1:]: v for k, v in values.items() if k.startswith(f.name + ".")}
        if is_section(kind):
            current = getattr(base, f.name) if not isinstance(base, type) else _default(f)
            kwargs[f.name] = _build(current, sub, f"{prefix}{f.name}.") if sub else current
        elif f.name in values:
            kwargs[f.name] = coerce(values[f.name], kind, prefix + f.name)
        elif not isinstance(base, type):
            kwargs[f.name] = getattr(base, f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            missing.append(prefix + f.name)
    if missing:
        raise UserError("the following arguments are required: " + ", ".join(option_name(k) for k in missing))
    return cls(**kwargs)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def check_keys(cls: type, values: dict[str, Any], where: str = "") -> None:
    """Every dotted key is a leaf field of `cls`. An unknown one is an error naming the field of that name in
    another section (`lr`, `train.lr` -> `optim.lr`), else the nearest key; a section given a value rather than
    an object of its fields (`"optim": 0.01`) is said to be one."""
    known = leaf_keys(cls)
    lead = f"{where}: " if where else ""
    for key in values:
        if key in known:
            continue
        if any(k.startswith(key + ".") for k in known):
            raise UserError(f"{lead}{key!r} is a section: give it an object of its fields "
                            f"({{\"{key}\": {{...}}}}), not {values[key]!r}")
        close = ([k for k in known if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]][:1]
                 or difflib.get_close_matches(key, known, n=1))
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"{lead}unknown config key {key!r}{hint}")


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 1}} -> {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def read_config_file(cls: type, path: str | Path) -> dict[str, Any]:
    """A JSON config file (nested like run_config.json) as dotted values, each read as its field's type here (an
    error names the file): an unknown key, a key given twice (`"optim.lr"` and `"optim": {"lr": ...}`) and a
    value of the wrong type are errors."""
    path = Path(path)
    if path.is_dir():
        saved = path / "run_config.json"
        hint = f" (did you mean {saved}?)" if saved.is_file() else ""
        raise UserError(f"config file {path} is a directory; give a JSON file{hint}")
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=_no_repeats)  # a BOM is fine
    except json.JSONDecodeError as exc:
        other = OTHER_FORMATS.get(path.suffix.lower())
        if other:     # `--config run.yaml` said only "not valid JSON (Expecting value: line 1 column 1)"
            raise UserError(f"{path}: a --config file is JSON, not {other}, nested like the run_config.json a run "
                            f"saves: {{\"train\": {{\"max_steps\": 1000}}, \"optim\": {{\"lr\": 0.001}}}} "
                            f"({exc})") from None
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    except _Repeated as exc:
        raise UserError(f"{path}: {exc.args[0]!r} is given twice in one object; give it once") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    values = flatten(data)
    twice = _spelled_twice(data)
    if twice:
        raise UserError(f"{path}: {twice!r} is given twice (once as a dotted key, once nested); give it once")
    check_keys(cls, values, str(path))
    kinds = leaf_keys(cls)
    try:
        return {key: coerce(value, kinds[key], key) for key, value in values.items()}
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None


# config formats other tools use, by file suffix: named when such a file is given as --config (which reads JSON)
OTHER_FORMATS = {".yaml": "YAML", ".yml": "YAML", ".toml": "TOML", ".ini": "INI", ".cfg": "INI", ".py": "Python"}


class _Repeated(Exception):
    """A key repeated inside one JSON object (json keeps the last silently)."""


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


def _spelled_twice(data: dict[str, Any], prefix: str = "") -> str | None:
    """A dotted key that two spellings in one JSON object reach (`flatten` would keep only the last)."""
    seen: set[str] = set()
    for key, value in data.items():
        if isinstance(value, dict):
            inner = _spelled_twice(value, f"{prefix}{key}.")
            if inner:
                return inner
            keys = flatten(value, f"{prefix}{key}.")
        else:
            keys = {prefix + key: value}
        for full in keys:
            if full in seen:
                return full
            seen.add(full)
    return None


def implied(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` plus what setting them implies (`IMPLIES` of each section: e.g. epochs -> max_steps=0),
    for the implied keys that are not set themselves."""
    out = dict(values)
    for key in values:
        *sections, name = key.split(".")
        section_cls = cls
        for section in sections:
            section_cls = field_types(section_cls)[section]
        prefix = "".join(s + "." for s in sections)
        for other, value in getattr(section_cls, "IMPLIES", {}).get(name, {}).items():
            out.setdefault(prefix + other, value)
    return out


# ------------------------------------------------------------------------------------------ options
@dataclasses.dataclass(frozen=True)
class Options:
    """How one command offers a config class on its command line."""
    config: type                                     # the config dataclass
    plain: dict[str, str] = dataclasses.field(default_factory=dict)      # "--lr" -> "optim.lr"
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)    # "--data" -> "dev" (another spelling)
    negations: dict[str, str] = dataclasses.field(default_factory=dict)  # "--no-progress" -> "progress"
    skip: frozenset[str] = frozenset()               # keys the command does not offer
    config_file: bool = False                        # offer --config FILE
    defaults: Callable[[], Any] | None = None        # what the help shows as defaults (else the class's)
    show_defaults: bool = True
    title: str = ""
    # the fields without a default are required options: unbracketed in the usage line (`--out DIR`; it showed
    # `[--out TEXT]`), and a missing one is argparse's one line (`the following arguments are required: --out`)
    # before anything else is read. Off where a command may take such a field from elsewhere (a --config file, a
    # run's record: `predict glue` reads --task from the model's task.json), and `build` refuses what is missing.
    required: bool = False

    def dest(self, key: str) -> str:
        return f"{DEST}{self.config.__name__}:{key}"


def option_name(key: str) -> str:
    return f"--{key}" if "." in key else "--" + key.replace("_", "-")


# What a text option takes, by its field's name (the last part of its key), in every config that has a field of that
# name: the usage and help said `TEXT` for each (`--tokenizer TEXT`, `--data TEXT`, `--task TEXT`, `[--corpus TEXT]`),
# where a directory, a file, a column's name or one of a few words is wanted. A choice list where the values are
# fixed (`--task`, `--device`, `--split`); where a value may also be a path or a number, both (`--grid NAME|FILE`).
# A text field not named here shows TEXT (tests/test_cli_audit31.py keeps every command's options named).
GLUE_TASK_NAMES = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax")   # tasks.glue.TASKS
METAVARS: dict[str, str] = {
    # directories
    "out": "DIR", "data_dir": "DIR", "corpus": "DIR", "glue_dir": "DIR", "init_from": "DIR",
    "data": "DIR", "path": "DIR", "eval_path": "DIR",           # a `data build` output (evaluate's, pretrain's)
    # a file, or a directory holding one (a tokenizer's folder; a `datasets` save_to_disk or Parquet split folder)
    "tokenizer": "PATH", "inputs": "PATH", "train": "PATH", "dev": "PATH", "test": "PATH",
    "na_probs": "FILE",
    # names and words
    "text_field": "NAME", "text_column": "NAME", "text_pair_column": "NAME", "label_column": "NAME",
    "id_column": "NAME", "preset": "NAME", "labels": "A,B,...", "levels": "LEVEL[,LEVEL]",
    "grid": "NAME|FILE", "scale": "NAME|FILE", "null_threshold": "X|recorded",
    # fixed values
    "task": "{" + ",".join(GLUE_TASK_NAMES) + "}", "device": "{auto,cpu,cuda,cuda:N}", "split": "{train,dev,test}",
}


def _metavar(kind: Any, key: str = "") -> str:
    choices = _choices(kind)
    if choices:      # "" is a field's "not given" (squad's --version): `{,1.1,2.0}` showed an empty choice
        return "{" + ",".join(str(c) for c in choices if c != "") + "}"
    kind = _strip_optional(kind)
    if _is_list(kind):      # `--seeds N [N ...]` (was ITEM) for numbers; text items are named as a text field
        inner = (typing.get_args(kind) or (str,))[0]
        return {int: "N", float: "X"}.get(inner) or METAVARS.get(key.rsplit(".", 1)[-1], "ITEM")
    if kind is str:
        return METAVARS.get(key.rsplit(".", 1)[-1], "TEXT")
    return {int: "N", float: "X"}.get(kind, "V")


# a field's comment that says its default in words (`default: the scale's`): "(default: none)" after it said the
# opposite (`pretraining seeds (default: the scale's) (default: none)`)
_SAYS_DEFAULT = re.compile(r"\bdefault:", re.IGNORECASE)


def _help(doc: str, default: Any, required: bool) -> str:
    if required:
        text = f"{doc} (required)"
    else:
        shown = "none" if default is None or default == "" else default
        if isinstance(shown, (list, tuple)):
            shown = " ".join(map(str, shown)) or "none"
        if isinstance(shown, bool):     # as it is typed: `--report false` (was "False")
            shown = str(shown).lower()
        said = shown == "none" and _SAYS_DEFAULT.search(doc)
        text = doc if said else f"{doc} (default: {shown})"
    return text.strip().replace("%", "%%")


def add_options(parser: argparse.ArgumentParser, options: Options) -> None:
    """One option per leaf field of `options.config` (plus --config FILE), grouped by section."""
    cls = options.config
    defaults = options.defaults() if options.defaults else None
    if options.config_file:
        parser.add_argument("--config", metavar="FILE", dest=options.dest("__file__"), action="append",
                            help="JSON file of config values, nested like the run_config.json a run saves; "
                                 "the command line overrides it (repeatable: a later file overrides an "
                                 "earlier one)")
    short = {key: flag for flag, key in options.plain.items()}
    alias = {}
    for flag, key in options.aliases.items():
        alias.setdefault(key, []).append(flag)
    negation = {key: flag for flag, key in options.negations.items()}
    groups: dict[str, Any] = {}
    for key, kind in leaf_keys(cls).items():
        if key in options.skip:
            continue
        section = key.rsplit(".", 1)[0] if "." in key else ""
        if section not in groups:
            if section or options.title:
                title = f"{section} options" if section else options.title
                groups[section] = parser.add_argument_group(title, field_doc(cls, section) if section else None)
            else:   # the command's own options: a second group titled "options" printed that heading twice
                groups[section] = parser._optionals
        default, required = _shown_default(cls, defaults, key)
        names = [short[key]] if key in short else []
        names += [option_name(key), *alias.get(key, [])]
        doc = field_doc(cls, key)
        kwargs: dict[str, Any] = dict(dest=options.dest(key), action=_Given, default=argparse.SUPPRESS,
                                      help=_help(doc, default, required) if options.show_defaults else doc)
        if _strip_optional(kind) is bool:
            kwargs.update(nargs="?", const="true", metavar="BOOL", action=_GivenBool)
            kwargs.update(kind=kind, spellings=_spellings(options, key))
        elif _is_list(kind):
            kwargs.update(nargs="+", metavar=_metavar(kind, key))
        else:
            kwargs.update(metavar=_metavar(kind, key))
        if required and options.required:   # `--out DIR`, not `[--out TEXT]`: argparse's one line names it if missing
            kwargs.update(required=True)
        groups[section].add_argument(*names, **kwargs)
        if key in negation:
            groups[section].add_argument(negation[key], dest=options.dest(key), action=_Given, nargs=0, const="false",
                                         default=argparse.SUPPRESS, help=f"same as {option_name(key)}=false")


class _Given(argparse.Action):
    """Records (spelling, value) of every occurrence, so that two spellings of one key can be compared."""

    def __call__(self, parser, namespace, values, option_string=None):
        value = self.const if self.nargs == 0 or values is None else values
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), (option_string, value)])


class _GivenBool(_Given):
    """A bool option's value read as it is given: `ablate --list-jobs maybe` is refused naming `maybe` before
    argparse's check of the required options (`--out`), as it was when those were checked later, by `build`. The
    message is `coerce`'s, the flag typed first (`--list-jobs: cannot read 'maybe' as bool (1, true, ...)`)."""

    def __init__(self, *args, kind: Any = bool, spellings: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.kind, self.spellings = kind, list(spellings)

    def __call__(self, parser, namespace, values, option_string=None):
        if values is not None:
            coerce(values, self.kind, Flags("/".join(dict.fromkeys([option_string, *self.spellings]))))
        super().__call__(parser, namespace, values, option_string)


def _shown_default(cls: type, defaults: Any, key: str) -> tuple[Any, bool]:
    obj: Any = defaults
    if obj is not None:
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj, False
    *sections, name = key.split(".")
    for section in sections:
        cls = field_types(cls)[section]
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return None, not sections
    return _default(f), False


def _spellings(options: Options, key: str) -> list[str]:
    """Every option that sets `key`: its short name (`--lr`), its own (`--optim.lr`), its other spellings."""
    return [*(flag for flag, k in options.plain.items() if k == key), option_name(key),
            *(flag for flag, k in options.aliases.items() if k == key)]


def _as_typed(flag: str, options: Options, key: str) -> Flags:
    """A value's name in an error: the flag as typed, then the key's other spellings (`--max-steps 1.5` said
    `train.max_steps: cannot read '1.5' as int`, the field, not the flag given)."""
    return Flags("/".join(dict.fromkeys([flag or option_name(key), *_spellings(options, key)])))


def command_line_values(args: argparse.Namespace, options: Options) -> GivenValues:
    """The keys given on the command line and their values. A repeated option keeps its last value (as
    argparse does), except a list option, which takes the items of every occurrence (`--input a --input b`);
    two spellings of one key (`--lr` and `--optim.lr`, `--dev` and `--data`, `--flag` and `--no-flag`) with
    different values are an error. A value that is not its field's type is named by the flag given
    (`--max-steps/--train.max_steps: cannot read '1.5' as int (a whole number)`), and so is one that the config's
    checks refuse once `build` is given these values (their `sources`: each key's flags, the last one typed
    first)."""
    kinds = leaf_keys(options.config)
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    start = options.dest("")
    for dest, given in vars(args).items():
        if not dest.startswith(start) or dest == options.dest("__file__"):
            continue
        key = dest[len(start):]
        if _is_list(kinds[key]):          # `--input a --input b` is both (the last alone dropped `a` silently)
            joined: dict[str, list] = {}
            for flag, value in given:
                joined.setdefault(flag, []).extend(value if isinstance(value, (list, tuple)) else [value])
            last = {flag: coerce(items, kinds[key], _as_typed(flag, options, key)) for flag, items in joined.items()}
        else:   # the last per spelling
            last = {flag: coerce(value, kinds[key], _as_typed(flag, options, key)) for flag, value in given}
            for flag, value in last.items():
                _check_flag_choice(flag, key, kinds[key], value)
        values = list(last.values())
        if any(v != values[0] for v in values[1:]):
            shown = ", ".join(f"{flag} {value!r}" for flag, value in last.items())
            raise UserError(f"{' and '.join(last)} set {key} to different values ({shown}); give one")
        out[key] = values[-1]
        sources[key] = _as_typed(given[-1][0], options, key)
    return GivenValues(out, sources)


def file_values(args: argparse.Namespace, options: Options) -> dict[str, Any]:
    """The values of the --config files, a later file's winning (each with what its keys imply)."""
    out: dict[str, Any] = {}
    for _, values in _file_layers(args, options):
        out.update(values)
    return out


def _file_layers(args: argparse.Namespace, options: Options) -> list[tuple[str, dict[str, Any]]]:
    """(path, its values with what its keys imply) of each --config file, in the order given."""
    return [(str(path), implied(options.config, read_config_file(options.config, path)))
            for path in _config_files(args, options)]


class GivenValues(dict):
    """`given_values`' (or `command_line_values`') dotted key -> value, with `sources`: where each key was given,
    the flags typed (`Flags`) or the --config file's path, so that `build` names the source of a value the config's
    checks refuse. A key a given one implies (`--epochs` -> `train.max_steps`) has the source of the key given."""

    def __init__(self, values: dict[str, Any], sources: dict[str, str]):
        super().__init__(values)
        self.sources = sources

    @property
    def files(self) -> dict[str, str]:
        """The older name of `sources` (which names the --config files, and now the flags too)."""
        return self.sources


def _config_files(args: argparse.Namespace, options: Options) -> list[str]:
    given = getattr(args, options.dest("__file__"), None) or []
    return [given] if isinstance(given, str) else list(given)


def given_values(args: argparse.Namespace, options: Options) -> dict[str, Any]:
    """The keys the --config files and the command line set, the command line winning (and of two files, the
    later one). Each layer brings what its keys imply (`IMPLIES`) on its own, so a field the command line sets
    also wins over what a file sets for the field that defers to it: `--train.epochs 2` over a file's
    `train.max_steps` trains 2 epochs."""
    cls = options.config
    out: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for path, values in _file_layers(args, options):
        out.update(values)
        sources.update(dict.fromkeys(values, path))
    typed = command_line_values(args, options)
    line = implied(cls, typed)
    out.update(line)
    for key in line:                     # a key the command line implies is said by the flag that implied it
        source = typed.sources.get(key) or next((typed.sources[given] for given in typed
                                                 if key in implied(cls, {given: typed[given]})), None)
        if source is not None:
            sources[key] = source
        else:                            # implied by flags together only: no one flag to name
            sources.pop(key, None)
    return GivenValues(out, sources)


def read_options(args: argparse.Namespace, options: Options, base: Any = None) -> Any:
    """The config: `base` (default: the class's defaults) < --config FILE < the command line."""
    return build(base if base is not None else options.config, given_values(args, options))


def to_dict(root: Any) -> dict[str, Any]:
    return dataclasses.asdict(root)
