"""torchrun environment -> `DistInfo`, process group, DDP wrap, reductions. The only torch.distributed user.

Run alone, everything here is a no-op (world size 1). Under `torchrun` the env vars RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT select the process; gloo on CPU, NCCL on CUDA.
"""
from __future__ import annotations

import contextlib
import datetime
import gc
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from albertlm.errors import UserError, joined_group, reports_here  # noqa: F401  (re-exported for training)


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
    """auto: cuda:LOCAL_RANK when CUDA is available, else the CPU; cuda (no index): cuda:LOCAL_RANK, this process's
    own GPU of the node (it was the bare device "cuda", which `torch.cuda.set_device` refuses: `--dist.device cuda`
    under torchrun was a ValueError traceback on every rank, and, set, would have put every process on the current
    GPU); otherwise the named device."""
    if requested == "cuda" and torch.cuda.is_available():
        return _local_gpu(requested, local_rank)
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
        return _local_gpu(requested, local_rank)
    return torch.device("cpu")


def _local_gpu(requested: str, local_rank: int) -> torch.device:
    """cuda:LOCAL_RANK, once this node has that many GPUs (for `pick_device`'s auto and cuda)."""
    if local_rank >= torch.cuda.device_count():   # torchrun --nproc-per-node past the GPUs this node has
        raise UserError(f"device {requested}: this process is LOCAL_RANK {local_rank} and gets cuda:{local_rank}, "
                        f"but only {torch.cuda.device_count()} CUDA device(s) are here: start at most that many "
                        "processes per node (--nproc-per-node), or pass --device cpu")
    return torch.device("cuda", local_rank)


def _env_int(name: str, default: str) -> int:
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise UserError(f"the environment variable {name}={value!r} is not a whole number (torchrun sets RANK, "
                        "LOCAL_RANK and WORLD_SIZE; set by hand, give each process its own RANK from 0)") from None


def world_size_from_env() -> int:
    """The number of processes `torchrun` launched (1 when run alone); no process group needed."""
    world_size = _env_int("WORLD_SIZE", "1")
    if world_size < 1:
        raise UserError(f"the environment variable WORLD_SIZE={world_size} must be 1 or more (the number of processes)")
    return world_size


def is_main_process() -> bool:
    """Rank 0 (or alone), from the environment, before or without a process group. A RANK that is not a whole
    number is the one-line error `launch_settings` gives (it was a ValueError traceback, e.g. in a dry run)."""
    return _env_int("RANK", "0") == 0


def launch_settings() -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) of this process, from the environment torchrun sets (0, 1, 0 alone), once
    they make sense together: a UserError otherwise (WORLD_SIZE > 1 without RANK, RANK past WORLD_SIZE, a value
    that is not a whole number). `init_distributed` joins with these; `check_backend` checks them too, so that a
    launch set up wrongly is refused before anything is read, and by `--dry-run` as by the run itself (the dry
    run passed WORLD_SIZE=2 without RANK, and a LOCAL_RANK that is not a number was a ValueError traceback)."""
    world_size = world_size_from_env()
    if "WORLD_SIZE" not in os.environ:
        _refuse_bare_srun_tasks()
    if world_size > 1 and "RANK" not in os.environ:
        raise UserError(f"WORLD_SIZE={world_size} is set but RANK is not: launch with torchrun, or give each of the "
                        f"{world_size} processes its own RANK (0 to {world_size - 1}) and LOCAL_RANK, and the same "
                        "MASTER_ADDR and MASTER_PORT")
    rank = _env_int("RANK", "0")
    local_rank = _env_int("LOCAL_RANK", "0")
    if not 0 <= rank < world_size:
        raise UserError(f"RANK={rank} is not a rank of WORLD_SIZE={world_size} processes (0 to {world_size - 1})")
    return rank, world_size, local_rank


def _refuse_bare_srun_tasks() -> None:
    """`srun -n 8 albertlm pretrain ...` without torchrun: Slurm starts 8 copies of the command and none of them
    is told it is one process of eight (no WORLD_SIZE), so each trained alone on one device, into the same --out:
    one of them trained the whole run on 1 process without a word, the others stopped with `another run is writing
    there now` (measured with two such tasks), and on node-local disks each node trained a run of its own. Refused
    in one line, before anything is read. SLURM_STEP_NUM_TASKS is the number of tasks of the srun step this process
    is one of (the batch script itself, one task, and `srun -n 1` pass)."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if not tasks.isdigit() or int(tasks) <= 1:
        return
    raise UserError(f"this process is task SLURM_PROCID={os.environ.get('SLURM_PROCID', '?')} of the {tasks} tasks "
                    "srun started (SLURM_STEP_NUM_TASKS), but not a process of a distributed launch (no WORLD_SIZE): "
                    f"the {tasks} tasks would each train alone, on one device, into the same --out; start one torchrun "
                    "per node (`srun --ntasks-per-node 1 torchrun --nnodes $SLURM_NNODES --nproc-per-node GPUS "
                    "--rdzv-backend c10d --rdzv-endpoint HOST:PORT -m albertlm ...`), or give every task RANK, "
                    "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT")


