"""The test oracle for SentencePiece encoding: google-research ALBERT's algorithm, written here independently of
`albertlm.tokenization` (pure Python, piece by piece, as google's `tokenization.py` runs it).

- `preprocess_text`: google's `tokenization.preprocess_text` (collapse whitespace, NFKD, drop characters with a
  non-zero `unicodedata.combining` class, lowercase) with the two additions transformers 4's AlbertTokenizer
  made (`` and '' -> ", and `keep_accents`); the options are transformers 4's names.
- `encode_pieces`: google's `encode_pieces` (= transformers 4's `AlbertTokenizer._tokenize`): sentencepiece's
  pieces, where a piece ending in a digit and a comma is re-encoded without its comma and "▁", the re-encode's
  dummy "▁" dropped when the piece had none, and the comma appended as a piece of its own.

google's Python 3 code compares `str` pieces with a `bytes` "▁" (`piece[0] != SPIECE_UNDERLINE`), so there the
dummy-prefix step never runs; this oracle follows the algorithm as written for Python 2 and ported by
transformers 4, where it does.
"""
from __future__ import annotations

import unicodedata

UNDERLINE = "\u2581"


def preprocess_text(text: str, do_lower_case: bool = True, keep_accents: bool = False,
                    remove_space: bool = True) -> str:
    out = " ".join(text.strip().split()) if remove_space else text
    out = out.replace("``", '"').replace("''", '"')
    if not keep_accents:
        out = unicodedata.normalize("NFKD", out)
        out = "".join(c for c in out if not unicodedata.combining(c))
    if do_lower_case:
        out = out.lower()
    return out


def encode_pieces(sp, text: str) -> list[str]:
    new_pieces: list[str] = []
    for piece in sp.encode_as_pieces(text):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur_pieces = sp.encode_as_pieces(piece[:-1].replace(UNDERLINE, ""))
            if piece[0] != UNDERLINE and cur_pieces[0][0] == UNDERLINE:
                if len(cur_pieces[0]) == 1:
                    cur_pieces = cur_pieces[1:]
                else:
                    cur_pieces[0] = cur_pieces[0][1:]
            cur_pieces.append(piece[-1])
            new_pieces.extend(cur_pieces)
        else:
            new_pieces.append(piece)
    return new_pieces


def encode_ids(sp, text: str, **options) -> list[int]:
    """google's `encode_ids(sp_model, preprocess_text(text))`: PieceToId of every piece."""
    return [sp.piece_to_id(p) for p in encode_pieces(sp, preprocess_text(text, **options))]


def splits_digit_comma(sp, text: str, **options) -> bool:
    """Whether the "9," rule changes this text's pieces (keeps the parity test from being vacuous)."""
    pieces = sp.encode_as_pieces(preprocess_text(text, **options))
    return any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in pieces)
