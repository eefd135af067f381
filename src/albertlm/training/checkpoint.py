"""Checkpoints: safetensors weights + config.json + the training state, written atomically, keep-last-K.

    RUN_DIR/checkpoints/step_00001000/
        model.safetensors  config.json     the model (loadable by `from_pretrained` and `albertlm evaluate`)
        trainer_state.pt                   optimizer, loss scaler, step, RNG, data position (`TrainState`)
        run_config.json                    the resolved run configuration

A checkpoint is written into `.tmp-step_...`, every file fsync'ed, then renamed into place: a directory
named `step_*` is always complete, so a kill -9 at any instant leaves the previous one usable.
"""
from __future__ import annotations

import contextlib
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
from albertlm.model.io import WriteError, write_safetensors, write_torch_file

try:
    import fcntl
except ImportError:  # not on Windows: runs there are not locked
    fcntl = None

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
    """The CPU generator's state, and each GPU's once this process uses CUDA. A process that has not started CUDA (a
    CPU run on a machine with GPUs) has drawn nothing from their generators: asking for their states started CUDA in
    it, after every step (`torch.cuda.get_rng_state_all` initialises CUDA), as `trainer.seed_generators` does not."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    if "cpu" in state:
        torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        # a run saved where each process saw 8 GPUs and resumed where it sees fewer: the GPUs it has (all of
        # them was an IndexError in torch's loop over its generators)
        torch.cuda.set_rng_state_all(list(state["cuda"])[:torch.cuda.device_count()])


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}"


def save_model(model: nn.Module, directory: Path, model_config: Any) -> None:
    """`model.safetensors` + `config.json`, through the model's own `save_pretrained` when it has one."""
    if hasattr(model, "save_pretrained"):
        model.save_pretrained(directory)
        return
    write_safetensors({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
                      directory / "model.safetensors")
    (directory / "config.json").write_text(json.dumps(model_config.to_dict(), indent=2, sort_keys=True) + "\n")


def load_model_weights(model: nn.Module, directory: str | Path) -> None:
    """Exact weights of one of our training checkpoints (same class and config, strict). A truncated or
    damaged file, or weights of another shape (`--resume` with changed `--model.*` options), is a UserError."""
    from albertlm.model.io import check_shapes, read_safetensors

    path = Path(directory) / "model.safetensors"
    if not path.is_file():
        raise UserError(f"no model.safetensors in {directory}{damaged_advice(directory)}")
    try:
        state = read_safetensors(path)
    except UserError as exc:              # truncated or damaged: the checkpoint before it is still good
        raise UserError(f"{exc}{damaged_advice(directory)}") from None
    hint = ("; a resumed run keeps the model it was started with, and this checkpoint is of another model than "
            "the run's run_config.json describes (copied from another run?)")
    try:
        check_shapes(model, state, path)
    except UserError as exc:
        raise UserError(f"{exc}{hint}") from None
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        what = "; ".join(f"{name}: {', '.join(keys[:3])}{' ...' if len(keys) > 3 else ''}"
                         for name, keys in (("missing", missing), ("unexpected", unexpected)) if keys)
        raise UserError(f"{path}: its tensors do not match this model ({what}){hint}")
    model.load_state_dict(state, strict=True)


def save_checkpoint(run_dir: str | Path, model: nn.Module, state: TrainState, model_config: Any,
                    run_config: dict | None = None, keep_last: int = 3) -> Path:
    """Write atomically, then delete all but the newest `keep_last` checkpoints. Returns the directory.
    A failed write (a full disk, a quota, a read-only directory) removes the half-written directory and is
    a UserError naming the checkpoint and the newest complete one, which is untouched; one the system refused is
    also an OSError (`WriteError`: the errno, the checkpoint's directory as `filename`) for a training script's
    `except OSError`."""
    final = step_dir(run_dir, state.step)
    if final.is_dir():                                 # same step saved already (e.g. Ctrl-C right after a save)
        return final
    tmp = final.parent / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_model(model, tmp, model_config)
        _write_trainer_state(tmp, state)
        if run_config is not None:
            (tmp / "run_config.json").write_text(json.dumps(run_config, indent=2) + "\n")
        _umask_modes(tmp)
        _fsync_tree(tmp)
        os.replace(tmp, final)                         # the commit point
        _fsync_dir(final.parent)
    except KeyboardInterrupt:                          # a second Ctrl-C: stop at once, leaving no half-written copy
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:  # OSError; safetensors and torch.save wrap write errors in their own types
        shutil.rmtree(tmp, ignore_errors=True)         # frees the space; it never looked complete
        last = latest_checkpoint(run_dir)
        # the checkpoint still usable, and what continues from it (the steps trained since it are trained again)
        kept = (f"the newest complete checkpoint is {last}, which `--resume` goes on from" if last
                else "no checkpoint was saved before")
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else _first_line(exc)
        message = f"{final}: cannot write the checkpoint ({reason}; is the disk full?); {kept}"
        if isinstance(exc, OSError):
            raise WriteError(message, exc.errno, final) from exc
        raise UserError(message) from exc
    prune_checkpoints(run_dir, keep_last)
    return final


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _write_trainer_state(directory: Path, state: TrainState) -> None:
    write_torch_file(state.__dict__, directory / "trainer_state.pt")   # a full disk: OSError, not torch's words


def rewrite_train_state(directory: str | Path, state: TrainState) -> None:
    """Replace the training state of the complete checkpoint `directory` (its weights unchanged) atomically: a
    temporary file, fsync'ed, renamed over trainer_state.pt. For a step whose interrupted evaluation the resumed run
    has done again (`loop.Loop._redo_evaluation`): the checkpoint then records it as done. A failed write is a
    UserError (also an OSError where the system refused it, as `save_checkpoint`'s); the old file is kept."""
    directory = Path(directory)
    final = directory / "trainer_state.pt"
    tmp = directory / f"{TMP_PREFIX}{final.name}-{os.getpid()}"
    try:
        write_torch_file(state.__dict__, tmp)
        tmp.chmod(final.stat().st_mode & 0o777)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(directory)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, Exception):
            raise
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else _first_line(exc)
        message = f"{final}: cannot rewrite it ({reason}; is the disk full?); it is kept as it was"
        if isinstance(exc, OSError):
            raise WriteError(message, exc.errno, final) from exc
        raise UserError(message) from exc


