"""Session 33, model API as a transformers user meets it: `position_ids` and `inputs_embeds` on every forward.

Found: transformers' AlbertModel and its heads take `position_ids` (custom positions) and `inputs_embeds` (vectors in
place of the word embeddings: adversarial training, prompt tuning); ours refused both with a TypeError. Now every class
takes them as keywords, with transformers' results (random transformers models loaded into ours), `inputs_embeds`
equal to the word embeddings of `input_ids` gives exactly the `input_ids` path, and both or neither of `input_ids`
and `inputs_embeds` is a ModelInputError (a ValueError, as transformers'). The whole model still compiles as one
graph, and the fused CPU fast paths give the plain results with the new inputs."""
from __future__ import annotations

import copy

import pytest
import torch

from albertlm.model import fast_paths, fused, heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from albertlm.model.inputs import ModelInputError

B, T, V, E = 3, 11, 99, 16


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1:, T - 4:] = 0
    types = (torch.arange(T) >= 5).long().expand(B, T).clone()
    positions = torch.randint(0, 64, (B, T), generator=g)   # anything below max_position_embeddings
    return ids, mask, types, positions


def word(model):
    backbone = getattr(model, "albert", model)
    return backbone.embeddings.word


OURS = {"AlbertModel": AlbertModel, "AlbertForPreTraining": AlbertForPreTraining,
        **{name: getattr(heads, name) for name in ("AlbertForMaskedLM", "AlbertForSequenceClassification",
                                                   "AlbertForTokenClassification", "AlbertForQuestionAnswering",
                                                   "AlbertForSquadV2", "AlbertForMultipleChoice")}}


def tensors(out):
    return {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("name", list(OURS))
def test_inputs_embeds_of_the_word_embeddings_give_exactly_the_input_ids_path(tiny_config, name):
    torch.manual_seed(0)
    model = OURS[name](tiny_config).eval()
    ids, mask, types, positions = batch()
    if name == "AlbertForMultipleChoice":   # (B, C, T): three choices of one question
        ids, mask, types, positions = (t[None] for t in (ids, mask, types, positions))
    with torch.no_grad():
        embeds = word(model)(ids)
        for extra in ({}, {"position_ids": positions}):
            expected = tensors(model(ids, mask, types, **extra))
            got = tensors(model(attention_mask=mask, token_type_ids=types, inputs_embeds=embeds, **extra))
            assert got.keys() == expected.keys() and got
            for key in expected:
                assert torch.equal(got[key], expected[key]), (name, key, extra)
        # the positions 0..T-1 given explicitly are the default
        default = tensors(model(ids, mask, types))
        explicit = tensors(model(ids, mask, types, position_ids=torch.arange(ids.shape[-1]).expand(ids.shape)))
        for key in default:
            assert torch.equal(explicit[key], default[key]), (name, key)
        # custom positions change the result (the argument is not ignored)
        key = next(iter(default))
        assert not torch.allclose(tensors(model(ids, mask, types, position_ids=positions))[key], default[key])


transformers = pytest.importorskip("transformers")


def hf_pair(name, tmp_path, num_labels=3):
    cfg = transformers.AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=32, num_attention_heads=4,
                                    intermediate_size=37, max_position_embeddings=64, num_hidden_layers=6,
                                    num_hidden_groups=3, inner_group_num=2, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                                    num_labels=num_labels)
    torch.manual_seed(0)
    hf = getattr(transformers, name)(cfg).eval()
    with torch.no_grad():   # non-trivial LayerNorms, biases and position / token-type tables
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(tmp_path / name)
    return hf, OURS[name].from_pretrained(tmp_path / name).eval()


@pytest.mark.parametrize("name,key", [("AlbertModel", "last_hidden_state"), ("AlbertForMaskedLM", "logits"),
                                      ("AlbertForSequenceClassification", "logits"),
                                      ("AlbertForPreTraining", "prediction_logits")])
