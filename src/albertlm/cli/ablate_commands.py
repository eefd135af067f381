"""`albertlm ablate`: run a grid of pretraining configurations at a scale, evaluate every run the same way,
fine-tune each one and a no-pretraining baseline of its shape, and write the paper-style report.

    albertlm ablate --grid paper --scale cpu --corpus corpus/en --out ablate_runs/cpu --jobs 2
    albertlm ablate --out ablate_runs/cpu --report-only          # the report from the runs finished so far
    albertlm ablate --grid my_grid.toml --scale cpu --corpus my_corpus --out runs/mine --list-jobs

Rerunning the same command skips the finished runs and continues a killed one (see experiments/runner.py).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from albertlm.config.overrides import Options, add_options, read_options


@dataclass
class AblateOptions:
    """`albertlm ablate`: the paper's ablations on a corpus."""
    out: str                             # suite directory: prepared data, one directory per run, report.md
    grid: str = "paper"                  # table3, table4, table5, dropout, figure1, paper (all), or a JSON / TOML grid file
    scale: Literal["smoke", "cpu", "gpu", "cpu-v1", "cpu-v2"] = "cpu"   # model size, steps and fine-tuning protocol (experiments/scales.py)
    corpus: str = ""                     # directory with train.txt and heldout.txt (held-out documents); needed unless --report-only
    glue_dir: str = "../shared/data/glue"  # GLUE task folders (SST-2, STS-B, ...) for the downstream evaluation
    seeds: list[int] = field(default_factory=list)  # pretraining seeds (default: the scale's)
    max_steps: int = 0                   # override the scale's pretraining steps (0 = the scale's)
    finetune_seeds: int = 0              # fine-tuning runs per model, averaged (0 = the scale's); raising it on a finished suite adds only the new runs
    finetune_lr: float = 0.0             # override the scale's fine-tuning learning rate (0 = the scale's); on a finished suite it needs --refinetune
    refinetune: bool = False             # continue a suite whose fine-tuning protocol (scale) changed: its kept models are fine-tuned again, nothing is pretrained again
    jobs: int = 1                        # jobs run at the same time (worker processes)
    threads: int = 0                     # torch threads per job; 0 = torch's default
    max_jobs: int = 0                    # run at most this many jobs now, then stop (0 = all)
    list_jobs: bool = False              # print the jobs of the grid (pretraining runs and baselines) and exit
    report_only: bool = False            # only (re)write the report from the finished runs
    report: bool = True                  # write the report after the runs


ABLATE = Options(AblateOptions)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    add_options(parser, ABLATE)


def run(args: argparse.Namespace, command: str) -> int:
    o = read_options(args, ABLATE)
    from albertlm.errors import UserError
    from albertlm.experiments.report import write_report
    from albertlm.experiments.runner import make_suite, plan_jobs, run_suite
    from albertlm.experiments.scales import get_scale

    if Path(o.out).exists() and not Path(o.out).is_dir():
        raise UserError(f"--out {o.out}: is a file, not a suite directory")
    if o.report_only:
        if not (Path(o.out) / "suite.json").is_file():
            raise UserError(f"--out {o.out}: not an ablation suite (no suite.json); run the grid first")
        paths = write_report(Path(o.out))
        print("\n".join(str(p) for p in paths))
        return 0
    if not o.corpus:
        raise UserError("--corpus DIR is required (train.txt + heldout.txt; benchmarks/assemble_corpus.py writes one)")
    for flag, value in (("--finetune-seeds", o.finetune_seeds), ("--finetune-lr", o.finetune_lr),
                        ("--max-steps", o.max_steps)):
        if value < 0:
            raise UserError(f"{flag} must be >= 0 (0 = the scale's), got {value}")
    changes = {k: v for k, v in (("max_steps", o.max_steps), ("finetune_seeds", o.finetune_seeds),
                                 ("finetune_lr", o.finetune_lr)) if v}
    scale = get_scale(o.scale, **changes)
    suite = make_suite(o.out, scale, o.grid, o.corpus, o.glue_dir, tuple(o.seeds) or None, o.threads)
    missing = [t.dir_name for t in scale.finetune_tasks if not (suite.glue_dir / t.dir_name).is_dir()]
    if missing and not o.list_jobs:   # found out before hours of pretraining, not after
        raise UserError(f"--glue-dir {o.glue_dir}: no {', '.join(missing)} folder (the fine-tuning tasks of scale "
                        f"{scale.name}; the default ../shared/data/glue is relative to the current directory)")
    if o.list_jobs:
        for job in plan_jobs(suite.runs):
            print(f"{job.kind:8s} {job.name:32s} {json.dumps({k: job.run.model[k] for k in ('embedding_size', 'sharing', 'hidden_dropout')})}"
                  f" task={job.run.task if job.kind == 'pretrain' else '-'} seed={job.seed}")
        return 0
    summary = run_suite(suite, jobs=o.jobs, max_jobs=o.max_jobs, refinetune=o.refinetune)
    if o.report:
        for path in write_report(Path(o.out)):
            print(path)
    print(f"albertlm ablate: {len(summary['finished'])} jobs run, {summary['skipped']} skipped, "
          f"{len(summary['failed'])} failed" + (f" ({', '.join(summary['failed'])})" if summary["failed"] else ""))
    return 1 if summary["failed"] else 0