def load_train_state(directory: str | Path) -> TrainState:
    """The training state of a checkpoint; an empty, truncated, foreign or malicious file is a UserError."""
    from albertlm.model.io import read_torch_file

    path = Path(directory) / "trainer_state.pt"
    advice = damaged_advice(directory)
    if not path.is_file():
        raise UserError(f"{directory} is not a training checkpoint (no trainer_state.pt){advice}")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty file (a save that did not finish?){advice}")
    try:
        saved = read_torch_file(path)
    except UserError as exc:
        raise UserError(f"{exc}{advice}") from None
    known = set(TrainState.__dataclass_fields__)
    if not isinstance(saved, dict) or "step" not in saved or not set(saved) <= known:
        raise UserError(f"{path}: not a training state (expected a dict with {', '.join(sorted(known))}){advice}")
    if not isinstance(saved["step"], int) or saved["step"] < 0:
        raise UserError(f"{path}: its step is {saved['step']!r}, not an integer >= 0{advice}")
    return TrainState(**saved)


def recorded_data(directory: str | Path) -> dict | None:
    """What a checkpoint's trainer_state.pt records of its training data (`loop.StepData.state_dict`: its number
    of examples, the batch size and seed, and `pretrain.data_identity`'s tokenizer, build seed and shards), read
    through a memory map, so the optimizer's moments (twice the weights) are not read for it. None where the file
    cannot be read that way: `load_train_state`, which the resume runs next, then says why."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = torch.load(Path(directory) / "trainer_state.pt", map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # damaged, truncated, not a zip file: not this function's to say
        return None
    data = saved.get("data") if isinstance(saved, dict) else None
    return data if isinstance(data, dict) else None


def damaged_advice(directory: str | Path) -> str:
    """What a `--resume` whose newest checkpoint `directory` cannot be read (truncated, emptied, files missing: a
    disk fault, a copy that did not finish) can do, as the tail of its error: move that checkpoint out of
    checkpoints/ and `--resume` goes on, exactly, from the one before it, which is named (or from step 0 when there
    is none). Not done silently: a damaged checkpoint left in place would also be taken for that step's save when
    the resumed run reaches it (`save_checkpoint` keeps a step directory that exists). "" for a directory that is
    not a run's `checkpoints/step_N`."""
    directory = Path(directory)
    if directory.parent.name != CHECKPOINT_DIR:
        return ""
    run_dir = directory.parent.parent
    found = list_checkpoints(run_dir)          # oldest first, by step number
    names = [p.name for p in found]
    earlier = found[:names.index(directory.name)] if directory.name in names else found
    if earlier:
        then = f"`--resume` goes on from the checkpoint before it, {earlier[-1]}, exactly"
    elif run_kind(run_dir) == "fine-tuning":   # its --resume needs a checkpoint
        then = "start the run over with --overwrite (there is no checkpoint before it)"
    else:
        then = "`--resume` starts the run again from step 0 (there is no checkpoint before it)"
    return (f"; move {directory} out of {directory.parent} (e.g. to {run_dir / ('damaged-' + directory.name)}) and "
            f"{then}")


