"""Interop findings of the seventeenth session's second audit: a transformers directory whose config.json names no
architecture keeps its fine-tuned head, an exported one-label classifier (GLUE STS-B) says it is a regression, a
transformers 4 position_embedding_type other than 'absolute' is refused, a google checkpoint whose backbone is under
another scope than `bert/` imports, and a TF checkpoint given by its `.data-*` or `.meta` file converts."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from conftest import assert_one_error, shared_path

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def hf_config(**changes):
    transformers = pytest.importorskip("transformers")
    return transformers.AlbertConfig(**{**dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=24, max_position_embeddings=32,
                                               classifier_dropout_prob=0.0), **changes})


def inputs(shape=(2, 9)):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[..., -1, -3:] = 0
    types = torch.zeros_like(ids)
    types[..., shape[-1] // 2:] = 1
    return ids, mask, types


def save_without_architectures(model, directory: Path) -> None:
    """What a custom training loop leaves: `config.save_pretrained` beside `torch.save(model.state_dict())`."""
    directory.mkdir(parents=True)
    model.config.architectures = None
    model.config.save_pretrained(directory)
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
    assert not json.loads((directory / "config.json").read_text()).get("architectures")


@pytest.mark.parametrize("name,changes", [
    ("AlbertForSequenceClassification", dict(num_labels=3)),
    ("AlbertForSequenceClassification", dict(num_labels=1, problem_type="regression")),
    ("AlbertForTokenClassification", dict(num_labels=5)),
    ("AlbertForQuestionAnswering", dict()),
    ("AlbertForMultipleChoice", dict()),
    ("AlbertForMaskedLM", dict()),
])
def test_a_config_without_architectures_keeps_the_fine_tuned_head(capsys, tmp_path, name, changes):
    """No `architectures`: the directory was read as AlbertForPreTraining, the fine-tuned head was dropped ("ignored
    checkpoint weights of other heads") and a model with random MLM / SOP heads was written, exit 0."""
    transformers = pytest.importorskip("transformers")
    from albertlm.model.registry import load_saved_model

    torch.manual_seed(0)
    theirs = getattr(transformers, name)(hf_config(**changes)).eval()
    save_without_architectures(theirs, tmp_path / "hf")
    code, out, err = run(capsys, "convert", tmp_path / "hf", tmp_path / "ours")
    assert code == 0, err
    assert f"model: {name}," in out and "ignored" not in out and "freshly initialised" not in out
    ours = load_saved_model(tmp_path / "ours").eval()
    assert type(ours).__name__ == name
    ids, mask, types = inputs((2, 3, 9) if name == "AlbertForMultipleChoice" else (2, 9))
    with torch.no_grad():
        a, b = ours(ids, mask, types), theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
    for key in ("start_logits", "end_logits") if name == "AlbertForQuestionAnswering" else ("logits",):
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=0)


def test_a_one_row_classifier_without_architectures_or_problem_type_is_one_line(capsys, tmp_path):
    """A 1-row classifier on the pooled output is a regression or a multiple-choice scorer: say so, not guess."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    save_without_architectures(transformers.AlbertForSequenceClassification(hf_config(num_labels=1)), tmp_path / "hf")
    code = main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")])
    assert_one_error(capsys, code, "architectures", "AlbertForMultipleChoice")
    assert not (tmp_path / "ours").exists()


def test_an_exported_sts_b_regressor_says_regression(capsys, tmp_path):
    """A GLUE STS-B run records `"labels": []` in task.json (no "regression" key), so the export's config.json had
    no problem_type, and transformers' text-classification pipeline ran a sigmoid over the similarity score."""
    transformers = pytest.importorskip("transformers")
    from albertlm.model.heads import AlbertForSequenceClassification

    spm = shared_path("spm", "albert-base-v2_spiece.model")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2, ffn_size=24,
                      max_position_embeddings=64, num_labels=1, initializer_range=0.5)
    model = AlbertForSequenceClassification(cfg).eval()
    with torch.no_grad():
        model.classifier.bias.fill_(3.0)   # a score well outside (0, 1)
    model.save_pretrained(tmp_path / "run" / "best")
    (tmp_path / "run" / "task.json").write_text('{"family": "glue", "task": "stsb", "labels": []}')
    code, _, err = run(capsys, "convert", tmp_path / "run", tmp_path / "hf", "--to", "hf", "--tokenizer", spm)
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["problem_type"] == "regression"
    classify = transformers.pipeline("text-classification", model=str(tmp_path / "hf"), device="cpu")
    text = "A man is playing a guitar."
    from albertlm.tokenization import load_tokenizer

    ids = load_tokenizer(spm).encode_pair(text, None)[0]
    with torch.no_grad():
        score = model(torch.tensor([ids])).logits.item()
    assert score > 1.5
    assert classify(text)[0]["score"] == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("value", ["relative_key", "relative_key_query"])
