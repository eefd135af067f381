"""Our model classes by name: the name a checkpoint was saved from (`albertlm_class` in the safetensors
metadata) or a transformers architecture name -> the class that loads it. Every function here taking a directory
takes a str or Path, a leading `~` expanded (`io.user_path`)."""
from __future__ import annotations

from pathlib import Path

from albertlm.errors import UserError
from albertlm.model import albert, heads, io

MODEL_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    albert.AlbertModel, albert.AlbertForPreTraining, heads.AlbertForMaskedLM, heads.AlbertForSequenceClassification,
    heads.AlbertForTokenClassification, heads.AlbertForQuestionAnswering, heads.AlbertForSquadV2,
    heads.AlbertForMultipleChoice)}


def model_class(name: str) -> type:
    if name not in MODEL_CLASSES:
        raise UserError(f"unknown model class {name!r}; known: {', '.join(MODEL_CLASSES)}")
    return MODEL_CLASSES[name]


def saved_class_name(directory: str | Path) -> str:
    """The class a checkpoint directory holds: an albertlm checkpoint's is the class it was saved from (safetensors
    metadata; AlbertForPreTraining if unknown), a transformers directory's the class its config.json names
    (`hf_class_name`). A transformers directory used to be read as AlbertForPreTraining whatever it held: a fine-tuned
    classifier lost its head and came back with random MLM / SOP heads, with a warning only."""
    from albertlm.model.io import read_config, read_metadata

    directory = io.user_path(directory)   # "~/m" was "no model.safetensors in ~/m"
    if read_config(directory)[1]:
        return hf_class_name(directory)
    path = directory / "model.safetensors"
    if not path.is_file():
        raise UserError(f"no model.safetensors in {directory}")
    name = read_metadata(path).get("albertlm_class", "AlbertForPreTraining")
    if name not in MODEL_CLASSES:
        raise UserError(f"{path}: saved from unknown class {name!r}")
    return name


def load_saved_model(directory: str | Path, **overrides):
    """A checkpoint (albertlm's or a transformers directory) as the class it holds (`saved_class_name`). Without
    overrides a head weight of that class stored in another shape (a config.json whose num_labels / id2label do not
    fit the weights) is a UserError: the model would come back with that head freshly initialised."""
    directory = io.user_path(directory)
    return model_class(saved_class_name(directory)).from_pretrained(directory, strict_heads=not overrides, **overrides)


def hf_class_name(directory: str | Path) -> str:
    """The albertlm class (named as transformers' is) for a transformers ALBERT directory: the first of its config's
    `architectures` (a list, or a lone string), else the class its head weights belong to (`architecture_from_weights`);
    a name that is no ALBERT class is a UserError."""
    from albertlm.errors import read_json_object

    directory = io.user_path(directory)
    config = directory / "config.json"
    if not config.is_file():
        raise UserError(f"{directory}: no config.json, not a transformers directory (see --from)")
    data = read_json_object(config, "a transformers config.json")
    names = data.get("architectures")
    name = (names[0] if isinstance(names, list) else names) if names else architecture_from_weights(directory, data)
    if not isinstance(name, str) or name not in MODEL_CLASSES:
        raise UserError(f"{directory}: architecture {name!r} is not an ALBERT class we know")
    return name


def architecture_from_weights(directory: str | Path, config: dict) -> str:
    """The transformers class whose weights `directory` holds, for a config.json without `architectures`: the
    pretraining heads (MLM + SOP), the MLM head alone, the QA head, a `classifier` on every token (no pooler: token
    classification) or on the pooled output, which is a sequence classifier with `num_labels` rows and a multiple-
    choice scorer with one (a 1-row classifier of a config saying num_labels 1 is a regression only where its
    `problem_type` says so, else a UserError: the two cannot be told apart); no head: the bare AlbertModel.
    (Defaulting to AlbertForPreTraining dropped a fine-tuned head and converted a model with random heads.)"""
    from albertlm.model.io import state_keys

    directory = io.user_path(directory)
    keys = set(state_keys(directory))
    if "sop_classifier.classifier.weight" in keys:
        return "AlbertForPreTraining"
    if any(k.startswith("predictions.") for k in keys):
        return "AlbertForMaskedLM"
    if "qa_outputs.weight" in keys:
        return "AlbertForQuestionAnswering"
    if "classifier.weight" not in keys:
        return "AlbertModel"
    if "albert.pooler.weight" not in keys:
        return "AlbertForTokenClassification"
    rows = _tensor_shape(directory, "classifier.weight")[0]
    labels = len(config["id2label"]) if isinstance(config.get("id2label"), dict) else config.get("num_labels", 2)
    if rows != 1 or config.get("problem_type") == "regression":
        return "AlbertForSequenceClassification"
    if labels != 1:   # transformers sizes a sequence classifier by num_labels: one row is the multiple-choice scorer
        return "AlbertForMultipleChoice"
    raise UserError(f"{directory}: config.json names no architecture and the weights fit both "
                    "AlbertForSequenceClassification (a regression) and AlbertForMultipleChoice; add "
                    '"architectures": ["AlbertForSequenceClassification"] (or the other) to its config.json')


def _tensor_shape(directory: str | Path, name: str) -> tuple[int, ...]:
    """One tensor's shape: from the safetensors header when the weights are one safetensors file (nothing else is
    read), otherwise from the loaded state."""
    from albertlm.model.io import WEIGHTS, read_state

    path = io.user_path(directory) / WEIGHTS
    if path.is_file():
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:   # state_keys already read this header
            return tuple(f.get_slice(name).get_shape())
    return tuple(read_state(directory)[name].shape)
