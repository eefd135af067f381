"""`make demo`: the whole pipeline on text every Python installation carries, on CPU, in about 10 minutes.

    Python standard library docstrings + the language reference topics (`pydoc_data`)
      -> SentencePiece tokenizer -> SOP pretraining data (train / held-out modules)
      -> pretrain a small ALBERT (AdamW; `albertlm pretrain` defaults to LAMB) -> evaluate -> plot

Nothing is downloaded. `python -m albertlm.demo --quick` runs a one-minute version (used by the tests);
`--out DIR` chooses where everything goes (default ./demo_run; with --quick ./demo_run/quick, so a smoke run
leaves the full demo's results in place).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import re
import statistics
import sys
import sysconfig
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albertlm.errors import UserError

SKIP_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
HELD_OUT_EVERY = 12            # one module in 12 (by a hash of its path) is held out for evaluation
AFTER_TRAINING_MINUTES = 0.75  # kept for the evaluation and the plot (~40 s on a loaded 2-core machine)


@dataclass(frozen=True)
class DemoSize:
    vocab_size: int
    max_seq_length: int
    dupe_factor: int
    hidden_size: int
    num_layers: int
    num_heads: int
    embedding_size: int
    batch_size: int
    max_steps: int                # upper bound; the demo times a few steps and fits the rest in the budget
    min_steps: int
    lr: float
    train_minutes: float          # the pretraining budget the step count is fitted to
    total_minutes: float          # the whole demo: pretraining stops in time for the evaluation and the plot
    optimizer: str = "adamw"
    masking: str = "token"        # BERT's per-token masking: learnt faster in minutes than n-gram spans
    precision: str = "fp32"


# Docstrings are short: 64-token sequences waste little on padding, so more steps fit the budget. AdamW at
# 2e-3 learned SOP within a few hundred steps where LAMB (lr 0.01-0.03) was still at chance in our trials.
# A 2000-piece vocabulary for a 1.4 MB corpus: at V=8000 three minutes reached 2x the unigram baseline in MLM
# accuracy, at V=2000 2.9x (V=4000: 2x); lr 1e-3 and 5e-3 did no better than 2e-3.
FULL = DemoSize(vocab_size=2000, max_seq_length=64, dupe_factor=4, hidden_size=128, num_layers=2, num_heads=2,
                embedding_size=64, batch_size=32, max_steps=4000, min_steps=100, lr=0.002, train_minutes=7.5,
                total_minutes=10.0)
QUICK = DemoSize(vocab_size=2000, max_seq_length=64, dupe_factor=1, hidden_size=64, num_layers=2, num_heads=2,
                 embedding_size=32, batch_size=16, max_steps=10, min_steps=10, lr=0.005, train_minutes=1.0,
                 total_minutes=5.0)


# ------------------------------------------------------------------------------------------------ corpus
def _prose_sentences(text: str) -> list[str]:
    """Sentences of the prose paragraphs (code, doctests, tables and underlines are skipped)."""
    from albertlm.data.corpus import split_sentences

    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        if not lines or lines[0].startswith((" ", "\t", ">>>", "...", "*", "=", "-", "+", "|")):
            continue
        joined = " ".join(line.strip() for line in lines)
        if len(joined) >= 20:
            sentences += split_sentences(joined)
    return sentences


def stdlib_documents() -> list[tuple[str, list[str]]]:
    """(source name, sentences) for every docstring of the standard library with 2+ sentences, and every
    topic of the language reference bundled in `pydoc_data`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(root.rglob("*.py")):
        if SKIP_DIRS & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                sentences = _prose_sentences(ast.get_docstring(node) or "")
                if len(sentences) >= 2:
                    docs.append((str(path.relative_to(root)), sentences))
    try:
        from pydoc_data.topics import topics
    except ImportError:                      # some distributions strip it; docstrings alone suffice
        topics = {}
    for name, text in sorted(topics.items()):
        sentences = _prose_sentences(text)
        if len(sentences) >= 2:
            docs.append((f"pydoc_data/{name}", sentences))
    return docs


