"""Speed: our AlbertForPreTraining vs transformers' on the same config, batch and inputs, alternating.

Rows: a preset (albert-base by default) at B x T shapes, fp32 and bf16 autocast, a training step (forward +
backward + AdamW step) and inference (forward computing the MLM + SOP outputs, no grad). Both models get the
same weights, the same 15% masked positions (ours as masked_lm_positions, transformers as `labels` with -100
elsewhere) and sentence-order labels. Variants (`--variants`): `ours` (eager, with the CPU fast paths
`training.precision.prepare_model` picks for this machine), `hf` (transformers eager, i.e. not compiled), and
`ours-compiled` / `hf-compiled` (`torch.compile`, default mode; the first calls, which compile, are not timed;
compile seconds are printed). Ratios are against transformers eager and, where measured, compiled. Both
models attend through `F.scaled_dot_product_attention` (transformers loaded with `attn_implementation="sdpa"`,
not left to its version's default), run with the same dropout (the preset's, exported with the weights), in
train mode for training rows and eval mode for inference rows. Every variant runs 3 untimed steps first (where
compiles and lazy optimizer state land), then `--reps` / `--infer-reps` timed steps, the variants taking their
steps in turn; each variant's time is the median of its timed steps, and tok/s, MFU and every ratio are of
those medians.

`--real 0.5`: rows of different lengths with that mean fraction of real tokens, the rest padding (pretraining
data built from short documents looks like this). `ours` then gets the batch's `token_index`, as `albertlm
pretrain` does, and skips the padding in its per-token layers (on a GPU its attention runs over the packed
real tokens too: `varlen_attn`); `ours-padded` is the same model given the mask and computing the padding
too, as transformers does. A batch without padding (the default, `--real 1`) reaches `ours` without a mask,
again as `albertlm pretrain` passes it. tok/s counts real tokens, and MFU the real tokens' FLOPs.
`ours-cudagraphs`: `torch.compile(mode="reduce-overhead")` (CUDA graphs; the padded shape, as pretraining
runs it). `hf-unmasked-compiled`: transformers compiled and given no mask when the batch has no padding.

MFU: model FLOPs (`model_flops`: the matmuls of the E->H projection and every block run at each real token,
attention over its row's real tokens, the MLM head at the masked positions, the pooler and SOP head; x3 for
training: the same for every variant, so MFU ratios equal speed ratios) / time / the dense-matmul rate of
this device and dtype, measured before each row (the load changes; ratios are only meaningful within one
run): the faster of `torch.matmul` and, on a CPU, oneDNN's GEMM (the fast paths' kernel; on AMD CPUs MKL
runs AVX2 code, oneDNN AVX-512), at 1024x768x3072 on a CPU and 8192x4096x4096 on a GPU, in the same
threads and with the same clock as the rows. On a CPU
without bf16 instructions (AVX-512 BF16 or AMX) torch emulates bf16 matmuls far below the CPU's fp32 rate:
there the bf16 rows' MFU is against the fp32 rate (the hardware's), and the header says so; such a CPU
times bf16 only when `--dtypes` asks for it (emulated, a bf16 step is many times slower than fp32).
fp16 runs on CUDA only (as `albertlm pretrain --precision fp16`).

`--clock cpu --threads 1` times CPU seconds of one thread instead of wall seconds: on a machine shared with
other jobs this is far steadier (time spent descheduled does not count), at the price of measuring
single-thread work only (with more threads, OpenMP's spin-waiting would count as work, so `--clock cpu`
without `--threads 1` is refused).

    python benchmarks/model_speed.py [--device cpu|cuda] [--preset albert-base] [--rows 8x128,2x512]
        [--modes train,infer] [--dtypes fp32,bf16,fp16] [--variants ours,hf,ours-compiled,hf-compiled]
        [--reps 3] [--infer-reps 10] [--threads N] [--clock wall|cpu] [--real 1.0]
On CUDA the defaults are 32x512 bf16 and all four variants; peak memory per variant is printed too (each
variant's own: its weights, optimizer state and activations, not the variants still resident before it).
"""
from __future__ import annotations

