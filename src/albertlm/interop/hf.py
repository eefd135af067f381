"""Hugging Face transformers <-> albertlm, through the declarative map in `albertlm.model.hf_format`.

Import needs nothing here: every model class's `from_pretrained(dir)` reads a transformers ALBERT
directory. Export writes `config.json` + `model.safetensors` that transformers' Albert* classes load
with no missing or unexpected keys. transformers shares attention and FFN together, so models with
sharing `attention` or `ffn` cannot be exported (a UserError says so).
"""
from __future__ import annotations

import json
from pathlib import Path

from torch import nn

from albertlm.errors import UserError
from albertlm.model import hf_format
from albertlm.model.albert import AlbertModel, sharing_plan

# our class name -> transformers class name (they match; listed so an unknown class fails clearly)
HF_ARCHITECTURES = ("AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM", "AlbertForSequenceClassification",
                    "AlbertForTokenClassification", "AlbertForQuestionAnswering", "AlbertForMultipleChoice")


def export_hf(model: nn.Module, directory: str | Path) -> Path:
    """Write `model` (any albertlm Albert* class) as a transformers directory."""
    from safetensors.torch import save_file

    name = type(model).__name__
    if name not in HF_ARCHITECTURES:
        raise UserError(f"cannot export {name} to transformers (one of {', '.join(HF_ARCHITECTURES)})")
    cfg = model.config
    if name == "AlbertForPreTraining":
        cfg = cfg.replace(num_labels=2)  # transformers sizes the SOP head by num_labels
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if isinstance(model, AlbertModel):
        state = {"albert." + k: v for k, v in state.items()}
    hf_state = hf_format.state_to_hf(state, cfg, sharing_plan(cfg))  # raises for attention / ffn sharing
    if isinstance(model, AlbertModel):  # transformers' bare model has no prefix
        hf_state = {k.removeprefix("albert."): v for k, v in hf_state.items()}
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(hf_format.config_to_hf(cfg, name), indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in hf_state.items()}, directory / "model.safetensors",
              metadata={"format": "pt"})
    return directory


def import_hf(directory: str | Path, model_class: type | None = None) -> nn.Module:
    """Load a transformers ALBERT directory as the albertlm class named by its `architectures`
    (or `model_class`)."""
    if model_class is None:
        import albertlm.model.albert as albert
        import albertlm.model.heads as heads

        data = json.loads((Path(directory) / "config.json").read_text())
        name = (data.get("architectures") or ["AlbertForPreTraining"])[0]
        if name not in HF_ARCHITECTURES:
            raise UserError(f"{directory}: architecture {name!r} is not an ALBERT class we know")
        model_class = getattr(albert, name, None) or getattr(heads, name)
    return model_class.from_pretrained(directory)
