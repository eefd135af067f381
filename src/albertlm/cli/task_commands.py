"""`albertlm finetune|predict|evaluate glue|squad|race|classify`.

finetune: train a task head on a checkpoint (ours or a transformers ALBERT directory), keep the best dev
checkpoint in OUT/best, write OUT/metrics.json and prediction files.
predict: run a fine-tuned checkpoint (OUT/best) on data and write prediction files (and metrics if the
data is labelled). evaluate: print metrics JSON, either of a checkpoint (`--model`) or of an existing
predictions file (`--predictions`, scored against the gold data without a model).
Heavy imports (torch) happen inside functions so `albertlm --help` stays fast.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from albertlm.errors import UserError

FAMILIES = ("glue", "squad", "race", "classify")
RUN_FLAGS = ("lr", "batch_size", "grad_accum", "epochs", "max_steps", "warmup_steps", "warmup_ratio", "max_seq_length",
             "seed", "precision", "eval_batch_size", "eval_every", "log_every", "device", "weight_decay",
             "hidden_dropout", "attention_dropout", "classifier_dropout")


# ------------------------------------------------------------------------------------------ arguments


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="family", metavar="{glue,squad,race,classify}", required=True)
    for family in FAMILIES:
        p = sub.add_parser(family, help=f"{command} {family}")
        _data_arguments(p, family, command)
        if command == "finetune":
            p.add_argument("--model", required=True, help="checkpoint dir (ours or a transformers ALBERT dir)")
            p.add_argument("--out", required=True, help="run directory (best/, metrics.json, predictions)")
            _run_arguments(p)
        elif command == "predict":
            p.add_argument("--model", required=True, help="a fine-tuned checkpoint (RUN/best)")
            p.add_argument("--out", required=True, help="directory for the prediction files")
            _eval_run_arguments(p)
        else:  # evaluate
            p.add_argument("--model", help="a fine-tuned checkpoint (RUN/best) to run on the data")
            p.add_argument("--predictions", help="score this predictions file instead (no model)")
            if family == "squad":
                p.add_argument("--na-probs", help="null_odds.json for SQuAD v2.0 (enables best thresholds)")
                p.add_argument("--na-prob-thresh", type=float, default=1.0)
            p.add_argument("--out", help="also write prediction files here (with --model)")
            _eval_run_arguments(p)
        p.add_argument("--tokenizer", help="tokenizer file/dir (default: the files in the model dir)")


def _data_arguments(p, family: str, command: str) -> None:
    if family == "glue":
        p.add_argument("--task", required=True, help="cola sst2 mrpc stsb qqp mnli qnli rte wnli ax")
        p.add_argument("--data-dir", help="the task's GLUE folder (train.tsv, dev.tsv or val.tsv, test.tsv)")
        p.add_argument("--train", help="training file (instead of DATA_DIR/train.tsv)")
        p.add_argument("--dev", nargs="+", help="dev file(s) (instead of DATA_DIR/dev*.tsv or val.tsv)")
        p.add_argument("--test", nargs="+", help="unlabelled test file(s) for GLUE submission files "
                                                 "(an MNLI run may add diagnostic.tsv / AX.tsv)")
        p.add_argument("--skip-bad-rows", action="store_true",
                       help="skip rows with too few fields (counted and reported) instead of stopping")
    elif family == "squad":
        p.add_argument("--version", choices=("1.1", "2.0"), default="2.0")
        p.add_argument("--train", help="SQuAD train JSON")
        p.add_argument("--dev", "--data", dest="dev", help="SQuAD dev JSON (official or flat layout)")
        p.add_argument("--doc-stride", type=int, default=128)
        p.add_argument("--max-query-length", type=int, default=64)
        p.add_argument("--n-best-size", type=int, default=20)
        p.add_argument("--max-answer-length", type=int, default=30)
    elif family == "race":
        p.add_argument("--data-dir", "--data", dest="data_dir", required=command != "evaluate",
                       help="the RACE directory (train/ dev/ test/ with middle/ high/)")
        p.add_argument("--levels", default="middle,high", help="middle, high or both (comma-separated)")
        p.add_argument("--max-qa-length", type=int, default=128)
        p.add_argument("--split", default=None, help="split to predict/evaluate (default dev)")
    else:
        p.add_argument("--train", help="training CSV/TSV/JSONL")
        p.add_argument("--dev", "--data", dest="dev", help="labelled dev file")
        p.add_argument("--test", help="unlabelled file to predict")
        p.add_argument("--text-column", default="text")
        p.add_argument("--text-pair-column", default=None)
        p.add_argument("--label-column", default="label")
        p.add_argument("--id-column", default=None)
        p.add_argument("--regression", action="store_true", help="a real-valued label (MSE loss)")
        p.add_argument("--labels", help="comma-separated label set (default: sorted training labels)")


def _run_arguments(p) -> None:
    p.add_argument("--recipe", help="paper hyperparameters: 'paper' (for this task) or a name "
                                    "(cola, sst2, ..., squad1.1, squad2.0, race, race-v2); flags override")
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int, help="examples per optimizer step")
    p.add_argument("--grad-accum", type=int, help="split each step into N micro-batches (less memory)")
    p.add_argument("--epochs", type=float)
    p.add_argument("--max-steps", type=int, help="optimizer steps (overrides --epochs)")
    p.add_argument("--warmup-steps", type=int)
    p.add_argument("--warmup-ratio", type=float)
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--eval-every", type=int, help="steps between dev evaluations (default: each epoch)")
    p.add_argument("--log-every", type=int)
    p.add_argument("--hidden-dropout", type=float)
    p.add_argument("--attention-dropout", type=float)
    p.add_argument("--classifier-dropout", type=float)
    _eval_run_arguments(p)


def _eval_run_arguments(p) -> None:
    p.add_argument("--max-seq-length", type=int)
    p.add_argument("--eval-batch-size", type=int)
    p.add_argument("--precision", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--device", help="auto, cpu, cuda, cuda:1")


# ---------------------------------------------------------------------------------------- settings


def _config(args, family: str, task_info: dict | None = None):
    from albertlm.tasks import recipes

    cfg = recipes.FAMILY_DEFAULTS[family]
    if getattr(args, "recipe", None):
        name = args.recipe
        if name == "paper":
            name = recipes.paper_recipe_name(family, getattr(args, "task", None), getattr(args, "version", None))
        cfg = recipes.recipe(name)
    if task_info and "max_seq_length" in task_info:
        cfg = cfg.replace(max_seq_length=task_info["max_seq_length"])
    explicit = {k: getattr(args, k) for k in RUN_FLAGS if getattr(args, k, None) is not None}
    if "epochs" in explicit and "max_steps" not in explicit:
        explicit["max_steps"] = 0  # --epochs beats a recipe's step count
    if "warmup_ratio" in explicit and "warmup_steps" not in explicit:
        explicit["warmup_steps"] = -1
    return cfg.replace(**explicit)


def resolve_model(path: str | Path) -> Path:
    """A model directory, or a pretraining run directory (its newest checkpoint)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    from albertlm.training.checkpoint import latest_checkpoint

    latest = latest_checkpoint(path) if path.is_dir() else None
    if latest is None:
        raise UserError(f"{path}: not a model directory (no config.json) nor a pretraining run with checkpoints")
    print(f"using the newest checkpoint of the run: {latest}", file=sys.stderr)
    return latest


