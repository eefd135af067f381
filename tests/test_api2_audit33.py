"""Session 33, transformers' positional order cannot be misread.

Found: transformers' forwards take `(input_ids, attention_mask, token_type_ids, position_ids, ...)` positionally; ours
took `rows` 4th in AlbertModel, `masked_lm_positions` in AlbertForPreTraining, `labels` / `start_positions` in the
heads. So `model(ids, mask, types, pos)` written for transformers read `pos` as rows (AlbertModel: a (B, T, H) output
with its rows reordered, no error) or as masked-LM positions / labels. Now everything after `token_type_ids` is a
keyword in every class but google's `AlbertForSquadV2` (whose 4th slot, `start_positions`, refuses a lone tensor):
a 4th positional argument is Python's TypeError, and the keyword calls give transformers' results."""
from __future__ import annotations

import inspect

import pytest
import torch

from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from test_model_audit33 import OURS, B, T, batch

KEYWORD_ONLY = [name for name in OURS if name != "AlbertForSquadV2"]


def _inputs(name):
    ids, mask, types, _ = batch()
    positions = torch.stack([torch.randperm(T, generator=torch.Generator().manual_seed(b)) for b in range(B)])
    if name == "AlbertForMultipleChoice":   # (B, C, T): three choices of one question
        ids, mask, types, positions = (t[None] for t in (ids, mask, types, positions))
    return ids, mask, types, positions       # positions inside 0..T-1: a valid `rows` / masked_lm_positions too


@pytest.mark.parametrize("name", KEYWORD_ONLY)
def test_only_input_ids_attention_mask_and_token_type_ids_are_positional(name):
    params = list(inspect.signature(OURS[name].forward).parameters.values())[1:]   # after self
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional == ["input_ids", "attention_mask", "token_type_ids"]
    assert not any(p.kind == p.VAR_POSITIONAL for p in params)


@pytest.mark.parametrize("name", KEYWORD_ONLY)
def test_a_transformers_style_4th_positional_argument_is_a_type_error(tiny_config, name):
    """`model(ids, mask, types, position_ids)` as transformers takes it: a TypeError, never positions read as rows,
    masked-LM positions or labels."""
    model = OURS[name](tiny_config).eval()
    ids, mask, types, positions = _inputs(name)
    with torch.no_grad(), pytest.raises(TypeError, match=r"takes from \d to 4 positional arguments but 5 were given"):
        model(ids, mask, types, positions)
    with torch.no_grad():   # as a keyword it is position_ids
        model(ids, mask, types, position_ids=positions)


def test_the_squad_v2_head_refuses_a_lone_4th_argument(tiny_config):
    """google's head keeps its positional labels (start, end, is_impossible), but one tensor alone there is an error
    (it never runs with positions read as starts)."""
    model = heads.AlbertForSquadV2(tiny_config).eval()
    ids, mask, types, positions = _inputs("AlbertForSquadV2")
    with torch.no_grad(), pytest.raises(ValueError, match="give start_positions, end_positions and is_impossible"):
        model(ids, mask, types, positions)


def test_the_backbones_rows_and_token_index_still_work_as_keywords(tiny_config):
    """What pretraining and the ablation's sentence-head pass (`rows`: [CLS] and the masked slots; `token_index`):
    the padded model's rows."""
    model = AlbertModel(tiny_config).eval()
    ids, mask, types, _ = batch()
    rows = torch.tensor([[0, 3, 5], [0, 1, 2], [0, 6, 4]])
    index = mask.flatten().nonzero().squeeze(1)
    with torch.no_grad():
        full = model(ids, mask, types)
        some = model(ids, mask, types, rows=rows, token_index=index)
    expected = full.last_hidden_state.gather(1, rows[..., None].expand(-1, -1, 32))   # (B, R, H)
    torch.testing.assert_close(some.last_hidden_state, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(some.pooler_output, full.pooler_output, atol=1e-5, rtol=1e-5)


def test_pretraining_keywords_after_token_type_ids_still_work(tiny_config):
    model = AlbertForPreTraining(tiny_config).eval()
    ids, mask, types, _ = batch()
    slots = torch.tensor([[1, 4], [2, 3], [5, 6]])
    index = mask.flatten().nonzero().squeeze(1)
    with torch.no_grad():
        sparse = model(ids, mask, types, masked_lm_positions=slots, masked_lm_ids=ids.gather(1, slots),
                       masked_lm_weights=torch.ones(3, 2), sentence_order_label=torch.tensor([0, 1, 0]),
                       token_index=index)
        dense = model(ids, mask, types)
    assert torch.isfinite(sparse.loss)
    torch.testing.assert_close(sparse.prediction_logits.view(3, 2, -1),
                               dense.prediction_logits.gather(1, slots[..., None].expand(-1, -1, 99)),
                               atol=1e-4, rtol=1e-4)


transformers = pytest.importorskip("transformers")

HF = {"AlbertModel": "last_hidden_state", "AlbertForPreTraining": "prediction_logits",
      "AlbertForMaskedLM": "logits", "AlbertForSequenceClassification": "logits",
      "AlbertForTokenClassification": "logits", "AlbertForQuestionAnswering": "start_logits",
      "AlbertForMultipleChoice": "logits"}


@pytest.mark.parametrize("name", list(HF))
def test_transformers_positional_call_equals_ours_with_the_keyword(tmp_path, name):
    """transformers' `model(ids, mask, types, pos)` gives what ours gives for `model(ids, mask, types,
    position_ids=pos)`; ours refuses the positional form (above)."""
    from test_model_audit33 import hf_pair

    two = name in ("AlbertForPreTraining", "AlbertForQuestionAnswering")   # SOP and the span head have 2 outputs
    hf, ours = hf_pair(name, tmp_path, num_labels=2 if two else 3)
    ids, mask, types, positions = _inputs(name)
    with torch.no_grad():
        theirs = hf(ids, mask, types, positions)
        got = ours(ids, mask, types, position_ids=positions)
        plain = ours(ids, mask, types)
    key = HF[name]
    torch.testing.assert_close(got[key], theirs[key], atol=1e-5, rtol=0)
    assert not torch.allclose(plain[key], theirs[key], atol=1e-3)   # the positions mattered
    if name == "AlbertForQuestionAnswering":
        torch.testing.assert_close(got.end_logits, theirs.end_logits, atol=1e-5, rtol=0)
    with pytest.raises(TypeError):
        ours(ids, mask, types, positions)
