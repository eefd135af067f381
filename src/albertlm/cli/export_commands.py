"""`albertlm export onnx MODEL --out model.onnx`: a thin wrapper over `albertlm.interop.onnx`.

    albertlm export onnx runs/rte/best --out rte.onnx                 # the fine-tuned head the checkpoint holds
    albertlm export onnx runs/base --out encoder.onnx --encoder       # the backbone only (hidden states, pooled)
    albertlm export onnx runs/rte/best --out rte.onnx --quantize int8 # also rte.int8.onnx
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="target", required=True, metavar="{onnx}")
    p = sub.add_parser("onnx", help="ONNX for ONNX Runtime: dynamic batch/sequence axes, shared weights stored once")
    p.add_argument("model", metavar="MODEL", help="model directory (ours or transformers') or a run directory")
    p.add_argument("--out", required=True, metavar="FILE.onnx", help="output file")
    p.add_argument("--encoder", action="store_true",
                   help="export the backbone only (last_hidden_state, pooler_output), whatever head it has")
    p.add_argument("--quantize", choices=("none", "int8"), default="none",
                   help="also write FILE.int8.onnx with int8 dynamic quantisation of the matmul weights")
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                   help="torch.onnx's TorchScript exporter (fast) or the torch.export-based one")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime-vs-PyTorch check")


def run(args: argparse.Namespace, command: str) -> int:
    from pathlib import Path

    from albertlm.errors import UserError
    from albertlm.interop import onnx as onnx_export
    from albertlm.tasks.inference import resolve_checkpoint

    onnx_export.require_onnx()
    model_dir = resolve_checkpoint(args.model)
    model = _load(model_dir, args.encoder)
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise UserError(f"--out {out}: the file name must end in .onnx")
    report = onnx_export.export_onnx(model, out, exporter=args.exporter, opset=args.opset)
    print(f"exported {type(model).__name__} from {model_dir} to {out} ({report['bytes'] / 1e6:.1f} MB, "
          f"{report['initializers']} initializers, outputs: {', '.join(report['outputs'])})")
    if not args.no_verify:
        diffs = onnx_export.compare_with_onnxruntime(model, out)
        print("onnxruntime vs PyTorch, max abs difference: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
        if max(diffs.values()) > 1e-3:
            print("albertlm export: warning: the ONNX outputs differ from PyTorch by more than 1e-3", file=sys.stderr)
    if args.quantize == "int8":
        quantized = out.with_suffix(".int8.onnx")
        size = onnx_export.quantize_int8(out, quantized)["bytes"]
        print(f"int8 dynamic quantisation: {quantized} ({size / 1e6:.1f} MB); measure its accuracy on your dev set "
              "(docs/interop.md has our SST-2 numbers)")
    return 0


def _load(model_dir, encoder: bool):
    from albertlm.interop.hf import import_hf
    from albertlm.model.albert import AlbertModel
    from albertlm.model.io import read_config
    from albertlm.model.registry import load_saved_model

    if encoder:
        return AlbertModel.from_pretrained(model_dir)
    if read_config(model_dir)[1]:  # a transformers directory: the class its `architectures` names
        return import_hf(model_dir)
    return load_saved_model(model_dir)
