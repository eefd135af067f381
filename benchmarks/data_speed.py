"""Pretraining-data speed: `albertlm data build` (memory too) and the training loader (`--loader`), on English text.

The English text is that of ../shared/data/text. First, the reading speed of each input format
(`albertlm.data.corpus.read_documents`, in-process, best of 2): the plain files, their .gz/.bz2/.xz/.zst copies,
and the same documents as JSONL, Parquet and an Arrow stream (as `datasets.save_to_disk` writes), in MB of text per
second and relative to the plain files.

Runs the real CLI in a subprocess (dupe factor 5, albert-base-v2 SentencePiece model) at max length 128 and
512 with 1 and 2 worker processes, then on a 10x corpus (every file listed ten times), and prints
instances/s (wall clock, interpreter start included), peak RSS of the whole process tree (sampled every
20 ms) and the ratio to google-research's builder. The reference numbers are the issue's measurements of
google's `create_pretraining_data.py` on this kind of machine (390 instances/s at 128, 80 at 512, one
process); it needs TensorFlow, which this environment does not have, so it is not re-run here. The builds
need psutil (the bench extra, `pip install -e '.[bench]'`).

`--loader [DIR]` times the training loader instead, on a built directory (DIR, or one built here from the same
English text: max length 128, the dupe factor of `--dupe-factor`, 1,024 records a shard): the training sampler's
random batches (`training.loop.shuffled_batches`, `--batch-sizes`) read by `PretrainingDataset.__getitems__` +
`collate` (static masks, and dynamic masking where the build has `word_starts.npy`), against references measured
in the same run on the same batches: the same loader reading its records through numpy memory maps (as it did
before it read them with positional reads), and the records alone, by positional reads (`ShardMaps.read`) and by a
plain numpy memmap gather. Each variant's output is checked against the others' before anything is timed; the
variants take each batch in turn (the order rotating), after every batch's records were read once untimed (so all
read from the page cache: the CPU cost of reading, not the disk's speed), and the first 2 batches are not timed.
Prints records/s (wall clock; the batch size over the median batch's seconds) and CPU microseconds per record
(this process's CPU time, median batch; steadier than the wall clock on a shared machine), each variant's CPU
time per record as a multiple of the memmap gather's, and positional reads' CPU time over memory maps', for
the whole loader and for the records alone (above 1: positional reads cost more).

    python benchmarks/data_speed.py [--dupe-factor 5] [--skip-10x] [--formats-only]
    python benchmarks/data_speed.py --loader [DIR] [--batch-sizes 32,128] [--loader-batches 200]
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
LOADER_WARMUP = 2       # batches each loader variant reads untimed first (files opened, maps made)
REFERENCE = "records: numpy memmap gather (reference)"


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


# -- --loader: the training loader's read + collate against memory-mapped references ----------------------------------
def build_loader_data(tmp: Path, dupe_factor: int) -> Path:
    """A build of the English text to time the loader on: max length 128, 1,024 records a shard (random batches
    then read from many shards, as in a large build's), in-process."""
    from albertlm.data.build import BuildConfig, build

    out = tmp / "loader128"
    build(BuildConfig(inputs=[str(p) for p in ENGLISH], tokenizer=str(TOKENIZER), out=str(out), max_seq_length=128,
                      dupe_factor=dupe_factor, records_per_shard=1024, progress=False))
    return out


def memmap_gather(maps: list, ends: "np.ndarray", indices: "np.ndarray") -> "np.ndarray":
    """The records at `indices` copied out of numpy memory maps of the shards (`maps`; `ends`: cumulative record
    counts), grouped by shard as `PretrainingDataset.records` groups its positional reads."""
    import numpy as np

    shards = np.searchsorted(ends, indices, side="right")
    starts = np.concatenate([[0], ends])[shards]
    out = np.empty(indices.size, dtype=maps[0].dtype if maps else np.uint8)
    for shard in np.unique(shards).tolist():
        where = np.flatnonzero(shards == shard)
        out[where] = maps[shard][indices[where] - starts[where]]
    return out


def shard_memmaps(ds) -> list:
    """Read-only numpy memory maps of a PretrainingDataset's shards (an empty shard: an empty array)."""
    import numpy as np

    maps = []
    for shard, count in zip(ds.meta["shards"], ds._shards.counts):
        path = ds.directory / shard["file"]
        maps.append(np.memmap(path, dtype=ds._shards.dtype, mode="r", shape=(count,)) if count
                    else np.zeros(0, dtype=ds._shards.dtype))
    return maps


def loader_variants(directory: Path) -> dict:
    """{name: fn(indices) -> what it reads} of every variant timed: the loader as training runs it (static masks;
    dynamic masking too where the build has word_starts.npy), the same loader reading its records through memory
    maps, and the records alone by positional reads and by a memmap gather (`REFERENCE`). `indices`: a numpy
    array of record indices."""
    import numpy as np

    from albertlm.data.loader import PretrainingDataset, collate
    from albertlm.data.shards import WORD_STARTS_FILE

    class MappedDataset(PretrainingDataset):
        """The loader with its records read through numpy memory maps (how it read them before 2e72d74)."""

        def records(self, indices):
            return memmap_gather(self.maps, self._ends, np.asarray(indices, dtype=np.int64).reshape(-1))

    ds = PretrainingDataset(directory)
    mapped = MappedDataset(directory)
    mapped.maps = shard_memmaps(mapped)
    variants = {"loader: __getitems__ + collate": lambda idx: collate(ds.__getitems__(idx.tolist()))}
    if (directory / WORD_STARTS_FILE).is_file():
        dynamic = PretrainingDataset(directory, dynamic_masking=True, seed=0)
        variants["loader, dynamic masking"] = lambda idx: collate(dynamic.__getitems__([(0, i) for i in idx.tolist()]))
    variants["loader, records through memory maps"] = lambda idx: collate(mapped.__getitems__(idx.tolist()))
    variants["records: positional reads (ShardMaps.read)"] = ds.records
    variants[REFERENCE] = lambda idx: memmap_gather(mapped.maps, mapped._ends, idx)
    return variants


def check_loader_variants(variants: dict, indices: "np.ndarray") -> None:
    """The variants compared read the same things: the loader's batch through maps is its batch by positional
    reads, and the two ways of reading the records give the same bytes (else a SystemExit: the timings would
    compare different work)."""
    import torch

    batches = {name: fn(indices) for name, fn in variants.items()}
    loader, mapped = batches["loader: __getitems__ + collate"], batches["loader, records through memory maps"]
    same_batch = loader.keys() == mapped.keys() and all(torch.equal(loader[k], mapped[k]) for k in loader)
    same_records = (batches["records: positional reads (ShardMaps.read)"].tobytes()
                    == batches[REFERENCE].tobytes())
    if not (same_batch and same_records):
        raise SystemExit("data_speed.py --loader: the variants read different data "
                         f"(batches equal: {same_batch}, records equal: {same_records}); nothing timed")


def time_loader(variants: dict, batches: list, warmup: int = LOADER_WARMUP) -> dict[str, dict]:
    """Each variant's per-batch wall and CPU seconds on `batches` (arrays of indices), the variants taking each
    batch in turn (their order rotating), every batch's records read once untimed first; the first `warmup`
    batches are not kept."""
    names = list(variants)
    reads = {name: {"wall": [], "cpu": []} for name in names}
    read_once = variants["records: positional reads (ShardMaps.read)"]
    for k, indices in enumerate(batches):
        read_once(indices)                       # into the page cache, for every variant alike
        for name in names[k % len(names):] + names[:k % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            variants[name](indices)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if k >= warmup:
                reads[name]["wall"].append(wall)
                reads[name]["cpu"].append(cpu)
    return reads


def loader_rows(batch_size: int, reads: dict[str, dict]) -> list[tuple]:
    """(batch, variant, records/s, CPU us per record, CPU time / the reference's) of each variant: medians of its
    batches' wall and CPU seconds."""
    import statistics

    per_record = {name: statistics.median(r["cpu"]) / batch_size for name, r in reads.items()}
    rows = []
    for name, r in reads.items():
        wall = statistics.median(r["wall"])
        rows.append((batch_size, name, batch_size / wall if wall > 0 else float("inf"), per_record[name] * 1e6,
                     per_record[name] / per_record[REFERENCE] if per_record[REFERENCE] > 0 else float("nan")))
    return rows


def positional_over_maps(rows: list[tuple]) -> tuple[float, float]:
    """CPU time per record of positional reads over memory maps: the whole loader's, and the records' alone."""
    cpu = {name: us for _, name, _, us, _ in rows}

    def ratio(a: str, b: str) -> float:
        return cpu[a] / cpu[b] if cpu[b] > 0 else float("nan")

    return (ratio("loader: __getitems__ + collate", "loader, records through memory maps"),
            ratio("records: positional reads (ShardMaps.read)", REFERENCE))


def loader_speeds(directory: Path, batch_sizes: list[int], count: int, seed: int = 0) -> None:
    """The --loader table: `count` timed batches of each size, in the training sampler's random order."""
    from albertlm.data.loader import PretrainingDataset
    from albertlm.training.loop import shuffled_batches

    ds = PretrainingDataset(directory)
    T, P = ds.max_seq_length, ds.max_predictions
    if len(ds) < max(batch_sizes):
        raise SystemExit(f"data_speed.py --loader: {directory} holds {len(ds)} records, fewer than a batch of "
                         f"{max(batch_sizes)}: lower --batch-sizes")
    variants = loader_variants(directory)
    print(f"loader: {directory}: {len(ds):,} records of {ds._shards.dtype.itemsize} bytes in {len(ds.meta['shards'])} "
          f"shard(s), T={T}, P={P}; {count} timed batches a size after {LOADER_WARMUP} untimed; load average "
          f"before: {os.getloadavg()[0]:.1f}", flush=True)
    print("\n| batch | what | records/s | CPU µs/record | CPU vs memmap gather |")
    print("|---:|---|---:|---:|---:|")
    for B in batch_sizes:
        epoch_batches = shuffled_batches(len(ds), B, seed)
        batches, epoch = [], 0
        while len(batches) < count + LOADER_WARMUP:      # (a small build: the next epochs' orders)
            batches += epoch_batches(epoch)
            epoch += 1
        batches = batches[:count + LOADER_WARMUP]
        check_loader_variants(variants, batches[0])
        rows = loader_rows(B, time_loader(variants, batches))
        for _, name, per_second, us, vs in rows:
            print(f"| {B} | {name} | {per_second:,.0f} | {us:.1f} | {vs:.2f}x |", flush=True)
        whole, alone = positional_over_maps(rows)
        print(f"| {B} | positional reads / memory maps, CPU per record | | | loader {whole:.2f}x, "
              f"records alone {alone:.2f}x |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (records/s is wall clock and suffers from other load; CPU "
          "per record does not)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dupe-factor", type=int, default=5,
                        help="`albertlm data build --dupe-factor` of every build, --loader's own too (default 5)")
    parser.add_argument("--skip-10x", action="store_true",
                        help="leave out the build of the 10x corpus (and the peak-RSS ratio it gives)")
    parser.add_argument("--formats-only", action="store_true", help="only the reading speed of each input format")
    parser.add_argument("--loader", nargs="?", const="", default=None, metavar="DIR",
                        help="only the training loader's speed, on the built data directory DIR (without DIR: a "
                             "build of the English text at max length 128 made here)")
    parser.add_argument("--batch-sizes", default=None,
                        help="with --loader: the batch sizes timed, comma-separated (default 32,128)")
    parser.add_argument("--loader-batches", type=int, default=None,
                        help="with --loader: timed batches per batch size (default 200)")
    args = parser.parse_args()
    if args.dupe_factor < 1:    # refused by the first build, after the minutes of the format speeds
        parser.error(f"--dupe-factor must be >= 1, got {args.dupe_factor}")
    if args.loader is None:
        for option, value in (("--batch-sizes", args.batch_sizes), ("--loader-batches", args.loader_batches)):
            if value is not None:   # would be ignored without a word
                parser.error(f"{option} is for --loader")
    else:
        if args.formats_only or args.skip_10x:
            parser.error(f"--loader times the loader only: {'--formats-only' if args.formats_only else '--skip-10x'} "
                         "is for the builds")
        try:
            sizes = [int(n) for n in (args.batch_sizes or "32,128").split(",")]
        except ValueError:
            parser.error(f"--batch-sizes {args.batch_sizes!r}: comma-separated numbers, such as 32,128")
        if min(sizes) < 1:
            parser.error(f"--batch-sizes: each must be >= 1, got {args.batch_sizes}")
        count = 200 if args.loader_batches is None else args.loader_batches
        if count < 1:
            parser.error(f"--loader-batches must be >= 1, got {count}")
        directory = args.loader
        if directory:
            from albertlm.data.shards import read_meta
            from albertlm.errors import UserError

            try:    # not a build, a damaged meta.json, a missing or cut shard: its one line
                read_meta(directory)
                loader_speeds(Path(directory), sizes, count)
            except UserError as exc:
                parser.error(f"--loader {directory}: {exc}")
            return
        with tempfile.TemporaryDirectory() as tmp:
            print(f"building the English text at max length 128, dupe factor {args.dupe_factor} ...", flush=True)
            loader_speeds(build_loader_data(Path(tmp), args.dupe_factor), sizes, count)
        return
    if not args.formats_only:
        try:
            import psutil  # noqa: F401  (the builds' peak RSS; the bench extra has it)
        except ImportError:     # was a traceback at the first build, after the minutes of the format speeds
            parser.error("the builds need psutil for their peak RSS (pip install -e '.[bench]', or pip install "
                         "psutil); --formats-only and --loader run without it")
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
