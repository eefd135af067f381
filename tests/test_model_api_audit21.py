"""The model's Python API as a transformers user meets it (audit, session 21), transformers' AlbertModel with
random weights the oracle. Each test failed before its fix.

`from_pretrained` returned a model in training mode (transformers': eval), so the first forward of a v1 checkpoint
ran its dropout and differed from transformers' on the same weights; `output_hidden_states=True` was a TypeError;
`out[0]` was `KeyError: 0` (and the entries are not in transformers' order); `num_parameters()` did not exist;
`from_pretrained(d, dtype=...)` / `torch_dtype=...` were "unknown ModelConfig field(s)"; a Hub name such as
"albert-base-v2" was "not a model directory" with no word that albertlm downloads nothing.
"""
from __future__ import annotations

import pytest
import torch

from albertlm.config import ModelConfig
from albertlm.errors import UserError
from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from albertlm.model.io import load_backbone

transformers = pytest.importorskip("transformers")

# four layers in two groups of two inner blocks each: transformers 5 records hidden_states per block
SHAPE = dict(vocab_size=40, embedding_size=8, hidden_size=16, num_attention_heads=2, intermediate_size=20,
             max_position_embeddings=24, num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)


def hf_saved(tmp_path, name: str = "AlbertModel", dropout: float = 0.3, **changes):
    """(transformers' model of class `name`, random non-trivial weights, saved to tmp_path / "hf", in eval mode)."""
    cfg = transformers.AlbertConfig(**{**SHAPE, "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout,
                                       "classifier_dropout_prob": dropout, "num_labels": 2, **changes})
    torch.manual_seed(0)
    model = getattr(transformers, name)(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path / "hf")
    return model.eval()


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 40, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    return ids, mask


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------- eval mode
def test_from_pretrained_is_in_eval_mode_as_transformers(tmp_path, one_thread):
    """A dropout-0.3 transformers directory: transformers' from_pretrained gives eval mode, ours gave training
    mode, so the same call on the same weights gave another (and each time another) output."""
    hf_saved(tmp_path)
    theirs = transformers.AlbertModel.from_pretrained(tmp_path / "hf")
    ours = AlbertModel.from_pretrained(tmp_path / "hf")
    assert not theirs.training and not ours.training
    assert not any(m.training for m in ours.modules())
    ids, mask = batch()
    with torch.no_grad():
        close(ours(ids, mask).last_hidden_state, theirs(ids, mask).last_hidden_state)
    ours.save_pretrained(tmp_path / "ours")   # an albertlm checkpoint, every class, and the backbone loader
    for cls in (AlbertModel, AlbertForPreTraining, heads.AlbertForSequenceClassification):
        assert not cls.from_pretrained(tmp_path / "ours").training, cls.__name__
    assert not load_backbone(tmp_path / "ours").training


# ------------------------------------------------------------------------------------------ hidden states
def test_output_hidden_states_are_transformers_per_layer_states(tmp_path, one_thread):
    theirs = hf_saved(tmp_path, dropout=0.0)
    ours = AlbertModel.from_pretrained(tmp_path / "hf")
    ids, mask = batch()
    with torch.no_grad():
        want = theirs(ids, mask, output_hidden_states=True).hidden_states
        for given in (mask, mask.bool(), mask.float()):   # transformers' mask dtypes; token types left out
            got = ours(ids, given, output_hidden_states=True).hidden_states
            assert len(got) == len(want) == 9   # the embeddings' output + L = 4 layers of 2 inner blocks each
            for a, b in zip(got, want):
                close(a, b)
        packed = ours(ids, mask, token_index=mask.flatten().nonzero().squeeze(1), output_hidden_states=True)
        real = mask.bool()
        for a, b in zip(packed.hidden_states, want):   # padding skipped: the same states at every real token
            close(a[real], b[real])
        assert ours(ids, mask).hidden_states is None   # only when asked


