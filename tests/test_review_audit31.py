"""Independent review of session 31's changes (a49565e..b3d49e6), area review31. Each test is marked xfail(strict)
with the fix it waits for; the fix flips it.

1. data/shards.py `_read_at`: where `os.preadv` is missing (a POSIX system without it) the read falls back to seek +
   read on the descriptor that DataLoader workers share after a fork: their reads move each other's file position
   (another row's bytes, no error). `os.pread` exists on every POSIX system and uses no file position.
2. tasks/finetune.py `check_positions` on a streamed dev / test file (`FeatureWindows`): the length check now runs
   as each window is predicted, so `predict classify --dev short.csv --test long.csv` with a --max-seq-length past
   the model's positions wrote dev_predictions.tsv, then failed on the test file (exit 2, a file written); it was
   refused before anything was predicted or written.
3. model/io.py `save_checkpoint`: a save killed while it writes (the OOM killer in a notebook, kill -9) leaves its
   staging folder `.albertlm-save-*` (a whole model.safetensors) inside the model directory for good: no later
   save removes it, and it travels with every copy or upload of the directory.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.data.shards import read_meta, record_dtype
from albertlm.model import io
from test_classify_audit22 import _finetune, spm_model  # noqa: F401  (spm_model: a fixture)
from test_data_audit31 import shards  # noqa: F401  (shards: a fixture, a build of several shards)


# -- 1. the fallback of the positional reads ----------------------------------------------------------------------
def test_shard_reads_without_preadv_leave_the_shared_file_position_alone(shards, monkeypatch):  # noqa: F811
    from albertlm.data.loader import PretrainingDataset

    meta = read_meta(shards)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    stored = np.fromfile(shards / meta["shards"][0]["file"], dtype=dtype)
    monkeypatch.delattr(os, "preadv", raising=False)   # macOS before 11, NetBSD, ...: no preadv
    ds = PretrainingDataset(shards)
    assert ds.records([0]).tobytes() == stored[:1].tobytes()
    fd = ds._shards._files[0].fileno()   # the descriptor DataLoader workers inherit when they are forked
    os.lseek(fd, 7, os.SEEK_SET)          # where another process sharing it left the position
    assert ds.records([3, 1]).tobytes() == stored[[3, 1]].tobytes()
    assert os.lseek(fd, 0, os.SEEK_CUR) == 7


# -- 2. a failed predict writes nothing ---------------------------------------------------------------------------
def test_a_predict_refused_for_a_too_long_test_file_writes_no_dev_predictions(spm_model, tmp_path, capsys,  # noqa: F811
                                                                              one_thread):
    run = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, run) == 0     # positions cover 64 tokens
    capsys.readouterr()
    test = tmp_path / "long.csv"
    test.write_text("text\nshort one\n" + " ".join(["word"] * 200) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = main(["predict", "classify", "--model", str(run), "--dev", str(tmp_path / "dev.csv"), "--test", str(test),
                 "--out", str(out), "--max-seq-length", "128", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "its position embeddings cover 64 tokens" in err, err
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []


# -- 3. a killed save's staging folder ----------------------------------------------------------------------------
_KILLED_SAVE = """
import os, sys, torch
from albertlm.config import ModelConfig
from albertlm.model import io
from albertlm.model.heads import AlbertForSequenceClassification
config = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=1, num_heads=4, ffn_size=37,
                     max_position_embeddings=64)
AlbertForSequenceClassification(config).save_pretrained(sys.argv[1])
io.sort_metadata = lambda *args: os._exit(9)     # killed while the new weights are written
AlbertForSequenceClassification(config).save_pretrained(sys.argv[1])
"""


def test_the_next_save_clears_a_killed_saves_staging_folder(tmp_path, tiny_config, one_thread):
    from albertlm.model.heads import AlbertForSequenceClassification

    directory = tmp_path / "model"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(io.__file__).parents[2]),
                                                                        os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(directory)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert [p.name for p in directory.iterdir() if p.name.startswith(io.SAVE_TMP_PREFIX)]   # the killed save's
    AlbertForSequenceClassification(tiny_config).save_pretrained(directory)
    assert [p.name for p in directory.iterdir() if p.name.startswith(io.SAVE_TMP_PREFIX)] == []
