"""Pretraining-data build speed and memory: `albertlm data build` on the English text of ../shared/data/text.

First, the reading speed of each input format (`albertlm.data.corpus.read_documents`, in-process, best of
2): the plain files, their .gz/.bz2/.xz/.zst copies, and the same documents as JSONL, Parquet and an Arrow
stream (as `datasets.save_to_disk` writes), in MB of text per second and relative to the plain files.

Runs the real CLI in a subprocess (dupe factor 5, albert-base-v2 SentencePiece model) at max length 128 and
512 with 1 and 2 worker processes, then on a 10x corpus (every file listed ten times), and prints
instances/s (wall clock, interpreter start included), peak RSS of the whole process tree (sampled every
20 ms) and the ratio to google-research's builder. The reference numbers are the issue's measurements of
google's `create_pretraining_data.py` on this kind of machine (390 instances/s at 128, 80 at 512, one
process); it needs TensorFlow, which this environment does not have, so it is not re-run here.

    python benchmarks/data_speed.py [--dupe-factor 5] [--skip-10x] [--formats-only]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TOKENIZER = DATA / "spm" / "albert-base-v2_spiece.model"
ENGLISH = [*sorted((DATA / "text" / "gutenberg").glob("*.txt")), DATA / "text" / "wikitext-2-raw" / "wiki.test.raw",
           DATA / "text" / "wiki_text" / "wiki_00", DATA / "text" / "sample_text.txt"]
GOOGLE = {128: 390.0, 512: 80.0}  # instances/s, one process (from the issue)
TARGET = {128: 4000.0, 512: 1000.0}


def tree_rss(process: "psutil.Process") -> int:
    import psutil

    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def run_build(inputs: list[Path], out: Path, max_seq_length: int, workers: int, dupe_factor: int) -> dict:
    cmd = [sys.executable, "-m", "albertlm", "data", "build", "--input", *map(str, inputs), "--tokenizer",
           str(TOKENIZER), "--out", str(out), "--max-seq-length", str(max_seq_length), "--workers", str(workers),
           "--dupe-factor", str(dupe_factor), "--overwrite", "--no-progress"]
    import psutil   # here, not at the top: `--help` and argument errors need no psutil (the bench extra has it)

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watched, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, tree_rss(watched))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI and its reaped workers
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}):\n{err}")
    instances = json.loads((out / "meta.json").read_text())["num_instances"]
    return {"instances": instances, "seconds": seconds, "per_second": instances / seconds,
            "per_cpu_second": instances / cpu, "peak_rss_mb": peak / 2**20}


def write_formats(tmp: Path) -> dict[str, list[Path]]:
    """The English corpus in every input format, holding the same text."""
    import bz2
    import gzip
    import lzma

    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    from albertlm.data.corpus import read_documents

    compress = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
                "zst": lambda data: zstandard.ZstdCompressor(level=3).compress(data)}
    forms = {"plain": list(ENGLISH)}
    for name, fn in compress.items():
        forms[name] = []
        for k, path in enumerate(ENGLISH):
            target = tmp / name / f"{k:02d}-{path.name}.{name}"
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(fn(path.read_bytes()))
            forms[name].append(target)
    texts = ["\n".join(doc.sentences) for doc in read_documents(ENGLISH)]
    (tmp / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    table = pa.table({"text": texts})
    pq.write_table(table, tmp / "docs.parquet", row_group_size=256)
    with pa.OSFile(str(tmp / "docs.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=1000):  # datasets' default writer batch size
            writer.write_batch(batch)
    forms.update({"jsonl": [tmp / "docs.jsonl"], "parquet": [tmp / "docs.parquet"], "arrow": [tmp / "docs.arrow"]})
    return forms


def format_speeds(tmp: Path) -> None:
    from albertlm.data.corpus import CorpusCounts, read_documents

    forms = write_formats(tmp)
    rows = []
    for name, files in forms.items():
        best, counts = float("inf"), None
        for _ in range(2):
            counts = CorpusCounts()
            started = time.perf_counter()
            for _doc in read_documents(files, counts=counts):
                pass
            best = min(best, time.perf_counter() - started)
        stored = sum(p.stat().st_size for p in files) / 1e6
        rows.append((name, stored, counts.chars / 1e6, counts.documents, best))
    plain = rows[0][4]
    print("| input | stored MB | text MB | documents | seconds | text MB/s | time vs plain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, stored, text, docs, seconds in rows:
        print(f"| {name} | {stored:.2f} | {text:.2f} | {docs:,} | {seconds:.2f} | {text / seconds:.1f} | "
              f"{seconds / plain:.2f}x |")
    print("(plain and compressed: the original files, 1 raw document each; JSONL/Parquet/Arrow: those documents "
          "as rows, re-split into sentences like raw text)\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dupe-factor", type=int, default=5,
                        help="`albertlm data build --dupe-factor` of every build (default 5)")
    parser.add_argument("--skip-10x", action="store_true",
                        help="leave out the build of the 10x corpus (and the peak-RSS ratio it gives)")
    parser.add_argument("--formats-only", action="store_true", help="only the reading speed of each input format")
    args = parser.parse_args()
    if args.dupe_factor < 1:    # refused by the first build, after the minutes of the format speeds
        parser.error(f"--dupe-factor must be >= 1, got {args.dupe_factor}")
    print(f"reading speed per input format; load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        format_speeds(Path(tmp))
    if args.formats_only:
        return
    size_mb = sum(p.stat().st_size for p in ENGLISH) / 1e6
    print(f"corpus: {len(ENGLISH)} English files, {size_mb:.1f} MB; dupe factor {args.dupe_factor}; "
          f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.1f}\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for length in (128, 512):
            for workers in (1, 2):
                r = run_build(ENGLISH, Path(tmp) / f"o{length}-{workers}", length, workers, args.dupe_factor)
                rows.append((f"{size_mb:.1f} MB", length, workers, r))
                print(f"  {length} / {workers} worker(s): {r['per_second']:,.0f} instances/s", flush=True)
        if not args.skip_10x:
            big = ENGLISH * 10
            r = run_build(big, Path(tmp) / "o10x", 128, 2, args.dupe_factor)
            rows.append((f"{10 * size_mb:.0f} MB (10x)", 128, 2, r))
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (instances/s is wall clock and suffers from other load; "
          "instances per CPU-second does not)")
    print("\n| corpus | max length | workers | instances | seconds | instances/s | per CPU-s | vs google | target "
          "| peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for corpus, length, workers, r in rows:
        print(f"| {corpus} | {length} | {workers} | {r['instances']:,} | {r['seconds']:.1f} | {r['per_second']:,.0f} | "
              f"{r['per_cpu_second']:,.0f} | {r['per_second'] / GOOGLE[length]:.1f}x | {TARGET[length]:,.0f} | {r['peak_rss_mb']:.0f} |")
    if not args.skip_10x:
        base = next(r for c, l, w, r in rows if l == 128 and w == 2 and "10x" not in c)
        ratio = rows[-1][3]["peak_rss_mb"] / base["peak_rss_mb"]
        print(f"\npeak RSS, 10x corpus / 1x corpus (128, 2 workers): {ratio:.2f} (target <= 1.10)")


if __name__ == "__main__":
    main()
