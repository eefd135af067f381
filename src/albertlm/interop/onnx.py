"""ONNX export of the encoder and of every task head, for ONNX Runtime; optional int8 dynamic quantisation.

    export_onnx(model, "model.onnx")            # any albertlm Albert* model; see OUTPUTS for what comes out
    compare_with_onnxruntime(model, "model.onnx")  # max |torch - onnxruntime| per output, on fresh inputs
    check_with_onnxruntime(model, "model.onnx")    # the same, and which outputs hold NaN or inf (PyTorch's, ORT's)
    quantize_int8("model.onnx", "model.int8.onnx")
    convert_fp16("model.onnx", "model.fp16.onnx")   # float16 weights and compute, int64 inputs, float32 outputs

- Inputs `input_ids`, `attention_mask`, `token_type_ids` (int64), (batch_size, sequence_length) or, for
  multiple choice, (batch_size, num_choices, sequence_length): every axis is dynamic (sequence up to the model's
  positions). Input, output and axis names are those of optimum's ONNX export of ALBERT, so either file serves.
- The file's metadata (`session.get_modelmeta().custom_metadata_map`) says what serving needs and the graph
  does not: the class, max_position_embeddings, vocab_size, type_vocab_size, pad_token_id (`model_metadata`),
  plus what the caller adds (`albertlm export onnx`: labels, task, max_seq_length, tokenizer files).
- Each shared weight is stored once: the encoder holds only the unique modules and the exported graph reuses
  their initializers in every layer; identical initializers the exporter may still produce (a transposed
  copy per use) are merged after export (`merge_duplicate_initializers`), so an all-shared 12-layer model
  is about as large as its safetensors file, not 12 times its layer.
- The export traces the plain PyTorch ops: the model is plain unless CPU fast paths were applied to it from
  outside (`albertlm.model.fast_paths`: oneDNN ops ONNX has no form for); `plain_model_ops(model)` removes
  them for the export and puts them back afterwards.
- Exporters: "torchscript" (torch.onnx's TorchScript exporter, the default while torch ships it: about 1 s
  for a small model) or "dynamo" (torch.export-based, torch's default since 2.9; about 20x slower to run
  here, needs onnxscript). Both are tested against onnxruntime.

- `albertlm export onnx MODEL --out DIR` (cli/export_commands.py) writes the directory optimum's ORTModelFor*
  and transformers.js load as they are: onnx/model.onnx (+ model_quantized.onnx, model_fp16.onnx), config.json,
  tokenizer files; a pretraining model is served as its masked LM there (`masked_lm_of`).

Needs the `onnx` extra: `pip install 'albertlm[onnx]'` (onnx, onnxruntime, onnxscript).
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import warnings
from pathlib import Path
from typing import Iterator

import torch
from torch import Tensor, nn

from albertlm.errors import UserError

# class -> the outputs the exported graph returns, in order (transformers' names)
OUTPUTS = {
    "AlbertModel": ("last_hidden_state", "pooler_output"),
    "AlbertForPreTraining": ("prediction_logits", "sop_logits"),
    "AlbertForMaskedLM": ("logits",),
    "AlbertForSequenceClassification": ("logits",),
    "AlbertForTokenClassification": ("logits",),
    "AlbertForQuestionAnswering": ("start_logits", "end_logits"),
    "AlbertForMultipleChoice": ("logits",),
}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
BATCH, SEQUENCE, CHOICES = "batch_size", "sequence_length", "num_choices"   # the dynamic axes, as optimum names them
EXPORTERS = ("torchscript", "dynamo")
OPSET = 18
# the lowest opset each exporter can write this model in: attention (scaled_dot_product_attention) needs 14,
# the torch.export-based exporter writes 18 and up
MIN_OPSET = {"torchscript": 14, "dynamo": 18}
# from opset 23 the dynamo exporter writes attention as ONNX's own `Attention` op, fed the (B, 1, 1, T) padding mask;
# onnxruntime's kernel (1.32) refuses that mask at every length but 1 ("inconsistent q_sequence_length (between
# attn_mask and Q)"): the file could not serve any real input, and the check after the export was a traceback
ATTENTION_OP_OPSET = 23


def opset_range(exporter: str) -> tuple[int, int]:
    """(lowest, highest) opset `exporter` can write this model in, with this torch, as onnxruntime runs it."""
    try:
        from torch.onnx import _constants   # private; absent or renamed in some torch: fall back
        high = (_constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET if exporter == "torchscript"
                else _constants.ONNX_MAX_OPSET)
    except (ImportError, AttributeError):
        high = 20 if exporter == "torchscript" else 23
    return MIN_OPSET[exporter], min(int(high), ATTENTION_OP_OPSET - 1)


def check_opset(exporter: str, opset: int) -> None:
    if exporter not in EXPORTERS:
        raise UserError(f"exporter must be one of {', '.join(EXPORTERS)}, got {exporter!r}")
    low, high = opset_range(exporter)
    if not low <= opset <= high:
        why = (f" (from {ATTENTION_OP_OPSET} on it writes ONNX's Attention op, whose onnxruntime kernel refuses "
               "ALBERT's padding mask)" if exporter == "dynamo" and opset >= ATTENTION_OP_OPSET else "")
        raise UserError(f"--opset {opset}: the {exporter} exporter writes opsets {low} to {high} with this torch"
                        f"{why}")
EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf's 2 GB limit: bigger models keep their weights in a .data file


def require_onnx():
    try:
        import onnx
        import onnxruntime  # noqa: F401
    except ImportError as exc:   # which one is missing: a build machine with onnx alone was told only "the extra"
        missing = f"{exc.name} is not installed; " if exc.name in ("onnx", "onnxruntime") else ""
        raise UserError(f"ONNX export needs the onnx extra ({missing}pip install 'albertlm[onnx]')") from None
    return onnx


class _Outputs(nn.Module):
    """The model with a fixed signature (input_ids, attention_mask, token_type_ids) -> tuple of tensors."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> tuple[Tensor, ...]:
        out = self.model(input_ids, attention_mask, token_type_ids)
        return tuple(out[name] for name in self.names)


