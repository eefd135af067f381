"""RACE: reading `RACE/{train,dev,test}/{middle,high}/*.txt` (one JSON passage per file, several
questions each; or google-research's `all.txt`, the level's passages one per line; either also gzip, bzip2, xz or
zstd compressed, `13.txt.gz`), or a Hugging Face export of RACE (one row per question: `train`, `validation`,
`test` as JSON lines, Parquet, Arrow or CSV, the text ones also compressed, or the split folders
`DatasetDict.save_to_disk` writes), and building 4-way multiple-choice features.

Each choice is `[CLS] article [SEP] question-with-option [SEP]`: a question containing `_` (after NFKD, as
google's preprocessing: `＿` too) has it replaced by the option, otherwise the option is appended (google-research
`race_utils.py`).
"""
from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from albertlm.errors import UserError
from albertlm.tasks.features import Feature, build_pair
from albertlm.tasks.tables import (COMPRESSED_SUFFIXES, DataError, Problems, SplitExport, export_stem, open_text,
                                   read_json, read_records, refuse_two_exports, shown, split_exports,
                                   split_folder_files)

LEVELS = ("middle", "high")
LETTERS = "ABCD"
NUM_CHOICES = 4


@dataclass
class RaceExample:
    qid: str             # "<level>/<file>#<question index>"
    level: str
    article: str
    question: str
    options: list[str]
    label: int | None    # index of the right option


SPLITS = ("train", "dev", "test")
ALL_FILE = "all.txt"    # google-research run_race.py reads RACE/<split>/<level>/all.txt: one passage per line


def read_race(root: str | Path, split: str, levels: Sequence[str] = LEVELS,
              answers: bool = True) -> list[RaceExample]:
    """All questions of one split; `root` is the RACE directory (holding train/dev/test) or a split dir. A level
    named twice (`--levels middle,middle`) is read once (its questions would count twice in the accuracy).
    A split directory given itself (`RACE/dev`) is read as its own split only: as the training split or as
    another held-out one (`--split test`, or `test_predictions.json` scored) it is refused, since question ids
    carry no split and dev/ and test/ hold files of the same names.
    `answers=False` (data to predict): a passage without answers (no `answers` field, or an empty list) is read
    with the label None, so that new questions can be answered by a model."""
    root = Path(root)
    levels = tuple(dict.fromkeys(levels))
    if not levels:
        raise DataError(f"{root}: no RACE level to read; levels are {', '.join(LEVELS)}")
    exported = hf_split_files(root, split)
    if (root / split).is_dir() and _split_folder(root / split) is None:
        exported = []    # the original layout's RACE/<split>/ is read first
    if exported:         # a Hugging Face export (`validation.jsonl`, `test-00000-of-00001.parquet`, ...)
        examples = [e for e in read_hf_files(exported, answers) if e.level in levels]
        if not examples:
            raise DataError(f"{', '.join(map(str, exported))}: no {'/'.join(levels)} questions")
        # the levels in the order asked, as the passage directories are read (read_hf_files orders the rest)
        return sorted(examples, key=lambda e: levels.index(e.level))
    is_split_dir = any((root / level).is_dir() for level in LEVELS)  # given RACE/dev itself
    split_dir = root if is_split_dir and not (root / split).is_dir() else root / split
    held_out = root.resolve().name      # `--data-dir .` inside RACE/dev too
    if split_dir == root and held_out in SPLITS and held_out != split:
        what = "training data" if split == "train" else f"its {split} split"
        raise DataError(f"{root} is RACE's {held_out} split, not {what}: give the RACE directory "
                        f"(--data-dir {root.parent if root.name else root.resolve().parent}), which holds {split}/ "
                        f"and {held_out}/")
    if not split_dir.is_dir():
        hint = ""
        if (root / "RACE").is_dir():    # google-research's --data_dir is the folder holding RACE/
            hint = f"; give the RACE directory itself: {root / 'RACE'}"
        elif root.name in LEVELS and root.is_dir():     # RACE/dev/middle: one level of a split
            hint = f"; {root} is one level: give --data-dir {root.parent} --levels {root.name}"
        elif root.is_file() and _archive(root):   # RACE.tar.gz as downloaded
            hint = f"; {root} is {_archive(root)}: extract it and give the RACE directory it holds"
        elif root.is_file():            # a passage file, all.txt or an export of one split
            hint = (f"; {root} is a file: give the RACE directory, a split directory holding middle/ and high/, "
                    "or the directory holding a Hugging Face export's files")
        elif root.is_dir() and (archives := [path for path in sorted(root.iterdir()) if path.name.lower().startswith(
                "race") and not path.name.startswith(".") and path.is_file() and _archive(path)]):
            hint = (f"; {archives[0].name} there is {_archive(archives[0])}: extract it and give the RACE directory "
                    "it holds")
        elif _split_folder(root):       # one split's folder (save_to_disk, refs/convert): another split, or unnamed
            named = next((s for s, names in HF_SPLIT_NAMES.items() if _hf_split(root, folder=True) in names), None)
            kind = "datasets save_to_disk" if (root / "state.json").is_file() else "refs/convert/parquet split"
            what = (f"the {named} split's {kind} folder (by its name)" if named
                    else f"a {kind} folder whose name says no split ({', '.join(SPLITS)})")
            hint = (f"; {root} is {what}: give the folder holding the split folders (train/, validation/, test/: "
                    "DatasetDict.save_to_disk)")
        names = " or ".join(HF_SPLIT_NAMES.get(split, (split,)))
        raise DataError(f"{root}: no {split}/ directory (expected RACE/{split}/{{middle,high}}/*.txt, or a Hugging "
                        f"Face export's file or save_to_disk folder named {names}: .jsonl, .parquet, .arrow or "
                        f".csv, .jsonl.gz ...){hint}")
    examples = []
    for level in levels:
        examples += _read_level(split_dir / level, level, answers)
    if not examples:
        raise DataError(f"{split_dir}: no passages found under {'/, '.join(levels)}/")
    return examples


