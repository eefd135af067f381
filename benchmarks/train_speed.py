"""Speed: `albertlm pretrain`'s training step vs transformers' AlbertForPreTraining + torch.optim.AdamW.

Ours is the real loop (`training.loop.Loop`): batches read from a data directory built here with
`albertlm.data` (albert-base-v2's 30k SentencePiece vocabulary, text from ../shared/data), the
accumulation path, LAMB, gradient clipping, and logging every step to metrics.jsonl + TensorBoard.
The reference gets the very same batches, converted to transformers' `labels` and put on the device before
its timed steps (so it pays no data loading, label building or copy), and does forward, backward, clip, AdamW
step (fused AdamW on CUDA). albert-base, B x T = 8x128 and 2x512, fp32 and bf16 autocast, alternating chunks
of steps; MFU from this device's matmul rate measured in the same run, before each row (`model_speed.matmul_rate`:
the faster of torch.matmul and, on a CPU, oneDNN's GEMM; model FLOPs as in model_speed.py: tok/s and MFU count
the real tokens of the timed batches, not their padding, each token attending to its row's real tokens (the
mean of the timed batches' `model_flops(..., lengths=...)`, as model_speed.py counts its rows; counting every
token's attention over the T positions was an upper bound for the short rows); on a CPU without bf16
instructions bf16 runs emulated and its MFU is against the fp32 rate, as there). "wait" is the fraction of our
step time spent waiting for the next batch. `--compiled` adds `albertlm pretrain --train.compile default` and
transformers under `torch.compile`. Every variant first runs one untimed warm-up chunk (`--steps` steps, on
batches the timed chunks do not reuse): compiling happens there, and any recompile for a new shape (our loop
marks its padding-skipping `token_index`, a different length per batch, as dynamic, so there should be none). The
compile seconds printed are that warm-up chunk's time less as many median timed steps. Each variant's time is
the median of its timed steps (the first step of every chunk is not timed); tok/s is the timed batches' mean
real tokens over that median, and the ratios are of the medians. transformers runs with SDPA attention and the
preset's dropout, as ours (`model_speed.build_models`).

    python benchmarks/train_speed.py [--device cpu|cuda] [--rows 8x128,2x512] [--dtypes fp32,bf16]
        [--chunks 2] [--steps 3] [--compiled] [--threads N]
On CUDA the defaults are 32x512, bf16, with --compiled; on a CPU without bf16 instructions fp32 alone.
"""
from __future__ import annotations

import argparse
import importlib.util
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_speed import (DTYPES, build_models, default_dtypes, dtypes_note, gemm_kernels,  # noqa: E402
                         mfu_rate, model_flops, parse_device, parse_rows, sync)
# (same FLOPs, weights and matmul rates; the same checks of --device and --rows)

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


def our_loop(cfg, model, data_dir: Path, run_dir: Path, B: int, precision: str, device: torch.device,
             compile_mode: str = "none"):
    from albertlm.config.run import DataConfig, OptimConfig, RunConfig, TrainConfig
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import make_loop, open_datasets

    run = RunConfig(model=cfg, optim=OptimConfig(lr=1e-5, warmup_steps=10),
                    train=TrainConfig(max_steps=1, batch_size=B, micro_batch_size=B, precision=precision,
                                      log_every=1, eval_every=0, save_every=0, progress=False, compile=compile_mode),
                    data=DataConfig(path=str(data_dir)))
    return make_loop(run, run_dir, open_datasets(run), DistInfo(device=device), False, model=model)


def run_ours_chunk(loop, run_dir: Path, steps: int) -> tuple[list[float], list[float]]:
    """`steps` steps of the real loop; returns the step times (the first, which opens the data iterator and
    with compile compiles, dropped) and the data-wait fractions logged for them."""
    from albertlm.training.metrics import MetricsLogger, read_metrics

    stamps = []
    loop.plan = dataclasses.replace(loop.plan, total_steps=loop.state.step + steps)   # (and the lr schedule)
    loop.logger = MetricsLogger(run_dir, loop.plan.total_steps, loop.state.step, progress=False)
    loop.logger.note = lambda message: None  # the loop's step lines and summary would split the table's rows
    loop.on_step = lambda step, metrics: (sync(loop.info.device), stamps.append(time.perf_counter()))
    loop.save = lambda: None                 # no checkpoint at the end of a chunk
    loop.run()
    waits = [r["data_wait_frac"] for r in read_metrics(run_dir) if r["split"] == "train"][-(steps - 1):]
    return [b - a for a, b in zip(stamps, stamps[1:])], waits


