"""Stream documents (lists of sentences) from text, compressed text, Parquet and Arrow files, with bounded memory.

Formats (``--format``):
- ``lines``: the BERT/ALBERT layout, one sentence per line, a blank line between documents.
- ``raw``: free text; blank lines separate paragraphs, lines inside a paragraph are joined, and
  sentences are found by :func:`split_sentences`.
- ``jsonl``: one JSON object per line; its text field (``--text-field``, default ``text``) is one document,
  split like ``raw``.
- ``wikiextractor``: ``<doc ...>`` ... ``</doc>`` blocks; each is one document, split like ``raw``
  (the title line that WikiExtractor repeats as the first line is dropped).
- ``parquet``: a Parquet file (Hugging Face Hub datasets, ``Dataset.to_parquet``); each row's
  ``--text-field`` column is one document, split like ``raw``. Read one record batch at a time.
- ``arrow``: an Arrow IPC stream or file, as ``datasets.Dataset.save_to_disk`` writes them
  (``data-00000-of-00001.arrow``); rows as for ``parquet``, one record batch at a time.
- ``csv``: comma-separated values with a header line (``Dataset.to_csv``, pandas, spreadsheets; quoted fields
  may hold commas, quotes and line breaks); each row's ``--text-field`` column is one document, split like ``raw``.
- ``auto`` (default): Parquet and Arrow by their magic bytes; ``.jsonl``/``.json``/``.ndjson`` -> jsonl;
  ``.csv`` -> csv (it was read as text: the header, quotes and every column built into the data); a file
  starting with ``<doc`` -> wikiextractor; a file most of whose first lines are JSON objects -> jsonl (whatever its
  name: WikiExtractor ``--json`` writes ``wiki_00``); otherwise ``raw`` if most lines hold several sentences, else
  ``lines``.

The text formats may be compressed: gzip, bzip2, xz or zstd, recognised by their magic bytes (the name's
``.gz``/``.bz2``/``.xz``/``.zst`` is dropped before the name-based guess, so ``a.jsonl.zst`` is JSONL). A
Parquet or Arrow file is always read as such, whatever text ``--format`` says.

Text is UTF-8, or UTF-16/UTF-32 with a byte order mark, converted to UTF-8 as it streams (`transcoded_files`,
`encodings`; decided once at open, `_open_lines`: UTF-8 text is read without a converting layer); lines end at LF,
CR LF or CR in every format (`_TextSource`, `_Utf8Text`, `_text_lines`). A file that starts with a UTF-16 byte
order mark but does not read as UTF-16 (Latin-1 text beginning "ÿþ") is a UserError (`misread_wide`).

In every format the end of a file ends a document (google's builder silently merges files that do not end
with a blank line). Damage is skipped and counted, never fatal: undecodable bytes are replaced with U+FFFD
(`invalid_utf8_lines`), stray NUL bytes dropped (`nul_lines`; a file with more is binary, `binary_reason`),
JSONL lines that are not JSON objects with a string text field (`bad_json_lines`), Parquet/Arrow rows whose
text is null (`bad_rows`), JSONL records and Parquet/Arrow rows whose text is empty or blank (`empty_records`),
and a compressed or Parquet/Arrow file that is corrupt or cut short keeps what was read before the damage
(`corrupt_files`), a WikiExtractor `<doc>` left open is kept (`unclosed_documents`) and text outside `<doc>`
blocks skipped (`lines_outside_documents`); a line over MAX_LINE_BYTES is read in pieces (`long_lines_cut`). A
JSONL record or a CSV line over MAX_RECORD_BYTES (64 MiB) is the one damage that is fatal: a UserError naming the file
and line (records are read whole; `max_record_bytes=` of `read_documents` and `check_inputs` sets another limit).
The first case of each kind is kept in `CorpusCounts.examples` (file, line or row, what is wrong). A wrong
``--text-field`` (a Parquet or Arrow file without that column, a JSONL file none of whose first records has it)
is a UserError, found by :func:`check_inputs` before any work starts; what it learns of each file's head (its
format, compression, encoding, skip: `FileFacts`) can be handed on to :func:`read_documents`, which then reads no head
again.
"""
from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import html
import io
import itertools
import json
import lzma
import os
import re
import shlex
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from albertlm.errors import UserError, say_warning

FORMATS = ("auto", "lines", "raw", "jsonl", "wikiextractor", "parquet", "arrow", "csv")
TABLE_FORMATS = ("parquet", "arrow")
COMPRESSIONS = {"gz": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00", "zst": b"\x28\xb5\x2f\xfd"}
COMPRESSED_SUFFIXES = {".gz": "gz", ".gzip": "gz", ".bz2": "bz2", ".xz": "xz", ".zst": "zst", ".zstd": "zst"}
TABLE_SUFFIXES = (".parquet", ".arrow", ".arrows")   # .arrows: the Arrow IPC stream format's own suffix
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")   # read as JSON lines by --format auto, whatever they hold
CSV_SUFFIXES = (".csv",)                          # read as CSV (a header line, then rows) by --format auto
TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".ndjson", ".csv", ".gz", ".gzip", ".bz2", ".xz", ".zst", ".zstd")
# csv's default limit on one field (131072 characters) is below a long article. Ours keeps memory bounded: an
# unclosed quote would otherwise read the rest of a many-GB file into one field (it ends the file as a bad row)
CSV_FIELD_LIMIT = 4 * 10_000_000
ARROW_STREAM = b"\xff\xff\xff\xff"  # the continuation marker that starts an Arrow IPC stream

# A sentence ends at . ! ? (plus closing quotes/brackets) followed by space and a likely sentence start (see
# `_starts_sentence`: the regex finds the next word character, Python judges it, whatever the script), or right
# after CJK full stops. Abbreviations and single initials are protected afterwards.
# Ideographs, kana, CJK radicals, punctuation and full-width forms: scripts written without spaces (Hangul is
# written with them). A Latin abbreviation right after one ("总统Mr. Smith") starts a word there.
# Half-width katakana and their marks (U+FF61-FF9F: "ﾃﾞｰﾀ", "｡｢｣") are Japanese too; half-width Hangul (FFA0-) is not.
_UNSPACED = "\u2e80-\u2fdf\u3001-\u30ff\uff01-\uff9f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003ffff"
_SENTENCE_END = re.compile(
    r"""(?P<end>[.!?]["'”’)\]]*)\s+(?=["'“‘(\[]?(?P<next>\w))"""
    # a run of CJK full stops is one end ("真的吗？！", "等等。。。"); so is ASCII ! ? right before Chinese. Japanese
    # also ends sentences with the half-width ｡ and, in technical writing (with ，), the full-width ．, which is
    # no end between digits or before a letter or digit (１．５, ．ｊｐ)
    r"""|(?P<cjk>(?:[。！？｡]|(?<![0-9０-９])．(?![0-9A-Za-z０-９Ａ-Ｚａ-ｚ]))[。！？｡．!?]*["'”’」』）｣]*"""
    r"""|[!?]+["'”’)\]」』）｣]*(?=["'“‘(\[「『（｢]?[""" + _UNSPACED + r"""]))\s*""")
# Japanese quotes and brackets: a full stop inside an open 「...」 ends no sentence (when the bracket closes later
# in the text: a stray opener does not stop the splitting), and a quote followed by the quotation particle と /
# って or by の / を goes on ("「行こう！」と彼は言った。" is one sentence)
_BRACKETS = {"「": "」", "『": "』", "（": "）", "｢": "｣"}
_BRACKET_WINDOW = 500  # characters after a full stop searched for the closing bracket
_QUOTE_CONTINUES = "とっのを"
_QUOTE_NEW_SENTENCE = ("ところ", "とても", "とにかく", "とりあえず", "とはいえ", "ともかく")  # words, no particle
_ABBREVIATION = re.compile(
    r"(?<![^\W" + _UNSPACED + r"])(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|vs|etc|e\.g|i\.e|cf|No|Vol|Fig|Gen|Col|Lt|Sgt|Capt|Rev|Inc|Ltd|Co|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.$"
)
_UNSPACED_CHAR = re.compile(f"[{_UNSPACED}]")
_LINE_END = re.compile(r"\r\n?|\n")   # the line ends of every format (see `_Utf8Text`, `_text_lines`)
_DOC_OPEN = re.compile(r"^<doc\b[^>]*>\s*$")
_DOC_TITLE = re.compile(r'\btitle="([^"]*)"')
_SNIFF_BYTES = 1 << 16
_READ_BUFFER = 1 << 20  # bytes per read from a decompressor
ZSTD_MAX_WINDOW = 1 << 31  # the largest zstd window read (zstd's own maximum; `zstd -d` needs --long=31 for it)
ZSTD_MAX_STEP = 1 << 13    # compressed bytes given to the zstd decompressor at once, at most (`_ZstdReader`)
ZSTD_STEP_OUTPUT = 1 << 20  # the text one step should give, about: smaller steps where the text repeats
TABLE_BATCH_ROWS = 1024  # Parquet rows per record batch (Arrow files keep the batches they were written with)
JSONL_CHECK_RECORDS = 100  # check_inputs: records of a JSONL file searched for the text field
# Documents are cut at a sentence boundary beyond this size, so memory stays bounded even for a corpus
# that is one giant document (counted as `documents_split`, the first cut named). Three times the longest novels
# (War and Peace: 3.2 M characters), so it cuts only text that has no document breaks (a sentence-per-line file
# without blank lines, a raw file without them is one document): a build holds a chunk's records for every
# dupe pass at once, about 15 bytes a character at dupe factor 10, and at 32 M characters a worker needed ~600 MB.
MAX_DOCUMENT_CHARS = 10_000_000
# A text line longer than this (a corpus without line breaks, such as text8) is read in pieces cut at the last
# space or tab before the limit (else at a character boundary), and a paragraph is split into sentences as it
# grows past MAX_PARAGRAPH_CHARS, so neither a line nor a paragraph is ever held whole (`long_lines_cut`).
# JSONL lines are read whole: a record is one JSON value.
MAX_LINE_BYTES = 1 << 20
MAX_PARAGRAPH_CHARS = 1 << 20
# A JSONL record and a CSV line are read whole (JSON cannot be parsed in pieces, nor a CSV row), up to this many bytes
# (the line end not counted); a longer one is a UserError naming its file and line (`record_too_long`), read no
# further than the limit. A 1 GB line (a JSON array of every record written on one line, a CSV file whose line
# breaks were lost) was read whole, then decoded and parsed: several GB in each worker. 64 MiB is six times the
# text a document may hold (MAX_DOCUMENT_CHARS) and far more than any one article; CSV fields have their own limit
# (CSV_FIELD_LIMIT, a row that goes over it ends the file as a bad row).
MAX_RECORD_BYTES = 1 << 26


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
    """What the reader saw and skipped; printed in the build summary. `examples`: the first case of each
    skip counter, as "file line N: what is wrong"."""

    files: int = 0
    empty_files: int = 0
    binary_files: int = 0
    transcoded_files: int = 0
    invalid_utf8_lines: int = 0
    nul_lines: int = 0
    bad_json_lines: int = 0
    bad_rows: int = 0
    empty_records: int = 0
    corrupt_files: int = 0
    documents_split: int = 0
    long_lines_cut: int = 0
    unclosed_documents: int = 0
    lines_outside_documents: int = 0
    documents: int = 0
    sentences: int = 0
    chars: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    compressed: dict[str, int] = field(default_factory=dict)
    encodings: dict[str, int] = field(default_factory=dict)   # files read in UTF-16/UTF-32 (byte order mark)
    examples: dict[str, str] = field(default_factory=dict)

    def cut_document(self, where: str) -> None:
        """Count a document cut at MAX_DOCUMENT_CHARS (`documents_split`), naming the first cut: where the next
        part starts and why (a file without blank lines looks like one document to the `lines` reader)."""
        self.skip("documents_split", f"{where}: a document over {MAX_DOCUMENT_CHARS:,} characters is cut at a "
                                     "sentence boundary here (a blank line between documents keeps them apart)")

    def skip(self, kind: str, where: str) -> None:
        """Count one skipped (or repaired) item of `kind`, keeping the first example."""
        setattr(self, kind, getattr(self, kind) + 1)
        self.examples.setdefault(kind, where)

    def describe_skipped(self) -> str:
        """What was skipped or repaired, each kind with its first example ("2 binary files, first: a.bin: NUL
        bytes ..."; "; " between kinds), or "" if nothing was."""
        return "; ".join(f"{getattr(self, kind):,} {kind.replace('_', ' ')}, first: {example}"
                         for kind, example in self.examples.items())


