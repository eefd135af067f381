"""Audit 21 of multi-process and multi-node pretraining (torchrun, gloo on the CPU): a rank that stops before it
joins no longer leaves the ranks of the other nodes waiting --dist.timeout_minutes (30) for a timeout that did
not say why: under torchrun they read its line from the launcher's store and stop at once; a launch set up
wrongly by hand (WORLD_SIZE without RANK, RANK past WORLD_SIZE, LOCAL_RANK or RANK not a number) is refused by
`--dry-run` as by the run, in one line (the dry run passed it, or stopped with a ValueError traceback). Each
test failed before its fix. No process is spawned: torchrun's agent store is a TCPStore hosted here."""
from __future__ import annotations

import datetime

import pytest
import torch.distributed as dist

from albertlm.errors import UserError
from albertlm.training import distributed
from conftest import assert_one_error

LAUNCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


@pytest.fixture
def clean_launch(monkeypatch):
    """No launch variables from the environment the tests run in."""
    for name in LAUNCH:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def agent_store(clean_launch):
    """What torchrun gives every worker: its agent's store at MASTER_ADDR:MASTER_PORT (hosted here)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    clean_launch.setenv("MASTER_ADDR", "127.0.0.1")
    clean_launch.setenv("MASTER_PORT", str(store.port))
    clean_launch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    clean_launch.setenv("TORCHELASTIC_RUN_ID", "audit21")
    clean_launch.setenv("WORLD_SIZE", "2")
    clean_launch.setattr(distributed, "_in_group", {"group": False}, raising=False)   # whatever ran before here
    yield clean_launch
    del store


# ------------------------------------------------ 1. a rank that stops before joining: the others say it at once
def test_a_node_that_stops_before_joining_stops_the_others_with_its_line(agent_store):
    """Node 1's copy of RUN was missing (`--resume`): node 1 said so, and node 0's rank waited the full
    --dist.timeout_minutes in init_process_group, then failed with a timeout naming no cause."""
    agent_store.setenv("RANK", "1")
    distributed.tell_peers_before_joining("albertlm pretrain: error: no run to resume in RUN (no run_config.json)")
    agent_store.setenv("RANK", "0")
    with pytest.raises(UserError) as caught:
        distributed.init_distributed("gloo", "cpu", timeout_minutes=30)
    said = str(caught.value)
    assert said.startswith("rank 1 (host ") and "stopped before joining the run: no run to resume in RUN" in said
    assert "albertlm pretrain: error:" not in said and said.endswith("rank 0 stopped too, before training")
    assert not dist.is_initialized()


def test_a_rank_that_never_comes_is_counted_in_the_timeout_line(agent_store):
    agent_store.setenv("WORLD_SIZE", "3")
    agent_store.setenv("RANK", "1")
    with pytest.raises(UserError, match="timed out: 1 of 3 processes came"):
        distributed.wait_for_ranks(1, 3, timeout_s=0.3)
    assert not dist.is_initialized()


def test_ranks_that_all_come_go_on_and_nothing_is_told_outside_torchrun(agent_store):
    agent_store.setenv("RANK", "1")
    store = distributed._agent_store(10.0)
    store.add(f"{distributed._early_prefix()}arrived", 1)        # rank 0 came first
    distributed.wait_for_ranks(1, 2, timeout_s=30)                # returns at once: all came
    agent_store.delenv("TORCHELASTIC_USE_AGENT_STORE")
    distributed.tell_peers_before_joining("albertlm pretrain: error: x")   # set by hand: no store to tell
    distributed.wait_for_ranks(0, 2, timeout_s=0.1)               # ... nor to wait on
    assert not store.check([f"{distributed._early_prefix()}failed"])


# ----------------------------------------------------- 2. a launch set up wrongly: --dry-run refuses it too
@pytest.mark.parametrize("env, phrase", [
    ({"WORLD_SIZE": "2"}, "WORLD_SIZE=2 is set but RANK is not"),
    ({"WORLD_SIZE": "2", "RANK": "5"}, "RANK=5 is not a rank of WORLD_SIZE=2"),
    ({"LOCAL_RANK": "q"}, "LOCAL_RANK='q' is not a whole number"),
    ({"RANK": "x"}, "RANK='x' is not a whole number"),
])
def test_dry_run_refuses_a_launch_the_run_refuses(clean_launch, tmp_path, capsys, env, phrase):
    from albertlm.cli.main import main

    for name, value in env.items():
        clean_launch.setenv(name, value)
    code = main(["pretrain", "--preset", "albert-tiny", "--out", str(tmp_path / "run"), "--dry-run"])
    assert_one_error(capsys, code, phrase)
    assert not (tmp_path / "run").exists()


def test_is_main_process_says_a_bad_rank_in_one_line(clean_launch):
    clean_launch.setenv("RANK", "x")
    with pytest.raises(UserError, match="RANK='x' is not a whole number"):
        distributed.is_main_process()
