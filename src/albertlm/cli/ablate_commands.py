"""`albertlm ablate`: run a grid of pretraining configurations at a scale, evaluate every run the same way,
fine-tune each one and a no-pretraining baseline of its shape, and write the paper-style report.

    albertlm ablate --grid paper --scale cpu --corpus corpus/en --out ablate_runs/cpu --jobs 2
    albertlm ablate --out ablate_runs/cpu --report-only          # the report from the runs finished so far
    albertlm ablate --grid my_grid.toml --scale cpu --corpus my_corpus --out runs/mine --list-jobs
    albertlm ablate --grid table3 --scale smoke --corpus corpus/ko --tokenizer my_vocab.txt --out runs/ko
    albertlm ablate --grid table5 --scale my_scale.toml --corpus corpus/en --out runs/laptop   # base = "cpu" + changes
    albertlm ablate --grid table3 --scale ko.toml --corpus corpus/ko --out runs/ko   # finetune_tasks = []: no GLUE

Rerunning the same command skips the finished runs and continues a killed one (see experiments/runner.py); a
second one on an --out that a running one holds is refused (`--report-only` and `--list-jobs` work meanwhile).
Ctrl-C and SIGTERM stop it alike: `interrupted`, exit 130, and a rerun continues.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from albertlm.config.overrides import Options, add_options, option_name, read_options
from albertlm.experiments.scales import MIN_VOCAB, SCALES, SEED_LIMIT, Scale


@dataclass
class AblateOptions:
    """`albertlm ablate`: the paper's ablations on a corpus."""
    out: str                             # suite directory: prepared data, one directory per run, report.md
    grid: str = "paper"                  # table3, table4, table5, dropout, figure1, paper (all), or a JSON / TOML grid file (a list of variants with name, embedding, sharing, task, dropout, model: docs/paper.md)
    scale: str = "cpu"                   # model size, steps and fine-tuning protocol: smoke, cpu, gpu, cpu-v1, cpu-v2 (experiments/scales.py), or a TOML / JSON scale file: base = "cpu" and the fields it changes (hidden_size, max_seq_length, batch_size, lr, finetune_tasks, ...: docs/paper.md; finetune_tasks = [] for held-out accuracy only, no fine-tuning)
    corpus: str = ""                     # directory with train.txt and heldout.txt (held-out documents); needed unless --report-only
    tokenizer: str = ""                  # your own tokenizer instead of the SentencePiece model the suite trains on the corpus: a SentencePiece .model, a WordPiece vocab.txt, a tokenizer.json, or a directory holding one (V = its vocabulary size); a rerun gives the same one
    glue_dir: str = "../shared/data/glue"  # GLUE task folders (SST-2, STS-B, ...) for the downstream evaluation
    seeds: list[int] = field(default_factory=list)  # pretraining seeds: --seeds 1 2 or --seeds 1,2 (default: the scale's)
    max_steps: int = 0                   # override the scale's pretraining steps (0 = the scale's)
    vocab_size: int = 0                  # override the scale's vocabulary V, SentencePiece pieces (0 = the scale's; a Korean, Chinese or Japanese corpus needs more than smoke's 400)
    finetune_seeds: int = 0              # fine-tuning runs per model, averaged (0 = the scale's); raising it on a finished suite adds only the new runs; a suite keeps a larger count it ran with
    finetune_lr: float = 0.0             # override the scale's fine-tuning learning rate (0 = the scale's); on a finished suite it needs --refinetune
    refinetune: bool = False             # continue a suite whose fine-tuning protocol (scale) changed: its kept models are fine-tuned again, nothing is pretrained again
    jobs: int = 1                        # jobs run at the same time (worker processes)
    threads: int = 0                     # torch threads per job; 0 = torch's default
    max_jobs: int = 0                    # run at most this many jobs now, then stop (0 = all)
    max_minutes: float = 0.0             # start no job after this many minutes (running ones finish; 0 = no limit); rerun to continue
    list_jobs: bool = False              # print the jobs of the grid (pretraining runs and baselines), what a run would do with each in --out (done, fine-tune, resume@STEP, to-run), and exit
    report_only: bool = False            # only (re)write the report from the finished runs (a result.json it cannot read is left out, named, and the exit status is 1)
    report: bool = True                  # write the report after the runs


