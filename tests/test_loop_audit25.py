"""Audit 25 of the pretraining loop as a user of long jobs: the paths a run says and records (relative to the launch
directory), a resume on another layout (4 GPUs -> 2 with twice the accumulation: allowed without a word), a long
first step of many micro-batches (nothing shown for minutes), a data shard rewritten in place under the run (silent
other data, or SIGBUS once cut shorter), and TensorBoard's writer failing for another reason than a full disk (the
run stopped, saying "is the disk full?"). Each test failed before its fix."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from albertlm.data import loader
from albertlm.errors import UserError
from albertlm.training import loop as loop_module
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import Datasets, make_loop
from albertlm.training.trainer import open_logger
from test_train import datasets, train
from train_fixtures import SyntheticPretraining, alice_sop_data, tiny_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _logged_run(run, run_dir: Path, resume: bool = False, data=None, on_step=None) -> str:
    loop = make_loop(run, run_dir, data or datasets(), DistInfo(), resume)
    open_logger(loop)
    loop.on_step = on_step
    return loop.run()


def _records(run_dir: Path, split: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


# ---------------------------------------------------------------------- 1. the paths a run says and records
def test_a_run_started_with_a_relative_out_says_and_records_absolute_paths(tmp_path, monkeypatch, capsys):
    """`--out run` made `saved run/checkpoints/...` and a summary (printed, and recorded in metrics.jsonl) naming
    `run/checkpoints/step_...`: wrong from any other directory, and in a log read later."""
    monkeypatch.chdir(tmp_path)
    assert _logged_run(tiny_run(max_steps=2, save_every=1), Path("run")) == "done"
    out = capsys.readouterr().out
    expected = tmp_path / "run" / "checkpoints" / "step_00000002"
    assert f"saved {expected}\n" in out and f"checkpoint  {expected}\n" in out, out
    assert _records(tmp_path / "run", "summary")[-1]["checkpoint"] == str(expected)


# ----------------------------------------------------------------------- 2. a resume on another layout
def test_a_resume_with_another_accumulation_is_said_and_follows_the_run(tmp_path, capsys):
    """The global batch and the data order do not depend on the layout, so a run saved with one micro-batch per
    step and resumed with four (4 GPUs -> 2 with twice the accumulation, in small) goes on with the same steps; it
    was allowed without a word, though its numbers then follow the uninterrupted run only to rounding."""
    _, whole, _ = train(tiny_run(max_steps=4), tmp_path / "whole")
    train(tiny_run(max_steps=2, save_every=2), tmp_path / "run")
    capsys.readouterr()
    status, resumed, _ = train(tiny_run(max_steps=4, micro=2), tmp_path / "run", resume=True)
    assert status == "done"
    notes = [line for line in capsys.readouterr().out.splitlines() if "another layout" in line]
    assert len(notes) == 1, notes
    assert ("1 process x 1 micro-batch per step when step 2 was saved, 1 process x 4 micro-batches per step now"
            in notes[0]) and "same global batch of 8 examples" in notes[0], notes[0]
    for step in (3, 4):   # tolerance: the same sums added in another order (float32)
        assert resumed[step]["loss"] == pytest.approx(whole[step]["loss"], rel=1e-4, abs=1e-5)
    # the same layout again: nothing said
    train(tiny_run(max_steps=5, micro=2, save_every=1), tmp_path / "run", resume=True)
    assert "another layout" not in capsys.readouterr().out


# ---------------------------------------------------------------------- 3. a long first step is said
def test_a_long_first_step_of_many_micro_batches_is_said_once(tmp_path, monkeypatch, capsys):
    """A paper-sized step of many micro-batches took minutes with nothing on the screen (the bar and the log lines
    move once a step is done). Past `FIRST_STEP_NOTE_S` (0 here: no clock in the test) the first step of each
    invocation says how far it got, once; a step of one micro-batch has nothing to report between them."""
    monkeypatch.setattr(loop_module, "FIRST_STEP_NOTE_S", 0.0)
    _logged_run(tiny_run(max_steps=2, micro=2, save_every=2), tmp_path / "run")
    lines = [line for line in capsys.readouterr().out.splitlines() if "micro-batches done" in line]
    assert len(lines) == 1 and lines[0].startswith("step 1: 1 of 4 micro-batches done in "), lines
    assert "accumulates 4 micro-batches of 2 examples per step" in lines[0], lines[0]
    _logged_run(tiny_run(max_steps=3, micro=2), tmp_path / "run", resume=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if "micro-batches done" in line]
    assert len(lines) == 1 and lines[0].startswith("step 3: 1 of 4 micro-batches done"), lines
    _logged_run(tiny_run(max_steps=2), tmp_path / "one")
    assert "micro-batches done" not in capsys.readouterr().out


# ---------------------------------------------------------------- 4. a shard rewritten under the run
@pytest.fixture(scope="module")
def alice(tmp_path_factory) -> Path:
    return alice_sop_data(tmp_path_factory.mktemp("loop25"), lines=120)


def _copy(data: Path, to: Path) -> Path:
    to.mkdir()
    for path in data.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


def _first_shard(data: Path) -> Path:
    return data / json.loads((data / "meta.json").read_text())["shards"][0]["file"]


def test_a_shard_rewritten_in_place_while_training_stops_the_run_in_one_line(alice, tmp_path):
    """A shard written over in place (the same size: `cp` of another build, `rsync --inplace`) while the run read it
    through its memory map was trained on without a word: other examples under the run's position and meta."""
    data = _copy(alice, tmp_path / "data")
    ds = loader.PretrainingDataset(data)
    shard = _first_shard(data)

    def rewrite(step, metrics):
        if step == 1:
            with open(shard, "r+b") as f:
                reversed_bytes = bytes(reversed(f.read()))
                f.seek(0)
                f.write(reversed_bytes)

    run = tiny_run(max_steps=4, batch_size=4)
    run = run.replace(model=run.model.replace(vocab_size=30000))
    with pytest.raises(UserError) as caught:
        _logged_run(run, tmp_path / "run", data=Datasets(ds, None, loader.collate, ds.meta), on_step=rewrite)
    message = str(caught.value)
    assert "\n" not in message and f"shard {shard} changed while this run reads it" in message, message
    assert "modification time" in message and "--resume" in message, message


