"""Metrics of an existing predictions file against gold data: no model, no tokenizer
(`albertlm evaluate <family> --predictions FILE`). One function per family, taking its data options
(see `tasks.registry`) and, for SQuAD, its scoring options."""
from __future__ import annotations

from pathlib import Path

from albertlm.errors import UserError
from albertlm.tasks import classify, glue, metrics, race, squad
from albertlm.tasks.tables import read_records


def score_squad(opts, predictions: str, score_opts=None, warn=None) -> dict:
    """`warn(line)` gets `SquadEvaluation.warning()` when gold questions have no prediction, and each of its
    `notes()` (predictions for ids not in the gold file, gold answers not in their context, a v1.1 file scored
    as v2.0). No `opts.version` ("") means the version the gold file shows (`squad.detect_version`)."""
    na_probs = score_opts.na_probs if score_opts is not None else ""
    na_prob_thresh = score_opts.na_prob_thresh if score_opts is not None else 1.0
    strict = bool(getattr(score_opts, "strict", False))
    if not opts.dev:
        raise UserError("give the gold file with --data DEV.json")
    if opts.version:
        version = squad.check_version_name(opts.version)
    else:   # read twice (once here): the version decides whether --na-probs may be given
        version = squad.resolve_version(None, [(opts.dev, squad.read_squad(opts.dev, anchored=False))])
    if na_probs and version == "1.1":   # read, then ignored: v1.1 scores every question as answerable
        raise UserError(f"--na-probs {na_probs}: null odds are SQuAD v2.0's (v1.1 has no unanswerable questions); "
                        "leave --na-probs out, or score with --version 2.0")
    result = squad.evaluate_files(opts.dev, predictions, version, na_probs or None, na_prob_thresh,
                                  strict=strict)
    warning = result.warning()
    if warning and warn is not None:
        warn(f"{predictions}: {warning}")
    for note in result.notes():
        if warn is not None:
            warn(note if note.startswith(str(opts.dev)) else f"{predictions}: {note}")
    return result.metrics


def score_race(opts, predictions: str, score_opts=None, warn=None) -> dict:
    if not opts.data_dir:
        raise UserError("give the RACE directory with --data-dir")
    # question ids carry no split (dev/ and test/ hold files of the same names): a `test_predictions.json`
    # scored against dev's answers without --split gave a number; the file's name says its split
    named = race.split_of_predictions(predictions)
    if opts.split and named and opts.split != named:
        raise UserError(f"--split {opts.split}, but {Path(predictions).name} holds {named} predictions (by its "
                        f"name); give --split {named}, or rename the file if it really is {opts.split}'s")
    split = opts.split or named or "dev"
    examples = race.read_race(opts.data_dir, split, opts.level_list())
    if warn is not None:    # a level asked for with no passages (the shared dev has no high/): said, as fine-tuning says it
        from albertlm.tasks.specs import _note_missing_levels
        notes: list[str] = []
        _note_missing_levels(split, examples, opts.level_list(), notes)
        for note in notes:
            warn(note)
    preds = race.read_predictions(predictions)
    missing = [e.qid for e in examples if e.qid not in preds]
    if missing:
        raise UserError(f"{predictions}: no prediction for {len(missing)} questions (e.g. {missing[0]})")
    # a prediction for a question the split does not hold, in a level it was read for (`high/999.txt#0`): another
    # split's or another data set's file, scored on the questions the two share (a level not asked for with
    # --levels is left out, as asked)
    golds, levels = {e.qid for e in examples}, {e.qid.split("/", 1)[0] for e in examples}
    extra = [qid for qid in preds if qid.split("/", 1)[0] in levels and qid not in golds]
    if extra:
        raise UserError(f"{predictions}: {len(extra)} predictions name questions not in {opts.split or named or 'dev'} "
                        f"(e.g. {extra[0]}); are these the predictions for this split?")
    return race.race_metrics(examples, [preds[e.qid] for e in examples])


def score_glue(opts, predictions: str, score_opts=None, warn=None) -> dict:
    task = glue.get_task(opts.task)
    dev = opts.dev or (glue.find_split(task, opts.data_dir, "dev") if opts.data_dir else [])
    if not dev:
        raise UserError("give the gold dev file with --dev FILE (or --data-dir)")
    if len(dev) > 1:    # MNLI's matched and mismatched dev: the file these predictions are of, by its name
        named = [path for path in dev if f"{glue.split_name(Path(path))}_predictions.tsv" == Path(predictions).name]
        if len(named) != 1:
            raise UserError(f"--predictions scores one dev file and {len(dev)} were found "
                            f"({', '.join(Path(path).name for path in dev)}); give the one with --dev FILE")
        dev = named
    _check_mnli_split(dev[0], predictions)
    # the diagnostic set beside MNLI's dev files is read in its own layout and scored as --task ax (MCC)
    task = glue.file_task(task, Path(dev[0]))
    # --skip-bad-rows: the malformed gold rows skipped as `predict --skip-bad-rows` skipped them (its predictions are
    # numbered by the rows kept), counted and said; without it such a row is an error naming the option
    skipped = glue.Problems() if getattr(opts, "skip_bad_rows", False) else None
    examples = glue.read_examples(task, dev[0], True, skipped, skip_option="--skip-bad-rows")
    if skipped is not None and skipped.counts and warn is not None:
        n = sum(skipped.counts.values())
        first = [where for places in skipped.examples.values() for where in places][:3]
        warn(f"{dev[0]}: {n} malformed row{'s' * (n != 1)} skipped (--skip-bad-rows; first at {', '.join(first)}): "
             f"the predictions are scored against the other {len(examples)} rows, numbered as `predict "
             "--skip-bad-rows` numbers them")
    preds = glue.read_predictions(task, predictions)
    keys = [str(i) for i in range(len(examples))]
    missing = [k for k in keys if k not in preds]
    if missing:
        raise UserError(f"{predictions}: no prediction for index {missing[0]} "
                        f"({len(missing)} of {len(examples)} missing)")
    rows = set(keys)
    extra = [k for k in preds if k not in rows]
    if extra:   # indices are row positions: a longer file's first rows would be scored against this one's
        raise UserError(f"{predictions}: {len(preds)} predictions for the {len(examples)} rows of {dev[0]} (index "
                        f"{extra[0]} is not one of its rows); are these the predictions for this file?")
    gold = glue.label_ids(task, examples)
    pred_examples = [glue.Example(k, "", None, preds[k], predictions) for k in keys]
    return metrics.glue_metrics(task.name, gold, glue.label_ids(task, pred_examples))


