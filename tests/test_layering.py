"""Data flows one way: each package imports only the layers to its left (ast scan of every import)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "albertlm"
ORDER = ["errors", "config", "tokenization", "data", "model", "interop", "training", "tasks", "experiments", "cli"]
# what each layer may import from albertlm (besides itself); interop is a side branch training never uses
ALLOWED = {
    "errors": set(),
    "config": {"errors"},
    "tokenization": {"errors", "config"},
    "data": {"errors", "config", "tokenization"},
    "model": {"errors", "config"},
    "interop": {"errors", "config", "tokenization", "model"},
    "training": {"errors", "config", "tokenization", "data", "model"},
    "tasks": {"errors", "config", "tokenization", "data", "model", "interop", "training"},
    "experiments": {"errors", "config", "tokenization", "data", "model", "training", "tasks"},
    "cli": set(ORDER) | {"demo"},
    "demo": set(ORDER),
}


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py")


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


FILES = sorted(p for p in SRC.rglob("*.py") if _layer(p) in ALLOWED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_flow_one_way(path):
    layer = _layer(path)
    for lineno, name in _imports(path):
        parts = name.split(".")
        if parts[0] != "albertlm" or len(parts) < 2:
            continue
        target = parts[1]
        assert target == layer or target in ALLOWED[layer], (
            f"{path.relative_to(SRC)}:{lineno} imports {name}: layer {layer!r} may not import {target!r}")


def test_only_training_imports_torch_distributed():
    for path in FILES:
        if _layer(path) in ("training", "cli", "demo"):
            continue
        for lineno, name in _imports(path):
            assert not name.startswith("torch.distributed"), f"{path}:{lineno} imports {name}"


def test_config_does_not_import_torch():
    for path in (SRC / "config").rglob("*.py"):
        for lineno, name in _imports(path):
            assert name.split(".")[0] != "torch", f"{path}:{lineno} imports torch"
