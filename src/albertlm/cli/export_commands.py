"""`albertlm export onnx MODEL --out model.onnx`: a thin wrapper over `albertlm.interop.onnx`.

    albertlm export onnx runs/rte/best --out rte.onnx                 # the fine-tuned head the checkpoint holds
    albertlm export onnx runs/base --out encoder.onnx --encoder       # the backbone only (hidden states, pooled)
    albertlm export onnx runs/rte/best --out rte.onnx --quantize int8 # also rte.int8.onnx
    albertlm export onnx albert_base/ --out albert.onnx               # google's TF checkpoint, read as convert does
    albertlm export onnx mrpc_out/ --out mrpc.onnx --config albert_base/albert_config.json  # a run_classifier.py
    albertlm export onnx runs/rte/best --out rte-onnx/ --fp16         # a serving directory (optimum, transformers.js)

--out FILE.onnx writes that file (and FILE.int8.onnx / FILE.fp16.onnx); any other --out is a directory that
optimum's ORTModelFor*.from_pretrained and transformers.js load as they are: onnx/model.onnx (+ model_quantized.onnx,
model_fp16.onnx), config.json (transformers' AlbertConfig: model_type, architectures, id2label) and the tokenizer
files (tokenizer.json, tokenizer_config.json, spiece.model / vocab.txt).
"""
from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path


# the serving directory's layout: transformers.js reads onnx/model{,_quantized,_fp16}.onnx by default, and
# optimum's ORTModel finds onnx/model.onnx (it looks for the standard name model.onnx in any folder)
ONNX_FOLDER = "onnx"
DIRECTORY_MODELS = {"fp32": "model.onnx", "int8": "model_quantized.onnx", "fp16": "model_fp16.onnx"}
# optimum's class and transformers.js's pipeline task for each exported class (the serving line names them)
SERVING = {"AlbertModel": ("ORTModelForFeatureExtraction", "feature-extraction"),
           "AlbertForMaskedLM": ("ORTModelForMaskedLM", "fill-mask"),
           "AlbertForSequenceClassification": ("ORTModelForSequenceClassification", "text-classification"),
           "AlbertForTokenClassification": ("ORTModelForTokenClassification", "token-classification"),
           "AlbertForQuestionAnswering": ("ORTModelForQuestionAnswering", "question-answering"),
           "AlbertForMultipleChoice": ("ORTModelForMultipleChoice", None)}
# names a file was meant by: refused as --out rather than made into a directory of that name
FILE_SUFFIXES = (".data", ".bin", ".pt", ".pth", ".safetensors", ".json", ".txt", ".ort", ".onnx.data")


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="target", required=True, metavar="{onnx}")
    p = sub.add_parser("onnx", help="ONNX for ONNX Runtime: dynamic batch/sequence axes, shared weights stored once")
    _name_the_format_first(parser)
    p.add_argument("model", metavar="MODEL", help="model directory (ours or transformers'), a run directory, or a "
                   "google-research TF checkpoint (as `albertlm convert` takes it, albert_config.json beside it)")
    p.add_argument("--out", required=True, metavar="FILE.onnx|DIR",
                   help="a file name ending in .onnx: that file; anything else: a serving directory (made if "
                        "missing) holding onnx/model.onnx, config.json and the tokenizer files, which optimum's "
                        "ORTModelFor*.from_pretrained and transformers.js load as they are")
    p.add_argument("--config", metavar="FILE", help="TF checkpoint: its albert_config.json where none is beside it "
                   "(run_classifier.py's --output_dir, a TF-Hub module), as `albertlm convert --config` takes it")
    p.add_argument("--tokenizer", metavar="PATH", help="the tokenizer to ship (a directory, spiece.model, vocab.txt "
                   "or tokenizer.json) instead of the one found beside MODEL")
    p.add_argument("--encoder", action="store_true",
                   help="export the backbone only (last_hidden_state, pooler_output), whatever head it has")
    p.add_argument("--quantize", choices=("none", "int8"), default="none",
                   help="also write FILE.int8.onnx (DIR/onnx/model_quantized.onnx) with int8 dynamic quantisation "
                        "of the matmul weights")
    p.add_argument("--fp16", action="store_true",
                   help="also write FILE.fp16.onnx (DIR/onnx/model_fp16.onnx): float16 weights and compute for GPUs, "
                        "the same int64 inputs and float32 outputs")
    p.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                   help="torch.onnx's TorchScript exporter (fast) or the torch.export-based one")
    p.add_argument("--opset", type=int, default=18, metavar="N",
                   help="ONNX opset (default 18; torchscript: 14 to 20, dynamo: 18 to 22, as this torch allows; "
                        "dynamo's 23 and up write an Attention op onnxruntime cannot run here)")
    p.add_argument("--no-verify", action="store_true", help="skip the onnxruntime-vs-PyTorch check")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file (an earlier FILE.int8.onnx / FILE.fp16.onnx too: replaced "
                        "when asked for, else removed), or the files of an earlier export in --out DIR")


