"""Audit 22 of `albertlm data build` as a user with real data: a sentence-per-line file without blank lines was
one document of up to 32 M characters (~600 MB a worker at dupe factor 10), cut without a word on why; a corrupt
or truncated compressed file was named without how far the reading got or what was kept; `--workers 64` on a
2-core machine started 64 processes; meta.json and word_starts.npy were renamed into --out without an fsync; the
masking docs called every non-Latin SentencePiece piece a word (Hangul and Cyrillic pieces continue words)."""
from __future__ import annotations

import bz2
import gzip
import lzma
import os
from pathlib import Path

import pytest

import albertlm.data.build as build_module
import albertlm.data.corpus as corpus
from albertlm.cli.main import main
from albertlm.data.corpus import CorpusCounts, read_documents
from albertlm.tokenization.sentencepiece import _is_start_piece
from conftest import alice_documents, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "data.md"


def _build(inputs, out: Path, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress", *extra])


def _korean_sentences(path: Path) -> Path:
    """One Korean sentence a line, no blank line: KorNLI's premises (the first column of its dev file)."""
    rows = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:]
    premises = dict.fromkeys(row.split("\t")[0].strip() for row in rows)   # each premise once, in order
    path.write_text("".join(f"{p}\n" for p in premises if p), encoding="utf-8")
    return path


# -- 1. a sentence-per-line file without blank lines: documents of bounded size, cut with a note -----------------
def test_a_sentence_file_without_blank_lines_is_cut_into_bounded_documents_with_a_note(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_CHARS", 10_000)
    text = _korean_sentences(tmp_path / "ko.txt")
    counts = CorpusCounts()
    docs = list(read_documents([text], counts=counts))
    longest_line = max(map(len, text.read_text(encoding="utf-8").splitlines()))
    assert len(docs) >= 4 and counts.documents_split == len(docs) - 1
    assert all(doc.num_chars <= 10_000 + longest_line for doc in docs)
    assert sum(len(doc.sentences) for doc in docs) == len(text.read_text(encoding="utf-8").splitlines())
    assert _build([text], tmp_path / "out") == 0
    err = capsys.readouterr().err
    note = [line for line in err.splitlines() if "first of documents split" in line]
    assert len(note) == 1, err
    first_cut = 1 + len(docs[0].sentences)   # the line that starts the second document
    assert f"{text} line {first_cut}: a document over 10,000 characters is cut" in note[0]
    assert "blank line between documents" in note[0]


def test_the_document_cap_cuts_no_real_book_and_bounds_a_worker():
    books = sorted(shared_path("text", "gutenberg").glob("*.txt"))
    longest = max(len(book.read_text(encoding="utf-8")) for book in books)
    assert 3 * longest < corpus.MAX_DOCUMENT_CHARS <= 10_000_000     # 32 M cost ~600 MB a worker at dupe 10
    assert "Documents over 10 M characters" in DOCS.read_text(encoding="utf-8")


def test_a_document_cut_in_a_jsonl_record_is_named_with_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_CHARS", 2_000)
    sentences = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").split("\n")
    record = '{"text": "' + " ".join(s.replace('"', "'") for s in sentences if s.strip()) + '"}'
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "A short one."}\n' + record + "\n", encoding="utf-8")
    counts = CorpusCounts()
    assert len(list(read_documents([path], counts=counts))) > 2
    assert counts.examples["documents_split"].startswith(f"{path} line 2: a document over 2,000 characters")


# -- 2. a damaged compressed file: how far the reading got, and what was kept -----------------------------------
@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress], ids=["gz", "xz"])
def test_a_truncated_compressed_file_says_how_far_it_got_and_what_was_kept(tmp_path, compress):
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_bytes()
    packed = compress(text)
    cut = tmp_path / "alice.txt.z"
    cut.write_bytes(packed[:len(packed) * 6 // 10])
    counts = CorpusCounts()
    docs = list(read_documents([cut], counts=counts))
    lines = sum(len(doc.sentences) for doc in docs)
    assert counts.corrupt_files == 1 and lines > 500
    example = counts.examples["corrupt_files"]
    read_lines = int(example.split("the damage comes after line ")[1].split(" ")[0].replace(",", ""))
    assert read_lines >= lines   # blank lines are read, not kept as sentences
    assert f"of the file's {len(packed) * 6 // 10:,})" in example and "bytes of text" in example
    assert "were kept (the last possibly cut short)" in example
    text_bytes = int(example.split("(")[1].split(" bytes of text")[0].replace(",", ""))
    assert 0 < text_bytes < len(text) and text[:text_bytes].count(b"\n") == read_lines - 1


def test_a_compressed_file_damaged_in_its_first_block_says_nothing_was_read(tmp_path, capsys):
    packed = bz2.compress(shared_path("text", "gutenberg", "carroll-alice.txt").read_bytes())   # one 900 kB block
    cut = tmp_path / "alice.txt.bz2"
    cut.write_bytes(packed[:len(packed) // 2])
    assert _build([alice_documents(tmp_path, 60), cut], tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert (f"first of corrupt files: {cut}: EOFError" in err and "no text could be decompressed before the damage"
            f" (the file has {len(packed) // 2:,} bytes), so nothing of it was read" in err), err


# -- 3. --workers beyond the cores this process may use -----------------------------------------------------------
def test_more_workers_than_cores_are_cut_to_the_cores_with_one_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build_module, "available_cores", lambda: 1, raising=False)
    used = []
    results = build_module._results

    def spy(chunks, ctx, workers):
        used.append(workers)
        return results(chunks, ctx, workers)
    monkeypatch.setattr(build_module, "_results", spy)
    assert _build([alice_documents(tmp_path, 60)], tmp_path / "out", "--workers", "3") == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "--workers" in line]
    assert used == [1] and len(warnings) == 1, warnings
    assert warnings[0].startswith("albertlm data: warning: --workers 3 is more than the 1 CPU core(s)")


# -- 4. what the build renames into --out is on disk first ------------------------------------------------------
def test_meta_word_starts_and_the_out_directory_are_fsynced(tmp_path, monkeypatch):
    synced = set()
    fsync = os.fsync

    def spy(fd):
        stat = os.fstat(fd)
        synced.add((stat.st_dev, stat.st_ino))
        return fsync(fd)
    monkeypatch.setattr(os, "fsync", spy)
    out = tmp_path / "out"
    assert _build([alice_documents(tmp_path, 60)], out) == 0
    for path in (out / "meta.json", out / "word_starts.npy", out / "shard-00000.bin", out):
        stat = path.stat()
        assert (stat.st_dev, stat.st_ino) in synced, path


# -- 5. the docs say which SentencePiece pieces start a word --------------------------------------------------
def test_the_masking_docs_say_which_pieces_continue_a_word():
    # google's `_is_start_piece` makes every piece holding a letter outside a-z a word; albertlm's keeps that for
    # scripts written without spaces only (the rule `SentencePieceTokenizer.word_start_mask` applies to each piece)
    assert not any(map(_is_start_piece, ["를", "ет", "ία", "ção"]))
    assert all(map(_is_start_piece, ["中国", "の", "▁를", ",", "2019"]))
    docs = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "non-Latin pieces as google's" not in docs
    assert "pieces of Hangul, Cyrillic, Greek or accented Latin continue a word" in docs
    assert "Chinese-BERT-wwm segments the text with the LTP word segmenter" in docs