def _archive(path: Path) -> str:
    """"a tar archive (tar xf)" / "a zip archive (unzip)" for a file that is one (RACE.tar.gz, as the RACE site
    gives it), else "": `read_race` reads folders, and said only that it was given a file."""
    import tarfile
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            return "a zip archive (unzip)"
        return "a tar archive (tar xf)" if tarfile.is_tarfile(path) else ""
    except OSError:
        return ""


def passage_name(path: Path) -> str:
    """The name a passage file's questions go by (`middle/13.txt#0`): its name less a compression suffix, so that
    `13.txt.gz` (gzip, bzip2, xz or zstd: read decompressed) is named as the `13.txt` it holds."""
    name = path.name
    suffix = Path(name).suffix.lower()
    return name[: -len(suffix)] if suffix in COMPRESSED_SUFFIXES and name.lower()[: -len(suffix)].endswith(".txt") \
        else name


def _txt_files(level_dir: Path) -> list[Path]:
    """The level directory's `*.txt` files and compressed ones (`*.txt.gz`, ...), hidden ones (macOS `._13.txt`
    copies, `.DS_Store`) and anything not a file passed over."""
    paths = [path for pattern in ("*.txt", *(f"*.txt{suffix}" for suffix in COMPRESSED_SUFFIXES))
             for path in level_dir.glob(pattern)]
    return [path for path in dict.fromkeys(paths) if not path.name.startswith(".") and path.is_file()]


def passage_files(level_dir: Path) -> list[Path]:
    """The passage files of one level directory, in number order of their names (`passage_name`): `*.txt` files,
    also compressed (`13.txt.gz`: before, passed over without a word, its questions missing from the training
    data and the accuracy), not hidden ones nor google-research's `all.txt` (it repeats the level's passages). A
    passage there twice, plain and compressed (`13.txt` beside `13.txt.gz`), is refused: its questions would go by
    one name twice (one prediction for both)."""
    if not level_dir.is_dir():
        return []
    paths = sorted((path for path in _txt_files(level_dir) if passage_name(path) != ALL_FILE),
                   key=lambda path: (_file_order(Path(passage_name(path))), path.name))
    for before, path in zip(paths, paths[1:]):
        if passage_name(before) == passage_name(path):
            raise DataError(f"{path}: passage {passage_name(path)} again, beside {before.name} (one compressed): "
                            "keep one of them")
    return paths


