"""WordPiece tokenizers (BERT-style vocab.txt, as Chinese and Korean ALBERT releases ship) on the `tokenizers` library.

The pipeline is transformers' BertTokenizer's (BertNormalizer with Chinese-character splitting, BertPreTokenizer,
WordPiece with "##" continuations, special tokens matched in text), so ids match it; `encode_batch` runs in
Rust threads.
"""
from __future__ import annotations

import re
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from albertlm.errors import UserError
from albertlm.tokenization.base import (TokenizersBacked, kana_marked, read_config, save_directory,
                                        user_path, valid_unicode, voiced_kana)

VOCAB_FILE = "vocab.txt"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark
_HANGUL = re.compile("[\uac00-\ud7a3]")  # composed syllables


@dataclass(frozen=True)
class WordPieceOptions:
    """Defaults = transformers' BertTokenizer defaults. `strip_accents` None follows `do_lower_case`."""

    do_lower_case: bool = True
    tokenize_chinese_chars: bool = True
    strip_accents: bool | None = None

    @classmethod
    def from_dict(cls, values: dict, source: object = "tokenizer options") -> "WordPieceOptions":
        """Known keys of `values` (others are ignored); each a boolean (`strip_accents` may be null), else a
        UserError naming `source`."""
        if not isinstance(values, dict):
            raise UserError(f"{source}: expected a JSON object of tokenizer options, got {type(values).__name__}")
        names = {f.name for f in fields(cls)}
        chosen = {k: v for k, v in values.items() if k in names}
        for key, value in chosen.items():
            if not (isinstance(value, bool) or (value is None and key == "strip_accents")):
                raise UserError(f"{source}: tokenizer option {key} must be true or false, got {value!r}")
        return cls(**chosen)


def read_vocab(vocab_file: Path) -> dict[str, int]:
    """token -> line number, as transformers' `load_vocab` reads it (a repeated token keeps its last line),
    except that a UTF-8 byte order mark (Notepad, PowerShell) is dropped rather than read into the first token."""
    if not vocab_file.is_file():
        raise UserError(f"vocab file not found: {vocab_file}")
    try:
        lines = vocab_file.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as exc:
        raise UserError(f"cannot read {vocab_file} as a UTF-8 vocab.txt ({exc})") from None
    if lines and lines[-1] == "":
        lines.pop()
    vocab = {token: index for index, token in enumerate(lines)}
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise UserError(f"{vocab_file} is not a BERT vocab.txt: it lacks {missing}{_layout_hint(lines, missing)}")
    if len(vocab) < len(lines):
        warn_if_tokens_repeat(lines, vocab_file)
    return vocab


def _layout_hint(lines: list[str], missing: list[str]) -> str:
    """Why a file lacks the special tokens, where its layout says: one line (tokens separated by spaces), a
    token and a score or count a line (a SentencePiece .vocab, a word count), spaces around the tokens."""
    one_a_line = "a vocab.txt holds one token a line and nothing else"
    if len(lines) <= 1:
        return f"; it holds {len(lines)} line(s): {one_a_line}"
    tabbed = sum(1 for line in lines[:1000] if "\t" in line)
    if tabbed > min(len(lines), 1000) // 2:
        return (f"; its lines hold tab-separated fields (line 1: {lines[0]!r}): {one_a_line} (a SentencePiece "
                ".vocab is not one: give its .model)")
    stripped = {line.strip() for line in lines}
    if all(token in stripped for token in missing):
        spaced = next(line for line in lines if line != line.strip() and line.strip() in missing)
        return f"; its lines hold spaces around the tokens ({spaced!r}): {one_a_line}"
    return ""


