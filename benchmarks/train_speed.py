"""Speed: `albertlm pretrain`'s training step vs transformers' AlbertForPreTraining + torch.optim.AdamW.

Ours is the real loop (`training.loop.Loop`): batches read from a data directory built here with
`albertlm.data` (albert-base-v2's 30k SentencePiece vocabulary, text from ../shared/data), the
accumulation path, LAMB, gradient clipping, and logging every step to metrics.jsonl + TensorBoard.
The reference gets the very same batches, already in memory (so it pays no data loading), converted to
transformers' `labels`, and does forward, backward, clip, AdamW step. albert-base, B x T = 8x128 and
2x512, fp32 and bf16 autocast, alternating chunks of steps; MFU from the CPU's matmul rate measured in
the same run (model FLOPs as in model_speed.py). "wait" is the fraction of our step time spent
waiting for the next batch.

    .venv/bin/python benchmarks/train_speed.py [--rows 8x128,2x512] [--dtypes fp32,bf16] [--chunks 2]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_speed import build_models, matmul_rate, model_flops  # noqa: E402  (same FLOP model, same weights)

ROOT = Path(__file__).resolve().parents[1]
SPIECE = ROOT.parent / "shared" / "data" / "spm" / "albert-base-v2_spiece.model"
TEXT = [ROOT.parent / "shared" / "data" / "text" / "gutenberg" / name
        for name in ("austen-emma.txt", "melville-moby_dick.txt")]


def build_data(tmp: Path, T: int) -> Path:
    import shutil

    from albertlm.data.build import BuildConfig, build

    tok = tmp / "tokenizer"
    if not tok.exists():
        tok.mkdir()
        shutil.copy(SPIECE, tok / "spiece.model")
    out = tmp / f"data{T}"
    build(BuildConfig(inputs=[str(p) for p in TEXT], tokenizer=str(tok), out=str(out), max_seq_length=T,
                      dupe_factor=1, progress=False))
    return out


def our_loop(cfg, model, data_dir: Path, run_dir: Path, B: int, precision: str):
    from albertlm.config.run import DataConfig, OptimConfig, RunConfig, TrainConfig
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import make_loop, open_datasets

    run = RunConfig(model=cfg, optim=OptimConfig(lr=1e-5, warmup_steps=10),
                    train=TrainConfig(max_steps=1, batch_size=B, micro_batch_size=B, precision=precision,
                                      log_every=1, eval_every=0, save_every=0, progress=False),
                    data=DataConfig(path=str(data_dir)))
    return make_loop(run, run_dir, open_datasets(run), DistInfo(), False, model=model)


def run_ours_chunk(loop, run_dir: Path, steps: int) -> tuple[list[float], list[float]]:
    """`steps` steps of the real loop; returns the step times (the first, which opens the data iterator,
    dropped) and the data-wait fractions logged for them."""
    from albertlm.training.metrics import MetricsLogger, read_metrics

    stamps = []
    loop.plan = dataclasses.replace(loop.plan, total_steps=loop.state.step + steps)   # (and the lr schedule)
    loop.logger = MetricsLogger(run_dir, loop.plan.total_steps, loop.state.step, progress=False)
    loop.on_step = lambda step, metrics: stamps.append(time.perf_counter())
    loop.save = lambda: None                 # no checkpoint at the end of a chunk
    loop.run()
    waits = [r["data_wait_frac"] for r in read_metrics(run_dir) if r["split"] == "train"][-(steps - 1):]
    return [b - a for a, b in zip(stamps, stamps[1:])], waits


def reference_step(model, optimizer, batch: dict, precision: str) -> None:
    labels = torch.full_like(batch["input_ids"], -100)
    keep = batch["masked_lm_weights"] > 0
    rows = torch.arange(labels.shape[0])[:, None].expand_as(keep)
    labels[rows[keep], batch["masked_lm_positions"][keep]] = batch["masked_lm_ids"][keep]
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else torch.autocast("cpu", enabled=False)
    with ctx:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], labels=labels,
                    sentence_order_label=batch["sentence_order_label"])
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_reference_chunk(model, optimizer, batches: list[dict], precision: str) -> list[float]:
    stamps = [time.perf_counter()]
    for batch in batches:
        reference_step(model, optimizer, batch, precision)
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps[1:], stamps[2:])]   # the first step is the warm-up


def bench_row(cfg, B: int, T: int, precision: str, data_dir: Path, tmp: Path, chunks: int, steps: int, rates):
    ours, theirs = build_models(cfg)
    run_dir = tmp / f"run_{B}x{T}_{precision}"
    loop = our_loop(cfg, ours, data_dir, run_dir, B, precision)
    feed = loop.data.steps(0)
    optimizer = torch.optim.AdamW(theirs.parameters(), lr=1e-5)
    theirs.train()
    t_ours, t_ref, waits = [], [], []
    for _ in range(chunks):
        batches = [next(feed)[0] for _ in range(steps)]         # the same examples our loop reads
        t, w = run_ours_chunk(loop, run_dir, steps)
        t_ours += t
        waits += w
        t_ref += run_reference_chunk(theirs, optimizer, batches, precision)
    P = int(loop.data.dataset.meta["max_predictions_per_seq"])
    flops = model_flops(cfg, B, T, P, train=True)
    s_ours, s_ref = statistics.median(t_ours), statistics.median(t_ref)
    return {"shape": f"{B}x{T}", "dtype": precision, "ours": B * T / s_ours, "hf": B * T / s_ref,
            "ratio": s_ref / s_ours, "mfu_ours": flops / s_ours / rates[precision],
            "mfu_hf": flops / s_ref / rates[precision], "wait": statistics.mean(waits) if waits else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="8x128,2x512")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--chunks", type=int, default=2, help="alternations of ours / reference")
    parser.add_argument("--steps", type=int, default=3, help="steps per chunk (the first is not timed)")
    args = parser.parse_args()
    from albertlm.config.presets import get_preset

    cfg = get_preset("albert-base")
    rates = {"fp32": matmul_rate(torch.float32), "bf16": matmul_rate(torch.bfloat16)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul rate fp32 "
          f"{rates['fp32'] / 1e9:.0f} GFLOP/s, bf16 {rates['bf16'] / 1e9:.0f} GFLOP/s", flush=True)
    print("| B x T | dtype | albertlm pretrain tok/s | transformers + AdamW tok/s | speed-up | MFU ours | MFU hf | data wait |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = {}
        for shape in args.rows.split(","):
            B, T = map(int, shape.split("x"))
            data.setdefault(T, build_data(tmp, T))
            for precision in args.dtypes.split(","):
                r = bench_row(cfg, B, T, precision, data[T], tmp, args.chunks, args.steps, rates)
                print(f"| {r['shape']} | {r['dtype']} | {r['ours']:.0f} | {r['hf']:.0f} | {r['ratio']:.2f}x | "
                      f"{r['mfu_ours']:.0%} | {r['mfu_hf']:.0%} | {r['wait']:.1%} |", flush=True)


if __name__ == "__main__":
    main()
