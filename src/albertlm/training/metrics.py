"""Where a run's numbers go (rank 0 only): RUN_DIR/metrics.jsonl, TensorBoard events, a tqdm bar (on a
terminal) or a plain line per training record (otherwise), and the run's summary at its end."""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

from albertlm.errors import UserError


# what a training record holds besides the objective's metrics (`loop.Window.read`, `loop.Loop.log_train`)
LOOP_KEYS = ("lr", "grad_norm", "tokens_per_s", "data_wait_frac", "window_s", "tokens")
# a training record's key of the learning rate of an earlier step of its window where the schedule bends
# (`loop.Plan.lr_knots`: the first step, the warmup's last and the one after it), "lr@3125": with --log-every at or
# above the warmup steps, the records' lr (their last step's) skipped the warmup, and `albertlm plot` drew none.
# In TensorBoard it is train/lr at that step; not on the console
LR_AT = "lr@"


def lr_points(record: dict) -> list[tuple[int, float]]:
    """(step, lr) of a training record: its `LR_AT` keys' and its own step's, by step."""
    points = [(int(k[len(LR_AT):]), v) for k, v in record.items() if k.startswith(LR_AT) and k[len(LR_AT):].isdigit()]
    if "lr" in record:
        points.append((record["step"], record["lr"]))
    return sorted(points)


