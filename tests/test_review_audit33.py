"""Audit 33 (review): an independent review of the thirty-third session's commits (384728f..892dce9).

Each test pins one defect found in the session's code (it failed before the fix the review gave, now applied)."""
from __future__ import annotations

import io

import pytest


# ------------------------------------------------------------------ 1. has_record: a long last line is quadratic
class _CountingBytes(bytes):
    """bytes whose concatenations count the bytes they copy (`copied`, shared by the file below)."""

    copied = [0]

    def __add__(self, other):
        joined = bytes.__add__(self, other)
        self.copied[0] += len(joined)
        return joined


class _CountingFile(io.BytesIO):
    def read(self, size=-1):
        return _CountingBytes(super().read(size))


def test_lines_from_end_copies_a_long_line_once_not_once_per_block():
    """`loop._lines_from_end` joined each 64 KiB block to the whole rest of a line without a line end so far
    (`f.read(...) + carried`): a line of n blocks copied about n² / 2 blocks. A metrics.jsonl whose end is a long
    run without a newline (the NUL bytes a power loss leaves at the end of a file, a stray binary write) made
    `has_record`, run at every --resume, take 20 s for a 32 MiB tail and 66 s for 64 MiB (the whole-file read it
    replaced: under a second). The lines must come out the same, each byte copied a bounded number of times."""
    from albertlm.training import loop

    head = b'{"step": 5, "split": "train", "loss": 1.0}\n'
    tail = bytes(range(1, 10)) * (1 << 16)        # 576 KiB without a line end: 9 blocks of 64 KiB
    _CountingBytes.copied[0] = 0
    lines = list(loop._lines_from_end(_CountingFile(head + tail)))
    assert lines == [tail, head[:-1]]
    assert _CountingBytes.copied[0] <= 3 * len(tail), _CountingBytes.copied[0]


def test_has_record_still_finds_the_record_before_a_long_tail(tmp_path):
    """(The answer was right, only slow: kept right by the fix.)"""
    from albertlm.training.loop import has_record

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 5, "split": "train", "loss": 1.0}\n' + b"\x00" * (3 << 16) + b"x")
    assert has_record(path, 5, "train") and not has_record(path, 5, "eval") and not has_record(path, 6, "train")


# ------------------------------------------------------------------ 2. the `**` glob on Windows: drives and shares
class _WindowsFiles:
    """A stand-in for the `os` module of a Windows machine (ntpath, backslashes, `/` as altsep) over a few files,
    for `corpus._glob_paths`, whose `**` walk replaced glob.glob: the current directory is C:\\Users\\me."""

    sep, altsep, curdir = "\\", "/", "."

    def __init__(self, files):
        import ntpath
        import types

        self.files = {ntpath.normcase(f) for f in files}
        self.dirs = {ntpath.normcase(ntpath.dirname(f)) for f in files}
        for d in list(self.dirs):
            while ntpath.dirname(d) != d:
                d = ntpath.dirname(d)
                self.dirs.add(d)
        full = self._full
        self.path = types.SimpleNamespace(
            join=ntpath.join, splitdrive=ntpath.splitdrive, lexists=lambda p: full(p) in self.files | self.dirs,
            isdir=lambda p: full(p) in self.dirs, realpath=full)

    def _full(self, path):
        import ntpath

        cwd = "C:\\Users\\me"
        drive, rest = ntpath.splitdrive(path)
        if not drive:
            path = ntpath.join(cwd, path) if not rest.startswith(("\\", "/")) else "C:" + path
        elif not rest.startswith(("\\", "/")):   # "C:corpus": relative to the current directory of drive C
            path = ntpath.join(cwd, rest)
        return ntpath.normcase(ntpath.normpath(path))

    def scandir(self, directory):
        import contextlib
        import ntpath
        import types

        full = self._full(directory)
        names = {p[len(full):].lstrip("\\").split("\\")[0] for p in self.files | self.dirs
                 if p.startswith(full.rstrip("\\") + "\\")}
        entries = [types.SimpleNamespace(name=n, is_dir=lambda n=n: ntpath.join(full, n) in self.dirs)
                   for n in sorted(names)]
        return contextlib.nullcontext(iter(entries))


def test_a_double_star_pattern_on_a_windows_drive_or_share_is_read_there(monkeypatch):
    """`_glob_paths` split the pattern at the separators and joined the parts again from "" or os.sep: on Windows
    `C:\\corpus\\**\\*.txt` became `C:` + `corpus` = `C:corpus` (the folder `corpus` under the current directory of
    drive C), and `\\\\server\\share\\corpus\\**` the folder `\\server` of the current drive: `data build --input` and
    `tokenizer train --input` said `no file matches the pattern` for files glob.glob found. The code handles
    os.altsep for Windows; the drive (os.path.splitdrive) must stay the pattern's anchor."""
    from albertlm.data import corpus

    files = ["C:\\corpus\\a.txt", "C:\\corpus\\sub\\b.txt", "\\\\server\\share\\corpus\\c.txt"]
    monkeypatch.setattr(corpus, "os", _WindowsFiles(files))
    assert sorted(corpus._glob_paths("C:/corpus/**/*.txt")) == ["C:\\corpus\\a.txt", "C:\\corpus\\sub\\b.txt"]
    assert corpus._glob_paths("\\\\server\\share\\corpus\\**\\*.txt") == ["\\\\server\\share\\corpus\\c.txt"]
