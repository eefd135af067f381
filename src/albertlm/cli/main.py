"""`albertlm <command>`: dispatch to a command module, imported lazily; errors become one line and an exit code.

Each command module defines `add_arguments(parser, command)` and `run(args, command) -> int`; only the chosen
one is imported, so `albertlm --help` does not load torch. A command whose options are a config dataclass
generates them with `albertlm.config.overrides.add_options` and reads them back with `read_options`.
Bad arguments are one line `albertlm <cmd>: error: ...` and exit 2, like any `UserError`; so is a dependency
missing from the environment (`missing_dependency`: the line names what installs it), and a misspelt command,
subcommand or choice is offered the nearest.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import sys
import warnings
from pathlib import Path

from albertlm.errors import UserError, other_rank_says, reports_here

# name -> (module, one-line help). `evaluate` is split: a task name first goes to the task module.
COMMANDS: dict[str, tuple[str, str]] = {
    "params": ("albertlm.cli.model_commands", "parameter counts of the presets (the paper's tables)"),
    "info": ("albertlm.cli.model_commands", "show a checkpoint's config and parameter count"),
    "convert": ("albertlm.cli.convert_commands", "convert checkpoints: transformers <-> albertlm, TF -> albertlm"),
    "tokenizer": ("albertlm.cli.tokenizer_commands", "train, encode, decode and describe (info) SentencePiece / WordPiece tokenizers"),
    "data": ("albertlm.cli.data_commands", "build, inspect and summarise pretraining data"),
    "pretrain": ("albertlm.cli.train_commands", "pretrain MLM + SOP/NSP from scratch or a checkpoint"),
    "evaluate": ("albertlm.cli.train_commands", "evaluate a checkpoint on pretraining data, or a task (glue/squad/race/classify)"),
    "plot": ("albertlm.cli.train_commands", "write PNG curves of a run's metrics (or several runs' in one figure)"),
    "finetune": ("albertlm.cli.task_commands", "fine-tune on GLUE, SQuAD, RACE or your own data"),
    "predict": ("albertlm.cli.task_commands", "predict with a fine-tuned checkpoint"),
    "fill-mask": ("albertlm.cli.infer_commands", "top-k tokens for each [MASK] in a text (or stdin lines)"),
    "embed": ("albertlm.cli.infer_commands", "sentence embeddings (mean or [CLS]) of a file's lines or a dataset's records to .npy/.parquet/.jsonl"),
    "export": ("albertlm.cli.export_commands", "export a model to ONNX (encoder or fine-tuned head), optional int8"),
    "ablate": ("albertlm.cli.ablate_commands", "run the paper's ablations (tables 3/4/5, dropout, figure 1) and write a report"),
}
TASK_NAMES = ("glue", "squad", "race", "classify")
# words a new user tries as a command that name something else: what to run instead
NOT_COMMANDS = {
    "demo": "the demo is `make demo`, or `python -m albertlm.demo` (--quick: a one-minute version)",
    "version": "the version is `albertlm --version`",
}

# albertlm's dependencies (pyproject.toml) by the module each is imported as, and what installs it: a broken or
# partial install lacking one was a traceback ending in ModuleNotFoundError (`albertlm plot` without matplotlib)
DEPENDENCIES = {
    "torch": "torch", "numpy": "numpy", "safetensors": "safetensors", "sentencepiece": "sentencepiece",
    "tokenizers": "tokenizers", "tqdm": "tqdm", "scipy": "scipy", "sklearn": "scikit-learn",
    "matplotlib": "matplotlib", "tensorboard": "tensorboard", "pyarrow": "pyarrow", "zstandard": "zstandard",
}
ONNX_EXTRA = ("onnx", "onnxruntime", "onnxscript")   # the `onnx` extra: `pip install 'albertlm[onnx]'`


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: albertlm <command> [options]   (albertlm <command> --help or albertlm help <command> for its options; albertlm --version)",
             "", "commands:"]
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items()]
    lines += ["", "new here: `make demo` (or `python -m albertlm.demo`) runs the whole pipeline on a CPU in about 10 "
              "minutes; README.md shows each stage's commands, docs/ their details"]
    return "\n".join(lines)


def missing_dependency(exc: BaseException, command: str = "") -> str | None:
    """One line naming the package to install when `exc` (or what it was raised from) is an ImportError of one of
    albertlm's dependencies or of the onnx extra; None for any other error (albertlm's own modules included: that
    is a bug, whose traceback is wanted)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        name = (getattr(exc, "name", None) or "") if isinstance(exc, ImportError) else ""
        top = name.split(".")[0]
        if top in ONNX_EXTRA:
            return f"{top} is not installed: this needs the onnx extra (pip install 'albertlm[onnx]')"
        if top in DEPENDENCIES:
            package = DEPENDENCIES[top]
            hint = (" (or run without TensorBoard events: --train.tensorboard false)"
                    if top == "tensorboard" and command in ("pretrain", "finetune") else "")
            return (f"{package} is not installed, and albertlm needs it (one of its dependencies, missing from this "
                    f"Python environment): pip install {package}{hint}")
        exc = exc.__cause__ or exc.__context__
    return None


