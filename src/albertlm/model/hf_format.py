"""transformers' ALBERT layout as data: the config-field map and the state-dict key map.

Pure data and small pure functions (no transformers import), so `from_pretrained` can read a
transformers directory and `interop.hf` can write one. google-research's `albert_config.json`
uses the same field names as transformers' config, minus `model_type`.

Our keys (backbone, without the `albert.` prefix of the full models):
  embeddings.{word,position,token_type}.weight, embeddings.norm.*, embeddings.project.*
  encoder.attentions.{u}.{qkv,out,norm}.*, encoder.ffns.{u}.{up,down,norm}.*, pooler.*
transformers: unique block u = g * K + k is `encoder.albert_layer_groups.{g}.albert_layers.{k}`,
with HF's num_hidden_groups = the number of unique blocks / K (N for `all`, L for `none`).
"""
from __future__ import annotations

import json
import logging
from typing import Any

from albertlm.config import ModelConfig
from albertlm.errors import UserError

# our field <- transformers field (same meaning, same value)
CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "embedding_size": "embedding_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "ffn_size": "intermediate_size",
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
    "classifier_dropout": "classifier_dropout_prob",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "initializer_range": "initializer_range",
    "layer_norm_eps": "layer_norm_eps",
    "inner_group_num": "inner_group_num",
    "pad_token_id": "pad_token_id",
}
# transformers' activation name -> ours. google-research's "gelu" is the tanh approximation
# (modeling.py), which transformers calls "gelu_new".
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
                  "gelu_fast": "gelu_new", "relu": "relu"}
# A field the file leaves out means the config class's default, transformers' AlbertConfig and google's alike (the
# xxlarge shape), not ModelConfig's (the albert-base shape): the head count changes no tensor shape, so falling back
# to ours would load the weights into a silently different model.
HF_DEFAULTS = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12,
               "num_attention_heads": 64, "intermediate_size": 16384, "inner_group_num": 1,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout_prob": 0.1,
               "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
               "layer_norm_eps": 1e-12, "pad_token_id": 0}
GOOGLE_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu"}

EMBEDDING_KEYS = {  # ours -> transformers
    "embeddings.word.weight": "embeddings.word_embeddings.weight",
    "embeddings.position.weight": "embeddings.position_embeddings.weight",
    "embeddings.token_type.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.norm.bias": "embeddings.LayerNorm.bias",
    "embeddings.project.weight": "encoder.embedding_hidden_mapping_in.weight",
    "embeddings.project.bias": "encoder.embedding_hidden_mapping_in.bias",
    "pooler.weight": "pooler.weight",
    "pooler.bias": "pooler.bias",
}
ATTENTION_KEYS = {  # a tuple = concatenated along dim 0 (our fused QKV)
    "qkv": ("attention.query", "attention.key", "attention.value"),
    "out": "attention.dense",
    "norm": "attention.LayerNorm",
}
FFN_KEYS = {"up": "ffn", "down": "ffn_output", "norm": "full_layer_layer_norm"}
HEAD_KEYS = {  # full-model keys, ours -> transformers
    "mlm_head.dense.weight": "predictions.dense.weight",
    "mlm_head.dense.bias": "predictions.dense.bias",
    "mlm_head.norm.weight": "predictions.LayerNorm.weight",
    "mlm_head.norm.bias": "predictions.LayerNorm.bias",
    "mlm_head.bias": "predictions.bias",
    "sop_head.weight": "sop_classifier.classifier.weight",
    "sop_head.bias": "sop_classifier.classifier.bias",
    "classifier.weight": "classifier.weight",
    "classifier.bias": "classifier.bias",
    "qa_outputs.weight": "qa_outputs.weight",
    "qa_outputs.bias": "qa_outputs.bias",
}
# transformers keys that carry no information of their own: old persistent buffers, the tied decoder
HF_IGNORED = ("embeddings.position_ids", "embeddings.token_type_ids", "predictions.decoder.weight",
              "predictions.decoder.bias")


