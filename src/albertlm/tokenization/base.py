"""The tokenizer protocol every layer above relies on (layer 1).

ALBERT's special ids (SentencePiece models trained the ALBERT way): <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4.
WordPiece vocabs keep their own ids ([PAD], [UNK], [CLS], [SEP], [MASK] looked up by name).
Implementations: `sentencepiece.SentencePieceTokenizer`, `wordpiece.WordPieceTokenizer`,
`tokenizer_json.TokenizerJsonTokenizer` (a transformers tokenizer.json); `load.load_tokenizer` picks one.
"""
from __future__ import annotations

import functools
import os
import re
import unicodedata
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from albertlm.errors import user_path   # noqa: F401  (a leading ~ expanded; re-exported for the tokenizers)


@runtime_checkable
class Tokenizer(Protocol):
    """What every albertlm tokenizer has (`load_tokenizer` returns one: `SentencePieceTokenizer`,
    `WordPieceTokenizer` or `TokenizerJsonTokenizer`); `isinstance(tok, Tokenizer)` checks it.

    Attributes:
        kind: "sentencepiece" or "wordpiece" (a tokenizer.json: "wordpiece" for a WordPiece model, else
            "sentencepiece").
        vocab_size: the number of ids (the model's embedding rows must be at least this many).
        pad_id, unk_id, cls_id, sep_id, mask_id: the special ids. ALBERT's SentencePiece models: 0, 1, 2, 3, 4; a
            WordPiece vocab's [PAD], [UNK], [CLS], [SEP], [MASK] where they are (BERT's: 0, 100, 101, 102, 103).
        options: the preprocessing (lowercasing, accent stripping, ...): a dataclass for SentencePiece and
            WordPiece, the tokenizer_config.json's fields for a tokenizer.json (its own pipeline decides).

    Methods: `encode(text)` -> ids without special tokens; `encode_batch(texts)` -> their ids in native code;
    `encode_pair(a, b=None)` -> (`[CLS] a [SEP] (b [SEP])` ids, token types), as transformers builds them;
    `tokenize(text)` -> the pieces; `decode(ids)` -> text, special tokens dropped; `id_to_token` / `token_to_id`
    (an unknown token is `unk_id`); `word_start_mask()` -> (vocab_size,) bool, the whole-word starts;
    `special_tokens_as_text()` -> "[SEP]" written in the text is encoded as text from then on (data building);
    `save(directory)` -> files that albertlm and transformers both load. The WordPiece and tokenizer.json tokenizers
    also have `encode_batch_with_spans(texts)` (each token's character span, for SQuAD).
    """

    kind: str  # "sentencepiece" or "wordpiece"
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, no special tokens."""

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of many texts, in native code (no Python loop per piece)."""

    def encode_pair(self, a: str, b: str | None = None) -> tuple[list[int], list[int]]:
        """`[CLS] a [SEP] (b [SEP])` ids and their token types, as transformers' tokenizers build them."""

    def tokenize(self, text: str) -> list[str]:
        """The pieces of `encode(text)` (an unknown character shows as the unk piece)."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids; special tokens are dropped."""

    def id_to_token(self, token_id: int) -> str: ...

    def token_to_id(self, token: str) -> int: ...

    def word_start_mask(self) -> np.ndarray:
        """Boolean array (V,): True where a token begins a whole word (SentencePiece `▁`, WordPiece not `##`).
        Special and punctuation-only tokens count as word starts."""

    def save(self, directory: str | Path) -> None:
        """Write files that both albertlm and transformers load (spiece.model or vocab.txt and tokenizer_config.json;
        a tokenizer.json tokenizer: its tokenizer.json)."""


