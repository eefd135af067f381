"""infer audit 33 (what a failed write leaves): `embed --out X.npy` writes its array through a memory map of a sparse
file (`np.lib.format.open_memmap`), which gets its disk blocks only as the rows are written into the mapping; a full
disk or a quota met then is no OSError but SIGBUS, and embed died mid-way with "Bus error" (exit 135), no word, its
temporary file left for the next run to remove. The file's blocks are now taken before the first batch
(`infer_commands.allocate`, `os.posix_fallocate`): a file that does not fit is one line, exit 2, nothing written and
an earlier --out kept; a file system that cannot preallocate is left to the sparse file, as before."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from conftest import ROOT, assert_one_error, save_tiny_pretrained


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny33"))


TEXTS = ["the film was good", "the plot was bad", "very fine acting", "awful", "great film", "poor plot"]


def _embed(tiny: Path, source: Path, out: Path, *extra: str) -> int:
    return main(["embed", str(tiny), "--input", str(source), "--out", str(out), "--no-progress", "--device", "cpu",
                 "--batch-size", "4", *extra])


def test_an_npy_that_does_not_fit_is_one_line_and_keeps_the_earlier_out(tiny, tmp_path, monkeypatch, capsys):
    """The disk full when the array's blocks are taken: one line naming --out, the system's words and the size the
    array needs; the earlier --out (given --overwrite) as it was, no temporary file, no folder made for it."""
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    old = tmp_path / "old.npy"
    old.write_bytes(b"the user's embeddings")
    calls = []

    def full_disk(fd, offset, length):
        calls.append((offset, length))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full_disk, raising=False)
    code = _embed(tiny, source, old, "--overwrite")
    assert_one_error(capsys, code, f"--out {old}: cannot write there ({os.strerror(errno.ENOSPC)}: 6 x 32 float32 "
                                   "embeddings take 896 bytes)")
    assert calls == [(0, 128 + 6 * 32 * 4)]   # the .npy header and the rows: the whole file
    assert old.read_bytes() == b"the user's embeddings"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "old.npy"]
    new = tmp_path / "new" / "sub" / "e.npy"
    assert_one_error(capsys, _embed(tiny, source, new), "cannot write there", "No space left on device")
    assert not (tmp_path / "new").exists()


def test_a_file_system_that_cannot_preallocate_gets_the_same_array(tiny, tmp_path, monkeypatch, capsys):
    """EOPNOTSUPP (a file system without fallocate) is no error: the sparse file, as before, the same array."""
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    assert _embed(tiny, source, tmp_path / "a.npy") == 0
    calls = []

    def unsupported(fd, offset, length):
        calls.append(length)
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "posix_fallocate", unsupported, raising=False)
    assert _embed(tiny, source, tmp_path / "b.npy") == 0
    assert calls == [128 + 6 * 32 * 4]
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    capsys.readouterr()


def _small_tmpfs_works(where: Path) -> bool:
    """Whether this process may mount a tmpfs in a mount namespace of its own (root, `unshare`, CAP_SYS_ADMIN)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {where} && echo mounted"],
                           capture_output=True, text=True, timeout=60)
    return probe.returncode == 0 and "mounted" in probe.stdout


def test_a_really_full_file_system_is_one_line_not_a_bus_error(tiny, tmp_path):
    """A 64 kB tmpfs (a namespace of its own; skipped where none can be mounted), 700 texts: 87 kB of .npy. embed
    died of SIGBUS at the first rows past the space (exit 135, "Bus error", nothing said); now one line, exit 2,
    and the tmpfs holds the earlier --out alone."""
    small = tmp_path / "small"
    small.mkdir()
    if not _small_tmpfs_works(small):
        pytest.skip("no tmpfs can be mounted here (root and a mount namespace are needed)")
    source = tmp_path / "in.txt"
    source.write_text("\n".join(TEXTS[k % len(TEXTS)] for k in range(700)) + "\n")
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    out = small / "e.npy"
    command = (f"mount -t tmpfs -o size=64k tmpfs {small} && echo kept > {out} && "
               f"{sys.executable} -m albertlm embed {tiny} --input {source} --out {out} --overwrite --no-progress "
               f"--device cpu --batch-size 64; echo rc=$?; ls -a {small}; cat {out}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert "rc=2" in proc.stdout.splitlines(), (proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.splitlines()[1:] == [".", "..", "e.npy", "kept"], proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"albertlm embed: error: --out {out}: cannot write there (No space left on device: 700 x 32 "
                     "float32 embeddings take 89.7 kB)"], proc.stderr[-2000:]


# -- predict: the files of every set in --out together, or none ------------------------------------------------------
# `predict` / `evaluate --model --out` over several sets (GLUE dev and test, MNLI matched and mismatched) wrote each
# set's file in turn, each through its own temporary file: a later set's write that failed (a full disk, no
# permission, Ctrl-C) left the earlier set's file in --out, replacing an earlier prediction, while the command failed.
# The files are now written into a folder in --out and moved in together at the end (`task_commands.
# _staged_predictions`, `_install_predictions`: convert's `swap_into_place`), as `export` does.


def _sst2_files(root: Path, dev_rows: int = 10, test_rows: int = 6) -> tuple[Path, Path]:
    from conftest import shared_path

    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()
    dev, test = root / "dev.tsv", root / "test.tsv"
    dev.write_text("\n".join(lines[:1 + dev_rows]) + "\n", encoding="utf-8")
    rows = [line.split("\t")[0] for line in lines[1 + dev_rows:1 + dev_rows + test_rows]]
    test.write_text("index\tsentence\n" + "".join(f"{i}\t{text}\n" for i, text in enumerate(rows)), encoding="utf-8")
    return dev, test


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory, tiny) -> tuple[Path, Path, Path]:
    """(a tiny SST-2 run, its dev file of 10 rows, a test file of 6)."""
    root = tmp_path_factory.mktemp("sst2run33")
    dev, test = _sst2_files(root)
    run = root / "run"
    assert main(["finetune", "glue", "--task", "sst2", "--train", str(dev), "--dev", str(dev), "--model", str(tiny),
                 "--out", str(run), "--max-steps", "1", "--batch-size", "8", "--max-seq-length", "16",
                 "--no-progress", "--train.tensorboard", "false"]) == 0
    return run, dev, test


