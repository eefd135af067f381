"""SentencePiece tokenizers the ALBERT way: load a `.model` and encode as google-research ALBERT does, or train one.

Encoding (the default) = google-research ALBERT's `tokenization.preprocess_text` as transformers 4's
AlbertTokenizer applies it (collapse whitespace, `` and '' -> ", NFKD + drop combining characters unless
keep_accents, lowercase if do_lower_case), then the model's own normalizer and segmentation in sentencepiece's
C++ code (`encode(list, num_threads=...)`, so a big corpus is encoded in native code), then google's
`encode_pieces` rule that re-splits a piece ending in a digit and a comma ("▁2003," -> "▁2003" ",").
The special pieces written in the text ("a [SEP] b") are their ids, as in transformers' AlbertTokenizer (google's
pipeline read them as text, which `special_tokens_as_text()` restores).
`split_added_tokens=True` switches to transformers 5's pipeline instead (see `SentencePieceOptions`).
"""
from __future__ import annotations

import functools
import os
import random
import re
import sys
import time
import unicodedata
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from albertlm.errors import UserError
from albertlm.tokenization.base import (MARKED_SHARE, TokenizerBase, kana_marked, read_config, save_directory,
                                        user_path, valid_unicode, voiced_kana)

LineReader = Callable[[Path], Iterable[str]]   # a training input file -> its lines (sentences)
MODEL_FILE = "spiece.model"  # the name transformers' AlbertTokenizer.from_pretrained looks for
SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4 in every ALBERT model

_HANGUL = re.compile("[\uac00-\ud7a3]")  # composed syllables
# Scripts written without spaces between words: each of their pieces is a word of its own for masking.
_UNSPACED_SCRIPTS = ("CJK", "HIRAGANA", "KATAKANA", "HALFWIDTH KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR",
                     "TIBETAN", "IDEOGRAPHIC")


@dataclass(frozen=True)
class SentencePieceOptions:
    """How text is encoded; defaults = google-research ALBERT (= transformers 4's AlbertTokenizer defaults).

    `split_added_tokens=True` is transformers 5 compatibility: v5 (unlike sentencepiece, google-research and
    transformers 4) matches the model's user-defined symbols (albert-base-v2: `( ) " - . – £ €`) and special
    pieces in the raw text first, as "added tokens", then encodes the spans between them on their own: "x ."
    gives "▁x" "." there instead of "▁x" "▁" "."; its preprocessing runs in the `tokenizers` library (which
    strips every Unicode mark, not only the combining characters google drops) and it has no digit-comma
    rule. Off by default: google's segmentation is the one ALBERT was pretrained on. Models without
    user-defined symbols (ours by default) give the same ids either way on text without marks or "9,".

    `split_digit_comma` is google-research's `encode_pieces` rule (a piece like "▁9," becomes "▁9" ","). None
    (the default) applies it unless `split_added_tokens` asks for transformers 5, which does not.
    """

    do_lower_case: bool = True
    keep_accents: bool = False
    remove_space: bool = True
    split_digit_comma: bool | None = None
    split_added_tokens: bool = False

    @property
    def digit_comma_rule(self) -> bool:
        """Whether google's "9," rule applies: as asked, else on in google mode and off in transformers-5 mode."""
        return self.split_digit_comma if self.split_digit_comma is not None else not self.split_added_tokens

    @classmethod
    def from_dict(cls, values: dict, source: object = "tokenizer options") -> "SentencePieceOptions":
        """Known keys of `values` (others are ignored: transformers' configs hold many); each must be a
        boolean (`split_digit_comma` may be null), else a UserError naming `source`."""
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected a JSON object of tokenizer options, got {type(values).__name__}")
        known = {f.name: f for f in fields(cls)}
        chosen = {}
        for key, value in values.items():
            if key not in known:
                continue
            if not (isinstance(value, bool) or (value is None and key == "split_digit_comma")):
                raise UserError(f"{source}: tokenizer option {key} must be true or false, got {value!r}")
            chosen[key] = value
        return cls(**chosen)


class Preprocessor:
    """ALBERT's `preprocess_text`: google-research's (+ transformers' `` and '' -> "), or transformers 5's.

    ASCII text (most of an English corpus) goes through C-level str methods in both modes. Other text: by
    default google's steps with C-level calls (`unicodedata.normalize("NFKD")`, a `str.translate` that drops
    the characters `unicodedata.combining` flags, `str.lower`), so it is google's Python by construction; with
    `split_added_tokens` (transformers 5) the very `tokenizers` normalizers transformers 5 runs (NFKD +
    StripAccents, which drops every mark, Lowercase).

    `deleted`: characters removed before the whitespace is collapsed. transformers 5 runs the model's own
    normalizer (sentencepiece's character map) before it splits at whitespace, and albert-base-v2's map
    deletes \\x0b and \\x1c-\\x1f, which Python's `str.split` would take for spaces: "a\\x1fb" is "▁ab" there.
    `SentencePieceTokenizer` passes the whitespace characters its model deletes in that mode; google's
    `preprocess_text` splits first, so the default mode deletes nothing.
    """

    def __init__(self, options: SentencePieceOptions, deleted: str = ""):
        self.options = options
        self._unicode = _transformers5_normalizer(options) if options.split_added_tokens else self._google
        self._deleted = {ord(c): None for c in deleted} or None

    def _google(self, text: str) -> str:
        text = text.replace("``", '"').replace("''", '"')
        if not self.options.keep_accents:
            text = unicodedata.normalize("NFKD", text).translate(_combining_characters())
        return text.lower() if self.options.do_lower_case else text

    def __call__(self, text: str) -> str:
        if self.options.remove_space and _needs_space_cleanup(text):
            if self._deleted is not None and not text.isprintable():   # none of them is printable
                text = text.translate(self._deleted)
            text = " ".join(text.split())
        if not text.isascii():
            return self._unicode(text)
        text = text.replace("``", '"').replace("''", '"')
        return text.lower() if self.options.do_lower_case else text


def _transformers5_normalizer(options: SentencePieceOptions):
    from tokenizers import normalizers

    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not options.keep_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if options.do_lower_case:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps).normalize_str


@functools.lru_cache(maxsize=1)
def _combining_characters() -> dict[int, None]:
    """`str.translate` table deleting what google's `preprocess_text` drops: `unicodedata.combining(c) != 0`.
    Such characters live in planes 0 and 1 (the last, U+1E94A, in Unicode 14); plane 14 is scanned to be safe."""
    ranges = (range(0x20000), range(0xE0000, 0xE1000))
    return {cp: None for r in ranges for cp in r if unicodedata.combining(chr(cp))}


