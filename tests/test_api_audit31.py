"""albertlm from a notebook (audit, session 31): `from_pretrained` / `save_pretrained` on the paths and folders a
Python user gives them. Each test failed before its fix unless it says otherwise.

A classifier saved by one of the sequence / token / multiple-choice classes and loaded as another took its
`classifier` without a word whenever the shapes matched (2 labels as 2 token labels, a regression's one row as a
choice scorer), where one of another shape was freshly initialised with a warning. `save_pretrained` wrote
model.safetensors, then config.json, then labels.json into the folder one by one: a failure or Ctrl-C between them
left the new weights under the earlier model's config (a same-shape model loaded without a word); a classifier
without labels saved over a fine-tuned model's best/ came back with that model's class names (from its task.json).
"~/models/x" was a folder named `~` in the working directory (saved there; "no such directory" when loading); a
training run directory was "not a model directory" without a word of its models; saving into a path that is a file
was a FileExistsError / NotADirectoryError traceback, no UserError.
"""
from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from albertlm.errors import UserError
from albertlm.model import io
from albertlm.model.albert import AlbertForPreTraining
from albertlm.model.heads import (AlbertForMultipleChoice, AlbertForSequenceClassification,
                                  AlbertForTokenClassification)


def _files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# ------------------------------------------------------------------------ a classifier of another class
@pytest.mark.parametrize("saved, loaded, num_labels", [
    (AlbertForSequenceClassification, AlbertForTokenClassification, 2),
    (AlbertForTokenClassification, AlbertForSequenceClassification, 2),
    (AlbertForSequenceClassification, AlbertForMultipleChoice, 1),
    (AlbertForMultipleChoice, AlbertForSequenceClassification, 1),
])
def test_a_classifier_of_another_class_is_freshly_initialised_and_said(tmp_path, tiny_config, one_thread, caplog,
                                                                        saved, loaded, num_labels):
    """Its classifier read the pooled [CLS] output, every token or each choice: taken silently where the shapes
    matched. Now freshly initialised, drawn as from a checkpoint without a head (the same seed, the same head), with
    one warning naming both classes; the backbone loads as before."""
    torch.manual_seed(0)
    cfg = tiny_config.replace(num_labels=num_labels)
    saved(cfg).save_pretrained(tmp_path / "clf")
    headless = tmp_path / "headless"   # the same checkpoint without its classifier
    AlbertForPreTraining(cfg).save_pretrained(headless)
    io.write_safetensors({k: v for k, v in io.read_state(tmp_path / "clf").items() if not k.startswith("classifier.")},
                         headless / io.WEIGHTS)
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        torch.manual_seed(5)
        model = loaded.from_pretrained(tmp_path / "clf")
    torch.manual_seed(5)
    fresh = loaded.from_pretrained(headless, num_labels=num_labels)
    stored = io.read_state(tmp_path / "clf")
    assert not torch.equal(model.classifier.weight, stored["classifier.weight"])
    assert torch.equal(model.classifier.weight, fresh.classifier.weight)
    assert torch.equal(model.albert.embeddings.word.weight, stored["albert.embeddings.word.weight"])
    said = [r for r in caplog.records if "classifier was trained as" in r.getMessage()]
    assert len(said) == 1 and saved.__name__ in said[0].getMessage() and loaded.__name__ in said[0].getMessage()
    assert "classifier.weight" in io.fresh_weights(said[0])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):   # its own class: the head it holds, no word
        again = saved.from_pretrained(tmp_path / "clf")
    assert torch.equal(again.classifier.weight, stored["classifier.weight"]) and not caplog.records


