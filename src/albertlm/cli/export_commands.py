"""`albertlm export onnx MODEL --out model.onnx`: a thin wrapper over `albertlm.interop.onnx`.

    albertlm export onnx runs/rte/best --out rte.onnx                 # the fine-tuned head the checkpoint holds
    albertlm export onnx runs/base --out encoder.onnx --encoder       # the backbone only (hidden states, pooled)
    albertlm export onnx runs/rte/best --out rte.onnx --quantize int8 # also rte.int8.onnx
    albertlm export onnx albert_base/ --out albert.onnx               # google's TF checkpoint, read as convert does
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="target", required=True, metavar="{onnx}")
    p = sub.add_parser("onnx", help="ONNX for ONNX Runtime: dynamic batch/sequence axes, shared weights stored once")
    p.add_argument("model", metavar="MODEL", help="model directory (ours or transformers'), a run directory, or a "
                   "google-research TF checkpoint (as `albertlm convert` takes it, albert_config.json beside it)")
    p.add_argument("--out", required=True, metavar="FILE.onnx", help="output file")
    p.add_argument("--encoder", action="store_true",
                   help="export the backbone only (last_hidden_state, pooler_output), whatever head it has")
    p.add_argument("--quantize", choices=("none", "int8"), default="none",
                   help="also write FILE.int8.onnx with int8 dynamic quantisation of the matmul weights")
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                   help="torch.onnx's TorchScript exporter (fast) or the torch.export-based one")
    p.add_argument("--opset", type=int, default=18,
                   help="ONNX opset (default 18; torchscript: 14 to 20, dynamo: 18 and up, as this torch allows)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime-vs-PyTorch check")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file (and FILE.int8.onnx with --quantize int8)")


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.cli.infer_commands import make_parent
    from albertlm.errors import UserError
    from albertlm.interop import onnx as onnx_export
    from albertlm.tasks.inference import resolve_checkpoint

    onnx_export.require_onnx()
    onnx_export.check_opset(args.exporter, args.opset)          # before anything is read
    tf_source = _is_tf_checkpoint(Path(args.model))
    model_dir = Path(args.model) if tf_source else resolve_checkpoint(args.model)
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise UserError(f"--out {out}: the file name must end in .onnx")
    quantized = out.with_suffix(".int8.onnx") if args.quantize == "int8" else None
    _check_outputs([out] + ([quantized] if quantized else []), args.overwrite)   # before the model is loaded
    make_parent(out, "--out")
    lines, warning = [], None
    if tf_source:   # google's checkpoint read as convert reads it; what the import did is said first
        model, notes = _load_tf(model_dir, args.encoder)
        lines += notes
    else:
        model = _load(model_dir, args.encoder)
    metadata, tokenizer = ({}, None) if tf_source else serving_metadata(model_dir, model)
    # written in a staging directory beside --out and moved into place once complete: a failed export
    # leaves an existing file as it was
    with _staging(out.parent) as staging:
        tmp = staging / out.name
        report = onnx_export.export_onnx(model, tmp, exporter=args.exporter, opset=args.opset, metadata=metadata)
        lines.append(f"exported {type(model).__name__} from {model_dir} to {out} ({report['bytes'] / 1e6:.1f} MB, "
                     f"{report['initializers']} initializers, outputs: {', '.join(report['outputs'])})")
        lines.append(_serving_line(metadata, model, tokenizer, tf_source))
        if not args.no_verify:
            diffs = onnx_export.compare_with_onnxruntime(model, tmp)
            lines.append("onnxruntime vs PyTorch, max abs difference: "
                         + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
            if max(diffs.values()) > 1e-3:
                warning = "albertlm export: warning: the ONNX outputs differ from PyTorch by more than 1e-3"
        if quantized is not None:
            size = onnx_export.quantize_int8(tmp, staging / quantized.name)["bytes"]
            lines.append(f"int8 dynamic quantisation: {quantized} ({size / 1e6:.1f} MB); measure its accuracy on "
                         "your dev set (docs/interop.md has our SST-2 numbers)")
        for name in _written(out, quantized):
            _remove_stale(out.parent / name, staging / name)
        for path in sorted(staging.iterdir()):
            os.replace(path, out.parent / path.name)
    for line in lines:
        print(line)
    if warning:
        print(warning, file=sys.stderr)
    return 0


def serving_metadata(model_dir: Path, model) -> tuple[dict[str, str], Path | None]:
    """(what `albertlm export onnx` adds to the file's metadata, the directory of the tokenizer files) from the
    checkpoint's directory: the fine-tuning's family, task, label names (id2label, as transformers writes it) or
    regression, and max_seq_length (task.json, a run's checkpoints/step_N's run_config.json, a transformers
    tokenizer_config.json's model_max_length), and the names of the tokenizer files a server needs beside the
    .onnx (`tokenizer_files`; their directory is printed, not stored: a local path means nothing on a server)."""
    import json

    from albertlm.errors import json_object_or_empty
    from albertlm.interop.hf import read_labels
    from albertlm.tokenization.load import find_tokenizer

    info = json_object_or_empty(model_dir / "task.json")
    if not info and model_dir.parent.name == "checkpoints":   # a fine-tuning run's step: its saved settings
        saved = json_object_or_empty(model_dir / "run_config.json")
        info = saved if saved.get("family") else {}
    meta: dict[str, str] = {}
    head = type(model).__name__ != "AlbertModel"   # --encoder: the task's head and labels are not in the file
    if head:
        meta.update({key: info[key] for key in ("family", "task") if isinstance(info.get(key), str)})
    length = info.get("max_seq_length")
    if not isinstance(length, int):
        length = json_object_or_empty(model_dir / "tokenizer_config.json").get("model_max_length")
    if isinstance(length, int) and 0 < length <= model.config.max_position_embeddings:
        meta["max_seq_length"] = str(length)
    if type(model).__name__ in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
        labels = info.get("labels")
        recorded = read_labels(model_dir)
        if isinstance(labels, list) and labels:
            meta["id2label"] = json.dumps({str(i): str(name) for i, name in enumerate(labels)}, ensure_ascii=False)
            recorded["problem_type"] = "single_label_classification"
        elif recorded.get("id2label"):
            meta["id2label"] = json.dumps(recorded["id2label"], ensure_ascii=False)
        one_score = type(model).__name__ == "AlbertForSequenceClassification" and model.config.num_labels == 1
        problem = "regression" if info.get("regression") or one_score else recorded.get("problem_type")
        if problem:
            meta["problem_type"] = problem
    tokenizer = find_tokenizer(model_dir)
    if tokenizer is None and info and model_dir.parent.name == "checkpoints":   # a fine-tuning step: its run's own
        tokenizer = find_tokenizer(model_dir.parent.parent / "best")
    if tokenizer is not None:
        files = ([tokenizer.name] if tokenizer.is_file() else
                 sorted(p.name for p in tokenizer.iterdir() if p.name in TOKENIZER_FILES or p.suffix == ".model"))
        if files:
            meta["tokenizer_files"] = ",".join(files)
            tokenizer = tokenizer.parent if tokenizer.is_file() else tokenizer
    return meta, tokenizer if "tokenizer_files" in meta else None


TOKENIZER_FILES = ("spiece.model", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _serving_line(metadata: dict[str, str], model, tokenizer: Path | None, tf_source: bool = False) -> str:
    """What serving needs that the graph does not hold: input length, labels (both in the file's metadata) and
    the tokenizer files to ship beside it."""
    said = [f"int64 input_ids, attention_mask, token_type_ids of at most "
            f"{metadata.get('max_seq_length', model.config.max_position_embeddings)} tokens"]
    if "id2label" in metadata:
        import json

        said.append("labels " + ", ".join(json.loads(metadata["id2label"]).values()))
    if tokenizer is not None:
        said.append(f"no tokenizer inside: ship {metadata['tokenizer_files'].replace(',', ', ')} from {tokenizer} "
                    "beside it")
    elif tf_source:
        said.append("no tokenizer inside: ship the checkpoint's SentencePiece model (30k-clean.model) beside it")
    else:
        said.append("no tokenizer inside, and none found beside the checkpoint")
    return f"serving: {'; '.join(said)} (in the file's metadata too)"


def _written(out, quantized) -> list[str]:
    """Every file a model may be written as: FILE, and FILE.data when its weights are over protobuf's limit."""
    names = [out.name, out.name + ".data"]
    if quantized is not None:
        names += [quantized.name, quantized.name + ".data"]
    return names


def _check_outputs(paths, overwrite: bool) -> None:
    from albertlm.errors import UserError

    for path in paths:
        for each in (path, path.with_name(path.name + ".data")):
            if each.is_dir():
                raise UserError(f"--out: {each} is a directory")
            if each.exists() and not overwrite:
                raise UserError(f"--out: {each} already exists; pass --overwrite to replace it, or another --out")


def _remove_stale(old, new) -> None:
    """--overwrite: a FILE.data the new export does not write (an earlier, bigger model's) would be stale."""
    if old.is_file() and not new.exists():
        old.unlink()


@contextlib.contextmanager
def _staging(parent):
    import shutil
    import tempfile

    from albertlm.errors import UserError

    try:
        staging = Path(tempfile.mkdtemp(prefix=".tmp-export-", dir=parent))
    except OSError as exc:
        raise UserError(f"--out: cannot write in {parent} ({exc.strerror or exc})") from None
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _is_tf_checkpoint(path: Path) -> bool:
    """Whether MODEL is a google-research TF checkpoint as `albertlm convert` detects one (no config.json; a prefix,
    one of its files, a directory holding a `*.index`, a TF-Hub module). It was refused as "not a model directory"."""
    from albertlm.cli.convert_commands import detect_format
    from albertlm.errors import UserError

    if (path / "config.json").is_file():
        return False
    try:
        return detect_format(path) == "tf"
    except UserError:   # not a TF checkpoint: resolve_checkpoint says what it is not
        return False


def _load_tf(path: Path, encoder: bool):
    """(model, the import's report lines) of a TF checkpoint; --encoder: its backbone, with the trained pooler where
    the checkpoint has one (google's QA model has none)."""
    from albertlm.interop.tf import import_tf_checkpoint

    model, report = import_tf_checkpoint(path)
    if encoder and hasattr(model, "albert"):
        model = model.albert
    return model, report.lines()


def _load(model_dir, encoder: bool):
    from albertlm.interop.hf import import_hf
    from albertlm.model.io import load_backbone, read_config
    from albertlm.model.registry import load_saved_model, saved_class_name

    # --encoder: the backbone with its trained pooler, or without one (last_hidden_state only) where the
    # checkpoint has none: a pooler made up at load time exported random pooler_output values
    if encoder or saved_class_name(model_dir) == "AlbertModel":
        return load_backbone(model_dir)
    if read_config(model_dir)[1]:  # a transformers directory: the class its `architectures` names
        return import_hf(model_dir)
    return load_saved_model(model_dir)