def write_corpus(out: Path, limit_chars: int = 0) -> tuple[Path, Path, dict]:
    """`train.txt` and `heldout.txt` in the one-sentence-per-line, blank-line-between-documents layout;
    held-out documents come from whole source files, so evaluation text is not trained on, but for docstrings the
    standard library repeats in another file (`abc` / `_py_abc`, one-line ones such as "(Internal)"): 35 of the
    1377 held-out sentences of Python 3.11.7, 1.5% of their characters, are also training sentences."""
    out.mkdir(parents=True, exist_ok=True)
    parts = {"train": [], "heldout": []}
    chars = 0
    for source, sentences in stdlib_documents():
        split = "heldout" if zlib.crc32(source.encode()) % HELD_OUT_EVERY == 0 else "train"
        parts[split].append("\n".join(sentences) + "\n")
        chars += sum(map(len, sentences))
        if limit_chars and chars > limit_chars:
            break
    paths = {}
    for split, docs in parts.items():
        paths[split] = out / f"{split}.txt"
        paths[split].write_text("\n".join(docs), encoding="utf-8")
    stats = {split: {"documents": len(docs), "MB": round(paths[split].stat().st_size / 1e6, 2)}
             for split, docs in parts.items()}
    return paths["train"], paths["heldout"], stats


# ------------------------------------------------------------------------------------------------ steps
def train_tokenizer(corpus: Path, out: Path, vocab_size: int) -> Path:
    from albertlm.tokenization.sentencepiece import (SentencePieceOptions, SentencePieceTrainOptions,
                                                     train_sentencepiece)

    train_sentencepiece([corpus], out, SentencePieceTrainOptions(vocab_size=vocab_size, input_sentence_size=0),
                        SentencePieceOptions(do_lower_case=True, keep_accents=False), show_progress=False)
    return out


def build_data(corpus: Path, tokenizer: Path, out: Path, size: DemoSize, dupe_factor: int, seed: int) -> dict:
    from albertlm.data.build import BuildConfig, build

    build(BuildConfig(inputs=[str(corpus)], tokenizer=str(tokenizer), out=str(out), format="lines",
                      max_seq_length=size.max_seq_length, sentence_task="sop", dupe_factor=dupe_factor,
                      masking=size.masking,
                      seed=seed, overwrite=True, progress=False))
    return json.loads((out / "meta.json").read_text())


def training_minutes(size: DemoSize, elapsed_seconds: float) -> tuple[float, float]:
    """(minutes the step count is fitted to, minutes after which pretraining stops) once the stages before it
    took `elapsed_seconds`: `size.train_minutes`, less if those stages ran long, and a stop that leaves
    `AFTER_TRAINING_MINUTES` of `size.total_minutes` for the evaluation and the plot (never under the fitted
    minutes, which are at least a quarter of `size.train_minutes`)."""
    left = size.total_minutes - elapsed_seconds / 60 - AFTER_TRAINING_MINUTES
    fitted = max(size.train_minutes / 4, min(size.train_minutes, left))
    return round(fitted, 2), round(max(fitted, left), 2)