def check_backend(backend: str, device: str | torch.device = "auto") -> torch.device:
    """The device this process will run on, once the process-group backend is known to fit it: NCCL only
    moves CUDA tensors, so `nccl` with a CPU device is refused here (in one line, before anything is read or
    written) instead of failing with a traceback on every rank when the process group forms. Alone (no
    torchrun) no group forms, but the run would fail the same way once launched: refused too."""
    _, world_size, local_rank = launch_settings()
    dev = device if isinstance(device, torch.device) else pick_device(device, local_rank)
    if backend == "nccl" and dev.type != "cuda":
        where = "this machine has no CUDA device" if not torch.cuda.is_available() else f"the run's device is {dev}"
        raise UserError(f"--dist.backend nccl needs CUDA devices and {where}: use --dist.backend gloo "
                        "(or auto: nccl on CUDA, gloo on CPU)")
    # torchrun gives every process of a node the same options: a GPU named by its index (cuda:1) is then the GPU
    # of all of them, which NCCL refuses when the group forms ("Duplicate GPU detected"), a traceback on each rank
    local_size = _env_int("LOCAL_WORLD_SIZE", "1") if world_size > 1 else 1
    if (isinstance(device, str) and dev.type == "cuda" and backend in ("nccl", "auto") and local_size > 1
            and device != "auto" and torch.device(device).index is not None):
        raise UserError(f"device {device}: the {local_size} processes of this node would all run on that one GPU, "
                        "and NCCL needs a GPU of its own for each: give the device as cuda or auto (process "
                        "LOCAL_RANK k takes cuda:k), and CUDA_VISIBLE_DEVICES to choose which GPUs the node uses")
    return dev


def init_distributed(backend: str = "auto", device: str = "auto", timeout_minutes: int = 30) -> DistInfo:
    """Join the torchrun process group if WORLD_SIZE > 1; otherwise a single-process DistInfo."""
    rank, world_size, local_rank = launch_settings()
    dev = check_backend(backend, device)
    if world_size > 1 and not dist.is_initialized():
        if backend == "auto":
            backend = "nccl" if dev.type == "cuda" else "gloo"
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        wait_for_ranks(rank, world_size, timeout_minutes * 60.0)
        timeout = datetime.timedelta(minutes=timeout_minutes)
        try:
            store = attempt_store(timeout)
            if store is None:
                dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timeout)
            else:
                dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        except (dist.DistError, ValueError, RuntimeError) as exc:
            raise UserError(_join_failure(exc, rank, world_size, timeout_minutes)) from None
        joined_group()
        _in_group["group"] = True
        _in_group["timeout_minutes"] = timeout_minutes
    return DistInfo(rank=rank, world_size=world_size, local_rank=local_rank, device=dev)


# torchrun's agent keeps one store for the whole job (c10d rendezvous: `TORCH_DISABLE_SHARE_RDZV_TCP_STORE` unset,
# the default; static rendezvous always), and every worker it starts reaches it at MASTER_ADDR:MASTER_PORT. After an
# elastic restart (`torchrun --max-restarts N`: a rank killed, the group started again) the keys the first attempt's
# process group left there were still there: gloo read a dead rank's address from them ("Gloo connectFullMesh
# failed ... Connection refused" on the restarted ranks, exit 2 instead of resuming; measured with 2 processes
# under `torchrun --standalone --max-restarts 1` and a plain torch script alike, pytorch/pytorch#135712), NCCL a
# stale unique id, and the failure messages of `tell_peers` stood for the new attempt's. Each attempt now forms its
# process group under keys of its own.
GROUP_KEY = "albertlm/group/"


