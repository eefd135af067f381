"""Audit 26 (corpus reading): the line reader without a transcoding layer over UTF-8, and misread byte order marks.

1. Audit 25 put `_Utf8Text` (UTF-16/32 transcoding, CR LF and CR made LF) over every text file: a 40 MB CR LF file
   read a third slower. UTF-8 text is now read from the file's (decompressed) bytes as they are, decided once at
   open (`_open_lines`); CR LF ends are left to `strip` and the csv module, and at the first lone CR the rest of the
   file goes through `_Utf8Text`. The documents, counts and messages are those of the layer: every mix of line
   ends, compressed or transcoded, long lines cut at any limit, CSV and JSON lines, and whole builds.
2. A Latin-1 (or UTF-8) file that begins with the bytes FF FE was read as UTF-16: one document of CJK-looking
   nonsense, exit 0. `check_inputs` refuses it, naming the bytes and how to convert the file.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from albertlm.data import corpus
from albertlm.data.corpus import CorpusCounts, check_inputs, read_documents
from albertlm.errors import UserError
from conftest import shared_path
from test_data_audit22 import _build
from test_encodings_audit25 import _shard_bytes, _text

ALICE = ("text", "gutenberg", "carroll-alice.txt")
WORDS = ["the", "cat", "sat.", "Then", "it", "ran", "away!", "naïve", "中文", "Ünïcödé", "x" * 23, "é" * 9, ""]


def _read(path: Path, fmt: str = "auto", **kwargs) -> tuple[list[list[str]], dict]:
    """Documents and counts of a file, its name taken out of the examples (files of each variant compare)."""
    counts = CorpusCounts()
    docs = [doc.sentences for doc in read_documents([path], fmt, counts=counts, **kwargs)]
    seen = {k: v for k, v in vars(counts).items() if k not in ("examples", "encodings", "compressed")}
    seen["examples"] = {k: v.replace(str(path), "FILE") for k, v in counts.examples.items()
                        if k != "transcoded_files"}
    seen.pop("transcoded_files")
    return docs, seen


def _with_ends(lines: list[str], rng: random.Random, ends: tuple[str, ...]) -> str:
    """The lines, each ending in one of `ends` (not an empty line's LF after a lone CR: that is one CR LF)."""
    out, end = [], ""
    for line in lines:
        end = rng.choice([e for e in ends if line or end != "\r" or e != "\n"] or ends)
        out.append(line + end)
    return "".join(out)


def _random_lines(rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 1, 2, 3, 5, 8, 12])))
            + rng.choice(["", "", " ", "\t", "x" * rng.randrange(1, 40)]) for _ in range(rng.randrange(20, 120))]


# -- 1. UTF-8 without a layer: the same lines as through `_Utf8Text` -------------------------------------------------
def test_plain_utf8_is_read_without_a_transcoding_layer(tmp_path):
    for name, data in (("lf.txt", b"One line.\nTwo.\n"), ("crlf.txt", b"One line.\r\nTwo.\r\n"),
                       ("bom.txt", b"\xef\xbb\xbfOne line.\n")):
        (tmp_path / name).write_bytes(data)
        stream, raw = corpus._open_lines(tmp_path / name, None, lambda exc: None, None)
        try:
            assert stream is raw and stream.read(4) == b"One "   # the file itself, its UTF-8 BOM skipped
        finally:
            raw.close()
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(b"One line.\r\n"))
    stream, raw = corpus._open_lines(packed, "gz", lambda exc: None, None)
    try:
        assert not isinstance(stream.raw, corpus._Utf8Text) and stream.read() == b"One line.\r\n"
    finally:
        stream.close()
        raw.close()
    wide = tmp_path / "wide.txt"   # a UTF-16 file is transcoded, as before
    wide.write_bytes("One line.\r\n".encode("utf-16"))
    stream, raw = corpus._open_lines(wide, None, lambda exc: None, "UTF-16LE")
    try:
        assert isinstance(stream.raw, corpus._Utf8Text) and stream.read() == b"One line.\n"
    finally:
        stream.close()
        raw.close()


