"""Audit 29 of `albertlm data build` at scale (a few hundred MB of text, workers > 1, giant documents and lines,
many tiny files; measurements in docs/data.md). Found: every shard of a build was memory-mapped when the data was
opened, and each map holds a file descriptor, so a build of more shards than `ulimit -n` (often 1024) could not be
read at all (`OSError: [Errno 24] Too many open files`, by the loader and by `data stats`)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import alice_documents, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


def _build(inputs, out: Path, *extra: str, progress: bool = False) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "32", "--dupe-factor", "1",
                 *([] if progress else ["--no-progress"]), *extra])


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def many_shards(tmp_path) -> Path:
    """A build of one record a shard: a couple of hundred shard files."""
    out = tmp_path / "data"
    assert _build([alice_documents(tmp_path, 400)], out, "--records-per-shard", "1") == 0
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc/self/fd")
def test_a_build_of_many_shards_is_read_without_a_descriptor_per_shard(many_shards, monkeypatch):
    from albertlm.data import shards as shards_module
    from albertlm.data.loader import PretrainingDataset, collate
    from albertlm.data.stats import compute_stats

    # a descriptor limit that leaves room for 64 maps (`map_budget` keeps every shard mapped where it leaves more)
    monkeypatch.setattr(shards_module, "map_budget", lambda count: 64)

    before = _open_descriptors()
    ds = PretrainingDataset(many_shards)
    shards = len(ds.meta["shards"])
    assert shards >= 150 and len(ds) == shards
    batch = collate(ds.__getitems__(list(range(len(ds)))))   # every shard read
    assert batch["input_ids"].shape[0] == len(ds)
    meta, stats = compute_stats(many_shards)
    assert stats.num_instances == meta["num_instances"] == len(ds)
    # each memory map holds a descriptor: mapping every shard at once took one per shard (EMFILE past ulimit -n)
    assert _open_descriptors() - before < 100
    again = PretrainingDataset(many_shards)
    for i in range(len(ds)):   # the records are the same after the maps were dropped and mapped again
        assert bytes(again.record(i)) == bytes(ds.record(i))


def test_a_shard_replaced_before_it_is_first_read_is_refused(tmp_path):
    from albertlm.data.loader import PretrainingDataset

    out = tmp_path / "data"
    assert _build([alice_documents(tmp_path, 200)], out, "--records-per-shard", "20") == 0
    ds = PretrainingDataset(out)
    last = len(ds.meta["shards"]) - 1
    assert last >= 1
    path = out / ds.meta["shards"][last]["file"]
    shutil.copy(path, tmp_path / "copy.bin")
    os.replace(tmp_path / "copy.bin", path)      # the same bytes in another file: what a rebuild leaves
    with pytest.raises(UserError, match="changed while this run reads it: another file took its place"):
        ds.record(len(ds) - 1)   # (`record` alone does not look at the stamps: the map does, when it is made)


# -- many small files: the checks before the build said nothing for minutes ----------------------------------------
def _small_files(root: Path, count: int) -> Path:
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:count * 6]
    root.mkdir()
    for k in range(count):
        (root / f"t{k:03d}.txt").write_text("\n".join(lines[6 * k:6 * k + 6]) + "\n")
    return root


def test_a_build_of_many_files_says_so_before_checking_them(tmp_path, capsys, monkeypatch):
    import albertlm.data.build as build_module

    corpus = _small_files(tmp_path / "corpus", 12)
    monkeypatch.setattr(build_module, "CHECK_NOTE_FILES", 10, raising=False)   # as if it were 10,000 files
    assert _build([corpus], tmp_path / "out", progress=True) == 0
    err = capsys.readouterr().err
    assert "data build: checking 12 input files (formats, encodings, tables) before the build" in err
    assert _build([corpus], tmp_path / "quiet", "--no-progress") == 0
    assert "checking" not in capsys.readouterr().err
    monkeypatch.setattr(build_module, "CHECK_NOTE_FILES", 13, raising=False)
    assert _build([corpus], tmp_path / "few", progress=True) == 0
    assert "checking" not in capsys.readouterr().err


def test_plain_progress_waits_from_the_start_of_the_build_not_of_the_writing(tmp_path, monkeypatch):
    """The 30 s before the first plain progress line count from the build's start: a build of a million small files
    spent its first ~40 minutes on checks, then another 30 s in silence."""
    import time
    from types import SimpleNamespace

    import albertlm.data.build as build_module

    # the build module's clock stands still at `now` (a busy machine's stall, or tqdm's first import in the
    # constructor, would otherwise add seconds to the minute the line reports)
    now = 1000.0
    monkeypatch.setattr(build_module, "time", SimpleNamespace(monotonic=lambda: now))
    progress = build_module.BuildProgress(1000, True, started=now - 2 * build_module.PLAIN_PROGRESS_AFTER)
    progress._plain = True   # as where stderr is a log
    lines = []
    monkeypatch.setattr(build_module, "print", lambda *a, **k: lines.append(a[0]), raising=False)
    progress.written(500, 7)
    progress.close()
    assert lines == ["data build: 50% of 1.0 kB of input, 7 instances, 1.0 min"]
    monkeypatch.setattr(build_module, "time", time)   # the build below runs on the real clock
    # the build hands its start over: the time its checks took counts
    checked, seen = [], []
    real_check, real_progress = build_module.check_inputs, build_module.BuildProgress
    monkeypatch.setattr(build_module, "check_inputs", lambda *a: (checked.append(time.monotonic()), real_check(*a)))

    def progress_seen(*args, **kwargs):
        seen.append(kwargs.get("started"))
        return real_progress(*args, **kwargs)
    monkeypatch.setattr(build_module, "BuildProgress", progress_seen)
    assert _build([alice_documents(tmp_path, 60)], tmp_path / "out", progress=True) == 0
    assert len(seen) == 1 and seen[0] is not None and seen[0] <= checked[0]


def test_a_new_out_does_not_resolve_every_input_file(tmp_path, monkeypatch):
    import albertlm.data.build as build_module
    from albertlm.data.build import BuildConfig

    corpus = _small_files(tmp_path / "corpus", 40)
    files = sorted(corpus.iterdir())
    cfg = BuildConfig(inputs=[str(corpus)], tokenizer="unused", out=str(tmp_path / "new"))
    calls = []
    real = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda self, *a, **k: (calls.append(self), real(self, *a, **k))[1])
    assert build_module._check_output(tmp_path / "new", cfg, files) == []
    assert len(calls) < 5, len(calls)   # was one per input file
    # an --out that exists is still looked at file by file: one holding an input file is refused
    monkeypatch.undo()
    with pytest.raises(UserError, match="holds the input file"):
        build_module._check_output(corpus.parent, BuildConfig(inputs=[str(f) for f in files], tokenizer="unused",
                                                              out=str(corpus.parent)), files)
