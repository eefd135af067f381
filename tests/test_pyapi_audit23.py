"""The Python API as a notebook user moving checkpoints between transformers and albertlm meets it (audit, session
23), transformers the oracle. Each test failed before its fix unless it says otherwise.

`from_pretrained(hf_dir)` then `export_hf` wrote LABEL_i (the classifier's id2label, label2id and problem_type were
lost unless the caller passed labels=read_labels(dir)), and `save_pretrained` kept no labels either; loading drew
every initial weight from the caller's torch random stream before replacing them all (a load moved the caller's
stream); a misspelt problem_type went into config.json (transformers' classifier then computes no loss), as did a
single-label problem_type on one output (a config transformers refuses); an id2label given as a list was an
AttributeError traceback and one of another length than the head was dropped without a word; transformers'
keywords (id2label=, device_map=, local_files_only=, revision=, ...) were all "unknown ModelConfig field(s)";
export_hf into a path that is a file was FileExistsError's traceback; a google TF checkpoint directory given to
from_pretrained was only "not a model directory".
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from albertlm.config import ConfigError
from albertlm.errors import UserError
from albertlm.interop.hf import export_hf
from albertlm.model.albert import AlbertModel
from albertlm.model.heads import AlbertForSequenceClassification, AlbertForTokenClassification
from test_interop_audit22 import hf_classifier

transformers = pytest.importorskip("transformers")

NAMES = {"0": "negative", "1": "neutral", "2": "positive"}


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return ids, mask


def exported_config(directory) -> dict:
    return json.loads((directory / "config.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ labels travel
@pytest.mark.parametrize("cls", [AlbertForSequenceClassification, AlbertForTokenClassification])
def test_a_classifiers_labels_travel_through_python(tmp_path, cls, one_thread):
    """from_pretrained(hf) -> a training step -> save_pretrained -> from_pretrained -> export_hf: transformers reads
    the source's id2label, label2id and problem_type, and the same logits."""
    name = cls.__name__
    src = hf_classifier(tmp_path / "hf", id2label=NAMES, problem_type="single_label_classification")
    if name != "AlbertForSequenceClassification":   # the same directory saved as a token classifier
        getattr(transformers, name).from_pretrained(src).save_pretrained(tmp_path / "hf")
    ids, mask = batch()
    model = cls.from_pretrained(src)
    assert model.labels == {"id2label": NAMES, "problem_type": "single_label_classification"}
    model.train()
    labels = torch.tensor([0, 2, 1]) if name == "AlbertForSequenceClassification" else torch.randint(0, 3, ids.shape)
    model(ids, mask, labels=labels).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    model.eval().save_pretrained(tmp_path / "mine")
    export_hf(cls.from_pretrained(tmp_path / "mine"), tmp_path / "back")
    config = exported_config(tmp_path / "back")
    assert config["id2label"] == NAMES and config["label2id"] == {v: int(k) for k, v in NAMES.items()}
    assert config["problem_type"] == "single_label_classification"
    theirs = getattr(transformers, name).from_pretrained(tmp_path / "back").eval()
    assert theirs.config.id2label == {int(k): v for k, v in NAMES.items()}
    with torch.no_grad():
        torch.testing.assert_close(theirs(input_ids=ids, attention_mask=mask).logits, model(ids, mask).logits,
                                   atol=1e-5, rtol=0)


def test_a_regression_and_a_multi_label_problem_type_travel(tmp_path, one_thread):
    for problem, num_labels in (("regression", 1), ("multi_label_classification", 3)):
        src = hf_classifier(tmp_path / problem, num_labels=num_labels, problem_type=problem)
        export_hf(AlbertForSequenceClassification.from_pretrained(src), tmp_path / f"{problem}_back")
        assert exported_config(tmp_path / f"{problem}_back")["problem_type"] == problem


