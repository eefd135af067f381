"""Import google-research/ALBERT TensorFlow checkpoints (`model.ckpt-N` + `albert_config.json`).

Pretraining checkpoints become AlbertForPreTraining, `run_classifier.py` checkpoints (top-level
`output_weights` / `output_bias`) AlbertForSequenceClassification, `run_squad_v1.py` checkpoints
(`cls/squad/output_*`) AlbertForQuestionAnswering, `run_squad_v2.py` checkpoints (`start_logits/`, `end_logits/`,
`answer_class/`) AlbertForSquadV2, checkpoints with none of these heads the AlbertModel they hold. A checkpoint with
run_pretraining.py's masked-LM head but not its SOP head (TF-Hub modules exported before google's export_to_tfhub.py
added the "sop" signature, July 2020: google/albert_*/1-3) is an AlbertForPreTraining whose SOP head is reported
missing: the checkpoint's trained pooler (what google's run_classifier.py reads as the module's pooled_output) and
masked-LM head are kept, and `albertlm convert` writes the model without the SOP head.

No TensorFlow needed: `tf_checkpoint` reads the checkpoint files. The variable names are those that
google's `modeling.py` (AlbertModel, scope `bert/`) and `run_pretraining.py` (scope `cls/`) create:

  bert/embeddings/{word,position,token_type}_embeddings, bert/embeddings/LayerNorm/{gamma,beta}
  bert/encoder/embedding_hidden_mapping_in/{kernel,bias}          (only when E != H)
  bert/encoder/transformer/group_{g}/inner_group_{k}/
      attention_1/self/{query,key,value}/{kernel,bias}, attention_1/output/dense/{kernel,bias},
      LayerNorm/{gamma,beta}                                      (post-attention LayerNorm)
      ffn_1/intermediate/dense/{kernel,bias}, ffn_1/intermediate/output/dense/{kernel,bias},
      LayerNorm_1/{gamma,beta}                                    (post-FFN LayerNorm)
  bert/pooler/dense/{kernel,bias}
  cls/predictions/transform/dense/{kernel,bias}, cls/predictions/transform/LayerNorm/{gamma,beta},
  cls/predictions/output_bias, cls/seq_relationship/output_{weights,bias}

Dense kernels are stored (in, out) and become torch Linear weights (out, in); the SOP
`output_weights` is already (2, H). Google's group g, inner group k is our unique block g * K + k
(K = inner_group_num), which is where `sharing_plan` puts group g's k-th block for sharing `all`. google runs layer l
with group int(l / L * N) in floating point, `sharing_plan` with l * N // L: the few configs where the two differ
(L = N = 22, L = 44 with N = 22, ...) are refused (`check_google_layer_groups`). Any other variable under the
backbone's scope is a model this import does not know, refused naming it (`unknown_backbone_variables`).
Training state (`global_step`, the LAMB/AdamWeightDecay slots `<var>/adam_m`, `<var>/adam_v`, `<var>/lamb_m`, ...)
is skipped. TF-Hub exports (`module/` prefix, `variables/variables.*`) read the same way, and so does a backbone
built under another scope than `bert/` (`modeling.AlbertModel(..., scope="albert")`).
"""
from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from albertlm.config import ModelConfig
from albertlm.errors import UserError
from albertlm.interop.tf_checkpoint import TFCheckpoint, resolve_prefix
from albertlm.model import hf_format
from albertlm.model.albert import AlbertForPreTraining, sharing_plan

# variables a training run adds: optimizer slots, step counters, TF2's object graph. google's lamb_optimizer.py names
# its slots adam_m / adam_v as AdamWeightDecay does; `lamb_m` / `lamb_v` are the slots google's export_checkpoints.py
# leaves out by name (those of the LAMB that trained the released models): read as model variables, every one was an
# "unused" variable, and `info` counted them as weights (the pooler's as "unused: AlbertForPreTraining has no pooler")
TRAINING_STATE = re.compile(r"(^|/)(adam_[mv]|lamb_[mv]|Adam(_\d+)?|Momentum|global_step|beta[12]_power|save_counter)$"
                            r"|AdamWeightDecayOptimizer|LAMB|^_CHECKPOINTABLE_OBJECT_GRAPH$")
# (TF names, transpose): several names are concatenated along dim 0 after transposing
Source = tuple[tuple[str, ...], bool]


