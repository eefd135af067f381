"""Audit 20 of pretraining on one CPU box: a full disk under TensorBoard's writer thread, `albertlm plot` on a
read-only run directory, the file modes of a checkpoint, --dry-run on data smaller than one global batch, and a
second Ctrl-C during a checkpoint's write. Each test failed before its fix."""
from __future__ import annotations

import errno
import os
import signal
import stat
import threading
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.data import loader
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import Datasets, make_loop
from albertlm.training.trainer import open_logger
from conftest import assert_one_error
from train_fixtures import TINY_PRETRAIN_ARGS, SyntheticPretraining, alice_sop_data, tiny_run


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_under_tensorboard_is_one_line_without_a_thread_traceback(tmp_path, monkeypatch):
    """TensorBoard writes its events from a thread: on a full disk that thread died printing a traceback
    ("Exception in thread Thread-1: ... OSError: [Errno 28]") and the run stopped on a bare
    "[Errno 28] No space left on device" that named neither the file nor what to resume from."""
    from tensorboard.summary.writer import record_writer

    seen = []
    monkeypatch.setattr(threading, "excepthook", seen.append)   # what would be printed for a dying thread
    ds = SyntheticPretraining(n=16)
    loop = make_loop(tiny_run(max_steps=3, batch_size=4, tensorboard=True), tmp_path,
                     Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta), DistInfo(), False)
    before = set(threading.enumerate())
    open_logger(loop)
    writers = [t for t in threading.enumerate() if t not in before and type(t).__module__.startswith("tensorboard.")]
    assert writers, "no TensorBoard writer thread"
    monkeypatch.setattr(record_writer.RecordWriter, "write", _no_space)   # the disk fills up from here on

    def writer_meets_the_full_disk(step, metrics):
        """Step 1's events are queued: the writer thread dies on them before step 2's are logged, however late a
        busy machine runs it (after the last step's checkpoint there would be one to resume from). Step 1's 11
        scalars overfill TensorBoard's 10-event queue, which forces that today; with fewer, timing would decide."""
        if step == 2:
            for thread in writers:
                thread.join(timeout=60)

    loop.on_step = writer_meets_the_full_disk
    with pytest.raises(UserError) as caught:
        loop.run()
    message = str(caught.value)
    assert str(tmp_path / "tensorboard") in message and "No space left on device" in message, message
    assert "--resume" in message and "no checkpoint was saved yet" in message, message
    assert [args.exc_type for args in seen] == []


def _two_records(run_dir: Path) -> None:
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 3.0, "lr": 0.1}\n'
                                           '{"step": 2, "split": "train", "loss": 2.5, "lr": 0.05}\n')


def test_plot_on_a_read_only_run_directory_names_the_image(tmp_path, monkeypatch):
    """On a read-only file system removing the temporary image fails too (EROFS, not "no such file"): the error
    named `.tmp-curves.png-PID` and not the image, and did not say that --out draws it elsewhere."""
    import matplotlib.figure

    from albertlm.training.plots import plot_run

    run_dir = tmp_path / "run"
    _two_records(run_dir)

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(UserError) as caught:
        plot_run(run_dir)
    message = str(caught.value)
    assert message.startswith(f"{run_dir / 'curves.png'}: cannot write (Read-only file system)"), message
    assert "--out" in message and ".tmp-" not in message, message


def test_every_file_of_a_checkpoint_gets_the_umask_mode(tmp_path, tiny_config):
    """safetensors writes through a temporary file of mode 0600: a checkpoint's model.safetensors was the one file
    of the run a group member could not read (config.json, trainer_state.pt: 0644 under umask 022)."""
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining(tiny_config)
    before = os.umask(0o022)
    try:
        path = ckpt.save_checkpoint(tmp_path, model, ckpt.TrainState(step=1), tiny_config, {"preset": "x"})
    finally:
        os.umask(before)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()}
    assert set(modes) >= {"model.safetensors", "config.json", "trainer_state.pt", "run_config.json"}
    assert set(modes.values()) == {0o644}, {name: oct(mode) for name, mode in modes.items()}
    assert ckpt.load_train_state(path).step == 1


def test_dry_run_refuses_data_smaller_than_one_global_batch(tmp_path, capsys):
    """--dry-run passed a --batch-size larger than the data, which the run then refused at once."""
    data = alice_sop_data(tmp_path, lines=40)
    args = list(TINY_PRETRAIN_ARGS)
    at = args.index("--batch-size")
    del args[at:at + 2]
    capsys.readouterr()
    code = main(["pretrain", *args, "--batch-size", "100000", "--data", str(data), "--out", str(tmp_path / "run"),
                 "--dry-run"])
    assert_one_error(capsys, code, "fewer than one global batch (100000)", "--batch-size")
    assert not (tmp_path / "run").exists()


def test_a_second_ctrl_c_during_the_save_stops_without_saving_again(tmp_path, monkeypatch):
    """A second Ctrl-C while the first one's checkpoint was being written started the whole save again (a big
    model on a slow disk: minutes more, for a signal that asks to stop at once), and left the abandoned
    `.tmp-step_*` directory behind."""
    ds = SyntheticPretraining(n=16)
    loop = make_loop(tiny_run(max_steps=6, batch_size=4), tmp_path,
                     Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta), DistInfo(), False)
    writes = []

    def second_ctrl_c(directory, state):   # the save is half-written when the second signal lands
        writes.append(state.step)
        if len(writes) == 1:
            raise KeyboardInterrupt

    def first_ctrl_c(step, metrics):
        if step == 2:   # (at Python's own handler or the default action it would stop the test run itself)
            assert signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, signal.SIG_DFL), \
                "the loop set no SIGINT handler"
            signal.raise_signal(signal.SIGINT)     # the loop's handler: stop after this step, saving it

    monkeypatch.setattr(ckpt, "_write_trainer_state", second_ctrl_c)
    loop.on_step = first_ctrl_c
    assert loop.run() == "interrupted"
    assert writes == [2], writes
    assert not (tmp_path / "checkpoints").exists() or list((tmp_path / "checkpoints").iterdir()) == []
