"""GLUE: task table, readers for the standard layout, and the submission format.

Each task ships its files its own way (GLUE's `download_glue_data.py` layout): CoLA train/dev have no
header, the others do; MNLI has matched and mismatched dev/test; MRPC can also be read from the original
`msr_paraphrase_*.txt` (UTF-8 BOM). A header is recognised by its label cell not being a label, so
re-split files with and without a header both work (e.g. a headerless `val.tsv`). The diagnostic set (AX) is
predicted from `diagnostic.tsv` (`index, sentence1, sentence2`) and scored from the labelled
`diagnostic-full.tsv` (`Lexical Semantics, Predicate-Argument Structure, Logic, Knowledge, Domain, Premise,
Hypothesis, Label`), which GLUE publishes beside it. The Hugging Face Hub's GLUE (`nyu-mll/glue`, one config per
task) is read too: its Parquet files (`rte/validation-00000-of-00001.parquet`; refs/convert/parquet's
`rte/validation/0000.parquet`, ...), a `save_to_disk` folder or its Arrow file, and `to_json` / `to_csv` /
`to_csv(sep="\t")` exports, in datasets' columns (`sentence1, sentence2, label, idx`, ...), their label numbers
in datasets' ClassLabel order (MNLI's is not GLUE's), -1 in a test split, and `idx` as the submission's index (see
"Hugging Face datasets' GLUE" below).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from albertlm.tasks.tables import (DataError, Problems, columnar_format, export_stem, is_saved_dataset, read_records,
                                   read_tsv, refuse_two_exports, shown, split_exports, split_folder_files, split_owner,
                                   split_shards)


@dataclass(frozen=True)
class Columns:
    """Positions of text_a, text_b (None for single sentences) and label (None in test files)."""

    text_a: int
    text_b: int | None
    label: int | None
    guid: int | None = 0


@dataclass(frozen=True)
class GlueTask:
    name: str
    labels: tuple[str, ...] | None       # None: regression (STS-B)
    train: Columns
    test: Columns
    dir_name: str
    submission_name: str                 # file name in the GLUE submission zip
    dev_files: tuple[str, ...] = ("dev.tsv",)
    test_files: tuple[str, ...] = ("test.tsv",)
    # the exact field count of a labelled row, where a wider row means another task's file read in a layout
    # that would still parse (CoLA's `source<TAB>label<TAB>*<TAB>sentence` read as SST-2 trains on the source)
    train_fields: int | None = None
    # the most fields with text a test-layout row has, where another task's test file would parse in it: an MNLI
    # test file given to `--task ax` was predicted on its promptID and pairID columns and written as AX.tsv
    test_fields: int | None = None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_regression(self) -> bool:
        return self.labels is None


NLI2 = ("entailment", "not_entailment")
TASKS: dict[str, GlueTask] = {t.name: t for t in [
    GlueTask("cola", ("0", "1"), Columns(3, None, 1, None), Columns(1, None, None), "CoLA", "CoLA.tsv"),
    GlueTask("sst2", ("0", "1"), Columns(0, None, 1, None), Columns(1, None, None), "SST-2", "SST-2.tsv",
             train_fields=2),
    GlueTask("mrpc", ("0", "1"), Columns(3, 4, 0, 1), Columns(3, 4, None), "MRPC", "MRPC.tsv"),
    GlueTask("stsb", None, Columns(7, 8, -1), Columns(7, 8, None), "STS-B", "STS-B.tsv"),
    GlueTask("qqp", ("0", "1"), Columns(3, 4, 5), Columns(1, 2, None), "QQP", "QQP.tsv"),
    GlueTask("mnli", ("contradiction", "entailment", "neutral"), Columns(8, 9, -1), Columns(8, 9, None),
             "MNLI", "MNLI-m.tsv", ("dev_matched.tsv", "dev_mismatched.tsv"),
             ("test_matched.tsv", "test_mismatched.tsv")),
    GlueTask("qnli", NLI2, Columns(1, 2, -1), Columns(1, 2, None), "QNLI", "QNLI.tsv"),
    GlueTask("rte", NLI2, Columns(1, 2, -1), Columns(1, 2, None), "RTE", "RTE.tsv"),
    GlueTask("wnli", ("0", "1"), Columns(1, 2, -1), Columns(1, 2, None), "WNLI", "WNLI.tsv"),
    # the diagnostic set, predicted with an MNLI model: diagnostic.tsv to submit, diagnostic-full.tsv (the labelled
    # release: four category columns, Domain, Premise, Hypothesis, Label) to score it (Matthews corr., GLUE's R3)
    GlueTask("ax", ("contradiction", "entailment", "neutral"), Columns(5, 6, 7, None), Columns(1, 2, None),
             "diagnostic", "AX.tsv", ("diagnostic-full.tsv",), ("diagnostic.tsv", "AX.tsv"), test_fields=3),
]}
ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "mnli-mm": "mnli", "diagnostic": "ax"}
SUBMISSION_NAMES = {("mnli", "test_mismatched.tsv"): "MNLI-mm.tsv"}
# msr_paraphrase_test.txt read for prediction: the train layout (Quality, #1 ID, #2 ID, #1 String, #2 String),
# its rows numbered 0, 1, ... as GLUE's MRPC test.tsv numbers them (download_glue_data.py writes the row number
# as the index, not the #1 ID: a submission indexed by sentence ids would match no test row)
MSR_TEST = Columns(3, 4, 0, None)


@dataclass
class Example:
    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None
    where: str  # "file:line", for messages


def get_task(name: str) -> GlueTask:
    """A task by its name or GLUE's own spelling, in any case (`RTE`, `SST-2`, `STS-B`, `MNLI-m`, `MNLI-mm`, `AX`)."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in TASKS:
        raise DataError(f"unknown GLUE task {name!r}{_nearest_task(key)}; choose from {', '.join(TASKS)}")
    return TASKS[key]


