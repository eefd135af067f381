"""Interop audit 29 (the google-research TF checkpoint import, and the loader's note on a head a directory lacks).

- From Python, a transformers directory whose weights lack the head of the class it is loaded as (a bare
  AlbertModel's `save_pretrained` imported as a classifier or masked LM) warned "freshly initialised weights (not in
  the checkpoint): classifier.weight, ..." naming neither the folder nor the class; the note now names both, and
  carries the names in a record attribute (`model.io.FRESH_WEIGHTS`) that convert and `load_backbone` read rather
  than the wording.
- A TF-Hub module exported before google's export_to_tfhub.py added its "sop" signature (July 2020: google/albert_*
  /1-3) has run_pretraining.py's masked-LM head and no cls/seq_relationship: it imported as an AlbertForPreTraining
  whose SOP head was random, and `convert` wrote that head as trained (exit 0, a summary line the only trace). It is
  now an AlbertForPreTraining whose SOP head is reported missing and not written (tests/test_tfhub_audit29.py: an
  AlbertForMaskedLM here first dropped the trained pooler); and `convert` refuses any TF checkpoint lacking weights
  of the class its heads make it (a half-written head: a SOP head without the masked-LM one, a classifier without
  its bias, part of the SQuAD v2.0 head), as it refuses such a directory.
- A checkpoint's data file without its `.index` (given as the prefix or its folder) was "no such file or directory"
  with a hint to download a Hub model, or "not a model"; it is named.
- Checks that held: a run_classifier.py checkpoint fine-tuned from a TF-Hub module (`module/bert/...` beside
  top-level `output_weights`, with Adam slots) gives google's logits (pooled output times output_weights, not
  transposed); google's LayerNorm epsilon (1e-12) and tanh GELU are what the import builds.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.interop.tf import import_tf_checkpoint
from conftest import assert_one_error
from test_tfonnx_audit20 import INPUTS, fixture_tensors, google_reference, squad_v2_heads, write_checkpoint

transformers = pytest.importorskip("transformers")

from test_hf_parity import hf_config, hf_model  # noqa: E402


# -- the loader's note on a head the directory lacks ------------------------------------------------------------------
@pytest.fixture(scope="module")
def bare_hf(tmp_path_factory):
    """transformers' bare AlbertModel (with its pooler), saved with save_pretrained."""
    path = tmp_path_factory.mktemp("bare") / "albert model"
    hf_model("AlbertModel", hf_config()).save_pretrained(path)
    return path


@pytest.mark.parametrize("cls, head", [("AlbertForSequenceClassification", "classifier.weight"),
                                       ("AlbertForMaskedLM", "mlm_head.dense.weight")])
def test_a_head_the_directory_lacks_is_warned_naming_the_folder_and_the_class(bare_hf, caplog, cls, head):
    from albertlm.interop.hf import import_hf
    from albertlm.model import heads, io

    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        import_hf(bare_hf, getattr(heads, cls))
    notes = [r for r in caplog.records if "freshly initialised" in r.getMessage()]
    assert len(notes) == 1, caplog.text
    message = notes[0].getMessage()
    assert message.startswith(f"{bare_hf}: freshly initialised weights of {cls}, not in the checkpoint"), message
    assert head in message and head in getattr(notes[0], io.FRESH_WEIGHTS)   # what convert reads


# -- a TF-Hub module without the SOP head -------------------------------------------------------------------------------
def hub_module(root, tensors):
    """A TF-Hub module's layout: `variables/variables.*` (every variable under `module/`), albert_config.json in the
    module's root (where `find_config` looks for one)."""
    prefix = write_checkpoint(root / "variables", {"module/" + k: v for k, v in tensors.items()})
    for path in list(prefix.parent.iterdir()):
        if path.name.startswith(prefix.name):
            path.rename(path.with_name(path.name.replace(prefix.name, "variables")))
    (root / "variables" / "albert_config.json").rename(root / "albert_config.json")
    return root


