"""Named model presets: the rows of the paper's Table 1, v1/v2 variants, and tiny ones for tests.

Sources: Lan et al. 2020, Table 1 (L, H, E, sharing, parameter count); head counts, FFN sizes and
dropout from google-research/albert's released `albert_config.json` files (v1: hidden and attention
dropout 0.1, except xxlarge v1: 0, as its released config (and transformers' albert-xxlarge-v1); v2: 0) and
google-research/bert's configs. `classifier_dropout` is 0.1 everywhere (ModelConfig's
default, transformers' `classifier_dropout_prob`, google's fine-tuning code): it is the fine-tuning heads'
dropout only; pretraining applies none at the SOP head (`model.albert.AlbertForPreTraining`), so a v2 preset
pretrains without any dropout. All use V=30000 (SentencePiece), 512 positions, 2 token types,
FFN 4H and the tanh GELU google's code calls `gelu` (our "gelu_new").
`paper_params` is the count the paper prints (heads excluded; its ALBERT rows include the pooler, its BERT and
not-shared rows leave it out: docs/model.md "Parameter counts"); `ABLATION_PARAMS` the counts of Tables 3 and 4.
tests/test_presets.py and tests/test_model_audit17.py check the instantiated models against them (xxlarge: the
paper's 235M is not the architecture's 223M).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from albertlm.config.model import ConfigError, ModelConfig


@dataclass(frozen=True)
class Preset:
    """A row of the table (`PRESETS[name]` gives a copy whose `config` is a fresh ModelConfig: see `_Rows`)."""
    config: ModelConfig
    paper_params: float | None  # millions, as printed in the paper; None if the paper has no row
    source: str


def _albert(L: int, H: int, A: int, dropout: float, **kw: Any) -> ModelConfig:
    return ModelConfig(num_layers=L, hidden_size=H, num_heads=A, ffn_size=4 * H, embedding_size=128,
                       sharing="all", hidden_dropout=dropout, attention_dropout=dropout,
                       classifier_dropout=0.1, **kw)   # fine-tuning heads only (see above)


def _bert(L: int, H: int, A: int) -> ModelConfig:
    return ModelConfig(num_layers=L, hidden_size=H, num_heads=A, ffn_size=4 * H, embedding_size=H,
                       sharing="none", hidden_dropout=0.1, attention_dropout=0.1)


def _presets() -> dict[str, Preset]:
    t1 = "Lan et al. 2020, Table 1"
    rows = {
        "bert-base": Preset(_bert(12, 768, 12), 108, t1 + "; google-research/bert bert_config.json"),
        "bert-large": Preset(_bert(24, 1024, 16), 334, t1),
        "bert-xlarge": Preset(_bert(24, 2048, 32), 1270, t1 + " (heads H/64: no released config)"),
    }
    # (L, H, heads in the released config, paper params)
    sizes = {"base": (12, 768, 12, 12), "large": (24, 1024, 16, 18), "xlarge": (24, 2048, 16, 60),
             "xxlarge": (12, 4096, 64, 235)}
    for size, (L, H, A, count) in sizes.items():
        for version, dropout in (("v1", 0.1), ("v2", 0.0)):
            if (size, version) == ("xxlarge", "v1"):   # released without dropout (hidden and attention 0), unlike
                dropout = 0.0                          # the other v1 models: albert_xxlarge v1's albert_config.json
            cfg = _albert(L, H, A, dropout)
            preset = Preset(cfg, count, f"{t1}; google-research/albert albert_{size} {version} config")
            rows[f"albert-{size}-{version}"] = preset
        rows[f"albert-{size}"] = rows[f"albert-{size}-v2"]
    tiny = dict(vocab_size=30000, embedding_size=32, hidden_size=64, num_layers=4, num_heads=2, ffn_size=256,
                max_position_embeddings=512)
    rows["albert-tiny"] = Preset(ModelConfig(sharing="all", **tiny), None, "ours: small enough for tests and demos")
    rows["bert-tiny"] = Preset(ModelConfig(sharing="none", **{**tiny, "embedding_size": 64}), None,
                               "ours: albert-tiny without factorisation or sharing")
    return rows


_ROWS: dict[str, Preset] = _presets()


class _Rows(Mapping[str, Preset]):
    """Preset name -> its row, with a fresh copy of its ModelConfig on each read, as MODEL_PRESETS and get_preset
    give: setting a field on `PRESETS["albert-base"].config` changed the preset for the rest of the process (its -v2
    alias and MODEL_PRESETS included) while paper_params still gave the unchanged row's count. A Preset is a plain
    frozen dataclass (`dataclasses.replace`, `asdict`, `fields` as before)."""

    def __getitem__(self, name: str) -> Preset:
        row = _ROWS[name]
        return replace(row, config=row.config.replace())

    def __iter__(self) -> Iterator[str]:
        return iter(_ROWS)

    def __len__(self) -> int:
        return len(_ROWS)


PRESETS: Mapping[str, Preset] = _Rows()

# Lan et al. 2020, Table 3 (E under not-shared and all-shared) and Table 4 (cross-layer sharing at E = 768 and
# 128): ALBERT-base (L 12, H 768, A 12, I 3072) with only E and the sharing changed; millions, as printed.
ABLATION_PARAMS: dict[tuple[int, str], float] = {
    (64, "none"): 87, (128, "none"): 89, (256, "none"): 93, (768, "none"): 108,
    (64, "all"): 10, (128, "all"): 12, (256, "all"): 16, (768, "all"): 31,
    (768, "attention"): 83, (768, "ffn"): 57, (128, "attention"): 64, (128, "ffn"): 38,
}
ABLATION_BASES = ("albert-base", "albert-base-v1", "albert-base-v2")


# fields that change no parameter count: overriding them keeps the paper's row (`--hidden-dropout 0` on a -v1 preset)
COUNT_FREE_FIELDS = frozenset({"hidden_dropout", "attention_dropout", "classifier_dropout", "initializer_range",
                               "layer_norm_eps", "activation", "pad_token_id", "num_labels"})


def paper_params(name: str, overrides: Mapping[str, Any] | None = None) -> float | None:
    """The count the paper prints for preset `name` with field `overrides`, in millions: Table 1's row without
    overrides, Table 3 / 4's for an albert-base with only `embedding_size` and / or `sharing` changed; None where the
    paper has no such row. Overrides that change no count (dropouts, activation, ...: `COUNT_FREE_FIELDS`), that
    repeat the preset's own value, or that set `num_groups` under `sharing=none` (which ignores it) do not count
    as changes; nor does `always_project_embeddings` where E != H (the projection is there either way)."""
    if name not in PRESETS:
        return None
    cfg = _ROWS[name].config
    overrides = {key: value for key, value in dict(overrides or {}).items()
                 if key not in COUNT_FREE_FIELDS and getattr(cfg, key, None) != value}
    if overrides.get("sharing", cfg.sharing) == "none":
        overrides.pop("num_groups", None)
    if overrides.get("embedding_size", cfg.embedding_size) != overrides.get("hidden_size", cfg.hidden_size):
        overrides.pop("always_project_embeddings", None)   # E != H: the E -> H projection is there either way
    if not overrides:
        return _ROWS[name].paper_params
    if name not in ABLATION_BASES or not set(overrides) <= {"embedding_size", "sharing"}:
        return None
    key = (overrides.get("embedding_size", cfg.embedding_size), overrides.get("sharing", cfg.sharing))
    return ABLATION_PARAMS.get(key)


class _Configs(Mapping[str, ModelConfig]):
    """Preset name -> a fresh copy of its ModelConfig, like `get_preset(name)`: setting a field on what it gives
    (`MODEL_PRESETS["albert-tiny"].vocab_size = 101`) changes that copy, never the preset (nor its v2 alias)."""

    def __getitem__(self, name: str) -> ModelConfig:
        return _ROWS[name].config.replace()   # a fresh copy

    def __iter__(self) -> Iterator[str]:
        return iter(PRESETS)

    def __len__(self) -> int:
        return len(PRESETS)


MODEL_PRESETS: Mapping[str, ModelConfig] = _Configs()


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """A fresh copy of a preset with field overrides, e.g. get_preset("albert-base", embedding_size=768). An
    override the preset cannot take is a ConfigError naming the preset (`albertlm params --num-groups 3` shows
    every preset: the error is albert-tiny's 4 layers, which the user did not name)."""
    if not isinstance(name, str) or name not in PRESETS:
        from albertlm.config.overrides import nearest_choice

        # the same letters in another case too (`ALBERT-BASE`), which difflib alone did not offer
        close = nearest_choice(name, list(PRESETS)) if isinstance(name, str) else None
        hint = f" (did you mean {close}?)" if close else ""
        raise ConfigError(f"unknown preset {name!r}{hint}; presets: {', '.join(PRESETS)}")
    try:
        return _ROWS[name].config.replace(**overrides)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (preset {name})") from None
