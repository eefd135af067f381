"""Synthetic pretraining examples in the data loader's format (dicts of numpy arrays), for the training tests.
Kept free of pytest so spawned worker processes can import it."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from albertlm.config import ModelConfig
from albertlm.data import loader
from albertlm.config.run import RunConfig, TrainConfig, OptimConfig


class SyntheticPretraining:
    """`n` examples of length `T` with `P` masked slots: arithmetic token runs (learnable), some padding,
    a sentence-order label that is 1 when the two halves are swapped."""

    def __init__(self, n: int = 64, T: int = 24, P: int = 4, V: int = 99, seed: int = 0, sop: bool = True):
        rng = np.random.default_rng(seed)
        self.items = []
        for _ in range(n):
            length = int(rng.integers(T // 2, T + 1))
            start, stride = int(rng.integers(0, 90)), int(rng.integers(1, 4))
            tokens = (start + stride * np.arange(length)) % 20 + 5   # 20 distinct tokens
            label = int(rng.integers(0, 2))
            half = length // 2
            if label:
                tokens = np.concatenate([tokens[half:], tokens[:half]])
            ids = np.zeros(T, np.int64)
            ids[:length] = tokens
            types = np.zeros(T, np.int64)
            types[half:length] = 1
            mask = np.zeros(T, np.int64)
            mask[:length] = 1
            num = int(rng.integers(P - 1, P + 1))
            pos = np.zeros(P, np.int64)
            pos[:num] = np.sort(rng.choice(np.arange(1, length), size=num, replace=False))
            weights = np.zeros(P, np.float32)
            weights[:num] = 1.0
            masked_ids = np.where(weights > 0, ids[pos], 0)
            ids[pos[:num]] = 4                                  # [MASK]
            self.items.append(dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                                   masked_lm_positions=pos, masked_lm_ids=masked_ids, masked_lm_weights=weights,
                                   sentence_order_label=np.int64(label if sop else -100)))
        self.meta = {"vocab_size": V, "max_seq_length": T, "sentence_task": "sop" if sop else "none"}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


def tiny_model_config(dropout: float = 0.0) -> ModelConfig:
    return ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=5, num_heads=4, ffn_size=37,
                       max_position_embeddings=64, hidden_dropout=dropout, attention_dropout=dropout,
                       classifier_dropout=dropout)


# `albertlm pretrain` options of a tiny ALBERT (H 32, one layer) at batch 4, for CLI-level training tests
TINY_PRETRAIN_ARGS = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32",
                      "--model.num_layers=1", "--model.num_heads=2", "--model.ffn_size=37",
                      "--model.max_position_embeddings=64", "--batch-size", "4"]


def tiny_run(max_steps: int = 6, batch_size: int = 8, micro: int = 0, dropout: float = 0.0, **train) -> RunConfig:
    settings = dict(max_steps=max_steps, batch_size=batch_size, micro_batch_size=micro, seed=7, log_every=1,
                    eval_every=0, save_every=0, progress=False, tensorboard=False)
    return RunConfig(model=tiny_model_config(dropout), optim=OptimConfig(lr=0.01, warmup_steps=2),
                     train=TrainConfig(**{**settings, **train}))


def ddp_worker(rank: int, world_size: int, port: int, run_dir: str, out_file: str, max_steps: int) -> None:
    """One rank of a gloo run on 127.0.0.1 (spawned by tests/test_distributed.py)."""
    import os

    import torch

    from albertlm.training.distributed import init_distributed, shutdown
    from albertlm.training.pretrain import Datasets, make_loop

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("gloo", "cpu")
    ds = SyntheticPretraining(n=64)
    data = Datasets(train=ds, eval=SyntheticPretraining(n=16, seed=1), collate=loader.collate,
                    meta=ds.meta)
    loop = make_loop(tiny_run(max_steps=max_steps, micro=2, save_every=max_steps), Path(run_dir), data, info, False)
    losses = {}
    loop.on_step = lambda step, metrics: losses.__setitem__(step, metrics["loss"])
    loop.run()
    evaluation = loop.evaluate_fn()
    if rank == 0:
        weights = {k: v.detach().clone() for k, v in loop.model.module.state_dict().items()}
        torch.save({"losses": losses, "weights": weights, "eval": evaluation}, out_file)
    shutdown()


# ------------------------------------------------------------------------------------------ fine-tuning
class StubTokenizer:
    """What the fine-tuning driver needs of a tokenizer: the pad id, and saving itself beside best/."""
    pad_id = 0

    def save(self, directory) -> None:
        (Path(directory) / "vocab.txt").write_text("[PAD]\n")


def synthetic_task(n: int = 32, seed: int = 0, vocab_size: int = 17):
    """A classification TaskSpec on random token features (label: parity of the first token), learnable."""
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.features import Feature
    from albertlm.tasks.finetune import EvalSet, TaskSpec

    rng = np.random.default_rng(seed)

    def features(count):
        out = []
        for i in range(count):
            ids = rng.integers(5, vocab_size, size=int(rng.integers(8, 21)))
            ids[0] = 2
            out.append(Feature(ids, np.zeros_like(ids), i, int(ids[1] % 2)))
        return out

    train, dev = features(n), features(12)
    gold = np.array([f.label for f in dev])

    def score(out):
        return {"accuracy": float((out["logits"].argmax(-1) == gold).mean())}

    return TaskSpec("classify", AlbertForSequenceClassification, {"num_labels": 2}, train,
                    [EvalSet("dev", dev, score)], "accuracy", torch.long, {"labels": ["0", "1"]})


def finetune_config(max_steps: int = 6, micro: int = 0):
    from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train

    return FinetuneConfig(finetune_optim(lr=5e-3, warmup_steps=1),
                          finetune_train(batch_size=8, micro_batch_size=micro, max_steps=max_steps, seed=5,
                                         eval_every=3, log_every=1, progress=False, tensorboard=False),
                          hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)


def finetune_ddp_worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str, out_file: str) -> None:
    """One rank of a 2-process gloo fine-tune (spawned by tests/test_finetune_loop.py)."""
    import os

    import torch

    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training.distributed import init_distributed, shutdown

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("gloo", "cpu")
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), finetune_config(micro=2), out_dir, info)
    losses = run_recording_losses(loop)
    if rank == 0:
        torch.save({"losses": losses, "weights": weights_of(loop), "best": loop.state.extra["best"]}, out_file)
    shutdown()


def run_recording_losses(loop) -> dict[int, float]:
    """Runs a training loop to its end; each step's loss (the loop's own `on_step` still called)."""
    losses = {}
    hook = loop.on_step
    loop.on_step = lambda step, metrics: (hook(step, metrics), losses.__setitem__(step, metrics["loss"]))
    loop.run()
    return losses


def weights_of(loop) -> dict:
    """A copy of the loop's (unwrapped) model weights."""
    return {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}


def alice_sop_data(root: Path, lines: int = 200) -> Path:
    """`root/train`: 32-token SOP data built by the CLI from `lines` lines of the shared Alice text, with
    albert-base-v2's SentencePiece (for tests that run `albertlm pretrain` on real data)."""
    from albertlm.cli.main import main
    from conftest import alice_documents, shared_path

    text = alice_documents(root, lines)
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(root / "train"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    return root / "train"


def slow_evaluations_and_saves(loop, monkeypatch):
    """`loop` whose every evaluation and save takes 1000 s of a fake clock (the loop's `time.perf_counter`, real
    time plus what they spent): for checks that timings leave evaluation and checkpoint time out."""
    import time

    from albertlm.training import loop as loop_module

    clock = [0.0]
    real = time.perf_counter
    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: real() + clock[0])

    def slow(work):
        def run():
            clock[0] += 1000.0
            return work()
        return run

    loop.evaluate_fn, loop.save = slow(loop.evaluate_fn), slow(loop.save)
    return loop
