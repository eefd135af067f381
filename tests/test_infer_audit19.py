"""Audit 19 of evaluating and poking trained models: `albertlm evaluate` names the sentence head's numbers by the
data's task (nsp_* on NSP data), says its progress in plain lines without a terminal, refuses data without
instances or of another tokenizer than the model's own and reports no MLM numbers where nothing was masked; plot
draws nsp_* records; embed no longer warns of a pooler it does not use; fill-mask and embed drop a first line's
byte order mark and name UTF-16 input."""
from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from conftest import TINY_WORDS, alice_documents, assert_one_error, save_tiny_pretrained, shared_path


def build(text, out, *options, tokenizer=None) -> str:
    """`albertlm data build` of `text` into `out`: 32 tokens, one copy (the ALBERT 30k vocabulary by default)."""
    tokenizer = tokenizer or shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(tokenizer), "--out", str(out),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress", *options]) == 0
    return str(out)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{"model": a random 30k-vocabulary AlbertForPreTraining (SOP head), "nsp"/"none": Alice data of that task}."""
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("eval19")
    text = alice_documents(root, 80)
    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=16, max_position_embeddings=32)).save_pretrained(root / "model")
    return {"root": root, "text": text, "model": str(root / "model"),
            **{task: build(text, root / task, "--sentence-task", task) for task in ("nsp", "none")}}


def evaluate_json(capsys, model, data, *options) -> dict:
    capsys.readouterr()
    assert main(["evaluate", model, "--data", data, "--device", "cpu", "--no-progress", "--json", *options]) == 0
    return json.loads(capsys.readouterr().out)


def test_evaluate_names_the_sentence_numbers_by_the_data_task(built, capsys):
    """On NSP data the sentence head's numbers were printed and written as sop_loss / sop_acc; now nsp_*, in the
    text and the JSON, and MLM-only data has no sentence number. The ablation suite's intrinsic evaluation reads
    the NSP accuracy by its new name."""
    from albertlm.experiments.evaluation import intrinsic

    metrics = evaluate_json(capsys, built["model"], built["nsp"], "--max-batches", "2")
    assert {"nsp_loss", "nsp_acc"} <= set(metrics) and not {"sop_loss", "sop_acc"} & set(metrics), metrics
    assert metrics["sentence_task"] == "nsp"
    assert metrics["loss"] == pytest.approx(metrics["mlm_loss"] + metrics["nsp_loss"])
    assert main(["evaluate", built["model"], "--data", built["nsp"], "--device", "cpu", "--no-progress",
                 "--max-batches", "1"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines() if not line.startswith("(")]
    assert "nsp_acc" in names and "sop_acc" not in names, names
    only_mlm = evaluate_json(capsys, built["model"], built["none"], "--max-batches", "1")
    assert not [k for k in only_mlm if k.startswith(("sop", "nsp"))] and only_mlm["loss"] == only_mlm["mlm_loss"]
    scores = intrinsic(built["model"], {"nsp": Path(built["nsp"])}, device="cpu")
    assert 0 <= scores["nsp_acc"] <= 1 and scores["nsp_loss"] > 0, scores


def test_plot_draws_nsp_records(tmp_path, monkeypatch):
    """A metrics.jsonl holding nsp_loss / nsp_acc (evaluate's names for NSP numbers) was plotted without them."""
    from matplotlib.figure import Figure

    from albertlm.training.plots import plot_run

    records = [{"step": s, "split": split, "mlm_loss": 9.0, "mlm_acc": 0.1, "nsp_loss": 0.69, "nsp_acc": 0.5 + s / 100}
               for s in (1, 2) for split in ("train", "eval")]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    seen = {}
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (
        seen.update({ax.get_title(): ax.get_legend_handles_labels()[1] for ax in fig.axes}), save(fig, *a, **k)))
    plot_run(tmp_path)
    assert {"train NSP", "eval NSP"} <= set(seen["loss"]) and {"train NSP", "eval NSP"} <= set(seen["accuracy"])


