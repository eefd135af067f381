"""SQuAD v1.1 / v2.0: reading the official JSON, sliding-window features, and span post-processing.

The context is split on whitespace into words (google-research / BERT `run_squad`), each word is tokenized
on its own, and every token keeps the character span it covers in the original context, so a predicted
token span maps back to the exact original text (`context[start_char:end_char]`).
Post-processing: `postprocess` for BERT's head (start / end logits), `postprocess_beam` for google's SQuAD v2.0
head (`heads.AlbertForSquadV2`: its start/end beam and answer_class null odds).
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from albertlm.errors import UserError
from albertlm.tasks.features import Feature
from albertlm.tasks.tables import (DataError, Problems, columnar_format, is_saved_dataset, read_json, read_records,
                                   shown, split_folder_files, split_shards)


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[tuple[str, int]]          # (text, answer_start) pairs, empty if unanswerable
    is_impossible: bool = False
    title: str = ""
    # the file itself says the question has no answer (v2.0's `"is_impossible": true`): a labelled question, unlike
    # one that merely lacks answers (a file to predict on, whose questions have `"answers": []`)
    said_unanswerable: bool = False
    # what the file says of its version (`detect_version`), not part of the question: left out of comparisons
    marked: bool = field(default=False, compare=False)     # the record has v2.0's "is_impossible" (true or false)
    file_version: str = field(default="", compare=False)   # the file's top-level "version" ("1.1", "2.0"; "" none)

    @property
    def labelled(self) -> bool:
        """Whether the file gives this question's gold: its answers, or that it has none."""
        return bool(self.answers) or self.said_unanswerable


