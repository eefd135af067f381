"""`albertlm finetune|predict|evaluate glue|squad|race|classify`.

finetune: train a task head on a checkpoint (ours or a transformers ALBERT directory), keep the best dev
checkpoint in OUT/best, write OUT/metrics.json and prediction files; `--resume` continues a stopped run
exactly, `torchrun` runs it on several processes. predict: run a fine-tuned checkpoint (OUT/best; OUT
means it too) on data and write prediction files (and metrics if the data is labelled). evaluate: print
metrics JSON, either of a checkpoint (`--model`) or of an existing predictions file (`--predictions`); `evaluate
glue --score RUN ...` prints GLUE's overall score of fine-tuning runs instead.

The options are generated from two dataclasses: the family's data options (`tasks.registry`) and the
fine-tuning config (`config.task.FinetuneConfig`: `--optim.*`, `--train.*`, `--dist.*`, with short names
for the everyday ones). Precedence: the family's defaults or `--recipe` < `--config FILE` < command line.
With `--resume` the run's saved config replaces the defaults and the recipe, and only RESUME_MAY_CHANGE
may differ from it; for predict / evaluate the data settings the run recorded (task.json) are the
defaults of the data options.
Heavy imports (torch) happen inside functions so `albertlm --help` stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from albertlm.config.overrides import (GivenValues, Options, add_options, build, command_line_values, flatten,
                                       given_values, leaf_keys, read_options)
from albertlm.config.run import RESUME_MAY_CHANGE as RUN_RESUME_MAY_CHANGE
from albertlm.config.task import FinetuneConfig
from albertlm.errors import UserError, program_name, say_warning

FAMILIES = ("glue", "squad", "race", "classify")   # tasks.registry.FAMILIES (not imported here: it loads torch)
TRAINING_FLAGS = {
    "--lr": "optim.lr", "--weight-decay": "optim.weight_decay", "--warmup-steps": "optim.warmup_steps",
    "--warmup-ratio": "optim.warmup_ratio", "--batch-size": "train.batch_size",
    "--micro-batch-size": "train.micro_batch_size", "--epochs": "train.epochs", "--max-steps": "train.max_steps",
    "--seed": "train.seed", "--eval-every": "train.eval_every", "--log-every": "train.log_every",
    "--save-every": "train.save_every", "--compile": "train.compile", "--precision": "train.precision",
    "--device": "dist.device"}
EVALUATION_KEYS = {"max_seq_length", "eval_batch_size", "train.precision", "train.progress", "dist.device"}
# what `finetune --resume` may change: the length of the run, and how it is run and logged (not what it learns)
RESUME_MAY_CHANGE = RUN_RESUME_MAY_CHANGE | {"eval_batch_size"}


def finetune_options(family: str, command: str) -> Options:
    """All of FinetuneConfig for `finetune`; what evaluation uses for `predict` / `evaluate`."""
    from albertlm.tasks.recipes import FAMILY_DEFAULTS   # no torch

    if command == "finetune":
        # --squad-head is SQuAD's alone (other families have one head each)
        skip = frozenset({"train.eval_batches", *(() if family == "squad" else ("squad_head",))})
        return Options(FinetuneConfig, plain=TRAINING_FLAGS, config_file=True, skip=skip,
                       negations={"--no-progress": "train.progress"},
                       defaults=lambda: FAMILY_DEFAULTS[family], title="fine-tuning options")
    return Options(FinetuneConfig, plain={"--precision": "train.precision", "--device": "dist.device"},
                   negations={"--no-progress": "train.progress"},
                   skip=frozenset(leaf_keys(FinetuneConfig)) - EVALUATION_KEYS,
                   defaults=lambda: FAMILY_DEFAULTS[family], title="evaluation options")


def data_options(family: str) -> Options:
    from albertlm.tasks.options import ALIASES, OPTIONS   # no torch

    # GLUE's --task has no default: `build` refuses a new run without it in one line ("the following arguments are
    # required: --task"). Its help said "(required)", false where a run's record gives it (predict, evaluate --model,
    # finetune --resume): shown as not given, its comment says when it is needed
    shown = (lambda: OPTIONS[family](task="")) if family == "glue" else None
    return Options(OPTIONS[family], aliases=ALIASES.get(family, {}), defaults=shown, title=f"{family} data options")


def score_options(family: str) -> Options | None:
    from albertlm.tasks.options import SCORE_OPTIONS

    cls = SCORE_OPTIONS.get(family)
    return Options(cls, title="scoring options (with --predictions)") if cls else None


# ------------------------------------------------------------------------------------------ arguments
FAMILY_TEXT = {"glue": "a GLUE task from its official files or the Hugging Face Hub's (--task, --data-dir)",
               "squad": "SQuAD v1.1 or v2.0 question answering (the official JSON files or the Hub's exports)",
               "race": "RACE multiple-choice reading comprehension (the RACE/ directory or a Hugging Face export)",
               "classify": "your own labelled texts or text pairs (CSV, TSV, JSONL, Parquet, Arrow)"}
METRIC_TEXT = {"glue": "GLUE's own metric for the task", "squad": "exact match and F1",
               "race": "accuracy overall, middle and high",
               "classify": "accuracy, macro F1, F1 and MCC, or Pearson and Spearman"}
COMMAND_TEXT = {"finetune": "trains a pretrained model and keeps the best on dev ({metric}) in OUT/best, with "
                            "metrics.json and prediction files",
                "predict": "writes the predictions of a fine-tuned model (RUN/best) for a split",
                "evaluate": "scores a fine-tuned model, or a predictions file (--predictions), on labelled data "
                            "({metric})"}


SQUAD_HEAD_CLASSES = {"bert": "AlbertForQuestionAnswering", "xlnet": "AlbertForSquadV2"}   # specs.SQUAD_HEADS' classes
CHECKED_SQUAD_HEAD = "given_squad_head"   # predict / evaluate --squad-head (checked against the model's, not used)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    from albertlm.tasks.recipes import FAMILY_DEFAULTS   # no torch

    sub = parser.add_subparsers(dest="family", metavar="{glue,squad,race,classify}", required=True)
    for family in FAMILIES:
        p = sub.add_parser(family, help=FAMILY_TEXT[family],
                           description=f"albertlm {command} {family}: {FAMILY_TEXT[family]}; "
                           f"{COMMAND_TEXT[command].format(metric=METRIC_TEXT[family])} (docs/finetuning.md)")
        add_options(p, data_options(family))
        if command == "finetune":
            # the words the generated options use for the same things (`config.overrides.METAVARS`), and the
            # positional MODEL of embed, fill-mask, export and info (argparse said `--out OUT`, `--recipe RECIPE`)
            p.add_argument("--model", required=True, metavar="MODEL", help="checkpoint dir (ours or a transformers "
                           "ALBERT dir), a pretraining run dir (its newest checkpoint) or a fine-tuning run dir (its "
                           "best/)")
            p.add_argument("--out", required=True, metavar="DIR", help="run directory (best/, checkpoints/, "
                           "metrics.json, metrics.jsonl, predictions)")
            p.add_argument("--recipe", metavar="NAME", help="the paper's hyperparameters: 'paper' (for this task) or "
                           "a name (cola, sst2, ..., squad1.1, squad2.0, race, race-v2); options override it")
            p.add_argument("--resume", action="store_true", help="continue exactly from the newest checkpoint "
                           "in OUT/checkpoints, with the run's saved settings (only the run's length and logging "
                           "may change)")
            p.add_argument("--overwrite", action="store_true", help="start a new run in an OUT that holds another "
                           "one (its checkpoints, best/ and metrics are removed once everything else has been checked)")
            if family == "classify":
                from albertlm.tasks.options import BEST_METRICS   # no torch

                p.add_argument("--best-metric", choices=list(dict.fromkeys(sum(BEST_METRICS.values(), ()))),
                               help="the dev metric the best model (OUT/best) is kept by: accuracy, macro_f1, mcc "
                               "or f1 (the second class's, of two classes); pearson or spearman for --regression "
                               "(default: accuracy, or pearson); recorded in task.json, kept by --resume")
        elif command == "predict":
            p.add_argument("--model", required=True, metavar="MODEL",
                           help="a fine-tuned checkpoint (RUN/best, or RUN)")
            p.add_argument("--out", required=True, metavar="DIR", help="directory for the prediction files")
        else:  # evaluate
            p.add_argument("--model", metavar="MODEL",
                           help="a fine-tuned checkpoint (RUN/best, or RUN) to run on the data")
            p.add_argument("--predictions", metavar="FILE", help="score this predictions file instead (no model)")
            if family == "glue":
                # `extend`: `--score a --score b` is both, as the generated list options take every occurrence
                p.add_argument("--score", nargs="+", action="extend", metavar="RUN",
                               help="GLUE's overall score of fine-tuning runs, one per task (each RUN directory or its "
                               "metrics.json: its best dev metrics), instead of --model / --predictions: JSON on "
                               "stdout, the leaderboard's line (x100) on stderr")
            if score_options(family) is not None:
                add_options(p, score_options(family))
            p.add_argument("--out", metavar="DIR", help="also write prediction files here (with --model)")
        if command != "finetune" and family == "squad":
            # the head is the checkpoint's (`_squad_head`); finetune's flag given here was argparse's bare
            # "unrecognized arguments" line: accepted when it names the model's head, else refused in one line
            p.add_argument("--squad-head", dest=CHECKED_SQUAD_HEAD, choices=SQUAD_HEAD_CLASSES, metavar="{bert,xlnet}",
                           help="not needed: the head is the one the checkpoint holds; given, it must be that one "
                           "(bert: AlbertForQuestionAnswering, xlnet: google's v2.0 head, AlbertForSquadV2)")
        p.add_argument("--tokenizer", metavar="PATH", help="tokenizer file/dir (default: the files in the model dir, "
                       "or the tokenizer a pretraining run's data was built with)")
        add_options(p, finetune_options(family, command))
        if command == "finetune":
            _reword_help(p, "--lr", FINETUNE_LR_HELP)
            _reword_help(p, "--save-every", FINETUNE_SAVE_HELP)
        else:       # the length the model was fine-tuned with (`_config`), not the family's
            _reword_default(p, "--max-seq-length", RECORDED_LENGTH_DEFAULT.format(
                length=FAMILY_DEFAULTS[family].max_seq_length))
            _one_group(p, "evaluation options", ("train options", "dist options"))
            _hide(p, "--train")
            # the fields' comments are fine-tuning's (training rows, loss scaling, rank 0): said for this command
            if family == "glue":
                _reword_data_help(p, family, "--skip-bad-rows", SKIP_BAD_ROWS_HELP[command])
            _reword_help(p, "--precision", PRECISION_HELP[command])
            _reword_help(p, "--train.progress", PROGRESS_HELP)


def _one_group(parser: argparse.ArgumentParser, title: str, others: tuple[str, ...]) -> None:
    """The options of the groups titled `others` listed under `title` instead (the usage line is unchanged).
    predict / evaluate offer --precision, --device and --no-progress of the fine-tuning config: the help listed them
    under its sections' headings, "train options: the training loop (shared with pretraining)" and "dist options"."""
    target = next(group for group in parser._action_groups if group.title == title)
    for group in [group for group in parser._action_groups if group.title in others]:
        target._group_actions.extend(group._group_actions)
        parser._action_groups.remove(group)


