"""A user's own sentence(-pair) data in CSV, TSV (with a header line), JSONL, or Parquet / Arrow (the Hugging Face
Hub's and `Dataset.save_to_disk`'s files, or a `save_to_disk` folder; lines are then row numbers): single-label
multi-class classification or regression. A row's default id is its place among the file's rows: a row of empty
cells between rows (a one-column CSV's `""`) is a row with an empty text, counted as such; blank lines are none.
A text file may be gzip, bzip2, xz or zstd compressed (`train.csv.gz`: its format is its name's less the suffix).

The label set is the sorted labels of the training file (or given explicitly); a dev/test label outside it
is an error naming the file and line. A label written as a number is the class of that number however it is spelt
(`1`, `1.0`, `01`: one class, named the shortest way). A file whose every label is -1 (what Hugging Face
`datasets` writes for a row without a label: a test split) is refused as training, dev or gold data. Label names
are compared in Unicode NFC: a Korean label written decomposed (NFD, as macOS tools often save it) is the same
class as its precomposed spelling. A label holds no comma, tab or line break (label sets are recorded and given
comma-separated; predictions are written tab-separated).

Column names are matched exactly, else by their stripped NFC spelling (`text, label`; an NFD Korean header);
a column that is not there is an error suggesting the nearest name, or the separator a one-column header
seems to use (an Excel export separated by ';'). An id column's ids are unique and not empty in a file whose
predictions are written or scored by id.
"""
from __future__ import annotations

import difflib
import math
import unicodedata
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Iterator, Sequence

from albertlm.tasks.tables import COMPRESSED_SUFFIXES, DataError, Problems, guess_format, read_records, shown


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
    """The value of `column` in a row. A header name that differs only in surrounding spaces or in Unicode
    normalization (a Korean header saved decomposed, NFD, by macOS tools; `text, label` written with a space)
    is the same column when exactly one name matches so; a name that matches none is an error that lists the
    columns, suggests the nearest one and says when the header looks separated by another character."""
    if column in record:
        return record[column]
    wanted = label_name(column)
    same = [name for name in record if isinstance(name, str) and label_name(name) == wanted]
    if len(same) == 1:
        return record[same[0]]
    raise DataError(f"{where}: no column {column!r} (columns: {', '.join(map(repr, record))})"
                    + _column_hint(column, list(record), path))


SEPARATORS = {";": "';'", "\t": "tabs", ",": "commas", "|": "'|'"}


def _column_hint(column: str, names: list, path: Path) -> str:
    """What to try after "no column X": the separator a one-column header seems to use (an Excel export in a
    ';' locale, read as CSV, is one column named 'text;label'), else the nearest column name."""
    names = [str(name) for name in names]
    fmt = _format(path)
    if len(names) == 1 and fmt in ("csv", "tsv"):
        own = "," if fmt == "csv" else "\t"
        used = [sep for sep in SEPARATORS if sep in names[0] and sep != own]
        if used:
            return (f"; the header looks separated by {SEPARATORS[used[0]]}, but a {_suffix(path)} file "
                    f"is read as {fmt.upper()} ({SEPARATORS[own]}): save it comma-separated as .csv or "
                    "tab-separated as .tsv")
    if fmt in ("csv", "tsv") and any(_number(name) is not None or len(name) > 40 for name in names):
        # a file without a header line (CoLA's, RTE's val.tsv, a model's own dump): its first row named the columns
        # ('good film', '1'), and the error listed them as if they were names
        example = ("," if fmt == "csv" else "<TAB>").join(["text", "label"])
        return (f"; the first line is read as the header (the column names), and it looks like a row of data (a "
                f"numeric or long name): add a header line naming the columns, e.g. {example}")
    folded = {name.casefold().strip(): name for name in names}
    near = ([folded[column.casefold().strip()]] if column.casefold().strip() in folded
            else difflib.get_close_matches(column, names, n=1, cutoff=0.6))
    return f"; did you mean {near[0]!r}?" if near else ""


def _suffix(path: Path) -> str:
    """The suffix a file's format is told by: `.csv`, or `.csv.gz` for a compressed file."""
    return "".join(path.suffixes[-2:]) if path.suffix.lower() in COMPRESSED_SUFFIXES else path.suffix