def is_hf_config(data: dict[str, Any]) -> bool:
    """transformers' (or google's) field names, or transformers' `model_type` (which our config never has)."""
    return "num_hidden_layers" in data or "model_type" in data


def hf_num_groups(cfg: ModelConfig) -> int:
    """transformers can express `all` (N groups) and `none` (L groups), not `attention` / `ffn`."""
    if cfg.sharing not in ("all", "none"):
        raise UserError(f"sharing={cfg.sharing!r} cannot be expressed by transformers' ALBERT, which shares "
                        "attention and FFN together; only sharing 'all' or 'none' can be exported")
    return cfg.num_groups if cfg.sharing == "all" else cfg.num_layers


def check_config_types(values: dict[str, Any], spelled: dict[str, str] | None = None) -> None:
    """Each known ModelConfig field in `values` has its JSON type (a number for a float, an integer for an int,
    true/false for a bool, a string for a str); else a UserError with the field's name as `spelled` there.
    Ranges are ModelConfig's own checks."""
    import dataclasses

    kinds = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}
    for f in dataclasses.fields(ModelConfig):
        name = spelled.get(f.name, f.name) if spelled else f.name
        if name not in values or (spelled and values[name] is None):  # transformers writes null for "unset"
            continue
        value, allowed = values[name], kinds.get(str(f.type), (object,))
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            what = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}
            raise UserError(f"{name} is {value!r}, expected {what.get(str(f.type), str(f.type))}")


def check_id2label(id2label: dict[str, Any], where: str = "id2label") -> None:
    """transformers' `id2label`: class index -> name. Its config reads each key as `int(key)` (a key such as "pos"
    makes transformers refuse the whole config), and `label2id` maps each name back, so a name must be a string (or
    a number), not a list, an object, null or true/false. Else a UserError naming the entry; `where` names the field
    or file. (Read as they were, such names went into labels.json and `convert --to hf` then failed with a
    traceback building label2id.)"""
    if not isinstance(id2label, dict):   # a list of names: `.items()` was an AttributeError traceback
        raise UserError(f"{where} is {type(id2label).__name__} {json.dumps(id2label, default=repr)[:80]}: give an "
                        'object mapping class indices to names, {"0": "negative", "1": "positive"}, as transformers')
    for key, name in id2label.items():
        try:
            index = int(key) if not isinstance(key, bool) else None
        except (TypeError, ValueError):
            index = None
        if index is None:
            raise UserError(f"{where} has the key {key!r}, which is not a class index: transformers' id2label maps "
                            'class indices ("0", "1", ...) to names')
        if not isinstance(name, (str, int, float)) or isinstance(name, bool):
            raise UserError(f"{where}[{key!r}] is {json.dumps(name, default=repr)}: a class name must be a string")


# transformers' PretrainedConfig.problem_type: any other value made its sequence classifiers compute no loss at all
# (their forward tests these three and falls through), so a misspelt one exported a model that trained on nothing
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def check_labels(labels: Any, where: str = "labels", num_labels: int | None = None) -> dict[str, Any]:
    """A classifier's labels as `read_labels` gives them and `export_hf(labels=...)` takes them, {"id2label":
    {"0": name, ...}, "label2id": ..., "problem_type": ...}, checked: an object, an index -> name `id2label`
    (`check_id2label`), a `problem_type` transformers knows, and with `num_labels` (the head's width) an id2label
    naming that many classes and no single-label classification of one output (transformers' config refuses that).
    Returns them with string keys and without label2id (transformers writes it from id2label). Else a UserError."""
    if not isinstance(labels, dict):
        raise UserError(f"{where} is {type(labels).__name__}: give {{\"id2label\": {{\"0\": name, ...}}, "
                        '"problem_type": ...} (what albertlm.interop.hf.read_labels returns)')
    out: dict[str, Any] = {}
    if labels.get("id2label") is not None:
        check_id2label(labels["id2label"], f"{where}: id2label")
        out["id2label"] = {str(int(k)): v for k, v in labels["id2label"].items()}
        if num_labels is not None and len(out["id2label"]) != num_labels:
            raise UserError(f"{where}: id2label names {len(out['id2label'])} classes, the classifier has "
                            f"{num_labels} outputs (num_labels): these are another head's names")
    problem = labels.get("problem_type")
    if problem is not None:
        if problem not in PROBLEM_TYPES:
            raise UserError(f"{where}: problem_type is {problem!r}: transformers knows {', '.join(PROBLEM_TYPES)} "
                            "(with another value its classifier computes no loss)")
        if problem == "single_label_classification" and num_labels == 1:
            raise UserError(f"{where}: problem_type single_label_classification with one output (num_labels 1): "
                            "transformers refuses that config; a one-output head is a regression")
        out["problem_type"] = problem
    return out