def split_sentences(text: str) -> list[str]:
    """Rule-based sentence splitter for raw text: cut after . ! ? before a capital (of any script: Latin,
    Greek, Cyrillic, ...), a letter of a script without case (Chinese, Korean, Arabic, ...), a digit, or a
    quote or bracket before one of them, except after common abbreviations and single initials ("Mr.",
    "e.g.", "J.", "А."); also after 。！？｡ and ． (not inside 「」『』（） that close later, nor before と after
    a closing quote: "「はい。」と答えた。" is one sentence)."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.group("end"):
            if not _starts_sentence(match.group("next")):
                continue
            end = match.end("end")
        else:
            end = match.end("cjk")
            if _quote_goes_on(text, start, end, match.end()):
                continue
        candidate = text[start:end].strip()
        if not candidate or _abbreviated(candidate[-12:]):  # the tail: linear on huge paragraphs
            continue
        pieces.append(candidate)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        pieces.append(tail)
    return [p for p in pieces if p]


def _quote_goes_on(text: str, start: int, end: int, after: int) -> bool:
    """A CJK full stop at text[:end] that ends no sentence: inside a bracket opened since `start` and closed
    within the next _BRACKET_WINDOW characters, or a closing quote followed by a quotation particle."""
    if text[end - 1:end] in "」』｣" and text[after:after + 1] in _QUOTE_CONTINUES:
        return bool(text[after:after + 1]) and not text.startswith(_QUOTE_NEW_SENTENCE, after)
    span = text[start:end]
    for opener, closer in _BRACKETS.items():
        if span.count(opener) > span.count(closer) and closer in text[end:end + _BRACKET_WINDOW]:
            return True
    return False


def _starts_sentence(char: str) -> bool:
    """A word character that may start a sentence: a digit, or a letter that is not lowercase (a capital of
    any script, or a letter of a script without case)."""
    return char.isdigit() or (char.isalpha() and not char.islower())


def _abbreviated(tail: str) -> bool:
    """The text before a full stop ends with a known abbreviation or a single capital (an initial: "J.",
    "А.", "Ł.")."""
    if len(tail) >= 2 and tail[-1] == "." and tail[-2].isupper() and (
            len(tail) == 2 or not _is_word(tail[-3]) or _UNSPACED_CHAR.match(tail[-3])):
        return True
    return _ABBREVIATION.search(tail) is not None


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


# -- finding the input files -------------------------------------------------------------------------------
def find_input_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """Files named directly plus the files under named directories, sorted (deterministic); a quoted glob
    pattern gives the files it matches (`_pattern_files`).

    A directory gives every non-hidden file below it (also below its links to directories), except: a `datasets.save_to_disk` directory
    (state.json) gives its Arrow files in the order state.json lists them; a directory tree holding
    Parquet or Arrow files gives only those (a Hub dataset's README.md and JSON metadata are not text);
    a DatasetDict directory (dataset_dict.json) is refused, naming its splits, so that test splits are
    never mixed into pretraining data by accident; so is a data build's directory (binary shards).

    A file reached twice (`dir dir/a.txt`, a file named twice, a symbolic link to it) is read once, where it
    first comes, and the dropped duplicates are named in one warning line on stderr (to give a file more
    weight, copy it)."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if not os.path.lexists(path) and _glob_magic(os.fspath(item)):
            files.extend(_pattern_files(os.fspath(item)))
        elif path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(_directory_files(path))
        elif path.exists():   # <(zcat a.gz), a FIFO, /dev/stdin: each file is opened more than once
            raise UserError(f"input {path} is not a file or a directory (a pipe such as <(zcat ...), or a device); "
                            "write it to a file first (compressed .gz/.bz2/.xz/.zst files are read as they are)")
        else:
            raise UserError(f"input not found: {path}")
    if not files:
        raise UserError("no input files given")
    return _without_duplicates(files)


def _glob_magic(text: str) -> bool:
    """Whether an --input names a glob pattern (holds * ? or [)."""
    return any(char in text for char in "*?[")


def _pattern_files(pattern: str) -> list[Path]:
    """The files a quoted glob pattern matches (`'wiki/*/wiki_*'`, `'data/**/*.parquet'`: google's builder
    takes patterns, and a shell cannot pass a million names), sorted; a directory it matches gives its files
    as a named directory does. `**` goes into subdirectories; a file reached twice through the one pattern
    (`dir/**` matches a directory and its files) is taken once; hidden names match only a pattern that
    starts with a dot; `**` follows symbolic links to directories, but not one back to a directory above
    (`_glob_paths`). No file is a UserError."""
    files: list[Path] = []
    for match in sorted(_glob_paths(pattern)):
        path = Path(match)
        if path.is_dir():
            if next(_files_below(path), None) is not None:
                files.extend(_directory_files(path))
        elif path.is_file():
            files.append(path)
    if not files:
        raise UserError(f"input not found: no file matches the pattern {pattern}")
    seen: set[Path] = set()
    return [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]


def _glob_paths(pattern: str) -> list[str]:
    """`glob.glob(pattern, recursive=True)`, except that a `**` does not follow a symbolic link back to a directory
    above it (a loop), as a named directory's listing does not (`_files_below`): glob's own `**` went round such a
    loop until the system refused the path (ELOOP, 40 links), giving each file below it dozens of times, and with two
    loops (`ln -s . self` beside `ln -s .. up`) it never ended. Patterns without a `**` part are glob's."""
    import glob

    if os.altsep:
        pattern = pattern.replace(os.altsep, os.sep)
    drive, anchored = os.path.splitdrive(pattern)   # Windows: "C:" or "\\\\server\\share", the anchor, no part
    parts = [part for part in anchored.split(os.sep) if part]
    if "**" not in parts:
        return glob.glob(pattern, recursive=True)
    base = drive + (os.sep if anchored.startswith(os.sep) else "")
    found = list(_glob_below(base, parts, frozenset()))
    if pattern.endswith(os.sep):
        found = [os.path.join(path, "") for path in found if os.path.isdir(path)]
    return found


def _glob_below(base: str, parts: list[str], ancestors: frozenset[str]) -> Iterator[str]:
    """The paths below the directory `base` ("" the working directory) matching the pattern `parts` (glob's rules:
    a `*` or `?` part matches no hidden name unless it starts with a dot, `**` any depth of non-hidden
    directories, and alone at the end every non-hidden file and directory below too); `ancestors`: the real paths
    of the directories `**` came through, whose links are not followed again."""
    import fnmatch

    if not parts:
        yield base
        return
    head, rest = parts[0], parts[1:]
    if head == "**":
        ancestors = ancestors | {os.path.realpath(base or os.curdir)}
        if rest:
            yield from _glob_below(base, rest, ancestors)
            for path, directory, below in _walk(base, ancestors):
                if directory:
                    yield from _glob_below(path, rest, below)
        else:
            yield os.path.join(base, "")
            yield from (path for path, _, _ in _walk(base, ancestors))
        return
    if _glob_magic(head):
        matches = [(path, directory) for name, path, directory in _entries(base)
                   if fnmatch.fnmatchcase(name, head) and (head.startswith(".") or not name.startswith("."))]
    else:
        path = os.path.join(base, head)
        matches = [(path, os.path.isdir(path))] if os.path.lexists(path) else []
    for path, directory in matches:
        if not rest:
            yield path
        elif directory:
            yield from _glob_below(path, rest, ancestors)


def _walk(base: str, ancestors: frozenset[str]) -> Iterator[tuple[str, bool, frozenset[str]]]:
    """(path, whether it is a directory, the real paths of the directories above it and of itself) of every
    non-hidden entry below `base`, sorted by name, through links to directories except those to one of `ancestors`
    (the real paths of `base` and the directories above it): a loop."""
    for name, path, directory in _entries(base):
        if name.startswith("."):
            continue
        if not directory:
            yield path, False, ancestors
            continue
        real = os.path.realpath(path)
        if real in ancestors:   # a link back to a directory above: a loop
            continue
        below = ancestors | {real}
        yield path, True, below
        yield from _walk(path, below)


def _entries(directory: str) -> list[tuple[str, str, bool]]:
    """(name, path, whether it is a directory, through links) of each entry of `directory` ("": the working
    directory), sorted by name; none where it cannot be listed."""
    try:
        with os.scandir(directory or os.curdir) as entries:
            found = []
            for entry in entries:
                try:
                    directory_entry = entry.is_dir()
                except OSError:
                    directory_entry = False
                found.append((entry.name, os.path.join(directory, entry.name), directory_entry))
    except OSError:
        return []
    return sorted(found)


def _without_duplicates(files: list[Path]) -> list[Path]:
    """`files` with every file after its first occurrence dropped (the same file: the same resolved path)."""
    seen: set[Path] = set()
    kept: list[Path] = []
    dropped: list[Path] = []
    for path in files:
        key = path.resolve()
        if key in seen:
            dropped.append(path)
        else:
            seen.add(key)
            kept.append(path)
    if dropped:
        named = ", ".join(map(str, dropped[:3])) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
        say_warning(f"{len(dropped)} input file(s) given more than once are read once: {named} "
                    "(to give a file more weight, copy it)")
    return kept


def _directory_files(directory: Path) -> list[Path]:
    if (directory / "dataset_dict.json").is_file():
        splits = _read_json_file(directory / "dataset_dict.json").get("splits") or []
        example = directory / (splits[0] if splits else "train")
        raise UserError(f"{directory} is a datasets DatasetDict with splits {', '.join(map(str, splits)) or '?'}: "
                        f"pass one split's directory, e.g. --input {example}")
    if (directory / "word_starts.npy").is_file() and any(directory.glob("meta*.json")):
        raise UserError(f"{directory} is the output of `albertlm data build` (shards, not text); pass the text "
                        "it was built from")
    if (directory / "state.json").is_file():
        state = _read_json_file(directory / "state.json")
        names = [entry.get("filename") for entry in state.get("_data_files") or [] if isinstance(entry, dict)]
        if names:
            missing = [n for n in names if not isinstance(n, str) or not (directory / n).is_file()]
            if missing:
                raise UserError(f"{directory / 'state.json'} lists data files that are missing: {missing[:3]}")
            return [directory / n for n in names]
    found = sorted(_files_below(directory))
    if not found:
        raise UserError(f"no files found in directory {directory}")
    tables = [p for p in found if p.suffix.lower() in TABLE_SUFFIXES]
    skipped = [p for p in found if p.suffix.lower() in TEXT_SUFFIXES] if tables else []
    if skipped:     # a Hub dataset's README.md / JSON are not text; a .txt beside the tables may be the user's
        say_warning(f"{directory} holds Parquet/Arrow files, so only they are read; {len(skipped)} text file(s) "
                    f"beside them are not (e.g. {skipped[0].relative_to(directory)}): name them with --input to "
                    "read them too")
    return tables or found


def _files_below(directory: Path, ancestors: frozenset[str] = frozenset()) -> Iterator[Path]:
    """The non-hidden files below `directory`, also those under symbolic links to directories (a corpus
    folder of links to where the data lies, which `Path.rglob` skipped without a word); a link back to a
    directory above it (a loop) is not followed. A file reached by two ways is given twice, and
    `_without_duplicates` keeps the first. Unsorted."""
    real = os.path.realpath(directory)
    if real in ancestors:
        return
    ancestors = ancestors | {real}
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = directory / entry.name
        if entry.is_dir():            # follows a link to a directory
            yield from _files_below(path, ancestors)
        elif entry.is_file():
            yield path


def _read_json_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data


# -- what a file is ----------------------------------------------------------------------------------------
def detect_format(path: Path, head: bytes) -> str:
    """Guess a text file's format from its name and first 64 KiB (see the module docstring); `path` is
    the name without a compression suffix."""
    if path.suffix.lower() in JSONL_SUFFIXES:
        return "jsonl"
    if path.suffix.lower() in CSV_SUFFIXES:
        return "csv"
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    if text.lstrip().startswith("<doc"):
        return "wikiextractor"
    if _json_lines(text, complete=len(head) < _SNIFF_BYTES):
        return "jsonl"
    lines = [line for line in _text_lines(text)[:-1] if line.strip()] or [text]
    # raw when most lines hold several sentences: looked at until the majority is certain (the guess of a
    # sentence-per-line file splits half its lines, not all: every input file's head is guessed)
    multi, half = 0, len(lines) / 2
    for left, line in zip(range(len(lines) - 1, -1, -1), lines):
        multi += len(split_sentences(line)) >= 2
        if multi > half or multi + left <= half:
            break
    return "raw" if multi > half else "lines"


def _json_lines(text: str, complete: bool) -> bool:
    """Whether a file's head is JSON lines whatever its name (WikiExtractor --json writes them to `wiki_00`,
    other tools to `.ndjson` or `.txt`): most of its non-blank lines are JSON objects. The last line of a head
    cut at 64 KiB may be cut itself; when it is the only line (a first record longer than that), a line opening
    an object with a key (`{"`) is taken for one. Such files used to be read as raw text: the builder made
    instances of the JSON syntax, keys, URLs and escapes."""
    lines = [line.strip() for line in _text_lines(text) if line.strip()]   # a JSON string may hold U+2028 as is
    if not complete and lines:
        last = lines.pop()
        if not lines:
            return re.match(r'\{\s*"', last) is not None
    return bool(lines) and sum(map(_is_json_object, lines)) > len(lines) / 2


def _is_json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


# archives hold files, not text: what to do with them (a tar's magic is at byte 257 of its first header)
# compressions that are not read (gzip, bzip2, xz and zstd are: COMPRESSIONS), named by their magic bytes with or
# without NUL bytes in the head (lz4 or compress output of short text can have none, and was then read as garbage)
_UNREAD_COMPRESSIONS = ((b"\x04\x22\x4d\x18", "lz4"), (b"\x1f\x9d", "Unix compress (.Z)"),
                        (b"LZIP\x01", "lzip"), (b"LZIP\x00", "lzip"),   # its version byte: a text may begin "LZIP"
                        (b"\x89LZO\x00", "lzop"))
_ARCHIVES = ((0, b"PK\x03\x04", "a zip archive: unzip it and pass the folder"),
             (257, b"ustar", "a tar archive: extract it (tar xf) and pass the folder"),
             (0, b"7z\xbc\xaf\x27\x1c", "a 7z archive: extract it and pass the folder"))


# C0 control bytes that text does not hold (tab, LF, VT, FF, CR, ESC and the separators 1C-1F do occur in it)
_CONTROL_BYTES = bytes(range(1, 9)) + bytes(range(0x0E, 0x1B))


def binary_reason(head: bytes) -> str | None:
    """Why a file whose (decompressed, UTF-8) head is `head` is not text, for the `binary files` skip; None for
    text. A head without NUL bytes is text. One with NUL bytes is text when they are stray: at most one in 1,000
    bytes of the head (at least one allowed) and at most one byte in 100 another control character such as
    binary formats are full of (the reader drops NUL bytes from the lines, `nul_lines`); random or compressed
    data has one NUL in 256 bytes, a tar header hundreds, UTF-16 text without a byte order mark every other byte.
    An archive of text files (`corpus.tar.gz`, `wiki.zip`) is named as one with what to do, and so is a file in a
    compression that is not read (lz4, Unix compress, lzip, lzop), NUL bytes or not; UTF-16 text without a
    byte order mark (NUL bytes at every other position) is named with the iconv command that converts it."""
    for magic, name in _UNREAD_COMPRESSIONS:
        if head.startswith(magic):
            return (f"{name}-compressed, which is not read: decompress it, or compress it with gzip, bzip2, xz or "
                    "zstd (read as they are)")
    if b"\x00" not in head:
        return None
    for offset, magic, what in _ARCHIVES:
        if head[offset:offset + len(magic)] == magic:
            return what
    nuls = head.count(b"\x00")
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    if nuls <= max(1, len(head) // 1000) and controls <= len(head) // 100:
        return None
    even, odd = head[0::2].count(b"\x00"), head[1::2].count(b"\x00")
    for order, zeros, others, half in (("LE", odd, even, len(head[1::2])), ("BE", even, odd, len(head[0::2]))):
        if zeros > half // 4 and others * 20 < zeros:   # ASCII and Latin text in UTF-16: a NUL beside each letter
            return (f"NUL bytes in its first 64 KiB ({nuls:,}, every other byte): UTF-16{order} text without a "
                    f"byte order mark? Convert it to UTF-8 (iconv -f UTF-16{order} -t UTF-8), or save it with a byte "
                    "order mark (UTF-16 and UTF-32 text with one is read)")
    return (f"NUL bytes in its first 64 KiB ({nuls:,}): not text (UTF-16 and UTF-32 text is read only with a byte "
            "order mark; convert other text to UTF-8)")


def table_format(path: Path, magic: bytes, fmt: str = "auto") -> str | None:
    """"parquet" / "arrow" when the first bytes say so, else None. An Arrow IPC stream has no magic number: its
    continuation marker (`ARROW_STREAM`) counts with a `.arrow` or `.arrows` name (the stream format's own suffix),
    or where `fmt` (--format) says arrow outright (a stream of another name was "not an arrow file")."""
    if magic.startswith(b"PAR1"):
        return "parquet"
    if magic.startswith(b"ARROW1") or (magic.startswith(ARROW_STREAM) and (
            fmt == "arrow" or Path(path).suffix.lower() in (".arrow", ".arrows"))):
        return "arrow"
    return None


# what follows bzip2's `BZh`: the block size, a digit 1-9 (x 100 kB), then a block's magic (pi's digits) or, for a
# stream with no block (bzip2 of nothing), the end-of-stream magic (sqrt(pi)'s); `BZh` alone is ASCII text
_BZIP2_LEVELS = b"123456789"
_BZIP2_MAGICS = (b"1AY&SY", b"\x17rE8P\x90")


def compression_of(magic: bytes) -> str | None:
    """"gz", "bz2", "xz" or "zst" where the first bytes of a file, `magic`, are that compression's (`COMPRESSIONS`),
    else None. bzip2's `BZh` is ASCII, so a text or CSV whose first line starts with it (a header `BZh,label`) was
    taken for bzip2 and failed to decompress: bzip2 needs its level digit and as much of a block or end-of-stream
    magic as `magic` holds (10 bytes hold the whole of them; callers that read 8 check their first 4)."""
    kind = next((name for name, prefix in COMPRESSIONS.items() if magic.startswith(prefix)), None)
    if kind == "bz2":
        level, block = magic[3:4], magic[4:10]
        if level == b"" or level not in _BZIP2_LEVELS or not any(m.startswith(block) for m in _BZIP2_MAGICS):
            return None
    return kind


def inner_name(path: Path) -> Path:
    """`a.jsonl.zst` -> `a.jsonl`: the name the format guess looks at."""
    return path.with_suffix("") if path.suffix.lower() in COMPRESSED_SUFFIXES else path


def open_text_stream(path: Path, compression: str | None, on_error: Callable[[Exception], None]):
    """(stream, raw): a binary stream of the file's (decompressed) text as UTF-8 with LF line ends (`_Utf8Text`:
    UTF-16/UTF-32 with a byte order mark transcoded, a UTF-8 one dropped, CR LF and lone CR made LF), buffered
    for fast line iteration, and the file itself (whose `tell()` says how much of it is read). A decompression
    error (corrupt or truncated data) ends the stream early and is reported to `on_error`. The stream's
    `raw.encoding` names what the file was converted from (None: UTF-8). For a file's first bytes (the checks, the
    format guess); the readers take UTF-8 text without this layer (`_open_lines`)."""
    raw = open(path, "rb")
    return _text_stream(raw, compression, on_error), raw


def _text_stream(raw, compression: str | None, on_error: Callable[[Exception], None]):
    """`open_text_stream`'s stream over the open file `raw` (read from where it stands)."""
    return io.BufferedReader(_Utf8Text(decompressor(raw, compression, on_error)), _READ_BUFFER)


def decompressor(raw, compression: str | None, on_error: Callable[[Exception], None]):
    """The file `raw` itself (`compression` None), or a decompressor reading it: gzip, bzip2, xz or zstd (guarded:
    `_Guarded` ends the data early at damage and reports it to `on_error`). The bytes as stored: no transcoding,
    line ends and byte order mark as they are (`open_text_stream` adds that layer). Used by `embed` too."""
    if compression is None:
        return raw
    if compression == "gz":
        return _Guarded(gzip.GzipFile(fileobj=raw), on_error)
    if compression == "bz2":
        return _Guarded(bz2.BZ2File(raw), on_error)
    if compression == "xz":
        return _Guarded(lzma.LZMAFile(raw), on_error)
    return _Guarded(_ZstdReader(raw), on_error)


def _open_lines(path: Path, compression: str | None, on_error: Callable[[Exception], None],
                encoding: str | None):
    """(stream, raw) as `open_text_stream` gives them, for reading the lines of a whole file: where the file is
    transcoded (`encoding`, found by `inspect_file`), the same stream; UTF-8 text (the common case) is the file's
    (decompressed) bytes as they are, without the `_Utf8Text` layer: its UTF-8 byte order mark is skipped here and
    its CR LF and lone CR line ends are found by `_TextSource` line by line (a layer over every byte cost a
    third more time on a CR LF file)."""
    if encoding is not None:
        return open_text_stream(path, compression, on_error)
    raw = open(path, "rb")
    inner = decompressor(raw, compression, on_error)
    if inner is raw:   # a file: its buffer's first fill holds the first bytes
        if raw.peek(3)[:3] == _BOM:
            raw.read(3)
        return raw, raw
    # a decompressor may hand out fewer bytes than asked (a gzip member or zstd frame of one or two bytes first): a
    # peek saw part of the mark, which stayed in the first line (whose pieces were then cut 3 bytes early)
    head = b""
    while len(head) < 3 and (data := inner.read(3 - len(head))):
        head += data
    inner.head = head.removeprefix(_BOM)   # put back, unless a byte order mark
    return io.BufferedReader(inner, _READ_BUFFER), raw


# Byte order marks of the text encodings read besides UTF-8 (UTF-32's first: FF FE 00 00 starts with UTF-16LE's)
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32LE"), (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32BE"),
              (b"\xff\xfe", "utf-16-le", "UTF-16LE"), (b"\xfe\xff", "utf-16-be", "UTF-16BE"))