class MetricsLogger:
    """`log(step, split, metrics)` appends one JSON line and the TensorBoard scalars `split/name`;
    `advance(step, loss)` moves the progress bar (step, loss, tokens/s, ETA; when `--train.max_minutes` ends the
    run first, also when the budget ends). The bar is drawn when `progress`
    is on and stderr is a terminal (tqdm's own rule for "no terminal", as the other commands' bars); without it,
    each training record is also one plain line on stdout (`step 20/1000 train: loss ...`), so a run under
    nohup or a batch scheduler shows its loss between evaluations. So does a run whose stdout alone is a file or
    a pipe (`> train.log`, `| tee train.log` while the bar draws on the terminal): the log's reader never sees the
    bar, and the log had the evaluations but no training numbers. `finish(summary)` ends the run: the summary
    record, then the summary's lines (`summary_lines`) below the closed bar.

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
            quiet_event_writer_threads()
            # TensorBoard hides the events of steps >= purge_step: the records of `start_step` itself (its
            # evaluation, its training window) were logged before its checkpoint was saved, and are kept
            try:
                self.writer = SummaryWriter(str(events), purge_step=start_step + 1 if resumed else None)
            except OSError as exc:
                raise self._events_error(exc, "cannot start its TensorBoard events") from None
        self.max_steps, self._start_step, self._started = max_steps, start_step, time.monotonic()
        # (step, time.monotonic()) when this invocation's first step was done (`advance`): the pace is taken from
        # there on, without the one-time costs before (the model's and the data's start, torch.compile's compiling)
        self._first_done: tuple[int, float] | None = None
        self.deadline = math.inf   # time.monotonic() at which `--train.max_minutes` stops the run (the loop sets it)
        self.bar = None
        if progress and _terminal():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=max_steps, initial=start_step, unit="step", dynamic_ncols=True,
                            smoothing=0.1, mininterval=0.5)
        # a line per training record where no bar shows the numbers to stdout's reader
        self._train_lines = self.bar is None or _stdout_elsewhere()

    def log(self, step: int, split: str, metrics: dict[str, float]) -> None:
        record = {"step": step, "split": split, "time": round(time.time(), 3)}
        record.update({k: float(v) for k, v in metrics.items()})
        try:
            self.jsonl.write(json_line(record))
        except OSError as exc:   # a full disk, a quota: said with the file and what to resume from
            self._write_failed = True
            raise UserError(f"{self.run_dir / 'metrics.jsonl'}: cannot write the record of step {step} "
                            f"({exc.strerror or exc}; is the disk full?); the run stopped, {_newest(self.run_dir)}: "
                            "free some space and `--resume`") from None
        if self.writer is not None:
            try:
                for name, value in metrics.items():
                    if name.startswith(LR_AT):        # an earlier step's lr: on the one train/lr curve
                        self.writer.add_scalar(f"{split}/lr", float(value), int(name[len(LR_AT):]))
                    else:
                        self.writer.add_scalar(f"{split}/{name}", float(value), step)
            except Exception as exc:  # noqa: BLE001 (the events' writer thread failed: its error, said once)
                self._events_failed(exc, f"cannot write the TensorBoard events of step {step}")
        if split == "eval":
            self.note(f"step {step} eval: " + numbers(metrics))
        elif split == "train" and self._train_lines:    # a bar on stdout's terminal shows them: no second copy
            self.note(self._train_line(step, metrics))

    def _train_line(self, step: int, metrics: dict[str, float]) -> str:
        """`step 20/1000 train: loss 3.4567, ..., lr 0.00176, grad_norm 1.23, 12,345 tok/s, ETA 1h02m` (the ETA
        from this run's pace since its first step, evaluations and checkpoints included)."""
        parts = [f"{k} {float(v):.4f}" for k, v in metrics.items() if k not in LOOP_KEYS and not k.startswith(LR_AT)]
        if "lr" in metrics:
            parts.append(f"lr {float(metrics['lr']):.3g}")
        if "grad_norm" in metrics:
            parts.append(f"grad_norm {float(metrics['grad_norm']):.3g}")
        if "tokens_per_s" in metrics:
            parts.append(f"{float(metrics['tokens_per_s']):,.0f} tok/s")
        left = self._time_left(step)
        if left is not None:
            eta, budget = left
            if budget is not None:   # the time budget stops the run first (and saves it for --resume)
                parts.append(f"time budget ends in {duration(budget)} (at this pace the run needs {duration(eta)} "
                             "more)")
            else:
                parts.append(f"ETA {duration(eta)}")
        return f"step {step}/{self.max_steps} train: " + ", ".join(parts)

    def _time_left(self, step: int) -> tuple[float, float | None] | None:
        """(seconds the run needs after `step` at this invocation's pace since its first step was done (`advance`),
        evaluations and checkpoints included: a resumed run's own steps, not the ones it resumed at; the seconds
        left of `--train.max_minutes` when it ends first, else None), or None before the first step and at the
        last."""
        done = step - self._start_step
        if not (0 < done and step < self.max_steps):
            return None
        now = time.monotonic()
        # the pace after this invocation's first step, once two steps followed it (one is a noisy sample: a
        # fine-tuning's second length bucket compiles too): a first step of 60 s (compiling) followed by steps of
        # 0.5 s said ETA 13x the time left at step 10, and still 12% more at step 1,000 (a mean over the run)
        since, began = (self._start_step, self._started) if self._first_done is None or \
            step < self._first_done[0] + 2 else self._first_done
        eta = (now - began) / (step - since) * (self.max_steps - step)
        return eta, max(0.0, self.deadline - now) if now + eta > self.deadline else None

    def finish(self, summary: dict, record: bool = True) -> None:
        """The run's end (`loop.Loop.summary`): its record in metrics.jsonl (`split` "summary", not in
        TensorBoard; `record` False when the step it ends at was not saved, see `Loop.run`), then the bar is
        closed and the summary's lines are printed below it."""
        if record:
            line = {"step": summary["step"], "split": "summary", "time": round(time.time(), 3)}
            line.update({k: v for k, v in summary.items() if k not in ("step", *UNRECORDED)})
            try:
                self.jsonl.write(json_line(line))
            except OSError as exc:
                self._write_failed = True
                raise UserError(f"{self.run_dir / 'metrics.jsonl'}: cannot write the run's summary "
                                f"({exc.strerror or exc}; is the disk full?); {_newest(self.run_dir)}") from None
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        for text in summary_lines(summary):
            self.note(text)

    def advance(self, step: int, loss: float, tokens_per_s: float) -> None:
        if self._first_done is None and step > self._start_step:
            self._first_done = (step, time.monotonic())
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            postfix = f"loss {loss:.4f}, {tokens_per_s:,.0f} tok/s"
            left = self._time_left(step) if math.isfinite(self.deadline) else None
            if left is not None and left[1] is not None:
                # the bar's own ETA is the whole run's: under --train.max_minutes that ends first, it said 1h56m
                # for the demo's 8-minute budget (as the log lines did, fixed before)
                postfix += f", time budget ends in {duration(left[1])}"
            self.bar.set_postfix_str(postfix, refresh=False)

    def note(self, message: str) -> None:
        """A line on stdout (above the bar). A console that went away costs only its lines (`console_gone`)."""
        try:
            if self.bar is not None:
                self.bar.write(message)
            else:
                print(message, flush=True)
        except OSError as exc:
            console_gone(sys.stdout, exc)

    def _events_failed(self, exc: Exception, what: str) -> None:
        """TensorBoard's writer failed (its thread's error comes back at the next write or at `close`). A full disk
        stops the run in one line (`_events_error`): metrics.jsonl and the next checkpoint are on that disk too.
        Any other failure (tensorboard/ removed or made read-only by hand, a stale network mount) costs only the
        events: one warning line, and the run goes on without TensorBoard, its numbers still in metrics.jsonl
        (which `albertlm plot` reads); a week's run was stopped for its events, with "is the disk full?"."""
        if disk_full(exc):
            raise self._events_error(exc, what) from None
        writer, self.writer = self.writer, None
        if writer is not None:
            with contextlib.suppress(Exception):     # its last flush fails the same way
                writer.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        self.warn(f"{self.run_dir / 'tensorboard'}: {what} ({reason}); the run goes on without TensorBoard "
                  "(metrics.jsonl keeps every record, which `albertlm plot` draws)")

    def warn(self, text: str) -> None:
        """A warning line on stderr (`errors.warning_line`), above the progress bar when there is one."""
        from albertlm.errors import say_warning, warning_line

        if self.bar is None:
            say_warning(text)
            return
        try:
            self.bar.write(warning_line(text), file=sys.stderr)
        except OSError as exc:
            console_gone(sys.stderr, exc)

    def _events_error(self, exc: OSError, what: str) -> UserError:
        """A TensorBoard write that failed (a full disk, a quota), in one line naming the events directory and
        what to resume from; the run stops, as on a failed metrics.jsonl record."""
        self._write_failed = True
        return UserError(f"{self.run_dir / 'tensorboard'}: {what} ({exc.strerror or exc}; is the disk full?); the "
                         f"run stopped, {_newest(self.run_dir)}: free some space and `--resume` (or resume with "
                         "--train.tensorboard=false)")

    def close(self, failed: bool = False) -> None:
        """Close the bar, the events and metrics.jsonl. A write failing here (the events' last flush on a full
        disk) is one line; with `failed` (the run is stopping on an error of its own, which is the one said), or
        once a write failed and was said, it is not said again."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        quiet, error = failed or self._write_failed, None
        if self.writer is not None:
            writer, self.writer = self.writer, None
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 (said below, or left unsaid after the run's own error)
                if not quiet and disk_full(exc):
                    error = self._events_error(exc, "cannot write the last TensorBoard events")
                elif not quiet:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or \
                        type(exc).__name__
                    self.warn(f"{self.run_dir / 'tensorboard'}: cannot write the last TensorBoard events ({reason}); "
                              "metrics.jsonl holds every record")
        self._close_jsonl(quiet or error is not None)
        if error is not None:
            raise error

    def _close_jsonl(self, quiet: bool) -> None:
        if not self.jsonl.closed:
            try:
                self.jsonl.close()
            except OSError:
                if not quiet:   # else the failed record, still buffered, fails again: said already
                    raise


def console_line(text: str, stream=None) -> None:
    """`text` on `stream` (stdout by default), flushed; a console that went away costs only its lines
    (`console_gone`): a run is not the console's to stop."""
    stream = sys.stdout if stream is None else stream
    try:
        print(text, file=stream, flush=True)
    except OSError as exc:
        console_gone(stream, exc)


def console_gone(stream, exc: OSError | None = None) -> None:
    """`stream` (stdout or stderr) could not be written (`exc`): the terminal of an ssh session that closed (EIO), or
    a pipe whose reader left (`albertlm pretrain ... | tee log` in that session: tee ends with it, EPIPE). Another
    error (a full disk under a redirected stdout, a full non-blocking pipe) costs only that line: the stream is kept,
    so the command's later lines, its final error among them, still go out. For a console gone, its descriptor is
    pointed at /dev/null, so the run's later lines, and the interpreter's flush at exit, go nowhere instead of
    failing: the run goes on (or, on the session's SIGHUP, saves and stops) with every record in metrics.jsonl.
    Before, the line printed after that SIGHUP's step (the unlogged steps' record) raised BrokenPipeError before the
    checkpoint was written, and the CLI took it for `| head` and exited 0: the steps since the last save were lost."""
    if exc is not None and exc.errno not in (errno.EIO, errno.EPIPE):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)
    except (OSError, ValueError, AttributeError):   # no descriptor (a test's capture): its later writes may fail too
        pass


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def json_line(record: dict) -> str:
    """One metrics.jsonl line: strict JSON, a NaN or infinite number written as null (Python's json wrote NaN and
    Infinity, which `jq`, JavaScript and other strict readers refuse; a fine-tuning's Pearson correlation of
    constant predictions is NaN, an fp16 run's skipped step has an infinite gradient norm)."""
    safe = {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in record.items()}
    return json.dumps(safe, allow_nan=False) + "\n"