RUN_FILES = ("run_config.json", "metrics.jsonl", "tensorboard", CHECKPOINT_DIR)
# what only a fine-tuning run (`tasks.finetune.RUN_FILES`) writes in its directory; a pretraining run never does
FINETUNE_ONLY = ("best", "train_log.json", "metrics.json")


def run_kind(run_dir: str | Path) -> str | None:
    """"pretraining" (`albertlm pretrain`: its run_config.json beside checkpoints/), "fine-tuning" (`albertlm
    finetune`: best/, train_log.json or metrics.json, or, before its first evaluation, a newest checkpoint whose
    run_config.json names a task family) or None (neither, or nothing there)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    if (run_dir / "run_config.json").is_file():
        return "pretraining"
    if any((run_dir / name).exists() for name in FINETUNE_ONLY):
        return "fine-tuning"
    last = latest_checkpoint(run_dir)
    try:
        saved = json.loads((last / "run_config.json").read_text(encoding="utf-8")) if last is not None else None
    except (OSError, ValueError):
        return None
    if isinstance(saved, dict):
        return "fine-tuning" if "family" in saved else "pretraining" if "model" in saved and "data" in saved else None
    return None


def check_run_kind(run_dir: str | Path, mine: str) -> None:
    """Refuse a --out holding the other command's run (`run_kind`), whatever --resume or --overwrite say: `albertlm
    pretrain --resume` of a fine-tuning run said its run_config.json had an unknown key and to "start over with
    --overwrite", which removed the fine-tuning's checkpoints and left its best/ beside the new run (that a later
    `predict --model RUN` read); `albertlm finetune --overwrite` into a pretraining run removed its checkpoints,
    metrics and events and left its run_config.json (`pretrain --resume` then started it again from step 0)."""
    other = run_kind(run_dir)
    if other is None or other == mine:
        return
    if other == "fine-tuning":
        raise UserError(f"--out {run_dir} holds an `albertlm finetune` run, not a pretraining run: give another --out "
                        "(`albertlm finetune ... --resume` with this --out continues that run)")
    raise UserError(f"--out {run_dir} holds an `albertlm pretrain` run, not a fine-tuning run: give another --out "
                    f"(to fine-tune its model, pass --model {run_dir}; `albertlm pretrain --out {run_dir} --resume` "
                    "continues the pretraining)")


def check_run_dir(run_dir: str | Path, resume: bool, overwrite: bool = False,
                  run_files: tuple[str, ...] = RUN_FILES, must_exist: bool = False) -> list[Path]:
    """Refuse to start a new run in a directory that holds another one: without `--resume` its checkpoints
    would be mixed with the new run's and pruned. Returns what `--overwrite` replaces (remove it with
    `clear_run_dir` once everything else has been checked). Also refuses a --out that is a file or that
    cannot be created, and, with `must_exist`, a `resume` where there is no run."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--out {run_dir} exists and is not a directory")
    parent = run_dir
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--out {run_dir}: cannot create it there ({parent} is a file, not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {run_dir}: cannot create or write there ({parent} is not writable)")
    check_run_kind(run_dir, "pretraining" if run_files == RUN_FILES else "fine-tuning")
    found = [run_dir / name for name in run_files if (run_dir / name).exists()] if run_dir.is_dir() else []
    if resume and must_exist and not found:
        raise UserError(f"no run to resume in {run_dir} (no {', '.join(run_files)}){no_run_advice(run_dir)}")
    if resume or not found:
        return []
    if not overwrite:
        steps = list_checkpoints(run_dir)
        if not steps and unstarted_run(run_dir, run_files):
            return []  # only what a run writes before it trains: the corrected command takes its place
        if not steps:  # the logs of a run that stopped before its first checkpoint: nothing to continue
            raise UserError(f"--out {run_dir} already holds a run that saved no checkpoint ("
                            f"{', '.join(p.name for p in found)}); pass --overwrite to start over (its files are "
                            "removed), "
                            # pretraining's --resume starts such a run again from step 0; fine-tuning's finds no
                            # checkpoint to resume and refuses, so it is not offered there
                            + ("--resume to start again from step 0 with its recorded settings (its records are "
                               "replaced), " if run_files == RUN_FILES else "") + "or another --out")
        raise UserError(f"--out {run_dir} already holds a run ({len(steps)} checkpoint(s), the newest "
                        f"{steps[-1].name}); pass --resume to continue it, --overwrite to start over (its files "
                        "are removed), or another --out")
    return found


def no_run_advice(run_dir: str | Path) -> str:
    """What a `--resume` that finds no run in `run_dir` advises: to start a new run there; but on a torchrun rank
    other than 0 (another node, whose --out is not the directory rank 0 writes) that advice was wrong: the run is
    rank 0's, and every node must see its --out as the same directory."""
    rank = os.environ.get("RANK", "0").strip()
    if rank not in ("", "0"):
        return (f" on rank {rank}, which reads {Path(run_dir).absolute()}: rank 0 writes the run, so with several "
                "nodes --out must be one directory every node sees (a shared file system)")
    return "; leave out --resume to start a new run there"


def unstarted_run(run_dir: str | Path, run_files: tuple[str, ...] = RUN_FILES) -> bool:
    """Whether `run_dir` holds only what `albertlm pretrain` writes before its first record and checkpoint: its
    run_config.json, an empty metrics.jsonl, TensorBoard event files (with no scalar: each one is written after its
    metrics.jsonl record) and at most a killed save's `.tmp-*` under checkpoints/. Such a run stopped as it started
    (a NaN at step 2, an out-of-memory or another error at the first step, Ctrl-C twice): a new run in its place
    loses nothing, so the corrected command is not refused (the files are written over or appended to, none is
    removed). Anything else (a record, a checkpoint, a file of another name) keeps the directory the old run's."""
    if run_files != RUN_FILES:            # another command's run directory: its own rules
        return False
    run_dir = Path(run_dir)
    config, metrics = run_dir / "run_config.json", run_dir / "metrics.jsonl"
    events, checkpoints = run_dir / "tensorboard", run_dir / CHECKPOINT_DIR
    try:
        if not (config.is_file() and metrics.is_file()) or metrics.read_bytes().strip():
            return False
        if events.exists() and not (events.is_dir() and all(
                p.is_file() and p.name.startswith("events.out.tfevents.") for p in events.iterdir())):
            return False
        return not checkpoints.exists() or (checkpoints.is_dir() and all(
            p.name.startswith(TMP_PREFIX) for p in checkpoints.iterdir()))
    except OSError:                       # unreadable: not ours to judge
        return False


@contextlib.contextmanager
def run_dir_lock(run_dir: str | Path):
    """Held by the process that writes a run directory (rank 0), from before it replaces anything there until
    the run ends: a second `albertlm pretrain` with the same --out while the first still runs (the command started
    twice, a --resume in another terminal) is refused instead of both writing one run_config.json, metrics.jsonl
    and checkpoints/ (`directory_lock`)."""
    with directory_lock(run_dir, f"--out {run_dir}: another run is writing there now (an `albertlm pretrain` with "
                                 "this --out is still running); let it finish or stop it first, or pass another --out"):
        yield


@contextlib.contextmanager
def directory_lock(directory: str | Path, busy: str):
    """An advisory lock on `directory` itself, held by this process for the block; another process holding it
    is a UserError saying `busy`. The system drops it when the process ends, however it ends; on a file system
    without locks nothing is locked. A forked child (a DataLoader worker) closes its copy at once, so a worker
    outliving its killed parent does not hold the lock (`_close_held_locks`)."""
    fd = os.open(directory, os.O_RDONLY)
    _HELD_LOCKS.add(fd)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UserError(busy) from None
            except OSError:
                pass                      # no locks here (some network file systems)
        yield
    finally:
        _HELD_LOCKS.discard(fd)
        os.close(fd)


_HELD_LOCKS: set[int] = set()      # the descriptors of the directories this process holds locked


def _close_held_locks() -> None:
    """In a forked child: drop its copies of the parent's lock descriptors (the parent's lock stays held)."""
    for fd in list(_HELD_LOCKS):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_locks)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` through a temporary file, fsync'ed, and a rename: never a half-written file under its name, also
    after a power loss (without the fsync the rename could reach the disk before the data: an empty run_config.json,
    which `--resume` then refused as not JSON)."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):      # a read-only file system refuses the removal too
            tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None


