"""ONNX audit 23, as an engineer deploying a fine-tuned ALBERT with ONNX Runtime: `--out` took only a FILE.onnx (a
directory was "the file name must end in .onnx"), so no export gave the directory optimum's ORTModelFor*.from_pretrained
and transformers.js load as they are (onnx/model.onnx, config.json, tokenizer files); there was no float16 export;
`albertlm export --out m.onnx MODEL` (the format left out) said "invalid choice: 'm.onnx' (choose from 'onnx')".
The directory layout and config.json were checked against optimum-onnx 0.1.0 (transformers 4.57) in a throwaway
venv: every head loads there and gives PyTorch's outputs; here transformers 5's AutoConfig / AutoTokenizer stand in."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop import onnx as onnx_export  # noqa: E402
from albertlm.model import heads  # noqa: E402
from albertlm.model.albert import AlbertForPreTraining, AlbertModel  # noqa: E402
from conftest import assert_one_error, save_tiny_pretrained  # noqa: E402
from test_onnx_audit22 import sst2_run  # noqa: E402,F401  (the module-scoped fine-tuning run)

CLASSES = [AlbertModel, AlbertForPreTraining, heads.AlbertForMaskedLM, heads.AlbertForSequenceClassification,
           heads.AlbertForTokenClassification, heads.AlbertForQuestionAnswering, heads.AlbertForMultipleChoice]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32, num_labels=3, initializer_range=0.2),
                          **changes})


def _feeds(tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """What a server does with the exported tokenizer: transformers' tokenizer, int64 numpy."""
    enc = tokenizer(texts, padding=True, return_tensors="np")
    return {name: enc[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.parametrize("argv", [["--out", "m.onnx", "runs/rte/best"], ["runs/rte/best", "--out", "m.onnx"], []])
def test_export_without_the_format_says_what_the_command_looks_like(argv, capsys):
    with pytest.raises(SystemExit) as stop:   # argparse's usage error
        main(["export", *argv])
    assert_one_error(capsys, stop.value.code, "name the format first: albertlm export onnx MODEL --out")


def test_out_a_directory_is_what_optimum_and_transformers_js_load(sst2_run, tmp_path, capsys):
    """--out DIR: onnx/model.onnx (+ model_quantized.onnx, model_fp16.onnx: transformers.js's names for q8 / fp16),
    transformers' config.json (model_type, architectures, the run's labels) and the tokenizer files; the tokenizer
    transformers loads from it gives ids whose onnxruntime logits are PyTorch's. It was refused."""
    from transformers import AutoConfig, AutoTokenizer

    out = tmp_path / "serve"
    capsys.readouterr()
    assert main(["export", "onnx", str(sst2_run), "--out", str(out), "--quantize", "int8", "--fp16"]) == 0
    printed = capsys.readouterr().out
    assert f'ORTModelForSequenceClassification.from_pretrained("{out}")' in printed
    assert "pipeline('text-classification'" in printed and "float16: " in printed
    assert {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} == {
        "onnx/model.onnx", "onnx/model_quantized.onnx", "onnx/model_fp16.onnx", "config.json",
        "tokenizer.json", "tokenizer_config.json", "vocab.txt"}
    assert [p.name for p in tmp_path.iterdir()] == ["serve"]   # no staging folder left
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "albert" and config.architectures == ["AlbertForSequenceClassification"]
    assert config.id2label == {0: "0", 1: "1"} and config.problem_type == "single_label_classification"
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.model_max_length == 24   # the length the run was fine-tuned with
    from albertlm.model.registry import load_saved_model

    model = load_saved_model(sst2_run / "best").eval()
    feeds = _feeds(tokenizer, ["a gorgeous , witty , seductive movie .", "the film is strictly routine ."])
    session = onnx_export.onnx_session(out / "onnx" / "model.onnx")
    assert [i.name for i in session.get_inputs()] == list(onnx_export.INPUTS)
    with torch.no_grad():
        expected = model(*map(torch.from_numpy, feeds.values())).logits.numpy()
    np.testing.assert_allclose(session.run(["logits"], feeds)[0], expected, atol=1e-5)
    fp16 = onnx_export.onnx_session(out / "onnx" / "model_fp16.onnx").run(["logits"], feeds)[0]
    assert fp16.dtype == np.float32 and np.abs(fp16 - expected).max() < 1e-2
    assert onnx_export.onnx_metadata(out / "onnx" / "model_fp16.onnx")["dtype"] == "float16"


def test_a_pretraining_checkpoint_serves_as_its_masked_lm(tmp_path, capsys):
    """No optimum class or transformers.js pipeline reads AlbertForPreTraining's prediction_logits / sop_logits:
    the serving directory holds the masked-LM half (`logits`, fill-mask), said so; a FILE.onnx export keeps both."""
    (tmp_path / "pre").mkdir()
    source = save_tiny_pretrained(tmp_path / "pre")
    out = tmp_path / "fill"
    capsys.readouterr()
    assert main(["export", "onnx", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "AlbertForPreTraining from" in printed and "as AlbertForMaskedLM" in printed
    assert "ORTModelForMaskedLM" in printed and "pipeline('fill-mask'" in printed
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertForMaskedLM"]
    model = AlbertForPreTraining.from_pretrained(source).eval()
    ids = torch.tensor([[2, 7, 4, 9, 3], [2, 8, 3, 0, 0]])
    mask = (ids != 0).long()
    session = onnx_export.onnx_session(out / "onnx" / "model.onnx")
    got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                             "token_type_ids": torch.zeros_like(ids).numpy()})
    assert [o.name for o in session.get_outputs()] == ["logits"]
    with torch.no_grad():
        expected = model(ids, mask).prediction_logits.numpy()
    np.testing.assert_allclose(got[0], expected, atol=1e-5)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_float16_file_of_every_head(cls, tmp_path):
    """convert_fp16: float16 weights, the same int64 inputs and float32 outputs (serving code unchanged), close to
    PyTorch fp32 on padded two-segment batches of two shapes; the metadata kept."""
    torch.manual_seed(0)
    model = cls(_tiny()).eval()
    onnx_export.export_onnx(model, tmp_path / "m.onnx", metadata={"task": "x"})
    onnx_export.convert_fp16(tmp_path / "m.onnx", tmp_path / "m.fp16.onnx")
    import onnx

    proto = onnx.load(str(tmp_path / "m.fp16.onnx"))
    assert {i.data_type for i in proto.graph.initializer if i.data_type in (1, 10)} == {onnx.TensorProto.FLOAT16}
    session = onnx_export.onnx_session(tmp_path / "m.fp16.onnx")
    assert {i.type for i in session.get_inputs()} == {"tensor(int64)"}
    assert {o.type for o in session.get_outputs()} == {"tensor(float)"}
    assert onnx_export.onnx_metadata(tmp_path / "m.fp16.onnx")["task"] == "x"
    for batch, length in ((3, 37), (1, 32)):
        diffs = onnx_export.compare_with_onnxruntime(model, tmp_path / "m.fp16.onnx", batch, length)
        assert max(diffs.values()) < 2e-2, diffs


def test_float16_is_half_the_size(tmp_path):
    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(_tiny(vocab_size=2000, embedding_size=64, hidden_size=128,
                                                        ffn_size=256, num_layers=4)).eval()
    fp32 = onnx_export.export_onnx(model, tmp_path / "m.onnx")["bytes"]
    fp16 = onnx_export.convert_fp16(tmp_path / "m.onnx", tmp_path / "m16.onnx")["bytes"]
    assert 0.45 < fp16 / fp32 < 0.6, (fp16, fp32)


def test_fp16_beside_a_file(tmp_path, capsys):
    torch.manual_seed(0)
    heads.AlbertForQuestionAnswering(_tiny()).save_pretrained(tmp_path / "qa")
    out = tmp_path / "qa.onnx"
    assert main(["export", "onnx", str(tmp_path / "qa"), "--out", str(out), "--fp16"]) == 0
    printed = capsys.readouterr().out
    assert f"float16: {tmp_path / 'qa.fp16.onnx'}" in printed and "start_logits" in printed.split("float16:")[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qa", "qa.fp16.onnx", "qa.onnx"]
    code = main(["export", "onnx", str(tmp_path / "qa"), "--out", str(out), "--fp16", "--no-verify"])
    assert_one_error(capsys, code, "qa.onnx already exists")


def test_a_bf16_checkpoint_exports_a_float32_directory(tmp_path, capsys):
    torch.manual_seed(0)
    model = heads.AlbertForTokenClassification(_tiny()).eval()
    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    (tmp_path / "bf16" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                            *(f"w{i}" for i in range(55))]) + "\n")
    out = tmp_path / "served"
    assert main(["export", "onnx", str(tmp_path / "bf16"), "--out", str(out)]) == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert "logits" in capsys.readouterr().out
    float_model = model.float()
    assert max(onnx_export.compare_with_onnxruntime(float_model, out / "onnx" / "model.onnx").values()) < 1e-4


def test_bad_outs_are_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    torch.manual_seed(0)
    model_dir = tmp_path / "clf"
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(model_dir)
    (tmp_path / "notes").write_text("x")
    from albertlm.cli import export_commands

    monkeypatch.setattr(export_commands, "_load", lambda *a: pytest.fail("the model was loaded"))
    cases = [(["--out", str(model_dir)], "the model's own directory"),
             (["--out", str(tmp_path / "notes")], "an existing file"),
             (["--out", str(tmp_path / "model.bin")], "give a file name ending in .onnx, or a directory"),
             (["--out", str(tmp_path / "x"), "--tokenizer", str(tmp_path / "missing")], "--tokenizer"),
             (["--out", str(tmp_path / "notes" / "x")], "is a file")]
    for extra, phrase in cases:
        assert_one_error(capsys, main(["export", "onnx", str(model_dir), *extra]), phrase)
    checkpoint = tmp_path / "ckpt_copy"
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(checkpoint)
    assert_one_error(capsys, main(["export", "onnx", str(model_dir), "--out", str(checkpoint)]),
                     "holds a checkpoint (model.safetensors)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt_copy", "clf", "notes"]


def test_overwrite_of_a_directory_leaves_nothing_stale(tmp_path, capsys):
    """A second export into DIR is refused without --overwrite; with it, an earlier model_quantized.onnx (not asked
    for this time) is removed rather than left beside another model's model.onnx."""
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    out = tmp_path / "serve"
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--quantize", "int8", "--no-verify"]) == 0
    (out / "notes.md").write_text("mine")
    capsys.readouterr()
    code = main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--no-verify"])
    assert_one_error(capsys, code, "already holds an export", "--overwrite")
    assert main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--no-verify", "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert "none found beside the checkpoint" in printed   # no tokenizer: said, not silently missing
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "config.json", "notes.md", "onnx/model.onnx"]


@pytest.mark.parametrize("choices", [2, 5])
def test_multiple_choice_takes_any_number_of_choices(choices, tmp_path):
    """A pure check (it passed before): the num_choices axis is dynamic, not the export's example's 3."""
    torch.manual_seed(0)
    model = heads.AlbertForMultipleChoice(_tiny()).eval()
    onnx_export.export_onnx(model, tmp_path / "mc.onnx")
    ids = torch.randint(5, 60, (2, choices, 32))   # the model's full length
    mask = torch.ones_like(ids)
    mask[1, :, 20:] = 0
    got = onnx_export.onnx_session(tmp_path / "mc.onnx").run(
        ["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                     "token_type_ids": torch.zeros_like(ids).numpy()})[0]
    with torch.no_grad():
        expected = model(ids, mask).logits.numpy()
    assert got.shape == (2, choices)
    np.testing.assert_allclose(got, expected, atol=1e-5)