def _hide(parser: argparse.ArgumentParser, flag: str) -> None:
    """A data option predict / evaluate never read, left out of their usage and help: the family's --train (its
    training file). Still taken, and unused as before, so that a script giving finetune's data options to predict
    as they are goes on working; never offered by the unknown-option hints (`cli.main._unknown_option_hint` skips
    hidden options: `predict glue --trai x` was told "did you mean --train?", an option predict ignores).
    (argparse's abbreviations are off, `cli.main.Parser`: `--trai` is not taken as --train either.)"""
    for action in parser._actions:
        if flag in action.option_strings:
            action.help = argparse.SUPPRESS


# the field's own comment describes pretraining's rate (the paper's LAMB 0.00176); the default shown after it
# is the family's fine-tuning one
FINETUNE_LR_HELP = "peak learning rate of fine-tuning (AdamW; --recipe paper: the paper's rate for the task)"
# the field's comment gives pretraining's meaning of 0; fine-tuning's 0 saves at every dev evaluation
FINETUNE_SAVE_HELP = ("steps between checkpoints; 0 = at every dev evaluation (and at the end, and on Ctrl-C / "
                      "SIGTERM)")


# predict / evaluate read at the length the model's run recorded (`_config`): the family's 128 (384, 512) was shown
RECORDED_LENGTH_DEFAULT = ("the length the model was fine-tuned with (its task.json; a transformers directory's "
                           "tokenizer_config.json), else {length}")


def _reword_default(parser: argparse.ArgumentParser, flag: str, default: str) -> None:
    """Replace the "(default: ...)" of a generated option's description."""
    for action in parser._actions:
        if flag in action.option_strings and action.help and "(default: " in action.help:
            action.help = action.help[:action.help.rindex("(default: ")] + f"(default: {default})"


