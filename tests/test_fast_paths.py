"""The CPU fast paths (model/fast_paths.py): which CPU gets which path, and that every path gives the plain
model's results. Each path is forced by pretending to be that kind of CPU, so CI on any CPU runs all of
them (the bf16 kernels themselves only where oneDNN has bf16 GEMMs)."""
from __future__ import annotations

import copy

import pytest
import torch

from albertlm.model import fast_paths, fused
from albertlm.model.albert import AlbertForPreTraining, enable_activation_checkpointing
from albertlm.training.precision import prepare_model


def pretend_cpu(monkeypatch, capability: str, bf16: bool) -> None:
    monkeypatch.setattr(fast_paths, "cpu_capability", lambda: capability)
    monkeypatch.setattr(fused, "BF16", bf16)
    monkeypatch.setattr(fused, "bf16_supported", lambda: bf16)


@pytest.mark.parametrize("capability,bf16,fp32_path,bf16_path", [
    ("AVX2", False, None, None),                                 # AVX2-only EPYC / older Xeon
    ("AVX512", False, torch.float32, None),                      # AVX-512 without bf16 instructions
    ("AVX512", True, torch.float32, torch.bfloat16),             # AVX-512 BF16 (Zen 4, Cooper Lake)
    ("AMX", True, torch.float32, torch.bfloat16),                # Sapphire Rapids and later
    ("DEFAULT", False, None, None),
])
def test_the_probe_chooses_per_cpu_and_dtype(monkeypatch, capability, bf16, fp32_path, bf16_path):
    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, capability, bf16)
    assert fast_paths.choose_fast_path("cpu", "fp32") == fp32_path
    assert fast_paths.choose_fast_path("cpu", "bf16") == bf16_path
    for precision in ("fp32", "bf16", "fp16"):
        assert fast_paths.choose_fast_path("cuda", precision) is None  # GPUs: the plain model
    assert fast_paths.choose_fast_path("cpu", "fp16") is None


def test_without_onednn_everything_is_plain(monkeypatch):
    pretend_cpu(monkeypatch, "AMX", True)
    monkeypatch.setattr(fused, "AVAILABLE", False)
    assert fast_paths.choose_fast_path("cpu", "fp32") is None and fast_paths.choose_fast_path("cpu", "bf16") is None


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (4, 13), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    positions = torch.tensor([[1, 3, 0], [2, 5, 7], [4, 0, 0], [6, 8, 10]])
    return dict(input_ids=ids, attention_mask=mask, masked_lm_positions=positions,
                masked_lm_ids=torch.randint(5, 99, positions.shape, generator=g),
                masked_lm_weights=(positions > 0).float(), sentence_order_label=torch.tensor([0, 1, 1, 0]))


def run(model, precision: str, seed: int = 1):
    """Training loss and gradients, then inference logits (fused activation) of one batch."""
    inputs = batch()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else torch.autocast("cpu", enabled=False)
    torch.manual_seed(seed)
    with ctx:
        out = model(**inputs)
    out.loss.backward()
    with torch.inference_mode(), ctx:
        logits = model.eval()(inputs["input_ids"], inputs["attention_mask"]).prediction_logits.float()
    model.train()
    return out.loss, logits, {n: p.grad for n, p in model.named_parameters()}


def compare(fast, plain, atol, rtol, grad_rtol):
    (loss_a, logits_a, grads_a), (loss_b, logits_b, grads_b) = fast, plain
    torch.testing.assert_close(loss_a, loss_b, atol=atol, rtol=rtol)
    torch.testing.assert_close(logits_a, logits_b, atol=atol, rtol=rtol)
    for name, grad in grads_b.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(grads_a[name], grad, atol=atol * max(scale, 1), rtol=grad_rtol, msg=name)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_fp32_fast_path_matches_the_plain_model(tiny_config, monkeypatch, dropout, checkpointing):
    """Forced on (pretending AVX-512), on any CPU: fp32 oneDNN linears run on AVX2 too."""
    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, "AVX512", False)
    torch.manual_seed(0)
    plain = AlbertForPreTraining(tiny_config.replace(hidden_dropout=dropout, activation="gelu"))
    fast = copy.deepcopy(plain)
    prepare_model(fast, precision="fp32", device=torch.device("cpu"), activation_checkpointing=checkpointing)
    if checkpointing:
        enable_activation_checkpointing(plain)
    assert fast_paths.fast_path_dtype(fast) == torch.float32 and fast_paths.fast_path_dtype(plain) is None
    assert fast.state_dict().keys() == plain.state_dict().keys()
    calls = []
    real = fused._BiasLinear.apply
    monkeypatch.setattr(fused._BiasLinear, "apply", lambda *a: calls.append(1) or real(*a))
    result = run(fast, "fp32")
    assert calls, "the fused kernels did not run"
    compare(result, run(plain, "fp32"), atol=1e-5, rtol=1e-5, grad_rtol=1e-4)


