"""Findings of the sixteenth session's audit of using trained models: `evaluate` refuses a checkpoint without a
masked-LM head and drops a missing sentence head's numbers, fill-mask on stdin names the bad line by its number
(after printing the lines before it), embed says how many texts it cut, an --out under a file is one clear line
(embed, export), and plot draws a lone point."""
from __future__ import annotations

import io
import json
import sys

import pytest
import torch

from albertlm.cli.main import main
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained, shared_path


def tiny_config(**changes):
    from albertlm.config import ModelConfig

    return ModelConfig(**{**dict(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                 ffn_size=16, max_position_embeddings=32), **changes})


@pytest.fixture(scope="module")
def sop_data(tmp_path_factory):
    """SOP pretraining data of 32 tokens, built with the ALBERT 30k vocabulary from the shared sample text."""
    out = tmp_path_factory.mktemp("data") / "d"
    text, spm = shared_path("text", "sample_text.txt"), shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(out),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    return out


def test_evaluate_refuses_a_checkpoint_without_a_masked_lm_head(tmp_path, capsys, sop_data):
    """A fine-tuned classifier evaluated on pretraining data printed MLM and SOP numbers of freshly initialised
    heads, as if they were the model's (only a logging line named the missing weights)."""
    from albertlm.model.heads import AlbertForSequenceClassification

    torch.manual_seed(0)
    AlbertForSequenceClassification(tiny_config()).save_pretrained(tmp_path / "clf")
    capsys.readouterr()
    code = main(["evaluate", str(tmp_path / "clf"), "--data", str(sop_data), "--device", "cpu", "--no-progress"])
    assert_one_error(capsys, code, "has no masked-LM head", str(tmp_path / "clf"))


def test_evaluate_reports_no_sentence_numbers_without_a_sentence_head(tmp_path, capsys, sop_data):
    """A masked-LM checkpoint (no SOP head) on SOP data: sop_acc and sop_loss came from a random head and were
    added into `loss`; now only the MLM numbers are reported, `loss` being the MLM loss."""
    from albertlm.model.heads import AlbertForMaskedLM

    torch.manual_seed(0)
    AlbertForMaskedLM(tiny_config()).save_pretrained(tmp_path / "mlm")
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "mlm"), "--data", str(sop_data), "--device", "cpu", "--no-progress",
                 "--max-batches", "2", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert "sop_acc" not in metrics and "sop_loss" not in metrics, metrics
    assert metrics["loss"] == metrics["mlm_loss"] and metrics["sentence_task"] == "sop"


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def fill_stdin(monkeypatch, capsys, model, text: str, *options) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    capsys.readouterr()
    code = main(["fill-mask", str(model), "--top-k", "2", *options])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("bad", ["the film was good", " ".join(TINY_WORDS * 6) + " [MASK]"])
def test_fill_mask_stdin_names_the_bad_line_and_keeps_the_lines_before(monkeypatch, capsys, tiny_mlm, bad):
    """On stdin a line without [MASK] or too long was named by its place in its batch ("text 2"), not its line,
    and the good lines of the batch it was in were never printed."""
    text = "the [MASK] was good\n\nthe film was [MASK]\n" + bad + "\nthe [MASK]\n"
    code, out, err = fill_stdin(monkeypatch, capsys, tiny_mlm, text, "--json", "--batch-size", "8")
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "stdin line 4" in lines[0], err
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["the [MASK] was good", "the film was [MASK]"]


def test_fill_mask_stdin_drops_a_carriage_return(monkeypatch, capsys, tiny_mlm):
    """A CRLF file on stdin gave texts ending in "\\r" in the JSON output."""
    code, out, err = fill_stdin(monkeypatch, capsys, tiny_mlm, "the [MASK] was good\r\nthe film\t[MASK]\r\n", "--json")
    assert code == 0, err
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["the [MASK] was good", "the film\t[MASK]"]


def test_embed_says_how_many_texts_it_cut(tmp_path, capsys, tiny_mlm):
    """Texts longer than the model's positions (or --max-length) were truncated without a word."""
    import numpy as np

    lines = ["the film was good", " ".join(TINY_WORDS * 10), "", " ".join(TINY_WORDS * 2)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["embed", str(tiny_mlm), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy"),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "1 text longer than 64 tokens (the longest: 122) was cut to 64" in err, err
    assert np.load(tmp_path / "e.npy").shape == (4, 32)
    assert main(["embed", str(tiny_mlm), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "f.npy"),
                 "--no-progress", "--max-length", "10"]) == 0
    assert "2 texts longer than 10 tokens (the longest: 122) were cut to 10" in capsys.readouterr().err


def test_embed_input_directory_and_out_under_a_file_are_one_clear_line(tmp_path, capsys, tiny_mlm):
    """--input DIR said "no such file"; --out under a file was "[Errno 17] File exists: ..." ."""
    (tmp_path / "in.txt").write_text("the film\n")
    capsys.readouterr()
    code = main(["embed", str(tiny_mlm), "--input", str(tmp_path), "--out", str(tmp_path / "e.npy")])
    assert_one_error(capsys, code, "is a directory")
    code = main(["embed", str(tiny_mlm), "--input", str(tmp_path / "in.txt"), "--out",
                 str(tmp_path / "in.txt" / "sub" / "e.npy")])
    assert_one_error(capsys, code, "is a file, not a directory", "in.txt")


def test_export_out_under_a_file_is_one_clear_line(tmp_path, capsys, tiny_mlm):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    (tmp_path / "f").write_text("")
    capsys.readouterr()
    code = main(["export", "onnx", str(tiny_mlm), "--out", str(tmp_path / "f" / "m.onnx"), "--no-verify"])
    assert_one_error(capsys, code, "is a file, not a directory")


def test_plot_draws_a_lone_training_point(tmp_path, monkeypatch):
    """A short fine-tuning run logs training once: its loss, lr and throughput were plotted as lines of one
    point, i.e. nothing, under a legend naming them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from albertlm.training.plots import plot_run

    records = [{"step": 5, "split": "train", "loss": 0.7, "lr": 1e-5, "tokens_per_s": 30.0},
               {"step": 3, "split": "eval", "dev/accuracy": 0.5}, {"step": 5, "split": "eval", "dev/accuracy": 0.6}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figures.append(fig), close(fig)))
    plot_run(tmp_path)
    loss, _, lr, speed = figures[0].axes
    for ax in (loss, lr, speed):
        assert len(ax.lines) == 1 and ax.lines[0].get_marker() not in (None, "None", ""), ax.get_title()