def _wide_bom(head: bytes) -> tuple[bytes, str, str] | None:
    """(byte order mark, codec, name) of the UTF-16/UTF-32 encoding `head` (a file's first 4 bytes) starts with,
    else None: the one place that decides whether a file is transcoded (`wide_encoding`, `_Utf8Text`)."""
    return next((entry for entry in _WIDE_BOMS if head.startswith(entry[0])), None)


def wide_encoding(head: bytes) -> str | None:
    """The encoding (UTF-16LE, UTF-16BE, UTF-32LE or UTF-32BE) whose byte order mark a file's first bytes `head`
    begin with (such a file is read transcoded, `_Utf8Text`), else None."""
    found = _wide_bom(head)
    return found[2] if found is not None else None


_UNDECODABLE = "albertlm.corpus.undecodable"   # the error handler of the UTF-16/32 decoders (see `_Utf8Text`)
codecs.register_error(_UNDECODABLE, lambda exc: ("\udcff", exc.end))


class _Utf8Text(io.RawIOBase):
    """A (decompressed) byte stream's text as UTF-8 with LF line ends, read `_READ_BUFFER` bytes at a time:

    - UTF-16 or UTF-32 text with a byte order mark (Windows Notepad's "Unicode", PowerShell's `>`) is decoded
      chunk by chunk and encoded as UTF-8; a sequence it cannot decode (a lone surrogate, an odd last byte)
      becomes one 0xFF byte, which the line reader counts and replaces as it does undecodable UTF-8
      (`invalid_utf8_lines`). `encoding` names the encoding (None: the bytes pass through as UTF-8).
    - a UTF-8 byte order mark at the start is dropped.
    - CR LF and a lone CR (classic Mac OS) end a line as LF does (Python's universal newlines), also where a
      read splits a CR LF pair. UTF-8 never has 0x0D or 0x0A inside a character, so this works on bytes.

    `sniff=False`: the stream is UTF-8 from the middle of a file (`_TextSource` met a lone CR): no byte order
    mark is looked for, only the line ends are converted.
    """

    def __init__(self, inner, sniff: bool = True):
        self.inner = inner
        head = b""
        while sniff and len(head) < 4:   # a decompressor may hand out fewer bytes than asked
            data = inner.read(4 - len(head))
            if not data:
                break
            head += data
        self.read_in = len(head)      # bytes of the inner stream read
        self.made = self.handed = 0   # bytes of UTF-8 made from them, and handed out
        self.encoding: str | None = None
        self.decoder = None
        wide = _wide_bom(head) if sniff else None
        if wide is not None:
            bom, codec, self.encoding = wide
            head = head[len(bom):]
            self.decoder = codecs.getincrementaldecoder(codec)(errors=_UNDECODABLE)
        elif sniff:
            head = head.removeprefix(_BOM)
        self.cr = False          # the text handed out so far ends with a CR (made LF): an LF next belongs to it
        self.eof = False
        self.pending, self.offset = self._converted(head, final=False), 0

    @property
    def delivered(self) -> int:
        """Decompressed bytes read (for the `corrupt_files` message; 0 for a plain file)."""
        return getattr(self.inner, "delivered", 0)

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        """Bytes of UTF-8 handed out (the buffered reader above takes off what it holds: its `tell()` is what its
        reader has taken)."""
        return self.handed

    def stored(self, taken: int) -> int:
        """How many bytes of the inner stream `taken` bytes of UTF-8 came from: exact where the text passes
        through unchanged (UTF-8 without CR), else in proportion (UTF-16 to UTF-8, CR LF to LF)."""
        return taken if self.made == self.read_in else round(taken * self.read_in / max(self.made, 1))

    def readinto(self, buffer) -> int:
        while self.offset >= len(self.pending):
            if self.eof:
                return 0
            data = self.inner.read(_READ_BUFFER)
            self.eof = not data
            self.read_in += len(data)
            self.pending, self.offset = self._converted(data, final=self.eof), 0
        size = min(len(buffer), len(self.pending) - self.offset)
        buffer[:size] = self.pending[self.offset:self.offset + size]
        self.offset += size
        self.handed += size
        return size

    def _converted(self, data: bytes, final: bool) -> bytes:
        if self.decoder is not None:
            data = self.decoder.decode(data, final).encode("utf-8", "surrogateescape")
        if self.cr and data[:1] == b"\n":
            data = data[1:]
            self.cr = False
        if data:
            self.cr = data.endswith(b"\r")
            if b"\r" in data:
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        self.made += len(data)
        return data

    def close(self) -> None:
        if isinstance(self.inner, _Guarded):   # a plain file is the caller's to close
            self.inner.close()
        super().close()


