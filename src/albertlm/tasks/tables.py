"""Reading rows from TSV, CSV and JSONL files with line numbers, and counting tolerable problems.

Every problem that stops a run names the file and line; problems a run can live with are counted in a
`Problems` tally that the driver prints and writes into the run's metrics, never dropped silently.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from albertlm.errors import UserError


class DataError(UserError):
    """Bad task data; the message names the file and the line or id."""


@dataclass
class Problems:
    """Tolerated problems: a count per kind and the first few places each happened."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, where: str) -> None:
        self.counts[kind] += 1
        places = self.examples.setdefault(kind, [])
        if len(places) < 3:
            places.append(where)

    def count(self, kind: str, n: int) -> None:
        """Add n occurrences without places (e.g. truncations counted in bulk)."""
        if n:
            self.counts[kind] += n

    def merge(self, other: "Problems") -> None:
        for kind, n in other.counts.items():
            self.counts[kind] += n
            self.examples.setdefault(kind, []).extend(other.examples.get(kind, [])[: 3])

    def to_dict(self) -> dict:
        return {kind: {"count": n, "first": self.examples.get(kind, [])} for kind, n in self.counts.items()}

    def report(self, stream=None) -> None:
        for kind, n in sorted(self.counts.items()):
            where = ", ".join(self.examples.get(kind, []))
            print(f"note: {n} x {kind}" + (f" (first at {where})" if where else ""), file=stream or sys.stderr)


def shown(name: object) -> str:
    """A name from the data (a question id, a column) for a one-line message: as it is when printable,
    else quoted with its escapes (a newline in an id must not break the line)."""
    text = str(name)
    return text if text.isprintable() else repr(text)


def open_text(path: Path):
    """utf-8-sig drops the BOM that MRPC's files (and Excel exports) start with. A gzip, bzip2, xz or zstd file
    (`train.csv.gz`) is read decompressed, as `data build` reads one (`compressed_text`)."""
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if not path.is_file():
        raise DataError(f"{path}: not a file")
    check_not_columnar(path)
    return compressed_text(path)


class _DecompressedText(io.TextIOWrapper):
    """The text of a compressed file; closing it closes the file too (a decompressor leaves it open)."""

    def __init__(self, stream, raw) -> None:
        super().__init__(stream, encoding="utf-8-sig", newline="")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def compressed_text(path: Path):
    """The text of `path` (utf-8-sig, newlines as written), decompressed where its first bytes say gzip, bzip2, xz
    or zstd (`corpus.COMPRESSIONS`): `train.csv.gz` was "cannot tell the format from the suffix", and a gzip file
    named `.csv` was "not UTF-8 text". Damaged or cut-short data is a DataError naming the file."""
    from albertlm.data.corpus import compression_of, decompressor

    with path.open("rb") as handle:
        kind = compression_of(handle.read(10))   # the whole of a bzip2 header (`compression_of`)
    if kind is None:
        return path.open(encoding="utf-8-sig", newline="")

    def damaged(exc: Exception) -> None:
        raise DataError(f"{path}: cannot decompress it ({kind}: {str(exc) or type(exc).__name__}); is the file "
                        "damaged or cut short?")

    raw = path.open("rb")
    try:
        return _DecompressedText(io.BufferedReader(decompressor(raw, kind, damaged)), raw)
    except BaseException:
        raw.close()
        raise


COLUMNAR = {".parquet": "parquet", ".arrow": "arrow"}   # read by read_records (classify), as the data builder does


def columnar_format(path: Path) -> str | None:
    """"parquet" / "arrow" for a Parquet or Arrow IPC file (the Hugging Face Hub's and `save_to_disk`'s
    formats): by the name, else by the first bytes (a Parquet file named .tsv; an Arrow stream, as `save_to_disk`
    writes, begins with the continuation marker 0xFFFFFFFF, which no UTF-8 text does: it was "not UTF-8 text")."""
    if path.suffix.lower() in COLUMNAR:
        return COLUMNAR[path.suffix.lower()]
    try:
        with path.open("rb") as handle:
            magic = handle.read(6)
    except OSError:
        return None
    if magic.startswith(b"PAR1"):
        return "parquet"
    return "arrow" if magic == b"ARROW1" or magic.startswith(b"\xff\xff\xff\xff") else None


