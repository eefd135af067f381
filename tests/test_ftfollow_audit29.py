"""Fine-tuning follow-ups, audit 29.

1. `finetune --model` of a run fine-tuned on another task whose head has the same shape (SST-2 -> MRPC, both two
   classes) trained on from SST-2's classifier without a word, while a head of another shape (SST-2 -> STS-B's one
   output, -> MNLI's three) started fresh with a warning. google's run_classifier.py (`output_weights` restored by
   name) and transformers' run_glue.py keep a same-shape head too, but its rows are another task's classes (RTE's
   first is entailment, WNLI's second): a head of another task (family, GLUE task, or classify's labels) now starts
   fresh, drawn as from a pretrained checkpoint with the same seed, in one warning line; the same task goes on with
   its head.
2. `predict glue --dev ... --out sub` for a second task replaced the first task's `dev_predictions.tsv` (named by
   the split, not the task) silently, while `submission/<Task>.tsv` files collect: refused before the model runs
   where the file there is another dev set's (another number of rows, another task's labels).
3. (a check that passes before) `--epochs` with a last partial batch and gradient accumulation: the step count and
   the progress total are exact and the lr decays linearly to lr/total at the last update (0 at step total, after
   it: google's polynomial_decay).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks import finetune, glue
from conftest import assert_one_error, save_tiny_pretrained

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags
from test_glue_audit17 import W, _glue_model, _tsv


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny pretrained model and GLUE checkpoints of it as `finetune` writes best/ (task.json): SST-2, MRPC."""
    root = tmp_path_factory.mktemp("audit29_ftfollow")
    (root / "pre").mkdir()
    pretrained = save_tiny_pretrained(root / "pre")
    torch.manual_seed(1)
    return {"pre": pretrained, **{task: _glue_model(root / task, pretrained, task) for task in ("sst2", "mrpc")}}


def _spec(family: str, task: str | None, num_labels: int, **info) -> finetune.TaskSpec:
    labels = {} if task is None else {"task": task, "labels": list(glue.get_task(task).labels or [])}
    return finetune.TaskSpec(family, AlbertForSequenceClassification, {"num_labels": num_labels}, [], [], "accuracy",
                             info={**labels, **info})


def _head(model) -> torch.Tensor:
    return torch.cat([model.classifier.weight.flatten(), model.classifier.bias])


def _load(spec, model_dir: Path, seed: int = 5):
    torch.manual_seed(seed)
    return finetune.load_model(spec, model_dir, FinetuneConfig())


# ---------------------------------------------------------------------------------- 1. another task's head

def test_another_glue_tasks_head_of_the_same_shape_starts_fresh(models, caplog):
    """SST-2's head is not MRPC's: MRPC from the SST-2 checkpoint starts with the head a pretrained checkpoint gives
    under the same seed (one warning naming both tasks); SST-2 from it keeps its head, with no warning."""
    stored = _head(AlbertForSequenceClassification.from_pretrained(models["sst2"]))
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        caplog.clear()
        mrpc = _load(_spec("glue", "mrpc", 2), models["sst2"])
        said = [r.getMessage() for r in caplog.records]
    fresh = _load(_spec("glue", "mrpc", 2), models["pre"])
    assert torch.equal(_head(mrpc), _head(fresh)) and not torch.equal(_head(mrpc), stored)
    # the backbone is still the checkpoint's
    sst2 = AlbertForSequenceClassification.from_pretrained(models["sst2"])
    assert all(torch.equal(mrpc.state_dict()[name], value) for name, value in sst2.state_dict().items()
               if name.startswith("albert."))
    assert len(said) == 1 and "was fine-tuned on glue sst2, not glue mrpc" in said[0], said
    assert "classifier.weight, classifier.bias" in said[0]

    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        caplog.clear()
        again = _load(_spec("glue", "sst2", 2), models["sst2"])
        assert not caplog.records, caplog.text
    assert torch.equal(_head(again), stored)


