"""The one exception type the CLI turns into a one-line message and a non-zero exit, the JSON-file reader
every layer uses so that a damaged JSON file reads the same way everywhere, and which process says either."""
import json
import os
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
        if local is None and "WORLD_SIZE" in os.environ:
            return not 0 <= number < int(os.environ["WORLD_SIZE"])
    except ValueError:
        return True
    return False


class UserError(Exception):
    """Bad input from the user (a path, a value, a file's content): message, exit code 2, no traceback."""

    exit_code = 2


def json_object_or_empty(path: Path) -> dict:
    """A JSON object from `path`, or {} when it is missing, unreadable, not JSON or not an object: for optional
    side files (a run's task.json, metrics.json) that only add information."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_json_object(path: Path, what: str, hint: str = "") -> dict:
    """A JSON object from `path`; anything else (not UTF-8, not JSON, nested deeper than the stack, another
    type, unreadable) is a UserError naming the file, `what` it should hold, and `hint` (what to do)."""
    suffix = f"; {hint}" if hint else ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise UserError(f"{path}: not a valid JSON file ({str(exc) or type(exc).__name__}){suffix}") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object ({what}), got {type(data).__name__}{suffix}")
    return data