def _dense(tf_scope: str) -> dict[str, Source]:
    return {"weight": ((f"{tf_scope}/kernel",), True), "bias": ((f"{tf_scope}/bias",), False)}


def _norm(tf_scope: str) -> dict[str, Source]:
    return {"weight": ((f"{tf_scope}/gamma",), False), "bias": ((f"{tf_scope}/beta",), False)}


def _block_map(g: int, k: int, u: int) -> dict[str, Source]:
    """One transformer block (google's group g, inner group k) -> our unique block u."""
    p = f"bert/encoder/transformer/group_{g}/inner_group_{k}"
    qkv = tuple(f"{p}/attention_1/self/{n}" for n in ("query", "key", "value"))
    modules = {f"albert.encoder.attentions.{u}.out": _dense(f"{p}/attention_1/output/dense"),
               f"albert.encoder.attentions.{u}.norm": _norm(f"{p}/LayerNorm"),
               f"albert.encoder.ffns.{u}.up": _dense(f"{p}/ffn_1/intermediate/dense"),
               f"albert.encoder.ffns.{u}.down": _dense(f"{p}/ffn_1/intermediate/output/dense"),
               f"albert.encoder.ffns.{u}.norm": _norm(f"{p}/LayerNorm_1")}
    out = {f"{m}.{param}": src for m, params in modules.items() for param, src in params.items()}
    out[f"albert.encoder.attentions.{u}.qkv.weight"] = (tuple(f"{q}/kernel" for q in qkv), True)
    out[f"albert.encoder.attentions.{u}.qkv.bias"] = (tuple(f"{q}/bias" for q in qkv), False)
    return out


def tf_key_map(cfg: ModelConfig, head: str = "pretraining") -> dict[str, Source]:
    """Every state-dict key of AlbertForPreTraining (head "pretraining") or of
    AlbertForSequenceClassification (head "classifier") -> the TF variable(s) it comes from."""
    num_groups = tf_num_groups(cfg)
    modules = {"albert.embeddings.norm": _norm("bert/embeddings/LayerNorm"),
               "albert.pooler": _dense("bert/pooler/dense")}
    if cfg.has_embedding_projection:
        modules["albert.embeddings.project"] = _dense("bert/encoder/embedding_hidden_mapping_in")
    keys = {f"{m}.{param}": src for m, params in modules.items() for param, src in params.items()}
    for ours, theirs in (("word", "word_embeddings"), ("position", "position_embeddings"),
                         ("token_type", "token_type_embeddings")):
        keys[f"albert.embeddings.{ours}.weight"] = ((f"bert/embeddings/{theirs}",), False)
    K = cfg.inner_group_num
    for g in range(num_groups):
        for k in range(K):
            keys.update(_block_map(g, k, g * K + k))
    keys.update(HEADS[head])
    return keys


def tf_num_groups(cfg: ModelConfig) -> int:
    """google's num_hidden_groups for `cfg`: N for sharing `all`; L when every layer is its own group (sharing `none`,
    which is what an albert_config.json with num_hidden_groups = num_hidden_layers reads as, or `attention` / `ffn`
    with N = L). google's groups share attention and FFN together, so other sharings have no TF layout."""
    if cfg.sharing == "all":
        return cfg.num_groups
    if all(a == f for a, f in sharing_plan(cfg)):
        return cfg.num_layers
    raise UserError(f"google-research checkpoints share attention and FFN together within groups; sharing="
                    f"{cfg.sharing!r} with {cfg.num_groups} group(s) of {cfg.num_layers} layers has no TF layout")


# run_pretraining.py's heads
PRETRAINING_HEADS: dict[str, Source] = {
    **{f"mlm_head.dense.{p}": src for p, src in _dense("cls/predictions/transform/dense").items()},
    **{f"mlm_head.norm.{p}": src for p, src in _norm("cls/predictions/transform/LayerNorm").items()},
    "mlm_head.bias": (("cls/predictions/output_bias",), False),
    "sop_head.weight": (("cls/seq_relationship/output_weights",), False),  # already (2, H)
    "sop_head.bias": (("cls/seq_relationship/output_bias",), False),
}
# classifier_utils.create_model (run_classifier.py): top-level (num_labels, H) weights
CLASSIFIER_HEAD: dict[str, Source] = {"classifier.weight": (("output_weights",), False),
                                      "classifier.bias": (("output_bias",), False)}
