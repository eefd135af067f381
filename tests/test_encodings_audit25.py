"""Audit 25 (encodings): the corpus reader meets text files as they come from the world.

1. UTF-16 and UTF-32 text with a byte order mark (Windows Notepad's "Unicode", PowerShell's `>`) was skipped as a
   binary file with the advice to convert it; it is read, converted to UTF-8 as it streams (plain or compressed),
   giving the data of the same text in UTF-8, with progress over the file's bytes, and the summary names it
   (`transcoded files`, `counts.corpus.encodings`).
2. One stray NUL byte in a file's first 64 KiB skipped the whole file as binary; stray NULs (at most one byte in
   1,000, few other control bytes) are dropped from the lines and counted (`nul lines`), while real binaries
   (random bytes, NumPy arrays, a tar) are still skipped, and UTF-16 without a byte order mark is named as such.
3. CR-only line ends (classic Mac OS) read as one giant line; CR, CR LF and LF all end lines now, also when a read
   splits a CR LF pair.
4. A JSON-lines file not named .jsonl (WikiExtractor --json's `wiki_00`) whose records hold U+2028 (json.dumps
   with ensure_ascii=False writes it as is) was guessed to be `lines` text, its JSON syntax built into the data:
   the format guess and the text of JSONL/CSV/Parquet records cut lines where a text file's lines end (LF, CR LF,
   CR), not where str.splitlines does (U+2028, U+2029, U+0085, VT, FF), so a text reads the same in every format.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import random
import tarfile
from pathlib import Path

import numpy as np
import pytest

from albertlm.data import corpus
from albertlm.data.corpus import CorpusCounts, binary_reason, check_inputs, read_documents
from conftest import shared_path
from test_data_audit22 import _build
from test_formats_audit24 import _documents

ZH = ("text", "zh", "news_zh_1.txt")


def _text(*parts: str) -> str:
    return shared_path(*parts).read_text(encoding="utf-8")


def _shard_bytes(out: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(out.glob("shard-*.bin")))


# -- 1. UTF-16 / UTF-32 with a byte order mark --------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be-bom", "utf-32"])
def test_utf16_and_utf32_with_a_bom_read_as_the_same_text_in_utf8(tmp_path, codec):
    text = _text(*ZH)
    expected, _ = _documents(shared_path(*ZH))
    data = (b"\xfe\xff" + text.encode("utf-16-be")) if codec == "utf-16-be-bom" else text.encode(codec)
    plain = tmp_path / "zh.txt"
    plain.write_bytes(data)
    packed = tmp_path / "zh.txt.xz"
    packed.write_bytes(lzma.compress(data))
    for path in (plain, packed):
        check_inputs([path])
        sizes: list[int] = []
        docs, counts = _documents(path, progress=sizes.append)
        assert docs == expected and counts.binary_files == 0 and counts.invalid_utf8_lines == 0
        assert counts.transcoded_files == 1 and sum(counts.encodings.values()) == 1
        assert "converted to UTF-8" in counts.examples["transcoded_files"]
        assert sum(sizes) == path.stat().st_size   # progress over the file as stored, as for other files


def test_a_utf16_build_writes_the_utf8_builds_data_and_says_it_converted(tmp_path, capsys):
    utf8 = tmp_path / "utf8" / "zh.txt"
    utf16 = tmp_path / "utf16" / "zh.txt.gz"
    for path in (utf8, utf16):
        path.parent.mkdir()
    utf8.write_text(_text(*ZH), encoding="utf-8")
    utf16.write_bytes(gzip.compress(_text(*ZH).encode("utf-16")))   # Notepad's "Unicode", gzipped
    assert _build([utf8], tmp_path / "a") == 0
    capsys.readouterr()
    assert _build([utf16], tmp_path / "b") == 0
    err = capsys.readouterr().err
    assert f"first of transcoded files: {utf16}: UTF-16LE text" in err, err
    assert "binary" not in err
    assert _shard_bytes(tmp_path / "a") == _shard_bytes(tmp_path / "b") != b""
    meta = json.loads((tmp_path / "b" / "meta.json").read_text(encoding="utf-8"))
    assert meta["counts"]["corpus"]["encodings"] == {"UTF-16LE": 1}


def test_undecodable_utf16_is_replaced_and_counted_and_a_cut_file_keeps_its_text(tmp_path):
    text = "First line here.\nSecond line here.\nThird line.\n"
    odd = tmp_path / "odd.txt"   # a lone surrogate in line 2, and an odd last byte (a file cut in a character)
    lone = b"\x00\xd8" + "econd".encode("utf-16-le")   # U+D800 where the S was
    odd.write_bytes(text.encode("utf-16")[:-1].replace("Second".encode("utf-16-le"), lone))
    docs, counts = _documents(odd)
    assert docs == [["First line here.", "\ufffdecond line here.", "Third line.\ufffd"]]
    assert counts.invalid_utf8_lines == 2 and counts.examples["invalid_utf8_lines"].startswith(f"{odd} line 2")
    cut = tmp_path / "cut.txt.gz"   # gzip data cut short: the text before the damage is kept
    cut.write_bytes(gzip.compress((text * 3000).encode("utf-16"))[:-100])
    docs, counts = _documents(cut)
    assert counts.corrupt_files == 1 and "the damage comes after line" in counts.examples["corrupt_files"]
    assert docs[0][:3] == ["First line here.", "Second line here.", "Third line."]


# -- 2. NUL bytes: stray ones in text, or a binary file -----------------------------------------------------------
def test_a_stray_nul_in_text_is_dropped_and_counted_not_the_whole_file_skipped(tmp_path, capsys):
    text = _text("text", "gutenberg", "carroll-alice.txt")
    clean = tmp_path / "clean.txt"
    clean.write_text(text, encoding="utf-8")
    stray = tmp_path / "in" / "alice.txt"
    stray.parent.mkdir()
    cut = text.index("\n", 5000) + 20   # a NUL inside line 2's text, as a damaged download leaves one
    stray.write_bytes(text[:cut].encode() + b"\x00" + text[cut:].encode())
    check_inputs([stray])
    expected, _ = _documents(clean)
    docs, counts = _documents(stray)
    assert docs == expected and counts.binary_files == 0
    assert counts.nul_lines == 1 and "NUL bytes, removed" in counts.examples["nul_lines"]
    assert _build([stray], tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "first of nul lines" in err and "binary" not in err


def test_real_binaries_are_still_skipped_and_utf16_without_a_bom_is_named(tmp_path):
    rng = random.Random(0)
    files = {"random.bin": bytes(rng.randrange(256) for _ in range(70_000)),
             "small.bin": b"\x00\x01\x02" * 100}
    buffer = io.BytesIO()
    np.save(buffer, np.arange(5000, dtype=np.int32))
    files["array.npy"] = buffer.getvalue()
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        data = _text("text", "gutenberg", "carroll-alice.txt").encode()
        info = tarfile.TarInfo("alice.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    files["corpus.tar.bz2"] = bz2.compress(packed.getvalue())
    alice = _text("text", "gutenberg", "carroll-alice.txt")[:20_000]
    files["le.txt"] = alice.encode("utf-16-le")
    files["be.txt"] = alice.encode("utf-16-be")
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [tmp_path / name for name in files]
    check_inputs(paths)
    counts = CorpusCounts()
    assert list(read_documents(paths, counts=counts)) == []
    assert counts.binary_files == len(files) and counts.nul_lines == 0
    assert "a tar archive" in binary_reason(_decompressed_head(files["corpus.tar.bz2"]))
    for order in ("LE", "BE"):
        reason = binary_reason((tmp_path / f"{order.lower()}.txt").read_bytes()[:1 << 16])
        assert f"UTF-16{order} text without a byte order mark" in reason and f"iconv -f UTF-16{order}" in reason


def _decompressed_head(data: bytes) -> bytes:
    return bz2.decompress(data)[:1 << 16]


# -- 3. line ends: CR (classic Mac OS), CR LF, mixed, split across reads --------------------------------------------
def test_cr_only_and_mixed_line_ends_read_as_lines_whatever_the_reads_split(tmp_path, monkeypatch):
    text = _text("text", "gutenberg", "carroll-alice.txt")
    expected, _ = _documents(shared_path("text", "gutenberg", "carroll-alice.txt"))
    lines = text.split("\n")
    variants = {"cr.txt": "\r".join(lines).encode(), "crlf.txt": "\r\n".join(lines).encode(),
                "mixed.txt": "".join(line + ("\r", "\r\n", "\n")[k % 3] for k, line in enumerate(lines)).encode()}
    variants["cr16.txt"] = "\r".join(lines).encode("utf-16")
    variants["cr.txt.gz"] = gzip.compress(variants["cr.txt"])
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        docs, counts = _documents(tmp_path / name)
        assert docs == expected and counts.long_lines_cut == 0, name
    # reads of 7 bytes split CR LF pairs (and UTF-16 characters) everywhere: the same lines
    monkeypatch.setattr(corpus, "_READ_BUFFER", 7)
    for name in ("crlf.txt", "mixed.txt", "cr16.txt"):
        assert _documents(tmp_path / name)[0] == expected, name


def test_a_cr_lf_pair_split_by_any_read_is_one_line_end():
    class OneByte(io.RawIOBase):   # a decompressor handing out one byte at a time
        def __init__(self, data: bytes):
            self.data, self.at = data, 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            chunk = self.data[self.at:self.at + 1]
            buffer[:len(chunk)] = chunk
            self.at += len(chunk)
            return len(chunk)

    text = "a\rb\r\nc\n\rd\r\r\ne\n\nf\r"
    for data in (b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"),
                 b"\x00\x00\xfe\xff" + text.encode("utf-32-be")):
        stream = io.BufferedReader(corpus._Utf8Text(OneByte(data)), 3)
        assert stream.read() == b"a\nb\nc\n\nd\n\ne\n\nf\n", data


# -- 4. U+2028 and friends: one rule for line ends in every format --------------------------------------------------
def test_json_lines_holding_u2028_are_still_json_lines_and_records_read_as_text_files(tmp_path):
    texts = [f"Record {k} starts here.\u2028It goes on after a line separator. Then it ends." for k in range(30)]
    wiki = tmp_path / "AA" / "wiki_00"   # WikiExtractor --json: no .jsonl suffix, json.dumps(ensure_ascii=False)
    wiki.parent.mkdir()
    wiki.write_text("".join(json.dumps({"id": k, "text": t}, ensure_ascii=False) + "\n" for k, t in enumerate(texts)),
                    encoding="utf-8")
    docs, counts = _documents(wiki)
    assert counts.formats == {"jsonl": 1} and len(docs) == len(texts)
    # the same text with the other characters str.splitlines breaks at, as a raw text file and as a record
    odd = "A heading\u2029Its first sentence is here.\x0cPage two starts.\x85Then\u2028more. End."
    raw = tmp_path / "raw.txt"
    raw.write_text(odd + "\n", encoding="utf-8")
    record = tmp_path / "a.jsonl"
    record.write_text(json.dumps({"text": odd}) + "\n", encoding="utf-8")
    assert _documents(raw, fmt="raw")[0] == _documents(record)[0]
