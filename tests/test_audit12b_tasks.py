"""Audit 12b of `albertlm finetune / predict / evaluate / fill-mask / embed`: a CoLA file read as SST-2 is
refused (it parsed, training on the source column), `--precision fp16` on a CPU is refused before the model
loads (one line), `evaluate classify --predictions` takes predicted labels the dev file lacks, macro F1 is
scikit-learn's, fill-mask / embed refuse a batch size or max length that cannot work."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tasks import glue, metrics
from conftest import assert_one_error, save_tiny_pretrained

QUICK = ["--batch-size", "4", "--max-seq-length", "16", "--max-steps", "1", "--train.progress=false",
         "--train.tensorboard=false"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread."""


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit12b_model"))


def _cola_dir(root: Path) -> Path:
    root.mkdir()
    rows = [f"gj04\t{i % 2}\t\tthe film was {'good' if i % 2 else 'bad'}" for i in range(6)]
    (root / "train.tsv").write_text("\n".join(rows) + "\n")
    (root / "dev.tsv").write_text("\n".join(rows[:4]) + "\n")
    return root


def test_cola_files_read_as_sst2_are_refused_not_trained_on(tmp_path, model, capsys):
    data = _cola_dir(tmp_path / "CoLA")
    with pytest.raises(glue.DataError, match="2 tab-separated fields|layout has 2"):
        glue.read_examples("sst2", data / "train.tsv")
    code = main(["finetune", "glue", "--task", "sst2", "--data-dir", str(data), "--model", str(model),
                 "--out", str(tmp_path / "run"), *QUICK])
    assert_one_error(capsys, code, "train.tsv:1", "4 tab-separated fields", "sst2")
    assert not (tmp_path / "run").exists()
    # the real layouts still read: SST-2 (sentence, label) and its test file (index, sentence)
    (tmp_path / "sst.tsv").write_text("sentence\tlabel\nthe film was good\t1\nbad\t0\n")
    assert [e.label for e in glue.read_examples("sst2", tmp_path / "sst.tsv")] == ["1", "0"]
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tthe film was good\n")
    assert len(glue.read_examples("sst2", tmp_path / "test.tsv", has_labels=False)) == 1
    # --skip-bad-rows skips (and counts) such rows instead
    problems = glue.Problems()
    (tmp_path / "mixed.tsv").write_text("sentence\tlabel\ngood\t1\ngj04\t1\t\tgood\n")
    assert len(glue.read_examples("sst2", tmp_path / "mixed.tsv", problems=problems)) == 1
    assert problems.counts["malformed row skipped"] == 1


def test_fp16_on_cpu_is_refused_before_the_model_loads(tmp_path, model, capsys, monkeypatch):
    import torch

    from albertlm.tasks import finetune

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def load_model(*args, **kwargs):
        raise AssertionError("the model was loaded (and the data tokenized) before fp16 was refused")

    monkeypatch.setattr(finetune, "load_model", load_model)
    data = _cola_dir(tmp_path / "CoLA")
    code = main(["finetune", "glue", "--task", "cola", "--data-dir", str(data), "--model", str(model),
                 "--out", str(tmp_path / "run"), *QUICK, "--precision", "fp16"])
    assert_one_error(capsys, code, "fp16 needs a CUDA device")   # no "freshly initialised ..." line first
    assert not (tmp_path / "run").exists()


def test_macro_f1_is_sklearns():
    from sklearn.metrics import f1_score

    gold, preds = [2, 0, 0, 2], [2, 2, 0, 2]     # class 1 of the 3 is in neither
    out = metrics.classification_metrics(gold, preds, 3)
    assert out["macro_f1"] == pytest.approx(f1_score(gold, preds, average="macro"))
    rng = np.random.default_rng(0)
    gold, preds = rng.integers(0, 4, 50), rng.integers(0, 4, 50)
    assert metrics.classification_metrics(gold, preds, 4)["macro_f1"] == pytest.approx(
        f1_score(gold, preds, average="macro"))


def test_evaluate_classify_predictions_with_a_label_the_dev_file_lacks(tmp_path, capsys):
    (tmp_path / "dev.csv").write_text("review,stars\ngood,5\nbad,1\nfine,5\n")
    (tmp_path / "pred.tsv").write_text("id\tprediction\n0\t5\n1\t3\n2\t5\n")
    code = main(["evaluate", "classify", "--predictions", str(tmp_path / "pred.tsv"), "--dev",
                 str(tmp_path / "dev.csv"), "--text-column", "review", "--label-column", "stars"])
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert result["accuracy"] == pytest.approx(2 / 3)
    from sklearn.metrics import f1_score
    assert result["macro_f1"] == pytest.approx(f1_score(["5", "1", "5"], ["5", "3", "5"], average="macro"))


def test_fill_mask_and_embed_refuse_sizes_that_cannot_work(model, tmp_path, capsys):
    for argv, phrase in ((["fill-mask", str(model), "the [MASK]", "--batch-size", "0"], "--batch-size"),
                         (["fill-mask", str(model), "the [MASK]", "--batch-size", "-1"], "--batch-size"),
                         (["embed", str(model), "--input", "-", "--out", str(tmp_path / "e.npy"),
                           "--max-length", "0"], "--max-length"),
                         (["embed", str(model), "--input", "-", "--out", str(tmp_path / "e.npy"),
                           "--max-length", "-4"], "--max-length")):
        assert_one_error(capsys, main(argv), phrase)
    assert not (tmp_path / "e.npy").exists()
    from albertlm.errors import UserError
    from albertlm.tasks.inference import FillMask, embed_texts, load_encoder, load_tokenizer_for

    fill = FillMask.load(model, device="cpu")
    with pytest.raises(UserError, match="--batch-size"):
        fill(["the [MASK]"], 2, 0)
    encoder, model_dir, _ = load_encoder(model, "cpu")
    with pytest.raises(UserError, match="--max-length"):
        embed_texts(encoder, load_tokenizer_for(model_dir), ["the film"], max_length=1)
    assert embed_texts(encoder, load_tokenizer_for(model_dir), ["the film"], max_length=3).shape == (1, 32)
