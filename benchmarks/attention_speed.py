"""Attention kernels on this device, forward + backward: SDPA given a padding mask (what a padded batch runs),
SDPA without a mask, SDPA's cuDNN backend, and `varlen_attn` over the packed real tokens (what `albertlm
pretrain` runs on a GPU when a batch has padding). Each is checked against float32 math on the real tokens.
`--model` also compares albert-base's pretraining step, packed (varlen) against padded (SDPA + mask), under
bf16 autocast: loss and gradients.

TFLOP/s count the real tokens' useful work (`attention_flops`: the forward's two matmuls and a backward of twice
that, as `model_speed.py` counts attention; the flash backward's recomputed QK^T is not counted).

    python benchmarks/attention_speed.py [--device cuda] [--shape 32x512x12x64] [--real 1,0.75] [--model]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))


def lengths_for(B: int, T: int, real: float, g: torch.Generator) -> torch.Tensor:
    """B row lengths drawn uniformly from a range centred on real * T within [1, T], so the mean fraction of
    real tokens is `real` below one half too (not only the ranges that end at T)."""
    if real >= 1:
        return torch.full((B,), T)
    mean = real * T
    half = max(0.0, min(T - mean, mean - 1))
    low, high = max(1, int(mean - half)), min(T, max(1, int(round(mean + half))))
    return torch.randint(low, high + 1, (B,), generator=g)


def attention_flops(lengths: torch.Tensor, heads: int, head_size: int) -> float:
    """The useful FLOPs of one forward + backward of attention over rows of `lengths` real tokens, each attending to
    its row's real tokens: forward QK^T and the weighted sum, 2 x head_size per (query, key) pair each, per head;
    backward twice the forward (its four matmuls), as `model_speed.model_flops` counts attention (x3 in training).
    The flash kernels' recomputed QK^T in the backward (the 2.5x of flash-attn's own benchmarks, 3.5x in all) is
    not counted: it is recomputation, not work the step needs, and counting it made these TFLOP/s 1.17x those of
    `model_flops`' count for the same work."""
    forward = 4 * heads * head_size * float((lengths.double() ** 2).sum())
    return 3 * forward


