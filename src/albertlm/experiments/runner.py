"""Run a suite: prepare the shared inputs once, then every job (pretrain a run, or a no-pretraining
baseline), each ending in one result JSON; `--jobs N` runs N jobs at a time in worker processes.

    OUT/prepared/   corpus (capped by the scale), tokenizer/, data/{train,heldout}_{sop,nsp,none}, glue/ samples
    OUT/runs/NAME/  the pretraining run (checkpoints/, metrics.jsonl), finetune/TASK-sSEED/, result.json
    OUT/scratch/NAME/  the same shape from random weights: init/, finetune/TASK-sSEED/, result.json
    OUT/suite.json  the scale, the grid and the job list;   OUT/report.md, results.json, *.png (report.py)

A scale without fine-tuning tasks (`Scale.intrinsic_only`, a scale file's `finetune_tasks = []`) plans the
pretraining runs only (held-out MLM / SOP / NSP accuracy and layer transitions; no baselines); a task added to
its scale later fine-tunes the finished runs from their kept checkpoints and runs the baselines.

Resumable: a job whose result.json exists is skipped; a pretraining run killed midway continues from its
newest checkpoint (the loop's exact resume); a fine-tuning killed midway starts again (they are short).
An --out where nothing was measured yet (no result, no checkpoint: every job failed) takes a run with other
options, another scale included; what the failed jobs left that the new plan cannot use moves to
OUT/replaced/<time>/ (`retire_unmeasured`).
Every job of a suite sees the same data, the same data order (the seed's) and the same token budget.
One run of a suite at a time: a second `run_suite` on the same --out while one runs is refused (`suite_lock`).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from albertlm.errors import UserError, read_json_object, sigterm_stops
from albertlm.experiments.grids import Run, expand, full_model, resolve_grids
from albertlm.experiments.scales import FinetuneTask, Scale, get_scale

RESULT = "result.json"
OUTPUT = "output.log"      # what a job's pretraining or fine-tuning printed, when the suite is quiet
SENTENCE_HELDOUT = ("sop", "nsp")


class Stopped(RuntimeError):
    """A job's training loop stopped on a signal (after saving): the suite stops too, a rerun continues."""


@dataclass
class Suite:
    """Everything a job needs, picklable (sent to worker processes)."""
    out: Path
    scale: Scale
    grid: str
    runs: list[Run]
    train_text: Path
    heldout_text: Path
    glue_dir: Path
    threads: int = 0
    log_every: int = 100
    quiet: bool = True
    given_tokenizer: dict | None = None   # `--tokenizer`'s record (`given_tokenizer`); None: trained on the corpus

    @property
    def prepared(self) -> Path:
        return self.out / "prepared"

    def data(self, split: str, task: str) -> Path:
        return self.prepared / "data" / f"{split}_{task}"

    @property
    def tokenizer(self) -> Path:
        return self.prepared / "tokenizer"

    def heldout(self) -> dict[str, Path]:
        return {task: self.data("heldout", task) for task in SENTENCE_HELDOUT}


@dataclass(frozen=True)
class Job:
    kind: str                 # "pretrain" or "scratch"
    name: str
    run: Run                  # scratch: the first run of the shape (its model is the shape)
    seed: int

    @property
    def directory(self) -> str:
        return f"runs/{self.name}" if self.kind == "pretrain" else f"scratch/{self.name}"


# ------------------------------------------------------------------------------------------------- plan
def plan_jobs(runs: list[Run], baselines: bool = True) -> list[Job]:
    """Pretraining runs in priority order; after each grid's first-seed runs, the no-pretraining baselines of
    the shapes they introduced (one per shape and seed), so claim 5 is measurable as early as possible.
    `baselines` False (a scale without fine-tuning tasks, `suite_jobs`): the pretraining runs only (a baseline is
    a random model fine-tuned, nothing else)."""
    jobs: list[Job] = []
    shapes_done: set[str] = set()
    pending: dict[str, Run] = {}
    seeds = sorted({r.seed for r in runs})
    baseline_of: dict[str, str] = {}   # baseline name -> shape key

    def flush():
        for key, run in pending.items():
            if baseline_of.setdefault(shape_name(run), key) != key:
                raise UserError(f"variants {run.variant!r} and another one have different shapes but the same "
                                f"no-pretraining baseline name {shape_name(run)!r}; rename one")
            for seed in seeds if baselines else ():
                jobs.append(Job("scratch", f"{shape_name(run)}-s{seed}", run, seed))
            shapes_done.add(key)
        pending.clear()

    for i, run in enumerate(runs):
        jobs.append(Job("pretrain", run.name, run, run.seed))
        if run.shape_key not in shapes_done and run.shape_key not in pending:
            pending[run.shape_key] = run
        last_of_block = (i + 1 == len(runs) or runs[i + 1].grids[0] != run.grids[0]
                         or runs[i + 1].seed != run.seed)
        if last_of_block:
            flush()
    return jobs


def suite_jobs(suite: Suite) -> list[Job]:
    """The suite's jobs (`plan_jobs`): without the no-pretraining baselines when its scale fine-tunes nothing
    (`Scale.intrinsic_only`); a task added to the scale later plans them, and fine-tunes the finished runs."""
    return plan_jobs(suite.runs, baselines=not suite.scale.intrinsic_only)


def shape_name(run: Run) -> str:
    """The variant label without its sentence task (E128-all-sop -> scratch-E128-all): the baseline's name."""
    parts = run.variant.split("-")
    if len(parts) >= 3 and parts[0].startswith("E") and parts[2] in ("sop", "nsp", "none"):
        del parts[2]
    return "scratch-" + "-".join(parts)


def baseline_name(runs: list[Run], run: Run) -> str:
    """The name of `run`'s no-pretraining baseline (the `shape` its result records, by which the report finds that
    baseline): `shape_name` of the first of `runs` with its shape, the run `plan_jobs` makes the baseline of. A
    variant named in a grid file ("sop", "nsp" of one shape) recorded its own name's shape ("scratch-nsp"), a
    baseline never run, so the report compared it with nothing (claim 5 "so far" for ever)."""
    return shape_name(next((r for r in runs if r.shape_key == run.shape_key), run))


def make_suite(out: str | Path, scale: Scale, grid: str, corpus: str | Path, glue_dir: str | Path,
               seeds: tuple[int, ...] | None = None, threads: int = 0,
               tokenizer: str | Path | None = None) -> Suite:
    """The suite of `grid` at `scale` on `corpus`; `tokenizer` (a SentencePiece model, a WordPiece vocab, a
    tokenizer.json or a directory holding one) replaces the SentencePiece model the suite would train on the
    corpus, and the scale's V becomes its vocabulary size."""
    train, heldout = corpus_files(corpus)
    given = given_tokenizer(tokenizer) if tokenizer else None
    if given:   # every model's vocabulary is the tokenizer's
        scale = replace(scale, vocab_size=given["vocab_size"])
    if seeds:   # the suite's scale records the seeds it ran with (the report states them)
        scale = replace(scale, seeds=tuple(seeds))
    runs = expand(resolve_grids(grid), scale)
    return Suite(Path(out).resolve(), scale, grid, runs, train.resolve(), heldout.resolve(),
                 Path(glue_dir).resolve(), threads, given_tokenizer=given)


def given_tokenizer(path: str | Path) -> dict:
    """`--tokenizer PATH`, loaded (a bad one is a UserError naming it): {"given": its absolute path, "kind",
    "vocab_size", "vocab_sha256": every token in id order, "options": its preprocessing}. The suite copies it
    into prepared/tokenizer/ and records this in prepared.json and suite.json; a rerun must give the same
    tokenizer (`same_tokenizer`: kind, vocabulary and preprocessing; the path may differ)."""
    from dataclasses import asdict, is_dataclass

    from albertlm.data.build import vocab_fingerprint
    from albertlm.tokenization import load_tokenizer

    try:
        tok = load_tokenizer(path)
    except UserError as exc:
        raise UserError(f"--tokenizer {path}: {str(exc).strip()}") from None
    options = tok.options if hasattr(tok, "options") else {}
    options = asdict(options) if is_dataclass(options) else dict(options or {})
    return {"given": str(Path(path).expanduser().resolve()), "kind": tok.kind, "vocab_size": tok.vocab_size,
            "vocab_sha256": vocab_fingerprint(tok), "options": json.loads(json.dumps(options, default=str))}


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two `given_tokenizer` records are one tokenizer (kind, vocabulary, preprocessing)."""
    keys = ("kind", "vocab_sha256", "options")
    return isinstance(a, dict) and isinstance(b, dict) and all(a.get(k) == b.get(k) for k in keys)


def tokenizer_text(record: Any) -> str:
    """A tokenizer record in words: `--tokenizer PATH (wordpiece, V=N)`, or the suite's own."""
    if isinstance(record, dict) and record.get("given"):
        return f"--tokenizer {record['given']} ({record.get('kind')}, V={record.get('vocab_size')})"
    return "its own SentencePiece tokenizer trained on the corpus (no --tokenizer)"