ABLATE = Options(AblateOptions, required=True)   # --out DIR
# SEED_LIMIT: pretraining seeds; a model's fine-tuning seeds are its seed + 1000 i, and every seed must suit numpy's
# 32 bits. MIN_VOCAB: the special tokens and the corpus's characters come first (both shared with scale files)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    add_options(parser, ABLATE)


def run(args: argparse.Namespace, command: str) -> int:
    # SIGTERM stops it as Ctrl-C does, the report's writing included (exit 130): cli.main runs every command so
    return _run(read_options(args, ABLATE))


def _run(o: AblateOptions) -> int:
    from albertlm.errors import UserError
    from albertlm.experiments.report import write_report
    from albertlm.experiments.runner import make_suite, preview, run_suite
    from albertlm.experiments.scales import get_scale

    left_out: list[str] = []

    def warn(message: str) -> None:   # a result.json the report cannot read: named, left out, exit 1
        left_out.append(message)
        print(message, file=sys.stderr, flush=True)

    if Path(o.out).exists() and not Path(o.out).is_dir():
        raise UserError(f"--out {o.out}: is a file, not a suite directory")
    if o.report_only:
        defaults = AblateOptions(out=o.out, report_only=True)
        # every other option (a list of names here left --glue-dir and --report out: taken, and ignored)
        given = [option_name(f.name) for f in fields(AblateOptions)
                 if f.name not in ("out", "report_only") and getattr(o, f.name) != getattr(defaults, f.name)]
        if given:   # the report reads what --out holds: these would be silently ignored
            raise UserError(f"--report-only writes the report of the suite in --out as it stands; "
                            f"{', '.join(given)} cannot be used with it")
        if not (Path(o.out) / "suite.json").is_file():
            raise UserError(f"--out {o.out}: not an ablation suite (no suite.json); run the grid first")
        paths = write_report(Path(o.out), warn)
        print("\n".join(str(p) for p in paths))
        return 1 if left_out else 0     # written without the results it cannot read, each named on stderr
    if not o.corpus:
        raise UserError("--corpus DIR is required (train.txt + heldout.txt; benchmarks/assemble_corpus.py writes one)")
    for flag, value in (("--finetune-seeds", o.finetune_seeds), ("--finetune-lr", o.finetune_lr),
                        ("--max-steps", o.max_steps), ("--max-jobs", o.max_jobs), ("--threads", o.threads),
                        ("--max-minutes", o.max_minutes),
                        ("--vocab-size", o.vocab_size)):
        if not value >= 0 or value == float("inf"):   # NaN fails the first test
            raise UserError(f"{flag} must be {'a finite number ' if isinstance(value, float) else ''}>= 0 "
                            f"(0 = the default), got {value}")
    if o.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {o.jobs}")
    bad = [s for s in o.seeds if not 0 <= s < SEED_LIMIT]
    if bad:
        raise UserError(f"--seeds: {bad[0]} is out of range (a seed is an integer in [0, {SEED_LIMIT}))")
    if len(set(o.seeds)) != len(o.seeds):
        raise UserError(f"--seeds {' '.join(map(str, o.seeds))}: a seed is given twice (each seed is one run "
                        f"of every variant)")
    if o.tokenizer and o.vocab_size:
        raise UserError(f"--vocab-size sets the vocabulary of the tokenizer the suite trains; --tokenizer "
                        f"{o.tokenizer} brings its own (V = its vocabulary size): give one of them")
    if 0 < o.vocab_size < MIN_VOCAB:
        raise UserError(f"--vocab-size must be at least {MIN_VOCAB} (0 = the scale's), got {o.vocab_size}")
    changes = {k: v for k, v in (("max_steps", o.max_steps), ("finetune_seeds", o.finetune_seeds),
                                 ("finetune_lr", o.finetune_lr), ("vocab_size", o.vocab_size)) if v}
    scale = get_scale(o.scale, **changes)
    given = [flag for flag, value in (("--finetune-seeds", o.finetune_seeds), ("--finetune-lr", o.finetune_lr))
             if value]
    if scale.intrinsic_only and given:   # they would change nothing (and be recorded as if they had)
        raise UserError(f"{scale.file}: finetune_tasks = [] (no fine-tuning: held-out accuracy only), so "
                        f"{' and '.join(given)} {'has' if len(given) == 1 else 'have'} nothing to fine-tune; name a "
                        f"task in the scale file to fine-tune, or leave {'it' if len(given) == 1 else 'them'} out")
    if scale.file and o.tokenizer and scale.vocab_size != SCALES[scale.name].vocab_size:
        raise UserError(f"{scale.file}: vocab_size sets the vocabulary of the tokenizer the suite trains; --tokenizer "
                        f"{o.tokenizer} brings its own (V = its vocabulary size): give one of them")
    suite = make_suite(o.out, scale, o.grid, o.corpus, o.glue_dir, tuple(o.seeds) or None, o.threads,
                       o.tokenizer or None)
    missing = [t.dir_name for t in scale.finetune_tasks if not (suite.glue_dir / t.dir_name).is_dir()]
    if missing and not o.list_jobs:   # found out before hours of pretraining, not after
        whose = (f"{scale.file}'s finetune_tasks" if scale.file and scale.finetune_tasks
                 != SCALES[scale.name].finetune_tasks else f"the fine-tuning tasks of scale {scale.name}")
        raise UserError(f"--glue-dir {o.glue_dir}: no {', '.join(missing)} folder ({whose}; the default "
                        f"../shared/data/glue is relative to the current directory)")
    if o.list_jobs:   # what a run of this command would do in --out now (it refuses what the run would refuse)
        from albertlm.experiments.grids import base_model

        states = preview(suite, o.refinetune)
        base = base_model(suite.scale).to_dict()
        if suite.scale.file:   # a user's scale: the file, what it changes and every value the runs have
            print(scale_lines(suite.scale))
        for job, state in states:
            # E, sharing and dropout, then every other field a variant's `model` changes (num_groups, num_layers...):
            # two variants that differ only there were listed alike
            shown = {k: job.run.model[k] for k in ('embedding_size', 'sharing', 'hidden_dropout')}
            shown.update({k: v for k, v in job.run.model.items() if k not in shown and base.get(k) != v})
            print(f"{job.kind:8s} {job.name:32s} {json.dumps(shown)}"
                  f" task={job.run.task if job.kind == 'pretrain' else '-'} seed={job.seed} {state}")
        counts = {s: sum(st.startswith(s) for _, st in states) for s in ("done", "fine-tune", "resume", "to-run")}
        print(f"{len(states)} jobs: {counts['done']} done, {counts['fine-tune']} to fine-tune again, "
              f"{counts['resume']} to resume, {counts['to-run']} to run"
              + (f" (--max-jobs {o.max_jobs}: the first {o.max_jobs} of those not done)" if o.max_jobs else ""))
        return 0
    summary = run_suite(suite, jobs=o.jobs, max_jobs=o.max_jobs, refinetune=o.refinetune, max_minutes=o.max_minutes)
    if o.report:
        for path in write_report(Path(o.out), warn):
            print(path)
    print(f"albertlm ablate: {len(summary['finished'])} job{'s' * (len(summary['finished']) != 1)} run, "
          f"{summary['skipped']} skipped, "
          f"{len(summary['failed'])} failed" + (f" ({', '.join(summary['failed'])})" if summary["failed"] else "")
          + (f", {len(summary['postponed'])} not started (--max-minutes)" if summary["postponed"] else ""))
    return 1 if summary["failed"] or left_out else 0


def scale_lines(scale: Scale) -> str:
    """A scale file's scale in two lines: the file, its base and the fields that differ from the base's; then
    every value the suite runs with (`Scale.to_dict`, the record suite.json keeps), as JSON writes them."""
    base = json.loads(json.dumps(SCALES[scale.name].to_dict()))
    values = {k: v for k, v in json.loads(json.dumps(scale.to_dict())).items() if k not in ("name", "file")}
    changed = [f"{k}={json.dumps(v)} ({scale.name}: {json.dumps(base[k])})"
               for k, v in values.items() if k != "notes" and base[k] != v]
    return (f"scale file {scale.file}, base {scale.name}; changed: {', '.join(changed) or 'nothing'}\n"
            f"scale values: {', '.join(f'{k}={json.dumps(v)}' for k, v in values.items())}")
