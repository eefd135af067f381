"""Packed attention: with the padding skipped, the attention of each sequence runs over its own real tokens in
the (N, A, hs) packing (`varlen_attn`, flash attention, on a GPU), with no mask and no pad / unpad around it.
The CUDA kernel cannot run here, so a reference kernel with varlen_attn's contract (segments given by their
start offsets) stands in for it: the model's side (offsets from the mask, query rows, shapes) must give the
padded model's numbers exactly. Which kernel runs where is checked too, and pretraining's full batches."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from albertlm.data import loader
from albertlm.model import albert
from albertlm.model.albert import (AlbertForPreTraining, AlbertModel, Attention, enable_packed_attention,
                                   packed_attention_supported)
from albertlm.training.pretrain import PretrainingObjective
from albertlm.training.precision import prepare_model
from test_skip_padding import config, forward_backward, padded_batch, token_index

CALLS = []


def reference_varlen(q, k, v, q_starts, k_starts, max_q, max_k):
    """varlen_attn's contract: q (Nq, A, hs), k / v (Nk, A, hs); segment i is q[q_starts[i]:q_starts[i+1]] over
    k / v[k_starts[i]:k_starts[i+1]]; max_q / max_k bound the segment lengths."""
    assert q_starts.dtype == k_starts.dtype == torch.int32 and len(q_starts) == len(k_starts)
    assert q.dim() == k.dim() == v.dim() == 3 and q_starts[-1] == len(q) and k_starts[-1] == len(k)
    CALLS.append((len(q), len(k)))
    out = []
    for i in range(len(q_starts) - 1):
        qs, ks = slice(*q_starts[i:i + 2].tolist()), slice(*k_starts[i:i + 2].tolist())
        assert qs.stop - qs.start <= max_q and ks.stop - ks.start <= max_k
        y = F.scaled_dot_product_attention(q[qs].transpose(0, 1), k[ks].transpose(0, 1), v[ks].transpose(0, 1))
        out.append(y.transpose(0, 1))
    return torch.cat(out)


@pytest.fixture
def fp32_packing(monkeypatch):
    """Let the packed kernel run in fp32 (it is fp16 / bf16 only) so the comparison can be exact."""
    monkeypatch.setattr(Attention, "can_pack", lambda self, kv, p: self.packed_kernel is not None and p == 0.0)
    CALLS.clear()


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_packed_attention_pretraining_step_matches_the_padded_model(fp32_packing, sharing):
    torch.manual_seed(0)
    model = enable_packed_attention(AlbertForPreTraining(config(sharing)), reference_varlen).train()
    batch = padded_batch()
    padded, padded_grads = forward_backward(model, batch)
    assert not CALLS  # no token_index: the padded layout, SDPA with the mask
    packed, packed_grads = forward_backward(model, batch, token_index=token_index(batch["attention_mask"]))
    N, B, P = int(batch["attention_mask"].sum()), 4, 3
    assert CALLS == [(N, N)] * 3 + [(B * (1 + P), N)]  # the last block: [CLS] and the masked slots only
    for key in ("loss", "mlm_loss", "sop_loss", "prediction_logits", "sop_logits"):
        torch.testing.assert_close(packed[key], padded[key], atol=1e-5, rtol=1e-5, msg=key)
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_attention_any_mask_pattern(fp32_packing):
    """Left padding and holes too: each row's real tokens are contiguous in the packing whatever the pattern."""
    torch.manual_seed(0)
    model = enable_packed_attention(AlbertModel(config("all")), reference_varlen).eval()
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 0, 1, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    ids = torch.randint(5, 99, mask.shape)
    with torch.no_grad():
        padded = model(ids, mask).last_hidden_state
        packed = model(ids, mask, token_index=token_index(mask)).last_hidden_state
    assert len(CALLS) == 4
    real = mask.bool()
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-5)
    assert packed[~real].abs().max() == 0


def test_the_packed_kernel_runs_only_where_it_can():
    model = enable_packed_attention(AlbertModel(config("all")), reference_varlen)  # head size 32 / 4 = 8
    attention = model.encoder.attentions[0]
    half, single = torch.zeros(2, 96, dtype=torch.bfloat16), torch.zeros(2, 96)
    assert attention.can_pack(half, 0.0) and attention.can_pack(half.half(), 0.0)
    assert not attention.can_pack(single, 0.0)          # fp32: SDPA
    assert not attention.can_pack(half, 0.1)            # attention dropout in training: SDPA (varlen has none)
    odd = enable_packed_attention(AlbertModel(config("all", hidden_size=24, num_heads=4)), reference_varlen)
    assert not odd.encoder.attentions[0].can_pack(torch.zeros(2, 72, dtype=torch.bfloat16), 0.0)  # head size 6
    assert not AlbertModel(config("all")).encoder.attentions[0].can_pack(half, 0.0)  # not switched on