# predict / evaluate read no training file and train nothing; the fields' comments say fine-tuning's meaning
SKIP_BAD_ROWS_HELP = {
    "predict": "skip malformed dev rows (too few fields, or more than the header; counted and reported) instead of "
               "stopping: they get no prediction and are not scored; test rows are never skipped (a submission needs "
               "a prediction for every row)",
    "evaluate": "skip malformed dev rows (too few fields, or more than the header; counted and reported) instead of "
                "stopping: with --model they are left out of the scores; with --predictions the gold file's are "
                "skipped as predict --skip-bad-rows skipped them (its predictions are numbered by the rows kept); "
                "test rows are never skipped"}
PRECISION_HELP = {
    "predict": "the precision the model runs in: fp32; bf16 autocast (CPU and CUDA; fp32 weights); fp16 autocast "
               "(CUDA only); a run's recorded dev scores are reproduced in the precision it was fine-tuned in (a note "
               "says when that is another)",
    "evaluate": "the precision the model (--model) runs in: fp32; bf16 autocast (CPU and CUDA; fp32 weights); fp16 "
                "autocast (CUDA only); a run's recorded dev scores are reproduced in the precision it was fine-tuned "
                "in (a note says when that is another)"}
PROGRESS_HELP = "a progress bar while the model runs, when stderr is a terminal (else progress lines)"


def _reword_data_help(parser: argparse.ArgumentParser, family: str, flag: str, doc: str) -> None:
    """Replace the description of one of the family's generated data options, keeping its "(default: ...)"."""
    from albertlm.config.overrides import field_doc
    from albertlm.tasks.options import OPTIONS   # no torch

    old = field_doc(OPTIONS[family], flag[2:].replace("-", "_")).replace("%", "%%")
    for action in parser._actions:
        if flag in action.option_strings and action.help:
            action.help = action.help.replace(old, doc, 1)


def _reword_help(parser: argparse.ArgumentParser, flag: str, doc: str) -> None:
    """Replace the description of a generated option, keeping its "(default: ...)"."""
    from albertlm.config.overrides import field_doc

    for action in parser._actions:
        if flag in action.option_strings and action.help:
            key = next(o for o in action.option_strings if o.startswith("--") and "." in o)[2:]
            action.help = action.help.replace(field_doc(FinetuneConfig, key).replace("%", "%%"), doc, 1)


# ---------------------------------------------------------------------------------------- settings
def _recipe(args, family: str, options=None) -> FinetuneConfig | None:
    """--recipe NAME, or --recipe paper: the one for the family and its data options."""
    from albertlm.tasks import recipes
    from albertlm.tasks.registry import paper_recipe_name

    name = getattr(args, "recipe", None)
    if not name:
        return None
    if name == "paper":
        name = paper_recipe_name(family, options or read_options(args, data_options(family)))
    return recipes.recipe(name)


# the keys that set the warmup (`--warmup-steps`, `--warmup-ratio`, or a --config file's)
WARMUP_KEYS = frozenset({"optim.warmup_steps", "optim.warmup_ratio"})


def _config(args, family: str, task_info: dict | None = None, options=None) -> FinetuneConfig:
    """The family's defaults or --recipe, then the checkpoint's sequence length, < --config FILE < flags. A recipe
    whose step count `--epochs` replaced (no --max-steps) keeps its warmup as the same share of the run
    (`recipes.warmup_as_share`), unless the warmup is given."""
    from albertlm.tasks import recipes

    recipe = _recipe(args, family, options)
    base = recipe or recipes.FAMILY_DEFAULTS[family]
    if task_info and "max_seq_length" in task_info:
        base = base.replace(max_seq_length=task_info["max_seq_length"])
    flags = finetune_options(family, args.command)
    cfg = read_options(args, flags, base)
    if recipe is not None and cfg.train.max_steps == 0 and not WARMUP_KEYS & given_values(args, flags).keys():
        cfg = read_options(args, flags, recipes.warmup_as_share(base))
    return cfg


def _resumed_config(args, saved: dict, options) -> FinetuneConfig:
    """`finetune --resume`: the run's saved config, with only the settings in RESUME_MAY_CHANGE changed by
    --recipe (less its steps), --config FILE or flags; changing any other is refused, naming it."""
    from albertlm.tasks import recipes

    flags = finetune_options(args.family, "finetune")
    keys = leaf_keys(FinetuneConfig)
    base = build(FinetuneConfig, {k: v for k, v in flatten(saved).items() if k in keys})
    recipe = _recipe(args, args.family, options)
    if recipe is not None and base.optim.warmup_steps < 0 <= recipe.optim.warmup_steps:
        # a run the recipe started for --epochs warms up for the recipe's share of it (`_config`): the same recipe
        recipe = recipes.warmup_as_share(recipe)
    asked = {k: v for k, v in flatten(recipe.to_dict()).items()
             if k not in ("train.max_steps", "train.epochs")} if recipe else {}
    given = given_values(args, flags)
    asked.update(given)
    cfg = build(base, GivenValues(asked, given.files))   # a refused value a --config file set names the file
    for key in keys:
        was, now = _get(base, key), _get(cfg, key)
        if was != now and key not in RESUME_MAY_CHANGE:
            raise UserError(f"--resume: the run was started with {key}={was!r}, now {now!r}; a resumed run keeps "
                            "its settings (drop the option; only the run's length and logging may change), or "
                            "start over with --overwrite")
    return cfg


def _get(config, key: str):
    for part in key.split("."):
        config = getattr(config, part)
    return config


def _data(args, recorded_info: dict, resume: bool = False):
    """The family's data options: the settings the model's run recorded (task.json; on --resume its saved
    config) are the defaults, a flag given overrides them (except where the model could not use it; on
    --resume, where the run would not continue as it started)."""
    from albertlm.tasks.registry import get_family

    family = get_family(args.family)
    options = data_options(args.family)
    recorded = family.recorded(recorded_info)
    given = family.canonical(command_line_values(args, options))
    changed = {k: v for k, v in given.items() if k in recorded and v != recorded[k]}
    if resume and changed:
        key = next(iter(changed))
        raise UserError(f"--resume: the run was started with {key}={recorded[key]!r}, now {changed[key]!r}; "
                        "drop the option, or start over with --overwrite")
    problem = family.fixed(recorded, given)
    if problem:
        raise UserError(f"{args.model}: {problem}")
    return build(options.config, {**recorded, **given})


def _model(path: str) -> Path:
    """A model directory; a fine-tuning run directory means its best/, a pretraining run its newest checkpoint.
    Which one is said once the command has checked everything (`_using`), so that an error stays one line."""
    from albertlm.tasks.inference import resolve_checkpoint

    return resolve_checkpoint(path)


def _using(given: str, model: Path) -> str | None:
    """The line naming the checkpoint a run directory stands for (None when the model was named itself)."""
    return f"using {model}" if Path(model) != Path(given) else None


