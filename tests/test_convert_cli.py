"""`albertlm convert`: every direction through main(argv), the summary, tokenizer files, one-line errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertForPreTraining

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


def convert(capsys, *argv) -> tuple[int, str, str]:
    code = main(["convert", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def tf_copy(tmp_path: Path) -> Path:
    """The fixture checkpoint beside google's tarball names (albert_config.json, 30k-clean.model)."""
    src = tmp_path / "albert_tiny"
    src.mkdir()
    for f in FIXTURE.iterdir():
        if f.is_file() and f.name.startswith(("model.ckpt", "albert_config")):
            shutil.copyfile(f, src / f.name)
    (src / "30k-clean.model").write_bytes(b"sentencepiece model bytes")
    return src


def test_tf_to_albertlm_to_hf_and_back(capsys, tmp_path):
    src = tf_copy(tmp_path)
    code, out, err = convert(capsys, src, tmp_path / "ours")
    assert code == 0, err
    assert "(tf) ->" in out and "parameters: 18,575" in out
    assert "48 variables imported, 5 training-state variables skipped" in out
    assert (tmp_path / "ours" / "spiece.model").read_bytes() == b"sentencepiece model bytes"
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "ours")

    code, out, err = convert(capsys, tmp_path / "ours", tmp_path / "hf", "--to", "hf")
    assert code == 0, err
    assert "no missing or unexpected keys" in out
    assert (tmp_path / "hf" / "spiece.model").is_file()  # tokenizer files travel along

    code, out, err = convert(capsys, tmp_path / "hf", tmp_path / "ours2")
    assert code == 0, err
    assert "(hf) ->" in out
    assert_same_weights(ours, AlbertForPreTraining.from_pretrained(tmp_path / "ours2"))


def test_tf_prefix_straight_to_hf(capsys, tmp_path):
    transformers = pytest.importorskip("transformers")
    code, out, err = convert(capsys, FIXTURE / "model.ckpt-0", tmp_path / "hf", "--to", "hf", "--verify")
    assert code == 0, err
    model, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.num_hidden_groups == 2 and model.config.hidden_act == "gelu_new"


def test_explicit_config_and_tokenizer(capsys, tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    for f in FIXTURE.glob("model.ckpt-0.*"):
        shutil.copyfile(f, src / f.name)
    vocab = tmp_path / "my_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n")
    code, out, err = convert(capsys, src, tmp_path / "out", "--config", FIXTURE / "albert_config.json",
                             "--tokenizer", vocab)
    assert code == 0, err
    assert (tmp_path / "out" / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"


@pytest.mark.parametrize("case", ["missing-src", "not-a-model", "same-format", "config-for-hf", "dst-taken",
                                  "no-config", "wrong-config", "bad-tokenizer"])
def test_errors_are_one_line_exit_2(case, capsys, tmp_path):
    ours = tmp_path / "ours"
    AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(ours)
    (tmp_path / "empty").mkdir()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in FIXTURE.glob("model.ckpt-0.*"):
        shutil.copyfile(f, ckpt / f.name)
    argv, needle = {
        "missing-src": ([tmp_path / "nope", tmp_path / "out"], "no such file"),
        "not-a-model": ([tmp_path / "empty", tmp_path / "out"], "not a model"),
        "same-format": ([ours, tmp_path / "out"], "nothing to convert"),
        "config-for-hf": ([ours, tmp_path / "out", "--to", "hf", "--config", "x.json"], "only for TF"),
        "dst-taken": ([FIXTURE, ours], "--force"),
        "no-config": ([ckpt, tmp_path / "out"], "no albert_config.json"),
        "wrong-config": ([FIXTURE, tmp_path / "out", "--config", FIXTURE / "inner2" / "albert_config.json"],
                         "does not fit"),
        "bad-tokenizer": ([FIXTURE, tmp_path / "out", "--tokenizer", tmp_path / "none.model"], "no such file"),
    }[case]
    code, out, err = convert(capsys, *argv)
    assert code == 2
    assert err.startswith("albertlm convert: error: ") and err.count("\n") == 1, err
    assert needle in err and "Traceback" not in err


def test_unexportable_sharing_is_refused(capsys, tmp_path):
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, sharing="attention")
    AlbertForPreTraining(cfg).save_pretrained(tmp_path / "ours")
    code, out, err = convert(capsys, tmp_path / "ours", tmp_path / "hf", "--to", "hf")
    assert code == 2 and "sharing='attention'" in err and err.count("\n") == 1


def test_force_overwrites(capsys, tmp_path):
    assert convert(capsys, FIXTURE, tmp_path / "out")[0] == 0
    assert convert(capsys, FIXTURE, tmp_path / "out")[0] == 2
    assert convert(capsys, FIXTURE, tmp_path / "out", "--force")[0] == 0


def test_bad_choice_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["convert", "a", "b", "--to", "tf"])
    assert exc.value.code == 2
