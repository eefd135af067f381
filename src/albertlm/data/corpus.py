"""Stream documents (lists of sentences) from text files, with bounded memory.

Formats (``--format``):
- ``lines``: the BERT/ALBERT layout, one sentence per line, a blank line between documents.
- ``raw``: free text; blank lines separate paragraphs, lines inside a paragraph are joined, and
  sentences are found by :func:`split_sentences`.
- ``jsonl``: one JSON object per line; its text field (``--text-field``, default ``text``) is one document,
  split like ``raw``.
- ``wikiextractor``: ``<doc ...>`` ... ``</doc>`` blocks; each is one document, split like ``raw``
  (the title line that WikiExtractor repeats as the first line is dropped).
- ``auto`` (default): ``.jsonl``/``.json`` -> jsonl; a file starting with ``<doc`` -> wikiextractor;
  otherwise ``raw`` if most lines hold several sentences, else ``lines``.

In every format the end of a file ends a document (google's builder silently merges files that do not end
with a blank line). Undecodable bytes are replaced with U+FFFD and the line is counted.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from albertlm.errors import UserError

FORMATS = ("auto", "lines", "raw", "jsonl", "wikiextractor")

# A sentence ends at . ! ? (plus closing quotes/brackets) followed by space and a likely sentence start,
# or right after CJK full stops. Abbreviations and single initials are protected afterwards.
_SENTENCE_END = re.compile(
    r"""([.!?]["'”’)\]]*)\s+(?=["'“‘(\[]?[A-Z0-9À-ÖØ-Þ\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af])"""
    r"""|([。！？]["'”’」』）]*)\s*""")
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|vs|etc|e\.g|i\.e|cf|No|Vol|Fig|Gen|Col|Lt|Sgt|Capt|Rev|Inc|Ltd|Co|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)|\b[A-Z])\.$"
)
_DOC_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")
_DOC_TITLE = re.compile(r'\btitle="([^"]*)"')
_SNIFF_BYTES = 1 << 16
# Documents are cut at a sentence boundary beyond this size, so memory stays bounded even for a corpus
# that is one giant document (counted as `documents_split`).
MAX_DOCUMENT_CHARS = 32_000_000


@dataclass
class Document:
    """One document: its global index (input order, independent of workers) and its sentences."""

    index: int
    sentences: list[str]

    @property
    def num_chars(self) -> int:
        return sum(map(len, self.sentences))


@dataclass
class CorpusCounts:
    """What the reader saw and skipped; printed in the build summary."""

    files: int = 0
    empty_files: int = 0
    binary_files: int = 0
    invalid_utf8_lines: int = 0
    bad_json_lines: int = 0
    documents_split: int = 0
    documents: int = 0
    sentences: int = 0
    chars: int = 0
    formats: dict[str, int] = field(default_factory=dict)


def split_sentences(text: str) -> list[str]:
    """Rule-based sentence splitter for raw text: cut after . ! ? before a capital, digit or quote,
    except after common abbreviations and single initials ("Mr.", "e.g.", "J."); also after 。！？."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end(1) if match.group(1) else match.end(2)
        candidate = text[start:end].strip()
        if not candidate or _ABBREVIATION.search(candidate[-12:]):  # the tail: linear on huge paragraphs
            continue
        pieces.append(candidate)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        pieces.append(tail)
    return [p for p in pieces if p]


def find_input_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """Files named directly plus every non-hidden file under named directories, sorted (deterministic)."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not _is_hidden(p.relative_to(path)))
            if not found:
                raise UserError(f"no files found in directory {path}")
            files.extend(found)
        else:
            raise UserError(f"input not found: {path}")
    if not files:
        raise UserError("no input files given")
    return files


def _is_hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def detect_format(path: Path, head: bytes) -> str:
    """Guess a file's format from its name and first 64 KiB (see the module docstring)."""
    if path.suffix.lower() in (".jsonl", ".json"):
        return "jsonl"
    text = head.decode("utf-8", errors="replace")
    if text.lstrip().startswith("<doc"):
        return "wikiextractor"
    lines = [line for line in text.splitlines()[:-1] if line.strip()] or [text]
    multi = sum(len(split_sentences(line)) >= 2 for line in lines)
    return "raw" if multi > len(lines) / 2 else "lines"


