"""Grids: which pretraining runs reproduce which table of the paper.

A grid is a list of `Variant`s (what changes: the paper's E, the sharing, the sentence task, dropout, or
any other `ModelConfig` field); `expand(grids, scale)` turns them into `Run`s (a name + `ModelConfig`
overrides + sentence task + seed) at a scale, without duplicates: `paper` is the union of the named grids
and a run shared by two tables (e.g. all-shared E=128 with SOP is in tables 3, 4 and 5) is trained once.

Runs come out in priority order: the grids in the order given (`paper`: table5, table4, figure1, table3,
dropout), seed by seed, so a suite cut short has the most comparisons complete.

A user grid file (JSON or TOML) is either a list of variants or {"variants": [...]} (optionally with
"name"); a variant is {"name": ..., "embedding": 128, "sharing": "all", "task": "sop", "dropout": false,
"model": {"num_groups": 2}}, every key optional. `embedding` is the paper's E (64/128/256/768, mapped to
the scale's) unless `model.embedding_size` gives it outright (not both; nor `model.sharing`, nor
`model.hidden_dropout` / `attention_dropout` beside `dropout`: a variant's own key sets those).
"""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from albertlm.config.model import ModelConfig
from albertlm.errors import UserError
from albertlm.experiments.scales import PAPER_E, Scale

TASKS = ("none", "nsp", "sop")
SHARINGS = ("all", "attention", "ffn", "none")