@pytest.mark.parametrize("seed", range(12))
def test_any_mix_of_line_ends_reads_as_lf_text_even_where_long_lines_are_cut(tmp_path, monkeypatch, seed):
    """Lines of random lengths around a small MAX_LINE_BYTES (pieces cut at spaces, inside multi-byte characters,
    a CR LF pair on the limit), each ending in LF, CR LF or a lone CR, plain, gzip'd, with a UTF-8 byte order mark
    or in UTF-16: the documents, counts and line numbers of the LF file."""
    rng = random.Random(seed)
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", rng.choice([16, 24, 31, 40]))
    monkeypatch.setattr(corpus, "_READ_BUFFER", rng.choice([5, 64, 1 << 20]))
    lines = _random_lines(rng)
    reference = tmp_path / "lf.txt"
    reference.write_text(_with_ends(lines, rng, ("\n",)), encoding="utf-8")
    variants = {"crlf.txt": _with_ends(lines, rng, ("\r\n",)).encode(),
                "mixed.txt": _with_ends(lines, rng, ("\n", "\r\n", "\r")).encode(),
                "late_cr.txt": (_with_ends(lines[:-3], rng, ("\r\n",)) + _with_ends(lines[-3:], rng, ("\r",))).encode(),
                "cr.txt": _with_ends(lines, rng, ("\r",)).encode()}
    variants["bom.txt"] = b"\xef\xbb\xbf" + variants["mixed.txt"]
    variants["mixed.txt.gz"] = gzip.compress(variants["mixed.txt"])
    variants["crlf.txt.gz"] = gzip.compress(variants["crlf.txt"])
    variants["utf16.txt"] = _with_ends(lines, rng, ("\n", "\r\n", "\r")).encode("utf-16")
    for fmt in ("lines", "raw"):
        expected = _read(reference, fmt)
        for name, data in variants.items():
            (tmp_path / name).write_bytes(data)
            assert _read(tmp_path / name, fmt) == expected, (fmt, name)


def test_csv_and_json_lines_with_crlf_and_cr_ends_read_as_with_lf(tmp_path):
    texts = ["First text. It has two sentences.", "A quoted, comma text\nover two lines.\n\nA paragraph.",
             'He said "yes". Then left.', "中文的句子。第二句。"]
    rows = [["id", "text"]] + [[str(k), text] for k, text in enumerate(texts)]

    def csv_text(end: str) -> str:
        cell = lambda value: '"' + value.replace('"', '""').replace("\n", end) + '"'   # noqa: E731
        return "".join(",".join(map(cell, row)) + end for row in rows)
    records = [json.dumps({"text": text}, ensure_ascii=False) for text in texts]
    for name, make in (("a.csv", csv_text), ("a.jsonl", lambda end: "".join(r + end for r in records))):
        reference = tmp_path / f"lf-{name}"
        reference.write_text(make("\n"), encoding="utf-8")
        expected = _read(reference)
        assert len(expected[0]) == len(texts)
        for end in ("\r\n", "\r"):
            path = tmp_path / f"{len(end)}-{name}"
            path.write_text(make(end), encoding="utf-8", newline="")
            assert _read(path) == expected, (name, repr(end))


def test_a_crlf_build_and_a_gzipped_mixed_build_write_the_lf_builds_bytes(tmp_path, capsys):
    text = _text(*ALICE)
    lines = text.split("\n")
    rng = random.Random(5)
    files = {"lf/a.txt": text.encode(), "crlf/a.txt": "\r\n".join(lines).encode(),
             "mixed/a.txt.gz": gzip.compress(_with_ends(lines[:-1], rng, ("\n", "\r\n", "\r")).encode()
                                             + lines[-1].encode())}
    shards = []
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir()
        path.write_bytes(data)
        assert _build([path], tmp_path / f"out-{path.parent.name}") == 0
        shards.append(_shard_bytes(tmp_path / f"out-{path.parent.name}"))
    capsys.readouterr()
    assert shards[0] != b"" and shards.count(shards[0]) == len(shards)


