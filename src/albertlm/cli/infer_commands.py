"""`albertlm fill-mask` and `albertlm embed`: thin wrappers over `albertlm.tasks.inference`.

    albertlm fill-mask runs/base "The capital of France is [MASK]."
    cat lines.txt | albertlm fill-mask runs/base --json        # one JSON object per input line
    albertlm embed runs/base --input sentences.txt --out emb.npy --pooling mean
    albertlm embed runs/base --input train.parquet --text-field sentence --out emb.parquet   # text + embedding
    albertlm embed runs/base --input big.txt --out emb.npy --precision bf16                # bf16 autocast, fp32 out
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import re
import sys

from albertlm.errors import UserError, process_alive
from albertlm.tasks.tables import table_batches   # (stdlib-only imports: the command module stays light)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("model", metavar="MODEL", help="model directory (ours or transformers') or a run directory "
                        "(a pretraining run: its newest checkpoint; a fine-tuning run: its best/)")
    if command == "fill-mask":
        parser.add_argument("text", nargs="*", metavar="TEXT",
                            help="text with [MASK] (several allowed); none or '-': one text per line of stdin")
        parser.add_argument("--top-k", type=int, default=5, metavar="K", help="predictions per [MASK] (default 5)")
        parser.add_argument("--json", action="store_true", help="one JSON object per text (JSON lines)")
    else:
        parser.add_argument("--input", required=True, metavar="FILE",
                            help="one text per line ('-': stdin; .gz/.bz2/.xz/.zst read as they are), or one text "
                                 "per record of JSON lines, CSV, TSV, Parquet or Arrow (see --text-field)")
        parser.add_argument("--format", choices=EMBED_FORMATS, default="auto",
                            help="how --input is read (default auto: Parquet/Arrow by their first bytes, .jsonl/"
                                 ".json/.ndjson, .csv, .tsv by the name, else one text per line)")
        parser.add_argument("--text-field", metavar="NAME",
                            help="the field/column holding the texts (JSON lines, Parquet, Arrow: needed when "
                                 "records hold several text columns; CSV/TSV: always, a column of the header line)")
        parser.add_argument("--out", required=True, metavar="X.npy|X.parquet|X.jsonl",
                            help="X.npy: float32 array (N, H); X.parquet: columns text, embedding (float32 lists); "
                                 "X.jsonl: {\"text\", \"embedding\"} per line; rows in input order")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
        parser.add_argument("--pooling", choices=("mean", "cls", "pooler"), default="mean",
                            help="mean of the last hidden states over the tokens, the [CLS] state, or the trained "
                                 "pooler's output (transformers' pooler_output; checkpoints that hold one)")
        parser.add_argument("--max-length", type=int, default=None, metavar="N",
                            help="truncate longer texts (default: the model's positions)")
        parser.add_argument("--normalize", action="store_true", help="L2-normalise each embedding")
        parser.add_argument("--no-progress", action="store_true",
                            help="no progress bar (on a terminal) nor progress lines (in a log: 'embed: 120/1200 "
                                 "batches' at each tenth, as predict prints them)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default 32)")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer (default: beside the model, or its run's)")
    parser.add_argument("--device", default="auto", metavar="{auto,cpu,cuda,cuda:N}",
                        help="auto: cuda if available, else cpu; cuda:N picks one GPU of several (default: auto)")
    written = "scores" if command == "fill-mask" else "embeddings"
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help=f"the forward pass, as predict's: fp32; bf16 autocast (CPU and CUDA; on a CPU without "
                             f"bf16 instructions emulated, slower than fp32); fp16 autocast (CUDA only); {written} "
                             "are written as float32 whatever it is (default: fp32)")


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.errors import UserError
    from albertlm.tasks.inference import pick_device
    from albertlm.training.precision import check_precision

    # before the model loads (fill-mask's stdin loop would otherwise never fill a batch)
    check_precision(args.precision, pick_device(args.device), training=False)   # fp16 on a CPU: predict's line
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    if command == "fill-mask" and args.top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {args.top_k}")
    if command == "embed" and args.max_length is not None and args.max_length < 3:
        raise UserError(f"--max-length must be >= 3 ([CLS], at least one token of the text, [SEP]), "
                        f"got {args.max_length}")
    if command == "embed":
        check_out_name(args.out)
        check_input_options(args.input, args.format, args.text_field)
    return _fill_mask(args) if command == "fill-mask" else _embed(args)


EMBED_FORMATS = ("auto", "lines", "jsonl", "csv", "tsv", "parquet", "arrow")
PRECISIONS = ("fp32", "bf16", "fp16")   # predict's / evaluate's --precision (`training.precision.check_precision`)
OUT_KINDS = {".npy": "npy", ".parquet": "parquet", ".jsonl": "jsonl"}   # embed's --out, by its suffix (any case)


def check_out_name(out: str) -> str:
    """What `embed` writes, by --out's suffix: "npy", "parquet" or "jsonl". Another suffix (`emb.npz`, no suffix)
    is refused: .npy bytes were once written under any name, which a reader of the format named failed on; so is
    `emb.npy/` (a folder, by its '/'), which wrote the file emb.npy."""
    from pathlib import Path

    from albertlm.errors import UserError

    suffix = Path(out).suffix
    kind = OUT_KINDS.get(suffix.lower())
    if kind is not None and out.rstrip(".").endswith(("/", os.sep)):   # Path drops the '/' of `emb.npy/`
        raise UserError(f"--out {out}: embed writes one {suffix} file, and the '/' after its name names a folder; "
                        f"give {Path(out)}")
    if kind is None:
        what = f", not a {suffix} file" if suffix else ""
        stem = Path(out).stem or "emb"
        raise UserError(f"--out {out}: embed writes a NumPy .npy array (float32, texts x hidden size), a .parquet "
                        f"table or JSON lines{what}; name it {stem}.npy (np.load reads it), {stem}.parquet (columns "
                        f"text, embedding) or {stem}.jsonl")
    return kind


def check_input_options(input_name: str, fmt: str, text_field: str | None) -> None:
    """--format / --text-field that cannot apply, refused before the model loads: stdin is read as lines."""
    from albertlm.errors import UserError

    if text_field is not None and fmt == "lines":
        raise UserError("--text-field names a field of JSON lines, CSV/TSV, Parquet or Arrow records; "
                        "--format lines reads one text per line")
    if input_name == "-" and (text_field is not None or fmt not in ("auto", "lines")):
        given = "--text-field" if text_field is not None else f"--format {fmt}"
        raise UserError(f"--input -: stdin is read as one text per line; {given} needs the file itself "
                        "(give its path to --input)")


def _fill_mask(args) -> int:
    from albertlm.errors import stderr_is_terminal
    from albertlm.tasks.inference import FillMask

    fill = FillMask.load(args.model, args.tokenizer, args.device, args.precision)
    if args.text and args.text != ["-"]:
        _print_fill(args.text, fill(args.text, args.top_k, args.batch_size), args.json)
        return 0
    from albertlm.errors import UserError

    # batched, printed as each batch is done; blank lines are skipped. A bad line (no [MASK], too long, not UTF-8)
    # is named by its line number, after the results of the lines before it are printed. From a terminal each
    # line is answered at once (batches of --batch-size lines printed nothing until the 32nd line was typed)
    interactive = stdin_is_terminal()
    if interactive and stderr_is_terminal():
        print("fill-mask: one text with [MASK] per line; Ctrl-D ends", file=sys.stderr)
    batch_size = 1 if interactive else args.batch_size
    batch: list[str] = []
    encoded: list[list[int]] = []

    def flush() -> None:
        texts, ids = list(batch), list(encoded)
        batch.clear()
        encoded.clear()
        if texts:
            _print_fill(texts, fill.predict_encoded(ids, args.top_k, args.batch_size), args.json)

    try:
        for number, text in stdin_lines():
            if not text.strip():
                continue
            encoded.append(fill.encode(text, f"stdin line {number}"))
            batch.append(text)
            if len(batch) == batch_size:
                flush()
    except UserError:
        flush()
        raise
    flush()
    return 0


def stdin_is_terminal() -> bool:
    """Whether stdin is a terminal (a person typing), False for a pipe, a file, or a replaced or closed stdin."""
    try:
        return bool(sys.stdin is not None and sys.stdin.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _print_fill(texts, results, as_json: bool) -> None:
    for text, masks in zip(texts, results):
        if as_json:
            print(json.dumps({"text": text, "masks": masks}, ensure_ascii=False))
            continue
        print(text)
        for k, predictions in enumerate(masks):
            label = f"  [MASK] {k + 1}: " if len(masks) > 1 else "  "
            print(label + "  ".join(f"{p['token_str'] or p['token']} {p['score']:.4f}" for p in predictions))
    sys.stdout.flush()


def _embed(args) -> int:
    from pathlib import Path

    import numpy as np

    from albertlm.errors import UserError
    from albertlm.tasks.inference import batch_count, embed_texts, embed_windows, load_encoder, load_tokenizer_for

    out_kind = check_out_name(args.out)
    if args.input == "-":
        path = None
    else:
        path = Path(args.input)
        if path.is_dir():
            raise UserError(f"--input {path} is a directory; give a text file (one text per line) or a table")
        if not path.exists():
            raise UserError(f"--input {path}: no such file")
        if not path.is_file() and (args.text_field is not None or args.format not in ("auto", "lines")):
            raise UserError(f"--input {path} is not a regular file (a pipe?): it is read once as one text per line; "
                            "--format and --text-field need the file itself")
    out = Path(args.out)   # said before the input is read through and the model loads (was after both)
    if out.is_dir():
        raise UserError(f"--out {out} is a directory")
    if out.exists() and not args.overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it, or another --out")
    if path is not None and out.exists() and os.path.samefile(path, out):   # --overwrite: embeddings in its place
        raise UserError(f"--out {out} is the --input file: embed would replace the texts with their embeddings; "
                        "give another --out")
    if path is not None and path.is_file():   # every record checked before the model loads and any output is made
        count, source = file_texts(path, args.format, args.text_field)
    model, model_dir, device = load_encoder(args.model, args.device, args.precision)
    tokenizer = load_tokenizer_for(model_dir, args.tokenizer, model.config.vocab_size)
    if path is None:
        count, source = spooled(stdin_lines(), "stdin")
    elif not path.is_file():   # a pipe (bash's `--input <(cmd)`: /dev/fd/63), /dev/null: read once, as stdin is
        try:
            with open(path, "rb") as handle:
                count, source = spooled(binary_lines(handle, f"--input {path} line "), f"--input {path}")
        except OSError as exc:
            raise UserError(f"--input {path}: cannot read it ({exc.strerror or exc})") from None
    for gone in remove_killed_temporaries(out):
        print(f"removed {gone}, the partial output of an earlier embed into {out} that was killed", file=sys.stderr)
    made = make_parent(out, "--out")
    tmp = temporary_name(out)   # renamed into place when complete
    hidden = model.config.hidden_size
    limit = min(args.max_length or model.config.max_position_embeddings, model.config.max_position_embeddings)
    stats: dict = {}
    options = dict(pooling=args.pooling, batch_size=args.batch_size, max_length=args.max_length, device=device,
                   normalize=args.normalize, stats=stats, precision=args.precision)
    try:   # locked for its whole life: `remove_killed_temporaries` removes only a file whose lock it can take
        held = hold_temporary(tmp, out)
    except BaseException:   # held by another process: not ours to remove
        remove_if_empty(made)
        raise
    try:
        with embed_progress(count, batch_count(count, args.batch_size), not args.no_progress) as progress:
            if out_kind == "npy":
                try:
                    array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(count, hidden))
                except OSError as exc:
                    raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
                allocate(tmp, out, count, hidden)   # before the first row: a full disk is a line, not SIGBUS
                embed_texts(model, tokenizer, source, out=array, progress=progress, **options)
                array.flush()
                del array
            else:
                about = {"model": str(model_dir), "pooling": args.pooling, "normalize": args.normalize,
                         "max_length": limit, "hidden_size": hidden, "precision": args.precision}
                windows = _reading(embed_windows(model, tokenizer, source, progress=progress, **options),
                                   args.input)
                try:
                    written = (write_parquet if out_kind == "parquet" else write_jsonl)(tmp, windows, hidden, about)
                except OSError as exc:   # a full disk, no permission
                    raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
                if written != count:   # the input changed between its check and its reading
                    raise UserError(f"--input {args.input}: {written:,} texts read, {count:,} when it was checked: "
                                    "did it change meanwhile?")
        os.replace(tmp, out)
    except BaseException:   # nothing of a failed or stopped embedding stays: the folders made for it neither
        tmp.unlink(missing_ok=True)
        remove_if_empty(made)
        raise
    finally:
        tmp.unlink(missing_ok=True)
        if held is not None:   # after the unlink: the lock is given up once no file of that name is left
            os.close(held)
    pooled = "pooler_output" if args.pooling == "pooler" else f"{args.pooling}-pooled"
    computed = f", {args.precision} autocast" if args.precision != "fp32" else ""
    print(f"wrote {count:,} x {hidden} {pooled} embeddings to {out} "
          f"({model_dir}, {device}{computed})", file=sys.stderr)
    if stats.get("truncated"):
        cut = stats["truncated"]
        print(f"{cut:,} {'text' if cut == 1 else 'texts'} longer than {limit} tokens (the longest: "
              f"{stats['longest']:,}) {'was' if cut == 1 else 'were'} cut to {limit}, keeping [SEP]: "
              f"{'its embedding covers' if cut == 1 else 'their embeddings cover'} only the start of the text",
              file=sys.stderr)
    if stats.get("empty"):
        empty = stats["empty"]
        print(f"{empty:,} {'text' if empty == 1 else 'texts'} (empty or blank) gave no token: "
              f"{'its row is' if empty == 1 else 'their rows are'} the embedding of [CLS] [SEP] alone",
              file=sys.stderr)
    return 0


# what a file system that cannot preallocate answers `posix_fallocate` (the .npy stays sparse there, as before)
_NO_FALLOCATE = {getattr(errno, name) for name in ("EOPNOTSUPP", "ENOTSUP", "EINVAL", "ENOSYS", "ENODEV", "ESPIPE")
                 if hasattr(errno, name)}


def allocate(tmp, out, count: int, hidden: int) -> None:
    """Give the .npy temporary file (`np.lib.format.open_memmap`'s) all its disk blocks now (`os.posix_fallocate`).
    open_memmap makes a sparse file, which gets its blocks only as the embeddings are written into the mapping,
    and a full disk or quota met then is no OSError but SIGBUS: embed died mid-way with "Bus error" (exit 135),
    nothing said, its temporary file left for the next run to remove. Now a file that does not fit is one line
    before the first batch. A file system that cannot preallocate is left to the sparse file; so is a platform
    without posix_fallocate (macOS, Windows)."""
    if not hasattr(os, "posix_fallocate"):
        return
    size = 0
    try:
        with open(tmp, "r+b") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size:
                os.posix_fallocate(handle.fileno(), 0, size)
    except OSError as exc:
        if exc.errno in _NO_FALLOCATE:
            return
        needed = f": {count:,} x {hidden} float32 embeddings take {size_text(size)}" if size else ""
        raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc}{needed})") from None


def size_text(size: int) -> str:
    """A byte count as people read it: 512 bytes, 1.3 MB, 2.9 GB (powers of 1000, as `df -H`)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


@contextlib.contextmanager
def embed_progress(texts: int, batches: int, enabled: bool = True):
    """embed's `progress` callback (called once per batch with its number of texts, `embed_windows`): on a terminal
    a tqdm bar over the texts; elsewhere (a log: nohup, CI, `| tee`), where that bar drew nothing and an embedding
    of a million rows said nothing for an hour, predict's plain lines (`evaluate.show_progress`: `embed: 120/1200
    batches` on stderr at each tenth of the `batches`, `inference.batch_count`). `enabled` False: nothing."""
    from albertlm.training.metrics import _terminal

    if not enabled:
        yield lambda done: None
        return
    if _terminal():
        from tqdm import tqdm

        with tqdm(total=texts, unit="text", desc="albertlm embed", leave=False) as bar:
            yield bar.update
        return
    from albertlm.training.evaluate import show_progress

    # show_progress prints a batch's line when the batch after it is asked for (its loop's batch is done then):
    # one asked for at the start, one more as each is done; past the last the generator is spent (None)
    ticks = show_progress(iter(range(batches)), batches, "embed", leave=False)
    next(ticks, None)
    try:
        yield lambda done: next(ticks, None)
    finally:
        ticks.close()


def temporary_name(out, pid: int | None = None):
    """Where embed writes `out` until it is complete (then renamed into place: a killed run leaves no `out` that a
    rerun takes as done): `.tmp-NAME-HOST-PID` beside it, the machine and process named for
    `remove_killed_temporaries`."""
    import socket

    return out.with_name(f".tmp-{out.name}-{socket.gethostname()}-{os.getpid() if pid is None else pid}")


# how often, and how far apart, `hold_temporary` tries a lock that another process holds: a cleaner holds one for
# the moment of its unlink (`remove_killed_temporaries`), another embed of the same temporary name for its whole run
_HOLD_TRIES, _HOLD_WAIT_S = 20, 0.05


def hold_temporary(tmp, out) -> int | None:
    """Create `tmp` (`temporary_name`) and hold an exclusive `fcntl.flock` on it, returning the descriptor to close
    once `tmp` is renamed or removed (None where there is no flock, elsewhere than POSIX, or the file system has
    no locks: `remove_killed_temporaries` removes no file it cannot lock). The writers open `tmp` by its name and
    truncate it, the same file: the lock stays on it, and on `out` after the rename. A lock held by another process
    (another container of this host name, with this process id: its own pid space on a shared folder) is a
    UserError, not two embeddings written into one file."""
    try:
        import fcntl
    except ImportError:
        return None
    import time

    for _ in range(_HOLD_TRIES):
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:   # held: a cleaner removing a file of this name, or another embed writing it
            os.close(fd)
            time.sleep(_HOLD_WAIT_S)
            continue
        except OSError:   # no locks on this file system (ENOLCK, EOPNOTSUPP): no cleaner can lock it either
            return fd
        try:   # a cleaner removed the file between our open and our lock: make it again
            if os.path.samestat(os.fstat(fd), os.stat(tmp)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise UserError(f"--out {out}: its temporary file {tmp} is being written by another process (an embed into "
                    "the same --out in another container of this host name with this process id?); wait for it to "
                    "end, or give another --out")


def remove_killed_temporaries(out) -> list:
    """Remove the temporary files (`temporary_name`) of earlier embeddings into `out` on this machine whose process
    is gone: a run killed by SIGKILL, the OOM killer or a lost session cannot remove its own, and an .npy's is the
    whole array's size (3 GB for a million rows at H 768), hidden by its dot, one more at each killed rerun. A
    running process's (a concurrent embed into the same --out) and another machine's (a shared folder) stay, and so
    does one whose lock (`hold_temporary`) another process holds: containers of one host name on a shared folder
    (docker --network host) each have their own process ids, so a process id dead here may be another container's
    live embed. Only a file whose lock this process can take is removed (none elsewhere than POSIX, nor where the
    file system has no locks). Returns the paths removed."""
    prefix = temporary_name(out, 0).name[:-1]   # `.tmp-NAME-HOST-`
    removed = []
    try:
        candidates = [path for path in out.parent.iterdir() if path.name.startswith(prefix)]
    except OSError:   # no folder yet (or none readable): nothing of ours there
        return removed
    for path in sorted(candidates):
        pid = path.name[len(prefix):]
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(int(pid)) or not _remove_unheld(path):
            continue
        removed.append(path)
    return removed


def _remove_unheld(path) -> bool:
    """Remove `path` if its `fcntl.flock` can be taken (no live writer holds it, `hold_temporary`), holding the lock
    while the name still names the file locked; False where it is held, cannot be opened for writing (another
    user's: NFS emulates flock with write locks), the file system has no locks, or there is no flock."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:   # another user's, a folder, a link, or gone meanwhile: left as it is
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not os.path.samestat(os.fstat(fd), os.lstat(path)):   # replaced meanwhile: not the file locked
            return False
        path.unlink()
    except OSError:   # held by a live writer (BlockingIOError), no locks here, or gone meanwhile
        return False
    finally:
        os.close(fd)
    return True


def _reading(windows, name: str):
    """`windows`, an OSError met reading the input said as such (the writer's own are the output's)."""
    try:
        yield from windows
    except OSError as exc:
        raise UserError(f"--input {name}: cannot read it ({exc.strerror or exc})") from None


def write_parquet(path, windows, hidden: int, about: dict) -> int:
    """`windows` ((texts, (n, hidden) float32) in input order, `embed_windows`) into a Parquet file: columns `text`
    (string) and `embedding` (fixed_size_list<float32>[hidden]), one row group per window as it is done (memory
    stays bounded); `about` (model, pooling, ...) as the schema's `albertlm` metadata, JSON. Returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("text", pa.string()), ("embedding", pa.list_(pa.float32(), hidden))],
                       metadata={"albertlm": json.dumps(about)})
    rows = 0
    with pq.ParquetWriter(str(path), schema) as writer:
        for texts, vectors in windows:
            embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), hidden)
            writer.write_table(pa.Table.from_arrays([pa.array(texts, pa.string()), embedding], schema=schema))
            rows += len(texts)
    return rows


