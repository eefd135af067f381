"""Presets, parameter counts and cross-layer sharing, audit 29: every ALBERT preset against its released
albert_config.json (albert-xxlarge-v1 was released without dropout), our counts against transformers' AlbertModel /
BertModel built at the same configs, a model that keeps the config it was built from when the caller's changes
afterwards, and the paper column for an override that changes no count."""
from __future__ import annotations

import json

import pytest
import torch

from albertlm.config.presets import PRESETS, get_preset, paper_params
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from albertlm.model.hf_format import config_from_hf
from conftest import shared_path

# google-research/albert's released albert_config.json files (v1 and v2 tarballs / TF-Hub modules; transformers'
# albert-*-v1 / -v2 config.json carry the same values): (L, H, heads, I, hidden and attention dropout)
RELEASED = {
    "albert-base-v1": (12, 768, 12, 3072, 0.1), "albert-large-v1": (24, 1024, 16, 4096, 0.1),
    "albert-xlarge-v1": (24, 2048, 16, 8192, 0.1), "albert-xxlarge-v1": (12, 4096, 64, 16384, 0.0),
    "albert-base-v2": (12, 768, 12, 3072, 0.0), "albert-large-v2": (24, 1024, 16, 4096, 0.0),
    "albert-xlarge-v2": (24, 2048, 16, 8192, 0.0), "albert-xxlarge-v2": (12, 4096, 64, 16384, 0.0),
}


def released_config(L: int, H: int, A: int, I: int, dropout: float) -> dict:
    """An albert_config.json as google-research released them (no model_type: google's reading, gelu = tanh)."""
    return {"attention_probs_dropout_prob": dropout, "hidden_act": "gelu", "hidden_dropout_prob": dropout,
            "embedding_size": 128, "hidden_size": H, "initializer_range": 0.02, "intermediate_size": I,
            "max_position_embeddings": 512, "num_attention_heads": A, "num_hidden_layers": L, "num_hidden_groups": 1,
            "net_structure_type": 0, "gap_size": 0, "num_memory_blocks": 0, "inner_group_num": 1,
            "down_scale_factor": 1, "type_vocab_size": 2, "vocab_size": 30000}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_each_albert_preset_is_the_model_of_its_released_config(name):
    """albert-xxlarge-v1 had hidden and attention dropout 0.1 like the other v1 presets; its released config has 0
    (google trained the v1 xxlarge without dropout). Every other field agrees as well."""
    assert get_preset(name) == config_from_hf(released_config(*RELEASED[name]))
    if name.endswith("-v2"):   # the unsuffixed name is v2
        assert get_preset(name.removesuffix("-v2")) == get_preset(name)


def test_albert_base_v2_is_the_google_config_in_shared_data():
    data = json.loads(shared_path("config", "albert_base_v2_config.json").read_text())
    assert config_from_hf(data) == get_preset("albert-base-v2") == get_preset("albert-base")


# ------------------------------------------------------------------------- counts against transformers' models
def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _ours(cfg) -> int:
    with torch.device("meta"):
        return _count(AlbertModel(cfg))


def _transformers_albert(cfg, groups: int) -> int:
    transformers = pytest.importorskip("transformers")
    config = transformers.AlbertConfig(
        vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_hidden_groups=groups, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.ffn_size, inner_group_num=cfg.inner_group_num)
    with torch.device("meta"):
        return _count(transformers.AlbertModel(config))   # with its pooler, as ours


@pytest.mark.parametrize("name", [n for n in PRESETS if n.startswith("albert-")])
def test_albert_preset_counts_equal_transformers_albert_model(name):
    """embeddings + encoder + pooler (transformers' AlbertModel holds the same), heads left out."""
    cfg = get_preset(name)
    assert _ours(cfg) == _transformers_albert(cfg, cfg.num_groups)