@dataclass(frozen=True)
class Variant:
    embedding: int = 128                # the paper's E (64, 128, 256, 768 = H); the scale maps it
    sharing: str = "all"
    task: str = "sop"                   # sentence task: none, nsp, sop
    dropout: bool = False               # hidden and attention dropout (the scale's value) or none
    model: tuple[tuple[str, Any], ...] = ()   # any other ModelConfig overrides, as sorted (key, value) pairs
    name: str = ""                      # a user variant's own name (else made from the fields)

    def __post_init__(self):
        if self.task not in TASKS:
            raise UserError(f"variant {self.label}: task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.sharing not in SHARINGS:
            raise UserError(f"variant {self.label}: sharing must be one of {', '.join(SHARINGS)}, got "
                            f"{self.sharing!r}")
        if self.embedding not in PAPER_E and "embedding_size" not in dict(self.model):
            raise UserError(f"variant {self.label}: embedding is the paper's E, one of {PAPER_E} "
                            f"(or set model.embedding_size), got {self.embedding!r}")

    @property
    def label(self) -> str:
        """The variant's name: the user's, else made from the fields (model overrides appended: `-num_layers3`)."""
        if self.name:
            return self.name
        extra = "".join(f"-{k}{v}" for k, v in self.model)
        return f"E{self.embedding}-{self.sharing}-{self.task}" + ("-dropout" if self.dropout else "") + extra

    def model_overrides(self, scale: Scale) -> dict[str, Any]:
        """The ModelConfig fields this variant sets at `scale` (on top of `base_model(scale)`)."""
        out: dict[str, Any] = {"embedding_size": scale.embedding_sizes[PAPER_E.index(self.embedding)]
                               if self.embedding in PAPER_E else scale.small_embedding,
                               "sharing": self.sharing}
        rate = scale.dropout if self.dropout else 0.0
        out.update(hidden_dropout=rate, attention_dropout=rate)
        out.update(dict(self.model))
        return out


@dataclass(frozen=True)
class Run:
    name: str                           # unique within a suite; the run's directory name
    model: dict                         # the full ModelConfig (as a dict)
    task: str
    seed: int
    variant: str                        # the variant label (runs of other seeds share it)
    grids: tuple[str, ...] = ()         # the named grids this run belongs to

    @property
    def shape_key(self) -> str:
        """What a no-pretraining baseline of the same shape must match: the model, not the sentence task."""
        return json.dumps(self.model, sort_keys=True)


@dataclass(frozen=True)
class Grid:
    name: str
    variants: tuple[Variant, ...]
    what: str = ""


def _table3() -> tuple[Variant, ...]:
    return tuple(Variant(embedding=e, sharing=s) for s in ("none", "all") for e in PAPER_E)


def _table4() -> tuple[Variant, ...]:
    return tuple(Variant(embedding=e, sharing=s) for e in (768, 128) for s in SHARINGS)


GRIDS: dict[str, Grid] = {g.name: g for g in (
    Grid("table5", tuple(Variant(task=t) for t in TASKS), "sentence-prediction task: none / NSP / SOP"),
    Grid("table4", _table4(), "cross-layer sharing: all / attention / FFN / none at E = H and E = 128"),
    Grid("figure1", (Variant(embedding=128, sharing="all"), Variant(embedding=768, sharing="none")),
         "layer transitions: ALBERT (all-shared, E = 128) vs BERT (not shared, E = H)"),
    Grid("table3", _table3(), "embedding size E in 64 / 128 / 256 / 768, not shared and all-shared"),
    Grid("dropout", (Variant(dropout=True), Variant(dropout=False)), "with / without dropout (Table 8)"),
)}
PAPER_ORDER = ("table5", "table4", "figure1", "table3", "dropout")
NAMED = (*PAPER_ORDER, "paper")


# the paper's configurations by label (E128-all-sop, ...): every variant of the named grids
PAPER_VARIANTS: dict[str, Variant] = {v.label: v for g in GRIDS.values() for v in g.variants}


def base_model(scale: Scale) -> ModelConfig:
    """Every run's model before its variant: the scale's size, no dropout."""
    return ModelConfig(vocab_size=scale.vocab_size, embedding_size=scale.small_embedding,
                       hidden_size=scale.hidden_size, num_layers=scale.num_layers, num_heads=scale.num_heads,
                       ffn_size=scale.ffn_size, max_position_embeddings=scale.max_seq_length,
                       hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.1)


def resolve_grids(name_or_file: str) -> list[Grid]:
    """A named grid (`paper` = all of them), or a user grid file (JSON or TOML)."""
    if name_or_file == "paper":
        return [GRIDS[n] for n in PAPER_ORDER]
    if name_or_file in GRIDS:
        return [GRIDS[name_or_file]]
    path = Path(name_or_file)
    if not path.is_file():
        raise UserError(f"grid {name_or_file!r}: not one of {', '.join(NAMED)} nor a grid file")
    return [read_grid_file(path)]


def _toml_reader(path: Path) -> Any:
    """The TOML reader: the standard library's `tomllib` (Python 3.11+), else the `tomli` package it came from.
    On Python 3.10 without tomli a .toml grid was 'not valid TOML: No module named 'tomllib''."""
    try:
        import tomllib

        return tomllib
    except ImportError:
        pass
    try:
        import tomli

        return tomli
    except ImportError:
        raise UserError(f"{path}: TOML grid and scale files need Python 3.11+ (tomllib) or the tomli package "
                        "(pip install tomli); or give the file as .json") from None


def read_table_file(path: Path) -> Any:
    """A grid or scale file's data: UTF-8 text (a BOM, as Notepad writes, read as without), TOML for a .toml
    name, else JSON with a key given twice in one object refused (json keeps the last value without a word).
    Any failure is a one-line UserError naming the file."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    toml = _toml_reader(path) if path.suffix.lower() == ".toml" else None
    try:
        if toml is not None:
            return toml.loads(text)
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _TwiceGiven as exc:   # TOML refuses a key given twice itself
        raise UserError(f"{path}: {exc}") from None
    except Exception as exc:   # json.JSONDecodeError, tomllib.TOMLDecodeError
        raise UserError(f"{path}: not valid {'TOML' if toml is not None else 'JSON'}: {exc}") from None


def read_grid_file(path: Path) -> Grid:
    if path.suffix.lower() in (".yaml", ".yml"):   # read as JSON, it was "not valid JSON: Expecting value ..."
        raise UserError(f"{path}: a grid file is JSON or TOML, not YAML; write the same variants as a .json or .toml "
                        f"file (a list of variants, or a table with 'variants')")
    data = read_table_file(path)
    if isinstance(data, dict):
        unknown = set(data) - {"name", "variants"}
        if unknown:
            raise UserError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (a grid table has "
                            f"'variants' and optionally 'name')")
        name, items = str(data.get("name", path.stem)), data.get("variants")
    else:
        name, items = path.stem, data
    if not isinstance(items, list) or not items:
        raise UserError(f"{path}: expected a list of variants (or a table with 'variants')")
    variants: list[Variant] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UserError(f"{path}: variant {i} is not an object")
        unknown = set(item) - set(_KEY_TYPES)
        if unknown:
            first = sorted(unknown)[0]
            raise UserError(f"{path}: variant {i}: unknown key(s) {', '.join(sorted(unknown))}{_key_hint(first)}")
        for key, (types, what) in _KEY_TYPES.items():
            value = item.get(key)
            if key in item and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                raise UserError(f"{path}: variant {i}: {key} must be {what}, got {value!r}")
        model = item.get("model", {})
        if not all(isinstance(v, (int, float, str, bool)) for v in model.values()):
            raise UserError(f"{path}: variant {i}: 'model' values must be numbers, strings or booleans")
        for key, own in _OWN_KEYS.items():   # one setting given twice: which one the run has would be a guess
            if key in model and (own in item or key == "sharing"):
                raise UserError(f"{path}: variant {i}: model.{key} " + (
                    "is the variant's own key 'sharing': give \"sharing\" instead" if key == "sharing" else
                    f"and '{own}' both set {_OWN_WHY[own]}; give one of them"))
        label = item.get("name", "")
        if label and not _NAME.fullmatch(label):
            raise UserError(f"{path}: variant {i}: name {label!r} must be letters, digits, '.', '_', '+' or '-' "
                            f"(it names the run's directory), not starting with '.'")
        try:
            variant = Variant(embedding=item.get("embedding", 128), sharing=item.get("sharing", "all"),
                              task=item.get("task", "sop"), dropout=item.get("dropout", False),
                              model=tuple(sorted(model.items())), name=label)
        except UserError as exc:             # "variant NAME: ..." of which file and which variant
            raise UserError(f"{path}: variant {i}: {str(exc).split(': ', 1)[-1]}") from None
        paper = paper_variant(label) if label else None
        if paper is not None and replace(variant, name="") != paper:   # the report places rows by configuration
            raise UserError(f"{path}: variant {i}: name {label!r} is the paper's label of another configuration "
                            f"({describe(paper)}); give this variant another name")
        twin = next((j for j, v in enumerate(variants) if v.label == variant.label), None)
        if twin is not None:
            raise UserError(f"{path}: variants {twin} and {i} are both named {variant.label!r}; "
                            f"give one of them another 'name'" if variant != variants[twin] else
                            f"{path}: variants {twin} and {i} are the same variant")
        variants.append(variant)
    return Grid(name, tuple(variants), f"user grid {path}")


_KEY_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "name": ((str,), "a string"), "embedding": ((int,), "an integer (the paper's E)"),
    "sharing": ((str,), "a string"), "task": ((str,), "a string"), "dropout": ((bool,), "true or false"),
    "model": ((dict,), "a table of ModelConfig fields")}
# ModelConfig fields a variant sets with a key of its own (`model_overrides`), and what that key means
_OWN_KEYS = {"sharing": "sharing", "embedding_size": "embedding", "hidden_dropout": "dropout",
             "attention_dropout": "dropout"}
_OWN_WHY = {"embedding": "the embedding size ('embedding' is the paper's E, mapped to the scale's; "
                         "model.embedding_size is the size itself)",
            "dropout": "the dropout rate ('dropout' is the scale's rate or none; model's field is a rate itself)"}
_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*")
# what a variant cannot vary, and where it is set instead: every run of a suite has the scale's training (the same
# steps, batch, length and data, so the same token budget and data order) and the command's seeds
_NOT_A_VARIANT_KEY = {
    **dict.fromkeys(("seed", "seeds"), "the pretraining seeds are the command's --seeds, every variant run "
                                       "with each"),
    **dict.fromkeys(("lr", "learning_rate", "optimizer", "warmup_ratio", "max_steps", "steps", "batch_size",
                     "masking", "ngram", "max_seq_length", "dupe_factor", "precision"),
                    "the scale sets it for every run of a suite alike (the same training and token budget for "
                    "every variant), not a variant (--max-steps changes the steps of them all)"),
    **dict.fromkeys(("vocab_size", "tokenizer"), "the suite's tokenizer decides the vocabulary of every run "
                                                 "(--tokenizer, --vocab-size)"),
}


def _key_hint(key: str) -> str:
    """What to say after an unknown variant key: a ModelConfig field written beside the variant's keys (it goes
    under "model"), what a suite sets instead of a variant (the scale, --seeds), or the closest key."""
    if key in _NOT_A_VARIANT_KEY:
        return f" ({key}: {_NOT_A_VARIANT_KEY[key]})"
    names = [f.name for f in fields(ModelConfig)]
    if key in names:
        return f" ({key} is a ModelConfig field: give it under \"model\", as {{\"model\": {{\"{key}\": ...}}}})"
    close = difflib.get_close_matches(key, [*_KEY_TYPES, *names], n=1)
    if not close:
        return f" (a variant's keys: {', '.join(_KEY_TYPES)})"
    return f" (did you mean {close[0] if close[0] in _KEY_TYPES else 'model.' + close[0]}?)"


class _TwiceGiven(ValueError):
    """A JSON object of a grid file that gives one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it gives a key twice: json keeps the last value without a word, so
    {"sharing": "none", ..., "sharing": "all"} would train all-shared (TOML refuses such a file itself)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _TwiceGiven(f"key {key!r} is given twice in one object ({json.dumps(out[key])[:40]} and "
                              f"{json.dumps(value)[:40]}); give it once")
        out[key] = value
    return out