@dataclass
class SquadSettings:
    """Window and answer settings, checked when made (before any tokenizing or training)."""

    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30

    def __post_init__(self) -> None:
        for name in ("max_seq_length", "doc_stride", "max_query_length", "n_best_size", "max_answer_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"SQuAD setting {name}={value!r}: must be a positive integer")
        if self.max_seq_length <= self.max_query_length + 3:  # google-research run_squad's own check
            raise UserError(f"SQuAD settings max_seq_length={self.max_seq_length} and max_query_length="
                            f"{self.max_query_length} leave no room for the context: a window holds [CLS] "
                            f"question [SEP] context [SEP], so max_seq_length must exceed max_query_length + 3 "
                            f"(lower max_query_length or raise max_seq_length)")


# ------------------------------------------------------------------------------------------ reading


def read_squad(path: str | Path, problems: Problems | None = None, anchored: bool = True) -> list[SquadExample]:
    """Examples of an official SQuAD file (nested data/paragraphs/qas) or of the flat layout
    (`{"data": [{id, question, context, answers: {text: [...], answer_start: [...]}}]}`), also as a bare list of
    those records or as JSON lines, one record a line (what `datasets`' `Dataset.to_json` writes), or as the rows
    of a Parquet or Arrow file or a `Dataset.save_to_disk` folder (`rajpurkar/squad` / `squad_v2` from the Hugging
    Face Hub: `to_parquet`, its own Parquet files), read by `tables.read_records` as `classify` reads them.

    Every field is checked for its type where it is read; a file that breaks the format is a DataError
    naming the file, the place (`data[3].paragraphs[0]`, a question id) and what is wrong.

    `anchored=False` (scoring a predictions file, which reads the gold texts only, as the official scripts do):
    an answer whose text is nowhere in its context is kept as it is and counted in `problems`, not an error
    (training needs its place in the context; the official scripts score it by its text).

    Each example's `file_version` is the file's own top-level "version" ("1.1", "2.0"; "" for none or another),
    which `detect_version` reads."""
    path = Path(path)
    rows = _dataset_rows(path)
    data = {"data": rows} if rows is not None else _squad_document(path)
    articles = data.get("data")
    if not isinstance(articles, list):
        raise DataError(f"{path}: expected an object with a 'data' list (the SQuAD format)")
    problems = problems if problems is not None else Problems()
    examples = []
    for a, article in enumerate(articles):
        where = f"data[{a}]" if rows is None else f"row {a + 1}"   # a table's rows are numbered from 1
        if not isinstance(article, dict):
            raise DataError(f"{path}: {where} is {_kind(article)}, expected an object (an article or a question)")
        if "paragraphs" in article:
            examples += _article_examples(path, article, where, problems, anchored)
        elif "question" in article or "id" in article:
            examples.append(_flat_example(path, article, where, problems, anchored))
        else:
            raise DataError(f"{path}: {where} has neither 'paragraphs' (the official SQuAD layout) nor "
                            "'id'/'question' (the flat layout)")
    if not examples:
        raise DataError(f"{path}: no questions in the file (its 'data' list holds no 'qas')")
    seen: set[str] = set()
    declared = _declared_version(data.get("version"))
    for example in examples:
        if example.qid in seen:
            raise DataError(f"{path}: question id {example.qid!r} appears more than once")
        seen.add(example.qid)
        example.file_version = declared
    return examples


def _declared_version(value) -> str:
    """The top-level "version" of a SQuAD file as a version name: the official files say "1.1" and "v2.0" (the
    transformers fixture says 2); "" for none or any other value."""
    text = str(value).strip().lower().lstrip("v") if isinstance(value, (str, int, float)) and \
        not isinstance(value, bool) else ""
    return {"1.1": "1.1", "2": "2.0", "2.0": "2.0"}.get(text, "")


def _dataset_rows(path: Path) -> list[dict] | None:
    """The rows of a Hugging Face `datasets` export in Arrow or Parquet (`rajpurkar/squad`, `squad_v2`: columns id,
    title, context, question, answers {text: [...], answer_start: [...]}; v2.0's unanswerable questions have
    empty lists): a Parquet or Arrow file (by its suffix or its first bytes), or a `save_to_disk` folder (a
    DatasetDict's folder is refused naming its splits), every shard of a split (`tables.split_shards`), or a
    refs/convert/parquet split folder. None for any other path, read as JSON: these were
    refused as "a Parquet file, not text" and "not a file". Read as `classify` reads them (`read_records`)."""
    if is_saved_dataset(path):         # (a folder of something else: read_json's "not a file")
        rows = [record for _, record in read_records(path)]
    elif path.is_dir() and (files := split_folder_files(path)):   # refs/convert/parquet: plain_text/validation/
        rows = [record for file in files for _, record in read_records(file, "parquet")]
    elif path.is_file() and (fmt := columnar_format(path)) is not None:
        # a split in shards (`validation-00000-of-00002.parquet`) is read whole from any one, a missing one named
        rows = [record for file in split_shards(path) for _, record in read_records(file, fmt)]
    else:
        return None
    if not rows:
        raise DataError(f"{path}: no rows (no questions)")
    return rows


def _squad_document(path: Path) -> dict:
    """The file as an object with a 'data' list. A list of flat records, or JSON lines of them (one question a
    line: `load_dataset("squad_v2")["validation"].to_json(...)`), is that 'data' list; JSON lines were 'not valid
    JSON (line 2: Extra data)' and a list 'expected an object with a 'data' list'."""
    try:
        data = read_json(path, (dict, list), "an object with a 'data' list (the SQuAD format)")
    except DataError:
        records = _json_lines(path)
        if records is None:
            raise
        return {"data": records}
    if isinstance(data, list):
        if not data or not all(isinstance(record, dict) for record in data):
            raise DataError(f"{path}: expected an object with a 'data' list (the SQuAD format), or a list of "
                            "question records")
        return {"data": data}
    return data


def _json_lines(path: Path) -> list | None:
    """The records of a JSON lines file whose first line is a flat SQuAD record (None for any other file)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            first = next((line for line in handle if line.strip()), "")
        record = json.loads(first)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or "data" in record or not ("question" in record or "id" in record):
        return None
    return [record for _, record in read_records(path, "jsonl")]


def _kind(value) -> str:
    """'a string', 'a list', ... for messages about a value of the wrong type."""
    name = {str: "string", list: "list", dict: "object", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _field(path: Path, record: dict, key: str, kinds: type | tuple[type, ...], where: str, what: str):
    """record[key], which must exist and be one of `kinds` (a boolean is not an integer here)."""
    if key not in record:
        raise DataError(f"{path}: {where} has no {key!r} field")
    value = record[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and kinds is not bool):
        raise DataError(f"{path}: {where}: {key!r} is {_kind(value)}, expected {what}")
    return value


def _qid(path: Path, record: dict, where: str) -> str:
    return str(_field(path, record, "id", (str, int), where, "a question id (a string)"))


def _article_examples(path: Path, article: dict, where: str, problems: Problems,
                      anchored: bool = True) -> list[SquadExample]:
    paragraphs = _field(path, article, "paragraphs", list, where, "a list of paragraphs")
    title = str(article.get("title") or "")
    examples = []
    for p, paragraph in enumerate(paragraphs):
        here = f"{where}.paragraphs[{p}]" + (f" (article {title!r})" if title else "")
        if not isinstance(paragraph, dict):
            raise DataError(f"{path}: {here} is {_kind(paragraph)}, expected an object with 'context' and 'qas'")
        if "qas" not in paragraph:
            raise DataError(f"{path}: {here} has no 'qas' (its list of questions; SQuAD: "
                            "data[].paragraphs[].qas[])")
        qas = _field(path, paragraph, "qas", list, here, "a list of questions")
        context = _field(path, paragraph, "context", str, here, "the paragraph text (a string)")
        for q, qa in enumerate(qas):
            if not isinstance(qa, dict):
                raise DataError(f"{path}: {here}.qas[{q}] is {_kind(qa)}, expected a question object")
            examples.append(_nested_example(path, title, context, qa, f"{here}.qas[{q}]", problems, anchored))
    return examples


def _nested_example(path, title, context, qa, where, problems, anchored: bool = True) -> SquadExample:
    qid = _qid(path, qa, where)
    where = f"question {shown(qid)}"
    question = _field(path, qa, "question", str, where, "the question text (a string)")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool) and impossible not in (0, 1):
        raise DataError(f"{path}: {where}: 'is_impossible' is {impossible!r}, expected true or false")
    raw = qa.get("answers", [])
    if not isinstance(raw, list):
        raise DataError(f"{path}: {where}: 'answers' is {_kind(raw)}, expected a list of "
                        "{\"text\": ..., \"answer_start\": ...} objects")
    answers = _answer_objects(path, raw, where)
    answers = [] if impossible else answers
    return SquadExample(qid, question, context, _check_answers(path, qid, context, answers, problems, anchored),
                        bool(impossible) or not answers, title, said_unanswerable=bool(impossible),
                        marked="is_impossible" in qa)


def _answer_objects(path: Path, raw: list, where: str) -> list[tuple[str, int]]:
    """(text, answer_start) of a list of `{"text": ..., "answer_start": ...}` objects (the official layout's)."""
    answers = []
    for k, answer in enumerate(raw):
        if not isinstance(answer, dict):
            raise DataError(f"{path}: {where}: answers[{k}] is {_kind(answer)}, expected an object with "
                            "'text' and 'answer_start'")
        answers.append((_field(path, answer, "text", str, f"{where}: answers[{k}]", "the answer text (a string)"),
                        _offset(path, answer.get("answer_start"), f"{where}: answers[{k}]")))
    return answers


def _offset(path: Path, value, where: str) -> int:
    """answer_start: a non-negative integer (or a string of digits, or a whole number written as 12.0, as files
    converted through pandas or spreadsheets have: `12.0` was refused as not an offset)."""
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    elif isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DataError(f"{path}: {where}: 'answer_start' is {value!r}, expected a character offset (an "
                        "integer >= 0)")
    return value


def _flat_example(path, record, where, problems, anchored: bool = True) -> SquadExample:
    qid = _qid(path, record, where)
    where = f"question {shown(qid)}"
    context = _field(path, record, "context", str, where, "the paragraph text (a string)")
    question = _field(path, record, "question", str, where, "the question text (a string)")
    raw = record.get("answers") or {}
    if isinstance(raw, list) and all(isinstance(answer, dict) for answer in raw):
        # the official layout's list of {"text", "answer_start"} objects in a flat record (a flattened official
        # file, MRQA-style exports): it was refused as "'answers' is a list"
        answers = _answer_objects(path, raw, where)
    elif not isinstance(raw, dict):
        raise DataError(f"{path}: {where}: 'answers' is {_kind(raw)}, expected an object "
                        "{\"text\": [...], \"answer_start\": [...]} (the flat layout) or a list of "
                        "{\"text\": ..., \"answer_start\": ...} objects")
    else:
        texts, starts = raw.get("text") or [], raw.get("answer_start") or []
        if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
            raise DataError(f"{path}: {where}: 'answers' needs two lists of the same length, 'text' and "
                            f"'answer_start' (got {_kind(texts)} and {_kind(starts)})")
        answers = []
        for k, (text, start) in enumerate(zip(texts, starts)):
            if not isinstance(text, str):
                raise DataError(f"{path}: {where}: answers text[{k}] is {_kind(text)}, expected a string")
            answers.append((text, _offset(path, start, f"{where}: answers[{k}]")))
    title = record.get("title")
    impossible = record.get("is_impossible", False)     # not in `datasets`' layout; some exports add it
    if not isinstance(impossible, bool) and impossible not in (0, 1):
        raise DataError(f"{path}: {where}: 'is_impossible' is {impossible!r}, expected true or false")
    answers = [] if impossible else answers
    return SquadExample(qid, question, context, _check_answers(path, qid, context, answers, problems, anchored),
                        bool(impossible) or not answers, str(title or ""), said_unanswerable=bool(impossible),
                        marked="is_impossible" in record)


NOT_IN_CONTEXT = "answer not in its context (scored by its text)"


def _check_answers(path, qid, context, answers, problems, anchored: bool = True) -> list[tuple[str, int]]:
    """An answer whose text is not at its offset is re-anchored to the nearest occurrence (counted);
    one whose text is nowhere in the context is an error naming the question id (`anchored`), or kept as it is
    and counted (scoring, which reads the text only)."""
    checked = []
    for text, start in answers:
        if context[start:start + len(text)] == text:
            checked.append((text, start))
            continue
        hits = [i for i in _find_all(context, text)]
        if not hits and not anchored:
            problems.add(NOT_IN_CONTEXT, f"{path.name}:{shown(qid)}")
            checked.append((text, start))
            continue
        if not hits:
            raise DataError(f"{path}: question {shown(qid)}: answer {text!r} at offset {start} does not match the "
                            f"context there ({context[start:start + len(text)]!r}) and is not in the context")
        problems.add("answer offset corrected", f"{path.name}:{shown(qid)}")
        checked.append((text, min(hits, key=lambda i: abs(i - start))))
    return checked


def _find_all(text: str, sub: str):
    i = text.find(sub)
    while sub and i >= 0:
        yield i
        i = text.find(sub, i + 1)


def gold_answers(examples: Sequence[SquadExample]) -> dict[str, list[str]]:
    """{qid: gold texts} as the official scripts read them ([] for unanswerable)."""
    return {e.qid: [text for text, _ in e.answers] for e in examples}


VERSIONS = ("1.1", "2.0")


def check_version_name(version) -> str:
    """The SQuAD version asked for: "1.1" or "2.0", as the option's help lists them. Any other spelling is refused
    (`v1.1`, as the files' own "version" field spells it, was scored as v2.0: every version not starting with "1"
    was; `2` applied no tuned null threshold to a run that recorded "2.0")."""
    if str(version) not in VERSIONS:
        near = {"1": "1.1", "1.1": "1.1", "2": "2.0", "2.0": "2.0"}.get(str(version).strip().lstrip("vV"))
        raise UserError(f"--version {str(version)!r}: SQuAD's version is 1.1 or 2.0"
                        + (f" (give --version {near})" if near else ""))
    return str(version)


def check_version(examples: Sequence[SquadExample], version: str, path: str | Path, labelled: bool = True) -> None:
    """SQuAD v1.1 has an answer for every question: unanswerable ones mean a v2.0 file (an error naming it).
    `labelled=False` (a file to predict on) allows a file in which no question has an answer."""
    if not str(version).startswith("1"):
        return
    unanswerable = [e.qid for e in examples if e.is_impossible]
    if unanswerable and (labelled or len(unanswerable) < len(examples)):
        raise DataError(f"{path}: {len(unanswerable)} of {len(examples)} questions have no answer (e.g. "
                        f"{shown(unanswerable[0])}), which SQuAD v1.1 does not allow: a v2.0 file? use --version 2.0")


def detect_version(examples: Sequence[SquadExample]) -> tuple[str | None, str]:
    """The SQuAD version a file's own contents show, and why; (None, why not) where they show none.

    v2.0: a question marked `"is_impossible": true`, or a labelled file with a question without answers (v1.1 has
    none), or the file saying "v2.0", or questions carrying v2.0's `is_impossible` field at all (every question of
    the official v2.0 files has it). v1.1: the file saying "1.1", or a labelled file whose every question has an
    answer and none has the `is_impossible` field (the official v1.1 files, `datasets`' "squad" export). A file
    without any answers (new questions to predict) shows none."""
    examples = list(examples)
    said = next((e.qid for e in examples if e.said_unanswerable), None)
    if said is not None:
        return "2.0", f"question {shown(said)} is marked is_impossible"
    labelled = any(e.labelled for e in examples)
    empty = next((e.qid for e in examples if not e.answers), None)
    if labelled and empty is not None:
        return "2.0", f"question {shown(empty)} has no answer"
    declared = next((e.file_version for e in examples if e.file_version), "")
    if declared:
        return declared, f"the file's \"version\" is {declared}"
    if any(e.marked for e in examples):
        return "2.0", "its questions have v2.0's is_impossible field"
    if labelled:
        return "1.1", "every question has an answer and none has v2.0's is_impossible field"
    return None, "no question has an answer or an is_impossible field, and the file names no version"


def resolve_version(version: str | None, files: Sequence[tuple[str | Path, Sequence[SquadExample]]]) -> str:
    """The version to use: the one given ("1.1" or "2.0"), or with none ("" or None) the one the files show
    (`detect_version`). Files that show none, or show different versions, are a UserError asking for --version."""
    if version not in (None, ""):
        return check_version_name(version)
    shown_by = [(path, *detect_version(examples)) for path, examples in files]
    found = {v for _, v, _ in shown_by if v is not None}
    if len(found) == 1:
        return found.pop()
    if not found:
        path, _, why = shown_by[0] if shown_by else ("", None, "no file to read")
        raise UserError(f"{path}: which SQuAD version? {why}; give --version 1.1 or --version 2.0")
    what = "; ".join(f"{path} looks like v{v} ({why})" for path, v, why in shown_by if v is not None)
    raise UserError(f"the SQuAD files disagree: {what}; give --version 1.1 or --version 2.0")


def version_note(version: str, examples: Sequence[SquadExample], path: str | Path, given: str = "--version 2.0",
                 advice: str = "give --version 1.1 if it is v1.1") -> str | None:
    """A warning where a version given contradicts what the file shows without doubt (its own "version" field, or
    no is_impossible field on any of its answered questions): `--version 2.0` on a v1.1 file scores it by the v2.0
    script and predicts null answers ('') for some of its questions. `given`: where v2.0 came from (the flag, or the
    version a model was fine-tuned with); `advice`: what to do about it."""
    detected, why = detect_version(examples)
    if detected is None or detected == version or version != "2.0":
        return None     # a v2.0 file given as v1.1 is an error (check_version), not a warning
    return (f"{path} looks like a SQuAD v1.1 file ({why}) and is read as v2.0 ({given}): no-answer "
            f"predictions ('') are allowed and scored by the v2.0 script; {advice}")


# ------------------------------------------------------------------------------ tokens and offsets


def split_words(context: str) -> list[tuple[int, int]]:
    """Character spans of the whitespace-separated words of the context."""
    spans, start = [], None
    for i, ch in enumerate(context):
        if ch.isspace() or ch in "\u202f\u200b":
            if start is not None:
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(context)))
    return spans


