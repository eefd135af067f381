"""HF interop audit 28 (a user moving checkpoints both ways between albertlm and transformers 5).

- convert's warnings (no tokenizer.json for a BPE SentencePiece model; transformers 5's AlbertTokenizer giving other
  ids) began with a bare `warning:` inside the summary's `tokenizer:` line on stdout; they are now the CLI's one form,
  `albertlm convert: warning: ...` on stderr (`complete_export` without a list for them: lines in that form).
- convert wrote weights the source lacks as trained ones: a transformers classifier directory without its
  classifier tensors converted (exit 0) into a directory holding a random classifier under the source's label names,
  which every later load called "all weights mapped" (predict on the source refused it; on the copy it scored the
  random head). Such a source is now refused in one line; a bare AlbertModel saved without a pooler converts
  without a made-up one.
- HF -> albertlm -> HF keeps every tensor bit-equal (grouped layouts, every head, labels): a check that held.
"""
from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from albertlm.cli.main import main  # noqa: E402
from conftest import assert_one_error, shared_path  # noqa: E402
from test_followups_audit18 import _tiny_pretrained  # noqa: E402
from test_hf_parity import hf_config, hf_model, inputs  # noqa: E402


def _weights(directory) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


# -- the warning form ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe_spiece(tmp_path_factory):
    """A BPE spiece.model (300 pieces) trained on the shared sample text: no tokenizer.json can express it."""
    import sentencepiece

    root = tmp_path_factory.mktemp("bpe")
    sentencepiece.SentencePieceTrainer.train(
        input=str(shared_path("text", "sample_text.txt")), model_prefix=str(root / "spiece"), vocab_size=300,
        model_type="bpe", pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols="[CLS],[SEP],[MASK]",
        num_threads=1, minloglevel=2)
    return root / "spiece.model"


def test_convert_warning_is_the_commands_warning_line_on_stderr(bpe_spiece, tmp_path, capsys, one_thread):
    src = _tiny_pretrained(tmp_path / "m", 300)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(bpe_spiece)]) == 0
    out, err = capsys.readouterr()
    assert "warning:" not in out, out    # was "tokenizer: ...; warning: no tokenizer.json: a BPE ..."
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("albertlm convert: warning: no tokenizer.json: a BPE "), err
    assert "unigram" in said[0]


def test_complete_export_without_a_warnings_list_gives_lines_in_the_warning_form(bpe_spiece, tmp_path, one_thread):
    """`export onnx DIR/` prints complete_export's lines: its warning names the command as every warning does."""
    from albertlm.errors import program_named
    from albertlm.interop.hf import complete_export, export_hf
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(_tiny_pretrained(tmp_path / "m", 300))
    export_hf(model, tmp_path / "hf")
    with program_named("albertlm export"):
        lines = complete_export(model, tmp_path / "hf", None, bpe_spiece)
    warned = [line for line in lines if "warning:" in line]
    assert len(warned) == 1 and warned[0].startswith("albertlm export: warning: no tokenizer.json: a BPE"), lines
    said: list[str] = []
    lines = complete_export(model, tmp_path / "hf", None, bpe_spiece, warnings=said)
    assert not [line for line in lines if "warning:" in line] and len(said) == 1
    assert said[0].startswith("no tokenizer.json: a BPE"), said


# -- no made-up weights --------------------------------------------------------------------------------------------
def _hf_classifier_without_head(root):
    from safetensors.torch import save_file

    hf = hf_model("AlbertForSequenceClassification", hf_config(num_hidden_layers=2, num_labels=2,
                                                                   id2label={0: "neg", 1: "pos"}))
    hf.save_pretrained(root)
    state = {k: v for k, v in _weights(root).items() if not k.startswith("classifier.")}
    save_file(state, root / "model.safetensors", metadata={"format": "pt"})
    return root


@pytest.mark.parametrize("through", ["hf", "albertlm"])
def test_convert_refuses_a_source_without_the_head_its_config_names(through, tmp_path, capsys, one_thread):
    src = _hf_classifier_without_head(tmp_path / "hf")
    if through == "albertlm":   # the same gap in an albertlm directory (made here from the full classifier)
        from albertlm.model.heads import AlbertForSequenceClassification
        from safetensors.torch import save_file

        AlbertForSequenceClassification(hf_config_to_ours(src)).save_pretrained(tmp_path / "ours")
        state = {k: v for k, v in _weights(tmp_path / "ours").items() if not k.startswith("classifier.")}
        save_file(state, tmp_path / "ours" / "model.safetensors",
                  metadata={"format": "pt", "albertlm_class": "AlbertForSequenceClassification"})
        src = tmp_path / "ours"
    to = ["--to", "hf"] if through == "albertlm" else []
    capsys.readouterr()   # transformers' save progress bar
    code = main(["convert", str(src), str(tmp_path / "out"), *to])
    assert_one_error(capsys, code, "classifier.weight, classifier.bias", "AlbertForSequenceClassification",
                     "makes up none")
    assert not (tmp_path / "out").exists()


def hf_config_to_ours(directory):
    from albertlm.model.hf_format import config_from_hf

    return config_from_hf(json.loads((directory / "config.json").read_text()))


def test_a_bare_model_without_a_pooler_converts_without_a_made_up_one(tmp_path, capsys, one_thread):
    from albertlm.model.albert import AlbertModel

    torch.manual_seed(0)
    ours = AlbertModel(hf_config_to_ours_tiny(), add_pooling_layer=False).eval()
    ours.save_pretrained(tmp_path / "ours")
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    out = capsys.readouterr().out
    assert "no pooler in the source" in out and "freshly initialised" not in out, out
    assert not [k for k in _weights(tmp_path / "hf") if k.startswith("pooler.")]
    theirs = transformers.AlbertModel.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = inputs()
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids, mask, types).last_hidden_state,
                                   ours(ids, mask, types).last_hidden_state, atol=1e-5, rtol=0)


def hf_config_to_ours_tiny():
    from albertlm.config import ModelConfig

    return ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                       max_position_embeddings=64)


# -- round trip (held before) ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, layout", [
    ("AlbertForPreTraining", dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2, hidden_act="gelu",
                                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=2)),
    ("AlbertForTokenClassification", dict(num_hidden_layers=3, num_hidden_groups=3,
                                          id2label={0: "O", 1: "B-PER", 2: "I-PER"})),
])
def test_hf_to_albertlm_to_hf_is_bit_equal(name, layout, tmp_path, capsys, one_thread):
    hf = hf_model(name, hf_config(**layout))
    hf.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--to", "hf"]) == 0
    before, after = _weights(tmp_path / "hf"), _weights(tmp_path / "back")
    assert sorted(before) == sorted(after)
    assert all(before[k].dtype == after[k].dtype and torch.equal(before[k], after[k]) for k in before)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "albert"
    if "id2label" in layout:
        assert config["id2label"] == {str(k): v for k, v in layout["id2label"].items()}
