"""ONNX audit 19: `export onnx --encoder` of a checkpoint without a pooler (token classification, QA, masked LM, a
bare AlbertModel saved without one) exported a freshly initialised pooler as pooler_output (random values);
int8 quantisation of a model past protobuf's 2 GB once untied (albert-xlarge / xxlarge) saved it inline and
failed; benchmarks/onnx_speed.py --batch 1 printed the 1 x T row twice."""
from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop import onnx as onnx_export  # noqa: E402
from albertlm.model import heads  # noqa: E402
from albertlm.model.albert import AlbertModel  # noqa: E402
from test_benchmarks_audit14 import load  # noqa: E402   a benchmark script as a module


def _config(**overrides) -> ModelConfig:
    values = dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2, ffn_size=24,
                  max_position_embeddings=32, initializer_range=0.3)
    return ModelConfig(**{**values, **overrides})


def _feeds(batch: int = 2, length: int = 9) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(0).integers(5, 60, (batch, length))
    mask = np.ones_like(ids)
    mask[-1, length // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


@pytest.mark.parametrize("saved, flags", [
    (lambda: heads.AlbertForTokenClassification(_config()), ["--encoder"]),
    (lambda: heads.AlbertForQuestionAnswering(_config()), ["--encoder"]),
    (lambda: AlbertModel(_config(), add_pooling_layer=False), []),       # the bare backbone, as it is
], ids=["token-classification", "qa", "bare-no-pooler"])
def test_a_checkpoint_without_a_pooler_exports_no_made_up_pooler_output(saved, flags, tmp_path, capsys, one_thread):
    torch.manual_seed(0)
    model = saved().eval()
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "enc.onnx"
    assert main(["export", "onnx", str(tmp_path / "model"), "--out", str(out), "--no-verify", *flags]) == 0
    captured = capsys.readouterr()
    assert "outputs: last_hidden_state)" in captured.out, captured.out
    assert "freshly initialised" not in captured.err, captured.err   # nothing random was made, nor said
    session = onnx_export.onnx_session(out)
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state"]
    feeds = _feeds()
    backbone = model if isinstance(model, AlbertModel) else model.albert
    with torch.no_grad():
        expected = backbone(*map(torch.from_numpy, feeds.values())).last_hidden_state.numpy()
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, atol=1e-4)


def test_encoder_exports_a_pooler_exactly_where_the_checkpoint_has_one(tmp_path, capsys, one_thread):
    """A pretraining checkpoint's trained pooler is exported as it is; a masked-LM head's has none."""
    from albertlm.model.albert import AlbertForPreTraining

    feeds = _feeds()
    for cls, outputs in ((AlbertForPreTraining, 2), (heads.AlbertForMaskedLM, 1)):
        torch.manual_seed(0)
        model = cls(_config()).eval()
        model.save_pretrained(tmp_path / cls.__name__)
        out = tmp_path / f"{cls.__name__}.onnx"
        assert main(["export", "onnx", str(tmp_path / cls.__name__), "--out", str(out), "--encoder",
                     "--no-verify"]) == 0
        got = onnx_export.onnx_session(out).run(None, feeds)
        assert len(got) == outputs, cls.__name__
        with torch.no_grad():
            expected = model.albert(*map(torch.from_numpy, feeds.values()))
        np.testing.assert_allclose(got[0], expected.last_hidden_state.numpy(), atol=1e-4)
        if outputs == 2:
            np.testing.assert_allclose(got[1], expected.pooler_output.numpy(), atol=1e-5)


def test_int8_of_a_model_past_the_protobuf_limit_keeps_its_weights_outside(tmp_path, monkeypatch, one_thread):
    """Untied, albert-xlarge is ~5 GB: written inline, protobuf refuses it. Here the limit is lowered instead:
    the untied copy and quantize_dynamic's output go through .data files, and none is left behind."""
    import onnxruntime.quantization as ortq

    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(_config(vocab_size=200, hidden_size=32, ffn_size=64)).eval()
    onnx_export.export_onnx(model, tmp_path / "small.onnx")
    onnx_export.quantize_int8(tmp_path / "small.onnx", tmp_path / "small.int8.onnx")
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 4000)
    big = tmp_path / "big"
    onnx_export.export_onnx(model, big / "m.onnx")
    calls, real = [], ortq.quantize_dynamic

    def spy(model_input, model_output, **kwargs):
        calls.append((kwargs.get("use_external_data_format", False), (big / "m.int8.onnx.untied.tmp.data").is_file()))
        return real(model_input, model_output, **kwargs)

    monkeypatch.setattr(ortq, "quantize_dynamic", spy)
    report = onnx_export.quantize_int8(big / "m.onnx", big / "m.int8.onnx")
    assert calls == [(True, True)]
    assert sorted(p.name for p in big.iterdir()) == ["m.int8.onnx", "m.int8.onnx.data", "m.onnx", "m.onnx.data"]
    assert report["int8_matmuls"] > 0 and report["fp32_matmuls"] == 2 * 2   # every layer in int8, as before
    feeds = _feeds()
    np.testing.assert_array_equal(onnx_export.onnx_session(big / "m.int8.onnx").run(None, feeds)[0],
                                  onnx_export.onnx_session(tmp_path / "small.int8.onnx").run(None, feeds)[0])


def test_onnx_speed_with_batch_1_prints_each_row_once(tmp_path, monkeypatch, capsys, one_thread):
    from albertlm.config import presets

    onnx_speed = load("onnx_speed")
    monkeypatch.setattr(presets, "get_preset", lambda name, **kw: _config(**kw))   # not albert-base: tiny
    onnx_speed.speed(argparse.Namespace(batch=1, length=16, reps=1), tmp_path)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 x 16 |")]
    assert len(rows) == 1, rows
