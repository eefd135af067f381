"""Under torchrun, a rank that does not report and fails before the process group forms lingers
(`errors.LINGER_S`) so that the first rank says the error before torchrun ends them all; CI once lost the
line because rank 1 exited at once and torchrun stopped rank 0 before it printed. A rank still running after
the linger says its own error, naming its rank. Outside torchrun, or once in a group, nothing waits."""
from __future__ import annotations

import threading
import time

import pytest

from albertlm import errors
from albertlm.cli.main import main


@pytest.fixture
def rank1(monkeypatch):
    """Rank 1 of 2; the linger's sleep is recorded, not slept (no wall-clock in the checks); the "albertlm"
    logger, which `main()` on another rank sets to ERROR, is put back afterwards."""
    import logging

    logger = logging.getLogger("albertlm")
    level = logger.level
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)   # each test says whether torchrun runs it
    monkeypatch.setattr(errors, "LINGER_S", 0.3)
    monkeypatch.setitem(errors._joined, "group", False)
    slept: list[float] = []
    this_thread, real_sleep = threading.current_thread(), time.sleep

    def sleep(seconds: float) -> None:
        """This test's thread records; any other thread of the process (execnet's, a library's poller) still
        sleeps, so its calls neither land in `slept` nor turn its loop into a busy one."""
        if threading.current_thread() is this_thread:
            slept.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.slept = slept
    yield monkeypatch
    logger.setLevel(level)


def _run(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_a_torchrun_rank_lingers_then_says_its_own_error_with_its_rank(rank1, tmp_path, capsys):
    rank1.setenv("TORCHELASTIC_RUN_ID", "test")
    code = _run(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"),
                       "--preset", "albert-tiny", "--max-steps", "1", "--dry-run"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and rank1.slept == [0.3]
    assert len(err) == 1 and err[0].startswith("albertlm pretrain (rank 1): error: "), err
    assert "missing" in err[0]
    assert not (tmp_path / "run").exists()


def test_a_usage_error_lingers_too(rank1, tmp_path, capsys):
    rank1.setenv("TORCHELASTIC_RUN_ID", "test")
    code = _run(["pretrain", "--out", str(tmp_path / "run"), "--no-such-flag"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and rank1.slept == [0.3]
    assert len(err) == 1 and err[0].startswith("albertlm pretrain (rank 1): error: unrecognized arguments"), err


@pytest.mark.parametrize("case", ["no torchrun", "in a group", "first rank"])
def test_nothing_waits_outside_torchrun_in_a_group_or_on_the_first_rank(rank1, tmp_path, capsys, case):
    if case != "no torchrun":
        rank1.setenv("TORCHELASTIC_RUN_ID", "test")
    if case == "in a group":
        rank1.setitem(errors._joined, "group", True)
    if case == "first rank":
        rank1.setenv("RANK", "0")
        rank1.setenv("LOCAL_RANK", "0")
    code = _run(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"),
                       "--preset", "albert-tiny", "--max-steps", "1", "--dry-run"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and rank1.slept == []
    if case == "first rank":
        assert len(err) == 1 and err[0].startswith("albertlm pretrain: error: ")
    else:
        assert err == []


def test_joining_a_group_marks_it(monkeypatch):
    """`init_distributed` marks the process as joined once its group forms, and not when it fails to."""
    import torch.distributed as dist

    from albertlm.errors import UserError
    from albertlm.training.distributed import init_distributed

    monkeypatch.setitem(errors._joined, "group", False)
    for name, value in (("WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)

    def refuse(*args, **kwargs):
        raise ValueError("environment variable MASTER_ADDR expected, but not set")

    monkeypatch.setattr(dist, "init_process_group", refuse)
    with pytest.raises(UserError, match="MASTER_ADDR"):
        init_distributed("gloo", "cpu")
    assert errors._joined["group"] is False
    monkeypatch.setattr(dist, "init_process_group", lambda *args, **kwargs: None)
    info = init_distributed("gloo", "cpu")
    assert info.world_size == 2 and errors._joined["group"] is True


def test_an_unknown_command_is_said_once_under_torchrun(rank1, capsys):
    """Every rank sees the same mistyped command: the other ranks linger and say nothing more than rank 0."""
    rank1.setenv("TORCHELASTIC_RUN_ID", "test")
    code = _run(["pretrian", "--out", "x"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and rank1.slept == [0.3]
    assert err == ["albertlm (rank 1): error: unknown command 'pretrian' (did you mean pretrain?)"], err
    rank1.delenv("TORCHELASTIC_RUN_ID")
    code = _run(["pretrian", "--out", "x"])
    assert code == 2 and capsys.readouterr().err == ""
