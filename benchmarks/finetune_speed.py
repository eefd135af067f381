"""Fine-tuning throughput on SST-2 train with albert-base (random weights, 30k vocabulary): examples/s.

Rows, all training steps (forward + backward + AdamW step, batch 32, fp32, same tokenised examples):
  transformers, padded to 128   AlbertForSequenceClassification fed shuffled batches padded to a fixed 128
                                (the common `pad_to_max_length` setup)
  transformers, dynamic         same model, shuffled batches padded to their own longest sequence
  albertlm                      our pipeline: our model prepared as `albertlm finetune` prepares it
                                (`training.precision.prepare_model`: the CPU fast paths where this CPU's
                                probe picks them), length-bucketed batches padded per batch
                                (`tasks.features.bucket_batches` + `collate`), as `albertlm finetune` runs
  albertlm, padded to 128       our model on the fixed-128 batches (separates model speed from padding)

All rows train on the same randomly drawn `steps x batch` examples of SST-2 train, each in its own
batching (shuffled for transformers, length-bucketed for ours), one warm-up step first; the rows take
their steps in turn (round robin) so a busy machine slows them alike. transformers' model is ours (seeded)
exported with `albertlm.interop.hf.export_hf`: the same config and weights (`models`). Both models attend through
SDPA (transformers loaded with `attn_implementation="sdpa"`) with the preset's dropout, in train mode. examples/s
is the timed steps' examples over their summed wall seconds (a mean rate over the steps, not a median).

    .venv/bin/python benchmarks/finetune_speed.py [--steps 8] [--batch-size 32] [--threads N]
"""
from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np
import torch

from albertlm.config.presets import get_preset
from albertlm.model.fast_paths import choose_fast_path
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks import glue
from albertlm.tasks.features import Feature, bucket_batches, collate, encode_pairs
from albertlm.tokenization import load_tokenizer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
HF_ATTENTION = "sdpa"   # transformers' attention named, not its version's default: SDPA, as ours (model_speed.py)


def load_features(max_length: int) -> tuple[list[Feature], int]:
    tokenizer = load_tokenizer(DATA / "spm" / "albert-base-v2_spiece.model")
    examples = glue.read_examples("sst2", DATA / "glue" / "SST-2" / "train.tsv")
    pairs, _ = encode_pairs(tokenizer, [e.text_a for e in examples], None, max_length)
    labels = glue.label_ids(glue.get_task("sst2"), examples)
    return [Feature(ids, types, i, y) for i, ((ids, types), y) in enumerate(zip(pairs, labels))], tokenizer.pad_id


def random_batches(n: int, batch_size: int, rng) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def time_round_robin(rows, step_fn, steps: int) -> dict[str, tuple[float, float]]:
    """{name: (examples/s, mean padded length)}: each row's step i runs before any row's step i+1."""
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-5) for name, model, _ in rows}
    seconds = {name: 0.0 for name, _, _ in rows}
    for i in range(steps + 1):
        for name, model, data in rows:
            model.train()
            start = time.perf_counter()
            step_fn(model, optimizers[name], data[i % len(data)])
            if i:  # step 0 warms up
                seconds[name] += time.perf_counter() - start
    out = {}
    for name, _, data in rows:
        timed = [data[i % len(data)] for i in range(1, steps + 1)]
        examples = sum(b["input_ids"].shape[0] for b in timed)
        out[name] = (examples / seconds[name], sum(b["input_ids"].shape[1] for b in timed) / steps)
    return out