def paper_variant(label: str) -> Variant | None:
    """The paper configuration (a variant of a named grid) whose label is `label`, or None."""
    return PAPER_VARIANTS.get(label)


def full_model(model: Any) -> Any:
    """A recorded model config with the fields it lacks at their defaults (a config written before a field
    existed is the same model), for comparison; anything else as it is."""
    if not isinstance(model, dict):
        return model
    try:
        return ModelConfig(**model).to_dict()
    except Exception:
        return model


def describe(variant: Variant) -> str:
    """A variant's configuration in words: E=128, all-shared, sop (, dropout) (, model overrides)."""
    return ", ".join([f"E={variant.embedding}", f"{variant.sharing}-shared" if variant.sharing != "none"
                      else "not shared", f"task {variant.task}"] + (["dropout"] if variant.dropout else [])
                     + [f"{k}={v}" for k, v in variant.model])


# ModelConfig fields the scale decides for every run: the tokenizer's vocabulary (V) and a position table that
# holds the scale's T
SCALE_FIXED = ("vocab_size",)


def check_against_scale(variant: Variant, scale: Scale, where: str) -> None:
    """Refuse model overrides that cannot work with the scale's data (before any preparation)."""
    model = dict(variant.model)
    for key in SCALE_FIXED:
        if key in model:
            raise UserError(f"{where}: model.{key} cannot be set (the data's vocabulary is the tokenizer's, "
                            f"V={scale.vocab_size} at scale {scale.name})")
    misplaced = [k for k in model if k in _NOT_A_VARIANT_KEY and k not in {f.name for f in fields(ModelConfig)}]
    if misplaced:   # model.lr: ModelConfig's "unknown field" alone did not say where a learning rate is set
        raise UserError(f"{where}: model.{misplaced[0]} is no ModelConfig field "
                        f"({misplaced[0]}: {_NOT_A_VARIANT_KEY[misplaced[0]]})")
    positions = model.get("max_position_embeddings")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions < scale.max_seq_length:
        raise UserError(f"{where}: model.max_position_embeddings={positions} is below the scale's sequence "
                        f"length T={scale.max_seq_length}")
    # every job of such a variant failed on its first batch, after the preparation
    types = model.get("type_vocab_size")
    if isinstance(types, int) and not isinstance(types, bool) and types < 2:
        raise UserError(f"{where}: model.type_vocab_size={types}: the suite's held-out SOP / NSP data and its "
                        f"sentence-pair fine-tuning tasks (STS-B) have segments A and B (token types 0 and 1), so it "
                        f"must be at least 2")
    hidden = model.get("hidden_size", scale.hidden_size)
    if variant.embedding == PAPER_E[-1] and "embedding_size" not in model and hidden != scale.hidden_size:
        # E = 768 is E = H, mapped to the scale's H: at another H it would be neither (and be labelled E768)
        raise UserError(f"{where}: embedding {PAPER_E[-1]} is the paper's E = H, the scale's H="
                        f"{scale.hidden_size} (E={scale.embedding_sizes[-1]}), but model.hidden_size is {hidden}: "
                        f"give model.embedding_size ({hidden} for E = H) instead of embedding")