def warn_if_tokens_repeat(lines: list[str], source: Path) -> None:
    """A token on two lines (a vocab merged from two, a token appended that was already there): BERT and
    transformers give it the id of its last line, so the earlier line's id is never produced and text meant for
    a model trained with the earlier id gets another one (past a pretrained model's embeddings when appended).
    Empty lines are left out (never produced either way). Reads as transformers does; one warning for the file."""
    first: dict[str, int] = {}
    repeats: list[tuple[int, int, str]] = []
    for index, token in enumerate(lines):
        if token in first and token != "":
            repeats.append((first[token], index, token))
        first.setdefault(token, index)
    if repeats:
        earlier, later, token = repeats[0]
        warnings.warn(f"{source}: {len(repeats)} line(s) repeat an earlier token, e.g. line {later + 1} repeats "
                      f"{token!r} of line {earlier + 1}; BERT and transformers read each such token as the id of "
                      f"its last line, so id {earlier} (line {earlier + 1}) is never produced; if the later line was "
                      "added, delete it (a pretrained model knows the token by its earlier id)",
                      UserWarning, stacklevel=3)


def strips_accents(options: WordPieceOptions) -> bool:
    """BERT's rule: `strip_accents` None follows `do_lower_case`."""
    return options.strip_accents if options.strip_accents is not None else options.do_lower_case


def warn_if_hangul_is_decomposed(vocab: dict[str, int], options: WordPieceOptions, source: Path) -> None:
    """BERT's accent stripping (on by default with lowercasing) NFD-splits Hangul syllables into jamo, so a
    Korean vocab sees only [UNK]. transformers' BertTokenizer does the same; we keep its ids but say so."""
    strips = strips_accents(options)
    hangul = sum(1 for token in vocab if _HANGUL.search(token)) if strips else 0
    if hangul >= 100:
        warnings.warn(f"{source} holds {hangul} Hangul tokens but accent stripping (do_lower_case without "
                      "strip_accents=False) decomposes Hangul into jamo and encodes it as [UNK]; load it with "
                      f"strip_accents=False: {_CONFIG_ADVICE.format(option='strip_accents')}", UserWarning,
                      stacklevel=3)


def warn_if_kana_marks_are_lost(vocab: dict[str, int], options: WordPieceOptions, source: Path) -> None:
    """BERT's accent stripping (NFD, then every nonspacing mark dropped) drops the voiced sound marks of kana:
    ガ -> カ, パ -> ハ, so a Japanese vocab's voiced-kana tokens are never produced and its text is read without
    them. transformers' BertTokenizer does the same; we keep its ids but say so."""
    tokens = kana_marked(list(vocab), "NFD") if strips_accents(options) else []
    if tokens:
        warnings.warn(f"{source} holds {len(tokens)} tokens with voiced kana (e.g. {tokens[0]!r}) but accent "
                      "stripping (do_lower_case without strip_accents=False) drops their sound marks (ガ -> カ, "
                      "パ -> ハ), so those tokens are never produced; load it with strip_accents=False: "
                      f"{_CONFIG_ADVICE.format(option='strip_accents')}", UserWarning, stacklevel=3)


# how to set an option for every command: data build, pretrain, finetune and convert take no -o
_CONFIG_ADVICE = ('write {{"{option}": false}} to a tokenizer_config.json beside the vocab.txt (every albertlm '
                  'command and transformers read it; `albertlm tokenizer` commands also take -o {option}=false)')


CASED_TOKENS = 100   # tokens with capitals that make a vocab look cased (an uncased one has none but its specials)


def warn_if_cased_vocab_is_lowercased(vocab: dict[str, int], options: WordPieceOptions, source: Path) -> None:
    """A cased vocab (BERT-cased, a multilingual cased one) read with lowercasing on (BertTokenizer's default for a
    vocab.txt without tokenizer_config.json) never produces its tokens with capitals: "The" becomes "the" or
    [UNK], silently (transformers does the same; google's BERT checked the case against the checkpoint's name).
    We keep those ids but say so."""
    if not options.do_lower_case:
        return
    cased = [t for t in vocab if t.lower() != t and t not in SPECIAL_TOKENS
             and not (t.startswith("[") and t.endswith("]")) and not (t.startswith("<") and t.endswith(">"))]
    if len(cased) >= CASED_TOKENS:
        warnings.warn(f"{source} looks cased ({len(cased)} tokens with capitals, e.g. {cased[0]!r}) but is read "
                      "lowercased (do_lower_case, BERT's default where no tokenizer_config.json says otherwise), so "
                      "those tokens are never produced; if the model was trained cased, load it with "
                      f"do_lower_case=False: {_CONFIG_ADVICE.format(option='do_lower_case')}", UserWarning,
                      stacklevel=3)