def hf_labels(batch: dict) -> torch.Tensor:
    """transformers' `labels` for our batch: each masked position's target, -100 elsewhere (and at padded slots)."""
    labels = torch.full_like(batch["input_ids"], -100)
    keep = batch["masked_lm_weights"] > 0
    rows = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(keep)
    labels[rows[keep], batch["masked_lm_positions"][keep]] = batch["masked_lm_ids"][keep]
    return labels


def reference_batch(batch: dict, device: torch.device) -> dict:
    """What transformers' step is given: our batch's inputs and `hf_labels` (as a data collator builds them),
    on `device`. Built before the timed steps, so the reference's time holds neither the labels' boolean
    indexing (a device sync on a GPU) nor the host-to-device copies."""
    keys = ("input_ids", "attention_mask", "token_type_ids", "sentence_order_label")
    return {**{k: batch[k].to(device) for k in keys}, "labels": hf_labels(batch).to(device)}


def reference_step(model, optimizer, batch: dict, precision: str, device: torch.device, scaler=None) -> None:
    """transformers' training step on a `reference_batch` (or our batch, its labels built here): autocast in
    the precision's dtype (fp16 with `scaler`, a GradScaler, as our loop uses for fp16), backward, clip, AdamW
    step."""
    labels = batch["labels"] if "labels" in batch else hf_labels(batch)
    dtype = DTYPES[precision]
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], labels=labels,
                    sentence_order_label=batch["sentence_order_label"])
    if scaler is None:
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    else:
        scaler.scale(out.loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    optimizer.zero_grad(set_to_none=True)


def run_reference_chunk(model, optimizer, batches: list[dict], precision: str, device: torch.device,
                        scaler=None) -> list[float]:
    """The reference's steps on `batches` (`reference_batch`es, already on the device), each synchronised before
    its time stamp; the step times less the first (the warm-up)."""
    sync(device)
    stamps = [time.perf_counter()]
    for batch in batches:
        reference_step(model, optimizer, batch, precision, device, scaler)
        sync(device)
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps[1:], stamps[2:])]   # the first step is the warm-up


