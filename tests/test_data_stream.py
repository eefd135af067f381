"""The build as a stream: shard round-trip, determinism across workers and parts, atomicity, bounded memory,
and reading it for training: batches, the training sampler's rank sharding and resumable position
(`training.loop.StepData`, the one sampler), dynamic masking."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from albertlm.data import build as build_module
from albertlm.data.build import BuildConfig, build
from albertlm.data.loader import BATCH_KEYS, PretrainingDataset, collate
from albertlm.errors import UserError
from conftest import shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Three documents per file (blank-line separated) cut from two real books, one sentence per line."""
    root = tmp_path_factory.mktemp("corpus")
    for name in ("carroll-alice.txt", "chesterton-thursday.txt"):
        lines = shared_path("text", "gutenberg", name).read_text().splitlines()[:900]
        docs = ["\n".join(lines[k:k + 300]) for k in range(0, 900, 300)]
        (root / name).write_text("\n\n".join(docs) + "\n")
    return root


def _config(corpus, out, **overrides) -> BuildConfig:
    values = dict(inputs=[str(corpus)], tokenizer=str(shared_path(*SPM)), out=str(out), max_seq_length=64,
                  dupe_factor=2, chunk_chars=20_000, progress=False)
    values.update(overrides)
    return BuildConfig(**values)


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built")
    build(_config(corpus, out, records_per_shard=500))
    return out


def _shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_round_trip_items_are_well_formed(built):
    ds = PretrainingDataset(built)
    assert len(ds) == ds.meta["num_instances"] > 1000
    assert len(ds.meta["shards"]) > 1  # records_per_shard=500 rolled over
    tok = ds.meta["tokenizer"]
    for i in range(0, len(ds), 37):
        item, rec = ds[i], ds.record(i)
        length, boundary = int(rec["length"]), int(rec["type_boundary"])
        ids = rec["input_ids"].astype(np.int64)
        assert ids[0] == tok["cls_id"] and ids[boundary - 1] == tok["sep_id"] and ids[length - 1] == tok["sep_id"]
        assert (ids[length:] == 0).all() and item["attention_mask"].sum() == length
        assert item["token_type_ids"][:boundary].sum() == 0 and item["token_type_ids"][boundary:length].all()
        used = item["masked_lm_weights"] > 0
        positions = item["masked_lm_positions"][used]
        np.testing.assert_array_equal(item["masked_lm_ids"][used], ids[positions])
        unchanged = np.setdiff1d(np.arange(64), positions)
        np.testing.assert_array_equal(item["input_ids"][unchanged], ids[unchanged])
        assert int(item["sentence_order_label"]) in (0, 1)


def test_same_seed_is_byte_identical_across_worker_counts(corpus, built, tmp_path):
    build(_config(corpus, tmp_path / "w2", records_per_shard=500, workers=2))
    assert _shard_bytes(tmp_path / "w2") == _shard_bytes(built)
    build(_config(corpus, tmp_path / "seed", records_per_shard=500, seed=1))
    assert _shard_bytes(tmp_path / "seed") != _shard_bytes(built)


def test_parts_merge_into_the_single_build(corpus, built, tmp_path):
    for index in range(3):
        build(_config(corpus, tmp_path, num_shards=3, shard_index=index, records_per_shard=500))
    merged, single = PretrainingDataset(tmp_path), PretrainingDataset(built)
    assert len(merged) == len(single)

    def rows(ds):
        return sorted(ds.record(i).tobytes() for i in range(len(ds)))
    assert rows(merged) == rows(single)
    from albertlm.training.pretrain import open_dataset      # pretraining reads a K-part build as it is
    assert len(open_dataset(tmp_path)) == len(single)
    next(tmp_path.glob("meta.part-00001-*")).unlink()
    with pytest.raises(UserError, match="missing \\[1\\]"):
        PretrainingDataset(tmp_path)


def test_a_crashed_build_leaves_nothing_that_looks_complete(corpus, tmp_path, monkeypatch):
    real = build_module.process_chunk
    calls = {"n": 0}

    def failing(chunk, ctx):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("disk on fire")
        return real(chunk, ctx)

    monkeypatch.setattr(build_module, "process_chunk", failing)
    with pytest.raises(RuntimeError):
        build(_config(corpus, tmp_path, records_per_shard=300))
    assert not (tmp_path / "meta.json").exists() and not list(tmp_path.glob("*.tmp"))
    with pytest.raises(UserError, match="no meta.json"):
        PretrainingDataset(tmp_path)
    monkeypatch.setattr(build_module, "process_chunk", real)
    build(_config(corpus, tmp_path, records_per_shard=300))  # a rerun clears the leftovers, no --overwrite
    assert len(PretrainingDataset(tmp_path)) > 0