def write_jsonl(path, windows, hidden: int, about: dict) -> int:
    """`windows` as JSON lines, `{"text": ..., "embedding": [...]}` a line, each number the shortest decimal that
    reads back as the same float32 (a non-finite number as Python's json writes it: NaN, Infinity). Returns the
    rows."""
    import numpy as np

    rows = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for texts, vectors in windows:
            finite = bool(np.isfinite(vectors).all())
            for text, vector in zip(texts, vectors):
                numbers = ",".join(map(str, vector)) if finite else json.dumps(vector.tolist())[1:-1]
                handle.write(f'{{"text": {json.dumps(text, ensure_ascii=False)}, "embedding": [{numbers}]}}\n')
            rows += len(texts)
    return rows


# -- embed's input: lines, compressed lines, JSON lines, CSV/TSV, Parquet, Arrow ---------------------------------
def file_texts(path, fmt: str = "auto", text_field: str | None = None):
    """(count, texts) of an input file, one text per line or per record, in file order. The whole file is read once
    first: a line that is not UTF-8, a record without the field, a null, a damaged compressed stream is a UserError
    naming the place before any output is made (a record skipped, as `data build` skips it, would shift every
    later row of the output against the input). The texts are records, never split into sentences or stripped."""
    from pathlib import Path

    path = Path(path)
    kind, compression = input_format(path, fmt)
    if kind == "lines" and text_field is not None:
        raise UserError(f"--input {path} is read as one text per line (no fields): --text-field is for JSON lines, "
                        "CSV/TSV, Parquet and Arrow (see --format)")
    if kind == "lines" and compression is None:
        return _count_lines(path), _lines(path)   # split at "\n" only, a lone "\r" kept in the text
    field = None if kind == "lines" else text_column(path, kind, compression, text_field)

    def texts():
        if kind == "lines":   # split at "\n" only, as a plain file and stdin are: `zcat f.gz | wc -l` rows
            return _compressed_lines(path, compression)
        if kind == "jsonl":
            return _jsonl_texts(path, compression, field)
        if kind in ("csv", "tsv"):
            return _delimited_texts(path, compression, kind, field)
        return _column_texts(path, kind, field)

    count = sum(1 for _ in texts())
    return count, texts()