def test_a_relative_position_embedding_type_is_refused(capsys, tmp_path, value):
    """transformers 4's position_embedding_type: any value but 'absolute' leaves the absolute position embeddings out
    of the sum; ours add them, so the model loaded silently as another network."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    transformers.AlbertModel(hf_config()).save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "position_embedding_type": value}))
    capsys.readouterr()   # transformers' "Writing model shards" bar
    code = main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")])
    assert_one_error(capsys, code, f"position_embedding_type={value!r}", "absolute")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "position_embedding_type": "absolute"}))
    assert run(capsys, "convert", tmp_path / "hf", tmp_path / "ours")[0] == 0


def test_a_backbone_under_the_albert_scope_imports(capsys, tmp_path):
    """google's modeling.AlbertModel takes a `scope` (default 'bert'); a checkpoint built with scope 'albert' (the
    fixture with every bert/ variable renamed) was refused: "not an ALBERT checkpoint of this config: no bert/..."."""
    from albertlm.interop.tf import import_tf_checkpoint
    from test_tf_import import repack

    prefix = repack(tmp_path / "ckpt", lambda k: b"albert/" + k[len(b"bert/"):] if k.startswith(b"bert/") else k,
                    snappy=False)
    shutil.copyfile(FIXTURE / "albert_config.json", tmp_path / "ckpt" / "albert_config.json")
    model, report = import_tf_checkpoint(prefix)
    assert not report.missing and not report.unused and len(report.skipped) == 5
    ref = np.load(FIXTURE / "forward.npz")   # google's own forward on the fixture
    with torch.no_grad():
        out = model.eval().albert(*(torch.from_numpy(ref[k]).long()
                                    for k in ("input_ids", "input_mask", "token_type_ids")))
    torch.testing.assert_close(out.last_hidden_state, torch.from_numpy(ref["sequence_output"]), atol=1e-5, rtol=0)
    code, out, err = run(capsys, "convert", tmp_path / "ckpt", tmp_path / "ours")
    assert code == 0, err
    assert "under albert/ read as google's bert/" in out


@pytest.mark.parametrize("name", ["model.ckpt-0.data-00000-of-00001", "model.ckpt-0.meta"])
def test_a_checkpoint_given_by_its_data_or_meta_file_converts(capsys, tmp_path, name):
    """google's tarballs hold model.ckpt-best.{index,meta,data-00000-of-00001}; naming the data or graph file (what
    tab completion offers first) was "not a model (no config.json, no TF *.index checkpoint)"."""
    src = tmp_path / "albert_tiny"
    src.mkdir()
    for f in FIXTURE.iterdir():
        if f.is_file() and f.name.startswith(("model.ckpt", "albert_config")):
            shutil.copyfile(f, src / f.name)
    (src / "model.ckpt-0.meta").write_bytes(b"a TF 1 MetaGraphDef")
    code, out, err = run(capsys, "convert", src / name, tmp_path / "ours")
    assert code == 0, err
    assert "48 variables imported" in out
    (src / "model.ckpt-0.index").unlink()
    code = main(["convert", str(src / name), str(tmp_path / "again")])
    assert_one_error(capsys, code, "model.ckpt-0.index")
    assert not (tmp_path / "again").exists()
