"""io audit 26, as a user moving checkpoints between head classes and into folders that hold a model: a fine-tuned head
the loading class has no place for (a SQuAD checkpoint fine-tuned on GLUE) was dropped with an info-level note only,
where transformers warns, and a head of another shape was a warning line per tensor; a Ctrl-C or SIGTERM while
`convert` / `export` moved their files into DST one by one left a mix of the earlier model's files and the new one's
(or, with --overwrite, the earlier files deleted and half of the new ones in)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining


def _tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32, num_labels=3), **changes})


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ------------------------------------------------------------------ heads dropped or reshaped across head classes
def test_a_fine_tuned_head_the_class_has_no_place_for_is_one_warning(tmp_path, caplog):
    """A SQuAD checkpoint loaded as a sequence classifier, a GLUE one as google's SQuAD v2.0 head: the trained head
    is thrown away, which was logged at info level only (transformers warns)."""
    torch.manual_seed(0)
    heads.AlbertForQuestionAnswering(_tiny()).save_pretrained(tmp_path / "squad")
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "mnli")
    for source, cls, head in (("squad", heads.AlbertForSequenceClassification, "qa_outputs"),
                              ("mnli", heads.AlbertForSquadV2, "classifier"),
                              ("mnli", AlbertForPreTraining, "classifier")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="albertlm.model"):
            cls.from_pretrained(tmp_path / source)
        dropped = [m for m in _warnings(caplog) if "is not used" in m]
        assert len(dropped) == 1, caplog.text
        assert dropped[0].startswith(f"{tmp_path / source}: the checkpoint's fine-tuned head ({head}) is not used: "
                                     f"{cls.__name__} has none"), dropped


def test_a_pretraining_checkpoints_heads_and_a_pooler_are_dropped_quietly(tmp_path, caplog):
    """A pure check (it passed before): fine-tuning from a pretraining checkpoint drops its MLM / SOP heads (and, for
    a class without a pooler, the pooler) as expected: no warning says so; the new head's note stays."""
    torch.manual_seed(0)
    AlbertForPreTraining(_tiny()).save_pretrained(tmp_path / "pre")
    for cls in (heads.AlbertForSequenceClassification, heads.AlbertForSquadV2, heads.AlbertForQuestionAnswering,
                heads.AlbertForMaskedLM):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="albertlm.model"):
            cls.from_pretrained(tmp_path / "pre")
        warned = _warnings(caplog)
        assert not [m for m in warned if "mlm_head" in m or "sop_head" in m or "pooler" in m], warned
        assert len(warned) == (cls is not heads.AlbertForMaskedLM), warned   # "freshly initialised" for a new head


def test_a_head_of_another_shape_is_one_warning_line(tmp_path, caplog):
    """An MNLI classifier (3 labels) loaded with num_labels=2: its weight and bias were a warning line each."""
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "mnli")
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        heads.AlbertForSequenceClassification.from_pretrained(tmp_path / "mnli", num_labels=2)
    warned = _warnings(caplog)
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"{tmp_path / 'mnli'}: head weights of another shape"), warned
    assert "classifier.weight has another shape, (3, 16) vs (2, 16); classifier.bias has another shape" in warned[0]


def test_the_cli_shows_the_dropped_head_as_its_warning_line(tmp_path, capsys, monkeypatch):
    """On the console, the loader's warning is `albertlm <command>: warning: ...`: fine-tuning from a SQuAD
    checkpoint on a classification task."""
    from conftest import TINY_WORDS, save_tiny_pretrained

    (tmp_path / "pre").mkdir()
    save_tiny_pretrained(tmp_path / "pre")
    heads.AlbertForQuestionAnswering.from_pretrained(tmp_path / "pre").save_pretrained(tmp_path / "squad")
    (tmp_path / "squad" / "vocab.txt").write_bytes((tmp_path / "pre" / "vocab.txt").read_bytes())
    rows = ["sentence,label"] + [f"{TINY_WORDS[i % 7]} {TINY_WORDS[(3 * i) % 11]},{i % 2}" for i in range(8)]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", [   # the console command: its handler of albertlm's loggers
        "albertlm", "finetune", "classify", "--train", str(tmp_path / "train.csv"),
        "--dev", str(tmp_path / "train.csv"),
        "--text-column", "sentence", "--label-column", "label", "--model", str(tmp_path / "squad"),
        "--out", str(tmp_path / "run"), "--max-steps", "1", "--batch-size", "8", "--max-seq-length", "16",
        "--no-progress", "--train.tensorboard", "false"])
    code = main()
    err = capsys.readouterr().err
    assert code == 0, err
    assert (f"albertlm finetune: warning: {tmp_path / 'squad'}: the checkpoint's fine-tuned head (qa_outputs) is not "
            "used: AlbertForSequenceClassification has none") in err, err