def _predict_args(sst2_run, out: Path) -> list[str]:
    run, dev, test = sst2_run
    return ["predict", "glue", "--task", "sst2", "--model", str(run), "--dev", str(dev), "--test", str(test),
            "--out", str(out), "--no-progress"]


EARLIER_DEV = "index\tprediction\n" + "".join(f"{i}\t{i % 2}\n" for i in range(10))   # this dev set's 10 rows


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("failure", ["full disk", "ctrl-c"])
def test_a_later_sets_failed_write_leaves_the_earlier_prediction(sst2_run, tmp_path, monkeypatch, capsys, failure):
    """The submission file (written after dev_predictions.tsv) fails mid-way: the earlier dev_predictions.tsv in
    --out stays as it was (it was replaced by this run's), no submission file, no staging folder; a full disk is
    one line naming the file in --out, Ctrl-C `interrupted` and 130. A new --out is not left behind."""
    from albertlm.tasks import specs

    out = tmp_path / "out"
    out.mkdir()
    (out / "dev_predictions.tsv").write_text(EARLIER_DEV)
    real = specs.write_lines_atomic

    def failing(path, lines):
        if path.parent.name != "submission":
            return real(path, lines)

        def cut_short():
            yield next(iter(lines))
            if failure == "ctrl-c":
                raise KeyboardInterrupt
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, cut_short())

    monkeypatch.setattr(specs, "write_lines_atomic", failing)
    code = main(_predict_args(sst2_run, out))
    if failure == "ctrl-c":
        assert code == 130 and capsys.readouterr().err.strip().splitlines()[-1] == "albertlm predict: interrupted"
    else:
        assert_one_error(capsys, code, f"{out / 'submission' / 'SST-2.tsv'}: cannot write (No space left on device)")
    assert _tree(out) == {"dev_predictions.tsv": EARLIER_DEV.encode()}
    assert [p.name for p in out.iterdir()] == ["dev_predictions.tsv"]
    new = tmp_path / "new" / "sub"
    code = main(_predict_args(sst2_run, new))
    assert code == (130 if failure == "ctrl-c" else 2)
    assert not (tmp_path / "new").exists()
    capsys.readouterr()


def test_the_files_written_are_named_in_out(sst2_run, tmp_path, capsys):
    """A predict that works: both files in --out (the earlier dev file replaced), `predictions_written` naming them
    there, no staging folder left."""
    import json

    out = tmp_path / "out"
    out.mkdir()
    (out / "dev_predictions.tsv").write_text(EARLIER_DEV)
    assert main(_predict_args(sst2_run, out)) == 0
    written = json.loads(capsys.readouterr().out)["predictions_written"]
    assert written == {"dev": [str(out / "dev_predictions.tsv")],
                       "test:test.tsv": [str(out / "submission" / "SST-2.tsv")]}
    assert sorted(_tree(out)) == ["dev_predictions.tsv", "submission/SST-2.tsv"]
    assert (out / "dev_predictions.tsv").read_text() != EARLIER_DEV
    assert sorted(p.name for p in out.iterdir()) == ["dev_predictions.tsv", "submission"]


def test_a_read_only_submission_folder_keeps_every_earlier_file(sst2_run, tmp_path):
    """In a subprocess, --out/submission read-only (chmod 555; as root, where chmod stops nothing, a read-only bind
    mount in a mount namespace of its own, skipped where none can be made): one line, exit 2, the earlier
    dev_predictions.tsv and submission/SST-2.tsv as they were (dev_predictions.tsv was replaced, then the
    submission's write failed)."""
    out = tmp_path / "out"
    (out / "submission").mkdir(parents=True)
    (out / "dev_predictions.tsv").write_text(EARLIER_DEV)
    (out / "submission" / "SST-2.tsv").write_text("index\tprediction\n0\t0\n1\t1\n")
    before = _tree(out)
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "albertlm", *_predict_args(sst2_run, out)]
    if os.geteuid() != 0:
        (out / "submission").chmod(0o555)
    else:
        probe = tmp_path / "probe"
        probe.mkdir()
        if not _small_tmpfs_works(probe):
            pytest.skip("root, and no read-only bind mount can be made here (a mount namespace is needed)")
        sub = out / "submission"
        command = ["unshare", "-m", "sh", "-c", f"mount --bind {sub} {sub} && mount -o remount,ro,bind {sub} && "
                   + " ".join(f"'{part}'" for part in command)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                              timeout=300)
    finally:
        (out / "submission").chmod(0o755)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[0].startswith("albertlm predict: error: ") and str(out) in lines[0], lines[0]
    assert _tree(out) == before
    assert sorted(p.name for p in out.iterdir()) == ["dev_predictions.tsv", "submission"]