def build_pair(cls_id: int, sep_id: int, a: Sequence[int], b: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """`[CLS] a [SEP] (b [SEP])` and token types 0...0 (1...1), the layout transformers' ALBERT/BERT tokenizers build."""
    ids = [cls_id, *a, sep_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, sep_id]
        types += [1] * (len(b) + 1)
    return ids, types


_SURROGATES = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """`text` without surrogate code points, which no native tokenizer (sentencepiece, `tokenizers`) accepts:
    a high + low pair (a str built from UTF-16 halves) becomes its character, a lone one (a JSON `"\\ud83d"`
    escape cut from its pair, as truncated tweets hold; text decoded with `surrogateescape`) becomes U+FFFD, as
    undecodable bytes do when albertlm reads text. The tokenizer then treats it as any U+FFFD: albert-base-v2's
    normalizer deletes it, as BERT's text cleaning does (whose Python implementation deletes surrogates too, so a
    WordPiece vocab gives transformers 4's ids). Text without surrogates is returned as it is."""
    if not _SURROGATES.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _positions(text: str) -> list[int]:
    """Index in `text` of each character of `valid_unicode(text)` and of its end (a pair there is one character)."""
    where, i = [], 0
    while i < len(text):
        where.append(i)
        pair = "\ud800" <= text[i] <= "\udbff" and i + 1 < len(text) and "\udc00" <= text[i + 1] <= "\udfff"
        i += 2 if pair else 1
    return where + [len(text)]


def valid_texts(texts: list[str]) -> list[str]:
    """`texts` with `valid_unicode` applied; the same list object when no text holds a surrogate."""
    fixed = [text if not isinstance(text, str) or text.isascii() else valid_unicode(text) for text in texts]
    return texts if all(a is b for a, b in zip(fixed, texts)) else fixed


MARKED_PIECES = 100   # vocabulary entries with voiced kana that make a warning about accent stripping worth it
# the share of a training corpus's sentences (voiced kana, or Hangul under WordPiece's stripping) that makes the
# same warning worth it after training: an English corpus quoting one Japanese word was warned about its one line
MARKED_SHARE = 0.001


@functools.lru_cache(maxsize=2)
def voiced_kana(form: str = "NFKD") -> re.Pattern:
    """The characters whose `form` decomposition holds the kana voiced or semi-voiced sound mark (U+3099,
    U+309A), a combining mark, so accent stripping drops it: ガ -> カ, パ -> ハ, ヴ -> ウ, で -> て. "NFKD" is
    ALBERT's stripping (google's `preprocess_text`; also ㌀, half-width ﾞ ﾟ, 🈓), "NFD" BERT's (BertTokenizer's
    `strip_accents`). Every such character lies in the scanned blocks (checked over all of Unicode 15)."""
    blocks = (range(0x3000, 0x3400), range(0xFF00, 0xFFF0), range(0x1F200, 0x1F300))
    chars = [chr(cp) for block in blocks for cp in block
             if not {"\u3099", "\u309a"}.isdisjoint(unicodedata.normalize(form, chr(cp)))]
    return re.compile("[" + "".join(chars) + "]")   # none of them is special inside [...]


def kana_marked(entries: Sequence[str], form: str) -> list[str]:
    """The vocabulary `entries` holding voiced kana (`voiced_kana(form)`), when there are MARKED_PIECES or more of
    them (a Japanese vocabulary, worth a warning that accent stripping never produces them); else []."""
    marked = voiced_kana(form)
    if not marked.search("".join(entries)):   # most vocabularies: one C-level scan
        return []
    found = [entry for entry in entries if marked.search(entry)]
    return found if len(found) >= MARKED_PIECES else []


class TokenizerBase:
    """What every implementation derives from `_encode_batch` and its special ids (`_special`: the five ids)."""

    cls_id: int
    sep_id: int
    _special: set[int]

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`_encode_batch` in native code; a batch the native code refuses for holding surrogate code points
        (a TypeError, RuntimeError or UnicodeError there, with a message that names no text) is encoded again
        with them replaced (`valid_unicode`), so the check costs nothing on valid text. A lone str (which
        would be encoded character by character) and texts that are not str are TypeErrors naming them."""
        if isinstance(texts, (str, bytes)):
            raise TypeError(f"encode_batch expects a list of texts, got one {type(texts).__name__} "
                            "(encode(text) encodes one text)")
        texts = list(texts)
        try:
            return self._encode_batch(texts)
        except (TypeError, RuntimeError, UnicodeError):
            for index, text in enumerate(texts):
                if not isinstance(text, str):
                    raise TypeError(f"encode_batch: texts[{index}] is {type(text).__name__}, not str") from None
            fixed = valid_texts(texts)
            if fixed is texts:
                raise
        return self._encode_batch(fixed)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        return self.encode_batch([text])[0]

    def encode_pair(self, a: str, b: str | None = None) -> tuple[list[int], list[int]]:
        ids_a, *rest = self.encode_batch([a] if b is None else [a, b])
        return build_pair(self.cls_id, self.sep_id, ids_a, rest[0] if rest else None)

    def _without_special(self, ids: Sequence[int]) -> list[int]:
        return [int(i) for i in ids if int(i) not in self._special]

    def special_tokens_as_text(self) -> None:
        """From now on encode special-token strings met in the text ("[SEP]", "[MASK]", "[CLS]") as ordinary
        text, as google-research's pretraining-data builders do (their tokenizers know no special tokens).
        By default they become the special ids, as in transformers' tokenizers, which `encode` matches.
        `albertlm data build` switches this on: a corpus line about "the [SEP] token" must not put a
        separator (or an unmasked [MASK], or a [CLS] to predict) inside a segment."""


class TokenizersBacked(TokenizerBase):
    """Encoding and decoding through a `tokenizers.Tokenizer` held in `backend` (no post-processor applied)."""

    backend: object
    unk_id: int

    def special_tokens_as_text(self) -> None:
        self.backend.encode_special_tokens = True  # tokenizers >= 0.15.1 (PR 1437): special tokens not matched

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast (tokenizers >= 0.21) skips offset tracking, which we never use.
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def encode_batch_with_spans(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
        """`encode_batch`'s ids of each text with the character span [start, end) of `text` each token comes
        from, as `tokenizers` tracks it through normalization (transformers' `return_offsets_mapping`): exact
        where matching pieces back against the text cannot be (two [UNK]s in a row, "……" or "”“" in Chinese
        with a BERT vocab, left the second and everything after it in the word without a span), whitespace
        trimmed off the ends, a surrogate pair one character of the text as Python counts it (two)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError(f"encode_batch_with_spans expects a list of texts, got one {type(texts).__name__}")
        texts = list(texts)
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"encode_batch_with_spans: texts[{index}] is {type(text).__name__}, not str")
        fixed = valid_texts(texts)
        encodings = self.backend.encode_batch(fixed, add_special_tokens=False)
        # the offsets' encoding holds encode_batch's ids (the same backend on the same texts): one encoding, not two
        # (a 1.5x longer SQuAD tokenization); a subclass encoding otherwise (SentencePiece's own) gives encode_batch's
        ids = ([encoding.ids for encoding in encodings] if type(self)._encode_batch is TokenizersBacked._encode_batch
               else self.encode_batch(texts))
        out = []
        for text, clean, encoding, token_ids in zip(texts, fixed, encodings, ids):
            where = _positions(text) if clean is not text else None
            spans = []
            for start, end in encoding.offsets:
                if where is not None:
                    start, end = where[start], where[end]
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
                spans.append((start, end))
            out.append((token_ids, spans))
        return out

    def tokenize(self, text: str) -> list[str]:
        return self.backend.encode(valid_unicode(text), add_special_tokens=False).tokens

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(self._without_special(ids), skip_special_tokens=True)

    def id_to_token(self, token_id: int) -> str:
        return self.backend.id_to_token(int(token_id)) or ""

    def token_to_id(self, token: str) -> int:
        token_id = self.backend.token_to_id(token)
        return self.unk_id if token_id is None else token_id


CONFIG_FILE = "tokenizer_config.json"  # transformers' name; holds the preprocessing options


def read_config(config_file: Path | None) -> dict:
    """A tokenizer_config.json as a dict ({} when absent); a malformed one is a UserError naming the file."""
    from albertlm.errors import read_json_object

    if config_file is None or not config_file.is_file():
        return {}
    return read_json_object(config_file, "tokenizer options")


ADDED_TOKENS_FILE = "added_tokens.json"        # transformers 4 (before 4.34): the tokens added to a vocabulary
SPECIAL_TOKENS_MAP = "special_tokens_map.json"  # transformers 4: the special tokens, additional ones included
_ADDED_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")   # `tokenizers.AddedToken`'s flags


def read_added_tokens(config_file: Path | None) -> list[dict]:
    """The tokens transformers added to the tokenizer whose tokenizer_config.json is `config_file`
    (`tokenizer.add_tokens([...])`, `add_special_tokens({"additional_special_tokens": [...]})`, then
    `save_pretrained` in transformers 4, which keeps vocab.txt / spiece.model as they were and records the
    additions beside them); the special tokens of the vocabulary are listed too (`added_tokens_decoder` holds them).

    Read as transformers 5 reads such a directory: tokenizer_config.json's `added_tokens_decoder` (id -> the token
    and its flags; transformers >= 4.34), else `added_tokens.json` (token -> id), special where the token is one
    of the additional special tokens (tokenizer_config.json or special_tokens_map.json), with the additional
    special tokens that are no added id (already in the vocabulary, e.g. "[unused0]": matched whole in the text).
    Each as {"content", "id" (None where the vocabulary decides), and those of `_ADDED_FLAGS` recorded}, in id
    order. A record of another shape is a UserError naming the file."""
    import json

    from albertlm.errors import UserError

    if config_file is None:
        return []
    directory = config_file.parent
    config = read_config(config_file)
    entries: list[dict] = []
    decoder = config.get("added_tokens_decoder")
    if decoder:
        if not isinstance(decoder, dict):
            raise UserError(f"{config_file}: added_tokens_decoder must be an object of id -> token")
        for key, token in decoder.items():
            if not (isinstance(token, dict) and isinstance(token.get("content"), str) and str(key).isdigit()):
                raise UserError(f"{config_file}: added_tokens_decoder entry {key!r} is not an id and a token "
                                "object with its \"content\"")
            entries.append({"content": token["content"], "id": int(key),
                            **{flag: bool(token[flag]) for flag in _ADDED_FLAGS if flag in token}})
    else:
        specials: list[str] = []
        for source in (config, read_config(directory / SPECIAL_TOKENS_MAP)):
            for name in ("additional_special_tokens", "extra_special_tokens"):
                listed = source.get(name) or []
                listed = list(listed.values()) if isinstance(listed, dict) else listed
                for token in listed if isinstance(listed, list) else []:
                    token = token.get("content") if isinstance(token, dict) else token
                    if isinstance(token, str) and token not in specials:
                        specials.append(token)
        added_file = directory / ADDED_TOKENS_FILE
        added = {}
        if added_file.is_file():
            try:
                added = json.loads(added_file.read_text(encoding="utf-8-sig"))
            except (OSError, ValueError) as exc:
                raise UserError(f"cannot read {added_file} ({exc})") from None
            if not (isinstance(added, dict) and all(type(i) is int and i >= 0 for i in added.values())):
                raise UserError(f"{added_file}: expected a JSON object of token -> id")
        for token, index in added.items():
            entries.append({"content": token, "id": index, "special": token in specials,
                            "normalized": token not in specials})
        entries += [{"content": token, "id": None, "special": True, "normalized": False}
                    for token in specials if token not in added]
    return sorted(entries, key=lambda e: (e["id"] is None, e["id"] or 0))


def save_directory(directory: str | Path, source: Path, name: str, config: dict) -> None:
    """Copy the model file in as `name` (unless it is already there) and write tokenizer_config.json."""
    import json

    directory = user_path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / name).resolve() != source.resolve():
        (directory / name).write_bytes(source.read_bytes())
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