def build_pipeline(vocab: dict[str, int], options: WordPieceOptions):
    """A `tokenizers.Tokenizer` equal to transformers' BertTokenizer, without its post-processor."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import WordPiece

    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=options.tokenize_chinese_chars,
        strip_accents=options.strip_accents, lowercase=options.do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer


class WordPieceTokenizer(TokenizersBacked):
    """A BERT vocab.txt behind `albertlm.tokenization.base.Tokenizer`."""

    kind = "wordpiece"
    options_file: Path | None = None   # the tokenizer_config.json `load_tokenizer` read its options from

    def __init__(self, vocab_file: str | Path, options: WordPieceOptions | None = None,
                 added_tokens: Sequence[dict] = ()):
        """`added_tokens`: what transformers added to the vocabulary (`base.read_added_tokens`), matched in the
        text whole as transformers 5 matches them, at their recorded ids."""
        self.vocab_file = user_path(vocab_file)
        self.options = options or WordPieceOptions()
        self.vocab = read_vocab(self.vocab_file)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (self.vocab[t] for t in SPECIAL_TOKENS)
        self._special = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self.backend = build_pipeline(self.vocab, self.options)
        self.added_tokens = self._add_tokens(added_tokens)
        self.vocab_size = max([*self.vocab.values(), *(t["id"] for t in self.added_tokens)]) + 1
        warn_if_hangul_is_decomposed(self.vocab, self.options, self.vocab_file)
        warn_if_kana_marks_are_lost(self.vocab, self.options, self.vocab_file)
        warn_if_cased_vocab_is_lowercased(self.vocab, self.options, self.vocab_file)

    def _add_tokens(self, entries: Sequence[dict]) -> list[dict]:
        """Add `entries` (the special tokens at their own ids left out) to the pipeline in id order, as
        transformers 5 does, and check that each got its recorded id: a vocab.txt saved by transformers 4 after
        `add_tokens` holds only the original tokens, and "[E1]" or "covid-19" added to a fine-tuned model were
        encoded as pieces (or [UNK]) here, other ids than the model was trained with, without a word."""
        from tokenizers import AddedToken

        added = []
        for entry in entries:
            if entry["content"] in SPECIAL_TOKENS and entry["id"] in (None, self.vocab[entry["content"]]):
                continue
            flags = {k: v for k, v in entry.items() if k not in ("content", "id")}
            token = AddedToken(entry["content"], **flags)
            if flags.get("special"):
                self.backend.add_special_tokens([token])
            else:
                self.backend.add_tokens([token])
            got = self.backend.token_to_id(entry["content"])
            if entry["id"] is not None and got != entry["id"]:
                raise UserError(f"{self.vocab_file.parent}: the added token {entry['content']!r} is recorded at id "
                                f"{entry['id']}, but the vocabulary gives it id {got} (added ids must follow "
                                f"{self.vocab_file.name}'s {len(self.vocab):,} tokens without a gap)")
            added.append({**entry, "id": got})
        return added

    def word_start_mask(self) -> np.ndarray:
        """BERT whole-word masking: every token not starting with "##" begins a word (added tokens too)."""
        mask = np.ones(self.vocab_size, dtype=bool)
        for token, index in self.vocab.items():
            if token.startswith("##"):
                mask[index] = False
        mask[list(self._special)] = True
        return mask

    def save(self, directory: str | Path) -> None:
        """vocab.txt + tokenizer_config.json: loads in `load_tokenizer` and `BertTokenizer.from_pretrained`
        (a byte order mark in the source vocab is left out of the copy: transformers would read it as part of
        the first token)."""
        save_directory(directory, self.vocab_file, VOCAB_FILE, transformers_config(self.options, self.added_tokens))
        copy = user_path(directory) / VOCAB_FILE
        if copy.resolve() != self.vocab_file.resolve():
            data = copy.read_bytes()
            if data.startswith(_BOM):
                copy.write_bytes(data[len(_BOM):])

    def __repr__(self) -> str:
        return f"WordPieceTokenizer({str(self.vocab_file)!r}, V={self.vocab_size}, {self.options})"


def transformers_config(options: WordPieceOptions, added_tokens: Sequence[dict] = ()) -> dict:
    """tokenizer_config.json; `added_tokens` as transformers' `added_tokens_decoder` (id -> token and flags)."""
    config = {"tokenizer_class": "BertTokenizer", **asdict(options),
              "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
              "mask_token": "[MASK]"}
    if added_tokens:
        config["added_tokens_decoder"] = {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                          for t in added_tokens}
    return config