def _clean_piece(piece: str) -> str:
    return piece.lstrip("▁").removeprefix("##")


def _fold(text: str) -> str:
    """Lower case, compatibility forms (NFKD: full-width digits, ligatures, Roman numerals) and no accents,
    as tokenizers normalise words before cutting them into pieces. Lower case again after NFKD: a compatibility
    character without a lower case of its own can decompose to capitals (`™` -> `TM`, `℃` -> `°C`, `ᴵᴺ` -> `IN`)."""
    if text.isascii():
        return text.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()).lower() if not unicodedata.combining(c))


def _folded_word(word: str) -> tuple[str, list[int]]:
    """The folded word and, per folded character, the index of the original character it came from."""
    if word.isascii():
        return word.lower(), list(range(len(word)))
    folded, origin = [], []
    for i, ch in enumerate(word):
        part = _fold(ch)
        folded.append(part)
        origin += [i] * len(part)
    return "".join(folded), origin


def piece_spans(word: str, pieces: Sequence[str], offset: int) -> list[tuple[int, int]]:
    """Character span of each piece of one word. Pieces are matched left to right against the word, both folded
    the way tokenizers normalise (lower case, NFKD compatibility forms, accents dropped: `ﬁ`, `１２`, `ö`), and
    mapped back to the original characters; a piece that does not match (an unknown token) covers the characters
    up to where the next piece matches (or the rest of the word); a bare "▁" is zero-width. A character that
    folds to several (`½` -> `1⁄2`) is covered whole by each piece of it; one that folds to nothing (a combining
    accent) belongs to the piece before it."""
    low, origin = _folded_word(word)
    if not low:   # nothing to match (e.g. a word of format characters): every piece covers the word
        return [(offset, offset + len(word))] * len(pieces)
    n = len(low)

    def boundary(f: int, end: bool) -> int:
        if f == 0 or f == n:
            return 0 if f == 0 else len(word)
        if origin[f] != origin[f - 1]:
            return origin[f]
        return origin[f] + 1 if end else origin[f]   # inside a character that folds to several

    cursor, spans = 0, []
    cleaned = [_fold(_clean_piece(p)) for p in pieces]
    for k, clean in enumerate(cleaned):
        if clean and low.startswith(clean, cursor):
            stop = cursor + len(clean)
        elif not clean:
            stop = cursor
        else:
            following = next((c for c in cleaned[k + 1:] if c), "")
            found = low.find(following, cursor + 1) if following else -1
            stop = found if found > cursor else n
        start = boundary(cursor, False)
        spans.append((offset + start, offset + (boundary(stop, True) if stop > cursor else start)))
        cursor = stop
    return spans