def config_from_hf(data: dict[str, Any]) -> ModelConfig:
    """A transformers `config.json` or google-research `albert_config.json` -> ModelConfig."""
    if not isinstance(data, dict):
        raise UserError(f"expected a JSON object (an ALBERT config), got {type(data).__name__}")
    check_config_types(data, CONFIG_FIELDS)
    for name, kind, what in (("num_hidden_groups", int, "an integer"), ("hidden_act", str, "a string"),
                             ("id2label", dict, "an object"), ("num_labels", int, "an integer")):
        value = data.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise UserError(f"{name} is {value!r}, expected {what}")
    if data.get("id2label") is not None:
        check_id2label(data["id2label"])
    google = "model_type" not in data
    if not google and data["model_type"] != "albert":   # e.g. a BERT directory: name it, not its keys
        raise UserError(f"model_type is {data['model_type']!r}: not an ALBERT checkpoint (transformers' ALBERT has "
                        "model_type 'albert'); albertlm reads ALBERT checkpoints only")
    for name, plain in (("net_structure_type", 0), ("gap_size", 0), ("num_memory_blocks", 0), ("down_scale_factor", 1)):
        if data.get(name, plain) != plain:
            raise UserError(f"{name}={data[name]!r} is not supported (only the standard ALBERT structure)")
    # transformers 4's AlbertConfig: any value but "absolute" leaves the absolute position embeddings out of the sum
    # (relative_key / relative_key_query attend with distance embeddings instead), a network ours does not compute
    if data.get("position_embedding_type") not in (None, "absolute"):
        raise UserError(f"position_embedding_type={data['position_embedding_type']!r} is not supported: such a "
                        "checkpoint adds no absolute position embeddings (transformers 4's relative position "
                        "embeddings); albertlm's ALBERT has absolute positions only (position_embedding_type 'absolute')")
    # transformers 4's prune_heads: the named layers keep fewer heads (smaller query/key/value), which ours cannot hold
    if data.get("pruned_heads"):
        raise UserError(f"pruned_heads={data['pruned_heads']!r} is not supported: attention heads were pruned from "
                        "this checkpoint (transformers 4's prune_heads), and albertlm's layers all have "
                        "num_attention_heads heads")
    fields = {ours: data[hf] if data.get(hf) is not None else HF_DEFAULTS[hf] for ours, hf in CONFIG_FIELDS.items()}
    if "classifier_dropout_prob" in data and data["classifier_dropout_prob"] is None:
        fields["classifier_dropout"] = fields["hidden_dropout"]  # transformers' fallback for an unset (null) value
    act = data.get("hidden_act", "gelu" if google else "gelu_new")   # each config class's own default
    table = GOOGLE_ACTIVATIONS if google else HF_ACTIVATIONS
    if act not in table:
        raise UserError(f"hidden_act={act!r} is not supported (one of {', '.join(table)})")
    fields["activation"] = table[act]
    L, N = fields["num_layers"], data["num_hidden_groups"] if data.get("num_hidden_groups") is not None else 1
    if isinstance(L, int) and isinstance(N, int) and L >= 1 and N >= 1 and (N > L or L % N):
        raise UserError(f"num_hidden_groups={N} with num_hidden_layers={L}: albertlm's layer groups are equal-sized "
                        "(the number of groups must divide the number of layers), so this layout cannot be loaded")
    fields.update(sharing="none", num_groups=1) if N == L and L > 1 else fields.update(sharing="all", num_groups=N)
    if data.get("id2label") is not None:
        fields["num_labels"] = len(data["id2label"])
    elif data.get("num_labels") is not None:
        fields["num_labels"] = data["num_labels"]
    fields["always_project_embeddings"] = not google and fields["embedding_size"] == fields["hidden_size"]
    if data.get("problem_type") == "multi_label_classification":
        logging.getLogger("albertlm.model").warning(
            "the checkpoint is a multi-label classifier (problem_type multi_label_classification); albertlm's "
            "sequence classifier computes logits the same way, but its loss, when given labels, is cross-entropy "
            "over one label per example, not transformers' per-label binary cross-entropy")
    return ModelConfig(**fields)


