"""Shared fixtures: real data from ../shared/data (read by path, never copied), tiny odd-sized configs."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"

# torchrun's launch variables: one left in the environment that runs the tests (a CI job started under a launcher, a
# shell that exported LOCAL_RANK) makes albertlm a non-first rank, which prints no error line, and with
# TORCHELASTIC_RUN_ID waits 30 s before each error: hundreds of tests would fail. Tests that need them set them
# (monkeypatch, a child's env); removed once for the whole session, module fixtures' subprocesses included.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                    # a multi-task srun step (`srun -n 2 --pty bash`, then `make test`): launch_settings refuses it
                    "SLURM_STEP_NUM_TASKS", "SLURM_PROCID")


def pytest_configure(config) -> None:
    for name in [*LAUNCH_VARIABLES, *(name for name in os.environ if name.startswith("TORCHELASTIC_"))]:
        os.environ.pop(name, None)


def shared_path(*parts: str) -> Path:
    """A file under ../shared/data; the test is skipped with a reason if the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    return path


def alice_documents(root: Path, lines: int) -> Path:
    """root/a.txt: the first `lines` lines of Alice in Wonderland (shared data) as two documents."""
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:lines]
    path = root / "a.txt"
    path.write_text("\n".join(text[:lines // 2]) + "\n\n" + "\n".join(text[lines // 2:]) + "\n")
    return path


@pytest.fixture
def shared():
    return shared_path


@pytest.fixture
def tiny_config():
    """google-research's odd sizes (V=99, I=37, L=5) catch transposed shapes."""
    from albertlm.config import ModelConfig

    return ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=5, num_heads=4,
                       ffn_size=37, max_position_embeddings=64, hidden_dropout=0.0,
                       attention_dropout=0.0, classifier_dropout=0.0)


@pytest.fixture
def one_thread():
    """Tiny matrices: one thread is faster than two fighting over a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


ERROR_LINE = re.compile(r"^albertlm [\w -]+: error: ")


def assert_one_error_line(proc, phrases) -> None:
    """A finished `albertlm` subprocess failed the promised way: one line `albertlm <cmd>: error: ...` holding
    every phrase, exit status 2, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert len(lines) == 1 and ERROR_LINE.match(lines[0]), proc.stderr[-2000:]
    for phrase in phrases:
        assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"


def assert_one_error(capsys, code: int, *phrases: str) -> None:
    """An in-process `main(argv)` failed the promised way: exit 2, one stderr line holding every phrase."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


TINY_WORDS = ["good", "bad", "fine", "awful", "great", "poor", "the", "film", "was", "very", "plot", "acting"]


def save_tiny_pretrained(out: Path) -> Path:
    """A random tiny AlbertForPreTraining (seed 0, no task head) with a WordPiece vocab.txt of TINY_WORDS."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(TINY_WORDS) + 5, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                      ffn_size=37, max_position_embeddings=64)
    AlbertForPreTraining(cfg).save_pretrained(out)
    return out
