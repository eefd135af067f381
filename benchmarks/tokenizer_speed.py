"""Tokenizer throughput (MB/s of UTF-8 text) on the English text in ../shared/data/text, measured against the
references in the same run: sentencepiece's own batch encoder and transformers' AlbertTokenizer/BertTokenizer.

    python benchmarks/tokenizer_speed.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def read_lines() -> list[str]:
    files = sorted((DATA / "text" / "gutenberg").glob("*.txt")) + [DATA / "text" / "wikitext-2-raw" / "wiki.test.raw"]
    return [line for f in files for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]


def best_rate(fn, megabytes: float, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return megabytes / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])   # the first paragraph, whole
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per tokenizer, the best kept (>= 1)")
    args = parser.parse_args()
    if args.repeat < 1:   # no pass timed: every rate 0 and the ratios a division by zero
        parser.error(f"--repeat must be >= 1, got {args.repeat}")

    from transformers import AlbertTokenizer, BertTokenizer

    from albertlm.tokenization import load_tokenizer

    lines = read_lines()
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(DATA / "spm" / "albert-base-v2_spiece.model", Path(tmp) / "spiece.model")
        shutil.copy(DATA / "vocab" / "albert_zh_vocab.txt", Path(tmp) / "vocab.txt")
        ours = load_tokenizer(Path(tmp) / "spiece.model")
        compat = load_tokenizer(Path(tmp) / "spiece.model", split_added_tokens=True)
        wordpiece = load_tokenizer(Path(tmp) / "vocab.txt")
        hf_albert = AlbertTokenizer.from_pretrained(tmp)
        hf_bert = BertTokenizer.from_pretrained(tmp)
    rows = [
        ("sentencepiece encode(list) (reference)", lambda: ours.sp.encode(lines, num_threads=ours.num_threads)),
        ("albertlm SentencePiece encode_batch", lambda: ours.encode_batch(lines)),
        ("albertlm SentencePiece, split_added_tokens", lambda: compat.encode_batch(lines)),
        ("transformers AlbertTokenizer (reference)", lambda: hf_albert(lines, add_special_tokens=False)),
        ("albertlm WordPiece encode_batch (zh vocab)", lambda: wordpiece.encode_batch(lines)),
        ("transformers BertTokenizer (reference)", lambda: hf_bert(lines, add_special_tokens=False)),
    ]
    rates = {name: best_rate(fn, megabytes, args.repeat) for name, fn in rows}
    reference = rates["sentencepiece encode(list) (reference)"]
    print(f"{len(lines)} lines, {megabytes:.1f} MB, {ours.num_threads} threads, best of {args.repeat}")
    print(f"| {'tokenizer':44} | MB/s | vs sentencepiece |")
    print(f"|{'-' * 46}|-----:|-----------------:|")
    for name, rate in rates.items():
        print(f"| {name:44} | {rate:4.1f} | {rate / reference:15.2f}x |")
    print(f"albertlm SentencePiece vs transformers AlbertTokenizer: "
          f"{rates['albertlm SentencePiece encode_batch'] / rates['transformers AlbertTokenizer (reference)']:.1f}x")


if __name__ == "__main__":
    main()