MNLI_DEV = ("dev_matched", "dev_mismatched")


def _check_mnli_split(dev: str | Path, predictions: str) -> None:
    """MNLI's matched predictions scored against the mismatched dev file (or the reverse): `predict` names them
    `<dev file>_predictions.tsv`, and files of equal length were scored without a word."""
    # the dev file's GLUE name: a Hub export (`validation_matched-00000-of-00001.parquet`) is dev_matched too
    stem, name = glue.split_name(Path(dev)), Path(predictions).name
    other = next((s for s in MNLI_DEV if name == f"{s}_predictions.tsv"), None)
    if stem in MNLI_DEV and other is not None and other != stem:
        raise UserError(f"{predictions}: by its name these are the predictions of {other}.tsv, and --dev is "
                        f"{Path(dev).name}; give --dev {other}.tsv (or rename the file if it is right)")


def score_classify(opts, predictions: str, score_opts=None, warn=None) -> dict:
    if not opts.dev:
        raise UserError("give the gold file with --data FILE")
    # the labels (and ids) only: scoring reads no text, so a gold file's text columns need not be named
    examples = classify.read_examples(opts.dev, opts.columns(), True, opts.regression, texts=False)
    preds = {}
    model_labels: list[str] = []   # the p_<label> columns `predict` writes: the model's label set, in its order
    for lineno, record in read_records(predictions, "tsv"):
        if "id" not in record or "prediction" not in record:
            raise UserError(f"{predictions}:{lineno}: expected the columns id, prediction")
        if not preds:
            model_labels = [name[2:] for name in record if isinstance(name, str) and name.startswith("p_")]
        key = str(record["id"])
        if key in preds:   # the later line replaced the earlier one without a word
            raise UserError(f"{predictions}:{lineno}: a second prediction for id {key}")
        preds[key] = record["prediction"]
    missing = [e.guid for e in examples if e.guid not in preds]
    if missing:
        raise UserError(f"{predictions}: no prediction for id {missing[0]}")
    gold_ids = {e.guid for e in examples}
    extra = [k for k in preds if k not in gold_ids]
    if extra and not opts.id_column:   # ids are row numbers: another file's predictions would line up by position
        raise UserError(f"{predictions}: {len(preds)} predictions for the {len(examples)} rows of {opts.dev} (id "
                        f"{extra[0]} is not one of its rows); are these the predictions for this file?")
    if extra and warn is not None:
        warn(f"{predictions}: {len(extra)} predictions have ids that are not in {opts.dev} (e.g. {extra[0]}); "
             "they are ignored")
    if opts.regression:
        return metrics.regression_metrics([e.label for e in examples],
                                          [_score(preds[e.guid], predictions, e.guid) for e in examples])
    pred_examples = [classify.TextExample(e.guid, "", None, str(preds[e.guid]).strip(), f"{predictions}: id {e.guid}")
                     for e in examples]
    # the label set: --labels, else the model's, in its order, as the predictions file's p_<label> columns name
    # it (sorted, a two-class F1 was the other class's than the run's own when the model's order was given with
    # --labels), else every label the gold file or the predictions use (a class the model predicts that this dev
    # file lacks is a wrong prediction, not an unreadable file)
    names = {classify.label_name(label) for label in model_labels}
    if not all(classify.label_name(e.label) in names for e in pred_examples):   # other columns than predict's
        model_labels = []
    # a Hub Parquet/Arrow gold file's ClassLabel ids are its class names, as the run trained on them
    from albertlm.tasks.specs import class_label_names, name_class_ids

    class_names = class_label_names(opts.dev, opts.columns().label)
    if class_names and {classify.label_name(e.label) for e in pred_examples} <= set(class_names):
        name_class_ids(examples, class_names, class_names)
    if model_labels and not opts.label_list():
        # a gold class the model lacks is a wrong prediction, as without p_<label> columns (it was "not in the
        # label set", a set the user never gave): the model's labels in its order, then the gold file's others
        model_labels = model_labels + classify.other_labels(examples, model_labels)
    labels = classify.label_set([*examples, *pred_examples], opts.label_list() or model_labels or None)
    gold = classify.label_ids(examples, labels)
    return metrics.classification_metrics(gold, classify.label_ids(pred_examples, labels), len(labels))


def _score(value: str, predictions: str, guid: str) -> float:
    """A regression prediction: a finite number (a UserError naming the file and id otherwise)."""
    import math

    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise UserError(f"{predictions}: the prediction for id {guid} is {value!r}, expected a number (regression)")
    return number