def _name_the_format_first(parser: argparse.ArgumentParser) -> None:
    """`albertlm export --out m.onnx MODEL` (no `onnx`) said "argument {onnx}: invalid choice: 'm.onnx'": the
    error now says what the command looks like."""
    error = parser.error

    def named(message: str):
        if message.startswith("argument {onnx}: invalid choice") or message.endswith("required: {onnx}"):
            message = ("name the format first: albertlm export onnx MODEL --out FILE.onnx (or --out DIR); "
                       + message.split(": ", 1)[1])
        error(message)

    parser.error = named


def run(args: argparse.Namespace, command: str) -> int:
    from albertlm.cli.infer_commands import make_parent, remove_if_empty
    from albertlm.interop import onnx as onnx_export
    from albertlm.tasks.inference import resolve_checkpoint

    onnx_export.require_onnx()
    onnx_export.check_opset(args.exporter, args.opset)          # before anything is read
    out = Path(args.out)
    directory = _is_directory_out(args.out)
    tokenizer_given = _given_tokenizer(args.tokenizer)
    tf_source = _is_tf_checkpoint(Path(args.model))
    if args.config is not None and not tf_source:
        from albertlm.errors import UserError

        raise UserError("--config is only for TF checkpoints (other formats carry config.json)")
    model_dir = Path(args.model) if tf_source else resolve_checkpoint(args.model)
    names = _output_names(out, directory, args.quantize == "int8", args.fp16)
    if directory:
        _check_directory(out, model_dir, names, args.overwrite)
    else:
        _check_outputs([out.parent / n for n in names.values()], args.overwrite)
    # its folder, where the staging folder goes: before the model is loaded, one line; the folders made for it are
    # removed again when the export fails or is stopped (they were left behind, empty)
    made = make_parent(out, "--out")
    try:
        return _export(args, out, directory, names, model_dir, tf_source, tokenizer_given)
    except BaseException:
        remove_if_empty(made)
        raise


