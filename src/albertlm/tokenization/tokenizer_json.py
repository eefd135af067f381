"""A transformers `tokenizer.json` (what transformers v5 `save_pretrained` writes, often without spiece.model or
vocab.txt) run by the `tokenizers` library: the same pipeline transformers runs, so the same ids."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
import numpy as np

from albertlm.errors import UserError
from albertlm.tokenization.base import CONFIG_FILE, TokenizersBacked, read_config, user_path
from albertlm.tokenization.sentencepiece import _is_start_piece

TOKENIZER_FILE = "tokenizer.json"
# Names tried for each special token when tokenizer_config.json does not name it.
CANDIDATES = {"pad": ("<pad>", "[PAD]"), "unk": ("<unk>", "[UNK]"), "cls": ("[CLS]", "<s>"),
              "sep": ("[SEP]", "</s>"), "mask": ("[MASK]", "<mask>")}


def _not_a_tokenizer(path: Path) -> str:
    """Why a JSON object without a tokenizer "model" is none ("" for other files): the files transformers saves
    beside a tokenizer (tokenizer_config.json, special_tokens_map.json, config.json) hold options only, and
    `tokenizers` refused them with a parse position (`expected , or } at line 2 column 21`) naming nothing."""
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or "model" in data:
        return ""
    return (f"it holds no tokenizer \"model\"; transformers' {CONFIG_FILE}, special_tokens_map.json and "
            f"config.json hold options only: pass the directory holding the tokenizer, or its {TOKENIZER_FILE}, "
            "spiece.model or vocab.txt")


def byte_fallback_lost(model: object) -> bool:
    """Whether a tokenizer.json "model" section (a dict) is a Unigram holding a SentencePiece `--byte_fallback`
    model's 256 byte pieces (<0x00> .. <0xFF>, which sentencepiece writes only for such a model) without byte
    fallback, as transformers 5's AlbertTokenizer saves ours (its Unigram is rebuilt with `byte_fallback=False`, and
    `save_pretrained` writes no spiece.model): read so, a character outside the vocabulary is <unk>, not the byte
    pieces the model was trained on."""
    if not isinstance(model, dict) or model.get("type") != "Unigram" or model.get("byte_fallback"):
        return False
    pieces = {entry[0] for entry in model.get("vocab") or [] if isinstance(entry, list) and entry}
    return all(f"<0x{b:02X}>" in pieces for b in range(256))


def lost_byte_fallback_warning(path: str | Path) -> str:
    """The warning (its text) for `path`, a tokenizer.json whose model `byte_fallback_lost` describes."""
    return (f"{path} holds the 256 byte pieces (<0x00> .. <0xFF>) of a SentencePiece model trained with byte fallback, "
            "but no byte fallback (transformers 5's AlbertTokenizer saves it so): a character outside its vocabulary "
            "reads as <unk> there, not as the byte pieces the model was trained on; put the model's spiece.model "
            "beside it (albertlm reads that first), or set \"byte_fallback\": true in its \"model\" section")


def lost_byte_fallback(path: str | Path) -> str | None:
    """`lost_byte_fallback_warning(path)` for a tokenizer.json that `byte_fallback_lost` describes; None for any other
    file (or one that is no JSON)."""
    try:
        model = json.loads(Path(path).read_text(encoding="utf-8")).get("model") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return lost_byte_fallback_warning(path) if byte_fallback_lost(model) else None


def describe_step(step: dict | None) -> str:
    """A tokenizer.json normalizer or pre-tokenizer in one line: a Sequence as its steps, each step as its type
    and its true/false/null settings (`BertNormalizer(clean_text=true, ..., lowercase=false)`); "none" if absent."""
    if not isinstance(step, dict):
        return "none"
    children = step.get("normalizers") or step.get("pretokenizers")
    if step.get("type") == "Sequence" and isinstance(children, list):
        return ", ".join(describe_step(child) for child in children) or "none"
    flags = [f"{key}={json.dumps(value)}" for key, value in step.items()
             if key != "type" and (value is None or isinstance(value, bool))]
    return f"{step.get('type', '?')}({', '.join(flags)})" if flags else str(step.get("type", "?"))


class TokenizerJsonTokenizer(TokenizersBacked):
    """`tokenizer.json` behind `albertlm.tokenization.base.Tokenizer`; kind from its model (WordPiece or not)."""

    def __init__(self, tokenizer_file: str | Path):
        from tokenizers import Tokenizer

        self.tokenizer_file = user_path(tokenizer_file)
        try:
            self.backend = Tokenizer.from_file(str(self.tokenizer_file))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise UserError(f"cannot read {self.tokenizer_file} as a tokenizer.json "
                            f"({_not_a_tokenizer(self.tokenizer_file) or exc})") from None
        model = json.loads(self.backend.to_str())["model"]
        if byte_fallback_lost(model):
            # fill-mask, embed, finetune and predict read every character outside the vocabulary as <unk> here,
            # where the model was trained on its UTF-8 byte pieces (said once: the same text from this line)
            warnings.warn(lost_byte_fallback_warning(self.tokenizer_file), UserWarning, stacklevel=2)
        self.kind = "wordpiece" if model.get("type") == "WordPiece" else "sentencepiece"
        self._prefix = model.get("continuing_subword_prefix") or "##"
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)
        self.options = read_config(self.tokenizer_file.parent / CONFIG_FILE)
        for name in CANDIDATES:
            setattr(self, f"{name}_id", self._special_id(name))
        self._special = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}

    def _special_id(self, name: str) -> int:
        named = self.options.get(f"{name}_token")
        for token in ([named] if isinstance(named, str) else []) + list(CANDIDATES[name]):
            token_id = self.backend.token_to_id(token)
            if token_id is not None:
                return token_id
        raise UserError(f"{self.tokenizer_file} has no {name} token (tried {list(CANDIDATES[name])})")

    def pipeline(self) -> dict:
        """The file's pipeline in short, for `albertlm tokenizer info`: its model type (Unigram, WordPiece, BPE),
        normalizer and pre-tokenizer steps (`BertNormalizer(lowercase=false, ...)`, `NFKD, StripAccents,
        Lowercase, Precompiled`), the preprocessing that `do_lower_case` and friends in tokenizer_config.json only
        describe, and how many added tokens it matches in the text."""
        data = json.loads(self.backend.to_str())
        return {"model_type": data["model"].get("type"), "normalizer": describe_step(data.get("normalizer")),
                "pre_tokenizer": describe_step(data.get("pre_tokenizer")),
                "added_tokens": len(data.get("added_tokens") or [])}

    def word_start_mask(self) -> np.ndarray:
        """WordPiece: not "##"-prefixed; otherwise the SentencePiece rule ("▁", punctuation, unspaced scripts)."""
        mask = np.zeros(self.vocab_size, dtype=bool)
        for token, index in self.backend.get_vocab(with_added_tokens=True).items():
            if index < self.vocab_size:
                mask[index] = (not token.startswith(self._prefix)) if self.kind == "wordpiece" \
                    else _is_start_piece(token)
        mask[list(self._special)] = True
        return mask

    def save(self, directory: str | Path) -> None:
        directory = user_path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / TOKENIZER_FILE))
        config = self.tokenizer_file.parent / CONFIG_FILE
        if config.is_file() and config.resolve() != (directory / CONFIG_FILE).resolve():
            shutil.copy(config, directory / CONFIG_FILE)

    def __repr__(self) -> str:
        return f"TokenizerJsonTokenizer({str(self.tokenizer_file)!r}, kind={self.kind}, V={self.vocab_size})"