def _tokenizer(args, model_dir: Path, resumed: dict | None = None):
    """--tokenizer, else the model directory's files, else the fine-tuning run's (`run_tokenizer`: a step_N holds
    none), else the pretraining run's tokenizer. `finetune` records the one it found in the run's config
    (`RECORDED_TOKENIZER`); on --resume (`resumed`: the run's saved config) another one than the run's is refused."""
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.load import find_tokenizer

    from albertlm.model.io import read_config
    from albertlm.tasks.inference import (check_tokenizer_fits, missing_run_tokenizer, recorded_tokenizer,
                                          run_tokenizer, tokenizer_difference)

    model_dir = Path(model_dir)
    found = Path(args.tokenizer) if args.tokenizer else (find_tokenizer(model_dir) or run_tokenizer(model_dir))
    recorded = recorded_tokenizer(resumed or {})
    if not args.tokenizer and recorded is not None:
        found = recorded       # --resume: the run's own, also where it was given as --tokenizer
    if found is None:
        raise UserError(f"no tokenizer files (spiece.model / vocab.txt / tokenizer.json) in {model_dir}"
                        f"{missing_run_tokenizer(model_dir)}; pass --tokenizer PATH")
    tokenizer = load_tokenizer(found)
    check_tokenizer_fits(tokenizer, read_config(model_dir)[0].vocab_size, found)
    if args.command == "finetune":
        args.tokenizer_found = found.resolve()     # recorded in the run's config (`_finetune`)
        if resumed is not None:
            _check_resumed_tokenizer(args.out, resumed, tokenizer, found)
        return tokenizer
    own = find_tokenizer(model_dir)
    # a fine-tuned checkpoint keeps the tokenizer it was trained with: another one would feed it other ids. For a
    # run's step_N, which holds none, that is the run's (its best/ copy, or the one the run recorded)
    reference, where = ((own, "the one saved beside it") if own is not None and own.resolve() == model_dir.resolve()
                        else (run_tokenizer(model_dir), "its run's"))
    if args.tokenizer and reference is not None and _task_info(model_dir):
        difference = tokenizer_difference(load_tokenizer(reference), tokenizer)
        if difference:
            raise UserError(f"--tokenizer {found} is not the tokenizer {model_dir} was fine-tuned with ({where}, "
                            f"{reference}): {difference}; leave --tokenizer out")
    return tokenizer


def _check_resumed_tokenizer(out: str, saved: dict, tokenizer, found: Path) -> None:
    """`finetune --resume` with another tokenizer than the run's (another --tokenizer, or none where the run was
    given one) trained the saved weights on other ids without a word: refused, naming the run's."""
    from albertlm.tasks.inference import RECORDED_TOKENIZER, recorded_tokenizer, tokenizer_difference
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.load import find_tokenizer

    best = Path(out) / "best"
    reference = find_tokenizer(best) if best.is_dir() else None
    recorded = saved.get(RECORDED_TOKENIZER)
    reference = reference or recorded_tokenizer(saved)
    if reference is None or Path(reference).resolve() == found.resolve():
        return
    difference = tokenizer_difference(load_tokenizer(reference), tokenizer)
    if difference:
        usable = recorded_tokenizer(saved) is not None    # what --resume without --tokenizer takes
        named = recorded if usable else reference
        fix = "leave --tokenizer out" if usable else f"give --tokenizer {reference}"
        raise UserError(f"--resume: the run in {out} was fine-tuned with the tokenizer {named}; {found} is another "
                        f"({difference}): a resumed run keeps its tokenizer ({fix}), or start over with --overwrite")


def _task_info(model_dir) -> dict:
    """What the fine-tuning recorded beside the checkpoint (task.json); for a run's `checkpoints/step_N`, which has
    none, the same from the run_config.json saved in it (family, task, labels, max_seq_length, ...: `predict` there
    asked for --task and --tokenizer and read at the family's default length)."""
    import dataclasses

    from albertlm.tasks.finetune import TASK_FILE
    from albertlm.tasks.inference import step_record

    path = Path(model_dir) / TASK_FILE
    if path.is_file():
        return json.loads(path.read_text())
    saved = step_record(Path(model_dir))   # {} for a pretraining checkpoint: no task
    settings = {f.name for f in dataclasses.fields(FinetuneConfig)} - {"max_seq_length"}
    return {k: v for k, v in saved.items() if k not in settings and k != "model"}


def _exported_length(model_dir: Path, info: dict) -> dict:
    """A model without a fine-tuning record of its length (a transformers directory: our `convert --to hf` export,
    which writes the fine-tuned max_seq_length there, or a Hub model): tokenizer_config.json's `model_max_length`
    as its length, when it fits the position embeddings, as `export onnx` reads it ({} otherwise: the family's
    default). Without it, predict on the export of a run fine-tuned at 32 read at 128: other probabilities than
    the run's best/ on most rows, without a word."""
    from albertlm.errors import json_object_or_empty

    if "max_seq_length" in info:
        return {}
    length = json_object_or_empty(model_dir / "tokenizer_config.json").get("model_max_length")
    positions = json_object_or_empty(model_dir / "config.json").get("max_position_embeddings")
    fits = all(isinstance(x, int) and not isinstance(x, bool) for x in (length, positions)) and 0 < length <= positions
    return {"max_seq_length": length} if fits else {}


def _transformers_labels(model_dir: Path) -> dict:
    """A classifier without task.json (a transformers directory, our `convert --to hf` export): the classes
    its config.json names (id2label), in its order, as the recorded label set."""
    from albertlm.interop.hf import read_labels

    names = read_labels(model_dir).get("id2label") or {}
    return {"labels": [str(names[key]) for key in sorted(names, key=int)]} if len(names) > 1 else {}


# -------------------------------------------------------------------------------------------- run
def run(args, command: str) -> int:
    args.command = command
    if command != "finetune":
        _one_process(command)
    return {"finetune": _finetune, "predict": _predict, "evaluate": _evaluate}[command](args)


def _one_process(command: str) -> None:
    """predict / evaluate have no distributed path: under torchrun every process ran the whole prediction, printed
    the metrics and wrote the same files. Refused on every rank before anything is read; the first rank says it
    (`cli.main`), the others wait for torchrun to end them (`errors.other_rank_says`)."""
    import os

    size = os.environ.get("WORLD_SIZE", "").strip()
    if size.isdecimal() and int(size) > 1:
        raise UserError(f"run {command} in one process, without torchrun (WORLD_SIZE={int(size)}: every process "
                        f"would run the whole {command}, print its metrics and write the same files)")