def check_not_columnar(path: Path) -> None:
    """A Parquet / Arrow file read as text is refused by name, with the way on: it was "not UTF-8 text". The way
    to JSON lines is the one that reads this file: pandas' read_parquet fails on Arrow, pyarrow's open_file on an
    Arrow stream (what `save_to_disk` writes) and open_stream on an Arrow file (it said "a Arrow file" too)."""
    kind = columnar_format(path)
    if kind is None:
        return
    if kind == "parquet":
        table = "pandas.read_parquet(FILE)"
    else:
        with path.open("rb") as handle:
            opener = "open_file" if handle.read(6) == b"ARROW1" else "open_stream"
        table = f"pyarrow.ipc.{opener}(FILE).read_pandas()"
    raise DataError(f"{path}: a{'n' if kind == 'arrow' else ''} {kind.capitalize()} file, not text; `classify`, "
                    f"`squad` and `race` read Parquet and Arrow files (.parquet, .arrow), the other inputs are text "
                    f"(as JSON lines: {table}.to_json('x.jsonl', orient='records', lines=True))")


def _not_utf8(path: Path, after_line: int | None = None) -> DataError:
    where = f" (after line {after_line})" if after_line else ""
    return DataError(f"{path}: not UTF-8 text{where}; save the file as UTF-8")


def read_json(path: str | Path, expect: type = dict, what: str = "a JSON object"):
    """A whole JSON file; a missing file, bad JSON, another encoding or the wrong top-level type names the file."""
    path = Path(path)
    with open_text(path) as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except UnicodeDecodeError:
            raise _not_utf8(path) from None
        except (ValueError, RecursionError) as exc:  # e.g. a 5000-digit number, nesting deeper than Python's stack
            raise DataError(f"{path}: cannot read this JSON ({str(exc) or type(exc).__name__})") from None
    if not isinstance(data, expect):
        raise DataError(f"{path}: expected {what}")
    return data


def read_tsv(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of a GLUE-style TSV. No quoting: GLUE texts contain bare quotes."""
    path = Path(path)
    lineno = 0
    with open_text(path) as handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if line.strip():
                    yield lineno, line.split("\t")
        except UnicodeDecodeError:
            raise _not_utf8(path, lineno) from None


def read_records(path: str | Path, fmt: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a CSV/TSV with a header line, or of a JSONL file (one object per line); of a Parquet
    or Arrow file (a Hugging Face Hub export, `Dataset.save_to_disk`), (row number, record); of a `save_to_disk`
    folder (without `fmt`), (row number, record) of the Arrow files its state.json lists, in that order."""
    path = Path(path)
    if fmt is None and path.is_dir():
        row = 0
        for part in saved_dataset_files(path):      # rows numbered through the folder's files, as its dataset's
            for _, record in _columnar_records(part, "arrow"):
                row += 1
                yield row, record
        return
    fmt = fmt or guess_format(path)
    if fmt in ("parquet", "arrow"):
        if not path.is_file():
            raise DataError(f"{path}: {'not a file' if path.exists() else 'file not found'}")
        yield from _columnar_records(path, fmt)
        return
    with open_text(path) as handle:
        try:
            yield from (_jsonl_records(path, handle) if fmt == "jsonl" else _table_records(path, handle, fmt))
        except UnicodeDecodeError:
            raise _not_utf8(path) from None


def is_saved_dataset(path: Path) -> bool:
    """Whether `path` is a folder `datasets`' `save_to_disk` wrote: a Dataset's (state.json) or a DatasetDict's
    (dataset_dict.json, which `saved_dataset_files` refuses naming its splits)."""
    return path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file())


