"""End to end through the CLI, one run per task family: a tiny ALBERT with a SentencePiece model trained
in-process, a few dozen steps on real data from ../shared/data; the training loss falls and every output
file is well formed (and re-scores to the same numbers with `albertlm evaluate --predictions`)."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from conftest import shared_path

RUN = ["--lr", "5e-3", "--warmup-steps", "3", "--seed", "1", "--log-every", "10"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`) for every test here."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random tiny AlbertForPreTraining checkpoint with its spiece.model beside it."""
    import sentencepiece as spm

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    lines = shared_path("text", "sample_text.txt").read_text().splitlines()
    lines += shared_path("glue", "SST-2", "dev.tsv").read_text().splitlines()[1:300]
    lines += [e for e in shared_path("squad", "sample.json").read_text().split('"') if len(e) > 40]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([l for l in lines if l.strip()]), model_writer=model,
                                   vocab_size=400, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    out = tmp_path_factory.mktemp("tiny_albert")
    (out / "spiece.model").write_bytes(model.getvalue())
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=400, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4, ffn_size=37,
                      max_position_embeddings=160, classifier_dropout=0.0)
    AlbertForPreTraining(cfg).save_pretrained(out)
    return out


def _losses_fall(run_dir) -> None:
    losses = json.loads((run_dir / "train_log.json").read_text())["losses"]
    assert np.mean(losses[-5:]) < 0.85 * np.mean(losses[:5]), losses


def _best_dir_is_complete(run_dir) -> dict:
    for name in ("model.safetensors", "config.json", "spiece.model", "task.json"):
        assert (run_dir / "best" / name).is_file()
    return json.loads((run_dir / "metrics.json").read_text())