def _export(args: argparse.Namespace, out: Path, directory: bool, names: dict[str, str], model_dir: Path,
            tf_source: bool, tokenizer_given: Path | None) -> int:
    from albertlm.errors import say_warning
    from albertlm.interop import onnx as onnx_export

    lines, warnings_ = [], []
    if tf_source:   # google's checkpoint read as convert reads it; what the import did is said first
        model, notes = _load_tf(model_dir, args.encoder, args.config)
        lines += notes
    else:
        model = _load(model_dir, args.encoder)
    loaded = type(model).__name__
    if directory:   # what a fill-mask server loads: no ORTModel or transformers.js class takes the SOP output
        model = onnx_export.masked_lm_of(model)
        _check_config_expressible(model, out)
    metadata, tokenizer = serving_metadata(model_dir, model, tf_source, tokenizer_given)
    # written in a staging directory beside --out (inside an existing --out DIR: `_staging_parent`) and moved into
    # place once complete: a failed export leaves existing files as they were
    with _staging(_staging_parent(out, directory)) as staging:
        try:
            files = {kind: staging / name for kind, name in names.items()}
            files["fp32"].parent.mkdir(parents=True, exist_ok=True)
            report = onnx_export.export_onnx(model, files["fp32"], exporter=args.exporter, opset=args.opset,
                                             metadata=metadata)
            source = f"{loaded} from {model_dir}" + (f" (its masked-LM head, as {type(model).__name__})"
                                                     if loaded != type(model).__name__ else "")
            lines.append(f"exported {source} to {out / names['fp32'] if directory else out} "
                         f"({report['bytes'] / 1e6:.1f} MB, {report['initializers']} initializers, "
                         f"outputs: {', '.join(report['outputs'])})")
            if not args.no_verify:
                diffs, broken = _verify(model, files["fp32"], _shown(out, directory, names["fp32"]))
                lines.append("onnxruntime vs PyTorch, max abs difference: " + _differences(diffs))
                warnings_ += _not_finite(broken)
                # every output's (`max` over them skipped a NaN after the first); non-finite ones are said above
                if any(value > 1e-3 for name, value in diffs.items() if name not in broken):
                    warnings_.append("the ONNX outputs differ from PyTorch by more than 1e-3")
            if "int8" in files:
                size = onnx_export.quantize_int8(files["fp32"], files["int8"])["bytes"]
                lines.append(f"int8 dynamic quantisation: {_shown(out, directory, names['int8'])} ({size / 1e6:.1f} MB); "
                             "measure its accuracy on your dev set (docs/interop.md has our SST-2 numbers)")
            if "fp16" in files:
                size = onnx_export.convert_fp16(files["fp32"], files["fp16"])["bytes"]
                line = f"float16: {_shown(out, directory, names['fp16'])} ({size / 1e6:.1f} MB, float32 outputs)"
                if not args.no_verify:
                    diffs, broken = _verify(model, files["fp16"], _shown(out, directory, names["fp16"]))
                    line += "; onnxruntime (CPU) vs PyTorch fp32, max abs difference: " + _differences(diffs)
                    if "onnxruntime" in broken.values():   # PyTorch's own NaN or inf: said once, for the fp32 file
                        warnings_.append("the float16 outputs are not finite where PyTorch's are: values past "
                                         "float16's range (65504); serve the fp32 file")
                lines.append(line)
            if directory:
                lines += _write_serving_files(staging, model, model_dir, metadata, tokenizer, tokenizer_given,
                                              warnings_)
                lines.append(_serving_directory_line(out, model, staging, names))
            else:
                lines.append(_serving_line(metadata, model, tokenizer, tf_source))
        except OSError as exc:
            from albertlm.errors import UserError

            raise UserError(f"--out {out}: cannot write the export ({exc.strerror or exc})") from None
        target = out if directory else out.parent
        made = directory and not target.exists()
        try:
            if directory:
                target.mkdir(exist_ok=True)
            _install(staging, target, names, directory, args.overwrite)
        except BaseException:
            if made:   # the files were taken out again: nor is the folder made for them left behind
                with contextlib.suppress(OSError):
                    target.rmdir()
            raise
    for line in lines:
        print(line)
    for warning in warnings_:
        say_warning(warning.replace(str(staging), str(out)) if directory else warning)
    return 0


def _verify(model, path: Path, shown: Path) -> tuple[dict[str, float], dict[str, str]]:
    """`check_with_onnxruntime` of the staged file `path` (the differences, and the outputs that are not finite); a
    file onnxruntime cannot run is one line naming the file as --out gives it (the staging folder is gone by then),
    and nothing is written."""
    from albertlm.errors import UserError
    from albertlm.interop import onnx as onnx_export

    try:
        return onnx_export.check_with_onnxruntime(model, path)
    except UserError as exc:
        raise UserError(f"{str(exc).replace(str(path), str(shown))}; nothing was written (another --opset or "
                        "--exporter may export a graph it runs)") from None


def _not_finite(broken: dict[str, str]) -> list[str]:
    """The warnings for outputs holding NaN or inf at the check (`check_with_onnxruntime`'s second value). A
    checkpoint whose weights hold NaN (a diverged fine-tuning) exported without a word when the NaN output was not
    the first: the file serves NaN for every input."""
    said = []
    own = [name for name, side in broken.items() if side != "onnxruntime"]
    if own:
        said.append(f"PyTorch's own {', '.join(own)} {'is' if len(own) == 1 else 'are'} not finite (NaN or inf) on "
                    "the check's inputs: the checkpoint's weights hold NaN or inf (a diverged run?), or its "
                    "activations overflow; do not serve the file")
    runtime = [name for name, side in broken.items() if side == "onnxruntime"]
    if runtime:
        said.append(f"onnxruntime's {', '.join(runtime)} {'is' if len(runtime) == 1 else 'are'} not finite (NaN or "
                    "inf) where PyTorch's are finite; do not serve the file")
    return said


def _check_config_expressible(model, out: Path) -> None:
    """The serving directory's config.json is transformers' AlbertConfig, which shares attention and FFN together:
    a model sharing only one of them is refused before the export (its .onnx file alone exports)."""
    from albertlm.errors import UserError
    from albertlm.interop.hf import hf_export_config

    try:
        hf_export_config(model.config)
    except UserError as exc:
        raise UserError(f"--out {out}: the serving directory's config.json is transformers': {exc}; "
                        "export to a FILE.onnx instead") from None