def config_to_hf(cfg: ModelConfig, architecture: str = "AlbertForPreTraining") -> dict[str, Any]:
    data = {hf: getattr(cfg, ours) for ours, hf in CONFIG_FIELDS.items()}
    data.update(model_type="albert", architectures=[architecture], hidden_act=cfg.activation,
                num_hidden_groups=hf_num_groups(cfg), bos_token_id=2, eos_token_id=3,
                id2label={str(i): f"LABEL_{i}" for i in range(cfg.num_labels)},
                label2id={f"LABEL_{i}": i for i in range(cfg.num_labels)})
    return data


def backbone_key_map(cfg: ModelConfig, plan: list[tuple[int, int]]) -> dict[str, str | tuple[str, ...]]:
    """Our backbone key -> transformers key (a tuple: our tensor is their tensors concatenated)."""
    hf_num_groups(cfg)
    K = cfg.inner_group_num
    keys: dict[str, str | tuple[str, ...]] = {
        k: v for k, v in EMBEDDING_KEYS.items() if cfg.has_embedding_projection or ".project." not in k}
    for u in sorted({a for a, _ in plan}):  # for `all` / `none` attention and FFN indices coincide
        block = f"encoder.albert_layer_groups.{u // K}.albert_layers.{u % K}"
        for ours, theirs in ATTENTION_KEYS.items():
            for p in ("weight", "bias"):
                keys[f"encoder.attentions.{u}.{ours}.{p}"] = (
                    tuple(f"{block}.{t}.{p}" for t in theirs) if isinstance(theirs, tuple) else f"{block}.{theirs}.{p}")
        for ours, theirs in FFN_KEYS.items():
            for p in ("weight", "bias"):
                keys[f"encoder.ffns.{u}.{ours}.{p}"] = f"{block}.{theirs}.{p}"
    return keys


def state_from_hf(hf_state: dict[str, Any], cfg: ModelConfig, plan: list[tuple[int, int]]) -> dict[str, Any]:
    """A transformers state dict (any Albert* class) -> ours, in full-model form (`albert.` prefix)."""
    import torch  # the config layer stays torch-free; this module is only used by the model layer

    base = {k.removeprefix("albert."): v for k, v in hf_state.items() if not k.startswith(HEAD_PREFIXES)}
    out: dict[str, Any] = {}
    for ours, theirs in backbone_key_map(cfg, plan).items():
        if isinstance(theirs, tuple):
            if all(t in base for t in theirs):
                out["albert." + ours] = torch.cat([base[t] for t in theirs], 0)
        elif theirs in base:
            out["albert." + ours] = base[theirs]
    if not cfg.has_embedding_projection:
        _check_identity(base)
    for ours, theirs in HEAD_KEYS.items():
        if theirs in hf_state:
            out[ours] = hf_state[theirs]
    _check_tied_decoder(hf_state)
    known = set(_flat(backbone_key_map(cfg, plan).values())) | set(HF_IGNORED) | {
        "encoder.embedding_hidden_mapping_in.weight", "encoder.embedding_hidden_mapping_in.bias"}
    unknown = sorted(k for k in base if k not in known) + sorted(
        k for k in hf_state if k.startswith(HEAD_PREFIXES) and k not in HEAD_KEYS.values() and k not in HF_IGNORED)
    if any(".distance_embedding." in k for k in unknown):
        raise UserError("this checkpoint has relative position embeddings (transformers 4's position_embedding_type "
                        "'relative_key' / 'relative_key_query'); albertlm's ALBERT has absolute positions only")
    if unknown:
        raise UserError(f"unexpected transformers keys (not an ALBERT of this config?): {', '.join(unknown[:5])}")
    return out