# what `str.split()` splits at: the Unicode White_Space characters plus \x1c-\x1f
_PYTHON_SPACES = "".join(chr(cp) for cp in range(0x3001) if chr(cp).isspace())


def _needs_space_cleanup(text: str) -> bool:
    """Cheap C-level test: only runs of spaces, edge spaces and non-printables (tabs, NBSP, ...) need a split."""
    return "  " in text or text[:1] == " " or text[-1:] == " " or not text.isprintable()


def _load_processor(model_file: Path):
    import sentencepiece as spm

    if not model_file.is_file():
        raise UserError(f"SentencePiece model not found: {model_file}")
    try:
        return spm.SentencePieceProcessor(model_file=str(model_file))
    except (RuntimeError, OSError) as exc:
        hint = _text_vocabulary_hint(model_file)
        raise UserError(f"cannot read {model_file} as a SentencePiece model ({hint or exc})") from None


_SCORED_PIECE = re.compile(r"[^\t\n]+\t-?\d+(\.\d+)?([eE][-+]?\d+)?")   # a .vocab line: piece<TAB>score


def _text_vocabulary_hint(path: Path) -> str:
    """What a text file given as a SentencePiece model is, when it is a vocabulary ("" otherwise): sentencepiece's
    `.vocab` dump (piece<TAB>score, written beside every `.model`: albert's 30k-clean.vocab, our spiece.vocab),
    which cannot segment text, or a BERT vocab under another name than *.txt. The bare parse error
    (`INTERNAL: could not parse ModelProto`) named neither."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.rstrip("\r\n") for line in handle.readlines(65536)][:200]
    except (OSError, UnicodeDecodeError):
        return ""
    if len(lines) >= 5 and all(_SCORED_PIECE.fullmatch(line) for line in lines[:5]):
        return ("it is sentencepiece's text vocabulary (piece<TAB>score), which cannot segment text: pass the "
                f"binary .model trained with it (e.g. {path.with_suffix('.model').name} beside it)")
    from albertlm.tokenization.wordpiece import SPECIAL_TOKENS, VOCAB_FILE

    if set(SPECIAL_TOKENS) <= set(lines):
        return (f"it is a BERT WordPiece vocabulary: load files like it under a name ending in .txt "
                f"(e.g. {VOCAB_FILE}, or a directory holding one)")
    return ""


def _default_threads() -> int:
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


class SentencePieceTokenizer(TokenizerBase):
    """A SentencePiece model plus ALBERT preprocessing; implements `albertlm.tokenization.base.Tokenizer`."""

    kind = "sentencepiece"
    options_file: Path | None = None   # the tokenizer_config.json `load_tokenizer` read its options from

    def __init__(self, model_file: str | Path, options: SentencePieceOptions | None = None,
                 num_threads: int | None = None):
        self.model_file = user_path(model_file)
        self.options = options or SentencePieceOptions()
        self.num_threads = num_threads or _default_threads()
        self.sp = _load_processor(self.model_file)
        self.vocab_size = self.sp.get_piece_size()
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = self._special_ids()
        self._special = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        pieces = self.sp.id_to_piece(list(range(self.vocab_size)))
        self._digit_comma_ids = {i for i, p in enumerate(pieces) if _ends_in_digit_comma(p)}
        # An unknown piece can end in "," only where the comma itself is unknown (tiny trained models).
        self._unknown_comma = self.sp.piece_to_id(",") == self.sp.unk_id()
        self._digit_comma = self.options.digit_comma_rule and bool(self._digit_comma_ids or self._unknown_comma)
        self._added = self._added_tokens_pattern() if self.options.split_added_tokens else None
        # the special tokens written in the text ("a [SEP] b") become their ids, as in transformers 4 and 5 and
        # our WordPiece and tokenizer.json tokenizers (`special_tokens_as_text` switches it off)
        self._specials = None if self._added is not None else self._special_pieces_pattern()
        self._preprocess = Preprocessor(self.options, self._deleted_spaces() if self.options.split_added_tokens
                                        else "")
        self._warn_if_hangul_is_lost()
        self._warn_if_kana_marks_are_lost(pieces)

    def _special_ids(self) -> tuple[int, int, int, int, int]:
        ids = [self.sp.piece_to_id(p) for p in SPECIAL_PIECES]
        unk = self.sp.unk_id()
        missing = [p for p, i in zip(SPECIAL_PIECES, ids) if i == unk and p != "<unk>"]
        if missing:
            raise UserError(f"{self.model_file} lacks the ALBERT special pieces {missing} "
                            "(train with `albertlm tokenizer train`)")
        return tuple(ids)  # type: ignore[return-value]

    def _warn_if_hangul_is_lost(self) -> None:
        """Accent stripping (`keep_accents=False`, what a bare .model file gets, as in transformers) splits
        Hangul syllables into jamo (NFKD). The `nmt_nfkc` normalizer of ALBERT's and our trained models composes
        them back; a model trained with sentencepiece's `identity` rule (usual for Korean models trained
        elsewhere) does not, so every syllable became <unk>, without a word. transformers gives the same ids;
        we keep them but warn, as `wordpiece.warn_if_hangul_is_decomposed` does for BERT vocabs."""
        if self.options.keep_accents:
            return
        sample = "한국어"
        if self.sp.normalize(unicodedata.normalize("NFKD", sample)) == self.sp.normalize(sample):
            return
        hangul = sum(1 for i in range(self.vocab_size) if _HANGUL.search(self.sp.id_to_piece(i)))
        if hangul >= 100:
            warnings.warn(f"{self.model_file} holds {hangul} Hangul pieces, but accent stripping (keep_accents="
                          "false) splits Hangul into jamo, which this model's normalizer does not compose back: "
                          "Korean text encodes as <unk>; load it with keep_accents=True (CLI: -o keep_accents=true)"
                          ", or save a tokenizer_config.json saying so", UserWarning, stacklevel=3)

    def _warn_if_kana_marks_are_lost(self, pieces: list[str]) -> None:
        """Accent stripping (`keep_accents=False`: google's NFKD + dropping combining characters, or v5's
        StripAccents) drops the voiced sound marks of kana, which are combining characters: ガ -> カ, パ -> ハ.
        No model's normalizer puts them back, so a Japanese model trained on unstripped text (spm_train's
        default) never produced its voiced-kana pieces when loaded bare (google's and transformers' default),
        and read "データ" as "テータ", without a word. We keep those ids (google's and transformers') but warn."""
        pieces = [] if self.options.keep_accents else kana_marked(pieces, "NFKD")
        if pieces:
            warnings.warn(f"{self.model_file} holds {len(pieces)} pieces with voiced kana (e.g. {pieces[0]!r}), but "
                          "accent stripping (keep_accents=false) drops their sound marks (ガ -> カ, パ -> ハ): those "
                          "pieces are never produced and Japanese text is read without its marks; load it with "
                          "keep_accents=True (CLI: -o keep_accents=true), or save a tokenizer_config.json saying so",
                          UserWarning, stacklevel=3)

    def _deleted_spaces(self) -> str:
        """The characters Python's `str.split` takes for whitespace that the model's normalizer deletes
        (albert-base-v2 and models trained with sentencepiece's default nmt_nfkc rule: \\x0b, \\x1c-\\x1f)."""
        plain = self.sp.normalize("ab")
        return "".join(c for c in _PYTHON_SPACES if self.sp.normalize(f"a{c}b") == plain)

    # -- encoding -----------------------------------------------------------------------------------
    def preprocess(self, text: str) -> str:
        return self._preprocess(text)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Preprocess in Python (C-level str methods per text), segment in sentencepiece's threads."""
        if self._added is not None:
            return self._encode_split_added(texts)
        if self._specials is not None and any(("[" in t or "<" in t) and self._specials.search(t) for t in texts):
            return self._encode_split_added(texts, self._specials)
        texts = list(map(self._preprocess, texts))
        ids = self.sp.encode(texts, num_threads=self.num_threads)
        if self._digit_comma:
            ids = [self._split_digit_comma(row, text) for row, text in zip(ids, texts)]
        return ids

    def tokenize(self, text: str) -> list[str]:
        return [self.sp.id_to_piece(i) for i in self.encode(text)]

    def special_tokens_as_text(self) -> None:
        """Read the special pieces written in the text ([CLS], [SEP], [MASK], <pad>, <unk>) as text, as google's
        pipeline does (sentencepiece never makes a control piece or <unk> out of text): "[SEP]" is "▁[" "s" "ep"
        "]" in albert-base-v2. In the transformers-5 mode (`split_added_tokens`) the user-defined symbols,
        ordinary pieces, are still split off as v5 does."""
        self._specials = None
        if self._added is not None:
            self._added = self._added_tokens_pattern(special=False)

    def _special_pieces_pattern(self) -> re.Pattern:
        """The five special pieces as transformers' AlbertTokenizer matches them in the raw text (its special
        tokens, not normalized: "[sep]" stays text), longest first."""
        texts = sorted({self.sp.id_to_piece(i) for i in (self.pad_id, self.unk_id, self.cls_id, self.sep_id,
                                                           self.mask_id)}, key=len, reverse=True)
        return re.compile("(" + "|".join(map(re.escape, texts)) + ")")

    def _added_tokens_pattern(self, special: bool = True) -> re.Pattern | None:
        """Pieces transformers registers as added tokens: control, unknown and user-defined ones (score 0);
        without the control and unknown ones when `special` is False. A byte-fallback model's byte pieces
        (`<0x41>`, score 0 too) are none: they were taken for user-defined symbols, so the text "<0x41>" was cut
        out as the id of the byte "A", which neither sentencepiece (the characters of the text) nor transformers 5
        (`▁ <0x41>`, its Unigram matching the piece's name) gives; it is read as sentencepiece reads it now."""
        sp = self.sp
        added = [sp.id_to_piece(i) for i in range(self.vocab_size)
                 if (special and (sp.is_control(i) or sp.is_unknown(i)))
                 or (sp.get_score(i) == 0.0 and not sp.is_unused(i) and not sp.is_control(i) and not sp.is_unknown(i)
                     and not sp.is_byte(i))]
        added.sort(key=len, reverse=True)  # leftmost-longest, as tokenizers' matcher
        return re.compile("(" + "|".join(map(re.escape, added)) + ")") if added else None

    def _encode_split_added(self, texts: Sequence[str], pattern: re.Pattern | None = None) -> list[list[int]]:
        """transformers' order: split raw text at added tokens (`pattern`, by default v5's added tokens), encode
        the spans between them in one batch, each span preprocessed on its own."""
        parts = [(pattern or self._added).split(t) for t in texts]  # [span, token, span, token, ..., span]
        span_texts = [self._preprocess(p) for row in parts for p in row[::2]]
        spans = self.sp.encode(span_texts, num_threads=self.num_threads)
        out, k = [], 0
        for row in parts:
            ids: list[int] = []
            for j, part in enumerate(row):
                if j % 2:
                    ids.append(self.sp.piece_to_id(part))
                else:
                    ids += self._split_digit_comma(spans[k], span_texts[k]) if self._digit_comma else spans[k]
                    k += 1
            out.append(ids)
        return out

    def _split_digit_comma(self, row: list[int], text: str) -> list[int]:
        """google-research `encode_pieces` on the preprocessed `text` whose ids are `row`.

        Only a row holding a known "9,"-style piece (or, where the comma is unknown, an unknown piece, whose
        surface may end in ",") can change: such rows are re-encoded as pieces and re-split as google does,
        the others are returned as they are.
        """
        if self._digit_comma_ids.isdisjoint(row) and not (self._unknown_comma and self.unk_id in row):
            return row
        out: list[int] = []
        for token_id, piece in zip(row, self.sp.encode(text, out_type=str), strict=True):
            if not _ends_in_digit_comma(piece):
                out.append(token_id)
                continue
            sub = self.sp.encode(piece[:-1].replace("▁", ""), out_type=str)
            if piece[0] != "▁" and sub and sub[0][0] == "▁":  # drop the re-encode's dummy prefix
                sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:], *sub[1:]]
            out += [self.sp.piece_to_id(p) for p in [*sub, piece[-1]]]
        return out

    # -- decoding and vocabulary ---------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids` without the special pieces (<unk> included), as the reference tokenizer of the mode
        decodes: transformers 4's AlbertTokenizer (sentencepiece's decode, stripped: a dropped <unk> at either
        end left a space there) by default; transformers 5's Metaspace decoder with `split_added_tokens` (every
        "▁" a space, except in the first piece, which loses them: a text whose first kept piece is a lone "▁"
        decodes with a leading space there, as in transformers 5)."""
        kept = self._without_special(ids)
        if self.options.split_added_tokens:
            pieces = [self.sp.id_to_piece(i) for i in kept]
            return "".join([pieces[0].replace("▁", ""), *pieces[1:]]).replace("▁", " ") if pieces else ""
        return self.sp.decode(kept).strip()

    def id_to_token(self, token_id: int) -> str:
        return self.sp.id_to_piece(int(token_id))

    def token_to_id(self, token: str) -> int:
        return self.sp.piece_to_id(token)

    def word_start_mask(self) -> np.ndarray:
        mask = np.array([_is_start_piece(self.sp.id_to_piece(i)) for i in range(self.vocab_size)], dtype=bool)
        mask[list(self._special)] = True
        return mask

    def model_facts(self) -> dict:
        """What the `.model` file records and `encode` depends on, for `albertlm tokenizer info` (see
        `model_facts`)."""
        return model_facts(self.model_file)

    # -- files ---------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """spiece.model + tokenizer_config.json: loads in `load_tokenizer` and `AlbertTokenizer.from_pretrained`."""
        save_directory(directory, self.model_file, MODEL_FILE, transformers_config(self.options))

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({str(self.model_file)!r}, V={self.vocab_size}, {self.options})"


_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}   # sentencepiece's TrainerSpec.ModelType


def model_facts(model_file: Path) -> dict:
    """What a `.model` file records that no loader shows (transformers' tokenizers hide it): the algorithm
    (`model_type`: unigram, bpe, word, char), the model's own normalization rule (`normalization`: nmt_nfkc,
    identity, ...; `add_dummy_prefix`, `remove_extra_whitespaces`), the `character_coverage` and `byte_fallback`
    it was trained with, and its `user_defined_symbols` (pieces always cut out whole). {} where protobuf, which
    reads the file's fields, is not installed."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:
        return {}
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(model_file).read_bytes())
    trainer, normalizer = proto.trainer_spec, proto.normalizer_spec
    user = proto.SentencePiece.Type.USER_DEFINED
    return {"model_type": _MODEL_TYPES.get(trainer.model_type, str(trainer.model_type)),
            "normalization": normalizer.name or "custom",
            "add_dummy_prefix": normalizer.add_dummy_prefix,
            "remove_extra_whitespaces": normalizer.remove_extra_whitespaces,
            "character_coverage": float(f"{trainer.character_coverage:.6g}"),   # stored as a float32
            "byte_fallback": trainer.byte_fallback,
            "user_defined_symbols": [piece.piece for piece in proto.pieces if piece.type == user]}


