"""Audit 33 of the training loop's small known defects: what a `--resume` may change and says, metrics.jsonl's rewrite
on a resume (a kill in the middle, a power loss, a last line without its newline), `has_record` read from the end,
the fp16 overflow count without GradScaler's private read, and a full disk under metrics.jsonl seen from the CLI.
Each test failed before its fix unless its docstring says it pins what was already right."""
from __future__ import annotations

import errno
import json
import os
import random
import tracemalloc
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from albertlm.training import loop as loop_module
from albertlm.training import metrics as metrics_module
from albertlm.training.loop import TrainingDiverged, has_record
from albertlm.training.metrics import MetricsLogger, drop_records_after, read_metrics
from conftest import assert_one_error
from test_cuda_audit32 import _fp16_loop, fp16_on_cpu  # noqa: F401 (a fixture)
from test_train_audit16 import _loop, _records
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data


# the `TrainState.extra` keys of what each part of a run ran on and of the schedule it was saved under (the names, not
# imported, so that each test fails on its own where they are missing)
RAN_WITH = getattr(loop_module, "RAN_WITH", "ran_with")
PLANNED = getattr(loop_module, "PLANNED", "planned")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _fake_history(step_dir: Path, **ran_with) -> None:
    """The checkpoint `step_dir` as if its part of the run had run on `ran_with` (a GPU, another compile mode)."""
    state = ckpt.load_train_state(step_dir)
    state.extra[RAN_WITH] = [{"from_step": 0, "device": "cpu", "compile": "none", **ran_with}]
    ckpt.rewrite_train_state(step_dir, state)


# ------------------------------------------------------------------- 1. what a --resume changes, said and recorded
def test_a_resume_on_another_device_and_compile_mode_is_said_in_one_line_and_recorded(tmp_path, capsys):
    """`--resume` with another `--dist.device` or `--train.compile` (both in `RESUME_MAY_CHANGE`) was taken without a
    word, though the numbers then follow the uninterrupted run only to rounding; and with `dist.device auto` the
    run's config said "auto" for a GPU part and a CPU part alike. Now one line says it, and every checkpoint records
    what each part of the run ran on (`loop.RAN_WITH`)."""
    settings = dict(max_steps=4, save_every=2)
    assert _loop(tmp_path, **{**settings, "max_steps": 2}).run() == "done"
    _fake_history(ckpt.step_dir(tmp_path, 2), device="cuda (NVIDIA H100 80GB HBM3)", compile="default")
    capsys.readouterr()
    assert _loop(tmp_path, resume=True, **settings).run() == "done"
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: resuming with another")]
    assert len(notes) == 1, out
    assert ("device cpu (step 2 was saved under cuda (NVIDIA H100 80GB HBM3)), train.compile none (step 2 was saved "
            "under default)") in notes[0]
    assert "to rounding, not bit for bit" in notes[0]
    history = ckpt.load_train_state(ckpt.step_dir(tmp_path, 4)).extra[RAN_WITH]
    assert history == [{"from_step": 0, "device": "cuda (NVIDIA H100 80GB HBM3)", "compile": "default"},
                       {"from_step": 2, "device": "cpu", "compile": "none"}]


def test_a_resume_on_the_same_settings_says_nothing_and_records_one_part(tmp_path, capsys):
    settings = dict(max_steps=4, save_every=2)
    loop = _loop(tmp_path, **settings)

    def ctrl_c(step, metrics):
        if step == 2:
            raise KeyboardInterrupt
    loop.on_step = ctrl_c
    assert loop.run() == "interrupted"
    capsys.readouterr()
    assert _loop(tmp_path, resume=True, **settings).run() == "done"
    assert "note: resuming" not in capsys.readouterr().out
    extra = ckpt.load_train_state(ckpt.step_dir(tmp_path, 4)).extra
    assert extra[RAN_WITH] == [{"from_step": 0, "device": "cpu", "compile": "none"}]
    assert extra[PLANNED] == {"total_steps": 4, "warmup_steps": 2}