def _finetune(args) -> int:
    from albertlm.cli.guards import check_out_keeps_source
    from albertlm.tasks.finetune import RUN_FILES, run_finetune
    from albertlm.tasks.inference import RECORDED_TOKENIZER
    from albertlm.tasks.registry import get_family
    from albertlm.training.checkpoint import check_run_dir, check_run_kind
    from albertlm.training.distributed import check_backend, is_main_process, shutdown
    from albertlm.training.precision import check_precision

    if args.resume and args.overwrite:
        raise UserError("--resume continues the run in --out and --overwrite replaces it: give one of them")
    from albertlm.cli.train_commands import check_config_records

    check_config_records(args, finetune_options(args.family, "finetune"), "finetune")
    # whose run --out holds, before its checkpoint's config is read as a fine-tuning's: `finetune --resume` of a
    # pretraining run compared its settings as a fine-tuning's ("max_seq_length=128, now 24") or died in a
    # TypeError on its `model` section
    check_run_kind(args.out, "fine-tuning")
    saved = _saved_run(args.out) if args.resume else None
    if args.resume and saved is None:   # as `pretrain --resume`
        from albertlm.training.checkpoint import no_run_advice

        raise UserError(f"no run to resume in {args.out} (no checkpoint in {Path(args.out) / 'checkpoints'})"
                        f"{no_run_advice(args.out)}")
    if saved is not None and saved.get("family", args.family) != args.family:
        raise UserError(f"--resume: the run in {args.out} fine-tunes {saved['family']}, not {args.family}")
    options = _data(args, saved or {}, resume=saved is not None)
    best_metric = _best_metric(args, options, saved)
    cfg = _resumed_config(args, saved, options) if saved is not None else _config(args, args.family, options=options)
    # before the model or the data is read: what the loop would refuse once both had loaded
    check_precision(cfg.train.precision, check_backend(cfg.dist.backend, cfg.dist.device))
    model = _model(args.model)
    if saved is None and args.family == "squad":
        cfg = _squad_head_of_model(args, cfg, model)
    if saved is not None:
        _check_resumed_model(args.out, saved, model)
    if not args.resume:      # --overwrite would remove the checkpoint the run starts from
        check_out_keeps_source(args.out, args.model, model, "--model", RUN_FILES)
    check_run_dir(args.out, args.resume, args.overwrite, RUN_FILES)   # before the data is read and tokenized
    tokenizer = _tokenizer(args, model, saved)
    spec = get_family(args.family).build_spec(options, tokenizer, cfg, True, saved or {})
    if best_metric is not None:
        from albertlm.tasks.specs import choose_best_metric

        choose_best_metric(spec, best_metric)
    spec.info["max_seq_length"] = cfg.max_seq_length
    # where the tokenizer is: each step checkpoint's run_config.json records it (a step holds no tokenizer files,
    # and best/, which does, exists only once the run has evaluated); `run_tokenizer` reads it
    spec.info[RECORDED_TOKENIZER] = str(args.tokenizer_found)
    log = _after_checks(_using(args.model, model), _version_shown(args, options, spec.info)) if is_main_process() \
        else lambda *a: None
    try:
        metrics = run_finetune(spec, model, tokenizer, cfg, args.out, resume=args.resume, overwrite=args.overwrite,
                               log=log)
    finally:
        shutdown()
    if metrics.get("status") == "interrupted":
        return 130
    if is_main_process() and "best" in metrics:
        # stopped by the time budget: the best so far, and how far the run got (`--resume` goes on)
        stopped = ({"status": metrics["status"], "step": metrics["step"], "total_steps": metrics["total_steps"]}
                   if metrics.get("status") != "done" else {})
        from albertlm.tasks.finetune import json_safe   # a NaN score is null, as in metrics.json
        from albertlm.training.metrics import console_line

        # a console that went away (the metrics are in OUT/metrics.json): the run's exit status stands, as pretrain's
        console_line(json.dumps(json_safe({"best": metrics["best"], "out": str(args.out), **stopped}), indent=2,
                                 allow_nan=False), sys.stdout)
    return 0


def _check_resumed_model(out: str, saved: dict, model: Path) -> None:
    """`finetune --resume --model B` on a run started from A trained on silently (B's tokenizer feeding the saved
    weights other ids; best/ kept A's): refused where the run's recorded model is still there and is another one
    (a run whose model has moved since resumes from the one given)."""
    import os

    started = saved.get("model")
    if not started or not Path(started).exists():
        return
    if not os.path.samefile(started, model):
        raise UserError(f"--resume: the run in {out} was started from --model {started}, now {model}; a resumed run "
                        "keeps its model (give that one, or start over with --overwrite)")


def _best_metric(args, options, saved: dict | None) -> str | None:
    """classify's `--best-metric`, checked before the data is read (one a regression does not compute, or on
    `--resume` another than the run keeps its best model by: its best record was chosen by that one). A resumed run
    keeps its own (a run recorded without one chose by accuracy, or Pearson). None: the family's default."""
    if args.family != "classify":
        return None
    from albertlm.tasks.options import check_best_metric

    given = getattr(args, "best_metric", None)
    if given:
        check_best_metric(given, options.regression, 2)   # the number of classes is checked once the labels are read
    if saved is None:
        return given
    kept = saved.get("best_metric") or check_best_metric(None, options.regression, 2)
    if given and given != kept:
        raise UserError(f"--resume: the run keeps its best model by {kept}, now --best-metric {given}; drop the "
                        "option, or start over with --overwrite")
    return kept


def _after_checks(using: str | None, first: str | None = None):
    """The run's log (stdout, rank 0), saying first on stderr which checkpoint a run directory stood for, and
    on stdout the line `first` (the SQuAD version the data showed): its first line comes once run_finetune has
    loaded the model and checked the run, so a refused run's error is its only line on stderr. A console that went
    away (`| tee` whose tee ended, a closed ssh session's terminal) costs only its lines (`metrics.console_line`): the
    run's first line raised BrokenPipeError, which the CLI took for `| head` and exited 0, nothing trained."""
    from albertlm.training.metrics import console_line

    pending = [using] if using else []
    heading = [first] if first else []

    def log(*parts) -> None:
        while pending:
            console_line(pending.pop(), sys.stderr)
        while heading:
            console_line(heading.pop(), sys.stdout)
        console_line(" ".join(map(str, parts)), sys.stdout)

    return log


def _version_shown(args, options, info: dict) -> str | None:
    """`finetune squad` without --version: the line that says which version the files showed (it trained silently
    by it; a v2.0 export of answerable questions only, e.g. the first rows of `squad_v2`'s train split as Parquet
    or JSON lines, has nothing that shows v2.0 and is read as v1.1). None where --version was given (or recorded)."""
    if args.family != "squad" or getattr(options, "version", "") or not info.get("version"):
        return None
    version = str(info["version"])
    line = f"SQuAD v{version}: the version the data shows (no --version given"
    if version.startswith("1"):     # a v2.0 file may show no more than this: v2.0 is never read as v1.1 by mistake
        return f"{line}; a part of a v2.0 set whose questions all have answers shows it too: give --version 2.0 then)"
    return f"{line})"


