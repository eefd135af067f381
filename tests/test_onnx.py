"""`albertlm export onnx`: every head under onnxruntime within 1e-4 of PyTorch on real text, dynamic axes,
shared weights stored once (file size vs safetensors), int8 quantisation, one-line errors (issue 12)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop.onnx import (compare_with_onnxruntime, example_inputs, export_onnx,  # noqa: E402
                                   merge_duplicate_initializers, onnx_session)
from albertlm.model import heads  # noqa: E402
from albertlm.model.albert import AlbertForPreTraining, AlbertModel  # noqa: E402
from albertlm.tokenization import load_tokenizer  # noqa: E402
from conftest import shared_path  # noqa: E402

CLASSES = [AlbertModel, AlbertForPreTraining, heads.AlbertForMaskedLM, heads.AlbertForSequenceClassification,
           heads.AlbertForTokenClassification, heads.AlbertForQuestionAnswering, heads.AlbertForMultipleChoice]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on a shared 2-core machine
    yield
    torch.set_num_threads(threads)


def config(**overrides) -> ModelConfig:
    values = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=5, num_heads=4, ffn_size=37,
                  max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0,
                  num_labels=3, initializer_range=0.2)
    values.update(overrides)
    return ModelConfig(**values)


def sst2_batch(tokenizer, count: int, length: int):
    """Real sentences (GLUE SST-2 dev), padded to the longest, truncated to `length`."""
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:count + 1]
    rows = [[tokenizer.cls_id, *tokenizer.encode(line.split("\t")[0])[:length - 2], tokenizer.sep_id] for line in lines]
    width = max(map(len, rows))
    ids = np.full((count, width), tokenizer.pad_id, dtype=np.int64)
    mask = np.zeros((count, width), dtype=np.int64)
    for k, row in enumerate(rows):
        ids[k, :len(row)], mask[k, :len(row)] = row, 1
    return ids, mask, np.zeros_like(ids)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_head_matches_pytorch_under_onnxruntime(cls, tmp_path):
    torch.manual_seed(0)
    model = cls(config(classifier_dropout=0.1, hidden_dropout=0.1)).eval()
    report = export_onnx(model, tmp_path / "m.onnx")
    assert not model.training  # the export leaves the model's mode alone (dropout stays off)
    diffs = compare_with_onnxruntime(model, tmp_path / "m.onnx")  # batch 3, length 37: not the export's 2 x 16
    assert set(diffs) == set(report["outputs"]) and max(diffs.values()) < 1e-4, diffs
    small = compare_with_onnxruntime(model, tmp_path / "m.onnx", batch=1, length=5, seed=2)
    assert max(small.values()) < 1e-4, small


def test_a_classifier_on_real_sentences(tmp_path):
    tok = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(config(vocab_size=tok.vocab_size, num_labels=2,
                                                         max_position_embeddings=128)).eval()
    export_onnx(model, tmp_path / "sst2.onnx")
    ids, mask, types = sst2_batch(tok, 24, 128)
    got = onnx_session(tmp_path / "sst2.onnx").run(["logits"], {"input_ids": ids, "attention_mask": mask,
                                                                 "token_type_ids": types})[0]
    with torch.no_grad():
        expected = model(*map(torch.from_numpy, (ids, mask, types))).logits.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_shared_weights_are_stored_once(tmp_path):
    """An all-shared 8-layer model: the ONNX file is within 10% of the safetensors checkpoint (a copy of the
    layer per use would make it ~8x the layer's size); an unshared one grows with L in both formats alike."""
    for sharing in ("all", "none"):
        torch.manual_seed(0)
        model = heads.AlbertForSequenceClassification(config(
            vocab_size=2000, embedding_size=64, hidden_size=256, num_heads=4, ffn_size=1024, num_layers=8,
            sharing=sharing, max_position_embeddings=128))
        model.save_pretrained(tmp_path / sharing)
        checkpoint = (tmp_path / sharing / "model.safetensors").stat().st_size
        report = export_onnx(model, tmp_path / f"{sharing}.onnx")
        assert 0.9 < report["bytes"] / checkpoint < 1.1, (sharing, report["bytes"], checkpoint)


def test_duplicate_initializers_are_merged(tmp_path):
    """The safety net for exporters that copy a shared weight per use: two equal initializers become one."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w, "w1"), numpy_helper.from_array(w.T.copy(), "w2"),
         numpy_helper.from_array(w.copy(), "w3")])
    graph.node.append(helper.make_node("MatMul", ["h", "w2"], ["z"]))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    before = [n.input[1] for n in proto.graph.node]
    assert merge_duplicate_initializers(proto) == 1  # w3 == w1
    assert [i.name for i in proto.graph.initializer] == ["w1", "w2"] and [n.input[1] for n in proto.graph.node] == before
    onnx.checker.check_model(proto)


def test_dynamo_exporter(tmp_path):
    """torch.export-based exporter (slower): same outputs, weights still stored once."""
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    model = AlbertModel(config(num_layers=3)).eval()
    report = export_onnx(model, tmp_path / "d.onnx", exporter="dynamo")
    assert max(compare_with_onnxruntime(model, tmp_path / "d.onnx").values()) < 1e-4
    assert report["initializers"] < 40


def test_int8_quantises_every_layer_and_stores_each_weight_once(tmp_path):
    """onnxruntime's quantizer alone converts only the first use of a shared weight; ours converts all."""
    from albertlm.interop.onnx import quantize_int8

    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(config(vocab_size=2000, embedding_size=64, hidden_size=256,
                                                         ffn_size=1024, num_layers=6, max_position_embeddings=128))
    fp32 = export_onnx(model, tmp_path / "m.onnx")
    report = quantize_int8(tmp_path / "m.onnx", tmp_path / "m.int8.onnx")
    # per layer 4 weight matmuls (qkv, out, up, down), plus the E->H projection, the pooler, the classifier
    assert report["int8_matmuls"] == 6 * 4 + 3 and report["fp32_matmuls"] == 6 * 2  # attention's own matmuls
    assert report["bytes"] < 0.4 * fp32["bytes"]


def test_export_cli_with_int8_and_errors(tmp_path, capsys):
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(config(num_labels=2)).save_pretrained(tmp_path / "clf")
    out = tmp_path / "onnx" / "clf.onnx"
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--quantize", "int8"]) == 0
    printed = capsys.readouterr().out
    assert "exported AlbertForSequenceClassification" in printed and "max abs difference: logits" in printed
    assert out.is_file() and out.with_suffix(".int8.onnx").is_file()
    ids, mask, types = (t.numpy() for t in example_inputs(heads.AlbertForSequenceClassification(config()), 4, 20, 3))
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    fp32 = onnx_session(out).run(["logits"], feeds)[0]
    int8 = onnx_session(out.with_suffix(".int8.onnx")).run(["logits"], feeds)[0]
    assert np.abs(int8 - fp32).max() < 0.2 * np.abs(fp32).max() + 1e-3  # close, not equal: weights are int8
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["export", "onnx", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("albertlm export: error:") for line in err)
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(tmp_path / "enc.onnx"), "--encoder",
                 "--no-verify"]) == 0
    assert "exported AlbertModel" in capsys.readouterr().out