def test_a_head_sized_by_the_caller_does_not_take_the_checkpoints_names(tmp_path, one_thread):
    """A num_labels keyword is a head for the caller's task (fine-tuning passes one, and may reorder the rows):
    the checkpoint's names are not its names, and save_pretrained removes an earlier model's labels.json.
    id2label= (transformers' keyword) names the head and sizes it."""
    src = hf_classifier(tmp_path / "hf", id2label=NAMES)
    AlbertForSequenceClassification.from_pretrained(src).save_pretrained(tmp_path / "mine")
    assert (tmp_path / "mine" / "labels.json").is_file()
    sized = AlbertForSequenceClassification.from_pretrained(src, num_labels=3)
    assert sized.labels == {}
    sized.save_pretrained(tmp_path / "mine")   # over the first save
    assert not (tmp_path / "mine" / "labels.json").exists()
    export_hf(sized, tmp_path / "sized")
    assert exported_config(tmp_path / "sized")["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    named = AlbertForSequenceClassification.from_pretrained(src, id2label={0: "a", 1: "b"}, label2id={"a": 0, "b": 1})
    assert named.config.num_labels == 2 and named.labels == {"id2label": {"0": "a", "1": "b"}}
    export_hf(named, tmp_path / "named")
    assert exported_config(tmp_path / "named")["label2id"] == {"a": 0, "b": 1}
    with pytest.raises(ConfigError, match="num_labels=3 but id2label names 2 classes"):
        AlbertForSequenceClassification.from_pretrained(src, id2label={0: "a", 1: "b"}, num_labels=3)
    with pytest.raises(ConfigError, match="id2label and label2id name other classes"):
        AlbertForSequenceClassification.from_pretrained(src, id2label={0: "a", 1: "b"}, label2id={"b": 0, "a": 1})


# ------------------------------------------------------------------------------------------- random stream
def test_loading_leaves_the_callers_random_stream_and_a_seed_fixes_a_new_head(tmp_path, one_thread):
    """transformers' behaviour: a checkpoint holding every weight draws nothing; a new head is drawn from the
    caller's stream (so a seed still fixes it), and only it."""
    src = hf_classifier(tmp_path / "hf", num_labels=3)
    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(5)
    AlbertForSequenceClassification.from_pretrained(src)
    assert torch.equal(torch.rand(4), expected)
    AlbertModel.from_pretrained(src).save_pretrained(tmp_path / "base")   # no classifier: a new head
    heads = []
    for _ in range(2):
        torch.manual_seed(5)
        heads.append(AlbertForSequenceClassification.from_pretrained(tmp_path / "base", num_labels=3).classifier)
    assert torch.equal(heads[0].weight, heads[1].weight) and heads[0].weight.std() > 0
    assert not heads[0].bias.any()
    torch.manual_seed(5)
    drawn = torch.empty(3, 32).normal_(0, 0.02)   # the head's weight alone came from the stream
    assert torch.equal(heads[0].weight, drawn)


# ---------------------------------------------------------------------------------------- checked labels
@pytest.mark.parametrize(("labels", "phrase"), [
    ({"problem_type": "regresion"}, "problem_type is 'regresion': transformers knows regression"),
    ({"id2label": ["a", "b", "c"]}, "id2label is list"),
    ({"id2label": {"0": "a", "1": "b"}}, "id2label names 2 classes, the classifier has 3 outputs"),
    (["a", "b", "c"], "give {\"id2label\""),
])
def test_export_refuses_labels_transformers_cannot_use(tmp_path, tiny_config, labels, phrase):
    model = AlbertForSequenceClassification(tiny_config.replace(num_labels=3))
    with pytest.raises(UserError, match=phrase.replace("(", r"\(").replace("{", r"\{")):
        export_hf(model, tmp_path / "out", labels=labels)
    assert not (tmp_path / "out").exists()


def test_a_single_label_problem_type_on_one_output_is_refused(tmp_path, tiny_config):
    """transformers' config refuses it (ValueError at load), so the export could not be read back."""
    model = AlbertForSequenceClassification(tiny_config.replace(num_labels=1))
    with pytest.raises(UserError, match="single_label_classification with one output"):
        export_hf(model, tmp_path / "out", labels={"problem_type": "single_label_classification"})
    model.save_pretrained(tmp_path / "mine")
    (tmp_path / "mine" / "labels.json").write_text(json.dumps({"problem_type": "regresion"}))
    with pytest.raises(UserError, match="labels.json: problem_type is 'regresion'"):
        AlbertForSequenceClassification.from_pretrained(tmp_path / "mine")


# ---------------------------------------------------------------------------------- transformers' keywords
def test_transformers_loading_keywords(tmp_path, one_thread):
    src = hf_classifier(tmp_path / "hf", num_labels=3)
    model = AlbertForSequenceClassification.from_pretrained(src, device_map="cpu", local_files_only=True,
                                                            trust_remote_code=False, low_cpu_mem_usage=True,
                                                            ignore_mismatched_sizes=True)
    assert model.classifier.weight.device.type == "cpu" and not model.training
    for keywords, phrase in (({"device_map": "auto"}, "onto one device"),
                             ({"revision": "main"}, "downloads nothing"),
                             ({"config": None}, "reads the directory's config.json"),
                             ({"output_attentions": True}, "no attention probabilities"),
                             ({"problem_type": "regresion"}, "problem_type is 'regresion'")):
        with pytest.raises(UserError, match=phrase) as caught:
            AlbertForSequenceClassification.from_pretrained(src, **keywords)
        assert "\n" not in str(caught.value)


# ----------------------------------------------------------------------------------------- error messages
def test_paths_that_are_not_model_directories_say_what_they_are(tmp_path, tiny_config):
    with pytest.raises(UserError, match="google-research TF checkpoint: import it with .*import_tf_checkpoint"):
        AlbertModel.from_pretrained(Path(__file__).parent / "fixtures" / "tf_albert_tiny")
    AlbertModel(tiny_config).save_pretrained(tmp_path / "mine")
    with pytest.raises(UserError, match="a file: give the directory"):
        AlbertModel.from_pretrained(tmp_path / "mine" / "config.json")
    with pytest.raises(UserError, match="cannot write .*config.json"):   # was FileExistsError's traceback
        export_hf(AlbertModel(tiny_config), tmp_path / "mine" / "config.json")


def test_a_problem_type_keyword_keeps_the_checkpoints_names_and_labels_are_checked_before_saving(tmp_path, one_thread):
    src = hf_classifier(tmp_path / "hf", id2label=NAMES)
    model = AlbertForSequenceClassification.from_pretrained(src, problem_type="multi_label_classification")
    assert model.labels == {"id2label": NAMES, "problem_type": "multi_label_classification"}
    model.labels = {"id2label": {"0": "a", "1": "b"}}   # set by hand, for another head
    with pytest.raises(UserError, match="labels: id2label names 2 classes, the classifier has 3"):
        model.save_pretrained(tmp_path / "mine")
    assert not (tmp_path / "mine").exists()


def test_save_pretrained_answers_transformers_keywords_in_one_line(tmp_path, tiny_config):
    """max_shard_size= / push_to_hub= were TypeError tracebacks; safe_serialization=True is what it writes."""
    model = AlbertModel(tiny_config)
    model.save_pretrained(tmp_path / "mine", safe_serialization=True)
    assert (tmp_path / "mine" / "model.safetensors").is_file()
    for keywords in ({"max_shard_size": "5KB"}, {"push_to_hub": True}, {"safe_serialization": False}):
        with pytest.raises(ConfigError, match=f"save_pretrained\\({next(iter(keywords))}=...\\) is transformers'"):
            model.save_pretrained(tmp_path / "other", **keywords)
    assert not (tmp_path / "other").exists()
