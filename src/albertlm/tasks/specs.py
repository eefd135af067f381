"""From files to a `TaskSpec` for each family: features, dev scoring and prediction writers.

The readers (glue.py, squad.py, race.py, classify.py) know the formats; this module wires them to the
driver in finetune.py.

The driver (`EvalSet`, `TaskSpec`), the heads and `write_text_atomic` load torch (about 2 s): they are imported
where a spec or an evaluation set is made, so that `tasks.registry`, which imports this module, scores a
predictions file (`albertlm evaluate <family> --predictions`) without torch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from albertlm.config.task import FinetuneConfig
from albertlm.errors import UserError
from albertlm.tasks import classify, glue, race, squad
from albertlm.tasks.features import Feature, encode_pairs, tokenizing
from albertlm.tasks.metrics import (GLUE_METRICS, classification_metrics, glue_metrics, regression_metrics,
                                    squad_v1_scores)
from albertlm.tasks.tables import DataError, Problems

if TYPE_CHECKING:   # imported where used (they load torch; see the module's docstring)
    from albertlm.tasks.features import FeatureWindows
    from albertlm.tasks.finetune import EvalSet, TaskSpec


def _pair_features(tokenizer, examples, labels, max_length: int, problems: Problems, where: str,
                   show: bool = False, warnings: list[str] | None = None) -> list[Feature]:
    """Features of GLUE / classify examples; each one truncated is a problem naming its file and line. `show`:
    the tokenizing is shown on a terminal; `warnings`: a line naming `where` is added when much of its text is
    the unknown token (features.tokenizing)."""
    with tokenizing(tokenizer, where, show, warnings) as counted:
        return _encoded_features(counted, examples, labels, max_length, problems, where)


def _encoded_features(tokenizer, examples, labels, max_length: int, problems: Problems, where: str,
                      start: int = 0) -> list[Feature]:
    """`_pair_features` with a tokenizer already counted (`tokenizing`); `start`: the first example's index."""
    cut: list[int] = []
    pairs, _ = encode_pairs(tokenizer, [e.text_a for e in examples], [e.text_b for e in examples], max_length, cut)
    for i in cut:
        problems.add(f"truncated to {max_length} tokens ({where})", examples[i].where)
    labels = labels if labels is not None else [None] * len(pairs)
    return [Feature(ids, types, start + i, label) for i, ((ids, types), label) in enumerate(zip(pairs, labels))]


def _examples_windows(examples: Iterable, size: int) -> Iterator[list]:
    """`examples` in lists of `size` (the last one shorter), as they are read."""
    window: list = []
    for example in examples:
        window.append(example)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _class_preds(logits: np.ndarray, regression: bool) -> np.ndarray:
    return logits[:, 0] if regression else logits.argmax(-1)


