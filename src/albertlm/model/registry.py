"""Our model classes by name: the name a checkpoint was saved from (`albertlm_class` in the safetensors
metadata) or a transformers architecture name -> the class that loads it."""
from __future__ import annotations

from pathlib import Path

from albertlm.errors import UserError
from albertlm.model import albert, heads

MODEL_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    albert.AlbertModel, albert.AlbertForPreTraining, heads.AlbertForMaskedLM, heads.AlbertForSequenceClassification,
    heads.AlbertForTokenClassification, heads.AlbertForQuestionAnswering, heads.AlbertForMultipleChoice)}


def model_class(name: str) -> type:
    if name not in MODEL_CLASSES:
        raise UserError(f"unknown model class {name!r}; known: {', '.join(MODEL_CLASSES)}")
    return MODEL_CLASSES[name]


def saved_class_name(directory: str | Path) -> str:
    """The class an albertlm checkpoint was saved from (safetensors metadata); AlbertForPreTraining if unknown."""
    from albertlm.model.io import read_metadata

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"no model.safetensors in {directory}")
    name = read_metadata(path).get("albertlm_class", "AlbertForPreTraining")
    if name not in MODEL_CLASSES:
        raise UserError(f"{path}: saved from unknown class {name!r}")
    return name


def load_saved_model(directory: str | Path, **overrides):
    """An albertlm checkpoint as the class it was saved from."""
    return model_class(saved_class_name(directory)).from_pretrained(directory, **overrides)