def _differences(diffs: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())


def _shown(out: Path, directory: bool, name: str) -> Path:
    return out / name if directory else out.parent / name


def _is_directory_out(given: str) -> bool:
    """--out FILE.onnx (any case) is a file; anything else a serving directory, unless it names a file that is
    there or has a suffix a file was meant by (`--out model.bin`), which is one line. `FILE.onnx/` (a folder by
    its '/', a file by its suffix) is one line too: it wrote the file FILE.onnx without a word."""
    from albertlm.errors import UserError

    out = Path(given)
    if out.suffix.lower() == ".onnx":
        if given.rstrip(".").endswith(("/", os.sep)):   # `x.onnx/`, `x.onnx/.`: Path drops what makes it a folder
            raise UserError(f"--out {given}: a name ending in .onnx is the file to write, and the '/' after it "
                            f"names a folder; give {out} for the file, or a folder name without .onnx "
                            "for the serving directory")
        return False
    if out.is_file() or (out.exists() and not out.is_dir()):
        raise UserError(f"--out {out}: an existing file; give a file name ending in .onnx, or a directory")
    if not out.is_dir() and out.name.lower().endswith(FILE_SUFFIXES):
        raise UserError(f"--out {out}: give a file name ending in .onnx, or a directory (without a file suffix "
                        "such as this one) for the serving layout")
    return True


def _given_tokenizer(path: str | None) -> Path | None:
    from albertlm.errors import UserError

    if path is None:
        return None
    if not Path(path).exists():
        raise UserError(f"--tokenizer {path}: no such file or directory")
    return Path(path)


def _output_names(out: Path, directory: bool, int8: bool, fp16: bool) -> dict[str, str]:
    """{"fp32", "int8", "fp16": path relative to the directory the files go in (--out DIR, or FILE's folder)}."""
    if directory:
        names = {kind: f"{ONNX_FOLDER}/{name}" for kind, name in DIRECTORY_MODELS.items()}
    else:
        base = out.name[:-len(".onnx")]
        names = {"fp32": out.name, "int8": f"{base}.int8.onnx", "fp16": f"{base}.fp16.onnx"}
    return {k: v for k, v in names.items() if k == "fp32" or (k == "int8" and int8) or (k == "fp16" and fp16)}

def serving_metadata(model_dir: Path, model, tf_source: bool = False,
                     given: Path | None = None) -> tuple[dict[str, str], Path | None]:
    """(what `albertlm export onnx` adds to the file's metadata, the directory of the tokenizer files) from the
    checkpoint's directory: the fine-tuning's family, task, label names (id2label, as transformers writes it) or
    regression, and max_seq_length (task.json, a run's checkpoints/step_N's run_config.json, a transformers
    tokenizer_config.json's model_max_length), and the names of the tokenizer files a server needs beside the
    .onnx (`tokenizer_files`; their directory is printed, not stored: a local path means nothing on a server).
    `given`: --tokenizer, instead of the one found; a TF checkpoint (`tf_source`) gives only its tokenizer."""
    import json

    from albertlm.errors import json_object_or_empty
    from albertlm.interop.hf import read_labels
    from albertlm.model.io import fine_tuning_record
    from albertlm.tasks.inference import run_tokenizer
    from albertlm.tokenization.load import find_tokenizer

    if tf_source:   # google's tarball: 30k-clean.model beside the checkpoint (a prefix's folder)
        base = model_dir if model_dir.is_dir() else model_dir.parent
        # no labels or length in a TF checkpoint; a one-score classifier (run_classifier.py's STS-B) is a regression,
        # as the serving directory's config.json says (the .onnx's metadata said nothing)
        one_score = type(model).__name__ == "AlbertForSequenceClassification" and model.config.num_labels == 1
        return _tokenizer_files({"problem_type": "regression"} if one_score else {},
                                given if given is not None else find_tokenizer(base))
    info = fine_tuning_record(model_dir)   # task.json, or a fine-tuning run's step_N's saved settings
    meta: dict[str, str] = {}
    head = type(model).__name__ != "AlbertModel"   # --encoder: the task's head and labels are not in the file
    if head:
        meta.update({key: info[key] for key in ("family", "task") if isinstance(info.get(key), str)})
        meta.update(_task_settings(info))
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
    tokenizer = given if given is not None else find_tokenizer(model_dir)
    if tokenizer is None:   # a fine-tuning run's step_N holds none: the run's own (best/'s copy, or the recorded one)
        tokenizer = run_tokenizer(model_dir)
    return _tokenizer_files(meta, tokenizer)


