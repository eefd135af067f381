"""ONNX audit 29, as a user who exports every kind of albertlm model and serves it with onnxruntime: a SQuAD v2.0
model's .onnx held nothing of the no-answer threshold its run tuned on dev (which `predict squad` applies), nor the
version, windows and answer limits, nor RACE's question+option length: a server nulled at 0 and answered otherwise
than `predict`; `--exporter dynamo --opset 23` was allowed and wrote ONNX's Attention op, which onnxruntime's kernel
refuses with ALBERT's padding mask (a traceback after the export, or with --no-verify a file that runs on no real
input); a file onnxruntime cannot run was a traceback; `--overwrite` of FILE.onnx left an earlier model's
FILE.int8.onnx / FILE.fp16.onnx beside the new one (a serving directory's were removed)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.errors import UserError  # noqa: E402
from albertlm.interop import onnx as onnx_export  # noqa: E402
from albertlm.model import heads  # noqa: E402
from conftest import assert_one_error, save_tiny_pretrained, shared_path  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32, num_labels=2), **changes})


@pytest.fixture(scope="module")
def squad2_run(tmp_path_factory) -> Path:
    """A real SQuAD v2.0 fine-tuning: the tiny pretrained model, one step on the shared 14-question dev file (which
    holds unanswerable questions, so the run tunes and records a null threshold)."""
    root = tmp_path_factory.mktemp("squad2")
    data = shared_path("squad", "dev-v2.0-small.json")
    (root / "pretrained").mkdir()
    pretrained = save_tiny_pretrained(root / "pretrained")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["finetune", "squad", "--version", "2.0", "--train", str(data), "--dev", str(data),
                     "--model", str(pretrained), "--out", str(root / "run"), "--max-steps", "1", "--batch-size", "8",
                     "--max-seq-length", "48", "--max-query-length", "16", "--doc-stride", "24", "--eval-every", "1",
                     "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return root / "run"


@pytest.mark.parametrize("source", ["run", "step"])
def test_a_squad_v2_export_carries_the_null_threshold_predict_applies(squad2_run, source, tmp_path, capsys):
    """The file said family squad and max_seq_length only: the tuned null threshold (`predict squad` nulls an answer
    where the null score minus the best span's exceeds it), the version and the window settings were left in
    task.json. Now they are the file's metadata and the serving line says them; the run and its step_N agree."""
    task = json.loads((squad2_run / "best" / "task.json").read_text())
    model = squad2_run if source == "run" else squad2_run / "checkpoints" / "step_00000001"
    out = tmp_path / "qa.onnx"
    capsys.readouterr()
    assert main(["export", "onnx", str(model), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    meta = onnx_export.onnx_metadata(out)
    assert meta["squad_version"] == "2.0" and float(meta["null_threshold"]) == task["null_threshold"]
    assert {key: int(meta[key]) for key in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size")} \
        == {key: task["settings"][key] for key in ("doc_stride", "max_query_length", "max_answer_length",
                                                   "n_best_size")}
    assert "SQuAD 2.0 (doc_stride 24, max_query_length 16, max_answer_length 30)" in printed, printed
    assert f"exceeds null_threshold {task['null_threshold']:.4g}" in printed, printed
    # the encoder of the same run carries none of the head's settings
    assert main(["export", "onnx", str(model), "--out", str(tmp_path / "enc.onnx"), "--encoder", "--no-verify"]) == 0
    assert not {"squad_version", "null_threshold", "doc_stride"} & set(onnx_export.onnx_metadata(tmp_path / "enc.onnx"))


def test_the_squad_graph_gives_pytorchs_logits_on_real_windows(squad2_run, tmp_path):
    """A pure check (it passed before): start/end logits of real SQuAD windows (question and context segments,
    padding) from onnxruntime are PyTorch's, at the fine-tuned length and at length 1."""
    from albertlm.model.registry import load_saved_model
    from albertlm.tasks.features import Feature, collate, encode_pairs
    from albertlm.tokenization import load_tokenizer

    out = tmp_path / "qa.onnx"
    assert main(["export", "onnx", str(squad2_run), "--out", str(out), "--no-verify"]) == 0
    data = json.loads(shared_path("squad", "dev-v2.0-small.json").read_text(encoding="utf-8"))
    pairs = [(qa["question"], p["context"]) for article in data["data"] for p in article["paragraphs"]
             for qa in p["qas"]][:6]
    tokenizer = load_tokenizer(squad2_run / "best")
    encoded, _ = encode_pairs(tokenizer, [q for q, _ in pairs], [c for _, c in pairs], 48)
    batch = collate([Feature(ids, types, k) for k, (ids, types) in enumerate(encoded)], tokenizer.pad_id)
    model = load_saved_model(squad2_run / "best").eval()
    session = onnx_export.onnx_session(out)
    for feeds in ({k: batch[k].numpy() for k in onnx_export.INPUTS},
                  {k: batch[k][:, :1].numpy() for k in onnx_export.INPUTS}):
        got = session.run(["start_logits", "end_logits"], feeds)
        with torch.no_grad():
            expected = model(*(torch.from_numpy(feeds[k]) for k in onnx_export.INPUTS))
        np.testing.assert_allclose(got[0], expected.start_logits.numpy(), atol=1e-5)
        np.testing.assert_allclose(got[1], expected.end_logits.numpy(), atol=1e-5)


def test_race_and_regression_serving_lines(tmp_path, capsys):
    """RACE's question+option length is the file's metadata (the choices are cut as `predict race` cuts them); a
    one-score head's serving line says it is a regression (it said nothing of its output)."""
    torch.manual_seed(0)
    race = tmp_path / "race"
    heads.AlbertForMultipleChoice(_tiny()).save_pretrained(race)
    (race / "task.json").write_text(json.dumps({"family": "race", "max_seq_length": 24, "max_qa_length": 10}))
    sts = tmp_path / "sts"
    heads.AlbertForSequenceClassification(_tiny(num_labels=1)).save_pretrained(sts)
    (sts / "task.json").write_text(json.dumps({"family": "glue", "task": "stsb", "labels": [], "max_seq_length": 24}))
    capsys.readouterr()
    assert main(["export", "onnx", str(race), "--out", str(tmp_path / "race.onnx"), "--no-verify"]) == 0
    assert "question+option of at most 10 tokens" in capsys.readouterr().out
    assert onnx_export.onnx_metadata(tmp_path / "race.onnx")["max_qa_length"] == "10"
    assert main(["export", "onnx", str(sts), "--out", str(tmp_path / "sts.onnx"), "--no-verify"]) == 0
    assert "at most 24 tokens; one score (regression);" in capsys.readouterr().out


def test_dynamo_opset_23_is_refused_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """torch allows the dynamo exporter opset 23, where it writes ONNX's Attention op; onnxruntime's kernel refuses
    ALBERT's (B, 1, 1, T) padding mask there. It was exported (a traceback at the check, or a file that runs on no
    real input with --no-verify); now it is one line, before the model loads, and 22 is the highest offered."""
    from albertlm.cli import export_commands

    assert onnx_export.opset_range("dynamo")[1] <= 22
    with pytest.raises(UserError, match="Attention op"):
        onnx_export.check_opset("dynamo", 23)
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    monkeypatch.setattr(export_commands, "_load", lambda *a: pytest.fail("the model was loaded"))
    code = main(["export", "onnx", str(tmp_path / "clf"), "--out", str(tmp_path / "m.onnx"), "--exporter", "dynamo",
                 "--opset", "23", "--no-verify"])
    assert_one_error(capsys, code, "--opset 23", "18 to 22")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clf"]


def test_a_graph_onnxruntime_cannot_run_is_one_line_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    """The check after the export ran onnxruntime unguarded: its failure (as dynamo's opset-23 Attention op gives
    with onnxruntime 1.32, "inconsistent q_sequence_length") was a traceback and an onnxruntime log line on stderr.
    Now: one line naming the file as --out gives it (not the staging folder), and nothing written. The failure is
    raised here as onnxruntime raises it, so the test does not depend on which graphs an onnxruntime version runs."""
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

    class _Failing:
        def __init__(self, *args, **kwargs):
            pass

        def run(self, *args, **kwargs):
            raise ort_errors.InvalidArgument("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code "
                                             "returned while running Attention node. inconsistent q_sequence_length")

    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    monkeypatch.setattr(onnx_export, "onnx_session", _Failing)
    out = tmp_path / "serve" / "m.onnx"
    code = main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out)])
    assert_one_error(capsys, code, f"onnxruntime cannot run {out}", "nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clf"]