def _read_level(level_dir: Path, level: str, answers: bool = True) -> list[RaceExample]:
    """A level's questions. A passage file that is another's copy, id and all (`13 (1).txt`, `13 2.txt`: a
    download, unzip or sync conflict made twice), is refused, as a repeated id in `all.txt` is: its questions
    would count twice in the training data and the accuracy. `all.txt` may be compressed too (`all.txt.gz`)."""
    paths = passage_files(level_dir)
    if paths:
        examples, seen = [], {}
        for path in paths:
            data = read_json(path, dict, "a JSON object (a RACE passage)")
            name = data.get("id")
            if isinstance(name, str) and name.strip():
                first = seen.setdefault(name.strip(), (path, data))
                if first[0] != path and first[1] == data:
                    raise DataError(f"{path}: a copy of {first[0].name} (passage id {shown(name)}): its questions "
                                    "would count twice; remove one of the files")
            examples += _passage_examples(data, str(path), level, passage_name(path), answers)
        return examples
    all_files = sorted(path for path in _txt_files(level_dir) if passage_name(path) == ALL_FILE)
    if len(all_files) > 1:
        raise DataError(f"{level_dir}: {' and '.join(path.name for path in all_files)} both hold the level's passages "
                        "(read together, its questions would count twice); keep one of them")
    if all_files:
        return read_all_file(all_files[0], level, answers)
    # passages under another name (`13.json`, `13.TXT`): the level was left out without a word when the other
    # level had passages, its questions missing from the training data and the accuracy
    others = sorted(path.name for path in level_dir.iterdir() if not path.name.startswith(".") and
                    Path(passage_name(path).lower()).suffix in (".txt", ".json")) if level_dir.is_dir() else []
    if others:
        raise DataError(f"{level_dir}: no passage file (RACE's are *.txt, one JSON passage each, or all.txt; also "
                        f"compressed: 13.txt.gz), but {len(others)} like {shown(others[0])}: name them *.txt, or "
                        f"leave the level out (--levels {'high' if level == 'middle' else 'middle'})")
    return []


def read_all_file(path: Path, level: str, answers: bool = True) -> list[RaceExample]:
    """google-research's `all.txt`: the level's passages as JSON lines. A question is named as in the
    one-file-per-passage layout (`middle/13.txt#0`, from the passage's `id` "middle13.txt"), so predictions
    and scores match between the two layouts; a passage without an id is named by its line."""
    examples, seen = [], {}
    for lineno, data in read_records(path, "jsonl"):
        name = data.get("id")
        if isinstance(name, str) and name.strip():
            name = name.strip()
            name = name[len(level):] if name.startswith(level) and len(name) > len(level) else name
        else:
            name = f"{ALL_FILE}:{lineno}"
        if name in seen:
            raise DataError(f"{path}:{lineno}: passage id {shown(data.get('id'))} repeats line {seen[name]}")
        seen[name] = lineno
        examples += _passage_examples(data, f"{path}:{lineno}", level, name, answers)
    return examples


# ------------------------------------------------------------------ Hugging Face's layout (`ehovy/race`)
# One row per question: example_id (the passage file, "high132.txt"), article, answer, question, options. The
# Hub keeps each split as `<config>/<split>-00000-of-00001.parquet` (configs all, middle, high; `validation` is
# RACE's dev); a user exports it with `Dataset.to_json` / `to_parquet` / `to_csv`, or `DatasetDict.save_to_disk`
# (a folder per split). Its questions are named as the passage files' (`high/132.txt#0`, the passage's questions
# numbered in row order), so predictions and scores match between the layouts, and come in the passage files'
# order (the Hub's rows are in the order `datasets`' race.py read the files: their paths sorted, high before
# middle, 1, 10, 100, 2), so that fine-tuning sees the same examples in the same order from either layout.
HF_SPLIT_NAMES = {"train": ("train",), "dev": ("validation", "dev"), "test": ("test",)}
HF_SUFFIXES = (".jsonl", ".json", ".ndjson", ".parquet", ".arrow", ".csv")
HF_COLUMNS = ("example_id", "article", "question", "options", "answer")
TEXT_EXPORT_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv")    # the ones that may come compressed (`.jsonl.gz`)


