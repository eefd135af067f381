"""Tokenizer throughput (MB/s of UTF-8 text) on the English text in ../shared/data/text, measured against the
references in the same run: sentencepiece's own batch encoder and transformers' AlbertTokenizer/BertTokenizer.

Each row also says on how many lines its ids equal albertlm's for that vocabulary (a speed ratio between
tokenizers that split differently compares different work): transformers 5's AlbertTokenizer splits as
albertlm's `split_added_tokens` mode does, not as the SentencePiece model and google's tokenizer (a lone `▁`,
a word after a hyphen), and sentencepiece's raw encoder skips ALBERT's lowercasing and preprocessing.

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


def best_rate(fn, megabytes: float, repeat: int) -> tuple[float, object]:
    """MB/s of `fn`'s fastest of `repeat` passes, and what its last pass returned."""
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return megabytes / best, out


def token_ids(output) -> list[list[int]]:
    """Each line's ids from a row's output: a list of id lists, or transformers' BatchEncoding."""
    rows = output["input_ids"] if hasattr(output, "keys") else output
    return [list(ids) for ids in rows]


def agreement(output, reference) -> float:
    """The fraction of lines whose ids are the reference's: whether two rows did the same work."""
    a, b = token_ids(output), token_ids(reference)
    return sum(x == y for x, y in zip(a, b)) / max(1, len(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])   # the first paragraph, whole
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per tokenizer, the best kept (>= 1)")
    args = parser.parse_args()
    if args.repeat < 1:   # no pass timed: every rate 0 and the ratios a division by zero
        parser.error(f"--repeat must be >= 1, got {args.repeat}")

    try:    # (the bench extra has it)
        from transformers import AlbertTokenizer, BertTokenizer
    except ImportError:
        parser.error("transformers is not installed: the comparison needs it (pip install -e '.[bench]')")

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
    measured = {name: best_rate(fn, megabytes, args.repeat) for name, fn in rows}
    rates = {name: rate for name, (rate, _) in measured.items()}
    ours_ids = {"SentencePiece": measured["albertlm SentencePiece encode_batch"][1],
                "WordPiece": measured["albertlm WordPiece encode_batch (zh vocab)"][1]}
    vocab = {name: "WordPiece" if "WordPiece" in name or "Bert" in name else "SentencePiece" for name in measured}
    same = {name: agreement(out, ours_ids[vocab[name]]) for name, (_, out) in measured.items()}
    reference = rates["sentencepiece encode(list) (reference)"]
    print(f"{len(lines)} lines, {megabytes:.1f} MB, {ours.num_threads} threads, best of {args.repeat}")
    print(f"| {'tokenizer':44} | MB/s | vs sentencepiece | same ids as albertlm's |")
    print(f"|{'-' * 46}|-----:|-----------------:|-----------------------:|")
    for name, rate in rates.items():
        print(f"| {name:44} | {rate:4.1f} | {rate / reference:15.2f}x | {same[name]:21.1%} |")
    print("(same ids: the lines a row encodes to the ids of albertlm's encode_batch of that vocabulary; "
          "sentencepiece's raw encoder skips the lowercasing and the text preprocessing ALBERT's tokenizer does, so it "
          "does less work)")
    hf = "transformers AlbertTokenizer (reference)"
    compat_name = "albertlm SentencePiece, split_added_tokens"
    print(f"albertlm SentencePiece vs transformers AlbertTokenizer: "
          f"{rates['albertlm SentencePiece encode_batch'] / rates[hf]:.1f}x (google's splits, not transformers'); "
          f"with split_added_tokens (transformers 5's splits): {rates[compat_name] / rates[hf]:.1f}x, the same ids on "
          f"{agreement(measured[compat_name][1], measured[hf][1]):.1%} of the lines")


if __name__ == "__main__":
    main()
