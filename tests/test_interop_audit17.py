"""ONNX export leaves the caller's model where it was: a bf16 model stayed fp32 after `export_onnx` (and a GPU
model would have been left on the CPU); a model of mixed placement is exported from a copy."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnx")

from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop.onnx import export_onnx  # noqa: E402
from albertlm.model.albert import AlbertModel  # noqa: E402


def _tiny() -> AlbertModel:
    torch.manual_seed(0)
    return AlbertModel(ModelConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                   ffn_size=24, max_position_embeddings=16))


def test_a_bf16_model_stays_bf16_and_its_mode_is_kept(tmp_path):
    model = _tiny().to(torch.bfloat16).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    weight = next(model.parameters())
    export_onnx(model, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").stat().st_size > 0
    assert model.training and next(model.parameters()) is weight
    assert {v.dtype for k, v in model.state_dict().items() if v.is_floating_point()} == {torch.bfloat16}
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_model_of_mixed_dtypes_is_exported_from_a_copy(tmp_path):
    model = _tiny().eval()
    model.encoder.to(torch.bfloat16)
    dtypes = [p.dtype for p in model.parameters()]
    assert len(set(dtypes)) == 2
    export_onnx(model, tmp_path / "m.onnx")
    assert [p.dtype for p in model.parameters()] == dtypes and not model.training