def attempt_store(timeout: datetime.timedelta):
    """Under torchrun, the agent's store seen through a prefix of this launch attempt (torchrun's run id and
    restart count), for `init_process_group`: the keys an earlier attempt left are not read. None elsewhere
    (set by hand, rank 0 hosts a new store when it joins; alone, no group)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not host or not port.isdigit():
        return None                  # init_process_group then says which variable is missing
    agent = dist.TCPStore(host, int(port), is_master=False, timeout=timeout)
    return dist.PrefixStore(f"{GROUP_KEY}{_early_prefix()[len(EARLY_KEY):]}", agent)


def _join_failure(exc: Exception, rank: int, world_size: int, timeout_minutes: float) -> str:
    """What forming the process group failed on, in the user's terms: a port another program holds, the address
    variables missing (RANK/WORLD_SIZE set by hand without torchrun), or processes that never joined (one
    stopped before, with its own message, or was never started): each was a traceback, the last after a
    silent wait of --dist.timeout_minutes."""
    text = " ".join(str(exc).split())
    addr = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        # rank 0 hosts the group's store on that port: a second process given RANK=0 by hand finds it taken too
        twice = " or another process of this run was also given RANK=0" if rank == 0 else ""
        return (f"cannot start the process group at MASTER_ADDR:MASTER_PORT {addr}: the port is already in use (another "
                f"run or program holds it{twice}); pick a free one (torchrun --master-port P, or MASTER_PORT=P for "
                "every process), or let torchrun --standalone choose")
    if "environment variable" in text and "expected" in text:
        missing = "MASTER_ADDR" if "MASTER_ADDR" in text else "MASTER_PORT" if "MASTER_PORT" in text else "a variable"
        return (f"WORLD_SIZE={world_size} asks for {world_size} processes but {missing} is not set: launch with "
                "torchrun, or set MASTER_ADDR and MASTER_PORT (the address of rank 0) and RANK, LOCAL_RANK for every "
                "process")
    if "timed out" in text.lower() or "timeout" in text.lower():
        return (f"rank {rank}: not all {world_size} processes joined the process group at {addr} within "
                f"--dist.timeout_minutes={timeout_minutes:g} ({text[:160]}): a process that stopped before joining "
                f"says why in its own output; else start every rank (RANK 0 to {world_size - 1}) with the same "
                "WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun does)")
    return f"rank {rank}: cannot form the process group of {world_size} processes at {addr}: {text}"


# ------------------------------------------------------------------------- a rank that stops before joining
# A rank that stopped before it joined the process group (its node's copy of --data or of RUN missing, a path
# only that machine lacks) left the ranks of the other nodes waiting in init_process_group for
# --dist.timeout_minutes (30 by default), then failing with a timeout that did not say why; only that node's
# terminal said it (torchrun ends the other ranks of its own node, not those of other nodes). Under torchrun
# the store of its agent on the first node (MASTER_ADDR:MASTER_PORT, which every worker may reach before the
# group forms) now carries the word: each rank counts itself in there before it joins and waits until all
# have, while a rank that fails first leaves its message there (`tell_peers_before_joining`, called where the
# error is reported), and the waiting ranks stop at once with one line repeating it.
EARLY_KEY = "albertlm/before-joining/"
POLL_S = 0.2
_in_group = {"group": False}


def _agent_store(timeout_s: float):
    """torchrun's own key-value store (hosted by its agent on the node of rank 0 at MASTER_ADDR:MASTER_PORT;
    every worker is a client of it), reachable before the process group forms; None when not under torchrun (set
    by hand, rank 0 hosts the store only once it joins) or out of reach within `timeout_s`."""
    if _agent_address() is None:
        return None
    host, port = _agent_address()
    if not _listening(host, port, timeout_s):
        return None
    try:
        with _quiet_if_failing():
            return dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))
    except Exception:  # noqa: BLE001 (no store: the caller says what that means)
        return None


def _listening(host: str, port: int, within_s: float) -> bool:
    """Whether something accepts connections at host:port within `within_s` seconds (tried every half second).
    TCPStore's own connect with a timeout of T gave up after about 2T (60 s: 120 s measured, the first node's
    torchrun gone), so the limits said here were not the ones kept."""
    deadline = time.monotonic() + within_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(5.0, left))):
                return True
        except OSError:
            if left <= 0:
                return False
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())) or 0.01)


def _agent_address() -> tuple[str, int] | None:
    """(MASTER_ADDR, MASTER_PORT) of torchrun's agent store, as torchrun sets them for its workers; None when
    this process was not started by torchrun (or those variables are not usable: init_process_group says so)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    return (host, int(port)) if host and port.isdigit() else None