@dataclass
class ContextTokens:
    ids: list[int]
    spans: list[tuple[int, int]]  # character span in the original context per token


def _exact_spans(tokenizer) -> bool:
    """Whether the tokenizer's own character spans (`encode_batch_with_spans`: `tokenizers`' offsets, transformers'
    `return_offsets_mapping`) place its tokens: WordPiece (vocab.txt or tokenizer.json) and byte-level BPE, whose
    pieces cannot all be matched back against the word (two [UNK]s in a row; byte pieces). Not SentencePiece's
    pieces (spiece.model, or a Unigram or "▁"-marking tokenizer.json such as albert-base-v2's): there `tokenizers`
    gives a bare "▁" the next character and "``" (read as `"`) its second backtick only, so `piece_spans` keeps them
    as a spiece.model of the same vocabulary maps them (SentencePiece merges unknown characters into one piece)."""
    backend = getattr(tokenizer, "backend", None)
    if backend is None or not hasattr(tokenizer, "encode_batch_with_spans"):
        return False
    steps = repr(backend.pre_tokenizer) + repr(backend.normalizer)   # Metaspace, or a Replace / Prepend of "▁"
    return type(backend.model).__name__ != "Unigram" and "Metaspace" not in steps and "▁" not in steps


def _with_marks(context: str, spans: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """`spans` (one word's tokens, in order, the word ending at `end`) each extended over the combining marks right
    after it that no token covers: accent stripping deletes the mark of a decomposed `é` (e + U+0301), and its
    letter's span alone would cut the accent off an answer ending there (as `piece_spans` gives the mark to the
    piece before it)."""
    out = list(spans)
    for k, (a, b) in enumerate(spans):
        if a < b < end and unicodedata.combining(context[b]):   # rare: the next token's start only then
            stop = next((s for s, e in spans[k + 1:] if e > s), end)
            while b < stop and unicodedata.combining(context[b]):
                b += 1
            out[k] = (a, b)
    return out


def tokenize_contexts(tokenizer, contexts: Sequence[str]) -> list[ContextTokens]:
    """Tokens of each distinct context with their character spans (one native batch call for all words). The ids
    are `encode_batch`'s of each whitespace-separated word; the spans the tokenizer's own (`_exact_spans`) or,
    for SentencePiece, its pieces matched back against the word (`piece_spans`)."""
    words_per_context = [split_words(c) for c in contexts]
    flat_words = [c[s:e] for c, spans in zip(contexts, words_per_context) for s, e in spans]
    exact = _exact_spans(tokenizer)
    if not flat_words:
        flat = []
    elif exact:
        flat = tokenizer.encode_batch_with_spans(flat_words)
    else:
        flat = [(ids, None) for ids in tokenizer.encode_batch(flat_words)]
    out, k = [], 0
    for context, spans in zip(contexts, words_per_context):
        ids, token_spans = [], []
        marks = exact and not context.isascii()     # no combining mark to give a token in ASCII text
        for start, end in spans:
            word_ids, word_spans = flat[k]
            k += 1
            ids += word_ids
            if word_spans is not None:
                word_spans = [(start + a, start + b) for a, b in word_spans]
                token_spans += _with_marks(context, word_spans, end) if marks else word_spans
            else:
                token_spans += piece_spans(context[start:end], [tokenizer.id_to_token(i) for i in word_ids], start)
        out.append(ContextTokens(ids, token_spans))
    return out


# ---------------------------------------------------------------------------------------- features


def window_starts(num_tokens: int, window: int, stride: int) -> list[int]:
    """Start of each doc window: step by `stride` (at most a window) until the end is covered (google-research
    rule). The start always advances: a window or stride below one token is an error, never a loop."""
    if window < 1 or stride < 1:
        raise UserError(f"SQuAD windows need room for at least one context token and a doc_stride of at least 1 "
                        f"(window {window} tokens, doc_stride {stride})")
    step = min(window, stride)
    starts, start = [0], 0
    while start + window < num_tokens:
        start += step
        starts.append(start)
    return starts


def _answer_tokens(spans: list[tuple[int, int]], char_start: int, char_end: int) -> tuple[int, int] | None:
    """First and last token overlapping [char_start, char_end)."""
    inside = [i for i, (s, e) in enumerate(spans) if e > char_start and s < char_end]
    return (inside[0], inside[-1]) if inside else None


def _max_context(starts: list[int], window: int, num_tokens: int) -> list[np.ndarray]:
    """For each window, whether each token has its most central position there (BERT `_check_is_max_context`)."""
    best_score = np.full(num_tokens, -1.0)
    best_window = np.zeros(num_tokens, dtype=np.int64)
    for w, start in enumerate(starts):
        length = min(window, num_tokens - start)
        pos = np.arange(length)
        score = np.minimum(pos, length - 1 - pos) + 0.01 * length
        better = score > best_score[start:start + length]
        best_score[start:start + length][better] = score[better]
        best_window[start:start + length][better] = w
    return [best_window[s:s + min(window, num_tokens - s)] == w for w, s in enumerate(starts)]


NO_WINDOW = ("answer in no single window (trained as no-answer; raise --max-seq-length, lower --doc-stride or "
             "--max-query-length)")


def build_features(tokenizer, examples: Sequence[SquadExample], settings: SquadSettings, training: bool,
                   problems: Problems | None = None) -> list[Feature]:
    """Sliding-window features. Training windows that cut the answer point at [CLS] (as for no-answer); an
    answer that no window holds whole is counted in `problems` (the question trains as unanswerable)."""
    problems = problems if problems is not None else Problems()
    contexts = list(dict.fromkeys(e.context for e in examples))
    tokens = dict(zip(contexts, tokenize_contexts(tokenizer, contexts)))
    questions = tokenizer.encode_batch([e.question for e in examples])
    features = []
    for index, (example, q_ids) in enumerate(zip(examples, questions)):
        if len(q_ids) > settings.max_query_length:
            problems.add("question truncated to max_query_length", example.qid)
            q_ids = q_ids[: settings.max_query_length]
        features += _example_features(tokenizer, index, example, q_ids, tokens[example.context],
                                      settings, training, problems)
    return features


def _example_features(tokenizer, index, example, q_ids, ctx: ContextTokens, settings, training, problems):
    window = settings.max_seq_length - len(q_ids) - 3
    starts = window_starts(len(ctx.ids), window, settings.doc_stride)
    max_context = _max_context(starts, window, len(ctx.ids))
    answer = None
    if training and example.answers:
        text, char_start = example.answers[0]
        answer = _answer_tokens(ctx.spans, char_start, char_start + len(text))
        if answer is None:
            problems.add("answer has no tokens (treated as no-answer)", example.qid)
    out, inside = [], False
    for start, is_max in zip(starts, max_context):
        doc = ctx.ids[start:start + window]
        ids = [tokenizer.cls_id, *q_ids, tokenizer.sep_id, *doc, tokenizer.sep_id]
        offset = len(q_ids) + 2  # position of the first doc token
        types = [0] * offset + [1] * (len(doc) + 1)
        label = None
        if training:
            label = (0, 0)
            if answer is not None and answer[0] >= start and answer[1] < start + len(doc):
                label = (answer[0] - start + offset, answer[1] - start + offset)
                inside = True
        # google's p_mask (squad_utils): 1 where no answer starts or ends (question, [SEP]s; the padding, added by
        # the collate), 0 on [CLS] (no answer) and the context; is_impossible: this window trains as no answer
        p_mask = np.ones(len(ids), dtype=np.uint8)
        p_mask[0] = 0
        p_mask[offset:offset + len(doc)] = 0
        extra = {"doc_offset": offset, "doc_start": start, "doc_length": len(doc), "max_context": is_max,
                 "p_mask": p_mask}
        if training:
            extra["is_impossible"] = int(label == (0, 0))
        out.append(Feature(np.asarray(ids, dtype=np.int64), np.asarray(types, dtype=np.int64), index,
                           label, extra))
    if answer is not None and not inside:   # every window cuts the answer: each trains it as unanswerable
        problems.add(NO_WINDOW, example.qid)
    return out


# --------------------------------------------------------------------------------- post-processing


@dataclass
class SpanPrediction:
    text: str
    score: float                          # start_logit + end_logit
    start_char: int = -1
    end_char: int = -1
    start_logit: float = 0.0
    end_logit: float = 0.0


@dataclass
class ExamplePrediction:
    best: SpanPrediction                  # best non-null span ("" if none is valid)
    null_score: float                     # min over windows of start[CLS] + end[CLS]
    nbest: list[SpanPrediction] = field(default_factory=list)
    null_start_logit: float = 0.0         # start[CLS] and end[CLS] of the window giving null_score
    null_end_logit: float = 0.0
    n_best_size: int = 0                  # the n-best list's length asked for (0: as long as `nbest`)
    # google's SQuAD v2.0 head (`postprocess_beam`): the lowest answer_class logit over the question's windows, the
    # null odds themselves; span scores are then log-probabilities, not logits (None: BERT's head)
    null_odds: float | None = None

    @property
    def score_diff(self) -> float:
        """The null-odds of `null_odds.json` (higher = no answer): BERT's head, null score minus best span score;
        google's v2.0 head, `null_odds`."""
        return self.null_odds if self.null_odds is not None else self.null_score - self.best.score


def _top(logits: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-logits, kind="stable")[:k]


def _window_spans(feature: Feature, start_logits, end_logits, ctx: ContextTokens, context: str,
                  settings: SquadSettings) -> list[SpanPrediction]:
    x = feature.extra
    lo, hi = x["doc_offset"], x["doc_offset"] + x["doc_length"]  # doc token positions [lo, hi)
    spans = []
    for s in _top(start_logits, settings.n_best_size):
        for e in _top(end_logits, settings.n_best_size):
            if not (lo <= s < hi and lo <= e < hi) or e < s or e - s + 1 > settings.max_answer_length:
                continue
            if not x["max_context"][s - lo]:
                continue
            first, last = x["doc_start"] + s - lo, x["doc_start"] + e - lo
            a, b = _visible(context, ctx.spans[first][0], ctx.spans[last][1])
            spans.append(SpanPrediction(context[a:b], float(start_logits[s] + end_logits[e]), a, b,
                                        float(start_logits[s]), float(end_logits[e])))
    return spans


def _invisible(ch: str) -> bool:
    """Whitespace, or a format character (zero-width joiner, BOM, word joiner, soft hyphen: category Cf) that the
    tokenizer drops or reads as a space."""
    return ch.isspace() or unicodedata.category(ch) == "Cf"


def _visible(context: str, a: int, b: int) -> tuple[int, int]:
    """[a, b) without invisible characters at its ends: a span ending on a bare "▁" piece (which sits at the next
    word's start) took the whitespace before that word, and a piece after a dropped U+200D or U+FEFF began with
    it, so the answer text was `in ` or U+FEFF `BOM` (not exact, even after the official normalisation)."""
    while a < b and _invisible(context[a]):
        a += 1
    while b > a and _invisible(context[b - 1]):
        b -= 1
    return a, b


def postprocess(examples: Sequence[SquadExample], features: Sequence[Feature], start_logits: Sequence,
                end_logits: Sequence, tokenizer, settings: SquadSettings) -> dict[str, ExamplePrediction]:
    """Best span and null score per question over all its windows (n-best search, max answer length)."""
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f.example_index, []).append(i)
    contexts = list(dict.fromkeys(examples[i].context for i in by_example))
    tokens = dict(zip(contexts, tokenize_contexts(tokenizer, contexts)))
    out = {}
    for index, feature_ids in by_example.items():
        example = examples[index]
        spans, null_score, null_logits = [], float("inf"), (0.0, 0.0)
        for i in feature_ids:
            sl, el = np.asarray(start_logits[i]), np.asarray(end_logits[i])
            if float(sl[0] + el[0]) < null_score:   # the first window of the lowest, as BERT's strict `<`
                null_score, null_logits = float(sl[0] + el[0]), (float(sl[0]), float(el[0]))
            spans += _window_spans(features[i], sl, el, tokens[example.context], example.context, settings)
        spans = _distinct_texts(spans)
        best = spans[0] if spans else SpanPrediction("", null_score)
        out[example.qid] = ExamplePrediction(best, null_score, spans[: settings.n_best_size], *null_logits,
                                             settings.n_best_size)
    return out


