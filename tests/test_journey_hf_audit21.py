"""Journey audit 21 (a practitioner with transformers ALBERT checkpoints): fine-tuning on from a transformers
classifier whose id2label names the task's classes in another order keeps each class's trained row (read by
index, the row of one class was trained, and its predictions written, as another's)."""
from __future__ import annotations

import pytest
import torch

from albertlm.config.task import FinetuneConfig
from albertlm.interop.hf import export_hf
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks.finetune import TaskSpec, load_model


def _hf_classifier(tmp_path, tiny_config, names: list[str]):
    """A random transformers AlbertForSequenceClassification directory whose id2label is `names`."""
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_config.replace(num_labels=len(names)))
    export_hf(model, tmp_path / "hf", labels={"id2label": {str(i): n for i, n in enumerate(names)},
                                              "problem_type": "single_label_classification"})
    return model, tmp_path / "hf"


def _spec(family: str, labels: list[str], **info) -> TaskSpec:
    return TaskSpec(family, AlbertForSequenceClassification, {"num_labels": len(labels)}, [], [], "accuracy",
                    info={"labels": labels, **info})


def test_classify_from_hf_classifier_keeps_each_named_class(tmp_path, tiny_config, one_thread):
    source, path = _hf_classifier(tmp_path, tiny_config, ["pos", "neg", "neu"])
    model = load_model(_spec("classify", ["neg", "neu", "pos"]), path, FinetuneConfig())
    for j, row in enumerate([1, 2, 0]):   # the task's neg, neu, pos are the source's rows 1, 2, 0
        assert torch.equal(model.classifier.weight[j], source.classifier.weight[row])
        assert torch.equal(model.classifier.bias[j], source.classifier.bias[row])


def test_glue_from_hf_classifier_keeps_each_named_class(tmp_path, tiny_config, one_thread):
    # run_glue.py's names (datasets' GLUE): SST-2's 0 is "negative"; this model keeps "positive" first
    source, path = _hf_classifier(tmp_path, tiny_config, ["positive", "negative"])
    model = load_model(_spec("glue", ["0", "1"], task="sst2"), path, FinetuneConfig())
    assert torch.equal(model.classifier.weight, source.classifier.weight[[1, 0]])


def test_classifier_in_the_task_order_or_unnamed_is_kept_as_it_is(tmp_path, tiny_config, one_thread):
    source, path = _hf_classifier(tmp_path, tiny_config, ["neg", "pos"])
    model = load_model(_spec("classify", ["neg", "pos"]), path, FinetuneConfig())
    assert torch.equal(model.classifier.weight, source.classifier.weight)
    model = load_model(_spec("classify", ["bad", "good"]), path, FinetuneConfig())   # other names: by index
    assert torch.equal(model.classifier.weight, source.classifier.weight)
