"""Model audit, twentieth session (the Python API as a transformers user would use it): a config changed after it was
made is checked again when a model is built from it (a mistyped sharing mode built an unshared model), a model
built from anything but a ModelConfig says what to pass, an unknown keyword to ModelConfig / AlbertConfig is a
ConfigError naming the field meant (transformers' names too), `albertlm params --json` rows carry the preset's own
name and the overrides, and `albertlm info` takes a file inside a model directory."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main
from albertlm.config import AlbertConfig, ConfigError, ModelConfig
from albertlm.config.run import RunConfig
from albertlm.model import heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from conftest import assert_one_error


@pytest.mark.parametrize("field, value, phrase", [
    ("sharing", "atention", "sharing='atention': must be one of"),        # built an unshared model, silently
    ("num_groups", 4, "num_groups=4: must divide num_layers=6"),          # built uneven groups, silently
    ("num_heads", 5, "hidden_size=32: must be divisible by num_heads=5"),  # an unflatten error at forward
    ("activation", "gelu_fast", "activation='gelu_fast'"),                  # a KeyError at forward
])
@pytest.mark.parametrize("cls", [AlbertModel, AlbertForPreTraining, heads.AlbertForSequenceClassification])
def test_a_config_changed_after_it_was_made_is_checked_when_a_model_is_built(tiny_config, cls, field, value, phrase):
    cfg = tiny_config.replace(num_layers=6)
    setattr(cfg, field, value)
    with pytest.raises(ConfigError, match=phrase.replace("(", r"\(")):
        cls(cfg)


def test_the_sharing_a_model_is_built_with_is_the_configs(tiny_config):
    """The check does not change what a valid config builds: 'attention' over 6 layers in 2 groups shares 2 attentions
    and keeps 6 FFNs; the same mode in capitals built 6 and 6 (no sharing at all)."""
    cfg = tiny_config.replace(num_layers=6)
    cfg.sharing, cfg.num_groups = "attention", 2
    encoder = AlbertModel(cfg).encoder
    assert (len(encoder.attentions), len(encoder.ffns)) == (2, 6)
    cfg.sharing = "Attention"
    with pytest.raises(ConfigError, match="sharing='Attention'"):
        AlbertModel(cfg)


@pytest.mark.parametrize("config, phrase", [
    ("albert-base", "got str: get_preset(name)"),
    ({"hidden_size": 64}, "got dict: ModelConfig.from_dict(d)"),
])
def test_a_model_built_from_anything_but_a_model_config_says_what_to_pass(config, phrase):
    with pytest.raises(ConfigError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
        AlbertForPreTraining(config)


def test_a_transformers_albert_config_names_the_conversion():
    transformers = pytest.importorskip("transformers")
    with pytest.raises(ConfigError, match="config_from_hf"):
        AlbertModel(transformers.AlbertConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=2))


@pytest.mark.parametrize("build, phrase", [
    (lambda: ModelConfig(hiden_size=32), "hiden_size (did you mean hidden_size?)"),
    (lambda: AlbertConfig(num_hidden_layers=6), "num_hidden_layers is transformers' name; ModelConfig's is num_layers"),
    (lambda: ModelConfig(vocab_size=99, num_attention_heads=2), "ModelConfig's is num_heads"),
    (lambda: ModelConfig.from_dict({"intermediate_size": 37}), "ModelConfig's is ffn_size"),
    (lambda: RunConfig(presett="albert-tiny"), "unknown RunConfig field(s): presett"),
])
def test_an_unknown_keyword_is_a_config_error_naming_the_field_meant(build, phrase):
    """docs/model.md said so for ModelConfig(...); it was dataclasses' TypeError naming nothing."""
    with pytest.raises(ConfigError) as caught:
        build()
    assert phrase in str(caught.value)


def test_unknown_keywords_are_refused_and_configs_still_copy_pickle_and_take_positional_fields(tiny_config):
    import copy
    import pickle

    with pytest.raises(ConfigError, match="did you mean num_labels"):
        tiny_config.replace(num_lables=3)
    with pytest.raises(ConfigError, match="did you mean num_labels"):
        ModelConfig(99, 16, 32, num_lables=3)
    assert pickle.loads(pickle.dumps(tiny_config)) == tiny_config == copy.deepcopy(tiny_config)
    assert ModelConfig(99, 16, 32, 2, 4).num_layers == 2 and tiny_config.replace(num_labels=3).num_labels == 3


def test_params_json_rows_name_the_preset_and_its_overrides(capsys):
    """A row with overrides was named "albert-base *" (the table's marker) and did not say what was overridden."""
    assert main(["params", "--preset", "albert-base", "--preset", "albert-tiny", "--vocab-size", "8000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["preset"], r["overrides"]) for r in rows] == [("albert-base", {"vocab_size": 8000}),
                                                            ("albert-tiny", {"vocab_size": 8000})]
    assert main(["params", "--preset", "albert-tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["overrides"] == {}
    assert main(["params", "--preset", "albert-tiny", "--vocab-size", "8000"]) == 0
    assert "\nalbert-tiny *" in capsys.readouterr().out


def test_info_takes_a_file_inside_a_model_directory(tmp_path, capsys, tiny_config):
    AlbertModel(tiny_config).save_pretrained(tmp_path / "model")
    for name in ("config.json", "model.safetensors"):
        assert main(["info", str(tmp_path / "model" / name), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert (info["directory"], info["model_class"]) == (str(tmp_path / "model"), "AlbertModel")
    (tmp_path / "notes.txt").write_text("x")
    assert_one_error(capsys, main(["info", str(tmp_path / "notes.txt")]), "not a directory")