def _ends_in_digit_comma(piece: str) -> bool:
    """google's test: `len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()` (any Unicode digit)."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def _is_start_piece(piece: str) -> bool:
    """google-research ALBERT create_pretraining_data.py `_is_start_piece`, generalised beyond English.

    Google: a piece starts a word if it starts with "▁" or "<", is one ASCII punctuation mark (or € £), or
    holds any character outside a-z and punctuation ("for foreign characters, we always treat them as a whole
    piece"). Kept: "▁"/"<", punctuation (now any Unicode P*/S* piece), digits (as Google). Changed: letters of
    space-delimited scripts (Hangul, Cyrillic, accented Latin, ...) continue a word like a-z, so Korean or
    Russian models get whole-word masking; only scripts written without spaces (CJK, kana, Thai, ...) keep
    Google's one-piece-one-word treatment.
    """
    if piece.startswith(("▁", "<")) or all(unicodedata.category(c)[0] in "PS" for c in piece):
        return True
    return any(c.isdigit() or unicodedata.name(c, "").startswith(_UNSPACED_SCRIPTS) for c in piece)


def transformers_config(options: SentencePieceOptions) -> dict:
    """tokenizer_config.json in transformers' layout (its AlbertTokenizer reads the same option names)."""
    return {"tokenizer_class": "AlbertTokenizer", **asdict(options),
            "pad_token": "<pad>", "unk_token": "<unk>", "cls_token": "[CLS]", "sep_token": "[SEP]",
            "mask_token": "[MASK]", "bos_token": "[CLS]", "eos_token": "[SEP]"}


def read_options(config_file: Path | None) -> SentencePieceOptions:
    """Options from a tokenizer_config.json; keys it lacks take the defaults (google-research's encoding)."""
    return SentencePieceOptions.from_dict(read_config(config_file), config_file)


# -- training ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SentencePieceTrainOptions:
    """google-research ALBERT's spm_train command (README "Pretraining"), minus what breaks transformers.

    ALBERT's command also passes `--user_defined_symbols=(,),",-,.,–,£,€`; transformers (v5) turns such
    symbols into added tokens matched before normalization, which drops the "▁" in front of them and
    changes ids, so they are opt-in here (`user_defined_symbols`).
    """

    vocab_size: int = 30000
    character_coverage: float = 0.99995  # in [MIN_CHARACTER_COVERAGE, 1]
    input_sentence_size: int = 10_000_000  # sentences sampled (reservoir) from the input; 0 = all
    shuffle_input_sentence: bool = True
    max_sentence_length: int = 4192  # bytes; sentencepiece skips longer lines, so we cut them to fit
    model_type: str = "unigram"
    user_defined_symbols: tuple[str, ...] = ()
    num_threads: int = 0  # 0 = the cores this process may use
    seed: int = 12345  # seeds our sample of `input_sentence_size` sentences: same input, seed, threads: same model


MIN_CHARACTER_COVERAGE = 0.98  # sentencepiece's trainer refuses less (trainer_interface.cc), after reading


def check_character_coverage(coverage: float, flag: str = "character_coverage") -> None:
    """A UserError, before any input is read, unless `coverage` is in sentencepiece's range [0.98, 1]: below
    0.98 its trainer failed only after reading the whole input, with an `INTERNAL:` message naming its source."""
    if not MIN_CHARACTER_COVERAGE <= coverage <= 1:
        raise UserError(f"{flag} must be in [{MIN_CHARACTER_COVERAGE}, 1] (sentencepiece's range; CJK corpora: "
                        f"0.9995, ALBERT: 0.99995), got {coverage}")


MAX_VOCAB_SIZE = 1 << 24   # 16,777,216 tokens; 70x the largest vocabularies in use


def check_vocab_size(vocab_size: int, flag: str = "vocab_size") -> None:
    """A UserError, before any input is read, for a vocabulary size no trainer can take: sentencepiece failed on
    one over 2**31 with a ValueError traceback (`cannot parse "5000000000" as int`), and the WordPiece trainer
    reserves memory for the whole vocabulary up front, so a mistyped size (a few zeros too many) aborted the
    process with Rust's `memory allocation of 283467841552 bytes failed` and a native stack."""
    if not 6 <= vocab_size <= MAX_VOCAB_SIZE:
        raise UserError(f"{flag} must be in [6, {MAX_VOCAB_SIZE:,}] (5 special pieces + 1; ALBERT: 30000), "
                        f"got {vocab_size:,}")


MIN_SAMPLE = 101      # sentencepiece refuses an input_sentence_size of 1..100 (trainer_interface.cc)
MAX_THREADS = 1024    # and more than 1024 threads


def check_sample_and_threads(input_sentence_size: int, num_threads: int,
                             flags: tuple[str, str] = ("input_sentence_size", "num_threads")) -> None:
    """A UserError, before any input is read, for what sentencepiece's trainer refuses only once the whole input
    has been read (and sampled), with an `INTERNAL: trainer_interface.cc(102) [...]` line quoting its check:
    an `input_sentence_size` of 1..100 (0 = all) and more than 1024 threads (0 = the usable cores)."""
    if input_sentence_size < 0 or 0 < input_sentence_size < MIN_SAMPLE:
        raise UserError(f"{flags[0]} must be 0 (all sentences) or at least {MIN_SAMPLE} (sentencepiece's minimum), "
                        f"got {input_sentence_size}")
    if not 0 <= num_threads <= MAX_THREADS:
        raise UserError(f"{flags[1]} must be in [0, {MAX_THREADS}] (0 = the usable cores), got {num_threads}")


def check_user_defined_symbols(symbols: Sequence[str], options: SentencePieceOptions, vocab_size: int,
                               flag: str = "user_defined_symbols") -> None:
    """A UserError, before any input is read, for symbols that would fail training or could never match.

    sentencepiece refuses a repeated symbol or one equal to a special piece only with an internal message, and
    accepts symbols that no encoded text can ever hold, so they stay dead entries of the vocabulary: one with
    whitespace (the text's spaces become "▁" before matching), or one the preprocessing changes (with
    `do_lower_case` "Mr." never occurs, "mr." does; `keep_accents=False` turns "é" into "e"). What the model's
    own normalizer composes back is no change: `keep_accents=False` splits Hangul syllables into jamo (NFKD),
    which sentencepiece recomposes, so a Korean symbol ("사람") still matches. `flag` names the option in the
    message (the CLI passes `--user-defined-symbols`).
    """
    seen: set[str] = set()
    preprocess = Preprocessor(options)
    for symbol in symbols:
        if not symbol:
            raise UserError(f"{flag}: an empty symbol")
        if symbol in SPECIAL_PIECES:
            raise UserError(f"{flag}: {symbol!r} is one of the special pieces {' '.join(SPECIAL_PIECES)}, "
                            "always in the vocabulary")
        if symbol in seen:
            raise UserError(f"{flag}: {symbol!r} is given twice")
        seen.add(symbol)
        if any(c.isspace() for c in symbol):
            raise UserError(f"{flag}: {symbol!r} holds whitespace; text is split at whitespace before symbols "
                            "are matched, so it could never occur")
        if preprocess(symbol) != symbol and unicodedata.normalize("NFC", preprocess(symbol)) != symbol:
            raise UserError(f"{flag}: {symbol!r} is {preprocess(symbol)!r} in preprocessed text (lowercasing, "
                            "accent stripping), so it could never occur")
    if len(SPECIAL_PIECES) + len(seen) >= vocab_size:
        raise UserError(f"{flag}: {len(seen)} symbols and {len(SPECIAL_PIECES)} special pieces leave no room in a "
                        f"vocabulary of {vocab_size}")


def sample_lines(lines: Iterable[str], size: int, seed: int) -> list[str]:
    """A uniform random sample of `size` of `lines` (all of them when there are fewer), reservoir-sampled with
    `random.Random(seed)`: the same lines and seed give the same sample. sentencepiece's own sampler ignores
    `set_random_generator_seed` (0.2.x), so its models changed from run to run on a corpus over the sample size."""
    rng = random.Random(seed)
    sample: list[str] = []
    for seen, line in enumerate(lines):
        if seen < size:
            sample.append(line)
        else:
            k = int(rng.random() * (seen + 1))
            if k < size:
                sample[k] = line
    return sample


def _drain(sample: list[str]) -> Iterator[str]:
    """The sample's lines in order, each released once sentencepiece holds its own copy (memory is not held
    twice). In order: a corpus smaller than the sample reaches sentencepiece exactly as it did unsampled."""
    sample.reverse()
    while sample:
        yield sample.pop()


def _reproducible_model(model_file: Path, shuffled: bool) -> None:
    """Drop the training path from the model's recorded trainer_spec (it made the bytes depend on --out, and
    named a staging directory that no longer exists) and record that the sample was a random one."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:  # protobuf absent: the model is the same, only its metadata keeps the path
        return
    from google.protobuf.message import DecodeError

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(model_file.read_bytes())
    except DecodeError:   # sentencepiece reports no failed write: a full disk leaves a truncated model
        import errno
        raise OSError(errno.EIO, "sentencepiece wrote an incomplete model (is the disk full?)",
                      str(model_file)) from None
    proto.trainer_spec.ClearField("model_prefix")
    proto.trainer_spec.shuffle_input_sentence = shuffled
    model_file.write_bytes(proto.SerializeToString())


def read_text_lines(path: Path) -> Iterator[str]:
    """A plain UTF-8 text file's lines (undecodable bytes become U+FFFD): the default training reader.
    `albertlm tokenizer train` passes the data builder's reader instead (compressed text, JSONL, Parquet...)."""
    with open(path, encoding="utf-8", errors="replace", newline=None) as handle:
        yield from handle


def read_with_progress(files: Sequence[Path], read_lines: LineReader, progress=None) -> Iterator[str]:
    """The lines of `files`, `progress` (a tqdm bar or `LogProgress` over the files' bytes as stored) advancing
    every ~64 kB and snapping to the byte count at each file end.

    A reader with a true `reports_bytes` attribute (the CLI's, `albertlm data build`'s reader) is called as
    `read_lines(path, progress=callback)` and tells the bytes of the file it has read itself: a compressed file's
    text is several times its size on disk, so counting the text read against the files' sizes said 100% a
    fraction into the first file and then went back at each file end. Other readers' lines are counted in UTF-8
    bytes (characters undercounted Chinese or Korean text threefold)."""
    done = 0
    reports = progress is not None and getattr(read_lines, "reports_bytes", False)
    for path in files:
        pending = 0
        if reports:
            lines = read_lines(path, progress=progress.update)   # type: ignore[call-arg]
        else:
            lines = read_lines(path)
        for line in lines:
            if progress is not None and not reports:
                pending += len(line) if line.isascii() else len(line.encode("utf-8", "surrogatepass"))
                if pending > 65536:
                    progress.update(pending)
                    pending = 0
            yield line
        done += path.stat().st_size
        if progress is not None:
            progress.update(done - progress.n)


# sentencepiece's trainer drops every sentence holding this character (its internal unknown marker, "▅"
# LOWER FIVE EIGHTHS BLOCK, trainer_interface.cc: "Reserved chars are found. Skipped", said at info level only)
RESERVED_CHAR = "\u2585"


def iter_training_lines(files: Sequence[Path], options: SentencePieceOptions, progress=None,
                        read_lines: LineReader = read_text_lines, max_bytes: int | None = None,
                        on_cut: Callable[[], None] | None = None, marks_lost: list[int] | None = None,
                        reserved: list[int] | None = None):
    """Stream non-blank lines, preprocessed exactly as `encode` will preprocess them.

    `marks_lost`, when given and the options strip accents: its first item counts the lines holding voiced kana,
    whose sound marks the stripping drops (ガ -> カ; see `SentencePieceTokenizer._warn_if_kana_marks_are_lost`).

    A line holding RESERVED_CHAR ("▅", ASCII-art bars in web text), which sentencepiece's trainer would drop
    whole without a word, is given with a space in its place (the model never holds that character: it is
    `<unk>` when encoded, as it was); `reserved`, when given, counts such lines in its first item.

    A line over `max_bytes` UTF-8 bytes (sentencepiece skips those) is cut into pieces that fit, at spaces
    where it has them, and `on_cut()` is called once for it: a corpus without sentence breaks (text8, CJK
    text without full stops) still trains. `progress`: see `read_with_progress`.
    """
    preprocess = Preprocessor(options)
    marked = voiced_kana("NFKD") if marks_lost is not None and not options.keep_accents else None
    for line in read_with_progress(files, read_lines, progress):
        if marked is not None and not line.isascii() and marked.search(line):
            marks_lost[0] += 1   # type: ignore[index]
        line = preprocess(valid_unicode(line))  # sentencepiece's trainer refuses surrogates
        if not line.isascii() and RESERVED_CHAR in line:
            line = line.replace(RESERVED_CHAR, " ")
            if reserved is not None:
                reserved[0] += 1
            if not line.strip():
                continue
        if max_bytes is not None and len(line) * 4 > max_bytes and len(line.encode("utf-8")) > max_bytes:
            if on_cut is not None:
                on_cut()
            yield from fit_bytes(line, max_bytes)
        elif line:
            yield line


def _counted(lines: Iterable[str], count: list[int]) -> Iterator[str]:
    for line in lines:
        count[0] += 1
        yield line


PLAIN_PROGRESS_AFTER = 30.0   # seconds of reading before a log (stderr no terminal) gets progress lines


class LogProgress:
    """The reading bar where stderr is no terminal (a log, nohup, a batch job), for `train_sentencepiece(...,
    log_progress=True)`: once reading has taken PLAIN_PROGRESS_AFTER seconds, a line `tokenizer train: read 30%
    of 1,200.0 MB, 2.5 min` on stderr at each tenth of the input; `late()` then also asks for the line announcing
    sentencepiece's training. A short training prints nothing (a failure stays one line). Without this, a
    training in a log showed nothing at all until it ended, hours later on a big corpus."""

    def __init__(self, total: int):
        self.n, self.total, self._tenths, self._started = 0, total, 0, time.monotonic()
        self.announced = False   # the line before the training was printed: `finished` then prints its end

    def finished(self, what: str) -> None:
        """After the training that `announce` said would show no progress: one stderr line saying it ended and
        how long the whole run took (nothing for a short run, which printed no line before)."""
        if self.announced:
            print(f"tokenizer train: {what} done, {(time.monotonic() - self._started) / 60:.1f} min in all",
                  file=sys.stderr, flush=True)

    def announce(self, line: str) -> None:
        """`line` on stderr, once reading has taken long (`late`): what comes next shows no progress."""
        if self.late():
            self.announced = True
            print(line, file=sys.stderr, flush=True)

    def late(self) -> bool:
        return time.monotonic() - self._started >= PLAIN_PROGRESS_AFTER

    def update(self, count: int) -> None:
        self.n += count
        tenths = 10 * self.n // max(self.total, 1)
        if tenths > self._tenths and self.n < self.total:
            self._tenths = tenths
            if self.late():
                print(f"tokenizer train: read {10 * tenths}% of {self.total / 1e6:,.1f} MB, "
                      f"{(time.monotonic() - self._started) / 60:.1f} min", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _announce_training(lines: Iterable[str], read: list[int], bar, train: SentencePieceTrainOptions,
                       show_progress: bool, first: int = 0) -> Iterator[str]:
    """`lines` (the sample), then (when `show_progress`, or reading in a log took long: `LogProgress.late`) one
    stderr line once they are all read (`read[0]` sentences): reading takes seconds, sentencepiece's training
    after it minutes to hours on a big sample, and showed nothing until it ended. `read[1]` is then the number
    of sentences trained on.

    `first` > 0 (`--no-shuffle` with a sample size): sentencepiece takes the first `first` sentences and stops
    asking for more, so the line is said as the last of them is given (it was never said, the bar stayed up)."""
    count = 0
    for count, line in enumerate(lines, start=1):
        if count == first:
            _say_training(read, count, bar, train, show_progress, " (--no-shuffle: the first ones)")
        yield line
    if count != first or not first:
        _say_training(read, count, bar, train, show_progress, f" (a sample of {count:,})" if count < read[0] else "")


def _say_training(read: list[int], count: int, bar, train: SentencePieceTrainOptions, show_progress: bool,
                  sample: str) -> None:
    read[1:] = [count]
    line = (f"read {read[0]:,} sentences{sample}; training the {train.model_type} model (V={train.vocab_size}, "
            f"{train.num_threads or _default_threads()} threads) shows no progress until it ends "
            "(--verbose: sentencepiece's log)")
    if show_progress:
        bar.close()
        print(line, file=sys.stderr, flush=True)
    elif isinstance(bar, LogProgress):
        bar.announce(line)


class _Relay:
    """The sentences for sentencepiece's trainer, keeping what the reading raised (`error`). sentencepiece turns
    an exception raised by its iterator into a RuntimeError whose last line is a source location: where it reads
    the sentences itself (`--input-sentence-size 0`, `--no-shuffle`), a reader's UserError (an unreadable file)
    became `sentencepiece training failed:   .../sentencepiece.py(615): iter_training_lines`, and Ctrl-C such an
    error with exit 2. The caller raises `error` instead."""

    def __init__(self, lines: Iterable[str]):
        self._lines, self.error = iter(lines), None

    def __iter__(self) -> "_Relay":
        return self

    def __next__(self) -> str:
        try:
            return next(self._lines)
        except StopIteration:
            raise
        except BaseException as exc:
            self.error = exc
            raise


_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_FEW = re.compile(r"smaller than required_chars\. (\d+) vs (\d+)\.")


# sentencepiece's checks failing when nothing of the input is left to train on (an `INTERNAL: ...cc(576)
# [(all_chars_count) > (0)]` line was all the user saw)
_NO_TEXT_CHECKS = ("[!sentences_.empty()]", "[(all_chars_count) > (0)]")


def _no_text(sentences: int, reserved: int) -> str:
    """The one-line error for a training input that holds no character sentencepiece keeps: lines of control
    characters only (its normalizer deletes them), or of RESERVED_CHAR only."""
    read = f"the {sentences:,} sentences read hold" if sentences else "the input holds"
    only = f" or {RESERVED_CHAR!r} (U+2585, which sentencepiece reserves)" if reserved else ""
    return (f"sentencepiece training failed: no text to train on: {read} only characters its normalizer deletes "
            f"(control characters){only}")


def _explain_failure(message: str, train: SentencePieceTrainOptions, sentences: int,
                     trained: int | None = None) -> str:
    """What sentencepiece's two vocabulary-size failures mean for the user, in our flags' words, appended to its
    sentence (kept: `experiments.runner` reads its numbers). They said "Please set it to a value <= 2354" or
    "800 vs 1394" without saying which option, why, or that the numbers are the corpus's limits.

    `trained` < `sentences`: sentencepiece saw a sample (--input-sentence-size), whose limits these are: the
    advice is a larger sample, not more text (it said "the 8,612 sentences read give at most 1,159 pieces;
    train on more text" for a sample of 300 of them)."""
    sampled = trained is not None and trained < sentences
    if sampled and not train.shuffle_input_sentence:
        read = (f"the first {trained:,} sentences (--no-shuffle, --input-sentence-size "
                f"{train.input_sentence_size:,})")
    elif sampled:
        read = (f"the {trained:,} sentences sampled of the {sentences:,} read (--input-sentence-size "
                f"{train.input_sentence_size:,})")
    else:
        read = f"the {sentences:,} sentences read" if sentences else "the input"
    more = "raise --input-sentence-size (0 = all)" if sampled else "train on more text"
    too_high = _TOO_HIGH.search(message)
    if too_high:
        limit = int(too_high.group(2))
        return (f" (--vocab-size {train.vocab_size} is more than this {'sample' if sampled else 'corpus'} can fill: "
                f"{read} give at most {limit:,} {train.model_type} pieces; {more}, or pass --vocab-size {limit} "
                "or less)")
    too_few = _TOO_FEW.search(message)
    if too_few:
        needed, meta = int(too_few.group(2)), len(SPECIAL_PIECES) + len(train.user_defined_symbols)
        return (f" (every character --character-coverage {train.character_coverage} keeps needs a piece of its own: "
                f"{needed - meta:,} characters of this {'sample' if sampled else 'corpus'} and {meta} special and "
                f"user-defined pieces make {needed:,}; a useful vocabulary is a few times that)")
    return ""


def warn_kana_marks_dropped(lines: int, read: int, hangul: int = 0) -> None:
    """After a training with accent stripping: `lines` of the `read` sentences held voiced kana, whose sound marks
    the stripping dropped (ガ -> カ, パ -> ハ; `hangul`: WordPiece's stripping split that many sentences' Hangul
    into jamo). The model holds none of what was dropped, and reads such text the same way, by design of the
    option, but nothing said so to a Japanese (or Korean) user who took `--strip-accents` for Latin accents.
    Said only for a language in at least MARKED_SHARE of the sentences (a quotation in another language is not
    a corpus of it)."""
    lines, hangul = (count if count and count >= MARKED_SHARE * read else 0 for count in (lines, hangul))
    if not lines and not hangul:
        return
    what = []
    if lines:
        what.append(f"dropped the sound marks of the voiced kana in {lines:,} of the {read:,} sentences (ガ -> カ, "
                    "パ -> ハ): the model holds no voiced kana and reads Japanese without them")
    if hangul:
        what.append(f"split the Hangul syllables of {hangul:,} of the {read:,} sentences into jamo: the vocabulary "
                    "holds jamo and decoded Korean comes back decomposed")
    languages = " and ".join(name for name, count in (("Japanese", lines), ("Korean", hangul)) if count)
    warnings.warn(f"accent stripping (--strip-accents, strip_accents / keep_accents=false) {'; it '.join(what)}; "
                  f"train {languages} without it", UserWarning, stacklevel=3)


def fit_bytes(text: str, limit: int) -> list[str]:
    """`text` in non-blank pieces of at most `limit` UTF-8 bytes, cut at the last space before the limit,
    else before a character that would not fit."""
    data = text.encode("utf-8", errors="replace")
    pieces = []
    while len(data) > limit:
        cut = data.rfind(b" ", 0, limit + 1)
        if cut > 0:
            pieces.append(data[:cut])
            data = data[cut + 1:]
            continue
        cut = limit
        while cut > 0 and data[cut] & 0xC0 == 0x80:  # not inside a character
            cut -= 1
        cut = cut or limit
        pieces.append(data[:cut])
        data = data[cut:]
    pieces.append(data)
    return [p for p in (piece.decode("utf-8", errors="replace") for piece in pieces) if p.strip()]


def check_training_input(files: Sequence[Path], read_lines: LineReader = read_text_lines,
                         explain_empty: Callable[[], str] | None = None) -> int:
    """Total bytes; a UserError unless some file has a non-blank line. `explain_empty()`, when given, says
    what the reader skipped (binary files, ...) and is added to that error."""
    if not files:
        raise UserError("no training input files given")
    for path in files:
        if not path.is_file():
            raise UserError(f"training input not found: {path}")
    for path in files:
        if any(line.strip() for line in read_lines(path)):
            return sum(p.stat().st_size for p in files)
    named = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    why = explain_empty() if explain_empty is not None else ""
    raise UserError(f"training input is empty: no text in {named}" + (f"; skipped {why}" if why else ""))


def train_sentencepiece(files: Sequence[str | Path], out_dir: str | Path,
                        train: SentencePieceTrainOptions | None = None,
                        options: SentencePieceOptions | None = None,
                        show_progress: bool = True, verbose: bool = False,
                        read_lines: LineReader = read_text_lines,
                        check_lines: LineReader | None = None,
                        on_cut: Callable[[], None] | None = None,
                        explain_empty: Callable[[], str] | None = None,
                        log_progress: bool = False, stats: dict | None = None) -> SentencePieceTokenizer:
    """Train a unigram model the ALBERT way into `out_dir` (spiece.model, spiece.vocab, tokenizer_config.json).

    Special ids: <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4, no BOS/EOS. Lines (`read_lines(file)`, plain
    text by default) are streamed through the preprocessing into sentencepiece, which keeps a shuffled sample
    of `input_sentence_size` of them. `check_lines` (default `read_lines`) is the reader used for the check that
    the input is not empty, so a reader that counts what it meets does not count the checked lines twice;
    `explain_empty()` says what that reader skipped when the input turns out empty (see `check_training_input`).
    Lines longer than `train.max_sentence_length` bytes are cut to fit (`on_cut()` per line, see
    `iter_training_lines`) rather than skipped by sentencepiece. `show_progress`: a byte bar on a terminal and a
    line when sentencepiece's training starts; else `log_progress`: plain lines for a log once reading has taken
    long (`LogProgress`), and one when the training ends. `stats`, when given, is filled with the number of
    sentences read (`sentences_read`) and trained on (`sentences_trained`: fewer when sampled), and the sentences
    trained with a space for RESERVED_CHAR (`reserved_char_sentences`; see `iter_training_lines`).
    """
    import sentencepiece as spm
    from tqdm import tqdm

    train = train or SentencePieceTrainOptions()
    options = options or SentencePieceOptions(do_lower_case=False, keep_accents=True)
    check_vocab_size(train.vocab_size)
    check_character_coverage(train.character_coverage)
    check_sample_and_threads(train.input_sentence_size, train.num_threads)
    check_user_defined_symbols(train.user_defined_symbols, options, train.vocab_size)
    paths = [Path(f) for f in files]
    total_bytes = check_training_input(paths, check_lines or read_lines, explain_empty)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spm.set_random_generator_seed(train.seed)
    extra = {"user_defined_symbols": list(train.user_defined_symbols)} if train.user_defined_symbols else {}
    # A random sample is drawn here, seeded; sentencepiece then takes all of it (its own sampler is unseeded).
    sampled = train.shuffle_input_sentence and train.input_sentence_size > 0
    bar = LogProgress(total_bytes) if log_progress and not show_progress else \
        tqdm(total=total_bytes, unit="B", unit_scale=True, desc="reading", disable=not show_progress or None,
             leave=False)
    with bar:
        read, marks_lost, reserved = [0], [0], [0]
        lines = _counted(iter_training_lines(paths, options, bar, read_lines, train.max_sentence_length, on_cut,
                                             marks_lost, reserved), read)
        if sampled:
            lines = _drain(sample_lines(lines, train.input_sentence_size, train.seed))
        first = train.input_sentence_size if not train.shuffle_input_sentence else 0
        lines = _Relay(_announce_training(lines, read, bar, train, show_progress, first))
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=lines,
                model_prefix=str(out_dir / "spiece"), model_type=train.model_type,
                vocab_size=train.vocab_size, character_coverage=train.character_coverage,
                input_sentence_size=train.input_sentence_size,
                shuffle_input_sentence=train.shuffle_input_sentence and not sampled,
                max_sentence_length=train.max_sentence_length,
                pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
                num_threads=train.num_threads or _default_threads(),
                minloglevel=0 if verbose else 2, **extra)
        except RuntimeError as exc:  # e.g. "Vocabulary size is too large. Please set it to a value <= 841."
            if lines.error is not None:   # raised while reading: the reader's own error, or Ctrl-C
                raise lines.error from None
            message = str(exc).strip().splitlines()[-1]
            if any(check in message for check in _NO_TEXT_CHECKS):
                raise UserError(_no_text(read[0], reserved[0])) from None
            # "INTERNAL: src/trainer_interface.cc(744) [(a) == (b)] Vocabulary size ..." -> its sentence
            message = re.sub(r"^[A-Z_]+: \S+\.cc\(\d+\) \[.*?\] ?", "", message) or message
            message = message.replace("vocab_size or decrease character_coverage with --character_coverage option",
                                      f"--vocab-size or decrease --character-coverage (down to "
                                      f"{MIN_CHARACTER_COVERAGE})")   # the CLI's flags, not spm_train's
            explained = _explain_failure(message, train, read[0], read[1] if len(read) > 1 else None)
            raise UserError(f"sentencepiece training failed: {message}{explained}") from None
    if isinstance(bar, LogProgress):
        bar.finished(f"training the {train.model_type} model")
    if stats is not None:
        stats.update(sentences_read=read[0], sentences_trained=read[1] if len(read) > 1 else read[0],
                     reserved_char_sentences=reserved[0])
    if marks_lost[0]:
        warn_kana_marks_dropped(marks_lost[0], read[0])
    _reproducible_model(out_dir / MODEL_FILE, train.shuffle_input_sentence)
    save_directory(out_dir, out_dir / MODEL_FILE, MODEL_FILE, transformers_config(options))
    return SentencePieceTokenizer(out_dir / MODEL_FILE, options)
