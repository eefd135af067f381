"""Audit 26 (review of the line reader without a transcoding layer, `corpus._open_lines` / `_TextSource`).

The converting layer (`_Utf8Text` over every text file) is the specification: reading a UTF-8 file from its bytes
must give the documents, counts, messages and line numbers the layer gave. A differential fuzz (hypothesis, tens
of thousands of examples by hand against the module before the change; here a derandomized guard against the
layer forced back on) over every text format, LF / CR LF / CR ends, CR at buffer and MAX_LINE_BYTES limits, NUL
and invalid bytes beside CR, byte order marks, gzip members and zstd frames of a few bytes each, found:

1. A UTF-8 byte order mark split over a decompressor's first reads (a gzip member or zstd frame of one or two
   bytes first) was not skipped: `peek(3)` saw part of it, the mark stayed in the first line, which was cut into
   pieces three bytes early (or, at a tiny limit, read as three U+FFFD).
2. A CSV header cell over two CR LF lines was named with its CR in the missing-column error (the csv module keeps
   a quoted field's line ends, which the layer had made LF).
3. `misread_wide` (new in the change) refused a real UTF-16 file: a Chinese paragraph with full-width punctuation
   only, no line break, has no character below U+0100 either; the error advised `iconv -f latin1`, which garbles it.
"""
from __future__ import annotations

import gzip
import os
import random
import re
import string
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from albertlm.data import corpus  # noqa: E402
from albertlm.data.corpus import CorpusCounts, check_inputs, read_documents  # noqa: E402
from albertlm.errors import UserError  # noqa: E402
from conftest import shared_path  # noqa: E402

FORMATS = ("lines", "raw", "jsonl", "wikiextractor", "csv")


def _read(path: Path, fmt: str = "auto") -> tuple:
    """Documents, counts, examples (the file's name taken out), progress total, or the UserError's message."""
    counts, sizes = CorpusCounts(), []
    try:
        docs = [doc.sentences for doc in read_documents([path], fmt, counts=counts, progress=sizes.append)]
    except UserError as exc:
        return str(exc).replace(str(path), "FILE")
    seen = {k: v for k, v in vars(counts).items() if k not in ("examples", "compressed")}
    return docs, seen, {k: v.replace(str(path), "FILE") for k, v in counts.examples.items()}, sum(sizes)


def _through_the_layer(path: Path, compression, on_error, encoding):
    """`_open_lines` as it was: every text file through `_Utf8Text` (LF ends only, the BOM dropped)."""
    return corpus.open_text_stream(path, compression, on_error)


def _gzip_members(data: bytes, sizes: list[int]) -> bytes:
    """`data` as gzip members of the given sizes (the rest in one last member): a decompressor's short reads."""
    out, start = [], 0
    for size in sizes:
        out.append(gzip.compress(data[start:start + size], mtime=0))
        start += size
    return b"".join(out) + gzip.compress(data[start:], mtime=0)


def _zstd_frames(data: bytes, sizes: list[int]) -> bytes:
    import zstandard

    out, start, writer = [], 0, zstandard.ZstdCompressor()
    for size in sizes:
        out.append(writer.compress(data[start:start + size]))
        start += size
    return b"".join(out) + writer.compress(data[start:])


# -- the differential guard: the bytes as they are read as through the converting layer ----------------------------
PARTS = [b"a", b"word", b" ", b"\t", b".", b"A. B.", b"\r", b"\n", b"\r\n", b"\r\n", b"\r\r", b"\n\r", b"\x00",
         b"\xff", b"\xe4\xb8\xad", b"\xe4", b"\xef\xbb\xbf", b'<doc id="1" title="T">', b"</doc>",
         b'{"text": "x y. Z."}',
         b'{"text": 1}', b'"', b",", b'"x\r\ny"', b'"a\rb"', b"\xe2\x80\xa8"]