def _has_tokenizer(directory: Path) -> bool:
    return directory.is_dir() and (any((directory / n).is_file() for n in ("spiece.model", "vocab.txt"))
                                   or bool(list(directory.glob("*.model"))))


def _tokenizer_of_pretraining(model_dir: Path) -> Path | None:
    """The tokenizer recorded in the pretraining data's meta.json (run_config.json -> data.path)."""
    config = model_dir / "run_config.json"
    if not config.is_file():
        return None
    data_dir = json.loads(config.read_text()).get("data", {}).get("path", "")
    meta = Path(data_dir) / "meta.json" if data_dir else None
    if meta is None or not meta.is_file():
        return None
    path = json.loads(meta.read_text()).get("tokenizer", {}).get("path")
    return Path(path) if path and Path(path).exists() else None


def _tokenizer(args):
    """--tokenizer, else the model directory's files, else the pretraining run's tokenizer."""
    from albertlm.tokenization import load_tokenizer

    if args.tokenizer:
        return load_tokenizer(args.tokenizer)
    model_dir = Path(args.model)
    if _has_tokenizer(model_dir):
        return load_tokenizer(model_dir)
    recorded = _tokenizer_of_pretraining(model_dir)
    if recorded is not None:
        return load_tokenizer(recorded)
    raise UserError(f"no tokenizer files (spiece.model / vocab.txt) in {model_dir}; pass --tokenizer PATH")


