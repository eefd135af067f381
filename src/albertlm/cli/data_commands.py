"""`albertlm data build|inspect|stats`: build pretraining shards, look at instances, summarise a build."""
from __future__ import annotations

import argparse
import json
import sys

def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{build,inspect,stats}")
    _add_build(sub.add_parser("build", help="build shards of masked instances from text files",
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter))
    inspect = sub.add_parser("inspect", help="print decoded instances with masks and labels")
    inspect.add_argument("directory")
    inspect.add_argument("-n", "--num", type=int, default=5, help="how many instances")
    inspect.add_argument("--start", type=int, default=0, help="first instance index")
    inspect.add_argument("--tokenizer", help="tokenizer to decode with (default: the one in meta.json)")
    stats = sub.add_parser("stats", help="counts, length histogram, label balance, mask rate, masked runs")
    stats.add_argument("directory")
    stats.add_argument("--json", action="store_true", help="print JSON")


def _add_build(p: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from albertlm.data.build import BuildConfig  # numpy only; the defaults live in one place

    d = {f.name: f.default for f in fields(BuildConfig)}
    p.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_DIR", help="text files or directories")
    p.add_argument("--tokenizer", required=True, help="SentencePiece .model, vocab.txt, or a directory")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--max-seq-length", type=int, default=d["max_seq_length"], help="tokens per instance (T)")
    p.add_argument("--sentence-task", choices=("sop", "nsp", "none"), default=d["sentence_task"],
                   help="sentence-order, next-sentence, or MLM only")
    p.add_argument("--dupe-factor", type=int, default=d["dupe_factor"], help="copies, each with its own mask")
    p.add_argument("--short-seq-prob", type=float, default=d["short_seq_prob"], help="p(short target length)")
    p.add_argument("--masked-lm-prob", type=float, default=d["masked_lm_prob"], help="share of tokens to predict")
    p.add_argument("--max-predictions-per-seq", type=int, default=None,
                   help="cap on masked tokens; None means max(20, round(T * masked_lm_prob))")
    p.add_argument("--max-ngram", type=int, default=d["max_ngram"], help="longest masked n-gram (words)")
    p.add_argument("--masking", choices=("ngram", "token"), default=d["masking"],
                   help="whole-word n-grams (ALBERT) or single tokens (BERT)")
    p.add_argument("--workers", type=int, default=d["workers"], help="worker processes (output is identical)")
    p.add_argument("--seed", type=int, default=d["seed"], help="same seed, same bytes")
    p.add_argument("--num-shards", type=int, default=d["num_shards"], help="split the build into K parts")
    p.add_argument("--shard-index", type=int, default=d["shard_index"], help="which part this run builds")
    p.add_argument("--format", choices=("auto", "lines", "raw", "jsonl", "wikiextractor"), default=d["format"],
                   help="input format (see docs/data.md)")
    p.add_argument("--text-field", default=d["text_field"], help="JSONL field holding the text")
    p.add_argument("--chunk-chars", type=int, default=d["chunk_chars"], help="characters per work unit")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier build in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace, command: str) -> int:
    return {"build": _build, "inspect": _inspect, "stats": _stats}[args.action](args)


def _build(args) -> int:
    from albertlm.data.build import BuildConfig, build

    cfg = BuildConfig(inputs=args.input, tokenizer=args.tokenizer, out=args.out, max_seq_length=args.max_seq_length,
                      sentence_task=args.sentence_task, dupe_factor=args.dupe_factor,
                      short_seq_prob=args.short_seq_prob, masked_lm_prob=args.masked_lm_prob,
                      max_predictions_per_seq=args.max_predictions_per_seq, max_ngram=args.max_ngram,
                      masking=args.masking, workers=args.workers, seed=args.seed, num_shards=args.num_shards,
                      shard_index=args.shard_index, format=args.format, text_field=args.text_field,
                      chunk_chars=args.chunk_chars, overwrite=args.overwrite, progress=not args.no_progress)
    summary = build(cfg)
    print(format_summary(summary), file=sys.stderr)
    return 0


def format_summary(summary) -> str:
    corpus, inst, tokens = summary.counts["corpus"], summary.counts["instances"], summary.counts["tokens"]
    skipped = {k: corpus[k] for k in ("empty_files", "binary_files", "invalid_utf8_lines", "bad_json_lines",
                                      "documents_split") if corpus[k]}
    skipped.update({k: inst[k] for k in ("empty_documents", "dropped_chunks", "long_sentences_cut",
                                         "nsp_same_document") if inst[k]})
    labels = ", ".join(f"{k}: {v:,}" for k, v in inst["labels"].items())
    lines = [
        f"wrote {summary.num_instances:,} instances in {summary.num_shards} shard(s) to {summary.out} "
        f"({summary.seconds:.1f} s, {summary.instances_per_second:,.0f} instances/s)",
        f"read {corpus['files']} file(s), {corpus['documents']:,} documents, {corpus['sentences']:,} sentences "
        f"({', '.join(f'{k}: {v}' for k, v in corpus['formats'].items()) or 'no text'})",
        f"masked {tokens['masked'] / max(tokens['tokens'], 1):.2%} of {tokens['tokens']:,} tokens; labels {labels}; "
        f"{inst['short_targets']:,} short targets, {inst['one_sentence_chunks']:,} one-sentence chunks cut in two",
    ]
    if skipped:
        lines.append("skipped or changed: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in skipped.items()))
    return "\n".join(lines)


def _inspect(args) -> int:
    from albertlm.data.loader import PretrainingDataset
    from albertlm.data.stats import format_instance
    from albertlm.errors import UserError
    from albertlm.tokenization import load_tokenizer

    ds = PretrainingDataset(args.directory)
    tok = load_tokenizer(args.tokenizer or ds.meta["tokenizer"]["path"])
    if not 0 <= args.start < len(ds):
        raise UserError(f"--start {args.start} is outside the {len(ds)} instances")
    for index in range(args.start, min(len(ds), args.start + args.num)):
        print(format_instance(index, ds.record(index), ds.meta, tok.id_to_token))
    return 0


def _stats(args) -> int:
    from albertlm.data.stats import compute_stats, format_stats

    meta, stats = compute_stats(args.directory)
    summary = stats.as_dict(meta["max_seq_length"])
    if args.json:
        summary["build_counts"] = meta["counts"]
        print(json.dumps(summary, indent=2))
    else:
        print(format_stats(summary, meta))
    return 0