def _early_prefix() -> str:
    """Keys of this launch and attempt (torchrun's run id and restart count), so a restart starts afresh."""
    return (f"{EARLY_KEY}{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
            f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/")


def tell_peers_before_joining(message: str, connect_s: float = 5.0) -> None:
    """For the CLI's error path under torchrun: leave this rank's error (one line; a leading `albertlm CMD:
    error: ` is dropped) where the ranks of the other nodes wait to join (`wait_for_ranks`), so that they stop
    with it at once. Does nothing once this process joined a group (`tell_peers` does it then), outside
    torchrun, or when the store is out of reach; never raises."""
    if _in_group["group"] or dist.is_initialized():
        return
    try:
        rank = int(os.environ.get("RANK", ""))
    except ValueError:
        return
    text = " ".join(str(message).split())
    text = text.split(": error: ", 1)[1] if ": error: " in text else text
    store = _agent_store(connect_s)
    if store is None:
        return
    try:
        with _quiet_if_failing():
            store.set(f"{_early_prefix()}failed",
                      f"rank {rank} (host {socket.gethostname()}) stopped before joining the run: {text}")
    except Exception:  # noqa: BLE001 (the first node's torchrun is gone: nobody is waiting there)
        pass


def wait_for_ranks(rank: int, world_size: int, timeout_s: float) -> None:
    """Under torchrun, before init_process_group: count this rank in and wait until all `world_size` ranks have
    come (init_process_group then forms at once), or stop with the message a rank left on failing before it
    came (a UserError naming it), or, after `timeout_s`, with one line saying how many came and which ranks did
    not (`_never_came`). torchrun's store out of reach, at the start or while waiting, is one line at once
    (`_store_unreachable`): init_process_group, which forms the group in that store (`attempt_store`), waited
    for it up to twice --dist.timeout_minutes more (measured: 221 s with --dist.timeout_minutes 1, the first
    node's worker killed before joining) and then said that not all processes joined. Outside torchrun (no
    agent store), nothing: init_process_group waits as before."""
    if _agent_address() is None:
        return
    store = _agent_store(min(timeout_s, 60.0))
    if store is None:
        raise UserError(_store_unreachable(rank, min(timeout_s, 60.0)))
    prefix = _early_prefix()
    deadline = time.monotonic() + timeout_s
    try:
        with _quiet_if_failing():
            store.set(f"{prefix}came/{rank}", socket.gethostname())   # who came, for the timeout line
            arrived = store.add(f"{prefix}arrived", 1)
    except Exception:  # noqa: BLE001 (the store went with the first node's torchrun)
        raise UserError(_store_unreachable(rank)) from None
    while arrived < world_size:
        try:
            with _quiet_if_failing():
                failed = store.check([f"{prefix}failed"])
                message = store.get(f"{prefix}failed").decode("utf-8", "replace") if failed else ""
                arrived = store.add(f"{prefix}arrived", 0)
        except Exception:  # noqa: BLE001 (the store went with the first node's torchrun)
            raise UserError(_store_unreachable(rank)) from None
        if message:
            raise UserError(f"{message}; rank {rank} stopped too, before training")
        if arrived >= world_size:
            return
        if time.monotonic() >= deadline:
            # every rank looks up who is missing in a job of up to MISSING_LOOKUP_RANKS processes; in a larger one
            # rank 0 alone (all ranks time out together: world_size² requests to torchrun's store)
            look = world_size <= MISSING_LOOKUP_RANKS or rank == 0
            raise UserError(_never_came(rank, world_size, arrived,
                                        _missing_ranks(store, prefix, world_size) if look else [],
                                        timeout_s / 60.0, _restarted_elsewhere(store, world_size)))
        time.sleep(POLL_S)


MISSING_LOOKUP_RANKS = 256


def _missing_ranks(store, prefix: str, world_size: int, most: int = 8) -> list[int]:
    """The first `most` ranks that have not counted themselves in (`wait_for_ranks`); [] if the store is gone."""
    missing: list[int] = []
    try:
        with _quiet_if_failing():
            for rank in range(world_size):
                if not store.check([f"{prefix}came/{rank}"]):
                    missing.append(rank)
                    if len(missing) >= most:
                        break
    except Exception:  # noqa: BLE001
        return []
    return missing


def _restarted_elsewhere(store, world_size: int) -> int | None:
    """Another restart count of this launch under which workers came while this one waited, if any: torchrun's
    c10d rendezvous may restart the nodes' workers for a new round with different TORCHELASTIC_RESTART_COUNTs (a
    node whose worker failed counts a restart, the others do not), so they count themselves in under different
    keys and wait for each other in vain. Seen as more arrivals under an earlier count than there are processes,
    or any under a later one (a few counts either side are looked at)."""
    try:
        mine = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return None
    base = f"{EARLY_KEY}{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
    try:
        with _quiet_if_failing():
            for other in [*range(mine + 1, mine + 4), *range(mine - 1, max(mine - 4, -1), -1)]:
                came = store.add(f"{base}{other}/arrived", 0)
                if (other > mine and came > 0) or (other < mine and came > world_size):
                    return other
    except Exception:  # noqa: BLE001
        return None
    return None


def _never_came(rank: int, world_size: int, arrived: int, missing: list[int], timeout_minutes: float,
                other_count: int | None = None) -> str:
    """What a torchrun worker says when not every rank came within --dist.timeout_minutes: which ranks did not
    and where to look. It said "start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    (torchrun does)" and gave the address of torchrun's internal store (with the c10d rendezvous one the user
    never gave), naming no rank: a worker killed before joining (out of memory, kill -9) on another node is said
    only by that node's torchrun, as an exit code."""
    shown = ", ".join(map(str, missing)) + (", ..." if world_size - arrived > len(missing) else "")
    which = (f"rank{'s' if world_size - arrived > 1 else ''} {shown} did not" if missing else
             f"{world_size - arrived} did not")
    if other_count is not None:
        return (f"rank {rank}: timed out: {arrived} of {world_size} processes came to form the process group within "
                f"--dist.timeout_minutes={timeout_minutes:g}; {which} here, but processes came under torchrun's "
                f"restart count {other_count} while this one is restart "
                f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}: torchrun's elastic restart gave the nodes "
                "different restart counts (its c10d rendezvous does when a worker fails), so they cannot meet; start "
                "every node's torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, or leave restarts to the job's own "
                "relaunch with --resume-or-start")
    return (f"rank {rank}: timed out: {arrived} of {world_size} processes came to form the process group within "
            f"--dist.timeout_minutes={timeout_minutes:g}; {which}: the torchrun of the node that runs them says why "
            "in its output (a process that stopped or was killed before joining, e.g. out of memory: its exit code "
            "is in torchrun's report); else they are still starting (a slow file system or a busy machine: raise "
            "--dist.timeout_minutes)")