def _format(path: Path) -> str | None:
    try:
        return guess_format(path)
    except DataError:
        return None


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
    if isinstance(value, float) and math.isfinite(value):
        # a JSON / Parquet number with a point: pandas writes an integer column that once held a gap as floats
        # (1.0), which is that class (it was refused); a fraction (an STS-B score) is no class name at all
        if not value.is_integer():
            raise DataError(f"{where}: label {value!r} in column {column!r} is a real number, not a class name; "
                            "give --regression to predict a number")
        value = int(value)
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        name = label_name(value)
        # the label set is recorded and given as comma-separated names (task.json's labels become `--labels a,b`
        # for predict / evaluate): 'good, very' came back as two labels and predictions named the wrong class;
        # a tab or line break would shift or split its line of the tab-separated predictions file
        if any(c in name for c in ",\t\r\n"):
            raise DataError(f"{where}: label {name!r} in column {column!r} holds a comma, tab or line break; "
                            "label names are given and recorded comma-separated (--labels a,b,c): rename the class")
        return name
    several = " (one class a row: multi-label classification is not supported)" if isinstance(value, list) else ""
    raise DataError(f"{where}: label {value!r} in column {column!r} is not a class name (a string or an "
                    f"integer){several}")


# Hugging Face `datasets` writes -1 where a ClassLabel column has no label: every row of GLUE's and most Hub
# datasets' test splits (Dataset.to_parquet / to_json / to_csv keep it)
NO_LABEL = "-1"
NO_LABEL_HINT = (", which Hugging Face datasets writes for a row without a label (a test split): such a file is "
                 "predicted (--test), not trained on or scored")


def label_name(value) -> str:
    """A label as compared and stored: its text stripped, in NFC (NFD "모순" and precomposed "모순" are one
    class; the error "label '모순' is not in the label set ['모순', ...]" named two spellings that look alike)."""
    return unicodedata.normalize("NFC", str(value).strip())


def read_examples(path: str | Path, columns: Columns, with_labels: bool = True,
                  regression: bool = False, problems: Problems | None = None,
                  unique_ids: bool = True, texts: bool = True, split: str | None = None) -> list[TextExample]:
    """The rows of a CSV / TSV / JSONL file (`iter_examples`, all of them in a list)."""
    return list(iter_examples(path, columns, with_labels, regression, problems, unique_ids, texts, split))


def iter_examples(path: str | Path, columns: Columns, with_labels: bool = True,
                  regression: bool = False, problems: Problems | None = None,
                  unique_ids: bool = True, texts: bool = True, split: str | None = None) -> Iterator[TextExample]:
    """The rows of a CSV / TSV / JSONL file, one at a time as they are read (`predict` on a file of millions of
    rows holds a window of them). With `columns.id`, each row's id must be there, and (with `unique_ids`, for a
    file whose predictions are written or scored by id) no two rows may share one: the second row's prediction
    would replace the first's when a predictions file is scored. `texts=False` (scoring a predictions file) reads
    no text columns: the examples' texts are empty. `split` (train, dev, test) names the split in the `problems`
    it counts ("empty text (dev)"), as the truncation notes do (one tally for every split counted a file given as
    both --train and --dev twice, under one name). A file without rows, or whose every label is -1, is a DataError
    once it has been read to its end."""
    path = Path(path)
    problems = problems if problems is not None else Problems()
    count = 0
    first: TextExample | None = None
    all_unlabelled = True     # every label -1 so far
    first_at: dict[str, int] = {}   # id -> the line it was first seen on (ids checked unique only)
    for lineno, record in read_records(path):
        where = f"{path}:{lineno}"
        text = _text(_cell(record, columns.text, where, path), columns.text, where) if texts else ""
        if texts and not text.strip():
            problems.add(f"empty text ({split})" if split else "empty text", where)
        pair = (_text(_cell(record, columns.text_pair, where, path), columns.text_pair, where)
                if columns.text_pair and texts else None)
        label = None
        if with_labels and columns.label:
            label = _label_cell(record, columns.label, where, path, columns)
            label = _regression_value(label, where) if regression else _label(label, columns.label, where)
            all_unlabelled = all_unlabelled and _number(label_name(label)) == _number(NO_LABEL)
        # a named id column must exist (a misspelt one would number the predictions by row without a word)
        guid = _cell(record, columns.id, where, path) if columns.id else count
        guid = _id(guid, columns.id, where) if columns.id and unique_ids else str(guid).strip()
        if columns.id and unique_ids:
            if guid in first_at:
                raise DataError(f"{where}: id {shown(guid)} (column {columns.id!r}) is also the id of line "
                                f"{first_at[guid]}; the predictions are written and scored by id, so give each row "
                                "its own id (or leave out --id-column to number the rows)")
            first_at[guid] = lineno
        example = TextExample(guid, text, pair, label, where)
        first = first or example
        count += 1
        yield example
    if first is None:
        raise DataError(f"{path}: no rows")
    if with_labels and columns.label and all_unlabelled:
        # a Hugging Face test split: trained as one class "-1" (a warning), scored as a dev or gold file (accuracy
        # 0 against labels no row has), without a word that the file holds no labels
        raise DataError(f"{first.where}: every label in column {columns.label!r} is -1{NO_LABEL_HINT}")