def _module_for(command: str, rest: list[str]) -> str:
    if command == "evaluate" and rest and rest[0] in TASK_NAMES:
        return "albertlm.cli.task_commands"
    return COMMANDS[command][0]


# Names other tools give our options (transformers' TrainingArguments and AlbertConfig, google-research's flags,
# habit), by the last part of the option: `--learning-rate` or `--optim.learning_rate` -> `--lr`.
OPTION_SYNONYMS = {
    "learning_rate": "lr", "num_train_epochs": "epochs", "train_batch_size": "batch_size",
    "per_device_train_batch_size": "batch_size", "warmup_proportion": "warmup_ratio", "num_warmup_steps": "warmup_steps",
    "num_train_steps": "max_steps", "steps": "max_steps", "save_steps": "save_every", "save_checkpoints_steps": "save_every",
    "logging_steps": "log_every", "eval_steps": "eval_every", "output_dir": "out", "max_seq_len": "max_seq_length",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads", "intermediate_size": "ffn_size",
    "hidden_act": "activation", "num_hidden_groups": "num_groups", "dropout": "hidden_dropout",
    "hidden_dropout_prob": "hidden_dropout", "attention_probs_dropout_prob": "attention_dropout",
    "classifier_dropout_prob": "classifier_dropout", "fp16": "precision", "bf16": "precision",
}


def _option_key(option: str) -> str:
    """`--optim.learning_rate`, `--learning-rate` -> `learning_rate` (the part after the last dot, `_` for `-`)."""
    return option.lstrip("-").replace("-", "_").rsplit(".", 1)[-1]


NEVER_MEANT = ("-h", "--help", "--version")   # no mistyped option means these (`predict --lr` -> --help)


def nearest_option(word: str, options: list[str]) -> str | None:
    """The option an unknown `word` most likely meant: one with the same last part (or that part's usual name
    elsewhere, `OPTION_SYNONYMS`), the shortest spelling first; else the closest by spelling, compared without
    the dashes (with them, `--gpu` was 60% like `--out` and was offered it); else the one option it begins
    (`--in` -> `--input`)."""
    key = _option_key(word).lower()      # `--OUT`, `--Max-Steps`: no option differs from another by case alone
    key = OPTION_SYNONYMS.get(key, key)
    bodies = {o[2:]: o for o in options if o.startswith("--") and o not in NEVER_MEANT}
    same = sorted((o for o in bodies.values() if _option_key(o).lower() == key), key=len)
    if same:
        return same[0]
    stem = word.lstrip("-")
    close = difflib.get_close_matches(stem, list(bodies), n=1)
    if close:
        return bodies[close[0]]
    begun = [o for body, o in bodies.items() if len(stem) >= 2 and body.startswith(stem)]
    return begun[0] if len(begun) == 1 else None


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    """The parser's option strings and its subcommands' (argparse reports a subcommand's unknown argument
    through the top parser: `finetune glue --dropout` must search glue's options; `_chosen_parser` picks it)."""
    options = []
    for action in parser._actions:
        options += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                options += [o for o in _all_options(sub) if o not in options]
    return options


