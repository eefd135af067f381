"""Speed: our AlbertForPreTraining vs transformers' on the same config, batch and inputs, alternating.

Rows: albert-base at 8x128 and 2x512, fp32 and bf16 autocast, a training step (forward + backward +
AdamW step) and inference (forward computing the MLM + SOP outputs, no grad). Both models get the
same weights, the same 15% masked positions (ours as masked_lm_positions, transformers as `labels`
with -100 elsewhere) and sentence-order labels. Also measures this CPU's dense matmul rate and prints
each row's model FLOP utilisation (MFU): model FLOPs are the same for both implementations (encoder,
E->H projection, MLM head at the masked positions), so the MFU ratio equals the speed ratio.

    .venv/bin/python benchmarks/model_speed.py [--reps 3] [--infer-reps 10] [--rows 8x128,2x512]
        [--modes train,infer] [--dtypes fp32,bf16]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time

import torch

from albertlm.config.presets import get_preset
from albertlm.model.albert import AlbertForPreTraining

MASK_RATE = 0.15


def matmul_rate(dtype: torch.dtype, seconds: float = 2.0) -> float:
    """Dense GEMM FLOP/s at a transformer-like shape (1024 tokens x 768 -> 3072)."""
    a, b = torch.randn(1024, 768, dtype=dtype), torch.randn(768, 3072, dtype=dtype)
    for _ in range(3):
        a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    return n * 2 * 1024 * 768 * 3072 / (time.perf_counter() - start)


def model_flops(cfg, B: int, T: int, P: int, train: bool) -> float:
    """Forward FLOPs x (3 when training): matmuls only, attention scores included."""
    H, E, I, V = cfg.hidden_size, cfg.embedding_size, cfg.ffn_size, cfg.vocab_size
    per_token = 2 * E * H + cfg.num_layers * cfg.inner_group_num * (2 * (4 * H * H + 2 * H * I) + 4 * T * H)
    forward = B * T * per_token + B * P * 2 * (H * E + E * V) + B * 2 * (H * H + 2 * H)
    return forward * (3 if train else 1)


def make_inputs(cfg, B: int, T: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    P = max(1, round(MASK_RATE * T))
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g)
    positions = torch.stack([torch.randperm(T - 1, generator=g)[:P].sort().values + 1 for _ in range(B)])
    targets = torch.randint(5, cfg.vocab_size, (B, P), generator=g)
    labels = torch.full_like(ids, -100).scatter_(1, positions, targets)
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                token_type_ids=(torch.arange(T) >= T // 2).long().expand(B, T).contiguous(),
                masked_lm_positions=positions, masked_lm_ids=targets, masked_lm_weights=torch.ones(B, P),
                labels=labels, sentence_order_label=torch.randint(0, 2, (B,), generator=g))


def build_models(cfg):
    import transformers

    from albertlm.interop.hf import export_hf

    torch.manual_seed(0)
    ours = AlbertForPreTraining(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        theirs = transformers.AlbertForPreTraining.from_pretrained(tmp)
    return ours, theirs


def step_fn(model, batch, ours: bool, train: bool, dtype):
    keys = ("input_ids", "attention_mask", "token_type_ids", "sentence_order_label")
    keys += ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights") if ours else ("labels",)
    kwargs = {k: batch[k] for k in keys}
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == torch.bfloat16 else contextlib.nullcontext()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5) if train else None
    model.train(train)

    def step():
        if not train:
            with torch.inference_mode(), autocast:
                return model(**kwargs).loss
        with autocast:
            loss = model(**kwargs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


def time_pair(steps, reps: int) -> list[float]:
    """Median seconds per step of each function, run alternately (after one warm-up each)."""
    for step in steps:
        step()
    times = [[] for _ in steps]
    for _ in range(reps):
        for i, step in enumerate(steps):
            start = time.perf_counter()
            step()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="timed training steps per model and row")
    parser.add_argument("--infer-reps", type=int, default=10, help="timed inference steps per model and row")
    parser.add_argument("--rows", default="8x128,2x512")
    parser.add_argument("--modes", default="train,infer")
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args()
    cfg = get_preset("albert-base")
    ours, theirs = build_models(cfg)
    print(f"load average {os.getloadavg()[0]:.1f} (other processes share the CPU: compare ratios, not absolutes)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; the matmul rate is measured before "
          "each row (the load changes), MFU = model FLOPs / time / that rate")
    print(f"{'mode':6} {'shape':6} {'dtype':5} {'ours tok/s':>11} {'hf tok/s':>9} {'ratio':>6} "
          f"{'matmul GFLOP/s':>14} {'ours MFU':>9} {'hf MFU':>7}")
    for mode in args.modes.split(","):
        for shape in args.rows.split(","):
            B, T = map(int, shape.split("x"))
            batch = make_inputs(cfg, B, T)
            for dname in args.dtypes.split(","):
                dtype = torch.bfloat16 if dname == "bf16" else torch.float32
                train = mode == "train"
                steps = [step_fn(m, batch, m is ours, train, dtype) for m in (ours, theirs)]
                rate = matmul_rate(dtype, seconds=1.0)
                t_ours, t_hf = time_pair(steps, args.reps if train else args.infer_reps)
                flops = model_flops(cfg, B, T, batch["masked_lm_positions"].shape[1], train)
                mfu = [flops / t / rate for t in (t_ours, t_hf)]
                print(f"{mode:6} {shape:6} {dname:5} {B * T / t_ours:11.0f} {B * T / t_hf:9.0f} "
                      f"{t_hf / t_ours:5.2f}x {rate / 1e9:14.0f} {mfu[0]:8.0%} {mfu[1]:7.0%}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
