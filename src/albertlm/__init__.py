"""albertlm: ALBERT (A Lite BERT, Lan et al., ICLR 2020) in PyTorch.

Layers, each importing only those before it:
config -> tokenization -> data -> model -> (interop) -> training -> tasks -> experiments -> cli.
Heavy symbols are imported lazily so `import albertlm` stays cheap (no torch until a model class is used).

Here: the model classes, `ModelConfig` / `get_preset` / `MODEL_PRESETS`, `load_tokenizer`, and the errors a
caller catches (`UserError`, the base of every error about bad input: `ConfigError`, `ModelInputError`, ...).
Each subpackage's docstring (`import albertlm.tasks; help(albertlm.tasks)`) names where to start in it:
`albertlm.data` (build and read pretraining data), `albertlm.training` (pretrain, evaluate), `albertlm.tasks`
(fine-tune, predict, fill-mask, embeddings), `albertlm.interop` (transformers, TensorFlow, ONNX),
`albertlm.experiments` (the paper's ablations).
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
    "AlbertForSquadV2": "albertlm.model.heads",
    "AlbertForMultipleChoice": "albertlm.model.heads",
    "ModelInputError": "albertlm.model.inputs",
    "MODEL_PRESETS": "albertlm.config.presets",
    "get_preset": "albertlm.config.presets",
    "load_tokenizer": "albertlm.tokenization",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value   # later lookups do not come here
        return value
    raise AttributeError(f"module 'albertlm' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too: `dir(albertlm)` and a notebook's tab completion offer the model classes before their
    first use (PEP 562)."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["AlbertConfig", "ConfigError", "ModelConfig", "UserError", *_LAZY]