def test_a_transformers_classifier_of_another_class_is_freshly_initialised(tmp_path, one_thread, caplog):
    """The class a transformers directory holds is its config's `architectures`."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    transformers.AlbertForSequenceClassification(config).save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        model = AlbertForTokenClassification.from_pretrained(tmp_path)
    assert not torch.equal(model.classifier.weight, io.read_state(tmp_path)["classifier.weight"])
    assert any("trained as AlbertForSequenceClassification's" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------- save_pretrained's files
@pytest.mark.parametrize("step", ["sort_metadata", "placing config.json"])
def test_a_save_stopped_on_the_way_leaves_the_earlier_model_whole(tmp_path, tiny_config, one_thread, monkeypatch,
                                                                 step):
    """A Ctrl-C (or any error) after the new model.safetensors was written left it under the earlier config.json;
    now the files are written aside and moved in together, the earlier ones put back on the way out."""
    torch.manual_seed(0)
    earlier = AlbertForSequenceClassification(tiny_config)
    earlier.labels = {"id2label": {"0": "neg", "1": "pos"}}
    earlier.save_pretrained(tmp_path)
    before = _files(tmp_path)
    other = AlbertForSequenceClassification(tiny_config.replace(num_layers=2))

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    if step == "sort_metadata":
        monkeypatch.setattr(io, "sort_metadata", stop)
    else:
        replace = os.replace

        def stop_at_config(src, dst):
            if os.path.basename(src) == io.CONFIG and io.SAVE_TMP_PREFIX in str(src):
                stop()
            replace(src, dst)

        monkeypatch.setattr(io.os, "replace", stop_at_config)
    with pytest.raises(KeyboardInterrupt):
        other.save_pretrained(tmp_path)
    monkeypatch.undo()
    assert _files(tmp_path) == before
    loaded = AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.num_layers == tiny_config.num_layers and loaded.labels["id2label"]["1"] == "pos"


def test_a_classifier_without_labels_saved_over_a_fine_tuned_model_takes_none_of_its_names(tmp_path, tiny_config,
                                                                                          one_thread, caplog):
    """best/task.json (the earlier model's fine-tuning record, which `albertlm predict` reads) stays; the classes it
    names were given to the new model by every later `from_pretrained`. Now labels.json says it names none."""
    torch.manual_seed(0)
    AlbertForSequenceClassification(tiny_config).save_pretrained(tmp_path)
    (tmp_path / "task.json").write_text(json.dumps({"family": "classify", "labels": ["neg", "pos"]}))
    assert AlbertForSequenceClassification.from_pretrained(tmp_path).labels["id2label"] == {"0": "neg", "1": "pos"}
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        AlbertForSequenceClassification(tiny_config).save_pretrained(tmp_path)
    assert any("names no labels" in r.getMessage() and "task.json" in r.getMessage() for r in caplog.records)
    assert AlbertForSequenceClassification.from_pretrained(tmp_path).labels == {}
    assert io.read_labels(tmp_path) == {}
    named = AlbertForSequenceClassification(tiny_config)   # a model with names writes them, as before
    named.labels = {"id2label": {"0": "bad", "1": "good"}}
    named.save_pretrained(tmp_path)
    assert AlbertForSequenceClassification.from_pretrained(tmp_path).labels["id2label"] == {"0": "bad", "1": "good"}


def test_a_save_leaves_only_the_models_files(tmp_path, tiny_config, one_thread):
    """No temporary folder left beside them (passed before: a check of the new staging)."""
    AlbertForSequenceClassification(tiny_config).save_pretrained(tmp_path / "m")
    AlbertForSequenceClassification(tiny_config).save_pretrained(tmp_path / "m")
    assert sorted(_files(tmp_path / "m")) == [io.CONFIG, io.WEIGHTS]


def test_saving_into_a_file_is_a_user_error_that_is_an_os_error(tmp_path, tiny_config):
    (tmp_path / "file").write_text("x")
    model = AlbertForSequenceClassification(tiny_config)
    for target in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(io.WriteError) as failed:
            model.save_pretrained(target)
        assert isinstance(failed.value, UserError) and isinstance(failed.value, OSError)
        assert f"{tmp_path / 'file'} is a file, not a directory" in str(failed.value)


# --------------------------------------------------------------------------------------------- paths
def test_a_path_with_a_tilde_is_the_home_directory(tmp_path, tiny_config, one_thread, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_config)
    assert model.save_pretrained("~/models/clf") == tmp_path / "home" / "models" / "clf"
    assert not (tmp_path / "cwd" / "~").exists()
    for given in ("~/models/clf", io.Path("~/models/clf")):
        loaded = AlbertForSequenceClassification.from_pretrained(given)
        assert torch.equal(loaded.classifier.weight, model.classifier.weight)
        assert io.resolve_checkpoint(given) == tmp_path / "home" / "models" / "clf"


def test_a_training_run_directory_names_its_models(tmp_path, tiny_config, one_thread):
    """`albertlm predict runs/x` reads a run directory; from Python it was only "not a model directory"."""
    run = tmp_path / "run"
    model = AlbertForSequenceClassification(tiny_config)
    model.save_pretrained(run / "checkpoints" / "step_00000004")
    model.save_pretrained(run / "best")
    with pytest.raises(UserError) as failed:
        AlbertForSequenceClassification.from_pretrained(str(run))
    assert f"{run / 'best'} or {run / 'checkpoints' / 'step_00000004'}" in str(failed.value)
    assert "resolve_checkpoint" in str(failed.value)
    loaded = AlbertForSequenceClassification.from_pretrained(io.resolve_checkpoint(run, best=True))
    assert torch.equal(loaded.classifier.weight, model.classifier.weight)
