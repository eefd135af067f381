"""The model / checkpoint / interop audit of the eighteenth session, as a user saving, loading, inspecting and
exporting models: a batch whose every label is ignored (-100) gives the task heads a loss of 0 with a zero gradient
(it was NaN, which AdamW turns into NaN weights for good); `load_saved_model` on a transformers directory loads the
class the directory holds (it read every one as AlbertForPreTraining: a fine-tuned head dropped, random MLM / SOP heads
in its place); `albertlm info` describes a google TF checkpoint (it was refused as "not a model directory") and counts
the stored weights of sharded and pickled transformers directories ("unknown"), and names the class of a config whose
`architectures` is a lone string (it printed its first letter); a bf16 model with E = H exports to transformers in
one dtype (the E->H identity was written float32)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model import heads

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


def tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32, hidden_dropout=0.0, attention_dropout=0.0,
                                 classifier_dropout=0.0, num_labels=3), **changes})


def info_json(capsys, path) -> dict:
    assert main(["info", "--json", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def hf_model(name: str):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=32,
                                       num_labels=2 if name == "AlbertForQuestionAnswering" else 3,
                                       classifier_dropout_prob=0.0)
    return getattr(transformers, name)(config).eval()


# ------------------------------------------------------------------------------- a batch with nothing to learn
HEAD_CASES = {   # class -> (input shape, the loss's targets, every one of them ignored)
    "AlbertForMaskedLM": ((2, 6), lambda: dict(labels=torch.full((2, 6), -100))),
    "AlbertForTokenClassification": ((2, 6), lambda: dict(labels=torch.full((2, 6), -100))),
    "AlbertForSequenceClassification": ((2, 6), lambda: dict(labels=torch.full((2,), -100))),
    "AlbertForMultipleChoice": ((2, 3, 6), lambda: dict(labels=torch.full((2,), -100))),
    # SQuAD's positions past the sequence are ignored (transformers clamps them to T and ignores T)
    "AlbertForQuestionAnswering": ((2, 6), lambda: dict(start_positions=torch.full((2,), 50),
                                                        end_positions=torch.full((2,), 50))),
}


@pytest.mark.parametrize("name", list(HEAD_CASES))
def test_a_batch_whose_every_label_is_ignored_has_loss_zero_and_no_gradient(name):
    """The mean over zero labelled elements was NaN (as transformers returns), and the step after it wrote NaN into
    every weight through AdamW's moments. Now 0, a zero gradient, still differentiable (`loss.backward()` works), as
    AlbertForPreTraining's MLM / SOP losses already were (test_model_audit17's all-padding check); a batch with labels
    keeps F.cross_entropy's mean."""
    torch.manual_seed(0)
    model = getattr(heads, name)(tiny()).train()
    shape, targets = HEAD_CASES[name]
    ids = torch.randint(5, 60, shape)
    out = model(ids, **targets())
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())

    partly = {k: v.clone() for k, v in targets().items()}   # one labelled element: the usual mean, unchanged
    for value in partly.values():
        value.view(-1)[0] = 1
    logits = model.eval()(ids, **partly)
    if name == "AlbertForQuestionAnswering":
        expected = sum(torch.nn.functional.cross_entropy(logits[k][:1], torch.tensor([1]))
                       for k in ("start_logits", "end_logits")) / 2
    else:
        flat = logits.logits.flatten(0, -2) if logits.logits.dim() == 3 else logits.logits
        expected = torch.nn.functional.cross_entropy(flat, next(iter(partly.values())).flatten())
    torch.testing.assert_close(logits.loss, expected)


# -------------------------------------------------------------------- load_saved_model on a transformers directory
@pytest.mark.parametrize("name", ["AlbertForSequenceClassification", "AlbertForMaskedLM", "AlbertForQuestionAnswering"])
def test_load_saved_model_reads_a_transformers_directory_as_the_class_it_holds(tmp_path, name):
    """It read the safetensors metadata albertlm writes, found none, and loaded AlbertForPreTraining: the fine-tuned
    head was dropped and random MLM / SOP heads took its place ("freshly initialised" in the log only)."""
    from albertlm.model.registry import load_saved_model, saved_class_name

    theirs = hf_model(name)
    theirs.save_pretrained(tmp_path / "hf")
    assert saved_class_name(tmp_path / "hf") == name
    ours = load_saved_model(tmp_path / "hf").eval()
    assert type(ours).__name__ == name
    ids = torch.randint(5, 60, (2, 7))
    with torch.no_grad():
        a, b = ours(ids), theirs(input_ids=ids)
    for key in ("start_logits", "end_logits") if name == "AlbertForQuestionAnswering" else ("logits",):
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=0)