# run_squad_v1.py: (2, H) start/end weights on every token's final hidden state
SQUAD_HEAD: dict[str, Source] = {"qa_outputs.weight": (("cls/squad/output_weights",), False),
                                 "qa_outputs.bias": (("cls/squad/output_bias",), False)}
# run_squad_v2.py (squad_utils.create_v2_model): start_logits/dense (H, 1); end_logits/dense_0 (2H, H) on [token,
# start state], end_logits/LayerNorm, end_logits/dense_1 (H, 1); answer_class/dense_0 (2H, H) on [start feature,
# [CLS]], answer_class/dense_1 (H, 1) without bias
SQUAD_V2_HEAD: dict[str, Source] = {
    **{f"start_dense.{p}": src for p, src in _dense("start_logits/dense").items()},
    **{f"end_dense.{p}": src for p, src in _dense("end_logits/dense_0").items()},
    **{f"end_norm.{p}": src for p, src in _norm("end_logits/LayerNorm").items()},
    **{f"end_out.{p}": src for p, src in _dense("end_logits/dense_1").items()},
    **{f"answer_dense.{p}": src for p, src in _dense("answer_class/dense_0").items()},
    "answer_out.weight": (("answer_class/dense_1/kernel",), True),
}
# AlbertForPreTraining's SOP head: what a checkpoint with run_pretraining.py's masked-LM head alone (an older TF-Hub
# module's, "pretraining_without_sop") lacks, reported missing; `albertlm convert` writes the model without it
SOP_HEAD = ("sop_head.weight", "sop_head.bias")
# none of the heads above: AlbertModel
HEADS = {"pretraining": PRETRAINING_HEADS, "classifier": CLASSIFIER_HEAD, "squad": SQUAD_HEAD,
         "squad_v2": SQUAD_V2_HEAD, "pretraining_without_sop": PRETRAINING_HEADS, "backbone": {}}


def config_from_google(data: dict) -> ModelConfig:
    """google's albert_config.json uses transformers' field names; its "gelu" is the tanh form."""
    if "model_type" in data:
        raise UserError("this is a transformers config.json, not a google-research albert_config.json")
    return hf_format.config_from_hf(data)


def find_config(prefix: Path) -> Path:
    """albert_config.json beside the checkpoint (or beside a TF-Hub module's `variables/` folder)."""
    hub = prefix.parent.name == "variables"
    for directory in (prefix.parent, prefix.parent.parent) if hub else (prefix.parent,):
        if (directory / "albert_config.json").is_file():
            return directory / "albert_config.json"
    raise UserError(f"no albert_config.json next to {prefix}; put the model's albert_config.json there "
                    "(`albertlm convert`, `albertlm info` and `albertlm export onnx` also take --config FILE)")


@dataclass
class ImportReport:
    """What happened to every variable: the summary `albertlm convert` prints."""

    checkpoint: str
    used: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)      # training state (optimizer slots, step)
    unused: list[str] = field(default_factory=list)       # other variables (e.g. a fine-tuned classifier)
    missing: list[str] = field(default_factory=list)      # head weights the checkpoint lacks (left as initialised)

    scope: str = "bert/"                                  # the backbone's variable scope in the checkpoint
    notes: list[str] = field(default_factory=list)        # what the head it was read as means

    def lines(self) -> list[str]:
        out = [f"TF checkpoint {self.checkpoint}: {len(self.used)} variables imported, "
               f"{len(self.skipped)} training-state variables skipped"]
        if self.scope != "bert/":
            out.append(f"backbone variables under {self.scope} read as google's bert/")
        out.extend(self.notes)
        if self.unused:
            out.append(f"unused variables ({len(self.unused)}): {', '.join(self.unused)}")
        if self.missing:
            out.append(f"not in the checkpoint, left initialised ({len(self.missing)}): {', '.join(self.missing)}")
        return out


def _strip_module_prefix(names: list[str]) -> dict[str, str]:
    """Plain name (google's `bert/...`, `cls/...`) -> stored name. TF-Hub modules prefix every variable with
    `module/`; `modeling.AlbertModel(..., scope=...)` puts the backbone under another scope than its default
    `bert/` (e.g. `albert/`), found by its word embeddings and read as `bert/`."""
    if names and all(n.startswith("module/") for n in names if not TRAINING_STATE.search(n)):
        plain = {n.removeprefix("module/"): n for n in names}
    else:
        plain = {n: n for n in names}
    scope = backbone_scope(plain)
    if scope in (None, "bert/"):
        return plain
    return {("bert/" + n.removeprefix(scope) if n.startswith(scope) else n): stored for n, stored in plain.items()}


