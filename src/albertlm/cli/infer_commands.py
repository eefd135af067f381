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
        parser.add_argument("--top-k", type=int, default=5, help="predictions per [MASK]")
        parser.add_argument("--json", action="store_true", help="one JSON object per text (JSON lines)")
    else:
        parser.add_argument("--input", required=True, metavar="FILE", help="one text per line ('-': stdin)")
        parser.add_argument("--out", required=True, metavar="X.npy", help="output: float32 array (N, H), input order")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
        parser.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                            help="mean of the last hidden states over the tokens, or the [CLS] state")
        parser.add_argument("--max-length", type=int, default=None, help="truncate longer texts (default: the "
                            "model's positions)")
        parser.add_argument("--normalize", action="store_true", help="L2-normalise each embedding")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass")
    parser.add_argument("--tokenizer", metavar="PATH", help="tokenizer (default: beside the model, or its run's)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda if available")


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.errors import UserError

    # before the model loads (fill-mask's stdin loop would otherwise never fill a batch)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    if command == "fill-mask" and args.top_k < 1:
        raise UserError(f"--top-k must be >= 1, got {args.top_k}")
    if command == "embed" and args.max_length is not None and args.max_length < 3:
        raise UserError(f"--max-length must be >= 3 ([CLS], at least one token of the text, [SEP]), "
                        f"got {args.max_length}")
    return _fill_mask(args) if command == "fill-mask" else _embed(args)


def _fill_mask(args) -> int:
    from albertlm.tasks.inference import FillMask

    fill = FillMask.load(args.model, args.tokenizer, args.device)
    if args.text and args.text != ["-"]:
        _print_fill(args.text, fill(args.text, args.top_k, args.batch_size), args.json)
        return 0
    batch: list[str] = []
    for line in sys.stdin:  # batched, printed as each batch is done
        if line.strip():
            batch.append(line.rstrip("\n"))
        if len(batch) == args.batch_size:
            _print_fill(batch, fill(batch, args.top_k, args.batch_size), args.json)
            batch = []
    if batch:
        _print_fill(batch, fill(batch, args.top_k, args.batch_size), args.json)
    return 0


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
        texts = [line.rstrip("\n") for line in sys.stdin]
        count, source = len(texts), iter(texts)
    else:
        path = Path(args.input)
        if not path.is_file():
            raise UserError(f"--input {path}: no such file")
        count = _count_lines(path)       # and the whole file is UTF-8, before any output is made
        source = _lines(path)
    out = Path(args.out)
    if out.is_dir():
        raise UserError(f"--out {out} is a directory")
    if out.exists() and not args.overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it, or another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")   # renamed into place when complete
    try:
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                          shape=(count, model.config.hidden_size))
        with tqdm(total=count, unit="text", desc="albertlm embed", disable=args.no_progress or None,
                  leave=False) as bar:
            embed_texts(model, tokenizer, source, pooling=args.pooling, batch_size=args.batch_size,
                        max_length=args.max_length, device=device, normalize=args.normalize, out=array,
                        progress=bar.update)
        array.flush()
        del array
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"wrote {count:,} x {model.config.hidden_size} {args.pooling}-pooled embeddings to {out} "
          f"({model_dir}, {device})", file=sys.stderr)
    return 0


def _count_lines(path) -> int:
    """The file's lines; a line that is not UTF-8 is a UserError naming the file and the line."""
    from albertlm.errors import UserError

    count = 0
    with open(path, "rb") as handle:
        for count, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UserError(f"{path}:{count}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                                f"{exc.start + 1})") from None
    return count


def _lines(path):
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield line.rstrip("\n")
