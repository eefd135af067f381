"""`albertlm pretrain`, `albertlm evaluate CKPT --data DIR` and `albertlm plot RUN_DIR`.

Every field of the run configuration is an option generated from the dataclasses (`--model.hidden_size=64`,
`--optim.weight_decay=0.0`, `--train.keep_last=5`); the everyday ones also have plain flags.
Precedence: the paper recipe with the preset's model < `--config FILE` < dotted options < plain flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from albertlm.errors import UserError

OVERRIDE_PREFIX = "override:"
# plain flag -> dotted key
PLAIN_FLAGS = {
    "max_steps": "train.max_steps", "batch_size": "train.batch_size", "micro_batch_size": "train.micro_batch_size",
    "lr": "optim.lr", "warmup_steps": "optim.warmup_steps", "precision": "train.precision",
    "save_every": "train.save_every", "eval_every": "train.eval_every", "log_every": "train.log_every",
    "seed": "train.seed", "data": "data.path", "eval_data": "data.eval_path", "init_from": "init_from",
}


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    {"pretrain": _add_pretrain, "evaluate": _add_evaluate, "plot": _add_plot}[command](parser)


def run(args: argparse.Namespace, command: str) -> int:
    return {"pretrain": _pretrain, "evaluate": _evaluate, "plot": _plot}[command](args)


# ------------------------------------------------------------------------------------------------ pretrain
def _add_pretrain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="albert-base", help="model preset (albert-base, albert-large, albert-tiny, ...)")
    p.add_argument("--data", help="training data: a directory written by `albertlm data build`")
    p.add_argument("--eval-data", help="held-out data (another build) evaluated every --eval-every steps")
    p.add_argument("--out", required=True, help="run directory: checkpoints, metrics, config")
    p.add_argument("--init-from", help="start from a checkpoint directory (ours or transformers')")
    p.add_argument("--config", help="JSON file of run config values (nested like run_config.json)")
    p.add_argument("--resume", action="store_true", help="continue exactly from the newest checkpoint in --out")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--batch-size", type=int, help="global batch (all processes and accumulation steps)")
    p.add_argument("--micro-batch-size", type=int, help="examples per process per forward pass")
    p.add_argument("--lr", type=float)
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--save-every", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--log-every", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    _add_generated_overrides(p)


def _add_generated_overrides(p: argparse.ArgumentParser) -> None:
    """One `--section.field` option per config field, generated from the dataclasses."""
    from albertlm.config.run import RunConfig

    defaults = RunConfig()
    for section in dataclasses.fields(defaults):
        value = getattr(defaults, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        group = p.add_argument_group(f"{section.name} options (--{section.name}.FIELD=VALUE)")
        for f in dataclasses.fields(value):
            key = f"{section.name}.{f.name}"
            group.add_argument(f"--{key}", dest=OVERRIDE_PREFIX + key, metavar="V", default=None,
                               help=f"default {getattr(value, f.name)!r}")


def resolve_run_config(args: argparse.Namespace):
    """The run config from the recipe (or the run's saved config on --resume), file and command line."""
    from albertlm.config.overrides import apply_overrides, load_config_file
    from albertlm.config.presets import get_preset
    from albertlm.config.run import RunConfig, paper_recipe

    saved = Path(args.out) / "run_config.json"
    if args.resume and saved.is_file():
        run = RunConfig.from_dict(json.loads(saved.read_text()))
    else:
        run = paper_recipe(get_preset(args.preset))
        run.preset = args.preset
    if args.config:
        load_config_file(run, args.config)
    dotted = [f"{k[len(OVERRIDE_PREFIX):]}={v}" for k, v in vars(args).items()
              if k.startswith(OVERRIDE_PREFIX) and v is not None]
    plain = [f"{key}={getattr(args, flag)}" for flag, key in PLAIN_FLAGS.items() if getattr(args, flag) is not None]
    apply_overrides(run, dotted + plain)
    return run, {item.split("=", 1)[0] for item in dotted + plain}


def _pretrain(args: argparse.Namespace) -> int:
    from albertlm.training.distributed import init_distributed, shutdown
    from albertlm.training.pretrain import open_dataset, pretrain

    run, explicit = resolve_run_config(args)
    info = init_distributed(run.dist.backend, run.dist.device, run.dist.timeout_minutes)
    if run.data.path and "model.vocab_size" not in explicit and not run.init_from and not args.resume:
        vocab = open_dataset(run.data.path).meta["tokenizer"]["vocab_size"]
        if vocab != run.model.vocab_size:
            run.model = run.model.replace(vocab_size=vocab)   # the model follows the data's tokenizer
    run.validate()
    run.train.accumulation_steps(info.world_size)      # the global batch must split evenly
    if info.is_main:
        print(json.dumps(run.to_dict(), indent=2), flush=True)
    if args.dry_run:
        return 0
    try:
        status = pretrain(run, args.out, resume=args.resume)
    finally:
        shutdown()
    if info.is_main:
        print(f"{status}: run directory {args.out} (metrics.jsonl, tensorboard/, checkpoints/); "
              f"`albertlm plot {args.out}` draws the curves", flush=True)
    return 130 if status == "interrupted" else 0


# ------------------------------------------------------------------------------------------------ evaluate
def _add_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="a model directory (ours or transformers'), or a run directory (newest checkpoint)")
    p.add_argument("--data", required=True, help="pretraining data directory (SOP, NSP or MLM-only)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-batches", type=int, default=0, help="0 = all the data")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def evaluate_checkpoint(checkpoint: str | Path, data: str | Path, batch_size: int = 32, max_batches: int = 0,
                        precision: str = "fp32") -> dict[str, float]:
    """MLM loss/accuracy and sentence-task loss/accuracy of a checkpoint on any built data."""
    import torch

    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training import checkpoint as ckpt
    from albertlm.training.distributed import DistInfo
    from albertlm.training.loop import eval_micro_batches, evaluate
    from albertlm.training.pretrain import PretrainingObjective, open_dataset
    from albertlm.data.loader import collate

    directory = Path(checkpoint)
    if (directory / ckpt.CHECKPOINT_DIR).is_dir():
        directory = ckpt.latest_checkpoint(directory) or directory
    model = AlbertForPreTraining.from_pretrained(directory)
    dataset = open_dataset(data)
    vocab = dataset.meta["tokenizer"]["vocab_size"]
    if vocab > model.config.vocab_size:
        raise UserError(f"{data} uses a {vocab}-token vocabulary, the model has {model.config.vocab_size}")
    torch.manual_seed(0)
    batches = eval_micro_batches(dataset, collate, batch_size, DistInfo(), max_batches)
    metrics = evaluate(model, batches, PretrainingObjective(), precision, DistInfo())
    metrics["sentence_task"] = dataset.meta.get("sentence_task")
    return metrics


def _evaluate(args: argparse.Namespace) -> int:
    metrics = evaluate_checkpoint(args.checkpoint, args.data, args.batch_size, args.max_batches, args.precision)
    if args.json:
        print(json.dumps(metrics))
    else:
        task = metrics.pop("sentence_task", None)
        for key, value in metrics.items():
            print(f"{key:10s} {value:.4f}")
        print(f"(sentence task of the data: {task})")
    return 0


# ---------------------------------------------------------------------------------------------------- plot
def _add_plot(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `albertlm pretrain`")
    p.add_argument("--out", help="PNG path (default RUN_DIR/curves.png)")


def _plot(args: argparse.Namespace) -> int:
    from albertlm.training.plots import plot_run

    print(plot_run(args.run_dir, args.out))
    return 0