WORD_EMBEDDINGS = "embeddings/word_embeddings"
OBJECT_BASED = "/.ATTRIBUTES/VARIABLE_VALUE"   # TF 2's object-graph checkpoints name variables by their path


def _stored_scope(stored: dict[str, str]) -> str:
    """The scope the backbone had in the checkpoint (TF-Hub's `module/` aside), for the report."""
    name = stored.get("bert/" + WORD_EMBEDDINGS)
    return name.removeprefix("module/")[: -len(WORD_EMBEDDINGS)] if name else "bert/"


def backbone_scope(names) -> str | None:
    """The variable scope of the ALBERT backbone ("bert/" by google's default, "albert/", ...), from the one variable
    named `<scope>/embeddings/word_embeddings`; None when there is none, or several."""
    if "bert/" + WORD_EMBEDDINGS in names:
        return "bert/"
    scopes = {n[: -len(WORD_EMBEDDINGS)] for n in names if n.endswith("/" + WORD_EMBEDDINGS)}
    return scopes.pop() if len(scopes) == 1 else None


# `progress(done, total)`: bytes of the variables read so far, and to read in all
Progress = Callable[[int, int], None]


def read_tf_state(ckpt: TFCheckpoint, key_map: dict[str, Source], expected: dict[str, torch.Size],
                  verify: bool = False,
                  progress: Progress | None = None) -> tuple[dict[str, torch.Tensor], ImportReport]:
    """The state dict `key_map` describes, read from `ckpt` and checked against `expected` shapes; `progress` is
    called before the first variable is read and after each."""
    stored = _strip_module_prefix(ckpt.names())
    report = ImportReport(str(ckpt.prefix), scope=_stored_scope(stored))
    state: dict[str, torch.Tensor] = {}
    total = sum(ckpt.entries[stored[n]].size for names, _ in key_map.values() for n in names if n in stored)
    done = 0
    if progress is not None:
        progress(done, total)
    for ours, (names, transpose) in key_map.items():
        present = [n for n in names if n in stored]
        if not present:
            report.missing.append(ours)
            continue
        if len(present) != len(names):
            raise UserError(f"{ckpt.prefix}: has {present[0]} but not {sorted(set(names) - set(present))[0]}")
        arrays = [ckpt.read(stored[n], verify=verify) for n in names]
        if progress is not None:
            done += sum(ckpt.entries[stored[n]].size for n in names)
            progress(done, total)
        arrays = [np.ascontiguousarray(a.T) if transpose else a for a in arrays]
        value = torch.from_numpy(np.concatenate(arrays, 0) if len(arrays) > 1 else arrays[0]).float()
        if value.shape != expected[ours]:
            raise UserError(f"{names[0]} has shape {tuple(ckpt.entries[stored[names[0]]].shape)}, which does not fit "
                            f"albert_config.json (expected {ours} {tuple(expected[ours])})")
        state[ours] = value
        report.used.extend(names)
    used = set(report.used)
    for plain, name in sorted(stored.items()):
        if plain not in used:
            (report.skipped if TRAINING_STATE.search(plain) else report.unused).append(name)
    return state, report