import argparse
import importlib.util
import contextlib
import copy
import math
import os
import statistics
import tempfile
import time
from typing import Callable, Sequence

import torch

from albertlm.config.presets import get_preset
from albertlm.errors import UserError
from albertlm.model.albert import AlbertForPreTraining
from albertlm.training.precision import cpu_has_bf16

MASK_RATE = 0.15
OUR_KEYS = ("input_ids", "attention_mask", "token_type_ids", "sentence_order_label",
            "masked_lm_positions", "masked_lm_ids", "masked_lm_weights", "token_index")
HF_KEYS = ("input_ids", "attention_mask", "token_type_ids", "sentence_order_label", "labels")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# transformers' attention, named rather than left to its default (which has changed between its versions): SDPA,
# the kernel ours runs, so that a ratio measures the models and not eager attention's softmax-and-two-matmuls
HF_ATTENTION = "sdpa"
VARIANTS = ("ours", "hf", "ours-padded", "ours-compiled", "ours-cudagraphs", "hf-compiled", "hf-unmasked-compiled")


def parse_device(parser: argparse.ArgumentParser, text: str) -> torch.device:
    """--device as a torch device: cpu, or cuda / cuda:N where torch sees a GPU; anything else is one line
    (exit 2) instead of torch's traceback ("Torch not compiled with CUDA enabled", "Expected one of ...")."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        parser.error(f"--device {text!r}: use cpu or cuda (cuda:N)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device {text}: torch {torch.__version__} sees no CUDA GPU here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(f"--device {text}: there are {torch.cuda.device_count()} CUDA device(s) here")
    return device


def parse_rows(parser: argparse.ArgumentParser, text: str, max_length: int) -> list[tuple[int, int]]:
    """--rows "8x128,2x512" as (B, T) pairs, B >= 1 and 8 <= T <= `max_length` (the model's positions); a
    malformed or impossible shape is one line (exit 2) before anything is built or timed."""
    rows = []
    for shape in text.split(","):
        try:
            B, T = (int(n) for n in shape.strip().split("x"))
        except ValueError:
            parser.error(f"--rows: {shape!r} is not a B x T shape such as 8x128")
        if B < 1 or not 8 <= T <= max_length:
            parser.error(f"--rows: {shape!r} needs a batch of at least 1 and a length from 8 to {max_length}")
        rows.append((B, T))
    return rows


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_kernels(dtype: torch.dtype, device: torch.device) -> dict[str, Callable[..., torch.Tensor]]:
    """The dense GEMMs this device runs a transformer's linears with, each `(x, w)` -> `x @ w.T` for w (n, k):
    `torch.matmul` (MKL on a CPU, cuBLAS on a GPU) and, on a CPU whose torch has it, oneDNN's (the kernel of
    the CPU fast paths, `model/fused.py`). On AMD CPUs MKL runs its AVX2 code while oneDNN runs AVX-512 (on the
    EPYC here 1.4x MKL's fp32 rate): a rate from `torch.matmul` alone was below what our fused linears reach,
    and MFU against it read up to 113%."""
    from albertlm.model import fused

    kernels = {"torch.matmul": lambda x, w: x @ w.t()}
    if device.type == "cpu" and fused.AVAILABLE and (dtype == torch.float32 or
                                                     (dtype == torch.bfloat16 and fused.onednn_bf16())):
        kernels["oneDNN"] = lambda x, w: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")
    return kernels


def gemm_shape(device: torch.device) -> tuple[int, int, int]:
    """(m, k, n) of the probe: 1024 tokens x 768 -> 3072 on a CPU (albert-base's FFN at 8x128); 8192 x 4096 ->
    4096 on a GPU, big enough to fill it."""
    return (8192, 4096, 4096) if device.type == "cuda" else (1024, 768, 3072)


def kernel_rate(kernel, dtype: torch.dtype, seconds: float, device: torch.device) -> float:
    """FLOP/s of `kernel` at `gemm_shape`, after 3 untimed calls, synchronised around the timer on a GPU."""
    m, k, n = gemm_shape(device)
    a = torch.randn(m, k, dtype=dtype, device=device)
    w = torch.randn(n, k, dtype=dtype, device=device)   # (out, in), as a linear layer's weight
    for _ in range(3):
        kernel(a, w)
    sync(device)
    count, start = 0, clock()
    while clock() - start < seconds:
        for _ in range(10 if device.type == "cuda" else 1):
            kernel(a, w)
            count += 1
        sync(device)
    return count * 2 * m * k * n / (clock() - start)


def gemm_rates(dtype: torch.dtype, seconds: float = 2.0, device: torch.device | str = "cpu") -> dict[str, float]:
    """Each of `gemm_kernels`' FLOP/s here (`seconds` each); a kernel this torch build refuses is left out."""
    device = torch.device(device)
    rates = {}
    for name, kernel in gemm_kernels(dtype, device).items():
        try:
            rates[name] = kernel_rate(kernel, dtype, seconds, device)
        except RuntimeError:        # a private op this build or CPU does not run: the others still measure
            if name == "torch.matmul":
                raise
    return rates


def matmul_rate(dtype: torch.dtype, seconds: float = 2.0, device: torch.device | str = "cpu") -> float:
    """The device's dense-GEMM FLOP/s in `dtype`: the fastest of `gemm_kernels` at `gemm_shape` (the rate the
    hardware reaches with the kernels this torch build has, which MFU is a fraction of)."""
    return max(gemm_rates(dtype, seconds=seconds, device=device).values())


def emulated_bf16(device: torch.device) -> bool:
    """Whether bf16 matmuls are emulated on `device` (a CPU without AVX-512 BF16 or AMX)."""
    return device.type == "cpu" and not cpu_has_bf16()


def mfu_rate(precision: str, device: torch.device, seconds: float = 2.0) -> float:
    """The dense-matmul FLOP/s an MFU of `precision` is against: this device's rate in that dtype, except bf16
    where it is emulated (`emulated_bf16`): there a bf16 `a @ b` ran 60x below the fp32 rate here, so a bf16
    row's "MFU" against it exceeded 100% (225%) and measured the emulation, not the hardware; the fp32 rate
    is what the hardware can do for that work."""
    dtype = DTYPES[precision]
    if precision == "bf16" and emulated_bf16(device):
        dtype = torch.float32
    return matmul_rate(dtype, seconds=seconds, device=device)


def default_dtypes(device: torch.device) -> str:
    """--dtypes when not given: bf16 on CUDA; fp32 and bf16 on a CPU, or fp32 alone where bf16 is emulated."""
    return "bf16" if device.type == "cuda" else "fp32" if emulated_bf16(device) else "fp32,bf16"


def dtypes_note(dtypes: str, given: bool, device: torch.device) -> str:
    """What the header says of bf16 on a CPU without bf16 instructions ("" elsewhere)."""
    if not emulated_bf16(device):
        return ""
    if "bf16" in dtypes.split(","):
        return " " + EMULATED_NOTE
    left_out = " bf16 is left out: this CPU has no bf16 instructions (--dtypes fp32,bf16 times it emulated)."
    return "" if given else left_out


EMULATED_NOTE = ("This CPU has no bf16 instructions (AVX-512 BF16 or AMX): bf16 runs emulated, so its rows' "
                 "matmul rate and MFU are fp32's (the hardware's rate; emulated bf16 matmuls run far below it).")


def least_real(T: int) -> float:
    """The smallest --real a row of length T can have: its masked positions, [CLS] and [SEP] are real."""
    return (max(1, round(MASK_RATE * T)) + 2) / T


def model_flops(cfg, B: int, T: int, P: int, train: bool, tokens: float | None = None,
                lengths: Sequence[int] | None = None) -> float:
    """The model's matmul FLOPs (a multiply-add is 2; LayerNorm, softmax, GELU and the embedding lookup are not
    counted), forward, x 3 when training (the backward's two matmuls per forward one):
    - per real token: the E -> H projection (where the model has one: E != H), and in each block run
      (num_layers x inner_group_num: a shared block counts once per use) Q, K, V and the output (4 H^2 x 2)
      and the FFN (2 H I x 2), and attention: scores and the weighted sum, 4 H per key attended;
    - per row: the MLM head at its P prediction slots (H -> E and E -> V), the pooler and the SOP head.
    The same count for every variant (the useful work: the last block at every token though ours computes it
    only at [CLS] and the masked positions; the MLM head at the P slots though transformers projects every
    token), so MFU ratios equal speed ratios. `lengths`: each row's real tokens, each attending to its row's
    real tokens; without, `tokens` real tokens (default B x T), each counted as attending to T keys (exact
    without padding, an upper bound with it)."""
    H, E, I, V = cfg.hidden_size, cfg.embedding_size, cfg.ffn_size, cfg.vocab_size
    if lengths is not None:
        lengths = [int(n) for n in lengths]
        tokens, attended = sum(lengths), sum(n * n for n in lengths)
    else:
        tokens = B * T if tokens is None else tokens
        attended = tokens * T
    blocks = cfg.num_layers * cfg.inner_group_num
    per_token = (2 * E * H if cfg.has_embedding_projection else 0) + blocks * 2 * (4 * H * H + 2 * H * I)
    forward = (tokens * per_token + blocks * 4 * H * attended + B * P * 2 * (H * E + E * V)
               + B * 2 * (H * H + 2 * H))
    return forward * (3 if train else 1)


def row_lengths(B: int, T: int, real: float, shortest: int, g: torch.Generator) -> torch.Tensor:
    """B lengths spread evenly around real * T (within [shortest, T]), in a random order."""
    if real >= 1:
        return torch.full((B,), T)
    mean = real * T
    width = max(0.0, min(T - mean, mean - shortest)) if B > 1 else 0.0   # (linspace of one is its start)
    lengths = torch.linspace(mean - width, mean + width, B).round().long().clamp(shortest, T)
    return lengths[torch.randperm(B, generator=g)]


def make_inputs(cfg, B: int, T: int, seed: int = 0, device: torch.device | str = "cpu",
                real: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    P = max(1, round(MASK_RATE * T))
    lengths = row_lengths(B, T, real, P + 2, g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids = torch.randint(5, cfg.vocab_size, (B, T), generator=g) * mask
    positions = torch.stack([torch.randperm(int(n) - 1, generator=g)[:P].sort().values + 1 for n in lengths])
    targets = torch.randint(5, cfg.vocab_size, (B, P), generator=g)
    labels = torch.full_like(ids, -100).scatter_(1, positions, targets)
    batch = dict(input_ids=ids, attention_mask=mask,
                 token_type_ids=((torch.arange(T)[None] >= lengths[:, None] // 2) & mask.bool()).long(),
                 masked_lm_positions=positions, masked_lm_ids=targets, masked_lm_weights=torch.ones(B, P),
                 labels=labels, sentence_order_label=torch.randint(0, 2, (B,), generator=g))
    batch["token_index"] = mask.flatten().nonzero().squeeze(1)   # what the data loader's collate gives
    return {k: v.to(device) for k, v in batch.items()}


def build_models(cfg):
    """Ours (seeded) and transformers' AlbertForPreTraining with the same weights, on the CPU; transformers'
    attention is `HF_ATTENTION` (SDPA), as ours."""
    import transformers

    from albertlm.interop.hf import export_hf

    torch.manual_seed(0)
    ours = AlbertForPreTraining(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(ours, tmp)
        theirs = transformers.AlbertForPreTraining.from_pretrained(tmp, attn_implementation=HF_ATTENTION)
    return ours, theirs


def variant_model(name: str, ours, theirs, precision: str, device: torch.device):
    """A fresh copy of the model a variant runs, on `device` (ours prepared the way `albertlm pretrain` does)."""
    from albertlm.training.precision import prepare_model

    compiled = is_compiled(name)
    if name.startswith("ours"):
        model = prepare_model(copy.deepcopy(ours), precision=precision, device=device,
                              fast_paths="off" if compiled else "auto")
    else:
        model = copy.deepcopy(theirs)
    model = model.to(device)
    if not compiled:
        return model, model
    return torch.compile(model, mode="reduce-overhead" if name == "ours-cudagraphs" else None), model


def is_compiled(name: str) -> bool:
    return name.endswith("-compiled") or name == "ours-cudagraphs"


def variant_inputs(name: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What each variant's model is called with. `ours` / `ours-compiled`: what `albertlm pretrain` passes
    (`PretrainingObjective`): the batch's `token_index` (skip the padding), and for a batch without padding
    neither mask nor index. `ours-cudagraphs` (reduce-overhead, static shapes): no index, no mask when full.
    `ours-padded`: the mask and no index (the padding computed too). transformers: `labels` and the mask, as its
    users pass them; `hf-unmasked-compiled` drops an all-ones mask (its fastest attention kernel)."""
    from albertlm.training.pretrain import is_full

    full = is_full(batch)
    if name.startswith("ours"):
        keys = OUR_KEYS if name in ("ours", "ours-compiled") else OUR_KEYS[:-1]
        if full and name != "ours-padded":
            keys = tuple(k for k in keys if k not in ("attention_mask", "token_index"))
    else:
        keys = tuple(k for k in HF_KEYS if not (full and name == "hf-unmasked-compiled" and k == "attention_mask"))
    return {k: batch[k] for k in keys if k in batch}


def step_fn(model, params, kwargs: dict[str, torch.Tensor], train: bool, precision: str, device: torch.device):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
    optimizer = torch.optim.AdamW(params, lr=1e-5, fused=device.type == "cuda") if train else None

    def step():
        if not train:
            with torch.inference_mode(), autocast():
                return model(**kwargs).loss
        with autocast():
            loss = model(**kwargs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]


def timed(step, device: torch.device, clock_fn=None) -> float:
    clock_fn = clock_fn or clock
    sync(device)
    start = clock_fn()
    step()
    sync(device)
    return clock_fn() - start


class CudaPeakMemory:
    """Peak CUDA memory of one variant: its model copy, optimizer state and activations. The variants built
    before it stay resident (they are timed in turn), so the peak is counted from what was allocated when
    this variant's tracking started, not from zero."""

    def __init__(self, device: torch.device):
        self.device = device

    def start(self) -> int:
        torch.cuda.reset_peak_memory_stats(self.device)
        return torch.cuda.memory_allocated(self.device)

    def peak_gib(self, baseline: int) -> float:
        return (torch.cuda.max_memory_allocated(self.device) - baseline) / 2**30


def run_row(cfg, ours, theirs, variants: list[str], B: int, T: int, precision: str, train: bool, reps: int,
            device: torch.device, real: float = 1.0, memory=None) -> dict[str, dict]:
    """Median seconds per step of each variant, run alternately after warm-up (compile) calls. `memory`
    (default: `CudaPeakMemory` on CUDA, none elsewhere) gives each variant's own peak memory."""
    if memory is None and device.type == "cuda":
        memory = CudaPeakMemory(device)
    batch = make_inputs(cfg, B, T, device=device, real=real)
    steps, result = {}, {}
    for name in variants:
        baseline = memory.start() if memory is not None else None   # before this variant's weights arrive
        model, raw = variant_model(name, ours, theirs, precision, device)
        model.train(train)
        steps[name] = step_fn(model, raw.parameters(), variant_inputs(name, batch), train, precision, device)
        wall = time.perf_counter  # compile seconds are wall seconds (the compiler runs in other processes too)
        first = timed(steps[name], device, wall)
        second = timed(steps[name], device, wall)  # compiled training recompiles once for the optimizer's state
        result[name] = {"times": [], "compile_s": first + second - 2 * timed(steps[name], device, wall),
                        "peak_gib": memory.peak_gib(baseline) if memory is not None else None}
    for _ in range(reps):
        for name in variants:
            result[name]["times"].append(timed(steps[name], device))
    for r in result.values():
        r["seconds"] = statistics.median(r["times"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--preset", default="albert-base", help="model preset (default albert-base)")
    parser.add_argument("--reps", type=int, default=3, help="timed training steps per variant and row")
    parser.add_argument("--infer-reps", type=int, default=10, help="timed inference steps per variant and row")
    parser.add_argument("--rows", default=None, help="B x T shapes (default 8x128,2x512; cuda 32x512)")
    parser.add_argument("--modes", default="train,infer", help="train, infer or both (default train,infer)")
    parser.add_argument("--dtypes", default=None,
                        help="from fp32,bf16,fp16 (fp16: cuda only; default fp32,bf16, cuda: bf16, a CPU without "
                             "bf16 instructions: fp32, as bf16 runs emulated there, its MFU against the fp32 rate)")
    parser.add_argument("--variants", default=None,
                        help="from ours,hf,ours-padded,ours-compiled,ours-cudagraphs,hf-compiled,hf-unmasked-compiled "
                             "(default: ours,hf on cpu, ours,hf,ours-compiled,hf-compiled on cuda; ours-padded: ours "
                             "given the mask and computing the padding; ours-cudagraphs: torch.compile reduce-overhead; "
                             "hf-unmasked-compiled: transformers compiled without an all-ones mask)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--real", type=float, default=1.0,
                        help="mean fraction of real (not padding) tokens per row, in (0, 1] (default 1: no padding)")
    parser.add_argument("--clock", choices=list(CLOCK), default="wall",
                        help="wall seconds, or CPU seconds of this process (steadier under load; needs --threads 1)")
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    if args.threads < 0:
        parser.error(f"--threads must be >= 0 (0: torch's choice), got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = parse_device(parser, args.device)
    if args.clock == "cpu" and device.type == "cuda":
        parser.error("--clock cpu is for CPU runs")
    if args.clock == "cpu" and args.threads != 1:   # CPU seconds of N threads: OpenMP's spin-waits count as work
        parser.error("--clock cpu needs --threads 1 (with more threads the CPU seconds of every thread add up, "
                     "their OpenMP spin-waiting included, and tok/s is no longer a rate of the run)")
    cuda = device.type == "cuda"
    rows = args.rows or ("32x512" if cuda else "8x128,2x512")
    dtypes = args.dtypes or default_dtypes(device)
    variants = (args.variants or ("ours,hf,ours-compiled,hf-compiled" if cuda else "ours,hf")).split(",")
    if not {"ours", "hf"} <= set(variants):
        parser.error("--variants must include ours and hf (the ratios are against them)")
    if set(variants) - set(VARIANTS) or len(set(variants)) < len(variants):
        parser.error(f"--variants: each at most once, from {','.join(VARIANTS)}")
    if "ours-cudagraphs" in variants and not cuda:
        parser.error("ours-cudagraphs (CUDA graphs) needs --device cuda")
    if not 0 < args.real <= 1:
        parser.error(f"--real must be in (0, 1], not {args.real}")
    for mode in args.modes.split(","):      # any other word would have run (and been labelled) as inference
        if mode not in ("train", "infer"):
            parser.error(f"--modes: {mode!r} is not one of train, infer")
    for precision in dtypes.split(","):     # any other word would have run fp32 under that label
        if precision not in DTYPES:
            parser.error(f"--dtypes: {precision!r} is not one of fp32, bf16, fp16")
        if precision == "fp16" and not cuda:  # albertlm refuses fp16 without CUDA; this timed no path it runs
            parser.error("--dtypes fp16 runs on cuda only (albertlm trains fp16 only on a GPU, with loss scaling)")
    for mode, option, reps in (("train", "--reps", args.reps), ("infer", "--infer-reps", args.infer_reps)):
        if mode in args.modes.split(",") and reps < 1:    # no step timed: a median of nothing, or a hang
            parser.error(f"{option} must be >= 1, got {reps}")
    try:
        cfg = get_preset(args.preset)
    except UserError as exc:                # an unknown preset (ConfigError): its one line, not a traceback
        parser.error(f"--preset: {exc}")
    shapes = parse_rows(parser, rows, cfg.max_position_embeddings)
    for B, T in shapes:   # a smaller --real was raised to the shortest row, under the asked label
        if args.real < 1 and args.real < least_real(T):
            parser.error(f"--real {args.real}: each row of {B}x{T} holds at least {round(least_real(T) * T)} real "
                         f"tokens (its masked positions, [CLS] and [SEP]), so --real must be >= "
                         f"{math.ceil(least_real(T) * 100) / 100} there")
    # the bench extra has it; without, a traceback at the first model
    if importlib.util.find_spec("transformers") is None:
        parser.error("transformers is not installed: the comparison needs it (pip install -e '.[bench]')")
    ours, theirs = build_models(cfg)
    from albertlm.model.albert import packed_attention_supported
    from albertlm.model.fast_paths import choose_fast_path, cpu_capability

    where = (f"{torch.cuda.get_device_name(device)} (packed attention over the real tokens: "
             f"{packed_attention_supported(device)})" if cuda else
             f"CPU {cpu_capability()}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}, "
             f"{args.clock} clock")
    print(f"{args.preset} on {where}; torch {torch.__version__}. Fast paths: fp32 "
          f"{choose_fast_path(device, 'fp32')}, bf16 {choose_fast_path(device, 'bf16')}. The matmul rate is "
          f"measured before each row ({' or '.join(gemm_kernels(torch.float32, device))}, the fastest; "
          f"{'x'.join(map(str, gemm_shape(device)))}); MFU = model FLOPs / time / that rate. transformers' "
          f"attention: {HF_ATTENTION}. Compare ratios, not absolutes."
          + (f" Rows are {args.real:.0%} real tokens on average (tok/s: real tokens)." if args.real < 1 else "")
          + dtypes_note(dtypes, args.dtypes is not None, device))
    extra = [v for v in variants if v not in ("ours", "hf")]
    head = (f"{'mode':5} {'shape':7} {'dtype':5} {'ours tok/s':>10} {'hf tok/s':>9} {'ratio':>6} "
            + "".join(f" {v + ' tok/s':>23}" for v in extra)
            + (f" {'ours/hf-compiled':>16}" if "hf-compiled" in variants else "")
            + f" {'matmul TFLOP/s':>14} {'MFU ' + '/'.join(variants):>30}" + ("  peak GiB" if cuda else ""))
    print(head)
    for mode in args.modes.split(","):
        for B, T in shapes:
            shape = f"{B}x{T}"
            for precision in dtypes.split(","):
                train = mode == "train"
                rate = mfu_rate(precision, device, seconds=1.0)
                r = run_row(cfg, ours, theirs, variants, B, T, precision, train,
                            args.reps if train else args.infer_reps, device, real=args.real)
                P = max(1, round(MASK_RATE * T))
                lengths = make_inputs(cfg, B, T, real=args.real)["attention_mask"].sum(1).tolist()   # run_row's
                real = sum(lengths)
                flops = model_flops(cfg, B, T, P, train, lengths=lengths)
                tok = {v: real / r[v]["seconds"] for v in variants}
                mfu = "/".join(f"{flops / r[v]['seconds'] / rate:.0%}" for v in variants)
                line = (f"{mode:5} {shape:7} {precision:5} {tok['ours']:10.0f} {tok['hf']:9.0f} "
                        f"{tok['ours'] / tok['hf']:5.2f}x"
                        + "".join(f" {tok[v]:14.0f} ({r[v]['compile_s']:4.0f}s)" if is_compiled(v)
                                  else f" {tok[v]:23.0f}" for v in extra)
                        + (f" {tok['ours'] / tok['hf-compiled']:15.2f}x" if "hf-compiled" in variants else "")
                        + f" {rate / 1e12:14.3g} {mfu:>30}")
                if cuda:
                    line += "  " + "/".join(f"{r[v]['peak_gib']:.1f}" for v in variants)
                print(line, flush=True)
                theirs_c = [v for v in variants if v.startswith("hf-") and is_compiled(v)]
                if theirs_c:
                    best = max(theirs_c, key=tok.get)
                    print("      fastest ours / fastest transformers compiled "
                          f"({best}): " + ", ".join(f"{v} {tok[v] / tok[best]:.2f}x" for v in variants
                                                    if v.startswith("ours")), flush=True)
    if not cuda:
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
