"""Audit 17 of `albertlm pretrain` runs: the corrected command after a run that stopped as it started, a second
run on a --out another run is writing, `--train.eval_batches` under accumulation, and tokens/s with the
evaluations and checkpoints left out. Each test failed before its fix."""
from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import make_loop
from albertlm.training.trainer import open_logger
from conftest import assert_one_error
from test_train import datasets
from train_fixtures import alice_sop_data, slow_evaluations_and_saves, tiny_run

TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "4",
        "--train.progress=false", "--train.tensorboard=true", "--save-every", "0", "--warmup-steps", "1"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """32-token SOP data from 200 lines of shared text, albert-base-v2's SentencePiece."""
    return alice_sop_data(tmp_path_factory.mktemp("audit17_data"))


# ------------------------------------------------ 1. the corrected command after a run that stopped at once
def test_the_corrected_command_reruns_where_a_run_stopped_before_its_first_record(data, tmp_path, capsys):
    """A run that diverged at step 2 (--lr far too high; the default --log-every 10 had logged nothing, no
    checkpoint) left run_config.json, an empty metrics.jsonl and an empty TensorBoard file. The same command with
    a sane --lr was refused ("already holds a run ... pass --overwrite"); now it runs there, and the user's own
    file in --out is kept. A run that had logged a record is still refused, naming what to do."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    command = ["pretrain", "--data", str(data), "--out", str(out), *TINY, "--max-steps", "2"]
    assert main([*command, "--lr", "1e30"]) == 3
    err = capsys.readouterr().err      # (nan or inf: how the overflow ends may differ between CPUs)
    assert re.search(r"loss is (nan|-?inf) at step 2 ", err), err
    assert (out / "metrics.jsonl").read_text() == "" and not (out / "checkpoints").exists()

    assert main([*command, "--lr", "0.01"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert (out / "notes.txt").read_text() == "mine\n"
    assert json.loads((out / "run_config.json").read_text())["optim"]["lr"] == 0.01
    assert [(r["step"], r["split"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())] \
        == [(2, "train"), (2, "summary")]
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["step_00000002"]

    logged = tmp_path / "logged"        # diverged at step 2 after logging step 1: its record is the history
    assert main(["pretrain", "--data", str(data), "--out", str(logged), *TINY, "--max-steps", "2",
                 "--log-every", "1", "--lr", "1e30"]) == 3
    capsys.readouterr()
    code = main(["pretrain", "--data", str(data), "--out", str(logged), *TINY, "--max-steps", "2", "--lr", "0.01"])
    assert_one_error(capsys, code, "saved no checkpoint", "--overwrite", "--resume to start again from step 0")
    assert [json.loads(line)["step"] for line in (logged / "metrics.jsonl").read_text().splitlines()] == [1]


# ---------------------------------------------------- 2. a second run on a --out another run is writing
def test_a_second_run_on_a_directory_another_run_is_writing_is_refused(data, tmp_path, capsys):
    """`albertlm pretrain --out RUN --resume` in a second terminal while the run still trained wrote the same
    checkpoints/ and metrics.jsonl from two processes (and removed the checkpoint the first was writing, as a
    killed save's leftover). The running run holds a lock on its directory (held here as another process would,
    through its own open file): the second is refused in one line, nothing touched."""
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data), "--out", str(out), *TINY, "--max-steps", "1", "--lr", "0.01"]) == 0
    capsys.readouterr()
    saving = out / "checkpoints" / f"{ckpt.TMP_PREFIX}step_00000002-12345"    # the other run's save under way
    saving.mkdir()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for extra in (["--resume", "--max-steps", "2"], ["--overwrite", "--data", str(data), *TINY, "--max-steps", "1"]):
            code = main(["pretrain", "--out", str(out), *extra])
            assert_one_error(capsys, code, f"--out {out}: another run is writing there now")
            assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
            assert [p.name for p in ckpt.list_checkpoints(out)] == ["step_00000001"] and saving.is_dir()
    finally:
        os.close(fd)                    # the other run ended: its lock with it
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2"]) == 0
    assert [p.name for p in ckpt.list_checkpoints(out)][-1] == "step_00000002"


def test_a_forked_worker_does_not_keep_its_runs_lock(tmp_path):
    """A DataLoader worker is a fork of the run: its copy of the lock is closed in the child, so once the run
    ends (or is killed) the next command is not refused while a worker lingers."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    started, child = context.Event(), None
    try:
        with ckpt.run_dir_lock(tmp_path):
            child = context.Process(target=_worker, args=(started,))
            child.start()                 # forked while the lock is held
            assert started.wait(120)      # the child runs its code (after the fork handlers)
        with ckpt.run_dir_lock(tmp_path):  # the run ended; the worker still lives
            assert child.is_alive()
    finally:
        if child is not None:
            child.kill()
            child.join()


def _worker(started) -> None:
    started.set()
    time.sleep(120)


# ------------------------------------------------------------- 3. eval_batches under accumulation
def test_eval_batches_counts_batches_of_batch_size_whatever_the_accumulation(tmp_path):
    """`--train.eval_batches 1 --batch-size 8` evaluated 8 held-out examples without accumulation and 2 with
    `--micro-batch-size 2` (it counted forward passes), so a resume with accumulation turned on changed the
    evaluation. Now both evaluate the first 8 examples, in forward passes of the training's size."""
    whole = make_loop(tiny_run(max_steps=1, eval_batches=1), tmp_path / "a", datasets(), DistInfo(), False)
    accumulated = make_loop(tiny_run(max_steps=1, micro=2, eval_batches=1), tmp_path / "b", datasets(), DistInfo(),
                            False)
    expected, got = whole.evaluate_fn(), accumulated.evaluate_fn()
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
    everything = make_loop(tiny_run(max_steps=1, micro=2, eval_batches=0), tmp_path / "c", datasets(), DistInfo(),
                           False).evaluate_fn()                         # 16 held-out examples: another number
    assert everything["loss"] != pytest.approx(expected["loss"], rel=1e-5)


# --------------------------------------------------- 4. tokens/s without the evaluations and checkpoints
def test_tokens_per_second_leaves_out_evaluations_and_checkpoints(tmp_path, monkeypatch):
    """The training record after an evaluation or a checkpoint counted their time as training time: with
    --eval-every 1 --log-every 2 the tokens/s of every record fell by the evaluations' time (a dip in the
    throughput curve at each --eval-every). Here each evaluation and each save takes 1000 s of a fake clock."""
    loop = make_loop(tiny_run(max_steps=4, log_every=2, eval_every=1, save_every=1), tmp_path, datasets(),
                     DistInfo(), False)
    open_logger(loop)
    slow_evaluations_and_saves(loop, monkeypatch)
    assert loop.run() == "done"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == [2, 4]
    for record in train:
        assert record["window_s"] < 500, record        # two tiny steps, not 2000 s of evaluating and saving
        assert 0 <= record["data_wait_frac"] <= 1, record


def test_resuming_on_a_machine_with_fewer_gpus_restores_the_ones_it_has(monkeypatch):
    """A checkpoint's RNG holds one CUDA state per GPU the saving process saw; torch's set_rng_state_all indexes
    this machine's generators with each, an IndexError where there are fewer (read with CUDA faked)."""
    from albertlm.training import checkpoint as ckpt

    given = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: given.append(list(states)))
    states = [torch.zeros(16, dtype=torch.uint8) + i for i in range(8)]
    ckpt.restore_rng({"cpu": torch.get_rng_state(), "cuda": states})
    assert len(given) == 1 and len(given[0]) == 1 and torch.equal(given[0][0], states[0])
