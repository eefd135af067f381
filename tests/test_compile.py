"""No host-device sync in the forward: `torch.compile(model, fullgraph=True)` captures the whole
pretraining forward (and AOTAutograd its backward) in one graph, and gives the eager results. The
backends used here trace without generating code, so the test is fast and needs no C++ compiler."""
from __future__ import annotations

import copy

import pytest
import torch

from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, enable_activation_checkpointing


def pretraining_batch(B=3, T=11, V=99, P=3):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0                                   # a padded row: the mask is always applied
    positions = torch.randint(1, 7, (B, P), generator=g)
    weights = torch.ones(B, P)
    weights[2, 2] = 0                                 # a padding slot
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=(torch.arange(T) >= 5).long().expand(B, T),
                masked_lm_positions=positions, masked_lm_ids=torch.randint(5, V, (B, P), generator=g),
                masked_lm_weights=weights, sentence_order_label=torch.tensor([0, 1, -100]))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_the_whole_pretraining_step_is_one_graph(tiny_config, checkpointing):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config)
    if checkpointing:
        enable_activation_checkpointing(model)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # a graph break or sync raises
    inputs = pretraining_batch()
    out, expected = compiled(**inputs), reference(**inputs)
    for key in ("loss", "mlm_loss", "sop_loss", "mlm_accuracy", "prediction_logits", "sop_logits"):
        torch.testing.assert_close(out[key], expected[key], msg=key)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_task_heads_compile_without_graph_breaks(tiny_config):
    torch._dynamo.reset()
    model = heads.AlbertForSequenceClassification(tiny_config).eval()
    inputs = pretraining_batch()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(inputs["input_ids"], inputs["attention_mask"]).logits,
                                   model(inputs["input_ids"], inputs["attention_mask"]).logits)
