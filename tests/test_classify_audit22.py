"""classify audit 22 (what fine-tuning on one's own data gives back): `<split>_predictions.tsv` held only the class
predicted, no probabilities (thresholds, calibration and ensembles need them); the best model was always chosen by
dev accuracy, with no way to keep it by macro F1 or MCC on imbalanced classes; the "empty text" note was one tally for
the train, dev and test files (the truncation notes name the split); a label given with a tab (--labels, a model's
id2label) would break the tab-separated predictions file."""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks import classify
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path

# class names a user's own file may hold: accents, a quote, Hangul, spaces (no comma, tab or line break)
NEG, POS = 'très "mauvais"', "좋은 평"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _sst2_csv(path: Path, split: str, n: int, start: int = 0, labelled: bool = True, empty: bool = False) -> Path:
    """SST-2 rows as a user's CSV (text, label named NEG / POS); `empty`: a last row with no text."""
    lines = shared_path("glue", "SST-2", f"{split}.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines[1 + start:1 + start + n]]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"] if labelled else ["text"])
        writer.writerows([text, POS if label == "1" else NEG][:2 if labelled else 1] for text, label in rows)
        if empty:
            writer.writerow(["", NEG] if labelled else [""])
    return path


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A tiny random model with the real albert-base-v2 spiece.model beside it."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    model = tmp_path_factory.mktemp("spm_model")
    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=24, max_position_embeddings=64)).save_pretrained(model)
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), model / "spiece.model")
    return model


def _finetune(model: Path, root: Path, out: Path, *extra: str) -> int:
    return main(["finetune", "classify", "--train", str(_sst2_csv(root / "train.csv", "train", 24)), "--dev",
                 str(_sst2_csv(root / "dev.csv", "dev", 10)), "--test",
                 str(_sst2_csv(root / "test.csv", "dev", 5, start=10, labelled=False)), "--model", str(model),
                 "--out", str(out), "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "32",
                 "--no-progress", "--train.tensorboard", "false", *extra])


def _rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def test_prediction_files_hold_each_class_probability(spm_model, tmp_path, capsys):
    """dev_predictions.tsv and test_predictions.tsv were `id<TAB>prediction` only: each class's softmax probability
    now follows, in columns `p_<label>` (the label set's order), and `evaluate classify --predictions` still reads
    the file and gives the run's own numbers."""
    out = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, out) == 0, capsys.readouterr().err
    capsys.readouterr()
    labels = json.loads((out / "best" / "task.json").read_text())["labels"]
    assert labels == sorted([NEG, POS])
    for name, n in (("dev", 10), ("test", 5)):
        header, *rows = _rows(out / f"{name}_predictions.tsv")
        assert header == ["id", "prediction", *(f"p_{label}" for label in labels)]
        assert [row[0] for row in rows] == [str(i) for i in range(n)]
        for row in rows:
            probs = [float(value) for value in row[2:]]
            assert math.fsum(probs) == pytest.approx(1.0, abs=1e-5) and all(0 <= p <= 1 for p in probs)
            # the class predicted has the highest probability (two printed alike at 6 digits: either one)
            assert probs[labels.index(row[1])] == max(probs)
    best = json.loads((out / "metrics.json").read_text())["best"]["dev"]
    code = main(["evaluate", "classify", "--predictions", str(out / "dev_predictions.tsv"), "--dev",
                 str(tmp_path / "dev.csv"), "--labels", ",".join(labels)])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == pytest.approx(best)
    # predict writes the same file from best/
    assert main(["predict", "classify", "--model", str(out), "--dev", str(tmp_path / "dev.csv"), "--out",
                 str(tmp_path / "p"), "--no-progress"]) == 0
    assert (tmp_path / "p" / "dev_predictions.tsv").read_text() == (out / "dev_predictions.tsv").read_text()
    # a regression's file keeps its two columns (one number, no classes)
    from albertlm.tasks.specs import _classify_set

    import numpy as np

    examples = [classify.TextExample(str(i), "t", None, float(i), f"f:{i}") for i in range(2)]
    _classify_set("dev", examples, [], None, labelled=True).write({"logits": np.array([[0.5], [1.5]])}, tmp_path)
    assert _rows(tmp_path / "dev_predictions.tsv") == [["id", "prediction"], ["0", "0.5000"], ["1", "1.5000"]]