def input_format(path, fmt: str = "auto") -> tuple[str, str | None]:
    """(how to read it, its compression): Parquet and Arrow by their first bytes, a compressed file by its magic
    bytes, then the name without its compression suffix (.jsonl/.json/.ndjson, .csv, .tsv/.tab), else lines."""
    from albertlm.data import corpus

    with open(path, "rb") as handle:
        magic = handle.read(10)   # the whole of a bzip2 header (`compression_of`)
    # an Arrow IPC stream has no magic number: `table_format` takes it by a `.arrow` or `.arrows` name (the stream
    # format's own suffix), or by --format arrow, which says it outright (both were "no Arrow file", or its bytes
    # read as lines: "not UTF-8 text")
    table = corpus.table_format(path, magic, fmt)
    compression = corpus.compression_of(magic)
    inner = corpus.inner_name(path).suffix.lower()
    if table is not None:
        if fmt not in ("auto", table):
            raise UserError(f"--input {path} is a{'n' if table == 'arrow' else ''} {table.capitalize()} file, not "
                            f"{fmt}; leave --format out (and name the column with --text-field)")
        return table, None
    if fmt in corpus.TABLE_FORMATS or (fmt == "auto" and inner in corpus.TABLE_SUFFIXES):
        what = f"{compression}-compressed" if compression else "not one by its first bytes: damaged or cut short?"
        named = fmt if fmt != "auto" else inner[1:].removesuffix("s")    # .arrows: an Arrow (stream) file
        raise UserError(f"--input {path}: no {named.capitalize()} file ({what}); "
                        "a Parquet or Arrow file is read as it is stored" + ("; decompress it first"
                                                                           if compression else ""))
    if fmt != "auto":
        return fmt, compression
    if inner in corpus.JSONL_SUFFIXES:
        return "jsonl", compression
    if inner in corpus.CSV_SUFFIXES:
        return "csv", compression
    return ("tsv" if inner in (".tsv", ".tab") else "lines"), compression