def import_tf_checkpoint(path: str | Path, config: str | Path | ModelConfig | None = None,
                         verify: bool = False, progress: Progress | None = None) -> tuple[nn.Module, ImportReport]:
    """Build an albertlm model from a google-research TF checkpoint.

    `path`: a checkpoint prefix, its `.index` file or a directory holding one checkpoint.
    `config`: albert_config.json (default: found beside the checkpoint) or a ModelConfig.
    A pretraining checkpoint gives an AlbertForPreTraining; a run_classifier.py checkpoint (top-level
    `output_weights`, no `cls/` heads) an AlbertForSequenceClassification with its num_labels; a
    run_squad_v1.py checkpoint (`cls/squad/*`) an AlbertForQuestionAnswering; a run_squad_v2.py checkpoint
    (`start_logits/`, `end_logits/`, `answer_class/`) an AlbertForSquadV2; run_pretraining.py's masked-LM head
    without its SOP head (an older TF-Hub module) an AlbertForPreTraining with the checkpoint's pooler and masked-LM
    head, its SOP head (`SOP_HEAD`) in `report.missing`; no head albertlm reads an AlbertModel.
    Every backbone weight must be in the checkpoint, and any other variable under the backbone's scope (google's
    `bert/`) is refused naming it (`unknown_backbone_variables`: a model this import does not know); missing head
    weights are left initialised and listed in the report (`report.missing`: `albertlm convert` refuses such a
    checkpoint, making up no weights, except one lacking only the SOP head, which it writes without one).
    `verify`: check every variable's CRC32C;
    `progress(done, total)`: called with the bytes of the variables read so far (`read_tf_state`).
    """
    prefix = resolve_prefix(path)
    if not isinstance(config, ModelConfig):
        config = read_google_config(Path(config) if config is not None else find_config(prefix))
    ckpt = TFCheckpoint(prefix)
    ckpt.check_data_files()
    check_groups(ckpt, config)
    model, head = _build_model(ckpt, config)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    key_map = _model_key_map(model, head)
    state, report = read_tf_state(ckpt, key_map, expected, verify=verify, progress=progress)
    if head == "backbone":
        report.notes.append("no head albertlm reads (run_pretraining.py's cls/, run_classifier.py's output_weights, "
                            "run_squad_v1.py's cls/squad/, run_squad_v2.py's start_logits/ end_logits/ "
                            "answer_class/): imported as the backbone alone, AlbertModel")
    elif head == "squad_v2":
        report.notes.append("run_squad_v2.py's SQuAD v2.0 head (start_logits/, end_logits/, answer_class/): "
                            "AlbertForSquadV2 (`albertlm predict squad` runs its beam and null odds)")
    elif head == "pretraining_without_sop":
        report.notes.append("run_pretraining.py's masked-LM head without its SOP head (cls/seq_relationship/ is not in "
                            "TF-Hub modules exported before July 2020, google/albert_*/1-3): AlbertForPreTraining with "
                            "the checkpoint's pooler and masked-LM head; its SOP head is not in the checkpoint")
    elif head == "classifier" and model.config.num_labels == 1:
        report.notes.append("one output row: read as run_classifier.py's regression (STS-B); run_race.py saves its "
                            "multiple-choice head under the same names and shape (AlbertForMultipleChoice takes "
                            "this state dict as it is)")
    backbone_missing = [key_map[k][0][0] for k in report.missing if head == "backbone" or k.startswith("albert.")]
    if backbone_missing and any(n.endswith(OBJECT_BASED) for n in ckpt.names()):
        raise UserError(f"{prefix}: a TF 2 object-based checkpoint (names ending in {OBJECT_BASED}: TF Model "
                        "Garden's, a TF-Hub albert_en_* SavedModel), not google-research's bert/ variables; albertlm "
                        "reads google-research/ALBERT's checkpoints and its TF 1 TF-Hub modules (google/albert_base/3)")
    if backbone_missing:
        more = f" and {len(backbone_missing) - 3} more" if len(backbone_missing) > 3 else ""
        raise UserError(f"{prefix}: not an ALBERT checkpoint of this config: no {', '.join(backbone_missing[:3])}{more}")
    stored = _strip_module_prefix(ckpt.names())
    unknown = unknown_backbone_variables(stored, config)
    if unknown:   # after the errors above, which say more (a config that does not fit, another model's variables)
        raise UserError(f"{prefix}: {_unknown_said(unknown, _stored_scope(stored))}")
    model.load_state_dict(state, strict=False)
    unfilled = sorted(set(expected) - set(state) - set(report.missing))
    if unfilled:  # the map must cover the model: a new parameter without a TF source is a bug here
        raise RuntimeError(f"TF key map does not cover {', '.join(unfilled)}")
    return model.eval(), report   # eval mode, as from_pretrained returns (and transformers' does)


