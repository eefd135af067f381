"""Audit 19 of multi-process and multi-node pretraining (gloo on the CPU): nodes started with different settings
are refused on every node in one line (were: silent divergence, a hang, a DDP traceback); torchrun's copy of a
Ctrl-C is the same stop, not "stop at once"; a lost store host leaves no native stack on stderr; a second
process given RANK=0 is named. Each test failed before its fix."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from albertlm.training import checkpoint as ckpt
from albertlm.training import distributed
from albertlm.training import loop as loop_module
from albertlm.training.distributed import DistInfo

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module's worker
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data, tiny_run  # noqa: E402

TINY = [*TINY_PRETRAIN_ARGS, "--warmup-steps", "1", "--lr", "0.01", "--train.tensorboard=false", "--no-progress",
        "--dist.backend", "gloo", "--dist.device", "cpu"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------ 1. nodes started with different settings: refused
def _node_worker(rank: int, port: int, argv: list, extra: list, out_dir: str) -> None:
    """One node of two, one process each (LOCAL_RANK 0 on both, so both report), running `albertlm pretrain`
    with its own extra options; writes its exit status and stderr."""
    import torch

    from albertlm.cli.main import main

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK="0")
    torch.set_num_threads(1)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([*argv, *extra[rank]])
    Path(out_dir, f"rank{rank}").write_text(f"{code}\n{err.getvalue()}")


def test_nodes_started_with_different_settings_are_refused_on_every_node(tmp_path_factory, tmp_path):
    """Node 1 started with another --lr and --max-steps: before, the run trained on (rank 1's copy of the model
    updated at its own rate, only rank 0's saved) or, with another --max-steps alone, waited in mismatched
    collectives for --dist.timeout_minutes (30); now both nodes refuse in one line naming both settings."""
    data = alice_sop_data(tmp_path_factory.mktemp("audit19_data"))
    out = tmp_path / "run"
    argv = ["pretrain", "--data", str(data), "--out", str(out), *TINY, "--max-steps", "2", "--save-every", "1"]
    extra = [[], ["--lr", "0.05", "--max-steps", "3"]]
    mp.start_processes(_node_worker, args=(_free_port(), argv, extra, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    for rank in (0, 1):
        code, err = (tmp_path / f"rank{rank}").read_text().split("\n", 1)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == "2" and len(lines) == 1, (rank, err)
        assert "Traceback" not in err
        assert "processes of this run were started with different settings" in lines[0], lines[0]
        assert "optim.lr is 0.01 on rank 0, 0.05 on rank 1" in lines[0], lines[0]
        assert "train.max_steps is 2 on rank 0, 3 on rank 1" in lines[0], lines[0]
    assert ckpt.latest_checkpoint(out) is None and not (out / "metrics.jsonl").exists()


def _as_if_other_ranks_hold(monkeypatch, others: list[dict]) -> None:
    """`differing_across_ranks` as though ranks 1.. had sent `others` (this process is rank 0)."""
    def all_gather_object(gathered, mine):
        gathered[:] = [mine, *({"values": values, "host": mine["host"]} for values in others)]

    monkeypatch.setattr(distributed.dist, "all_gather_object", all_gather_object)


def test_a_node_with_other_data_or_an_older_checkpoint_is_named(tmp_path, monkeypatch):
    """Same options, but node 1's copy of the data has other examples, or its copy of the run directory an older
    newest checkpoint: each rank read its own, and the run trained on a mix of data, or resumed each rank at
    another step (collectives out of step). Both are named, with the ranks holding each value."""
    from albertlm.errors import UserError
    from albertlm.training.pretrain import check_same_run, make_loop, run_identity
    from test_train import datasets

    run, run_dir = tiny_run(max_steps=2, save_every=1), tmp_path / "run"
    assert make_loop(run, run_dir, datasets(), DistInfo(), False).run() == "done"
    info = DistInfo(rank=0, world_size=3)
    mine = run_identity(run, datasets(), run_dir, resume=True)
    assert mine["the checkpoint it resumes from"] == "step_00000002"
    other_data = run_identity(run, datasets(n=72), run_dir, resume=True)
    older = {**mine, "the checkpoint it resumes from": "step_00000001"}
    _as_if_other_ranks_hold(monkeypatch, [other_data, older])
    with pytest.raises(UserError) as caught:
        check_same_run(run, datasets(), run_dir, True, info)
    said = str(caught.value)
    assert "the 3 processes of this run were started with different settings" in said
    assert "the training data's examples is 64 on ranks 0, 2, 72 on rank 1" in said
    assert "the checkpoint it resumes from is 'step_00000002' on ranks 0, 1, 'step_00000001' on rank 2" in said
    _as_if_other_ranks_hold(monkeypatch, [mine, mine])
    check_same_run(run, datasets(), run_dir, True, info)          # alike: nothing said


def test_a_finetuning_node_with_another_lr_or_data_is_named(monkeypatch):
    """Fine-tuning under torchrun: a node started with another --lr trained silently (each rank its own rate, rank
    0's model saved), another data size hung in mismatched collectives. Refused as pretraining's are."""
    import dataclasses
    from types import SimpleNamespace

    from albertlm.config.task import FinetuneConfig
    from albertlm.errors import UserError
    from albertlm.tasks.finetune import check_same_finetune, finetune_identity

    cfg = FinetuneConfig()
    spec = SimpleNamespace(family="glue", train=[0] * 10, info={"task": "rte", "labels": ["a", "b"]})
    mine = finetune_identity(spec, cfg)
    other_lr = finetune_identity(spec, dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=1e-4)))
    other_data = finetune_identity(SimpleNamespace(**{**vars(spec), "train": [0] * 12}), cfg)
    _as_if_other_ranks_hold(monkeypatch, [other_lr, other_data])
    with pytest.raises(UserError) as caught:
        check_same_finetune(spec, cfg, DistInfo(rank=0, world_size=3))
    said = str(caught.value)
    assert f"optim.lr is {cfg.optim.lr!r} on ranks 0, 2, 0.0001 on rank 1" in said, said
    assert "the training features is 10 on ranks 0, 1, 12 on rank 2" in said and "albertlm finetune glue" in said
    local = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=False, log_every=3))
    _as_if_other_ranks_hold(monkeypatch, [finetune_identity(spec, local), mine])
    check_same_finetune(spec, cfg, DistInfo(rank=0, world_size=3))     # per-process settings may differ


def test_per_process_settings_may_differ(tmp_path):
    """How a node logs and where it holds the data are its own: not part of what must agree."""
    from albertlm.training.pretrain import run_identity
    from test_train import datasets

    import dataclasses

    run = tiny_run()
    local = run.replace(train=dataclasses.replace(run.train, progress=True, log_every=7, keep_last=1),
                        data=dataclasses.replace(run.data, path="/elsewhere/data", num_workers=2))
    assert run_identity(run, datasets(), tmp_path, False) == run_identity(local, datasets(), tmp_path, False)


# ----------------------------------------------------------- 2. torchrun's copy of a Ctrl-C is the same stop
def test_torchrun_relaying_the_terminal_ctrl_c_still_saves_the_step(tmp_path, monkeypatch, capsys):
    """Ctrl-C in torchrun's terminal reaches each rank twice (the terminal's SIGINT, then torchrun passing its own
    on), milliseconds apart: when the rank ran Python code in between, the second was taken as "stop at once"
    and the step in progress was not saved. Now a repeat of the same signal within RELAYED_S under torchrun is
    the same request: the step completes and is saved; a repeat outside torchrun still stops at once."""
    from albertlm.training.pretrain import make_loop
    from test_train import datasets

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    real = loop_module.Loop.train_step

    def train_step(self, micro_batches, before_sync=None):
        result = real(self, micro_batches, before_sync)
        if self.state.step + 1 == 2:
            # "milliseconds apart" however long a busy machine pauses this process between the two: the clock is
            # held for them (raise_signal runs the handler before it returns, so both read the held clock)
            held = time.monotonic()
            with monkeypatch.context() as clock:
                clock.setattr(loop_module.time, "monotonic", lambda: held)
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)       # torchrun's copy
        return result

    monkeypatch.setattr(loop_module.Loop, "train_step", train_step)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "audit19")
    loop = make_loop(tiny_run(max_steps=4), tmp_path / "run", datasets(), DistInfo(), False)
    assert loop.run() == "interrupted"
    assert ckpt.latest_checkpoint(tmp_path / "run") == ckpt.step_dir(tmp_path / "run", 2)

    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    loop = make_loop(tiny_run(max_steps=4), tmp_path / "alone", datasets(), DistInfo(), False)
    assert loop.run() == "interrupted"
    assert ckpt.latest_checkpoint(tmp_path / "alone") is None       # a second Ctrl-C of one's own: at once
    capsys.readouterr()


def test_a_later_repeat_under_torchrun_still_stops_at_once(monkeypatch):
    """The relayed copy is told apart by time only: a signal sent again after RELAYED_S (a fake clock here) is
    the user's "stop at once"."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers need the main thread")
    clock = [100.0]
    monkeypatch.setattr(loop_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "audit19")
    with loop_module.stop_on_signals(DistInfo()) as request:
        handler = signal.getsignal(signal.SIGTERM)
        handler(signal.SIGTERM, None)
        try:
            handler(signal.SIGTERM, None)                   # torchrun's copy, at once
        except KeyboardInterrupt:
            pytest.fail("torchrun's copy of the signal was taken as a second one: stop at once, nothing saved")
        assert request.name == "SIGTERM"
        clock[0] += loop_module.RELAYED_S + 0.5
        with pytest.raises(KeyboardInterrupt):
            handler(signal.SIGTERM, None)


# ------------------------------------------------------ 3. the store's host is gone: no native stack on stderr
def test_a_store_whose_host_stopped_is_read_without_a_native_stack_on_stderr(capfd):
    """Rank 0's node killed: the other node's rank looked for a message in the group's store, whose host had
    gone, and torch wrote a warning with a 30-frame native stack to stderr above the run's one line. Now what
    the store call writes is dropped when it fails (the run says "stopped without a message")."""
    import datetime

    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
    port = server.port
    client = dist.TCPStore("127.0.0.1", port, 2, False, timeout=datetime.timedelta(seconds=10))
    client.set(f"{distributed.FAILURE_KEY}1", "rank 1 stopped: (a message that is no longer there)")
    del server
    deadline = time.monotonic() + 60                    # a hang guard only: the server closes as it is freed
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                break
        time.sleep(0.05)
    capfd.readouterr()
    original = distributed._store
    distributed._store = lambda: client
    try:
        assert distributed.peer_failures(DistInfo(rank=0, world_size=2), wait_s=0) == []
    finally:
        distributed._store = original
    err = capfd.readouterr().err
    assert "frame #" not in err and "recvValue failed" not in err, err[:2000]


def test_what_a_store_call_writes_is_kept_when_it_succeeds(capfd):
    with distributed._quiet_if_failing():
        os.write(2, b"a warning worth keeping\n")
    assert "a warning worth keeping" in capfd.readouterr().err


# ------------------------------------------------------ 4. two processes given RANK=0 by hand
def test_a_port_taken_by_another_rank_0_says_so():
    """Two processes set up by hand with RANK=0 (one meant to be 1): the second found rank 0's port taken and
    was told another program held it."""
    said = distributed._join_failure(RuntimeError("The server socket has failed to listen ... (errno: 98 - "
                                                  "Address already in use)."), 0, 2, 30)
    assert "already in use" in said and "another process of this run was also given RANK=0" in said
    assert "RANK=0" not in distributed._join_failure(RuntimeError("EADDRINUSE"), 1, 2, 30)
