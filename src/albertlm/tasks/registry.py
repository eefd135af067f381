"""The task families by name: each one's data options (`tasks.options`: a dataclass whose fields become the
command-line options of `albertlm finetune|predict|evaluate <family>`), how it builds its `TaskSpec`, how it scores a
predictions file, and which paper recipe `--recipe paper` means. Adding a family is one entry here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from albertlm.errors import UserError
from albertlm.tasks import glue, scoring, specs, squad
from albertlm.tasks.options import ClassifyOptions, GlueOptions, RaceOptions, SquadOptions


# ------------------------------------------------------------------------------------- spec builders
def _glue_spec(o: GlueOptions, tokenizer, cfg, training: bool, info: dict):
    return specs.glue_spec(o.task, tokenizer, cfg, o.data_dir or None, o.train or None, o.dev or None,
                           o.test or None, o.skip_bad_rows, training)


def _squad_spec(o: SquadOptions, tokenizer, cfg, training: bool, info: dict):
    if not training and not o.dev:
        # nothing to read: said here, before the version the (absent) files show is asked for
        raise UserError("no SQuAD file to read: give --dev FILE (or --data FILE)")
    settings = squad.SquadSettings(cfg.max_seq_length, o.doc_stride, o.max_query_length, o.n_best_size,
                                   o.max_answer_length)
    # predicting with a v2.0 model: the null threshold its run tuned on dev (task.json), for a file without answers
    threshold = info.get("null_threshold") if not training and str(info.get("version")) == o.version else None
    recorded = float(threshold) if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) else None
    extra: dict[str, Any] = {"null_threshold": recorded} if recorded is not None else {}
    applied = _null_threshold(o.null_threshold, recorded, training, info, o.version)
    if applied is not None:
        extra["applied_threshold"] = applied
    if not training and o.version == "2.0" and str(info.get("version")) == "2.0":
        extra["version_from"] = "the version the model was fine-tuned with"   # said if the data looks like v1.1
    return specs.squad_spec(o.version, tokenizer, cfg, o.train or None, o.dev or None, settings, training, **extra)


def _null_threshold(given: str, recorded: float | None, training: bool, info: dict, version: str = "") -> float | None:
    """`--null-threshold`: the no-answer threshold applied to predictions.json whatever the file (None: tuned on a
    labelled file, else the model's recorded one, else 0). A number, or `recorded` (predict / evaluate: the one
    the model's run tuned on dev). `finetune` takes a number for a --dev file without answers (nothing to tune it
    on); a resumed run keeps the one it started with (recorded in its config as `given_null_threshold`)."""
    import math

    text = str(given or "").strip()
    started = info.get("given_null_threshold") if training and info else None   # a resumed run's (saved config)
    if training and info and text and (started is None or _number(text) != started):
        was = f"--null-threshold {started:g}" if started is not None else "no --null-threshold"
        raise UserError(f"--resume: the run was started with {was}, now --null-threshold {text}; drop the option, "
                        "or start over with --overwrite")
    if not text:
        return float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else None
    if text and version.startswith("1"):
        raise UserError(f"--null-threshold: SQuAD v{version} has no unanswerable questions (no null predictions); "
                        "leave it out, or give --version 2.0")
    if text == "recorded":
        if training:
            raise UserError("--null-threshold recorded is for predict / evaluate (the threshold a fine-tuned model's "
                            "run recorded); finetune tunes its own on a labelled --dev: give a number, or leave it "
                            "out")
        if recorded is None:
            raise UserError("--null-threshold recorded: the model records no tuned null threshold (a run's best/"
                            "task.json holds it, as does the run_config.json of a checkpoints/step_N saved right "
                            "after a dev evaluation; a step_N saved between evaluations (--save-every), a SQuAD v1.1 "
                            "model or a converted checkpoint has none): give a number, e.g. for such a step the "
                            "dev/null_threshold of a nearby evaluated step in the run's metrics.jsonl")
        return recorded
    value = _number(text)
    if value is None or not math.isfinite(value):
        raise UserError(f"--null-threshold {text!r}: a number (a question is unanswered where its odds in "
                        "null_odds.json exceed it) or 'recorded' (the one the model's run tuned on dev)")
    return value


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _squad_version(o: SquadOptions) -> str:
    """The version given, or the one the data files show (`--recipe paper` picks google's recipe for it)."""
    if o.version:
        return o.version
    files = [path for path in (o.train, o.dev) if path]
    if not files:   # no file to show a version: the train file fine-tuning needs is what is missing
        raise UserError("SQuAD fine-tuning needs --train FILE (the official train JSON)")
    return squad.resolve_version(None, [(path, squad.read_squad(path, anchored=False)) for path in files])


def _race_spec(o: RaceOptions, tokenizer, cfg, training: bool, info: dict):
    if not o.data_dir:
        raise UserError("the following arguments are required: --data-dir/--data")
    splits = (o.split,) if o.split else ("dev", "test")
    return specs.race_spec(o.data_dir, tokenizer, cfg, o.level_list(), o.max_qa_length, training, splits)


def _classify_spec(o: ClassifyOptions, tokenizer, cfg, training: bool, info: dict):
    if training and not o.train:
        raise UserError("classify fine-tuning needs --train FILE (a CSV / TSV / JSONL / Parquet file of labelled "
                        "texts)")
    regression = o.regression or bool(info.get("regression"))
    labels = info.get("labels") or o.label_list() or None   # a fine-tuned model's labels, in its order
    return specs.classify_spec(tokenizer, cfg, o.columns(), o.train or None, o.dev or None, o.test or None,
                               regression, labels, training)


# Lengths that cut the model's inputs: `predict` / `evaluate --model` default to the ones its run recorded
# (task.json); a flag giving another is used, and a warning says so (inputs cut otherwise than in training give
# other predictions and scores than the run's, without a word before).
LENGTHS = {"race": ("max_qa_length",), "squad": ("max_query_length",)}


def _length_notes(family: str, options, cfg, info: dict) -> list[str]:
    """A warning per length given other than the one the model was fine-tuned with (max_seq_length, and the
    family's own in LENGTHS)."""
    given = [("max_seq_length", cfg.max_seq_length)]
    given += [(name, getattr(options, name)) for name in LENGTHS.get(family, ())]
    notes = []
    for name, value in given:
        recorded = info.get(name, (info.get("settings") or {}).get(name))
        if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded != value:
            flag = "--" + name.replace("_", "-")
            notes.append(f"{flag} {value}: the model was fine-tuned with {recorded}; its inputs are cut otherwise "
                         f"than in training, which can change its predictions (leave {flag} out to use {recorded})")
    return notes


def _noting_lengths(family: str, build: Callable[..., Any]) -> Callable[..., Any]:
    """A spec builder whose prediction specs (not `training`) carry `_length_notes` among their warnings."""
    def built(options, tokenizer, cfg, training: bool, info: dict):
        spec = build(options, tokenizer, cfg, training, info)
        if not training:
            spec.warnings.extend(_length_notes(family, options, cfg, info))
        return spec

    return built


# ---------------------------------------------------------------------- settings a run recorded
# A run records its data settings in task.json (and its checkpoints' run_config.json): `predict`, `evaluate
# --model` and `finetune --resume` take them as the defaults of the data options (a flag given overrides).
def _glue_recorded(info: dict) -> dict:
    return {"task": info["task"]} if info.get("task") else {}


def _glue_canonical(given: dict) -> dict:
    """`--task` in GLUE's own spelling (`RTE`, `SST-2`, `MNLI-m`, `AX`) is the task's name (`rte`, `sst2`,
    `mnli`, `ax`), as a run records it: compared with the model's task and a resumed run's, and naming the recipe.
    An unknown name is an error listing the tasks."""
    return {**given, "task": glue.get_task(given["task"]).name} if given.get("task") else given


def _squad_recorded(info: dict) -> dict:
    settings = info.get("settings") or {}
    names = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length")
    return {**({"version": info["version"]} if "version" in info else {}),
            **{name: settings[name] for name in names if name in settings}}


def _race_recorded(info: dict) -> dict:
    return {**({"levels": ",".join(info["levels"])} if info.get("levels") else {}),
            **({"max_qa_length": info["max_qa_length"]} if "max_qa_length" in info else {})}


def _classify_recorded(info: dict) -> dict:
    columns = info.get("columns") or {}
    out = {f"{name}_column": columns[name] or "" for name in ("text", "text_pair", "label", "id") if name in columns}
    if "regression" in info:
        out["regression"] = bool(info["regression"])
    if info.get("labels"):
        out["labels"] = ",".join(info["labels"])
    return out


def _classify_fixed(recorded: dict, given: dict) -> str | None:
    """What a flag may not change at prediction time: the model's inputs and outputs."""
    pair = recorded.get("text_pair_column")
    if pair is not None and "text_pair_column" in given and bool(given["text_pair_column"]) != bool(pair):
        return (f"--text-pair-column: the model was fine-tuned on sentence pairs (column {pair!r}); give your "
                "file's second text column" if pair else
                "--text-pair-column: the model was fine-tuned on single texts; leave the option out")
    for key in ("regression", "labels"):
        if key in recorded and key in given and given[key] != recorded[key]:
            return (f"--{key}: the model was fine-tuned with {key} {recorded[key]!r}, not {given[key]!r}; "
                    "leave the option out")
    return None


@dataclass(frozen=True)
class TaskFamily:
    name: str
    options: type                                        # the data options dataclass
    build_spec: Callable[..., Any]                       # (options, tokenizer, cfg, training, task info) -> TaskSpec
    score: Callable[..., dict]                           # (options, predictions file, score options, warn=) -> metrics
    paper_recipe: Callable[[Any], str] | None = None     # options -> the recipe `--recipe paper` names
    data_flags: str = "--dev FILE"                       # what `predict` / `evaluate --model` read
    recorded: Callable[[dict], dict] = lambda info: {}   # task.json -> data option defaults (see above)
    # (recorded, given) -> why the given options cannot be used with the model, or None
    fixed: Callable[[dict, dict], str | None] = lambda recorded, given: None
    # the given data options in the spelling a run records (GLUE task names), before they are compared with it
    canonical: Callable[[dict], dict] = lambda given: given


FAMILIES: dict[str, TaskFamily] = {f.name: f for f in (
    TaskFamily("glue", GlueOptions, _noting_lengths("glue", _glue_spec), scoring.score_glue,
               paper_recipe=lambda o: "mnli" if glue.get_task(o.task).name == "ax" else glue.get_task(o.task).name,
               data_flags="--dev FILE, --test FILE or --data-dir DIR", recorded=_glue_recorded,
               canonical=_glue_canonical),
    TaskFamily("squad", SquadOptions, _noting_lengths("squad", _squad_spec), scoring.score_squad,
               paper_recipe=lambda o: "squad2.0" if _squad_version(o).startswith("2") else "squad1.1",
               data_flags="--dev FILE (or --data FILE)", recorded=_squad_recorded),
    TaskFamily("race", RaceOptions, _noting_lengths("race", _race_spec), scoring.score_race,
               paper_recipe=lambda o: "race-v2",
               data_flags="--data-dir DIR with dev/ or test/ (or --split NAME)", recorded=_race_recorded),
    TaskFamily("classify", ClassifyOptions, _noting_lengths("classify", _classify_spec), scoring.score_classify,
               data_flags="--dev FILE or --test FILE", recorded=_classify_recorded, fixed=_classify_fixed),
)}


def get_family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise UserError(f"unknown task family {name!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name]


def paper_recipe_name(family: str, options) -> str:
    """The recipe `--recipe paper` picks for a family and its options."""
    picker = get_family(family).paper_recipe
    if picker is None:
        raise UserError(f"no paper recipe for {family}; name one with --recipe or set the flags")
    return picker(options)
