"""The one exception type the CLI turns into a one-line message and a non-zero exit, the JSON-file reader
every layer uses so that a damaged JSON file reads the same way everywhere, and which process says either."""
import contextlib
import json
import os
import sys
from pathlib import Path


def reports_here() -> bool:
    """Whether this process prints errors, warnings and notices: the first process of a torchrun launch on
    this machine (LOCAL_RANK 0; rank 0 on one machine), or a process on its own. Per machine, not only global
    rank 0: each node's torchrun has its own terminal, and a problem of one node (its copy of the data
    missing) must still be said there. Every rank still exits non-zero on an error. No torch import here."""
    local = os.environ.get("LOCAL_RANK")
    rank = local if local is not None else os.environ.get("RANK", "0")
    if rank.strip() in ("", "0"):
        return True
    try:  # a launch set up wrongly by hand (RANK not a number, or past WORLD_SIZE) is refused: say why here
        number = int(rank)
        # RANK=1 or LOCAL_RANK=1 with no WORLD_SIZE (1), or past it, is outside a launch too (a LOCAL_RANK left in
        # the shell by hand: every error of every command was silent, exit 2 and no line)
        return not 0 <= number < int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return True


# A rank that is not the one to speak fails, before the process group forms, on what every rank checks (the
# command line, the config, --dist.backend): exiting at once lets torchrun stop the first rank before it has
# said why (seen on a loaded 2-core machine: no line at all). Such a rank lingers instead, so that the first
# rank says it and torchrun then ends this one; if it is still running after LINGER_S, the error was its own
# (its copy of a file, its device), and it says it, naming its rank.
LINGER_S = 30.0   # importing torch alone took 14-18 s on a loaded 2-core machine; torchrun ends a
                  # lingering rank as soon as the first one exits, so the wait costs nothing then
_joined = {"group": False}


def joined_group() -> None:
    """Called once this process is in a process group: from then on a failing rank leaves its message for the
    others (`training.distributed.tell_peers`) and must exit at once so that their collectives fail."""
    _joined["group"] = True


def other_rank_says(line: str) -> None:
    """For a process that does not report (`reports_here` False): under torchrun and before a process group
    formed, wait `LINGER_S` for the first rank to say the same (torchrun ends this process then), else say
    `line` with this process's rank. Elsewhere, nothing (every rank still exits non-zero)."""
    if reports_here() or _joined["group"] or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    import sys
    import time

    try:
        time.sleep(LINGER_S)
    except KeyboardInterrupt:
        return
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "?"))
    prog, sep, rest = line.partition(": ")
    print(f"{prog} (rank {rank}){sep}{rest}" if sep else f"(rank {rank}) {line}", file=sys.stderr, flush=True)


class UserError(Exception):
    """Bad input from the user (a path, a value, a file's content): message, exit code 2, no traceback."""

    exit_code = 2


# Who is speaking: the CLI sets `albertlm <command>` while a command runs (`cli.main`), so that a warning line
# starts as that command's error line does (`albertlm export: error: ...`); elsewhere (Python) plain `albertlm`.
_PROGRAM = {"name": "albertlm"}


@contextlib.contextmanager
def program_named(name: str):
    """`warning_line` and `say_warning` name `name` (`albertlm <command>`) while the block runs."""
    before = _PROGRAM["name"]
    _PROGRAM["name"] = name
    try:
        yield
    finally:
        _PROGRAM["name"] = before


def program_name() -> str:
    """`albertlm <command>` while the CLI runs a command (`program_named`), else `albertlm`."""
    return _PROGRAM["name"]


def warning_line(text: str) -> str:
    """`albertlm <command>: warning: text`: the one form of a warning line, as errors are `albertlm <command>:
    error: ...` (the command that runs, `program_named`; `albertlm` outside the CLI). Text on one line."""
    text = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return f"{_PROGRAM['name']}: warning: {text}"


