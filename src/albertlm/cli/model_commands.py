"""`albertlm params` (the paper's parameter tables, any preset with overrides) and `albertlm info DIR`.

Overrides are generated from ModelConfig's fields (`config.overrides`): `--embedding-size 768 --sharing attention`.
"""
from __future__ import annotations

import argparse
import json
import typing

from albertlm.config import ModelConfig
from albertlm.config.overrides import Options, add_options, command_line_values, sources_named
from albertlm.errors import UserError

COLUMNS = ("preset", "L", "H", "E", "A", "I", "sharing", "groups", "params", "paper", "heads")


PARAMS = Options(ModelConfig, show_defaults=False, title="ModelConfig overrides (applied to every shown preset)")


# the classes built without the pooler (transformers' too): `info` says their file holds none
WITHOUT_POOLER = frozenset({"AlbertForMaskedLM", "AlbertForTokenClassification", "AlbertForQuestionAnswering",
                            "AlbertForSquadV2"})


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    if command == "info":
        parser.add_argument("directory", metavar="MODEL", help="an albertlm or transformers model directory (or a file in one), "
                            "a run directory or a TF checkpoint")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--config", metavar="FILE", help="TF checkpoint: its albert_config.json where none is "
                            "beside it (run_classifier.py's --output_dir, a TF-Hub module), as `albertlm convert "
                            "--config` takes it")
        return
    parser.add_argument("--preset", action="append", metavar="NAME",
                        help="preset(s) to show (repeatable; default: all of them, the names `albertlm params` lists)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_options(parser, PARAMS)


def count_parameters(cfg: ModelConfig) -> tuple[int, int]:
    """(embeddings + encoder + pooler, MLM + SOP heads), counted on instantiated meta-device modules."""
    import torch

    from albertlm.model.albert import AlbertForPreTraining

    with torch.device("meta"):
        model = AlbertForPreTraining(cfg)
    body = sum(p.numel() for p in model.albert.parameters())
    return body, sum(p.numel() for p in model.parameters()) - body


def _row(name: str, cfg: ModelConfig, paper: float | None) -> dict[str, typing.Any]:
    body, heads = count_parameters(cfg)
    return dict(preset=name, L=cfg.num_layers, H=cfg.hidden_size, E=cfg.embedding_size, A=cfg.num_heads,
                I=cfg.ffn_size, sharing=cfg.sharing, groups=cfg.num_groups, params=body, paper=paper, heads=heads)


def _params_rows(args: argparse.Namespace) -> list[dict[str, typing.Any]]:
    from albertlm.config.presets import PRESETS, get_preset, paper_params

    overrides = command_line_values(args, PARAMS)
    names = list(dict.fromkeys(args.preset)) if args.preset else list(PRESETS)   # a preset named twice: one row
    rows = []
    for name in names:   # the preset's own name (a JSON reader looks it up), and the overrides applied to it
        with sources_named(overrides):   # a value the config refuses is named by the flag typed
            cfg = get_preset(name, **overrides)
        rows.append({**_row(name, cfg, paper_params(name, overrides)), "overrides": dict(overrides)})
    return rows


def _cell(column: str, value: typing.Any) -> str:
    if value is None:
        return "-"
    if column == "paper":  # already in millions, as printed in the paper
        return f"{value:g}M"
    return f"{value / 1e6:.1f}M" if column in ("params", "heads") else str(value)


def print_table(rows: list[dict[str, typing.Any]]) -> None:
    """One line per row; a preset shown with overrides is marked `*`."""
    rows = [{**r, "preset": r["preset"] + (" *" if r.get("overrides") else "")} for r in rows]
    cells = [[_cell(c, r[c]) for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def run(args: argparse.Namespace, command: str) -> int:
    if command == "info":
        return run_info(args)
    rows = _params_rows(args)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows)
        print("\nparams = embeddings + encoder + pooler; heads = MLM + SOP; * = with the overrides; paper = the "
              "paper's Table 1, or Table 3 / 4 for albert-base with --embedding-size / --sharing (its BERT and "
              "not-shared rows leave out the pooler, H*H + H; xxlarge: the paper prints 235M, the architecture has "
              "223M; see docs/model.md)")
    return 0


def _saved_class_and_size(directory, is_hf: bool) -> tuple[str, int, dict[str, int], list[str]]:
    """The model class a checkpoint holds (the one `load_saved_model` loads; a transformers directory's from its
    config), the number of values stored in its weights (shared weights once, every head included): the
    safetensors headers (one file or transformers' shards), or a pickle's tensors (a tied one once), and what of the
    file the class does not read and of the class the file lacks (`_pooler_and_sop_head`). The position and
    token-type id buffers old transformers files keep are no weights and are not counted."""
    import math

    from albertlm.model.io import stored_shapes
    from albertlm.model.registry import hf_class_name, saved_class_name

    # a transformers config is not read twice: its warnings (a multi-label classifier) were printed twice
    name = hf_class_name(directory) if is_hf else saved_class_name(directory)
    buffers = ("embeddings.position_ids", "embeddings.token_type_ids")
    shapes = {key: shape for key, shape in stored_shapes(directory).items() if not key.endswith(buffers)}
    return name, sum(math.prod(shape) for shape in shapes.values()), *_pooler_and_sop_head(name, shapes)


def _pooler_and_sop_head(name: str, shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, int], list[str]]:
    """({"pooler": values} where class `name` has no pooler and the file (its weights' `shapes`, ours or
    transformers' names) holds one, which a model loaded from it leaves unused, else {}; the parts of `name` the file
    lacks, which a model loaded from it draws at random: "SOP head" (an AlbertForPreTraining converted from an older
    TF-Hub module), "pooler")."""
    import math

    def held(part: str) -> list[str]:
        return [key for key in shapes if key.startswith(part) or f".{part}" in key]

    pooler = held("pooler.")
    unused = {"pooler": sum(math.prod(shapes[key]) for key in pooler)} if pooler and name in WITHOUT_POOLER else {}
    sop = held("sop_head.") + held("sop_classifier.")   # ours, transformers'
    absent = ["SOP head"] if name == "AlbertForPreTraining" and not sop else []
    absent += ["pooler"] if name not in WITHOUT_POOLER and not pooler else []
    return unused, absent


def _absent_parts(missing: list[str]) -> list[str]:
    """The parts of a class the weights `missing` (its state-dict keys) make up: "SOP head", "pooler", others by name."""
    parts = {"sop_head.": "SOP head", "pooler.": "pooler", "albert.pooler.": "pooler"}
    return list(dict.fromkeys(next((part for start, part in parts.items() if key.startswith(start)), key)
                              for key in missing))


def _in_the_file(name: str, stored: int, unused: dict[str, int], absent: list[str], tf: bool = False) -> str:
    """The `info` line's account of the file's values: the class's heads it holds, the SOP head or pooler it lacks
    (a model loaded from it makes a fresh one, and says so; of a TF checkpoint, `convert` writes the model without the
    SOP head and refuses any other lack), the values in it the class does not read (the pooler of a class without
    one: google's QA checkpoints hold theirs)."""
    if "SOP head" in absent:
        held = f"{name}'s pooler and masked-LM head, its SOP head not in the file"
    else:
        held = f"{name}'s heads" + (" and no pooler" if name in WITHOUT_POOLER and "pooler" not in unused else "")
    others = [part for part in absent if part != "SOP head"]
    if others:
        held += f", {', '.join(others)} not in the file"
    if absent and tf:
        held += " (`albertlm convert` writes the model without it)" if absent == ["SOP head"] else \
            " (`albertlm convert` refuses it)"
    elif absent:
        held += " (a model loaded from it makes a fresh one, and says so)"
    said = []
    if unused.get("pooler"):
        said.append(f"the pooler's {unused['pooler']:,} values unused: {name} has no pooler")
    if sum(unused.values()) > unused.get("pooler", 0):
        said.append(f"{sum(unused.values()) - unused.get('pooler', 0):,} values in other variables {name} does not "
                    "read")
    return f"in the file, with {held}: {stored:,}" + (f" ({'; '.join(said)})" if said else "")


def _tf_info(path, config: str | None = None) -> dict[str, typing.Any]:
    """A google-research TF checkpoint (a directory holding one, its prefix, or one of its files): described from its
    index and albert_config.json (beside it, or `config`: --config FILE), as `albertlm convert` would import it."""
    from albertlm.interop.tf import describe_tf_checkpoint

    if (path / "variables" / "variables.index").is_file():   # a TF-Hub module
        path = path / "variables"
    tf = describe_tf_checkpoint(path, config)
    # the pooler's variables are said to be unused because of the class only where the class has none; any other
    # unused variable (a pooler's under a class that reads its pooler: not google's) is one the class does not read
    pooler = (sum(v for k, v in tf["unused"].items() if k.startswith("bert/pooler/"))
              if tf["model_class"] in WITHOUT_POOLER else 0)
    unused = {**({"pooler": pooler} if pooler else {}),
              **({"other": sum(tf["unused"].values()) - pooler} if sum(tf["unused"].values()) > pooler else {})}
    return dict(directory=str(tf["prefix"]), format="tf", model_class=tf["model_class"], config=tf["config"],
                stored_parameters=tf["stored_parameters"], files=tf["files"], unused=unused,
                absent=_absent_parts(tf["missing"]), refused=tf.get("refused"))


def _is_tf(path) -> bool:
    """Whether `path` is a google-research TF checkpoint as `albertlm convert` detects one (a directory without
    config.json holding a `*.index`, a prefix, one of its files, a TF-Hub module)."""
    from albertlm.cli.convert_commands import detect_format

    if (path / "config.json").is_file():
        return False
    try:
        return detect_format(path) == "tf"
    except UserError:   # nothing of a TF checkpoint: the errors below say what it is not
        return False


def _task_of(directory, name: str) -> dict:
    """What a fine-tuned model is for, the first thing checked after a conversion: `task` (albertlm's fine-tuning
    record: family, task, max_seq_length, regression) and `labels` (a classifier's id2label and problem_type, from
    config.json, labels.json or that record); neither key when there is nothing to say."""
    from albertlm.model.io import fine_tuning_record, read_labels

    record = fine_tuning_record(directory)
    task = {k: record[k] for k in ("family", "task", "max_seq_length", "regression") if record.get(k) is not None}
    labels = read_labels(directory) if name in ("AlbertForSequenceClassification",
                                                "AlbertForTokenClassification") else {}
    return {**({"task": task} if task else {}), **({"labels": labels} if labels else {})}


def _task_lines(task: dict) -> list[str]:
    lines = []
    record = task.get("task") or {}
    if record:
        said = [f"{record['family']}" + (f" {record['task']}" if record.get("task") else "")] if "family" in record \
            else []
        said += [f"max_seq_length {record['max_seq_length']}"] if "max_seq_length" in record else []
        said += ["regression"] if record.get("regression") else []
        lines.append(f"fine-tuned: {', '.join(said)}")
    labels = task.get("labels") or {}
    if labels.get("id2label"):
        names = labels["id2label"]
        lines.append("labels: " + ", ".join(f"{k} = {names[k]}" for k in sorted(names, key=int)))
    if labels.get("problem_type"):
        lines.append(f"problem_type: {labels['problem_type']}")
    return lines


def run_info(args: argparse.Namespace) -> int:
    from pathlib import Path

    from albertlm.model.io import read_config, resolve_checkpoint

    directory = Path(args.directory)
    config = getattr(args, "config", None)
    if _is_tf(directory):   # google's checkpoints: a directory with albert_config.json, a prefix, one of its files
        info = _tf_info(directory, config)
    elif config is not None:   # was "unrecognized arguments: --config" (info described no TF folder without one)
        raise UserError("--config is only for TF checkpoints (other formats carry config.json)")
    else:
        if directory.is_file() and (directory.parent / "config.json").is_file():   # its config.json or weights file
            directory = directory.parent
        if not directory.exists():   # a Hub name (`albert-base-v2`), as every model-reading command says it
            from albertlm.model.io import DOWNLOADS_NOTHING

            raise UserError(f"{directory}: no such model directory ({DOWNLOADS_NOTHING})")
        if not directory.is_dir():
            raise UserError(f"not a directory: {directory}")
        if not (directory / "config.json").is_file():   # a run directory: fine-tuning's best/, else the newest
            directory = directory / "best" if (directory / "best" / "config.json").is_file() else \
                resolve_checkpoint(directory)
        cfg, is_hf = read_config(directory)
        name, stored, unused, absent = _saved_class_and_size(directory, is_hf)
        info = dict(directory=str(directory), format="transformers" if is_hf else "albertlm", model_class=name,
                    config=cfg, stored_parameters=stored, unused=unused, absent=absent,
                    files={p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()})
    cfg, name = info["config"], info["model_class"]
    body, _ = count_parameters(cfg)
    task = {} if _is_tf(directory) else _task_of(directory, name)
    unused, absent = info["unused"], info["absent"]
    info = dict(directory=info["directory"], format=info["format"], model_class=name, parameters=body,
                stored_parameters=info["stored_parameters"], unused_parameters=sum(unused.values()),
                not_in_file=absent, files=info["files"], config=cfg.to_dict(), **task,
                **({"import_refused": info["refused"]} if info["format"] == "tf" else {}))
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return 0
    print(f"{info['directory']}  ({info['format']} format, {name})")
    for line in _task_lines(task):
        print(line)
    # the architecture's count, as the paper's tables count it, whether or not this class keeps the pooler
    print(f"parameters: {body:,} (embeddings + encoder + pooler, the paper's count); "
          + _in_the_file(name, info["stored_parameters"], unused, absent, info["format"] == "tf"))
    for file, size in info["files"].items():
        print(f"  {file}  {size:,} bytes")
    for key, value in cfg.to_dict().items():
        print(f"  {key} = {value}")
    return 0