@pytest.mark.parametrize("task, outputs", [("stsb", 1), ("mnli", 3)])
def test_another_shape_of_head_starts_fresh_as_before(models, task, outputs, caplog):
    """STS-B (one output) and MNLI (three) from SST-2: fresh as from the pretrained model, one warning line (the
    loader's, naming the other shape; not a second one)."""
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        caplog.clear()
        model = _load(_spec("glue", task, outputs), models["sst2"])
        said = [r.getMessage() for r in caplog.records]
    assert torch.equal(_head(model), _head(_load(_spec("glue", task, outputs), models["pre"])))
    assert len(said) == 1 and "another shape" in said[0], said


def test_a_classify_run_from_another_family_or_labels_starts_fresh(models, tmp_path):
    """A GLUE run's head for `classify` (another family), or a classify run's for other labels, starts fresh; a
    classify run of the same labels goes on with its head (continued training on new data)."""
    assert finetune.other_task(_spec("classify", None, 2, labels=["0", "1"]), models["sst2"]) == "glue sst2"
    run = tmp_path / "classify"
    AlbertForSequenceClassification.from_pretrained(models["sst2"]).save_pretrained(run)
    (run / "task.json").write_text(json.dumps({"family": "classify", "labels": ["neg", "pos"], "regression": False}))
    assert finetune.other_task(_spec("classify", None, 2, labels=["pos", "neg"], regression=False), run) is None
    assert finetune.other_task(_spec("classify", None, 2, labels=["ham", "spam"], regression=False), run) == "classify"
    assert finetune.other_task(_spec("glue", "sst2", 2), models["pre"]) is None   # a pretrained model: no record
    stored = _head(AlbertForSequenceClassification.from_pretrained(run))
    assert torch.equal(_head(_load(_spec("classify", None, 2, labels=["neg", "pos"]), run)), stored)
    assert not torch.equal(_head(_load(_spec("classify", None, 2, labels=["ham", "spam"]), run)), stored)


def test_finetune_cli_says_the_new_head_in_one_line(models, tmp_path, caplog):
    """`finetune glue --task mrpc --model SST2_RUN`: one warning record (the console command's one stderr line), and
    the run trains."""
    rows = [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            *[[i % 2, 100 + i, 200 + i, W[i % 6], W[(i + 1) % 6]] for i in range(8)]]
    data = tmp_path / "MRPC"
    _tsv(data / "train.tsv", rows)
    _tsv(data / "dev.tsv", rows)
    with caplog.at_level(logging.WARNING, logger="albertlm"):
        assert main(["finetune", "glue", "--task", "mrpc", "--data-dir", str(data), "--model", str(models["sst2"]),
                     "--out", str(tmp_path / "run"), "--max-steps", "1", *QUICK]) == 0
    said = [r.getMessage() for r in caplog.records if "fine-tuned on" in r.getMessage()]
    assert len(said) == 1 and "glue sst2, not glue mrpc" in said[0], caplog.text


# --------------------------------------------------------------------------- 2. predictions of several tasks

def _sst2_files(root: Path, rows: int) -> tuple[Path, Path]:
    dev = _tsv(root / "SST-2" / "dev.tsv", [["sentence", "label"], *[[W[i % 6], i % 2] for i in range(rows)]])
    test = _tsv(root / "SST-2" / "test.tsv", [["index", "sentence"], *[[i, W[i % 6]] for i in range(3)]])
    return dev, test


def _mrpc_files(root: Path, rows: int) -> tuple[Path, Path]:
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    dev = _tsv(root / "MRPC" / "dev.tsv", [header, *[[i % 2, i, i + 50, W[i % 6], W[5 - i % 6]] for i in range(rows)]])
    test = _tsv(root / "MRPC" / "test.tsv", [["index", *header[1:]],
                                             *[[i, i, i + 50, W[i], W[5 - i]] for i in range(4)]])
    return dev, test


def _predict(task: str, model: Path, out: Path, *data: str) -> int:
    return main(["predict", "glue", "--task", task, "--model", str(model), *data, "--out", str(out), "--no-progress"])