def _chosen_parser(parser: argparse.ArgumentParser, args: list[str]) -> argparse.ArgumentParser:
    """The subcommand's parser that `args` reach (`classify ...` of `finetune`: classify's), else `parser`: an
    unknown option is looked up among the options of the command given, not of its siblings (`predict classify
    --out-dir` was offered glue's --data-dir, `data build --jobs` stats' --json)."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    words = [w for w in args if not w.startswith("-")]
    if subparsers and words and words[0] in subparsers[0].choices:
        return _chosen_parser(subparsers[0].choices[words[0]], args[args.index(words[0]) + 1:])
    return parser


# an option of one command given to another, whose nearest spelling is not what it meant: what to say instead
# (`finetune --preset albert-base` was offered --resume)
MEANT_ELSEWHERE = {
    "finetune": {"--preset": "fine-tuning takes its model from --model: a pretrained checkpoint (ours, or a "
                             "transformers ALBERT directory such as albert-base-v2's) or a pretraining run, not a "
                             "preset",
                 "--init-from": "did you mean --model? fine-tuning starts from the checkpoint or pretraining run it "
                                "names"},
    "pretrain": {"--recipe": "pretrain always starts from the paper recipe: its settings are options (--lr, "
                             "--batch-size, ...) or a --config file"},
}
# another command's name for an option, by command: `finetune --eval-data` (pretrain's held-out data) is --dev where
# the family has one
OTHER_NAMES = {command: {"--eval-data": "--dev"} for command in ("finetune", "predict", "evaluate")}
# `--no-tensorboard`, `--no_compile`: the negation of an option that has none
NEGATED = re.compile(r"^--?no[-_](?P<rest>[A-Za-z].*)$", re.IGNORECASE)


def _unknown_option_hint(flag: str, parser: argparse.ArgumentParser, command: str) -> str | None:
    """What to say after an unknown option `flag` of `command` (whose options `parser` has): `did you mean X?` with
    the nearest option (`nearest_option`), `X=false` for `--no-X` of a bool option X (it offered X, which turns it
    on), what the command does instead for another command's option (`MEANT_ELSEWHERE`), or None."""
    said = MEANT_ELSEWHERE.get(command, {}).get(flag.lower())
    if said:
        return said
    # a hidden option (help suppressed: predict's --train, taken and ignored) is never offered
    actions = {option: action for action in _all_actions(parser) for option in action.option_strings
               if action.help is not argparse.SUPPRESS}
    renamed = OTHER_NAMES.get(command, {}).get(flag.lower())
    if renamed in actions:
        return f"did you mean {renamed}?"
    close = nearest_option(flag, list(actions))
    negated = NEGATED.match(flag)
    if negated and not (close or "").startswith("--no-"):     # not a misspelt negation that exists (`--no-progres`)
        meant = nearest_option(f"--{negated.group('rest')}", list(actions))
        action = actions.get(meant)
        if action is not None and action.nargs == "?" and action.const == "true":       # a bool option
            return f"did you mean {meant}=false?"
        if isinstance(action, argparse._StoreTrueAction):
            return f"{meant} is off unless given: leave it out"
        # `--no-compile`: `--compile none` (a generated option's choices are in its metavar: `{none,default,...}`)
        shown = getattr(action, "metavar", None)
        choices = (action.choices if action is not None and action.choices else
                   shown[1:-1].split(",") if isinstance(shown, str) and shown.startswith("{") else ())
        off = [choice for choice in choices if choice in ("none", "off", "false")]
        if off:
            return f"did you mean {meant} {off[0]}?"
    return f"did you mean {close}?" if close else None