NO_SPAN_LOG_PROB = -1e6   # google's write_predictions_v2: the stand-in entry of a question without a valid span


def postprocess_beam(examples: Sequence[SquadExample], features: Sequence[Feature], outputs: dict,
                     tokenizer, settings: SquadSettings) -> dict[str, ExamplePrediction]:
    """Predictions of google's SQuAD v2.0 head (`heads.AlbertForSquadV2`), as google's accumulate_predictions_v2 and
    write_predictions_v2 make them: each window's beam (`start_top_index` / `start_top_log_probs`, (N, k1);
    `end_top_index` / `end_top_log_probs`, (N, k1 * k2), the j-th end of the i-th start at i * k2 + j) gives the
    spans whose start and end are context tokens of the window, the start at its most central place
    (max_context), end >= start, at most max_answer_length tokens; scored by start + end log-probability, best
    first over all the question's windows, one per answer text, n_best_size of them. The null odds are the lowest
    `cls_logits` over the windows (`ExamplePrediction.null_odds`). A question without a valid span predicts ''
    with log-probabilities -1e6, as google's."""
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(features):
        by_example.setdefault(f.example_index, []).append(i)
    contexts = list(dict.fromkeys(examples[i].context for i in by_example))
    tokens = dict(zip(contexts, tokenize_contexts(tokenizer, contexts)))
    start_index, start_lp = np.asarray(outputs["start_top_index"]), np.asarray(outputs["start_top_log_probs"])
    end_index, end_lp = np.asarray(outputs["end_top_index"]), np.asarray(outputs["end_top_log_probs"])
    cls_logits = np.asarray(outputs["cls_logits"]).reshape(-1)
    k1 = start_index.shape[1]
    k2 = end_index.shape[1] // max(k1, 1)
    out = {}
    for index, feature_ids in by_example.items():
        example = examples[index]
        ctx = tokens[example.context]
        spans: list[SpanPrediction] = []
        odds = min(float(cls_logits[i]) for i in feature_ids)
        for i in feature_ids:
            x = features[i].extra
            lo, hi = x["doc_offset"], x["doc_offset"] + x["doc_length"]
            for a in range(k1):
                s, s_lp = int(start_index[i, a]), float(start_lp[i, a])
                for b in range(k2):
                    e, e_lp = int(end_index[i, a * k2 + b]), float(end_lp[i, a * k2 + b])
                    if not (lo <= s < hi and lo <= e < hi) or e < s or e - s + 1 > settings.max_answer_length:
                        continue
                    if not x["max_context"][s - lo]:
                        continue
                    first, last = x["doc_start"] + s - lo, x["doc_start"] + e - lo
                    c0, c1 = _visible(example.context, ctx.spans[first][0], ctx.spans[last][1])
                    spans.append(SpanPrediction(example.context[c0:c1], s_lp + e_lp, c0, c1, s_lp, e_lp))
        spans = _distinct_texts(spans)[: settings.n_best_size]
        best = spans[0] if spans else SpanPrediction("", 2 * NO_SPAN_LOG_PROB, start_logit=NO_SPAN_LOG_PROB,
                                                     end_logit=NO_SPAN_LOG_PROB)
        out[example.qid] = ExamplePrediction(best, odds, spans or [best], n_best_size=settings.n_best_size,
                                             null_odds=odds)
    return out


