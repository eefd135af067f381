"""albertlm as a Python library (audit, session 16): each test failed before its fix.

A researcher who imports the model classes: inputs the model cannot take are named by argument (they were
unpacking errors, IndexErrors and size mismatches from deep inside), a (B, 1) regression target no longer
broadcasts into a (B, B) loss, int32 targets work as int32 ids do, `torch.export` sees inside `ModelOutput`,
transformers' sharded weights load, and a checkpoint that does not fit names its directory.
"""
from __future__ import annotations

import logging

import pytest
import torch

from albertlm.config import ModelConfig
from albertlm.errors import UserError
from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel


def tiny(**kw) -> ModelConfig:
    sizes = dict(vocab_size=51, embedding_size=8, hidden_size=24, num_layers=2, num_heads=3, ffn_size=37,
                 max_position_embeddings=16, num_labels=3)
    return ModelConfig(**{**sizes, **kw})


def ids(B=2, T=5, seed=0):
    return torch.randint(0, 51, (B, T), generator=torch.Generator().manual_seed(seed))


def refused(call, *phrases):
    """`call()` raises one error that is both a UserError (one line from the CLI) and a ValueError, with every phrase."""
    with pytest.raises(UserError) as info:
        call()
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value), info.value
    for phrase in phrases:
        assert phrase in str(info.value), str(info.value)


# ----------------------------------------------------------------------------------------- wrong results
def test_a_regression_target_of_shape_b_1_gives_the_per_example_loss():
    """labels (B, 1) against the squeezed (B,) predictions broadcast to a (B, B) MSE: a wrong loss, one warning."""
    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(tiny(num_labels=1)).eval()
    x, y = ids(B=3), torch.tensor([0.5, -1.0, 2.0])
    flat = model(x, labels=y).loss
    torch.testing.assert_close(model(x, labels=y[:, None]).loss, flat)
    torch.testing.assert_close(flat, ((model(x).logits[:, 0] - y) ** 2).mean())
    refused(lambda: model(x, labels=y[:1]), "labels has shape (1,), expected (3,)")


def test_question_answering_with_one_position_is_refused():
    """start_positions without end_positions gave no loss at all, silently (out.loss None)."""
    model = heads.AlbertForQuestionAnswering(tiny())
    refused(lambda: model(ids(), start_positions=torch.tensor([1, 2])), "both start_positions and end_positions")
    refused(lambda: model(ids(), end_positions=torch.tensor([1, 2])), "both start_positions and end_positions")


# ------------------------------------------------------------------------------------------ int32 targets
@pytest.mark.parametrize("cls,targets", [
    (heads.AlbertForSequenceClassification, lambda x: dict(labels=torch.tensor([0, 2]))),
    (heads.AlbertForTokenClassification, lambda x: dict(labels=x % 3)),
    (heads.AlbertForMaskedLM, lambda x: dict(labels=x)),
    (heads.AlbertForQuestionAnswering, lambda x: dict(start_positions=torch.tensor([1, 2]),
                                                      end_positions=torch.tensor([[3], [4]]))),
    (AlbertForPreTraining, lambda x: dict(labels=x, sentence_order_label=torch.tensor([0, 1]))),
    (AlbertForPreTraining, lambda x: dict(masked_lm_positions=torch.tensor([[1, 2], [3, 0]]),
                                          masked_lm_ids=torch.tensor([[4, 5], [6, 0]]),
                                          masked_lm_weights=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))),
])
def test_int32_targets_give_the_int64_loss(cls, targets):
    """int32 ids worked but int32 targets (numpy's default int on Windows) were 'expected Long ... got Int'."""
    torch.manual_seed(0)
    model = cls(tiny()).eval()
    x = ids()
    wide = targets(x)
    narrow = {k: (v.int() if k != "masked_lm_weights" else v) for k, v in wide.items()}
    torch.testing.assert_close(model(x.int(), **narrow).loss, model(x, **wide).loss)


