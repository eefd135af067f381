"""Layer 1: tokenizers (SentencePiece and WordPiece) behind one protocol."""
from albertlm.tokenization.base import Tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]


def load_tokenizer(path, **options):  # noqa: D103 - documented in tokenization/load.py
    from albertlm.tokenization.load import load_tokenizer as _load

    return _load(path, **options)