def _distinct_texts(spans: list[SpanPrediction]) -> list[SpanPrediction]:
    """Best first, one span per answer text (BERT `run_squad`'s n-best keeps each final text once). A span of no
    text (a bare "▁" piece, which covers no character) is no answer: it is dropped, so it never becomes the
    best non-null span ('' would be scored as an abstention, or as wrong in v1.1)."""
    seen: set[str] = set()
    out = []
    for span in sorted(spans, key=lambda p: -p.score):
        if span.text and span.text not in seen:
            seen.add(span.text)
            out.append(span)
    return out


def nbest_json(predictions: dict[str, ExamplePrediction], version: str | None = None) -> dict[str, list[dict]]:
    """nbest_predictions.json in BERT `run_squad`'s layout: per question its n-best answers, best first, each with
    `text`, `probability` (softmax of the scores over that list), `start_logit`, `end_logit`, and `score` (their
    sum). Tools that read BERT's file (ensembling, calibration) take `probability` and the logits.

    For v2.0 the list holds the no-answer entry too, as BERT's `--version_2_with_negative` and transformers'
    `postprocess_qa_predictions` write it: text "", the `[CLS]` logits of the window with the lowest null score,
    in its place by score among the n best (appended after them when it ranks lower), its probability in the same
    softmax. v1.1 (and `version` None) lists spans only, as BERT's v1.1 file; a question without a valid span has
    one stand-in entry (text "", as its prediction, logits 0: BERT's and transformers' "empty" entry), never none."""
    with_null = version is not None and not str(version).startswith("1")
    out = {}
    for qid, p in predictions.items():
        if p.null_odds is not None:    # google's v2.0 head: its write_predictions_v2 layout
            out[qid] = _beam_nbest(p)
            continue
        entries = list(p.nbest)
        if with_null:
            null = SpanPrediction("", p.null_score, start_logit=p.null_start_logit, end_logit=p.null_end_logit)
            ranked = sorted([*entries, null], key=lambda s: -s.score)   # stable: a span tied with null first
            limit = max(p.n_best_size or len(entries), 1)
            entries = ranked[:limit] if any(s is null for s in ranked[:limit]) else [*entries[:limit], null]
        if not entries:
            # no valid span in any window (v1.1): BERT's and transformers' one stand-in entry, logits 0, its text
            # predictions.json's "" (BERT's "empty"); the list was empty, and readers taking `nbest[qid][0]` failed
            entries = [SpanPrediction("", 0.0)]
        scores = np.asarray([s.score for s in entries], dtype=np.float64)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        out[qid] = [{"text": s.text, "probability": float(q), "start_logit": s.start_logit, "end_logit": s.end_logit,
                     "score": s.score} for s, q in zip(entries, probs)]
    return out