def read_documents(files: Sequence[Path], fmt: str = "auto", text_field: str = "text",
                   counts: CorpusCounts | None = None) -> Iterator[Document]:
    """Yield documents from the files in order; memory is bounded by the largest document.

    Empty and binary files are skipped and counted in ``counts``."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    counts = counts if counts is not None else CorpusCounts()
    index = 0
    for path in files:
        counts.files += 1
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
        if not head.strip():
            counts.empty_files += 1
            continue
        if b"\x00" in head:
            counts.binary_files += 1
            continue
        file_format = detect_format(path, head) if fmt == "auto" else fmt
        counts.formats[file_format] = counts.formats.get(file_format, 0) + 1
        for sentences in _READERS[file_format](path, counts, text_field):
            if sentences:
                counts.documents += 1
                counts.sentences += len(sentences)
                counts.chars += sum(map(len, sentences))
                yield Document(index, sentences)
                index += 1


def _decoded_lines(path: Path, counts: CorpusCounts) -> Iterator[str]:
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                counts.invalid_utf8_lines += 1
                line = raw.decode("utf-8", errors="replace")
            yield line.strip()


def _read_lines(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[list[str]]:
    sentences: list[str] = []
    num_chars = 0
    for line in _decoded_lines(path, counts):
        if line:
            sentences.append(line)
            num_chars += len(line)
        if sentences and (not line or num_chars > MAX_DOCUMENT_CHARS):
            counts.documents_split += bool(line)
            yield sentences
            sentences, num_chars = [], 0
    yield sentences  # the end of a file ends a document


def _paragraph_sentences(lines: Sequence[str]) -> list[str]:
    """Blank lines separate paragraphs; lines of one paragraph are joined before splitting sentences."""
    sentences: list[str] = []
    paragraph: list[str] = []
    for line in list(lines) + [""]:
        if line:
            paragraph.append(line)
        elif paragraph:
            sentences.extend(split_sentences(" ".join(paragraph)))
            paragraph = []
    return sentences


def _read_raw(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[list[str]]:
    sentences: list[str] = []
    paragraph: list[str] = []
    num_chars = 0
    for line in _with_final_blank(_decoded_lines(path, counts)):
        if line:
            paragraph.append(line)
            num_chars += len(line)
        elif paragraph:
            sentences.extend(split_sentences(" ".join(paragraph)))
            paragraph = []
            if num_chars > MAX_DOCUMENT_CHARS:
                counts.documents_split += 1
                yield sentences
                sentences, num_chars = [], 0
    yield sentences  # a raw file is one document


def _with_final_blank(lines: Iterator[str]) -> Iterator[str]:
    yield from lines
    yield ""


def _read_jsonl(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[list[str]]:
    for line in _decoded_lines(path, counts):
        if not line:
            continue
        try:
            record = json.loads(line)
            text = record[text_field]
        except (ValueError, KeyError, TypeError):
            counts.bad_json_lines += 1
            continue
        if isinstance(text, str):
            yield _paragraph_sentences([part.strip() for part in text.splitlines()])
        else:
            counts.bad_json_lines += 1


def _read_wikiextractor(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[list[str]]:
    lines: list[str] | None = None
    title = None
    for line in _decoded_lines(path, counts):
        if _DOC_OPEN.match(line):
            found = _DOC_TITLE.search(line)
            lines, title = [], (found.group(1) if found else None)
        elif line == "</doc>":
            if lines is not None:
                if lines and title is not None and lines[0] == title:
                    lines = lines[1:]
                yield _paragraph_sentences(lines)
            lines = None
        elif lines is not None:
            lines.append(line)
    if lines:  # a file cut off before its closing tag still ends a document
        yield _paragraph_sentences(lines)


_READERS = {"lines": _read_lines, "raw": _read_raw, "jsonl": _read_jsonl, "wikiextractor": _read_wikiextractor}
