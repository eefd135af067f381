"""The model's configuration: every field of google-research's `AlbertConfig` that does something.

No torch import here (layer L0). Paper symbols in comments: V, E, H, L, A, I, N (groups).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from albertlm.config.overrides import check_choices
from albertlm.errors import UserError, read_json_object

Sharing = Literal["all", "attention", "ffn", "none"]


class ConfigError(UserError):
    """A configuration value that cannot work; the message names the field."""


class Config:
    """What every config dataclass offers besides its fields."""

    # another library's name for a field -> ours, named in the error for an unknown field (`ModelConfig`: transformers')
    OTHER_NAMES: dict[str, str] = {}

    def __new__(cls, *args: Any, **fields: Any):
        """An unknown keyword is a ConfigError naming it and the field meant (the closest, or ours for transformers'
        name: `AlbertConfig(num_hidden_layers=6)`), as `replace` and `from_dict` say it, not dataclasses' TypeError."""
        refuse_unknown_fields(cls, fields)
        return super().__new__(cls)

    def replace(self, **changes: Any):
        """A copy with some fields changed (validated again). An unknown field name is a ConfigError naming it
        (and the closest field), not dataclasses' TypeError."""
        refuse_unknown_fields(type(self), changes)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def unknown_field_hint(cls: type, name: str) -> str:
    """What to say after an unknown field `name` of config class `cls`: ours for another library's name, else the
    closest field's name, else nothing."""
    if name in cls.OTHER_NAMES:
        return f" ({name} is transformers' name; {cls.__name__}'s is {cls.OTHER_NAMES[name]})"
    close = difflib.get_close_matches(name, [f.name for f in dataclasses.fields(cls)], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def refuse_unknown_fields(cls: type, values: dict[str, Any]) -> None:
    """A ConfigError for the keys of `values` that are no field of `cls`."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = [name for name in values if name not in names]
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}{unknown_field_hint(cls, unknown[0])}")


def require(ok: bool, key: str, value: Any, why: str) -> None:
    """The one check every config uses: `key=value: why` when `ok` is false."""
    if not ok:
        raise ConfigError(f"{key}={value!r}: {why}")


@dataclass
class ModelConfig(Config):
    vocab_size: int = 30000              # V: vocabulary size
    embedding_size: int = 128            # E: token embedding size (factorised: V x E, then E -> H)
    hidden_size: int = 768               # H: hidden size
    num_layers: int = 12                 # L: layers (blocks run)
    num_heads: int = 12                  # A: attention heads
    ffn_size: int = 3072                 # I: feed-forward inner size
    activation: Literal["gelu", "gelu_new", "relu"] = "gelu_new"  # "gelu" exact erf, "gelu_new" tanh approximation (google's)
    hidden_dropout: float = 0.0          # dropout on embeddings and sublayer outputs; 0 = off (v2 models)
    attention_dropout: float = 0.0       # on the attention probabilities
    classifier_dropout: float = 0.1      # before a fine-tuning head (the pretraining SOP / NSP head has none)
    max_position_embeddings: int = 512   # longest sequence the position embeddings cover
    type_vocab_size: int = 2             # token types (segments A and B)
    initializer_range: float = 0.02      # std of the normal initialisation
    layer_norm_eps: float = 1e-12        # LayerNorm epsilon
    sharing: Sharing = "all"             # which sublayers share weights inside a group
    num_groups: int = 1                  # N: layer l belongs to group l * N // L
    inner_group_num: int = 1             # google's inner repetition: distinct blocks per layer
    pad_token_id: int = 0                # the padding id (its embedding is not special-cased)
    num_labels: int = 2                  # task heads only; 1 = regression
    # google-research skips the E->H projection when E == H; transformers always has one. True keeps it
    # (set when importing a transformers checkpoint with E == H, so its trained projection is not lost).
    always_project_embeddings: bool = False

    OTHER_NAMES = {"num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
                   "num_hidden_groups": "num_groups", "intermediate_size": "ffn_size", "hidden_act": "activation",
                   "hidden_dropout_prob": "hidden_dropout", "attention_probs_dropout_prob": "attention_dropout",
                   "classifier_dropout_prob": "classifier_dropout"}   # transformers' names (see OTHER_NAMES above)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(ok: bool, name: str, why: str) -> None:
            require(ok, name, getattr(self, name), why)

        for name in ("vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads",
                     "ffn_size", "max_position_embeddings", "type_vocab_size", "num_groups",
                     "inner_group_num", "num_labels"):
            value = getattr(self, name)
            need(_is_int(value) and value >= 1, name, "must be a positive integer")
        need(self.hidden_size % self.num_heads == 0, "hidden_size",
             f"must be divisible by num_heads={self.num_heads}")
        check_choices(self)  # sharing, activation
        need(self.num_groups <= self.num_layers, "num_groups",
             f"cannot exceed num_layers={self.num_layers}")
        need(self.num_layers % self.num_groups == 0, "num_groups",
             f"must divide num_layers={self.num_layers}")
        for name in ("hidden_dropout", "attention_dropout", "classifier_dropout"):
            value = getattr(self, name)
            need(_is_number(value) and 0.0 <= value < 1.0, name, "must be a number in [0, 1)")
        for name in ("initializer_range", "layer_norm_eps"):  # inf would give a model of NaNs
            value = getattr(self, name)
            need(_is_number(value) and value > 0, name, "must be a positive finite number")
        need(_is_int(self.pad_token_id) and 0 <= self.pad_token_id < self.vocab_size, "pad_token_id",
             f"must be an integer token id below vocab_size={self.vocab_size}")
        need(isinstance(self.always_project_embeddings, bool), "always_project_embeddings", "must be true or false")

    @property
    def has_embedding_projection(self) -> bool:
        return self.embedding_size != self.hidden_size or self.always_project_embeddings

    @property
    def head_size(self) -> int:  # hs
        return self.hidden_size // self.num_heads

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"a model config must be a JSON object (field -> value), got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            hint = unknown_field_hint(cls, unknown[0])
            raise ConfigError(f"unknown model config field(s): {', '.join(unknown)}{hint}; refused rather than "
                              "ignored, as a field this albertlm does not know (a newer version's?) may change the model")
        return cls(**data)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> "ModelConfig":
        """A config written by `to_json`; a file that is not a JSON object, or holds an unknown field or a bad
        value, is a UserError naming the file."""
        data = read_json_object(Path(path), "a model config")
        try:
            return cls.from_dict(data)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """An int or float, not a bool, not NaN or infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


AlbertConfig = ModelConfig