def _peak_memory(cfg) -> int:
    tracemalloc.start()
    try:
        build(cfg)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_does_not_grow_with_corpus_size(tmp_path):
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text()
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir(), large.mkdir()
    (small / "a.txt").write_text(text)
    for k in range(10):
        (large / f"a{k}.txt").write_text(text)  # ten books: 10x the corpus
    common = dict(dupe_factor=1, max_seq_length=128, chunk_chars=50_000, sentence_task="nsp")
    build(_config(small, tmp_path / "warm", **common))  # one-time costs (imports, caches) out of the way
    peak_small = _peak_memory(_config(small, tmp_path / "o1", **common))
    peak_large = _peak_memory(_config(large, tmp_path / "o10", **common))
    assert PretrainingDataset(tmp_path / "o10").meta["num_instances"] >= 9 * PretrainingDataset(tmp_path / "o1").meta["num_instances"]
    assert peak_large < 1.25 * peak_small


def test_collate_gives_the_batch_contract(built):
    ds = PretrainingDataset(built)
    batch = collate([ds[i] for i in range(5)])
    assert set(batch) == set(BATCH_KEYS) | {"token_index"}
    import torch

    assert torch.equal(batch["token_index"], batch["attention_mask"].flatten().nonzero().squeeze(1))

    assert batch["input_ids"].shape == (5, 64) and batch["input_ids"].dtype == torch.int64
    assert batch["masked_lm_positions"].shape == (5, ds.max_predictions)
    assert batch["masked_lm_weights"].dtype == torch.float32 and batch["sentence_order_label"].shape == (5,)


def test_dataset_pickles_without_copying_the_shards(built):
    import pickle

    ds = PretrainingDataset(built, dynamic_masking=True, seed=2)
    blob = pickle.dumps(ds)
    assert len(blob) < 100_000 < sum(p.stat().st_size for p in built.glob("shard-*.bin"))
    copy = pickle.loads(blob)
    np.testing.assert_array_equal(copy[(3, 7)]["input_ids"], ds[(3, 7)]["input_ids"])   # (epoch, index)


def _sampler(ds, batch_size, seed, rank=0, world_size=1, micro_batches=1):
    from albertlm.training.loop import StepData, shuffled_batches

    return StepData(ds, collate, shuffled_batches(len(ds), batch_size, seed), micro_batches, rank, world_size,
                    epoch_keys=ds.dynamic_masking, identity={"batch_size": batch_size, "seed": seed})


def test_ranks_split_each_epoch_disjointly(built):
    """Global batches of 32: each of 2 ranks reads its 16 per step, never the other's."""
    ds = PretrainingDataset(built)
    seen = []
    for rank in range(2):
        sampler = _sampler(ds, 32, seed=3, rank=rank, world_size=2)
        steps = list(zip(range(sampler.steps_per_epoch), sampler.plan(0)))
        seen.append({i for _, parts in steps for part in parts for i in part})
        assert len(steps) == sampler.steps_per_epoch
    assert not seen[0] & seen[1]
    assert len(seen[0]) == len(seen[1]) == len(ds) // 2 // 16 * 16


def test_dynamic_masking_changes_per_epoch_and_is_seeded(built):
    ds = PretrainingDataset(built, dynamic_masking=True, seed=5)
    first, again, later = ds[(0, 3)], ds[(0, 3)], ds[(1, 3)]          # (epoch, index)
    np.testing.assert_array_equal(first["input_ids"], again["input_ids"])
    assert not np.array_equal(first["masked_lm_positions"], later["masked_lm_positions"])
    static = PretrainingDataset(built)[3]
    np.testing.assert_array_equal(static["attention_mask"], later["attention_mask"])
    assert first["masked_lm_weights"].sum() == static["masked_lm_weights"].sum()  # same budget


def test_dynamic_masks_of_a_batch_are_the_builders_masking(built):
    """A micro-batch is masked in one `mask_records` call (the builder's), seeded by its keys: the same
    keys give the same masks, whole words stay whole and the budget is the build's."""
    ds = PretrainingDataset(built, dynamic_masking=True, seed=5)
    keys = [(2, i) for i in range(0, 40, 3)]
    a, b = ds.__getitems__(keys), ds.__getitems__(keys)
    for x, y, (_, index) in zip(a, b, keys):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])
        static = PretrainingDataset(built)[index]
        assert x["masked_lm_weights"].sum() == static["masked_lm_weights"].sum()
        used = x["masked_lm_weights"] > 0
        np.testing.assert_array_equal(x["masked_lm_ids"][used], ds.record(index)["input_ids"][x["masked_lm_positions"][used]])


def test_cursor_resumes_exactly_across_epochs(built):
    ds = PretrainingDataset(built, dynamic_masking=True)
    per_epoch = _sampler(ds, 64, seed=1).steps_per_epoch
    stream = _sampler(ds, 64, seed=1).steps(0)
    expected = [next(stream) for _ in range(per_epoch + 3)]
    resumed_at = per_epoch - 2
    first = _sampler(ds, 64, seed=1)
    state = first.state_dict(resumed_at)
    second = _sampler(ds, 64, seed=1)
    second.check_resume(state)
    stream = second.steps(state["step"])
    for want in expected[resumed_at:]:
        got = next(stream)
        assert all(bool((g[k] == w[k]).all()) for g, w in zip(got, want) for k in BATCH_KEYS)
    assert divmod(resumed_at + len(expected[resumed_at:]) - 1, per_epoch)[0] == 1   # crossed into epoch 1
    with pytest.raises(UserError, match="batch_size"):
        _sampler(ds, 32, seed=1).check_resume(state)