def _label_cell(record: dict, column: str, where: str, path: Path, columns: Columns) -> object:
    """A row's label cell. A file without the label column whose every column is a text or id column holds no
    labels at all: a file to predict (`predict --dev unlabelled.csv`), which the error says, as GLUE's does."""
    try:
        return _cell(record, column, where, path)
    except DataError as error:
        named = {label_name(name) for name in (columns.text, columns.text_pair, columns.id) if name}
        if any(label_name(name) not in named for name in record):
            raise
        raise DataError(f"{error}; a file without labels is predicted with --test FILE") from None


def _id(value, column: str, where: str) -> str:
    """A row's id, as written in `<split>_predictions.tsv`: not empty, and without a tab or line break (the
    predictions file is tab-separated, one row a line; such an id would shift or split its line)."""
    guid = "" if value is None else str(value).strip()
    if not guid:
        raise DataError(f"{where}: no id in column {column!r}")
    if any(c in guid for c in "\t\r\n"):
        raise DataError(f"{where}: the id {guid!r} in column {column!r} holds a tab or line break, which the "
                        "tab-separated predictions file cannot hold")
    return guid


def _regression_value(value, where: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: label {value!r} is not a number (regression)") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise DataError(f"{where}: label {value!r} is not a finite number (regression)")
    return number


def label_set(examples: Sequence[TextExample], given: Sequence[str] | None = None) -> tuple[str, ...]:
    """Given labels, or the sorted distinct training labels (numeric order when they are all numbers: `2` before
    `10`, `2.0` before `10.0`). Labels that are all numbers, some with a fraction (a CSV of STS-B scores: 3.8,
    2.615, ...), are refused without `--labels`: they are the values of a regression, and were taken for as many
    classes as the file had distinct scores (a 5-point scale became 140 classes, without a word)."""
    if given:
        return check_labels(given)
    labels = _one_spelling({label_name(e.label) for e in examples})
    # exact values, not floats: two 18-digit ids are one float (and `…678.5` a whole one)
    numbers = {label: _exact(label) for label in labels}
    if None not in numbers.values():
        fractions = [label for label in labels if numbers[label] != numbers[label].to_integral_value()]
        if fractions:
            first = next(e for e in examples if label_name(e.label) in fractions)
            raise DataError(f"{first.where}: label {label_name(first.label)!r} is a real number (the labels are "
                            f"{len(labels)} distinct numbers, {len(fractions)} of them with a fraction); give "
                            "--regression to predict a number, or --labels to take them as classes")
        return tuple(sorted(labels, key=lambda label: (numbers[label], label)))
    return tuple(sorted(labels))


def _one_spelling(labels: set[str]) -> set[str]:
    """`labels` with one spelling per number: `1` and `1.0` (a file joined from pandas exports, one of a column that
    held a gap and was written as floats) are one class, spelt the shortest way (`1`), as a JSON / Parquet 1.0 is
    (they were two classes, a 5-star file trained as 10 without a word). `label_ids` finds a class by its number.
    Numbers are told apart by their exact value (`_exact`): two 18-digit ids (a user or product id as the class) are
    one float, and were one class without a word."""
    by_number: dict[Decimal, list[str]] = {}
    for label in labels:
        if _number(label) is not None:
            by_number.setdefault(_exact(label), []).append(label)
    for spellings in by_number.values():
        labels -= set(sorted(spellings, key=lambda label: (len(label), label))[1:])
    return labels


def other_labels(examples: Sequence[TextExample], known: Sequence[str]) -> list[str]:
    """The labels of `examples` that are none of `known` (nor one of them spelt another way: `1.0` is a known `1`,
    as `label_ids` finds it), each once in one spelling (`_one_spelling`), numbers first by value, then the rest
    sorted, as `label_set` orders a file's labels (without refusing numbers with a fraction: they are classes
    `known` lacks). `evaluate --predictions` adds them after the model's labels: a gold class the model lacks."""
    names = {label_name(label) for label in known}
    exact = {_exact(name) for name in names} - {None}
    others = _one_spelling({label_name(e.label) for e in examples} - names)
    others = {label for label in others if _exact(label) is None or _exact(label) not in exact}
    return sorted(others, key=lambda label: (_exact(label) is None, _exact(label) or 0, label))


def check_labels(given: Sequence[str]) -> tuple[str, ...]:
    """A given label set (`--labels`, task.json, a transformers config's id2label), its names stripped: no label
    twice, none empty, none holding a tab or line break (each label names a column of the tab-separated
    predictions file, `p_<label>`, and is written in its prediction column)."""
    given = [label_name(label) for label in given]
    if any(not label for label in given):
        raise DataError(f"the label set {given} has an empty label (--labels a,b,c: comma-separated names)")
    broken = next((label for label in given if any(c in label for c in "\t\r\n")), None)
    if broken is not None:
        raise DataError(f"the label {broken!r} holds a tab or line break, which the tab-separated predictions file "
                        "cannot hold; give the label set without them (--labels a,b,c)")
    duplicated = sorted({label for label in given if given.count(label) > 1})
    if duplicated:
        raise DataError(f"the label set lists {duplicated} more than once; give each label once (--labels a,b,c)")
    return tuple(given)


def _number(label: str) -> float | None:
    """A label's value when it is written as a finite number (`3`, `3.0`, `-0.5`), else None."""
    try:
        number = float(label)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _exact(label: str) -> Decimal | None:
    """A label's exact value when it is written as a finite number (`_number`), else None: `1`, `1.0` and `01` are
    one value, `123456789012345678` and `123456789012345679` two (one float). A Decimal, not a Fraction: the
    Fraction of `1e-999999999` is a billion-digit integer to build (the label hung the run)."""
    if _number(label) is None:
        return None
    try:
        return Decimal(label)
    except (InvalidOperation, ValueError):   # a spelling float() reads and Decimal does not: its float's value
        return Decimal(_number(label))


def label_ids(examples: Sequence[TextExample], labels: Sequence[str] | None) -> list:
    """Class ids (or floats for regression, labels None); unknown labels name file and line."""
    if labels is None:
        return [float(e.label) for e in examples]
    index = {label_name(label): i for i, label in enumerate(labels)}
    # a label written as a number is the class of that number however it is spelt (`1.0`, `01` for the class `1`: a
    # pandas export of a column that held a gap, a dev file beside a training file written by another tool)
    by_number: dict[Decimal, list[int]] = {}
    for label, i in index.items():
        if _number(label) is not None:
            by_number.setdefault(_exact(label), []).append(i)
    out = []
    for e in examples:
        name = label_name(e.label)
        same = by_number.get(_exact(name), []) if name not in index else []
        if name not in index and len(same) != 1:
            hint = NO_LABEL_HINT if _number(name) == _number(NO_LABEL) else ""
            raise DataError(f"{e.where}: label {e.label!r} is not in the label set {list(labels)}{hint}")
        out.append(index[name] if name in index else same[0])
    return out