def train_step(model, optimizer, batch) -> None:
    loss = model(**batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def our_model(cfg, model: AlbertForSequenceClassification | None = None) -> AlbertForSequenceClassification:
    """Our classifier (`model`, else a new one of `cfg`) as `albertlm finetune` trains it on the CPU
    (`training.trainer.build_loop`: `prepare_model`, fp32, the CPU fast paths where the probe picks them)."""
    from albertlm.training.precision import prepare_model

    model = AlbertForSequenceClassification(cfg) if model is None else model
    return prepare_model(model, precision="fp32", device=torch.device("cpu"))


def models(cfg) -> tuple[AlbertForSequenceClassification, torch.nn.Module]:
    """Ours (as `our_model` prepares it) and transformers' AlbertForSequenceClassification with the same config and
    weights: our plain model exported (`export_hf`: every config field, the dropout, the classifier) and loaded
    with SDPA attention. transformers' own init from an AlbertConfig (`hf_model`) gave other weights."""
    import tempfile

    import transformers

    from albertlm.interop.hf import export_hf

    plain = AlbertForSequenceClassification(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(plain, tmp)
        theirs = transformers.AlbertForSequenceClassification.from_pretrained(tmp, attn_implementation=HF_ATTENTION)
    return our_model(cfg, plain), theirs


def hf_model(cfg):
    """transformers' classifier of `cfg`'s sizes with transformers' own random weights (`models` gives it ours)."""
    from transformers import AlbertConfig, AlbertForSequenceClassification as HFAlbert

    hf_cfg = AlbertConfig(vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size,
                          hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                          num_attention_heads=cfg.num_heads, intermediate_size=cfg.ffn_size,
                          hidden_act=cfg.activation, hidden_dropout_prob=cfg.hidden_dropout,
                          attention_probs_dropout_prob=cfg.attention_dropout,
                          classifier_dropout_prob=cfg.classifier_dropout, num_labels=2,
                          attn_implementation=HF_ATTENTION)
    return HFAlbert(hf_cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="timed training steps per row (default 8)")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per step (default 32)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0: torch's choice)")
    args = parser.parse_args()
    for option, value, least in (("--steps", args.steps, 1), ("--batch-size", args.batch_size, 1),
                                 ("--threads", args.threads, 0)):
        if value < least:       # before the minute of reading SST-2: a modulo or range() by zero came after it
            parser.error(f"{option} must be >= {least}, got {value}")
    # the bench extra has it; without, a traceback after a minute of reading SST-2
    if importlib.util.find_spec("transformers") is None:
        parser.error("transformers is not installed: the comparison needs it (pip install -e '.[bench]')")
    if args.threads:
        torch.set_num_threads(args.threads)
    features, pad_id = load_features(128)
    if args.batch_size * args.steps > len(features):   # every row trains on distinct examples
        parser.error(f"--batch-size x --steps ({args.batch_size * args.steps}) is more than the "
                     f"{len(features)} SST-2 training examples")
    lengths = np.asarray([f.length for f in features])
    print(f"SST-2 train: {len(features)} examples, tokens per example mean {lengths.mean():.1f}, "
          f"max {lengths.max()}; albert-base, batch {args.batch_size}, {args.steps} timed steps, "
          f"{torch.get_num_threads()} threads; our CPU fast path: {choose_fast_path('cpu', 'fp32')}")
    cfg = get_preset("albert-base", num_labels=2)
    B = args.batch_size

    def batches(index_lists, pad_to=None):
        return [collate([features[i] for i in idx], pad_id, torch.long, pad_to) for idx in index_lists]

    rng = np.random.default_rng(0)
    pool = rng.choice(len(features), size=B * args.steps, replace=False)   # the examples every row trains on
    random = [pool[i] for i in random_batches(len(pool), B, rng)]
    bucketed = [pool[i] for i in bucket_batches(lengths[pool], B, rng)]
    torch.manual_seed(0)
    ours, theirs = models(cfg)
    rows = [
        ("transformers, padded to 128", theirs, batches(random, 128)),
        ("transformers, dynamic padding", theirs, batches(random)),
        ("albertlm (bucketed dynamic padding)", ours, batches(bucketed)),
        ("albertlm, padded to 128", ours, batches(random, 128)),
    ]
    results = time_round_robin(rows, train_step, args.steps)
    base_fixed = results["transformers, padded to 128"][0]
    base_dynamic = results["transformers, dynamic padding"][0]
    print(f"\n| setup | mean padded length | examples/s | vs transformers padded to 128 | vs transformers dynamic |")
    print("|---|---|---|---|---|")
    for name, (rate, width) in results.items():
        print(f"| {name} | {width:.1f} | {rate:.1f} | {rate / base_fixed:.2f}x | {rate / base_dynamic:.2f}x |")
    ours_rate = results["albertlm (bucketed dynamic padding)"][0]
    print(f"\ntargets: >= 3x padded-to-128 ({ours_rate / base_fixed:.2f}x), "
          f">= 1.3x dynamic ({ours_rate / base_dynamic:.2f}x)")


if __name__ == "__main__":
    main()