def test_evaluate_progress_without_a_terminal_is_plain_lines(built, capsys):
    """Under nohup or a pipe, the bar's carriage-return redraws went into the log; now, where stderr is no
    terminal, `evaluate: N/M batches` lines (at every tenth of the batches)."""
    capsys.readouterr()
    assert main(["evaluate", built["model"], "--data", built["nsp"], "--device", "cpu", "--max-batches", "2"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err, repr(err)
    assert [line for line in err.splitlines() if line.startswith("evaluate:")] == [
        "evaluate: 1/2 batches", "evaluate: 2/2 batches"], err


def test_evaluate_refuses_data_without_instances(built, capsys):
    """Data of no instances printed mlm_loss 0.0000 (as if perfect), exit 0."""
    import shutil

    empty = built["root"] / "empty"
    shutil.copytree(built["none"], empty)
    meta = json.loads((empty / "meta.json").read_text())
    meta["num_instances"] = 0
    for shard in meta["shards"]:
        shard["num_instances"] = 0
        (empty / shard["file"]).write_bytes(b"")
    (empty / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    code = main(["evaluate", built["model"], "--data", str(empty), "--device", "cpu", "--no-progress"])
    assert_one_error(capsys, code, str(empty), "no instances")


def test_evaluate_reports_no_mlm_numbers_where_nothing_was_masked(built, capsys):
    """Data built with --masked-lm-prob 0 printed mlm_loss 0 and mlm_acc 0 beside the sentence numbers."""
    unmasked = build(built["text"], built["root"] / "unmasked", "--sentence-task", "nsp", "--masked-lm-prob", "0")
    metrics = evaluate_json(capsys, built["model"], unmasked, "--max-batches", "1")
    assert not {"mlm_loss", "mlm_acc"} & set(metrics) and metrics["loss"] == metrics["nsp_loss"], metrics


def test_evaluate_refuses_data_of_another_tokenizer_than_the_models_own(built, tmp_path, capsys):
    """albert-base-v2's directory (spiece.model beside the weights) on data built with a smaller vocabulary: its
    ids fit the model's table, so every one was read as another piece and the numbers printed meant nothing."""
    import shutil

    model = tmp_path / "with_spm"
    shutil.copytree(built["model"], model)
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), model / "spiece.model")
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    forward, backward = " ".join(TINY_WORDS) + ".\n", " ".join(TINY_WORDS[::-1]) + ".\n"
    (tmp_path / "words.txt").write_text(forward * 40 + "\n" + backward * 40)   # two documents
    data = build(tmp_path / "words.txt", tmp_path / "small", tokenizer=tmp_path / "vocab.txt")
    capsys.readouterr()
    code = main(["evaluate", str(model), "--data", data, "--device", "cpu", "--no-progress"])
    assert_one_error(capsys, code, "another tokenizer", str(model), "vocab.txt")
    assert evaluate_json(capsys, str(model), built["none"], "--max-batches", "1")["mlm_loss"] > 0   # its own: scored


def test_embed_does_not_warn_of_a_pooler_it_does_not_use(tmp_path, caplog):
    """A masked-LM checkpoint has no pooler: embed warned "freshly initialised weights: pooler.weight,
    pooler.bias", as if the embeddings came from random weights; they are the last hidden states."""
    from albertlm.config import ModelConfig
    from albertlm.model.heads import AlbertForMaskedLM

    model = tmp_path / "mlm"
    torch.manual_seed(0)
    AlbertForMaskedLM(ModelConfig(vocab_size=len(TINY_WORDS) + 5, embedding_size=8, hidden_size=16, num_layers=1,
                                  num_heads=2, ffn_size=16, max_position_embeddings=32)).save_pretrained(model)
    (model / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    (tmp_path / "in.txt").write_text("the film was good\n")
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        assert main(["embed", str(model), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy"),
                     "--no-progress"]) == 0
    assert not [r for r in caplog.records if "pooler" in r.getMessage()], caplog.text


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny19"))


def bytes_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_fill_mask_and_embed_drop_a_first_line_byte_order_mark(tiny_mlm, tmp_path, monkeypatch, capsys):
    """A Notepad file piped to fill-mask --json echoed "\\ufeffthe [MASK] ..." as its first text."""
    bytes_stdin(monkeypatch, b"\xef\xbb\xbfthe [MASK] was good\nthe film was [MASK]\n")
    capsys.readouterr()
    assert main(["fill-mask", str(tiny_mlm), "--json", "--top-k", "1"]) == 0
    texts = [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()]
    assert texts == ["the [MASK] was good", "the film was [MASK]"]
    from albertlm.cli.infer_commands import _lines

    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbfthe film\n\xef\xbb\xbfkept\n")
    assert list(_lines(tmp_path / "bom.txt")) == ["the film", "\ufeffkept"]   # only the file's own mark


def test_utf16_input_is_named(tiny_mlm, tmp_path, monkeypatch, capsys):
    """PowerShell's `>` writes UTF-16: it was "not UTF-8 text (byte 0xff at column 1)"."""
    utf16 = "the [MASK] was good\n".encode("utf-16")
    bytes_stdin(monkeypatch, utf16)
    capsys.readouterr()
    assert_one_error(capsys, main(["fill-mask", str(tiny_mlm)]), "stdin line 1", "UTF-16")
    (tmp_path / "in.txt").write_bytes(utf16)
    code = main(["embed", str(tiny_mlm), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy")])
    assert_one_error(capsys, code, "in.txt:1", "UTF-16")
    assert not (tmp_path / "e.npy").exists()
