"""Review of audit 29's commits (bb91509..6bd2c77), as a reviewer who did not write them. Found:

1. data/shards.py `ShardMaps` (at most 64 maps, least recently used dropped): the pretraining sampler reads a random
   permutation of the whole data set, so once a build has more shards than the cache holds (more than 64 shards:
   16 GB at the default 256 MB a shard, any `--num-shards K` build of more than 64 parts, `--records-per-shard`),
   most record reads map a shard again (open, fstat, mmap; the dropped map's munmap). Measured on this machine
   (2 shared cores, T=128, micro-batches of 128, static masks, wikitext-2 test, 534 shards): 45 us a record before
   (bb91509) -> 121 us (6bd2c77), 2.7x; one shard: 28 -> 31 us. With `data.num_workers` 0 (the default) this runs
   in the training process, between steps.
2. cli/task_commands.py `_check_out_keeps_other_predictions`: the same task predicted again into its own --out after
   its dev file changed length (a bad row fixed after a `--skip-bad-rows` run, rows added) is refused as "another dev
   set", the advice being an --out named after the very task whose file is there, and nothing says the file may be
   removed: there is no --overwrite on predict.
"""
from __future__ import annotations

import mmap
import resource
from pathlib import Path

import numpy as np
import pytest

from albertlm.data.shards import read_meta
from conftest import alice_documents
from test_databuild_audit29 import _build
from test_ftfollow_audit29 import _predict, _sst2_files, models  # noqa: F401  (models: a module fixture)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture
def descriptor_limits():
    """RLIMIT_NOFILE (soft, hard) before the test, put back after it: `map_budget` raises this process's soft limit
    toward the hard one, which would otherwise stay raised for every later test in this worker."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


# ------------------------------------------------------------------ 1. random reads over more shards than 64

def test_a_random_order_over_a_hundred_shards_maps_each_shard_once(tmp_path, monkeypatch, descriptor_limits):
    """The sampler's order (a permutation of every instance, `loop.shuffled_batches`) read twice, in micro-batches,
    over ~100 shards of one record each, where the process may hold a thousand descriptors: each shard is mapped
    once (the maps of a hundred shards hold a hundred descriptors), not again for most reads."""
    from albertlm.data.loader import PretrainingDataset

    out = tmp_path / "data"
    assert _build([alice_documents(tmp_path, 110)], out, "--records-per-shard", "1") == 0
    shards = len(read_meta(out)["shards"])
    assert 64 < shards < 400, shards
    # `map_budget` raises the soft limit toward the hard one (whatever an earlier test left it at): only a hard
    # limit under two descriptors a shard keeps fewer maps than shards
    hard = descriptor_limits[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * shards:
        pytest.skip(f"a hard descriptor limit of {hard} (ulimit -Hn)")
    ds = PretrainingDataset(out)

    made: list[int] = []

    class CountingMap(mmap.mmap):   # np.memmap (and any raw map) makes its map with mmap.mmap
        def __new__(cls, *args, **kwargs):
            made.append(1)
            return super().__new__(cls, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", CountingMap)
    for epoch in range(2):
        order = np.random.default_rng([0, epoch]).permutation(len(ds))
        for start in range(0, len(order), 16):
            ds.__getitems__([int(i) for i in order[start:start + 16]])
    assert len(made) <= shards, f"{len(made)} maps made for {2 * len(ds)} reads of {shards} shards"


# ------------------------------------------------------------------ 2. the same task's dev set predicted again

def test_the_same_task_predicted_again_after_its_dev_file_changed(models, tmp_path, capsys):  # noqa: F811
    """SST-2's dev set predicted into sub/, then again after a row was added to the dev file: replaced (an earlier
    prediction of this task), or, if refused, the error names the file to remove to replace it."""
    dev, _ = _sst2_files(tmp_path / "v1", 6)
    out = tmp_path / "sub"
    assert _predict("sst2", models["sst2"], out, "--dev", str(dev)) == 0
    capsys.readouterr()
    grown, _ = _sst2_files(tmp_path / "v2", 7)          # the same task's dev file, a row more
    code = _predict("sst2", models["sst2"], out, "--dev", str(grown))
    err = capsys.readouterr().err
    if code == 0:
        assert len((out / "dev_predictions.tsv").read_text().splitlines()) == 1 + 7
    else:
        assert "remove" in err and str(out / "dev_predictions.tsv") in err, err