@pytest.mark.parametrize("name", ["AlbertForSequenceClassification", "AlbertForMaskedLM", "AlbertForPreTraining"])
def test_the_heads_return_the_backbones_hidden_states(tmp_path, one_thread, name):
    theirs = hf_saved(tmp_path, name, dropout=0.0)
    ours = getattr(heads, name, None) or AlbertForPreTraining
    ours = ours.from_pretrained(tmp_path / "hf")
    ids, mask = batch()
    with torch.no_grad():
        want = theirs(ids, mask, output_hidden_states=True).hidden_states
        got = ours(ids, mask, output_hidden_states=True).hidden_states
    assert len(got) == len(want)
    for a, b in zip(got, want):
        close(a, b)


# ------------------------------------------------------------------------------------------- out[0]
def test_integer_indices_follow_transformers_order(tmp_path, one_thread):
    """Ours added logits before the loss (and SOP's logits first): out[0] was KeyError: 0, and an index in our
    insertion order would have been another tensor than transformers'."""
    theirs = hf_saved(tmp_path, "AlbertForPreTraining", dropout=0.0)
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "hf")
    ids, mask = batch()
    labels, order = torch.where(mask.bool(), ids, -100), torch.tensor([0, 1, 1])
    with torch.no_grad():
        a = ours(ids, mask, labels=labels, sentence_order_label=order)
        b = theirs(ids, mask, labels=labels, sentence_order_label=order)
    close(a[0], b[0])   # the loss
    close(a[2], b[2])   # sop_logits
    assert torch.equal(a[1], a.prediction_logits) and a[-1] is a.sop_accuracy   # ours (M, V): labelled rows only
    with torch.no_grad():
        plain = ours(ids, mask)
        close(plain[1], theirs(ids, mask)[1])
    assert plain[0] is plain.prediction_logits and plain.to_tuple() == (plain.prediction_logits, plain.sop_logits)
    classifier = heads.AlbertForSequenceClassification(ours.config)
    out = classifier(ids, labels=torch.tensor([0, 1, 1]))
    assert out[0] is out.loss and out[1] is out.logits
    assert AlbertModel(ours.config, add_pooling_layer=False)(ids).to_tuple()[0].shape == (3, 9, 16)
    with pytest.raises(KeyError):
        out["logit"]   # noqa: B018 - a missing name is still a KeyError


# --------------------------------------------------------------------------------------- num_parameters
@pytest.mark.parametrize("name", ["AlbertModel", "AlbertForPreTraining"])
def test_num_parameters_counts_as_transformers(tmp_path, name):
    theirs = hf_saved(tmp_path, name)
    ours = (AlbertModel if name == "AlbertModel" else AlbertForPreTraining).from_pretrained(tmp_path / "hf")
    for kwargs in ({}, {"exclude_embeddings": True}, {"only_trainable": True}):
        assert ours.num_parameters(**kwargs) == theirs.num_parameters(**kwargs), kwargs
    embeddings = ours.get_submodule(ours.base_prefix + "embeddings").requires_grad_(False)
    frozen = sum(p.numel() for p in embeddings.parameters())
    assert ours.num_parameters(only_trainable=True) == ours.num_parameters() - frozen


# ------------------------------------------------------------------------------------------------ dtype
def test_from_pretrained_takes_transformers_dtype_arguments(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2, ffn_size=20,
                      max_position_embeddings=24)
    AlbertModel(cfg).to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    assert AlbertModel.from_pretrained(tmp_path / "bf16").embeddings.word.weight.dtype == torch.float32
    for kwargs, want in (({"dtype": "auto"}, torch.bfloat16), ({"dtype": torch.float16}, torch.float16),
                         ({"torch_dtype": "float64"}, torch.float64), ({"dtype": "float32"}, torch.float32)):
        model = AlbertModel.from_pretrained(tmp_path / "bf16", **kwargs)
        assert {p.dtype for p in model.parameters()} == {want}, kwargs
        assert not model.training
    for bad in ("int8", "half-ish", torch.int64):
        with pytest.raises(UserError, match="dtype"):
            AlbertModel.from_pretrained(tmp_path / "bf16", dtype=bad)


def test_a_hub_name_says_albertlm_downloads_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="not a model directory .*downloads nothing"):
        AlbertModel.from_pretrained("albert/albert-base-v2")
    (tmp_path / "empty").mkdir()   # a directory that exists: the plain message
    with pytest.raises(UserError, match="not a model directory$"):
        AlbertModel.from_pretrained("empty")