def _nearest_task(key: str) -> str:
    """` (did you mean rte?)` for a mistyped name (`rtee`, `sst`, `qnl`), by difflib among the names and GLUE's
    spellings; the task's own name is suggested."""
    import difflib

    close = difflib.get_close_matches(key, [*TASKS, *ALIASES], n=1)
    return f" (did you mean {ALIASES.get(close[0], close[0])}?)" if close else ""


def _is_label(task: GlueTask, cell: str) -> bool:
    if task.labels is not None:
        return cell in task.labels
    try:
        float(cell)
        return True
    except ValueError:
        return False


# the cells a GLUE header line has where a row has its label, its first field or its first text: a first row
# whose label is not a label is a header only when it reads like one (a row with label "2" or "entailed" is an
# error naming its line, not a header dropped without a word). diagnostic-full.tsv's header starts with `Lexical
# Semantics`: given to `--test` it was a row, and its category columns were predicted on as the texts
HEADER_LABELS = ("label", "labels", "gold_label", "score", "quality", "is_duplicate", "acceptability", "class")
HEADER_FIRST = ("index", "id", "idx", "guid", "quality", "sentence", "pairid", "lexical semantics")
HEADER_TEXTS = ("sentence", "sentence1", "sentence2", "question", "question1", "question2", "premise",
                "hypothesis", "text", "text_a", "#1 string", "#2 string")


def _cell_at(cells: list[str], i: int | None) -> str | None:
    if i is None or len(cells) <= max(i, -i - 1):
        return None
    return cells[i].strip().lstrip("\ufeff").lower()


def _is_header(task: GlueTask, cols: Columns, cells: list[str]) -> bool:
    label = _cell_at(cells, cols.label)
    if label is not None and _is_label(task, cells[cols.label].strip()):
        return False
    return (label in HEADER_LABELS or _cell_at(cells, 0) in HEADER_FIRST  # test files: "index", "id", "Quality"
            or _cell_at(cells, cols.text_a) in HEADER_TEXTS)


def _labelled_layout(task: GlueTask, cells: list[str], header: bool) -> bool:
    """Whether the first row of a file read for prediction is in the task's labelled (train/dev) layout where
    that differs from the test layout: CoLA's dev file (4 fields, no header) or SST-2's (`sentence<TAB>label`)
    read in the test layout (`index<TAB>sentence`) would predict on the label column and number the
    submission by the source or the sentence."""
    train, test = task.train, task.test
    if train.label is None or (train.text_a, train.text_b, train.guid) == (test.text_a, test.text_b, test.guid):
        return False
    if header:   # the header names its columns: a label column where the train layout has it
        return _cell_at(cells, train.label) in HEADER_LABELS
    if task.train_fields is not None and len(cells) != task.train_fields:
        return False
    if _cell_at(cells, train.label) is None or not _is_label(task, cells[train.label].strip()):
        return False
    # more fields than the test layout has, or a first field that is not an index (SST-2: the sentence)
    test_fields = max(i for i in (test.text_a, test.text_b, test.guid) if i is not None) + 1
    return len(cells) > test_fields or not cells[0].strip().isdigit()


def _test_layout_hint(task: GlueTask, cells: list[str], header: list[str] | None) -> str:
    """For an error reading a file as labelled: a hint when the file is in the task's unlabelled test layout
    (a header that names no label column, or a headerless row as wide as the test layout)."""
    if header is not None:
        looks_unlabelled = not any(cell.strip().lstrip("\ufeff").lower() in HEADER_LABELS for cell in header)
    else:
        test = task.test
        looks_unlabelled = len(cells) == max(i for i in (test.text_a, test.text_b, test.guid) if i is not None) + 1
    return " (an unlabelled test file? give it with --test)" if looks_unlabelled else ""


def _parse_label(task: GlueTask, cell: str, where: str) -> str | float:
    cell = cell.strip()
    if task.is_regression:
        try:
            score = float(cell)
        except ValueError:
            raise DataError(f"{where}: score {cell!r} is not a number") from None
        if not math.isfinite(score):
            raise DataError(f"{where}: score {cell!r} is not a finite number")
        return score
    if cell not in task.labels:
        raise DataError(f"{where}: label {cell!r} is not one of {task.name}'s labels {list(task.labels)}")
    return cell


def read_examples(task: GlueTask | str, path: str | Path, has_labels: bool = True,
                  problems: Problems | None = None, skip_option: str | None = None) -> list[Example]:
    """Examples of one GLUE file (`iter_examples`, all of them in a list)."""
    return list(iter_examples(task, path, has_labels, problems, skip_option))


