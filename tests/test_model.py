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
    # all B * P slots in google's order, padding slots included (fixed shape: no sync, one compiled graph);
    # the last block ran only at [CLS] and the masked rows, which gives the full computation's values
    torch.testing.assert_close(out.prediction_logits, rows.flatten(0, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.sop_logits, model(ids, mask).sop_logits, atol=1e-6, rtol=1e-6)
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
    assert out.sop_loss == 0 and torch.equal(out.loss, out.mlm_loss)  # weighted out, not filtered (no sync)


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


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_last_block_only_at_read_rows_gives_the_full_gradients(tiny_config, sharing):
    """Pretraining narrows the last block to [CLS] + the masked rows: loss and every gradient must equal the
    full computation's (all T positions through every block, then gathered)."""
    ids, mask, pos, targets, weights = batch()
    sop = torch.tensor([0, 1, 1, 0])
    results = []
    for narrowed in (True, False):
        torch.manual_seed(0)
        model = AlbertForPreTraining(tiny_config.replace(sharing=sharing))
        if narrowed:
            loss = model(ids, mask, masked_lm_positions=pos, masked_lm_ids=targets, masked_lm_weights=weights,
                         sentence_order_label=sop).loss
        else:
            base = model.albert(ids, mask)
            hidden = base.last_hidden_state.gather(1, pos[..., None].expand(-1, -1, 32)).flatten(0, 1)
            logits = model.mlm_head(hidden, model.albert.embeddings.word.weight)
            mlm = (F.cross_entropy(logits, targets.flatten(), reduction="none") * weights.flatten()).sum() / weights.sum()
            loss = mlm + F.cross_entropy(model.sop_head(base.pooler_output), sop)
        loss.backward()
        results.append((loss, {n: p.grad for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b)
    for name, grad in grads_b.items():
        torch.testing.assert_close(grads_a[name], grad, atol=1e-6, rtol=1e-5, msg=name)
