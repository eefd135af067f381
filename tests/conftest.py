"""Shared fixtures: real data from ../shared/data (read by path, never copied), tiny odd-sized configs."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def shared_path(*parts: str) -> Path:
    """A file under ../shared/data; the test is skipped with a reason if the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
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