def iter_examples(task: GlueTask | str, path: str | Path, has_labels: bool = True,
                  problems: Problems | None = None, skip_option: str | None = None) -> Iterator[Example]:
    """Examples of one GLUE file, one at a time as they are read (`predict glue` on QQP's 390,965 test rows holds a
    window of them), each row checked as it comes. A row with too few fields, or with more than the file's header names
    (a tab inside a text: its texts would be cut at the tab and another column read as the second text), is an error
    naming the file and line, unless `problems` is given and the file is labelled: then it is skipped and counted there.
    A test file's row is never skipped (`has_labels` False): the GLUE server takes a submission only with a prediction
    for every test row, and one per index: a test file's index given twice is an error naming both rows. A file without
    a single example (empty, or only a header) is an error: found when the file is read, before any training.
    `skip_option`: the option that skips such rows (the CLI's `--skip-bad-rows`), named in the error of a labelled file
    read without `problems` (QQP's older train.tsv has questions cut in two by a line break: 4 fields, then 3). A
    Hugging Face datasets export of the task (`hub_format`) is read in its columns (`iter_hub_examples`). The errors
    found only at the file's end (no examples) come once every row has been read."""
    task = get_task(task) if isinstance(task, str) else task
    path = Path(path)
    hub = hub_format(path)
    if hub is not None:     # the Hugging Face Hub's GLUE (Parquet, Arrow, save_to_disk, to_json, to_csv)
        yield from iter_hub_examples(task, path, has_labels, problems, skip_option, hub)
        return
    cols = task.train if has_labels else task.test
    if task.name == "mrpc" and not has_labels and is_msr_file(path):
        cols = MSR_TEST
    count = 0                # the examples so far
    skipped = 0
    first_at: dict[str, int] = {}     # a test file's index -> the line that had it (a number: 390k of them)
    header_cells: list[str] | None = None
    widest = None            # a header's field count: no row of its file has more
    for n, (lineno, cells) in enumerate(read_tsv(path)):
        where = f"{path}:{lineno}"
        if n == 0:
            header = _is_header(task, cols, cells)
            header_cells = cells if header else None
            widest = len(cells) if header else None
            if not has_labels and cols is task.test and _labelled_layout(task, cells, header):
                cols = task.train   # a labelled file to predict on: its texts, not its label (which is ignored)
            needed = max(i if i >= 0 else -i - 1 for i in (cols.text_a, cols.text_b, cols.label, cols.guid)
                         if i is not None) + 1
            exact = task.train_fields if cols is task.train else None
            most = task.test_fields if cols is task.test else None
        if most is not None and any(cell.strip() for cell in cells[most:]):  # the header line too
            raise DataError(_too_wide(task, where, cells, most))
        if n == 0 and header:
            continue
        # (empty fields past the header's, trailing tabs, cut no text: read as before)
        wide = widest is not None and any(cell.strip() for cell in cells[widest:])
        if len(cells) < needed or (exact is not None and len(cells) != exact) or wide:
            if problems is None or not has_labels:
                kept = "" if problems is None else NO_TEST_SKIP
                skip = (f"; {skip_option} skips such training and dev rows (counted in the notes)"
                        if skip_option and has_labels and problems is None else "")
                if len(cells) >= needed and exact is not None and len(cells) != exact:
                    # the first row so is another task's file (skipping would skip every row); a later one, among
                    # rows in the task's layout, a tab inside a text: --skip-bad-rows skips it as it skips a short row
                    first_row = not count and not skipped
                    raise DataError(f"{where}: {len(cells)} tab-separated fields, {task.name}'s layout has {exact} "
                                    + ("(another task's file?)" if first_row else "(a tab inside a text?)")
                                    + (kept or ("" if first_row else skip)))
                if wide:
                    raise DataError(f"{where}: {len(cells)} tab-separated fields, the header line has {widest} "
                                    f"(a tab inside a text?){kept or skip}")
                raise DataError(f"{where}: {len(cells)} tab-separated fields, {task.name} needs {needed}"
                                + ((_test_layout_hint(task, cells, header_cells) if has_labels else "") or skip)
                                + kept)
            problems.add("malformed row skipped", where)
            skipped += 1
            continue
        label = None
        if has_labels and cols.label is not None:
            try:
                label = _parse_label(task, cells[cols.label], where)
            except DataError as exc:
                raise DataError(f"{exc}{_test_layout_hint(task, cells, header_cells)}") from None
        guid = cells[cols.guid].strip() if cols.guid is not None else str(count)
        if not has_labels:   # one prediction per index: two test files joined into one wrote a row "index" and
            if not guid:           # every index twice into the submission, which the server rejects
                raise DataError(f"{where}: no index in the index column; a submission is keyed by it")
            if guid in first_at:
                raise DataError(f"{where}: index {shown(guid)} is also the index of {path}:{first_at[guid]}; a "
                                "submission has one row per test index (two test files joined into one?)")
            first_at[guid] = lineno
        text_b = cells[cols.text_b] if cols.text_b is not None else None
        count += 1
        yield Example(guid, cells[cols.text_a], text_b, label, where)
    if not count:
        why = f"all {skipped} rows are malformed" if skipped else "the file is empty or holds only a header line"
        raise DataError(f"{path}: no examples ({why})")


def _too_wide(task: GlueTask, where: str, cells: list[str], most: int) -> str:
    """A test-layout row with text past the fields the task's test file has (`GlueTask.test_fields`)."""
    if task.name == "ax":
        return (f"{where}: {len(cells)} tab-separated fields, GLUE's diagnostic.tsv has 3 (index, sentence1, "
                "sentence2); an MNLI test file is predicted with --task mnli (MNLI-m.tsv / MNLI-mm.tsv)")
    return f"{where}: {len(cells)} tab-separated fields, {task.name}'s test layout has {most} (another task's file?)"


# --------------------------------------------------------------- Hugging Face datasets' GLUE (`nyu-mll/glue`)
# `datasets.load_dataset("nyu-mll/glue", TASK)` gives each task its own columns, followed by `label` and `idx`: the
# label a ClassLabel number (STS-B's a score), -1 in a test split (GLUE's test labels are not public), and `idx` the
# row's number in GLUE's own file, which for a test split is the index column a leaderboard submission is keyed by
HF_COLUMNS: dict[str, tuple[str, ...]] = {
    "cola": ("sentence",), "sst2": ("sentence",), "mrpc": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"), "stsb": ("sentence1", "sentence2"), "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"), "wnli": ("sentence1", "sentence2"),
    "ax": ("premise", "hypothesis"),
}
# the task's labels in the order of datasets' label numbers, where it is not GLUE's (datasets' MNLI and AX have
# entailment, neutral, contradiction; GLUE's label list, which a model's outputs follow, is sorted)
HF_LABELS: dict[str, tuple[str, ...]] = {"mnli": ("entailment", "neutral", "contradiction"), "qnli": NLI2,
                                          "rte": NLI2, "ax": ("entailment", "neutral", "contradiction")}