def _task_info(model_dir) -> dict:
    from albertlm.tasks.finetune import TASK_FILE

    path = Path(model_dir) / TASK_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _spec(args, family: str, tokenizer, cfg, training: bool, info: dict):
    from albertlm.tasks import classify, race, specs, squad

    if family == "glue":
        return specs.glue_spec(args.task, tokenizer, cfg, args.data_dir, args.train, args.dev, args.test,
                               args.skip_bad_rows, training)
    if family == "squad":
        settings = squad.SquadSettings(cfg.max_seq_length, args.doc_stride, args.max_query_length,
                                       args.n_best_size, args.max_answer_length)
        return specs.squad_spec(args.version, tokenizer, cfg, args.train, args.dev, settings, training)
    if family == "race":
        levels = tuple(level.strip() for level in args.levels.split(",") if level.strip())
        bad = [level for level in levels if level not in race.LEVELS]
        if bad:
            raise UserError(f"--levels: unknown level(s) {bad}; use middle, high")
        splits = (args.split,) if args.split else ("dev", "test")
        return specs.race_spec(args.data_dir, tokenizer, cfg, levels, args.max_qa_length, training, splits)
    columns = classify.Columns(args.text_column, args.text_pair_column, args.label_column, args.id_column)
    regression = args.regression or bool(info.get("regression"))
    labels = args.labels.split(",") if args.labels else (info.get("labels") or None)
    return specs.classify_spec(tokenizer, cfg, columns, args.train, args.dev, args.test, regression, labels,
                               training)


# -------------------------------------------------------------------------------------------- run


def run(args, command: str) -> int:
    if command == "finetune":
        return _finetune(args)
    if command == "predict":
        return _predict(args)
    return _evaluate(args)


def _finetune(args) -> int:
    from albertlm.tasks.finetune import run_finetune

    family = args.family
    cfg = _config(args, family)
    args.model = str(resolve_model(args.model))
    tokenizer = _tokenizer(args)
    spec = _spec(args, family, tokenizer, cfg, training=True, info={})
    spec.info["max_seq_length"] = cfg.max_seq_length
    metrics = run_finetune(spec, args.model, tokenizer, cfg, args.out)
    print(json.dumps({"best": metrics["best"], "out": str(args.out)}, indent=2, sort_keys=True))
    return 0


def _run_checkpoint(args) -> dict:
    """Metrics (and prediction files in args.out) of a fine-tuned checkpoint on the given data."""
    from albertlm.tasks.finetune import run_evaluation

    info = _task_info(args.model)
    _check_family(args, info)
    cfg = _config(args, args.family, info)
    tokenizer = _tokenizer(args)
    spec = _spec(args, args.family, tokenizer, cfg, training=False, info=info)
    return run_evaluation(spec, args.model, tokenizer, cfg, args.out)


def _predict(args) -> int:
    print(json.dumps(_run_checkpoint(args), indent=2, sort_keys=True))
    return 0


def _evaluate(args) -> int:
    if bool(args.model) == bool(args.predictions):
        raise UserError("give either --model CHECKPOINT or --predictions FILE")
    metrics = score_predictions(args) if args.predictions else _run_checkpoint(args)
    print(json.dumps(metrics, indent=2, sort_keys=True))
    return 0


def _check_family(args, info: dict) -> None:
    if info and info.get("family") != args.family:
        raise UserError(f"{args.model} was fine-tuned for {info.get('family')}, not {args.family}")
    if args.family == "glue" and info.get("task") and info["task"] != args.task and args.task != "ax":
        raise UserError(f"{args.model} was fine-tuned on {info['task']}, not {args.task}")


