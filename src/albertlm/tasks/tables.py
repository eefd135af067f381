"""Reading rows from TSV, CSV and JSONL files with line numbers, and counting tolerable problems.

Every problem that stops a run names the file and line; problems a run can live with are counted in a
`Problems` tally that the driver prints and writes into the run's metrics, never dropped silently.
"""
from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

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

    def report(self, stream=sys.stderr) -> None:
        for kind, n in sorted(self.counts.items()):
            where = ", ".join(self.examples.get(kind, []))
            print(f"note: {n} x {kind}" + (f" (first at {where})" if where else ""), file=stream)


def open_text(path: Path):
    """utf-8-sig drops the BOM that MRPC's files (and Excel exports) start with."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    return path.open(encoding="utf-8-sig", newline="")


def read_json(path: str | Path, expect: type = dict, what: str = "a JSON object"):
    """A whole JSON file; a missing file, bad JSON or the wrong top-level type names the file."""
    path = Path(path)
    with open_text(path) as handle:
        try:
            data = json.load(handle)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, expect):
        raise DataError(f"{path}: expected {what}")
    return data


def read_tsv(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of a GLUE-style TSV. No quoting: GLUE texts contain bare quotes."""
    path = Path(path)
    with open_text(path) as handle:
        for lineno, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if line.strip():
                yield lineno, line.split("\t")


def read_records(path: str | Path, fmt: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a CSV/TSV with a header line, or of a JSONL file (one object per line)."""
    path = Path(path)
    fmt = fmt or guess_format(path)
    with open_text(path) as handle:
        if fmt == "jsonl":
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
                yield lineno, record
            return
        if fmt == "tsv":
            reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: empty file (a header line is needed)")
        for row in reader:
            lineno = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise DataError(f"{path}:{lineno}: {len(row)} fields, the header has {len(header)}")
            yield lineno, dict(zip(header, row))


def guess_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix in (".tsv", ".tab", ".txt"):
        return "tsv"
    if suffix == ".csv":
        return "csv"
    raise DataError(f"{path}: cannot tell the format from the suffix; use .csv, .tsv or .jsonl")