def test_a_resume_with_more_steps_says_the_schedule_it_follows_from_there(tmp_path, capsys):
    """`--resume --max-steps N` stretches the decay from the step resumed at (docs/training.md, "Learning rate"): the
    rate jumps, which nothing said. Now one line gives the new rate and the old one."""
    assert _loop(tmp_path, max_steps=4, save_every=2).run() == "done"
    capsys.readouterr()
    resumed = _loop(tmp_path, resume=True, max_steps=8, save_every=2)
    assert resumed.run() == "done"
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: resuming with 8 steps")]
    assert notes == [f"note: resuming with 8 steps in all, where step 4 was saved in a run of 4: the learning rate "
                     f"follows the new schedule from here, {resumed.plan.lr_at(4):.6g} at step 5 where the old one "
                     "had 0 (it ended at step 4)"]
    assert ckpt.load_train_state(ckpt.step_dir(tmp_path, 8)).extra[PLANNED] == {"total_steps": 8, "warmup_steps": 2}


def test_the_cli_resume_on_another_device_says_it_and_the_run_records_what_the_resumed_part_ran_with(tmp_path, capsys):
    """The whole command: a run of 2 steps whose checkpoint says it ran on a GPU, resumed with `--dist.device cpu`
    and `--max-steps 4`. run_config.json then holds the resumed part's settings (the step-2 checkpoint keeps the
    first part's), trainer_state.pt the device each part ran on, and the device change is one line."""
    data = alice_sop_data(tmp_path, 60)
    out = tmp_path / "run"
    base = ["pretrain", "--data", str(data), "--out", str(out), *TINY_PRETRAIN_ARGS, "--no-progress",
            "--train.tensorboard=false", "--warmup-steps", "1", "--save-every", "2"]
    assert main(base + ["--max-steps", "2"]) == 0
    _fake_history(ckpt.step_dir(out, 2), device="cuda (NVIDIA H100 80GB HBM3)")
    capsys.readouterr()
    assert main(base + ["--max-steps", "4", "--resume", "--dist.device", "cpu"]) == 0
    said = capsys.readouterr().out
    assert "note: resuming with another device cpu (step 2 was saved under cuda (NVIDIA H100 80GB HBM3))" in said
    assert "note: resuming with 4 steps in all, where step 2 was saved in a run of 2" in said
    assert json.loads((out / "run_config.json").read_text())["dist"]["device"] == "cpu"
    assert json.loads((ckpt.step_dir(out, 2) / "run_config.json").read_text())["dist"]["device"] == "auto"
    assert json.loads((ckpt.step_dir(out, 4) / "run_config.json").read_text())["train"]["max_steps"] == 4
    assert ckpt.load_train_state(ckpt.step_dir(out, 4)).extra[RAN_WITH][-1] == {"from_step": 2, "device": "cpu",
                                                                               "compile": "none"}


# ------------------------------------------------------------------- 2. metrics.jsonl's rewrite on a resume
def _jsonl(path: Path, steps) -> str:
    text = "".join(json.dumps({"step": s, "split": "train", "loss": 1.0}) + "\n" for s in steps)
    path.write_text(text)
    return text


def test_a_copy_left_by_a_run_killed_while_rewriting_metrics_is_removed_at_the_next_start(tmp_path):
    """A kill -9 during `drop_records_after` left metrics.jsonl.tmp beside the file for good (it is removed only by a
    later rewrite, which a resume with nothing to drop never does)."""
    text = _jsonl(tmp_path / "metrics.jsonl", [1, 2])
    (tmp_path / "metrics.jsonl.tmp").write_text('{"step": 1, "split": "tr')     # the killed rewrite's half
    MetricsLogger(tmp_path, 4, start_step=2, tensorboard=False, progress=False).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
    assert (tmp_path / "metrics.jsonl").read_text() == text


