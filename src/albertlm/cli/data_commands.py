"""`albertlm data build|inspect|stats`: build pretraining shards, look at instances, summarise a build."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from albertlm.config.overrides import Options, add_options, read_options
from albertlm.data.build import BuildConfig  # numpy only

# --input, --tokenizer and --out are required, in the usage line too (`--input PATH [PATH ...] --tokenizer PATH --out
# DIR`, the words `config.overrides.METAVARS` gives those fields, as `tokenizer train` names the same options)
BUILD = Options(BuildConfig, plain={"--input": "inputs"}, negations={"--no-progress": "progress"},
                title="build options", required=True)


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{build,inspect,stats}")
    build = sub.add_parser("build", help="build shards of masked instances from text files",
                           description="build shards of masked instances from text files (docs/data.md)")
    add_options(build, BUILD)
    what = "print decoded instances with masks and labels"
    inspect = sub.add_parser("inspect", help=what, description=f"{what} (docs/data.md)")
    inspect.add_argument("directory", metavar="DIR", help="a directory written by `albertlm data build`")
    inspect.add_argument("-n", "--num", type=int, default=5, metavar="N", help="how many instances (default 5)")
    inspect.add_argument("--start", type=int, default=0, metavar="N", help="first instance index (default 0)")
    inspect.add_argument("--tokenizer", metavar="PATH",
                         help="tokenizer to decode with (default: the one in meta.json)")
    what = "counts, length histogram, label balance, mask rate, masked runs"
    stats = sub.add_parser("stats", help=what, description=f"{what} of a build (docs/data.md)")
    stats.add_argument("directory", metavar="DIR", help="a directory written by `albertlm data build`")
    stats.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace, command: str) -> int:
    return {"build": _build, "inspect": _inspect, "stats": _stats}[args.action](args)


def _build(args) -> int:
    from albertlm.data.build import build, unknown_token_report
    from albertlm.errors import say_warning

    cfg = read_options(args, BUILD)
    summary = build(cfg)
    print(format_summary(summary, cfg.sentence_task, cfg.dupe_factor), file=sys.stderr)
    _, warning = unknown_token_report(summary.counts["instances"])
    if warning:
        say_warning(warning)
    return 0


def format_summary(summary, sentence_task: str | None = None, dupe_factor: int = 1) -> str:
    """The build's closing lines; with the build's `sentence_task` and `dupe_factor`, the share of the text's tokens
    the instances hold (`data.stats.text_kept`, as `data stats` says it: exact for sop and none, not said for nsp)."""
    corpus, inst, tokens = summary.counts["corpus"], summary.counts["instances"], summary.counts["tokens"]
    skipped = {k: corpus[k] for k in ("empty_files", "binary_files", "transcoded_files", "invalid_utf8_lines",
                                      "nul_lines", "bad_json_lines",
                                      "bad_rows", "empty_records", "corrupt_files", "documents_split",
                                      "long_lines_cut", "unclosed_documents", "lines_outside_documents")
               if corpus.get(k)}
    skipped.update({k: inst[k] for k in ("empty_documents", "dropped_chunks", "long_sentences_cut",
                                         "nsp_same_document") if inst[k]})
    labels = ", ".join(f"{k}: {v:,}" for k, v in inst["labels"].items()) or "none"
    lines = [
        f"wrote {summary.num_instances:,} instances in {summary.num_shards} shard(s) to {summary.out} "
        f"({summary.seconds:.1f} s, {summary.instances_per_second:,.0f} instances/s)",
        f"read {corpus['files']} file(s), {corpus['documents']:,} documents, {corpus['sentences']:,} sentences "
        f"({', '.join(f'{k}: {v}' for k, v in corpus['formats'].items()) or 'no text'})",
        f"masked {tokens['masked'] / max(tokens['tokens'], 1):.2%} of {tokens['tokens']:,} tokens; labels {labels}; "
        f"{inst['short_targets']:,} short targets, {inst['one_sentence_chunks']:,} one-sentence chunks cut in two",
    ]
    if not summary.num_instances:   # only a part can build none (a single build of nothing is an error)
        lines[2] = ("no instances: this part owns none of the corpus's chunks (fewer --chunk-chars chunks than "
                    "--num-shards); the set is complete once every part is built")
    from albertlm.data.stats import text_kept

    # the text's tokens and the instances' were both counted here and never compared: truncation to each instance's
    # target length cuts a share of the text (docs/data.md, "How much of the text the instances hold"), said as `data
    # stats` says it
    kept = text_kept({"num_tokens": tokens["tokens"], "num_instances": summary.num_instances},
                     {"counts": summary.counts, "sentence_task": sentence_task, "dupe_factor": dupe_factor})
    if kept is not None:
        lines.append(f"text kept: {kept}")
    from albertlm.data.build import unknown_token_report

    unknown, _ = unknown_token_report(inst)
    if unknown:
        lines.append(unknown)
    if skipped:
        lines.append("skipped or changed: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in skipped.items()))
    lines += [f"  first of {k.replace('_', ' ')}: {v}" for k, v in corpus.get("examples", {}).items()]
    return "\n".join(lines)


def _inspect(args) -> int:
    from albertlm.data.loader import PretrainingDataset
    from albertlm.data.stats import format_instance
    from albertlm.errors import UserError
    from albertlm.tokenization import load_tokenizer

    if args.num < 1:
        raise UserError(f"-n/--num must be >= 1, got {args.num}")
    ds = PretrainingDataset(args.directory)
    tok_path = args.tokenizer or ds.meta["tokenizer"]["path"]
    if args.tokenizer is None and not Path(tok_path).exists():
        raise UserError(f"the tokenizer {args.directory} was built with, {tok_path}, is not there any more; "
                        "pass it (or a copy) with --tokenizer PATH")
    tok = load_tokenizer(tok_path)
    built = ds.meta["tokenizer"]
    if built.get("vocab_sha256"):  # decoding with another vocabulary prints plausible-looking nonsense
        from albertlm.data.build import vocab_fingerprint

        if vocab_fingerprint(tok) != built["vocab_sha256"]:
            raise UserError(f"tokenizer {tok_path} has another vocabulary (V={tok.vocab_size}) than the one "
                            f"{args.directory} was built with (V={built.get('vocab_size')}, {built.get('path')}); "
                            "pass that one with --tokenizer")
    if not 0 <= args.start < len(ds):
        raise UserError(f"--start {args.start} is outside the {len(ds)} instances")
    for index in range(args.start, min(len(ds), args.start + args.num)):
        record = ds.record(index)
        ds.check_records(record, [index])   # a damaged shard: one line, not an IndexError in the tokenizer
        print(format_instance(index, record, ds.meta, tok.id_to_token))
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
