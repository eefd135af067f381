"""Interop findings of the thirteenth session's audit: an untied transformers MLM decoder is named, `convert
--overwrite` leaves no file of the previous conversion, the tokenizer's preprocessing options travel with a
conversion, a tokenizer bigger than the model's vocabulary is one line everywhere, ONNX opsets are checked
before the model loads, `embed_texts` takes any of our classes, `token_index` needs its attention mask."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from conftest import shared_path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def tiny(vocab_size: int = 30000) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                       ffn_size=24, max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0,
                       classifier_dropout=0.0)


def saved_model(directory: Path, vocab_size: int = 30000, spiece: Path | None = None, **options) -> Path:
    torch.manual_seed(0)
    AlbertForPreTraining(tiny(vocab_size)).save_pretrained(directory)
    if spiece is not None:
        from albertlm.tokenization import load_tokenizer

        load_tokenizer(spiece, **options).save(directory)
    return directory


def hf_masked_lm(directory: Path, tied: bool) -> Path:
    transformers = pytest.importorskip("transformers")
    config = transformers.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=24, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = transformers.AlbertForMaskedLM(config)
    if not tied:
        with torch.no_grad():
            model.predictions.decoder.weight.normal_()
    model.save_pretrained(directory)
    return directory


def test_an_untied_transformers_decoder_is_named_and_a_tied_one_is_not(capsys, tmp_path):
    code, out, err = run(capsys, "convert", hf_masked_lm(tmp_path / "untied", tied=False), tmp_path / "a")
    assert code == 0, err
    assert "masked-LM decoder (predictions.decoder.weight) is not tied" in out
    assert "all weights mapped" not in out
    code, out, err = run(capsys, "convert", hf_masked_lm(tmp_path / "tied", tied=True), tmp_path / "b")
    assert code == 0, err
    assert "not tied" not in out and "all weights mapped" in out


def test_overwrite_leaves_no_tokenizer_file_of_the_previous_conversion(capsys, tmp_path):
    spiece = shared_path("spm", "albert-base-v2_spiece.model")
    with_tok = saved_model(tmp_path / "with_tok", spiece=spiece)
    without = saved_model(tmp_path / "without")
    dst = tmp_path / "hf"
    assert run(capsys, "convert", with_tok, dst, "--to", "hf")[0] == 0
    assert (dst / "spiece.model").is_file() and (dst / "tokenizer.json").is_file()
    code, out, err = run(capsys, "convert", without, dst, "--to", "hf", "--overwrite")
    assert code == 0, err
    left = {p.name for p in dst.iterdir()}
    assert not left & {"spiece.model", "tokenizer.json", "tokenizer_config.json"}, left
    assert "tokenizer: none found beside the source" in out
    assert "model card:" in out and "tokenizer: model card" not in out


def test_preprocessing_options_survive_a_round_trip_through_transformers(capsys, tmp_path):
    from albertlm.tokenization import load_tokenizer

    spiece = shared_path("spm", "albert-base-v2_spiece.model")
    ours = saved_model(tmp_path / "ours", spiece=spiece, do_lower_case=False, keep_accents=True)
    text = "Héllo World Café"
    expected = load_tokenizer(ours).encode(text)
    assert expected != load_tokenizer(spiece).encode(text)     # the options matter for this text
    assert run(capsys, "convert", ours, tmp_path / "hf", "--to", "hf")[0] == 0
    code, out, err = run(capsys, "convert", tmp_path / "hf", tmp_path / "back")
    assert code == 0, err
    assert (tmp_path / "back" / "tokenizer_config.json").is_file()
    assert load_tokenizer(tmp_path / "back").encode(text) == expected


@pytest.mark.parametrize("command", ["fill-mask", "embed", "convert"])
def test_a_tokenizer_bigger_than_the_vocabulary_is_one_line(capsys, tmp_path, command):
    spiece = shared_path("spm", "albert-base-v2_spiece.model")         # 30000 pieces
    model = saved_model(tmp_path / "m", vocab_size=100)
    argv = {"fill-mask": ["fill-mask", model, "a [MASK] b", "--tokenizer", spiece],
            "embed": ["embed", model, "--input", tmp_path / "t.txt", "--out", tmp_path / "e.npy",
                      "--tokenizer", spiece],
            "convert": ["convert", model, tmp_path / "hf", "--to", "hf", "--tokenizer", spiece]}[command]
    (tmp_path / "t.txt").write_text("some text\n")
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "has 30000 pieces but the model's vocabulary is 100" in err
    assert "Traceback" not in err + out
    assert not (tmp_path / "e.npy").exists() and not (tmp_path / "hf").exists()


def test_finetune_refuses_a_tokenizer_bigger_than_the_vocabulary(capsys, tmp_path):
    spiece = shared_path("spm", "albert-base-v2_spiece.model")
    glue = shared_path("glue", "SST-2")
    model = saved_model(tmp_path / "m", vocab_size=100)
    code, out, err = run(capsys, "finetune", "glue", "--task", "sst2", "--data-dir", glue, "--model", model,
                         "--out", tmp_path / "ft", "--tokenizer", spiece, "--max-steps", "1")
    assert code == 2 and "has 30000 pieces but the model's vocabulary is 100" in err


@pytest.mark.parametrize("exporter,opset", [("torchscript", 5), ("torchscript", 13), ("torchscript", 99),
                                            ("dynamo", 14)])
def test_onnx_opsets_out_of_range_are_refused_before_the_model_loads(capsys, tmp_path, exporter, opset):
    pytest.importorskip("onnx")
    code, out, err = run(capsys, "export", "onnx", tmp_path / "no-model-here", "--out", tmp_path / "m.onnx",
                         "--exporter", exporter, "--opset", opset)
    assert code == 2
    assert f"--opset {opset}: the {exporter} exporter writes opsets" in err   # not "no such model" first
    assert "Traceback" not in err


def test_convert_refuses_verify_without_a_tf_source_and_names_a_forced_format(capsys, tmp_path):
    model = saved_model(tmp_path / "m")
    code, _, err = run(capsys, "convert", model, tmp_path / "hf", "--to", "hf", "--verify")
    assert code == 2 and "--verify checks a TF checkpoint" in err
    code, _, err = run(capsys, "convert", model, tmp_path / "x", "--from", "albertlm")
    assert code == 2 and "--from albertlm and --to albertlm: nothing to convert" in err


def test_embed_texts_takes_any_class_holding_the_backbone(tmp_path):
    from albertlm.tasks.inference import embed_texts
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    torch.manual_seed(0)
    full = AlbertForPreTraining(tiny()).eval()
    backbone = AlbertModel(tiny()).eval()
    backbone.load_state_dict(full.albert.state_dict())
    texts = ["a short one", "and a somewhat longer text to embed"]
    torch.testing.assert_close(torch.from_numpy(embed_texts(full, tokenizer, texts)),
                               torch.from_numpy(embed_texts(backbone, tokenizer, texts)))


def test_token_index_without_its_attention_mask_is_refused():
    model = AlbertModel(tiny()).eval()
    ids = torch.randint(5, 100, (2, 6))
    with pytest.raises(ValueError, match="needs the attention_mask"):
        model(ids, None, token_index=torch.arange(10))
