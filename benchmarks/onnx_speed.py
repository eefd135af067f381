"""ONNX Runtime vs PyTorch, CPU inference, and what int8 dynamic quantisation costs in accuracy.

1. Speed: an albert-base-shaped AlbertForSequenceClassification (random weights, 2 labels) exported with
   `albertlm.interop.onnx.export_onnx`; PyTorch (our model as `albertlm predict` runs it: fp32,
   inference_mode, prepared by `prepare_model` with the CPU fast paths this CPU's probe picks, named in
   the header) vs onnxruntime fp32 vs onnxruntime int8 on the same inputs, the three timed in alternation
   in this process, same thread count (`--threads`, default torch's choice; on a machine shared with other jobs
   torch's OpenMP threads wait for each other far more than onnxruntime's pool, and `--threads 1` compares the
   runtimes rather than that). Prints ms per batch (medians) and the ratios (PyTorch's time over onnxruntime's:
   above 1, onnxruntime is faster).
2. Accuracy (`--sst2`, a few minutes): a small ALBERT (E 64, H 128, L 4, all-shared, the ALBERT 30k
   vocabulary) fine-tuned from random initialisation on GLUE SST-2 (../shared/data/glue/SST-2) through
   `albertlm.tasks.finetune.run_finetune`, then dev accuracy (872 sentences) of PyTorch fp32, ONNX fp32
   and ONNX int8. There is no pretrained checkpoint offline, so accuracy is that of a model trained from
   scratch (about 0.8 on SST-2), which is what the fp32 vs int8 comparison needs.

    python benchmarks/onnx_speed.py [--reps 10] [--batch 8] [--length 128] [--threads N]
        [--sst2 [--steps 600] [--skip-speed]]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TOKENIZER = DATA / "spm" / "albert-base-v2_spiece.model"


def timed(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def pytorch_model(model):
    """A copy of `model` as `albertlm predict` runs it (`tasks.finetune.inference_model`: `prepare_model`, fp32,
    the CPU fast paths where this CPU's probe picks them); the plain model before it is what is exported."""
    import copy

    from albertlm.training.precision import prepare_model

    return prepare_model(copy.deepcopy(model), precision="fp32", device=torch.device("cpu")).eval()


def speed(args, tmp: Path) -> None:
    from albertlm.config.presets import get_preset
    from albertlm.interop.onnx import example_inputs, export_onnx, onnx_session, quantize_int8
    from albertlm.model.fast_paths import choose_fast_path
    from albertlm.model.heads import AlbertForSequenceClassification

    torch.manual_seed(0)
    model = AlbertForSequenceClassification(get_preset("albert-base", num_labels=2)).eval()
    started = time.perf_counter()
    report = export_onnx(model, tmp / "base.onnx")
    export_seconds = time.perf_counter() - started
    quantize_int8(tmp / "base.onnx", tmp / "base.int8.onnx")
    model.save_pretrained(tmp / "ckpt")
    served = pytorch_model(model)
    threads = torch.get_num_threads()
    sessions = {"onnx fp32": onnx_session(tmp / "base.onnx", threads),
                "onnx int8": onnx_session(tmp / "base.int8.onnx", threads)}
    print(f"albert-base classifier: safetensors {(tmp / 'ckpt' / 'model.safetensors').stat().st_size / 1e6:.1f} MB, "
          f"ONNX {report['bytes'] / 1e6:.1f} MB (export {export_seconds:.1f} s), "
          f"int8 {(tmp / 'base.int8.onnx').stat().st_size / 1e6:.1f} MB; {threads} threads; PyTorch's CPU fast "
          f"path (as `albertlm predict`): {choose_fast_path('cpu', 'fp32')}")
    print("\n| batch x length | PyTorch fp32 ms | ORT fp32 ms | ORT int8 ms | PyTorch / ORT fp32 | PyTorch / ORT int8 |")
    print("|---|---:|---:|---:|---:|---:|")
    for batch, length in dict.fromkeys(((args.batch, args.length), (1, args.length))):  # --batch 1: one row
        inputs = example_inputs(model, batch, length, seed=3)
        feeds = dict(zip(("input_ids", "attention_mask", "token_type_ids"), (t.numpy() for t in inputs)))
        runs = {"pytorch": lambda: served(*inputs).logits,
                **{name: (lambda s=s: s.run(["logits"], feeds)) for name, s in sessions.items()}}
        with torch.inference_mode():
            for fn in runs.values():
                fn()  # warm-up
            times = {name: [] for name in runs}
            for _ in range(args.reps):  # alternate, so load changes hit all three alike
                for name, fn in runs.items():
                    times[name] += timed(fn, 1)
        ms = {name: 1000 * statistics.median(t) for name, t in times.items()}
        print(f"| {batch} x {length} | {ms['pytorch']:.1f} | {ms['onnx fp32']:.1f} | {ms['onnx int8']:.1f} | "
              f"{ms['pytorch'] / ms['onnx fp32']:.2f}x | {ms['pytorch'] / ms['onnx int8']:.2f}x |", flush=True)


def sst2(args, tmp: Path) -> None:
    from albertlm.config import ModelConfig
    from albertlm.config.task import FinetuneConfig
    from albertlm.interop.onnx import export_onnx, onnx_session, quantize_int8
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.finetune import run_finetune
    from albertlm.tasks.specs import glue_spec
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(TOKENIZER)
    torch.manual_seed(0)
    init = tmp / "init"
    AlbertForPreTraining(ModelConfig(vocab_size=tok.vocab_size, embedding_size=64, hidden_size=128, num_layers=4,
                                     num_heads=4, ffn_size=512, max_position_embeddings=128)).save_pretrained(init)
    tok.save(init)
    cfg = FinetuneConfig(lr=5e-4, batch_size=32, max_steps=args.steps, warmup_ratio=0.1, max_seq_length=64,
                         eval_every=args.steps, log_every=max(1, args.steps // 5), device="cpu")
    spec = glue_spec("sst2", tok, cfg, data_dir=DATA / "glue" / "SST-2")
    started = time.perf_counter()
    run_finetune(spec, init, tok, cfg, tmp / "run", log=lambda m: print("   ", m, flush=True))
    print(f"fine-tuned {args.steps} steps in {time.perf_counter() - started:.0f} s")
    model = AlbertForSequenceClassification.from_pretrained(tmp / "run" / "best").eval()
    export_onnx(model, tmp / "sst2.onnx")
    quantize_int8(tmp / "sst2.onnx", tmp / "sst2.int8.onnx")
    lines = (DATA / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences, labels = zip(*(line.rsplit("\t", 1) for line in lines))
    labels = np.array([int(x) for x in labels])
    predictions = {"PyTorch fp32": [], "ONNX fp32": [], "ONNX int8": []}
    logits = {name: [] for name in predictions}
    sessions = {"ONNX fp32": onnx_session(tmp / "sst2.onnx"), "ONNX int8": onnx_session(tmp / "sst2.int8.onnx")}
    for start in range(0, len(sentences), 64):
        rows = [tok.encode_pair(s)[0][:64] for s in sentences[start:start + 64]]
        rows = [r if r[-1] == tok.sep_id else r[:-1] + [tok.sep_id] for r in rows]
        width = max(map(len, rows))
        ids = np.array([r + [tok.pad_id] * (width - len(r)) for r in rows], dtype=np.int64)
        mask = (np.arange(width)[None] < np.array([len(r) for r in rows])[:, None]).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        with torch.inference_mode():
            logits["PyTorch fp32"].append(model(*map(torch.from_numpy, feeds.values())).logits.numpy())
        for name, session in sessions.items():
            logits[name].append(session.run(["logits"], feeds)[0])
    for name in predictions:
        logits[name] = np.concatenate(logits[name])
        predictions[name] = [logits[name].argmax(-1)]
    print(f"\nSST-2 dev ({len(labels)} sentences), the same fine-tuned model:")
    print("| model | accuracy | agreement with PyTorch |\n|---|---:|---:|")
    reference = np.concatenate(predictions["PyTorch fp32"])
    for name, chunks in predictions.items():
        pred = np.concatenate(chunks)
        print(f"| {name} | {(pred == labels).mean():.4f} | {(pred == reference).mean():.4f} |")
    margin = np.abs(logits["PyTorch fp32"][:, 1] - logits["PyTorch fp32"][:, 0])
    for name in ("ONNX fp32", "ONNX int8"):
        diff = np.abs(logits[name] - logits["PyTorch fp32"]).max(-1)
        print(f"{name}: max |logit - PyTorch| {diff.max():.2e}; sentences whose PyTorch margin is below that: "
              f"{int((margin < diff.max()).sum())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="timed runs per implementation and shape (default 10)")
    parser.add_argument("--batch", type=int, default=8, help="rows per batch (default 8; batch 1 is timed too)")
    parser.add_argument("--length", type=int, default=128, help="tokens per row, at most 512 (default 128)")
    parser.add_argument("--sst2", action="store_true", help="also measure int8 vs fp32 accuracy on SST-2 dev")
    parser.add_argument("--steps", type=int, default=600, help="SST-2 fine-tuning steps (with --sst2; default 600)")
    parser.add_argument("--skip-speed", action="store_true", help="only the SST-2 accuracy comparison (with --sst2)")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads of PyTorch and of both onnxruntime sessions (default 0: torch's choice)")
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"--threads must be >= 0 (0: torch's choice), got {args.threads}")
    if args.skip_speed and not args.sst2:   # ran nothing and exited 0
        parser.error("--skip-speed leaves nothing to run without --sst2")
    for option, value in (("--reps", args.reps), ("--batch", args.batch), ("--length", args.length),
                          ("--steps", args.steps)):
        if value < 1:           # a median of no timings, an empty batch: a traceback after the export
            parser.error(f"{option} must be >= 1, got {value}")
    if args.length > 512:       # albert-base's position embeddings
        parser.error(f"--length must be <= 512 (albert-base's positions), got {args.length}")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.1f}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_speed:
            speed(args, Path(tmp))
        if args.sst2:
            sst2(args, Path(tmp))
    print(f"\nload average after: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