def test_a_shard_cut_shorter_under_the_run_is_one_error_not_sigbus(alice, tmp_path):
    """A shard cut shorter under its memory map (a copy over it begins by truncating it) ended the process with
    SIGBUS, without a word, at the first read past its new end."""
    data = _copy(alice, tmp_path / "data")
    script = (
        "import sys\n"
        "from albertlm.data.loader import PretrainingDataset\n"
        "from albertlm.errors import UserError\n"
        "ds = PretrainingDataset(sys.argv[1])\n"
        "ds[len(ds) - 1]\n"
        "open(sys.argv[2], 'r+b').truncate(0)\n"
        "try:\n"
        "    ds[len(ds) - 1]\n"
        "except UserError as exc:\n"
        "    print(exc)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(loader.__file__).parents[2]),
                                                                        os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", script, str(data), str(_first_shard(data))], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "changed while this run reads it: its size went from" in proc.stdout and "to 0 bytes" in proc.stdout, \
        proc.stdout


# ---------------------------------------------------------- 5. TensorBoard failing for another reason
def test_tensorboard_failing_without_a_full_disk_warns_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    """tensorboard/ removed (or made read-only) under a long run: its writer thread failed and the run stopped at the
    next record, "is the disk full? ... free some space", for numbers that metrics.jsonl holds anyway. Now one
    warning line, and the run trains to its end with every record in metrics.jsonl."""
    import errno

    from tensorboard.summary.writer import record_writer

    seen = []
    monkeypatch.setattr(threading, "excepthook", seen.append)   # what would be printed for a dying thread
    ds = SyntheticPretraining(n=16)
    loop = make_loop(tiny_run(max_steps=3, batch_size=4, tensorboard=True), tmp_path / "run",
                     Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta), DistInfo(), False)
    before = set(threading.enumerate())
    open_logger(loop)
    writers = [t for t in threading.enumerate() if t not in before and type(t).__module__.startswith("tensorboard.")]
    assert writers, "no TensorBoard writer thread"

    def removed(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(record_writer.RecordWriter, "write", removed)

    def writer_meets_the_removed_folder(step, metrics):
        """As test_train_audit20's full disk: step 1's 11 scalars overfill the writer's queue, so its thread dies on
        them before step 2's are logged."""
        if step == 2:
            for thread in writers:
                thread.join(timeout=60)

    loop.on_step = writer_meets_the_removed_folder
    assert loop.run() == "done"
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "warning:" in err[0] and "No such file or directory" in err[0], err
    assert "goes on without TensorBoard" in err[0] and "disk full" not in err[0], err[0]
    assert [r["step"] for r in _records(tmp_path / "run", "train")] == [1, 2, 3]
    assert [args.exc_type for args in seen] == []


class _Refusing:
    """A dataset whose every read is refused (a damaged or changed shard, as the loader says it)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index):
        raise UserError("shard x.bin changed while this run reads it")


def test_a_data_error_in_a_dataloader_worker_is_its_one_line():
    """With --data.num_workers, torch raised the loader's UserError again with "Caught UserError in DataLoader
    worker process 0." and the worker's whole traceback as its message: the CLI's error line held the traceback."""
    data = loop_module.StepData(_Refusing(), loader.collate, loop_module.shuffled_batches(8, 4, 0), 1,
                                num_workers=1, identity={"batch_size": 4})
    with pytest.raises(UserError) as caught:
        next(data.steps(0))
    assert str(caught.value) == "shard x.bin changed while this run reads it"