def text_column(path, kind: str, compression: str | None, text_field: str | None) -> str:
    """The field or column holding the texts: `text_field`, checked against the file's first record (JSON lines),
    header (CSV/TSV) or schema (Parquet/Arrow); without it, the one text column there is. Several are ambiguous (a
    file's `id` and `title` are text too): a UserError naming them."""
    if kind == "jsonl":
        number, record = next(_jsonl_records(path, compression), (0, None))
        if record is None:
            return text_field or "text"   # no record: nothing to embed, nothing to choose
        names = [str(name) for name in record]
        texts = [str(name) for name, value in record.items() if isinstance(value, str)]
        where, what = f"{path}:{number}", "fields"
    elif kind in ("csv", "tsv"):
        header = next((row for _, row in _delimited_rows(path, compression, kind) if row), None)
        if header is None:
            return text_field or "text"
        names = texts = [name.strip() for name in header]
        where, what = f"{path}", "columns"
    else:
        schema = _table_schema(path, kind)
        names = list(schema.names)
        texts = [name for name in names if _is_text_type(schema.field(name).type)]
        where, what = f"{path}", "columns"
    shown = ", ".join(map(repr, names[:12])) + (", ..." if len(names) > 12 else "")
    if text_field is None and kind in ("csv", "tsv"):
        # every cell is text, and a file without a header line (GLUE's CoLA, a one-column list) would lose its first
        # text as the "header": the column is named, which says that the first line is the header
        raise UserError(f"{where}: a {kind.upper()} file's texts are read from the column its first line names "
                        f"({shown}): name it with --text-field; a file without a header line: --format lines "
                        "embeds its whole lines")
    if text_field is None:
        if len(texts) == 1:
            return texts[0]
        if not texts:
            raise UserError(f"{where}: no text {what[:-1]} to embed ({what}: {shown})")
        raise UserError(f"{where}: {len(texts)} text {what} ({', '.join(map(repr, texts[:12]))}); name the one to "
                        "embed with --text-field")
    if text_field not in names:
        raise UserError(f"{where}: no {what[:-1]} {text_field!r} ({what}: {shown}); see --text-field")
    if names.count(text_field) > 1:
        raise UserError(f"{where}: the header names the column {text_field!r} twice")
    if text_field not in texts:   # a number, a list, a struct (JSON lines: in the first record)
        held = (schema.field(text_field).type if kind in ("parquet", "arrow")
                else f"a JSON {_json_kind(record[text_field])}")
        raise UserError(f"{where}: {what[:-1]} {text_field!r} holds {held}, not text; text {what}: "
                        f"{', '.join(map(repr, texts[:12])) or 'none'}")
    return text_field


