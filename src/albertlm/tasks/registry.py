"""The task families by name: each one's data options (`tasks.options`: a dataclass whose fields become the
command-line options of `albertlm finetune|predict|evaluate <family>`), how it builds its `TaskSpec`, how it scores a
predictions file, and which paper recipe `--recipe paper` means. Adding a family is one entry here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from albertlm.errors import UserError
from albertlm.tasks import scoring, specs, squad
from albertlm.tasks.options import ClassifyOptions, GlueOptions, RaceOptions, SquadOptions


# ------------------------------------------------------------------------------------- spec builders
def _glue_spec(o: GlueOptions, tokenizer, cfg, training: bool, info: dict):
    return specs.glue_spec(o.task, tokenizer, cfg, o.data_dir or None, o.train or None, o.dev or None,
                           o.test or None, o.skip_bad_rows, training)


def _squad_spec(o: SquadOptions, tokenizer, cfg, training: bool, info: dict):
    settings = squad.SquadSettings(cfg.max_seq_length, o.doc_stride, o.max_query_length, o.n_best_size,
                                   o.max_answer_length)
    return specs.squad_spec(o.version, tokenizer, cfg, o.train or None, o.dev or None, settings, training)


def _race_spec(o: RaceOptions, tokenizer, cfg, training: bool, info: dict):
    if not o.data_dir:
        raise UserError("the following arguments are required: --data-dir/--data")
    splits = (o.split,) if o.split else ("dev", "test")
    return specs.race_spec(o.data_dir, tokenizer, cfg, o.level_list(), o.max_qa_length, training, splits)


def _classify_spec(o: ClassifyOptions, tokenizer, cfg, training: bool, info: dict):
    regression = o.regression or bool(info.get("regression"))
    labels = o.label_list() or info.get("labels") or None
    return specs.classify_spec(tokenizer, cfg, o.columns(), o.train or None, o.dev or None, o.test or None,
                               regression, labels, training)


@dataclass(frozen=True)
class TaskFamily:
    name: str
    options: type                                        # the data options dataclass
    build_spec: Callable[..., Any]                       # (options, tokenizer, cfg, training, task info) -> TaskSpec
    score: Callable[..., dict]                           # (options, predictions file, score options, warn=) -> metrics
    paper_recipe: Callable[[Any], str] | None = None     # options -> the recipe `--recipe paper` names


FAMILIES: dict[str, TaskFamily] = {f.name: f for f in (
    TaskFamily("glue", GlueOptions, _glue_spec, scoring.score_glue,
               paper_recipe=lambda o: "mnli" if o.task == "ax" else o.task),
    TaskFamily("squad", SquadOptions, _squad_spec, scoring.score_squad,
               paper_recipe=lambda o: "squad2.0" if o.version.startswith("2") else "squad1.1"),
    TaskFamily("race", RaceOptions, _race_spec, scoring.score_race, paper_recipe=lambda o: "race-v2"),
    TaskFamily("classify", ClassifyOptions, _classify_spec, scoring.score_classify),
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
