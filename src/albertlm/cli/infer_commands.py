"""`albertlm fill-mask` and `albertlm embed`: thin wrappers over `albertlm.tasks.inference`.

    albertlm fill-mask runs/base "The capital of France is [MASK]."
    cat lines.txt | albertlm fill-mask runs/base --json        # one JSON object per input line
    albertlm embed runs/base --input sentences.txt --out emb.npy --pooling mean
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    parser.add_argument("model", metavar="MODEL", help="model directory (ours or transformers') or a run directory "
                        "(a pretraining run: its newest checkpoint; a fine-tuning run: its best/)")
    if command == "fill-mask":
        parser.add_argument("text", nargs="*", metavar="TEXT",
                            help="text with [MASK] (several allowed); none or '-': one text per line of stdin")
        parser.add_argument("--top-k", type=int, default=5, metavar="K", help="predictions per [MASK] (default 5)")
        parser.add_argument("--json", action="store_true", help="one JSON object per text (JSON lines)")
    else:
        parser.add_argument("--input", required=True, metavar="FILE", help="one text per line ('-': stdin)")
        parser.add_argument("--out", required=True, metavar="X.npy",
                            help="output .npy file: float32 array (N, H), input order (another suffix is refused)")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
        parser.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                            help="mean of the last hidden states over the tokens, or the [CLS] state")
        parser.add_argument("--max-length", type=int, default=None, metavar="N",
                            help="truncate longer texts (default: the model's positions)")
        parser.add_argument("--normalize", action="store_true", help="L2-normalise each embedding")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per forward pass (default 32)")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer (default: beside the model, or its run's)")
    parser.add_argument("--device", default="auto", metavar="{auto,cpu,cuda,cuda:N}",
                        help="auto: cuda if available; cuda:N picks one GPU of several")


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.errors import UserError
    from albertlm.tasks.inference import pick_device

    # before the model loads (fill-mask's stdin loop would otherwise never fill a batch)
    pick_device(args.device)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    if command == "fill-mask" and args.top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {args.top_k}")
    if command == "embed" and args.max_length is not None and args.max_length < 3:
        raise UserError(f"--max-length must be >= 3 ([CLS], at least one token of the text, [SEP]), "
                        f"got {args.max_length}")
    if command == "embed":
        check_npy_name(args.out)
    return _fill_mask(args) if command == "fill-mask" else _embed(args)


def check_npy_name(out: str) -> None:
    """`embed` writes one NumPy .npy array whatever --out is called: `emb.npz`, `emb.parquet` or `emb.jsonl` got
    .npy bytes under that name without a word (a reader of the format named then fails on the file); `emb.npy/`
    (a folder, by its '/') wrote the file emb.npy."""
    from pathlib import Path

    from albertlm.errors import UserError

    suffix = Path(out).suffix
    if suffix.lower() == ".npy" and out.rstrip(".").endswith(("/", os.sep)):   # Path drops the '/' of `emb.npy/`
        raise UserError(f"--out {out}: embed writes one .npy file, and the '/' after its name names a folder; "
                        f"give {Path(out)}")
    if suffix.lower() != ".npy":
        what = f", not a {suffix} file" if suffix else ""
        raise UserError(f"--out {out}: embed writes a NumPy .npy array (float32, texts x hidden size){what}; "
                        f"name it {Path(out).stem or 'emb'}.npy (np.load reads it)")


def _fill_mask(args) -> int:
    from albertlm.errors import stderr_is_terminal
    from albertlm.tasks.inference import FillMask

    fill = FillMask.load(args.model, args.tokenizer, args.device)
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
    from tqdm import tqdm

    from albertlm.errors import UserError
    from albertlm.tasks.inference import embed_texts, load_encoder, load_tokenizer_for

    model, model_dir, device = load_encoder(args.model, args.device)
    tokenizer = load_tokenizer_for(model_dir, args.tokenizer, model.config.vocab_size)
    if args.input == "-":
        count, source = spooled(stdin_lines(), "stdin")
    else:
        path = Path(args.input)
        if path.is_dir():
            raise UserError(f"--input {path} is a directory; give a text file (one text per line)")
        if not path.exists():
            raise UserError(f"--input {path}: no such file")
        if path.is_file():
            count = _count_lines(path)       # and the whole file is UTF-8, before any output is made
            source = _lines(path)
        else:   # a pipe (bash's `--input <(cmd)`: /dev/fd/63), /dev/null: read once, as stdin is (was "no such file")
            try:
                with open(path, "rb") as handle:
                    count, source = spooled(binary_lines(handle, f"--input {path} line "), f"--input {path}")
            except OSError as exc:
                raise UserError(f"--input {path}: cannot read it ({exc.strerror or exc})") from None
    out = Path(args.out)
    if out.is_dir():
        raise UserError(f"--out {out} is a directory")
    if out.exists() and not args.overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it, or another --out")
    made = make_parent(out, "--out")
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")   # renamed into place when complete
    stats: dict = {}
    try:
        try:
            array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                              shape=(count, model.config.hidden_size))
        except OSError as exc:
            raise UserError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
        with tqdm(total=count, unit="text", desc="albertlm embed", disable=args.no_progress or None,
                  leave=False) as bar:
            embed_texts(model, tokenizer, source, pooling=args.pooling, batch_size=args.batch_size,
                        max_length=args.max_length, device=device, normalize=args.normalize, out=array,
                        progress=bar.update, stats=stats)
        array.flush()
        del array
        os.replace(tmp, out)
    except BaseException:   # nothing of a failed or stopped embedding stays: the folders made for it neither
        tmp.unlink(missing_ok=True)
        remove_if_empty(made)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    print(f"wrote {count:,} x {model.config.hidden_size} {args.pooling}-pooled embeddings to {out} "
          f"({model_dir}, {device})", file=sys.stderr)
    if stats.get("truncated"):
        limit = min(args.max_length or model.config.max_position_embeddings, model.config.max_position_embeddings)
        cut = stats["truncated"]
        print(f"{cut:,} {'text' if cut == 1 else 'texts'} longer than {limit} tokens (the longest: "
              f"{stats['longest']:,}) {'was' if cut == 1 else 'were'} cut to {limit}, keeping [SEP]: "
              f"{'its embedding covers' if cut == 1 else 'their embeddings cover'} only the start of the text",
              file=sys.stderr)
    return 0


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
    """The file's lines; a line that is not UTF-8 is a UserError naming the file and the line."""
    from albertlm.errors import UserError

    count = 0
    with open(path, "rb") as handle:
        for count, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UserError(f"{path}:{count}: not UTF-8 text ({_not_utf8(raw, count, exc)})") from None
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
