"""Checkpoints: safetensors weights + config.json + the training state, written atomically, keep-last-K.

    RUN_DIR/checkpoints/step_00001000/
        model.safetensors  config.json     the model (loadable by `from_pretrained` and `albertlm evaluate`)
        trainer_state.pt                   optimizer, loss scaler, step, RNG, data position (`TrainState`)
        run_config.json                    the resolved run configuration

A checkpoint is written into `.tmp-step_...`, every file fsync'ed, then renamed into place: a directory
named `step_*` is always complete, so a kill -9 at any instant leaves the previous one usable.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albertlm.errors import UserError
from albertlm.model.io import CHECKPOINT_DIR, latest_checkpoint, list_checkpoints  # noqa: F401 (the run layout)

TMP_PREFIX = ".tmp-"


@dataclass
class TrainState:
    """Everything besides the weights needed to continue a run exactly where it stopped."""
    step: int = 0                                   # optimizer updates done
    optimizer: dict = field(default_factory=dict)
    scaler: dict = field(default_factory=dict)
    rng: dict = field(default_factory=dict)         # torch CPU (+ CUDA) generator states
    data: dict = field(default_factory=dict)        # data position (see loop.StepData.state_dict)
    extra: dict = field(default_factory=dict)       # tokens seen, wall time, ...


def capture_rng() -> dict:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    if "cpu" in state:
        torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}"


def save_model(model: nn.Module, directory: Path, model_config: Any) -> None:
    """`model.safetensors` + `config.json`, through the model's own `save_pretrained` when it has one."""
    if hasattr(model, "save_pretrained"):
        model.save_pretrained(directory)
        return
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
              str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(model_config.to_dict(), indent=2, sort_keys=True) + "\n")


def load_model_weights(model: nn.Module, directory: str | Path) -> None:
    """Exact weights of one of our training checkpoints (same class and config, strict)."""
    from safetensors.torch import load_file

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"no model.safetensors in {directory}")
    model.load_state_dict(load_file(str(path)), strict=True)


def save_checkpoint(run_dir: str | Path, model: nn.Module, state: TrainState, model_config: Any,
                    run_config: dict | None = None, keep_last: int = 3) -> Path:
    """Write atomically, then delete all but the newest `keep_last` checkpoints. Returns the directory."""
    final = step_dir(run_dir, state.step)
    if final.is_dir():                                 # same step saved already (e.g. Ctrl-C right after a save)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, tmp, model_config)
    _write_trainer_state(tmp, state)
    if run_config is not None:
        (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2) + "\n")
    _fsync_tree(tmp)
    os.replace(tmp, final)                             # the commit point
    _fsync_dir(final.parent)
    prune_checkpoints(run_dir, keep_last)
    return final


def _write_trainer_state(directory: Path, state: TrainState) -> None:
    torch.save(state.__dict__, directory / "trainer_state.pt")


def load_train_state(directory: str | Path) -> TrainState:
    path = Path(directory) / "trainer_state.pt"
    if not path.is_file():
        raise UserError(f"{directory} is not a training checkpoint (no trainer_state.pt)")
    return TrainState(**torch.load(path, map_location="cpu", weights_only=True))


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> None:
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)


def remove_stale_tmp(run_dir: str | Path) -> None:
    """Leftovers of a save that was killed midway; never a usable checkpoint."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if root.is_dir():
        for p in root.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(p, ignore_errors=True)


def _fsync_tree(directory: Path) -> None:
    for path in directory.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