# the class names datasets gives GLUE's 0/1 labels (its ClassLabel names; a transformers classifier fine-tuned with
# run_glue.py names its classes so in config.json's id2label)
HF_NAMES: dict[str, tuple[str, ...]] = {
    "cola": ("unacceptable", "acceptable"), "sst2": ("negative", "positive"),
    "mrpc": ("not_equivalent", "equivalent"), "qqp": ("not_duplicate", "duplicate"),
    "wnli": ("not_entailment", "entailment"),
}
HF_NO_LABEL = -1             # datasets' label of a row without one (every row of a test split)
# the Hub's split names per GLUE split (MNLI: matched and mismatched dev and test; AX: a test split only)
HUB_SPLITS: dict[str, tuple[str, ...]] = {"train": ("train",), "dev": ("validation",), "test": ("test",)}
MNLI_HUB_SPLITS = {"train": ("train",), "dev": ("validation_matched", "validation_mismatched"),
                   "test": ("test_matched", "test_mismatched")}
# the files a split may be exported as: the Hub's Parquet shards, save_to_disk's Arrow, to_json, to_csv
HUB_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".ndjson", ".csv", ".tsv")
# the names of the Hub's splits (a file's, less its shard count, or a DatasetDict's folder's)
HUB_SPLIT_NAMES = ("train", "validation", "test", "validation_matched", "validation_mismatched", "test_matched",
                   "test_mismatched")
HUB_MNLI_CONFIGS = ("mnli_matched", "mnli_mismatched")   # the Hub's MNLI dev and test, one config each


def hub_label_names(task: GlueTask) -> tuple[str, ...]:
    """The task's labels (GLUE's names) in the order of datasets' label numbers: `hub_label_names(mnli)[0]` is what
    datasets' label 0 means (entailment)."""
    return HF_LABELS.get(task.name, task.labels or ())


def _hub_header_tasks(cells: list[str]) -> list[str]:
    """The tasks whose datasets columns a header line names (a `to_csv(sep="\\t")` export: the texts, `label` and
    `idx` in any order, `label` left out of a test split's export); [] for GLUE's own headers (none has `idx`)."""
    names = [cell.strip().lstrip("\ufeff").lower() for cell in cells]
    if "idx" not in names or len(set(names)) != len(names):
        return []
    return [name for name, texts in HF_COLUMNS.items()
            if set(names) - {"label"} == set(texts) | {"idx"}]


def hub_format(path: Path) -> str | None:
    """How a Hugging Face datasets export of a GLUE split is read (`tables.read_records`' format: "parquet",
    "arrow", "jsonl", "csv", "tsv"; "folder" for a save_to_disk folder, "parquet" for refs/convert/parquet's split
    folder of numbered files), or None for GLUE's own TSV files (and
    for a path that is not there: the TSV reader names it). A `.tsv` is an export when its header line names
    datasets' columns (`idx`), as `Dataset.to_csv(path, sep="\\t")` writes it."""
    if path.is_dir():      # a save_to_disk folder, or a refs/convert/parquet split folder (`rte/validation/`)
        return "folder" if is_saved_dataset(path) else ("parquet" if split_folder_files(path) else None)
    if not path.is_file():
        return None
    kind = columnar_format(path)
    if kind is not None:
        return kind
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    try:
        first = next(iter(read_tsv(path)), None)
    except DataError:        # not UTF-8 text: the TSV reader says so
        return None
    return "tsv" if first is not None and _hub_header_tasks(first[1]) else None


def hub_shards(path: Path) -> list[Path]:
    """The files read for a Hub export given as `path`: all the shards of the split a shard belongs to
    (`train-00000-of-00002.parquet`: it and `train-00001-of-00002.parquet`; refs/convert/parquet's `0000.parquet`:
    the numbered files beside it), in order, a missing one refused naming it (`tables.split_shards`); a folder's
    (`tables.split_folder_files`); [path] for any other file. A split is read whole: its test rows all have to be
    submitted, and idx (or the row number) runs on through the shards."""
    if path.is_dir():
        return split_folder_files(path) or [path]
    return split_shards(path)


def hub_split(path: Path) -> str | None:
    """The Hub split a file or folder is by its name (`validation-00000-of-00001.parquet`, `test_mismatched/`,
    `validation.jsonl`; a numbered Parquet file or a save_to_disk Arrow file by its folder's:
    `rte/validation/0000.parquet`): train, validation, test, or MNLI's validation_matched, ..., test_mismatched (the
    Hub's `mnli_mismatched/validation-*.parquet` by its config folder); None for another name (`dev.tsv`,
    `rte_validation.csv`)."""
    split = export_stem(Path(path)).lower()
    if split not in HUB_SPLIT_NAMES:
        return None
    config = hub_config(path)
    if split in ("validation", "test") and config in HUB_MNLI_CONFIGS:
        split += config[len("mnli"):]
    return split


def hub_config(path: Path) -> str:
    """The Hub config folder a split's file or folder is in, in lower case (`rte/validation-00000-of-00001.parquet`
    and `rte/validation/0000.parquet`: rte)."""
    return split_owner(Path(path)).parent.name.lower()


