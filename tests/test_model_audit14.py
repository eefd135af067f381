"""Model and config audit (session 14): each test failed before its fix.

Config values that cannot work are one-line UserErrors (never a TypeError from deep inside, never a model of
NaNs); transformers checkpoints load as transformers reads them (its defaults for fields a config.json leaves
out, its fallback for a null classifier_dropout_prob, the caller's overrides); inputs the model cannot take are
named; the presets cannot be changed through what MODEL_PRESETS hands out; a forced bf16 fast path on a CPU
without oneDNN bf16 GEMMs takes the plain ops.
"""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from albertlm.config import ConfigError, ModelConfig
from albertlm.config.presets import MODEL_PRESETS, get_preset
from albertlm.errors import UserError
from albertlm.model import fast_paths, heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel

transformers = pytest.importorskip("transformers")


def tiny(**kw) -> ModelConfig:
    sizes = dict(vocab_size=51, embedding_size=8, hidden_size=24, num_layers=2, num_heads=3, ffn_size=37,
                 max_position_embeddings=16)
    return ModelConfig(**{**sizes, **kw})


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("field,value", [
    ("initializer_range", math.inf),       # accepted: every weight inf/NaN
    ("layer_norm_eps", math.inf),          # accepted: every LayerNorm output 0
    ("initializer_range", "0.02"),         # TypeError: '>' not supported between 'str' and 'int'
    ("layer_norm_eps", "x"),               # TypeError
    ("pad_token_id", "0"),                 # TypeError
    ("pad_token_id", 1.5),                 # accepted
    ("initializer_range", True),           # accepted as 1.0
    ("always_project_embeddings", "yes"),  # accepted (truthy string)
    ("always_project_embeddings", 1),      # accepted
])
def test_bad_field_values_are_one_line_config_errors(field, value):
    with pytest.raises(ConfigError, match=f"^{field}=") as info:
        ModelConfig(**{field: value})
    assert "\n" not in str(info.value)


def test_an_unknown_field_is_a_config_error_everywhere(tmp_path):
    """replace, get_preset and from_pretrained overrides raised dataclasses' TypeError."""
    with pytest.raises(ConfigError, match="unknown ModelConfig field.*hiden_size.*did you mean hidden_size"):
        tiny().replace(hiden_size=32)
    with pytest.raises(ConfigError, match="unknown ModelConfig field"):
        get_preset("albert-tiny", foo=1)
    AlbertModel(tiny()).save_pretrained(tmp_path)
    with pytest.raises(UserError, match="unknown ModelConfig field.*num_label"):
        heads.AlbertForSequenceClassification.from_pretrained(tmp_path, num_label=3)


def test_from_json_and_from_dict_refuse_what_is_not_a_config_object(tmp_path):
    """from_json raised json's JSONDecodeError / a TypeError; from_dict([...]) a TypeError."""
    path = tmp_path / "config.json"
    for text, match in (("not json", "not a valid JSON file"), ("[1, 2]", "expected a JSON object"),
                        ('{"layer_norm_eps": Infinity}', "layer_norm_eps=inf"),
                        ('{"pad_token_id": "0"}', "pad_token_id='0'")):
        path.write_text(text)
        with pytest.raises(UserError, match=match) as info:
            ModelConfig.from_json(path)
        assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match="must be a JSON object"):
        ModelConfig.from_dict([1, 2])
    tiny().to_json(path)
    assert ModelConfig.from_json(path) == tiny()


def test_model_presets_hands_out_copies():
    """MODEL_PRESETS held the presets' own objects: setting a field changed the preset (and its v2 alias)."""
    cfg = MODEL_PRESETS["albert-base"]
    cfg.vocab_size = 8000
    assert MODEL_PRESETS["albert-base"].vocab_size == 30000
    assert get_preset("albert-base-v2").vocab_size == 30000 and get_preset("albert-base").vocab_size == 30000
    assert MODEL_PRESETS["albert-base"] == MODEL_PRESETS["albert-base-v2"] and "albert-tiny" in MODEL_PRESETS


# ------------------------------------------------------------------------------------------------ inputs
def test_sequences_longer_than_the_position_embeddings_are_named():
    """Was a RuntimeError about tensor sizes 20 and 16 from inside the embeddings."""
    model = AlbertForPreTraining(tiny())
    with pytest.raises(UserError, match="20 tokens, more than max_position_embeddings=16"):
        model(torch.randint(0, 51, (2, 20)))
    assert model(torch.randint(0, 51, (2, 16))).prediction_logits.shape == (2, 16, 51)


def test_mlm_targets_without_their_positions_are_refused():
    """masked_lm_ids without masked_lm_positions silently gave no MLM loss (only SOP); labels next to
    masked_lm_positions were silently ignored."""
    model = AlbertForPreTraining(tiny())
    ids, sop = torch.randint(0, 51, (2, 9)), torch.tensor([0, 1])
    targets = torch.randint(0, 51, (2, 3))
    with pytest.raises(ValueError, match="need the masked_lm_positions"):
        model(ids, masked_lm_ids=targets, masked_lm_weights=torch.ones(2, 3), sentence_order_label=sop)
    with pytest.raises(ValueError, match="not both"):
        model(ids, masked_lm_positions=torch.ones(2, 3, dtype=torch.long), masked_lm_ids=targets,
              labels=torch.full_like(ids, -100))


# ----------------------------------------------------------------------------------- transformers configs
def hf_dir(tmp_path, cls="AlbertModel", edit=None, **kw):
    base = dict(vocab_size=51, embedding_size=8, hidden_size=24, num_attention_heads=3, intermediate_size=37,
                max_position_embeddings=16, num_hidden_layers=2)
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.AlbertConfig(**{**base, **kw})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tmp_path)
    if edit:
        data = json.loads((tmp_path / "config.json").read_text())
        edit(data)
        (tmp_path / "config.json").write_text(json.dumps(data))
    return model


