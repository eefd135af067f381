"""Audit 18 of the pretraining loop: a stop asked for during the last step (one process and two gloo ranks), a
resume on a process count its batch does not split over, and a killed save's leftovers removed by rank 0 only.
Each test failed before its fix."""
from __future__ import annotations

import json
import signal
import socket
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from albertlm.training import loop as loop_module

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module's worker
from train_fixtures import TINY_PRETRAIN_ARGS, SyntheticPretraining, alice_sop_data, tiny_run  # noqa: E402

TINY = [*TINY_PRETRAIN_ARGS, "--warmup-steps", "1", "--lr", "0.01", "--train.tensorboard=false", "--no-progress"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """32-token SOP data from 200 lines of shared text, albert-base-v2's SentencePiece."""
    return alice_sop_data(tmp_path_factory.mktemp("audit18_data"))


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _signal_during_step(monkeypatch, step: int) -> None:
    """SIGTERM to this process while the loop trains update number `step` (1-based): raised inside `train_step`,
    once the step's work is done, as a scheduler's notice would land."""
    real = loop_module.Loop.train_step

    def train_step(self, micro_batches, before_sync=None):
        result = real(self, micro_batches, before_sync)
        if self.state.step + 1 == step:
            signal.raise_signal(signal.SIGTERM)
        return result

    monkeypatch.setattr(loop_module.Loop, "train_step", train_step)


def _main_thread_only() -> None:
    if threading.current_thread() is not threading.main_thread():   # no handler there: the SIGTERM would end
        pytest.skip("signal handlers need the main thread")          # the test process (an xdist worker)


# --------------------------------------------------------------------- 1. a stop asked for during the last step
def test_sigterm_during_the_last_step_completes_the_run_but_reports_the_stop(data, tmp_path, monkeypatch, capsys):
    """SIGTERM that came while the last step trained: the loop returned "done" (exit 0), so `albertlm ablate
    --jobs 1` or a script went on to its next job instead of stopping. Now the step finishes as planned (logged,
    evaluated, saved: the run is complete), the run says so and exits 130; `--resume` finds nothing to train."""
    _main_thread_only()
    out = tmp_path / "run"
    _signal_during_step(monkeypatch, 3)
    assert main(["pretrain", "--data", str(data), "--eval-data", str(data), "--out", str(out), *TINY,
                 "--max-steps", "3", "--log-every", "2", "--save-every", "2", "--train.eval_batches", "1"]) == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "stopped by SIGTERM during the last step (3 of 3): the run is complete" in captured.out
    assert "summary: stopped by a signal at step 3 of 3 (the run is complete)" in captured.out
    assert ckpt.latest_checkpoint(out) == ckpt.step_dir(out, 3)
    records = _records(out)
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 3]
    assert [r["step"] for r in records if r["split"] == "eval"] == [3]      # the final evaluation was made
    assert records[-1]["split"] == "summary" and records[-1]["status"] == "interrupted"

    monkeypatch.undo()
    assert main(["pretrain", "--out", str(out), "--resume"]) == 0
    assert "nothing to train" in capsys.readouterr().out


def _last_step_worker(rank: int, world_size: int, port: int, run_dir: str, out_dir: str) -> None:
    """One gloo rank of a 3-step run where only rank 1 gets SIGTERM, during the last step; writes its status."""
    import os

    from albertlm.data import loader
    from albertlm.training.distributed import init_distributed, shutdown
    from albertlm.training.pretrain import Datasets, make_loop

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("gloo", "cpu")
    ds = SyntheticPretraining(n=32)
    loop = make_loop(tiny_run(max_steps=3, micro=2), Path(run_dir),
                     Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta), info, False)
    if rank == 1:
        real = loop.train_step

        def train_step(micro_batches, before_sync=None):
            result = real(micro_batches, before_sync)
            if loop.state.step + 1 == 3:
                signal.raise_signal(signal.SIGTERM)
            return result

        loop.train_step = train_step
    status = loop.run()
    Path(out_dir, f"rank{rank}").write_text(f"{status} {loop.state.step}")
    shutdown()


def test_two_ranks_agree_on_a_stop_that_reached_one_of_them_in_the_last_step(tmp_path):
    """Under torchrun a SIGTERM that reached one rank during the last step: that rank knew of it, the others
    did not (no all-reduce after the last step); now every rank reports "interrupted", the final step saved."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_last_step_worker, args=(2, port, str(tmp_path / "run"), str(tmp_path)), nprocs=2,
                       join=True, start_method="spawn")
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["interrupted 3", "interrupted 3"]
    assert ckpt.latest_checkpoint(tmp_path / "run") == ckpt.step_dir(tmp_path / "run", 3)


# ------------------------------------------------------- 2. a resume on a process count its batch does not fit
def test_a_resume_on_a_process_count_the_batch_does_not_fit_names_the_counts_it_fits(data, tmp_path, monkeypatch,
                                                                                      capsys):
    """A 2-process run resumed under `torchrun --nproc_per_node 3`: "give a multiple of 3" for --batch-size, which
    the resume then refused (a resumed run keeps its batch size). Now the line names the process counts it can
    run on, and with --micro-batch-size one that cannot work at all says so."""
    from conftest import assert_one_error

    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data), "--out", str(out), *TINY, "--max-steps", "1",
                 "--save-every", "1"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2"]) == 2
    assert_one_error(capsys, 2, "--resume: the run's --batch-size 4 does not split evenly over 3 process(es)",
                     "a resumed run keeps its --batch-size: run it on 1, 2 or 4 process(es)")
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2", "--micro-batch-size", "3"]) == 2
    assert_one_error(capsys, 2, "not a multiple of --micro-batch-size 3", "give a --micro-batch-size that divides")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2", "--micro-batch-size", "2"]) == 0
    assert ckpt.latest_checkpoint(out) == ckpt.step_dir(out, 2)


# ------------------------------------------------------ 3. leftovers of a save are removed by rank 0 only
def test_only_rank_0_removes_a_save_in_progress_when_a_run_resumes(tmp_path, monkeypatch):
    """Every rank of a resumed run removed checkpoints/.tmp-* (a killed save's leftovers) while setting up; rank 0
    is refused by the run directory's lock when another run is still writing there, but rank 1 had by then
    deleted that run's checkpoint in the making. Now only rank 0, holding the lock, removes them."""
    from albertlm.training import trainer
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import make_loop
    from test_train import datasets

    run_dir = tmp_path / "run"
    loop = make_loop(tiny_run(max_steps=1, save_every=1), run_dir, datasets(), DistInfo(), False)
    assert loop.run() == "done"
    writing = run_dir / "checkpoints" / f"{ckpt.TMP_PREFIX}step_00000002-99999"
    writing.mkdir()
    (writing / "model.safetensors").write_bytes(b"being written")
    monkeypatch.setattr(trainer, "wrap_model", lambda model, info, find_unused=False: model)   # no process group
    rank1 = make_loop(tiny_run(max_steps=2), run_dir, datasets(), DistInfo(rank=1, world_size=2), True)
    assert rank1.state.step == 1 and writing.is_dir()
    make_loop(tiny_run(max_steps=2), run_dir, datasets(), DistInfo(), True)
    assert not writing.exists()                        # rank 0 (or a lone process) still cleans up
