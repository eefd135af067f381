"""ModelConfig: JSON round-trip, one clear message naming the field, the transformers/google config map."""
from __future__ import annotations

import pytest

from albertlm.config import ConfigError, ModelConfig
from albertlm.model import hf_format


def test_json_round_trip(tmp_path, tiny_config):
    cfg = tiny_config.replace(sharing="ffn", num_groups=5, inner_group_num=2, activation="gelu")
    cfg.to_json(tmp_path / "c.json")
    assert ModelConfig.from_json(tmp_path / "c.json") == cfg


@pytest.mark.parametrize("changes,field", [
    (dict(hidden_size=30), "hidden_size"),           # not divisible by 4 heads
    (dict(num_groups=2), "num_groups"),              # does not divide L=5
    (dict(sharing="some"), "sharing"),
    (dict(activation="swish"), "activation"),
    (dict(hidden_dropout=1.0), "hidden_dropout"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(pad_token_id=99), "pad_token_id"),
])
def test_impossible_values_name_the_field(tiny_config, changes, field):
    with pytest.raises(ConfigError, match=f"^{field}="):
        tiny_config.replace(**changes)


def test_unknown_json_field_is_rejected():
    with pytest.raises(ConfigError, match="hiden_size"):
        ModelConfig.from_dict({"hiden_size": 3})


def test_hf_config_round_trip(tiny_config):
    for cfg in (tiny_config.replace(num_layers=6, num_groups=3, inner_group_num=2, num_labels=5),
                tiny_config.replace(sharing="none", activation="gelu")):
        back = hf_format.config_from_hf(hf_format.config_to_hf(cfg))
        assert back == cfg.replace(num_groups=1) if cfg.sharing == "none" else back == cfg


def test_google_config_gelu_is_tanh():
    data = {"hidden_act": "gelu", "num_hidden_layers": 12, "hidden_size": 768, "embedding_size": 768,
            "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30000}
    cfg = hf_format.config_from_hf(data)  # no model_type: google-research's albert_config.json
    assert cfg.activation == "gelu_new" and not cfg.always_project_embeddings
    hf = hf_format.config_from_hf({**data, "model_type": "albert"})
    assert hf.activation == "gelu" and hf.always_project_embeddings


def test_unsupported_structures_are_refused():
    with pytest.raises(Exception, match="net_structure_type"):
        hf_format.config_from_hf({"num_hidden_layers": 2, "net_structure_type": 1})
    with pytest.raises(Exception, match="hidden_act"):
        hf_format.config_from_hf({"num_hidden_layers": 2, "hidden_act": "mish", "model_type": "albert"})