def test_compare_with_onnxruntime_on_a_file_it_cannot_run_is_a_user_error(tmp_path):
    torch.manual_seed(0)
    onnx_export.export_onnx(heads.AlbertForMultipleChoice(_tiny()).eval(), tmp_path / "mc.onnx")
    with pytest.raises(UserError, match=r"onnxruntime cannot run .*mc\.onnx: .*INVALID_ARGUMENT"):
        onnx_export.compare_with_onnxruntime(heads.AlbertForSequenceClassification(_tiny()).eval(),
                                             tmp_path / "mc.onnx")


def test_overwrite_of_a_file_removes_an_earlier_models_companions(tmp_path):
    """`--out m.onnx --quantize int8 --fp16`, then another model `--out m.onnx --overwrite`: m.int8.onnx and
    m.fp16.onnx were the first model's, left beside the second's m.onnx (a directory's were removed). Now
    --overwrite removes them (without it they are left alone, as test_cli_audit12_outputs pins)."""
    torch.manual_seed(0)
    for name, labels in (("two", 2), ("three", 3)):
        heads.AlbertForSequenceClassification(_tiny(num_labels=labels)).save_pretrained(tmp_path / name)
    serve = tmp_path / "serve"
    out = serve / "m.onnx"
    assert main(["export", "onnx", str(tmp_path / "two"), "--out", str(out), "--quantize", "int8", "--fp16",
                 "--no-verify"]) == 0
    assert main(["export", "onnx", str(tmp_path / "three"), "--out", str(out), "--overwrite", "--no-verify"]) == 0
    assert sorted(p.name for p in serve.iterdir()) == ["m.onnx"]
    assert onnx_export.onnx_metadata(out)["num_labels"] == "3"