def _compressed_lines(path, compression: str):
    """The texts of a compressed file of one text per line, as `_lines` gives a plain file's and `stdin_lines`
    stdin's: split at "\\n" only, a "\\r\\n" end dropped, a lone "\\r" kept in the text, a UTF-8 byte order mark
    dropped. `data build`'s stream (`_stream_lines`) also ends a line at a lone "\\r": the same file gave one row
    more per lone "\\r" gzipped than plain or through `zcat | embed --input -`, every row after it shifted against
    the file's line numbers. UTF-16/UTF-32 text with a byte order mark (refused in a plain file) is read
    transcoded, as `data build` reads it."""
    from albertlm.data import corpus

    if corpus.wide_encoding(_decompressed_head(path, compression)) is not None:
        yield from (text.removesuffix("\n") for _, text in _stream_lines(path, compression))
        return
    yield from (_line_text(text, number) for number, text in _stream_lines(path, compression, universal=False))


def _stream_lines(path, compression: str | None, universal: bool = True):
    """(line number, line with its "\\n") of a text file read as `data build` reads it (`corpus.open_text_stream`:
    gzip, bzip2, xz or zstd decompressed, UTF-16/UTF-32 with a byte order mark transcoded, a lone CR a line end);
    a line that is not UTF-8, or compressed data damaged or cut short (where `data build` keeps what came before),
    is a UserError naming the file and the line. `universal=False`: the decompressed bytes as they are (no
    transcoding, line ends and byte order mark left in the lines, lines split at "\\n" only)."""
    from albertlm.data import corpus
    from albertlm.data.corpus import NOT_UTF8_HINT, open_text_stream

    errors: list[Exception] = []
    if universal:
        stream, raw = open_text_stream(path, compression, errors.append)
    else:
        raw = open(path, "rb")
        stream = io.BufferedReader(corpus.decompressor(raw, compression, errors.append), 1 << 20)

    def damaged(number: int) -> UserError:   # said before the line the damage cut short is read as a text
        where = f"near line {number:,}" if number else "before its first line"
        return UserError(f"{path}: the {compression} data is damaged or cut short, {where} "
                         f"({type(errors[0]).__name__}: {errors[0]}); nothing was embedded")

    number = 0
    try:
        for number, line in enumerate(stream, 1):
            if errors:
                raise damaged(number)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UserError(f"{path}:{number}: not UTF-8 text ({_not_utf8(line, number, exc)}); "
                                f"{NOT_UTF8_HINT}") from None
            yield number, text
    finally:
        stream.close()
        raw.close()
    if errors:
        raise damaged(number)


