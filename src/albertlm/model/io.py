"""Checkpoints: a directory of `model.safetensors` + `config.json` (the ModelConfig only, no optimizer).

`from_pretrained` also reads a transformers ALBERT directory (`model.safetensors` or
`pytorch_model.bin`, loaded with weights_only=True) through the key map in `hf_format`.
Loading between our classes works like transformers: the backbone (`albert.*`) must match exactly;
head weights the checkpoint lacks are freshly initialised, heads it has but the class lacks are dropped
(both are logged).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albertlm.config import ModelConfig
from albertlm.errors import UserError
from albertlm.model import hf_format

log = logging.getLogger("albertlm.model")
WEIGHTS, CONFIG = "model.safetensors", "config.json"


def init_weights(module: nn.Module, std: float) -> None:
    """BERT / ALBERT initialisation: truncated-free normal(0, std) weights, zero biases, unit LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def read_config(directory: str | Path) -> tuple[ModelConfig, bool]:
    """(config, is_transformers_format) of a checkpoint directory."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise UserError(f"no {CONFIG} in {directory}: not a model directory")
    data = json.loads(path.read_text())
    if hf_format.is_hf_config(data):
        return hf_format.config_from_hf(data), True
    return ModelConfig.from_dict(data), False


def read_state(directory: str | Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    directory = Path(directory)
    if (directory / WEIGHTS).is_file():
        return load_file(directory / WEIGHTS)
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise UserError(f"no {WEIGHTS} or pytorch_model.bin in {directory}")


def save_checkpoint(model: nn.Module, config: ModelConfig, directory: str | Path) -> Path:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, directory / WEIGHTS, metadata={"format": "pt", "albertlm_class": type(model).__name__})
    config.to_json(directory / CONFIG)
    return directory


def load_state_into(model: nn.Module, state: dict[str, torch.Tensor], prefix: str) -> None:
    """Load a full-model state (backbone under `albert.`) into `model` whose backbone is under `prefix`.
    Backbone weights must match exactly; heads (and the pooler, which some heads lack) may differ."""
    state = {(prefix + k.removeprefix("albert.") if k.startswith("albert.") else k): v for k, v in state.items()
             if k.startswith("albert.") or prefix}  # a bare AlbertModel drops every head

    def is_backbone(key: str) -> bool:
        return key.startswith(prefix) and not key.startswith(prefix + "pooler.")

    own = model.state_dict()
    for key in [k for k, v in state.items() if k in own and own[k].shape != v.shape]:
        if is_backbone(key):
            raise UserError(f"checkpoint tensor {key} has shape {tuple(state[key].shape)}, "
                            f"the model expects {tuple(own[key].shape)}")
        log.warning("checkpoint head weight %s has another shape; it is freshly initialised", key)
        del state[key]
    missing, unexpected = model.load_state_dict(state, strict=False)
    for keys, what in ((missing, "checkpoint lacks model weights"),
                       (unexpected, "checkpoint has weights this config does not")):
        if [k for k in keys if is_backbone(k)]:
            raise UserError(f"{what}: {', '.join([k for k in keys if is_backbone(k)][:5])}")
    if missing:
        log.warning("freshly initialised weights (not in the checkpoint): %s", ", ".join(missing))
    if unexpected:
        log.info("ignored checkpoint weights of other heads: %s", ", ".join(unexpected))


def to_full_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A bare AlbertModel checkpoint (no `albert.` prefix) -> full-model form."""
    if any(k.startswith("albert.") for k in state):
        return state
    return {"albert." + k: v for k, v in state.items()}


class PretrainedMixin:
    """`save_pretrained(dir)` / `Cls.from_pretrained(dir, **config_overrides)` for our model classes.
    `base_prefix` is where the AlbertModel lives in the class ("" for AlbertModel itself)."""

    base_prefix = "albert."
    config: ModelConfig

    def save_pretrained(self, directory: str | Path) -> Path:
        return save_checkpoint(self, self.config, directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **overrides: Any):
        config, is_hf = read_config(directory)
        state = read_state(directory)
        if is_hf:
            from albertlm.model.albert import sharing_plan

            state = hf_format.state_from_hf(state, config, sharing_plan(config))
        else:
            state = to_full_state(state)
        model = cls(config.replace(**overrides) if overrides else config)
        load_state_into(model, state, cls.base_prefix)
        return model