def run_config(size: DemoSize, vocab_size: int, train_dir: Path, eval_dir: Path, max_steps: int,
               max_minutes: float | None = None):
    from albertlm.config.model import ModelConfig
    from albertlm.config.run import DataConfig, OptimConfig, RunConfig, TrainConfig

    model = ModelConfig(vocab_size=vocab_size, embedding_size=size.embedding_size, hidden_size=size.hidden_size,
                        num_layers=size.num_layers, num_heads=size.num_heads, ffn_size=4 * size.hidden_size,
                        max_position_embeddings=size.max_seq_length, hidden_dropout=0.0, attention_dropout=0.0,
                        classifier_dropout=0.0)
    every = max(1, max_steps // 5)
    return RunConfig(model=model, preset="demo",
                     optim=OptimConfig(name=size.optimizer, lr=size.lr, warmup_steps=max(1, max_steps // 10)),
                     train=TrainConfig(max_steps=max_steps, batch_size=size.batch_size, log_every=10,
                                       eval_every=every, eval_batches=0, save_every=every, keep_last=2,
                                       max_minutes=size.train_minutes + 2.5 if max_minutes is None else max_minutes,
                                       seed=1234, precision=size.precision),
                     data=DataConfig(path=str(train_dir), eval_path=str(eval_dir)))


def fit_steps(run, size: DemoSize, scratch: Path, probe_steps: int = 14,
              minutes: float | None = None) -> tuple[int, float]:
    """Time a few training steps on this machine and return (steps that fit `minutes`, by default
    `size.train_minutes`; seconds per step), so a slow machine trains fewer steps (with a complete lr schedule)
    instead of running late. The median step after the first (which warms up) counts: the fastest one,
    counted before, was 10x faster than the run's steps on a busy machine, whose budget then stopped the run at
    a tenth of its schedule, still in warmup. `train.max_minutes` stops the run if the guess was too optimistic.

    Where torch runs more than one thread, the second half of the steps runs on one thread, and torch's thread
    count is left at the faster of the two: the demo's model is small, and on a busy shared 2-core machine
    (load 8-10) its steps took 1.2-3 s on torch's two threads, which wait for each other when the cores are
    taken, and 0.16-0.25 s on one: `make demo` fitted 149 steps on two (held-out MLM accuracy 4.5%, the
    most-frequent-token baseline's 4.4%) and 2735 on one (13.9%); an idle machine keeps its threads where they
    are faster."""
    from dataclasses import replace

    import torch

    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import make_loop, open_datasets

    threads = torch.get_num_threads()
    half = probe_steps // 2 if threads > 1 else probe_steps   # the steps on torch's threads, then one thread's
    probe = run.replace(train=replace(run.train, max_steps=probe_steps, progress=False, tensorboard=False,
                                      save_every=0, eval_every=0, log_every=0, max_minutes=0),
                        data=replace(run.data, eval_path=""))
    loop = make_loop(probe, scratch, open_datasets(probe), DistInfo(), False)
    loop.save = lambda: None
    stamps = []

    def on_step(step: int, metrics: dict) -> None:
        stamps.append(time.perf_counter())
        if len(stamps) == half:
            torch.set_num_threads(1)

    loop.on_step = on_step
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # the loop's words on a stop ("saved None; `--resume` ...")
            status = loop.run()                           # are about a run; the probe saves nothing and has no run
    finally:
        torch.set_num_threads(threads)
    if status == "interrupted":   # Ctrl-C here was taken by the loop as a request to stop after a step: the
        raise KeyboardInterrupt   # demo went on to pretrain as if nothing had been pressed
    seconds = _typical_step(stamps[:half])
    if len(stamps) > half:        # one thread's steps: their first interval is the first step on one thread
        one_thread = _typical_step(stamps[half - 1:])
        if one_thread < seconds:
            seconds = one_thread
            torch.set_num_threads(1)
    seconds *= 1.1                                  # evaluations and checkpoints on top of the steps
    return steps_for(size, size.train_minutes if minutes is None else minutes, seconds), seconds


def _typical_step(stamps: list[float]) -> float:
    """The median of the intervals between the steps' end times, after the first interval (a warm-up)."""
    intervals = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(intervals[1:] or intervals)


def steps_for(size: DemoSize, minutes: float, seconds_per_step: float) -> int:
    """The steps that fit `minutes`, within the size's bounds."""
    return max(size.min_steps, min(size.max_steps, int(minutes * 60 / seconds_per_step)))


def unigram_baseline(train_dir: Path, eval_dir: Path) -> tuple[float, str]:
    """Accuracy on the held-out masked slots of always predicting the training data's most frequent
    masked token (the best context-free guess)."""
    from albertlm.data.loader import PretrainingDataset

    def masked_ids(directory: Path) -> np.ndarray:
        ds = PretrainingDataset(directory)
        ids = [item["masked_lm_ids"][item["masked_lm_weights"] > 0] for item in (ds[i] for i in range(len(ds)))]
        return np.concatenate(ids)

    train_ids = masked_ids(train_dir)
    top = int(np.bincount(train_ids).argmax())
    return float((masked_ids(eval_dir) == top).mean()), str(top)


def length_baseline(train_dir: Path, eval_dir: Path) -> dict | None:
    """The held-out SOP accuracy of the segment lengths alone (`evaluation.length_baseline`): {"rule": the rule
    "swapped when A is longer than B", "fitted": a table P(swapped | len A, len B) fitted on the training data}.
    Above chance, as the sentence closing a chunk (always in B) tends to be its longest: 61.3% (rule) on the full
    demo's held-out data, where 50% was printed as the reference. None where `eval_dir` holds no built data
    (the demo's own stages always build it; stand-ins for them may not)."""
    from albertlm.experiments.evaluation import length_baseline as baseline

    if not (Path(eval_dir) / "meta.json").is_file():
        return None
    got = baseline(train_dir, eval_dir)
    return {"rule": got["rule_acc"], "fitted": got["fitted_acc"]}


# ------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m albertlm.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="directory for everything the demo writes: a new or empty one, or an earlier "
                        f"demo's, whose files it replaces (default: demo_run; with --quick {QUICK_OUT})")
    parser.add_argument("--quick", action="store_true", help="a one-minute smoke version")
    args = parser.parse_args(argv)
    # the smoke version has its own default: in demo_run it replaced the full demo's run (its checkpoint, curves and
    # summary.json) with ten steps' worth, and a model fine-tuned from demo_run/run lost the checkpoint it names
    out = Path(args.out or (QUICK_OUT if args.quick else "demo_run")).resolve()
    import torch

    threads = torch.get_num_threads()   # the probe may leave one thread set (`fit_steps`); a caller's comes back
    try:
        return run_demo(out, args.quick)
    except UserError as exc:
        print(f"albertlm demo: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:   # a read-only checkout, a full disk, a quota: the system's words, as the CLI says them
        text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__
        print(f"albertlm demo: error: {text}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before or after pretraining (which says its own words and returns 130)
        print(f"albertlm demo: interrupted; what it wrote so far is in {out}, and the demo starts over when "
              "run again", file=sys.stderr)
        return 130
    finally:
        torch.set_num_threads(threads)


QUICK_OUT = "demo_run/quick"   # --quick's default --out, inside the full demo's (which leaves it alone)
MARK = ".albertlm-demo"        # written in --out before anything else: the folder is a demo's, to replace when rerun
# all a demo writes in --out, and the quick demo's folder inside the full demo's
DEMO_NAMES = {"corpus", "tokenizer", "data", "run", "probe", "summary.json", MARK, Path(QUICK_OUT).name}


def check_dependencies() -> None:
    """The packages the later stages import (TensorBoard events while pretraining, matplotlib for the plot),
    imported before the first stage: an install lacking one ran the stages before it and then stopped in a
    traceback, ten minutes in for the plot."""
    import importlib

    from albertlm.cli.main import missing_dependency

    for module in ("tensorboard", "matplotlib"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UserError(missing_dependency(exc, "demo") or f"{module} cannot be imported: {exc}") from None


def check_out(out: Path) -> None:
    """A UserError unless `out` is missing, empty, or an earlier demo's: the demo replaces its corpus/, tokenizer/,
    data/ and run/ there. The names alone were taken as a demo's: `--out work` where `work/run` held the user's own
    pretraining run (or `work/corpus/train.txt` their text) deleted the run and overwrote the text without a word.
    A demo's folder is known by `MARK` (written before anything else, so a stopped demo's too), or, for one written
    before the mark, by its summary.json or its run's config (preset "demo")."""
    if not out.exists():
        return
    if not out.is_dir():   # `--out README.md` was told it "holds other files than an earlier demo's"
        raise UserError(f"--out {out} is a file, not a directory; give a new or empty directory for the demo")
    names = {p.name for p in out.iterdir()}
    if not names <= DEMO_NAMES:
        raise UserError(f"--out {out} holds other files than an earlier demo's ({', '.join(sorted(DEMO_NAMES))}); "
                        "give a new or empty directory (the demo replaces its run/ there)")
    if not names - {Path(QUICK_OUT).name} or {MARK, "summary.json"} & names or _demo_run(out / "run"):
        return   # empty, the full demo's folder holding only the quick demo's, or a demo's
    mine = ", ".join(f"{name}/" if (out / name).is_dir() else name for name in sorted(names))
    raise UserError(f"--out {out} holds {mine}, which the demo would replace, and nothing there says a demo wrote "
                    f"them (no {MARK}, summary.json or demo run/); give a new or empty directory (or remove that one "
                    "if an earlier demo stopped there)")


def _demo_run(run_dir: Path) -> bool:
    """Whether `run_dir` is a demo's pretraining run (its run_config.json's preset is "demo")."""
    try:
        return json.loads((run_dir / "run_config.json").read_text(encoding="utf-8")).get("preset") == "demo"
    except (OSError, ValueError, AttributeError):
        return False


def run_demo(out: Path, quick: bool) -> int:
    check_dependencies()
    check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARK).write_text("written by `python -m albertlm.demo`, which replaces what it wrote here when run "
                            "again with this --out\n", encoding="utf-8")
    # an earlier demo's summary goes first: one stopped by Ctrl-C or an error left it beside this demo's half-made
    # files (another tokenizer, no run/) as if it described them
    (out / "summary.json").unlink(missing_ok=True)
    size = QUICK if quick else FULL
    started = time.perf_counter()

    def stage(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    stage(f"1/6 extracting text from the Python standard library ({sys.version.split()[0]})")
    train_txt, heldout_txt, corpus_stats = write_corpus(out / "corpus", limit_chars=200_000 if quick else 0)
    train, held = corpus_stats["train"], corpus_stats["heldout"]
    stage(f"    {train['documents']} training documents ({train['MB']} MB), {held['documents']} held-out documents "
          f"({held['MB']} MB: one module in {HELD_OUT_EVERY})")
    stage(f"2/6 training a SentencePiece tokenizer, V={size.vocab_size}")
    tokenizer = train_tokenizer(train_txt, out / "tokenizer", size.vocab_size)
    stage(f"3/6 building SOP pretraining data ({size.masking} masking)")
    meta = build_data(train_txt, tokenizer, out / "data" / "train", size, size.dupe_factor, seed=1)
    eval_meta = build_data(heldout_txt, tokenizer, out / "data" / "heldout", size, 1, seed=2)
    stage(f"    {meta['num_instances']} training / {eval_meta['num_instances']} held-out sequences of "
          f"{size.max_seq_length} tokens")
    import shutil

    import torch

    from albertlm.training.pretrain import pretrain

    run = run_config(size, meta["tokenizer"]["vocab_size"], out / "data" / "train", out / "data" / "heldout",
                     size.max_steps)
    shutil.rmtree(out / "probe", ignore_errors=True)
    default_threads = torch.get_num_threads()
    seconds = fit_steps(run, size, out / "probe")[1]
    shutil.rmtree(out / "probe", ignore_errors=True)
    minutes, stop_minutes = training_minutes(size, time.perf_counter() - started)
    steps = steps_for(size, minutes, seconds)
    run = run_config(size, meta["tokenizer"]["vocab_size"], out / "data" / "train", out / "data" / "heldout", steps,
                     max_minutes=stop_minutes)
    stage(f"4/6 pretraining ALBERT (E={size.embedding_size}, H={size.hidden_size}, L={size.num_layers}, all "
          f"layers shared): {_plan(size, steps, seconds, minutes)} ({size.optimizer}, lr {size.lr}, "
          f"{_threads_text(torch.get_num_threads(), default_threads)}; stopped at {stop_minutes:g} min if slower)")
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    status = pretrain(run, run_dir)
    if status == "interrupted":
        # pretraining's own last words say `--resume` continues: that is `albertlm pretrain`'s, the demo starts over
        print(f"albertlm demo: pretraining {status}; the run so far is in {run_dir} (`albertlm pretrain --out "
              f"{run_dir} --resume` continues it outside the demo; the demo starts over when run again)",
              file=sys.stderr)
        return 130
    from albertlm.training.checkpoint import latest_checkpoint
    from albertlm.training.evaluate import evaluate_checkpoint

    final = latest_checkpoint(run_dir)
    if status == "budget":
        stage(f"    pretraining stopped at step {_final_step(final)} of {steps}: this machine ran slower than "
              f"the probe measured (busy?), and the demo keeps to {size.total_minutes:g} minutes; its learning "
              "rate schedule did not finish, so the results below are lower than a full run's")
    stage("5/6 evaluating the final checkpoint on held-out modules")
    metrics = (recorded_evaluation(run_dir, _final_step(final))
               or evaluate_checkpoint(final, out / "data" / "heldout", device="cpu"))
    baseline, _ = unigram_baseline(out / "data" / "train", out / "data" / "heldout")
    lengths = length_baseline(out / "data" / "train", out / "data" / "heldout") or {}
    stage("6/6 plotting")
    from albertlm.training.plots import plot_run

    png = plot_run(run_dir)
    summary = {"minutes": round((time.perf_counter() - started) / 60, 1), "steps": _final_step(final),
               "planned_steps": steps, "stopped_by_time_budget": status == "budget",
               "mlm_accuracy": round(metrics["mlm_acc"], 4), "unigram_baseline_accuracy": round(baseline, 4),
               "sop_accuracy": round(metrics.get("sop_acc", float("nan")), 4),
               # the segment lengths' SOP accuracy: the rule (printed) and the table fitted on the training data
               "sop_length_baseline_accuracy": _rounded(lengths.get("rule")),
               "sop_length_fitted_accuracy": _rounded(lengths.get("fitted")),
               "mlm_loss": round(metrics["mlm_loss"], 4)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _print_summary(out, final, png, summary)
    return 0


def _plan(size: DemoSize, steps: int, seconds: float, minutes: float) -> str:
    """What the probe's speed makes of the pretraining: the steps that fit `minutes`, or, on a machine so slow
    that even `size.min_steps` do not fit, how long those take (the time budget then stops the run early)."""
    per_step = _seconds_text(seconds, steps)
    if steps * seconds <= minutes * 60:
        return f"{per_step} s/step here, so {steps} steps of {size.batch_size} sequences fit {minutes:g} min"
    return (f"{per_step} s/step here, so even the demo's fewest steps, {steps} of {size.batch_size} sequences, "
            f"take about {steps * seconds / 60:.1f} min, over the {minutes:g} min they were to fit")


def _threads_text(threads: int, default: int) -> str:
    """The threads pretraining runs on, and torch's default where the probe found one thread faster."""
    text = f"{threads} thread{'' if threads == 1 else 's'}"
    return text if threads == default else f"{text}: faster here than {default}"


def _seconds_text(seconds: float, steps: int) -> str:
    """`seconds` with two decimals, or as many more (up to four) as keep `steps` times the printed number within
    3 s of the time it was fitted with: two decimals printed "0.13 s/step here, so 3575 steps of 32 sequences fit
    7.5 min" for 0.1259 s, and 3575 x 0.13 s is 7.75 min."""
    for decimals in (2, 3):
        text = f"{seconds:.{decimals}f}"
        if abs(float(text) - seconds) * steps <= 3.0:
            return text
    return f"{seconds:.4f}"


def recorded_evaluation(run_dir: Path, step: int) -> dict | None:
    """The held-out metrics pretraining recorded at `step` (its evaluations cover all the held-out data,
    `eval_batches=0`, and the run evaluates its last step), or None where it recorded none: evaluating the
    final checkpoint again repeated the same numbers and took up to a minute of the demo's ten on a busy
    machine."""
    from albertlm.training.metrics import read_metrics

    for record in read_metrics(run_dir):
        if record["split"] == "eval" and record["step"] == step and "mlm_acc" in record:
            return record
    return None


def _final_step(checkpoint: Path) -> int:
    return int(checkpoint.name.split("_")[-1])


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _print_summary(out: Path, final: Path, png: Path, s: dict) -> None:
    lengths = s.get("sop_length_baseline_accuracy")
    sop_reference = ("chance 50%" if lengths is None else
                     f"50% by chance, {lengths:.1%} from segment lengths alone")
    steps = (f"{s['steps']} of {s['planned_steps']} steps: the time budget stopped pretraining"
             if s["stopped_by_time_budget"] else f"{s['steps']} steps")
    print(f"""
albertlm demo: done in {s['minutes']} min ({steps})
  held-out MLM accuracy  {s['mlm_accuracy']:.1%}   (most-frequent-token baseline {s['unigram_baseline_accuracy']:.1%})
  held-out SOP accuracy  {s['sop_accuracy']:.1%}   ({sop_reference})
  held-out MLM loss      {s['mlm_loss']:.3f}
where everything went ({out}):
  corpus/         the extracted text (train.txt, heldout.txt)
  tokenizer/      spiece.model
  data/           SOP shards (train, heldout)
  run/            metrics.jsonl, tensorboard/, run_config.json
  checkpoint      {final}
  curves          {png}
  summary.json""", flush=True)


if __name__ == "__main__":
    sys.exit(main())