def test_a_ctrl_c_while_rewriting_metrics_keeps_the_file_and_leaves_no_copy(tmp_path, monkeypatch):
    text = _jsonl(tmp_path / "metrics.jsonl", [1, 2, 3])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        drop_records_after(tmp_path / "metrics.jsonl", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
    assert (tmp_path / "metrics.jsonl").read_text() == text


def test_the_rewritten_metrics_are_on_the_disk_before_they_replace_the_file(tmp_path, monkeypatch):
    """os.replace without an fsync of the new file first: after a power loss the rename may be on the disk and the
    data not, an empty metrics.jsonl (a run's whole record gone)."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("names an fsync'ed descriptor's file through /proc")
    path = tmp_path / "metrics.jsonl"
    _jsonl(path, [1, 2, 3])
    calls, real_fsync, real_replace = [], os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", str(src)))
        return real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    drop_records_after(path, 2)
    tmp = str(path) + ".tmp"
    assert ("fsync", tmp) in calls and calls.index(("fsync", tmp)) < calls.index(("replace", tmp)), calls
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_the_run_config_is_on_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """`checkpoint.write_text_atomic` (run_config.json at every start) renamed an unsynced file into place: after a
    power loss, an empty run_config.json that `--resume` refused."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("names an fsync'ed descriptor's file through /proc")
    path = tmp_path / "run_config.json"
    calls, real_fsync, real_replace = [], os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    monkeypatch.setattr(os, "replace", lambda src, dst: calls.append(("replace", str(src))) or real_replace(src, dst))
    ckpt.write_text_atomic(path, "{}\n")
    tmp = str(path.with_name(f"{ckpt.TMP_PREFIX}{path.name}-{os.getpid()}"))
    assert ("fsync", tmp) in calls and calls.index(("fsync", tmp)) < calls.index(("replace", tmp)), calls
    assert path.read_text() == "{}\n"


def test_a_last_record_without_its_newline_is_not_joined_to_the_next_one(tmp_path):
    """A write cut short just before its newline (a full disk) left a complete last record without one; the resume
    kept the file as it was and appended the next record to that line, which `read_metrics` (and `albertlm plot`)
    then refused: "metrics.jsonl:2: not a metrics record"."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(_jsonl(path, [1, 2]).rstrip("\n"))
    logger = MetricsLogger(tmp_path, 4, start_step=2, tensorboard=False, progress=False)
    logger.log(3, "train", {"loss": 0.5})
    logger.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]


# ------------------------------------------------------------------- 3. has_record, from the end
def _old_has_record(path: Path, step: int, split: str) -> bool:
    """`loop.has_record` as it was (the whole file read, line by line from the end)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("step") == step and record.get("split") == split:
            return True
    return False


def _run_records(path: Path, last: int, seed: int, tail: str = "") -> None:
    """A metrics.jsonl as runs write it, in the order of the steps (train every 3 steps, eval every 10, a compile
    record, summaries, a resumed run's lines), with what a reader must step over: blank lines, a line that is no
    JSON, JSON that is no record, CRLF line ends, a line of invalid UTF-8, and `tail` as a half-written last line."""
    rng = random.Random(seed)
    lines = []
    for step in range(1, last + 1):
        if step % 3 == 0 or step == last:
            lines.append(json.dumps({"step": step, "split": "train", "loss": rng.random(), "lr": 0.001}))
        if step % 10 == 0:
            lines.append(json.dumps({"step": step, "split": "eval", "loss": rng.random()}))
        if step == 2:
            lines.append(json.dumps({"step": 2, "split": "compile", "compile_s": 1.0}))
        if step % 250 == 0:
            lines.append(json.dumps({"step": step, "split": "summary", "status": "interrupted"}))
        junk = rng.random()
        if junk < 0.01:
            lines.append("")
        elif junk < 0.02:
            lines.append("not json at all")
        elif junk < 0.025:
            lines.append("[1, 2, 3]")
        elif junk < 0.03:
            lines.append(json.dumps({"step": step, "split": "train"}) + "\r")     # a CRLF line
    data = "\n".join(lines).encode() + b"\n\xff\xfe not utf-8\n" + json.dumps(
        {"step": last, "split": "eval", "loss": 1.0}).encode() + b"\n" + tail.encode()
    path.write_bytes(data)


@pytest.mark.parametrize("tail", ["", '{"step": 9001, "split": "tra'], ids=["complete", "partial last line"])
def test_has_record_read_from_the_end_answers_as_the_whole_file_did(tmp_path, tail):
    path = tmp_path / "metrics.jsonl"
    last = 9000
    _run_records(path, last, seed=len(tail), tail=tail)
    assert path.stat().st_size > 3 * (1 << 16)           # several of `_lines_from_end`'s blocks
    queries = [(step, split) for step in (*range(last - 6, last + 2), 1, 2, 250, 4500)
               for split in ("train", "eval", "compile", "summary")]
    for step, split in queries:
        assert has_record(path, step, split) == _old_has_record(path, step, split), (step, split)
    assert has_record(path, last, "eval") and has_record(path, last, "train") and has_record(path, 2, "compile")
    assert not has_record(path, last + 1, "train") and not has_record(tmp_path / "missing.jsonl", 1, "train")


def test_has_record_of_the_step_resumed_at_reads_only_the_end_of_a_long_file(tmp_path):
    """At a --resume it read the whole file into memory as lines (a run logged at every step for a million steps:
    hundreds of MB); now it stops at the first record of an earlier step."""
    path = tmp_path / "metrics.jsonl"
    line = json.dumps({"step": 0, "split": "train", "loss": 1.0, "lr": 0.001, "tokens_per_s": 12345.0})
    with open(path, "w") as f:
        for step in range(1, 40001):
            f.write(line.replace('"step": 0', f'"step": {step}') + "\n")
    assert path.stat().st_size > 3_000_000
    tracemalloc.start()
    try:
        found = has_record(path, 40000, "eval"), has_record(path, 40000, "train")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == (False, True)
    assert peak < 1_000_000, peak


# ------------------------------------------------------------------- 4. fp16 overflows without the private read
class _PublicScaler:
    """A GradScaler as the loop sees it under a torch without `_get_scale_async` (a private method): every other
    attribute is the real scaler's, whose own code still has it."""

    def __init__(self, scaler):
        object.__setattr__(self, "_scaler", scaler)

    def __getattr__(self, name):
        if name == "_get_scale_async":
            raise AttributeError(name)
        return getattr(self._scaler, name)


@pytest.mark.parametrize("read", ["private", "public"])
def test_fp16_overflows_are_counted_with_and_without_the_scalers_private_read(tmp_path, fp16_on_cpu, read):
    """Without `_get_scale_async`, the loss scale after each step was not read, so steps skipped for overflows were
    not counted and a run whose every step overflowed trained nothing for as long as it ran. Now the public
    `get_scale()` is read after the step's one transfer, with the same counts."""
    count = loop_module.MAX_OVERFLOWS
    loop, seen = _fp16_loop(tmp_path, set(range(1, 100)), max_steps=count + 4, save_every=0)
    if read == "public":
        loop.scaler = _PublicScaler(loop.scaler)
        assert loop._scale_tensor() is None
    with pytest.raises(TrainingDiverged, match=rf"skipped {count} steps in a row \(steps 1 to {count}\)"):
        loop.run()
    assert loop.state.step == count - 1

    # overflows at steps 2 and 3 only: the same scales and losses by either read, and the run goes on
    runs = {}
    for name in ("private", "public"):
        loop, seen = _fp16_loop(tmp_path / name, {2, 3}, save_every=0)
        if name == "public":
            loop.scaler = _PublicScaler(loop.scaler)
        assert loop.run() == "done"
        runs[name] = seen
    assert runs["private"] == runs["public"]
    assert [runs["public"][s][1] for s in range(1, 7)] == [4.0, 2.0, 1.0, 1.0, 2.0, 2.0]


# ------------------------------------------------------------------- 5. a full disk under metrics.jsonl, from the CLI
def test_a_full_disk_under_metrics_stops_the_command_in_one_line_and_the_resume_goes_on(tmp_path, capsys,
                                                                                         monkeypatch):
    """Pins what was already right (decided: a metrics.jsonl that cannot be written stops the run; its next
    checkpoint is on the same disk): ENOSPC on step 3's record is one line naming metrics.jsonl and the step-2
    checkpoint, exit 2, no traceback; that checkpoint is kept, and `--resume` once there is space again ends with
    every step's record once."""
    data = alice_sop_data(tmp_path, 60)
    out = tmp_path / "run"
    base = ["pretrain", "--data", str(data), "--out", str(out), *TINY_PRETRAIN_ARGS, "--no-progress",
            "--train.tensorboard=false", "--max-steps", "4", "--save-every", "2", "--log-every", "1"]
    capsys.readouterr()
    real_open = open

    class _Filling:
        def __init__(self, f):
            self._f = f

        def write(self, text):
            if json.loads(text)["step"] >= 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self._f.write(text)

        def __getattr__(self, name):
            return getattr(self._f, name)

    def filling_open(path, *args, **kwargs):
        f = real_open(path, *args, **kwargs)
        return _Filling(f) if str(path).endswith("metrics.jsonl") and "a" in (args[:1] or ("",))[0] else f

    with monkeypatch.context() as patched:
        patched.setattr(metrics_module, "open", filling_open, raising=False)
        code = main(base)
    assert_one_error(capsys, code, str(out / "metrics.jsonl"), "step 3", "No space left on device",
                     str(ckpt.step_dir(out, 2)), "--resume")
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["step_00000002"]
    assert main(base + ["--resume"]) == 0
    train = [r["step"] for r in _records(out) if r["split"] == "train"]
    assert train == [1, 2, 3, 4]