def check_same_tokenizer(suite: Suite) -> None:
    """Refuse to continue a suite whose finished jobs used another tokenizer than this command's (another
    `--tokenizer`, one given where the suite trained its own, or none where one was given): their ids would
    mean other pieces. Before the scale's check, which would name only the vocabulary size that follows."""
    done = suite.prepared / "prepared.json"
    if not done.is_file() or not measured(suite):   # nothing measured: `retire_unmeasured` prepares again
        return
    saved = read_json(done, "the suite's prepared data record")
    had = saved.get("tokenizer") if isinstance(saved, dict) else None
    had = had if isinstance(had, dict) and had.get("given") else None
    want = suite.given_tokenizer
    if (had is None and want is None) or same_tokenizer(had, want):
        return
    changed = (" (its vocabulary or options changed since)"
               if had and want and had.get("given") == want.get("given") else "")
    fix = f"--tokenizer {had['given']}" if had else "no --tokenizer"
    raise UserError(f"--out {suite.out} was prepared with {tokenizer_text(had)}, not {tokenizer_text(want)}"
                    f"{changed}: give {fix} as it was run, or another --out")


def corpus_files(corpus: str | Path) -> tuple[Path, Path]:
    """A corpus directory holds train.txt and heldout.txt (benchmarks/assemble_corpus.py writes them)."""
    corpus = Path(corpus)
    train, heldout = corpus / "train.txt", corpus / "heldout.txt"
    for path in (train, heldout):
        if not path.is_file():
            raise UserError(f"--corpus {corpus}: no {path.name} (a corpus directory holds train.txt and "
                            f"heldout.txt of held-out documents; benchmarks/assemble_corpus.py writes one)")
    for path in (train, heldout):
        if not _has_text(path):
            raise UserError(f"--corpus {corpus}: {path} has no text (one sentence per line, a blank line "
                            f"between documents)")
    return train, heldout


