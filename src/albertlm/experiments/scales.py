"""Scales: how big every run of a grid is. A grid says *what* varies (E, sharing, sentence task, dropout);
the scale says everything else, the same for every run of the grid: model size, vocabulary, sequence
length, steps, batch (so the same number of training tokens), data order and seeds, and the fine-tuning
protocol.

The paper's E values (64, 128, 256, 768 at H = 768: three doublings, then E = H) are given per scale
in `embedding_sizes`, the last one always H; "E = 128" (ALBERT's) is the second (`small_embedding`) and
"E = 768" (BERT's, E = H) the last.

A user's own scale is a file (`read_scale_file`: TOML or JSON) naming a named scale as its `base` and the fields it
changes, every field validated with a one-line error naming the file and the field. The scale keeps its base's
name (what it is a variant of, as `--max-steps` keeps the name too) and records the file in `file`; a suite
compares the resolved values, not the file.
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from albertlm.errors import UserError, user_path

PAPER_E = (64, 128, 256, 768)      # Table 3's E at H = 768


@dataclass(frozen=True)
class FinetuneTask:
    """One GLUE task of the downstream protocol: `max_train` examples at most (a seeded sample of the
    training file), `epochs` passes."""
    name: str                          # GLUE task name (sst2, stsb, mrpc, rte, cola)
    dir_name: str                      # folder under the GLUE root
    max_train: int = 0                 # 0 = the whole training file
    epochs: float = 3.0


@dataclass(frozen=True)
class Scale:
    name: str
    # model (every run; grids change E, sharing, dropout)
    hidden_size: int                   # H
    num_layers: int                    # L
    num_heads: int                     # A
    embedding_sizes: tuple[int, int, int, int]  # Table 3's E (the paper's 64, 128, 256, 768); the last is H
    vocab_size: int                    # V (a SentencePiece model trained on the corpus)
    max_seq_length: int                # T
    # pretraining: the same token budget, data order and seeds for every run
    max_steps: int
    batch_size: int
    lr: float
    optimizer: str = "adamw"           # adamw learns faster than LAMB at these batch sizes (see docs/paper.md)
    warmup_ratio: float = 0.05
    masking: str = "token"             # ngram (the paper's) or token
    dupe_factor: int = 4
    seeds: tuple[int, ...] = (1, 2)    # pretraining seeds (initial weights, data order, dropout)
    eval_batches: int = 0              # held-out batches of batch_size per evaluation; 0 = all
    eval_every: int = 0                # steps between held-out evaluations during training; 0 = at the end only
    precision: str = "fp32"
    micro_batch_size: int = 0
    dropout: float = 0.1               # the value of `dropout: true` runs (hidden and attention)
    # downstream
    finetune_tasks: tuple[FinetuneTask, ...] = ()
    finetune_lr: float = 1e-3
    finetune_batch_size: int = 32
    finetune_seq_length: int = 64
    finetune_seeds: int = 1            # fine-tuning runs per model, their mean its score (seeds: the model's, +1000, ...)
    corpus_chars: int = 0              # use at most this many characters of the training corpus; 0 = all
    heldout_chars: int = 0             # and of the held-out corpus
    device: str = "auto"
    notes: str = ""
    file: str = ""                     # the scale file this scale was read from (absolute), "" for a named scale

    @property
    def ffn_size(self) -> int:         # I = 4H as in BERT/ALBERT
        return 4 * self.hidden_size

    @property
    def small_embedding(self) -> int:  # ALBERT's E = 128 at this H
        return self.embedding_sizes[1]

    @property
    def intrinsic_only(self) -> bool:
        """No fine-tuning task (a scale file's `finetune_tasks = []`): the suite pretrains and evaluates on held-out
        data only, with no fine-tuning and no no-pretraining baselines (they are only fine-tuned)."""
        return not self.finetune_tasks

    @property
    def tokens_per_run(self) -> int:
        return self.max_steps * self.batch_size * self.max_seq_length

    def __post_init__(self):
        if self.embedding_sizes[-1] != self.hidden_size:
            raise UserError(f"scale {self.name}: the last embedding size must be H={self.hidden_size}")
        if self.finetune_seeds < 1:
            raise UserError(f"scale {self.name}: finetune_seeds must be >= 1, got {self.finetune_seeds}")

    def finetune_seed_list(self, seed: int) -> list[int]:
        """The fine-tuning seeds of a model pretrained (or initialised) with `seed`: that seed first, so a
        suite given more fine-tuning seeds later keeps the runs it has."""
        return [seed + 1000 * i for i in range(self.finetune_seeds)]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.file:              # a named scale's record is what it was before scale files existed
            del out["file"]
        out.update(tokens_per_run=self.tokens_per_run)
        return out


SST2, STSB, MRPC, RTE, COLA = "sst2", "stsb", "mrpc", "rte", "cola"

SCALES: dict[str, Scale] = {s.name: s for s in (
    # the whole pipeline in seconds: a test and a first look, nothing to conclude from
    Scale("smoke", hidden_size=32, num_layers=2, num_heads=2, embedding_sizes=(8, 12, 16, 32), vocab_size=400, max_seq_length=32, max_steps=20,
          batch_size=8, lr=2e-3, seeds=(1,), dupe_factor=1, corpus_chars=300_000, heldout_chars=60_000,
          finetune_tasks=(FinetuneTask(SST2, "SST-2", max_train=200, epochs=1.0),),
          finetune_lr=1e-3, finetune_batch_size=16, finetune_seq_length=32,
          notes="plumbing only"),
    # small models on 2 CPU cores: H 64, L 4, V 4000, T 64, 2400 steps of 32 sequences (4.9M token slots), two
    # fine-tuning seeds per model, STS-B for 10 epochs (with 3 its best epoch was nearly always the last): the
    # whole paper grid (30 runs + 26 baselines, 2 at a time) takes about two and a half hours. Its corpus:
    # assemble_corpus.py's default, the GLUE tasks' unlabeled training text one document per row (packing the
    # rows removed the downstream gain: docs/paper.md's protocol 17). E: 16, 32, 48, 64 for the
    # paper's 64, 128, 256, 768, so ALBERT's E is 32 (a 16-wide word vector never beat scratch at any budget we
    # could afford); at this scale 13 of the 15 paper configurations, ALBERT's among them, beat scratch with both
    # seeds (not all-shared E = H, nor dropout), 12 with a third seed (`--seeds 1 2 3`; not ALBERT's), 9 with a
    # fourth. The protocols tried and all the grids are in docs/paper.md
    Scale("cpu", hidden_size=64, num_layers=4, num_heads=4, embedding_sizes=(16, 32, 48, 64), vocab_size=4000, max_seq_length=64, max_steps=2400,
          batch_size=32, lr=2e-3, seeds=(1, 2), dupe_factor=4,
          finetune_tasks=(FinetuneTask(SST2, "SST-2", max_train=8000, epochs=2.0),
                          FinetuneTask(STSB, "STS-B", epochs=10.0)),
          finetune_lr=1e-3, finetune_batch_size=32, finetune_seq_length=64, finetune_seeds=2,
          notes="small models and a small corpus: conclusions are about this scale only"),
    # base-size models on one GPU, measured on an H100 and an H200 (docs/paper.md, "The gpu scale"): with
    # 1000 steps, the first guess, every model ended on the unigram plateau (held-out MLM accuracy = the
    # frequency baseline's 5.3%), so that scale measured nothing; with 3000 steps x 128 sequences of 128 tokens
    # (49.2M token slots per run, ~31% of them real tokens on this corpus) 5 of 6 table5 runs left it (8-13%)
    # and one collapsed. table5 with one pretraining seed took 8.2 minutes on an H200 (--jobs 4); the whole
    # paper grid is estimated at about two hours there (not run). Claim 5 did not hold at this scale.
    Scale("gpu", hidden_size=768, num_layers=12, num_heads=12, embedding_sizes=(64, 128, 256, 768),
          vocab_size=30000, max_seq_length=128, max_steps=3000, batch_size=128, lr=1e-3, optimizer="lamb",
          warmup_ratio=0.1, masking="ngram", seeds=(1, 2), dupe_factor=5, precision="bf16", device="auto",
          finetune_tasks=(FinetuneTask(SST2, "SST-2", max_train=20000, epochs=2.0),
                          FinetuneTask(STSB, "STS-B", epochs=3.0), FinetuneTask(RTE, "RTE", epochs=3.0),
                          FinetuneTask(COLA, "CoLA", epochs=3.0)),
          finetune_lr=5e-5, finetune_batch_size=32, finetune_seq_length=128,
          notes="base-size models and a small corpus: most runs barely leave the unigram plateau"),
)}


# the first cpu scale (docs/paper.md keeps its grid): ALBERT's E = 16, for a corpus with one document per GLUE
# row (`assemble_corpus.py --task-words-per-doc 0`)
_CPU_V2_TASKS = (FinetuneTask(SST2, "SST-2", max_train=8000, epochs=2.0), FinetuneTask(STSB, "STS-B", epochs=3.0))
SCALES["cpu-v1"] = replace(SCALES["cpu"], name="cpu-v1", embedding_sizes=(8, 16, 32, 64), finetune_seeds=1,
                           finetune_tasks=_CPU_V2_TASKS,
                           notes="the first cpu scale, superseded by cpu; kept to reproduce its grid")
# the second and third grids' scale: as cpu, with STS-B fine-tuned for 3 epochs (the third grid; the second is
# this scale with --finetune-seeds 1)
SCALES["cpu-v2"] = replace(SCALES["cpu"], name="cpu-v2", finetune_tasks=_CPU_V2_TASKS,
                           notes="the second and third grids' scale (STS-B 3 epochs), superseded by cpu")


SCALE_FILE_SUFFIXES = (".toml", ".json")


def get_scale(name: str, **changes: Any) -> Scale:
    """A named scale, or a scale file (`read_scale_file`: a path ending in .toml or .json), with `changes`."""
    if name not in SCALES:
        if Path(name).suffix.lower() in (*SCALE_FILE_SUFFIXES, ".yaml", ".yml") or user_path(name).is_file():
            scale = read_scale_file(name)
            return replace(scale, **changes) if changes else scale
        from albertlm.config.overrides import nearest_choice

        # the nearest named scale (`CPU`, `cpuu`), as --scale's choices said it before it took files too
        close = nearest_choice(name, list(SCALES))
        hint = f" (did you mean {close}?)" if close else ""
        raise UserError(f"unknown scale {name!r}{hint}; choose from {', '.join(SCALES)}, or give a scale file "
                        f"(.toml or .json: base = \"cpu\" and the fields it changes)")
    return replace(SCALES[name], **changes) if changes else SCALES[name]


# ------------------------------------------------------------------------------------------------ scale files
SEED_LIMIT = 2**31        # pretraining seeds (ablate's --seeds too): a model's fine-tuning seeds are its seed + 1000 i
MIN_VOCAB = 100           # the special tokens and the corpus's characters come first (ablate's --vocab-size too)
MIN_SEQ_LENGTH = 8        # the data builder's least T ([CLS] A [SEP] B [SEP] with room for text)
MAX_SEQ_LENGTH = 65535
# what a scale file may not set, and why (every other Scale field it may)
_DERIVED = {
    "name": "a scale file's scale keeps its base's name (suite.json records the file beside it); write what "
            "it is for in 'notes'",
    "file": "the suite records the file it was given itself",
    "tokens_per_run": "it is max_steps x batch_size x max_seq_length: set those",
    "ffn_size": "it is 4 x hidden_size (I = 4H); a grid variant's model.ffn_size changes it",
    "small_embedding": "it is the second of embedding_sizes",
}
# keys meant elsewhere: a grid's variant, or an ablate option
_ELSEWHERE = {
    **dict.fromkeys(("embedding", "embedding_size", "sharing", "task", "model"),
                    "a grid variant's key (--grid FILE), not the scale's"),
    "tokenizer": "--tokenizer gives a tokenizer of your own", "seed": "did you mean seeds (a list)?",
    "glue_dir": "--glue-dir", "corpus": "--corpus",
}
_TASK_KEYS = ("name", "dir_name", "max_train", "epochs")


def _shown(value: Any) -> str:
    """A value of a file as written there (JSON's spelling; a TOML date as its text), cut to one short line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _choices(cls: type, name: str) -> tuple[str, ...]:
    import typing

    return typing.get_args(typing.get_type_hints(cls)[name])


def read_scale_file(path: str | Path) -> Scale:
    """A user's scale: a TOML or JSON table with `base` (a named scale) and any of the Scale fields it changes
    (`finetune_tasks` a list of tables with name, and optionally dir_name, max_train, epochs; an empty list for
    a suite without fine-tuning, `Scale.intrinsic_only`). Each field is
    checked here (type, range, its agreement with the others); a bad one is a one-line UserError naming the
    file and the field."""
    from albertlm.experiments.grids import read_table_file

    path = user_path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise UserError(f"{path}: a scale file is TOML or JSON, not YAML (base = \"cpu\" and the fields it changes)")
    if path.suffix.lower() not in SCALE_FILE_SUFFIXES:
        raise UserError(f"{path}: a scale file's name ends in .toml or .json (its format)")
    if not path.is_file():
        raise UserError(f"scale {str(path)!r}: not one of {', '.join(SCALES)} nor a scale file (no such file)")
    data: Any = read_table_file(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: a scale file is a table: base = \"cpu\" and the fields it changes")
    allowed = [f.name for f in fields(Scale) if f.name not in _DERIVED]
    for key in data:
        if key == "base" or key in allowed:
            continue
        if key in _DERIVED or key in _ELSEWHERE:
            hint = _DERIVED.get(key) or _ELSEWHERE[key]
        else:
            close = difflib.get_close_matches(key, ["base", *allowed], n=1)
            hint = f"did you mean {close[0]}?" if close else f"a scale file's fields: base, {', '.join(allowed)}"
        raise UserError(f"{path}: unknown field {key!r} ({hint})")
    base_name = data.get("base")
    if "base" not in data:
        raise UserError(f"{path}: base: missing (the named scale this file changes: {', '.join(SCALES)})")
    if not isinstance(base_name, str) or base_name not in SCALES:
        close = difflib.get_close_matches(str(base_name), list(SCALES), n=1)
        raise UserError(f"{path}: base: must be one of {', '.join(SCALES)}, got {_shown(base_name)}"
                        + (f" (did you mean {close[0]}?)" if close else ""))
    base = SCALES[base_name]
    changes = {key: _field_value(path, key, value)
               for key, value in data.items() if key != "base"}
    changes.setdefault("notes", "")   # the base's notes ("plumbing only") describe the base, not this scale
    resolved = {**{f.name: getattr(base, f.name) for f in fields(Scale)}, **changes}
    check_scale(f"{path}: ", resolved, set(changes), base.name)
    return replace(base, **changes, file=str(path.resolve()))


# field -> (type, the check, what it must be); a float field takes an integer too (as a float)
_POSITIVE = (lambda v: v >= 1, "an integer >= 1")
_COUNT = (lambda v: v >= 0, "an integer >= 0 (0 = all / the default)")
_FIELDS: dict[str, tuple[type, Any, str]] = {
    "hidden_size": (int, *_POSITIVE), "num_layers": (int, *_POSITIVE), "num_heads": (int, *_POSITIVE),
    "vocab_size": (int, lambda v: v >= MIN_VOCAB, f"an integer >= {MIN_VOCAB}"),
    "max_seq_length": (int, lambda v: MIN_SEQ_LENGTH <= v <= MAX_SEQ_LENGTH,
                       f"an integer in [{MIN_SEQ_LENGTH}, {MAX_SEQ_LENGTH}] (T: [CLS] A [SEP] B [SEP] and the text)"),
    "max_steps": (int, lambda v: 1 <= v < 2**63, "an integer >= 1"), "batch_size": (int, *_POSITIVE),
    "lr": (float, lambda v: 0 < v < math.inf, "a finite number > 0"),
    "warmup_ratio": (float, lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "dupe_factor": (int, *_POSITIVE), "eval_batches": (int, *_COUNT), "eval_every": (int, *_COUNT),
    "micro_batch_size": (int, *_COUNT),
    "dropout": (float, lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "finetune_lr": (float, lambda v: 0 < v < math.inf, "a finite number > 0"),
    "finetune_batch_size": (int, *_POSITIVE),
    "finetune_seq_length": (int, lambda v: MIN_SEQ_LENGTH <= v, f"an integer >= {MIN_SEQ_LENGTH}"),
    "finetune_seeds": (int, *_POSITIVE), "corpus_chars": (int, *_COUNT), "heldout_chars": (int, *_COUNT),
    "notes": (str, lambda v: True, "a string"),
    "device": (str, lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
               "auto, cpu, cuda or cuda:N"),
}


def _choice_fields() -> dict[str, tuple[str, ...]]:
    """The text fields with a fixed set of values: the configs' own (pretraining's optimizer and precision,
    the data builder's masking)."""
    from albertlm.config.run import OptimConfig, TrainConfig

    return {"optimizer": _choices(OptimConfig, "name"), "precision": _choices(TrainConfig, "precision"),
            "masking": ("ngram", "token")}


def _typed(where: str, value: Any, kind: type, what: str) -> Any:
    """`value` as `kind` (an integer for a float field becomes a float), else the one-line error."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UserError(f"{where} must be {what}, got {_shown(value)} ({_kind(value)})")
    return value


def _field_value(path: Path, key: str, value: Any) -> Any:
    """A scale file's `key`, checked on its own (its type and range) and in the type Scale keeps it."""
    where = f"{path}: {key}"
    if key in _FIELDS:
        kind, ok, what = _FIELDS[key]
        value = _typed(where, value, kind, what)
        if not ok(value):
            raise UserError(f"{where} must be {what}, got {_shown(value)}")
        return value
    choices = _choice_fields()
    if key in choices:
        what = "one of " + ", ".join(choices[key])
        if _typed(where, value, str, what) not in choices[key]:
            close = difflib.get_close_matches(value, choices[key], n=1)
            raise UserError(f"{where} must be {what}, got {_shown(value)}"
                            + (f" (did you mean {close[0]}?)" if close else ""))
        return value
    if key == "embedding_sizes":
        what = "a list of 4 increasing integers >= 1, the last = H (the paper's E 64, 128, 256, 768 = H)"
        if not (isinstance(value, list) and len(value) == 4
                and all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in value)
                and all(a < b for a, b in zip(value, value[1:]))):
            raise UserError(f"{where} must be {what}, got {_shown(value)}")
        return tuple(value)
    if key == "seeds":
        what = f"a list of distinct integers in [0, {SEED_LIMIT})"
        if not (isinstance(value, list) and value and len(set(value)) == len(value)
                and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < SEED_LIMIT for s in value)):
            raise UserError(f"{where} must be {what} (one pretraining run of every variant each), got "
                            f"{_shown(value)}")
        return tuple(value)
    if key == "finetune_tasks":
        # [] (no labelled task in the corpus's language): intrinsic evaluation only, no baselines (`intrinsic_only`)
        if not isinstance(value, list):
            raise UserError(f"{where} must be a list of tasks ({{name = \"sst2\", max_train = 8000, epochs = 2.0}}: "
                            f"the downstream scores of every model; [] for none: held-out MLM / SOP / NSP "
                            f"accuracy only), got {_shown(value)} ({_kind(value)})")
        tasks = tuple(_finetune_task(f"{where}[{i}]", item) for i, item in enumerate(value))
        names = [t.name for t in tasks]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice:
            raise UserError(f"{where}: {twice} is given twice (each task is fine-tuned once per seed)")
        return tasks
    raise AssertionError(key)   # every field of Scale a file may set is handled above


def _finetune_task(where: str, item: Any) -> FinetuneTask:
    """One entry of a scale file's finetune_tasks: a GLUE task with training data, by its name (sst2 or SST-2)."""
    from albertlm.tasks import glue

    if not isinstance(item, dict):
        raise UserError(f"{where} must be a table (name, and optionally dir_name, max_train, epochs), got "
                        f"{_shown(item)}")
    unknown = [k for k in item if k not in _TASK_KEYS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], _TASK_KEYS, n=1)
        raise UserError(f"{where}: unknown field {unknown[0]!r} ("
                        + (f"did you mean {close[0]}?" if close else f"a task's fields: {', '.join(_TASK_KEYS)}")
                        + ")")
    if "name" not in item:
        raise UserError(f"{where}: name: missing (a GLUE task: {', '.join(glue.TASKS)})")
    name = _typed(f"{where}.name", item["name"], str, "a GLUE task's name")
    try:
        info = glue.get_task(name)
    except Exception as exc:   # DataError: "unknown GLUE task 'sst' (did you mean sst2?); choose from ..."
        raise UserError(f"{where}.name: {exc}") from None
    if info.name == "ax":
        raise UserError(f"{where}.name: ax is GLUE's diagnostic set (predicted with an MNLI model): it has no "
                        f"training data to fine-tune on")
    dir_name = _typed(f"{where}.dir_name", item.get("dir_name", info.dir_name), str, "a folder name under --glue-dir")
    if not dir_name or Path(dir_name).name != dir_name or dir_name in (".", ".."):
        raise UserError(f"{where}.dir_name must be a folder name under --glue-dir, got {_shown(dir_name)}")
    max_train = _typed(f"{where}.max_train", item.get("max_train", 0), int, "an integer >= 0 (0 = the whole file)")
    epochs = _typed(f"{where}.epochs", item.get("epochs", 3.0), float, "a finite number > 0")
    if max_train < 0:
        raise UserError(f"{where}.max_train must be an integer >= 0 (0 = the whole file), got {max_train}")
    if not 0 < epochs < math.inf:
        raise UserError(f"{where}.epochs must be a finite number > 0, got {epochs}")
    return FinetuneTask(info.name, dir_name, max_train, epochs)


def check_scale(where: str, s: dict[str, Any], given: set[str], base: str) -> None:
    """The fields of a resolved scale (`s`: every field) that must agree with each other; `given`: those the
    file set, `base`: its base's name (an error names what to change)."""
    h, e = s["hidden_size"], tuple(s["embedding_sizes"])
    if e[-1] != h:
        suggest = [max(1, round(h / 12)), max(2, round(h / 6)), max(3, round(h / 3)), h]
        whose = "" if "embedding_sizes" in given else f" ({base}'s)"
        raise UserError(f"{where}embedding_sizes: the last must be H = hidden_size = {h} (E = H, BERT's), got "
                        f"{list(e)}{whose}: give embedding_sizes for H = {h}"
                        + (f", e.g. {suggest} (the paper's 64, 128, 256, 768 at H = 768)"
                           if all(a < b for a, b in zip(suggest, suggest[1:])) else ""))
    if h % s["num_heads"]:
        raise UserError(f"{where}num_heads: {s['num_heads']} heads do not divide H = hidden_size = {h} (each head "
                        f"has H / A dimensions): give a divisor of {h}")
    if s["precision"] == "fp16" and s["device"] == "cpu":
        raise UserError(f"{where}precision: fp16 needs a CUDA device (loss scaling), and device is cpu: give fp32 "
                        f"or bf16, or device auto / cuda")
    if s["finetune_seq_length"] > s["max_seq_length"]:
        raise UserError(f"{where}finetune_seq_length: {s['finetune_seq_length']} is longer than the models' position "
                        f"embeddings, T = max_seq_length = {s['max_seq_length']} (every fine-tuning would be "
                        f"refused): give at most {s['max_seq_length']}")
    micro = s["micro_batch_size"]
    if micro and s["batch_size"] % micro:
        raise UserError(f"{where}micro_batch_size: batch_size {s['batch_size']} is not a multiple of "
                        f"micro_batch_size {micro} (each step accumulates equal micro-batches)")
    # what the runner builds from the scale, checked the way it will be (a value none of the checks above saw)
    from albertlm.config.model import ModelConfig
    from albertlm.config.run import OptimConfig, TrainConfig

    try:
        ModelConfig(vocab_size=s["vocab_size"], embedding_size=e[1], hidden_size=h, num_layers=s["num_layers"],
                    num_heads=s["num_heads"], ffn_size=4 * h, max_position_embeddings=s["max_seq_length"])
        OptimConfig(name=s["optimizer"], lr=s["lr"], warmup_steps=-1, warmup_ratio=s["warmup_ratio"])
        TrainConfig(max_steps=s["max_steps"], batch_size=s["batch_size"], micro_batch_size=s["micro_batch_size"],
                    precision=s["precision"], eval_batches=s["eval_batches"])
    except Exception as exc:   # ConfigError, UserError
        raise UserError(f"{where}{exc}") from None