def _task_settings(info: dict) -> dict[str, str]:
    """What a server must apply as `predict` does and the graph does not hold, from a fine-tuning's record: SQuAD's
    version, windows and answer limits, and v2.0's no-answer threshold the run tuned on dev (`predict` applies it:
    without it a server nulls by 0, other answers than the run's); RACE's question+option length."""
    import math

    def integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    out: dict[str, str] = {}
    if info.get("family") == "squad":
        version = str(info.get("version") or "")
        if version:
            out["squad_version"] = version
        settings = info.get("settings") if isinstance(info.get("settings"), dict) else {}
        out.update({key: str(settings[key]) for key in ("doc_stride", "max_query_length", "max_answer_length",
                                                       "n_best_size") if integer(settings.get(key))})
        threshold = info.get("null_threshold")
        if (version == "2.0" and isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
                and math.isfinite(threshold)):
            out["null_threshold"] = repr(float(threshold))
    elif info.get("family") == "race" and integer(info.get("max_qa_length")):
        out["max_qa_length"] = str(info["max_qa_length"])
    return out


def _tokenizer_files(meta: dict[str, str], tokenizer: Path | None) -> tuple[dict[str, str], Path | None]:
    """`meta` with `tokenizer_files` (the names of the tokenizer's files), and the folder they are in."""
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
    elif metadata.get("problem_type") == "regression":
        said.append("one score (regression)")
    if "squad_version" in metadata:
        limits = ", ".join(f"{key} {metadata[key]}" for key in ("doc_stride", "max_query_length", "max_answer_length")
                           if key in metadata)
        said.append(f"SQuAD {metadata['squad_version']}" + (f" ({limits})" if limits else ""))
        if "null_threshold" in metadata:
            said.append(f"no answer where the null score (start_logits[0] + end_logits[0]) minus the best span's score "
                        f"exceeds null_threshold {float(metadata['null_threshold']):.4g}")
    if "max_qa_length" in metadata:
        said.append(f"question+option of at most {metadata['max_qa_length']} tokens")
    if tokenizer is not None:
        said.append(f"no tokenizer inside: ship {metadata['tokenizer_files'].replace(',', ', ')} from {tokenizer} "
                    "beside it")
    elif tf_source:
        said.append("no tokenizer inside: ship the checkpoint's SentencePiece model (30k-clean.model) beside it")
    else:
        said.append("no tokenizer inside, and none found beside the checkpoint")
    return f"serving: {'; '.join(said)} (in the file's metadata too)"


def _check_outputs(paths, overwrite: bool) -> None:
    from albertlm.errors import UserError

    for path in paths:
        for each in (path, path.with_name(path.name + ".data")):
            if each.is_dir():
                raise UserError(f"--out: {each} is a directory")
            if each.exists() and not overwrite:
                raise UserError(f"--out: {each} already exists; pass --overwrite to replace it, or another --out")


# every file a serving directory's export may write (the models' .data companions too): what --overwrite replaces,
# and what an earlier export left that this one does not write (another tokenizer's spiece.model) is removed
SERVING_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "spiece.model", "vocab.txt", *(f"{ONNX_FOLDER}/{name}{data}" for name in DIRECTORY_MODELS.values()
                                                for data in ("", ".data")))
CHECKPOINT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                    "pytorch_model.bin.index.json", "task.json", "run_config.json")


