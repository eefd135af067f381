"""`albertlm pretrain`, `albertlm evaluate CKPT --data DIR` and `albertlm plot RUN_DIR [RUN_DIR ...]`.

Every field of the run configuration is an option generated from the dataclasses (`--model.hidden_size=64`,
`--optim.weight_decay=0.0`, `--train.keep_last=5`); the everyday ones also have short names (`--lr`).
Precedence: the paper recipe with the preset's model (or, with --resume, the run's saved config)
< `--config FILE` < the command line (see `albertlm.config.overrides`); with --init-from the checkpoint's
model settings replace the preset's (its dropouts too, unless given), and a --model.* value other than a dropout
may only repeat them.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from albertlm.config.overrides import Options, add_options, build, given_values
from albertlm.config.run import RESUME_MAY_CHANGE as RUN_RESUME_MAY_CHANGE
from albertlm.config.run import PATH_KEYS, RunConfig
from albertlm.errors import UserError

PRETRAIN = Options(RunConfig, config_file=True, negations={"--no-progress": "train.progress"}, plain={
    "--data": "data.path", "--eval-data": "data.eval_path", "--max-steps": "train.max_steps",
    "--batch-size": "train.batch_size", "--micro-batch-size": "train.micro_batch_size", "--lr": "optim.lr",
    "--warmup-steps": "optim.warmup_steps", "--precision": "train.precision", "--compile": "train.compile",
    "--save-every": "train.save_every", "--eval-every": "train.eval_every", "--log-every": "train.log_every",
    "--seed": "train.seed"})


@dataclass
class EvaluateOptions:
    """`albertlm evaluate CHECKPOINT`: a checkpoint on pretraining data."""
    data: str                            # pretraining data directory (SOP, NSP or MLM-only), as `albertlm data build` writes it
    batch_size: int = 32                 # examples per forward pass
    max_batches: int = 0                 # evaluate at most this many batches; 0 = all the data
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"   # autocast dtype of the forward pass (fp16: CUDA only)
    device: str = "auto"                 # auto (CUDA when available, else cpu), cpu, cuda, cuda:N
    progress: bool = True                # a progress bar over the batches (stderr)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.max_batches < 0:
            raise UserError(f"--max-batches must be >= 0 (0 = all the data), got {self.max_batches}")


EVALUATE = Options(EvaluateOptions, negations={"--no-progress": "progress"}, required=True)   # --data DIR


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    {"pretrain": _add_pretrain, "evaluate": _add_evaluate, "plot": _add_plot}[command](parser)


def run(args: argparse.Namespace, command: str) -> int:
    return {"pretrain": _pretrain, "evaluate": _evaluate, "plot": _plot}[command](args)


# ------------------------------------------------------------------------------------------------ pretrain
def _add_pretrain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="run directory: checkpoints, metrics, config")
    p.add_argument("--resume", action="store_true",
                   help="continue exactly from the newest checkpoint in --out (its run_config.json is the base)")
    p.add_argument("--overwrite", action="store_true",
                   help="start a new run in an --out that holds another run (its checkpoints, metrics and "
                        "config are removed once everything else has been checked)")
    p.add_argument("--resume-or-start", action="store_true",
                   help="--resume where --out holds a run, else start a new one there (saying so): for a job "
                        "script relaunched with the same command after a preemption, whose first launch may have "
                        "been killed before it wrote anything")
    p.add_argument("--dry-run", action="store_true", help="check the inputs, print the resolved config and exit")
    add_options(p, PRETRAIN)


def resolve_run_config(args: argparse.Namespace, notes: list[str] | None = None) -> RunConfig:
    """The run config: the recipe (or the run's saved config on --resume) < --config FILE < command line,
    then resolved against the data and checkpoints (`training.pretrain.resolve_run`). Lines the run should say
    as it starts (a resume on data at a new path) are added to `notes`."""
    from albertlm.config.presets import get_preset
    from albertlm.config.run import paper_recipe
    from albertlm.training.pretrain import resolve_run

    from albertlm.training.distributed import check_backend

    values = _values(args)
    saved = _saved_config_file(args.out) if args.resume else None
    resumed = saved is not None
    if resumed:
        base = read_saved_run_config(saved)
    else:
        preset = values.get("preset", RunConfig.preset)
        _check_preset_against_files(args)
        base = paper_recipe(get_preset(_recipe_preset(preset, values))).replace(preset=preset)
    run = build(base, values)
    if resumed and run.init_from and base.init_from and _started_from(base.init_from, run.init_from):
        run = run.replace(init_from=base.init_from)       # the run's start, as it recorded it
    if resumed:
        _check_resume_changes(base, run, args.out, notes)
        _check_recorded_paths(base, run, saved)
    check_backend(run.dist.backend, run.dist.device)        # before the data or a checkpoint is read
    # recorded absolute, so that `--resume` works from any directory (an older run's relative ones are read
    # from the current directory, as before)
    run = run.absolute_paths()
    # a resumed run keeps its recorded vocabulary: data rebuilt in place with another tokenizer is then said to
    # be other data (`StepData.check_resume`), not blamed on --model.* options the user did not give
    resolved = resolve_run(run, args.out, args.resume,
                           follow_data_vocab="model.vocab_size" not in values and not resumed,
                           dropout_from_checkpoint=tuple(key.split(".", 1)[1] for key in INIT_KEEPS
                                                         if key not in values))
    if resolved.init_from and not resumed:
        _check_init_model(values, resolved)
    _check_token_types(resolved)
    return resolved


# the model settings a run started from a checkpoint may set (`training.pretrain.resolve_run`): given (command line
# or --config), the run's value; else the checkpoint's (a checkpoint trained with dropout 0.1 trained on with the
# preset's 0 without a word)
INIT_KEEPS = ("model.hidden_dropout", "model.attention_dropout", "model.classifier_dropout")


def _check_init_model(values: dict, run: RunConfig) -> None:
    """`--init-from`'s checkpoint sets the architecture: a `--model.*` value (command line or --config) that
    differs from it is refused, naming both (it was dropped without a word, and the run trained the checkpoint's
    model). The dropouts may be given (else they are the checkpoint's); the same value as the checkpoint's (a
    saved run_config.json given as --config) is fine."""
    for key in sorted(values):
        if not key.startswith("model.") or key in INIT_KEEPS:
            continue
        name = key.split(".", 1)[1]
        if values[key] != getattr(run.model, name):
            raise UserError(f"--{key} {values[key]!r}: --init-from {run.init_from} has "
                            f"{name}={getattr(run.model, name)!r}, and a run started from a checkpoint has its "
                            "architecture (only the dropouts --model.hidden_dropout, --model.attention_dropout, "
                            "--model.classifier_dropout may be given); drop the option, or train from scratch "
                            "without --init-from")


def _check_token_types(run: RunConfig) -> None:
    """Sentence-pair data (SOP or NSP) has token types 0 and 1: a model with `type_vocab_size` 1 stopped at its
    first step with an IndexError traceback from the embedding."""
    from albertlm.training.pretrain import open_dataset

    if run.model.type_vocab_size >= 2:
        return
    for path, flag in ((run.data.path, "--data"), (run.data.eval_path, "--eval-data")):
        task = open_dataset(path).meta.get("sentence_task") if path else None
        if task not in (None, "none"):
            raise UserError(f"model.type_vocab_size={run.model.type_vocab_size}: {flag} {path} has sentence pairs "
                            f"({task}: token types 0 and 1), which need type_vocab_size >= 2; pass "
                            "--model.type_vocab_size=2, or data built with --sentence-task none")


def _saved_config_file(run_dir: str | Path) -> Path | None:
    """The run's `run_config.json`, or, when it was removed, the copy in its newest checkpoint (None: none)."""
    from albertlm.training.checkpoint import latest_checkpoint

    saved = Path(run_dir) / "run_config.json"
    if saved.is_file():
        return saved
    last = latest_checkpoint(run_dir) if Path(run_dir).is_dir() else None
    return last / "run_config.json" if last is not None and (last / "run_config.json").is_file() else None


def read_saved_run_config(path: Path) -> RunConfig:
    """A run's saved configuration; a damaged one (not JSON, not an object, unknown or mistyped keys, a value the
    config refuses) is one line naming the file and the copy every checkpoint holds."""
    from albertlm.errors import read_json_object
    from albertlm.training.checkpoint import latest_checkpoint

    last = latest_checkpoint(path.parent) if path.name == "run_config.json" and path.parent.is_dir() else None
    hint = (f"each checkpoint holds a copy ({last / 'run_config.json'}): copy it over {path}" if last is not None
            else "start over with --overwrite")
    data = read_json_object(path, "a run's run_config.json", hint=hint)
    try:
        return RunConfig.from_dict(data)
    except UserError as exc:
        raise UserError(f"{path}: {exc}; {hint}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{path}: not a run configuration ({exc}); {hint}") from None


def check_config_records(args: argparse.Namespace, options: Options, command: str) -> None:
    """`--config` given a run's record of itself rather than a config: a fine-tuning run's run_config.json (or its
    metrics.json, or best/task.json) said only "unknown config key 'family'" (for pretrain and finetune alike), and a
    pretraining run's given to finetune "unknown config key 'model.vocab_size'". Said in one line: whose record it
    is, and the way to what was meant (`--resume`, --model, or a file of the sections to keep). A pretraining run's
    given to pretrain is a config (its keys are the options'); a file that is not a JSON object is left to the
    reader's own words."""
    given = getattr(args, options.dest("__file__"), None) or []
    for path in [given] if isinstance(given, str) else given:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        line = _record_line(Path(path), data, command)
        if line:
            raise UserError(line)


def _record_line(path: Path, data: dict, command: str) -> str | None:
    """What to say of a --config file that is a run's record (None: it is no record, or one `command` takes)."""
    metrics = isinstance(data.get("config"), dict) and "best" in data
    # a step's run_config.json lies in RUN/checkpoints/step_N, best/task.json in RUN/best, metrics.json in RUN
    run = (path.parent.parent.parent if path.parent.parent.name == "checkpoints"
           else path.parent.parent if path.parent.name == "best" else path.parent)
    if metrics or "family" in data:
        # the fine-tuning config a user may copy: a metrics.json's "config" is one whole (docs/finetuning.md)
        if metrics:
            what, settings = "a fine-tuning run's metrics.json (its best dev scores)", 'its "config" section\'s'
        elif "optim" in data:
            what, settings = ("a fine-tuning run's record of itself (its family, task, labels, model and tokenizer "
                              "besides its settings)"), "its"
        else:
            what, settings = ("a fine-tuned model's record (its family, task, labels and tokenizer), which holds no "
                              "settings"), f'{run / "metrics.json"}\'s "config" section\'s'
        copy = (f'copy {settings} "optim" and "train" sections (the settings you mean to keep) into a JSON file of '
                "their own")
        if metrics and command == "finetune":
            copy = 'save its "config" section as a JSON file of its own (a fine-tuning config whole)'
        if command == "finetune":
            family = data.get("family") or (data["config"].get("family") if metrics else None)
            return (f"--config {path} is {what}, not a config file: `albertlm finetune {family or '...'} ... --out "
                    f"{run} --resume` continues that run; to fine-tune with its settings, {copy}")
        return (f"--config {path} is {what}, not a pretraining config (model, data, optim, train and dist sections, "
                f"as a pretraining run's run_config.json): {copy}")
    if command == "finetune" and isinstance(data.get("model"), dict) and "data" in data:
        return (f"--config {path} is a pretraining run's config (its model and data sections), not a fine-tuning "
                f"one: fine-tuning takes its model from --model (--model {run} fine-tunes the run's newest "
                'checkpoint); its "optim" and "train" sections are pretraining\'s: copy only the settings you mean '
                "to keep into a JSON file of their own")
    return None


def _check_preset_against_files(args: argparse.Namespace) -> None:
    """`--preset X --config saved_run_config.json`: the file's model fields (a saved run's are all of them) win
    over the preset, so the run kept the file's model and only its label said X. Refused when the file names
    another preset and sets model fields; a file of a few model tweaks without a preset still refines --preset."""
    from albertlm.config.overrides import command_line_values, file_values

    given = command_line_values(args, PRETRAIN).get("preset")
    if given is None:
        return
    from_files = file_values(args, PRETRAIN)
    model_keys = [key for key in from_files if key.startswith("model.")]
    if model_keys and from_files.get("preset", given) != given:
        raise UserError(f"--preset {given}, but the --config file is a config of preset {from_files['preset']} and "
                        f"sets {len(model_keys)} model field(s) ({', '.join(model_keys[:3])}"
                        f"{', ...' if len(model_keys) > 3 else ''}), which would win over {given}'s: drop --preset "
                        f"to train the file's model, or remove the model fields from the file")


def _values(args: argparse.Namespace) -> dict:
    return given_values(args, PRETRAIN)


def _check_recorded_paths(saved: RunConfig, run: RunConfig, saved_file: Path) -> None:
    """A run recorded before paths were made absolute holds relative ones, which only mean something from the
    directory it was started in: say so, rather than that the data is missing."""
    from albertlm.config.overrides import flatten

    was, now = flatten(saved.to_dict()), flatten(run.to_dict())
    for key, flag in (("data.path", "--data"), ("data.eval_path", "--eval-data")):
        value = now.get(key)
        if value and value == was.get(key) and os.path.isabs(value) and not os.path.exists(value):
            # the data moved (a job's scratch disk of the last launch): said as such, with the way on
            checked = " (a copy of it is checked against what the run recorded of its data)" if flag == "--data" else ""
            raise UserError(f"{key} {value!r} recorded in {saved_file} is not there any more: pass {flag} with the "
                            f"data's new place{checked}")
        if value and value == was.get(key) and not os.path.isabs(value) and not os.path.exists(value):
            raise UserError(f"{key} {value!r} recorded in {saved_file} is relative and was looked for from the "
                            f"current directory {os.getcwd()}, where it does not exist: run `albertlm pretrain "
                            f"--resume` from the directory the run was started in, or pass {flag} with the "
                            "data's path")


# what `pretrain --resume` may change: the run's length, its held-out data, and how it is run and logged
RESUME_MAY_CHANGE = RUN_RESUME_MAY_CHANGE | {"train.eval_batches", "data.eval_path", "data.num_workers"}


def _check_resume_changes(saved: RunConfig, run: RunConfig, run_dir: str | Path | None = None,
                          notes: list[str] | None = None) -> None:
    """A resumed run continues exactly: a setting it learns with (lr, model, data, seed, ...) may not change,
    refused in one line. What `RESUME_MAY_CHANGE` lets change is taken, and recorded: `pretrain` writes the resumed
    run's config as its run_config.json (each checkpoint keeps a copy of the config of the part that saved it), and
    the loop says in one line a change that changes the numbers (another device, `--train.compile` or backend: to
    rounding; another length: the schedule from there; `loop.Loop._resume_notes`, which also records in each
    checkpoint the device a `dist.device` of "auto" picked). The training data may be given at another path where it
    is the same data (`_moved_data`: a copy on a job's scratch disk), said in one line added to `notes`."""
    from albertlm.config.overrides import flatten

    was, now = flatten(saved.to_dict()), flatten(run.to_dict())
    for key in sorted(was.keys() | now.keys()):
        if key in PATH_KEYS and _same_path(was.get(key), now.get(key)):
            continue
        if key == "data.path" and _relative_elsewhere(was.get(key)) and now.get(key):
            continue       # a relative path recorded by an older run, given again from another directory
        if key == "data.path" and was.get(key) and now.get(key) and run_dir is not None:
            note = _moved_data(was[key], now[key], Path(run_dir))       # raises where it is other data
            if notes is not None:
                notes.append(note)
            continue
        if was.get(key) != now.get(key) and key not in RESUME_MAY_CHANGE:
            raise UserError(f"--resume: the run was started with {key}={was.get(key)!r}, now {now.get(key)!r}; a "
                            "resumed run keeps its settings (drop the option; only the run's length, its eval data "
                            "and how it is run and logged may change), or start over with --overwrite")


def _moved_data(was: str, now: str, run_dir: Path) -> str:
    """`--resume --data NOW` where the run trained on WAS: the data copied to another place (a job's scratch disk
    on a cluster, a disk mounted elsewhere) is the same data when what the checkpoint the run resumes from recorded
    of it (`checkpoint.recorded_data`: examples, sequence length, sentence task, tokenizer and its sha256, the
    build's seed, --chunk-chars and --num-shards) is what NOW holds; the resumed run is then the one it would have
    been on WAS, bit for bit, and records NOW. Returns the line saying so; other data is refused in one line (it was
    refused whatever it held, and the advice was --overwrite, which threw the run away). A run that saved no
    checkpoint yet starts again from step 0: NOW is compared with WAS where WAS is still there, else taken."""
    from albertlm.training import checkpoint as ckpt
    from albertlm.training.pretrain import data_identity, open_dataset

    moved = was if os.path.exists(was) else f"{was}, gone now"
    data = open_dataset(now)                       # its own one-line errors: not there, not a build, damaged
    found = {**data_identity(data.meta), "num_examples": len(data)}    # the telling differences first
    last = ckpt.latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if last is not None:
        recorded, source = ckpt.recorded_data(last), f"the checkpoint {last.name}"
        if recorded is None:       # unreadable: the resume's own load of it says why, in its words
            return f"note: --resume with --data {now} (the run's data was {moved})"
    elif os.path.exists(was):
        old = open_dataset(was)
        recorded, source = {**data_identity(old.meta), "num_examples": len(old)}, f"the run's data {was}"
    else:
        return (f"note: --resume with --data {now} (the run's data was {moved}): the run saved no checkpoint, so it "
                f"starts again from step 0 on {now}")
    missing = [key for key in found if key not in recorded]
    if missing:                    # a checkpoint of an older version: the data cannot be told apart
        raise UserError(f"--resume: the run was started with data.path={was!r}, now {now!r}; {source} does not "
                        f"record the {missing[0]} of the data it trained on (saved by an older albertlm), so {now} "
                        f"cannot be told from other data: give --data the run's own path {was} (a link there to the "
                        "copy will do)")
    other = [key for key in found if recorded[key] != found[key]]
    if other:
        key = other[0]
        raise UserError(f"--resume: the run was started with data.path={was!r}, now {now!r}, which holds other "
                        f"data ({source} records {key}={recorded[key]!r}, {now} has {found[key]!r}); a resumed run "
                        f"goes on with its own data: give --data {was} or a copy of it")
    shards = found.get("data_num_shards")
    identity = ", ".join(filter(None, (
        f"{found['num_examples']} examples",
        f"tokenizer sha256 {found['data_vocab_sha256'][:12]}" if "data_vocab_sha256" in found else "",
        f"build seed {found['data_build_seed']}" if "data_build_seed" in found else "",
        f"{shards} part(s)" if shards is not None else "")))
    return (f"note: --resume with --data {now}: the same data as the run's {moved} ({identity}, as {source} "
            "recorded), so the run goes on exactly; run_config.json now records the new path")


def _started_from(recorded: str, given: str) -> bool:
    """Whether `--init-from GIVEN` on a --resume names the checkpoint the run recorded as its start: that one, or
    the run directory it is the checkpoint of. A run started with `--init-from RUN_DIR` records RUN_DIR's newest
    checkpoint then (`resolve_run`), so the same command again with --resume (a job script relaunched after a
    preemption) was refused as another init_from, with advice to start over with --overwrite."""
    if _same_path(recorded, given):
        return True
    from albertlm.model.io import CHECKPOINT_DIR

    inside, outside = os.path.realpath(recorded), os.path.realpath(given)
    return Path(inside).parent.name == CHECKPOINT_DIR and Path(inside).parent.parent == Path(outside)


def _same_path(was: str | None, now: str | None) -> bool:
    """One file or directory, however spelled (relative to the current directory, absolute, via a link)."""
    if was == now:
        return True
    return bool(was and now) and os.path.realpath(was) == os.path.realpath(now)


def _relative_elsewhere(path: str | None) -> bool:
    """A relative path that does not exist from the current directory (the run was started elsewhere)."""
    return bool(path) and not os.path.isabs(path) and not os.path.exists(path)


def _recipe_preset(preset: str, values: dict) -> str:
    """The preset whose recipe is the base. A config that sets every model field (a saved `run_config.json`,
    e.g. one of `albertlm ablate`'s runs, whose preset is the label "ablate") keeps its preset as a label
    only; any other unknown name is an error (with a did-you-mean) from `get_preset`."""
    from dataclasses import fields

    from albertlm.config.model import ModelConfig
    from albertlm.config.presets import PRESETS

    if preset not in PRESETS and all(f"model.{f.name}" in values for f in fields(ModelConfig)):
        return RunConfig.preset
    return preset


def _pretrain(args: argparse.Namespace) -> int:
    """The config is printed once the run directory, the data, the model and any checkpoint to resume from
    have been checked: a bad input is one line, not 65 lines of config and then an error."""
    from albertlm.training import checkpoint as ckpt
    from albertlm.training.distributed import is_main_process, shutdown
    from albertlm.training.metrics import console_line
    from albertlm.training.pretrain import check_datasets, open_datasets, pretrain

    if args.resume and args.overwrite:
        raise UserError("--resume continues the run in --out and --overwrite replaces it: give one of them")
    check_config_records(args, PRETRAIN, "pretrain")
    notes: list[str] = []
    if args.resume_or_start:
        args.resume = _resume_or_start(args, notes)
    if not args.resume:
        _check_init_source(args)
    ckpt.check_run_dir(args.out, args.resume, args.overwrite, must_exist=True)
    run = resolve_run_config(args, notes)

    def show(resolved) -> None:
        console_line(json.dumps(resolved.to_dict(), indent=2))   # a console gone does not stop the run
        for note in notes:
            console_line(note)

    if args.dry_run:
        from albertlm.training.distributed import pick_device
        from albertlm.training.precision import check_precision

        check_precision(run.train.precision, pick_device(run.dist.device))   # what the real run refuses
        if run.data.path:                      # a dry run may leave the data out
            from albertlm.training.pretrain import resumes_checkpoint

            check_datasets(run, open_datasets(run), resumes_checkpoint(args.out, args.resume))
        if is_main_process():
            show(run)
        return 0
    try:
        status = pretrain(run, args.out, resume=args.resume, overwrite=args.overwrite, on_ready=show)
    finally:
        shutdown()
    if is_main_process():
        out = Path(args.out).absolute()        # usable from any directory, and in a log read later
        held = ", ".join(name for name in ("metrics.jsonl", "tensorboard/", "checkpoints/")
                         if (out / name.rstrip("/")).exists())
        console_line(f"{status}: run directory {out} ({held or 'nothing written'}); "
                     f"`albertlm plot {shlex.quote(str(out))}` draws the curves")   # pasteable as is
    return 130 if status == "interrupted" else 0


def _resume_or_start(args: argparse.Namespace, notes: list[str]) -> bool:
    """`--resume-or-start`: whether to resume (--out holds a run: any of its files, even a run_config.json alone,
    which `--resume` starts again from step 0) or to start a new run, said in a line added to `notes`. A plain
    `--resume` where there is no run stays an error (a mistyped --out is not a new run started quietly, as
    transformers' `resume_from_checkpoint=True`), so a job script that a preemption relaunches with one command,
    whose first launch may have been killed before it wrote anything, says which it wants (as Composer's
    `autoresume=True` beside its `load_path`)."""
    from albertlm.training.checkpoint import RUN_FILES

    if args.resume or args.overwrite:
        raise UserError(f"--resume-or-start decides by itself whether to continue the run in --out: give it without "
                        f"{'--resume' if args.resume else '--overwrite'}")
    out = Path(args.out)
    if out.is_dir() and any((out / name).exists() for name in RUN_FILES):
        return True
    notes.append(f"note: --resume-or-start: no run in {out.absolute()} yet, so a new one starts there")
    return False


def _check_init_source(args: argparse.Namespace) -> None:
    """--init-from X --out X (or --out the run whose checkpoints/ hold X's checkpoint) would remove, with
    --overwrite, the checkpoint the run starts from: refused before the run directory is looked at."""
    from albertlm.cli.guards import check_out_keeps_source
    from albertlm.model.io import resolve_checkpoint
    from albertlm.training.checkpoint import RUN_FILES

    given = _values(args).get("init_from")
    if not given or not Path(given).is_dir():
        return                              # none, or resolve_run's own error later
    try:
        source = resolve_checkpoint(given)
    except UserError:
        return
    check_out_keeps_source(args.out, given, source, "--init-from", RUN_FILES)


# ------------------------------------------------------------------------------------------------ evaluate
def _add_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="MODEL",
                   help="a model directory (ours or transformers'), or a run directory (newest checkpoint)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_options(p, EVALUATE)


def _evaluate(args: argparse.Namespace) -> int:
    from albertlm.cli.task_commands import finite
    from albertlm.config.overrides import read_options
    from albertlm.training.distributed import world_size_from_env
    from albertlm.training.evaluate import evaluate_checkpoint, evaluate_under_torchrun

    o = read_options(args, EVALUATE)
    # under torchrun the processes share the batches and rank 0 alone prints the numbers (each process evaluated
    # all of the data and printed them: W copies, W JSON objects with --json)
    run = evaluate_under_torchrun if world_size_from_env() > 1 else evaluate_checkpoint
    counts: dict = {}
    metrics = run(args.checkpoint, o.data, o.batch_size, o.max_batches, o.precision, device=o.device,
                  progress=o.progress, counts=counts)
    if metrics is None:                  # another rank than 0 under torchrun
        return 0
    scored = _scored(o, counts)
    if args.json:
        # the count of what was scored where --max-batches may leave data out (the keys are as before without it);
        # strict JSON: a NaN metric (NaN outputs) is null, as in the task commands' metrics JSON (a bare `NaN` is
        # refused by jq and JavaScript's JSON.parse)
        shown = {**metrics, **scored} if o.max_batches else metrics
        print(json.dumps(finite(shown), allow_nan=False))
    else:
        task = metrics.pop("sentence_task", None)
        for key, value in metrics.items():
            print(f"{key:10s} {value:.4f}")
        print(f"({_scored_line(scored, o)}; sentence task of the data: {task})")
    return 0


def _scored(o: EvaluateOptions, counts: dict) -> dict:
    """How much of the data the numbers are of: {"examples", "data_examples", "masked_tokens"} (`counts`: the
    evaluation's). With --max-batches they are of the first max_batches x batch_size examples
    (`loop.eval_micro_batches`, under torchrun too), and nothing said so: 21 of 202 examples looked like all of
    them."""
    from albertlm.training.pretrain import open_dataset

    return {"examples": counts["examples"], "data_examples": len(open_dataset(o.data)),
            "masked_tokens": counts["masked_tokens"]}


def _scored_line(scored: dict, o: EvaluateOptions) -> str:
    """`scored the first 8 of the data's 80 examples: --max-batches 2, batch size 4`, or `scored all 80 examples of
    the data`."""
    examples, total = scored["examples"], scored["data_examples"]
    tokens = f", {scored['masked_tokens']:,} masked tokens"
    if examples < total:
        return (f"scored the first {examples:,} of the data's {total:,} examples{tokens}: --max-batches "
                f"{o.max_batches}, batch size {o.batch_size}")
    return f"scored all {total:,} examples of the data{tokens}"


# ---------------------------------------------------------------------------------------------------- plot
def _add_plot(p: argparse.ArgumentParser) -> None:
    # several runs are compared in one figure (`plots.plot_run` takes a list; one run draws as before)
    p.add_argument("run_dir", nargs="+", metavar="RUN_DIR",
                   help="run directories written by `albertlm pretrain` or `albertlm finetune` (or their "
                        "metrics.jsonl); several are drawn in one figure, a colour each, which needs --out")
    p.add_argument("--out", help="image path, its extension picks the format: .png, .pdf, .svg, ... "
                                 "(default RUN_DIR/curves.png of one run; several runs need it)")


def _plot(args: argparse.Namespace) -> int:
    from albertlm.training.plots import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0