def _store_unreachable(rank: int, waited_s: float | None = None) -> str:
    """A torchrun worker that cannot reach torchrun's store (MASTER_ADDR:MASTER_PORT, which torchrun gives its
    workers, held by the torchrun of rank 0's node): that torchrun has stopped, or the address does not lead there
    from this machine (with the c10d rendezvous it is that node's own host name, `socket.getfqdn()`)."""
    host, port = _agent_address() or ("?", "?")
    when = f"within {waited_s:g} s" if waited_s is not None else "while it waited for the other processes to join"
    return (f"rank {rank} (host {socket.gethostname()}) cannot reach torchrun's store at {host}:{port} {when}: the "
            "torchrun that holds it (on the node of rank 0) has stopped, and its output says why (a process of that "
            "node failed or was killed), or that address does not lead there from this machine (it is --master-addr, "
            "or with the c10d rendezvous that node's host name, which must resolve here: else give that node's "
            f"torchrun --local-addr; and no firewall may block the port); rank {rank} stopped before training")


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


# ------------------------------------------------------------------------------- one rank fails, all stop
# A rank that fails leaves the others blocked in their next collective until its sockets close, and then each
# failed with gloo's "Connection closed by peer" traceback, while the failing rank's own one-line error was
# said by nobody (only the first rank of a machine prints, `errors.reports_here`). Now the failing rank leaves
# its message in the process group's key-value store before it exits, and a rank whose collective fails
# because a peer is gone stops with one line that repeats it.
FAILURE_KEY = "albertlm/failed/"
PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "gloo/transport",
             "nccl error", "nccl communicator")


class PeerFailed(UserError):
    """Another rank of the run stopped; the message is its own (from the store) or says none was left."""


def lost_peer(exc: BaseException) -> bool:
    """Whether a collective failed because another process of the group is gone."""
    if isinstance(exc, PeerFailed) or not isinstance(exc, RuntimeError):
        return False
    text = str(exc).lower()
    return isinstance(exc, dist.DistError) or any(marker in text for marker in PEER_GONE)


def timed_out(exc: BaseException) -> bool:
    """Whether a collective gave up waiting for the other ranks (gloo: "Timed out waiting 1800000ms for recv
    operation to complete"), rather than finding one of them gone."""
    return isinstance(exc, RuntimeError) and "timed out" in str(exc).lower()


def waited_too_long() -> str:
    """What a collective that timed out means, in the user's terms (`timed_out`)."""
    minutes = _in_group.get("timeout_minutes")
    limit = f"--dist.timeout_minutes={minutes:g}" if isinstance(minutes, (int, float)) else "--dist.timeout_minutes"
    return (f"no word from the other processes for {limit}: one of them is stuck, or was busy longer than that with "
            "work only it does (a checkpoint written to a slow file system, rank 0 scoring a dev evaluation or "
            "writing the best model while fine-tuning), or its machine went away; if such work takes that long, "
            "raise --dist.timeout_minutes")


