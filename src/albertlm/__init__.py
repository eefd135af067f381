"""albertlm: ALBERT (A Lite BERT, Lan et al., ICLR 2020) in PyTorch.

Layers, each importing only those before it:
config -> tokenization -> data -> model -> (interop) -> training -> tasks -> cli.
Heavy symbols are imported lazily so `import albertlm` stays cheap.
"""
from __future__ import annotations

from albertlm.config import AlbertConfig, ConfigError, ModelConfig
from albertlm.errors import UserError

__version__ = "0.1.0"

_LAZY = {
    "AlbertModel": "albertlm.model.albert",
    "AlbertForPreTraining": "albertlm.model.albert",
    "AlbertForMaskedLM": "albertlm.model.heads",
    "AlbertForSequenceClassification": "albertlm.model.heads",
    "AlbertForTokenClassification": "albertlm.model.heads",
    "AlbertForQuestionAnswering": "albertlm.model.heads",
    "AlbertForMultipleChoice": "albertlm.model.heads",
    "ModelInputError": "albertlm.model.inputs",
    "MODEL_PRESETS": "albertlm.config.presets",
    "get_preset": "albertlm.config.presets",
    "load_tokenizer": "albertlm.tokenization",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'albertlm' has no attribute {name!r}")


__all__ = ["AlbertConfig", "ConfigError", "ModelConfig", "UserError", *_LAZY]
