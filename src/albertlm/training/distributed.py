"""torchrun environment -> `DistInfo`, process group, DDP wrap, reductions. The only torch.distributed user.

Run alone, everything here is a no-op (world size 1). Under `torchrun` the env vars RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT select the process; gloo on CPU, NCCL on CUDA.
"""
from __future__ import annotations

import datetime
import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from albertlm.errors import UserError, reports_here  # noqa: F401  (re-exported for training)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def pick_device(requested: str, local_rank: int = 0) -> torch.device:
    """auto: cuda:LOCAL_RANK when CUDA is available, else the CPU; otherwise the named device."""
    if requested != "auto":
        try:
            device = torch.device(requested)
        except (RuntimeError, TypeError, ValueError):
            device = None
        if device is None or device.type not in ("cpu", "cuda"):
            raise UserError(f"device {requested!r}: not a device here (use auto, cpu, cuda or cuda:N)")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device {requested}: CUDA is not available here (use auto or cpu)")
        if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
            raise UserError(f"device {requested}: only {torch.cuda.device_count()} CUDA device(s) here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def world_size_from_env() -> int:
    """The number of processes `torchrun` launched (1 when run alone); no process group needed."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 (or alone), from the environment, before or without a process group."""
    return int(os.environ.get("RANK", "0")) == 0


def check_backend(backend: str, device: str | torch.device = "auto") -> torch.device:
    """The device this process will run on, once the process-group backend is known to fit it: NCCL only
    moves CUDA tensors, so `nccl` with a CPU device is refused here (in one line, before anything is read or
    written) instead of failing with a traceback on every rank when the process group forms. Alone (no
    torchrun) no group forms, but the run would fail the same way once launched: refused too."""
    dev = device if isinstance(device, torch.device) else pick_device(device, int(os.environ.get("LOCAL_RANK", "0")))
    if backend == "nccl" and dev.type != "cuda":
        where = "this machine has no CUDA device" if not torch.cuda.is_available() else f"the run's device is {dev}"
        raise UserError(f"--dist.backend nccl needs CUDA devices and {where}: use --dist.backend gloo "
                        "(or auto: nccl on CUDA, gloo on CPU)")
    return dev


def init_distributed(backend: str = "auto", device: str = "auto", timeout_minutes: int = 30) -> DistInfo:
    """Join the torchrun process group if WORLD_SIZE > 1; otherwise a single-process DistInfo."""
    world_size = world_size_from_env()
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = check_backend(backend, pick_device(device, local_rank))
    if world_size > 1 and not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if dev.type == "cuda" else "gloo"
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(minutes=timeout_minutes))
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


def shutdown() -> None:
    """Leave the process group, collecting garbage before destroying it: a DDP wrapper kept alive by a reference
    cycle (the training loop's closures make some) still holds gloo's C++ group after destroy_process_group,
    which is then torn down with the interpreter, and one rank in a few aborted there ("terminate called without
    an active exception", exit -6) after a finished 2-process run, so torchrun reported it failed: 3 of 20
    torchrun pretraining runs on a loaded 2-core machine before, 0 of 30 after (0 of 50 with a barrier added;
    a barrier alone still failed 1 of 12)."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def wrap_model(model: nn.Module, info: DistInfo, find_unused_parameters: bool = False) -> nn.Module:
    """DDP across ranks (gradients averaged in the backward pass); the bare model when alone."""
    if not info.enabled:
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused_parameters)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, in place; identity when alone."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def any_rank(flag: bool, device: torch.device) -> bool:
    """True if any rank says True (used so all ranks stop together, e.g. on Ctrl-C or a NaN)."""
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    return bool(all_reduce_sum(value).item() > 0)


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
