"""predict audit 31 (a large file to predict): `albertlm predict classify` read the whole file, tokenized it and held
every row's text, features and outputs until the end (about 1.8 kB a row: 916 MB of peak RSS for 200k rows),
where `embed` streams. It now checks the file in one reading, then tokenizes and predicts it a window of
PREDICT_WINDOW rows at a time (`features.FeatureWindows`, `finetune.predict_windows`) and writes the predictions
file through a temporary file and a rename as the lines come: the same file, in input order, as from the rows held
whole. Fine-tuning's own dev evaluation batches by the same windows, so `predict` still gives a run's
dev_predictions.tsv byte for byte."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import features as features_module
from albertlm.tasks import finetune, specs
from conftest import assert_one_error, shared_path
from test_classify_audit22 import NEG, POS, _finetune, spm_model  # noqa: F401  (spm_model: a fixture)

WINDOW = 16


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of WINDOW rows (the whole of these files was one window), and the sizes of the batches of texts
    the predictions' features were tokenized in."""
    monkeypatch.setattr(features_module, "PREDICT_WINDOW", WINDOW, raising=False)
    monkeypatch.setattr(finetune, "PREDICT_WINDOW", WINDOW, raising=False)
    calls: list[int] = []
    real = specs.encode_pairs
    monkeypatch.setattr(specs, "encode_pairs", lambda tokenizer, a, *rest: calls.append(len(a)) or
                        real(tokenizer, a, *rest))
    return calls


def _sst2_rows(path: Path, n: int, start: int = 0, empty_every: int = 0) -> Path:
    """n SST-2 dev sentences as a user's labelled CSV (every `empty_every`-th text left empty)."""
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1 + start:1 + start + n]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i, (text, label) in enumerate(line.split("\t") for line in lines):
            writer.writerow(["" if empty_every and i % empty_every == 0 else text, POS if label == "1" else NEG])
    return path


def test_predict_reads_a_window_at_a_time_and_writes_the_runs_own_file(spm_model, small_windows, tmp_path, capsys):
    """A 40-row dev file read in windows of 16: tokenized 16, 16, 8 texts at a time (it was 40 at once: the whole
    file), its predictions file byte for byte the one fine-tuning wrote for it (the same windows), rows in input
    order, its metrics the run's, its notes counted once (the file is read three times), the progress lines over
    every window's batches."""
    dev = _sst2_rows(tmp_path / "dev40.csv", 40, empty_every=10)
    run = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, run, "--dev", str(dev), "--eval-batch-size", "4") == 0
    capsys.readouterr()
    small_windows.clear()
    out = tmp_path / "predicted"
    assert main(["predict", "classify", "--model", str(run), "--dev", str(dev), "--out", str(out),
                 "--eval-batch-size", "4", "--max-seq-length", "8", "--train.progress"]) == 0
    captured = capsys.readouterr()
    assert small_windows == [16, 16, 8]
    # (max-seq-length 8 here against the run's 32 would differ: the run's file is compared at its own length below)
    assert [line.split("\t")[0] for line in (out / "dev_predictions.tsv").read_text().splitlines()[1:]] == [
        str(i) for i in range(40)]
    # the notes: 4 empty texts, each counted once; truncations once per row cut
    problems = json.loads(captured.out)["problems"]
    assert problems["empty text (dev)"]["count"] == 4
    assert 0 < problems["truncated to 8 tokens (dev)"]["count"] <= 36
    # progress: windows of 16, 16, 8 rows in batches of 4 are 10 batches, a line at each tenth
    assert [line for line in captured.err.splitlines() if line.startswith("predict:")] == [
        f"predict: {k}/10 batches" for k in range(1, 11)]

    same = tmp_path / "same"
    assert main(["predict", "classify", "--model", str(run), "--dev", str(dev), "--out", str(same),
                 "--eval-batch-size", "4", "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert (same / "dev_predictions.tsv").read_bytes() == (run / "dev_predictions.tsv").read_bytes()
    best = json.loads((run / "metrics.json").read_text())["best"]["dev"]
    assert metrics["dev"] == pytest.approx(best, abs=0, rel=0)
    assert not [path.name for path in same.iterdir() if path.name.startswith(".tmp-")]


def test_an_interrupted_write_leaves_no_predictions_file(spm_model, small_windows, tmp_path, monkeypatch, capsys):
    """Ctrl-C while the predictions are written (a chunk of rows at a time): no test_predictions.tsv that looks
    complete, and no temporary file left."""
    run = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, run) == 0
    test = _sst2_rows(tmp_path / "test.csv", 30)
    monkeypatch.setattr(specs, "CHUNK", 8, raising=False)
    real, seen = specs.class_probabilities, []

    def interrupted(logits):
        seen.append(len(logits))
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(logits)

    monkeypatch.setattr(specs, "class_probabilities", interrupted)
    out = tmp_path / "out"
    code = main(["predict", "classify", "--model", str(run), "--test", str(test), "--out", str(out), "--no-progress"])
    assert code != 0 and "interrupted" in capsys.readouterr().err
    assert len(seen) == 2 and (not out.exists() or list(out.iterdir()) == [])


def test_a_bad_last_row_is_refused_before_anything_is_predicted(spm_model, small_windows, tmp_path, capsys):
    """The rows are all checked in the first reading, as when the file was read whole: a label outside the model's
    set on the last row (past the first window) is one error line naming it, before any text is tokenized for the
    model, and nothing is written."""
    run = tmp_path / "run"
    assert _finetune(spm_model, tmp_path, run) == 0
    capsys.readouterr()
    dev = _sst2_rows(tmp_path / "dev.csv", 30)
    with dev.open("a", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerow(["a last row", "neutral"])
    small_windows.clear()
    out = tmp_path / "out"
    code = main(["predict", "classify", "--model", str(run), "--dev", str(dev), "--out", str(out), "--no-progress"])
    assert_one_error(capsys, code, "dev.csv:32", "'neutral' is not in the label set")
    assert small_windows == [] and not out.exists()


def test_ranks_sharing_windowed_batches_give_one_process_outputs(small_windows, monkeypatch):
    """Under torchrun each rank runs its share of `predict`'s batches, now cut window by window: the outputs
    gathered on rank 0 are one process's bit for bit (53 features: windows of 16, 16, 16, 5; batches of 3)."""
    import numpy as np
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.features import Feature
    from albertlm.training import distributed
    from albertlm.training.distributed import DistInfo
    from train_fixtures import tiny_model_config

    rng = np.random.default_rng(0)
    features = []
    for i in range(53):
        ids = rng.integers(5, 17, size=int(rng.integers(4, 21)))
        ids[0] = 2
        features.append(Feature(ids, np.zeros_like(ids), i))
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_model_config(), 2).eval()
    alone = finetune.predict(model, features, finetune.Outputs(), 0, 3, torch.device("cpu"))["logits"]
    sent = {}
    monkeypatch.setattr(distributed, "gather_to_main",
                        lambda obj, info: sent.setdefault(info.rank, obj) and (
                            [sent[0], sent[1]] if info.rank == 0 else None))
    assert finetune.shared_predict(model, features, finetune.Outputs(), 0, 3, DistInfo(rank=1, world_size=2)) is None
    shared = finetune.shared_predict(model, features, finetune.Outputs(), 0, 3, DistInfo(rank=0, world_size=2))
    assert shared["logits"].dtype == alone.dtype and np.array_equal(shared["logits"], alone)
    assert sorted(np.concatenate([sent[0][0], sent[1][0]]).tolist()) == list(range(53))