def _beam_nbest(p: ExamplePrediction) -> list[dict]:
    """The n-best entries of google's SQuAD v2.0 head as its write_predictions_v2 writes them: `text`,
    `probability` (softmax of the scores over the list), `start_log_prob`, `end_log_prob`, and `score` (their sum);
    no null entry (the null odds are answer_class's, on another scale than the spans' log-probabilities)."""
    scores = np.asarray([s.score for s in p.nbest], dtype=np.float64)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    return [{"text": s.text, "probability": float(q), "start_log_prob": s.start_logit, "end_log_prob": s.end_logit,
             "score": s.score} for s, q in zip(p.nbest, probs)]


def final_predictions(predictions: dict[str, ExamplePrediction], version: str,
                      threshold: float = 0.0) -> dict[str, str]:
    """predictions.json: the best span; for v2.0 '' where the null-odds exceed the threshold."""
    if version.startswith("1"):
        return {qid: p.best.text for qid, p in predictions.items()}
    return {qid: "" if p.score_diff > threshold else p.best.text for qid, p in predictions.items()}


def null_odds(predictions: dict[str, ExamplePrediction]) -> dict[str, float]:
    return {qid: p.score_diff for qid, p in predictions.items()}


def tune_threshold(golds: dict[str, list[str]], predictions: dict[str, ExamplePrediction],
                   applied: float | None = None) -> dict:
    """The null threshold that maximises dev F1 (the official `find_best_thresh` over best-span texts, ties
    aside: see `best_threshold`), and the official v2.0 metrics at that threshold. `applied`: the metrics (and
    `null_threshold`) are those of this threshold instead (`--null-threshold`), `best_*` still the tuned ones."""
    from albertlm.tasks.metrics import squad_v2_raw_scores, squad_v2_scores

    spans = {qid: p.best.text for qid, p in predictions.items()}
    odds = null_odds(predictions)
    exact_raw, f1_raw = squad_v2_raw_scores(golds, spans)
    best_exact, exact_threshold = best_threshold(golds, spans, exact_raw, odds)
    best_f1, tuned = best_threshold(golds, spans, f1_raw, odds)
    threshold = tuned if applied is None else float(applied)
    final = squad_v2_scores(golds, final_predictions(predictions, "2.0", threshold))
    # best_f1_thresh (= null_threshold unless one was applied) as the official script names it: fine-tuning and
    # `evaluate --model` printed every key of its output but that one
    final.update({"null_threshold": threshold, "best_exact": best_exact, "best_exact_thresh": exact_threshold,
                  "best_f1": best_f1, "best_f1_thresh": tuned})
    return final


def best_threshold(golds: dict[str, list[str]], spans: dict[str, str], scores: dict[str, float],
                   odds: dict[str, float]) -> tuple[float, float]:
    """(best score in %, its threshold) over every question: the official `find_best_thresh` sweep (from "every
    answer null" up through the sorted odds), stepping over questions of equal odds together.

    A prediction is null where its odds exceed the threshold (`final_predictions`, the official script's
    `apply_no_ans_threshold`), so questions of equal odds are answered or nulled together. The official sweep
    steps one question at a time and keeps a best reached half-way through a tie: its `best_f1` is then a score
    that no threshold gives, and which one it reports depends on the order of the questions in the file. Without
    ties the two are the same. "Every answer null" is one below the lowest odds (0.0 when they are all positive,
    as the official script's start; see `metrics.find_best_threshold`)."""
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    current = best = float(sum(1 for qid in scores if not has_answer[qid]))
    lowest = min((odds[qid] for qid in scores), default=0.0)
    best_at = 0.0 if lowest > 0.0 else lowest - 1.0
    order = sorted(scores, key=lambda qid: odds[qid])
    i = 0
    while i < len(order):
        value = odds[order[i]]
        while i < len(order) and odds[order[i]] == value:     # every question of these odds answers at once
            qid = order[i]
            current += scores[qid] if has_answer[qid] else (-1.0 if spans[qid] else 0.0)
            i += 1
        if current > best:
            best, best_at = current, value
    return 100.0 * best / max(len(scores), 1), best_at


def read_predictions(path: str | Path) -> dict[str, str]:
    """predictions.json: {question id: answer text} ('' = no answer)."""
    return _read_json_map(path, str, "an answer string")