@pytest.mark.parametrize("name", [n for n in PRESETS if n.startswith("bert-")])
def test_bert_preset_counts_equal_transformers_bert_model(name):
    """E = H without a projection (google-research's layout) is BERT: our count is BertModel's (with its pooler);
    transformers' AlbertModel of the same config holds one more E -> H projection, H * H + H."""
    transformers = pytest.importorskip("transformers")
    cfg = get_preset(name)
    config = transformers.BertConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                                     intermediate_size=cfg.ffn_size)
    with torch.device("meta"):
        bert = _count(transformers.BertModel(config))
    H = cfg.hidden_size
    assert _ours(cfg) == bert == _transformers_albert(cfg, cfg.num_layers) - (H * H + H)


@pytest.mark.parametrize("E", [64, 128, 256])
@pytest.mark.parametrize("groups,inner", [(1, 1), (3, 2), (12, 1)])
def test_grouped_and_partly_shared_counts(E, groups, inner):
    """albert-base with N groups of K inner blocks: `all` is transformers' AlbertModel with num_hidden_groups N,
    `none` with N = L; `attention` / `ffn` (no transformers layout) are `none` less the blocks they share, counted
    block by block."""
    cfg = get_preset("albert-base", embedding_size=E, num_groups=groups, inner_group_num=inner)
    L, H, I = cfg.num_layers, cfg.hidden_size, cfg.ffn_size
    attention, ffn = 4 * H * H + 4 * H + 2 * H, 2 * H * I + I + H + 2 * H   # each with its LayerNorm
    every = _ours(cfg.replace(sharing="none"))
    assert _ours(cfg) == _transformers_albert(cfg, groups)
    assert every == _transformers_albert(cfg, L)
    assert _ours(cfg.replace(sharing="attention")) == every - (L - groups) * inner * attention
    assert _ours(cfg.replace(sharing="ffn")) == every - (L - groups) * inner * ffn


# ----------------------------------------------------------------------------- the model owns its config
@pytest.mark.parametrize("cls", [AlbertModel, AlbertForPreTraining])
def test_a_config_changed_after_the_model_was_built_changes_neither_the_model_nor_its_saved_config(cls, tmp_path,
                                                                                                   one_thread):
    """One config object reused for several models (`cfg.num_layers = L` in a loop): the first model's `config` said
    the last L, `save_pretrained` wrote it, and the all-shared weights (the same keys at any L) reloaded silently into
    a model of another depth, with other outputs."""
    cfg = get_preset("albert-tiny", vocab_size=101)
    models = {}
    for layers in (2, 6):
        cfg.num_layers = layers
        models[layers] = cls(cfg).eval()
    model = models[2]
    backbone = model if cls is AlbertModel else model.albert
    assert model.config.num_layers == backbone.config.num_layers == len(backbone.encoder.plan) == 2
    assert model.config is not cfg and (cls is AlbertModel or model.config is model.albert.config)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["num_layers"] == 2
    back = cls.from_pretrained(tmp_path)
    ids = torch.randint(5, 101, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(ids), back(ids)
    key = "last_hidden_state" if cls is AlbertModel else "prediction_logits"
    torch.testing.assert_close(ours[key], theirs[key])


# ------------------------------------------------------------------------------------- paper column
def test_always_project_embeddings_where_e_differs_from_h_keeps_the_papers_row():
    """E != H has the E -> H projection either way: no count changes (albert-base, 12M); at E = H it adds H * H + H,
    which no paper row counts."""
    assert _ours(get_preset("albert-base", always_project_embeddings=True)) == _ours(get_preset("albert-base"))
    assert paper_params("albert-base", {"always_project_embeddings": True}) == 12
    assert paper_params("albert-base", {"always_project_embeddings": True, "sharing": "none"}) == 89
    assert paper_params("albert-base", {"always_project_embeddings": True, "embedding_size": 768}) is None
    assert paper_params("bert-base", {"always_project_embeddings": True}) is None