def _all_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions and its subcommands' (as `_all_options` gathers their option strings)."""
    actions = []
    for action in parser._actions:
        actions.append(action)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                actions += _all_actions(sub)
    return actions


# -1, -1.5, -.5, -1e-3, -2.5E+4, and -inf, -nan (float's words), so that the config says what is wrong with them
NEGATIVE_NUMBER = re.compile(r"^-((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|(?i:inf|infinity|nan))$")


# argparse's words for an option whose value is missing, or was taken for an option (`--input -data.txt`)
EXPECTED_VALUE = re.compile(r"^argument (\S+): expected (?:one|at least one) argument$")


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`albertlm <cmd>: error: ...`, exit 2), naming the nearest
    option when one is unknown; no abbreviations (`--inner.rat` is not silently `--inner.rate`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # argparse takes `-1`, `-.5` as values but `-1e-3` as an unknown option ("--lr: expected one argument")
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str):
        # `albertlm <command>: error:` as every other error says it (a subcommand's parser said `albertlm predict
        # glue: error:` for its usage errors, `albertlm predict: error:` for the rest)
        prog = " ".join(self.prog.split()[:2])
        if not reports_here():              # under torchrun every rank parses the same argv: rank 0 says it
            other_rank_says(f"{prog}: error: {message}")
            raise SystemExit(2)
        if message.startswith("the following arguments are required"):
            # `data build --input a.txt -b.txt` without --tokenizer: a file read as an option is the first thing to
            # say (argparse checks the required options first, and the hint below was lost)
            known = set(_all_options(_chosen_parser(self, getattr(self, "_given", []))))
            stray = [w for w in getattr(self, "_given", []) if w.startswith("-") and w.split("=", 1)[0] not in known
                     and os.path.exists(w)]
            if stray:
                message = f"unrecognized arguments: {stray[0]}"
            else:
                message += self._meant_required(message)
        message += self._dash_value_hint(message) + _choice_hint(message)
        if message.startswith("unrecognized arguments:"):
            chosen = _chosen_parser(self, getattr(self, "_given", []))
            for word in message.split(":", 1)[1].split():
                if word.startswith("-") and os.path.exists(word):   # `--input a.txt -b.txt`: a file, not an option
                    message += (f" ({word!r} is a file whose name begins with '-', so it was read as an option: "
                                f"write ./{word})")
                    break
                # `-lr 0.1` (one dash, as some tools spell options) is looked up as `--lr`
                hint = (_unknown_option_hint(word.split("=")[0], chosen, prog.split()[-1])
                        if re.match(r"--?[A-Za-z]", word) else None)
                if hint:
                    message += f" ({hint})"
                    break
        print(f"{prog}: error: {message}", file=sys.stderr)   # one line, no usage block
        raise SystemExit(2)

    def _meant_required(self, message: str) -> str:
        """`pretrain --output-dir run1` (transformers' name), `--ouput run1`, `--OUT run1`: argparse checks the
        required options before the unknown ones, and said only "the following arguments are required: --out";
        an unknown option given whose nearest option is one of the missing ones is named with it."""
        missing = {name for part in message.split(":", 1)[1].split(",") for name in part.strip().split("/")}
        options = _all_options(_chosen_parser(self, getattr(self, "_given", [])))
        for word in getattr(self, "_given", []):
            flag = word.split("=", 1)[0]
            if word == "--":
                break
            if not re.match(r"--?[A-Za-z]", flag) or flag in options:
                continue
            close = nearest_option(flag, options)
            if close in missing:
                return f" ({flag} is no option here: did you mean {close}?)"
        return ""

    def _dash_value_hint(self, message: str) -> str:
        """`--input -data.txt`: argparse reads a value starting with '-' as an option and said only "argument
        --input: expected one argument"; the hint says how to give it (`--input=-data.txt`). Not for a word that
        is one of the command's options (`--input --out x`: the value is missing)."""
        match = EXPECTED_VALUE.match(message)
        given = getattr(self, "_given", [])
        if not match or not given:
            return ""
        names = match.group(1).split("/")
        known = set(_all_options(self))
        for word, after in zip(given, given[1:]):
            if (word in names and after.startswith("-") and after not in ("-", "--")
                    and after.split("=", 1)[0] not in known):
                return f" ({after!r} begins with '-', so it was read as an option: write {word}={after})"
        return ""

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:
            args = self._lone_bool_flags(list(args))
            self._given = args            # for `error`: which subcommand the words chose
        known, extras = super().parse_known_args(args, namespace)
        self._refuse_empty_out(known)
        return known, extras

    def _refuse_empty_out(self, namespace: argparse.Namespace) -> None:
        """`--out ""` (a script's `--out "$OUT"` with OUT unset) is refused: it was the current directory, so a
        run, a tokenizer or a data build was written among whatever files were there; so is an --out the shell left
        `~` in (`guards.check_home_expanded`), and `--out -`: no command writes its --out to stdout, and a file or
        folder named `-` was made."""
        from albertlm.cli.guards import check_home_expanded
        for action in self._actions:
            if "--out" not in action.option_strings:
                continue
            value = getattr(namespace, action.dest, None)
            for given in value if isinstance(value, list) else [value]:
                text = given[-1] if isinstance(given, tuple) else given    # config options record (flag, value)
                if isinstance(text, str) and not text.strip():
                    self.error(f"argument --out: {text!r} is empty; give a path ('.' for the current directory)")
                if text == "-":               # no command writes its --out to stdout: it was a file or folder '-'
                    self.error("argument --out: '-' is not stdout here: the command writes files at a path; "
                               "give one ('./-' names a file or folder '-')")
                try:                           # `--out '~/runs'`, `--out=~/runs`: a folder named `~` made here
                    check_home_expanded(text)
                except UserError as exc:
                    self.error(str(exc))

    def _lone_bool_flags(self, args: list[str]) -> list[str]:
        """A bool option takes an optional value (`--progress`, `--progress false`), and argparse gives it the
        next word whatever it is: `evaluate --progress run1` took run1 as the bool and then asked for the
        checkpoint. Where the command has a positional argument, a bool option followed by a word that is no
        bool is written `--flag=true`, so the word stays the positional. (Without positionals, `--progress maybe`
        is still refused as a bad bool.)"""
        if not any(not action.option_strings for action in self._actions):
            return args
        from albertlm.config.overrides import FALSE_WORDS, TRUE_WORDS

        flags = {flag for action in self._actions if action.nargs == "?" and action.const == "true"
                 for flag in action.option_strings}
        out = []
        for i, word in enumerate(args):
            if word == "--":
                return out + args[i:]
            after = args[i + 1] if i + 1 < len(args) else None
            if (word in flags and after is not None and not after.startswith("-")
                    and after.lower() not in TRUE_WORDS + FALSE_WORDS):
                word = f"{word}=true"
            out.append(word)
        return out


