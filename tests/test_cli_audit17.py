"""`albertlm info` on a transformers directory whose config.json names no `architectures` (a custom training
loop's save) names the class its head weights make, as `convert` reads it (it said AlbertForPreTraining)."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main

transformers = pytest.importorskip("transformers")


def test_info_names_the_class_of_the_heads_when_architectures_is_missing(tmp_path, capsys):
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=16,
                                       num_labels=3)
    transformers.AlbertForSequenceClassification(config).save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    data = json.loads(path.read_text())
    data.pop("architectures", None)
    path.write_text(json.dumps(data))
    assert main(["info", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "AlbertForSequenceClassification" in out and "AlbertForPreTraining" not in out, out


def test_the_stop_notice_of_a_signal_handler_goes_straight_to_the_descriptor(capfd):
    """Printing from a signal handler that interrupted a write to sys.stderr (a progress bar's redraw) raises
    "reentrant call inside <_io.BufferedWriter>": the notice is written to the descriptor instead."""
    import io
    import sys

    from albertlm.training.loop import _say_in_handler

    class Busy(io.TextIOWrapper):      # a stderr whose buffered write must not be entered again
        def write(self, text):
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

    real = sys.stderr
    sys.stderr = Busy(io.BufferedWriter(io.FileIO(real.fileno(), "w", closefd=False)))
    try:
        _say_in_handler("SIGTERM: stopping after this step")
    finally:
        sys.stderr = real
    assert capfd.readouterr().err == "SIGTERM: stopping after this step\n"


def test_the_stop_notice_falls_back_to_sys_stderr_without_a_descriptor(capsys):
    from albertlm.training.loop import _say_in_handler

    _say_in_handler("SIGINT: stopping")
    assert capsys.readouterr().err == "SIGINT: stopping\n"
