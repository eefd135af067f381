"""Where a run's numbers go (rank 0 only): RUN_DIR/metrics.jsonl, TensorBoard events, a tqdm bar."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from albertlm.errors import UserError


class MetricsLogger:
    """`log(step, split, metrics)` appends one JSON line and the TensorBoard scalars `split/name`;
    `advance(step, loss)` moves the progress bar (step, loss, tokens/s, ETA).

    A run resumed at `start_step` first drops what a killed run logged after that step (metrics.jsonl records,
    TensorBoard events through `purge_step`): the steps are trained again and logged once, in order."""

    def __init__(self, run_dir: str | Path, max_steps: int, start_step: int = 0, tensorboard: bool = True,
                 progress: bool = True):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        drop_records_after(self.run_dir / "metrics.jsonl", start_step)
        self.jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        self._write_failed = False
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            events = self.run_dir / "tensorboard"
            resumed = start_step > 0 or (events.is_dir() and any(events.iterdir()))
            # TensorBoard hides the events of steps >= purge_step: the records of `start_step` itself (its
            # evaluation, its training window) were logged before its checkpoint was saved, and are kept
            self.writer = SummaryWriter(str(events), purge_step=start_step + 1 if resumed else None)
        self.bar = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=max_steps, initial=start_step, unit="step", dynamic_ncols=True,
                            smoothing=0.1, mininterval=0.5)

    def log(self, step: int, split: str, metrics: dict[str, float]) -> None:
        record = {"step": step, "split": split, "time": round(time.time(), 3)}
        record.update({k: float(v) for k, v in metrics.items()})
        try:
            self.jsonl.write(json.dumps(record) + "\n")
        except OSError as exc:   # a full disk, a quota: said with the file and what to resume from
            self._write_failed = True
            raise UserError(f"{self.run_dir / 'metrics.jsonl'}: cannot write the record of step {step} "
                            f"({exc.strerror or exc}; is the disk full?); the run stopped, {_newest(self.run_dir)}: "
                            "free some space and `--resume`") from None
        if self.writer is not None:
            for name, value in metrics.items():
                self.writer.add_scalar(f"{split}/{name}", float(value), step)
        if split == "eval":
            self.note(f"step {step} eval: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))

    def advance(self, step: int, loss: float, tokens_per_s: float) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            self.bar.set_postfix_str(f"loss {loss:.4f}, {tokens_per_s:,.0f} tok/s", refresh=False)

    def note(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if not self.jsonl.closed:
            try:
                self.jsonl.close()
            except OSError:
                if not self._write_failed:   # else the failed record, still buffered, fails again: said already
                    raise


def drop_records_after(path: Path, step: int) -> None:
    """Rewrite metrics.jsonl (atomically) without the records of steps after `step`, and without a
    half-written last line; other lines are kept as they are."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    kept = []
    for number, line in enumerate(lines, 1):
        try:
            record_step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            if number < len(lines) and line.strip():
                kept.append(line)       # not ours to judge; only a killed run's last line is dropped
            continue
        if record_step <= step:
            kept.append(line)
    if len(kept) == len(lines):
        return
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8", errors="surrogateescape")
        os.replace(tmp, path)
    except OSError as exc:       # the old file is untouched; no half-written copy is left beside it
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot rewrite it without the records after step {step} "
                        f"({exc.strerror or exc}; is the disk full?)") from None


def _newest(run_dir: Path) -> str:
    """What a resumed run would continue from, in words."""
    from albertlm.model.io import latest_checkpoint

    last = latest_checkpoint(run_dir)
    return f"the newest checkpoint is {last}" if last else "no checkpoint was saved yet"


def _reason(exc: Exception) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The JSONL records; after a resume, a step logged twice keeps its latest record."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    latest: dict[tuple[str, int], dict] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            key = (str(rec["split"]), int(rec["step"]))
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines):   # the last line of a killed run, half-written: skipped
                continue
            raise UserError(f"{path}:{number}: not a metrics record ({_reason(exc)})") from None
        latest[key] = rec
    return sorted(latest.values(), key=lambda r: (r["split"], r["step"]))