def split_name(path: Path) -> str:
    """A dev file's name in its predictions file and metrics (`dev_predictions.tsv`): its stem with `val` as `dev`
    (`val.tsv`: dev; `rte_validation.jsonl`: rte_dev), and a Hub split's GLUE name
    (`validation-00000-of-00001.parquet`: dev; `validation_mismatched/`: dev_mismatched), so a Hub export and
    GLUE's file write the same names."""
    split = hub_split(path)
    stem = split if split is not None else Path(path).stem
    return stem.replace("validation", "dev").replace("val", "dev")


def _hub_split_file(folder: Path, name: str) -> Path | None:
    """The export of the Hub split `name` in `folder` (`tables.split_exports`): its shards (the first is returned;
    the rest are read with it), `NAME.jsonl` / `.parquet` / `.arrow` / `.csv` / ..., or a `NAME/` folder (a
    DatasetDict's save_to_disk, or refs/convert/parquet's numbered files). Two exports of one split are refused
    (their rows would be read from one of them, without a word which)."""
    exports = split_exports(folder, lambda stem: stem == name, HUB_SUFFIXES)
    refuse_two_exports(folder, exports, f"the split {name}")
    return exports[0].path if exports else None


def hub_split_files(task: GlueTask, folder: Path, split: str) -> list[Path]:
    """A split's exports in a folder of the Hub's GLUE files: the task's config folder (`sst2/` of the Hub's
    repository, or a DatasetDict's save_to_disk folder; MNLI's `mnli_matched/` or `mnli_mismatched/` holds its
    `validation` and `test` splits), the repository itself (its `TASK/` is used), or a repository's `data/` (a
    dataset of one config, as `push_to_hub` writes it). Split folders (refs/convert/parquet's `rte/validation/`)
    are found as the files are."""
    if task.name == "ax" and split != "test":
        return []
    for root in (folder, folder / task.name, folder / "data"):
        names = (MNLI_HUB_SPLITS if task.name == "mnli" and root.name.lower() not in HUB_MNLI_CONFIGS
                 else HUB_SPLITS)[split]
        if root.is_dir():
            found = [path for path in (_hub_split_file(root, name) for name in names) if path is not None]
            if found:
                return found
    return []


def read_hub_examples(task: GlueTask, path: Path, has_labels: bool = True, problems: Problems | None = None,
                      skip_option: str | None = None, fmt: str | None = None) -> list[Example]:
    """Examples of a Hugging Face datasets export of a GLUE split (`iter_hub_examples`, all of them in a list)."""
    return list(iter_hub_examples(task, path, has_labels, problems, skip_option, fmt))


def iter_hub_examples(task: GlueTask, path: Path, has_labels: bool = True, problems: Problems | None = None,
                      skip_option: str | None = None, fmt: str | None = None) -> Iterator[Example]:
    """Examples of a Hugging Face datasets export of a GLUE split (`hub_format`), one at a time as they are read by
    `tables.read_records` (a Hub shard with its split's other shards). Labels: datasets' numbers in its ClassLabel order
    (`hub_label_names`), or the class names (GLUE's or datasets'); -1, a row without a label, makes the file a test
    split: given as labelled (`has_labels`) it is refused, and a -1 among labelled rows is an error naming it. The guid
    is `idx` (the row's index in GLUE's own file: a test split's submission index), else the row number from 0 through
    the split's shards in order (the index of GLUE's own file for the whole split in datasets' order); a test split
    whose rows have idx in some files or rows and not in others is refused (two numberings in one submission). A row
    whose text is not a string is malformed: skipped and counted in `problems` (a labelled file's), or an error naming
    it and `skip_option`. Another task's columns, or a table in other columns, are errors naming the columns. The errors
    that need the whole split (no examples; -1 labels in a labelled one) come once every row has been read."""
    fmt = fmt or hub_format(path)
    files = hub_shards(path)
    texts = HF_COLUMNS[task.name]
    count = 0                          # the examples so far
    unlabelled, first_unlabelled = 0, ""
    first_at: dict[str, tuple[int, int]] = {}      # idx -> the file (its place in `files`) and row that had it
    first: tuple[bool, str] | None = None   # whether the first row has an idx column, and where it is
    skipped = 0
    for number, file in enumerate(files):
        for row, record in read_records(file, None if file.is_dir() else fmt):
            where = f"{file}:{row}"
            if not count and not skipped:
                _check_hub_columns(task, record, where, has_labels)
            values = [record.get(name) for name in texts]
            bad = next((name for name, value in zip(texts, values) if not isinstance(value, str)), None)
            if bad is not None:
                what = "empty" if record.get(bad) is None else f"a {type(record.get(bad)).__name__}"
                if problems is not None and has_labels:
                    problems.add("malformed row skipped", where)
                    skipped += 1
                    continue
                skip = (f"; {skip_option} skips such training and dev rows (counted in the notes)"
                        if skip_option and has_labels else "")
                raise DataError(f"{where}: column {bad!r} is {what}, not a text"
                                + (NO_TEST_SKIP if problems is not None else skip))
            label = None
            if has_labels:
                label = _hub_label(task, record.get("label"), where)
                if label is None:
                    unlabelled += 1
                    first_unlabelled = first_unlabelled or where
            if first is None:
                first = ("idx" in record, where)
            elif not has_labels and ("idx" in record) != first[0]:
                # numbered by idx here and by row there, the submission's indexes would mix two numberings
                raise DataError(f"{where}: {'an' if first[0] is False else 'no'} idx column, and "
                                f"{first[1]} has {'none' if first[0] is False else 'one'}: a split's rows are "
                                "indexed all by idx (datasets' column, a submission's index) or all by row number; "
                                "are these two exports' files?")
            guid = _hub_index(record.get("idx"), where) if "idx" in record else str(count)
            if not has_labels:   # one prediction per index: the server takes no other
                if guid in first_at:
                    at_file, at_row = first_at[guid]
                    raise DataError(f"{where}: idx {guid} is also the idx of {files[at_file]}:{at_row}; a "
                                    "submission has one row per test index")
                first_at[guid] = (number, row)
            count += 1
            yield Example(guid, values[0], values[1] if len(values) > 1 else None, label, where)
    if not count:
        why = f"all {skipped} rows are malformed" if skipped else "the file holds no rows"
        raise DataError(f"{path}: no examples ({why})")
    if unlabelled:
        if unlabelled == count:
            raise DataError(f"{first_unlabelled}: every label is -1, which Hugging Face datasets writes for a row "
                            "without a label: a test split (GLUE's test labels are not public), predicted with "
                            "--test, not trained on or scored")
        raise DataError(f"{first_unlabelled}: label -1 (no label, as in a test split) among labelled rows "
                        f"({unlabelled} of {count} rows)")