GROUP_VARIABLE = re.compile(r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/")


def check_groups(ckpt: TFCheckpoint, cfg: ModelConfig) -> None:
    """The checkpoint's groups and inner groups must be those of the config: with fewer in albert_config.json the
    others were left unused and a different network came back (only the report listed them); with more the error
    named a missing variable, not the disagreement. Then google's layer groups must be albertlm's
    (`check_google_layer_groups`)."""
    if _check_group_counts(ckpt, cfg):
        check_google_layer_groups(cfg.num_layers, tf_num_groups(cfg), str(ckpt.prefix))


def _check_group_counts(ckpt: TFCheckpoint, cfg: ModelConfig) -> bool:
    """`check_groups`' first part; whether the checkpoint has ALBERT encoder variables at all."""
    groups, inner = set(), set()
    for name in _strip_module_prefix(ckpt.names()):
        match = GROUP_VARIABLE.match(name)
        if match:
            groups.add(int(match.group(1)))
            inner.add(int(match.group(2)))
    if not groups:   # no ALBERT encoder at all: import_tf_checkpoint names what is missing
        return False
    held = (max(groups) + 1, max(inner) + 1)
    said = (tf_num_groups(cfg), cfg.inner_group_num)
    if held != said:
        raise UserError(f"{ckpt.prefix}: albert_config.json does not fit this checkpoint: it says num_hidden_groups "
                        f"{said[0]}, inner_group_num {said[1]}, but the checkpoint's encoder variables (bert/encoder/"
                        f"transformer/group_*/inner_group_*) are num_hidden_groups {held[0]}, inner_group_num "
                        f"{held[1]} (another model's config, or an incomplete checkpoint)")
    return True


def google_layer_group(layer: int, num_layers: int, num_groups: int) -> int:
    """The group google's modeling.transformer_model runs `layer` with: `int(layer_idx / num_hidden_layers *
    num_hidden_groups)`, in floating point (Python's, at graph construction), which for some configs rounds an exact
    integer down (30 / 44 * 22 is 14.999999999999998)."""
    return int(layer / num_layers * num_groups)


def check_google_layer_groups(num_layers: int, num_groups: int, where: str) -> None:
    """albertlm (and transformers) run layer l with group l * N // L, exact; where google's floating-point group of a
    layer is another, google's network is not one albertlm can build: with L = N = 22 google's layer 15 reuses
    group_14 (no group_15 is made: the import named a missing variable), with L = 44, N = 22 layer 30 runs group_14
    (every group is made: the import gave another network without a word). Refused naming the layer."""
    said = google_layer_groups_differ(num_layers, num_groups)
    if said:
        raise UserError(f"{where}: {said}")


def google_layer_groups_differ(num_layers: int, num_groups: int) -> str | None:
    """Why albertlm cannot rebuild google's network of `num_layers` layers in `num_groups` groups (the first layer
    google's modeling.py runs with another group than albertlm would), or None where every layer's group agrees."""
    for layer in range(num_layers):
        theirs, ours = google_layer_group(layer, num_layers, num_groups), layer * num_groups // num_layers
        if theirs != ours:
            return (f"google's modeling.py runs layer {layer} of {num_layers} with group_{theirs} "
                    f"(int({layer} / {num_layers} * {num_groups}) rounds {layer / num_layers * num_groups!r} "
                    f"down), albertlm and transformers with group {ours} ({layer} * {num_groups} // "
                    f"{num_layers}): a checkpoint of num_hidden_layers {num_layers}, num_hidden_groups "
                    f"{num_groups} is a network albertlm cannot rebuild")
    return None


def unknown_backbone_variables(stored: dict[str, str], cfg: ModelConfig) -> list[str]:
    """The stored names of the variables under the backbone's scope (google's `bert/`; `stored` maps the plain names
    `_strip_module_prefix` gives to the stored ones) that google's modeling.py does not make for `cfg` and that are
    not training state (`TRAINING_STATE`): a model this import does not know (a variant's extra weights, another
    config's `embedding_hidden_mapping_in`), which was imported without them, the variables only listed as unused."""
    made = {name for names, _ in tf_key_map(cfg, "backbone").values() for name in names}
    return [stored[plain] for plain in sorted(stored)
            if plain.startswith("bert/") and plain not in made and not TRAINING_STATE.search(plain)]


def _unknown_said(unknown: list[str], scope: str) -> str:
    """The one-line reason a checkpoint with `unknown_backbone_variables` is refused."""
    names = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
    one = len(unknown) == 1
    return (f"{names} {'is a variable' if one else 'are variables'} under the backbone's scope {scope} that google's "
            "modeling.py does not make for this albert_config.json, and no training state (adam_m, lamb_m, "
            f"global_step, ...): a model albertlm does not know, refused rather than imported without "
            f"{'it' if one else 'them'}")


def read_google_config(path: Path) -> ModelConfig:
    """albert_config.json -> ModelConfig; a missing, damaged or inconsistent file is a UserError naming it."""
    from albertlm.errors import read_json_object

    if not path.is_file():
        raise UserError(f"{path}: no such config file")
    data = read_json_object(path, "an albert_config.json")
    try:
        return config_from_google(data)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None


HEAD_CLASSES = {"squad": "AlbertForQuestionAnswering", "squad_v2": "AlbertForSquadV2",
                "classifier": "AlbertForSequenceClassification", "pretraining": "AlbertForPreTraining",
                "pretraining_without_sop": "AlbertForPreTraining", "backbone": "AlbertModel"}
# the variables of a head this import reads (after TF-Hub's `module/` and the backbone's scope are undone)
KNOWN_HEAD = re.compile(r"^(cls/predictions/|cls/seq_relationship/|cls/squad/output_|output_weights$|output_bias$"
                        r"|start_logits/|end_logits/|answer_class/)")
SQUAD_V2_SCOPES = re.compile(r"^(start_logits|end_logits|answer_class)/")


def checkpoint_head(ckpt: TFCheckpoint) -> tuple[str, int | None]:
    """(head kind, its number of labels or None) of what the checkpoint holds, from its variable names and shapes
    only: run_squad_v1.py's start/end weights, run_classifier.py's top-level `output_weights` (no `cls/` heads),
    run_squad_v2.py's start_logits/ end_logits/ answer_class/ (no `cls/` heads), "backbone" where no head this
    import reads is there, "pretraining_without_sop" for run_pretraining.py's masked-LM head without its SOP head (an
    older TF-Hub module's), otherwise run_pretraining.py's heads."""
    stored = _strip_module_prefix(ckpt.names())
    names = set(stored)
    squad = stored.get("cls/squad/output_weights")
    if squad is not None and ckpt.entries[squad].shape[0] == 2:  # v1 start/end (other SQuAD heads: unused)
        return "squad", None
    if "output_weights" in names and not any(n.startswith("cls/") for n in names):
        return "classifier", ckpt.entries[stored["output_weights"]].shape[0]
    if any(SQUAD_V2_SCOPES.match(n) and not TRAINING_STATE.search(n) for n in names) \
            and not any(n.startswith("cls/") for n in names):
        return "squad_v2", None
    if backbone_scope(names) is not None and not any(KNOWN_HEAD.match(n) for n in names):
        # no albertlm head reads what is there: an AlbertForPreTraining would have come back with random masked-LM
        # and SOP heads
        return "backbone", None
    model_vars = [n for n in names if not TRAINING_STATE.search(n)]
    if any(n.startswith("cls/predictions/") for n in model_vars) \
            and not any(n.startswith("cls/seq_relationship/") for n in model_vars):
        # google/albert_*/1-3 on TF-Hub: an AlbertForPreTraining whose SOP head is missing (convert wrote a random one
        # as trained until fd24d28, then an AlbertForMaskedLM, which dropped the trained pooler)
        return "pretraining_without_sop", None
    return "pretraining", None


def describe_tf_checkpoint(path: str | Path, config: str | Path | None = None) -> dict:
    """What `albertlm info` shows of a google-research TF checkpoint, from its index and albert_config.json alone
    (no tensor is read; a data file missing or shorter than the index needs is an error, and so is an
    albert_config.json whose groups are not the checkpoint's): {"prefix", "config" (a ModelConfig), "model_class"
    (the albertlm class it imports as), "stored_parameters" (values in its model variables, training state left
    out), "variables", "training_state", "files" (the checkpoint's files and its
    config, name -> bytes), "unused" (google's name -> values of the model variables the class does not read: the
    pooler of the QA classes, which have none), "missing" (the class's weights the checkpoint lacks, e.g. an older
    TF-Hub module's SOP head), "refused" (why `import_tf_checkpoint`, and so `albertlm convert`, refuses the
    checkpoint, or None: google's layer groups that albertlm cannot rebuild, variables under the backbone's scope it
    does not know; also said as a UserWarning, which `albertlm info` prints as a warning line)}. A checkpoint the
    import refuses is described all the same: what it holds is what one wants to see then."""
    prefix = resolve_prefix(path)
    config_path = Path(config) if config is not None else find_config(prefix)
    cfg = read_google_config(config_path)
    ckpt = TFCheckpoint(prefix)
    ckpt.check_data_files()   # a missing or cut data file is said here too, not only when a tensor is read
    # google's layer groups that albertlm cannot rebuild (L = N = 22): described, and the refusal said (it was the
    # only thing `info` said of such a checkpoint)
    groups_differ = google_layer_groups_differ(cfg.num_layers, tf_num_groups(cfg)) \
        if _check_group_counts(ckpt, cfg) else None
    head, num_labels = checkpoint_head(ckpt)
    if num_labels is not None:
        cfg = cfg.replace(num_labels=num_labels)
    model_vars = [e for n, e in ckpt.entries.items() if not TRAINING_STATE.search(n)]
    files = [Path(f"{prefix}.index"), *(ckpt.shard_path(i) for i in range(ckpt.num_shards)), config_path]
    with torch.device("meta"):   # the class's weights (no values): what the file lacks of it and holds beyond it
        model, _ = _build_model(ckpt, cfg)
    key_map = _model_key_map(model, head)
    stored = _strip_module_prefix(ckpt.names())
    read = {name for names, _ in key_map.values() for name in names}
    unused = {plain: math.prod(ckpt.entries[name].shape) for plain, name in sorted(stored.items())
              if plain not in read and not TRAINING_STATE.search(name)}
    made = {google_layer_group(layer, cfg.num_layers, tf_num_groups(cfg)) for layer in range(cfg.num_layers)}

    def never_made(names: tuple[str, ...]) -> bool:   # a group google's modeling.py makes no variables for
        match = GROUP_VARIABLE.match(names[0])
        return groups_differ is not None and match is not None and int(match.group(1)) not in made

    missing = [key for key, (names, _) in key_map.items()
               if not all(name in stored for name in names) and not never_made(names)]
    backbone = [name for key, (names, _) in key_map.items() if head == "backbone" or key.startswith("albert.")
                for name in names if not never_made(names)]
    # as the import: where the backbone is incomplete, its refusal names what is missing (`missing` says it here)
    unknown = unknown_backbone_variables(stored, cfg) if all(name in stored for name in backbone) else []
    refused = "; ".join([*([groups_differ] if groups_differ else []),
                         *([_unknown_said(unknown, _stored_scope(stored))] if unknown else [])]) or None
    if refused:
        warnings.warn(f"{prefix}: `albertlm convert` refuses this checkpoint (described all the same): {refused}",
                      UserWarning, stacklevel=2)
    return dict(prefix=prefix, config=cfg, model_class=HEAD_CLASSES[head],
                stored_parameters=sum(math.prod(e.shape) for e in model_vars), variables=len(model_vars),
                training_state=len(ckpt.entries) - len(model_vars),
                files={f.name: f.stat().st_size for f in files if f.is_file()}, unused=unused, missing=missing,
                refused=refused)


def _model_key_map(model: nn.Module, head: str) -> dict[str, Source]:
    """The TF variable(s) of each of `model`'s state-dict keys (`model` as `_build_model` made it for `head`): the QA
    models have no pooler, so google's pooler variables are left unread (reported unused); AlbertModel's keys are the
    backbone's without the `albert.` of the models with heads."""
    expected = model.state_dict().keys()
    key_map = {(k.removeprefix("albert.") if head == "backbone" else k): v
               for k, v in tf_key_map(model.config, head).items()}
    return {k: v for k, v in key_map.items() if k in expected}


def _build_model(ckpt: TFCheckpoint, cfg: ModelConfig) -> tuple[nn.Module, str]:
    """(model, head kind) for what the checkpoint holds."""
    head, num_labels = checkpoint_head(ckpt)
    if head == "squad":
        from albertlm.model.heads import AlbertForQuestionAnswering

        return AlbertForQuestionAnswering(cfg), "squad"
    if head == "squad_v2":
        from albertlm.model.heads import AlbertForSquadV2

        return AlbertForSquadV2(cfg), "squad_v2"
    if head == "classifier":
        from albertlm.model.heads import AlbertForSequenceClassification

        return AlbertForSequenceClassification(cfg.replace(num_labels=num_labels)), "classifier"
    if head == "backbone":
        from albertlm.model.albert import AlbertModel

        return AlbertModel(cfg), "backbone"
    return AlbertForPreTraining(cfg), head