def test_int32_choices_labels_and_token_index():
    model = heads.AlbertForMultipleChoice(tiny()).eval()
    x = ids(B=4).view(2, 2, 5)
    torch.testing.assert_close(model(x, labels=torch.tensor([1, 0], dtype=torch.int32)).loss,
                               model(x, labels=torch.tensor([1, 0])).loss)
    base = AlbertModel(tiny()).eval()
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    index = mask.flatten().nonzero().squeeze(1)
    torch.testing.assert_close(base(ids(), mask, token_index=index.int()).last_hidden_state,
                               base(ids(), mask, token_index=index).last_hidden_state)


# ------------------------------------------------------------------------------------ inputs named by name
@pytest.mark.parametrize("make,phrases", [
    (lambda x: dict(input_ids=x[0]), ["input_ids must have shape (batch, tokens), got (5,)", "input_ids[None]"]),
    (lambda x: dict(input_ids=x[None]), ["input_ids must have shape (batch, tokens), got (1, 2, 5)"]),
    (lambda x: dict(input_ids=x.float()), ["input_ids must hold integer ids", "torch.float32"]),
    (lambda x: dict(input_ids=x.tolist()), ["input_ids must be a torch.Tensor", "got list"]),
    (lambda x: dict(input_ids=x[:, :0]), ["input_ids has no tokens"]),
    (lambda x: dict(input_ids=x, attention_mask=torch.ones(2, 4)), ["attention_mask has shape (2, 4), input_ids (2, 5)"]),
    (lambda x: dict(input_ids=x, token_type_ids=torch.zeros(2, 4, dtype=torch.long)), ["token_type_ids has shape (2, 4)"]),
    (lambda x: dict(input_ids=x, attention_mask=torch.ones_like(x), token_index=torch.arange(10)[:, None]),
     ["token_index must be 1-D", "(10, 1)"]),
])
def test_inputs_the_model_cannot_take_are_named(make, phrases):
    """Were 'not enough values to unpack', 'Expected tensor for argument #1 indices', 'index 0 is out of bounds',
    'The size of tensor a (5) must match the size of tensor b (4) at non-singleton dimension 3', ..."""
    model = AlbertModel(tiny())
    refused(lambda: model(**make(ids())), *phrases)


@pytest.mark.parametrize("make,phrases", [
    (lambda x: dict(input_ids=x + 60), ["input_ids holds", "outside this model's vocab_size=51 (ids 0 to 50)",
                                        "more pieces than the model's vocabulary"]),
    (lambda x: dict(input_ids=torch.where(x > 25, -100, x)), ["input_ids holds -100", "an ignored label"]),
    (lambda x: dict(input_ids=x, token_type_ids=torch.full_like(x, 2)),
     ["token_type_ids holds 2", "type_vocab_size=2 (ids 0 to 1)"]),
    (lambda x: dict(input_ids=x, attention_mask=torch.ones_like(x), token_index=torch.arange(11)),
     ["token_index holds position 10", "2 x 5 = 10 positions"]),
])
def test_ids_outside_the_embedding_tables_are_named(make, phrases):
    """Was IndexError: index out of range in self (the usual sign of a tokenizer bigger than the model)."""
    model = AlbertForPreTraining(tiny())
    refused(lambda: model(**make(ids())), *phrases)


@pytest.mark.parametrize("make,phrases", [
    (lambda x: dict(labels=x[:, :4]), ["labels has shape (2, 4), expected (2, 5)"]),
    (lambda x: dict(masked_lm_positions=torch.tensor([1, 2]), masked_lm_ids=torch.tensor([1, 2])),
     ["masked_lm_positions has shape (2,), expected (2, P)"]),
    (lambda x: dict(masked_lm_positions=torch.ones(2, 2, dtype=torch.long), masked_lm_ids=torch.ones(2, 1, dtype=torch.long)),
     ["masked_lm_ids has shape (2, 1), expected (2, 2)"]),
    (lambda x: dict(sentence_order_label=torch.tensor([[0], [1]])), ["sentence_order_label has shape (2, 1), expected (2,)"]),
    (lambda x: dict(sentence_order_label=torch.tensor([0.0, 1.0])), ["sentence_order_label must hold integer", "float32"]),
])
def test_pretraining_targets_of_the_wrong_shape_are_named(make, phrases):
    """Were 'The shape of the mask [2, 4] at index 1 does not match', 'Tensors must have same number of dimensions',
    'Expected input batch_size (4) to match target batch_size (2)', '0D or 1D target tensor expected'."""
    model = AlbertForPreTraining(tiny())
    refused(lambda: model(ids(), **make(ids())), *phrases)