def test_glue_sst2(model_dir, tmp_path, capsys):
    rows = shared_path("glue", "SST-2", "train.tsv").read_text().splitlines()
    (tmp_path / "train.tsv").write_text("\n".join(rows[:41]) + "\n")            # header + 40 rows
    (tmp_path / "test.tsv").write_text("index\tsentence\n" + "".join(
        f"{i}\t{r.split(chr(9))[0]}\n" for i, r in enumerate(rows[41:53])))
    out = tmp_path / "run"
    code = main(["finetune", "glue", "--task", "sst2", "--train", str(tmp_path / "train.tsv"),
                 "--dev", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "test.tsv"),
                 "--model", str(model_dir), "--out", str(out), "--max-steps", "60", "--batch-size", "8",
                 "--max-seq-length", "48", "--eval-every", "30", *RUN])
    assert code == 0
    _losses_fall(out)
    metrics = _best_dir_is_complete(out)
    assert metrics["best"]["train"]["accuracy"] > 0.7 and metrics["test_predictions"] == {"test:test.tsv": [str(out / "submission" / "SST-2.tsv")]}
    submission = (out / "submission" / "SST-2.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction" and len(submission) == 13
    assert all(line.split("\t")[1] in ("0", "1") for line in submission[1:])
    capsys.readouterr()
    assert main(["evaluate", "glue", "--task", "sst2", "--dev", str(tmp_path / "train.tsv"),
                 "--predictions", str(out / "train_predictions.tsv")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == metrics["best"]["train"]["accuracy"]
    assert main(["evaluate", "glue", "--task", "sst2", "--dev", str(tmp_path / "train.tsv"),
                 "--model", str(out / "best")]) == 0
    assert json.loads(capsys.readouterr().out)["train"]["accuracy"] == metrics["best"]["train"]["accuracy"]


def test_squad_v2(model_dir, tmp_path, capsys):
    data = shared_path("squad", "dev-v2.0-small.json")
    out = tmp_path / "run"
    code = main(["finetune", "squad", "--version", "2.0", "--train", str(data), "--dev", str(data),
                 "--model", str(model_dir), "--out", str(out), "--max-steps", "30", "--batch-size", "8",
                 "--max-seq-length", "128", "--doc-stride", "64", "--eval-every", "30", *RUN])
    assert code == 0
    _losses_fall(out)
    metrics = _best_dir_is_complete(out)
    predictions = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    assert len(predictions) == 14 and set(predictions) == set(null_odds)
    assert all(isinstance(v, str) for v in predictions.values())
    assert all(isinstance(v, float) for v in null_odds.values())
    best = metrics["best"]["dev"]
    assert {"null_threshold", "HasAns_f1", "NoAns_f1", "best_f1"} <= set(best)
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(data), "--predictions", str(out / "predictions.json")]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert rescored["exact"] == pytest.approx(best["exact"]) and rescored["f1"] == pytest.approx(best["f1"])


def test_race(model_dir, tmp_path, capsys):
    root = shared_path("race", "RACE")
    out = tmp_path / "run"
    code = main(["finetune", "race", "--data-dir", str(root), "--model", str(model_dir), "--out", str(out),
                 "--max-steps", "60", "--batch-size", "4", "--max-seq-length", "96", "--eval-every", "60", *RUN])
    assert code == 0
    _losses_fall(out)
    metrics = _best_dir_is_complete(out)
    assert {"accuracy", "accuracy_middle"} <= set(metrics["best"]["dev"])
    predictions = json.loads((out / "dev_predictions.json").read_text())
    assert len(predictions) == 11 and set(predictions.values()) <= set("ABCD")
    capsys.readouterr()
    assert main(["evaluate", "race", "--data-dir", str(root), "--predictions", str(out / "dev_predictions.json")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == metrics["best"]["dev"]["accuracy"]


def test_classify_regression_jsonl_and_csv(model_dir, tmp_path, capsys):
    rows = [line.split("\t") for line in shared_path("glue", "STS-B", "train.tsv").read_text().splitlines()[1:41]]
    with (tmp_path / "sts.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps({"id": r[0], "s1": r[7], "s2": r[8], "score": float(r[9])}) + "\n")
    out = tmp_path / "run"
    code = main(["finetune", "classify", "--train", str(tmp_path / "sts.jsonl"), "--dev", str(tmp_path / "sts.jsonl"),
                 "--text-column", "s1", "--text-pair-column", "s2", "--label-column", "score", "--id-column", "id",
                 "--regression", "--model", str(model_dir), "--out", str(out), "--max-steps", "30",
                 "--batch-size", "8", "--max-seq-length", "64", "--eval-every", "30", *RUN])
    assert code == 0
    _losses_fall(out)
    metrics = _best_dir_is_complete(out)
    assert {"pearson", "spearman", "mse"} <= set(metrics["best"]["dev"])
    lines = (out / "dev_predictions.tsv").read_text().splitlines()
    assert lines[0] == "id\tprediction" and len(lines) == 41 and lines[1].split("\t")[0] == rows[0][0]
    # a label the training file never had is an error naming the file and line
    with (tmp_path / "bad.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["text", "label"], ["fine", "pos"], ["bad", "neg"], ["odd", "maybe"]])
    capsys.readouterr()
    code = main(["finetune", "classify", "--train", str(tmp_path / "bad.csv"), "--dev", str(tmp_path / "bad.csv"),
                 "--labels", "neg,pos", "--model", str(model_dir), "--out", str(tmp_path / "bad")])
    assert code == 2
    assert "bad.csv:4: label 'maybe' is not in the label set" in capsys.readouterr().err


def test_model_may_be_a_pretraining_run(model_dir, tmp_path, capsys):
    """MODEL = a pretraining run dir: its newest checkpoint, and the tokenizer its data was built with."""
    import shutil

    from albertlm.training.checkpoint import step_dir

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "meta.json").write_text(json.dumps({"tokenizer": {"path": str(model_dir / "spiece.model")}}))
    for step in (2, 4):
        checkpoint = step_dir(tmp_path / "pretrain", step)
        checkpoint.mkdir(parents=True)
        for name in ("model.safetensors", "config.json"):
            shutil.copy(model_dir / name, checkpoint / name)
        (checkpoint / "run_config.json").write_text(json.dumps({"data": {"path": str(data_dir)}}))
    rows = shared_path("glue", "SST-2", "dev.tsv").read_text().splitlines()[:17]
    (tmp_path / "d.tsv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    code = main(["finetune", "classify", "--train", str(tmp_path / "d.tsv"), "--text-column", "sentence",
                 "--model", str(tmp_path / "pretrain"), "--out", str(out), "--max-steps", "2", "--batch-size", "8"])
    assert code == 0
    assert f"step_{4:08d}" in capsys.readouterr().err
    assert (out / "best" / "spiece.model").read_bytes() == (model_dir / "spiece.model").read_bytes()
    code = main(["finetune", "classify", "--train", str(tmp_path / "d.tsv"), "--model", str(tmp_path / "data"),
                 "--out", str(out)])
    assert code == 2 and "not a model directory" in capsys.readouterr().err


def test_gradient_accumulation_matches_one_batch(model_dir, tmp_path):
    """Steps split into unequal micro-batches (4+3+3, 1+1) give the weights of whole-batch steps."""
    from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train
    from albertlm.tasks import finetune, specs
    from albertlm.tasks.classify import Columns
    from albertlm.tokenization import load_tokenizer
    from albertlm.training.distributed import DistInfo

    rows = shared_path("glue", "SST-2", "dev.tsv").read_text().splitlines()[:13]
    (tmp_path / "d.tsv").write_text("\n".join(rows) + "\n")
    tokenizer = load_tokenizer(model_dir)
    weights = []
    for micro in (0, 4):   # 0: the whole batch of 10 at once; 4: micro-batches of 4+3+3 (the batch of 2: 1+1)
        cfg = FinetuneConfig(finetune_optim(lr=1e-3, warmup_steps=0),
                             finetune_train(batch_size=10, micro_batch_size=micro, max_steps=2, seed=3,
                                            progress=False, tensorboard=False), max_seq_length=32)
        spec = specs.classify_spec(tokenizer, cfg, Columns("sentence"), train_file=tmp_path / "d.tsv")
        loop = finetune.make_finetune_loop(spec, model_dir, tokenizer, cfg, tmp_path / f"run{micro}", DistInfo())
        assert [len(p) for p in next(loop.data.plan(0))] == ([10] if micro == 0 else [4, 3, 3])
        assert [len(p) for p in next(loop.data.plan(1))] == ([2] if micro == 0 else [1, 1])
        loop.run()
        weights.append(loop.raw_model.state_dict())
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=1e-4, atol=1e-6)
