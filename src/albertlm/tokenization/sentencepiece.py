"""SentencePiece tokenizers the ALBERT way: load a `.model` with transformers' AlbertTokenizer preprocessing, or train one.

Encoding = ALBERT's Python preprocessing (google-research `tokenization.preprocess_text`, transformers'
AlbertTokenizer normalizers: `` and '' -> ", NFKD + drop combining marks unless keep_accents, lowercase if
do_lower_case) followed by the model's own normalizer and segmentation in sentencepiece's C++ code
(`encode(list, num_threads=...)`), so a big corpus is encoded in native code.
"""
from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Sequence

import numpy as np

from albertlm.errors import UserError

MODEL_FILE = "spiece.model"  # the name transformers' AlbertTokenizer.from_pretrained looks for
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 in every ALBERT model

# google-research ALBERT create_pretraining_data.py `_is_start_piece`: a piece starts a word if it starts
# with "▁" or "<", is one punctuation mark, or holds any character outside a-z + punctuation
# ("for foreign characters, we always treat them as a whole piece").
_PUNCTUATION = set('!"#$%&\'()*+,-./:;?@[\\]^_`{|}~') | {"€", "£"}
_ENGLISH_OR_PUNCT = set("abcdefghijklmnopqrstuvwxyz") | _PUNCTUATION


@dataclass(frozen=True)
class SentencePieceOptions:
    """Preprocessing before the model's own normalizer; defaults = transformers' AlbertTokenizer defaults.

    `split_digit_comma` is google-research's `encode_pieces` rule (a piece like "▁9," becomes "▁9" ","),
    which transformers' AlbertTokenizer (v5) and sentencepiece itself do not apply; off by default so ids
    match transformers.
    """

    do_lower_case: bool = True
    keep_accents: bool = False
    remove_space: bool = True
    split_digit_comma: bool = False

    @classmethod
    def from_dict(cls, values: dict) -> "SentencePieceOptions":
        names = {f.name for f in fields(cls)}
        return cls(**{k: bool(v) for k, v in values.items() if k in names})


def _combining_marks_pattern() -> re.Pattern:
    """All Unicode marks (Mn, Mc, Me), which tokenizers' StripAccents (used by transformers) removes."""
    marks = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)).startswith("M")]
    return re.compile("[" + "".join(re.escape(m) for m in marks) + "]")


_MARKS: re.Pattern | None = None


def strip_accents(text: str) -> str:
    """NFKD then drop combining marks. Destroys Hangul syllables' composition, hence off for trained models
    unless asked; the model's NFKC normalizer recomposes jamo afterwards."""
    global _MARKS  # a lazily built constant, not state
    if _MARKS is None:
        _MARKS = _combining_marks_pattern()
    return _MARKS.sub("", unicodedata.normalize("NFKD", text))


def preprocess(text: str, options: SentencePieceOptions) -> str:
    """ALBERT's preprocess_text: collapse whitespace, `` '' -> ", strip accents, lowercase."""
    if options.remove_space:
        text = " ".join(text.split())
    text = text.replace("``", '"').replace("''", '"')
    if not options.keep_accents and not text.isascii():
        text = strip_accents(text)
    if options.do_lower_case:
        text = text.lower()
    return text


def _load_processor(model_file: Path):
    import sentencepiece as spm

    if not model_file.is_file():
        raise UserError(f"SentencePiece model not found: {model_file}")
    try:
        return spm.SentencePieceProcessor(model_file=str(model_file))
    except (RuntimeError, OSError) as exc:
        raise UserError(f"cannot read {model_file} as a SentencePiece model ({exc})") from None