# ------------------------------------------------------------------ the final move into DST, interrupted
def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _interrupt_on(monkeypatch, inside: Path, nth: int, names=("replace", "rename")) -> None:
    """os.replace / os.rename raise KeyboardInterrupt (a Ctrl-C arriving then) at the `nth` call that moves a file to
    `inside` or into it; once: the calls putting things back go through."""
    calls = []

    def patched(real):
        def move(src, dst, *args, **kwargs):
            target = Path(dst)
            if target == inside or inside in target.parents:
                calls.append(target)
                if len(calls) == nth:
                    raise KeyboardInterrupt
            return real(src, dst, *args, **kwargs)
        return move

    for name in names:
        monkeypatch.setattr(os, name, patched(getattr(os, name)))


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_convert_stopped_while_replacing_a_model_leaves_the_earlier_one_whole(tmp_path, capsys, monkeypatch):
    """`convert --overwrite` into a DST holding an earlier conversion (and a stale pytorch_model.bin): stopped after
    the first new file was in, DST held the new config.json beside none of the earlier weights (deleted first)."""
    torch.manual_seed(0)
    AlbertForPreTraining(_tiny()).save_pretrained(tmp_path / "a")
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "b")
    dst = tmp_path / "hf"
    assert main(["convert", str(tmp_path / "a"), str(dst), "--to", "hf"]) == 0
    torch.save({}, dst / "pytorch_model.bin")
    before = _files(dst)
    _interrupt_on(monkeypatch, dst, nth=2)   # the first new file in, the second one stopped
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "b"), str(dst), "--to", "hf", "--overwrite"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert _files(dst) == before
    assert _leftovers(tmp_path) == []
    monkeypatch.undo()
    assert main(["convert", str(tmp_path / "b"), str(dst), "--to", "hf", "--overwrite"]) == 0
    assert "pytorch_model.bin" not in _files(dst)
    assert "AlbertForSequenceClassification" in (dst / "config.json").read_text()
    assert _leftovers(tmp_path) == []


def test_convert_stopped_before_a_new_dst_is_in_place_leaves_no_dst(tmp_path, capsys, monkeypatch):
    """A DST that did not exist: stopped at its first file, an empty (or half-filled) DST was left behind, which the
    next `convert` refused or took for a model."""
    torch.manual_seed(0)
    AlbertForPreTraining(_tiny()).save_pretrained(tmp_path / "a")
    dst = tmp_path / "new" / "hf"
    _interrupt_on(monkeypatch, dst, nth=1)
    assert main(["convert", str(tmp_path / "a"), str(dst), "--to", "hf"]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_export_stopped_while_replacing_a_serving_directory_leaves_the_earlier_one_whole(tmp_path, capsys,
                                                                                          monkeypatch):
    """`export onnx --out DIR --overwrite` over an int8 export: stopped mid-move, DIR held the new onnx/model.onnx
    beside the earlier model_quantized.onnx (or without it, deleted first)."""
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    heads.AlbertForSequenceClassification(_tiny(num_labels=2)).save_pretrained(tmp_path / "clf2")
    out = tmp_path / "serve"
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--quantize", "int8", "--no-verify"]) == 0
    before = _files(out)
    _interrupt_on(monkeypatch, out, nth=2)
    capsys.readouterr()
    assert main(["export", "onnx", str(tmp_path / "clf2"), "--out", str(out), "--no-verify", "--overwrite"]) == 130
    assert _files(out) == before
    assert _leftovers(tmp_path) == []


def test_export_stopped_before_a_new_serving_directory_is_in_leaves_no_directory(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    out = tmp_path / "serve" / "clf"
    _interrupt_on(monkeypatch, out, nth=2)
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--no-verify"]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clf"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_during_the_move_is_acted_on_once_the_files_are_in(tmp_path, monkeypatch, sig):
    """Ctrl-C or SIGTERM (the CLI's handler) while the files move: held back, then acted on (KeyboardInterrupt) with
    the new set complete. The signal goes to another thread of the process, as the kernel may hand it to one of
    torch's OpenMP workers: held back with pthread_sigmask in the main thread only, its handler still ran mid-move.
    The dispositions a console gives (Python's Ctrl-C handler, SIGTERM's default) are set here, whatever the test
    run inherited (`nohup`, `trap '' INT`, a runner that blocks signals), and every wait is bounded."""
    import socket

    from albertlm.cli.convert_commands import swap_into_place
    from albertlm.errors import _sigterm_interrupts, sigterm_stops

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    dst, stage = tmp_path / "dst", tmp_path / "stage"
    dst.mkdir()
    stage.mkdir()
    for name in "abc":
        (dst / name).write_text("old")
        (stage / name).write_text("new")
    idle = threading.Event()

    def take_the_signal() -> None:   # a thread inherits its creator's mask: one blocking `sig` would never take it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        idle.wait(120)

    other = threading.Thread(target=take_the_signal, daemon=True)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    reader.settimeout(60)   # a signal that never arrives fails the test (socket.timeout), not hangs it
    real, sent = os.replace, []

    def replace(src, target, *args, **kwargs):
        if Path(target).parent == dst and not sent:
            sent.append(sig)
            signal.pthread_kill(other.ident, sig)
            while reader.recv(1) != bytes([sig]):   # its C handler has run (it writes the wakeup fd): Python's is
                pass                                # pending (another signal's byte, if any, is passed over)
        return real(src, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    wakeup = None
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        other.start()
        wakeup = signal.set_wakeup_fd(writer.fileno())
        with sigterm_stops():
            assert signal.getsignal(signal.SIGTERM) is _sigterm_interrupts
            with pytest.raises(KeyboardInterrupt):
                swap_into_place([(stage / n, dst / n) for n in "abc"], [], tmp_path / ".earlier")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        if wakeup is not None:
            signal.set_wakeup_fd(wakeup)
        for s, handler in previous.items():
            if handler is not None:   # (None: set outside Python, left as the test found it)
                signal.signal(s, handler)
        idle.set()
        if other.ident is not None:
            other.join(60)
        reader.close()
        writer.close()
    assert sent == [sig]
    assert {p.name: p.read_text() for p in dst.iterdir()} == {"a": "new", "b": "new", "c": "new"}