class _ZstdReader:
    """zstd frames one after another (what `zstd` and `pzstd` write), with a truncated last frame reported
    as an EOFError: zstandard's own stream_reader silently ends there. Compressed input goes to the decompressor
    in steps of at most 8 KiB, made smaller where one step gave more than ZSTD_STEP_OUTPUT bytes of text: text that
    repeats (a dump of one line over and over, duplicated pages with `--long`) decompresses thousands of times its
    size, and one 8 KiB step of such a file gave 90 MB at once (a 200 MB file of one repeated line read in 290 MB
    of memory, its gzip copy in 59 MB)."""

    def __init__(self, raw):
        try:
            import zstandard
        except ImportError:  # a declared dependency; only a broken install lacks it
            raise UserError("reading .zst files needs the zstandard package: pip install zstandard") from None
        # frames written with `zstd --long` (or -19 and up on big inputs) declare windows over the decoder's default
        # limit of 128 MiB: they were skipped as corrupt ("Frame requires too much memory for decoding"); the window
        # (the frame says how large, at most 2 GiB) is held while the file is read
        decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
        self.raw, self.new = raw, decompressor.decompressobj
        self.frame, self.in_frame = self.new(), False
        self.pending, self.offset = b"", 0   # text decompressed, and how much of it is handed out
        self.compressed, self.step = b"", 256   # input read but not decompressed; bytes per step (grows at once)

    def read(self, size: int) -> bytes:
        while self.offset >= len(self.pending):
            if not self.compressed:
                self.compressed = self.raw.read(ZSTD_MAX_STEP)
                if not self.compressed:
                    if self.in_frame:
                        raise EOFError("the zstd data ends inside a frame (the file is truncated)")
                    return b""
            data, self.compressed = self.compressed[:self.step], self.compressed[self.step:]
            self.pending, self.offset = self._decompress(data), 0
            # the next step in proportion to how much text this one gave (by this step's ratio)
            self.step = max(16, min(ZSTD_MAX_STEP, len(data) * ZSTD_STEP_OUTPUT // max(len(self.pending), 1)))
        out = self.pending[self.offset:self.offset + size]
        self.offset += len(out)
        return out

    def _decompress(self, data: bytes) -> bytes:
        out = []
        while data:
            self.in_frame = True
            out.append(self.frame.decompress(data))
            if not self.frame.eof:
                break
            data, self.frame, self.in_frame = self.frame.unused_data, self.new(), False
        return b"".join(out)

    def close(self) -> None:
        pass


class _Guarded(io.RawIOBase):
    """Reads a decompressor; its first error (bad data, early end) becomes the end of the stream. Reads
    with `read1` where the decompressor has it, so the text decoded before the error is not lost with it."""

    def __init__(self, inner, on_error: Callable[[Exception], None]):
        self.inner, self.on_error, self.failed = inner, on_error, False
        self.delivered = 0   # decompressed bytes handed on (before the error, once there is one)
        self.head = b""      # bytes read and put back, handed out first (`_open_lines`)
        self._read = getattr(inner, "read1", inner.read)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            size = min(len(buffer), len(self.head))
            buffer[:size], self.head = self.head[:size], self.head[size:]
            return size
        if self.failed:
            return 0
        try:
            data = self._read(len(buffer))
        except Exception as exc:  # gzip/bz2/lzma raise OSError, EOFError or LZMAError; zstandard ZstdError
            self.failed = True
            self.on_error(exc)
            return 0
        buffer[:len(data)] = data
        self.delivered += len(data)
        return len(data)

    def close(self) -> None:
        try:
            self.inner.close()
        except Exception:
            pass
        super().close()


_BOM = b"\xef\xbb\xbf"


def _peek(path: Path, size: int) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(size)


TABLE_SNIFF_BYTES, TABLE_SNIFF_LINES = 1 << 14, 20   # what `table_columns` looks at of each text input
# column names of GLUE / classification / SQuAD-style tables, lowercased: a first line holding one is a header
TABLE_HEADER_NAMES = frozenset({
    "sentence", "sentence1", "sentence2", "label", "labels", "gold_label", "text", "text_a", "text_b", "question",
    "question1", "question2", "premise", "hypothesis", "index", "id", "idx", "qid", "quality", "#1 id", "#2 id",
    "#1 string", "#2 string", "score", "genre", "context", "passage", "answer", "title", "category", "class"})


@dataclass
class TableShape:
    """What `table_columns` saw at the top of a text file: tab-separated columns."""
    columns: int
    header: list[str] | None   # the first line's fields when they name columns (`TABLE_HEADER_NAMES`)
    text_column: int           # 1-based: the column holding the most text (what `cut -f` should keep)
    # 1-based, in order: every column of sentences (`_holds_sentences`) where there are two or more (a pair task's
    # file: KorNLI's sentence1, sentence2; MRPC's #1 String, #2 String), else empty: `text_column` alone is the text
    text_columns: tuple[int, ...] = ()
    compression: str | None = None   # how the file is stored (`compression_of`) and its encoding where not UTF-8,
    encoding: str | None = None      # so that the command the warning gives reads it (`build.tables_warning`)


def table_columns(head: bytes, complete: bool) -> TableShape | None:
    """Whether a text file's first bytes are a table of tab-separated columns (a GLUE or classification .tsv:
    ids, labels and sentences in columns, often under a header line) rather than text: its first line has two
    or more non-empty fields and at least 90% of its first TABLE_SNIFF_LINES non-blank lines have as many.
    `complete`: `head` is the whole file (else its last, possibly cut, line is not looked at)."""
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = text.split("\n")
    lines = [line.rstrip("\r") for line in (lines if complete else lines[:-1]) if line.strip()][:TABLE_SNIFF_LINES]
    if len(lines) < 2 or lines[0].lstrip().startswith(("{", "<doc")):
        return None
    fields = lines[0].split("\t")
    if len(fields) < 2 or sum(bool(f.strip()) for f in fields) < 2:
        return None
    rows = [line.split("\t") for line in lines]
    if sum(len(row) == len(fields) for row in rows) < 0.9 * len(rows):
        return None
    header = any(f.strip().lower() in TABLE_HEADER_NAMES for f in fields)
    body = [row for row in rows[header:] if len(row) == len(fields)] or rows
    sizes = [sum(len(row[k]) for row in body) for k in range(len(fields))]
    sentences = tuple(1 + k for k in range(len(fields)) if _holds_sentences([row[k] for row in body]))
    return TableShape(len(fields), [f.strip() for f in fields] if header else None, 1 + sizes.index(max(sizes)),
                      sentences if len(sentences) >= 2 else ())


def _holds_sentences(values: list[str]) -> bool:
    """Whether a table column holds text (a sentence in most rows: words with spaces between them, or a run of
    Chinese / Japanese characters) rather than labels, ids, scores or file names, which are one word each."""
    def sentence(value: str) -> bool:
        value = value.strip()
        return any(char.isspace() for char in value) or len(_UNSPACED_CHAR.findall(value)) >= 4
    return 2 * sum(map(sentence, values)) > len(values)


@dataclass(frozen=True)
class FileFacts:
    """What one input file's first bytes say about how it is read (`inspect_file`). `check_inputs` learns them as
    it checks the files and hands them on (its `facts` list) to `read_documents(..., facts=)` and the build's
    table warning (`albertlm.data.build.tabular_inputs`), so that each file's head is read once: a build of 20,000
    small files read every head three times (the checks, the table check, and the reader, which guessed each
    text file's format again). Plain text files share one object per kind (`_shared_facts`): a list of facts
    for a million files is a list of pointers."""

    table: str | None = None         # "parquet" / "arrow" (`table_format`); None: a text file
    compression: str | None = None   # gz, bz2, xz or zst (`compression_of`); None: stored as it is
    encoding: str | None = None      # UTF-16/UTF-32 text, converted as it is read (`_Utf8Text`); None: UTF-8
    format: str | None = None        # the text format it is read in (`--format`, or `detect_format`'s guess)
    skipped: tuple[str, str] | None = None   # (counter, example) of a text file of which nothing is read: empty,
    #                                          binary, or damaged before any text could be decompressed
    columns: TableShape | None = None   # its head is a table of tab-separated columns (`table_columns`); only
    #                                     looked for where `--format` is auto, lines or raw and asked for


_SHARED_FACTS: dict[tuple, FileFacts] = {}


def _shared_facts(**fields) -> FileFacts:
    """The one FileFacts object of a skip-free, table-free kind (at most a few dozen kinds exist)."""
    key = tuple(sorted(fields.items()))
    found = _SHARED_FACTS.get(key)
    if found is None:
        found = _SHARED_FACTS[key] = FileFacts(**fields)
    return found


def inspect_file(path: str | os.PathLike, fmt: str = "auto", columns: bool = False) -> FileFacts:
    """How `read_documents` reads the file `path` under `--format fmt` (see `FileFacts`), from its first 64 KiB;
    with `columns`, also whether its head is a table of tab-separated columns. A UserError where `fmt` is parquet
    or arrow and the file is not one."""
    return _inspect(Path(path), fmt, columns)[0]


def _inspect(path: Path, fmt: str, columns: bool = False) -> tuple[FileFacts, bytes]:
    """(`inspect_file`'s facts, the head they were read from): one open of the file. The head is the first 64 KiB of
    the decompressed text as the reader sees it (UTF-8, LF line ends; what is readable of a damaged file), b"" for a
    Parquet or Arrow file."""
    with open(path, "rb") as raw:
        magic = raw.read(8)
        table = table_format(path, magic, fmt)
        if fmt in TABLE_FORMATS and table != fmt:
            raise UserError(f"{path} is not a{'n' if fmt == 'arrow' else ''} {fmt} file (--format {fmt}); "
                            f"use --format auto")
        if table is not None:
            return _shared_facts(table=table), b""
        compression = compression_of(magic)
        raw.seek(0)
        errors: list[Exception] = []
        stream = _text_stream(raw, compression, errors.append)
        try:
            head = stream.read(_SNIFF_BYTES)
            encoding = stream.raw.encoding
        finally:
            stream.close()
    shape = None
    if columns and fmt in ("auto", "lines", "raw") and not (
            fmt == "auto" and inner_name(path).suffix.lower() in JSONL_SUFFIXES + CSV_SUFFIXES):
        # JSON lines and CSV files (by their names) are read by their own readers, the text of one field a
        # document; a stray NUL in a text table is dropped by the reader: still a table
        sniff = head[:TABLE_SNIFF_BYTES + 1]
        if binary_reason(sniff) is None:
            shape = table_columns(sniff[:TABLE_SNIFF_BYTES], len(sniff) <= TABLE_SNIFF_BYTES)
            if shape is not None:
                shape.compression, shape.encoding = compression, encoding
    skipped = None
    if not head.strip() and errors:
        error = errors[0]
        skipped = ("corrupt_files", f"{path}: {type(error).__name__}: {error}; no text could be decompressed before "
                                    f"the damage (the file has {path.stat().st_size:,} bytes), so nothing of it was "
                                    "read")
    elif not head.strip():
        skipped = ("empty_files", f"{path}")
    elif binary_reason(head) is not None:
        skipped = ("binary_files", f"{path}: {binary_reason(head)}")
    file_format = None if skipped is not None else detect_format(inner_name(path), head) if fmt == "auto" else fmt
    if skipped is not None or shape is not None:
        return FileFacts(None, compression, encoding, file_format, skipped, shape), head
    return _shared_facts(compression=compression, encoding=encoding, format=file_format), head


# -- reading documents -------------------------------------------------------------------------------------
def read_documents(files: Sequence[Path], fmt: str = "auto", text_field: str = "text",
                   counts: CorpusCounts | None = None,
                   progress: Callable[[int], None] | None = None, *,
                   facts: Sequence[FileFacts] | None = None,
                   max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[Document]:
    """Yield documents from the files in order; memory is bounded by the largest document (and one
    record batch for Parquet/Arrow). `progress(n)` is told how many more bytes of the input files (as
    stored, compressed or not) have been read, before the document read with them is yielded. `facts`: what
    `check_inputs` learned of each file (one per file, in order, under the same `fmt`), so that no file's head is
    read again; without them each file is inspected here (`inspect_file`). `max_record_bytes`: the longest JSONL
    record or CSV line read (`MAX_RECORD_BYTES`; a longer one is a UserError, `record_too_long`).

    Empty and binary files are skipped and counted in ``counts``. A file that cannot be read (gone since it was
    listed, its permissions changed, an I/O error) is a UserError naming it (`unreadable_input`): the build turned
    the OSError into "--out ...: cannot write the data (No such file or directory)"."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if facts is not None and len(facts) != len(files):
        raise ValueError(f"facts of {len(facts)} files for {len(files)} files")
    counts = counts if counts is not None else CorpusCounts()
    index = 0
    for k, path in enumerate(files):
        counts.files += 1
        found = facts[k] if facts is not None else None
        documents = _file_documents(Path(path), fmt, text_field, counts, progress, found, max_record_bytes)
        while True:
            try:
                sentences = next(documents)
            except StopIteration:
                break
            except OSError as exc:   # not the consumer's: a generator sees only its own errors
                raise UserError(unreadable_input(path, exc)) from None
            if sentences:
                counts.documents += 1
                counts.sentences += len(sentences)
                counts.chars += sum(map(len, sentences))
                yield Document(index, sentences)
                index += 1


def unreadable_input(path, exc: OSError) -> str:
    """The one-line error for an input file that cannot be opened or read (`read_documents`, `check_inputs`)."""
    if isinstance(exc, FileNotFoundError):
        return f"input {path} is gone: it was moved or deleted after the inputs were listed; put it back and run again"
    return f"cannot read input {path}: {exc.strerror or exc}"


def _file_documents(path: Path, fmt: str, text_field: str, counts: CorpusCounts,
                    progress: Callable[[int], None] | None, found: FileFacts | None = None,
                    max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[list[str]]:
    size = path.stat().st_size
    if found is None:
        found = inspect_file(path, fmt)
    if found.table is not None:
        counts.formats[found.table] = counts.formats.get(found.table, 0) + 1
        reader = _read_parquet if found.table == "parquet" else _read_arrow
        done = 0
        for sentences, fraction in reader(path, counts, text_field):
            if progress is not None:   # before the document goes out: its bytes are read once it is seen
                progress(int(size * fraction) - done)
                done = int(size * fraction)
            yield sentences
        if progress is not None:
            progress(size - done)
        return
    if found.skipped is not None:   # empty, binary, or damaged before any text
        counts.skip(*found.skipped)
    else:
        counts.formats[found.format] = counts.formats.get(found.format, 0) + 1
        if found.compression is not None:
            counts.compressed[found.compression] = counts.compressed.get(found.compression, 0) + 1
        if found.encoding is not None:
            counts.encodings[found.encoding] = counts.encodings.get(found.encoding, 0) + 1
            counts.skip("transcoded_files", f"{path}: {found.encoding} text (it starts with a byte order mark), "
                                            "converted to UTF-8 as it is read")
        yield from _read_text_file(path, found.compression, found.format, text_field, counts, progress,
                                   found.encoding, max_record_bytes)
        return
    if progress is not None:
        progress(size)


def _read_text_file(path: Path, compression: str | None, file_format: str, text_field: str,
                    counts: CorpusCounts, progress: Callable[[int], None] | None,
                    encoding: str | None = None, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[list[str]]:
    errors: list[Exception] = []
    stream, raw = _open_lines(path, compression, errors.append, encoding)
    source = _TextSource(path, stream, counts, max_record_bytes)
    done = 0
    try:
        for sentences in _READERS[file_format](source, text_field):
            if progress is not None:   # before the document goes out: its bytes are read once it is seen
                # a compressed file: how far into it the decompressor is; UTF-8 text: the bytes the reader took
                # (or, once a lone CR put a `_Utf8Text` over the rest, the bytes read ahead for it); transcoded
                # text: its stored bytes in proportion to the UTF-8 taken
                transcoded = encoding is not None and compression is None
                position = stream.raw.stored(stream.tell()) if transcoded else raw.tell()
                position = max(position, done)   # a proportion may step back a little
                progress(position - done)
                done = position
            yield sentences
        if progress is not None:
            progress(path.stat().st_size - done)
    finally:
        if errors:   # the decompressor stopped there: the stream ended, and the reader has read what came before
            counts.skip("corrupt_files", _damage_read_up_to(path, errors[0], source.line_number,
                                                            getattr(stream.raw, "delivered", 0), raw.tell()))
        stream.close()
        raw.close()


def _damage_read_up_to(path: Path, error: Exception, lines: int, text_bytes: int, file_bytes: int) -> str:
    """The `corrupt_files` example of a compressed file damaged after some text: the decompressor's message, how
    far the reading got (lines, bytes of text, bytes of the file) and what was kept."""
    return (f"{path}: {type(error).__name__}: {error}; the damage comes after line {lines:,} ({text_bytes:,} bytes "
            f"of text, from byte {file_bytes:,} of the file's {path.stat().st_size:,}): the {lines:,} line(s) "
            "before it were kept (the last possibly cut short); nothing after the damage was read")


class _Prefixed:
    """`first`, then the rest of `rest`: a stream's bytes with those already taken from it put back."""

    def __init__(self, first: bytes, rest):
        self.first, self.rest = first, rest

    def read(self, size: int) -> bytes:
        if self.first:
            out, self.first = self.first[:size], self.first[size:]
            return out
        return self.rest.read(size)


class _Continued(bytes):
    """A piece of a long line after its first (`_TextSource.lines` does not count it as a new line)."""


class _TextSource:
    """The decoded, stripped lines of one text file, with the current line number for messages.

    Lines end at LF, CR LF or a lone CR. A stream from `open_text_stream` has LF ends only; the UTF-8 stream of
    `_open_lines` is the file's bytes, whose CR LF ends are left to `str.strip` (and the csv module), and at the
    first line holding a lone CR (classic Mac OS, or mixed ends) the rest of the file is read through `_Utf8Text`
    (`_convert_rest`), which makes every CR an LF: the same lines, and no layer over the bytes of other files."""

    def __init__(self, path: Path, stream, counts: CorpusCounts, max_record_bytes: int = MAX_RECORD_BYTES):
        self.path, self.stream, self.counts, self.line_number = path, stream, counts, 0
        self.max_record_bytes = max_record_bytes   # the longest line `_whole_lines` reads (`record_too_long`)

    def lines(self, whole: bool = False) -> Iterator[str]:
        """Decoded, stripped lines; unless `whole`, a line over MAX_LINE_BYTES comes in pieces (see there)."""
        for raw in (self._whole_lines() if whole else self._pieces(MAX_LINE_BYTES)):
            if not isinstance(raw, _Continued):
                self.line_number += 1
            yield self._decoded(raw).strip()

    def text_lines(self) -> Iterator[str]:
        """Whole decoded lines with their line ends (CR LF made LF), for the csv module (a quoted field may span
        lines: the csv module keeps the line ends inside it, and a header cell over two lines was named with its CR
        in the missing-column error)."""
        for raw in self._whole_lines():
            self.line_number += 1
            yield self._decoded(raw[:-2] + b"\n" if raw.endswith(b"\r\n") else raw)

    def _whole_lines(self) -> Iterator[bytes]:
        """The file's lines, each whole; a line over `max_record_bytes` (its line end not counted) is a UserError
        (`record_too_long`), found after reading no more than the limit."""
        limit = self.max_record_bytes
        while True:
            readline = self.stream.readline
            while raw := readline(limit + 2):   # room for the limit and a CR LF
                # a CR that is no CR LF line end: one before the last two bytes, or one in a line without LF (the
                # lines after it are looked at again, as lines, before their length is)
                if 13 in raw and (raw.find(13, 0, -2) >= 0 or raw[-1] != 10):
                    self._convert_rest(raw)
                    break
                if len(raw) > limit and len(raw.rstrip(b"\r\n")) > limit:
                    raise UserError(record_too_long(self.path, self.line_number + 1, limit))
                yield raw
            else:
                return

    def _convert_rest(self, unread: bytes) -> None:
        """From here on, read `unread` and the rest of the stream with every CR made an LF (`_Utf8Text`)."""
        self.stream = io.BufferedReader(_Utf8Text(_Prefixed(unread, self.stream), sniff=False), _READ_BUFFER)

    def _decoded(self, raw: bytes) -> str:
        if self.line_number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]  # a UTF-8 byte order mark (Windows tools) is not text: JSON, <doc> follow it
        if 0 in raw:   # stray NUL bytes in text (`binary_reason`): no character, an unknown token to a model
            self.counts.skip("nul_lines", f"{self.path} line {self.line_number}: NUL bytes, removed")
            raw = raw.replace(b"\x00", b"")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.counts.skip("invalid_utf8_lines", f"{self.path} line {self.line_number}: bytes that are not UTF-8, "
                                                   f"replaced with U+FFFD (text in another encoding? {NOT_UTF8_HINT})")
            return raw.decode("utf-8", errors="replace")

    def _pieces(self, limit: int) -> Iterator[bytes]:
        """The file's lines as bytes, a line longer than `limit` bytes cut into pieces of at most `limit`: at
        the last space or tab, else before the last character that starts in the piece. A piece that goes
        on with the current line is yielded as a `_Continued` (a bytes subclass). A CR LF end counts as one
        byte, as the LF it is made by `_Utf8Text` (the same pieces whatever the line ends)."""
        pending, continued = b"", False
        while True:
            want = limit - len(pending)
            data = self.stream.readline(want)
            if 13 in data and (data.find(13, 0, -2) >= 0 or data[-1] != 10):   # a lone CR (see `_whole_lines`)
                if (len(data) == want and data.find(13, 0, -1) < 0 and self.stream.peek(1)[:1] == b"\n"):
                    data += self.stream.read(1)   # no: a CR LF cut by the limit; the line fits, as its LF would
                else:
                    self._convert_rest(data)
                    continue
            raw, pending = pending + data, b""
            if not raw:
                return
            if raw.endswith(b"\n") or len(data) < want:   # a whole line (or the end of the file)
                yield _Continued(raw) if continued else raw
                continued = False
                continue
            cut = max(raw.rfind(b" "), raw.rfind(b"\t")) + 1
            if cut == 0:
                cut = next((k for k in range(len(raw) - 1, max(len(raw) - 5, 0), -1) if raw[k] & 0xC0 != 0x80),
                           len(raw))
            raw, pending = raw[:cut], raw[cut:]
            if not continued:
                self.counts.skip("long_lines_cut", f"{self.path} line {self.line_number + 1}: over {limit:,} "
                                                   "bytes without a line break, read in pieces")
            yield _Continued(raw) if continued else raw
            continued = True

    def where(self) -> str:
        return f"{self.path} line {self.line_number}"


def record_too_long(path: Path, line: int, limit: int = MAX_RECORD_BYTES) -> str:
    """The one-line error for a JSONL record or CSV line over `limit` bytes (`MAX_RECORD_BYTES`)."""
    return (f"{path} line {line:,}: a line over {limit:,} bytes, the most a JSON lines record or a CSV line may hold "
            "(each is read whole): a file holding one JSON document (an array of records) is no JSON lines (write one "
            "object per line: datasets to_json(path, lines=True)); cut longer texts into documents of their own")


def _join_lines(lines: Sequence[str]) -> str:
    """The lines of one paragraph as one text: joined by a space, except where the break falls between two
    characters of a script written without spaces (Chinese or Japanese wrapped at a fixed width: "南京\n大学"
    is "南京大学", as browsers join such lines; a space there was a word boundary, a "▁" in SentencePiece)."""
    parts: list[str] = []
    for line in lines:
        if parts:
            parts.append("" if _UNSPACED_CHAR.match(parts[-1][-1:]) and _UNSPACED_CHAR.match(line) else " ")
        parts.append(line)
    return "".join(parts)


def _paragraph_sentences(lines: Sequence[str]) -> list[str]:
    """Blank lines separate paragraphs; lines of one paragraph are joined before splitting sentences."""
    sentences: list[str] = []
    paragraph: list[str] = []
    for line in list(lines) + [""]:
        if line:
            paragraph.append(line)
        elif paragraph:
            sentences.extend(split_sentences(_join_lines(paragraph)))
            paragraph = []
    return sentences


def _text_lines(text: str) -> list[str]:
    """`text` cut at its line ends as a text file's lines are: LF, CR LF and CR (Python's universal newlines).
    Not `str.splitlines`, which also breaks at U+2028, U+2029, U+0085, VT, FF and 1C-1E: inside a text file's
    line those are characters, and a record's text is read as the same text in a file is (SentencePiece reads
    them as spaces; WordPiece, as BERT, U+2028/U+2029 as spaces and deletes the control characters)."""
    return _LINE_END.split(text)


def _text_sentences(text: str) -> list[str]:
    """A JSONL / CSV / Parquet / Arrow document's text, split like `raw`."""
    return _paragraph_sentences([part.strip() for part in _text_lines(text)])


def _read_lines(source: _TextSource, text_field: str) -> Iterator[list[str]]:
    sentences: list[str] = []
    num_chars = 0
    cut = False  # the last document was cut at the size cap: a split only if more of it follows
    for line in source.lines():
        if line:
            if cut:
                source.counts.cut_document(source.where())
            cut = False
            sentences.append(line)
            num_chars += len(line)
        if sentences and (not line or num_chars > MAX_DOCUMENT_CHARS):
            cut = bool(line)
            yield sentences
            sentences, num_chars = [], 0
    yield sentences  # the end of a file ends a document


def _read_raw(source: _TextSource, text_field: str) -> Iterator[list[str]]:
    sentences: list[str] = []
    paragraph: list[str] = []
    num_chars = paragraph_chars = 0
    cut = False  # the document was cut at the size cap: a split only if more text follows
    for line in itertools.chain(source.lines(), [""]):
        if line:
            if cut:
                source.counts.cut_document(source.where())
            cut = False
            paragraph.append(line)
            num_chars += len(line)
            paragraph_chars += len(line) + 1
            if paragraph_chars <= MAX_PARAGRAPH_CHARS:
                continue
            # a paragraph without blank lines (or a line without breaks) is split as it grows: its finished
            # sentences go to the document, the last one (which may go on) stays; one sentence too long to
            # wait for its end is kept as it is
            done = split_sentences(_join_lines(paragraph))
            tail = done.pop() if done and len(done[-1]) <= MAX_PARAGRAPH_CHARS // 2 else ""
            sentences.extend(done)
            paragraph, paragraph_chars = ([tail], len(tail) + 1) if tail else ([], 0)
            if num_chars > MAX_DOCUMENT_CHARS and sentences:
                yield sentences
                sentences, num_chars = [], len(tail)
                if tail:
                    source.counts.cut_document(source.where())
                cut = not tail
        elif paragraph:
            sentences.extend(split_sentences(_join_lines(paragraph)))
            paragraph, paragraph_chars = [], 0
            if num_chars > MAX_DOCUMENT_CHARS:
                cut = True
                yield sentences
                sentences, num_chars = [], 0
    yield sentences  # a raw file is one document


def _capped(sentences: list[str], counts: CorpusCounts, where: str) -> Iterator[list[str]]:
    """A document's sentences in parts of about MAX_DOCUMENT_CHARS (cut at sentence boundaries, counted; `where`:
    the record, "FILE line 7" or "FILE row 7")."""
    part: list[str] = []
    num_chars = 0
    for sentence in sentences:
        if num_chars > MAX_DOCUMENT_CHARS:
            counts.cut_document(where)
            yield part
            part, num_chars = [], 0
        part.append(sentence)
        num_chars += len(sentence)
    yield part


def _read_jsonl(source: _TextSource, text_field: str) -> Iterator[list[str]]:
    for line in source.lines(whole=True):
        if not line:
            continue
        text, problem = _json_text(line, text_field)
        if problem:
            source.counts.skip("bad_json_lines", f"{source.where()}: {problem}")
            continue
        sentences = _text_sentences(text)
        if not sentences:
            source.counts.skip("empty_records", f"{source.where()}: field {text_field!r} is empty")
            continue
        yield from _capped(sentences, source.counts, source.where())


def _json_text(line: str, text_field: str) -> tuple[str, str | None]:
    """(text, None) or ("", what is wrong with the line)."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        return "", f"not JSON ({exc})"
    except RecursionError:
        return "", "not JSON this reader can take (nested deeper than Python's stack)"
    if not isinstance(record, dict):
        return "", f"a JSON {_json_type(record)}, not an object"
    if text_field not in record:
        return "", f"no field {text_field!r} (fields: {', '.join(map(str, list(record)[:8]))}; see --text-field)"
    text = record[text_field]
    if not isinstance(text, str):
        return "", f"field {text_field!r} is a JSON {_json_type(text)}, not a string"
    return text, None


def _json_type(value) -> str:
    """JSON's name for the type of a parsed value (null, not NoneType)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "number", float: "number", list: "array", dict: "object", str: "string"}.get(type(value), "value")


def _read_wikiextractor(source: _TextSource, text_field: str) -> Iterator[list[str]]:
    """`<doc>` blocks. A block left open (a file cut off, or files joined after a truncated one) ends at
    the next `<doc` or the end of the file and is kept (`unclosed_documents`); text outside the blocks is
    counted (`lines_outside_documents`); a block over MAX_DOCUMENT_CHARS is cut (`documents_split`)."""
    lines: list[str] | None = None
    title = None
    num_chars = 0

    def document(lines: list[str], first: bool) -> list[str]:
        if first and lines and title is not None and lines[0] in (title, html.unescape(title)):  # "AT&amp;T"
            lines = lines[1:]
        return _paragraph_sentences(lines)

    first = True  # the block's first part: where the title line is
    for line in source.lines():
        if _DOC_OPEN.match(line):
            if lines is not None:
                source.counts.skip("unclosed_documents", f"{source.where()}: <doc> before the previous </doc>")
                yield document(lines, first)
            found = _DOC_TITLE.search(line)
            lines, title, num_chars, first = [], (found.group(1) if found else None), 0, True
        elif line == "</doc>":
            if lines is not None:
                yield document(lines, first)
            lines = None
        elif lines is not None:
            lines.append(line)
            num_chars += len(line)
            if num_chars > MAX_DOCUMENT_CHARS:
                source.counts.cut_document(source.where())
                yield document(lines, first)
                lines, num_chars, first = [], 0, False
        elif line:
            source.counts.skip("lines_outside_documents", f"{source.where()}: text outside <doc> ... </doc>")
    if lines:  # a file cut off before its closing tag still ends a document
        source.counts.skip("unclosed_documents", f"{source.where()}: the file ends inside a <doc>")
        yield document(lines, first)


def _csv_rows(source: _TextSource) -> Iterator[list[str]]:
    """The rows of a CSV file, each read under CSV_FIELD_LIMIT. The limit is the csv module's, process-wide: it is
    raised for one row at a time and put back before the row is handed on (a caller's own CSV reading keeps the
    limit it set). A row the csv module cannot read ends the file (`bad_rows`, naming the line)."""
    reader = csv.reader(source.text_lines())
    while True:
        before = csv.field_size_limit(max(CSV_FIELD_LIMIT, csv.field_size_limit()))
        try:
            row = next(reader, None)
        except csv.Error as exc:
            source.counts.skip("bad_rows", f"{source.where()}: {exc}; the rest of the file was not read")
            return
        finally:
            csv.field_size_limit(before)
        if row is None:
            return
        yield row


def _csv_column(header: list[str], text_field: str, path: Path) -> int:
    """The header's column holding the documents (surrounding spaces ignored: `id, text`); a UserError naming the
    file and its columns when there is none."""
    names = [name.strip() for name in header]
    if text_field.strip() in names:
        return names.index(text_field.strip())
    shown = ", ".join(repr(name) for name in names[:12])
    used = next((sep for sep in (";", "\t", "|") if sep in names[0]), None) if len(names) == 1 else None
    named = "tabs" if used == "\t" else repr(used)
    hint = (f"; the header looks separated by {named}, but a CSV file is read comma-separated: save it with commas"
            if used is not None else "")
    raise UserError(f"{path} has no column {text_field!r} in its header line (columns: {shown}); choose one with "
                    f"--text-field (the first line of a CSV file names its columns){hint}")


def _read_csv(source: _TextSource, text_field: str) -> Iterator[list[str]]:
    """CSV rows after the header line; each row's `text_field` cell is a document, split like `raw`. A row too
    short to hold the column is skipped (`bad_rows`), an empty cell counted (`empty_records`); blank lines are
    no rows."""
    rows = _csv_rows(source)
    header = next((row for row in rows if any(cell.strip() for cell in row)), None)   # blank lines before it
    if header is None:
        return
    column = _csv_column(header, text_field, source.path)
    for row in rows:
        if not row:
            continue        # a blank line (a row of empty cells, `,,`, is a row with an empty text)
        if len(row) <= column:
            source.counts.skip("bad_rows", f"{source.where()}: {len(row)} field(s), no column {text_field!r} (the "
                                           f"header has {len(header)})")
            continue
        sentences = _text_sentences(row[column])
        if not sentences:
            source.counts.skip("empty_records", f"{source.where()}: column {text_field!r} is empty")
            continue
        yield from _capped(sentences, source.counts, source.where())


_READERS = {"lines": _read_lines, "raw": _read_raw, "jsonl": _read_jsonl, "wikiextractor": _read_wikiextractor,
            "csv": _read_csv}


# -- Parquet and Arrow -------------------------------------------------------------------------------------
def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401  (registers the submodule)
    except ImportError:  # a declared dependency; only a broken install lacks it
        raise UserError("reading Parquet/Arrow files needs the pyarrow package: pip install pyarrow") from None
    return pyarrow


def _text_column_index(schema, text_field: str, path: Path) -> int:
    """The column holding the documents; a UserError naming the file and its columns if it is absent
    or not a string column."""
    pa = _pyarrow()
    if text_field not in schema.names:
        raise UserError(f"{path} has no column {text_field!r} (columns: {', '.join(schema.names[:12])}); "
                        f"choose one with --text-field")
    if schema.names.count(text_field) > 1:   # pyarrow writes such files; reading them by name was a KeyError
        raise UserError(f"{path} has {schema.names.count(text_field)} columns named {text_field!r}: which is the text "
                        "is not known; rename them (or choose another column with --text-field)")
    kind = schema.field(text_field).type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or getattr(pa.types, "is_string_view", lambda t: False)(kind)):
        raise UserError(f"{path}: column {text_field!r} holds {kind}, not text; choose a string column "
                        f"with --text-field")
    return schema.get_field_index(text_field)


def _open_parquet(path: Path):
    pa = _pyarrow()
    try:
        return pa.parquet.ParquetFile(str(path))
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"cannot read {path} as Parquet ({exc})") from None