def _check_hub_columns(task: GlueTask, record: dict, where: str, has_labels: bool) -> None:
    """The first row of an export has the task's datasets columns (and `label`, read as labelled): another task's
    export (sst2's `sentence` given to rte) or a table in other columns is an error naming what it has."""
    texts = HF_COLUMNS[task.name]
    missing = [name for name in texts if name not in record]
    if missing:
        keys = [str(key).strip().lower() for key in record]
        others = [name for name in _hub_header_tasks(keys + (["idx"] if "idx" not in keys else []))
                  if name != task.name]
        whose = f" (the columns of glue/{', glue/'.join(others)})" if others else ""
        raise DataError(f"{where}: no column {', '.join(map(repr, missing))}: a Hugging Face datasets export of "
                        f"glue/{task.name} has the columns {', '.join(texts)}, label, idx; this one has "
                        f"{', '.join(map(shown, record)) or 'none'}{whose}; a table in other columns is read by "
                        f"`albertlm finetune classify` with {_classify_options(task)}")
    if has_labels and "label" not in record:
        raise DataError(f"{where}: no column 'label'; a file without labels is predicted with --test FILE")


def _hub_label(task: GlueTask, value, where: str) -> str | float | None:
    """A datasets label as the task's label: a class number in datasets' order (`hub_label_names`; a CSV's "2" too),
    a class name (GLUE's, or datasets' ClassLabel name), an STS-B score; None for -1 (no label)."""
    if value is None or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}: no label in column 'label'")
    if task.is_regression:
        score = _parse_label(task, str(value), where)
        return None if score == HF_NO_LABEL else score
    names = hub_label_names(task)
    by_name = {**dict(zip(HF_NAMES.get(task.name, ()), task.labels)), **{label: label for label in task.labels}}
    if isinstance(value, str):
        text = value.strip()
        if text in by_name and not text.lstrip("-").isdigit():
            return by_name[text]
        try:
            value = int(text)
        except ValueError:
            value = text
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value == HF_NO_LABEL:
        return None
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    meaning = ", ".join(f"{i} {name}" for i, name in enumerate(HF_NAMES.get(task.name, names)))
    raise DataError(f"{where}: label {shown(value)} is not one of datasets' glue/{task.name} labels ({meaning}; -1 "
                    "in a test split)")


def _hub_index(value, where: str) -> str:
    """A row's `idx` as the submission writes it (GLUE's index column: 0, 1, ...)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not text.isdigit():
        raise DataError(f"{where}: idx {shown(value)} is not a row index (datasets' idx is 0, 1, ...)")
    return str(int(text))


def _classify_options(task: GlueTask) -> str:
    """The `finetune classify` options that read a table in datasets' columns for the task (GLUE's metric as
    --best-metric; STS-B's --regression): for a file in other columns."""
    texts = HF_COLUMNS[task.name]
    options = f"--text-column {texts[0]}" + (f" --text-pair-column {texts[1]}" if len(texts) > 1 else "")
    options += " --label-column label --id-column idx"
    return options + {"cola": " --best-metric mcc", "mrpc": " --best-metric f1", "qqp": " --best-metric f1",
                      "stsb": " --regression"}.get(task.name, "")

# why --skip-bad-rows stops at a test row (a submission missing a row is rejected by the GLUE server)
NO_TEST_SKIP = ("; --skip-bad-rows skips training and dev rows only: a submission needs a prediction for every "
                "test row, so fix this one")


def is_msr_file(path: Path) -> bool:
    """One of MRPC's original files (`msr_paraphrase_train.txt`, `msr_paraphrase_test.txt`)."""
    return Path(path).name.startswith("msr_paraphrase")


def mrpc_id_pairs(path: str | Path) -> dict[str, tuple[str, str]]:
    """MRPC rows' sentence ids (`#1 ID`, `#2 ID`: the second and third fields) by their "file:line", for rows
    that have them as numbers (GLUE cuts dev.tsv out of msr_paraphrase_train.txt by these ids)."""
    path, pairs = Path(path), {}
    for lineno, cells in read_tsv(path):
        if len(cells) > 2 and cells[1].strip().isdigit() and cells[2].strip().isdigit():
            pairs[f"{path}:{lineno}"] = (cells[1].strip(), cells[2].strip())
    return pairs


# MNLI's genres (the fourth column of GLUE's MNLI files): its matched dev and test sets are of its five training
# genres, its mismatched sets of five others (download_glue_data.py's files; the Hub's have no genre column)
MNLI_GENRES: dict[str, tuple[str, ...]] = {
    "matched": ("fiction", "government", "slate", "telephone", "travel"),
    "mismatched": ("facetoface", "letters", "nineeleven", "oup", "verbatim"),
}
MNLI_GENRE_COLUMN = 3