def score_predictions(args) -> dict:
    """Metrics of an existing predictions file against gold data: no model, no tokenizer."""
    if args.family == "squad":
        return _score_squad(args)
    if args.family == "race":
        return _score_race(args)
    if args.family == "glue":
        return _score_glue(args)
    return _score_classify(args)


def _score_squad(args) -> dict:
    from albertlm.tasks import metrics, squad

    if not args.dev:
        raise UserError("give the gold file with --data DEV.json")
    golds = squad.gold_answers(squad.read_squad(args.dev))
    preds = squad.read_predictions(args.predictions)
    na_probs = squad.read_null_odds(args.na_probs) if args.na_probs else None
    if args.version.startswith("1"):
        return metrics.squad_v1_scores(golds, preds)
    if na_probs is not None:
        missing = [q for q in preds if q not in na_probs]
        if missing:
            raise UserError(f"{args.na_probs}: no null odds for {len(missing)} questions (e.g. {missing[0]})")
    return metrics.squad_v2_scores(golds, preds, na_probs, args.na_prob_thresh)


def _score_race(args) -> dict:
    from albertlm.tasks import race

    if not args.data_dir:
        raise UserError("give the RACE directory with --data-dir")
    levels = tuple(level.strip() for level in args.levels.split(","))
    examples = race.read_race(args.data_dir, args.split or "dev", levels)
    preds = race.read_predictions(args.predictions)
    missing = [e.qid for e in examples if e.qid not in preds]
    if missing:
        raise UserError(f"{args.predictions}: no prediction for {len(missing)} questions (e.g. {missing[0]})")
    return race.race_metrics(examples, [preds[e.qid] for e in examples])


def _score_glue(args) -> dict:
    from albertlm.tasks import glue, metrics

    task = glue.get_task(args.task)
    dev = args.dev or (glue.find_split(task, args.data_dir, "dev") if args.data_dir else [])
    if not dev:
        raise UserError("give the gold dev file with --dev FILE (or --data-dir)")
    examples = glue.read_examples(task, dev[0])
    preds = glue.read_predictions(task, args.predictions)
    keys = [str(i) for i in range(len(examples))]
    missing = [k for k in keys if k not in preds]
    if missing:
        raise UserError(f"{args.predictions}: no prediction for index {missing[0]} "
                        f"({len(missing)} of {len(examples)} missing)")
    gold = glue.label_ids(task, examples)
    pred_examples = [glue.Example(k, "", None, preds[k], args.predictions) for k in keys]
    return metrics.glue_metrics(task.name, gold, glue.label_ids(task, pred_examples))


def _score_classify(args) -> dict:
    from albertlm.tasks import classify, metrics
    from albertlm.tasks.tables import read_records

    if not args.dev:
        raise UserError("give the gold file with --data FILE")
    columns = classify.Columns(args.text_column, args.text_pair_column, args.label_column, args.id_column)
    examples = classify.read_examples(args.dev, columns, True, args.regression)
    preds = {}
    for lineno, record in read_records(args.predictions, "tsv"):
        if "id" not in record or "prediction" not in record:
            raise UserError(f"{args.predictions}:{lineno}: expected the columns id, prediction")
        preds[str(record["id"])] = record["prediction"]
    missing = [e.guid for e in examples if e.guid not in preds]
    if missing:
        raise UserError(f"{args.predictions}: no prediction for id {missing[0]}")
    if args.regression:
        return metrics.regression_metrics([e.label for e in examples], [float(preds[e.guid]) for e in examples])
    labels = args.labels.split(",") if args.labels else classify.label_set(examples)
    gold = classify.label_ids(examples, labels)
    pred_examples = [classify.TextExample(e.guid, "", None, str(preds[e.guid]), f"{args.predictions}:{e.guid}")
                     for e in examples]
    return metrics.classification_metrics(gold, classify.label_ids(pred_examples, labels), len(labels))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `albertlm finetune|predict|evaluate ...`")