# argparse's words for a value that is not one of the choices: `data biuld`, `--sentence-task spo` (Python 3.12.8+
# lists the choices without quotes)
INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)")


def _choice_hint(message: str) -> str:
    """`(did you mean build?)` after argparse's invalid choice, as an unknown command or option gets one; not for a
    path (`export --out m.onnx MODEL` left the format out, it did not misspell `onnx`)."""
    match = INVALID_CHOICE.search(message)
    if not match or any(c in match.group("value") for c in "/.\\"):
        return ""
    choices = [c.strip().strip("'") for c in match.group("choices").split(",")]
    value = match.group("value")
    close = difflib.get_close_matches(value, choices, n=1) or difflib.get_close_matches(value.lower(), choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def main(argv: list[str] | None = None) -> int:
    shown = warnings.showwarning
    logger, log_lines = logging.getLogger("albertlm"), _LogLines()
    if argv is None:                # the console command (not a caller's main([...]), whose warnings it records)
        warnings.showwarning = _one_line_warning(shown)
        logger.addHandler(log_lines)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:   # `albertlm --help | head -1`: the reader left; so do we, without a traceback
        _quiet_stdout()
        return 0
    finally:                  # what is still buffered (argparse's help swallows its own write error)
        warnings.showwarning = shown
        logger.removeHandler(log_lines)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        except (OSError, ValueError, AttributeError):
            pass


def _one_line_warning(shown):
    """`warnings.showwarning` for the console command: albertlm's own UserWarnings (a Korean vocab.txt read with
    accent stripping, a config field missing from a file) are one `albertlm <command>: warning: ...` line on
    stderr (`errors.warning_line`), not Python's two lines quoting our source file; other warnings as `shown`
    does."""
    from albertlm.errors import warning_line

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and "albertlm" in Path(str(filename)).parts:
            try:
                print(warning_line(str(message)), file=file or sys.stderr)
            except (OSError, ValueError):   # stderr gone: a warning is never worth a traceback
                pass
        else:
            shown(message, category, filename, lineno, file, line)
    return show


class _LogLines(logging.Handler):
    """The console command's handler of albertlm's loggers (the model loader's notes: weights freshly initialised,
    config fields missing from a file): `albertlm <command>: warning: ...` on stderr, the form of every other
    warning line (`errors.warning_line`); Python's last-resort handler printed the bare message."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        from albertlm.errors import program_name, warning_line

        try:
            text = record.getMessage()
            line = warning_line(text) if record.levelno < logging.ERROR else f"{program_name()}: error: {text}"
            if reports_here():
                print(line, file=sys.stderr, flush=True)
        except (OSError, ValueError):   # stderr gone: a log line is never worth a traceback
            pass
        except Exception:               # a record whose arguments do not fit its message: logging's own report
            self.handleError(record)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not raise again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):   # stdout is no file (a test's capture)
        pass


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from albertlm import __version__

        print(f"albertlm {__version__}")
        return 0
    if argv[0] == "help":                  # `albertlm help [command [subcommand]]`, as git and pip take it
        return _main(argv[1:] + ["--help"]) if len(argv) > 1 else _main(["--help"])
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        line = f"albertlm: error: unknown command {command!r}{hint}"
        if command.startswith("-"):        # `albertlm --lr 1 pretrain`: options come after the command
            line = f"albertlm: error: {command!r} is not a command: give the command first, then its options"
        elif command.lower() in NOT_COMMANDS:
            line = f"albertlm: error: {command!r} is not a command: {NOT_COMMANDS[command.lower()]}"
        if reports_here():                 # under torchrun, one rank says it (`_say`); one line, as every error
            print(f"{line}; the commands are {', '.join(COMMANDS)} (albertlm --help says what each does)",
                  file=sys.stderr)
        else:
            other_rank_says(line)
        return 2
    from albertlm.errors import program_named

    logger = logging.getLogger("albertlm")
    level = logger.level
    # warning lines name the command, as its error line does; a rank that does not report silences warnings for
    # the command only (an in-process caller of main(), a test, keeps its own filters and level after it)
    with program_named(f"albertlm {command}"), warnings.catch_warnings():
        try:
            return _run_command(command, rest)
        finally:
            logger.setLevel(level)


def _run_command(command: str, rest: list[str]) -> int:
    from albertlm.errors import UserError, sigterm_stops

    if not reports_here():                 # torchrun's other ranks: their warnings and logged warnings repeat rank 0's
        warnings.simplefilter("ignore")
        logging.getLogger("albertlm").setLevel(logging.ERROR)
    try:
        _refuse_a_misspelt_task(command, rest)
        module = importlib.import_module(_module_for(command, rest))
        parser = Parser(prog=f"albertlm {command}", description=COMMANDS[command][1])
        module.add_arguments(parser, command)
        args = parser.parse_args(rest)
        with sigterm_stops():              # SIGTERM stops any command as Ctrl-C does: `interrupted`, exit 130
            return int(module.run(args, command) or 0)
    except UserError as exc:
        _say(f"albertlm {command}: error: {one_line(exc)}")
        return exc.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as exc:  # a missing file, a full disk, a read-only directory, a quota: the system's words
        _say(f"albertlm {command}: error: {one_line(exc)}")
        return 2
    except KeyboardInterrupt:
        _say(f"albertlm {command}: interrupted", linger=False)
        return 130
    except ImportError as exc:            # a dependency missing from a broken or partial install
        line = missing_dependency(exc, command)
        if line is None:
            raise
        _say(f"albertlm {command}: error: {line}")
        return 2
    except (MemoryError, RuntimeError) as exc:
        if not _out_of_memory(exc):
            raise
        _say(f"albertlm {command}: error: {_memory_line(exc)}")
        return 2


def _refuse_a_misspelt_task(command: str, rest: list[str]) -> None:
    """`evaluate glu --data ...`: a first word that is no task is the checkpoint, and a misspelt task was told only
    "glu: no such model directory"; one that is no path and spelt like a task is asked about."""
    word = rest[0] if command == "evaluate" and rest else ""
    if not word or word.startswith("-") or word in TASK_NAMES or os.path.exists(word):
        return
    close = difflib.get_close_matches(word.lower(), TASK_NAMES, n=1, cutoff=0.8)
    if close:
        raise UserError(f"{word}: no such model directory, nor a task ({', '.join(TASK_NAMES)}): did you mean "
                        f"albertlm evaluate {close[0]}?")


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is the host or a GPU running out of memory: Python's MemoryError, torch's OutOfMemoryError
    (CUDA), or the CPU allocator's RuntimeError (a model or batch too big for the machine: `--model.vocab_size
    100000000000` was a traceback of torch's internals)."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc)
    return "can't allocate memory" in text or "out of memory" in text.lower()


def _memory_line(exc: BaseException) -> str:
    """One line for an out-of-memory error: how much was asked when the message says, and what needs less."""
    text = one_line(exc) if str(exc) else ""
    asked = re.search(r"allocate (\d+) bytes", text)
    if asked:                        # the CPU allocator's words, past its source location: the size asked
        text = f"{_bytes(int(asked.group(1)))} asked of the allocator at once"
    return (f"out of memory{': ' + text if text else ''}; a smaller model, --batch-size or --micro-batch-size "
            "(or shorter sequences) needs less")


def _bytes(count: int) -> str:
    """12800000000000 -> '12.8 TB'."""
    size = float(count)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000:
            return f"{size:.3g} {unit}"
        size /= 1000
    return f"{size:,.0f} PB"


def _say(line: str, linger: bool = True) -> None:
    """An error line on stderr from the first rank only (`errors.reports_here`): under torchrun every rank checks
    the same inputs and fails the same way, and one line is the contract; every rank still exits non-zero. The
    other ranks wait for the first to say it when no process group formed yet (`errors.other_rank_says`).
    Under torchrun the line is also left in torchrun's store, where the ranks of other nodes waiting for this one
    to join read it and stop at once (`distributed.wait_for_ranks`) instead of waiting out the timeout."""
    if "TORCHELASTIC_USE_AGENT_STORE" in os.environ and not _torch_import_cut_short():
        from albertlm.training.distributed import tell_peers_before_joining

        tell_peers_before_joining(line)
    if reports_here():
        print(line, file=sys.stderr)
    elif linger:
        other_rank_says(line)


def _torch_import_cut_short() -> bool:
    """Whether a signal stopped this process while it imported torch: torch cannot be imported again then (a second
    import printed five tracebacks, "duplicate registrations", "partially initialized module", instead of the
    one line), so the peers are not told (their own timeout or torchrun stops them)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return any(name.startswith("torch.") for name in sys.modules)
    return bool(getattr(getattr(torch, "__spec__", None), "_initializing", False))


def one_line(exc: BaseException) -> str:
    """The message on one line, whatever it quotes (a newline in a file name, a multi-line library error)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
