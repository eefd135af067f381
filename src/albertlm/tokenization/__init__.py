"""Layer 1: tokenizers (SentencePiece and WordPiece) behind one protocol (docs/tokenization.md).

Start here:
    load.load_tokenizer     a .model, vocab.txt, tokenizer.json or a directory holding one (also here and at the
                            top: `albertlm.load_tokenizer`)
    base.Tokenizer          what every tokenizer has: encode, encode_batch, encode_pair, decode, save, ...
`load_tokenizer` is imported on first use, so `import albertlm.tokenization` stays cheap; it is
`albertlm.tokenization.load.load_tokenizer` itself (its docstring and signature for `help()`), not a wrapper.
"""
from albertlm.tokenization.base import Tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]


def __getattr__(name: str):
    if name == "load_tokenizer":
        from albertlm.tokenization.load import load_tokenizer

        globals()[name] = load_tokenizer   # later lookups do not come here
        return load_tokenizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