def _saved_run(out: str) -> dict | None:
    """The run config saved with the newest checkpoint in OUT (None: nothing to resume)."""
    from albertlm.errors import read_json_object
    from albertlm.model.io import latest_checkpoint

    last = latest_checkpoint(out)
    if last is None or not (last / "run_config.json").is_file():
        return None
    return read_json_object(last / "run_config.json", "the run's config")


def _run_checkpoint(args) -> dict:
    """Metrics (and prediction files in args.out) of a fine-tuned checkpoint on the given data."""
    from albertlm.tasks.finetune import run_evaluation
    from albertlm.tasks.inference import pick_device
    from albertlm.tasks.registry import get_family
    from albertlm.training.precision import check_precision

    family = get_family(args.family)
    given = args.model
    args.model = str(_model(args.model))
    _check_out_keeps_run(args.out, given, Path(args.model))
    info = _task_info(args.model)
    _check_family(args, info)
    if not info and args.family == "classify":
        info = _transformers_labels(Path(args.model))
    options = _data(args, info)
    _check_task(args, info, options)
    cfg = _config(args, args.family, {**info, **_exported_length(Path(args.model), info)})
    # before the data is read: fp16 on a CPU, refused with inference's reason (run_evaluation gave training's)
    check_precision(cfg.train.precision, pick_device(cfg.dist.device), training=False)
    if args.family == "squad":      # the head is the checkpoint's (a run_squad_v2.py import has no task.json)
        cfg = cfg.replace(squad_head=_squad_head(Path(args.model)))
        _check_given_squad_head(args, Path(args.model))
    tokenizer = _tokenizer(args, Path(args.model))
    spec = family.build_spec(options, tokenizer, cfg, False, info)
    if not spec.eval_sets:
        raise UserError(f"no data to {args.command}: give {family.data_flags}")
    reordered = _glue_class_order(spec, Path(args.model), options) if args.family == "glue" else None
    if args.family == "glue":
        _check_out_keeps_other_predictions(args.out, spec, options)
    with _staged_predictions(args.out) as staging:
        metrics = run_evaluation(spec, args.model, tokenizer, cfg, staging)
        if staging is not None:
            _install_predictions(staging, Path(args.out), metrics, args.family)
    using = _using(given, Path(args.model))
    if using:                               # stderr: stdout is the metrics JSON
        print(using, file=sys.stderr)
    if reordered:
        print(reordered, file=sys.stderr)
    other_precision = _precision_note(args, Path(args.model), info, cfg.train.precision)
    if other_precision:
        print(other_precision, file=sys.stderr)
    for line in spec.warnings:              # once the run has worked: a refused one's error is its only line
        say_warning(line)
    return metrics


PREDICTION_STAGING = ".tmp-predict-"   # the folder in --out the files of one predict / evaluate are written into


@contextlib.contextmanager
def _staged_predictions(out: str | None):
    """The folder the prediction files of `predict` / `evaluate --model --out` are written into (None without --out),
    made in --out (made first where it is not there: the same file system, so the files move in by rename, as
    `export` stages its files), and removed at the end. The files of every set moved in together at the end
    (`_install_predictions`): a later set's write that failed (a full disk, no permission, Ctrl-C) left an earlier
    set's file in --out (`--dev d.tsv --test t.tsv`: dev_predictions.tsv replaced, no submission/ file) while the
    command failed. Folders made for --out are removed again where nothing came of it."""
    import shutil
    import tempfile

    if out is None:
        yield None
        return
    target = Path(out)
    if target.exists() and not target.is_dir():   # run_evaluation's check: before a folder is made in it
        raise UserError(f"--out {out} exists and is not a directory; give a directory for the prediction files")
    made = [parent for parent in [target, *target.parents] if not parent.exists()]
    try:
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=PREDICTION_STAGING, dir=target))
    except OSError as exc:
        _remove_if_empty(made)
        raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield staging
    except (UserError, OSError) as exc:   # a staged file's write said as the file's in --out
        said = str(exc) if isinstance(exc, UserError) else f"{exc.strerror or exc}: {exc.filename}"
        if str(staging) not in said:
            raise
        raise UserError(said.replace(str(staging), str(target))) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_if_empty(made)