def class_probabilities(logits: np.ndarray) -> np.ndarray:
    """The softmax of each row of class logits, in float64 (shifted by the row's largest logit: no overflow)."""
    shifted = np.asarray(logits, dtype=np.float64)
    shifted = shifted - shifted.max(-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(-1, keepdims=True)


# -------------------------------------------------------------------------------------------- GLUE


def glue_spec(task_name: str, tokenizer, cfg: FinetuneConfig, data_dir: str | Path | None = None,
              train_file=None, dev_files: Sequence | None = None, test_files: Sequence | None = None,
              skip_bad_rows: bool = False, training: bool = True) -> TaskSpec:
    """Not `training` (predict / evaluate): the dev and test files are read a window at a time
    (`_streamed_glue_set`); fine-tuning reads its files whole."""
    task = glue.get_task(task_name)
    problems = Problems()
    tolerate = problems if skip_bad_rows else None   # test rows are never skipped (glue.read_examples)
    files = _glue_files(task, data_dir, train_file, dev_files, test_files, training)

    def read(path: Path, labelled: bool):
        return glue.read_examples(glue.file_task(task, path), path, labelled, tolerate, skip_option="--skip-bad-rows")

    def features(path: Path, examples, labelled: bool):
        labels = glue.label_ids(task, examples) if labelled else None
        return _pair_features(tokenizer, examples, labels, cfg.max_seq_length, problems, path.name,
                              cfg.train.progress, warnings)

    _check_distinct_outputs(task, files)
    for path in (path for paths in files.values() for path in paths):   # a misplaced diagnostic set: before reading
        glue.file_task(task, path)
    warnings: list[str] = []
    if not training:    # predict / evaluate: each dev and test file a window at a time, whatever its size
        eval_sets = [_streamed_glue_set(task, path, labelled, tolerate, tokenizer, cfg.max_seq_length, problems,
                                        warnings)
                     for labelled, split in ((True, "dev"), (False, "test")) for path in files[split]]
        return _glue_task_spec(task, [], eval_sets, problems, warnings)
    train_path = files["train"][0]
    train_examples = read(train_path, True)
    dev = [(path, read(path, True)) for path in files["dev"]]
    train_examples = _msr_train(task, train_path, train_examples, dev, problems, warnings)
    warnings.extend(_wnli_adversarial(task, train_examples, dev))
    train = features(train_path, train_examples, True)
    eval_sets = [_glue_dev_set(task, path, examples, features(path, examples, True), glue.file_task(task, path).name)
                 for path, examples in dev]
    for path in files["test"]:
        examples = read(path, False)
        eval_sets.append(_glue_test_set(task, path, examples, features(path, examples, False)))
    return _glue_task_spec(task, train, eval_sets, problems, warnings)


def _glue_task_spec(task, train, eval_sets, problems: Problems, warnings: list[str]) -> TaskSpec:
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.finetune import TaskSpec

    main = GLUE_METRICS["mnli" if task.name == "ax" else task.name][0]
    return TaskSpec("glue", AlbertForSequenceClassification, {"num_labels": task.num_labels}, train, eval_sets,
                    main, torch.float32 if task.is_regression else torch.long,
                    {"task": task.name, "labels": list(task.labels or [])}, problems, warnings=warnings)


MSR_DEV_PAIR = "training pair of GLUE's MRPC dev set left out (msr_paraphrase_train.txt holds it)"


def _msr_train(task, path: Path, examples, dev, problems: Problems, warnings: list[str]):
    """MRPC trained on the original `msr_paraphrase_train.txt`, which is GLUE's train and dev sets together
    (download_glue_data.py cuts dev.tsv out of it by id): without a dev file the run has nothing to score and
    says so; with one, its pairs are left out of training, as GLUE's train.tsv leaves them out, so that the
    dev scores are held out (counted in the notes). Other tasks' and files' examples are returned as they are."""
    if task.name != "mrpc" or not glue.is_msr_file(path):
        return examples
    if not dev:
        warnings.append(f"{path.name} is GLUE's MRPC train and dev sets in one file, and no dev file was given: "
                        "nothing is scored and the last model is kept as best/; give --dev with GLUE's MRPC "
                        "dev.tsv (its pairs are then left out of training, as in GLUE's train.tsv)")
        return examples
    # a pair is known by its two sentence ids (`#1 ID`, `#2 ID`) or its two texts (a tokenized dev.tsv, as
    # transformers' fixture, has other texts for the same ids)
    ids = glue.mrpc_id_pairs(path)
    dev_ids = {pair for dev_path, _ in dev for pair in glue.mrpc_id_pairs(dev_path).values()}
    dev_texts = {(e.text_a, e.text_b) for _, dev_examples in dev for e in dev_examples}
    kept = []
    for e in examples:
        if (e.text_a, e.text_b) in dev_texts or ids.get(e.where) in dev_ids:
            problems.add(MSR_DEV_PAIR, e.where)
        else:
            kept.append(e)
    if len(kept) < len(examples):
        warnings.append(f"{len(examples) - len(kept)} of the {len(examples)} pairs of {path.name} are dev pairs: "
                        f"left out of training ({len(kept)} kept), as GLUE's train.tsv leaves them out")
    if not kept:
        raise DataError(f"{path}: every training pair is a dev pair; give another --dev or --train")
    return kept


def _wnli_adversarial(task, train_examples, dev) -> list[str]:
    """WNLI's dev set is adversarial (GLUE): its pairs share their first sentence with training pairs of the other
    label, so a model that fits the training set scores below the majority class there, and the best model is
    kept by that score. A line per dev file where that holds, with the majority class's score beside it."""
    if task.name != "wnli" or not train_examples:
        return []
    labels_of: dict[str, set] = {}
    for e in train_examples:
        labels_of.setdefault(e.text_a.strip(), set()).add(e.label)
    majority = max(sorted(task.labels), key=[e.label for e in train_examples].count)
    lines = []
    for path, examples in dev:
        flipped = sum(1 for e in examples if e.label not in labels_of.get(e.text_a.strip(), {e.label}))
        if flipped:
            right = sum(1 for e in examples if e.label == majority) / len(examples)
            lines.append(f"{path.name}: {flipped} of its {len(examples)} pairs share their first sentence with "
                         "training pairs of the other label only, as in GLUE's adversarial WNLI dev set: a model that "
                         "fits the training set scores below the majority class there, and best/ is kept by that "
                         f"score; the training set's majority class ({majority}) scores {right:.1%} on it, and GLUE's "
                         "baselines submit the majority class for WNLI's test set (65.1%)")
    return lines


def _glue_files(task, data_dir, train_file, dev_files, test_files, training: bool) -> dict[str, list[Path]]:
    found = {}
    for split, given in (("train", [train_file] if train_file else None), ("dev", dev_files), ("test", test_files)):
        if given:
            found[split] = [Path(p) for p in given]
        elif data_dir is not None:
            found[split] = glue.find_split(task, data_dir, split)
        else:
            found[split] = []
    if training and task.name == "ax":
        raise DataError("ax has no training data: fine-tune mnli, then "
                        "`albertlm predict glue --task ax --model MNLI_RUN/best --test diagnostic.tsv --out DIR`")
    if training and not found["train"]:
        raise DataError(f"no training file for {task.name}: give --data-dir with train.tsv (or the Hugging Face Hub's "
                        "train-00000-of-00001.parquet) or --train FILE")
    return found


def _submission_name(task, path: Path) -> str:
    """The GLUE server's file name for a test file's predictions: AX.tsv for the diagnostic set, MNLI-mm.tsv
    for a mismatched MNLI test file (by its name: `test_mismatched.tsv`, `mnli_test_mismatched.tsv`, the Hub's
    `test_mismatched-00000-of-00001.parquet`, or by its Hub config folder: `mnli_mismatched/test-*.parquet`); a
    file whose name says neither set (`test.tsv`) by its genres (`glue.mnli_set`): the mismatched set so named was
    written as MNLI-m.tsv, which the server scores against the matched set's answers."""
    if glue.is_diagnostic(path):
        return "AX.tsv"
    if task.name == "mnli":
        name, split = path.name.lower(), glue.hub_split(path) or ""
        if "mismatched" in name or split.endswith("_mismatched"):
            return "MNLI-mm.tsv"
        if "matched" not in name and not split.endswith("_matched") and glue.mnli_set(path) == "mismatched":
            return "MNLI-mm.tsv"
    return glue.SUBMISSION_NAMES.get((task.name, path.name), task.submission_name)


def _check_distinct_outputs(task, files: dict[str, list[Path]]) -> None:
    """Two dev files with one split name, or two test files with one submission file, would write the same
    prediction file (the second silently replacing the first) and report one set of metrics: refused, before
    anything is read, naming both files."""
    for split, name_of in (("dev", _split_name), ("test", lambda path: _submission_name(task, path))):
        seen: dict[str, Path] = {}
        for path in files[split]:
            name = name_of(path)
            if name in seen:
                what = (f"submission/{name}" if split == "test" else
                        f"{name}_predictions.tsv and the metrics of '{name}'")
                raise DataError(f"--{split} {seen[name]} and {path} would both write {what}: give one of them "
                                "per run (or rename one)")
            seen[name] = path


def _split_name(path: Path) -> str:
    return glue.split_name(path)    # `val.tsv` and the Hub's `validation-00000-of-00001.parquet`: dev


def _glue_dev_set(task, path: Path, examples, features, scored_as: str | None = None,
                  labels: list | None = None) -> EvalSet:
    """`scored_as`: the task whose metrics score the file (`ax` for the diagnostic set beside MNLI's dev files: its
    Matthews correlation, GLUE's R3, as `--task ax` scores it; MNLI's accuracy alone before). `examples`: the rows
    (a list), or a callable that reads them again, in order (`_streamed_glue_set`); `labels`: their class ids (or
    scores) where already read."""
    from albertlm.tasks.finetune import EvalSet

    labels = glue.label_ids(task, examples) if labels is None else labels
    name = _split_name(path)

    def score(out):
        return glue_metrics(scored_as or task.name, labels, _class_preds(out["logits"], task.is_regression))

    def write(out, out_dir: Path) -> list[Path]:
        path = out_dir / f"{name}_predictions.tsv"
        glue.write_submission(task, examples() if callable(examples) else examples,
                              _class_preds(out["logits"], task.is_regression), path)
        return [path]

    return EvalSet(name, features, score, write)


def _glue_test_set(task, path: Path, examples, features) -> EvalSet:
    """`examples`: as `_glue_dev_set`'s (the submission's indexes are theirs)."""
    from albertlm.tasks.finetune import EvalSet

    file_name = _submission_name(task, path)

    def write(out, out_dir: Path) -> list[Path]:
        (out_dir / "submission").mkdir(parents=True, exist_ok=True)
        path = out_dir / "submission" / file_name
        glue.write_submission(task if file_name != "AX.tsv" else glue.get_task("ax"),
                              examples() if callable(examples) else examples,
                              _class_preds(out["logits"], task.is_regression), path, by_guid=True)
        return [path]

    return EvalSet(f"test:{path.name}", features, None, write)


def _streamed_glue_set(task, path: Path, labelled: bool, tolerate: Problems | None, tokenizer, max_length: int,
                       problems: Problems, warnings: list[str]) -> EvalSet:
    """A GLUE dev or test file for `predict` / `evaluate glue`, never held whole (`_streamed_examples`, as
    classify's: about 1.8 kB a row held, 700 MB for QQP's 390,965 test rows): every row checked in a first reading
    as `glue.read_examples` checks it (layout, labels, a test index given twice, malformed rows skipped and
    counted with --skip-bad-rows), its gold labels and indexes kept; then read again a window at a time to be
    tokenized and predicted, each window checked to be the rows first read. The same files, byte for byte, as from
    the file held whole."""
    file_task = glue.file_task(task, path)

    def read(purpose: str) -> Iterator[glue.Example]:
        # read again: the skipped rows were counted by the first reading (and are skipped the same way again)
        given = tolerate if purpose == "check" or tolerate is None else Problems()
        return glue.iter_examples(file_task, path, labelled, given, skip_option="--skip-bad-rows")

    index = {label: i for i, label in enumerate(task.labels or ())}

    def gold(window: list[glue.Example]) -> np.ndarray:
        # (`glue.label_ids`) a row without a label (a Hub export's -1) is refused by the reader once the file is
        # read: -1 here until then
        if task.is_regression:
            return np.asarray([np.nan if e.label is None else float(e.label) for e in window], dtype=np.float64)
        return np.asarray([-1 if e.label is None else index[e.label] for e in window], dtype=np.int64)

    features, labels, rows = _streamed_examples(path, read, gold if labelled else None, tokenizer, max_length,
                                                problems, warnings, path.name)
    if labelled:
        return _glue_dev_set(task, path, rows, features, file_task.name, labels)
    return _glue_test_set(task, path, rows, features)


# ------------------------------------------------------------------------------------------- SQuAD


def squad_spec(version: str, tokenizer, cfg: FinetuneConfig, train_file=None, dev_file=None,
               settings: squad.SquadSettings | None = None, training: bool = True,
               null_threshold: float | None = None, applied_threshold: float | None = None,
               version_from: str = "--version 2.0") -> TaskSpec:
    """`null_threshold`: v2.0's no-answer threshold for a file without answers to tune it on (the one the
    fine-tuning run tuned on its dev set, recorded in task.json); a labelled dev file tunes its own.
    `applied_threshold` (`--null-threshold`): the threshold applied to the dev file whether it has answers or not
    (its metrics are those of predictions.json at it, `best_*` still tuned on it); `finetune` (`training`) takes
    it for a file without answers only, and records it in task.json as the run's `null_threshold`.
    `version` "" (none given): the version the files show (`squad.resolve_version`; a UserError where they show
    none or disagree); `version_from`: where a "2.0" given came from, for the warning that a file looks like v1.1
    (`squad.version_note`)."""
    import torch

    from albertlm.model.heads import AlbertForQuestionAnswering, AlbertForSquadV2
    from albertlm.tasks.finetune import SPANS, SQUAD_BEAM, TaskSpec

    head = cfg.squad_head
    if version:   # a version given is checked before any file is read
        version = squad.check_version_name(version)
        _check_squad_head(head, version, training)
    settings = settings or squad.SquadSettings(max_seq_length=cfg.max_seq_length)
    problems = Problems()
    warnings: list[str] = []
    if training and train_file is None:
        raise DataError("SQuAD fine-tuning needs --train FILE (the official train JSON)")
    # read first: the version the files show decides how they are checked and scored. A dev file's gold answers
    # are only scored, by their text, so one missing from its context is kept (as the official scripts score it)
    raw = {split: (path, Problems()) for split, path in (("train", train_file if training else None),
                                                          ("dev", dev_file)) if path is not None}
    examples_of = {split: squad.read_squad(path, found, anchored=split == "train")
                   for split, (path, found) in raw.items()}
    given = version
    version = squad.resolve_version(version, [(raw[split][0], examples_of[split]) for split in raw])
    _check_squad_head(head, version, training)
    info = {"version": version, "settings": vars(settings)}
    if head != "bert":
        info["squad_head"] = head
    if given:   # a v1.1 file read as v2.0 (given, or the model's): said, as `evaluate --predictions` says it
        for path in dict.fromkeys(raw[split][0] for split in raw):
            split = next(s for s in raw if raw[s][0] == path)
            note = squad.version_note(version, examples_of[split], path, version_from,
                                      _v11_advice(head, training, version_from))
            if note:
                warnings.append(note)
    dev_labelled = "dev" in raw and any(e.labelled for e in examples_of["dev"])
    _check_applied_threshold(applied_threshold, version, training, dev_labelled)
    if training and applied_threshold is not None:
        # the run's threshold: `predict` applies it on new files; `given_null_threshold` is what a --resume keeps
        # (a threshold tuned at an evaluation is `null_threshold` alone)
        info["null_threshold"] = info["given_null_threshold"] = float(applied_threshold)
    if "dev" in raw and not dev_labelled and not version.startswith("1") and applied_threshold is None \
            and null_threshold is None:
        warnings.append(_untuned_note(raw["dev"][0], training))

    def read(split: str):
        """The split's examples and features; what was tolerated is counted per split (`(train)`, `(dev)`), as
        GLUE's and RACE's are: one tally for both counted a file given as train and dev twice, under one name."""
        path, found = raw[split]
        examples = examples_of[split]
        unanswerable = [e.qid for e in examples if e.is_impossible]
        said = [e.qid for e in examples if e.said_unanswerable]
        if version.startswith("1") and unanswerable and (said or len(unanswerable) < len(examples)):
            raise DataError(f"{path}: question {(said or unanswerable)[0]} has no answer ({len(unanswerable)} such); "
                            "SQuAD v1.1 needs one for every question: use --version 2.0")
        with tokenizing(tokenizer, f"SQuAD {split}", cfg.train.progress, warnings) as counted:
            features = squad.build_features(counted, examples, settings, split == "train", found)
        for kind, n in found.counts.items():
            named = f"{kind} ({split})"
            problems.counts[named] += n
            problems.examples[named] = found.examples.get(kind, [])
        return examples, features

    train = []
    if training:
        _, train = read("train")
        if head == "xlnet":   # google's head also learns whether each window answers (answer_class)
            for f in train:
                f.label = (*f.label, f.extra["is_impossible"])
    eval_sets = []
    if dev_file is not None:
        examples, features = read("dev")
        threshold = applied_threshold if applied_threshold is not None else null_threshold
        eval_sets.append(_squad_eval_set(version, tokenizer, settings, examples, features, info,
                                         0.0 if threshold is None else float(threshold), head,
                                         fixed=applied_threshold is not None))
    model_class, outputs = (AlbertForSquadV2, SQUAD_BEAM) if head == "xlnet" else (AlbertForQuestionAnswering, SPANS)
    return TaskSpec("squad", model_class, {}, train, eval_sets, "f1", torch.long,
                    info, problems, outputs=outputs, warnings=warnings)


SQUAD_HEADS = ("bert", "xlnet")


def _v11_advice(head: str, training: bool, version_from: str) -> str:
    """What to do about a v1.1 file read as v2.0 (`squad.version_note`): v1.1's own reading where the head allows
    it (google's v2.0 head is refused with v1.1), else a threshold no odds exceed (no '' predicted)."""
    if head == "xlnet":
        return ("google's v2.0 head scores v2.0 only: give --null-threshold 1e9 to answer every question"
                if not training else "train BERT's head with --version 1.1 (--squad-head bert) if it is v1.1")
    if version_from != "--version 2.0":
        return "give --version 1.1 if it is v1.1 (the model is used as it is; v1.1 never predicts '')"
    return "give --version 1.1 if it is v1.1"


def _untuned_note(path, training: bool) -> str:
    """The warning for a v2.0 file without answers predicted with no threshold tuned, recorded or given: 0.0 is
    applied, which is a tuned one only by chance (the odds are logit differences, or answer_class logits)."""
    if training:
        why = "no labelled --dev to tune it on"
        fix = "give --null-threshold X (one tuned on labelled dev data) for its predictions.json"
    else:
        why = ("the model records none (a fine-tuning run's best/task.json does, as does the run_config.json of a "
               "checkpoints/step_N saved right after a dev evaluation; a step_N saved between evaluations "
               "(--save-every) or a converted checkpoint does not)")
        fix = ("give --null-threshold X: the run's best/task.json null_threshold, or for such a step the "
               "dev/null_threshold of a nearby evaluated step in the run's metrics.jsonl")
    return (f"{path} has no answers to tune SQuAD v2.0's no-answer threshold on, and {why}: predictions.json "
            f"nulls the questions whose odds exceed 0.0 (null_odds.json holds them); {fix}")


def _check_applied_threshold(threshold: float | None, version: str, training: bool, dev_labelled: bool) -> None:
    """`--null-threshold` is v2.0's; `finetune` tunes it on a labelled --dev (as google's run_squad does) and keeps
    the best model by the F1 at the tuned one, so there it is taken for a file without answers only."""
    if threshold is None:
        return
    if version.startswith("1"):
        raise UserError(f"--null-threshold: SQuAD v{version} has no unanswerable questions (no null predictions); "
                        "leave it out, or give --version 2.0")
    if training and dev_labelled:
        raise UserError("--null-threshold: finetune tunes the no-answer threshold on a labelled --dev and keeps the "
                        "best model by the F1 at it; leave it out, and apply another to the best model with "
                        "`albertlm predict squad --null-threshold`")


def _check_squad_head(head: str, version: str, training: bool) -> None:
    """google's v2.0 head learns whether a question has an answer: SQuAD v1.1 (every question has one) is refused
    with it, in one line, before anything is tokenized."""
    if head not in SQUAD_HEADS:
        raise UserError(f"squad_head {head!r}: one of {', '.join(SQUAD_HEADS)}")
    if head == "xlnet" and version.startswith("1"):
        fix = ("give --squad-head bert (and not --recipe squad2.0: SQuAD v1.1's recipe is squad1.1) to train BERT's "
               "head (a --model holding the xlnet head goes on with it unless told)" if training else
               "give SQuAD v2.0 data, or a model fine-tuned with BERT's head (--squad-head bert)")
        raise UserError(f"the xlnet SQuAD head (google's run_squad_v2.py head, AlbertForSquadV2) is for SQuAD v2.0, "
                        f"not v{version}: {fix}")


def _squad_eval_set(version: str, tokenizer, settings, examples, features, info: dict,
                    threshold: float = 0.0, head: str = "bert", fixed: bool = False) -> EvalSet:
    """Scoring v2.0 tunes the null threshold on this file and records it in `info` (task.json beside the best
    model), so that predicting on a file without answers applies the run's threshold, not 0. `fixed`
    (`--null-threshold`): `threshold` is applied and scored instead (the tuned `best_*` beside it). `head` "xlnet":
    google's v2.0 head's outputs, post-processed as its write_predictions_v2 (`squad.postprocess_beam`)."""
    from albertlm.tasks.finetune import EvalSet
    from albertlm.training.checkpoint import write_text_atomic

    golds = squad.gold_answers(examples)
    # a question is labelled by its answers or by the file saying it has none (v2.0's is_impossible): a dev file
    # whose every question is unanswerable is scored, not taken for a file to predict on
    labelled = any(e.labelled for e in examples)
    state = {"threshold": threshold}

    def predictions(out):
        if head == "xlnet":
            return squad.postprocess_beam(examples, features, out, tokenizer, settings)
        return squad.postprocess(examples, features, out["start_logits"], out["end_logits"], tokenizer, settings)

    def score(out):
        preds = predictions(out)
        if version.startswith("1"):
            return squad_v1_scores(golds, squad.final_predictions(preds, version))
        if fixed:
            return squad.tune_threshold(golds, preds, applied=threshold)
        metrics = squad.tune_threshold(golds, preds)
        state["threshold"] = info["null_threshold"] = metrics["null_threshold"]
        return metrics

    def write(out, out_dir: Path) -> list[Path]:
        preds = predictions(out)
        final = squad.final_predictions(preds, version, state["threshold"])
        written = [out_dir / "predictions.json"]
        write_text_atomic(written[0], json.dumps(final, indent=2, ensure_ascii=False) + "\n")
        if not version.startswith("1"):
            written.append(out_dir / "null_odds.json")
            write_text_atomic(written[-1], json.dumps(squad.null_odds(preds), indent=2) + "\n")
        else:   # an earlier v2.0 prediction's odds would sit beside these predictions as theirs
            (out_dir / "null_odds.json").unlink(missing_ok=True)
        nbest = squad.nbest_json(preds, version)
        written.append(out_dir / "nbest_predictions.json")
        write_text_atomic(written[-1], json.dumps(nbest, ensure_ascii=False) + "\n")
        return written

    return EvalSet("dev", features, score if labelled else None, write)


# -------------------------------------------------------------------------------------------- RACE


def race_spec(data_dir, tokenizer, cfg: FinetuneConfig, levels=race.LEVELS, max_qa_length: int = 128,
              training: bool = True, eval_splits: Sequence[str] = ("dev", "test")) -> TaskSpec:
    """Training on RACE/train (when `training`) and an eval set per split of `eval_splits` that is there. A
    split to predict may have no answers (new questions: predictions are written, nothing is scored); a split
    that lacks a level asked for is scored on the others and a warning says so; `--split train` while fine-tuning
    reuses the training features (its truncations are counted once)."""
    import torch

    from albertlm.model.heads import AlbertForMultipleChoice
    from albertlm.tasks.finetune import TaskSpec

    problems = Problems()
    root = Path(data_dir)
    levels = tuple(dict.fromkeys(levels))
    show = cfg.train.progress
    warnings: list[str] = []
    train, train_examples = [], []
    if training:
        train_examples = race.read_race(root, "train", levels)
        _note_missing_levels("train", train_examples, levels, warnings)
        with tokenizing(tokenizer, "RACE train", show, warnings) as counted:
            train = race.build_features(counted, train_examples, cfg.max_seq_length, max_qa_length, problems,
                                        "train")
    eval_sets = []
    # predict / evaluate on a split directory itself (`--data-dir RACE/dev`, as `evaluate race --predictions` and
    # read_race take it): that directory is the split, named by --split or by itself
    # (a Hugging Face export's folder is none: the Hub's snapshot holds middle/ and high/ configs beside all/)
    exported = {split: race.hf_split_files(root, split) for split in race.SPLITS}
    split_dir = not training and root.is_dir() and not any((root / s).is_dir() for s in ("train", "dev", "test")) \
        and any((root / level).is_dir() for level in race.LEVELS) and not any(exported.values())
    if split_dir and len(eval_splits) != 1:
        eval_splits = (root.name if root.name in ("train", "dev", "test") else "dev",)
    for split in eval_splits:
        if not split_dir and not (root / split).is_dir() and not exported.get(split):
            continue
        if training and split == "train":       # the training questions themselves: read and counted once
            examples, features = train_examples, train
        else:
            examples = race.read_race(root, split, levels, answers=False)
            _check_answered(split, examples)
            with tokenizing(tokenizer, f"RACE {split}", show, warnings) as counted:
                features = race.build_features(counted, examples, cfg.max_seq_length, max_qa_length, problems,
                                               split)
        if (split != "train" or not training) and all(e.label is not None for e in examples):
            _note_missing_levels(split, examples, levels, warnings)      # a split only predicted has no accuracy
        eval_sets.append(_race_eval_set(split, examples, features, selects=split == eval_splits[0]))
    if not training and not eval_sets and (len(eval_splits) == 1 or (root / "RACE").is_dir()
                                           or root.name in race.LEVELS or root.is_file()):
        race.read_race(root, eval_splits[0], levels)  # says what is missing (and the RACE/ inside, if any)
    return TaskSpec("race", AlbertForMultipleChoice, {}, train, eval_sets, "accuracy", torch.long,
                    {"levels": list(levels), "max_qa_length": max_qa_length}, problems, warnings=warnings)


def _check_answered(split: str, examples) -> None:
    """A split is scored on all its questions or, without answers, only predicted: passages with and without
    answers in one split are refused (the accuracy would leave some questions out)."""
    unanswered = [e for e in examples if e.label is None]
    if unanswered and len(unanswered) < len(examples):
        raise DataError(f"{split}: {len(unanswered)} of the {len(examples)} questions have no answer (first "
                        f"{unanswered[0].qid}, its passage has no 'answers'): give the answers of every passage "
                        "to score the split, or of none to only predict it")


def _note_missing_levels(split: str, examples, levels: Sequence[str], warnings: list[str]) -> None:
    """A level asked for (`--levels middle,high`, the default) with no passages in the split: its `accuracy`
    is the other level's alone, which is said (the paper's RACE number is over both)."""
    found = {e.level for e in examples}
    missing = [level for level in levels if level not in found]
    if missing and found:
        kept = ", ".join(level for level in levels if level in found)
        what = "trained on" if split == "train" else "its accuracy is over"
        warnings.append(f"RACE {split} has no {', '.join(missing)} passages: {what} {kept} alone "
                        f"(--levels {','.join(levels)})")


def _race_eval_set(split: str, examples, features, selects: bool) -> EvalSet:
    from albertlm.tasks.finetune import EvalSet
    from albertlm.training.checkpoint import write_text_atomic

    labelled = all(e.label is not None for e in examples)

    def score(out):
        return race.race_metrics(examples, out["logits"].argmax(-1))

    def write(out, out_dir: Path) -> list[Path]:
        preds = out["logits"].argmax(-1)
        letters = {e.qid: race.LETTERS[int(p)] for e, p in zip(examples, preds)}
        written = [out_dir / f"{split}_predictions.json"]
        write_text_atomic(written[0], json.dumps(letters, indent=2) + "\n")
        if not selects and labelled:  # test: its accuracy is reported once, from the best model
            written.append(out_dir / f"{split}_metrics.json")
            write_text_atomic(written[-1], json.dumps(score(out), indent=2) + "\n")
        return written

    return EvalSet(split, features, score if selects and labelled else None, write)


# ---------------------------------------------------------------------------------------- classify


def classify_spec(tokenizer, cfg: FinetuneConfig, columns: classify.Columns, train_file=None, dev_file=None,
                  test_file=None, regression: bool = False, labels: Sequence[str] | None = None,
                  training: bool = True, best_metric: str | None = None) -> TaskSpec:
    """`best_metric`: the dev metric a fine-tuning (`training`) keeps the best model by (`choose_best_metric`;
    None: accuracy, or Pearson for a regression)."""
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.finetune import TaskSpec

    problems = Problems()
    # the ids of training rows are never written out, so rows sharing one (augmented copies) are fine there
    train_examples = (classify.read_examples(train_file, columns, True, regression, problems, unique_ids=False,
                                             split="train") if training else [])
    warnings: list[str] = []
    # a Hub Parquet / Arrow file's ClassLabel column holds class ids; its names are in the file's schema
    train_names = class_label_names(train_file, columns.label) if training and not regression else None
    if not regression and not labels:
        if not training:
            raise DataError("the label set is unknown (no task.json beside the model records it): give --labels")
        if not train_examples:
            raise DataError("the label set is unknown: give --labels or a training file")
        labels = train_names or classify.label_set(train_examples)
        said = _case_only_labels(train_examples if not train_names else [], train_file)
        if said:
            warnings.append(said)
    label_list = None if regression else list(classify.check_labels(labels))
    if training and label_list is not None:
        name_class_ids(train_examples, train_names, label_list)

    def features(examples, labelled: bool, name: str):
        ids = classify.label_ids(examples, label_list) if labelled else None
        return _pair_features(tokenizer, examples, ids, cfg.max_seq_length, problems, name, cfg.train.progress,
                              warnings)

    train = features(train_examples, True, "train") if training else []
    eval_sets = []
    for name, path, labelled in (("dev", dev_file, True), ("test", test_file, False)):
        if path is None:
            continue
        if not training:    # predict / evaluate: a window of the file at a time, whatever its size
            eval_sets.append(_streamed_classify_set(name, path, columns, labelled, regression, label_list, tokenizer,
                                                    cfg.max_seq_length, problems, warnings))
            continue
        examples = classify.read_examples(path, columns, labelled, regression, problems, split=name)
        if labelled and label_list is not None:
            name_class_ids(examples, class_label_names(path, columns.label), label_list)
        eval_sets.append(_classify_set(name, examples, features(examples, labelled, name), label_list, labelled))
    spec = TaskSpec("classify", AlbertForSequenceClassification, {"num_labels": len(label_list or [0])}, train,
                    eval_sets, "pearson" if regression else "accuracy",
                    torch.float32 if regression else torch.long,
                    {"labels": label_list or [], "regression": regression, "columns": vars(columns)}, problems,
                    warnings=warnings)
    return choose_best_metric(spec, best_metric) if training else spec


def class_label_names(path, column: str | None) -> list[str] | None:
    """The class names of a Hugging Face `datasets` ClassLabel column (`column`) of a Parquet or Arrow file or a
    `save_to_disk` folder, from the `huggingface` metadata of its schema (the file's footer or stream head: no row
    is read), in the order of the class ids the column holds. None for any other file or column, or names that
    cannot name classes here (empty, repeated, or holding a comma, tab or line break)."""
    from albertlm.tasks.tables import columnar_format, is_saved_dataset, saved_dataset_files, table_batches

    if path is None or not column:
        return None
    path = Path(path)
    try:
        if path.is_dir():
            parts = saved_dataset_files(path) if is_saved_dataset(path) else []
            path, kind = (parts[0], "arrow") if parts else (path, None)
        else:
            kind = columnar_format(path) if path.is_file() else None
    except (DataError, OSError):
        return None
    if kind is None:     # a CSV / TSV / JSONL file: no schema (and no pyarrow import)
        return None
    import pyarrow as pa

    try:
        with table_batches(path, kind) as (schema, _):
            metadata = schema.metadata or {}
        features = json.loads(metadata.get(b"huggingface", b"{}")).get("info", {}).get("features", {})
    except (DataError, OSError, pa.ArrowException, ValueError, AttributeError):
        return None
    if not isinstance(features, dict):
        return None
    # the column as classify finds it: by its exact name, else by its stripped NFC spelling
    feature = features.get(column) or next((value for key, value in features.items()
                                            if classify.label_name(key) == classify.label_name(column)), None)
    if not isinstance(feature, dict) or feature.get("_type") != "ClassLabel" or not isinstance(
            feature.get("names"), list):
        return None
    names = [classify.label_name(name) for name in feature["names"]]
    if (not names or any(not name or any(c in name for c in ",\t\r\n") for name in names)
            or len(set(names)) != len(names)):
        return None
    return names


def name_class_ids(examples, names: list[str] | None, label_list: list[str]) -> None:
    """Each example's class id (a ClassLabel column's 0, 1, ... as read) as the class's name (`names`, the column's
    ClassLabel names), where the label set is of those names (a run trained on the file since it read them; an
    earlier run's `0`, `1` keeps the ids). An id outside the names, or -1, is left for `label_ids` to name."""
    if not names or not set(names) <= set(label_list):
        return
    for e in examples:
        text = str(e.label)
        if text.isdigit() and int(text) < len(names):
            e.label = names[int(text)]


def _case_only_labels(examples, path) -> str | None:
    """A warning line where training labels differ only in case (`Positive` and `positive`: two classes, the
    model learning to tell a spelling apart), naming the spellings and their rows; None where none do."""
    counts: dict[str, int] = {}
    for e in examples:
        counts[classify.label_name(e.label)] = counts.get(classify.label_name(e.label), 0) + 1
    folded: dict[str, list[str]] = {}
    for label in sorted(counts):
        folded.setdefault(label.casefold(), []).append(label)
    groups = [spellings for spellings in folded.values() if len(spellings) > 1]
    if not groups:
        return None
    shown_groups = "; ".join(" and ".join(f"{label!r} ({counts[label]} row{'s' * (counts[label] != 1)})"
                                             for label in spellings)
                             for spellings in groups[:3]) + ("; ..." if len(groups) > 3 else "")
    classes = sum(len(spellings) for spellings in groups)
    return (f"{Path(path).name}: labels that differ only in case are {classes} classes, not {len(groups)}: "
            f"{shown_groups}; if they are one class, write it one way in the file")


def choose_best_metric(spec: TaskSpec, name: str | None) -> TaskSpec:
    """Keep a classify run's best dev model by `name` (`tasks.options.BEST_METRICS`: accuracy, macro_f1, mcc, f1
    of two classes; pearson, spearman of a regression; None: the first), recorded as `best_metric` in task.json
    and the run's config (a `--resume` keeps it). The dev metrics then list it first, as GLUE's list the task's
    own: the run's log lines and the metrics it prints lead with the number the model was chosen by."""
    from albertlm.tasks.options import check_best_metric

    regression = bool(spec.info.get("regression"))
    name = check_best_metric(name, regression, len(spec.info.get("labels") or []))
    spec.main_metric = spec.info["best_metric"] = name

    def first(score):
        if score is None:
            return None

        def scored(out):
            metrics = score(out)
            return {name: metrics[name], **metrics} if name in metrics else metrics

        return scored

    spec.eval_sets = [dataclasses.replace(s, score=first(s.score)) for s in spec.eval_sets]
    return spec


def _score_text(value) -> str:
    """A regression prediction as written: 4 decimals where they hold it exactly, else in full (rounded, scoring
    the file gave another Pearson than the run's own: 0.2128 against 0.2021), as GLUE's STS-B dev files."""
    value = float(value)
    text = f"{value:.4f}"
    return text if float(text) == value else repr(value)


def _streamed_classify_set(name: str, path, columns: classify.Columns, labelled: bool, regression: bool,
                           label_list: list[str] | None, tokenizer, max_length: int, problems: Problems,
                           warnings: list[str]) -> EvalSet:
    """A dev or test file for `predict` / `evaluate classify`, never held whole (`_streamed_examples`; it held about
    1.8 kB a row: 916 MB for 200k rows): every row checked in the first reading as before (columns, labels, ids, no
    rows, all -1), its gold class ids kept for the score and its ids for the predictions file; its texts read again
    for the features, each window checked to be the rows first read (`_classify_set`: the same file, byte for byte,
    as from the file held whole)."""
    names = class_label_names(path, columns.label) if labelled and label_list is not None else None

    def read(purpose: str) -> Iterator[classify.TextExample]:
        if purpose == "check":
            return classify.iter_examples(path, columns, labelled, regression, problems, unique_ids=True, split=name)
        # read again: the rows were checked and their problems (empty texts) counted by the first reading
        return classify.iter_examples(path, columns, False, regression, Problems(), unique_ids=False, split=name)

    def gold(window: list[classify.TextExample]) -> np.ndarray:
        name_class_ids(window, names, label_list)
        return np.asarray(classify.label_ids(window, label_list), dtype=np.float64 if regression else np.int64)

    features, labels, rows = _streamed_examples(path, read, gold if labelled else None, tokenizer, max_length,
                                                problems, warnings, name)
    return _classify_set(name, rows, features, label_list, labelled, labels)


def _streamed_examples(path, read: Callable[[str], Iterable], gold: Callable[[list], np.ndarray] | None, tokenizer,
                       max_length: int, problems: Problems, warnings: list[str], where: str
                       ) -> tuple[FeatureWindows, list | None, Callable[[], Iterator]]:
    """A file to predict (GLUE's, classify's) read a window (`PREDICT_WINDOW` rows) at a time, never held whole:
    `read(purpose)` reads its rows in order, "check" with every row checked and its problems counted in `problems`
    (done here, once, before anything is predicted), "features" again for their texts. `gold` gives a window's class
    ids (or scores), kept (a number a row) for the score, and the rows' ids are kept (`_WindowIds`, a string a window)
    for the predictions file. Returns the features (`FeatureWindows`: tokenized a window at a time, their truncations
    counted in `problems` under `where` and the unknown token's share said in `warnings` the first time they are
    made), the gold labels (None without `gold`), and a callable that gives the rows' ids again (`IdRow`s, in order).
    A file whose rows change between the readings (rewritten under the run: in number, or other rows of the same
    number, which were predicted against the first reading's labels and ids without a word) is an error, not
    predictions of other rows: each window's ids and texts are checked against a digest of the first reading's
    (`_window_digest`). The predictions file is written from what was read and checked (a reading of the file for
    its ids while the sets' files were written could be refused after an earlier set's file was written)."""
    from albertlm.tasks.features import PREDICT_WINDOW, FeatureWindows

    size = PREDICT_WINDOW        # the windows of every reading (a value patched later changes none of them)
    parts: list[np.ndarray] = []
    digests: list[bytes] = []    # each window's ids and texts as first read
    ids: list[_WindowIds] = []
    count = 0
    for window in _examples_windows(read("check"), size):
        if gold is not None:
            parts.append(gold(window))
        digests.append(_window_digest(window))
        ids.append(_WindowIds([row.guid for row in window]))
        count += len(window)
    labels = np.concatenate(parts).tolist() if gold is not None else None
    made: list[bool] = []     # the features made once already: their truncations and unknown tokens were counted

    def windows() -> Iterator[list[Feature]]:
        # one tally of the unknown token over the whole file (one warning line, as when it was read whole); no
        # tokenizing bar: predict's own bar counts these windows' batches
        tally, said = (problems, warnings) if not made else (Problems(), None)
        made.append(True)
        with tokenizing(tokenizer, where, False, said) as counted:
            start = 0
            for window in _checked_windows(read("features"), count, path, digests, size):
                yield _encoded_features(counted, window, None if labels is None else labels[start:start + len(window)],
                                        max_length, tally, where, start)
                start += len(window)

    return FeatureWindows(count, windows), labels, lambda: (IdRow(guid) for window in ids for guid in window)


@dataclasses.dataclass(frozen=True)
class IdRow:
    """A row of a streamed file as its predictions file is written: its id (the submission's index) alone."""

    guid: str


class _WindowIds:
    """A window's row ids held as one string (a GLUE test index is a few characters: a Python string each took about
    50 bytes more), iterated in order."""

    def __init__(self, ids: list[str]):
        joined = "\n".join(ids)
        # (no id holds a line break: a TSV cell cannot, classify refuses one; a list otherwise, to be sure)
        self._ids: str | list[str] = joined if joined.count("\n") == len(ids) - 1 else list(ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids.split("\n") if isinstance(self._ids, str) else self._ids)


def _window_digest(rows: Sequence) -> bytes:
    """A digest of a window of rows (GLUE's or classify's examples): their ids and texts, each value length-prefixed
    (no two windows of other rows share one)."""
    import hashlib

    # each value as its length (in characters), a colon and itself; "-" for a missing one
    text = "".join("-" if value is None else f"{len(str(value))}:{value}"
                   for row in rows for value in (row.guid, row.text_a, row.text_b))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _checked_windows(rows: Iterable, count: int, path, digests: list[bytes], size: int) -> Iterator[list]:
    """`rows` read again, a window of `size` rows (the first reading's) at a time, each one checked against the first
    reading's (`digests`) before it is used: a DataError where the file was rewritten in between (`_same_rows`' for
    another number of rows)."""
    start = 0
    for number, window in enumerate(_examples_windows(_same_rows(rows, count, path), size)):
        if _window_digest(window) != digests[number]:
            raise DataError(f"{path}: changed while it was read (rows {start + 1}-{start + len(window)} are not the "
                            "rows it was checked with); run again on a file that is not being written")
        start += len(window)
        yield window


def _same_rows(rows: Iterable, count: int, path) -> Iterator:
    """`rows`, read again, as they come; a DataError where they are not `count` rows (the first reading's)."""
    seen = 0
    for row in rows:
        seen += 1
        if seen > count:
            break
        yield row
    if seen != count:
        raise DataError(f"{path}: changed while it was read ({count} rows when it was checked, "
                        f"{'more' if seen > count else seen} now); run again on a file that is not being written")


CHUNK = 4096     # rows whose class probabilities a predictions file is written from at a time


def write_lines_atomic(path: Path, lines: Iterable[str]) -> None:
    """Each of `lines` and a line break written to `path` as they come, through a temporary file and a rename
    (`checkpoint.write_text_atomic` without the whole text in memory): never a half-written file under its name;
    the temporary file is removed when the writing fails or is interrupted."""
    from albertlm.training.checkpoint import TMP_PREFIX

    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):      # a read-only file system refuses the removal too
            tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _classify_set(name, examples, features, label_list, labelled: bool, gold: list | None = None) -> EvalSet:
    """`examples`: the rows (a list), or a callable that reads them again, in order (`_streamed_classify_set`);
    `gold`: their class ids (or values) where already read."""
    from albertlm.tasks.finetune import EvalSet

    regression = label_list is None
    if gold is None and labelled:
        gold = classify.label_ids(examples, label_list)

    def score(out):
        preds = _class_preds(out["logits"], regression)
        if regression:
            return regression_metrics(gold, preds)
        return classification_metrics(gold, preds, len(label_list))

    def lines(out) -> Iterator[str]:
        preds = _class_preds(out["logits"], regression)
        rows = iter(examples() if callable(examples) else examples)
        if regression:
            yield "id\tprediction"
            yield from (f"{e.guid}\t{_score_text(p)}" for e, p in zip(rows, preds))
            return
        # each class's probability beside the class predicted (thresholds, calibration, ensembles)
        yield "\t".join(["id", "prediction", *(f"p_{label}" for label in label_list)])
        for start in range(0, len(preds), CHUNK):     # the probabilities of a chunk of rows at a time
            probs = class_probabilities(out["logits"][start:start + CHUNK])
            yield from ("\t".join([e.guid, label_list[int(p)], *(f"{q:.6g}" for q in row)])
                        for e, p, row in zip(itertools.islice(rows, len(probs)), preds[start:start + CHUNK], probs))

    def write(out, out_dir: Path) -> list[Path]:
        write_lines_atomic(out_dir / f"{name}_predictions.tsv", lines(out))
        return [out_dir / f"{name}_predictions.tsv"]

    return EvalSet(name, features, score if labelled else None, write)