def test_predicting_a_second_tasks_dev_set_into_one_out_keeps_the_first(models, tmp_path, capsys):
    """SST-2's dev and test predictions into sub/, then MRPC's: its dev predictions would replace SST-2's
    dev_predictions.tsv (refused in one line, the file kept); its test predictions alone collect in submission/ beside
    SST-2.tsv; SST-2's dev set predicted again replaces its own file."""
    sst2_dev, sst2_test = _sst2_files(tmp_path, 6)
    mrpc_dev, mrpc_test = _mrpc_files(tmp_path, 5)
    out = tmp_path / "sub"
    assert _predict("sst2", models["sst2"], out, "--dev", str(sst2_dev), "--test", str(sst2_test)) == 0
    kept = (out / "dev_predictions.tsv").read_bytes()
    capsys.readouterr()
    code = _predict("mrpc", models["mrpc"], out, "--dev", str(mrpc_dev), "--test", str(mrpc_test))
    assert_one_error(capsys, code, "holds dev_predictions.tsv of another dev set", "6 predictions",
                     "5 rows", f"{out / 'mrpc'}")
    assert (out / "dev_predictions.tsv").read_bytes() == kept
    assert not (out / "submission" / "MRPC.tsv").exists()      # refused before anything was written
    assert _predict("mrpc", models["mrpc"], out, "--test", str(mrpc_test)) == 0
    assert _predict("mrpc", models["mrpc"], out / "mrpc", "--dev", str(mrpc_dev)) == 0
    assert sorted(p.name for p in (out / "submission").iterdir()) == ["MRPC.tsv", "SST-2.tsv"]
    assert (out / "dev_predictions.tsv").read_bytes() == kept
    assert _predict("sst2", models["sst2"], out, "--dev", str(sst2_dev)) == 0    # its own set again: replaced


def test_other_predictions_tells_another_dev_sets_file(tmp_path):
    """Another number of rows, or labels the task has not (an RTE file where SST-2's would go), is another dev
    set's file; the same rows of the task's labels may be an earlier prediction of this one."""
    sst2, rte = glue.get_task("sst2"), glue.get_task("rte")
    path = _tsv(tmp_path / "dev_predictions.tsv", [["index", "prediction"], [0, "entailment"], [1, "not_entailment"]])
    assert "not sst2's predictions" in glue.other_predictions(sst2, path, 2)
    assert glue.other_predictions(rte, path, 2) is None
    assert glue.other_predictions(rte, path, 3) == "2 predictions, where this dev set has 3 rows"
    assert glue.other_predictions(glue.get_task("stsb"), path, 2).startswith("not stsb's predictions")


# ------------------------------------------------------------------------------------- 3. the step count

def test_epochs_with_a_partial_batch_and_accumulation_count_exact_steps(models, tmp_path, capsys):
    """10 examples, batch 4 in micro-batches of 3, 2 epochs: 3 steps an epoch (4, 4, 2), 6 in all; the progress
    lines say `/6`; the lr after a 1-step warmup decays linearly to lr/6 at the last update (0 would be at step 6,
    after it, as google's polynomial_decay and this schedule's lr_at)."""
    from albertlm.training.metrics import read_metrics

    rows = [["sentence", "label"], *[[W[i % 6], i % 2] for i in range(10)]]
    train = _tsv(tmp_path / "SST-2" / "train.tsv", rows)
    out = tmp_path / "run"
    flags = [flag for flag in QUICK if flag not in ("--warmup-steps", "0")]
    capsys.readouterr()
    assert main(["finetune", "glue", "--task", "sst2", "--train", str(train), "--dev", str(train), "--model",
                 str(models["pre"]), "--out", str(out), "--epochs", "2", "--micro-batch-size", "3", "--warmup-steps",
                 "1", "--log-every", "1", *flags]) == 0
    printed = capsys.readouterr().out
    assert "6 steps (batch 4, warmup 1)" in printed
    assert [line.split(" train:")[0] for line in printed.splitlines() if " train:" in line] == \
        [f"step {k}/6" for k in range(1, 7)]
    lrs = [r["lr"] for r in read_metrics(out) if r.get("split") == "train"]
    assert lrs == pytest.approx([1e-3 * (1 - k / 6) for k in range(6)])
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["step"], metrics["total_steps"]) == (6, 6)
    assert len(json.loads((out / "train_log.json").read_text())["losses"]) == 6
    assert [r["step"] for r in read_metrics(out) if r.get("split") == "eval"] == [3, 6]   # once per epoch