def _open_arrow(path: Path, source):
    """(schema, record batches) of an Arrow IPC file or stream, read one batch at a time."""
    pa = _pyarrow()
    try:
        if _peek(path, 6) == b"ARROW1":
            reader = pa.ipc.open_file(source)
            return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        reader = pa.ipc.open_stream(source)
        return reader.schema, iter(reader)
    except (pa.ArrowException, OSError) as exc:
        raise UserError(f"cannot read {path} as Arrow IPC ({exc})") from None


def _read_parquet(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[tuple[list[str], float]]:
    parquet = _open_parquet(path)
    _text_column_index(parquet.schema_arrow, text_field, path)
    total = max(1, parquet.metadata.num_rows)
    batches = parquet.iter_batches(batch_size=TABLE_BATCH_ROWS, columns=[text_field], use_threads=False)
    yield from _table_documents(path, batches, 0, lambda row: row / total, counts)


def _read_arrow(path: Path, counts: CorpusCounts, text_field: str) -> Iterator[tuple[list[str], float]]:
    pa = _pyarrow()
    with pa.OSFile(str(path)) as source:  # plain reads, not a memory map: pages are freed batch by batch
        schema, batches = _open_arrow(path, source)
        column = _text_column_index(schema, text_field, path)
        size = max(1, path.stat().st_size)
        yield from _table_documents(path, batches, column, lambda row: source.tell() / size, counts)


def _table_documents(path: Path, batches, column: int, fraction: Callable[[int], float],
                     counts: CorpusCounts) -> Iterator[tuple[list[str], float]]:
    """(sentences, fraction of the file read) per row; a batch that cannot be decoded ends the file
    (counted in corrupt_files)."""
    pa = _pyarrow()
    row = 0
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as exc:
            counts.skip("corrupt_files", f"{path} after row {row}: {exc} (the rows before it were kept)")
            return
        if batch is None:
            return
        values = batch.column(column).to_pylist()
        for text in values:
            row += 1
            if text is None:
                counts.skip("bad_rows", f"{path} row {row}: the text is null")
                continue
            sentences = _text_sentences(text)
            if not sentences:
                counts.skip("empty_records", f"{path} row {row}: the text is empty")
                continue
            for part in _capped(sentences, counts, f"{path} row {row}"):
                yield part, fraction(row)


# -- checks before the work starts -------------------------------------------------------------------------
# what to do with text in a legacy encoding (named in the errors about non-UTF-8 input)
NOT_UTF8_HINT = ("convert the text to UTF-8 first (Korean CP949/EUC-KR, Chinese GBK/GB18030 or Big5, Japanese "
                 "Shift-JIS: e.g. iconv -f cp949 -t utf-8)")
ENCODING_SNIFF_BYTES = 1 << 16   # the head of each input text file checked for text in a legacy encoding
MIN_BAD_SEQUENCES = 8            # undecodable byte sequences before a head counts as not UTF-8


def looks_legacy_encoded(head: bytes) -> bool:
    """Whether `head` (a file's first bytes) is text in another encoding than UTF-8: at least
    MIN_BAD_SEQUENCES byte sequences that are not UTF-8, and more of them than well-formed non-ASCII
    characters. CP949 Korean or GBK Chinese gives thousands of the first and a few accidental pairs of the
    second; UTF-8 text with a stray bad byte or two, or a genuine U+FFFD, does not count."""
    if len(head) >= ENCODING_SNIFF_BYTES and b"\n" in head:
        head = head[:head.rindex(b"\n")]   # not the cut last line: its last character may be split
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - head.count("\ufffd".encode())
    return bad >= MIN_BAD_SEQUENCES and bad > sum(1 for c in text if c > "\x7f" and c != "\ufffd")


def _check_encoding(path: Path, head: bytes, encoding: str | None) -> None:
    """A UserError when a text file's (decompressed) first 64 KiB `head` are not UTF-8 (`looks_legacy_encoded`); a
    binary head (`binary_reason`) is left to the reader, which skips it and says so; UTF-16/UTF-32 text with a
    byte order mark (`encoding`) is read as the UTF-8 it is converted to. The reader
    turns undecodable bytes into U+FFFD and counts the lines, so a corpus saved in CP949 trained a tokenizer of
    U+FFFD and stray Greek and Cyrillic (and built data of [UNK]), exit 0, with only a count of bad lines.
    Also a UserError when a file starting with a UTF-16/UTF-32 byte order mark does not read as such text
    (`misread_wide`)."""
    if encoding is not None and misread_wide(head):
        bom = next(entry[0] for entry in _WIDE_BOMS if entry[2] == encoding)
        sample = head.decode("utf-8", errors="replace")[:12]
        raise UserError(f"{path} starts with {bom.hex(' ').upper()}, the byte order mark of {encoding}, but read as "
                        f"{encoding} its text holds no line break, space or ASCII character ({sample!r}...): it is "
                        f"probably not {encoding} but 8-bit or UTF-8 text that begins with those bytes (in Latin-1 "
                        f"they read {bom.decode('latin-1')!r}); remove them or convert the file to UTF-8, e.g. "
                        f"tail -c +{len(bom) + 1} {shlex.quote(str(path))} | iconv -f latin1 -t utf-8 > text.txt")
    if binary_reason(head) is None and looks_legacy_encoded(head):
        raise UserError(f"{path} is not UTF-8 text (most of its non-ASCII bytes are not UTF-8): {NOT_UTF8_HINT}")


MISREAD_WIDE_CHARS = 256   # characters of transcoded text `misread_wide` needs before it judges
_BELOW_0100 = re.compile("[\x00-\xff]")


def misread_wide(head: bytes) -> bool:
    """Whether `head`, the UTF-8 that a file starting with a UTF-16/UTF-32 byte order mark was converted to, is
    8-bit or UTF-8 text misread (a Latin-1 file that begins with "ÿþ", bytes FF FE): at least MISREAD_WIDE_CHARS
    characters, not one of them below U+0100, and not the characters of Chinese or Japanese text. Real UTF-16 text
    has line breaks, spaces, digits or ASCII punctuation (each a code unit below 0x100), except a Chinese or
    Japanese paragraph with full-width punctuation only (such a file of one paragraph, no line break, was refused);
    two bytes of 8-bit text make one code unit of 0x2020 or more, and that text shows itself, in code units of two
    printable ASCII bytes, the high one no digit (counted 1 each: English 90% and more of them), Hangul syllables
    (3: UTF-8 of Cyrillic or Greek; Korean text has spaces) and unassigned, private-use or undecodable ones (15:
    accented Latin-1, UTF-8 of CJK), adding up to 3/4 of the characters or more (real Chinese and Japanese: about
    1/4 to 1/2)."""
    text = head.decode("utf-8", errors="replace")
    if len(text) < MISREAD_WIDE_CHARS or _BELOW_0100.search(text) is not None:
        return False
    # (not 0x30-0x39, a digit, in the high byte: U+3041-U+3093, Hiragana, would be three quarters of them)
    ascii_pairs = sum(0x20 <= (ord(c) & 0xFF) <= 0x7E and 0x2020 <= ord(c) <= 0x7EFF and not 0x3000 <= ord(c) <= 0x39FF
                      for c in text)
    hangul = sum("\uac00" <= c <= "\ud7a3" for c in text)
    odd = sum(c == "\ufffd" or unicodedata.category(c) in ("Cn", "Co", "Cs") for c in text)
    return ascii_pairs + 3 * hangul + 15 * odd >= 0.75 * len(text)


def check_inputs(files: Sequence[Path], fmt: str = "auto", text_field: str = "text",
                 facts: list[FileFacts] | None = None, max_record_bytes: int = MAX_RECORD_BYTES
                 ) -> list[FileFacts] | None:
    """Fail fast on what would otherwise be found mid-build: a Parquet/Arrow file without a string
    `text_field` column or that cannot be opened, `--format parquet/arrow` on other files, and a JSONL
    file none of whose first 100 records has `text_field` (almost surely the wrong --text-field), and a text
    file in a legacy encoding (`looks_legacy_encoded`). Reads only each file's first bytes (64 KiB of a text
    file, a Parquet footer or an Arrow schema), once (`inspect_file`; a JSONL or CSV file's records past its first
    64 KiB are read again).

    `facts`, when given, is filled with what was learned of each file (`FileFacts`, one per file in order, with
    `columns`), for `read_documents(..., facts=)` and the build's table warning; it is also returned. A JSONL
    record or CSV line over `max_record_bytes` among those read is a UserError (`record_too_long`), and so is a file
    that cannot be read (`unreadable_input`)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    for path in map(Path, files):
        try:
            found = _check_input(path, fmt, text_field, facts is not None, max_record_bytes)
        except OSError as exc:
            raise UserError(unreadable_input(path, exc)) from None
        if facts is not None:
            facts.append(found)
    return facts


def _check_input(path: Path, fmt: str, text_field: str, columns: bool, max_record_bytes: int) -> FileFacts:
    """`check_inputs`'s checks of one file; its `FileFacts`."""
    found, head = _inspect(path, fmt, columns=columns)
    if found.table == "parquet":
        _text_column_index(_open_parquet(path).schema_arrow, text_field, path)
    elif found.table == "arrow":
        with _pyarrow().OSFile(str(path)) as source:
            _text_column_index(_open_arrow(path, source)[0], text_field, path)
    else:
        _check_encoding(path, head, found.encoding)
        guessed = fmt if fmt != "auto" else _guessed_format(path, found)
        if guessed == "jsonl":
            _check_jsonl(path, found.compression, text_field, head, max_record_bytes)
        elif guessed == "csv":
            _check_csv(path, found.compression, text_field, head, max_record_bytes)
    return found


def _guessed_format(path: Path, found: FileFacts) -> str:
    """What `--format auto` reads a text file as (by its name, else its head), for the checks: "lines" for a file
    the reader skips (empty or binary), unless its name says JSONL or CSV."""
    if inner_name(path).suffix.lower() in JSONL_SUFFIXES:
        return "jsonl"
    if inner_name(path).suffix.lower() in CSV_SUFFIXES:
        return "csv"
    return found.format or "lines"


def _head_or_file(path: Path, compression: str | None, head: bytes | None):
    """(stream, raw) of a text file's (decompressed) text from its start, as `open_text_stream` gives them: the
    `head` already read where it holds the whole text (shorter than the 64 KiB asked for), else the file opened
    again (raw None: nothing to close)."""
    if head is not None and len(head) < _SNIFF_BYTES:
        return io.BufferedReader(io.BytesIO(head)), None
    return open_text_stream(path, compression, lambda exc: None)


def _check_jsonl(path: Path, compression: str | None, text_field: str, head: bytes | None = None,
                 max_record_bytes: int = MAX_RECORD_BYTES) -> None:
    """A JSONL file one of whose first JSONL_CHECK_RECORDS records has `text_field`; one whose first
    JSONL_CHECK_RECORDS non-blank lines hold no JSON object at all is no JSONL file (a `.json` file holding one
    JSON document: an array of records, pretty-printed JSON), which the build read to its end, twice, to say
    only that no instances were built. `head`: its first 64 KiB, read already (`_head_or_file`)."""
    stream, raw = _head_or_file(path, compression, head)
    first = first_bad = None
    try:
        source = _TextSource(path, stream, CorpusCounts(), max_record_bytes)
        records = lines = 0
        for line in source.lines(whole=True):
            if not line:
                continue
            lines += 1
            text, problem = _json_text(line, text_field)
            if problem is None:
                return
            if problem.startswith("no field"):
                first = first or f"{source.where()}: {problem}"
            elif problem.startswith(("not JSON", "a JSON")):
                first_bad = first_bad or f"{source.where()}: {problem}"
            records += not problem.startswith(("not JSON", "a JSON"))
            if records >= JSONL_CHECK_RECORDS or (not records and lines >= JSONL_CHECK_RECORDS):
                break
    finally:
        stream.close()
        if raw is not None:
            raw.close()
    if first is not None:
        raise UserError(f"{first}; none of the first {records} record(s) has field {text_field!r}")
    if first_bad is not None:
        raise UserError(f"{path} is not JSON lines: none of its first {lines} line(s) is a JSON object ({first_bad}); "
                        "if it holds one JSON document (an array of records, pretty-printed JSON), write one object "
                        "per line (datasets: to_json(path, lines=True))")


def _check_csv(path: Path, compression: str | None, text_field: str, head: bytes | None = None,
               max_record_bytes: int = MAX_RECORD_BYTES) -> None:
    """A CSV file whose header line names `text_field` (else a UserError listing its columns); an empty file is
    left to the reader, which skips it as one. `head`: its first 64 KiB, read already (`_head_or_file`)."""
    stream, raw = _head_or_file(path, compression, head)
    try:
        rows = _csv_rows(_TextSource(path, stream, CorpusCounts(), max_record_bytes))
        header = next((row for row in rows if any(cell.strip() for cell in row)), None)
    finally:
        stream.close()
        if raw is not None:
            raw.close()
    if header is not None:
        _csv_column(header, text_field, path)