def _default_threads() -> int:
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class SentencePieceTokenizer:
    """A SentencePiece model plus ALBERT preprocessing; implements `albertlm.tokenization.base.Tokenizer`."""

    kind = "sentencepiece"

    def __init__(self, model_file: str | Path, options: SentencePieceOptions | None = None,
                 num_threads: int | None = None):
        self.model_file = Path(model_file)
        self.options = options or SentencePieceOptions()
        self.num_threads = num_threads or _default_threads()
        self.sp = _load_processor(self.model_file)
        self.vocab_size = self.sp.get_piece_size()
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = self._special_ids()
        self._special = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self._digit_comma_ids = self._find_digit_comma_ids() if self.options.split_digit_comma else set()

    def _special_ids(self) -> tuple[int, int, int, int, int]:
        ids = [self.sp.piece_to_id(p) for p in SPECIAL_PIECES]
        unk = self.sp.unk_id()
        missing = [p for p, i in zip(SPECIAL_PIECES, ids) if i == unk and p != "<unk>"]
        if missing:
            raise UserError(f"{self.model_file} lacks the ALBERT special pieces {missing} "
                            "(train with `albertlm tokenizer train`)")
        return tuple(ids)  # type: ignore[return-value]

    # -- encoding -----------------------------------------------------------------------------------
    def preprocess(self, text: str) -> str:
        return preprocess(text, self.options)

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Preprocess in Python (C-level str methods per text), segment in sentencepiece's threads."""
        ids = self.sp.encode([self.preprocess(t) for t in texts], num_threads=self.num_threads)
        if self._digit_comma_ids:
            ids = [self._split_digit_comma(row) for row in ids]
        return ids

    def encode_pair(self, a: str, b: str | None = None) -> tuple[list[int], list[int]]:
        ids_a, *rest = self.encode_batch([a] if b is None else [a, b])
        ids = [self.cls_id, *ids_a, self.sep_id]
        types = [0] * len(ids)
        if rest:
            ids += [*rest[0], self.sep_id]
            types += [1] * (len(rest[0]) + 1)
        return ids, types

    def tokenize(self, text: str) -> list[str]:
        return [self.sp.id_to_piece(i) for i in self.encode(text)]

    def _find_digit_comma_ids(self) -> set[int]:
        pieces = (self.sp.id_to_piece(i) for i in range(self.vocab_size))
        return {i for i, p in enumerate(pieces) if len(p) > 1 and p[-1] == "," and p[-2].isdigit()}

    def _split_digit_comma(self, row: list[int]) -> list[int]:
        """google-research `encode_pieces`: "▁9," -> "▁9" ","; the piece minus its comma is re-encoded."""
        if not self._digit_comma_ids.intersection(row):
            return row
        out: list[int] = []
        for i in row:
            if i not in self._digit_comma_ids:
                out.append(i)
                continue
            piece = self.sp.id_to_piece(i)
            sub = self.sp.encode(piece[:-1].replace("▁", ""), out_type=str)
            if not piece.startswith("▁") and sub and sub[0].startswith("▁"):
                sub = sub[1:] if sub[0] == "▁" else [sub[0][1:], *sub[1:]]  # drop the re-encode's dummy prefix
            out += [self.sp.piece_to_id(p) for p in [*sub, piece[-1]]]
        return out

    # -- decoding and vocabulary ---------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        return self.sp.decode([int(i) for i in ids if int(i) not in self._special])

    def id_to_token(self, token_id: int) -> str:
        return self.sp.id_to_piece(int(token_id))

    def token_to_id(self, token: str) -> int:
        return self.sp.piece_to_id(token)

    def word_start_mask(self) -> np.ndarray:
        mask = np.array([_is_start_piece(self.sp.id_to_piece(i)) for i in range(self.vocab_size)], dtype=bool)
        mask[list(self._special)] = True
        return mask

    # -- files ---------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """spiece.model + tokenizer_config.json: loads in `load_tokenizer` and `AlbertTokenizer.from_pretrained`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / MODEL_FILE
        if target.resolve() != self.model_file.resolve():
            target.write_bytes(self.model_file.read_bytes())
        write_config(directory, self.options)

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({str(self.model_file)!r}, V={self.vocab_size}, {self.options})"


def _is_start_piece(piece: str) -> bool:
    return (piece.startswith("▁") or piece.startswith("<") or piece in _PUNCTUATION
            or not all(c.lower() in _ENGLISH_OR_PUNCT for c in piece))


def write_config(directory: Path, options: SentencePieceOptions) -> None:
    """tokenizer_config.json in transformers' layout (its AlbertTokenizer reads the same option names)."""
    config = {
        "tokenizer_class": "AlbertTokenizer",
        **asdict(options),
        "pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]",
        "mask_token": "[MASK]", "bos_token": "[CLS]", "eos_token": "[SEP]",
    }
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def read_options(config_file: Path) -> SentencePieceOptions:
    """Options from a tokenizer_config.json; keys it lacks take transformers' AlbertTokenizer defaults."""
    if not config_file.is_file():
        return SentencePieceOptions()
    try:
        return SentencePieceOptions.from_dict(json.loads(config_file.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot parse {config_file}: {exc}") from None