def test_bf16_fast_path_matches_the_plain_model(tiny_config, monkeypatch):
    if not fused.BF16:
        pytest.skip("this CPU/torch build has no oneDNN bf16 GEMM (AVX-512 BF16 or AMX needed)")
    torch.manual_seed(0)
    plain = AlbertForPreTraining(tiny_config)
    fast = copy.deepcopy(plain)
    assert fast_paths.apply_fast_paths(fast, "cpu", "bf16") == torch.bfloat16
    calls = []
    real = fused._cast
    monkeypatch.setattr(fused, "_cast", lambda t, d: calls.append(t) or real(t, d))
    result = run(fast, "bf16")
    assert calls and result[2]["albert.encoder.ffns.0.up.weight"].dtype == torch.float32
    compare(result, run(plain, "bf16"), atol=2e-2, rtol=2e-2, grad_rtol=0.05)
    assert fused._CASTS.get() is None  # the per-forward cast scope was closed


def test_avx2_bf16_takes_the_plain_ops_warns_and_trains(tiny_config, monkeypatch, capsys):
    """On a CPU without bf16 GEMMs the fused path must not be chosen (it cannot be built there)."""
    pretend_cpu(monkeypatch, "AVX2", False)
    model = AlbertForPreTraining(tiny_config)
    prepare_model(model, precision="bf16", device=torch.device("cpu"))
    assert fast_paths.fast_path_dtype(model) is None
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "emulated" in err
    loss, logits, grads = run(model, "bf16")
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values() if g is not None)
    prepare_model(model, precision="fp32", device=torch.device("cpu"))
    assert fast_paths.fast_path_dtype(model) is None and capsys.readouterr().err == ""  # AVX2 fp32: MKL's addmm


def test_fast_paths_leave_cuda_and_other_dtypes_to_the_plain_ops(tiny_config, monkeypatch):
    """A swapped model moved to another dtype (or device) runs the plain ops instead of crashing."""
    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, "AVX512", False)
    model = AlbertForPreTraining(tiny_config).eval()
    reference = copy.deepcopy(model).double()
    fast_paths.apply_fast_paths(model, "cpu", "fp32")
    model.double()
    inputs = batch()
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).prediction_logits, reference(**inputs).prediction_logits)


def test_remove_fast_paths_restores_the_plain_model(tiny_config, monkeypatch):
    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, "AMX", True)
    model = AlbertForPreTraining(tiny_config)
    plain_types = [type(m) for m in model.modules()]
    fast_paths.apply_fast_paths(model, "cpu", "bf16")
    assert [type(m) for m in model.modules()] != plain_types
    fast_paths.remove_fast_paths(model)
    assert [type(m) for m in model.modules()] == plain_types and not model._forward_hooks


def test_the_emulated_bf16_warning_comes_from_the_first_rank_only(tiny_config, monkeypatch, capsys):
    """Under torchrun only LOCAL_RANK 0 prints it (each rank used to print the same line)."""
    pretend_cpu(monkeypatch, "AVX2", False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")   # as torchrun sets it (a LOCAL_RANK past WORLD_SIZE is outside a launch)
    prepare_model(AlbertForPreTraining(tiny_config), precision="bf16", device=torch.device("cpu"))
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("LOCAL_RANK", "0")
    prepare_model(AlbertForPreTraining(tiny_config), precision="bf16", device=torch.device("cpu"))
    assert "emulated" in capsys.readouterr().err
