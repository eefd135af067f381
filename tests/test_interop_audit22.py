"""Interop audit of the twenty-second session, as a user moving checkpoints between transformers, google-research TF
and albertlm: a transformers config whose id2label is keyed by name (which transformers itself refuses) or names a
class null converted to albertlm without a word, and the way back (`convert --to hf`, `export_hf`) then failed with
a traceback building label2id (so did a hand-edited labels.json); a BERT directory with `architectures` was "not
an ALBERT class we know" (or a complaint about its weights) instead of its model_type; and checks of what already
held: a one-row google classifier through the CLI is STS-B's regression for transformers too, and a sharded bf16
multi-label classifier keeps its logits, dtype and config fields there and back. transformers is the oracle."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.interop.hf import export_hf
from albertlm.model.heads import AlbertForSequenceClassification
from conftest import assert_one_error
from test_tfonnx_audit20 import INPUTS, fixture_tensors, google_reference, write_checkpoint

transformers = pytest.importorskip("transformers")


def hf_classifier(directory: Path, **config) -> Path:
    """A random transformers AlbertForSequenceClassification (tiny, odd sizes) saved in `directory`."""
    torch.manual_seed(0)
    cfg = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                    **config)
    transformers.AlbertForSequenceClassification(cfg).save_pretrained(directory)
    return directory


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(("id2label", "phrase"), [
    ({"neg": "neg", "pos": "pos"}, "id2label has the key 'neg', which is not a class index"),
    ({"0": "neg", "1": None}, "id2label['1'] is null: a class name must be a string"),
])
def test_an_id2label_that_is_not_index_to_name_is_one_line(capsys, tmp_path, id2label, phrase, one_thread):
    """It converted (into labels.json) and `convert DST --to hf` then died in a ValueError / TypeError traceback."""
    src = hf_classifier(tmp_path / "hf", num_labels=2)
    edit_json(src / "config.json", id2label=id2label)
    capsys.readouterr()   # transformers' progress bar
    assert_one_error(capsys, main(["convert", str(src), str(tmp_path / "ours")]), "config.json", phrase)
    assert not (tmp_path / "ours").exists()


def test_a_hand_edited_labels_json_is_refused_before_anything_is_written(capsys, tmp_path, tiny_config, one_thread):
    ours = tmp_path / "ours"
    AlbertForSequenceClassification(tiny_config.replace(num_labels=2)).save_pretrained(ours)
    (ours / "labels.json").write_text(json.dumps({"id2label": {"0": ["neg"], "1": "pos"}}))
    assert_one_error(capsys, main(["convert", str(ours), str(tmp_path / "hf"), "--to", "hf"]),
                     "labels.json: id2label['0'] is [\"neg\"]: a class name must be a string")
    assert not (tmp_path / "hf").exists()
    with pytest.raises(UserError, match="not a class index"):   # the Python export, before writing
        export_hf(AlbertForSequenceClassification(tiny_config.replace(num_labels=2)), tmp_path / "py",
                  labels={"id2label": {"neg": "neg", "pos": "pos"}})
    assert not (tmp_path / "py").exists()


@pytest.mark.parametrize("config", [{"model_type": "bert", "architectures": ["BertForMaskedLM"]},
                                    {"model_type": "bert"}])
def test_a_bert_directory_is_named_by_its_model_type(capsys, tmp_path, config):
    """With `architectures` it was "architecture 'BertForMaskedLM' is not an ALBERT class we know"; without, a
    complaint about its weights (here: none), before the config was read."""
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps(config))
    assert_one_error(capsys, main(["convert", str(tmp_path / "bert"), str(tmp_path / "out")]),
                     "model_type is 'bert': not an ALBERT checkpoint")


def test_a_one_row_google_classifier_is_a_regression_in_transformers_too(capsys, tmp_path, one_thread):
    """The item left open: run_classifier.py's STS-B head (output_weights [1, H]) through `convert --to hf` is a
    regression there (problem_type), and transformers gives the score google's head computes on the pooled output."""
    rng = np.random.default_rng(3)
    backbone = {n: v for n, v in fixture_tensors().items() if n.startswith("bert/")}
    weights, bias = rng.standard_normal((1, 32)).astype(np.float32), np.full(1, 0.5, np.float32)
    write_checkpoint(tmp_path / "stsb", {**backbone, "output_weights": weights, "output_bias": bias})
    assert main(["convert", str(tmp_path / "stsb"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    assert "read as run_classifier.py's regression (STS-B)" in capsys.readouterr().out
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert model.config.problem_type == "regression" and model.config.num_labels == 1
    ref = google_reference()
    with torch.no_grad():
        score = model(*(torch.from_numpy(ref[k]).long() for k in INPUTS)).logits
    expected = ref["pooled_output"] @ weights.T + bias   # google's logits for STS-B, squeezed to the score
    torch.testing.assert_close(score, torch.from_numpy(expected), atol=1e-5, rtol=0)


def test_a_sharded_bf16_multi_label_classifier_goes_there_and_back(capsys, tmp_path, one_thread):
    """transformers -> albertlm -> transformers by the CLI: the same logits, bf16 kept, the config fields kept."""
    src = tmp_path / "hf"
    hf_classifier(src, num_labels=3, problem_type="multi_label_classification", id2label={0: "a", 1: "b", 2: "c"},
                  label2id={"a": 0, "b": 1, "c": 2}, classifier_dropout_prob=0.07, layer_norm_eps=1e-7,
                  pad_token_id=5, hidden_act="gelu")
    source = transformers.AlbertForSequenceClassification.from_pretrained(src).eval()
    src = tmp_path / "sharded"
    source.to(torch.bfloat16).save_pretrained(src, max_shard_size="20KB")
    assert (src / "model.safetensors.index.json").is_file() and not (src / "model.safetensors").exists()
    capsys.readouterr()   # transformers' progress bars
    assert main(["convert", str(src), str(tmp_path / "ours")]) == 0, capsys.readouterr().err
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--to", "hf"]) == 0
    back = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "back", dtype="auto").eval()
    assert back.dtype == torch.bfloat16
    before = json.loads((src / "config.json").read_text())
    after = json.loads((tmp_path / "back" / "config.json").read_text())
    for field in ("id2label", "label2id", "problem_type", "classifier_dropout_prob", "layer_norm_eps", "pad_token_id",
                  "hidden_act"):
        assert after[field] == before[field], field
    ids = torch.randint(0, 99, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(back(ids).logits, source(ids).logits)