def quiet_event_writer_threads() -> None:
    """TensorBoard writes its events from a thread of its own, which on a full disk died with a traceback on
    stderr ("Exception in thread Thread-1: ... OSError: [Errno 28]"); the main thread gets the same error at its
    next write or at `close` and says it in one line (`MetricsLogger._events_failed`). So the thread's error is
    not printed; every other thread's exception goes to the hook that was there before."""
    if getattr(threading.excepthook, "albertlm_quiet_events", False):
        return
    previous = threading.excepthook

    def hook(args) -> None:
        if (args.exc_type is not None and issubclass(args.exc_type, Exception)
                and type(args.thread).__module__.startswith("tensorboard.")):
            return
        previous(args)

    hook.albertlm_quiet_events = True
    threading.excepthook = hook


def _stdout_elsewhere() -> bool:
    """Whether stdout is a file or a pipe (a descriptor that is no terminal): `albertlm pretrain ... > train.log` or
    `| tee train.log`, where the bar draws on stderr's terminal and the log would not have it. Not for a stdout
    without a descriptor (a test's capture, an in-process caller's StringIO): nothing says where that goes."""
    try:
        return not os.isatty(sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        return False


def _terminal() -> bool:
    """Whether stderr (where tqdm draws) is a terminal (`errors.stderr_is_terminal`; here for tests to replace)."""
    from albertlm.errors import stderr_is_terminal

    return stderr_is_terminal()


# summary fields that are printed but not recorded: the evaluation has its own record; `saved` is always true
# in a recorded summary
UNRECORDED = ("eval", "eval_step", "saved")
STOPPED = {"done": "done", "interrupted": "stopped by a signal", "budget": "stopped by the time budget"}


def numbers(metrics: dict) -> str:
    """`exact 41.2000, num_middle 11`: scores to four places, a count (RACE's num_middle) as a whole number."""
    return ", ".join(f"{k} {v}" if isinstance(v, int) and not isinstance(v, bool) else f"{k} {v:.4f}"
                     for k, v in metrics.items())


def summary_lines(summary: dict) -> list[str]:
    """The run's summary in a few lines (the keys are `loop.Loop.summary`'s):

        summary: done at step 200 of 200
          trained     steps 101-200 in 5m12s: 819,200 examples, 26,214,400 tokens
          throughput  84,210 tokens/s while training (4m50s; evaluations and checkpoints left out)
          loss        3.4567 (training, step 200)
          evaluation  step 200: loss 3.5012, mlm_acc 0.4100
          checkpoint  runs/base/checkpoints/step_00000200
    """
    step, first = summary["step"], summary["first_step"]
    steps = f"step {step}" if first == step else f"steps {first}-{step}"
    complete = " (the run is complete)" if summary["status"] != "done" and step >= summary["total_steps"] else ""
    lines = [f"summary: {STOPPED.get(summary['status'], summary['status'])} at step {step} of "
             f"{summary['total_steps']}{complete}",
             f"  trained     {steps} in {duration(summary['wall_s'])}: {summary['examples_trained']:,.0f} examples, "
             f"{summary['tokens_trained']:,.0f} tokens",
             f"  throughput  {summary['tokens_per_s']:,.0f} tokens/s while training ({duration(summary['train_s'])}; "
             "evaluations and checkpoints left out)"]
    if summary.get("loss") is not None:
        lines.append(f"  loss        {summary['loss']:.4f} (training, step {summary['loss_step']})")
    if summary.get("eval"):
        lines.append(f"  evaluation  step {summary['eval_step']}: "
                     + numbers(summary["eval"]))
    checkpoint = summary.get("checkpoint")
    if checkpoint is None:
        lines.append("  checkpoint  none saved")
    else:
        unsaved = "" if summary.get("saved", True) else f" (the newest; step {step} is not saved)"
        lines.append(f"  checkpoint  {checkpoint}{unsaved}")
    return lines


def duration(seconds: float) -> str:
    """12s, 5m12s, 1h02m."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def drop_records_after(path: Path, step: int) -> None:
    """Rewrite metrics.jsonl (atomically) without the records of steps after `step`, and without a
    half-written last line; other lines are kept as they are. A last line without its newline (a write cut short
    by a full disk) is given one, else the next record was appended to it: two records on one line, which
    `read_metrics` (and `albertlm plot`) then refused as not a metrics record.

    The new file is written beside it (`metrics.jsonl.tmp`), fsync'ed, then renamed over it, and the directory
    fsync'ed: a power loss right after the rename left an empty or partial metrics.jsonl on a file system that
    does not order the data before the rename. A copy left by a run killed while writing it (kill -9, or a second
    Ctrl-C: it stayed beside the file for good) is removed first: it is never the file, which the rename had not
    replaced yet."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(OSError):     # (a read-only run directory: nothing is rewritten there either)
        tmp.unlink(missing_ok=True)
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    lines = text.splitlines()
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
    if len(kept) == len(lines) and (not kept or text.endswith("\n")):
        return
    try:
        tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8", errors="surrogateescape")
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:   # the old file is untouched; no half-written copy is left beside it
        with contextlib.suppress(OSError):      # a read-only file system refuses the removal too
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        raise UserError(f"{path}: cannot rewrite it without the records after step {step} "
                        f"({exc.strerror or exc}; is the disk full?)") from None
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """The rename into `directory` made durable (where the system lets a directory be opened and synced)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _newest(run_dir: Path) -> str:
    """What a resumed run would continue from, in words."""
    from albertlm.model.io import latest_checkpoint

    last = latest_checkpoint(run_dir)
    return f"the newest checkpoint is {last}" if last else "no checkpoint was saved yet"


def _reason(exc: Exception) -> str:
    return f"no field {exc}" if isinstance(exc, KeyError) else str(exc) or type(exc).__name__


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The JSONL records (a NaN or infinite number was written as null: None here); after a resume, a step logged
    twice keeps its latest record."""
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
