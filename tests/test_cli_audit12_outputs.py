"""Output files are replaced only on request, with one flag name: `export onnx --out FILE` refuses an existing
FILE (and FILE.int8.onnx) without `--overwrite`, as `embed` does; `convert` takes `--overwrite` (its `--force`
still works) and says `--overwrite`."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from conftest import assert_one_error

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _classifier(directory: Path) -> Path:
    from albertlm.model import heads

    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(ModelConfig(
        vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
        max_position_embeddings=64, num_labels=2)).save_pretrained(directory)
    return directory


def test_export_onnx_keeps_an_existing_file_without_overwrite(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = _classifier(tmp_path / "clf")
    out = tmp_path / "clf.onnx"
    out.write_bytes(b"the user's file")
    code = main(["export", "onnx", str(model), "--out", str(out), "--no-verify"])
    assert_one_error(capsys, code, str(out), "already exists", "--overwrite")
    assert out.read_bytes() == b"the user's file"
    # the int8 file is an output too
    out.unlink()
    quantized = tmp_path / "clf.int8.onnx"
    quantized.write_bytes(b"an earlier int8 export")
    code = main(["export", "onnx", str(model), "--out", str(out), "--no-verify", "--quantize", "int8"])
    assert_one_error(capsys, code, str(quantized), "--overwrite")
    assert not out.exists() and quantized.read_bytes() == b"an earlier int8 export"
    assert main(["export", "onnx", str(model), "--out", str(out), "--no-verify"]) == 0   # int8 not asked: fine
    capsys.readouterr()
    assert main(["export", "onnx", str(model), "--out", str(out), "--no-verify", "--quantize", "int8",
                 "--overwrite"]) == 0
    assert out.stat().st_size > 1000 and quantized.read_bytes() != b"an earlier int8 export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clf", "clf.int8.onnx", "clf.onnx"]   # no staging left


def test_export_onnx_help_and_embed_agree_on_the_flag(capsys):
    for argv in (["export", "onnx", "--help"], ["embed", "--help"], ["convert", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        assert "--overwrite" in capsys.readouterr().out, argv


def test_convert_takes_overwrite_and_force(tmp_path, capsys):
    dst = tmp_path / "out"
    assert main(["convert", str(FIXTURE), str(dst)]) == 0
    weights = (dst / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert_one_error(capsys, main(["convert", str(FIXTURE), str(dst)]), "already holds", "--overwrite")
    assert (dst / "model.safetensors").read_bytes() == weights
    assert main(["convert", str(FIXTURE), str(dst), "--overwrite"]) == 0
    assert main(["convert", str(FIXTURE), str(dst), "--force"]) == 0
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--overwrite, --force" in text
