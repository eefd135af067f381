"""`load_tokenizer(path)`: a SentencePiece `.model`, a BERT `vocab.txt`, a transformers `tokenizer.json`, or a
directory holding one (looked for in that order).

A directory (ours, or a transformers model directory) may hold `tokenizer_config.json` with the preprocessing
options (`do_lower_case`, `keep_accents`, ...). A bare file, or a directory without that file, gets
transformers' defaults: AlbertTokenizer's for SentencePiece (lowercase, strip accents), BertTokenizer's for
WordPiece (lowercase). Keyword options override both.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from albertlm.errors import UserError
from albertlm.tokenization import sentencepiece as spm_tok
from albertlm.tokenization import wordpiece as wp_tok
from albertlm.tokenization.base import CONFIG_FILE, read_added_tokens, user_path
from albertlm.tokenization.tokenizer_json import TOKENIZER_FILE, TokenizerJsonTokenizer


def load_tokenizer(path: str | Path, **options):
    """Load a tokenizer; `options` (e.g. do_lower_case=False) override the stored or default preprocessing.
    `path`: a str or Path, a leading `~` expanded (`user_path`)."""
    path = user_path(path)   # Path.expanduser raised RuntimeError for a `~user` naming no user
    if not path.exists():
        raise UserError(f"tokenizer not found: {path}")
    if path.is_dir():
        return _load_directory(path, options)
    if path.suffix == ".json":
        return _tokenizer_json(path, options)
    if path.suffix == ".txt":
        return _wordpiece(path, path.parent / CONFIG_FILE if path.name == wp_tok.VOCAB_FILE else None, options)
    # Any other file is tried as a SentencePiece model (".model" by convention); a bad one is a UserError.
    return _sentencepiece(path, path.parent / CONFIG_FILE if path.name == spm_tok.MODEL_FILE else None, options)


def _load_directory(directory: Path, options: dict):
    config = directory / CONFIG_FILE
    if (directory / spm_tok.MODEL_FILE).is_file():
        return _sentencepiece(directory / spm_tok.MODEL_FILE, config, options)
    if (directory / wp_tok.VOCAB_FILE).is_file():
        return _wordpiece(directory / wp_tok.VOCAB_FILE, config, options)
    models = sorted(directory.glob("*.model"))
    if len(models) == 1:
        return _sentencepiece(models[0], config, options)
    if (directory / TOKENIZER_FILE).is_file():
        return _tokenizer_json(directory / TOKENIZER_FILE, options)
    raise UserError(f"no tokenizer in {directory}: expected {spm_tok.MODEL_FILE}, {wp_tok.VOCAB_FILE}, "
                    f"a single *.model file or {TOKENIZER_FILE}")


def _sentencepiece(model_file: Path, config: Path | None, options: dict):
    base = spm_tok.read_options(config)
    tokenizer = spm_tok.SentencePieceTokenizer(model_file, _override(base, options))
    _refuse_added_tokens(tokenizer, config)
    return _record_options_file(tokenizer, config)


def _refuse_added_tokens(tokenizer, config: Path | None) -> None:
    """A spiece.model directory where transformers recorded added tokens ("[E1]", "covid-19" added to a fine-tuned
    model: tokenizer_config.json's added_tokens_decoder or added_tokens.json, as transformers 4 saves them): our
    SentencePiece tokenizer has no added tokens, so their text became pieces, not the ids transformers gives and
    the model was trained with (and ids past the .model's pieces were out of its vocabulary), without a word."""
    special = {tokenizer.id_to_token(i): i for i in tokenizer._special}
    extra = [e for e in read_added_tokens(config)
             if not (e["content"] in special and e["id"] in (None, special[e["content"]]))]
    if extra:
        # the model's own user-defined pieces ("(", "€" in ALBERT's) are no additions: sentencepiece cuts them out of
        # the text whole (transformers 5 lists them as extra special tokens, 4.4x in added_tokens_decoder)
        whole = _user_defined_pieces(tokenizer)
        extra = [e for e in extra if not (e["content"] in whole and e["id"] in (None, whole[e["content"]]))]
    if not extra:
        return
    directory = config.parent
    shown = ", ".join(f"{e['content']!r}" + (f" (id {e['id']})" if e["id"] is not None else "") for e in extra[:3])
    advice = (f"load {directory / TOKENIZER_FILE} instead (transformers 5's pipeline, with them)"
              if (directory / TOKENIZER_FILE).is_file() else
              "save it with transformers 5 (its save_pretrained writes a tokenizer.json holding them) and load that")
    raise UserError(f"{directory}: transformers added {len(extra)} token(s) to this tokenizer ({shown}"
                    f"{', ...' if len(extra) > 3 else ''}; recorded in its {CONFIG_FILE} or "
                    f"added_tokens.json), which albertlm's SentencePiece tokenizer cannot match: their text would "
                    f"get other ids than in transformers; {advice}")


def _user_defined_pieces(tokenizer) -> dict[str, int]:
    """The SentencePiece model's user-defined pieces -> their ids (`model_facts`; {} without protobuf)."""
    try:
        names = spm_tok.model_facts(tokenizer.model_file).get("user_defined_symbols") or []
    except Exception:   # an unreadable proto: nothing is taken for granted
        return {}
    return {name: tokenizer.sp.piece_to_id(name) for name in names}


def _wordpiece(vocab_file: Path, config: Path | None, options: dict):
    base = wp_tok.read_options(config)
    return _record_options_file(wp_tok.WordPieceTokenizer(vocab_file, _override(base, options),
                                                          read_added_tokens(config)), config)


def _record_options_file(tokenizer, config: Path | None):
    """`tokenizer.options_file`: the tokenizer_config.json its options were read from, None where they are the
    defaults (a bare file, a directory without one), as `albertlm tokenizer info` says."""
    tokenizer.options_file = config if config is not None and config.is_file() else None
    return tokenizer


def _tokenizer_json(path: Path, options: dict):
    if options:
        raise UserError(f"{path} is a tokenizer.json: its preprocessing is fixed in the file, "
                        f"options {sorted(options)} do not apply")
    return TokenizerJsonTokenizer(path)


def _override(base, options: dict):
    """`base` with `options` replaced: unknown names and values of the wrong type are UserErrors."""
    unknown = sorted(set(options) - set(base.__dataclass_fields__))
    if unknown:
        known = ", ".join(base.__dataclass_fields__)
        raise UserError(f"unknown tokenizer option in {unknown}; known: {known}")
    return type(base).from_dict({**asdict(base), **options}, "tokenizer options")


def find_tokenizer(model_dir: str | Path) -> Path | None:
    """Where the tokenizer of a model directory is: the directory itself when it holds one (spiece.model,
    vocab.txt, a single *.model, or transformers' tokenizer.json), else the tokenizer a pretraining
    checkpoint's data was built with (run_config.json -> data.path -> meta.json); None if neither."""
    import json

    directory = user_path(model_dir)
    if not directory.is_dir():
        return None
    names = (spm_tok.MODEL_FILE, wp_tok.VOCAB_FILE, TOKENIZER_FILE)
    if any((directory / name).is_file() for name in names) or len(list(directory.glob("*.model"))) == 1:
        return directory
    try:
        run_config = json.loads((directory / "run_config.json").read_text())
        data_dir = run_config.get("data", {}).get("path", "")
        meta = json.loads((Path(data_dir) / "meta.json").read_text()) if data_dir else {}
    except (OSError, ValueError, AttributeError):
        return None
    recorded = meta.get("tokenizer", {}).get("path") if isinstance(meta, dict) else None
    return Path(recorded) if recorded and Path(recorded).exists() else None