def _store():
    try:
        return dist.distributed_c10d._get_default_store() if dist.is_initialized() else None
    except Exception:  # noqa: BLE001 (no store, no message: the caller says so)
        return None


def tell_peers(info: DistInfo, exc: BaseException, where: str = "") -> None:
    """Leave this rank's error, on one line, where the other ranks look when their collective fails."""
    store = _store()
    if store is None:
        return
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, (UserError, OSError)):
        text = f"{type(exc).__name__}: {text} (a bug or damaged input: its traceback is in rank {info.rank}'s output)"
    try:
        with _quiet_if_failing():
            store.set(f"{FAILURE_KEY}{info.rank}", f"rank {info.rank} stopped{where}: {text}")
    except Exception:  # noqa: BLE001 (the store went with rank 0: the others say that no message was left)
        pass


def peer_failures(info: DistInfo, wait_s: float = 1.0) -> list[str]:
    """The messages the other ranks left (`tell_peers`), waiting up to `wait_s` for one to arrive."""
    store = _store()
    if store is None:
        return []
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        try:
            with _quiet_if_failing():
                for rank in range(info.world_size):
                    key = f"{FAILURE_KEY}{rank}"
                    if rank != info.rank and store.check([key]):
                        found.append(store.get(key).decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 (the store is gone: rank 0, or the node's torchrun, which held it, stopped)
            return found
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


@contextlib.contextmanager
def _quiet_if_failing() -> Iterator[None]:
    """Around a call to the process group's store once a peer is gone: torch's C++ side writes a warning with a
    30-frame native stack to stderr ("recvValue failed ... Did the remote server shutdown or crash?") before it
    raises, when the store's host (rank 0's machine: its torchrun, or rank 0 set up by hand) has stopped, and
    that stack buried the one line the run then says. Here descriptor 2 (where the C++ side writes, whatever
    `sys.stderr` is) goes to a temporary file for the block: what was written there is passed on if the block
    succeeds and dropped if it raises (the caller handles the failure and says it). Without a descriptor 2 to
    redirect, nothing is changed."""
    fd = 2
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    try:
        saved = os.dup(fd)
    except OSError:
        yield
        return
    failed = True
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), fd)
            try:
                yield
                failed = False
            finally:
                os.dup2(saved, fd)
                if not failed:
                    held.seek(0)
                    written = held.read()
                    if written:
                        os.write(fd, written)
    finally:
        os.close(saved)


class _Terminated(BaseException):
    """SIGTERM while `failing_together` holds: torchrun's word that another rank failed, or the user's stop."""


def _terminated(signum, frame):
    raise _Terminated


@contextlib.contextmanager
def failing_together(info: DistInfo, where: Callable[[], str] = lambda: "") -> Iterator[None]:
    """Around work that meets the other ranks in collectives: an error here is left for the other ranks
    (`tell_peers`); a collective that fails because another rank is gone becomes `PeerFailed`, one line with
    that rank's message, instead of gloo's traceback. torchrun sends SIGTERM to the ranks still running once
    one has failed, which ended a rank still setting up before it could say anything: here a SIGTERM looks for
    another rank's message first (`PeerFailed`), else stops as Ctrl-C does (KeyboardInterrupt); once a peer is
    known to be gone, later SIGTERMs are ignored so that the line is said (torchrun kills after its grace
    period). The training loop's own handlers (`loop.stop_on_signals`) take over inside it."""
    if not info.enabled:
        yield
        return
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        yield
    except PeerFailed:
        raise
    except _Terminated:
        messages = peer_failures(info)
        if not messages:
            raise KeyboardInterrupt from None
        _peer_gone(main)
        raise PeerFailed(f"{'; '.join(messages)}; rank {info.rank} stopped too{where()}") from None
    except Exception as exc:
        if not lost_peer(exc):
            tell_peers(info, exc, where())
            # the others now leave, and torchrun then signals this rank: a SIGTERM must not end it before the
            # CLI has said why (on a loaded machine it did, between leaving the group and the error line)
            _peer_gone(main)
            raise
        _peer_gone(main)
        messages = peer_failures(info)
        if not messages and timed_out(exc):
            # this rank gave up waiting: it says so, and leaves it for the rank it waited for, which torchrun
            # stops next (`loop.stop_on_signals` then says it at once); it was taken for a process killed outright
            said = waited_too_long()
            tell_peers(info, UserError(said), where())
            raise PeerFailed(f"rank {info.rank} stopped{where()}: {said}") from None
        said = "; ".join(messages) if messages else (
            "another process of the run stopped without a message (killed, or out of memory?)")
        raise PeerFailed(f"{said}; rank {info.rank} stopped too{where()}") from None
    finally:
        if main and signal.getsignal(signal.SIGTERM) is _terminated:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _peer_gone(main: bool) -> None:
    if main:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


