"""`albertlm convert SRC DST`: checkpoints between google-research TF, transformers and albertlm.

    albertlm convert albert_base/ out/                      # TF checkpoint dir -> albertlm (auto-detected)
    albertlm convert albert_base/model.ckpt-best out/ --to hf
    albertlm convert hf_dir/ out/                           # transformers -> albertlm
    albertlm convert ours/ hf_out/ --to hf                  # albertlm -> transformers

The source format is detected (a `*.index` checkpoint -> tf; `config.json` with transformers' field
names -> hf; otherwise albertlm) unless `--from` says it. Tokenizer files found beside the source
(spiece.model, google's 30k-clean.model, vocab.txt) are copied to DST as spiece.model / vocab.txt.
Heavy imports happen inside `run` so `albertlm --help` stays fast.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from albertlm.errors import UserError, read_json_object

FORMATS = ("tf", "hf", "albertlm")
# tokenizer file name in DST <- names it may have beside the source (google's tarballs: 30k-clean.model)
TOKENIZER_FILES = {"spiece.model": ("spiece.model", "30k-clean.model", "assets/30k-clean.model"),
                   "vocab.txt": ("vocab.txt", "assets/vocab.txt"),
                   # the preprocessing options (lower-casing, accents) and transformers' fast tokenizer
                   # travel with the model, so DST tokenizes exactly as SRC did
                   "tokenizer_config.json": ("tokenizer_config.json",),
                   "tokenizer.json": ("tokenizer.json",)}
OUTPUT_FILES = ("config.json", "model.safetensors", "labels.json", "README.md", "spiece.model", "vocab.txt",
                "tokenizer.json", "tokenizer_config.json")   # everything convert may write: replaced only with --overwrite
# an earlier model's weights in forms convert never writes (transformers' pickles and shards: model.io.EARLIER_WEIGHTS
# and SHARD) count as a model DST holds, and --overwrite removes them too


ALL_MAPPED = "all weights mapped: no missing or unexpected keys"


def _earlier_weights(dst: Path) -> list[str]:
    """The names of an earlier model's weight files in DST that convert does not write (model.io.earlier_weights)."""
    from albertlm.model.io import earlier_weights

    return earlier_weights(dst)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("src", metavar="SRC", help="TF checkpoint (prefix, its .index / .data-* / .meta file, or directory), "
                        "transformers directory or albertlm directory")
    parser.add_argument("dst", metavar="DST", help="output directory")
    parser.add_argument("--from", dest="src_format", choices=("auto", *FORMATS), default="auto",
                        help="source format (default: detected)")
    parser.add_argument("--to", dest="dst_format", choices=("albertlm", "hf"), default="albertlm",
                        help="output format (default: albertlm)")
    parser.add_argument("--config", metavar="FILE", help="TF source: albert_config.json "
                        "(default: the one beside the checkpoint)")
    parser.add_argument("--tokenizer", metavar="PATH", help="copy this spiece.model / *.model / vocab.txt / "
                        "tokenizer.json (or the one a directory holds) instead of the one found beside SRC")
    parser.add_argument("--verify", action="store_true",
                        help="TF source: check every tensor's CRC32C as it is read (a second pass over the weights)")
    parser.add_argument("--overwrite", "--force", dest="overwrite", action="store_true",
                        help="replace the model a DST already holds: the files convert writes, and an earlier "
                             "model's pytorch_model.bin and weight shards (--force: the same, its older name)")


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.cli.guards import check_home_expanded

    if args.dst == "-":   # no stdout here: a folder named '-' was made
        raise UserError("DST -: convert writes a directory of files, not to stdout; give a directory "
                        "('./-' names one called '-')")
    check_home_expanded(args.dst, "DST")   # `'~/models/x'` quoted: a folder named '~' was made here
    src, dst = Path(args.src), Path(args.dst)
    if src.is_dir() and not (src / "config.json").is_file() and any((src / d).is_dir() for d in ("checkpoints", "best")):
        from albertlm.tasks.inference import resolve_checkpoint  # a run directory -> its newest / best checkpoint

        src = resolve_checkpoint(src)
    src_format = detect_format(src) if args.src_format == "auto" else args.src_format
    if src_format == args.dst_format:
        if args.src_format != "auto":
            raise UserError(f"--from {src_format} and --to {args.dst_format}: nothing to convert")
        raise UserError(f"SRC is already in {src_format} format; nothing to convert (use --to)")
    if args.config and src_format != "tf":
        raise UserError("--config is only for TF checkpoints (other formats carry config.json)")
    if args.verify and src_format != "tf":
        raise UserError("--verify checks a TF checkpoint's CRC32C; SRC is a(n) "
                        f"{src_format} directory (safetensors files carry no checksums to verify)")
    _check_destination(src, dst, args.overwrite)
    if args.tokenizer:   # before anything is written
        args.tokenizer = str(_tokenizer_file(Path(args.tokenizer)))
    model, notes = load_model(src, src_format, args.config, args.verify)
    base = src if src.is_dir() else src.parent
    from albertlm.tasks.inference import find_tokenizer
    from albertlm.tasks.inference import run_tokenizer as find_run_tokenizer

    tokenizer = args.tokenizer or find_tokenizer(base)
    # a fine-tuning run's checkpoints/step_N holds none: `find_tokenizer` gives the run's (best/'s, or the recorded
    # one), which is copied as files beside SRC are
    run_tokenizer = None if args.tokenizer or tokenizer is None else find_run_tokenizer(base)
    if run_tokenizer is not None and Path(tokenizer) != run_tokenizer:
        run_tokenizer = None
    # the tokenizer DST will hold (--to hf writes the one found; files beside SRC are copied): it must fit
    if tokenizer is not None and (args.tokenizer or args.dst_format == "hf" or Path(tokenizer) == base):
        _check_tokenizer_fits(Path(tokenizer), model.config.vocab_size, explicit=bool(args.tokenizer))
    from albertlm.interop.hf import read_labels

    labels = read_labels(src if src.is_dir() else src.parent)
    if args.dst_format == "hf":   # a sharing transformers cannot express: refused before anything is written
        from albertlm.interop.hf import hf_export_config

        hf_export_config(model.config)
    # Everything is written into a folder beside DST and moved into place when complete: a conversion that fails
    # half-way (disk full, an unreadable tokenizer) leaves DST, and with --overwrite its earlier model, as it was.
    from safetensors import SafetensorError

    with _staging(dst) as stage:
        try:
            save_model(model, stage, args.dst_format, labels)
            if run_tokenizer is not None and run_tokenizer.is_dir():
                copied = copy_tokenizer(run_tokenizer, stage, None)
            else:
                copied = copy_tokenizer(src, stage, Path(args.tokenizer) if args.tokenizer else run_tokenizer)
        except (OSError, SafetensorError) as exc:
            raise UserError(f"cannot write {dst}: {getattr(exc, 'strerror', None) or exc}") from None
        except UserError as exc:   # export_hf's own "cannot write DIR: ..." names the staging folder: DST it is
            raise UserError(str(exc).replace(str(stage), str(dst))) from None
        card = None
        warned: list[str] = []   # said on stderr after the summary, as every command's warnings are
        if args.dst_format == "hf":  # tokenizer_config.json, tokenizer.json and README.md beside the model
            from albertlm.interop.hf import complete_export

            *more, card = complete_export(model, stage, src, tokenizer, warnings=warned)
            copied = copied + more
        if (stage / "tokenizer.json").is_file() and not any((stage / f).is_file() for f in ("spiece.model",
                                                                                              "vocab.txt")):
            from albertlm.interop.hf import lost_byte_fallback

            # the tokenizer DST is read by (albertlm reads spiece.model or vocab.txt first)
            warned += [text for text in [lost_byte_fallback(stage / "tokenizer.json")] if text]
        _move_into_place(stage, dst, args.overwrite)
    copied = [line.replace(str(stage), str(dst)) for line in copied]
    card = card.replace(str(stage), str(dst)) if card else card
    no_tokenizer = None
    if not copied:   # a fine-tuning run's step_N: why its run's tokenizer was not found
        from albertlm.tasks.inference import missing_run_tokenizer

        no_tokenizer = f"none found beside the source{missing_run_tokenizer(base)} (see --tokenizer)"
    print_summary(model, src, src_format, dst, args.dst_format, notes, copied, card, no_tokenizer)
    from albertlm.errors import say_warning

    for text in warned:   # `albertlm convert: warning: ...` (a bare `warning:` inside the tokenizer line before)
        say_warning(text.replace(str(stage), str(dst)))
    return 0