def read_options(config_file: Path | None) -> WordPieceOptions:
    """The options of tokenizer_config.json (BertTokenizer's defaults where it is absent); a transformers
    `BertJapaneseTokenizer` directory as `japanese_options` reads it."""
    values = read_config(config_file)
    if config_file is not None and is_bert_japanese(values, config_file.parent):
        values = japanese_options(values, config_file)
    return WordPieceOptions.from_dict(values, config_file)


JAPANESE_CLASS = "BertJapaneseTokenizer"
_JAPANESE_KEYS = ("word_tokenizer_type", "subword_tokenizer_type")   # only BertJapaneseTokenizer reads them


def is_bert_japanese(config: dict, directory: Path) -> bool:
    """Whether transformers reads the vocab.txt of `directory` (whose tokenizer_config.json holds `config`) with
    `BertJapaneseTokenizer` (cl-tohoku's Japanese BERTs, bert-base-japanese-char): the class named there, or in
    the model's config.json where tokenizer_config.json names none (older cl-tohoku uploads), or no class named
    but the word/subword tokenizer types only that class reads."""
    named = config.get("tokenizer_class")
    if named is None:
        from albertlm.errors import json_object_or_empty

        named = json_object_or_empty(directory / "config.json").get("tokenizer_class")
    if named is None:
        return any(key in config for key in _JAPANESE_KEYS)
    return named == JAPANESE_CLASS


def japanese_options(config: dict, config_file: Path) -> dict:
    """`BertJapaneseTokenizer`'s options as ours. Its "basic" words and "wordpiece" subwords are BertTokenizer's
    pipeline with other defaults: no lowercasing (`do_lower_case` false unless given) and no splitting of CJK
    characters (`tokenize_chinese_chars` false whatever the file says; accent stripping follows lowercasing);
    read with BertTokenizer's defaults, as before, such a vocab gave other ids than transformers (every kanji a
    word of its own, kana words cut after it) without a word. Its MeCab, Sudachi and Juman++ word splitting and
    its character subwords are refused in one line: we have none of them, and BERT's splitting gives other ids."""
    word = config.get("word_tokenizer_type", "basic")
    subword = config.get("subword_tokenizer_type", "wordpiece")
    off = [key for key in ("do_word_tokenize", "do_subword_tokenize") if config.get(key, True) is not True]
    if word != "basic" or subword != "wordpiece" or off:
        what = ", ".join([*(f"{key} {config[key]!r}" for key in _JAPANESE_KEYS if key in config
                            and config[key] not in ("basic", "wordpiece")), *(f"{key} false" for key in off)])
        raise UserError(f"{config_file}: a transformers {JAPANESE_CLASS} ({what}): albertlm reads a vocab.txt only "
                        "with BERT's word splitting and WordPiece subwords (word_tokenizer_type basic, "
                        "subword_tokenizer_type wordpiece), which would give other ids than the model was trained "
                        "with; use a tokenizer albertlm reads as its model does (a SentencePiece .model, a BERT "
                        "vocab.txt, a tokenizer.json)")
    return {**config, "do_lower_case": config.get("do_lower_case", False), "tokenize_chinese_chars": False,
            "strip_accents": None}