def saved_dataset_files(folder: Path) -> list[Path]:
    """The Arrow files of a `datasets` `Dataset.save_to_disk` folder, in the order its state.json lists them (the
    dataset's row order: save_to_disk writes a shuffled or selected dataset's rows in their order). A DatasetDict's
    folder (dataset_dict.json) is refused naming its splits' folders; any other folder is refused as not a file
    (it was "cannot tell the format from the suffix")."""
    splits_file, state_file = folder / "dataset_dict.json", folder / "state.json"
    if splits_file.is_file():
        splits = read_json(splits_file).get("splits") or []
        named = ", ".join(str(folder / str(split)) for split in splits) or "its split folders"
        raise DataError(f"{folder}: a datasets DatasetDict folder (save_to_disk); give one split's folder: {named}")
    if not state_file.is_file():
        raise DataError(f"{folder}: a folder, not a file (a datasets save_to_disk folder holds state.json); give a "
                        ".csv, .tsv, .jsonl, .parquet or .arrow file")
    state = read_json(state_file)
    entries = state.get("_data_files")
    names = [entry.get("filename") for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
    if not names or not all(isinstance(name, str) and name for name in names):
        raise DataError(f"{state_file}: lists no data files (_data_files); is this a datasets save_to_disk folder?")
    if state.get("_indices_data_files"):   # rows in another order than the files' (datasets before 2.0)
        raise DataError(f"{folder}: saved with an indices mapping; save it again with "
                        "datasets.load_from_disk(FOLDER).flatten_indices().save_to_disk(NEW_FOLDER)")
    files = [folder / name for name in names]
    missing = [file.name for file in files if not file.is_file()]
    if missing:
        raise DataError(f"{state_file}: lists data files that are not in the folder: {', '.join(missing[:3])}")
    return files


# ---------------------------------------------------------------- a split's files from the Hugging Face Hub
# The Hub keeps a split in shards `SPLIT-K-of-N` (`rte/train-00000-of-00002.parquet` in a config's folder, or a
# repository's `data/`; `save_to_disk` writes `data-00000-of-00002.arrow`), or, on its refs/convert/parquet branch,
# as numbered Parquet files in a folder named by the split (`rte/train/0000.parquet`, `0001.parquet`, ...). GLUE and
# RACE find a split's exports here, and a split is read whole, whichever of its shards is given: a submission needs
# every test row, and a shard left out lost its rows without a word.
SHARD = re.compile(r"(?P<stem>.+)-(?P<k>\d+)-of-(?P<n>\d+)")         # train-00000-of-00002
NUMBERED = re.compile(r"\d+")                                          # refs/convert/parquet's 0000


def _stem(path: Path) -> str:
    return path.name[: len(path.name) - len(path.suffix)]


def shard_of(path: Path) -> tuple[str, int, int | None] | None:
    """(stem, shard number, shard count) of a shard's name: `train-00000-of-00002.parquet` ("train", 0, 2); a
    numbered Parquet file (`0001.parquet`, refs/convert/parquet's, its count unknown) ("", 1, None); None for any
    other name. Read from the name alone (nothing is stat'ed)."""
    stem = _stem(path)
    match = SHARD.fullmatch(stem)
    if match is not None:
        return match["stem"], int(match["k"]), int(match["n"])
    if NUMBERED.fullmatch(stem) and path.suffix.lower() == ".parquet":
        return "", int(stem), None
    return None


def split_owner(path: Path) -> Path:
    """The file or folder whose name says the split `path` is of: the folder of a numbered Parquet file
    (`rte/validation/0000.parquet`) or of a save_to_disk Arrow file (`validation/data-00000-of-00001.arrow`), else
    `path` itself."""
    shard = None if path.is_dir() else shard_of(path)
    if shard is not None and (shard[2] is None or (shard[0] == "data" and (path.parent / "state.json").is_file())):
        return path.parent
    return path


def export_stem(path: Path) -> str:
    """The name a split's file goes by, less its shard count (`train-00000-of-00002.parquet` -> `train`,
    `validation.jsonl` -> `validation`; a folder's name), or its folder's (`split_owner`: `rte/validation/0000.parquet`
    -> `validation`)."""
    owner = split_owner(path)
    if owner is not path:
        return owner.name
    shard = None if path.is_dir() else shard_of(path)
    return path.name if path.is_dir() else (_stem(path) if shard is None else shard[0])


def _shard_name(path: Path, k: int) -> str:
    """The name of shard `k` of the split whose shard `path` is, its numbers as wide as `path`'s."""
    match = SHARD.fullmatch(_stem(path))
    if match is None:
        return f"{k:0{len(_stem(path))}d}{path.suffix}"
    return f"{match['stem']}-{k:0{len(match['k'])}d}-of-{match['n']}{path.suffix}"


def split_shards(path: Path) -> list[Path]:
    """Every shard of the split that `path` is one shard of, in shard order (`train-00001-of-00002.parquet`: it and
    `train-00000-of-00002.parquet`, whatever the listing's order; `0001.parquet`: the numbered Parquet files beside
    it); [path] for any other file. A shard missing beside it is refused naming it (a split is read whole: its rows
    were lost without a word), as are a shard number past the count and two files of one shard (another width)."""
    shard = shard_of(path)
    if shard is None or not path.is_file():
        return [path]
    stem, _, count = shard
    by_number: dict[int, Path] = {}
    for other in sorted(path.parent.iterdir()):
        found = shard_of(other) if other.suffix.lower() == path.suffix.lower() else None
        if found is None or found[0] != stem or found[2] != count or other.name.startswith(".") or not other.is_file():
            continue
        if found[1] in by_number:
            raise DataError(f"{other}: shard {found[1]} of a split again, beside {by_number[found[1]].name}; keep "
                            "one of them")
        by_number[found[1]] = other
    past = sorted(k for k in by_number if count is not None and k >= count)
    if past:
        raise DataError(f"{by_number[past[0]]}: shard {past[0]} of a split of {count} (numbered 0 to {count - 1}): "
                        "of another download? keep the split's shards only")
    total = count if count is not None else max(by_number) + 1
    missing = [k for k in range(total) if k not in by_number]
    if missing:
        what = (f"one of the {count} shards of a split" if count is not None else
                f"one of a split's numbered shards ({_shard_name(path, 0)} to {_shard_name(path, total - 1)})")
        raise DataError(f"{path}: {what}, and {_shard_name(path, missing[0])} is not beside it ({len(missing)} "
                        "missing); a split is read with all its shards")
    return [by_number[k] for k in range(total)]


def split_folder_files(folder: Path) -> list[Path] | None:
    """The files of a split given as a folder: a `Dataset.save_to_disk` folder ([folder]: `read_records` reads the
    Arrow files its state.json lists), or a refs/convert/parquet split folder (its numbered Parquet files,
    `split_shards`); None for any other folder."""
    if not folder.is_dir():
        return None
    if (folder / "state.json").is_file():
        return [folder]
    numbered = sorted((path for path in folder.iterdir() if not path.name.startswith(".")
                       and (shard_of(path) or ("", 0, 0))[2] is None and path.is_file()), key=lambda p: p.name)
    return split_shards(numbered[0]) if numbered else None


class SplitExport(NamedTuple):
    """One export of a split in a folder: `label` names it (`train-*-of-00002.parquet`, `validation.jsonl`, a
    folder's name), `path` is what to give for it (its first shard, the file, the folder) and `files` what is read
    (all its shards in order; a save_to_disk folder itself)."""

    label: str
    path: Path
    files: list[Path]


def split_exports(folder: Path, is_split: Callable[[str], bool], suffixes: tuple[str, ...]) -> list[SplitExport]:
    """The exports in `folder` of the split whose names `is_split` accepts (given a name in lower case, less a
    shard count): files with one of `suffixes` (a sharded split once, with all its shards: `split_shards`), and
    folders holding a split (`split_folder_files`: `validation/` of a DatasetDict's save_to_disk, or of
    refs/convert/parquet). In name order; hidden files passed over; a name is checked before its file is stat'ed (a
    RACE level holds thousands of passage files)."""
    if not folder.is_dir():
        return []
    exports: list[SplitExport] = []
    taken: set[Path] = set()
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path in taken:
            continue
        if path.suffix.lower() in suffixes:
            shard = shard_of(path)
            counted = shard is not None and shard[2] is not None
            if not is_split((shard[0] if counted else _stem(path)).lower()) or not path.is_file():
                continue
            files = split_shards(path) if counted else [path]
            taken.update(files)
            label = f"{shard[0]}-*-of-{SHARD.fullmatch(_stem(path))['n']}{path.suffix}" if counted else path.name
            exports.append(SplitExport(label, files[0], files))
        elif not path.suffix and is_split(path.name.lower()):
            files = split_folder_files(path)
            if files:
                exports.append(SplitExport(path.name, path, files))
    return exports


def refuse_two_exports(folder: Path, exports: list[SplitExport], split: str) -> None:
    """Two exports of one split in a folder (`validation.jsonl` beside `validation-00000-of-00001.parquet`, a
    split's shards of two downloads) are refused naming them: read together its rows counted twice, and read from
    one of them the other was passed over without a word."""
    if len(exports) > 1:
        raise DataError(f"{folder}: {' and '.join(sorted(export.label for export in exports))} are two exports of "
                        f"{split} (read together, its rows would count twice); keep one of them there")


def _jsonl_records(path: Path, handle) -> Iterator[tuple[int, dict]]:
    for lineno, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:
            raise DataError(f"{path}:{lineno}: cannot read this JSON ({str(exc) or type(exc).__name__})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


@contextlib.contextmanager
def table_batches(path: str | Path, kind: str, column: str | None = None):
    """(schema, record batches of `column` alone, or of every column) of a Parquet file (`kind` "parquet") or an
    Arrow IPC file or stream, read a batch at a time (plain reads, not a memory map: pages are freed batch by
    batch). Arrow's errors (pyarrow.ArrowException, OSError) are the caller's to word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pa.OSFile(str(path)) as source:
        if kind == "parquet":
            parquet = pq.ParquetFile(source)
            columns = None if column is None else [column]
            yield parquet.schema_arrow, parquet.iter_batches(batch_size=1024, columns=columns, use_threads=False)
            return
        if source.read(6) == b"ARROW1":
            source.seek(0)
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            source.seek(0)
            reader = pa.ipc.open_stream(source)
            batches = iter(reader)
        if column is not None:
            index = reader.schema.get_field_index(column)
            batches = (batch.select([index]) for batch in batches)
        yield reader.schema, batches


def _columnar_records(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    """(row number from 1, record) of a Parquet file or an Arrow IPC file / stream, one batch at a time."""
    import pyarrow as pa

    row = 0
    try:
        with table_batches(path, fmt) as (schema, batches):
            twice = next((name for k, name in enumerate(schema.names) if name in schema.names[:k]), None)
            if twice is not None:   # a record keeps the last of the two columns, silently (a CSV's is refused)
                raise DataError(f"{path}: the file has two columns named {twice!r}; rename one of them")
            for batch in batches:
                for record in batch.to_pylist():
                    row += 1
                    yield row, record
    except (pa.ArrowException, OSError) as exc:
        after = f"after row {row}: " if row else ""
        raise DataError(f"{path}: cannot read it as {fmt.capitalize()} ({after}{exc})") from None


# csv's default limit on one field (131072 characters) refused a long document (a 150 kB article, which is cut to
# max_seq_length tokens anyway) that the same rows as JSON lines read; the C long bound holds on every platform
FIELD_SIZE_LIMIT = 2**31 - 1


def _long_field_rows(reader, starts: list[int] | None = None) -> Iterator[list[str]]:
    """`reader`'s rows, each read under FIELD_SIZE_LIMIT. The limit is the csv module's, process-wide: it is
    raised for one row at a time and the caller's limit put back before the row is handed on, so a program or
    notebook that reads its own CSV files between (or after) our rows keeps the limit it set. With `starts`, the
    line each row begins on is appended to it (`reader.line_num` is the line a record ends on: a quoted
    multi-line article made errors name the record's last line)."""
    while True:
        start = reader.line_num + 1
        before = csv.field_size_limit(max(FIELD_SIZE_LIMIT, csv.field_size_limit()))
        try:
            row = next(reader, None)
        finally:
            csv.field_size_limit(before)
        if row is None:
            return
        if starts is not None:
            starts.append(start)
        yield row


# pandas' and `datasets`' to_csv(sep="\t") quote a field holding a quote, a tab or a line break as CSV does
# ("he said ""hi"""); GLUE's TSVs have no quoting (bare quotes, some unbalanced, begin and end their texts)
TSV_SNIFF_CHARS = 1 << 20      # the head of a .tsv read to tell the two apart
_OPENING_QUOTE = re.compile(r'(?:\A|(?<=[\t\n]))"')                     # a field that begins with a quote
_QUOTED_FIELD = re.compile(r'"((?:[^"]|"")*)"(?=[\t\r\n]|\Z)')          # ... and is one quoted CSV field
_UNCLOSED_FIELD = re.compile(r'"(?:[^"]|"")*\Z')                          # ... or one the head cuts


def csv_quoted_tsv(path: Path) -> bool:
    """Whether a tab-separated file was written with CSV quoting (pandas, `datasets`' `to_csv(sep="\\t")`), told
    by its head (TSV_SNIFF_CHARS): a field there is wholly quoted and contains `""`, a tab or a line break; every
    field there that begins with a quote is one quoted CSV field, and every quote is inside one; read with CSV
    quoting, its rows all have the header's number of fields. Such a file read without quoting gave the texts with
    their quotes (`"he said ""hi"" to me"`), without a word, or split a field at its tab. GLUE's own files (no
    such field; quotes that open or close a text, or stand alone, some unbalanced) are read without quoting."""
    with (compressed_text(path) if isinstance(path, Path) else path.open(encoding="utf-8-sig", newline="")) as handle:
        head = handle.read(TSV_SNIFF_CHARS)
        whole = not handle.read(1)
    if not whole:
        head = head[: head.rfind("\n") + 1]      # whole lines (a quoted field may still go on past them)
    end, inside, evidence = 0, 0, False
    for opening in _OPENING_QUOTE.finditer(head):
        if opening.start() < end:               # a line break inside the quoted field found before
            continue
        field = _QUOTED_FIELD.match(head, opening.start())
        if field is None:
            cut = None if whole else _UNCLOSED_FIELD.match(head, opening.start())
            if cut is None:                     # a text that begins with a quote: not CSV quoting
                return False
            inside += cut.group(0).count('"')
            break
        end = field.end()
        inside += field.group(0).count('"')
        evidence = evidence or any(mark in field.group(1) for mark in ('""', "\t", "\n", "\r"))
    if not evidence or inside != head.count('"'):   # a quote outside a quoted field: GLUE's bare quotes
        return False
    reader = csv.reader(io.StringIO(head), delimiter="\t")
    rows = []
    try:
        rows.extend(_long_field_rows(reader))
    except csv.Error:
        return False
    rows = [row for row in (rows if whole else rows[:-1]) if any(cell.strip() for cell in row)]
    return len(rows) > 1 and all(len(row) == len(rows[0]) for row in rows)


def _table_records(path: Path, handle, fmt: str) -> Iterator[tuple[int, dict]]:
    if fmt == "tsv":
        quoting = csv.QUOTE_MINIMAL if csv_quoted_tsv(path) else csv.QUOTE_NONE
        reader = csv.reader(handle, delimiter="\t", quoting=quoting)
    else:
        reader = csv.reader(handle)
    starts: list[int] = []
    rows = _long_field_rows(reader, starts)
    try:
        header = next(rows, None)
        if header is None:
            raise DataError(f"{path}: empty file (a header line is needed)")
        twice = next((name for k, name in enumerate(header) if name.strip() and name in header[:k]), None)
        if twice is not None:   # `text,text,label`: a record keeps one of the two columns, silently
            raise DataError(f"{path}:{reader.line_num}: the header names the column {twice!r} twice")
        empty: list[tuple[int, dict]] = []   # rows of empty cells, kept when a row with text follows
        for row in rows:
            lineno = starts.pop()   # the line the record begins on
            if not any(cell.strip() for cell in row):
                if len(header) == 1 and row:
                    # a one-column file's `""` (or spaces) is a row with an empty text, not a blank line (csv
                    # gives [] for that): skipping it shifted every later row's number, the default id
                    yield lineno, dict(zip(header, row))
                elif len(row) == len(header):
                    empty.append((lineno, dict(zip(header, row))))
                continue   # a blank line, or a line of spaces in a file of several columns
            if len(row) != len(header):
                raise DataError(f"{path}:{lineno}: {len(row)} fields, the header has {len(header)}")
            # a row of empty cells (`,,`) between rows is one of the file's rows (its text is empty, counted as
            # such); only those after the last row with text (the rows a spreadsheet's export may end with) are
            # left out, which shifts no row
            yield from empty
            empty.clear()
            yield lineno, dict(zip(header, row))
    except csv.Error as exc:  # e.g. a field over csv's size limit, an unterminated quote at the end
        raise DataError(f"{path}:{reader.line_num}: {exc}") from None


# a compressed file's format is its name's less this suffix (`train.csv.gz` is a CSV; `open_text` decompresses it)
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".zst", ".zstd")


def guess_format(path: Path) -> str:
    if path.suffix.lower() in COMPRESSED_SUFFIXES and Path(path.stem).suffix:
        path = path.with_suffix("")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".tsv", ".tab", ".txt"):
        return "tsv"
    if suffix == ".csv":
        return "csv"
    columnar = columnar_format(path)
    if columnar is not None:
        return columnar
    raise DataError(f"{path}: cannot tell the format from the suffix; use .csv, .tsv, .jsonl, .parquet or .arrow "
                    "(compressed: .csv.gz, .jsonl.zst, ...)")