def test_multiple_choice_names_its_input_shape():
    """(B, T) ids were 'not enough values to unpack (expected 3, got 2)'."""
    model = heads.AlbertForMultipleChoice(tiny())
    refused(lambda: model(ids()), "input_ids must have shape (batch, choices, tokens), got (2, 5)")
    refused(lambda: model(ids(B=4).view(2, 2, 5), attention_mask=torch.ones(2, 5)), "attention_mask has shape (2, 5)")


# ------------------------------------------------------------------------------------------ torch.export
def test_torch_export_sees_inside_model_output():
    """torch.export.export raised 'Found <class ModelOutput> in output, which is not a known type'."""
    torch.manual_seed(0)
    model = AlbertModel(tiny()).eval()
    x = ids()
    exported = torch.export.export(model, (x,)).module()
    out, expected = exported(x), model(x)
    assert type(out).__name__ == "ModelOutput" and out.pooler_output is not None
    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state)


# ------------------------------------------------------------------------------------------- checkpoints
def test_sharded_transformers_weights_load(tmp_path):
    """transformers' save_pretrained(max_shard_size=...) writes model.safetensors.index.json + shards: was
    'no model.safetensors or pytorch_model.bin'."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.AlbertModel(transformers.AlbertConfig(
        vocab_size=51, embedding_size=8, hidden_size=24, num_attention_heads=3, intermediate_size=37,
        max_position_embeddings=16, num_hidden_layers=2)).eval()
    hf.save_pretrained(tmp_path / "whole")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="4KB")
    shards = sorted(p.name for p in (tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1 and not (tmp_path / "sharded" / "model.safetensors").exists()
    whole, sharded = AlbertModel.from_pretrained(tmp_path / "whole"), AlbertModel.from_pretrained(tmp_path / "sharded")
    for (name, a), b in zip(whole.state_dict().items(), sharded.state_dict().values()):
        assert torch.equal(a, b), name
    (tmp_path / "sharded" / shards[-1]).unlink()
    with pytest.raises(UserError, match=f"names the shard {shards[-1]}, which is not in"):
        AlbertModel.from_pretrained(tmp_path / "sharded")


def test_a_checkpoint_that_does_not_fit_names_its_directory(tmp_path, caplog):
    """'checkpoint lacks model weights: ...' named no directory; a head of another shape was also listed as
    'not in the checkpoint'."""
    AlbertForPreTraining(tiny()).save_pretrained(tmp_path / "a")
    with pytest.raises(UserError, match=f"^{tmp_path / 'a'}: checkpoint lacks model weights: albert.encoder"):
        AlbertForPreTraining.from_pretrained(tmp_path / "a", sharing="none")
    heads.AlbertForSequenceClassification(tiny(num_labels=3)).save_pretrained(tmp_path / "c")
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        heads.AlbertForSequenceClassification.from_pretrained(tmp_path / "c", num_labels=2)
    text = caplog.text
    assert "classifier.weight has another shape" in text and "not in the checkpoint" not in text, text


def test_saving_a_model_on_the_meta_device_is_refused_before_writing(tmp_path):
    """Was NotImplementedError 'Cannot copy out of meta tensor; no data!', after creating the directory."""
    with pytest.raises(UserError, match="the weights are on the meta device"):
        AlbertModel(tiny()).to("meta").save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()