def test_position_ids_and_inputs_embeds_match_transformers(tmp_path, name, key):
    hf, ours = hf_pair(name, tmp_path, num_labels=2 if name == "AlbertForPreTraining" else 3)
    ids, mask, types, positions = batch()
    embeds = torch.randn(B, T, E, generator=torch.Generator().manual_seed(3))   # any vectors, not only the table's
    cases = [dict(input_ids=ids, position_ids=positions), dict(input_ids=ids, position_ids=positions[:1]),
             dict(inputs_embeds=embeds), dict(inputs_embeds=embeds, position_ids=positions),
             dict(input_ids=ids, position_ids=positions, token_type_ids=None),   # None: segment 0, as transformers
             dict(inputs_embeds=embeds, position_ids=positions, token_type_ids=types)]
    with torch.no_grad():
        for kwargs in cases:
            theirs, got = hf(attention_mask=mask, **kwargs), ours(attention_mask=mask, **kwargs)
            torch.testing.assert_close(got[key], theirs[key], atol=1e-5, rtol=0, msg=str(list(kwargs)))
            if name == "AlbertModel":
                torch.testing.assert_close(got.pooler_output, theirs.pooler_output, atol=1e-5, rtol=0)


def test_inputs_embeds_carry_gradients_as_in_transformers(tmp_path):
    """Adversarial training perturbs the embeddings: the loss's gradient with respect to them is transformers'."""
    hf, ours = hf_pair("AlbertForSequenceClassification", tmp_path)
    ids, mask, types, _ = batch()
    labels = torch.tensor([0, 2, 1])
    grads = []
    for model in (hf, ours):
        embeds = torch.randn(B, T, E, generator=torch.Generator().manual_seed(4)).requires_grad_()
        model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=types, labels=labels).loss.backward()
        grads.append(embeds.grad)
    assert grads[1] is not None and grads[1].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("name", list(OURS))
def test_both_or_neither_of_input_ids_and_inputs_embeds_is_a_clear_error(tiny_config, name, tmp_path):
    model = OURS[name](tiny_config).eval()
    ids, mask, types, _ = batch()
    if name == "AlbertForMultipleChoice":
        ids, mask, types = (t[None] for t in (ids, mask, types))
    embeds = word(model)(ids).detach()
    with pytest.raises(ValueError, match=r"^give input_ids or inputs_embeds, not both") as both:
        model(ids, mask, types, inputs_embeds=embeds)
    with pytest.raises(ValueError, match=r"^give input_ids \(or inputs_embeds\): the model got neither") as neither:
        model(attention_mask=mask, token_type_ids=types)
    assert isinstance(both.value, ModelInputError) and isinstance(neither.value, ModelInputError)
    # transformers refuses both too, with a ValueError
    hf = transformers.AlbertModel(transformers.AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=32,
                                                            num_attention_heads=4, intermediate_size=37,
                                                            num_hidden_layers=1))
    with pytest.raises(ValueError):
        hf(ids.reshape(-1, T), inputs_embeds=word(model)(ids.reshape(-1, T)))