def test_a_label_with_a_tab_is_refused_where_a_label_set_is_given(tmp_path, capsys):
    """A label set given (--labels, a transformers model's id2label) was not checked for a tab: the predictions
    file's header (`p_<label>`) and prediction column would have been split at it."""
    with pytest.raises(DataError, match=r"'a\\tb' holds a tab or line break"):
        classify.check_labels(["a\tb", "c"])
    with pytest.raises(DataError, match=r"line break"):
        classify.check_labels(["c", "x\ny"])
    dev = _sst2_csv(tmp_path / "dev.csv", "dev", 4)
    preds = tmp_path / "p.tsv"
    preds.write_text("id\tprediction\n" + "".join(f"{i}\t{NEG}\n" for i in range(4)), encoding="utf-8")
    code = main(["evaluate", "classify", "--predictions", str(preds), "--dev", str(dev), "--labels",
                 f"{NEG}\tx,{POS}"])
    assert_one_error(capsys, code, "holds a tab or line break")


def test_the_best_model_may_be_kept_by_macro_f1(tmp_path):
    """Imbalanced classes: the best checkpoint was the one with the highest dev accuracy, whatever the user wanted.
    With best_metric macro_f1 a later evaluation of lower accuracy but higher macro F1 is the best, and the dev
    metrics lead with the number the model was kept by."""
    from albertlm.tasks.finetune import run_finetune
    from albertlm.tasks.specs import choose_best_metric
    from train_fixtures import StubTokenizer, finetune_config, synthetic_task

    spec = synthetic_task()
    scores = iter([{"accuracy": 0.8, "macro_f1": 0.4, "mcc": 0.1}, {"accuracy": 0.6, "macro_f1": 0.6, "mcc": 0.2}])
    spec.eval_sets[0].score = lambda out: next(scores)
    choose_best_metric(spec, "macro_f1")
    metrics = run_finetune(spec, save_tiny_pretrained(tmp_path), StubTokenizer(), finetune_config(max_steps=6),
                           tmp_path / "run", log=lambda *a: None)
    assert metrics["best"]["step"] == 6 and list(metrics["best"]["dev"])[0] == "macro_f1"
    assert json.loads((tmp_path / "run" / "best" / "task.json").read_text())["best_metric"] == "macro_f1"
    # each metric is one the task computes: f1 (the second class's) for two classes only, Pearson for regressions
    with pytest.raises(UserError, match=r"f1 is the second class's.*3 classes are scored by accuracy, macro_f1, mcc"):
        choose_best_metric(dataclasses.replace(synthetic_task(), info={"labels": ["a", "b", "c"]}), "f1")
    with pytest.raises(UserError, match=r"regression.*pearson, spearman"):
        choose_best_metric(dataclasses.replace(synthetic_task(), info={"regression": True}), "accuracy")


def test_best_metric_on_the_command_line_is_recorded_and_kept_by_resume(spm_model, tmp_path, capsys):
    """`finetune classify --best-metric mcc`: recorded in task.json and the run's config; classification metrics
    report the MCC; a --resume asking for another metric is refused (the best record was chosen by this one)."""
    out = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, out, "--best-metric", "mcc") == 0, capsys.readouterr().err
    assert "step 2 eval: dev/mcc " in capsys.readouterr().out      # the log leads with it
    assert json.loads((out / "best" / "task.json").read_text())["best_metric"] == "mcc"
    assert {"accuracy", "macro_f1", "f1", "mcc"} <= set(json.loads((out / "metrics.json").read_text())["best"]["dev"])
    code = _finetune(spm_model, tmp_path, out, "--resume", "--max-steps", "3", "--best-metric", "accuracy")
    assert_one_error(capsys, code, "--resume", "keeps its best model by mcc", "--best-metric accuracy")
    # resumed without the option, the run goes on keeping its best model by mcc
    assert _finetune(spm_model, tmp_path, out, "--resume", "--max-steps", "3") == 0, capsys.readouterr().err
    assert "step 3 eval: dev/mcc " in capsys.readouterr().out
    assert json.loads((out / "best" / "task.json").read_text())["best_metric"] == "mcc"
    code = _finetune(spm_model, tmp_path, tmp_path / "other", "--best-metric", "pearson")
    assert_one_error(capsys, code, "--best-metric pearson", "accuracy, macro_f1, mcc, f1")


def test_empty_text_is_counted_per_split(tmp_path):
    """One "empty text" tally for train, dev and test (a file given as --train and --dev counted twice, under one
    name), while the truncation notes named the split."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks.specs import classify_spec
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    train = _sst2_csv(tmp_path / "train.csv", "train", 6, empty=True)
    test = tmp_path / "test.jsonl"     # (a JSONL row holding an empty text)
    test.write_text('{"text": "a fine film"}\n{"text": ""}\n', encoding="utf-8")
    spec = classify_spec(tokenizer, FinetuneConfig(max_seq_length=32), classify.Columns("text"), train_file=train,
                         dev_file=train, test_file=test)
    problems = spec.problems.to_dict()
    assert problems["empty text (train)"] == {"count": 1, "first": [f"{train}:8"]}
    assert problems["empty text (dev)"] == {"count": 1, "first": [f"{train}:8"]}
    assert problems["empty text (test)"]["count"] == 1
    assert "empty text" not in problems