def _has_text(path: Path) -> bool:
    """Whether a corpus file has a non-blank line (read up to the first one; undecodable bytes count as text,
    the tokenizer's reader replaces them)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        return any(line.strip() for line in f)


# ---------------------------------------------------------------------------------------------- prepare
def _copy_capped(src: Path, dst: Path, max_chars: int) -> Path:
    """The first `max_chars` characters of a corpus, cut at a document boundary (0 = the file itself)."""
    if not max_chars:
        return src
    dst.parent.mkdir(parents=True, exist_ok=True)
    kept, total = [], 0
    with src.open(encoding="utf-8") as f:
        document: list[str] = []
        for line in f:
            document.append(line)
            if not line.strip():
                kept.extend(document)
                total += sum(map(len, document))
                document = []
                if total >= max_chars:
                    break
        else:
            kept.extend(document)
    dst.write_text("".join(kept), encoding="utf-8")
    return dst


PREPARE_PARALLEL_CHARS = 2_000_000   # below this, worker processes cost more to start than they save


def prepare_workers(suite: Suite, jobs: int) -> int:
    """Data-build workers for the preparation, which runs before any job: every core this process may use
    (up to 16) for a corpus worth it, else one per job. The data are byte-identical for any count; on a
    16-core GPU machine its data build took ~5 minutes with 3 workers and ~25 s with 14 (the gpu scale)."""
    if suite.train_text.is_file() and suite.train_text.stat().st_size >= PREPARE_PARALLEL_CHARS:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(jobs, min(16, cores))
    return max(1, jobs)


def prepare_settings(suite: Suite) -> dict:
    """What the prepared data depend on (kept in prepared.json; a rerun with other data settings is refused)."""
    s = suite.scale
    settings = {"vocab_size": s.vocab_size, "max_seq_length": s.max_seq_length, "masking": s.masking,
                "dupe_factor": s.dupe_factor, "corpus_chars": s.corpus_chars, "heldout_chars": s.heldout_chars,
                "finetune_tasks": [t.__dict__ for t in s.finetune_tasks],
                "train": str(suite.train_text), "heldout": str(suite.heldout_text)}
    if suite.given_tokenizer:   # (absent for a trained one, as in the records written before --tokenizer)
        settings["tokenizer"] = {k: suite.given_tokenizer[k] for k in ("kind", "vocab_sha256", "options")}
    return settings


def prepare(suite: Suite, log=print, workers: int = 1) -> dict:
    """Tokenizer, pretraining data and GLUE samples, built once per suite directory (kept on a rerun)."""
    done = suite.prepared / "prepared.json"
    settings = prepare_settings(suite)
    if done.is_file():
        saved = check_prepared(suite)
        files = glue_fingerprint(suite)
        # --refinetune: new GLUE samples; the suite (or --glue-dir) moved: its files are here now (the same seeded
        # samples, written again where missing); files changed where nothing of theirs was fine-tuned yet
        if (saved["settings"].get("finetune_tasks") != settings["finetune_tasks"]
                or saved.get("glue") != glue_paths(suite) or saved.get("glue_files", files) != files):
            saved.update(settings=settings, glue=prepare_glue(suite), glue_files=files)
            _write_json(done, saved)
        elif "glue_files" not in saved:   # a record older than the digests: from now on
            saved["glue_files"] = files
            _write_json(done, saved)
        return saved
    fresh = not suite.prepared.exists()
    try:
        return _prepare_fresh(suite, settings, log, workers)
    except BaseException:
        if fresh:   # nothing of a half-made preparation is kept (a rerun starts it again)
            shutil.rmtree(suite.prepared, ignore_errors=True)
        raise


def check_prepared(suite: Suite, stale: list[str] = ()) -> Any:
    """The prepared data's record (prepared.json), refused when it was prepared with other data settings than
    the suite's (another corpus, vocabulary, length, masking), or when the fine-tuning files under --glue-dir
    are not those its fine-tunings read (`glue_change`; `stale`: tasks --refinetune fine-tunes again): what
    `prepare` would refuse, so `--list-jobs` refuses it too rather than listing every job as done."""
    saved = read_json(suite.prepared / "prepared.json", "the suite's prepared data record")
    why = prepared_difference(saved, prepare_settings(suite))
    if why:
        raise UserError(f"{suite.out} was prepared with other data settings (scale or corpus: {why}); use "
                        f"another --out")
    changed = corpus_change(suite, saved.get("corpus_files") if isinstance(saved, dict) else None)
    if changed:   # edited in place: the finished jobs measured the text it had then
        raise UserError(f"--corpus {suite.train_text.parent}: {changed} since {suite.out} was prepared from it; "
                        f"the suite's runs are of the text it had then: restore it, or give another --out for "
                        f"the new text")
    changed = glue_change(suite, saved.get("glue_files") if isinstance(saved, dict) else None, stale)
    if changed:   # another --glue-dir, or its files edited: new fine-tunings would read other data than the old
        raise UserError(f"--glue-dir {suite.glue_dir}: {changed} (new fine-tunings would be averaged with theirs): "
                        f"give the --glue-dir the suite was run with, its files as they were, or another --out")
    return saved


def glue_fingerprint(suite: Suite) -> dict:
    """The SHA-256 digest of each fine-tuning task's files under --glue-dir (its training file, the one a sample
    is drawn from, and its dev files), kept in prepared.json: a rerun given another --glue-dir, or the same one
    with its files edited, is told from the one the suite fine-tuned on (`glue_change`); a suite moved with its
    GLUE folder, or given a copy of it, reads the same digests. {} when a task lacks its files; a task without
    its folder is left out (`--list-jobs` needs no --glue-dir; a run is refused it before this)."""
    out = {}
    for task in suite.scale.finetune_tasks:
        if not (suite.glue_dir / task.dir_name).is_dir():
            continue
        _, train, dev = _task_files(suite, task)
        if not train or not dev:
            return {}
        out[task.name] = {"train": _sha256(train[0]), "dev": [_sha256(p) for p in dev]}
    return out


def glue_change(suite: Suite, recorded: Any, stale: list[str] = ()) -> str:
    """How a task's files under --glue-dir differ from those recorded (prepared.json's `glue_fingerprint`; None in
    a record older than it) when fine-tunings of that task were measured (a task of `stale` is fine-tuned again
    anyway): "SST-2's training file is not the one OUT's fine-tunings of sst2 read", or "" (nothing that matters)."""
    if not isinstance(recorded, dict):
        return ""
    now = glue_fingerprint(suite)
    for task in suite.scale.finetune_tasks:
        had, have = recorded.get(task.name), now.get(task.name)
        if task.name in stale or not isinstance(had, dict) or have is None or had == have:
            continue
        if any(next((suite.out / kind).glob(f"*/finetune/{task.name}-s*/{RESULT}"), None) is not None
               for kind in ("runs", "scratch")):
            what = "training file is not the one" if had.get("train") != have["train"] else "dev files are not those"
            return f"{task.dir_name}'s {what} {suite.out}'s fine-tunings of {task.name} read"
    return ""


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def corpus_fingerprint(suite: Suite) -> dict:
    """The corpus files' sizes, modification times and SHA-256 digests, kept in prepared.json: a corpus edited
    in place (same path) is told from the one prepared (`corpus_change`)."""
    out = {}
    for name, path in (("train", suite.train_text), ("heldout", suite.heldout_text)):
        stat = path.stat()
        out[name] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(path)}
    return out


def corpus_change(suite: Suite, recorded: Any) -> str:
    """How the corpus files differ from `recorded` (prepared.json's `corpus_fingerprint`; None in a record
    older than it): "" when they are the same. Cheap on every rerun: another size differs at once, a file of
    the recorded size and modification time is the same; only a file touched since is read (its SHA-256)."""
    if not isinstance(recorded, dict):
        return ""
    for name, path in (("train", suite.train_text), ("heldout", suite.heldout_text)):
        had = recorded.get(name)
        if not isinstance(had, dict):
            continue
        stat = path.stat()
        if had.get("bytes") != stat.st_size:
            return f"{path.name} changed ({had.get('bytes')} bytes then, {stat.st_size} now)"
        if had.get("mtime_ns") != stat.st_mtime_ns and had.get("sha256") != _sha256(path):
            return f"{path.name} changed (the same size, other text)"
    return ""


def prepared_difference(saved: Any, settings: dict) -> str:
    """How the data settings a prepared.json records differ from `settings` (fine-tuning samples aside, which
    are made again): the first differing field in words, or ""."""
    recorded = (saved.get("settings") if isinstance(saved, dict) else None) or {}
    had = {k: v for k, v in recorded.items() if k != "finetune_tasks"}
    want = {k: v for k, v in settings.items() if k != "finetune_tasks"}
    return _first_difference(had, want) if had != want else ""


# SentencePiece's default keeps 99.995% of the corpus's characters as pieces of their own; a corpus with more
# distinct characters than the scale's V allows (Chinese, Japanese, Korean at V = 400) is retried with these
# (0.9995: google's recommendation for CJK; SentencePiece accepts nothing below 0.98)
COVERAGES = (0.9995, 0.999, 0.995, 0.99, 0.98)


# below this share of ASCII Latin letters among a corpus's letters (`latin_share`: Korean, Japanese, Chinese, Russian,
# Hindi...), the suite's tokenizer keeps accents and marks: ALBERT's accent stripping (NFKD, combining characters
# dropped), meant for English, turns ガ into カ, й into и and drops Devanagari's vowel signs
KEEP_ACCENTS_BELOW = 0.5


def train_tokenizer(train: Path, out: Path, vocab_size: int, scale_name: str = "", log=print) -> dict:
    """The suite's SentencePiece model, lowercased as ALBERT's, its accents stripped as ALBERT's unless the corpus
    is mostly not Latin letters (`KEEP_ACCENTS_BELOW`); returns {"character_coverage": c, "default_coverage": d,
    "keep_accents": bool}."""
    from albertlm.tokenization.sentencepiece import (SentencePieceOptions, SentencePieceTrainOptions,
                                                     train_sentencepiece)

    latin = latin_share(train)
    keep_accents = latin is not None and latin < KEEP_ACCENTS_BELOW
    default = SentencePieceTrainOptions().character_coverage
    last = ""
    for coverage in (default, *COVERAGES):
        try:
            train_sentencepiece([train], out, SentencePieceTrainOptions(vocab_size=vocab_size,
                                                                        character_coverage=coverage,
                                                                        input_sentence_size=2_000_000),
                                SentencePieceOptions(do_lower_case=True, keep_accents=keep_accents),
                                show_progress=False)
        except UserError as exc:
            too_high = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", str(exc))
            if too_high:
                raise UserError(f"the corpus is too small for scale {scale_name}'s vocabulary: SentencePiece makes at "
                                f"most {too_high.group(1)} pieces of its text, not V={vocab_size}; give a larger "
                                f"corpus") from None
            if "required_chars" not in str(exc):
                raise
            last = str(exc).split("required_chars.")[-1].split(".")[0].strip()   # "400 vs 1063"
            continue
        if coverage != default:
            log(f"prepare: the corpus has more distinct characters than V={vocab_size} allows at SentencePiece's "
                f"default character coverage {default}: trained with coverage {coverage} (rarer characters "
                f"become <unk>)")
        return {"character_coverage": coverage, "default_coverage": default, "keep_accents": keep_accents}
    needed = re.search(r"vs (\d+)", last)
    suggest = f"--vocab-size {-(-int(needed.group(1)) * 3 // 200) * 100} or more, or " if needed else ""
    raise UserError(f"the corpus has more distinct characters than scale {scale_name}'s vocabulary V={vocab_size} "
                    f"can hold even at character coverage {COVERAGES[-1]} (V vs characters needed: {last}); "
                    f"give {suggest}a larger scale (cpu: V=4000, gpu: V=30000)")


def _prepare_fresh(suite: Suite, settings: dict, log, workers: int) -> dict:
    done = suite.prepared / "prepared.json"
    s = suite.scale
    train = _copy_capped(suite.train_text, suite.prepared / "corpus" / "train.txt", s.corpus_chars)
    heldout = _copy_capped(suite.heldout_text, suite.prepared / "corpus" / "heldout.txt", s.heldout_chars)
    if suite.given_tokenizer:   # the user's own (copied in: the suite keeps working if it moves)
        from albertlm.tokenization import load_tokenizer

        tokenizer = dict(suite.given_tokenizer)
        log(f"prepare: tokenizer {tokenizer_text(tokenizer).removeprefix('--tokenizer ')}, given with --tokenizer")
        load_tokenizer(tokenizer["given"]).save(suite.tokenizer)
    else:
        log(f"prepare: tokenizer (SentencePiece unigram, V={s.vocab_size}) on {train}")
        tokenizer = train_tokenizer(train, suite.tokenizer, s.vocab_size, s.name, log)
        if tokenizer.get("keep_accents"):
            log("prepare: the corpus is mostly not Latin letters: its tokenizer keeps accents and marks (ALBERT's "
                "accent stripping is for English: it would turn ガ into カ, й into и)")
    from albertlm.data.build import BuildConfig, build

    metas = {}
    tasks = list(("sop", "nsp", "none"))       # all three, so that a later grid in the same --out finds them
    for split, text, task_list, dupe in (("train", train, tasks, s.dupe_factor),
                                         ("heldout", heldout, list(SENTENCE_HELDOUT), 1)):
        for task in task_list:
            out = suite.data(split, task)
            log(f"prepare: {split} data, sentence task {task}, T={s.max_seq_length}, {s.masking} masking")
            build(BuildConfig(inputs=[str(text)], tokenizer=str(suite.tokenizer), out=str(out), format="lines",
                              max_seq_length=s.max_seq_length, sentence_task=task, dupe_factor=dupe,
                              masking=s.masking, seed=12345, workers=workers, overwrite=True, progress=False))
            meta = json.loads((out / "meta.json").read_text())
            metas[f"{split}_{task}"] = {k: meta.get(k) for k in ("num_instances", "counts", "corpus") if k in meta}
    glue = prepare_glue(suite)
    summary = {"settings": settings, "data": metas, "glue": glue, "tokenizer": tokenizer,
               "corpus_files": corpus_fingerprint(suite), "glue_files": glue_fingerprint(suite),
               "glue_tokens": glue_token_fit(suite, glue), "latin_share": latin_share(train), "corpus_chars": {
                   "train": train.stat().st_size, "heldout": heldout.stat().st_size}}
    _write_json(done, summary)      # last, whole: its presence says the preparation is complete
    return summary


def glue_token_fit(suite: Suite, glue: dict, rows: int = 200) -> dict | None:
    """How the suite's tokenizer cuts the fine-tuning text (the first `rows` rows of each task's training
    sample): the share of its tokens that are <unk> or a single character, and the share of its words of 3 or
    more characters cut into nothing but single characters and <unk> ("spelled"). A tokenizer trained on
    another language than GLUE's English spells most English words (even a tiny English one, V = 400, keeps
    the common words whole), and the downstream scores mean little."""
    from albertlm.tokenization import load_tokenizer

    try:
        tokenizer = load_tokenizer(suite.tokenizer)
        unk = tokenizer.id_to_token(tokenizer.unk_id)   # <unk>, or a WordPiece vocab's [UNK] (--tokenizer)
        tokens = unknown = single = words = spelled = 0
        for files in glue.values():
            lines = Path(files["train"]).read_text(encoding="utf-8").splitlines()[1:rows + 1]
            for line in lines:
                for word in " ".join(c for c in line.split("\t") if c and not _number(c)).split():
                    pieces = tokenizer.tokenize(word)   # a character alone: ▁c (SentencePiece) or ##c (WordPiece)
                    short = [p == unk or len(p.lstrip("\u2581").removeprefix("##")) <= 1 for p in pieces]
                    tokens += len(pieces)
                    unknown += sum(p == unk for p in pieces)
                    single += sum(short) - sum(p == unk for p in pieces)
                    if len(word) >= 3 and word.isalpha():
                        words += 1
                        spelled += all(short)

    except Exception:   # a note only: never the reason a suite cannot run
        return None
    if not tokens or not words:
        return None
    return {"tokens": tokens, "unk_share": unknown / tokens, "single_char_share": single / tokens,
            "words": words, "spelled_word_share": spelled / words}


def latin_share(path: Path, max_chars: int = 2_000_000) -> float | None:
    """The share of the letters in (the first `max_chars` characters of) a corpus file that are ASCII Latin
    letters: about 1 for English, near 0 for Korean, Chinese or Japanese text; None without letters."""
    with path.open(encoding="utf-8", errors="replace") as f:
        text = f.read(max_chars)
    letters = [c for c in text if c.isalpha()]
    return sum(c.isascii() for c in letters) / len(letters) if letters else None


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _task_files(suite: Suite, task: FinetuneTask) -> tuple[Path, list[Path], list[Path]]:
    """A fine-tuning task's folder under --glue-dir and its train and dev files there (empty lists if absent)."""
    from albertlm.tasks import glue

    directory = suite.glue_dir / task.dir_name
    info = glue.get_task(task.name)
    train, dev = glue.find_split(info, directory, "train"), glue.find_split(info, directory, "dev")
    exports = [p for p in train + dev if glue.hub_format(Path(p)) is not None]
    if exports:     # the sampling and the token-fit check read GLUE's TSV lines (a Parquet file is no text)
        raise UserError(f"{exports[0]}: a Hugging Face datasets export; ablate samples GLUE's own TSV files "
                        f"(--glue-dir {suite.glue_dir}: {task.dir_name}/train.tsv and dev.tsv)")
    return directory, train, dev


