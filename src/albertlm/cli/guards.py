"""Checks several commands share, made before anything is read or written (no torch at import).

`check_out_keeps_source`: a new training run's --out may not be the checkpoint it starts from, nor the run
directory whose files (checkpoints/, best/) hold it: `--overwrite` removes those files once the model has
been loaded, so the user's checkpoint would be gone, and a run without it would write its own files in
among the model's.

`check_home_expanded`: an --out the shell left `~` in (quoted, `--out '~/runs'`, or after `=`, `--out=~/runs`,
which bash and sh do not expand) is refused: it was a folder named `~` made in the current directory, without a
word (and `rm -rf ~`, the obvious clean-up, removes the home directory).

`check_not_a_run`: convert's DST and export's --out DIR may not be a training run's directory: a model's
config.json there makes every command given the run read that copy instead of the run's checkpoints.
"""
from __future__ import annotations

import os
from pathlib import Path

from albertlm.errors import UserError


def check_out_keeps_source(out: str | Path, given: str, source: str | Path, flag: str,
                           run_files: tuple[str, ...]) -> None:
    """`given` is what the user passed to `flag` (a model or run directory), `source` the checkpoint it means;
    `run_files` the names in a run directory a new run there replaces."""
    out_dir, src = Path(out).resolve(), Path(source).resolve()
    if src == out_dir:
        raise UserError(f"--out {out} is the checkpoint {flag} {given} starts from: the new run would write into "
                        "it (and --overwrite would remove it before it is read); give another --out")
    try:
        inside = src.relative_to(out_dir)
    except ValueError:
        return
    if inside.parts and inside.parts[0] in run_files:
        raise UserError(f"--out {out} holds the checkpoint {flag} {given} starts from ({source}): starting a new "
                        "run there (--overwrite) would remove it before it is read; give another --out")


def check_home_expanded(value: str | os.PathLike | None, flag: str = "--out") -> None:
    """Refuse a path to write to whose first part is `~` or `~user` (an existing user) as typed, where no folder of
    that name exists here (one that does was made on purpose, or by an earlier run: it is used as it is). `~tmp`
    naming no user is a name like any other. Reading needs no check: a `~/x` that does not exist is not found."""
    if not isinstance(value, (str, os.PathLike)):      # an option left out (None)
        return
    text = os.fspath(value)
    if not isinstance(text, str) or not text.startswith("~"):
        return
    first = Path(text).parts[0]
    home = os.path.expanduser(first)
    if home == first or os.path.lexists(first):
        return
    raise UserError(f"{flag} {text}: the shell did not expand '~' (quoted, or after '='), and albertlm would make a "
                    f"folder named {first!r} here; write {home}{text[len(first):]}")


def check_not_a_run(out: str | Path, flag: str, instead: str) -> None:
    """Refuse to write a model's files (config.json and the rest) into a training run's directory (one holding
    `checkpoints/step_N` or a fine-tuning's `best/`): every command that takes the run reads a directory with a
    config.json as that model from then on, so the run's own newer checkpoints (and best/) were passed over
    without a word (`convert runs/base runs/base --to hf`, `export onnx runs/base --out runs/base`)."""
    from albertlm.model.io import CONFIG, latest_checkpoint

    path = Path(out)
    if not path.is_dir() or (path / CONFIG).is_file():   # a model directory already: the other checks say
        return
    held = "best/" if (path / "best" / CONFIG).is_file() else "checkpoints/" if latest_checkpoint(path) else None
    if held:
        raise UserError(f"{flag} {out} is a training run's directory (it holds {held}): a model written there "
                        "would be read instead of the run's checkpoints by every command given the run; give "
                        f"another {flag}, such as {path / instead}")