def _check_directory(out: Path, model_dir: Path, names: dict[str, str], overwrite: bool) -> None:
    """--out DIR: not the model's own directory, nor one holding a PyTorch checkpoint (its config.json would be
    replaced by the serving one), nor a training run's (`guards.check_not_a_run`), and an earlier export's files
    are replaced only with --overwrite."""
    from albertlm.cli.guards import check_not_a_run
    from albertlm.errors import UserError

    if not out.is_dir():
        return
    check_not_a_run(out, "--out", "onnx-export")
    if model_dir.exists() and out.resolve() == model_dir.resolve():
        raise UserError(f"--out {out}: the model's own directory; give another directory for the ONNX files")
    held = next((name for name in CHECKPOINT_FILES if (out / name).exists()), None)
    if held:
        raise UserError(f"--out {out} holds a checkpoint ({held}), whose config.json the serving directory would "
                        "replace; give another directory")
    # a google-research TF checkpoint (MODEL given as its prefix or .index file, or another one): with the serving
    # config.json beside it, `convert`, `info` and `export` read the folder as a transformers model from then on
    from albertlm.cli.convert_commands import held_tf_checkpoint

    tf_held = held_tf_checkpoint(out)
    if tf_held:
        raise UserError(f"--out {out} holds a TF checkpoint ({tf_held}), which the serving directory's config.json "
                        "would hide (a folder with a config.json is read as a transformers model); give another "
                        "directory")
    for name in names.values():
        if (out / name).is_dir():
            raise UserError(f"--out: {out / name} is a directory")
    found = [name for name in SERVING_FILES if (out / name).is_file()]
    if found and not overwrite:
        raise UserError(f"--out {out} already holds an export ({', '.join(found[:3])}"
                        f"{', ...' if len(found) > 3 else ''}); pass --overwrite to replace it, or another --out")


def _install(staging: Path, target: Path, names: dict[str, str], directory: bool, overwrite: bool) -> None:
    """Move the staged files into `target` (--out DIR, or FILE's folder); with --overwrite, an earlier export's
    files this one does not write are removed first (a bigger model's FILE.data, a FILE.int8.onnx or FILE.fp16.onnx
    not asked for this time; in a directory, another tokenizer's files or a model_quantized.onnx not asked for), so
    nothing stale stays beside the new."""
    from albertlm.cli.convert_commands import swap_into_place

    written = {path.relative_to(staging).as_posix() for path in staging.rglob("*") if path.is_file()}
    if directory:
        ours = set(SERVING_FILES) if overwrite else set()
    else:   # with --overwrite, an earlier export's FILE.int8.onnx / FILE.fp16.onnx not asked for again are removed:
        # they were left beside the new FILE.onnx and served as its (without it they are left alone, as any file)
        every = _output_names(Path(names["fp32"]), False, True, True) if overwrite else names
        ours = {name + data for name in every.values() for data in ("", ".data")}
    # one step (convert's `swap_into_place`): a Ctrl-C or SIGTERM while the files moved in one by one left a new
    # model.onnx beside an earlier export's model_quantized.onnx and config.json
    try:
        swap_into_place([(staging / name, target / name) for name in sorted(written)],
                        [target / name for name in sorted(ours - written)], staging / ".earlier")
    except OSError as exc:
        from albertlm.errors import UserError

        raise UserError(f"--out: cannot write {target}: {exc.strerror or exc}") from None


def _write_serving_files(staging: Path, model, model_dir: Path, metadata: dict[str, str], tokenizer: Path | None,
                         given: Path | None, warnings: list[str] | None = None) -> list[str]:
    """config.json (transformers' AlbertConfig, as `convert --to hf` writes it: model_type, architectures, the
    labels and problem type in the .onnx's metadata) and the tokenizer files beside onnx/; lines to print. The
    tokenizer export's warnings go to `warnings` (said on stderr with the command's others; they were lines of
    stdout's summary)."""
    import json

    from albertlm.interop.hf import complete_export, hf_config

    labels = {}
    if "id2label" in metadata:
        labels["id2label"] = json.loads(metadata["id2label"])
    if "problem_type" in metadata:
        labels["problem_type"] = metadata["problem_type"]
    config = hf_config(model, labels or None)   # export_hf's config.json, no weights (the graph holds them)
    config["dtype"] = "float32"   # the graph's (model.onnx), whatever the checkpoint was saved in
    (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    source = given if given is not None and given.is_file() else tokenizer
    if source is None:
        return ["tokenizer: none found beside the checkpoint (--tokenizer names one): the directory has no "
                "tokenizer files, which optimum's pipelines and transformers.js need"]
    notes = complete_export(model, staging, model_dir if model_dir.is_dir() else None, source, warnings=warnings)
    (staging / "README.md").unlink(missing_ok=True)   # a model card whose snippet loads PyTorch weights: not here
    if "max_seq_length" in metadata and (staging / "tokenizer_config.json").is_file():   # the length fine-tuned with
        path = staging / "tokenizer_config.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**data, "model_max_length": int(metadata["max_seq_length"])}, indent=2) + "\n",
                        encoding="utf-8")
    return [line for line in notes if not line.startswith("model card:")]