@settings(max_examples=int(os.environ.get("ALBERTLM_FUZZ_EXAMPLES", "0")) or 120, deadline=None, database=None,
          derandomize=not os.environ.get("ALBERTLM_FUZZ_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=st.lists(st.sampled_from(PARTS), max_size=40).map(b"".join),
       header=st.sampled_from([b"", b"\xef\xbb\xbf", b"id,text\r\n", b'"id","te\r\nxt"\r\n', b"\xef\xbb\xbftext\r"]),
       fmt=st.sampled_from(FORMATS), limit=st.sampled_from([1, 2, 3, 5, 8, 1 << 20]),
       buffer=st.sampled_from([3, 7, 1 << 20]), packing=st.sampled_from([None, "gz", "zst"]),
       sizes=st.lists(st.integers(0, 6), max_size=8))
def test_utf8_text_reads_as_through_the_converting_layer(tmp_path_factory, monkeypatch, body, header, fmt, limit,
                                                         buffer, packing, sizes):
    data = header + body
    stored = {None: lambda: data, "gz": lambda: _gzip_members(data, sizes), "zst": lambda: _zstd_frames(data, sizes)}
    path = tmp_path_factory.mktemp("diff") / ("a.txt" + {None: "", "gz": ".gz", "zst": ".zst"}[packing])
    path.write_bytes(stored[packing]())
    with monkeypatch.context() as patch:
        patch.setattr(corpus, "MAX_LINE_BYTES", limit)
        patch.setattr(corpus, "_READ_BUFFER", buffer)
        got = _read(path, fmt)
        patch.setattr(corpus, "_open_lines", _through_the_layer)
        expected = _read(path, fmt)
    assert got == expected
    if isinstance(got, tuple):
        assert got[3] == path.stat().st_size   # the progress adds up to the file's size


# -- 1. a byte order mark split over the first reads of a decompressor ------------------------------------------------
@pytest.mark.parametrize("packing", ["gz", "zst"])
def test_a_byte_order_mark_over_tiny_first_members_is_skipped(tmp_path, monkeypatch, packing):
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 64)
    rng = random.Random(0)   # letters that compress badly (a zstd frame over one step, 256 bytes), no space in them
    text = "".join(rng.choice(string.ascii_lowercase) for _ in range(2000)).encode() + b"\r\nA second line.\n"
    plain = tmp_path / "plain.txt"
    plain.write_bytes(text)
    expected = _read(plain, "lines")
    assert expected[1]["long_lines_cut"] == 1
    for sizes in ([1], [2], [1, 1], [1, 0, 1]):
        path = tmp_path / f"bom{len(sizes)}{sizes[-1]}.txt.{packing}"
        pack = _gzip_members if packing == "gz" else _zstd_frames
        path.write_bytes(pack(corpus._BOM + text, sizes))
        got = _read(path, "lines")
        assert got[:3] == expected[:3], sizes
        assert got[3] == path.stat().st_size


# -- 2. a CSV header cell over two CR LF lines ---------------------------------------------------------------------
def test_a_csv_header_cell_over_crlf_lines_is_named_as_over_lf_lines(tmp_path):
    messages = []
    for end in ("\n", "\r\n"):
        path = tmp_path / f"{len(end)}.csv"
        path.write_bytes(f'"id","te{end}xt"{end}1,"Some text."{end}'.encode())
        with pytest.raises(UserError, match="has no column 'text'") as caught:
            list(read_documents([path]))
        messages.append(str(caught.value).replace(str(path), "FILE"))
    assert messages[0] == messages[1] and "'te\\nxt'" in messages[0]


# -- 3. UTF-16 Chinese of one paragraph is no misread Latin-1 ---------------------------------------------------------
def test_a_utf16_chinese_paragraph_without_a_line_break_is_read_not_refused(tmp_path):
    zh = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8")
    paragraph = "".join(run for run in re.findall("[^\x00-\xff]+", zh) if len(run) > 60)[:2000]
    assert len(paragraph) > 1000 and "，" in paragraph   # full-width punctuation only, no line break, no ASCII
    for name, data in (("le.txt", paragraph.encode("utf-16")), ("be.txt", b"\xfe\xff" + paragraph.encode("utf-16-be")),
                       ("short.txt", paragraph[:300].encode("utf-16"))):
        path = tmp_path / name
        path.write_bytes(data)
        check_inputs([path])
        docs = [doc.sentences for doc in read_documents([path])]
        assert "".join(docs[0]) == paragraph[:len("".join(docs[0]))] and len(docs) == 1
    # what the check is for still fails: Latin-1 / UTF-8 text after stray FF FE or FE FF bytes
    body = "is how the two letters look. The rest is Latin-1 text: café, naïve, déjà vu. A second line." * 8
    for name, data in (("latin.txt", ("ÿþ" + body).encode("latin-1")), ("utf8.txt", b"\xfe\xff" + body.encode()),
                       ("accents.txt", b"\xff\xfe" + (body.replace("e", "é") * 2).encode("latin-1")),
                       ("cyrillic.txt", b"\xff\xfe" + body.translate(str.maketrans("aeiost", "аеиост")).encode()),
                       ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(UserError, match="but read as UTF-16.E its text holds no line break"):
            check_inputs([path])
