"""Audit 28, albertlm from Python: a full disk under the library's own writers.

safetensors raises its own SafetensorError (no OSError) for a failed write, and torch.save to a path a RuntimeError
("[enforce fail at inline_container.cc:672] . unexpected pos 832 vs 726"), so a library caller's `except OSError`
(free space and retry, save elsewhere) missed a full disk under `save_pretrained` / `model.io.save_checkpoint`, and
the training checkpoint's UserError said the library's words as its reason. Each test failed before the fix: the
writes are now OSErrors (errno set, the path named), the training checkpoint's error a UserError that is also one
(`model.io.WriteError`). The full disk is a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored so a write past it fails
with EFBIG), set in this process around the write alone (as test_robust_audit28's submission test does).
"""
from __future__ import annotations

import contextlib
import errno
import resource
import signal
import threading

import pytest
import torch

from albertlm.model import io
from albertlm.model.albert import AlbertForPreTraining
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.training import checkpoint as ckpt


@contextlib.contextmanager
def _disk_holding(size: int):
    """Files of at most `size` bytes can be written in the block (a full disk): a write past it fails with EFBIG."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)


def test_save_pretrained_on_a_full_disk_is_an_os_error_naming_the_file(tmp_path, tiny_config, one_thread):
    """Was SafetensorError('Error while serializing: I/O error: File too large (os error 27)'); the earlier model
    is kept whole (safetensors writes through a temporary file)."""
    torch.manual_seed(0)
    AlbertForSequenceClassification(tiny_config).save_pretrained(tmp_path)
    before = (tmp_path / io.WEIGHTS).read_bytes()
    other = AlbertForSequenceClassification(tiny_config)
    for save in (other.save_pretrained, lambda d: io.save_checkpoint(other, other.config, d)):
        with _disk_holding(4096), pytest.raises(OSError) as failed:
            save(tmp_path)
        assert failed.value.errno == errno.EFBIG and failed.value.strerror == "File too large", repr(failed.value)
        assert failed.value.filename == str(tmp_path / io.WEIGHTS)
        assert (tmp_path / io.WEIGHTS).read_bytes() == before
        assert sorted(p.name for p in tmp_path.iterdir()) == [io.CONFIG, io.WEIGHTS]


def test_a_training_checkpoint_on_a_full_disk_is_an_os_error_in_the_systems_words(tmp_path, tiny_config, one_thread):
    """The weights fit and trainer_state.pt does not: the reason was torch's "[enforce fail at inline_container.cc
    ...] unexpected pos", and the weights failing said safetensors' "Error while serializing: I/O error"; neither
    error was an OSError. Still a UserError (the CLI's one line) naming the checkpoint, nothing half-written left."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config)
    weights = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    state = ckpt.TrainState(step=3, extra={"moments": torch.zeros(weights)})   # 4x the weights' bytes
    for limit in (weights + 4096, 4096):           # trainer_state.pt too big, then model.safetensors
        with _disk_holding(limit), pytest.raises(OSError) as failed:
            ckpt.save_checkpoint(tmp_path, model, state, model.config, {"seed": 0})
        error = failed.value
        assert isinstance(error, ckpt.UserError) and isinstance(error, io.WriteError)
        assert error.errno == errno.EFBIG and error.filename == str(ckpt.step_dir(tmp_path, 3))
        assert str(error) == (f"{ckpt.step_dir(tmp_path, 3)}: cannot write the checkpoint (File too large; is the "
                              "disk full?); no checkpoint was saved before")
        assert list((tmp_path / "checkpoints").iterdir()) == []


def test_rewriting_a_training_state_on_a_full_disk_is_an_os_error_and_keeps_it(tmp_path, tiny_config, one_thread):
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config)
    saved = ckpt.save_checkpoint(tmp_path, model, ckpt.TrainState(step=2), model.config)
    before = (saved / "trainer_state.pt").read_bytes()
    bigger = ckpt.TrainState(step=2, extra={"moments": torch.zeros(100_000)})
    with _disk_holding(len(before) + 4096), pytest.raises(OSError) as failed:
        ckpt.rewrite_train_state(saved, bigger)
    assert isinstance(failed.value, ckpt.UserError) and failed.value.errno == errno.EFBIG
    assert "(File too large; is the disk full?); it is kept as it was" in str(failed.value)
    assert (saved / "trainer_state.pt").read_bytes() == before
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "model.safetensors", "trainer_state.pt"]


def test_the_writers_still_write_and_raise_other_errors_as_before(tmp_path, one_thread):
    """trainer_state.pt written through a file object reads back (`load_train_state`); an error that is no write
    error (a tensor safetensors cannot take) is raised as safetensors raises it."""
    state = ckpt.TrainState(step=5, extra={"tokens": 7.0, "t": torch.arange(4)})
    ckpt._write_trainer_state(tmp_path, state)
    read = ckpt.load_train_state(tmp_path)
    assert read.step == 5 and read.extra["tokens"] == 7.0 and torch.equal(read.extra["t"], torch.arange(4))
    shared = torch.zeros(4)
    with pytest.raises(RuntimeError, match="Some tensors share memory"):   # safetensors' own words, as before
        io.write_safetensors({"a": shared, "b": shared}, tmp_path / "x.safetensors")