@contextlib.contextmanager
def _staging(dst: Path):
    """A new empty folder named like DST (the model card is titled by it) inside a temporary folder, removed on the
    way out: on the file system of DST, so that the files move in by rename (`_move_into_place`). An existing DST
    holds it: DST may be a mount point (a container's volume, another disk) or a link to one, and staged beside it
    the conversion failed at the move, after all the work, with "cannot write DST: Invalid cross-device link" (as
    `export onnx` did: `export_commands._staging_parent`). Otherwise it goes beside DST, in the folder DST is made
    in, and directories made for it that stay empty (a failed conversion) are removed too."""
    target = dst.resolve()
    parent = target if target.is_dir() else target.parent
    made = [d for d in (parent, *parent.parents) if not d.exists()]
    blocked = next((d for d in (parent, *parent.parents) if d.exists() and not d.is_dir()), None)
    if blocked is not None:
        raise UserError(f"cannot write {dst}: {blocked} is a file, not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        holder = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".convert-tmp", dir=parent))
    except OSError as exc:
        raise UserError(f"cannot write {dst}: {exc.strerror or exc}") from None
    stage = holder / (target.name or "model")
    stage.mkdir()
    try:
        yield stage
    finally:
        shutil.rmtree(holder, ignore_errors=True)
        for directory in made:   # innermost first; only those still empty (nothing was moved into them)
            with contextlib.suppress(OSError):
                directory.rmdir()


def _move_into_place(stage: Path, dst: Path, overwrite: bool) -> None:
    """The complete conversion replaces DST's files; with --overwrite no file of an earlier one outlives it. A DST
    that does not exist is the staged folder renamed (one step); into an existing DST the files move as one step
    too (`swap_into_place`): a Ctrl-C, SIGTERM or error on the way leaves DST with its earlier files, not a mix."""
    try:
        if not dst.exists():
            os.rename(stage, dst)
            return
        removed = [dst / name for name in (*OUTPUT_FILES, *_earlier_weights(dst))] if overwrite else []
        swap_into_place([(path, dst / path.name) for path in sorted(stage.iterdir())], removed,
                        stage.parent / ".earlier")
    except OSError as exc:
        raise UserError(f"cannot write {dst}: {exc.strerror or exc}") from None


def swap_into_place(moves: list[tuple[Path, Path]], removed: list[Path], aside: Path) -> None:
    """Move each staged file onto its target (`moves`: (staged, target)) and remove the files `removed`, as one step:
    every target that exists and every file of `removed` is first moved into the new folder `aside` (beside the
    staged files: the same file system), then the new files move in. An error or interrupt on the way (Ctrl-C, the
    CLI's SIGTERM) takes the new files out and puts the earlier ones back, so the destination holds the earlier
    set or the new one, never a mix (the new files moved one by one used to leave a half-replaced model). Ctrl-C
    and SIGTERM are held back while it runs (`_stops_held`: acted on once it is done). `aside` (which must not
    exist) is left for the caller's clean-up: it holds the earlier files once the new ones are in."""
    with _stops_held():
        aside.mkdir()
        kept: list[tuple[Path, Path]] = []     # (target, where it waits in `aside`)
        placed: list[Path] = []
        made: list[Path] = []                  # folders made for a target (an export's onnx/), innermost last
        try:
            for target in dict.fromkeys([*(t for _, t in moves), *removed]):
                if target.is_file() or target.is_symlink():
                    waiting = aside / str(len(kept))
                    os.replace(target, waiting)
                    kept.append((target, waiting))
            for staged, target in moves:
                if not target.parent.is_dir():
                    target.parent.mkdir(parents=True)
                    made.append(target.parent)
                os.replace(staged, target)
                placed.append(target)
        except BaseException:
            for target in reversed(placed):
                with contextlib.suppress(OSError):
                    target.unlink()
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            for target, waiting in reversed(kept):
                with contextlib.suppress(OSError):
                    os.replace(waiting, target)
            raise


@contextlib.contextmanager
def _stops_held():
    """Ctrl-C and SIGTERM held back while the block runs (a few renames) and acted on once it is done: their Python
    handlers (KeyboardInterrupt, the CLI's SIGTERM one) are swapped for one that notes the signal, and the first
    noted runs after. Not pthread_sigmask: that holds a signal back from the calling thread only, and the kernel
    hands a signal sent to the process to another thread that does not block it (torch's OpenMP workers, started
    by the load), whose Python handler then runs in the main thread all the same, mid-block. Only in the main
    thread (where Python sets handlers); a signal without a Python handler (ignored, or default) is left alone."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if callable(handler):
            previous[sig] = handler
            signal.signal(sig, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if noted:   # (the block's own error, if any, is raised instead)
        previous[noted[0]](noted[0], None)


def _check_tokenizer_fits(path: Path, vocab_size: int, explicit: bool = False) -> None:
    """A tokenizer with more pieces than the model has rows would give ids past its embedding table. An `explicit`
    --tokenizer other than a word list (*.txt) that is no tokenizer at all (neither ours nor a SentencePiece model)
    is refused too: it would be copied into DST as spiece.model, where every later load of the model fails on it."""
    from albertlm.tokenization import load_tokenizer

    try:
        size = load_tokenizer(path).vocab_size
    except UserError as exc:   # not an ALBERT tokenizer of ours (its files are still copied): count its pieces
        if path.suffix != ".model":
            if explicit and path.suffix != ".txt":
                raise UserError(f"--tokenizer {path}: {exc}") from None
            return
        import sentencepiece

        try:
            size = sentencepiece.SentencePieceProcessor(model_file=str(path)).get_piece_size()
        except (OSError, RuntimeError):
            if explicit:
                raise UserError(f"--tokenizer {path}: {exc}") from None
            return
    if size > vocab_size:
        raise UserError(f"tokenizer {path} has {size} pieces but the model's vocabulary is {vocab_size}: "
                        f"not this model's tokenizer (see --tokenizer)")


def detect_format(src: Path) -> str:
    from albertlm.interop.tf_checkpoint import companion_prefix

    prefix = companion_prefix(src)   # one of a checkpoint's files (.index, .data-*, .meta): tf (the import names
    if prefix is not None and (src.is_file() or Path(f"{prefix}.index").is_file()):   # a missing index)
        return "tf"
    if not src.exists() and not Path(f"{src}.index").is_file():
        from albertlm.model.io import DOWNLOADS_NOTHING

        _no_index(src.parent, f"{glob.escape(src.name)}.data-*")

        raise UserError(f"{src}: no such file or directory ({DOWNLOADS_NOTHING})")
    if src.is_file() and (src.parent / "config.json").is_file():   # its config.json or weights: "no config.json"
        raise UserError(f"{src}: a file of a model directory; give the directory holding it ({src.parent})")
    config = src / "config.json"
    if src.is_dir() and config.is_file():
        from albertlm.model import hf_format

        # read as every loader reads it: a byte-order mark is fine, bytes that are not UTF-8 are one line
        data = read_json_object(config, "a model config")
        return "hf" if hf_format.is_hf_config(data) else "albertlm"
    if src.name.endswith(".index") or Path(f"{src}.index").is_file() or (src.is_dir() and (
            any(src.glob("*.index")) or (src / "variables" / "variables.index").is_file())):
        return "tf"
    if src.is_dir():
        _no_index(src, "*.data-*-of-*")
    raise UserError(f"{src}: not a model (no config.json, no TF *.index checkpoint); see --from")


def _no_index(directory: Path, pattern: str) -> None:
    """A TF checkpoint's data file in `directory` (`pattern`) without its PREFIX.index is named as such: the index was
    left behind by a download or copy (it was "no such file or directory", with a hint to download a Hub model, or
    "not a model")."""
    from albertlm.interop.tf_checkpoint import COMPANION

    data = sorted(p for p in directory.glob(pattern) if COMPANION.match(p.name))
    if data:
        prefix = COMPANION.match(data[0].name).group("prefix")
        raise UserError(f"{directory / prefix}.index is missing: {data[0].name} is there without it (a TF checkpoint "
                        "is PREFIX.index + PREFIX.data-*; an interrupted download or copy?)")


def held_tf_checkpoint(directory: Path) -> str | None:
    """The google-research TF checkpoint a directory holds (a `*.index` in it, or a TF-Hub module's
    variables/variables.index), by that file's name; None for none. A model's config.json written there hides it:
    `convert`, `info` and `export` read a folder with a config.json as that model."""
    if not directory.is_dir():
        return None
    return next((p.name for p in sorted(directory.glob("*.index"))), None) or \
        ("variables/variables.index" if (directory / "variables" / "variables.index").is_file() else None)


def _check_destination(src: Path, dst: Path, overwrite: bool) -> None:
    from albertlm.cli.guards import check_not_a_run

    if dst.exists() and not dst.is_dir():
        raise UserError(f"{dst} exists and is not a directory")
    check_not_a_run(dst, "DST", "converted")
    if dst.resolve() == (src if src.is_dir() else src.parent).resolve():
        raise UserError("DST must differ from the source directory")
    tf_held = held_tf_checkpoint(dst)
    if tf_held:   # `convert hub/variables/variables hub`: the source is in a folder below DST, which was not checked
        raise UserError(f"DST {dst} holds a TF checkpoint ({tf_held}), which the converted model's config.json would "
                        "hide (a folder with a config.json is read as that model by convert, info and export); give "
                        "another DST")
    taken = [name for name in OUTPUT_FILES if (dst / name).exists()] + _earlier_weights(dst)
    if taken and not overwrite:
        raise UserError(f"{dst} already holds {', '.join(taken)}; pass --overwrite (or --force) to replace them, "
                        "or another DST")


class _Collect(logging.Handler):
    """Keeps the model loader's notes (freshly initialised / ignored weights) for the summary; the names of the
    weights it drew at random because the checkpoint lacks them (`model.io.FRESH_WEIGHTS`) apart, for
    `_nothing_made_up`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []
        self.fresh: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        from albertlm.model.io import FRESH_WEIGHTS

        names = getattr(record, FRESH_WEIGHTS, None)
        if names:
            self.fresh += names
        else:
            self.messages.append(record.getMessage())


def load_model(src: Path, src_format: str, config: str | None, verify: bool):
    """(model, notes): the notes list missing / unexpected / skipped weights."""
    if src_format == "tf":
        from albertlm.interop.tf import import_tf_checkpoint

        if src.is_dir() and (src / "variables" / "variables.index").is_file():  # a TF-Hub module
            src = src / "variables"
        with tf_read_progress(verify) as progress:
            model, report = import_tf_checkpoint(src, config, verify=verify, progress=progress)
        if _lacks_only_the_sop_head(model, report.missing):   # an older TF-Hub module: its trained weights, no others
            report.missing = []
            return _without_sop_head(model), report.lines() + [NO_SOP_HEAD]
        if report.missing:   # as `_nothing_made_up` for directories: those were written to DST as trained weights
            raise UserError(f"{report.checkpoint}: the checkpoint lacks {_names(report.missing)} of "
                            f"{type(model).__name__}, the class its head variables make it (a half-written copy, or "
                            "a head of another script?); convert writes the weights a checkpoint holds and makes up "
                            "none")
        return model, report.lines()
    logger = logging.getLogger("albertlm.model")
    handler, level, propagate = _Collect(), logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False   # the summary says them: not a second time on stderr (the console's log handler)
    try:
        model = _load_directory(src, src_format)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    handler.messages = _nothing_made_up(model, src, handler.messages, handler.fresh)
    from albertlm.model.io import stored_float_dtype

    # the model loads as float32; a bf16 / fp16 source is written back in its own dtype (was float32: twice the size)
    dtype = stored_float_dtype(src)
    if dtype is not None and dtype != next(model.parameters()).dtype:
        model = model.to(dtype)
        return model, (handler.messages or [ALL_MAPPED]) + [
            f"weights kept in the source's dtype ({str(dtype).removeprefix('torch.')})"]
    return model, handler.messages


PROGRESS_AFTER = 2.0          # seconds of reading before a terminal's bar appears: a small checkpoint shows none
PLAIN_PROGRESS_AFTER = 30.0   # seconds of reading before a log (stderr no terminal) gets a line at each tenth


@contextlib.contextmanager
def tf_read_progress(verify: bool):
    """The TF import's `progress(done, total)` callback (bytes of the variables read so far, and in all), shown on
    stderr once reading takes long: on a terminal a tqdm bar after PROGRESS_AFTER seconds; elsewhere (a log: nohup,
    a batch job, a pipe) a line `convert: read 30% of 1,234.5 MB of weights, CRC32C checked, 0.6 min` at each
    tenth after PLAIN_PROGRESS_AFTER seconds (as `data build` and `tokenizer train` print theirs). `--verify` of a
    large model said nothing for a minute and a half."""
    from albertlm import errors

    started, terminal = time.monotonic(), errors.stderr_is_terminal()
    shown = {"bar": None, "tenths": 0}
    checked = ", CRC32C checked" if verify else ""

    def progress(done: int, total: int) -> None:
        if terminal:
            if shown["bar"] is None:
                from tqdm import tqdm

                shown["bar"] = tqdm(total=total, unit="B", unit_scale=True, leave=False, delay=PROGRESS_AFTER,
                                    desc="albertlm convert: " + ("read, verify" if verify else "read"))
            shown["bar"].update(done - shown["bar"].n)
            return
        tenths = 10 * done // max(total, 1)
        if tenths > shown["tenths"] and done < total:
            shown["tenths"] = tenths
            elapsed = time.monotonic() - started
            if elapsed >= PLAIN_PROGRESS_AFTER:
                print(f"convert: read {10 * tenths}% of {total / 1e6:,.1f} MB of weights{checked}, "
                      f"{elapsed / 60:.1f} min", file=sys.stderr, flush=True)

    try:
        yield progress
    finally:
        if shown["bar"] is not None:
            shown["bar"].close()


# an AlbertForPreTraining whose source lacks the SOP head alone (google/albert_*/1-3 on TF-Hub, and what convert made
# of one): written without it, so DST holds every trained weight and no random one
NO_SOP_HEAD = ("no SOP head in the source (sop_head.weight, sop_head.bias): none written; a model loaded from DST as "
               "AlbertForPreTraining makes a fresh one and says so, while fine-tuning uses the trained pooler and "
               "fill-mask the trained masked-LM head")


def _lacks_only_the_sop_head(model, missing: list[str]) -> bool:
    """Whether `model` is an AlbertForPreTraining whose source lacks its SOP head and nothing else."""
    from albertlm.interop.tf import SOP_HEAD
    from albertlm.model.albert import AlbertForPreTraining

    return isinstance(model, AlbertForPreTraining) and sorted(missing) == sorted(SOP_HEAD)


def _without_sop_head(model):
    """`model` (an AlbertForPreTraining) without its SOP head, which was freshly initialised: its state dict, which
    `save_model` writes, then holds none (a model loaded from DST makes its own, and says so). Only for writing: it
    cannot run forward."""
    model.sop_head = None
    return model


def _names(names: list[str]) -> str:
    """The first six of `names`, for a one-line error."""
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")


def _nothing_made_up(model, src: Path, messages: list[str], fresh: list[str]) -> list[str]:
    """Convert writes the weights SRC holds, none drawn at random: the loader freshly initialises head weights the
    checkpoint lacks (`fresh`, from its note's `model.io.FRESH_WEIGHTS`: a classifier, a SOP / MLM head, the pooler
    of the class SRC names), and those were written to DST as trained ones, the summary's note the only trace (every
    later load then said "all weights mapped", and predict scored the random classifier). A bare `AlbertModel` saved
    without a pooler (`add_pooling_layer=False`) converts without one (transformers' AlbertModel makes its own and
    says so), and an AlbertForPreTraining without the SOP head (an older TF-Hub module's) without that head; any
    other missing weight is a UserError (a half-written or damaged directory). Returns the notes
    left to print (`messages`, the loader's other notes)."""
    if not fresh:
        return messages
    from albertlm.model.albert import AlbertModel

    if isinstance(model, AlbertModel) and all(name.startswith("pooler.") for name in fresh):
        model.pooler = None
        return messages + ["no pooler in the source: none written (a model loaded from DST makes a fresh one, and "
                           "says so)"]
    if _lacks_only_the_sop_head(model, fresh):   # an older TF-Hub module converted before (or its --to hf export)
        _without_sop_head(model)
        return messages + [NO_SOP_HEAD]
    raise UserError(f"{src}: its weights lack {_names(fresh)} of "
                    f"{type(model).__name__}, the class it holds (a half-written or damaged copy?); "
                    "convert writes the weights a checkpoint holds and makes up none: give the complete directory, "
                    "or fine-tune it (`albertlm finetune`) to train a new head")


def _load_directory(src: Path, src_format: str):
    if src_format == "hf":
        from albertlm.interop.hf import import_hf

        return import_hf(src)
    from albertlm.model.registry import load_saved_model

    return load_saved_model(src)


def save_model(model, dst: Path, dst_format: str, labels: dict | None = None) -> None:
    """`labels`: a classifier's label names / problem type, into config.json (hf) or labels.json (albertlm)."""
    labels = labels if labels and getattr(model.config, "num_labels", 0) else {}
    if labels.get("id2label") and len(labels["id2label"]) != model.config.num_labels:
        labels = {k: v for k, v in labels.items() if k != "id2label"}   # names of another head: not these
    if dst_format == "hf":
        from albertlm.interop.hf import export_hf

        export_hf(model, dst, labels)  # refuses sharing `attention` / `ffn` with a clear message
    else:
        model.save_pretrained(dst)
        from albertlm.interop.hf import LABELS_FILE

        if labels and type(model).__name__ in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
            (dst / LABELS_FILE).write_text(json.dumps(labels, indent=2) + "\n")


def _tokenizer_file(path: Path) -> Path:
    """--tokenizer's file: the path itself, or the file a directory's tokenizer is read from (as `load_tokenizer`
    reads a directory: spiece.model, vocab.txt, a single *.model, tokenizer.json). A directory was "no such file",
    where every other command's --tokenizer takes one (`albertlm tokenizer train --out my-spm` writes one)."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise UserError(f"--tokenizer {path}: no such file or directory")
    models = sorted(path.glob("*.model"))
    for found in (path / "spiece.model", path / "vocab.txt", *(models if len(models) == 1 else []),
                  path / "tokenizer.json"):
        if found.is_file():
            return found
    raise UserError(f"--tokenizer {path}: no tokenizer in this directory (spiece.model, vocab.txt, a single *.model "
                    "or tokenizer.json)")


def copy_tokenizer(src: Path, dst: Path, explicit: Path | None) -> list[str]:
    """Copy tokenizer files beside SRC (or `explicit`) into DST under transformers' names."""
    if explicit is not None:
        if not explicit.is_file():
            raise UserError(f"--tokenizer {explicit}: no such file")
        name = {".txt": "vocab.txt", ".json": "tokenizer.json"}.get(explicit.suffix, "spiece.model")
        shutil.copyfile(explicit, dst / name)
        return [f"{explicit} -> {name}"]
    base = src if src.is_dir() else src.parent
    copied = []
    for target, candidates in TOKENIZER_FILES.items():
        for directory in (base, base.parent) if base.name == "variables" else (base,):
            found = next((directory / c for c in candidates if (directory / c).is_file()), None)
            if found is not None:
                shutil.copyfile(found, dst / target)
                copied.append(f"{found} -> {target}")
                break
    return copied


def print_summary(model, src: Path, src_format: str, dst: Path, dst_format: str, notes: list[str],
                  copied: list[str], card: str | None = None, no_tokenizer: str | None = None) -> None:
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())
    print(f"converted {src} ({src_format}) -> {dst} ({dst_format})")
    print(f"model: {type(model).__name__}, V={cfg.vocab_size} E={cfg.embedding_size} H={cfg.hidden_size} "
          f"L={cfg.num_layers} A={cfg.num_heads} I={cfg.ffn_size} sharing={cfg.sharing} "
          f"groups={cfg.num_groups} inner_group_num={cfg.inner_group_num} activation={cfg.activation}")
    print(f"parameters: {params:,}")
    for line in notes or [ALL_MAPPED]:
        print(line)
    print("tokenizer: " + ("; ".join(copied) if copied else
                           no_tokenizer or "none found beside the source (see --tokenizer)"))
    if card:
        print(card)
