"""Model structure: the sharing plan, unique parameters, losses, checkpoints, activation checkpointing."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from albertlm.errors import UserError
from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel, enable_activation_checkpointing, sharing_plan


@pytest.mark.parametrize("sharing,groups,inner,expected", [
    ("all", 1, 1, [(0, 0)] * 5),
    ("none", 1, 1, [(i, i) for i in range(5)]),
    ("attention", 1, 1, [(0, i) for i in range(5)]),
    ("ffn", 1, 1, [(i, 0) for i in range(5)]),
    ("all", 5, 1, [(i, i) for i in range(5)]),
    ("none", 5, 1, [(i, i) for i in range(5)]),  # N ignored
    ("all", 1, 2, [(0, 0), (1, 1)] * 5),
])
def test_sharing_plan_l5(tiny_config, sharing, groups, inner, expected):
    assert sharing_plan(tiny_config.replace(sharing=sharing, num_groups=groups, inner_group_num=inner)) == expected


def test_sharing_plan_groups_follow_google_rule(tiny_config):
    cfg = tiny_config.replace(num_layers=6, num_groups=3, sharing="attention")  # layer l in group l * N // L
    assert sharing_plan(cfg) == [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)]
    cfg = cfg.replace(sharing="ffn")
    assert sharing_plan(cfg) == [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)]


@pytest.mark.parametrize("sharing,attentions,ffns", [("all", 1, 1), ("attention", 1, 5), ("ffn", 5, 1), ("none", 5, 5)])
def test_encoder_holds_unique_modules_and_no_aliases(tiny_config, sharing, attentions, ffns):
    model = AlbertForPreTraining(tiny_config.replace(sharing=sharing))
    assert (len(model.albert.encoder.attentions), len(model.albert.encoder.ffns)) == (attentions, ffns)
    state = model.state_dict()
    pointers = [t.data_ptr() for t in state.values()]
    assert len(set(pointers)) == len(pointers)  # safetensors rejects aliased tensors
    assert sum(t.numel() for t in state.values()) == sum(p.numel() for p in model.parameters())


def test_factorized_embedding_and_no_projection_when_e_equals_h(tiny_config):
    model = AlbertModel(tiny_config)
    assert model.embeddings.word.weight.shape == (99, 16) and model.embeddings.project.weight.shape == (32, 16)
    assert AlbertModel(tiny_config.replace(embedding_size=32)).embeddings.project is None


def batch(B=4, T=13, V=99, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    positions = torch.tensor([[1, 3, 0], [2, 5, 7], [4, 0, 0], [6, 8, 10]])
    weights = (positions > 0).float()
    weights[0, 0] = 1.0  # position 0 in row 0 is a real prediction, not padding
    return ids, mask, positions, torch.randint(5, V, positions.shape, generator=g), weights


def test_masked_positions_loss_against_reference(tiny_config):
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config).eval()
    ids, mask, pos, targets, weights = batch()
    sop = torch.tensor([0, 1, -100, 1])
    out = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights,
                sentence_order_label=sop)
    full = model(ids, mask).prediction_logits  # (B, T, V): reference computed at every position
    rows = full.gather(1, pos[..., None].expand(-1, -1, 99))  # (B, P, V)
    ce = F.cross_entropy(rows.flatten(0, 1), targets.flatten(), reduction="none")
    mlm = (ce * weights.flatten()).sum() / weights.sum()
    sop_ref = F.cross_entropy(out.sop_logits[[0, 1, 3]], sop[[0, 1, 3]])
    torch.testing.assert_close(out.mlm_loss, mlm)
    torch.testing.assert_close(out.sop_loss, sop_ref)
    torch.testing.assert_close(out.loss, mlm + sop_ref)
    assert out.prediction_logits.shape == (int(weights.gt(0).sum()), 99)
    # transformers' convention gives the same MLM loss
    labels = torch.full_like(ids, -100)
    labels.scatter_(1, pos, torch.where(weights > 0, targets, -100))
    torch.testing.assert_close(model(ids, mask, labels=labels).mlm_loss, mlm)
    accuracy = (rows.argmax(-1) == targets).float()[weights > 0].mean()
    torch.testing.assert_close(out.mlm_accuracy, accuracy)


def test_no_sentence_task_is_mlm_only(tiny_config):
    model = AlbertForPreTraining(tiny_config)
    ids, mask, pos, targets, weights = batch()
    out = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights,
                sentence_order_label=torch.full((4,), -100))
    assert out.sop_loss is None and torch.equal(out.loss, out.mlm_loss)


def test_padding_does_not_change_real_tokens(tiny_config):
    model = AlbertModel(tiny_config).eval()
    ids = torch.randint(0, 99, (1, 7))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 7), torch.zeros(1, 4)], 1).long()
    short, long = model(ids).last_hidden_state, model(padded, mask).last_hidden_state
    torch.testing.assert_close(long[:, :7], short, atol=1e-5, rtol=0)


def test_dropout_only_in_training(tiny_config):
    model = AlbertModel(tiny_config.replace(hidden_dropout=0.3, attention_dropout=0.3))
    ids = torch.randint(0, 99, (2, 9))
    assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
    model.eval()
    assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


def test_activation_checkpointing_gives_same_gradients(tiny_config):
    torch.manual_seed(0)
    ids, mask, pos, targets, weights = batch()
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = AlbertForPreTraining(tiny_config.replace(sharing="none"))
        if checkpointed:
            enable_activation_checkpointing(model)
        model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 30
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name])


def test_save_and_load_between_classes(tiny_config, tmp_path):
    torch.manual_seed(0)
    pre = AlbertForPreTraining(tiny_config.replace(num_groups=5, inner_group_num=2)).eval()
    pre.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    again = AlbertForPreTraining.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 99, (2, 9))
    assert torch.equal(again(ids).prediction_logits, pre(ids).prediction_logits)
    base = AlbertModel.from_pretrained(tmp_path).eval()
    assert torch.equal(base(ids).pooler_output, pre.albert(ids).pooler_output)
    cls = heads.AlbertForSequenceClassification.from_pretrained(tmp_path, num_labels=3)
    assert cls.classifier.out_features == 3 and cls.config.num_labels == 3
    assert torch.equal(cls.albert.embeddings.word.weight, pre.albert.embeddings.word.weight)
    base.save_pretrained(tmp_path / "base")  # a bare backbone feeds a head model too
    heads.AlbertForQuestionAnswering.from_pretrained(tmp_path / "base")


def test_loading_a_different_backbone_fails_clearly(tiny_config, tmp_path):
    AlbertForPreTraining(tiny_config).save_pretrained(tmp_path)
    with pytest.raises(UserError, match="shape"):
        AlbertForPreTraining.from_pretrained(tmp_path, ffn_size=38)
    with pytest.raises(UserError, match="lacks model weights"):
        AlbertForPreTraining.from_pretrained(tmp_path, sharing="none")
    with pytest.raises(UserError, match="no config.json"):
        AlbertModel.from_pretrained(tmp_path / "nowhere")


@pytest.mark.parametrize("name,shape", [("AlbertForSequenceClassification", (2, 2)),
                                        ("AlbertForTokenClassification", (2, 9, 2)),
                                        ("AlbertForMaskedLM", (2, 9, 99))])
def test_task_head_shapes_and_losses(tiny_config, name, shape):
    model = getattr(heads, name)(tiny_config)
    ids = torch.randint(0, 99, (2, 9))
    labels = torch.zeros(shape[:-1], dtype=torch.long)
    out = model(ids, labels=labels)
    assert out.logits.shape == shape and out.loss.ndim == 0
    out.loss.backward()


def test_regression_and_multiple_choice(tiny_config):
    reg = heads.AlbertForSequenceClassification(tiny_config.replace(num_labels=1))
    out = reg(torch.randint(0, 99, (3, 9)), labels=torch.tensor([0.1, 2.0, 3.0]))
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), torch.tensor([0.1, 2.0, 3.0])))
    mc = heads.AlbertForMultipleChoice(tiny_config)
    out = mc(torch.randint(0, 99, (2, 4, 9)), labels=torch.tensor([1, 3]))
    assert out.logits.shape == (2, 4)
    qa = heads.AlbertForQuestionAnswering(tiny_config)
    out = qa(torch.randint(0, 99, (2, 9)), start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
    assert out.start_logits.shape == out.end_logits.shape == (2, 9) and out.loss.ndim == 0


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_fused_cpu_linears_match_plain_ops(tiny_config, monkeypatch, dropout):
    """The oneDNN-fused bias / residual / activation path (fp32 CPU) equals the plain ops, forward and
    backward, in training and inference."""
    from albertlm.model import fused

    if not fused.AVAILABLE:
        pytest.skip("oneDNN not available")
    ids, mask, pos, targets, weights = batch()
    results = []
    for available in (True, False):
        monkeypatch.setattr(fused, "AVAILABLE", available)
        torch.manual_seed(0)
        model = AlbertForPreTraining(tiny_config.replace(hidden_dropout=dropout, activation="gelu"))
        torch.manual_seed(1)
        out = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights,
                    sentence_order_label=torch.tensor([0, 1, 1, 0]))
        out.loss.backward()
        with torch.inference_mode():
            logits = model.eval()(ids, mask).prediction_logits
        results.append((out.loss, logits, {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, logits_a, grads_a), (loss_b, logits_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits_a, logits_b, atol=1e-5, rtol=1e-5)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4)


def test_fused_linears_under_bf16_autocast_match_plain_ops(tiny_config, monkeypatch):
    from albertlm.model import fused

    if not fused.BF16:
        pytest.skip("this CPU/torch build has no oneDNN bf16 GEMM (AVX-512 or AMX needed)")
    ids, mask, pos, targets, weights = batch()
    results = []
    for available in (True, False):
        monkeypatch.setattr(fused, "AVAILABLE", available)
        torch.manual_seed(0)
        model = AlbertForPreTraining(tiny_config)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights)
        out.loss.backward()
        results.append((out.prediction_logits.float(), model.albert.encoder.ffns[0].up.weight.grad))
    (logits_a, grad_a), (logits_b, grad_b) = results
    assert grad_a.dtype == torch.float32
    torch.testing.assert_close(logits_a, logits_b, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(grad_a, grad_b, atol=2e-2 * grad_b.abs().max().item(), rtol=0.05)


def test_short_bf16_training_attention_runs_in_fp32_with_same_result():
    from albertlm.model import fused

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=g).bfloat16().requires_grad_() for _ in range(3))
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., 6:] = False
    y = fused.attention(q, k, v, mask, 0.0)
    assert y.dtype == torch.bfloat16
    reference = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(y.float(), reference, atol=1e-2, rtol=1e-2)
    y.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16 and q.grad.abs().sum() > 0


def test_bf16_autocast_without_onednn_bf16_takes_the_plain_ops(tiny_config, monkeypatch):
    """On CPUs without bf16 GEMMs (AVX2 only) the fused path must not be chosen: it cannot run there."""
    from albertlm.model import fused

    monkeypatch.setattr(fused, "BF16", False)
    ids, mask, pos, targets, weights = batch()
    model = AlbertForPreTraining(tiny_config)
    calls = []
    monkeypatch.setattr(fused._BiasLinear, "apply", lambda *a: calls.append(a))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights)
    out.loss.backward()
    assert calls == [] and torch.isfinite(out.loss)