def _jsonl_records(path, compression: str | None):
    """(line number, object) of a JSON lines file, blank lines skipped; a line that is no JSON object is a
    UserError naming it."""
    for number, line in _stream_lines(path, compression):
        if not line.strip():
            continue
        hint = ("; a file holding one JSON document (an array of records) is no JSON lines: write one object a "
                "line (pandas: to_json(path, orient='records', lines=True))") if line.lstrip()[:1] == "[" else ""
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UserError(f"{path}:{number}: not JSON ({str(exc) or type(exc).__name__}){hint}") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{number}: a JSON {_json_kind(record)}, not an object{hint}")
        yield number, record


def _jsonl_texts(path, compression: str | None, field: str):
    for number, record in _jsonl_records(path, compression):
        if field not in record:
            raise UserError(f"{path}:{number}: no field {field!r} (fields: {', '.join(map(str, list(record)[:12]))}); "
                            "embed writes one row per record")
        text = record[field]
        if not isinstance(text, str):
            raise UserError(f"{path}:{number}: field {field!r} is a JSON {_json_kind(text)}, not a string; embed "
                            "writes one row per record: fix or drop it first")
        yield _encodable(text, f"{path}:{number}: field {field!r}")


def _json_kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), type(value).__name__)


def _delimited_rows(path, compression: str | None, kind: str):
    """(line number, cells) of a CSV or TSV file. A TSV is read without quoting as GLUE's are (bare quotes in the
    texts), unless its head shows CSV quoting (`tables.csv_quoted_tsv`: pandas' to_csv(sep="\\t"); plain files
    only). Each row is read under `corpus.CSV_FIELD_LIMIT` (csv's own limit, 131072 characters, is below a long
    article), csv's process-wide limit put back after it."""
    import csv

    from albertlm.data.corpus import CSV_FIELD_LIMIT

    lines = _delimited_lines(path, compression)
    if kind == "tsv":
        from albertlm.tasks.tables import csv_quoted_tsv
        try:   # a compressed file's head is its text's (pandas' to_csv("x.tsv.gz", sep="\t") quotes as a plain one)
            quoting = csv.QUOTE_MINIMAL if csv_quoted_tsv(_DecompressedText(path, compression)) else csv.QUOTE_NONE
        except (UnicodeDecodeError, OSError):   # the reading below names the line
            quoting = csv.QUOTE_NONE
        reader = csv.reader(lines, delimiter="\t", quoting=quoting)
    else:
        reader = csv.reader(lines)
    while True:
        before = csv.field_size_limit(max(CSV_FIELD_LIMIT, csv.field_size_limit()))
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise UserError(f"{path}:{reader.line_num}: {exc}") from None
        finally:
            csv.field_size_limit(before)
        if row is None:
            return
        yield reader.line_num, row