HEAD_PREFIXES = ("predictions.", "sop_classifier.", "classifier.", "qa_outputs.")


def _check_tied_decoder(hf_state: dict[str, Any]) -> None:
    """Our masked-LM decoder is the word embedding matrix (and `predictions.bias`), as in google's code and
    transformers' default; a checkpoint trained with `tie_word_embeddings=False` cannot be represented, so its
    MLM outputs would change: say so (the encoder and every other head load exactly)."""
    import torch

    pairs = (("predictions.decoder.weight", "albert.embeddings.word_embeddings.weight", "the word embeddings"),
             ("predictions.decoder.bias", "predictions.bias", "predictions.bias"))
    for key, tied_to, name in pairs:
        a, b = hf_state.get(key), hf_state.get(tied_to, hf_state.get(tied_to.removeprefix("albert.")))
        if a is not None and b is not None and not (a.shape == b.shape and torch.equal(a, b)):
            logging.getLogger("albertlm.model").warning(
                "the checkpoint's masked-LM decoder (%s) is not tied to %s; albertlm's is, so its masked-LM "
                "outputs will differ from the source's (the encoder and the other heads load exactly)", key, name)
            return


def _flat(values) -> list[str]:
    return [x for v in values for x in ((v,) if isinstance(v, str) else v)]


def _check_identity(base: dict[str, Any]) -> None:
    """E == H without our projection: transformers' projection must be the identity to drop it."""
    import torch

    w, b = base.get("encoder.embedding_hidden_mapping_in.weight"), base.get("encoder.embedding_hidden_mapping_in.bias")
    if w is not None and not (torch.equal(w, torch.eye(w.shape[0], dtype=w.dtype)) and not b.any()):
        raise UserError("this checkpoint has a trained E->H projection with E == H: load it with "
                        "always_project_embeddings=True")


def state_to_hf(state: dict[str, Any], cfg: ModelConfig, plan: list[tuple[int, int]]) -> dict[str, Any]:
    """Our full-model state dict -> transformers' (`albert.` prefix, heads renamed, QKV split)."""
    import torch

    out: dict[str, Any] = {}
    for ours, theirs in backbone_key_map(cfg, plan).items():
        value = state["albert." + ours] if "albert." + ours in state else state.get(ours)
        if value is None:
            continue  # e.g. no pooler in this model
        if isinstance(theirs, tuple):
            for name, part in zip(theirs, value.chunk(len(theirs), 0)):
                out["albert." + name] = part.contiguous()
        else:
            out["albert." + theirs] = value
    if not cfg.has_embedding_projection:  # transformers always projects: write the identity, in the weights' dtype
        dtype = out["albert.embeddings.word_embeddings.weight"].dtype  # (float32 in a bf16 model's file made it mixed)
        out["albert.encoder.embedding_hidden_mapping_in.weight"] = torch.eye(cfg.hidden_size, dtype=dtype)
        out["albert.encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(cfg.hidden_size, dtype=dtype)
    for ours, theirs in HEAD_KEYS.items():
        if ours in state:
            out[theirs] = state[ours]
    return out