def bench_row(cfg, B: int, T: int, precision: str, data_dir: Path, tmp: Path, chunks: int, steps: int,
              device: torch.device, compiled: bool) -> dict:
    """One row: an untimed warm-up chunk per variant (compiles and dynamic-shape recompiles land there), then
    `chunks` alternations of `steps` steps each (the first step of a chunk is not timed)."""
    if steps < 2 or chunks < 1:
        raise ValueError(f"need --steps >= 2 (the first step of a chunk is not timed) and --chunks >= 1, "
                         f"not {steps} and {chunks}")
    ours, theirs = build_models(cfg)
    loops = {"ours": our_loop(cfg, ours, data_dir, tmp / f"run_{B}x{T}_{precision}", B, precision, device)}
    if compiled:
        ours_c, _ = build_models(cfg)
        loops["ours-compiled"] = our_loop(cfg, ours_c, data_dir, tmp / f"run_{B}x{T}_{precision}_c", B, precision,
                                          device, compile_mode="default")
    feed = loops["ours"].data.steps(0)
    refs = {"hf": theirs.to(device).train()}
    if compiled:
        refs["hf-compiled"] = torch.compile(refs["hf"])
    optimizers = {name: torch.optim.AdamW(theirs.parameters(), lr=1e-5, fused=device.type == "cuda") for name in refs}
    scalers = {name: torch.amp.GradScaler(device.type) if precision == "fp16" else None for name in refs}
    times = {name: [] for name in [*loops, *refs]}
    warm_s = {}
    waits, lengths = [], []
    for chunk in range(chunks + 1):                             # chunk 0: the untimed warm-up
        batches = [next(feed)[0] for _ in range(steps)]         # the same examples our loop reads
        for name, loop in loops.items():
            start = time.perf_counter()
            t, w = run_ours_chunk(loop, loop.run_dir, steps)
            if chunk == 0:
                warm_s[name] = time.perf_counter() - start
                continue
            times[name] += t
            waits += w if name == "ours" else []
        on_device = [reference_batch(b, device) for b in batches]   # (untimed: a collator's work)
        for name, model in refs.items():
            start = time.perf_counter()
            t = run_reference_chunk(model, optimizers[name], on_device, precision, device, scalers[name])
            if chunk == 0:
                warm_s[name] = time.perf_counter() - start
                continue
            times[name] += t
        if chunk:   # each timed step's rows' real tokens (each token attends to its own row's)
            lengths += [b["attention_mask"].sum(1).tolist() for b in batches[1:]]
    P = int(loops["ours"].data.dataset.meta["max_predictions_per_seq"])
    tokens = statistics.mean(sum(rows) for rows in lengths)
    flops = statistics.mean(model_flops(cfg, len(rows), T, P, train=True, lengths=rows) for rows in lengths)
    seconds = {name: statistics.median(t) for name, t in times.items()}
    compile_s = {name: max(0.0, warm_s[name] - steps * seconds[name]) for name in times if name.endswith("-compiled")}
    return {"shape": f"{B}x{T}", "dtype": precision, "seconds": seconds, "flops": flops, "compile_s": compile_s,
            "tokens": tokens, "wait": statistics.mean(waits) if waits else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--rows", default=None, help="B x T shapes (default 8x128,2x512; cuda 32x512)")
    parser.add_argument("--dtypes", default=None,
                        help="fp32,bf16,fp16 (fp16: cuda only; default fp32,bf16, cuda: bf16, "
                             "a CPU without bf16 instructions: fp32, as model_speed.py)")
    parser.add_argument("--chunks", type=int, default=2, help="alternations of ours / reference")
    parser.add_argument("--steps", type=int, default=3, help="steps per chunk, >= 2 (the first is not timed)")
    parser.add_argument("--compiled", action="store_true", help="also both models under torch.compile (cuda: always)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads of both sides (default 0: torch's choice; as model_speed.py)")
    args = parser.parse_args()
    if args.steps < 2 or args.chunks < 1:
        parser.error("--steps must be >= 2 (the first step of a chunk is not timed) and --chunks >= 1")
    if args.threads < 0:
        parser.error(f"--threads must be >= 0 (0: torch's choice), got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    from albertlm.config.presets import get_preset
    from albertlm.model.albert import packed_attention_supported
    from albertlm.model.fast_paths import choose_fast_path, cpu_capability

    device = parse_device(parser, args.device)
    cuda = device.type == "cuda"
    rows, dtypes = args.rows or ("32x512" if cuda else "8x128,2x512"), args.dtypes or default_dtypes(device)
    compiled = args.compiled or cuda
    for precision in dtypes.split(","):
        if precision not in DTYPES or (precision == "fp16" and not cuda):
            parser.error(f"--dtypes: {precision!r} is not one of fp32, bf16, fp16 (fp16 on cuda only)")
    cfg = get_preset("albert-base")
    shapes = parse_rows(parser, rows, cfg.max_position_embeddings)   # T >= 8: the data builder's shortest
    # the bench extra has it; without, a traceback at the first row's models
    if importlib.util.find_spec("transformers") is None:
        parser.error("transformers is not installed: the comparison needs it (pip install -e '.[bench]')")
    where = (f"{torch.cuda.get_device_name(device)} (packed attention over the real tokens: "
             f"{packed_attention_supported(device)})" if cuda else
             f"CPU {cpu_capability()}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    print(f"albert-base on {where}; torch {torch.__version__}; fast paths fp32 {choose_fast_path(device, 'fp32')}, "
          f"bf16 {choose_fast_path(device, 'bf16')}. Matmul rate measured before each row ("
          f"{' or '.join(gemm_kernels(torch.float32, device))}, the fastest)."
          + dtypes_note(dtypes, args.dtypes is not None, device), flush=True)
    names = ["ours", "hf"] + (["ours-compiled", "hf-compiled"] if compiled else [])
    print("| B x T | dtype | " + " | ".join(f"{n} tok/s" for n in names) + " | ours / hf |"
          + (" ours / hf-compiled | ours-compiled / hf-compiled | compile s (ours, hf) |" if compiled else "")
          + " matmul TFLOP/s | MFU " + " / ".join(names) + " | data wait |")
    print("|---" * (len(names) + 6 + (3 if compiled else 0)) + "|", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = {}
        for B, T in shapes:
            data.setdefault(T, build_data(tmp, T))
            for precision in dtypes.split(","):
                rate = mfu_rate(precision, device)
                r = bench_row(cfg, B, T, precision, data[T], tmp, args.chunks, args.steps, device, compiled)
                s = r["seconds"]
                line = (f"| {r['shape']} | {r['dtype']} | " + " | ".join(f"{r['tokens'] / s[n]:.0f}" for n in names)
                        + f" | {s['hf'] / s['ours']:.2f}x |")
                if compiled:
                    c = r["compile_s"]
                    line += (f" {s['hf-compiled'] / s['ours']:.2f}x | {s['hf-compiled'] / s['ours-compiled']:.2f}x | "
                             f"{c['ours-compiled']:.0f}, {c['hf-compiled']:.0f} |")
                line += (f" {rate / 1e12:.3g} | " + " / ".join(f"{r['flops'] / s[n] / rate:.0%}" for n in names)
                         + f" | {r['wait']:.1%} |")
                print(line, flush=True)
    if not cuda:
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