def _delimited_lines(path, compression: str | None):
    """The lines of a CSV/TSV file for `csv.reader`, as a file opened with newline="" gives them (what the csv module
    asks for): split after "\\n", "\\r\\n" or a lone "\\r", their ends kept as they are, so that a quoted cell keeps
    its "\\r" and "\\r\\n" (`_stream_lines`' universal reading made both "\\n": the `text` written to a .parquet or
    .jsonl was another than the file's, which pandas, pyarrow and the csv module read unchanged); a lone "\\r" outside
    quotes still ends a row. The first line without a UTF-8 byte order mark. UTF-16/UTF-32 text (byte order mark) is
    read transcoded, its line ends made "\\n", as `data build` reads it."""
    from albertlm.data import corpus

    if corpus.wide_encoding(_decompressed_head(path, compression)) is not None:
        yield from (line for _, line in _stream_lines(path, compression))
        return
    for number, line in _stream_lines(path, compression, universal=False):
        if number == 1:
            line = line.removeprefix("\ufeff")
        if "\r" not in line:
            yield line
            continue
        yield from (part for part in _AFTER_LONE_CR.split(line) if part)


_AFTER_LONE_CR = re.compile(r"(?<=\r)(?!\n)")   # the place after a "\r" that no "\n" follows


def _decompressed_head(path, compression: str | None) -> bytes:
    """The first 4 bytes of a file's (decompressed) data: where a UTF-16/UTF-32 byte order mark would be."""
    from albertlm.data import corpus

    with open(path, "rb") as raw:
        inner = corpus.decompressor(raw, compression, lambda exc: None)
        head = b""
        while len(head) < 4 and (data := inner.read(4 - len(head))):   # a decompressor may hand out fewer
            head += data
    return head


class _DecompressedText:
    """A file's (decompressed, transcoded) text where `tables.csv_quoted_tsv` opens a path: a compressed TSV was
    read without quoting whatever it held, so a text of pandas' quoting with a line break inside became two rows
    (of a one-column file: every later row shifted) and one with quotes kept its CSV quotes."""

    def __init__(self, path, compression: str | None):
        self.path, self.compression = path, compression

    @contextlib.contextmanager
    def open(self, encoding: str = "utf-8-sig", newline: str | None = ""):
        from albertlm.data.corpus import open_text_stream

        stream, raw = open_text_stream(self.path, self.compression, lambda exc: None)
        try:
            yield io.TextIOWrapper(stream, encoding=encoding, newline=newline)
        finally:
            stream.close()
            raw.close()


def _delimited_texts(path, compression: str | None, kind: str, field: str):
    """The `field` cell of each row after the header line; blank lines are no rows, a row of another length than
    the header a UserError naming its line."""
    rows = _delimited_rows(path, compression, kind)
    header = next((row for _, row in rows if row), None)
    if header is None:
        return
    column = [name.strip() for name in header].index(field)
    for number, row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise UserError(f"{path}:{number}: {len(row)} field(s), the header has {len(header)}; embed writes one row "
                            "per record")
        yield row[column]


def _is_text_type(kind) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or getattr(pa.types, "is_string_view", lambda t: False)(kind))


def _table_schema(path, kind: str):
    import pyarrow as pa

    try:
        with table_batches(path, kind) as (schema, _):
            return schema
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"--input {path}: cannot read it as {kind.capitalize()} ({exc})") from None


def _column_texts(path, kind: str, field: str):
    """The `field` value of each row of a Parquet or Arrow file; a null is a UserError naming its row (from 1)."""
    import pyarrow as pa

    row = 0
    try:
        with table_batches(path, kind, field) as (_, batches):
            for batch in batches:
                values = batch.column(0)
                if values.null_count:
                    first = row + 1 + values.is_null().to_pylist().index(True)
                    raise UserError(f"{path} row {first:,}: column {field!r} is null (and {values.null_count - 1:,} "
                                    f"more of rows {row + 1:,}-{row + len(values):,}); embed writes one row per input "
                                    "row: drop or fill the nulls first")
                try:
                    texts = values.to_pylist()
                except UnicodeDecodeError:   # a string column of bytes that are no UTF-8 (a writer that did not
                    raise _not_utf8_row(path, field, values, row) from None   # check): was a traceback
                for text in texts:
                    row += 1
                    yield text   # decoded from UTF-8: no lone surrogate
    except (pa.ArrowException, OSError) as exc:
        after = f"after row {row:,}: " if row else ""
        raise UserError(f"--input {path}: cannot read it as {kind.capitalize()} ({after}{exc})") from None


def _not_utf8_row(path, field: str, values, row: int) -> UserError:
    """The error for a batch of a string column one of whose values is no UTF-8: its row (from 1) named."""
    for k in range(len(values)):
        try:
            values[k].as_py()
        except UnicodeDecodeError as exc:
            return UserError(f"{path} row {row + k + 1:,}: column {field!r} is not UTF-8 text (byte "
                             f"{exc.object[exc.start]:#04x} at byte {exc.start + 1}); embed writes one row per input "
                             "row: fix or drop it first")
    return UserError(f"{path} rows {row + 1:,}-{row + len(values):,}: column {field!r} is not UTF-8 text")