def test_progress_of_utf8_text_counts_the_files_bytes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\r\n".join(_text(*ALICE).split("\n")).encode())
    sizes: list[int] = []
    docs, _ = _read(path, progress=sizes.append)
    assert docs and sum(sizes) == path.stat().st_size and min(sizes) >= 0


# -- 2. a byte order mark that is no byte order mark ---------------------------------------------------------------
def test_latin1_text_that_begins_with_ff_fe_is_refused_not_read_as_utf16(tmp_path):
    body = "is how the two letters look. The rest is Latin-1 text: café, naïve, déjà vu.\nA second line.\n" * 20
    latin = tmp_path / "latin.txt"
    latin.write_bytes(("ÿþ " + body).encode("latin-1"))
    before = tmp_path / "utf8.txt.gz"   # UTF-8 text after a stray FE FF, compressed
    before.write_bytes(gzip.compress(b"\xfe\xff" + body.encode()))
    for path, bom in ((latin, "FF FE"), (before, "FE FF")):
        with pytest.raises(UserError, match=f"starts with {bom}, the byte order mark of UTF-16.E, but read as UTF-16.E "
                                            "its text holds no line break, space or ASCII character") as caught:
            check_inputs([path])
        assert "iconv -f latin1 -t utf-8" in str(caught.value)
    # real UTF-16 text of scripts without spaces passes: line breaks, digits or ASCII punctuation are there
    zh = _text("text", "zh", "news_zh_1.txt")
    ko = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8")[:20_000]
    for name, data in (("zh.txt", zh.encode("utf-16")), ("zh-one-line.txt", zh.replace("\n", "").encode("utf-16")),
                       ("ko.txt", ko.encode("utf-16-le")), ("zh32.txt", zh.encode("utf-32"))):
        if name == "ko.txt":
            data = b"\xff\xfe" + data
        (tmp_path / name).write_bytes(data)
        check_inputs([tmp_path / name])


# -- 3. zstd: frames with big windows, and text that repeats ---------------------------------------------------------
def _zstd_stream(data: bytes, **params) -> bytes:
    """`data` as one zstd frame written by a streaming compressor (no content size: the frame declares its window)."""
    import zstandard

    options = zstandard.ZstdCompressionParameters.from_level(3, **params)
    writer = zstandard.ZstdCompressor(compression_params=options).compressobj()
    return writer.compress(data) + writer.flush()


def test_a_zstd_frame_written_with_long_distance_matching_is_read_not_skipped_as_corrupt(tmp_path):
    text = _text(*ALICE).encode()
    packed = tmp_path / "alice.txt.zst"   # `zstd --long=28`: a 256 MiB window, over the decoder's default 128 MiB
    packed.write_bytes(_zstd_stream(text, window_log=28, enable_ldm=True))
    plain = tmp_path / "alice.txt"
    plain.write_bytes(text)
    docs, counts = _read(packed)
    assert counts["corrupt_files"] == 0 and docs == _read(plain)[0] != []


def test_zstd_text_that_repeats_is_decompressed_in_bounded_steps(tmp_path):
    """One line repeated compresses thousands of times: an 8 KiB step of it gave tens of MB of text at once."""
    line = b"The same sentence again and again, as a broken dump repeats it.\n"
    path = tmp_path / "same.txt.zst"
    path.write_bytes(_zstd_stream(line * 300_000))   # 19 MB of text in about 2 KB
    reader = corpus._ZstdReader(open(path, "rb"))
    try:
        total, largest = 0, 0
        while data := reader.read(1 << 20):
            total += len(data)
            largest = max(largest, len(reader.pending))
    finally:
        reader.raw.close()
    assert total == len(line) * 300_000
    assert largest <= 8 * corpus.ZSTD_STEP_OUTPUT, largest
    truncated = tmp_path / "cut.txt.zst"   # a frame cut short is still the reader's EOFError
    truncated.write_bytes(path.read_bytes()[:-8])
    reader = corpus._ZstdReader(open(truncated, "rb"))
    try:
        with pytest.raises(EOFError):
            while reader.read(1 << 20):
                pass
    finally:
        reader.raw.close()