def test_packed_attention_is_switched_on_for_flash_capable_gpus_only(monkeypatch):
    assert not packed_attention_supported("cpu")
    assert not any(m.packed_kernel for m in prepare_model(AlbertModel(config("all")), precision="bf16",
                                                          device=torch.device("cpu")).modules()
                   if isinstance(m, Attention))
    monkeypatch.setattr(albert, "varlen_attn", reference_varlen)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, supported in (((7, 5), False), ((8, 0), True), ((9, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert packed_attention_supported("cuda") == supported
    model = prepare_model(AlbertModel(config("all")), precision="bf16", device=torch.device("cuda"),
                          fast_paths="off")  # compiled models get it too
    assert all(m.packed_kernel is reference_varlen for m in model.modules() if isinstance(m, Attention))
    monkeypatch.setattr(albert, "varlen_attn", None)  # a torch without varlen_attn
    assert not packed_attention_supported("cuda")


class Spy(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.seen = model, []

    def forward(self, **inputs):
        self.seen.append(sorted(inputs))
        return self.model(**inputs)


def test_pretraining_passes_no_mask_for_a_full_batch():
    """A batch without padding (N == B * T, a shape) gets neither mask nor packing: SDPA's fastest kernel."""
    torch.manual_seed(0)
    spy = Spy(AlbertForPreTraining(config("all")))
    batch = {k: v for k, v in padded_batch().items()}
    full = dict(batch, attention_mask=torch.ones_like(batch["attention_mask"]))
    full["token_index"] = token_index(full["attention_mask"])
    batch["token_index"] = token_index(batch["attention_mask"])
    objective = PretrainingObjective()
    denominators = objective.denominators([full])
    loss, _ = objective.forward(spy, full, denominators)
    objective.forward(spy, batch, objective.denominators([batch]))
    assert "attention_mask" not in spy.seen[0] and "token_index" not in spy.seen[0]
    assert "attention_mask" in spy.seen[1] and "token_index" in spy.seen[1]
    masked = spy.model(**{k: full[k] for k in ("input_ids", "attention_mask", "token_type_ids", "masked_lm_positions",
                                                "masked_lm_ids", "masked_lm_weights", "sentence_order_label")})
    mlm, sop = masked["mlm_loss"], masked["sop_loss"]
    torch.testing.assert_close(loss, mlm + sop, atol=1e-5, rtol=1e-5)  # the same numbers as with the full mask
    without = PretrainingObjective(skip_padding=False)  # CUDA-graph modes: no packing, but still no mask
    without.forward(spy, full, denominators)
    assert "attention_mask" not in spy.seen[2]


def test_model_speed_calls_each_variant_as_its_library_is_called():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import model_speed

    cfg = config("all")
    full, padded = model_speed.make_inputs(cfg, 3, 32), model_speed.make_inputs(cfg, 3, 32, real=0.6)
    assert len(full["token_index"]) == 96 and len(padded["token_index"]) < 96
    keys = {name: set(model_speed.variant_inputs(name, full)) for name in model_speed.VARIANTS}
    assert not {"attention_mask", "token_index"} & (keys["ours"] | keys["ours-compiled"] | keys["ours-cudagraphs"])
    assert "attention_mask" in keys["ours-padded"] and "token_index" not in keys["ours-padded"]
    assert "attention_mask" in keys["hf"] and "attention_mask" in keys["hf-compiled"]
    assert "attention_mask" not in keys["hf-unmasked-compiled"] and "labels" in keys["hf-unmasked-compiled"]
    keys = {name: set(model_speed.variant_inputs(name, padded)) for name in model_speed.VARIANTS}
    assert {"attention_mask", "token_index"} <= keys["ours"] and {"attention_mask", "token_index"} <= keys["ours-compiled"]
    assert "attention_mask" in keys["ours-cudagraphs"] and "token_index" not in keys["ours-cudagraphs"]
    assert "attention_mask" in keys["hf-unmasked-compiled"]  # padding: the mask is needed


def test_attention_speed_needs_a_gpu():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_speed.py"
    done = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True)
    assert done.returncode == 2 and "needs --device cuda and a GPU" in done.stderr and "Traceback" not in done.stderr