def test_bad_position_ids_and_inputs_embeds_are_named(tiny_config):
    model = AlbertModel(tiny_config).eval()
    ids, mask, types, positions = batch()
    embeds = model.embeddings.word(ids).detach()
    bad = [
        (dict(input_ids=ids, position_ids=positions[:, :5]), r"position_ids has shape \(3, 5\), input_ids \(3, 11\)"),
        (dict(input_ids=ids, position_ids=positions.float()), r"position_ids must hold integer ids"),
        (dict(input_ids=ids, position_ids=positions.clone().fill_(64)),
         r"position_ids holds 64, outside this model's max_position_embeddings=64"),
        (dict(inputs_embeds=torch.zeros(B, T, 32)), r"inputs_embeds must be floating-point vectors \(batch, tokens, "
                                                    r"E\), E = the model's embedding_size=16.*\(3, 11, 32\)"),
        (dict(inputs_embeds=ids), r"inputs_embeds must be floating-point vectors"),
        (dict(inputs_embeds=embeds, attention_mask=mask[:, :4]),
         r"attention_mask has shape \(3, 4\), inputs_embeds \(3, 11, 16\): they must match"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ModelInputError, match=message):
            model(**kwargs)
    # transformers allows more tokens than position embeddings where the positions are given: so do we
    long_ids = torch.randint(0, V, (1, 70))
    with torch.no_grad():
        out = model(long_ids, position_ids=torch.arange(70)[None] % 64)
    assert out.last_hidden_state.shape == (1, 70, 32)
    with pytest.raises(ModelInputError, match="more than max_position_embeddings=64"):
        model(long_ids)


def test_multiple_choice_position_ids_per_choice_or_shared(tiny_config):
    model = heads.AlbertForMultipleChoice(tiny_config).eval()
    ids, mask, types, positions = (t[None] for t in batch())   # (1, 3, T)
    with torch.no_grad():
        per_choice = model(ids, mask, types, position_ids=positions).logits
        flat = model.albert(ids[0], mask[0], types[0], position_ids=positions[0]).pooler_output
        torch.testing.assert_close(per_choice, model.classifier(flat).view(1, 3))
        shared = model(ids, mask, types, position_ids=positions[0, :1]).logits    # (1, T): every choice
        each = model(ids, mask, types, position_ids=positions[0, :1].expand(1, 3, T)).logits   # (1, C, T)
        torch.testing.assert_close(shared, each)


def test_the_packed_path_takes_inputs_embeds_and_position_ids(tiny_config):
    """`token_index` (padding skipped) with the new inputs: the padded model's results at the real tokens."""
    model = AlbertModel(tiny_config).eval()
    ids, mask, types, positions = batch()
    index = mask.flatten().nonzero().squeeze(1)
    with torch.no_grad():
        embeds = model.embeddings.word(ids)
        padded = model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=types, position_ids=positions)
        packed = model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=types, position_ids=positions,
                       token_index=index)
    real = mask.bool()
    torch.testing.assert_close(packed.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=1e-5)


def test_the_model_compiles_as_one_graph_with_inputs_embeds_and_position_ids(tiny_config):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config.replace(num_layers=2))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")   # a graph break raises
    ids, mask, types, positions = batch()
    slots = torch.tensor([[1, 4], [2, 3], [5, 6]])
    kwargs = dict(attention_mask=mask, token_type_ids=types, position_ids=positions, masked_lm_positions=slots,
                  masked_lm_ids=ids.gather(1, slots), sentence_order_label=torch.tensor([0, 1, 0]))
    embeds = [m.albert.embeddings.word(ids) for m in (model, reference)]
    out, expected = compiled(inputs_embeds=embeds[0], **kwargs), reference(inputs_embeds=embeds[1], **kwargs)
    torch.testing.assert_close(out.loss, expected.loss)
    torch.testing.assert_close(out.prediction_logits, expected.prediction_logits)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_fast_paths_give_the_plain_results_with_the_new_inputs(tiny_config, monkeypatch, dtype):
    """Each path forced (`swap_in`), as tests/test_fast_paths.py does: the loss, and the gradients of the weights and
    of `inputs_embeds`, with and without custom positions, are the plain model's."""
    if not (fused.BF16 if dtype == torch.bfloat16 else fused.AVAILABLE):
        pytest.skip("this CPU / torch build has no oneDNN GEMM in this dtype")
    torch.manual_seed(0)
    plain = heads.AlbertForSequenceClassification(tiny_config.replace(num_layers=2))
    fast = fast_paths.swap_in(copy.deepcopy(plain), dtype)
    calls = []
    real = fused._BiasLinear.apply
    monkeypatch.setattr(fused._BiasLinear, "apply", lambda *a: calls.append(1) or real(*a))
    ids, mask, types, positions = batch()
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=5e-2)
    for extra in (dict(position_ids=positions), dict(position_ids=positions[:1]), {}):
        results = []
        for model in (fast, plain):
            model.zero_grad()
            embeds = model.albert.embeddings.word(ids).detach().requires_grad_()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                loss = model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=types,
                             labels=torch.tensor([0, 1, 1]), **extra).loss
            loss.backward()
            results.append((loss, embeds.grad, model.albert.encoder.ffns[0].up.weight.grad))
        for got, expected in zip(*results):
            torch.testing.assert_close(got.float(), expected.float(), **tol)
    assert calls, "the fused kernels did not run"