def mnli_set(path: str | Path) -> str | None:
    """"matched" or "mismatched": the MNLI set a file in GLUE's MNLI layout is by its genre column, where every row's
    genre is one of that set's five (MNLI_GENRES); None where they say neither (other or both sets' genres, a row
    without the column, a Hub export, which has none, or a file that cannot be read). A renamed test file (`test.tsv`)
    holding the mismatched set was written as MNLI-m.tsv, the matched set's submission file."""
    path = Path(path)
    sides: set[str] = set()
    try:
        if hub_format(path) is not None:
            return None
        for n, (_, cells) in enumerate(read_tsv(path)):
            genre = _cell_at(cells, MNLI_GENRE_COLUMN)
            if n == 0 and genre == "genre":   # the header line
                continue
            side = next((name for name, genres in MNLI_GENRES.items() if genre in genres), None)
            if side is None:
                return None
            sides.add(side)
            if len(sides) > 1:
                return None
    except (DataError, OSError):
        return None
    return next(iter(sides), None)


def find_split(task: GlueTask, data_dir: str | Path, split: str) -> list[Path]:
    """Files of a split in a task directory. dev falls back to `val.tsv` (re-split copies);
    MRPC train/test fall back to the original `msr_paraphrase_{train,test}.txt`; a split without GLUE's files
    falls back to the Hugging Face Hub's (`hub_split_files`: `validation-00000-of-00001.parquet`, a DatasetDict's
    `validation/`, `validation.jsonl`, ..., in the folder or its `TASK/`). A directory that does not exist (or a
    file) is an error naming it, not "no data"."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: {'not a directory' if data_dir.exists() else 'no such directory'} "
                        f"(--data-dir is the task's GLUE folder, e.g. glue/{task.dir_name})")
    candidates = {"train": ("train.tsv",), "dev": task.dev_files or (), "test": task.test_files}[split]
    found = [data_dir / name for name in candidates if (data_dir / name).is_file()]
    if split == "dev" and not found and (data_dir / "val.tsv").is_file():
        found = [data_dir / "val.tsv"]
    if task.name == "mrpc" and not found and split in ("train", "test"):
        msr = data_dir / f"msr_paraphrase_{split}.txt"
        found = [msr] if msr.is_file() else []
    return found or hub_split_files(task, data_dir, split)


def label_ids(task: GlueTask, examples: list[Example]) -> list:
    """Class ids (scores for STS-B); an example without a label (a file read unlabelled) is an error naming it."""
    unlabelled = next((e for e in examples if e.label is None), None)
    if unlabelled is not None:
        raise DataError(f"{unlabelled.where}: no label ({task.name}); an unlabelled file is predicted with --test")
    if task.is_regression:
        return [float(e.label) for e in examples]
    index = {label: i for i, label in enumerate(task.labels)}
    return [index[e.label] for e in examples]


def model_class_order(task: GlueTask, id2label: dict | None) -> list[int] | None:
    """Where a model whose classes are named (`id2label` of its config.json, {"0": name, ...}) keeps each of
    the task's labels: `order[j]` is the model's output for `task.labels[j]`. None when the names say nothing
    (LABEL_0, ..., another count, names that are not the task's) or the order is GLUE's already. A
    transformers MNLI classifier fine-tuned on `datasets`' GLUE has entailment, neutral, contradiction: read
    in GLUE's order (contradiction, entailment, neutral) every prediction named another class."""
    if task.is_regression or not isinstance(id2label, dict) or len(id2label) != task.num_labels:
        return None
    try:
        names = [str(id2label[key]).strip().lower() for key in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return None
    if sorted(int(key) for key in id2label) != list(range(task.num_labels)):
        return None
    hf = HF_NAMES.get("mnli" if task.name == "ax" else task.name, ())
    ours = {**{name: label for name, label in zip(hf, task.labels)}, **{label: label for label in task.labels}}
    glue_names = [ours.get(name) for name in names]
    if None in glue_names or sorted(glue_names) != sorted(task.labels):
        return None
    order = [glue_names.index(label) for label in task.labels]
    return None if order == list(range(task.num_labels)) else order


STSB_RANGE = (0.0, 5.0)   # the scale of STS-B's gold similarity scores


def write_submission(task: GlueTask, examples: Iterable[Example], predictions: Iterable, path: str | Path,
                     by_guid: bool = False, clip: bool | None = None) -> None:
    """GLUE submission TSV (`submission_lines`), written as the rows and predictions come (`predict glue` gives a
    test file's indexes as kept from its first reading, never its rows held whole) through a temporary file renamed
    into place (`specs.write_lines_atomic`: `checkpoint.write_text_atomic` without the whole text in memory): never
    a half-written file under its name, none left when the writing fails or is interrupted."""
    from albertlm.tasks.specs import write_lines_atomic

    write_lines_atomic(Path(path), submission_lines(task, examples, predictions, by_guid, clip))


def submission_lines(task: GlueTask, examples: Iterable[Example], predictions: Iterable, by_guid: bool = False,
                     clip: bool | None = None) -> Iterator[str]:
    """The lines of a GLUE submission TSV, one an example in order: `index<TAB>prediction`, label names for
    classification, scores for STS-B (3 decimals). Test files carry their own index column (`by_guid`: a submission
    file); dev predictions are numbered by position. `clip` (default: a submission file) keeps STS-B scores on the
    gold scale, [0, 5]: a regression head can predict -0.2 or 5.3, which no pair can score; dev predictions stay as
    the metrics saw them, so that scoring the file gives the run's numbers: there a score that 3 decimals do not
    hold exactly is written in full (rounded, an early model's scores, 0.0123 and 0.0124, were all 0.012: a
    correlation of 0 where the run had its own, and ties that moved Spearman's)."""
    clip = by_guid if clip is None else clip
    low, high = STSB_RANGE
    yield "index\tprediction"
    for i, (example, pred) in enumerate(zip(examples, predictions)):
        index = example.guid if by_guid else str(i)
        if task.is_regression:
            score = min(max(float(pred), low), high) if clip else float(pred)
            value = f"{score:.3f}"
            if not by_guid and float(value) != score:
                value = repr(score)
        else:
            value = task.labels[int(pred)]
        yield f"{index}\t{value}"


def read_predictions(task: GlueTask, path: str | Path) -> dict[str, str | float]:
    """A submission-format file (index, prediction) as {index: label or score}. An index given twice is an error
    naming both lines (the later prediction replaced the earlier one, and the scores moved, without a word)."""
    out, lines = {}, {}
    for n, (lineno, cells) in enumerate(read_tsv(path)):
        if n == 0 and cells[0].strip().lower() in ("index", "id"):
            continue
        if len(cells) < 2:
            raise DataError(f"{path}:{lineno}: expected 'index<TAB>prediction'")
        index = cells[0].strip()
        if index in lines:
            raise DataError(f"{path}:{lineno}: a second prediction for index {shown(index)} (the first at line "
                            f"{lines[index]})")
        lines[index] = lineno
        out[index] = _parse_label(task, cells[1], f"{path}:{lineno}")
    return out


def other_predictions(task: GlueTask, path: str | Path, rows: int) -> str | None:
    """Why the dev predictions file at `path` (`<split>_predictions.tsv`, named by the split alone) is not of this
    task's dev set of `rows` rows, which a prediction into its folder would replace: another number of predictions, or
    a file that is no predictions of `task` (a label it does not have). None where it may be this set's (an earlier
    prediction of it, the same number of rows of the task's labels) or cannot be read at all."""
    try:
        predictions = read_predictions(task, path)
    except DataError as exc:     # a label the task has not, an index twice, a row without a prediction
        return f"not {task.name}'s predictions ({exc})"
    except (OSError, UnicodeDecodeError):
        return None
    if len(predictions) != rows:
        return f"{len(predictions)} predictions, where this dev set has {rows} rows"
    return None


def is_diagnostic(path: Path) -> bool:
    """GLUE's diagnostic set (AX), by the file's name (diagnostic.tsv, diagnostic-full.tsv, AX.tsv), or the Hub's
    (the test split of its `ax` config: `ax/test-00000-of-00001.parquet`)."""
    path = Path(path)
    return (path.name.lower().startswith(("diagnostic", "ax"))
            or (hub_config(path) == "ax" and hub_split(path) == "test"))


def file_task(task: GlueTask, path: Path) -> GlueTask:
    """The task whose layout and labels a file is read in: the diagnostic set's (by the file's name) for MNLI and
    AX, which ride along together, else the task's own. The diagnostic set given to another task is refused: its
    three MNLI classes are no classes of that task's model (an RTE model's `--test diagnostic.tsv` wrote AX.tsv
    with its two classes named contradiction and entailment, and scoring diagnostic-full.tsv was a KeyError)."""
    if not is_diagnostic(path):
        return task
    if task.name not in ("mnli", "ax"):
        raise DataError(f"{path}: by its name GLUE's diagnostic set (AX), which is predicted and scored in MNLI's "
                        f"three classes with an MNLI model, not for --task {task.name}: `albertlm predict glue --task "
                        f"ax --model MNLI_RUN/best --test diagnostic.tsv` (a {task.name} file under this name: "
                        "rename it)")
    return get_task("ax")


def runs_glue_score(runs) -> dict:
    """GLUE's overall score (`metrics.glue_score`) of fine-tuning runs, one per task: each run's folder (or its
    `metrics.json`) gives its task and its best dev metrics; MNLI's matched and mismatched dev sets are averaged, the
    diagnostic set beside them left out. A run that is not a GLUE run, has no dev metrics or several dev sets (which
    one would be GLUE's?), or a task given by two runs, is a DataError naming it. A run the time budget stopped
    (`"status": "budget"`) is scored by its best dev metrics so far: its `status` is not read here (`evaluate glue
    --score` warns about each such run). The result also holds `runs`: each task's run, as given."""
    import json

    from albertlm.tasks.metrics import glue_score

    results: dict[str, list[dict]] = {}
    where: dict[str, str] = {}
    for run in runs:
        path = Path(run)
        path = path / "metrics.json" if path.is_dir() else path
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{run}: no metrics.json (a fine-tuning run writes it when it ends)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(f"{path}: not a run's metrics.json ({exc})") from None
        if not isinstance(record, dict) or record.get("family") != "glue" or not isinstance(record.get("best"), dict):
            family = record.get("family") if isinstance(record, dict) else None
            raise DataError(f"{path}: not the metrics.json of a `finetune glue` run"
                            + (f" (a {family} run)" if isinstance(family, str) else ""))
        task = get_task(str(record.get("task"))).name
        sets = {name: scores for name, scores in record["best"].items()
                if isinstance(scores, dict) and not name.lower().startswith(("diagnostic", "ax"))}
        if not sets:
            raise DataError(f"{path}: no dev metrics ({task} was fine-tuned without a dev set)")
        if len(sets) > 1 and task != "mnli":
            raise DataError(f"{path}: {len(sets)} dev sets ({', '.join(sets)}); GLUE's score takes one per task: "
                            "score that one with `albertlm evaluate glue --predictions`")
        if task in where:
            raise DataError(f"{run} and {where[task]} are both {task} runs; give one run per task")
        where[task], results[task] = str(run), list(sets.values())
    if not where:
        raise DataError("no runs given")
    scored = glue_score(results)
    return {**scored, "runs": {task: where[task] for task in scored["tasks"]}}
