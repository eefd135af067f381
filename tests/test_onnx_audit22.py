"""ONNX audit 22, as a user who fine-tunes a model on GLUE SST-2 and serves it with onnxruntime: the .onnx held
nothing a server needs beyond the graph (the label names, the length the model was fine-tuned with, the tokenizer
to ship beside it: `albertlm export onnx` now writes them into the file's metadata and says them); the dynamic
axes were named batch / sequence / choices where optimum's export of ALBERT says batch_size / sequence_length /
num_choices (the input and output names already agreed); a model of one segment type (type_vocab_size 1) could not
be exported at all ("token_type_ids holds 1", an id the exporter's own example made up)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop import onnx as onnx_export  # noqa: E402
from albertlm.model import heads  # noqa: E402
from conftest import save_tiny_pretrained, shared_path  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32), **changes})


@pytest.fixture(scope="module")
def sst2_run(tmp_path_factory) -> Path:
    """A real fine-tuning run: the tiny pretrained model, 2 steps on the first 16 SST-2 train sentences, T 24."""
    root = tmp_path_factory.mktemp("sst2")
    data = root / "SST-2"
    data.mkdir()
    for split, rows in (("train", 17), ("dev", 9)):
        lines = shared_path("glue", "SST-2", f"{split}.tsv").read_text(encoding="utf-8").splitlines()[:rows]
        (data / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "pretrained").mkdir()
    pretrained = save_tiny_pretrained(root / "pretrained")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["finetune", "glue", "--task", "sst2", "--data-dir", str(data), "--model", str(pretrained),
                     "--out", str(root / "run"), "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "24",
                     "--eval-every", "2", "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return root / "run"


@pytest.mark.parametrize("source", ["run", "step", "transformers"])
def test_a_fine_tuned_classifier_carries_what_serving_needs(sst2_run, source, tmp_path, capsys):
    """The file said nothing of the labels, the fine-tuning's length or the tokenizer ("those stay in the
    checkpoint directory"): a server given the .onnx alone guessed them. Now they are its metadata, and int8 keeps
    them; the run, one of its checkpoints/step_N and its transformers export say the same."""
    model = {"run": sst2_run, "step": sst2_run / "checkpoints" / "step_00000002"}.get(source)
    if model is None:
        model = tmp_path / "hf"
        assert main(["convert", str(sst2_run), str(model), "--to", "hf"]) == 0
    out = tmp_path / "serve" / "sst2.onnx"
    capsys.readouterr()
    assert main(["export", "onnx", str(model), "--out", str(out), "--quantize", "int8", "--no-verify"]) == 0
    printed = capsys.readouterr().out
    assert "at most 24 tokens; labels 0, 1; no tokenizer inside: ship " in printed, printed
    for path in (out, out.with_suffix(".int8.onnx")):
        meta = onnx_export.onnx_session(path).get_modelmeta().custom_metadata_map
        assert meta["architecture"] == "AlbertForSequenceClassification" and meta["max_seq_length"] == "24"
        assert json.loads(meta["id2label"]) == {"0": "0", "1": "1"}
        assert meta["problem_type"] == "single_label_classification" and meta["max_position_embeddings"] == "64"
        assert "vocab.txt" in meta["tokenizer_files"].split(",")
        assert str(tmp_path) not in json.dumps(meta)   # no local path in a file that is shipped
        if source != "transformers":
            assert meta["task"] == "sst2" and meta["family"] == "glue"


def test_the_encoder_of_a_classifier_carries_no_labels(sst2_run, tmp_path, capsys):
    out = tmp_path / "enc.onnx"
    assert main(["export", "onnx", str(sst2_run), "--out", str(out), "--encoder", "--no-verify"]) == 0
    meta = onnx_export.onnx_metadata(out)
    assert meta["architecture"] == "AlbertModel" and meta["max_seq_length"] == "24"
    assert not {"id2label", "task", "problem_type"} & set(meta), meta


@pytest.mark.parametrize("cls, axes", [
    (heads.AlbertForSequenceClassification, (["batch_size", "sequence_length"], ["batch_size", 2])),
    (heads.AlbertForQuestionAnswering, (["batch_size", "sequence_length"], ["batch_size", "sequence_length"])),
    (heads.AlbertForMultipleChoice, (["batch_size", "num_choices", "sequence_length"], ["batch_size", "num_choices"])),
], ids=lambda v: getattr(v, "__name__", ""))
def test_names_are_optimums(cls, axes, tmp_path):
    """optimum (`optimum-cli export onnx`, AlbertOnnxConfig) names the inputs input_ids, attention_mask,
    token_type_ids, the outputs as transformers does, and the axes batch_size, sequence_length, num_choices:
    a serving config written for its file fits ours. The axes were batch, sequence, choices."""
    torch.manual_seed(0)
    model = cls(_tiny()).eval()
    onnx_export.export_onnx(model, tmp_path / "m.onnx")
    session = onnx_export.onnx_session(tmp_path / "m.onnx")
    assert [(i.name, i.shape) for i in session.get_inputs()] == [
        (name, axes[0]) for name in ("input_ids", "attention_mask", "token_type_ids")]
    assert all(o.shape == axes[1] for o in session.get_outputs())
    assert max(onnx_export.compare_with_onnxruntime(model, tmp_path / "m.onnx").values()) < 1e-4


def test_a_model_of_one_segment_type_exports(tmp_path, capsys):
    """type_vocab_size 1 (a single-segment model): the export's example inputs gave half of every row segment 1,
    so `albertlm export onnx` failed with "token_type_ids holds 1, outside this model's type_vocab_size=1", an
    input the user never gave. Now it exports, and onnxruntime gives PyTorch's scores."""
    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(_tiny(type_vocab_size=1, num_labels=1)).eval()
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "m.onnx"
    assert main(["export", "onnx", str(tmp_path / "model"), "--out", str(out)]) == 0, capsys.readouterr().err
    assert "max abs difference: logits" in capsys.readouterr().out
    assert onnx_export.onnx_metadata(out)["problem_type"] == "regression"   # one score: transformers' reading
    ids = np.random.default_rng(0).integers(5, 60, (3, 11))
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    with torch.no_grad():
        expected = model(*map(torch.from_numpy, feeds.values())).logits.numpy()
    np.testing.assert_allclose(onnx_export.onnx_session(out).run(None, feeds)[0], expected, atol=1e-5)