HOST_KEY = "host"


def differing_across_ranks(info: DistInfo, values: dict) -> dict[str, list[tuple[object, list[int]]]]:
    """The settings (`values`: name -> a plain value) that are not the same on every process of the run, as
    {name: [(value, [ranks holding it]), ...]} in rank order of first appearance; {} when all agree or alone.
    Every rank gets the same answer (one all-gather of the small dict). Each rank's host name travels with it
    (`HOST_KEY` in the answer, when the ranks are on more than one machine), for the message."""
    if not info.enabled:
        return {}
    gathered: list = [None] * info.world_size
    dist.all_gather_object(gathered, {"values": values, HOST_KEY: socket.gethostname()})
    out: dict[str, list[tuple[object, list[int]]]] = {}
    keys = list(dict.fromkeys(key for item in gathered for key in item["values"]))
    for key in keys:
        groups: list[tuple[object, list[int]]] = []
        for rank, item in enumerate(gathered):
            value = item["values"].get(key)
            for held, ranks in groups:
                if held == value:
                    ranks.append(rank)
                    break
            else:
                groups.append((value, [rank]))
        if len(groups) > 1:
            out[key] = groups
    hosts = [item[HOST_KEY] for item in gathered]
    if out and len(set(hosts)) > 1:
        out[HOST_KEY] = [(host, [rank for rank, h in enumerate(hosts) if h == host]) for host in dict.fromkeys(hosts)]
    return out


# what a resumed multi-process run adds to its advice when its processes disagree (`pretrain.check_same_run`,
# `tasks.finetune.check_same_finetune`): each rank reads the checkpoint it resumes from in its own --out, so a
# node given a directory of its own (not the one rank 0 writes) resumes from another checkpoint, or none
SHARED_OUT = (", with an --out that every node sees as the same directory (a shared file system: rank 0 writes the "
              "run there, and with --resume every rank reads its checkpoint from there)")


def refuse_differences(info: DistInfo, values: dict, advice: str) -> None:
    """A UserError on every rank, in one line naming what differs and on which ranks (and hosts), when `values`
    (what every process of one run must agree on) are not the same everywhere (`differing_across_ranks`);
    `advice` says how to start the processes alike."""
    differ = differing_across_ranks(info, values)
    if not differ:
        return
    hosts = dict(differ.pop(HOST_KEY, []))

    def where(ranks: list[int]) -> str:
        shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        host = next((h for h, on in hosts.items() if set(ranks) <= set(on)), None)
        return f"rank{'s' if len(ranks) > 1 else ''} {shown}{f' (host {host})' if host else ''}"

    said = []
    for key, groups in list(differ.items())[:3]:
        said.append(f"{key} is " + ", ".join(f"{value!r} on {where(ranks)}" for value, ranks in groups[:4]))
    more = f"; and {len(differ) - 3} more ({', '.join(list(differ)[3:6])}{', ...' if len(differ) > 6 else ''})" \
        if len(differ) > 3 else ""
    raise UserError(f"the {info.world_size} processes of this run were started with different settings: "
                    f"{'; '.join(said)}{more}; {advice}")


# ------------------------------------------------------------------------ one --out that every node sees
# A node given an --out of its own (its local disk, or a relative path from another working directory) trained a
# first multi-node run without a word, as only rank 0 writes there: the run was then in one node's directory and
# not the others', whose `--resume` was refused later (`SHARED_OUT`); with torchrun's c10d rendezvous rank 0 may
# be on any node, so the run could land on a disk the user does not look at. Measured with two torchrun "nodes"
# on one machine given `--out local0` and `--out local1`: the run went to local1, local0 was never made.
SHARED_PROBE = ".albertlm-shared-"    # the name of the file rank 0 leaves in --out for the others to look for
SHARED_WAIT_S = 120.0                 # how long a rank looks for it: NFS clients cache a lookup that found
                                      # nothing (the new --out, asked for by `check_run_dir` just before) for
                                      # their attribute-cache time, 30-60 s by default: twice that, so that a
                                      # shared --out is never refused (a node-local one waits that long once)