def glue_paths(suite: Suite) -> dict:
    """Where `prepare_glue` puts (and finds) each fine-tuning task's files for this suite, as it stands now: a
    suite directory moved or copied elsewhere, or given another --glue-dir, reads its files there, never
    from the place recorded when it was prepared. {} when a task's folder lacks its files."""
    out = {}
    for task in suite.scale.finetune_tasks:
        _, train, dev = _task_files(suite, task)
        if not train or not dev:
            return {}
        train_file = suite.prepared / "glue" / task.dir_name / "train.tsv" if task.max_train else train[0]
        out[task.name] = {"train": str(train_file), "dev": [str(p) for p in dev]}
    return out


def prepare_glue(suite: Suite) -> dict:
    """Each fine-tuning task's files: a seeded sample of `max_train` training rows (the same for every
    model) or the whole file, and the task's dev set."""
    out = {}
    for task in suite.scale.finetune_tasks:
        directory, train, dev = _task_files(suite, task)
        if not train or not dev:
            raise UserError(f"{directory}: no train and dev files for {task.name}")
        train_file = train[0]
        if task.max_train:
            lines = train_file.read_text(encoding="utf-8").splitlines(keepends=True)
            header, rows = lines[:1], lines[1:]      # a header line, or one row always kept
            if len(rows) > task.max_train:
                rows = random.Random(0).sample(rows, task.max_train)
            train_file = suite.prepared / "glue" / task.dir_name / "train.tsv"
            train_file.parent.mkdir(parents=True, exist_ok=True)
            train_file.write_text("".join(header + rows), encoding="utf-8")
        out[task.name] = {"train": str(train_file), "dev": [str(p) for p in dev]}
    return out