def canonical_order(vocab: dict[str, int]) -> list[str]:
    """A trained vocabulary's tokens in an order that depends only on the set: the special tokens (ids 0..4),
    then the word-start tokens, then the "##" continuations, each group sorted by code point."""
    rest = [t for t in vocab if t not in SPECIAL_TOKENS]
    return [*SPECIAL_TOKENS, *sorted(t for t in rest if not t.startswith("##")),
            *sorted(t for t in rest if t.startswith("##"))]


def _alphabet_was_cut(vocab: dict[str, int], cap: int) -> bool:
    """Whether a training's alphabet cap left characters out: the trainer adds every kept character as a token of
    one character (merges give longer ones, continuations "##c"), so `cap` of them means the cap was reached."""
    return sum(1 for token in vocab if len(token) == 1 and token not in SPECIAL_TOKENS) >= cap


def _corpus_characters(paths: Sequence[str], read_lines) -> Counter[str]:
    """How often each character occurs in the training lines (a second reading, only where the cap cut characters
    and the training's own reading did not count them: `tokenizers` read the files)."""
    characters: Counter[str] = Counter()
    for path in paths:
        for line in read_lines(Path(path)):
            characters.update(line)
    return characters


def corpus_alphabet(characters: Iterable[str] | Mapping[str, int], backend) -> tuple[Counter[str], set[str]]:
    """The alphabet the trainer sees in a corpus of `characters` (raw character -> occurrences, or a set) read by
    `backend`'s normalizer and pre-tokenizer: each character as it comes out of them -> its occurrences, and the
    `joining` ones, which can continue a word (not punctuation, not a CJK character that BERT's normalizer makes
    a word of its own) and so need a "##" form too."""
    normalize, split = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    counts: Counter[str] = Counter()
    for raw in characters:
        times = characters[raw] if isinstance(characters, Mapping) else 1
        for word, _ in split(normalize(valid_unicode(raw))):
            for c in word:
                counts[c] += times
    joining = {c for c in counts if _joins(c, backend)}
    return counts, joining


def _joins(c: str, backend) -> bool:
    """Whether the character `c` (as the normalizer gives it) can continue a word under `backend`'s pipeline."""
    return len(backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str("a" + c))) == 1