def read_null_odds(path: str | Path) -> dict[str, float]:
    """null_odds.json: {question id: number}, higher = more likely unanswerable."""
    odds = {k: float(v) for k, v in _read_json_map(path, (int, float), "a number").items()}
    bad = next((qid for qid, v in odds.items() if not math.isfinite(v)), None)
    if bad is not None:
        raise DataError(f"{path}: the null odds of question {shown(bad)} are {odds[bad]}, expected a finite number")
    return odds


def _read_json_map(path: str | Path, kind, what: str) -> dict:
    data = read_json(path, dict, f"a JSON object {{question id: {what}}}")
    for qid, value in data.items():
        if not isinstance(value, kind) or isinstance(value, bool):
            raise DataError(f"{path}: the value for question {shown(qid)} is {_brief(value)}, expected {what}"
                            f"{_which_file(value, kind is str)}")
    return data


def _brief(value, limit: int = 60) -> str:
    """A value from a JSON file for a one-line message, cut to about `limit` characters: an n-best list was
    quoted whole (thousands of characters on the error line)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _which_file(value, answers: bool) -> str:
    """What a value of the wrong kind says of the file it came from: another of the files a SQuAD prediction
    writes, given in the wrong place (nbest_predictions.json or null_odds.json as --predictions, predictions.json
    as --na-probs). `answers`: the file was read for answers (--predictions), else for null odds (--na-probs)."""
    if isinstance(value, list) and value and all(isinstance(entry, dict) and "text" in entry for entry in value):
        wanted = "predictions.json" if answers else "null_odds.json"
        return f" (this looks like nbest_predictions.json, the n-best lists: give {wanted})"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return " (this looks like null_odds.json: give predictions.json as --predictions, this file as --na-probs)"
    if isinstance(value, str):
        return " (this looks like predictions.json: give null_odds.json as --na-probs)"
    return ""


# ------------------------------------------------------------------------------ scoring prediction files


@dataclass
class SquadEvaluation:
    """The official metrics of a predictions file, and which gold questions it has no prediction for."""

    metrics: dict
    missing: list[str]       # gold question ids without a prediction, in file order
    num_questions: int       # gold questions
    version: str = "2.0"
    strict: bool = False
    unknown: int = 0         # predicted ids that are not gold questions (ignored, as the official scripts do)
    extra: list[str] = field(default_factory=list)   # the first few of those ids
    remarks: list[str] = field(default_factory=list)  # other lines for stderr (see `notes`)

    def warning(self, limit: int = 5) -> str | None:
        """One line for stderr when questions lack a prediction (None when none does)."""
        if not self.missing:
            return None
        first = ", ".join(map(shown, self.missing[:limit])) + (", ..." if len(self.missing) > limit else "")
        if self.version.startswith("1"):
            how = "scored as wrong, as the official v1.1 script does"
        elif self.strict:
            how = "scored as wrong (strict)"
        else:
            # the official v2.0 script leaves them out of exact / f1, then stops with a KeyError at HasAns / NoAns
            how = ("left out of the scores (the official v2.0 script fails on them with a KeyError; strict scoring "
                   "counts them as wrong)")
        return f"no prediction for {len(self.missing)} of {self.num_questions} questions ({first}); they are {how}"

    def notes(self) -> list[str]:
        """Lines for stderr beside `warning()`: predictions for ids that are not questions of the gold file (ignored,
        as the official scripts ignore them: another file's predictions, partly matching, scored without a word),
        gold answers not in their context, a version that contradicts the file."""
        lines = list(self.remarks)
        if self.unknown:
            lines.append(f"{_count(self.unknown, 'prediction')} for question ids that are not in the gold file (e.g. "
                         f"{', '.join(map(shown, self.extra))}): ignored, as the official script does")
        return lines


def _count(n: int, thing: str) -> str:
    """'1 prediction', '3 predictions'."""
    return f"{n} {thing}{'' if n == 1 else 's'}"


def evaluate_files(data: str | Path, predictions: str | Path, version: str | None = "2.0",
                   na_probs: str | Path | None = None, na_prob_thresh: float = 1.0,
                   strict: bool = False) -> SquadEvaluation:
    """Score a predictions.json against a SQuAD file with the official metric of `version`.

    Checked first, each a DataError naming the file: the gold file's format and version (v1.1 on a v2.0
    file), a predictions file matching none of the gold ids, null odds missing for a predicted question.
    v1.1 scores a missing question as wrong (its official script); v2.0 leaves it out (as the official script's
    exact / f1 do; that script then fails on it with a KeyError) unless `strict`. The caller prints `warning()`
    and `notes()` on stderr.

    `version` None (or "") is the one the gold file shows (`detect_version`; a UserError where it shows none).
    A gold answer that is not in its context is scored by its text, as the official scripts do (counted in the
    notes: it stopped scoring)."""
    from albertlm.tasks.metrics import squad_v1_scores, squad_v2_scores

    if version not in (None, ""):
        version = check_version_name(version)
    found = Problems()
    examples = read_squad(data, found, anchored=False)
    version = resolve_version(version, [(data, examples)])
    check_version(examples, version, data)
    remarks = [note] if (note := version_note(version, examples, data)) else []
    if found.counts.get(NOT_IN_CONTEXT):
        remarks.append(f"{data}: {_count(found.counts[NOT_IN_CONTEXT], 'gold answer')} not in its context (e.g. "
                       f"{', '.join(found.examples[NOT_IN_CONTEXT])}): scored by the text, as the official "
                       "script does")
    golds = gold_answers(examples)
    preds = read_predictions(predictions)
    matched = sum(1 for qid in preds if qid in golds)
    if not matched:
        what = (f"none of its {len(preds)} question ids (e.g. {next(iter(preds))!r}) is a question of {data}"
                if preds else "it holds no predictions")
        raise DataError(f"{predictions}: {what}; are these the predictions for this file?")
    odds = read_null_odds(na_probs) if na_probs is not None else None
    if odds is not None:
        lacking = [qid for qid in preds if qid in golds and qid not in odds]
        if lacking:
            raise DataError(f"{na_probs}: no null odds for {len(lacking)} predicted questions (e.g. {shown(lacking[0])})")
    missing = [qid for qid in golds if qid not in preds]
    if str(version).startswith("1"):
        metrics = squad_v1_scores(golds, preds)
    else:
        metrics = squad_v2_scores(golds, preds, odds, na_prob_thresh, strict=strict)
    extra = [qid for qid in preds if qid not in golds]
    return SquadEvaluation(metrics, missing, len(golds), str(version), strict, len(extra), extra[:3], remarks)