def expand(grids: list[Grid], scale: Scale) -> list[Run]:
    """The runs of `grids` at `scale` (its seeds), deduplicated (same model, task and seed = one run), in
    priority order."""
    for grid in grids:
        for variant in grid.variants:
            check_against_scale(variant, scale, f"grid {grid.name}, variant {variant.label}")
    base = base_model(scale)
    by_key: dict[str, Run] = {}
    order: list[str] = []
    for grid in grids:
        for seed in scale.seeds:
            for variant in grid.variants:
                try:
                    model = base.replace(**variant.model_overrides(scale)).to_dict()
                except (TypeError, UserError) as exc:   # an unknown field, or a value ModelConfig refuses
                    raise UserError(f"grid {grid.name}, variant {variant.label}: {exc}") from None
                key = json.dumps([model, variant.task, seed], sort_keys=True)
                if key in by_key:
                    run = by_key[key]
                    if run.variant != variant.label:   # two names for one run: the second would vanish
                        raise UserError(f"grid {grid.name}: variants {run.variant!r} and {variant.label!r} are the "
                                        f"same configuration at scale {scale.name} (the same model and sentence "
                                        f"task), which a suite trains once; remove one or make them differ")
                    if grid.name not in run.grids:
                        by_key[key] = Run(run.name, run.model, run.task, run.seed, run.variant,
                                          (*run.grids, grid.name))
                    continue
                name = f"{variant.label}-s{seed}"
                clash = next((r for r in by_key.values() if r.name == name), None)
                if clash is not None:   # same label, another model or task: its runs would share a directory
                    raise UserError(f"grids {clash.grids[0]} and {grid.name} both have a variant {variant.label!r} "
                                    f"but not the same run; rename one or run them as separate suites")
                by_key[key] = Run(name, model, variant.task, seed, variant.label, (grid.name,))
                order.append(key)
    return [by_key[k] for k in order]


def variant_of(run: Run) -> str:
    return run.variant