def hf_split_files(root: str | Path, split: str) -> list[Path]:
    """The files of one split of a Hugging Face RACE export in `root`, or in its `all/` (the Hub's layout) or `data/`
    (a dataset of one config, as `push_to_hub` writes it), in name order: `validation.jsonl` (dev), `test.parquet`,
    `race_validation.csv`, all the shards of `train-00000-of-00002.parquet` (a missing one refused naming it), a
    `save_to_disk` folder (`validation/` holding state.json, as `DatasetDict.save_to_disk` writes), or
    refs/convert/parquet's split folder (`all/validation/0000.parquet`, ...): found by `tables.split_exports`; a
    compressed JSON lines or CSV file (`validation.jsonl.gz`: `_compressed_exports`). `root`
    may be such a folder itself, named by its split; without `all/` or `data/`, the Hub's per-level config folders
    (`middle/`, `high/`: a download of those alone) are read together. Two exports of one split in one folder
    (`validation.jsonl` beside `dev.json`, or a split's shards of two downloads) are refused: their questions would
    count twice."""
    root = Path(root)
    names = HF_SPLIT_NAMES.get(split, ())
    own = _split_folder(root)
    if own is not None:         # one split's folder given itself: the split its name says
        return own if _hf_split(root, folder=True) in names else []
    for folders in ((root,), (root / "all",), (root / "data",), tuple(root / level for level in LEVELS)):
        found: list[Path] = []
        for folder in folders:
            exports = split_exports(folder, lambda stem: _split_word(stem) in names, HF_SUFFIXES)
            exports += _compressed_exports(folder, names)
            refuse_two_exports(folder, exports, "one split")
            found += [file for export in exports for file in export.files]
        if found:
            return found
    return []