def _remove_if_empty(folders: list[Path]) -> None:
    """Remove the folders made for --out (innermost first) that hold nothing."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _install_predictions(staging: Path, out: Path, metrics: dict, family: str) -> None:
    """Move the files staged (`_staged_predictions`) into --out in one step (`convert_commands.swap_into_place`: the
    files they replace are put back if a move fails, and Ctrl-C / SIGTERM wait for the moves), and name them there
    in `metrics["predictions_written"]`. A SQuAD v1.1 prediction removes an earlier v2.0 prediction's null_odds.json
    (as its writer did in --out), in the same step."""
    from albertlm.cli.convert_commands import swap_into_place

    staged = sorted(path for path in staging.rglob("*") if path.is_file())
    removed = []
    if family == "squad" and (staging / "predictions.json").is_file() and not (staging / "null_odds.json").exists():
        removed.append(out / "null_odds.json")
    moves = [(path, out / path.relative_to(staging)) for path in staged]
    device = staging.stat().st_dev
    apart = next((target.parent for _, target in moves if target.parent.is_dir()
                  and target.parent.stat().st_dev != device), None)
    if apart is not None:   # (a link to another disk): no file moves there by rename, nor is an earlier one put back
        raise UserError(f"--out {out}: {apart} is on another file system than {out} (a link or a mount point), and the "
                        f"prediction files are written in {out} and moved in together; give an --out whose folders "
                        "are on its own file system")
    try:
        swap_into_place(moves, removed, staging / ".earlier")
    except OSError as exc:
        failed = next((str(out / Path(name).relative_to(staging)) if str(name).startswith(str(staging)) else str(name)
                       for name in (exc.filename, exc.filename2) if name), str(out))
        raise UserError(f"--out {out}: cannot move the prediction files into it ({failed}: {exc.strerror or exc}); "
                        "it holds what it held before") from None
    written = metrics.get("predictions_written", {})
    for name, paths in written.items():
        written[name] = [str(out / Path(path).relative_to(staging)) for path in paths]


def _check_out_keeps_run(out: str | None, given: str, model_dir: Path) -> None:
    """predict / evaluate --out: not a fine-tuning run's directory (the model's own run, RUN for RUN/best or
    RUN/checkpoints/step_N, or another run's, one holding best/task.json). Its dev_predictions.tsv (and submission/,
    predictions.json, ...) record the run's best dev evaluation; the predictions of `--model RUN --out RUN` on whatever
    data was given silently replaced them. predict has no --overwrite: another --out is the way."""
    from albertlm.tasks.finetune import RUN_FILES, TASK_FILE

    if not out or not Path(out).is_dir():
        return
    model_dir = Path(model_dir)
    # a folder named best/ in a run (beside its checkpoints/ or metrics), not any model folder that is called so
    in_run = any((model_dir.parent / name).exists() for name in RUN_FILES if name != "best")
    runs = [model_dir.parent] if model_dir.name == "best" and in_run else []
    if model_dir.parent.name == "checkpoints":
        runs.append(model_dir.parent.parent)
    target = Path(out).resolve()
    own = any(run.resolve() == target for run in runs)
    if not own and not (target / "best" / TASK_FILE).is_file():
        return
    which = f"the directory of the run --model {given} comes from" if own else "a fine-tuning run's directory"
    raise UserError(f"--out {out} is {which}: its prediction files (dev_predictions.tsv, ...) record the run's best "
                    f"dev evaluation and would be replaced; give another --out, such as {Path(out) / 'predictions'}")


def _check_out_keeps_other_predictions(out: str | None, spec, options) -> None:
    """predict / evaluate glue --out: the dev predictions are `<split>_predictions.tsv`, named by the split, not the
    task, so another task's dev predictions in that --out (`predict --task sst2 --dev ... --out sub`, then `--task
    mrpc --dev ... --out sub`) were silently replaced, while the submission files (`submission/<Task>.tsv`) of several
    tasks collect there. Refused before the model runs where the file there is not of this dev set (another number of
    predictions, labels the task has not: `glue.other_predictions`); an earlier prediction of the same set is replaced
    as before."""
    from albertlm.tasks import glue

    if not out:
        return
    task = glue.get_task(options.task)
    for eval_set in spec.eval_sets:
        path = Path(out) / f"{eval_set.name}_predictions.tsv"
        if eval_set.score is None or not path.is_file():
            continue
        other = glue.other_predictions(task, path, len(eval_set.features))
        if other:
            # the file names no task (SST-2's and MRPC's are both 0/1 rows): another task's, or this task's of a dev
            # file since changed (a row added, a bad row fixed)
            raise UserError(f"--out {path.parent} holds {path.name} of another dev set ({other}), which these "
                            f"predictions of {task.name}'s would replace: if it is another task's, give these their "
                            f"own --out, such as {path.parent / task.name}; if it is an earlier prediction of {task.name}'s dev file, remove {path} to "
                            "replace it (submission/<Task>.tsv files of several tasks collect in one --out; a dev "
                            "file's predictions are named by its split only)")


def _precision_note(args, model_dir: Path, info: dict, used: str) -> str | None:
    """The note that the checkpoint was fine-tuned (and its dev set scored) in another precision than the one predict /
    evaluate run in: a bf16 run's recorded scores came from bf16 and are not reproduced in fp32 (a tiny RACE run:
    accuracy 0.273 for the 0.364 its metrics.json records; with --precision bf16 the same). Not made the default: a
    run fine-tuned in bf16 on a GPU would predict in emulated bf16, slowly, on a CPU without it. The precision is the
    one best/task.json records (`RECORDED_PRECISION`), else a step_N's run_config.json's, else for a run's best/
    saved before it was recorded there, the run's metrics.json config's (a run keeps its precision on --resume);
    None where none is known or it is the one used."""
    from albertlm.errors import json_object_or_empty
    from albertlm.tasks.finetune import RECORDED_PRECISION
    from albertlm.tasks.inference import step_record

    recorded = info.get(RECORDED_PRECISION)
    if not isinstance(recorded, str):
        record = step_record(model_dir)
        if not record and model_dir.name == "best" and info:
            record = json_object_or_empty(model_dir.parent / "metrics.json").get("config")
        train = record.get("train") if isinstance(record, dict) else None
        recorded = train.get("precision") if isinstance(train, dict) else None
    if not isinstance(recorded, str) or recorded == used:
        return None
    doing = "predicting" if args.command == "predict" else "evaluating"
    where = " on a CUDA device" if recorded == "fp16" else ""
    return (f"{program_name()}: note: {model_dir} was fine-tuned in {recorded}; its recorded scores come from "
            f"{recorded} (give --precision {recorded}{where} to reproduce them); {doing} in {used}")


def _squad_head_of_model(args, cfg: FinetuneConfig, model: Path) -> FinetuneConfig:
    """`finetune squad` from a checkpoint holding google's SQuAD v2.0 head (an earlier `--squad-head xlnet` run,
    a run_squad_v2.py import) goes on with that head when neither --squad-head nor --recipe chose one: it trained
    a fresh BERT head instead, the trained one dropped with only a "freshly initialised" line, while `predict` used
    the checkpoint's. An explicit --squad-head bert on such a checkpoint is said in one warning line."""
    if _squad_head(model) != "xlnet" or cfg.squad_head == "xlnet":
        return cfg
    if "squad_head" in given_values(args, finetune_options(args.family, "finetune")) or getattr(args, "recipe", None):
        say_warning(f"{model} holds google's SQuAD v2.0 head (AlbertForSquadV2); squad_head {cfg.squad_head!r} trains "
                    "a new BERT head in its place (its answer_class and span layers are not used)")
        return cfg
    return cfg.replace(squad_head="xlnet")


def _squad_head(model_dir: Path) -> str:
    """The SQuAD head a checkpoint holds: "xlnet" for google's v2.0 head (AlbertForSquadV2), else "bert" (a
    checkpoint without a SQuAD head is refused later, naming what it lacks)."""
    from albertlm.model.registry import saved_class_name

    try:
        return "xlnet" if saved_class_name(model_dir) == "AlbertForSquadV2" else "bert"
    except UserError:   # no weights, an unknown class: said by the checks that load the model
        return "bert"


def _check_given_squad_head(args, model_dir: Path) -> None:
    """`predict` / `evaluate --model` with --squad-head: the head is read from the checkpoint, so the flag may only
    name the one it holds; another is one line saying which it holds. A checkpoint with no SQuAD head is left to
    the checks that load it (they name what it lacks)."""
    from albertlm.model.registry import saved_class_name

    given = getattr(args, CHECKED_SQUAD_HEAD, None)
    if not given:
        return
    try:
        held = saved_class_name(model_dir)
    except UserError:
        return
    head = next((name for name, cls in SQUAD_HEAD_CLASSES.items() if cls == held), None)
    if head is not None and head != given:
        raise UserError(f"--squad-head {given}: {model_dir} holds the {head} SQuAD head ({held}); {args.command} "
                        f"uses the head the checkpoint holds: leave --squad-head out")


def _glue_class_order(spec, model_dir: Path, options) -> str | None:
    """A classifier that names its classes in another order than GLUE's (a transformers MNLI model fine-tuned
    on `datasets`' GLUE: entailment, neutral, contradiction): its outputs are read by name, each eval set's
    logits put in GLUE's order before they are scored and written. Returns the line that says so, or None."""
    import dataclasses

    from albertlm.interop.hf import read_labels
    from albertlm.tasks import glue

    task = glue.get_task(options.task)
    id2label = read_labels(model_dir).get("id2label")
    order = glue.model_class_order(task, id2label)
    if order is None:
        return None

    def reordered(call):
        return None if call is None else lambda out, *rest: call({**out, "logits": out["logits"][:, order]}, *rest)

    spec.eval_sets = [dataclasses.replace(s, score=reordered(s.score), write=reordered(s.write))
                      for s in spec.eval_sets]
    names = ", ".join(str(id2label[key]) for key in sorted(id2label, key=int))
    return (f"{model_dir} names its classes {names} (its id2label), not in {task.name}'s order "
            f"{', '.join(task.labels)}: its outputs are read by those names")


def _predict(args) -> int:
    _print_metrics(_run_checkpoint(args))
    return 0


def _print_metrics(metrics: dict) -> None:
    """The metrics JSON on stdout, strict: a NaN or infinite score (the MSE of a diverged regression) is null, as
    in metrics.json (a bare `Infinity` is not JSON: jq and JavaScript's JSON.parse refuse it)."""
    print(json.dumps(finite(metrics), indent=2, allow_nan=False))


def finite(data):
    """`data` with each NaN or infinite number made None (tasks.finetune.json_safe, without importing torch)."""
    import math
    from numbers import Integral, Real

    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    if isinstance(data, Real) and not isinstance(data, Integral):
        return float(data) if math.isfinite(data) else None
    return data


def _evaluate(args) -> int:
    from albertlm.tasks.registry import get_family

    if getattr(args, "score", None):
        return _glue_score(args)
    if bool(args.model) == bool(args.predictions):
        scored = " (or --score RUN ... for GLUE's overall score)" if args.family == "glue" else ""
        raise UserError(f"give either --model CHECKPOINT or --predictions FILE{scored}")
    if args.predictions:
        if "null_threshold" in command_line_values(args, data_options(args.family)):   # was read and ignored
            raise UserError("--null-threshold applies to a model's predictions (--model); with --predictions, "
                            "--na-probs null_odds.json --na-prob-thresh X nulls the answers whose odds exceed X")
        extra = score_options(args.family)
        metrics = get_family(args.family).score(read_options(args, data_options(args.family)), args.predictions,
                                                read_options(args, extra) if extra else None,
                                                warn=say_warning)
    else:
        metrics = _run_checkpoint(args)
    _print_metrics(metrics)
    return 0


# each task as GLUE's leaderboard spells it (MNLI's two columns are one task here: their mean is its score)
GLUE_COLUMNS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
                "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def _glue_score(args) -> int:
    """`evaluate glue --score RUN ...`: GLUE's overall score of one fine-tuning run per task (`glue.runs_glue_score`:
    each run's best dev metrics). stdout: its result as JSON (score, tasks, missing, runs; on the metrics' 0-1 scale,
    as every metrics JSON here). stderr: the leaderboard's line (times 100, one decimal), a warning naming the tasks of
    the nine no run gave (the mean is then not GLUE's score) and one per run a time budget stopped."""
    from albertlm.tasks.glue import runs_glue_score

    named = {"--model": args.model, "--predictions": args.predictions, "--out": args.out, "--tokenizer": args.tokenizer}
    unused = _options_given(args) + [flag for flag, value in named.items() if value]
    if unused:
        one = len(unused) == 1
        raise UserError(f"--score reads each run's metrics.json and runs no model: {', '.join(unused)} "
                        f"{'is' if one else 'are'} not used with it (leave {'it' if one else 'them'} out)")
    result = runs_glue_score(args.score)
    stopped = [line for line in map(_run_stopped, result["runs"].values()) if line]
    shown = ", ".join(f"{GLUE_COLUMNS[task]} {100 * value:.1f}" for task, value in result["tasks"].items())
    print(f"GLUE dev score {100 * result['score']:.1f} ({shown})", file=sys.stderr)
    if result["missing"]:
        missing = [GLUE_COLUMNS[task] for task in result["missing"]]
        say_warning(f"not GLUE's score: no run of {', '.join(missing)}; this is the mean over the "
                    f"{len(result['tasks'])} task(s) given (GLUE's is over all nine)")
    for line in stopped:
        say_warning(line)
    _print_metrics(result)
    return 0


def _options_given(args) -> list[str]:
    """The data and evaluation options given on the command line (their first spelling each), for a mode that
    uses none of them."""
    flags = []
    for options in (data_options(args.family), finetune_options(args.family, args.command)):
        start = options.dest("")
        for dest, given in vars(args).items():
            if dest.startswith(start) and dest != options.dest("__file__") and given:
                flags.append(given[0][0])
    return flags


def _run_stopped(run: str) -> str | None:
    """The line saying a run's metrics.json is of a run the time budget stopped (`"status": "budget"`: its best so
    far, which `finetune --resume` goes on from), or None."""
    from albertlm.errors import json_object_or_empty

    path = Path(run) / "metrics.json" if Path(run).is_dir() else Path(run)
    record = json_object_or_empty(path)
    if record.get("status", "done") == "done":
        return None
    return (f"{run}: the run stopped at step {record.get('step')} of {record.get('total_steps')} "
            f"(status {record.get('status')!r}): its best dev metrics so far are scored (`finetune --resume` "
            "finishes it)")


def _check_family(args, info: dict) -> None:
    if info and info.get("family") != args.family:
        raise UserError(f"{args.model} was fine-tuned for {info.get('family')}, not {args.family}")


def _check_task(args, info: dict, options) -> None:
    """GLUE: the model's task is the one asked for; AX (MNLI's diagnostic set) needs an MNLI model."""
    task = getattr(options, "task", None)
    wanted = "mnli" if task == "ax" else task
    if info.get("task") and wanted and info["task"] != wanted:
        why = " (AX is MNLI's diagnostic set: give an MNLI model)" if task == "ax" else ""
        raise UserError(f"{args.model} was fine-tuned on {info['task']}, not {wanted}{why}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `albertlm finetune|predict|evaluate ...`")