def check_shared_out(run_dir, info: DistInfo, option: str = "--out", wait_s: float = SHARED_WAIT_S) -> None:
    """Under several processes: refuse, on every rank in the same one line, a `run_dir` that is not the directory
    rank 0 writes the run in (node-local, or another path), before anything else is written. Rank 0 makes the
    directory and leaves a file of a random name in it; once the others know that name (a broadcast, sent after
    the file is written) each looks for it in its own `run_dir` for up to `wait_s` seconds, at most a third of
    --dist.timeout_minutes (a shared file system may show another machine's new file late); all say what they
    found (an all-gather), then rank 0 removes the file and any directory it made for it, so that nothing is left
    behind whether the run goes on or not. Cheap: two small collectives and a file. Alone, nothing."""
    import secrets
    from pathlib import Path

    if not info.enabled:
        return
    run_dir = Path(run_dir).absolute()
    minutes = _in_group.get("timeout_minutes")
    if isinstance(minutes, (int, float)):   # rank 0 waits in the all-gather meanwhile: well within the timeout
        wait_s = min(wait_s, minutes * 60.0 / 3)
    made: list[Path] = []
    probe, failure = None, ""
    if info.is_main:
        probe = run_dir / f"{SHARED_PROBE}{secrets.token_hex(12)}"
        try:
            for parent in [run_dir, *run_dir.parents]:   # the directories made here, removed again after
                if parent.exists():
                    break
                made.append(parent)
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(probe, "x", encoding="utf-8") as f:
                f.write(probe.name)
        except OSError as exc:
            failure = f"{option} {run_dir}: cannot write there ({exc.strerror or exc})"
    name, failure, host0 = broadcast_from_main(
        (probe.name if probe is not None else "", failure, socket.gethostname()), info)
    try:
        seen = info.is_main or (not failure and _sees(run_dir / name, wait_s))
        gathered: list = [None] * info.world_size
        dist.all_gather_object(gathered, (seen, socket.gethostname(), str(run_dir)))
    finally:
        if info.is_main:
            _remove_probe(probe, made)
    if failure:
        raise UserError(failure)
    blind = [rank for rank, (saw, _, _) in enumerate(gathered) if not saw]
    if not blind:
        return
    hosts = list(dict.fromkeys(gathered[rank][1] for rank in blind))
    shown = ", ".join(map(str, blind[:8])) + (", ..." if len(blind) > 8 else "")
    where = gathered[blind[0]][2]
    raise UserError(f"{option} is not one directory that every node sees: rank 0 (host {host0}) writes the run in "
                    f"{run_dir if info.is_main else gathered[0][2]}, and a file it made there is not in "
                    f"{where if where == gathered[0][2] else where + ' (its ' + option + ')'} on "
                    f"rank{'s' if len(blind) > 1 else ''} {shown} (host{'s' if len(hosts) > 1 else ''} "
                    f"{', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''}) within {wait_s:g} s; with several "
                    f"nodes give {option} a directory on a file system they share (rank 0 alone writes the run "
                    "there, and with --resume every rank reads its checkpoint from there)")


def _sees(path, wait_s: float) -> bool:
    """Whether `path` (rank 0's probe) is there with its own name inside, within `wait_s` seconds. Listing its
    directory as well as looking the name up makes some network file systems read the directory afresh."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            listed = path.name in os.listdir(path.parent)
            if listed and path.read_text(encoding="utf-8") == path.name:
                return True
        except (OSError, UnicodeError):
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def _remove_probe(probe, made: list) -> None:
    """Rank 0: its probe file and the directories it made for it (those it finds empty), never raising."""
    if probe is not None:
        with contextlib.suppress(OSError):
            probe.unlink()
    for directory in made:                       # deepest first
        with contextlib.suppress(OSError):
            directory.rmdir()


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


# ------------------------------------------------------------------------------- work shared out for rank 0
def my_share(count: int, info: DistInfo) -> range:
    """The items of `count` (batches, in order) that this rank takes when W processes share them: j on rank
    j % W (r, r + W, ...; all of them alone). A rank past the last item gets none, and still joins the collective
    that follows."""
    return range(info.rank, count, info.world_size)


def gather_to_main(obj: object, info: DistInfo) -> list | None:
    """Every rank's `obj` (picklable, on the CPU), in rank order, on rank 0; None on the others. Alone, `[obj]`."""
    if not info.enabled:
        return [obj]
    gathered: list | None = [None] * info.world_size if info.is_main else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered


def broadcast_from_main(obj, info: DistInfo, tensor: bool = False):
    """Rank 0's `obj` on every rank (what the others pass is ignored): a picklable object, or with `tensor` a
    tensor on the process group's device, filled in place on the others (each passes one of the same shape and
    dtype). Alone, `obj`."""
    if not info.enabled:
        return obj
    if tensor:
        dist.broadcast(obj, src=0)
        return obj
    held = [obj if info.is_main else None]
    dist.broadcast_object_list(held, src=0)
    return held[0]
