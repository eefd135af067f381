"""A user's own sentence(-pair) data in CSV, TSV (with a header line) or JSONL: single-label
multi-class classification or regression.

The label set is the sorted labels of the training file (or given explicitly); a dev/test label outside it
is an error naming the file and line. Label names are compared in Unicode NFC: a Korean label written
decomposed (NFD, as macOS tools often save it) is the same class as its precomposed spelling.
"""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from albertlm.tasks.tables import DataError, Problems, read_records


@dataclass
class TextExample:
    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    where: str


@dataclass
class Columns:
    text: str
    text_pair: str | None = None
    label: str | None = "label"
    id: str | None = None


def _cell(record: dict, column: str, where: str, path: Path) -> object:
    if column not in record:
        raise DataError(f"{where}: no column {column!r} (columns: {', '.join(map(repr, record))})")
    return record[column]


def _text(value, column: str, where: str) -> str:
    """A text cell: a string (a JSON number is taken as its text; null as empty); a list, an object or a
    boolean is an error naming the column."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise DataError(f"{where}: column {column!r} holds {type(value).__name__} {value!r}, expected text")


def _label(value, column: str, where: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}: no label in column {column!r}")
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return label_name(value)
    raise DataError(f"{where}: label {value!r} in column {column!r} is not a class name (a string or an integer)")


def label_name(value) -> str:
    """A label as compared and stored: its text stripped, in NFC (NFD "모순" and precomposed "모순" are one
    class; the error "label '모순' is not in the label set ['모순', ...]" named two spellings that look alike)."""
    return unicodedata.normalize("NFC", str(value).strip())


def read_examples(path: str | Path, columns: Columns, with_labels: bool = True,
                  regression: bool = False, problems: Problems | None = None) -> list[TextExample]:
    path = Path(path)
    problems = problems if problems is not None else Problems()
    examples = []
    for lineno, record in read_records(path):
        where = f"{path}:{lineno}"
        text = _text(_cell(record, columns.text, where, path), columns.text, where)
        if not text.strip():
            problems.add("empty text", where)
        pair = (_text(_cell(record, columns.text_pair, where, path), columns.text_pair, where)
                if columns.text_pair else None)
        label = None
        if with_labels and columns.label:
            label = _cell(record, columns.label, where, path)
            label = _regression_value(label, where) if regression else _label(label, columns.label, where)
        # a named id column must exist (a misspelt one would number the predictions by row without a word)
        guid = str(_cell(record, columns.id, where, path)).strip() if columns.id else str(len(examples))
        examples.append(TextExample(guid, text, pair, label, where))
    if not examples:
        raise DataError(f"{path}: no rows")
    return examples


def _regression_value(value, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: label {value!r} is not a number (regression)") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise DataError(f"{where}: label {value!r} is not a finite number (regression)")
    return number


def label_set(examples: Sequence[TextExample], given: Sequence[str] | None = None) -> tuple[str, ...]:
    """Given labels, or the sorted distinct training labels (numeric order when they are all integers)."""
    if given:
        return check_labels(given)
    labels = {label_name(e.label) for e in examples}
    numbers = {label: _integer(label) for label in labels}
    if None not in numbers.values():
        return tuple(sorted(labels, key=lambda label: (numbers[label], label)))
    return tuple(sorted(labels))


def check_labels(given: Sequence[str]) -> tuple[str, ...]:
    """A given label set (`--labels`, task.json), its names stripped: no label twice, none empty."""
    given = [label_name(label) for label in given]
    if any(not label for label in given):
        raise DataError(f"the label set {given} has an empty label (--labels a,b,c: comma-separated names)")
    duplicated = sorted({label for label in given if given.count(label) > 1})
    if duplicated:
        raise DataError(f"the label set lists {duplicated} more than once; give each label once (--labels a,b,c)")
    return tuple(given)


def _integer(label) -> int | None:
    try:
        return int(label)
    except (TypeError, ValueError):
        return None


def label_ids(examples: Sequence[TextExample], labels: Sequence[str] | None) -> list:
    """Class ids (or floats for regression, labels None); unknown labels name file and line."""
    if labels is None:
        return [float(e.label) for e in examples]
    index = {label_name(label): i for i, label in enumerate(labels)}
    out = []
    for e in examples:
        name = label_name(e.label)
        if name not in index:
            raise DataError(f"{e.where}: label {e.label!r} is not in the label set {list(labels)}")
        out.append(index[name])
    return out