def clear_run_dir(found: list[Path]) -> None:
    """Remove an old run's files (what `check_run_dir` returned), for `--overwrite`."""
    for path in found:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def prune_checkpoints(run_dir: str | Path, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints. Each is first renamed out of the `step_*` names (to a
    `.tmp-` one, atomically) and then removed, so a kill -9 in the middle of its removal leaves a leftover that the
    next `--resume` clears (`remove_stale_tmp`), never a `step_*` directory holding some of its files: one left
    empty stayed beside the kept checkpoints for good (keep-last 2 kept 3), was counted as a checkpoint, and could be
    named as the one to go on from when the newest is damaged (`damaged_advice`)."""
    for old in list_checkpoints(run_dir)[:-keep_last]:
        doomed = old.with_name(f"{TMP_PREFIX}pruned-{old.name}-{os.getpid()}")
        try:
            os.replace(old, doomed)
        except OSError:                 # cannot rename it there: removed in place, as before
            doomed = old
        shutil.rmtree(doomed, ignore_errors=True)


def remove_stale_tmp(run_dir: str | Path) -> None:
    """Leftovers of a save that was killed midway; never a usable checkpoint. Also a killed `rewrite_train_state`'s
    temporary file inside a complete checkpoint (a copy of its optimizer state, twice the weights' size, that
    stayed there for good and travelled with every copy of the checkpoint)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if root.is_dir():
        for p in root.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(p, ignore_errors=True)
        for p in root.glob(f"step_*/{TMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                p.unlink()


def _umask_modes(directory: Path) -> None:
    """Give every file of a checkpoint the mode the others got from the umask (trainer_state.pt's): safetensors
    writes model.safetensors through a temporary file of mode 0600 whatever the umask, so in a run directory shared
    with a group (a teammate's `albertlm evaluate`, a serving process of another user) the weights were the one
    file of the checkpoint that only its owner could read."""
    reference = directory / "trainer_state.pt"
    if not reference.is_file():
        return
    mode = reference.stat().st_mode & 0o777
    for path in directory.iterdir():
        if path.is_file() and path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)


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