def _encodable(text: str, where: str) -> str:
    """`text`, unless it holds a lone surrogate (JSON's "\\ud800", which Python's json writes for text decoded with
    surrogateescape): UTF-8 cannot hold one, and the .parquet and .jsonl writers failed on it with a traceback after
    the embedding of every window before it, the .npy got the row of an undecodable text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(f"{where} holds a lone surrogate ({ascii(text[exc.start])} at character {exc.start + 1}): no "
                        "text UTF-8 can hold; embed writes one row per record: fix or drop it first") from None
    return text


def spooled(lines, where: str):
    """(count, texts) of the (number, text) pairs of a stream read once (stdin, a pipe), its texts kept in an
    unnamed temporary file, not in memory: the .npy's row count must be known before the first row is written,
    and a list of every text of a huge stdin held all of it in memory (embed_texts' windows bound the rest)."""
    import tempfile

    from albertlm.errors import UserError

    try:   # surrogatepass: a text stream put in sys.stdin may hold lone surrogates; they come back unchanged
        spool = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="surrogatepass", newline="\n")
    except OSError as exc:
        raise UserError(f"{where}: cannot make a temporary file for its texts ({exc.strerror or exc}); "
                        "give --input a file") from None
    count = 0
    try:
        for count, (_, text) in enumerate(lines, 1):   # a read error stays the caller's ("cannot read it")
            try:
                spool.write(text + "\n")     # a text holds no "\n": the lines were split there
            except OSError as exc:   # a full temporary folder
                raise UserError(f"{where}: cannot keep its texts in a temporary file ({exc.strerror or exc}); "
                                "give --input a file") from None
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return count, _spool_texts(spool)


def _spool_texts(spool):
    with spool:
        for line in spool:
            yield line[:-1]


def make_parent(path, option: str) -> list:
    """Create `path`'s directory; a parent that is a file, or one that cannot be made, is one line naming it.
    Returns the directories it made, innermost first, for `remove_if_empty` after a failure."""
    from albertlm.errors import UserError

    made = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"{option} {path}: a part of {path.parent} is a file, not a directory") from None
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot create the directory {path.parent} "
                        f"({exc.strerror or exc})") from None
    return made


def remove_if_empty(directories) -> None:
    """Remove the directories `make_parent` made (innermost first) that a failed or stopped command left empty."""
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:   # something was written there after all (or it went): left as it is
            pass


def _count_lines(path) -> int:
    """The file's lines; a line that is not UTF-8 is a UserError naming the file and the line, and how to convert
    text in a legacy encoding (a Korean CP949 file said only "byte 0xb1 at column 1")."""
    from albertlm.data.corpus import NOT_UTF8_HINT

    count = 0
    with open(path, "rb") as handle:
        for count, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                where = _not_utf8(raw, count, exc)
                hint = "" if "byte order mark" in where else f"; {NOT_UTF8_HINT}"
                raise UserError(f"{path}:{count}: not UTF-8 text ({where}){hint}") from None
    return count


def _not_utf8(raw: bytes, number: int, exc: UnicodeDecodeError) -> str:
    """Where a line is not UTF-8; a first line starting with a UTF-16 byte order mark (what Windows PowerShell's
    `>` and Notepad's "Unicode" write) is said to be UTF-16, with what to do, not "byte 0xff at column 1"."""
    if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16, by its byte order mark: save it as UTF-8"
    return f"byte {raw[exc.start]:#04x} at column {exc.start + 1}"


def _line_text(line: str, number: int = 0) -> str:
    """A line without its end: "\\n" or "\\r\\n" (a "\\r" elsewhere stays in the text); the first line
    (`number` 1) without a UTF-8 byte order mark, which Windows editors write and fill-mask's JSON echoed as part
    of the text."""
    text = line.removesuffix("\n").removesuffix("\r")
    return text.removeprefix("\ufeff") if number == 1 else text


def _lines(path):
    """The file's texts, one per line as `_count_lines` counts them: split at "\\n" only. Text mode also split
    at a lone "\\r", so a file holding one gave more texts than rows (a ValueError traceback, no --out)."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        for number, line in enumerate(handle, 1):
            yield _line_text(line, number)


def stdin_lines(hint: str = ""):
    """(line number, text) of stdin's lines, split at "\\n", without their "\\n" or "\\r\\n" (and the first line
    without a byte order mark). A line that is not UTF-8 is a UserError naming it, followed by `hint` (what to do)
    when given: Python's stdin read such bytes as U+FFFD or lone surrogates under a C.UTF-8 locale (embedded or
    filled without a word) and raised a UnicodeDecodeError traceback under a strict one."""
    raw = getattr(sys.stdin, "buffer", None)
    if raw is None:   # a text stream put in sys.stdin (an application, a test)
        for number, line in enumerate(sys.stdin, 1):
            yield number, _line_text(line, number)
        return
    yield from binary_lines(raw, "stdin line ", hint)


def binary_lines(raw, where: str, hint: str = ""):
    """(line number, text) of the lines of a binary stream read once, as `stdin_lines` gives them; a line that is not
    UTF-8 is a UserError naming it (`where` + its number), followed by `hint` when given."""
    from albertlm.errors import UserError

    for number, line in enumerate(raw, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(f"{where}{number}: not UTF-8 text ({_not_utf8(line, number, exc)})"
                            + (f"; {hint}" if hint else "")) from None
        yield number, _line_text(text, number)