def _serving_directory_line(out: Path, model, staging: Path, names: dict[str, str]) -> str:
    """How the directory is loaded: optimum's class, transformers.js's task, what each needs that is missing."""
    optimum_class, task = SERVING.get(type(model).__name__, (None, None))
    said = [f"{out} loads as it is in optimum: {optimum_class}.from_pretrained(\"{out}\")"]
    if not (staging / "tokenizer.json").is_file():
        said.append("not in transformers.js, which needs a tokenizer.json (none could be written)")
    elif task:
        others = [f"'{dtype}' ({name})" for kind, dtype in (("int8", "q8"), ("fp16", "fp16"))
                  if (name := names.get(kind, "").rsplit("/", 1)[-1])]
        said.append(f"in transformers.js: pipeline('{task}', '{out}', {{ dtype: 'fp32' }})"
                    + (f", or dtype {' / '.join(others)}" if others else ""))
    else:
        said.append("transformers.js has no multiple-choice pipeline: run its model class on the onnx/ files")
    return "serving: " + "; ".join(said)


def _staging_parent(out: Path, directory: bool) -> Path:
    """Where the staging folder goes: on the file system of the files' destination, so that they move in by rename.
    An existing --out DIR holds it: DIR may be a mount point (a container's volume, another disk) or a link to one,
    and staged beside it the export failed at the move, after all the work, with "Invalid cross-device link".
    Otherwise FILE's folder, or the folder DIR is made in."""
    return out if directory and out.is_dir() else out.parent


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


def _load_tf(path: Path, encoder: bool, config: str | None = None):
    """(model, the import's report lines) of a TF checkpoint (`config`: --config, its albert_config.json where none is
    beside it); --encoder: its backbone, with the trained pooler where the checkpoint has one (google's QA model has
    none)."""
    from albertlm.errors import UserError
    from albertlm.interop import onnx as onnx_export
    from albertlm.interop.tf import SOP_HEAD, import_tf_checkpoint

    model, report = import_tf_checkpoint(path, config)
    if encoder and hasattr(model, "albert"):
        return model.albert, report.lines()
    missing = sorted(report.missing)
    if missing and type(model).__name__ == "AlbertForPreTraining" and missing == sorted(SOP_HEAD):
        # an older TF-Hub module (no SOP head): its masked-LM half, not sop_logits from a head left initialised
        return onnx_export.masked_lm_of(model), [line for line in report.lines()
                                                 if not line.startswith("not in the checkpoint, left initialised")]
    if missing:   # as `convert`: an export of weights the checkpoint lacks would serve made-up outputs
        raise UserError(f"{path}: the checkpoint lacks {', '.join(missing)} of {type(model).__name__}, the class it "
                        "holds (a half-written or damaged copy?); export onnx writes the weights a checkpoint holds "
                        "and makes up none (--encoder exports its backbone)")
    return model, report.lines()


def _load(model_dir, encoder: bool):
    from albertlm.interop.hf import import_hf
    from albertlm.model.io import load_backbone, read_config
    from albertlm.model.registry import load_saved_model, saved_class_name

    # --encoder: the backbone with its trained pooler, or without one (last_hidden_state only) where the
    # checkpoint has none: a pooler made up at load time exported random pooler_output values
    if encoder or saved_class_name(model_dir) == "AlbertModel":
        return load_backbone(model_dir)
    if saved_class_name(model_dir) == "AlbertForPreTraining" and not _has_sop_head(model_dir):
        # a converted older TF-Hub module (`convert` writes no SOP head it lacks): its masked-LM half, not sop_logits
        # from a head the loader initialises
        from albertlm.model.heads import AlbertForMaskedLM

        return (import_hf(model_dir, AlbertForMaskedLM) if read_config(model_dir)[1]
                else AlbertForMaskedLM.from_pretrained(model_dir))
    if read_config(model_dir)[1]:  # a transformers directory: the class its `architectures` names
        return import_hf(model_dir)
    return load_saved_model(model_dir)


def _has_sop_head(model_dir) -> bool:
    """Whether a checkpoint directory stores an SOP head (ours `sop_head.*`, transformers' `sop_classifier.*`)."""
    from albertlm.model.io import stored_shapes

    return any(name.split(".")[0] in ("sop_head", "sop_classifier") for name in stored_shapes(model_dir))