def say_warning(text: str) -> None:
    """`warning_line(text)` on stderr, from the process that reports (`reports_here`: under torchrun, each
    machine's first rank, not every rank); a closed stderr is never worth a traceback."""
    if not reports_here():
        return
    try:
        print(warning_line(text), file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def json_object_or_empty(path: Path) -> dict:
    """A JSON object from `path`, or {} when it is missing, unreadable, not JSON or not an object: for optional
    side files (a run's task.json, metrics.json) that only add information. Read as UTF-8 whatever the locale,
    a byte-order mark allowed, as `read_json_object` reads: a config.json saved by Notepad (BOM) read as {}, so
    a transformers classifier's id2label was dropped without a word (predict/evaluate then scored an MNLI model
    whose classes are in another order than GLUE's in the wrong order; convert lost its label names)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, ValueError, RecursionError):   # RecursionError: nested deeper than the stack (damaged)
        return {}
    return data if isinstance(data, dict) else {}


def read_json_object(path: Path, what: str, hint: str = "") -> dict:
    """A JSON object from `path`; anything else (not UTF-8, not JSON, nested deeper than the stack, another
    type, unreadable) is a UserError naming the file, `what` it should hold, and `hint` (what to do)."""
    suffix = f"; {hint}" if hint else ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8-sig"))   # a byte-order mark (Notepad's) is fine
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise UserError(f"{path}: not a valid JSON file ({str(exc) or type(exc).__name__}){suffix}") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object ({what}), got {type(data).__name__}{suffix}")
    return data


def stderr_is_terminal() -> bool:
    """Whether stderr (where progress bars draw) is a terminal: not under nohup, a batch scheduler, a pipe or a
    test. Where it is not, long work prints plain progress lines instead of a bar's carriage returns."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):      # replaced by an object without isatty, or closed
        return False


# the signals `sigterm_stops` makes stop a command as Ctrl-C does, where they have their default action: SIGTERM, and
# the training loop's other stop signals (`training.loop.stop_signals`): Slurm's SIGUSR1 pre-emption notice and the
# SIGHUP of a closed ssh session. One a process ignores (nohup's SIGHUP) stays ignored: SIG_IGN is not the default
STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGHUP")


@contextlib.contextmanager
def sigterm_stops():
    """SIGTERM (`kill`, `timeout`, a scheduler cancelling the job) stops a command as Ctrl-C does, wherever it
    comes: KeyboardInterrupt, so what is half made is removed, the CLI says `interrupted` and exits 130 (a training
    loop's own handler saves a checkpoint first; ablate's `_run_parallel` passes it on to its workers). Outside a
    training loop SIGTERM had its default action: the process ended at once with 143 and no word (while a
    pretraining or fine-tuning set up or wrote its last files, during the tokenizer's training, an evaluation,
    ablate's report), leaving half-made files behind. The same for SIGUSR1 (Slurm's pre-emption notice while a run
    sets up) and SIGHUP (a closed ssh session), which a training loop also takes as a stop (`STOP_SIGNALS`): they
    ended the process with 138 / 129 and no word. The CLI runs every command under it. Each only where it has its
    default action, in the main thread (a caller's own handler is left alone, and so is an ignored one: a command
    started with nohup outlives its session); a second one during the clean-up is ignored. The default comes back
    when the block ends. No torch import."""
    import signal
    import threading

    taken = []
    if threading.current_thread() is threading.main_thread():
        taken = [signum for signum in (getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name))
                 if signal.getsignal(signum) is signal.SIG_DFL]
    for signum in taken:
        signal.signal(signum, _sigterm_interrupts)
    try:
        yield
    finally:
        for signum in taken:
            signal.signal(signum, signal.SIG_DFL)


def _sigterm_interrupts(signum, frame) -> None:
    """`sigterm_stops`'s handler: KeyboardInterrupt, once. While the data build spawns its workers it holds stops
    back (`data.build._DEFERRED_STOPS`, acted on once they have started): the signal is left to it then."""
    import signal

    deferred = getattr(sys.modules.get("albertlm.data.build"), "_DEFERRED_STOPS", None)
    if isinstance(deferred, list):
        deferred.append(signum)
        return
    for name in STOP_SIGNALS:                       # the clean-up runs once, whichever of them comes next
        other = getattr(signal, name, None)
        if other is not None and signal.getsignal(other) is _sigterm_interrupts:
            signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt


def user_path(path: str | Path) -> Path:
    """`path` as a Path, a leading `~` or `~user` expanded as the shell does (a notebook's "~/models/albert"): it
    named a folder `~` in the working directory. Here, where every layer may import it (tokenization, model.io,
    interop.hf, tasks.inference). A `~user` naming no user is left as it is (`Path.expanduser` raised
    RuntimeError: "Could not determine home directory")."""
    expanded = os.path.expanduser(path)
    return Path(expanded if expanded != os.fspath(path) else path)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (another user's counts: EPERM). Elsewhere than POSIX always
    True (Windows' os.kill(pid, 0) sends Ctrl-C): nothing is removed there. (Embed's temporary files and
    `model.io`'s killed saves ask it.)"""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True