def _compressed_exports(folder: Path, names: Sequence[str]) -> list[SplitExport]:
    """A split's JSON lines or CSV export compressed with gzip, bzip2, xz or zstd (`validation.jsonl.gz`, as
    `Dataset.to_json(..., compression="gzip")` writes it), read decompressed: it was "no dev/ directory", a
    `validation.jsonl.gz` beside it not named. A sharded one (`train-00000-of-00002.jsonl.gz`) is not read."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.iterdir()):
        suffix = path.suffix.lower()
        inner = Path(path.name[: -len(suffix)]) if suffix in COMPRESSED_SUFFIXES else None
        if (inner is not None and not path.name.startswith(".") and inner.suffix.lower() in TEXT_EXPORT_SUFFIXES
                and _split_word(inner.stem) in names and path.is_file()):
            found.append(SplitExport(path.name, path, [path]))
    return found


def _split_folder(path: Path) -> list[Path] | None:
    """The files of one split's folder (`tables.split_folder_files`: a `Dataset.save_to_disk` folder, itself; a
    refs/convert/parquet split folder, its numbered Parquet files); None for another folder (RACE/dev's levels)."""
    return split_folder_files(path) if path.is_dir() else None


def _split_word(stem: str) -> str:
    """The split a name says: its part after a last `_`, `-` or `.` (`race_validation`), in lower case."""
    return re.split(r"[_\-.]", stem)[-1].lower()


def _hf_split(path: Path, folder: bool = False) -> str:
    """The split a file's name says (its stem less a shard count), or a split folder's (its name):
    `_split_word`."""
    return _split_word(path.name if folder else export_stem(path))


def read_hf_files(paths: Sequence[str | Path], answers: bool = True) -> list[RaceExample]:
    """The questions of one split of a Hugging Face RACE export, its shards in order (columns example_id, article,
    answer, question, options; options a list of four texts, in a CSV a JSON or Python list), in the passage
    files' order: middle, then high, passages in number order, a passage's questions in row order. The level is
    the example_id's start (`middle`, `high`). `answers=False`: rows with an empty answer (or no answer
    column) are read unlabelled (`hf_split_files` finds a split's files, refusing two exports of one split). A
    DataError names the file and row."""
    paths = [Path(path) for path in paths]
    examples: list[RaceExample] = []
    order: list[tuple] = []
    passages: dict[str, tuple[str, str]] = {}     # example_id -> (its article, the row that gave it)
    counts: dict[str, int] = {}
    for path, row, record in ((path, row, record) for path in paths for row, record in read_records(path)):
        where = f"{path}:{row}"
        # new questions to predict may come without the answer column (as a passage file without `answers`)
        missing = [name for name in HF_COLUMNS if name not in record and (answers or name != "answer")]
        if missing:
            raise DataError(f"{where}: no {', '.join(missing)} (a Hugging Face RACE row has the columns "
                            f"{', '.join(HF_COLUMNS)}; has {', '.join(map(shown, record)) or 'none'})")
        pid, article, question = record["example_id"], record["article"], record["question"]
        level = next((lv for lv in LEVELS if isinstance(pid, str) and pid.startswith(lv) and len(pid) > len(lv)),
                     None)
        if level is None:
            raise DataError(f"{where}: example_id {shown(pid)} names no level (RACE's are middle<N>.txt, high<N>.txt)")
        for name, value in (("article", article), ("question", question)):
            if not isinstance(value, str):
                raise DataError(f"{where}: {name!r} is {type(value).__name__}, expected text")
        if not article.strip():
            raise DataError(f"{where}: the article is empty; a RACE question is answered from its passage")
        first = passages.setdefault(pid, (article, where))
        if first[0] != article:
            raise DataError(f"{where}: example_id {shown(pid)} has another article than at {first[1]}")
        options = _hf_options(record["options"], where)
        answer = record.get("answer")
        if not answers and answer in ("", None):
            label = None
        elif isinstance(answer, str) and len(answer.strip()) == 1 and answer.strip() in LETTERS:
            label = LETTERS.index(answer.strip())
        else:
            raise DataError(f"{where}: answer {answer!r} is not one of {', '.join(LETTERS)}")
        index = counts[pid] = counts.get(pid, -1) + 1
        name = pid[len(level):]
        examples.append(RaceExample(f"{level}/{name}#{index}", level, article, question, options, label))
        order.append((LEVELS.index(level), _file_order(Path(name)), index))
    return [examples[k] for k in sorted(range(len(examples)), key=order.__getitem__)]


def _hf_options(value, where: str) -> list[str]:
    """A row's four options: a list (JSON lines, Parquet), or in a CSV the list written as text (JSON, the
    Python list pandas writes, or the numpy array `Dataset.to_csv` writes: `['a' 'b' 'c' 'd']`)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            listed = _numpy_texts(value)
            try:
                value = listed if listed is not None else ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise DataError(f"{where}: options {shown(value[:60])} is not a list of {NUM_CHOICES} texts") from None
    if not isinstance(value, (list, tuple)) or len(value) != NUM_CHOICES:
        count = (f"{len(value)} options" if isinstance(value, (list, tuple))
                 else f"options of type {type(value).__name__}")
        raise DataError(f"{where}: {count}, RACE has a list of {NUM_CHOICES} texts")
    bad = next((k for k, option in enumerate(value) if not isinstance(option, str)), None)
    if bad is not None:     # a null in the list (it said "4 options, RACE has a list of 4 texts")
        raise DataError(f"{where}: option {LETTERS[bad]} is {type(value[bad]).__name__}, expected text")
    return list(value)


def _numpy_texts(text: str) -> list | None:
    """The texts of a list column as `datasets`' `to_csv` writes it (through pandas, as a numpy array's str):
    string literals between brackets with no commas, `["It's red" 'b' 'c' 'd']`, wrapped onto more lines when
    long. Python reads those adjacent literals as one text (a list of one option); None for anything else (a
    Python list with commas is `ast.literal_eval`'s)."""
    try:
        tokens = [token for token in tokenize.generate_tokens(io.StringIO(text.strip()).readline)
                  if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        return None
    inner = tokens[1:-1]
    if (len(tokens) < 2 or tokens[0].string != "[" or tokens[-1].string != "]" or not inner
            or any(token.type != tokenize.STRING for token in inner)):
        return None
    try:
        return [ast.literal_eval(token.string) for token in inner]
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _file_order(path: Path):
    """Number order (`2.txt` before `10.txt`), then by name: `013.txt` and `13.txt` come in one order whatever
    the directory listing's (the order of the training examples). A stem of digits that are no number (`²`,
    which `str.isdigit` accepts) is a name."""
    stem = path.stem
    return (0, int(stem), path.name) if stem.isdecimal() else (1, 0, path.name)


def read_passage(path: Path, level: str, answers: bool = True) -> list[RaceExample]:
    """The questions of one passage file; its fields are checked for type and count (a DataError naming the
    file and the question otherwise). `answers=False`: a passage without answers is read unlabelled."""
    data = read_json(path, dict, "a JSON object (a RACE passage)")
    return _passage_examples(data, str(path), level, passage_name(path), answers)


def _passage_examples(data: dict, where_file: str, level: str, name: str,
                      answers: bool = True) -> list[RaceExample]:
    """The questions of one passage (`where_file` names it in errors, `name` in the question ids); without
    `answers` required, a passage with no `answers` field, an empty list or only empty answers (`["", ""]`, as a
    Hugging Face row's empty `answer`) has questions labelled None."""
    given = data.get("answers", [])
    unanswered = not answers and isinstance(given, list) and all(answer in ("", None) for answer in given)
    if unanswered and given == []:
        data = {**data, "answers": [None] * len(data["questions"]) if isinstance(data.get("questions"), list)
                else []}
    for key in ("article", "questions", "options", "answers"):
        if key not in data:
            raise DataError(f"{where_file}: missing field {key!r} (a RACE passage needs article, questions, "
                            "options, answers)")
    if not isinstance(data["article"], str):
        raise DataError(f"{where_file}: 'article' is {type(data['article']).__name__}, expected the passage text")
    if not data["article"].strip():
        raise DataError(f"{where_file}: the article is empty; a RACE question is answered from its passage")
    for key in ("questions", "options", "answers"):
        if not isinstance(data[key], list):
            raise DataError(f"{where_file}: {key!r} is {type(data[key]).__name__}, expected a list")
    questions, options, answers = data["questions"], data["options"], data["answers"]
    if not len(questions) == len(options) == len(answers):
        raise DataError(f"{where_file}: {len(questions)} questions, {len(options)} option lists and "
                        f"{len(answers)} answers; they must match")
    examples = []
    for i, (question, opts, answer) in enumerate(zip(questions, options, answers)):
        where = f"{where_file}: question {i}"
        if not isinstance(question, str):
            raise DataError(f"{where}: the question is {type(question).__name__}, expected text")
        if not isinstance(opts, list) or len(opts) != NUM_CHOICES:
            raise DataError(f"{where}: {len(opts) if isinstance(opts, list) else type(opts).__name__} options, "
                            f"RACE has a list of {NUM_CHOICES}")
        if not all(isinstance(o, str) for o in opts):
            raise DataError(f"{where}: options must be texts, got {opts!r}")
        if unanswered:
            label = None
        elif isinstance(answer, str) and len(answer) == 1 and answer in LETTERS:
            label = LETTERS.index(answer)
        else:
            raise DataError(f"{where}: answer {answer!r} is not one of {', '.join(LETTERS)}")
        examples.append(RaceExample(f"{level}/{name}#{i}", level, data["article"], question, list(opts), label))
    return examples


# The characters NFKD turns into `_`: google-research's RACE reader looks for the blank in the question after its
# `preprocess_text` (NFKD), so a blank written `＿` (full-width, as in text typed with a Chinese input method) is one
LOW_LINES = str.maketrans(dict.fromkeys("\ufe33\ufe34\ufe4d\ufe4e\ufe4f\uff3f", "_"))


def question_with_option(question: str, option: str) -> str:
    """google-research `race_utils.py` on its preprocessed texts: every `_` of the question replaced by the
    option, or else the option appended after a space. As there, the blank is looked for after NFKD (`＿` and the
    other compatibility low lines are blanks), and the option filling it is stripped (`preprocess_text` strips
    it: "in _." with "1990 " is "in 1990.", not "in 1990 ."); the tokenizer's own preprocessing does the rest."""
    blanked = question.translate(LOW_LINES)
    return blanked.replace("_", option.strip()) if "_" in blanked else f"{question} {option}"


def check_lengths(max_seq_length: int, max_qa_length: int) -> None:
    """A choice is `[CLS] article [SEP] question+option [SEP]`: both parts need at least one token."""
    for name, value, least in (("max_seq_length", max_seq_length, 5), ("max_qa_length", max_qa_length, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise UserError(f"RACE setting {name}={value!r}: must be an integer >= {least}")


def build_features(tokenizer, examples: Sequence[RaceExample], max_seq_length: int = 512,
                   max_qa_length: int = 128, problems: Problems | None = None, split: str = "") -> list[Feature]:
    """(C, T) ids per question; the question+option keeps its last `max_qa_length` tokens (the option is
    never cut) and the article is cut to fit. Choices are padded to the example's longest one. A question whose
    passage was cut, or whose question+option lost its start to `max_qa_length` (as SQuAD's question to
    max_query_length), is a problem placed at `<split>/<level>/<file>#<question>` (train/ and dev/ hold files of
    the same names)."""
    check_lengths(max_seq_length, max_qa_length)
    problems = problems if problems is not None else Problems()
    articles = list(dict.fromkeys(e.article for e in examples))
    article_ids = dict(zip(articles, tokenizer.encode_batch(articles)))
    qa_texts = [question_with_option(e.question, o) for e in examples for o in e.options]
    qa_ids = tokenizer.encode_batch(qa_texts)
    features = []
    for index, example in enumerate(examples):
        rows, truncated, qa_cut = [], False, False
        budget = max_seq_length - 3
        for c in range(NUM_CHOICES):
            # the option sits at the end of question+option: keep the end, cut the article to fit (a cut that
            # max_seq_length alone makes leaves the article one token: that question's passage cut is counted)
            qa = list(qa_ids[index * NUM_CHOICES + c])
            qa_cut |= len(qa) > max_qa_length
            qa = qa[-min(max_qa_length, budget - 1):]
            article = list(article_ids[example.article])
            truncated |= len(article) + len(qa) > budget
            rows.append(build_pair(tokenizer.cls_id, tokenizer.sep_id, article[: budget - len(qa)], qa))
        where = f"{split}/{example.qid}" if split else example.qid
        if truncated:
            problems.add("passage truncated to max_seq_length", where)
        if qa_cut:
            problems.add("question+option truncated to max_qa_length", where)
        width = max(len(ids) for ids, _ in rows)
        ids = np.full((NUM_CHOICES, width), tokenizer.pad_id, dtype=np.int64)
        types = np.zeros((NUM_CHOICES, width), dtype=np.int64)
        for c, (row_ids, row_types) in enumerate(rows):
            ids[c, : len(row_ids)], types[c, : len(row_types)] = row_ids, row_types
        features.append(Feature(ids, types, index, example.label))
    return features


def race_metrics(examples: Sequence[RaceExample], preds: Sequence[int]) -> dict[str, float]:
    """Accuracy overall and per level (the paper reports RACE, RACE-m and RACE-h)."""
    out = {}
    labels = np.asarray([e.label for e in examples])
    preds = np.asarray(preds)
    out["accuracy"] = float((labels == preds).mean())
    for level in LEVELS:
        mask = np.asarray([e.level == level for e in examples])
        if mask.any():
            out[f"accuracy_{level}"] = float((labels[mask] == preds[mask]).mean())
            out[f"num_{level}"] = int(mask.sum())
    return out


def split_of_predictions(path: str | Path) -> str | None:
    """The split a predictions file written by `albertlm finetune|predict race` is of, by its name
    (`test_predictions.json` -> "test"), else None. Question ids carry no split and train/, dev/ and test/ hold
    files of the same names, so scoring one split's predictions against another's answers would give a number:
    `evaluate race --predictions` takes the split from here when `--split` is not given."""
    name = Path(path).name
    for split in SPLITS:
        if name == f"{split}_predictions.json":
            return split
    return None


def read_predictions(path: str | Path) -> dict[str, int]:
    """{qid: option letter or index} from a predictions JSON written by `albertlm predict race`. A question
    given twice (two files' predictions joined by hand) is refused: JSON keeps the last, and the first was
    dropped without a word."""
    data = read_json(path, dict, "a JSON object {question id: option letter}")
    twice = _key_twice(Path(path))
    if twice is not None:
        raise DataError(f"{path}: question {shown(twice)} is predicted twice; keep one of its predictions")
    out = {}
    for qid, value in data.items():
        if isinstance(value, str) and len(value) == 1 and value in LETTERS:
            out[qid] = LETTERS.index(value)
        elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value < NUM_CHOICES:
            out[qid] = value
        else:
            raise DataError(f"{path}: prediction for {qid!r} is {value!r}, expected one of A-D")
    return out


def _key_twice(path: Path) -> str | None:
    """The first key a JSON file's object holds twice (read with `open_text`, as `read_json` reads it), else None."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not twice:
                twice.append(key)
            seen.add(key)
        return dict(items)

    with open_text(path) as handle:
        json.load(handle, object_pairs_hook=pairs)
    return twice[0] if twice else None