def test_a_tf_hub_module_without_the_sop_head_gives_googles_masked_lm_outputs(tmp_path, capsys, one_thread):
    """It was an AlbertForPreTraining with a random SOP head, which convert wrote as trained (exit 0)."""
    tensors = {k: v for k, v in fixture_tensors().items() if "seq_relationship" not in k and "adam_" not in k}
    hub = hub_module(tmp_path / "hub", tensors)
    model, report = import_tf_checkpoint(hub)
    assert type(model).__name__ == "AlbertForPreTraining" and report.missing == ["sop_head.weight", "sop_head.bias"]
    assert not report.unused   # the pooler is read (tests/test_tfhub_audit29.py)
    assert any("without its SOP head" in line for line in report.lines())
    ref = google_reference()
    with torch.no_grad():
        logits = model(*(torch.from_numpy(ref[k]).long() for k in INPUTS)).prediction_logits
    picked = logits[torch.arange(3)[:, None], torch.from_numpy(ref["masked_lm_positions"]).long()].flatten(0, 1)
    torch.testing.assert_close(torch.log_softmax(picked, -1), torch.from_numpy(ref["mlm_log_probs"]), atol=1e-5, rtol=0)
    capsys.readouterr()
    assert main(["convert", str(hub), str(tmp_path / "out")]) == 0
    assert "model: AlbertForPreTraining," in capsys.readouterr().out
    assert main(["info", str(hub)]) == 0
    assert "(tf format, AlbertForPreTraining)" in capsys.readouterr().out


def _backbone() -> dict[str, np.ndarray]:
    return {k: v for k, v in fixture_tensors().items() if k.startswith("bert/") and "adam_" not in k}


@pytest.mark.parametrize("case, lacks, cls", [
    ("sop_without_mlm", "mlm_head.dense.weight", "AlbertForPreTraining"),
    ("mlm_without_output_bias", "mlm_head.bias", "AlbertForPreTraining"),
    ("classifier_without_bias", "classifier.bias", "AlbertForSequenceClassification"),
    ("squad_v2_without_answer_out", "answer_out.weight", "AlbertForSquadV2")])
def test_convert_refuses_a_tf_checkpoint_lacking_head_weights(tmp_path, capsys, case, lacks, cls):
    """Each converted with exit 0, the head weights it lacks written to DST as trained ones."""
    full = fixture_tensors()
    tensors = {"sop_without_mlm": {k: v for k, v in full.items() if not k.startswith("cls/predictions/")},
               "mlm_without_output_bias": {k: v for k, v in full.items() if k != "cls/predictions/output_bias"},
               "classifier_without_bias": {**_backbone(), "output_weights": full["cls/seq_relationship/output_weights"]},
               "squad_v2_without_answer_out": {**_backbone(), **{k: v for k, v in squad_v2_heads(32).items()
                                                                 if not k.startswith("answer_class/dense_1/")}}}[case]
    prefix = write_checkpoint(tmp_path / case, tensors)
    _, report = import_tf_checkpoint(prefix)   # from Python: left initialised and listed, as documented
    assert lacks in report.missing
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), f"lacks {lacks}", cls,
                     "makes up none")
    assert not (tmp_path / "out").exists()


def test_a_data_file_without_its_index_is_named(tmp_path, capsys):
    prefix = write_checkpoint(tmp_path / "ckpt", _backbone())
    prefix.with_name(prefix.name + ".index").unlink()
    for src in (prefix, prefix.parent):
        assert_one_error(capsys, main(["convert", str(src), str(tmp_path / "out")]),
                         f"{prefix}.index is missing", "model.ckpt-1.data-00000-of-00001 is there without it")


# -- checks that held --------------------------------------------------------------------------------------------------
def test_a_run_classifier_checkpoint_on_a_tf_hub_module_gives_googles_logits(tmp_path):
    """run_classifier.py with --albert_hub_module_handle: the backbone under module/bert/, the classifier top-level
    (num_labels, H), logits = pooled_output @ output_weights.T + output_bias (google's transpose_b=True)."""
    rng = np.random.default_rng(1)
    weights, bias = rng.standard_normal((3, 32)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    tensors = {**{"module/" + k: v for k, v in _backbone().items()}, "output_weights": weights, "output_bias": bias,
               "output_weights/adam_m": weights * 0, "output_weights/adam_v": weights * 0,
               "global_step": np.array(7, dtype=np.int64)}
    model, report = import_tf_checkpoint(write_checkpoint(tmp_path, tensors))
    assert type(model).__name__ == "AlbertForSequenceClassification" and model.config.num_labels == 3
    assert not report.missing and not report.unused and len(report.skipped) == 3
    assert model.config.layer_norm_eps == 1e-12 and model.config.activation == "gelu_new"   # google's
    ref = google_reference()
    with torch.no_grad():
        logits = model(*(torch.from_numpy(ref[k]).long() for k in INPUTS)).logits
    torch.testing.assert_close(logits, torch.from_numpy(ref["pooled_output"] @ weights.T + bias), atol=1e-5, rtol=0)