# ------------------------------------------------------------------------------------------------- jobs
def run_config(suite: Suite, run: Run, task: str):
    from albertlm.config.model import ModelConfig
    from albertlm.config.run import DataConfig, DistConfig, OptimConfig, RunConfig, TrainConfig

    s = suite.scale
    return RunConfig(
        model=ModelConfig(**run.model), preset="ablate",
        optim=OptimConfig(name=s.optimizer, lr=s.lr, warmup_steps=-1, warmup_ratio=s.warmup_ratio),
        train=TrainConfig(max_steps=s.max_steps, batch_size=s.batch_size, micro_batch_size=s.micro_batch_size,
                          precision=s.precision, seed=run.seed, log_every=min(suite.log_every, s.max_steps),
                          eval_every=s.eval_every or s.max_steps, eval_batches=s.eval_batches,
                          save_every=max(1, s.max_steps // 6), keep_last=1, progress=False, tensorboard=False),
        data=DataConfig(path=str(suite.data("train", task)),
                        eval_path=str(suite.data("heldout", task if task != "none" else "sop"))),
        dist=DistConfig(device=s.device))


def pretrain_run(suite: Suite, run: Run, run_dir: Path) -> dict:
    from albertlm.model.io import latest_checkpoint
    from albertlm.training.pretrain import pretrain

    start = time.time()
    resume = latest_checkpoint(run_dir) is not None
    with _job_output(suite, run_dir / OUTPUT):
        status = pretrain(run_config(suite, run, run.task), run_dir, resume=resume)
    if status != "done":
        raise (Stopped if status == "interrupted" else RuntimeError)(f"pretraining {run.name} stopped: {status}")
    final = latest_checkpoint(run_dir)
    return {"status": status, "checkpoint": str(final.relative_to(suite.out)), "seconds": time.time() - start,
            "resumed": resume}


def finetune_all(suite: Suite, model_dir: Path, out_dir: Path, seed: int) -> dict:
    """Every task of the scale from `model_dir`, with each of the scale's fine-tuning seeds for this model;
    a task's score is the mean over those seeds (each seed's run is kept on its own, so a rerun with more
    seeds runs only the new ones)."""
    out = {}
    for task in suite.scale.finetune_tasks:
        runs = [finetune_one(suite, model_dir, task, s, out_dir / f"{task.name}-s{s}")
                for s in suite.scale.finetune_seed_list(seed)]
        scores = [r["score"] for r in runs]
        out[task.name] = {"task": task.name, "metric": runs[0]["metric"], "score": sum(scores) / len(scores),
                          "scores": scores, "seeds": [r["seed"] for r in runs], "runs": runs}
    return out


def finetune_complete(suite: Suite, result: dict) -> bool:
    """Whether a job's result holds every fine-tuning task and seed the scale asks for (a result written
    before `finetune_seeds` existed holds one run per task)."""
    done = result.get("finetune") or {}
    want = set(suite.scale.finetune_seed_list(result["seed"]))
    for task in suite.scale.finetune_tasks:
        entry = done.get(task.name, {})
        if not want <= set(entry.get("seeds") or [entry.get("seed")]):
            return False
    return True


def job_done(suite: Suite, job: Job) -> bool:
    path = suite.out / job.directory / RESULT
    return path.is_file() and finetune_complete(suite, read_result(path, job.kind))


def finetune_one(suite: Suite, model_dir: Path, task: FinetuneTask, seed: int, out_dir: Path) -> dict:
    from albertlm.config.run import DistConfig
    from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train
    from albertlm.tasks.finetune import run_finetune
    from albertlm.tasks.metrics import GLUE_METRICS
    from albertlm.tasks.specs import glue_spec
    from albertlm.tokenization import load_tokenizer

    done = out_dir / RESULT
    if done.is_file():
        return read_json(done, "a fine-tuning's result")
    check_stop(f"fine-tuning {out_dir} not started")
    if out_dir.exists():
        shutil.rmtree(out_dir)                  # a killed fine-tuning starts over
    s = suite.scale
    files = read_json(suite.prepared / "prepared.json", "the suite's prepared data record")["glue"][task.name]
    tokenizer = load_tokenizer(suite.tokenizer)
    cfg = FinetuneConfig(optim=finetune_optim(lr=s.finetune_lr),
                         train=finetune_train(epochs=task.epochs, batch_size=s.finetune_batch_size, seed=seed,
                                              progress=False, tensorboard=False, log_every=50),
                         dist=DistConfig(device=s.device), max_seq_length=s.finetune_seq_length,
                         eval_batch_size=128)
    spec = glue_spec(task.name, tokenizer, cfg, train_file=files["train"], dev_files=files["dev"])
    start = time.time()
    with _job_output(suite, out_dir / OUTPUT):
        metrics = run_finetune(spec, model_dir, tokenizer, cfg, out_dir, log=lambda *a, **k: None)
    if metrics.get("status") != "done":  # stopped by a signal or the budget: no result (a rerun continues it)
        raise (Stopped if metrics.get("status") == "interrupted" else RuntimeError)(
            f"fine-tuning {task.name} in {out_dir} stopped: {metrics.get('status')}")
    best = metrics.get("best", {})
    dev = next((v for k, v in best.items() if k != "step"), {})
    names = GLUE_METRICS[task.name]
    score = sum(dev[n] for n in names if n in dev) / max(1, sum(n in dev for n in names))
    result = {"task": task.name, "seed": seed, "dev": dev, "best_step": best.get("step"),
              "score": score, "metric": "/".join(names), "train_examples": len(spec.train),
              "train_loss_first": metrics.get("train_loss_first"), "train_loss_last": metrics.get("train_loss_last"),
              "seconds": time.time() - start}
    for heavy in ("best", "checkpoints"):
        shutil.rmtree(out_dir / heavy, ignore_errors=True)
    _write_json(done, result)
    return result


def run_job(suite: Suite, job: Job) -> dict:
    """One job, start to result.json (skipped when that exists). The suite's `threads` hold for the job; the
    caller's torch thread count is put back after it (a program or notebook calling this goes on as it was)."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _run_job(suite, job)
    finally:
        torch.set_num_threads(threads)


def _run_job(suite: Suite, job: Job) -> dict:
    directory = suite.out / job.directory
    done = directory / RESULT
    if done.is_file():
        result = read_result(done, job.kind)
        if finetune_complete(suite, result):
            return result
        return _add_finetuning(suite, job, result)      # the scale now asks for more fine-tuning seeds
    _set_threads(suite.threads)
    directory.mkdir(parents=True, exist_ok=True)
    from albertlm.experiments import evaluation

    from albertlm.config.model import ModelConfig

    run, start = job.run, time.time()
    result: dict[str, Any] = {"kind": job.kind, "name": job.name, "seed": job.seed, "model": run.model,
                              "params": evaluation.count_parameters(ModelConfig(**run.model)),
                              "shape": baseline_name(suite.runs, run)}
    if job.kind == "pretrain":
        result.update(task=run.task, variant=run.variant, grids=list(run.grids))
        result["pretrain"] = pretrain_run(suite, run, directory)
        check_stop(f"{job.name} pretrained")   # a signal in its last step ended the loop as planned
        checkpoint = suite.out / result["pretrain"]["checkpoint"]
        result["intrinsic"] = evaluation.intrinsic(checkpoint, suite.heldout(), device=suite.scale.device)
        result["transitions"] = evaluation.transitions_of_checkpoint(checkpoint, suite.data("heldout", "sop"),
                                                                     device=suite.scale.device)
        result["train_curve"] = _curve(directory)
    else:
        checkpoint = directory / "init"
        if not (checkpoint / "config.json").is_file():
            _save_random_model(ModelConfig(**run.model), job.seed, checkpoint)
        result["transitions"] = evaluation.transitions_of_checkpoint(checkpoint, suite.data("heldout", "sop"),
                                                                     device=suite.scale.device)
    result["finetune"] = finetune_all(suite, checkpoint, directory / "finetune", job.seed)
    result["seconds"] = time.time() - start
    _write_json(done, result)
    return result


def _add_finetuning(suite: Suite, job: Job, result: dict) -> dict:
    """A finished job, fine-tuned with the seeds it lacks (from its kept checkpoint; the runs it has are reused)."""
    directory = suite.out / job.directory
    checkpoint = _kept_model(suite, job, result)
    if job.kind == "scratch" and not (checkpoint / "config.json").is_file():
        from albertlm.config.model import ModelConfig

        _save_random_model(ModelConfig(**job.run.model), job.seed, checkpoint)   # the same weights: its seed's
    if not (checkpoint / "config.json").is_file():
        raise UserError(f"{job.name}: its model {checkpoint} is gone, so it cannot be fine-tuned again; remove "
                        f"{directory / RESULT} to rerun the whole job")
    _set_threads(suite.threads)
    start = time.time()
    result["finetune"] = finetune_all(suite, checkpoint, directory / "finetune", job.seed)
    result["seconds"] = result.get("seconds", 0.0) + time.time() - start
    _write_json(directory / RESULT, result)
    return result


def _kept_model(suite: Suite, job: Job, result: dict) -> Path:
    """The model a finished job fine-tunes: its final pretraining checkpoint, or a baseline's initial weights."""
    if job.kind != "pretrain":
        return suite.out / job.directory / "init"
    pretrain = result.get("pretrain")
    checkpoint = pretrain.get("checkpoint") if isinstance(pretrain, dict) else None
    return suite.out / str(checkpoint) if checkpoint else suite.out / job.directory / "checkpoints"


def check_models_kept(suite: Suite, planned: list[Job], stale: list[str] = ()) -> None:
    """Before anything is written: a finished job that must be fine-tuned again (more fine-tuning seeds, or
    `stale` tasks under --refinetune) needs its pretrained model; a suite copied without its checkpoints is
    refused in one line instead of failing every such job (a baseline's random model is made again from its
    seed)."""
    lacking = []
    for job in planned:
        path = suite.out / job.directory / RESULT
        if job.kind != "pretrain" or not path.is_file():
            continue
        result = read_result(path, job.kind)
        finetune = {t: v for t, v in (result.get("finetune") or {}).items() if t not in stale}
        if finetune_complete(suite, {**result, "finetune": finetune}):
            continue
        checkpoint = _kept_model(suite, job, result)
        if not (checkpoint / "config.json").is_file():
            lacking.append((job, checkpoint))
    if lacking:
        job, checkpoint = lacking[0]
        raise UserError(f"--out {suite.out}: {len(lacking)} finished pretraining run{'s' * (len(lacking) != 1)} "
                        f"must be fine-tuned again (more fine-tuning seeds or another protocol) but "
                        f"{'their models are' if len(lacking) != 1 else 'its model is'} gone (first: {checkpoint}); "
                        f"give the options the suite was run with, or remove "
                        f"{'their' if len(lacking) != 1 else 'its'} result.json to pretrain again")


def _save_random_model(cfg, seed: int, directory: Path) -> None:
    import torch

    from albertlm.model.albert import AlbertForPreTraining

    torch.manual_seed(seed)
    AlbertForPreTraining(cfg).save_pretrained(directory)


def _curve(run_dir: Path) -> list[dict]:
    """The training split's numeric metrics per logged step (the loop's reader: a resumed run's repeated
    steps keep their latest record, a half-written last line is skipped)."""
    from albertlm.training.metrics import read_metrics

    return [{k: v for k, v in row.items() if isinstance(v, (int, float))}
            for row in read_metrics(run_dir) if row.get("split") == "train"]


def _set_threads(threads: int) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


@contextlib.contextmanager
def _job_output(suite: Suite, path: Path):
    """While the suite is quiet (the CLI's case), what a pretraining or fine-tuning prints (eval lines, saved
    checkpoints, data notes, warnings) goes to `path` beside the run, so the suite's own output is one line
    per job."""
    if not suite.quiet:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


def _write_json(path: Path, data: Any) -> None:
    """`path` written whole or not at all (a temporary file renamed; removed when the write fails)."""
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_json(path: Path, what: str) -> Any:
    """A JSON file the suite wrote, or a UserError naming it (a file cut short or edited by hand)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: {what} is not readable JSON ({exc})") from None


def result_problem(result: Any, kind: str | None = None, full: bool = True) -> str:
    """What makes a job's result.json unusable ("" when nothing): with `full`, every field the report reads;
    else those the runner reads to skip a job or add fine-tunings to it (its seed and fine-tuning scores)."""
    if not isinstance(result, dict):
        return f"a JSON {type(result).__name__}, not a job's result object"
    need: dict[str, tuple[type, ...]] = {"seed": (int,)}
    if full:
        need.update(kind=(str,), name=(str,), model=(dict,), params=(int, float), shape=(str,))
        if (kind or result.get("kind")) == "pretrain":
            need.update(variant=(str,), task=(str,), intrinsic=(dict,), pretrain=(dict,))
    for key, types in need.items():
        value = result.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            return f"its {key!r} is {'missing' if key not in result else repr(value)[:40]}"
    if full and kind and result["kind"] != kind:
        return f"its kind is {result['kind']!r}, not {kind!r}"
    if "pretrain" in need and not isinstance(result["pretrain"].get("seconds"), (int, float)):
        return "its 'pretrain' has no 'seconds'"
    finetune = result.get("finetune") or {}
    if not isinstance(finetune, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("score"), (int, float)) and not isinstance(v.get("score"), bool)
            for v in finetune.values()):
        return "its 'finetune' scores are damaged"
    return ""


def read_result(path: Path, kind: str | None = None) -> dict:
    """A job's result.json, checked (`result_problem`, the runner's fields); a damaged one (cut short, edited by
    hand) is a UserError naming it, before anything of the suite is written."""
    result = read_json(path, "a job's result")
    why = result_problem(result, kind, full=False)
    if why:
        raise UserError(f"{path}: not a readable job result ({why}); remove it to run that job again")
    return result


# In a worker process of `_run_parallel`: the suite's stop event (set by the suite before it sends the workers
# SIGTERM), and whether a job is running. A training loop's own SIGTERM handler saves and stops the loop (a signal
# during its last step too: the run is saved complete and the loop returns "interrupted", so `pretrain_run` raises
# Stopped); the event is the second guard, stopping the worker between jobs.
_STOP: Any = None
_IN_JOB = False
# the signals that stop a suite as SIGTERM does, besides Ctrl-C (Python's KeyboardInterrupt): a training loop's
# stop signals (`training.loop.stop_signals`: Slurm's SIGUSR1 notice, the SIGHUP of a closed ssh session), named
# here so that the suite's own process need not import torch
SUITE_STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGHUP")


def _suite_stop_signals() -> list:
    """SUITE_STOP_SIGNALS this platform has, less SIGUSR1 and SIGHUP where the process ignores them (a suite
    started with nohup outlives its session, as `training.loop.stop_signals` has it)."""
    import signal

    return [getattr(signal, name) for name in SUITE_STOP_SIGNALS if hasattr(signal, name)
            and not (name in ("SIGUSR1", "SIGHUP") and signal.getsignal(getattr(signal, name)) == signal.SIG_IGN)]


def _worker_init(stop: Any) -> None:
    """A worker's start: the suite's stop event, and SIGINT and the stop signals (SIGTERM, SIGUSR1, SIGHUP)
    stopping it outside a training loop."""
    import signal

    global _STOP
    _STOP = stop
    for signum in (signal.SIGINT, *_suite_stop_signals()):
        signal.signal(signum, _worker_signalled)


def _worker_signalled(signum, frame) -> None:
    """Outside a training loop (whose handler takes over inside one): a job stops at once, between two things
    it writes whole (results, checkpoints and models are written under another name first, or config last); an
    idle worker ends quietly."""
    if _IN_JOB:
        raise KeyboardInterrupt
    raise SystemExit(0)


def check_stop(what: str) -> None:
    """Raise `Stopped` when the suite is stopping (a worker's next step must not start; a no-op in-process)."""
    if _STOP is not None and _STOP.is_set():
        raise Stopped(f"{what}: the suite is stopping")


def _job_in_worker(suite: Suite, job: Job, deadline: float | None = None) -> tuple[str, dict | None, str]:
    """(name, result, error); (name, None, "") for a job not started because the suite's time budget
    (`deadline`, a time.time()) had passed when its turn came. In a stopping suite's worker no job starts
    (`Stopped`), so a worker goes on to none of the jobs queued for it."""
    global _IN_JOB
    if deadline is not None and time.time() > deadline:
        return job.name, None, ""
    check_stop(f"{job.name} not started")
    _IN_JOB = True
    try:
        return job.name, run_job(suite, job), ""
    except Stopped:
        if _STOP is not None:
            _STOP.set()                 # this worker's loop got the signal: it starts nothing more either
        raise
    except KeyboardInterrupt:           # a worker's SIGTERM outside a training loop (`_worker_signalled`)
        if _STOP is None:
            raise
        _STOP.set()
        raise Stopped(f"{job.name} stopped by a signal") from None
    except UserError as exc:  # a failed job is reported (a user error in one line) and the suite goes on
        return job.name, None, str(exc).strip().replace("\n", " ") or type(exc).__name__
    except Exception:
        return job.name, None, traceback.format_exc()
    finally:
        _IN_JOB = False


# ---------------------------------------------------------------------------------------------- the suite
def run_suite(suite: Suite, jobs: int = 1, log=print, max_jobs: int = 0, refinetune: bool = False,
              err=None, max_minutes: float = 0) -> dict:
    """Prepare, then every job not yet done (at most `max_jobs` of them when > 0); returns a summary.
    `max_minutes` > 0: no job starts once that many minutes have passed since the jobs began (the ones running
    finish; the others are "postponed", for a rerun), so a suite can be run in slices of a machine's time and
    only finished jobs' results need to be kept between them.
    `refinetune`: the suite may continue with another fine-tuning protocol (tasks, epochs, sample, learning
    rate, batch, length); the fine-tunings it changes are moved to OUT/replaced/ and rerun from the kept
    models, and nothing is pretrained again. `err` gets the failed jobs' messages (default: stderr)."""
    if jobs < 1 or max_jobs < 0 or not 0 <= max_minutes < float("inf"):
        raise UserError(f"jobs must be >= 1, max_jobs >= 0 and max_minutes a finite number >= 0 (0 = all), got "
                        f"{jobs}, {max_jobs} and {max_minutes}")
    err = err or (lambda message: print(message, file=sys.stderr, flush=True))
    with sigterm_stops(), contextlib.ExitStack() as held:
        locked = suite.out.is_dir()
        if locked:                          # before reading what --out holds: another suite may be writing it
            held.enter_context(suite_lock(suite.out))
        return _run_suite(suite, jobs, log, max_jobs, refinetune, err, max_minutes, held, locked)


def _run_suite(suite: Suite, jobs: int, log, max_jobs: int, refinetune: bool, err, max_minutes: float,
               held: contextlib.ExitStack, locked: bool) -> dict:
    """`run_suite` under the suite's lock: `held` holds it already when --out existed (`locked`), else takes it as
    soon as this call has made --out."""
    check_same_tokenizer(suite)
    stale = check_same_scale(suite, refinetune)
    kept = kept_finetune_seeds(suite)
    if kept:
        log(f"--out {suite.out} was fine-tuned with {kept} seeds per model, not {suite.scale.finetune_seeds}: every "
            f"model gets {kept} (its finished models' scores are means over {kept}); another --out for fewer")
        suite = replace(suite, scale=replace(suite.scale, finetune_seeds=kept))
    planned = suite_jobs(suite)
    afresh = (suite.out / "suite.json").is_file() and not measured(suite)   # every job so far failed
    if not afresh:
        check_recorded(suite, planned)      # before anything is written: a finished job is another model's
        if (suite.prepared / "prepared.json").is_file():   # ... or the corpus is another (edited in place)
            check_prepared(suite, stale)
    check_models_kept(suite, planned, stale)   # ... or must be fine-tuned again and its model is gone
    plan = merged_plan(suite, planned)
    import albertlm.training.checkpoint  # noqa: F401  (the lock's module imports torch, seconds: before --out is
    # made, so a Ctrl-C meanwhile leaves no empty --out behind; a failed first preparation removes it below)
    created = not suite.out.exists()
    suite.out.mkdir(parents=True, exist_ok=True)
    if not locked:                          # two commands may have made --out at once: one of them runs (the
        held.enter_context(suite_lock(suite.out))   # other leaves the directory alone: it is the first one's)
    if stale:
        retire_finetuning(suite, stale, log)
    if afresh:
        retire_unmeasured(suite, planned, log)
    try:
        prepare(suite, log, workers=prepare_workers(suite, jobs))
    except BaseException:
        if created and not any(suite.out.iterdir()):   # a failed first preparation leaves no empty suite
            suite.out.rmdir()
        raise
    _write_json(suite.out / "suite.json", plan)
    todo = [j for j in planned if not job_done(suite, j)]
    skipped = len(planned) - len(todo)
    if max_jobs > 0:
        todo = todo[:max_jobs]
    log(f"suite {suite.out}: {len(planned)} jobs ({len(suite.runs)} pretraining runs"
        + (", no fine-tuning nor no-pretraining baselines: the scale has no fine-tuning task"
           if suite.scale.intrinsic_only else "")
        + f"), {skipped} already done, {len(todo)} to run, {jobs} at a time")
    failed, finished, postponed = {}, [], []
    start = time.time()
    deadline = start + 60 * max_minutes if max_minutes else None
    note = lambda *r: _note(log, err, *r, start, failed, finished, postponed)  # noqa: E731
    if jobs <= 1:
        try:
            for job in todo:
                note(*_job_in_worker(suite, job, deadline))
        except Stopped as stop:                 # Ctrl-C / SIGTERM reached this process's training loop
            log(f"[{(time.time() - start) / 60:6.1f} min] stopped: {stop}; rerun the command to continue")
            raise KeyboardInterrupt from stop
        except KeyboardInterrupt:               # ... or came between two loops (an evaluation, a model's set-up)
            log(f"[{(time.time() - start) / 60:6.1f} min] stopped after {len(finished)} jobs of {len(todo)}; rerun "
                f"the command to continue")
            raise
    else:
        try:
            _run_parallel(suite, todo, jobs, note, deadline)
        except KeyboardInterrupt:   # the workers saved a checkpoint and stopped, as one job does above
            log(f"[{(time.time() - start) / 60:6.1f} min] stopped after {len(finished)} jobs of {len(todo)}; rerun "
                f"the command to continue")
            raise
    if postponed:
        log(f"[{(time.time() - start) / 60:6.1f} min] --max-minutes {max_minutes:g}: {len(postponed)} jobs not "
            f"started; rerun the command to continue")
    return {"planned": len(planned), "skipped": skipped, "finished": finished, "failed": failed,
            "postponed": postponed}


@contextlib.contextmanager
def suite_lock(out: Path):
    """Held by the `albertlm ablate` that runs the suite in `out` (from before it reads what --out holds until it
    ends): a second one started on the same --out (the command run twice, in another terminal or by a scheduler)
    is refused in one line instead of both preparing the same data, training the same jobs and writing suite.json
    and the report at once (each pretraining's own lock refused only the second one's copy of a running run, as a
    failed job). The lock is `training.checkpoint.directory_lock`'s. `--report-only` and `--list-jobs` read the
    suite without it, so they work while it runs."""
    from albertlm.training.checkpoint import directory_lock

    with directory_lock(out, f"--out {out}: another `albertlm ablate` is running this suite now; let it finish or "
                             f"stop it first (--report-only and --list-jobs work meanwhile), or pass another --out"):
        yield


def job_state(suite: Suite, job: Job, stale: list[str] = ()) -> str:
    """What a run would do with `job` now: "done" (skipped), "fine-tune" (finished; fine-tunings it lacks, or
    `stale` tasks again), "resume@STEP" (a pretraining continued from its newest checkpoint) or "to-run"."""
    from albertlm.model.io import list_checkpoints

    directory = suite.out / job.directory
    if (directory / RESULT).is_file():
        result = read_result(directory / RESULT, job.kind)
        finetune = {t: v for t, v in (result.get("finetune") or {}).items() if t not in stale}
        return "done" if finetune_complete(suite, {**result, "finetune": finetune}) else "fine-tune"
    found = list_checkpoints(directory) if job.kind == "pretrain" else []
    return f"resume@{int(found[-1].name.split('_')[-1])}" if found else "to-run"


def preview(suite: Suite, refinetune: bool = False) -> list[tuple[Job, str]]:
    """`--list-jobs`: the planned jobs and what a run would do with each (`job_state`), after the checks a run
    makes on what --out holds (another scale, another model under a run's name, models gone), so a listing
    never shows a plan the run would refuse. Writes nothing."""
    check_same_tokenizer(suite)
    stale = check_same_scale(suite, refinetune)
    kept = kept_finetune_seeds(suite)
    if kept:   # as the run: the suite's larger count of fine-tuning seeds
        suite = replace(suite, scale=replace(suite.scale, finetune_seeds=kept))
    planned = suite_jobs(suite)
    if not ((suite.out / "suite.json").is_file() and not measured(suite)):   # else retire_unmeasured's
        check_recorded(suite, planned)
        if (suite.prepared / "prepared.json").is_file():   # another corpus or data setting: `prepare` refuses it
            check_prepared(suite, stale)
    check_models_kept(suite, planned, stale)
    merged_plan(suite, planned)
    return [(job, job_state(suite, job, stale)) for job in planned]


# ------------------------------------------------------------------------------- what an --out already holds
def _first_difference(recorded: dict, planned: dict, prefix: str = "") -> str:
    """The first field (in the planned order) whose recorded value differs: 'model.num_layers: 2 there, 3 now'."""
    for key, want in planned.items():
        have = recorded.get(key, "(none)")
        if isinstance(want, dict) and isinstance(have, dict):
            inner = _first_difference(have, want, f"{prefix}{key}.")
            if inner:
                return inner
        elif json.dumps(have, sort_keys=True) != json.dumps(want, sort_keys=True):
            return f"{prefix}{key}: {have} there, {want} now"
    extra = [k for k in recorded if k not in planned]
    return f"{prefix}{extra[0]}: {recorded[extra[0]]} there, (none) now" if extra else ""


def recorded_difference(suite: Suite, job: Job) -> str:
    """How what `job`'s directory holds (a finished result, a pretraining's run config, a baseline's initial
    model) differs from the planned job: the first differing field in words, or "" (nothing there, or the same)."""
    directory = suite.out / job.directory
    want: dict[str, Any] = {"kind": job.kind, "seed": job.seed, "model": full_model(job.run.model)}
    if job.kind == "pretrain":
        want["task"] = job.run.task
    done = directory / RESULT
    if done.is_file():
        result = read_result(done, job.kind)
        have = {"kind": result.get("kind"), "seed": result.get("seed"), "model": full_model(result.get("model"))}
        if job.kind == "pretrain":
            have["task"] = result.get("task")
        why = _first_difference(have, want)
        if why:
            return why
    config = directory / "run_config.json"
    if job.kind == "pretrain" and config.is_file():   # what a pretraining (finished or not) trains
        run = read_json(config, "a pretraining's run config")
        if not isinstance(run, dict):
            return "run_config.json: not a run config there"
        train, data = run.get("train") or {}, run.get("data") or {}
        have = {"seed": train.get("seed"), "model": full_model(run.get("model")),
                "task": Path(str(data.get("path", ""))).name.removeprefix("train_") or None,
                "max_steps": train.get("max_steps"), "batch_size": train.get("batch_size")}
        s = suite.scale
        return _first_difference(have, {"seed": job.seed, "model": want["model"], "task": job.run.task,
                                        "max_steps": s.max_steps, "batch_size": s.batch_size})
    init = directory / "init" / "config.json"
    if job.kind == "scratch" and init.is_file() and not done.is_file():   # its random model, made once
        from albertlm.model.io import read_config

        try:
            model = read_config(directory / "init")[0].to_dict()
        except Exception:
            return "model: unreadable there"
        return _first_difference({"model": model}, {"model": want["model"]})
    return ""


def check_recorded(suite: Suite, planned: list[Job]) -> None:
    """A finished job is skipped, and an unfinished pretraining resumed, only when its directory holds the
    planned job (same model, sentence task, seed, steps): a grid that now asks for another model under the
    same run name is refused rather than reported with the old model's numbers."""
    for job in planned:
        why = recorded_difference(suite, job)
        if why:
            raise UserError(f"--out {suite.out}: {suite.out / job.directory} holds another run than the grid "
                            f"plans under that name ({why}): give another --out, or remove that directory")


def merged_plan(suite: Suite, planned: list[Job]) -> dict:
    """suite.json for this run: the scale, and the union of the plans of every grid run into this --out (a run
    of a later grid that a former one planned under the same name with another model is refused), so the
    report counts every job planned there, not only the last grid's. A plan at another scale under which
    nothing was measured (`measured`: its every job failed) is replaced."""
    runs = {r.name: r.__dict__ for r in suite.runs}
    jobs = [{"kind": j.kind, "name": j.name, "dir": j.directory} for j in planned]
    grids = [suite.grid]
    saved = suite.out / "suite.json"
    old = read_json_object(saved, "the suite's plan") if saved.is_file() else None
    if old is not None and scale_changes(old.get("scale") if isinstance(old, dict) else None, suite) \
            and not measured(suite):
        old = None                      # nothing was measured at the old scale: this command's plan replaces it
    if old is not None:
        old_grids = old.get("grids") or ([old["grid"]] if old.get("grid") else [])
        grids = list(dict.fromkeys([*old_grids, suite.grid]))
        known = {_run_key(run): run for run in old.get("runs") or [] if isinstance(run, dict)}
        for name, new in runs.items():   # a variant renamed in the grid file would be trained again
            twin = known.get(_run_key(new))
            if twin is not None and twin.get("name") != name:
                raise UserError(f"--out {suite.out}: variant {new['variant']!r} is the same configuration (model, "
                                f"sentence task and seed at this scale) as run {twin.get('name')} of its plan "
                                f"(suite.json, variant {twin.get('variant')!r}), which a suite trains once: name the "
                                f"variant {twin.get('variant')!r}, or give another --out")
        for run in old.get("runs") or []:
            new = runs.get(run.get("name"))
            if new is None:
                runs[run["name"]] = run
                continue
            why = _first_difference({"model": full_model(run.get("model")), "task": run.get("task"),
                                     "seed": run.get("seed")},
                                    {"model": full_model(new["model"]), "task": new["task"], "seed": new["seed"]})
            if why:
                raise UserError(f"--out {suite.out}: its plan (suite.json, grid {', '.join(old_grids)}) has a run "
                                f"{run['name']} of another configuration ({why}): give another --out, or rename "
                                f"the variant")
            runs[run["name"]] = {**new, "grids": list(dict.fromkeys([*(run.get("grids") or []), *new["grids"]]))}
        known = {j["dir"] for j in jobs}
        # a scale without fine-tuning plans no baselines: those of a former plan that fine-tuned are not planned now
        jobs = [j for j in old.get("jobs") or [] if j["dir"] not in known
                and not (suite.scale.intrinsic_only and j.get("kind") == "scratch")] + jobs
        order = [r["name"] for r in old.get("runs") or []]
        runs = {name: runs[name] for name in [*order, *(n for n in runs if n not in order)]}
    scale = suite.scale.to_dict()
    # the seeds the plan holds: a rerun naming fewer seeds (the command without --seeds 1 2 3) keeps the other
    # seeds' runs planned, and suite.json and the report must not say the suite ran the command's seeds only
    planned_seeds = {r.get("seed") for r in runs.values() if isinstance(r.get("seed"), int)}
    scale["seeds"] = sorted(planned_seeds | set(scale.get("seeds") or []))
    return {"scale": scale, "grid": suite.grid, "grids": grids, "runs": list(runs.values()), "jobs": jobs,
            "tokenizer": suite.given_tokenizer}     # None: the suite's own, trained on the corpus


def _run_key(run: dict) -> str:
    """What makes two planned runs (suite.json's records) the same run: the model (at its defaults' fill), the
    sentence task and the seed."""
    return json.dumps([full_model(run.get("model")), run.get("task"), run.get("seed")], sort_keys=True)


# a suite may be rerun with more fine-tuning seeds (the new runs are added), or with --refinetune under another
# fine-tuning protocol (the changed fine-tunings rerun from the kept models); anything else in the scale changes
# what a finished job measured, so it needs another --out
# what the runs measured; a scale file's path is not (its values are compared: a renamed or copied file with the same
# values continues the suite)
RESCALABLE = ("seeds", "finetune_seeds", "notes", "file")
FINETUNE_FIELDS = ("finetune_tasks", "finetune_lr", "finetune_batch_size", "finetune_seq_length")


def check_same_scale(suite: Suite, refinetune: bool = False) -> list[str]:
    """Refuse to continue a suite whose finished jobs were run at another scale (their results would be
    reported as this scale's). Returns the fine-tuning tasks whose protocol changed (allowed with
    `refinetune`; a task the scale no longer has is among them)."""
    saved = suite.out / "suite.json"
    if not saved.is_file() or not measured(suite):   # nothing there was measured at the old scale
        return []
    old = read_json_object(saved, "the suite's plan").get("scale") or {}
    new = json.loads(json.dumps(suite.scale.to_dict()))
    changed = [k for k in scale_changes(old, suite) if k not in FINETUNE_FIELDS]
    if changed:
        k = changed[0]
        raise UserError(f"--out {suite.out} holds a suite run at another scale ({k}: {old[k]} there, {new[k]} now"
                        + (f"; also {', '.join(changed[1:])}" if changed[1:] else "")
                        + "): give another --out, or the options it was run with")
    stale, why = _changed_finetuning(old, new)
    if stale and not refinetune and suite.scale.intrinsic_only:
        raise UserError(f"--out {suite.out} was fine-tuned ({', '.join(stale)}) and this scale fine-tunes nothing: "
                        f"add --refinetune to set its fine-tunings aside (they move to {suite.out / 'replaced'}; "
                        f"nothing is pretrained again) and report held-out accuracy only, or give another --out")
    if stale and not refinetune:
        raise UserError(f"--out {suite.out} was fine-tuned with another protocol ({why}): add --refinetune to "
                        f"fine-tune its kept models again with this one (the old fine-tunings move to "
                        f"{suite.out / 'replaced'}; nothing is pretrained again), or give another --out")
    return stale


def kept_finetune_seeds(suite: Suite) -> int:
    """The fine-tuning seeds per model that --out was run with when more than the suite's (a rerun without
    --finetune-seeds, or with fewer, after one with more), else 0. A suite keeps its larger count, as it keeps
    every pretraining seed it planned: its finished models' scores are means over that many seeds, and a model
    finished now with fewer would be averaged beside them while suite.json and the report said the smaller
    count. Nothing measured there: this command's count (its options replace the old ones)."""
    saved = suite.out / "suite.json"
    if not saved.is_file() or not measured(suite):
        return 0
    scale = read_json_object(saved, "the suite's plan").get("scale")
    if isinstance(scale, dict) and scale.get("finetune_tasks") == []:
        return 0                        # it fine-tuned nothing (`Scale.intrinsic_only`): no count to keep
    had = scale.get("finetune_seeds") if isinstance(scale, dict) else None
    return had if isinstance(had, int) and not isinstance(had, bool) and had > suite.scale.finetune_seeds else 0


def scale_changes(old: Any, suite: Suite) -> list[str]:
    """The fields of a recorded scale (suite.json's) that differ from the suite's, beyond those a suite may
    continue with (more seeds, the notes)."""
    if not isinstance(old, dict):
        return []
    new = json.loads(json.dumps(suite.scale.to_dict()))
    return [k for k in new if k not in RESCALABLE and k in old and old[k] != new[k]]


def measured(suite: Suite) -> list[Path]:
    """What the jobs in --out have measured: every result (a job's, a fine-tuning's) and every pretraining
    checkpoint. An --out without any (every job failed before its first checkpoint, or none started) holds
    nothing a change of scale or grid would make wrong, so a run with other options starts it afresh."""
    from albertlm.model.io import list_checkpoints

    found: list[Path] = []
    for folder in ("runs", "scratch"):
        root = suite.out / folder
        if root.is_dir():
            found += sorted(root.rglob(RESULT))
            if folder == "runs":
                found += [c for d in sorted(root.iterdir()) if d.is_dir() for c in list_checkpoints(d)]
    return found


def retire_unmeasured(suite: Suite, planned: list[Job], log=print) -> list[Path]:
    """In an --out where nothing was measured (`measured`), what the failed or unstarted jobs of an earlier
    plan left that the planned jobs cannot use: a job's directory holding another run (a pretraining's run
    config, a baseline's random model: another scale or grid) and the prepared data of other data settings
    (vocabulary, length, masking, corpus, or the corpus's text corrected in place). They move to
    OUT/replaced/<time>/ and are made again; a directory a running process holds is refused (`run_dir_lock`).
    Returns the moved paths."""
    from albertlm.training.checkpoint import run_dir_lock

    stamp = suite.out / "replaced" / time.strftime("%Y%m%d-%H%M%S")
    moved: list[Path] = []

    def retire(path: Path, locked: bool = False) -> None:
        target = stamp / path.relative_to(suite.out)
        target.parent.mkdir(parents=True, exist_ok=True)
        with run_dir_lock(path) if locked else contextlib.nullcontext():
            shutil.move(str(path), str(target))
        moved.append(path)

    for job in planned:
        directory = suite.out / job.directory
        if directory.is_dir() and recorded_difference(suite, job):
            retire(directory, locked=job.kind == "pretrain")
    done = suite.prepared / "prepared.json"
    if done.is_file():
        saved = read_json(done, "the suite's prepared data record")
        files = saved.get("corpus_files") if isinstance(saved, dict) else None   # (not in an older record)
        if prepared_difference(saved, prepare_settings(suite)) or corpus_change(suite, files):
            retire(suite.prepared)
    if moved:
        log(f"nothing in {suite.out} was measured under its former plan: "
            f"{', '.join(str(p.relative_to(suite.out)) for p in moved)} moved to {stamp} (made again for this one)")
    return moved


def _changed_finetuning(old: dict, new: dict) -> tuple[list[str], str]:
    """The tasks whose fine-tuning differs between two scale dicts, and the first difference in words."""
    old_tasks = {t["name"]: t for t in old.get("finetune_tasks") or []}
    new_tasks = {t["name"]: t for t in new.get("finetune_tasks") or []}
    shared = [k for k in FINETUNE_FIELDS[1:] if k in old and old[k] != new[k]]
    if shared:
        k = shared[0]
        return sorted(old_tasks), f"{k}: {old[k]} there, {new[k]} now"
    stale, why = [], ""
    for name, task in old_tasks.items():
        if task != new_tasks.get(name):
            stale.append(name)
            diff = [f"{k}: {task[k]} there, {new_tasks[name].get(k)} now" for k in task
                    if name in new_tasks and task[k] != new_tasks[name].get(k)]
            why = why or (f"{name} {', '.join(diff)}" if diff else f"{name} is no longer fine-tuned")
    return stale, why


def retire_finetuning(suite: Suite, tasks: list[str], log=print) -> int:
    """Move every fine-tuning of `tasks` (finished or not) out of the job directories into
    OUT/replaced/<time>/ and drop those tasks from the jobs' results, so the jobs fine-tune them again."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = 0
    for directory in sorted(p for kind in ("runs", "scratch") for p in (suite.out / kind).glob("*") if p.is_dir()):
        relative = directory.relative_to(suite.out)
        for task in tasks:
            for ft in sorted((directory / "finetune").glob(f"{task}-s*")):
                target = suite.out / "replaced" / stamp / relative / "finetune" / ft.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(ft), str(target))
                moved += 1
        done = directory / RESULT
        if done.is_file():
            result = read_result(done)
            finetune = result.get("finetune") or {}
            if any(t in finetune for t in tasks):
                result["finetune"] = {t: v for t, v in finetune.items() if t not in tasks}
                _write_json(done, result)
    log(f"refinetune: {', '.join(tasks)}: {moved} fine-tunings moved to {suite.out / 'replaced' / stamp}; "
        f"they run again from the kept models")
    return moved


def _run_parallel(suite: Suite, todo: list[Job], jobs: int, note, deadline: float | None = None) -> None:
    """`jobs` worker processes; SIGTERM (or SIGUSR1, SIGHUP) or Ctrl-C to the suite cancels the queued jobs, sets
    the stop event and passes SIGTERM on to the workers: a training loop (pretraining or fine-tuning) saves a
    checkpoint and stops, a job between loops stops at once, and no worker starts anything more (a rerun
    continues)."""
    import multiprocessing as mp
    import signal

    def interrupt(*_):
        raise KeyboardInterrupt

    import threading

    # signal.signal works in the main thread only (a suite run from a program's thread keeps its SIGTERM as is)
    handles = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, interrupt) for s in _suite_stop_signals()} if handles else {}
    context = mp.get_context("spawn")
    stop = context.Event()
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_init, initargs=(stop,))
    try:
        futures = [pool.submit(_job_in_worker, suite, job, deadline) for job in todo]
        for future in as_completed(futures):
            try:
                outcome = future.result()
            except Stopped as stop:             # a worker's training loop got the signal: stop the suite
                raise KeyboardInterrupt from stop
            note(*outcome)
    except KeyboardInterrupt:
        stop.set()                              # no worker starts another job, nor a job its next step
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()                  # a training loop saves a checkpoint and stops; else it stops now
        deadline = time.time() + 30
        for worker in workers:
            worker.join(timeout=max(0.1, deadline - time.time()))
            if worker.is_alive():               # a step (or an evaluation) longer than that
                worker.kill()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    pool.shutdown(wait=True)


def _note(log, err, name, result, error, start, failed, finished, postponed) -> None:
    if result is None and not error:            # not started: the time budget had passed
        postponed.append(name)
        return
    if error:
        failed[name] = error
        # a UserError is its one line; anything else its traceback (a bug, or a failure worth reading in full)
        err(f"[{(time.time() - start) / 60:6.1f} min] FAILED {name}:" + (f" {error}" if "\n" not in error.strip()
                                                                          else f"\n{error}"))
        return
    finished.append(name)
    ft = {t: round(r["score"], 4) for t, r in (result.get("finetune") or {}).items()}
    intrinsic = result.get("intrinsic") or {}
    shown = {k: round(v, 4) for k, v in intrinsic.items() if k.endswith("_acc") and isinstance(v, (int, float))}
    for task, rule in (intrinsic.get("length_rule") or {}).items():   # `evaluation.length_rule_numbers`
        if isinstance(rule, dict) and isinstance(rule.get("balanced_acc"), (int, float)):
            shown[f"{task}_balanced_acc"] = round(rule["balanced_acc"], 4)
    log(f"[{(time.time() - start) / 60:6.1f} min] done {name}: {shown}" + (f" finetune {ft}" if ft else ""))
    sys.stdout.flush()
