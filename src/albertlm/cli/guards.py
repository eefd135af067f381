"""Checks several commands share, made before anything is read or written (no torch at import).

`check_out_keeps_source`: a new training run's --out may not be the checkpoint it starts from, nor the run
directory whose files (checkpoints/, best/) hold it: `--overwrite` removes those files once the model has
been loaded, so the user's checkpoint would be gone, and a run without it would write its own files in
among the model's.
"""
from __future__ import annotations

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