def alphabet_cap(characters: Iterable[str] | Mapping[str, int], backend, budget: int, room: int | None = None,
                 cap: int = 0) -> int:
    """The largest `limit_alphabet` that cannot take the vocabulary past `budget` tokens (the vocabulary size
    less the special tokens), for a corpus of `characters` read by `backend`'s normalizer and pre-tokenizer.

    The trainer adds each kept character as a token, and its "##" form where the character ever continues a
    word, before any merge, whatever the vocabulary size; merges stop at the size. Only the characters that can
    continue a word (`joining`: not punctuation, not a CJK character that BERT's normalizer makes a word of its
    own) can need the second token, so `limit + min(limit, joining) <= budget` is enough: all the characters when
    they fit with their "##" forms, and never fewer than half the budget (the bound where every character
    may need both). A Chinese corpus of 1,395 characters at V=2000 kept 997 and read the others as [UNK],
    with 936 of the 2,000 tokens unused.

    With `room` (the tokens a training at `cap` left unused) and `characters` counted (character -> occurrences):
    no wider than `cap` plus the characters past it, the most frequent first as the trainer keeps them, whose
    tokens (one, two for a joining character) fit in `room`, so the widening never takes a merge's place. Widened
    into the merges' room, a corpus of English, Korean and Chinese at V=3000 kept 1,921 characters instead of
    1,497, and its merged tokens fell from 740 to 258: Alice in Wonderland took 18% more tokens to read."""
    counts, joining = corpus_alphabet(characters, backend)
    widest = min(len(counts), max(budget - len(joining), budget // 2, 1))
    if room is None:
        return widest
    limit = cap
    for c in sorted(counts, key=lambda c: (-counts[c], c))[cap:]:
        room -= 2 if c in joining else 1
        if room < 0:
            break
        limit += 1
    return min(limit, widest)


def complete_continuations(vocab: dict[str, int], backend, vocab_size: int) -> dict[str, int]:
    """`vocab` (as the trainer numbered it) with the "##" form of every character of its alphabet that can continue
    a word, as google's WordPiece learner (tensorflow_text's `ensure_all_tokens_exist`) makes it, where all of them
    fit in `vocab_size`; else `vocab` as it is. The `tokenizers` trainer adds "##c" only where the training text
    has c inside a word, so a word of known characters with one of them inside it for the first time was [UNK]
    as a whole: a third of the [UNK]s of held-out Korean text (고풍을, 마이크로컴퓨터, 주먹을: 풍, 컴, 먹 began
    words only). The forms added take the place of the last merges (the trainer numbers its merges in the order
    it made them, the least frequent last: the vocabulary a training at the smaller size gives, up to ties
    between equally frequent merges at the end)."""
    alphabet = [t for t in vocab if len(t) == 1 and t not in SPECIAL_TOKENS]
    joining = [c for c in alphabet if _joins(c, backend)]
    missing = [f"##{c}" for c in joining if f"##{c}" not in vocab]
    if not missing or len(SPECIAL_TOKENS) + len(alphabet) + len(joining) > vocab_size:
        return vocab
    merged = sorted((t for t in vocab if len(t.removeprefix("##")) > 1 and t not in SPECIAL_TOKENS),
                    key=lambda t: vocab[t])
    drop = set(merged[len(merged) - max(0, len(vocab) + len(missing) - vocab_size):])
    kept = {t: i for t, i in vocab.items() if t not in drop}
    end = max(vocab.values()) + 1
    return {**kept, **{token: end + k for k, token in enumerate(missing)}}


def _uncovered_warning(counts: Counter[str], joining: set[str], vocab: dict[str, int], vocab_size: int) -> None:
    """A warning naming the characters of the training text that the vocabulary lacks (they read as [UNK]), and
    the vocabulary size that keeps them all, or nothing where it lacks none."""
    lost = [c for c in counts if c not in vocab]
    if not lost:
        return
    lost.sort(key=lambda c: (-counts[c], c))
    times, total = sum(counts[c] for c in lost), sum(counts.values())
    need = len(SPECIAL_TOKENS) + len(counts) + len(joining)
    sample = ", ".join(f"{c} (U+{ord(c):04X})" for c in lost[:3])
    warnings.warn(f"the vocabulary of {vocab_size:,} tokens has room for {len(counts) - len(lost):,} of the "
                  f"{len(counts):,} characters of the training text: {len(lost):,} of them ({sample}, ...; "
                  f"{times:,} of its {total:,} characters, {times / total:.2%}) read as [UNK]; the special tokens and "
                  f"every character with its ## form take {need:,} tokens: a vocabulary size (--vocab-size) of "
                  f"{need} keeps them all, a larger one word pieces too", UserWarning, stacklevel=3)


def train_wordpiece(files: Iterable[str | Path], vocab_size: int, out_dir: str | Path,
                    options: WordPieceOptions | None = None, min_frequency: int = 2,
                    limit_alphabet: int | None = None, show_progress: bool = True,
                    read_lines=None, check_lines=None, explain_empty=None,
                    log_progress: bool = False) -> WordPieceTokenizer:
    """Train a WordPiece vocab with `tokenizers` (streams its files in Rust, or the lines `read_lines(file)`
    gives, and `check_lines` / `explain_empty` as in `sentencepiece.train_sentencepiece`) and write a loadable
    directory.

    The alphabet (the characters, each a token of its own and, where it can continue a word, a "##" one too) is
    every character of the training text, where the vocabulary holds them all: as google's WordPiece learner
    (tensorflow_text) makes it, every such character gets its "##" form, even one the text has only at the start
    of a word (`complete_continuations`), so that a word of known characters is never [UNK]; where those forms do
    not all fit, the `tokenizers` trainer's own alphabet (the "##" forms the text uses) where that fits. The
    limit is the vocabulary size: where the characters do not fit in it, the alphabet is capped at half the
    vocabulary left after the special tokens (`limit_alphabet`), so that the result never exceeds `vocab_size`
    and word pieces keep their room, and the characters past the cap (the rarest) become [UNK], with a warning
    naming the vocabulary size that keeps them all. Nine tenths of KorNLI dev (1,077 characters) at V=2000 was
    capped at 997 characters: 89 [UNK]s in its own text and 145 in the held-out tenth; with every character none
    and 99; at V=3000, with their "##" forms too, 65 (words holding a syllable the training text never had). (The cap used to be 1000 characters, which
    made hundreds of the Hanzi of a Chinese corpus, or the Hangul of a Korean one, [UNK] at any vocabulary size.)
    Where the cap left characters out and the training left tokens unused (the corpus ran out of pairs to merge),
    the training reruns with the cut characters, the most frequent first, that fit in the unused room
    (`alphabet_cap`; a CJK character or punctuation, no "##" form, takes one token): Chinese news (1,395
    characters) at V=2000 kept 997 characters and read 392 tokens of its own text as [UNK] in a vocabulary of
    1,067 tokens; it keeps all of them now. Where the merges fill the vocabulary nothing is widened (and nothing
    read or trained again): a wider alphabet there takes the merges' place (English, Korean and Chinese at
    V=3000: 258 merged tokens instead of 740, and 18% more tokens for an English text). The characters are
    counted while the training reads `read_lines`; the files `tokenizers` reads itself are read again for them,
    only where the cap cut characters.

    The vocabulary is written in a canonical order (special tokens, then word starts and then "##"
    continuations, each sorted by code point): the trainer numbers tokens in hash-map order, different in every
    process, so the same corpus gave other ids each run. The trainer can still pick differently between
    equally frequent merges at the end of the vocabulary, so two runs may differ in a token or two.

    `log_progress` (with `read_lines`, where `show_progress` draws no bar: stderr is a log): once reading has
    taken long, plain progress lines while the input is read, one line when the trainer starts computing the
    vocabulary and one when it ends, with the time (`sentencepiece.LogProgress`); the trainer draws its own bars
    only on a terminal, so a long training in a log printed nothing until it ended.
    """
    from tokenizers.trainers import WordPieceTrainer

    from albertlm.tokenization.sentencepiece import (LogProgress, check_training_input, check_vocab_size,
                                                     read_text_lines, read_with_progress, warn_kana_marks_dropped)

    check_vocab_size(vocab_size)
    if vocab_size < len(SPECIAL_TOKENS) + 2:   # the trainer keeps a character as a word start and as ##c
        raise UserError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 2} for WordPiece (the "
                        f"{len(SPECIAL_TOKENS)} special tokens, and a character both as a word start and as its "
                        f"## continuation), got {vocab_size} (the trainer would write "
                        f"{len(SPECIAL_TOKENS) + 2} tokens)")
    options = options or WordPieceOptions()
    paths = [str(p) for p in files]
    total = check_training_input([Path(p) for p in paths], check_lines or read_lines or read_text_lines,
                                 explain_empty)
    out_dir = Path(out_dir)
    placeholder = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    budget = vocab_size - len(SPECIAL_TOKENS)
    # a second reading (the characters, a wider alphabet) counts nothing twice: the emptiness check's reader
    again_lines = check_lines or read_lines or read_text_lines
    # the characters of the text, counted by the first training's reading (`read_lines`; else read when needed)
    characters: Counter[str] | None = Counter() if read_lines is not None else None
    sentences = [0]

    def train(cap: int | None, first: bool = True):
        backend = build_pipeline(placeholder, options)
        limit = {} if cap is None else {"limit_alphabet": cap}   # None: every character (the trainer's default)
        trainer = WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                   special_tokens=list(SPECIAL_TOKENS), continuing_subword_prefix="##",
                                   show_progress=show_progress, **limit)
        if read_lines is None:
            backend.train(paths, trainer)
            return backend
        bar = LogProgress(total) if log_progress and not show_progress and first else None
        read, kana, hangul = [0], [0], [0]
        # what accent stripping destroys beyond accents (BERT's NFD): kana's voiced marks, Hangul syllables
        marked = voiced_kana("NFD") if strips_accents(options) else None
        count = characters.update if first else None

        def lines():
            for line in read_with_progress([Path(p) for p in paths], read_lines if first else again_lines, bar):
                read[0] += 1
                if marked is not None and not line.isascii():
                    kana[0] += marked.search(line) is not None
                    hangul[0] += _HANGUL.search(line) is not None
                # valid_unicode: the trainer refuses surrogates (a JSONL "\\ud83d" escape cut from its pair)
                line = valid_unicode(line)
                if count is not None:
                    count(line)
                yield line
            if bar is not None:
                bar.announce(f"read {read[0]:,} sentences; computing the WordPiece vocabulary (V={vocab_size}) "
                             "shows no progress until it ends")
        backend.train_from_iterator(lines(), trainer)
        if bar is not None:
            bar.finished("computing the WordPiece vocabulary")
        if first:
            sentences[0] = read[0]
            if kana[0] or hangul[0]:   # said once, by the first training
                warn_kana_marks_dropped(kana[0], read[0], hangul[0])
        return backend

    cap = limit_alphabet or max(1, budget // 2)
    backend = train(cap)
    first = vocab = backend.get_vocab()
    if len(first) <= len(SPECIAL_TOKENS):
        read = f"the {sentences[0]:,} sentences read hold" if read_lines is not None else "the input holds"
        raise UserError(f"no text to train on: {read} only characters BERT's normalizer deletes (control and "
                        "zero-width characters, U+FFFD)")
    room = vocab_size - len(first)   # what the merges left unused: the corpus ran out of pairs to merge
    whole = limit_alphabet is None   # the alphabet holds every character of the text
    if whole and _alphabet_was_cut(first, cap):
        whole = False
        counts, joining = corpus_alphabet(characters if characters is not None
                                          else _corpus_characters(paths, again_lines), backend)
        continuing = sum(1 for t in first if t.startswith("##") and len(t) == 3)   # the "##c" the text uses
        if all(c in first for c in counts):   # exactly `cap` characters: none was cut
            whole = True
        elif len(counts) + continuing <= budget:
            # every character may fit, with the "##" forms the text uses: the trainer's own alphabet, where it fits
            every = train(None, first=False)
            if len(every.get_vocab()) <= vocab_size:
                backend, vocab, whole = every, every.get_vocab(), True
        if not whole and room > 0 and _alphabet_was_cut(first, cap):
            # the half-vocabulary cap is a bound for the worst case (every character also needs its "##" form);
            # where the merges left room unused (CJK characters are words of their own, a small corpus), keep
            # more characters in it, never in the place of a merge (which shortens every text it is found in)
            wider = alphabet_cap(counts, backend, budget, room=room, cap=cap)
            if wider > cap:
                backend = train(wider, first=False)
                vocab = backend.get_vocab()
        if not whole:
            _uncovered_warning(counts, joining, vocab, vocab_size)
    if whole:   # every character of the text: each with its "##" form, where they all fit
        vocab = complete_continuations(vocab, backend, vocab_size)
    tokens = canonical_order(vocab)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / VOCAB_FILE).write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    save_directory(out_dir, out_dir / VOCAB_FILE, VOCAB_FILE, transformers_config(options))
    return WordPieceTokenizer(out_dir / VOCAB_FILE, options)