def output_names(model: nn.Module) -> tuple[str, ...]:
    name = type(model).__name__
    if name == "AlbertForSquadV2":
        from albertlm.interop.hf import SQUAD_V2_REFUSAL

        raise UserError(SQUAD_V2_REFUSAL.format(target="to ONNX", what="its beam (the end logits of each of the "
                                                "top starts) has no ONNX export here, nor a transformers class "
                                                "for the serving directory", encoder="`albertlm export onnx DIR "
                                                "--encoder`"))
    if name not in OUTPUTS:
        raise UserError(f"cannot export {name} to ONNX (one of {', '.join(OUTPUTS)})")
    if name == "AlbertModel" and model.pooler is None:
        return ("last_hidden_state",)
    return OUTPUTS[name]


@contextlib.contextmanager
def plain_model_ops(model: nn.Module) -> Iterator[None]:
    """Inside, `model` runs plain PyTorch ops (its CPU fast paths, if any, removed and then restored)."""
    from albertlm.model.fast_paths import fast_path_dtype, remove_fast_paths, swap_in

    dtype = fast_path_dtype(model)
    remove_fast_paths(model)
    try:
        yield
    finally:
        if dtype is not None:
            swap_in(model, dtype)


def example_inputs(model: nn.Module, batch: int = 2, length: int = 16, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Random ids with the last row padded and a second segment: every branch the graph needs."""
    cfg = model.config
    length = min(length, cfg.max_position_embeddings)
    g = torch.Generator().manual_seed(seed)
    shape = (batch, 3, length) if type(model).__name__ == "AlbertForMultipleChoice" else (batch, length)
    ids = torch.randint(min(5, cfg.vocab_size - 1), cfg.vocab_size, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    mask[-1, ..., length * 2 // 3:] = 0
    types = torch.zeros(shape, dtype=torch.long)
    if cfg.type_vocab_size > 1:   # a model of one segment type has no id 1 (its embedding refuses it)
        types[..., length // 2:] = 1
    return ids, mask * 1, types * mask


def model_metadata(model: nn.Module) -> dict[str, str]:
    """What serving needs to know of `model` and its graph does not say: its class, how long an input may be,
    the id ranges and the padding id (the file's metadata_props, all strings)."""
    cfg = model.config
    out = {"architecture": type(model).__name__, "max_position_embeddings": cfg.max_position_embeddings,
           "vocab_size": cfg.vocab_size, "type_vocab_size": cfg.type_vocab_size, "pad_token_id": cfg.pad_token_id}
    if type(model).__name__ in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
        out["num_labels"] = cfg.num_labels
    return {key: str(value) for key, value in out.items()}


def onnx_metadata(path: str | Path) -> dict[str, str]:
    """The metadata_props of an exported file (what `export_onnx` and `albertlm export onnx` wrote)."""
    onnx = require_onnx()
    return {entry.key: entry.value for entry in onnx.load(str(path), load_external_data=False).metadata_props}


def export_onnx(model: nn.Module, path: str | Path, *, exporter: str = "torchscript", opset: int = OPSET,
                metadata: dict[str, str] | None = None) -> dict:
    """Write `model` (traced in eval mode, on CPU, fp32; its own mode, device and dtype are left as they were) to
    `path`, with `model_metadata(model)` and `metadata` (string keys and values) as the file's metadata_props;
    returns {"outputs", "initializers", "merged_initializers", "bytes"}."""
    onnx = require_onnx()
    check_opset(exporter, opset)
    names = output_names(model)
    metadata = {**model_metadata(model), **{str(k): str(v) for k, v in (metadata or {}).items()}}
    was_training = model.training
    placed = {(t.device, t.dtype) for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    if len(placed) > 1:   # mixed placement: cannot be put back as it was, so export a copy
        import copy

        model, placed = copy.deepcopy(model), set()
    model = model.eval().float().cpu()
    try:
        return _export(onnx, model, names, path, exporter, opset, metadata)
    finally:
        model.train(was_training)
        if placed:        # the caller's model goes back where it was (a bf16 model on a GPU stayed fp32 on CPU)
            device, dtype = placed.pop()
            model.to(device=device, dtype=dtype)


def _export(onnx, model: nn.Module, names, path, exporter: str, opset: int, metadata: dict[str, str]) -> dict:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = example_inputs(model)
    axes = {0: BATCH, 1: CHOICES, 2: SEQUENCE} if args[0].dim() == 3 else {0: BATCH, 1: SEQUENCE}
    wrapper = _Outputs(model, names).eval()  # the exporter restores the wrapper's mode, and so the model's, after
    with plain_model_ops(model), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        if exporter == "torchscript":
            dynamic = {**{n: axes for n in INPUTS}, **{n: output_axes(model, n) for n in names}}
            torch.onnx.export(wrapper, args, str(path), input_names=list(INPUTS), output_names=list(names),
                              dynamic_axes=dynamic, opset_version=opset, do_constant_folding=True, dynamo=False)
        else:
            _export_dynamo(wrapper, args, path, names, axes, opset)
    proto = onnx.load(str(path))
    merged = finish_graph(proto)
    onnx.helper.set_model_props(proto, metadata)
    _save(proto, path)
    return {"outputs": names, "initializers": len(proto.graph.initializer), "merged_initializers": merged,
            "bytes": _size(path)}


def output_axes(model: nn.Module, output: str) -> dict[int, str]:
    """The dynamic axes of an output: batch, plus sequence (per-token outputs) or choices."""
    kind = type(model).__name__
    if output in ("pooler_output", "sop_logits") or (output == "logits" and kind == "AlbertForSequenceClassification"):
        return {0: BATCH}
    if kind == "AlbertForMultipleChoice":
        return {0: BATCH, 1: CHOICES}
    return {0: BATCH, 1: SEQUENCE}


def _export_dynamo(wrapper: nn.Module, args, path: Path, names, axes: dict, opset: int) -> None:
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise UserError("--exporter dynamo needs onnxscript: pip install 'albertlm[onnx]'") from None
    dims = {k: torch.export.Dim(v, max=wrapper.model.config.max_position_embeddings) if v == SEQUENCE
            else torch.export.Dim(v) for k, v in axes.items()}
    shapes = {name: dims for name in INPUTS}
    # torch.onnx logs "torchvision is not installed. Skipping torchvision::nms" (and roi_align, ...) on stderr at
    # every export: four lines of torch's own format about a package this model never uses
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        program = torch.onnx.export(wrapper, args, input_names=list(INPUTS), output_names=list(names),
                                    dynamic_shapes=shapes, opset_version=opset, dynamo=True, verbose=False,
                                    optimize=True)
    finally:
        logger.setLevel(level)
    program.save(str(path), external_data=False)


def finish_graph(proto) -> int:
    """Drop the exporter's per-node metadata (stack traces: more bytes than a small model's weights) and
    merge identical initializers; returns how many were merged away."""
    for node in proto.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    bypass_initializer_identities(proto)
    return merge_duplicate_initializers(proto)


def bypass_initializer_identities(proto) -> int:
    """Nodes read a shared weight directly instead of through `Identity(weight)`, which the TorchScript
    exporter puts in front of every reuse of an initializer (and which hides the weight from
    onnxruntime's quantizer). Returns the Identity nodes removed."""
    initializers = {init.name for init in proto.graph.initializer}
    outputs = {o.name for o in proto.graph.output}
    alias = {n.output[0]: n.input[0] for n in proto.graph.node
             if n.op_type == "Identity" and n.input[0] in initializers and n.output[0] not in outputs}
    if not alias:
        return 0
    keep = [n for n in proto.graph.node if not (n.op_type == "Identity" and n.output[0] in alias)]
    for node in keep:
        for k, name in enumerate(node.input):
            if name in alias:
                node.input[k] = alias[name]
    del proto.graph.node[:]
    proto.graph.node.extend(keep)
    return len(alias)


def merge_duplicate_initializers(proto) -> int:
    """Initializers with the same dtype, shape and bytes become one (inputs re-pointed): a shared layer's
    weight, or a transposed copy of it made per use, is stored once."""
    from onnx import numpy_helper

    first: dict[tuple, str] = {}
    rename: dict[str, str] = {}
    keep = []
    for init in proto.graph.initializer:
        data = numpy_helper.to_array(init)
        key = (init.data_type, tuple(init.dims), hashlib.sha256(data.tobytes()).hexdigest())
        if key in first:
            rename[init.name] = first[key]
        else:
            first[key] = init.name
            keep.append(init)
    if rename:
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(keep)
        for node in proto.graph.node:
            for k, name in enumerate(node.input):
                if name in rename:
                    node.input[k] = rename[name]
    return len(rename)


def _save(proto, path: Path) -> bool:
    """Write `proto` to `path`, its weights in `path`.data when they pass EXTERNAL_DATA_BYTES; returns whether."""
    import onnx

    big = sum(len(i.raw_data) for i in proto.graph.initializer) > EXTERNAL_DATA_BYTES
    onnx.save_model(proto, str(path), save_as_external_data=big, all_tensors_to_one_file=True,
                    location=path.name + ".data" if big else None)
    return big


def _size(path: Path) -> int:
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.is_file() else 0)


def onnx_session(path: str | Path, threads: int = 0, quiet: bool = False):
    """An onnxruntime CPU session of `path`; `quiet`: its errors are not logged (the caller says them)."""
    require_onnx()
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.log_severity_level = 4 if quiet else 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_onnxruntime(path: str | Path, names, feeds: dict) -> list:
    """onnxruntime's outputs `names` of the file at `path` for `feeds`; a file onnxruntime cannot load or run is a
    UserError of one line (its own message is a C++ stack of a line, logged on stderr besides)."""
    require_onnx()
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

    failures = tuple(value for value in vars(ort_errors).values()
                     if isinstance(value, type) and issubclass(value, Exception))
    try:
        session = onnx_session(path, quiet=True)
        return session.run(list(names), feeds)
    except failures as exc:
        said = str(exc).split(" Status Message:")[0].strip()
        raise UserError(f"onnxruntime cannot run {path}: {said}") from None


def compare_with_onnxruntime(model: nn.Module, path: str | Path, batch: int = 3, length: int = 37,
                             seed: int = 1) -> dict[str, float]:
    """max |PyTorch - onnxruntime| per output on fresh inputs of another batch size and length than the
    export's example (so the dynamic axes are exercised), with padding and two segments. NaN where either side
    is NaN (`check_with_onnxruntime` says which)."""
    return check_with_onnxruntime(model, path, batch, length, seed)[0]


def check_with_onnxruntime(model: nn.Module, path: str | Path, batch: int = 3, length: int = 37,
                           seed: int = 1) -> tuple[dict[str, float], dict[str, str]]:
    """(`compare_with_onnxruntime`'s differences, the outputs holding NaN or inf on those inputs: {name: "PyTorch"
    (the model's own, which the file serves as they are: NaN or inf weights, an overflow), "onnxruntime" (where
    PyTorch's are finite) or "both"}). A NaN difference is no number to compare with a tolerance: `max` over the
    differences skips a NaN after the first output, and the command's check passed a file whose end_logits were NaN."""
    names = output_names(model)
    args = example_inputs(model, batch, length, seed)
    got = run_onnxruntime(path, names, {k: v.numpy() for k, v in zip(INPUTS, args)})
    was_training = model.training
    with torch.no_grad():
        expected = _Outputs(model.eval(), names)(*args)
    model.train(was_training)
    diffs, broken = {}, {}
    for name, ours, theirs in zip(names, expected, got):
        theirs = torch.from_numpy(theirs)
        diffs[name] = float((theirs - ours).abs().max())
        bad = (not bool(torch.isfinite(ours).all()), not bool(torch.isfinite(theirs).all()))
        if any(bad):
            broken[name] = "both" if all(bad) else "PyTorch" if bad[0] else "onnxruntime"
    return diffs, broken


def quantize_int8(path: str | Path, out: str | Path) -> dict:
    """Dynamic int8 quantisation (onnxruntime.quantization.quantize_dynamic): int8 weights for MatMul/Gemm
    (and the embedding Gathers), activations quantised at run time.

    onnxruntime's quantizer converts only the first node that uses a shared weight and leaves the other
    layers' MatMuls in fp32 (keeping both copies), so each use first gets its own copy of the weight; the
    identical int8 copies that come out are then merged back into one (`merge_duplicate_initializers`):
    every layer runs in int8 and each shared weight is still stored once."""
    onnx = require_onnx()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = Path(out)
    untied = out.with_name(out.name + ".untied.tmp")
    proto = onnx.load(str(path))
    untie_shared_initializers(proto)
    # the untied copy of a big all-shared model (albert-xlarge: ~5 GB, one copy of the layer per use) and
    # quantize_dynamic's unmerged int8 result can pass protobuf's 2 GB: both then keep their weights in a .data file
    big = _save(proto, untied)
    try:
        disabled = logging.root.manager.disable
        logging.disable(logging.WARNING)   # its "consider pre-processing" advice, through the root logger
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(str(untied), str(out), weight_type=QuantType.QInt8, use_external_data_format=big)
        finally:
            logging.disable(disabled)
    finally:
        for leftover in (untied, untied.with_name(untied.name + ".data")):
            leftover.unlink(missing_ok=True)
    proto = onnx.load(str(out))       # its .data file read in: the merged model is written anew below
    out.with_name(out.name + ".data").unlink(missing_ok=True)
    merged = merge_duplicate_initializers(proto)
    _drop_unused_initializers(proto)
    _save(proto, out)
    return {"bytes": _size(out), "merged_initializers": merged,
            "int8_matmuls": sum(n.op_type in ("MatMulInteger", "QGemm") for n in proto.graph.node),
            "fp32_matmuls": sum(n.op_type in ("MatMul", "Gemm") for n in proto.graph.node)}


def untie_shared_initializers(proto) -> int:
    """Give every node its own copy of an initializer that several nodes read; returns the copies made."""
    by_name = {init.name: init for init in proto.graph.initializer}
    seen: dict[str, int] = {}
    copies = 0
    for node in proto.graph.node:
        for k, name in enumerate(node.input):
            if name not in by_name:
                continue
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                copy = proto.graph.initializer.add()
                copy.CopyFrom(by_name[name])
                copy.name = f"{name}__use{seen[name]}"
                node.input[k] = copy.name
                copies += 1
    return copies


def convert_fp16(path: str | Path, out: str | Path) -> dict:
    """A float16 copy of an exported file (onnxruntime.transformers.float16, as optimum's fp16 optimisation):
    weights and compute in float16, the int64 inputs as they were and the outputs cast back to float32
    (`keep_io_types`), so serving code written for the fp32 file reads it unchanged. Made for GPUs (CUDA, WebGPU);
    onnxruntime's CPU provider runs it too, with casts around the ops it has no float16 kernel for. Constants past
    float16's range (the attention mask's large negative fill) are clamped to it. The metadata is kept, with
    `dtype` float16 added."""
    onnx = require_onnx()
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = onnx.load(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # its "values clamped to float16's range" notes
        proto = convert_float_to_float16(proto, keep_io_types=True, disable_shape_infer=True)
    merged = merge_duplicate_initializers(proto)
    meta = {entry.key: entry.value for entry in proto.metadata_props}
    onnx.helper.set_model_props(proto, {**meta, "dtype": "float16"})
    out = Path(out)
    _save(proto, out)
    return {"bytes": _size(out), "merged_initializers": merged}


def masked_lm_of(model: nn.Module) -> nn.Module:
    """An `AlbertForPreTraining`'s masked-LM half as an `AlbertForMaskedLM` (same weights, no pooler, no SOP head):
    what fill-mask servers (optimum's ORTModelForMaskedLM, transformers.js) load, `logits` (B, T, V). Another class
    is returned as it is."""
    if type(model).__name__ != "AlbertForPreTraining":
        return model
    from albertlm.model.heads import AlbertForMaskedLM

    mlm = AlbertForMaskedLM(model.config)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith(("sop_head.", "albert.pooler."))}
    mlm.load_state_dict(state)
    first = next(model.parameters())
    return mlm.to(device=first.device, dtype=first.dtype).train(model.training)


def _drop_unused_initializers(proto) -> None:
    used = {name for node in proto.graph.node for name in node.input} | {o.name for o in proto.graph.output}
    keep = [init for init in proto.graph.initializer if init.name in used]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(keep)