def test_fields_a_transformers_config_leaves_out_take_transformers_defaults(tmp_path):
    """A config.json without num_attention_heads means AlbertConfig's 64 heads; we took ModelConfig's 12,
    which changes no tensor shape: the weights loaded into a silently different model."""
    hf = hf_dir(tmp_path, hidden_size=192, num_attention_heads=64, edit=lambda d: d.pop("num_attention_heads"))
    assert transformers.AlbertConfig.from_pretrained(tmp_path).num_attention_heads == 64
    ours = AlbertModel.from_pretrained(tmp_path).eval()
    assert ours.config.num_heads == 64
    ids = torch.randint(0, 51, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).last_hidden_state, hf(ids).last_hidden_state, atol=1e-5, rtol=0)


def test_a_null_classifier_dropout_prob_falls_back_to_the_hidden_dropout(tmp_path):
    """transformers' fallback (AlbertForTokenClassification) for classifier_dropout_prob null is
    hidden_dropout_prob; we took our default 0.1."""
    hf_dir(tmp_path, cls="AlbertForTokenClassification", hidden_dropout_prob=0.05,
           edit=lambda d: d.update(classifier_dropout_prob=None))
    model = heads.AlbertForTokenClassification.from_pretrained(tmp_path)
    assert model.config.classifier_dropout == 0.05 and model.dropout.p == 0.05


def test_from_pretrained_overrides_reach_the_transformers_key_map(tmp_path):
    """An E == H transformers checkpoint with an identity projection (what export_hf writes for bert-tiny)
    loaded with always_project_embeddings=False: the key map used the file's config, not the overridden one,
    and refused the projection as 'weights this config does not have'."""
    from albertlm.interop.hf import export_hf

    torch.manual_seed(0)
    ours = AlbertForPreTraining(tiny(embedding_size=24)).eval()
    export_hf(ours, tmp_path)
    back = AlbertForPreTraining.from_pretrained(tmp_path, always_project_embeddings=False).eval()
    assert back.albert.embeddings.project is None
    ids = torch.randint(0, 51, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(back(ids).prediction_logits, ours(ids).prediction_logits)


def test_gelu_python_and_relative_positions(tmp_path):
    """transformers' `gelu_python` (exact erf GELU) was refused; a transformers 4 checkpoint with relative
    position embeddings was 'unexpected transformers keys (not an ALBERT of this config?)'."""
    hf = hf_dir(tmp_path / "g", hidden_act="gelu_python")
    ours = AlbertModel.from_pretrained(tmp_path / "g").eval()
    ids = torch.randint(0, 51, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).last_hidden_state, hf(ids).last_hidden_state, atol=1e-5, rtol=0)
    from safetensors.torch import load_file, save_file

    hf_dir(tmp_path / "r", edit=lambda d: d.update(position_embedding_type="relative_key"))
    state = load_file(tmp_path / "r" / "model.safetensors")
    state["encoder.albert_layer_groups.0.albert_layers.0.attention.distance_embedding.weight"] = torch.zeros(31, 8)
    save_file(state, tmp_path / "r" / "model.safetensors")
    with pytest.raises(UserError, match="relative position embeddings"):
        AlbertModel.from_pretrained(tmp_path / "r")


# -------------------------------------------------------------------------------------------- fast paths
def test_a_forced_bf16_fast_path_without_onednn_bf16_takes_the_plain_ops(monkeypatch):
    """`swap_in(model, bfloat16)` on a CPU whose oneDNN has no bf16 GEMM (AVX2) crashed in the first linear
    ('could not create a primitive descriptor'); each fused call now checks, as it does for dtype and device."""
    from albertlm.model import fused

    monkeypatch.setattr(fused, "BF16", False)  # what this probe says on an AVX2 CPU
    torch.manual_seed(0)
    plain = AlbertForPreTraining(tiny())
    fast = fast_paths.swap_in(copy.deepcopy(plain), torch.bfloat16)
    ids = torch.randint(0, 51, (2, 9))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(fast(ids, labels=ids).loss, plain(ids, labels=ids).loss)


def test_bytes_that_are_no_pickle_are_a_damaged_file_not_a_refused_object(tmp_path):
    """Random bytes in a trainer_state.pt were reported as 'the pickle holds Python objects other than tensors'."""
    import collections

    import torch

    from albertlm.errors import UserError
    from albertlm.model.io import read_torch_file

    junk = tmp_path / "trainer_state.pt"
    junk.write_bytes(b"'this is no pickle at all, just text" * 4)
    with pytest.raises(UserError, match="not a readable PyTorch checkpoint, truncated or damaged") as err:
        read_torch_file(junk)
    assert "other than tensors" not in str(err.value)
    evil = tmp_path / "evil.pt"
    torch.save({"x": collections.OrderedDict(), "f": print}, evil)
    with pytest.raises(UserError, match="the pickle holds Python objects other than tensors"):
        read_torch_file(evil)


def test_a_multi_label_transformers_classifier_is_named(caplog):
    """problem_type multi_label_classification was ignored without a word: our loss is single-label."""
    import logging

    from albertlm.model.hf_format import config_from_hf

    data = {"model_type": "albert", "vocab_size": 50, "embedding_size": 8, "hidden_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "num_labels": 3}
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        config_from_hf(data)
    assert "multi-label" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        assert config_from_hf({**data, "problem_type": "multi_label_classification"}).num_labels == 3
    assert "multi-label classifier" in caplog.text and "binary cross-entropy" in caplog.text