def test_info_names_the_class_of_an_architectures_string(capsys, tmp_path):
    """`"architectures": "AlbertForMaskedLM"` (a string, not a list, as some hand-written configs have; convert
    reads it) was shown as class 'A' (its first character)."""
    hf_model("AlbertForMaskedLM").save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "architectures": "AlbertForMaskedLM"}))
    capsys.readouterr()
    assert info_json(capsys, tmp_path / "hf")["model_class"] == "AlbertForMaskedLM"


# ---------------------------------------------------------------------------------------- info on every input
@pytest.mark.parametrize("given", ["", "model.ckpt-0", "model.ckpt-0.index", "model.ckpt-0.data-00000-of-00001"])
def test_info_describes_a_google_tf_checkpoint(capsys, tmp_path, given):
    """`albertlm convert` takes google's checkpoints (a directory, the prefix, one of its files); `albertlm info` on
    the same paths said "not a model directory (no config.json) nor a training run with checkpoints"."""
    shown = info_json(capsys, FIXTURE / given)
    assert shown["format"] == "tf" and shown["model_class"] == "AlbertForPreTraining"
    assert shown["config"]["num_groups"] == 2 and "albert_config.json" in shown["files"]
    assert main(["convert", str(FIXTURE), str(tmp_path / "ours")]) == 0   # the same weights, once imported
    capsys.readouterr()
    ours = info_json(capsys, tmp_path / "ours")
    assert shown["stored_parameters"] == ours["stored_parameters"] > 0
    assert shown["parameters"] == ours["parameters"]


def test_info_on_a_tf_hub_module_and_a_classifier_checkpoint(capsys, tmp_path):
    """A TF-Hub module keeps its checkpoint under variables/; a run_classifier.py checkpoint imports as a sequence
    classifier with its number of labels (from the variables' shapes alone)."""
    from test_tf_import import repack

    hub = tmp_path / "hub"
    (hub / "variables").mkdir(parents=True)
    shutil.copyfile(FIXTURE / "albert_config.json", hub / "albert_config.json")
    shutil.copyfile(FIXTURE / "model.ckpt-0.index", hub / "variables" / "variables.index")
    shutil.copyfile(FIXTURE / "model.ckpt-0.data-00000-of-00001", hub / "variables" / "variables.data-00000-of-00001")
    assert info_json(capsys, hub)["model_class"] == "AlbertForPreTraining"

    renames = {b"cls/seq_relationship/output_weights": b"output_weights",
               b"cls/seq_relationship/output_bias": b"output_bias"}
    prefix = repack(tmp_path / "clf", lambda k: renames.get(k, b"dropped/" + k if k.startswith(b"cls/") else k))
    shutil.copyfile(FIXTURE / "albert_config.json", prefix.parent / "albert_config.json")
    shown = info_json(capsys, prefix.parent)
    assert shown["model_class"] == "AlbertForSequenceClassification" and shown["config"]["num_labels"] == 2


def test_info_counts_the_weights_of_sharded_and_pickled_transformers_directories(capsys, tmp_path):
    """The stored count read model.safetensors' header only: a sharded directory (transformers' default for large
    models) or a pytorch_model.bin showed "unknown" / null."""
    theirs = hf_model("AlbertForSequenceClassification")
    theirs.save_pretrained(tmp_path / "one")
    theirs.save_pretrained(tmp_path / "shards", max_shard_size="5KB")
    assert len(list((tmp_path / "shards").glob("model-*.safetensors"))) > 1
    (tmp_path / "bin").mkdir()
    shutil.copyfile(tmp_path / "one" / "config.json", tmp_path / "bin" / "config.json")
    torch.save(theirs.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    capsys.readouterr()
    expected = sum(p.numel() for p in theirs.parameters())
    for name in ("one", "shards", "bin"):
        shown = info_json(capsys, tmp_path / name)
        assert shown["stored_parameters"] == expected, name
        assert shown["model_class"] == "AlbertForSequenceClassification"


# ------------------------------------------------------------------------------------------------- dtypes
def test_a_bf16_model_with_e_equal_h_exports_in_one_dtype(tmp_path):
    """transformers always projects E -> H; for a model without the projection the identity was written in float32
    beside the bf16 weights: a file of mixed dtypes, which transformers' dtype="auto" reads by its first tensor."""
    from safetensors import safe_open

    from albertlm.interop.hf import export_hf

    torch.manual_seed(0)                           # the same weights and ids whatever ran before in this process
    model = heads.AlbertForSequenceClassification(tiny(embedding_size=16)).to(torch.bfloat16)
    export_hf(model, tmp_path / "hf")
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"BF16"}
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    ids = torch.randint(5, 60, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=ids).logits, model.float().eval()(ids).logits, atol=1e-5, rtol=0)
