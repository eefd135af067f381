"""Dynamic masks belong to the example, not to the batch it travels in: an example's masks are a function of
(seed, epoch, global example index) alone, so the global batch of a step is the same bytes for any process
count, micro-batch size or accumulation, and on `--resume` with another layout; pretraining losses follow.

Simulated ranks: `StepData(rank=r, world_size=W)` reads rank r's share of each step exactly as a torchrun
process does (the same class, the same DataLoader path); the real 2-process gloo run is the last test."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from albertlm.data.build import BuildConfig, build
from albertlm.data.loader import BATCH_KEYS, PretrainingDataset, collate
from albertlm.data.masking import mask_records
from albertlm.training.distributed import DistInfo
from albertlm.training.loop import StepData, shuffled_batches
from conftest import shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module
SPM = ("spm", "albert-base-v2_spiece.model")
SEED, BATCH = 11, 8
# (processes, micro-batches per process and step): 1 x 8, 2 ranks x 4, 1 x 2 with accumulation 4, 4 ranks x (2 x 1)
LAYOUTS = [(1, 1), (2, 1), (1, 4), (4, 2)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    corpus = tmp_path_factory.mktemp("corpus")
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:600]
    (corpus / "alice.txt").write_text("\n\n".join("\n".join(lines[k:k + 150]) for k in range(0, 600, 150)) + "\n")
    out = tmp_path_factory.mktemp("built")
    build(BuildConfig(inputs=[str(corpus)], tokenizer=str(shared_path(*SPM)), out=str(out), max_seq_length=64,
                      dupe_factor=1, progress=False))
    return out


def _sampler(ds, rank=0, world_size=1, micro_batches=1) -> StepData:
    return StepData(ds, collate, shuffled_batches(len(ds), BATCH, SEED), micro_batches, rank, world_size,
                    epoch_keys=True, identity={"batch_size": BATCH, "seed": SEED})


def _global_batches(ds, world_size: int, micro_batches: int, start: int, count: int) -> list[dict]:
    """Steps start .. start+count-1 as global batches: every rank's micro-batches, rank by rank, concatenated
    (each rank's share is a contiguous slice of the global batch)."""
    streams = [_sampler(ds, r, world_size, micro_batches).steps(start) for r in range(world_size)]
    out = []
    for _ in range(count):
        parts = [mb for stream in streams for mb in next(stream)]
        assert all(len(p["input_ids"]) == BATCH // (world_size * micro_batches) for p in parts)
        out.append({k: torch.cat([p[k] for p in parts]) for k in BATCH_KEYS})
    return out


def _assert_same(a: list[dict], b: list[dict], what: str) -> None:
    for step, (x, y) in enumerate(zip(a, b)):
        for key in BATCH_KEYS:
            assert torch.equal(x[key], y[key]), f"{what}: step {step}, {key}"


def test_global_batch_masks_do_not_depend_on_the_process_layout(built):
    """Masked positions, ids and inputs of every step are the same for 1 process x micro-batch 8, 2 simulated
    ranks x micro-batch 4, 1 process x micro-batch 2 (accumulation 4) and 4 ranks x 2 micro-batches of 1;
    across an epoch boundary."""
    ds = PretrainingDataset(built, dynamic_masking=True, seed=SEED)
    per_epoch = _sampler(ds).steps_per_epoch
    steps = per_epoch + 2                                      # into the second epoch (new masks there)
    reference = _global_batches(ds, *LAYOUTS[0], 0, steps)
    for layout in LAYOUTS[1:]:
        _assert_same(reference, _global_batches(ds, *layout, 0, steps), f"layout {layout}")
    assert any(bool((b["masked_lm_weights"] > 0).any()) for b in reference)


def test_an_example_is_masked_the_same_in_any_batch(built):
    """The mask of (epoch, index) alone equals its mask inside any micro-batch, in any position: masking that
    record by itself with `example_rng(seed, epoch, index)` (the per-example stream)."""
    from albertlm.data.loader import example_rng

    ds = PretrainingDataset(built, dynamic_masking=True, seed=SEED)
    keys = [(3, i) for i in (5, 0, 17, 2, 9, 30, 1)]
    together = ds.__getitems__(keys)
    shuffled = ds.__getitems__(keys[::-1])[::-1]
    for key, a, b in zip(keys, together, shuffled):
        alone = ds[key]
        for name in BATCH_KEYS:
            np.testing.assert_array_equal(a[name], alone[name], err_msg=f"{key} {name}")
            np.testing.assert_array_equal(b[name], alone[name], err_msg=f"{key} {name}")
        record = ds.record(key[1])
        masked = mask_records(record["input_ids"][None].astype(np.int64), np.array([int(record["length"])]),
                              np.array([int(record["type_boundary"])]), ds._vocab, ds._masking,
                              example_rng(SEED, *key), ds._random_ids)
        count = int(masked.counts[0])
        np.testing.assert_array_equal(alone["masked_lm_positions"][:count], masked.positions[0, :count])
        np.testing.assert_array_equal(alone["input_ids"][masked.positions[0, :count]], masked.inputs[0, :count])
    assert not np.array_equal(ds[(3, 5)]["masked_lm_positions"], ds[(4, 5)]["masked_lm_positions"])
    other_seed = PretrainingDataset(built, dynamic_masking=True, seed=SEED + 1)
    assert not np.array_equal(ds[(3, 5)]["masked_lm_positions"], other_seed[(3, 5)]["masked_lm_positions"])


def test_resume_with_the_same_or_another_layout_gives_the_same_masks(built):
    """Step k read from a stream started at k (a resumed run) equals step k of an uninterrupted stream, with
    the layout kept or changed at the resume."""
    ds = PretrainingDataset(built, dynamic_masking=True, seed=SEED)
    per_epoch = _sampler(ds).steps_per_epoch
    start = per_epoch - 1
    uninterrupted = _global_batches(ds, 1, 1, 0, per_epoch + 2)[start:]
    for layout in LAYOUTS:
        _assert_same(uninterrupted, _global_batches(ds, *layout, start, 3), f"resumed at {start} as {layout}")


# ----------------------------------------------------------------------------- pretraining, end to end
def _run_config(built: Path, max_steps: int, micro: int):
    from albertlm.config import ModelConfig
    from albertlm.config.run import DataConfig, OptimConfig, RunConfig, TrainConfig

    model = ModelConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4, ffn_size=37,
                        max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0,
                        classifier_dropout=0.0)   # no dropout at all: only the masks could differ
    train = TrainConfig(max_steps=max_steps, batch_size=BATCH, micro_batch_size=micro, seed=SEED, log_every=1,
                        eval_every=0, save_every=0, progress=False, tensorboard=False)
    return RunConfig(model=model, optim=OptimConfig(lr=0.01, warmup_steps=1), train=train,
                     data=DataConfig(path=str(built), dynamic_masking=True))


def _losses(built: Path, run_dir: Path, micro: int, steps: int, info: DistInfo = DistInfo()) -> dict[int, float]:
    from albertlm.training.pretrain import open_datasets, make_loop

    run = _run_config(built, steps, micro)
    loop = make_loop(run, run_dir, open_datasets(run), info, False)
    losses: dict[int, float] = {}
    loop.on_step = lambda step, metrics: losses.__setitem__(step, metrics["loss"])
    loop.run()
    return losses


def test_pretraining_losses_do_not_depend_on_accumulation(built, tmp_path, one_thread):
    """Dynamic masking: micro-batch 8 and micro-batch 2 x accumulation 4 give the same losses (before, the
    masks followed the micro-batch and the losses differed by ~1e-1)."""
    whole = _losses(built, tmp_path / "whole", micro=8, steps=4)
    accumulated = _losses(built, tmp_path / "accumulated", micro=2, steps=4)
    assert sorted(whole) == [1, 2, 3, 4]
    for step, loss in whole.items():
        assert accumulated[step] == pytest.approx(loss, abs=1e-5), step


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_worker(rank: int, world_size: int, port: int, built: str, run_dir: str, out_file: str, steps: int) -> None:
    """One rank of a 2-process gloo pretraining run on dynamically masked data (spawned below)."""
    import os

    from albertlm.training.distributed import init_distributed, shutdown

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("gloo", "cpu")
    losses = _losses(Path(built), Path(run_dir), micro=4, steps=steps, info=info)
    if rank == 0:
        torch.save(losses, out_file)
    shutdown()


def test_two_gloo_processes_equal_one_process_with_dynamic_masking(built, tmp_path, one_thread):
    steps, out = 3, tmp_path / "ddp.pt"
    mp.start_processes(gloo_worker, args=(2, _free_port(), str(built), str(tmp_path / "ddp"), str(out), steps),
                       nprocs=2, join=True, start_method="spawn")
    ddp = torch.load(out, weights_only=True)
    single = _losses(built, tmp_path / "single", micro=8, steps=steps)
    assert sorted(ddp) == sorted(single) == [1, 2, 3]
    for step, loss in single.items():
        assert ddp[step] == pytest.approx(loss, abs=1e-5), step