def timed(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps / 1e3


def kernels(B, T, A, hs, real, device, dtype, reps):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from albertlm.model.albert import varlen_attn

    g = torch.Generator().manual_seed(0)
    lengths = lengths_for(B, T, real, g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(device)
    q, k, v = (torch.randn(B, A, T, hs, generator=g).to(device, dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(B, A, T, hs, generator=g).to(device, dtype)
    bias = mask[:, None, None, :]
    with torch.no_grad():  # the reference, float32 math, on the real tokens
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bias)
    index = mask.flatten().nonzero().squeeze(1)
    starts = F.pad(mask.sum(1).cumsum(0), (1, 0)).to(torch.int32)

    def padded(m, backend=None):
        def run():
            ctx = sdpa_kernel(backend) if backend is not None else torch.autocast("cuda", enabled=False)
            with ctx:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            y.backward(grad)
            return y
        return run

    packed_q, packed_k, packed_v = (t.detach().transpose(1, 2).flatten(0, 1)[index].requires_grad_() for t in (q, k, v))
    packed_grad = grad.transpose(1, 2).flatten(0, 1)[index]

    def packed():
        y = varlen_attn(packed_q, packed_k, packed_v, starts, starts, T, T)
        y.backward(packed_grad)
        return y

    variants = {"sdpa, mask": padded(bias), "sdpa, mask, efficient": padded(bias, SDPBackend.EFFICIENT_ATTENTION),
                "sdpa, mask, cudnn": padded(bias, SDPBackend.CUDNN_ATTENTION)}
    if real >= 1:
        variants.update({"sdpa, no mask": padded(None), "sdpa, no mask, flash": padded(None, SDPBackend.FLASH_ATTENTION),
                         "sdpa, no mask, cudnn": padded(None, SDPBackend.CUDNN_ATTENTION)})
    if varlen_attn is not None:
        variants["varlen_attn, packed"] = packed
    real_rows = ref.transpose(1, 2).flatten(0, 1)[index]
    flops = attention_flops(lengths, A, hs)   # of the real tokens, forward + backward, no recompute counted
    for name, fn in variants.items():
        try:
            y = fn()
            out = y if y.dim() == 3 else y.transpose(1, 2).flatten(0, 1)[index]
            err = (out.float() - real_rows).abs().max().item()
            seconds = timed(fn, reps)
            print(f"  {name:24} {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:6.1f} TFLOP/s (real tokens)  "
                  f"max |err| {err:.4f}", flush=True)
        except Exception as e:  # a backend this build or GPU lacks
            print(f"  {name:24} not available: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)


def model_check(device):
    import copy

    from albertlm.config.presets import get_preset
    from albertlm.model import albert
    from albertlm.model.albert import AlbertForPreTraining, enable_packed_attention, packed_attention_supported
    from model_speed import make_inputs

    cfg = get_preset("albert-base")
    torch.manual_seed(0)
    padded_model = AlbertForPreTraining(cfg).to(device)
    packed_model = enable_packed_attention(copy.deepcopy(padded_model), albert.varlen_attn)
    print(f"packed attention supported here: {packed_attention_supported(device)}")
    batch = make_inputs(cfg, 8, 512, device=device, real=0.75)
    keys = ("input_ids", "attention_mask", "token_type_ids", "masked_lm_positions", "masked_lm_ids",
            "masked_lm_weights", "sentence_order_label")
    results = []
    for model, extra in ((padded_model, {}), (packed_model, {"token_index": batch["token_index"]})):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(**{k: batch[k] for k in keys}, **extra)
        out.loss.backward()
        results.append((out.loss.item(), {n: p.grad.float() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    worst = max(((grads_a[n] - grads_b[n]).norm() / grads_a[n].norm().clamp(min=1e-12)).item() for n in grads_a)
    print(f"albert-base 8x512, 75% real, bf16: loss padded {loss_a:.5f} packed {loss_b:.5f}; worst relative "
          f"gradient difference {worst:.4f} (bf16 rounding: a few 1e-3 expected)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])   # the first paragraph, whole
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    parser.add_argument("--shape", default="32x512x12x64", help="B x T x heads x head size")
    parser.add_argument("--real", default="1,0.75", help="mean fractions of real tokens per row")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per kernel (default 20)")
    parser.add_argument("--model", action="store_true", help="also compare the packed and padded albert-base step")
    args = parser.parse_args()
    try:    # the options first (one line each, on any machine), then whether there is a GPU to time
        B, T, A, hs = (int(n) for n in args.shape.split("x"))
    except ValueError:
        parser.error(f"--shape {args.shape!r}: four sizes B x T x heads x head size, such as 32x512x12x64")
    if min(B, T, A, hs) < 1:
        parser.error(f"--shape {args.shape!r}: every size must be >= 1")
    try:
        fractions = [float(r) for r in args.real.split(",")]
    except ValueError:
        parser.error(f"--real {args.real!r}: comma-separated fractions such as 1,0.75")
    if not all(0 < r <= 1 for r in fractions):
        parser.error(f"--real: each fraction must be in (0, 1], not {args.real}")
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        parser.error("attention_speed.py times CUDA kernels: it needs --device cuda and a GPU")
    from model_speed import parse_device

    device = parse_device(parser, args.device)   # cuda:N past the GPUs here: one line, not torch's assertion
    if device.index is not None:                 # the timing events and synchronize() are the current device's
        torch.cuda.set_device(device)
    print(f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}: attention forward + backward, "
          f"bf16, B={B} T={T} heads={A} head size={hs}")
    for real in fractions:
        print(f"rows {real:.0%} real tokens on average:")
        kernels(B, T, A, hs, real, device, torch.bfloat16, args.reps)
    if args.model:
        model_check(device)


if __name__ == "__main__":
    main()
