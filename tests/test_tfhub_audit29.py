"""TF-Hub audit 29: an old TF-Hub module (google/albert_*/1-3, exported before export_to_tfhub.py added its "sop"
signature in July 2020) holds run_pretraining.py's masked-LM head, no SOP head, and a trained pooler: the
pooled_output google's run_classifier.py fine-tunes on.

- fd24d28 made such a module an AlbertForMaskedLM (an AlbertForPreTraining had come back with a random SOP head that
  `convert` wrote as trained): AlbertForMaskedLM has no pooler, so the trained pooler was dropped, and a classifier
  fine-tuned from the converted model started from a random one. It is now an AlbertForPreTraining with the
  checkpoint's pooler and masked-LM head, its SOP head in `report.missing`, and `convert` writes it without the SOP
  head (every trained weight, no random one), in either direction: albertlm -> transformers -> albertlm. Loading
  the result as AlbertForPreTraining warns that the SOP head is fresh (ours, and transformers'); a classifier
  fine-tuned from it starts from the trained pooler, with no word of the SOP head; fill-mask runs the trained head.
- `albertlm info` counted the weights in the file that the class does not read as its own: "with
  AlbertForQuestionAnswering's heads and no pooler: N", N holding google's pooler (SQuAD checkpoints keep theirs).
  It says "the pooler's N values unused", and for the module above "its SOP head not in the file".
- Checks that held: convert still refuses a TF checkpoint or directory lacking part of the SOP head (only a missing
  SOP head as a whole is this case).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.interop.tf import import_tf_checkpoint
from albertlm.model.io import FRESH_WEIGHTS, stored_shapes
from conftest import assert_one_error
from test_interop_audit29 import hub_module
from test_tfonnx_audit20 import INPUTS, fixture_tensors, google_reference, write_checkpoint

SOP = ["sop_head.weight", "sop_head.bias"]
WORDS = [f"w{i}" for i in range(99 - 5)]   # the fixture's V = 99


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _google_inputs() -> tuple[torch.Tensor, ...]:
    ref = google_reference()
    return tuple(torch.from_numpy(ref[k]).long() for k in INPUTS)


def _googles_pooled_output() -> torch.Tensor:
    return torch.from_numpy(google_reference()["pooled_output"])


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Path:
    """A TF-Hub module without the SOP head (no training state, as google's exports), a WordPiece vocab.txt beside
    it for fill-mask and fine-tuning."""
    tensors = {k: v for k, v in fixture_tensors().items() if "seq_relationship" not in k and "adam_" not in k}
    root = hub_module(tmp_path_factory.mktemp("tfhub") / "hub", tensors)
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return root


@pytest.fixture(scope="module")
def converted(hub) -> Path:
    assert main(["convert", str(hub), str(hub.parent / "ours")]) == 0
    return hub.parent / "ours"


def test_the_module_imports_as_pretraining_with_its_trained_pooler(hub):
    model, report = import_tf_checkpoint(hub)
    assert type(model).__name__ == "AlbertForPreTraining" and report.missing == SOP and not report.unused
    with torch.no_grad():
        pooled = model.albert(*_google_inputs()).pooler_output
    torch.testing.assert_close(pooled, _googles_pooled_output(), atol=1e-5, rtol=0)   # google's pooled_output


def test_convert_writes_every_trained_weight_and_no_sop_head(hub, converted, capsys):
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import read_metadata

    # (the module fixture's convert printed before this test's capture; converting again shows its summary)
    assert main(["convert", str(hub), str(hub.parent / "again")]) == 0
    out = capsys.readouterr().out
    assert "model: AlbertForPreTraining," in out and "no SOP head in the source (sop_head.weight, sop_head.bias): " \
        "none written" in out and "left initialised" not in out
    model, _ = import_tf_checkpoint(hub)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in SOP}
    assert stored_shapes(converted) == expected   # every trained weight, pooler included; no SOP head
    assert read_metadata(converted / "model.safetensors")["albertlm_class"] == "AlbertForPreTraining"
    from safetensors.torch import load_file

    written = load_file(converted / "model.safetensors")
    for key, value in model.state_dict().items():
        if key not in SOP:
            torch.testing.assert_close(written[key], value, atol=0, rtol=0)
    assert isinstance(AlbertForPreTraining.from_pretrained(converted), AlbertForPreTraining)


def test_loading_as_pretraining_warns_of_the_sop_head_alone(converted, caplog):
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.heads import AlbertForMaskedLM, AlbertForSequenceClassification

    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        AlbertForPreTraining.from_pretrained(converted)
    fresh = [r for r in caplog.records if getattr(r, FRESH_WEIGHTS, None)]
    assert len(fresh) == 1 and list(getattr(fresh[0], FRESH_WEIGHTS)) == SOP, caplog.text
    assert "AlbertForPreTraining" in fresh[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        classifier = AlbertForSequenceClassification.from_pretrained(converted)
        AlbertForMaskedLM.from_pretrained(converted)
    names = [n for r in caplog.records for n in getattr(r, FRESH_WEIGHTS, ())]
    assert names == ["classifier.weight", "classifier.bias"], caplog.text   # not the pooler, not the SOP head
    assert not any("sop" in r.getMessage().lower() for r in caplog.records), caplog.text
    with torch.no_grad():
        pooled = classifier.albert(*_google_inputs()).pooler_output
    torch.testing.assert_close(pooled, _googles_pooled_output(), atol=1e-5, rtol=0)


def test_finetune_and_fill_mask_use_the_trained_pooler_and_masked_lm_head(converted, tmp_path, capsys, caplog):
    data = tmp_path / "SST-2"
    data.mkdir()
    rows = "sentence\tlabel\n" + "".join(f"{WORDS[i]} {WORDS[i + 1]}\t{i % 2}\n" for i in range(8))
    (data / "train.tsv").write_text(rows)
    (data / "dev.tsv").write_text(rows)
    capsys.readouterr()
    with caplog.at_level(logging.WARNING):
        assert main(["finetune", "glue", "--task", "sst2", "--data-dir", str(data), "--model", str(converted),
                     "--out", str(tmp_path / "run"), "--batch-size", "4", "--max-seq-length", "16", "--max-steps",
                     "1", "--train.progress=false", "--train.tensorboard=false"]) == 0
    said = capsys.readouterr().err + caplog.text
    assert "classifier.weight" in said and "pooler" not in said and "sop" not in said.lower(), said
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert main(["fill-mask", str(converted), f"{WORDS[3]} [MASK] {WORDS[5]}", "--top-k", "2"]) == 0
    captured = capsys.readouterr()
    assert not caplog.records and "warning" not in captured.err and WORDS[3] in captured.out, (captured, caplog.text)
    from albertlm.model.heads import AlbertForMaskedLM

    ref = google_reference()
    with torch.no_grad():
        logits = AlbertForMaskedLM.from_pretrained(converted)(*_google_inputs()).logits
    picked = logits[torch.arange(3)[:, None], torch.from_numpy(ref["masked_lm_positions"]).long()].flatten(0, 1)
    torch.testing.assert_close(torch.log_softmax(picked, -1), torch.from_numpy(ref["mlm_log_probs"]), atol=1e-5, rtol=0)


def test_transformers_reads_the_export_with_the_trained_pooler(converted, tmp_path, capsys):
    """`convert --to hf`: transformers' AlbertForPreTraining says its SOP head is newly initialised, and nothing else;
    its pooler and AlbertForSequenceClassification's are google's. Back to albertlm: the same weights, no SOP head."""
    transformers = pytest.importorskip("transformers")
    hf = tmp_path / "hf"
    assert main(["convert", str(converted), str(hf), "--to", "hf"]) == 0
    assert "no SOP head in the source" in capsys.readouterr().out
    ids, mask, types = _google_inputs()
    pretraining, loading = transformers.AlbertForPreTraining.from_pretrained(hf, local_files_only=True,
                                                                             output_loading_info=True)
    # a set in transformers 5, a list in 4.x (pyproject allows >= 4.40)
    assert set(loading["missing_keys"]) == {"sop_classifier.classifier.weight", "sop_classifier.classifier.bias"}
    assert not loading["unexpected_keys"] and not loading["mismatched_keys"]
    classifier = transformers.AlbertForSequenceClassification.from_pretrained(hf, local_files_only=True)
    for model in (pretraining, classifier):
        with torch.no_grad():
            pooled = model.eval().albert(input_ids=ids, attention_mask=mask, token_type_ids=types).pooler_output
        torch.testing.assert_close(pooled, _googles_pooled_output(), atol=1e-5, rtol=0)
    assert main(["convert", str(hf), str(tmp_path / "back")]) == 0   # was refused: "its weights lack sop_head..."
    assert "no SOP head in the source" in capsys.readouterr().out
    assert stored_shapes(tmp_path / "back") == stored_shapes(converted)


def test_info_names_pretraining_and_says_the_sop_head_is_not_in_the_file(hub, converted, capsys):
    for source in (hub, converted):
        capsys.readouterr()
        assert main(["info", str(source)]) == 0
        out = capsys.readouterr().out
        assert "AlbertForPreTraining)" in out and "its SOP head not in the file" in out, out
        assert main(["info", str(source), "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["model_class"] == "AlbertForPreTraining" and shown["not_in_file"] == ["SOP head"]
        assert shown["unused_parameters"] == 0
    capsys.readouterr()
    assert main(["info", str(Path(__file__).parent / "fixtures" / "tf_albert_tiny")]) == 0
    assert "with AlbertForPreTraining's heads: " in capsys.readouterr().out   # a full checkpoint: as before


def test_info_says_the_pooler_a_qa_class_leaves_unused(tmp_path, capsys):
    """google's run_squad_v1.py checkpoint holds the pooler its AlbertForQuestionAnswering does not read: it was
    counted as the class's ("with AlbertForQuestionAnswering's heads and no pooler: 17,916")."""
    rng = np.random.default_rng(0)
    backbone = {k: v for k, v in fixture_tensors().items() if k.startswith("bert/") and "adam_" not in k}
    head = {"cls/squad/output_weights": rng.standard_normal((2, 32)).astype(np.float32),
            "cls/squad/output_bias": np.zeros(2, np.float32)}
    write_checkpoint(tmp_path / "squad", {**backbone, **head})
    pooler = 32 * 32 + 32
    capsys.readouterr()
    assert main(["info", str(tmp_path / "squad"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["unused_parameters"] == pooler and shown["not_in_file"] == []
    assert main(["info", str(tmp_path / "squad")]) == 0
    out = capsys.readouterr().out
    assert f"AlbertForQuestionAnswering's heads: {shown['stored_parameters']:,} (the pooler's {pooler:,} values " \
           "unused: AlbertForQuestionAnswering has no pooler)" in out and "and no pooler" not in out, out
    assert main(["convert", str(tmp_path / "squad"), str(tmp_path / "ours")]) == 0
    capsys.readouterr()
    assert main(["info", str(tmp_path / "ours"), "--json"]) == 0   # what convert writes: the values the class reads
    assert json.loads(capsys.readouterr().out)["stored_parameters"] == shown["stored_parameters"] - pooler
    assert main(["info", str(tmp_path / "ours")]) == 0
    assert "AlbertForQuestionAnswering's heads and no pooler: " in capsys.readouterr().out


# -- checks that held --------------------------------------------------------------------------------------------------
def test_part_of_a_sop_head_is_still_refused(tmp_path, capsys, converted):
    """Only the SOP head as a whole may be missing: half of it is a half-written copy (TF or a directory)."""
    full = {k: v for k, v in fixture_tensors().items() if "adam_" not in k}
    prefix = write_checkpoint(tmp_path / "tf", {k: v for k, v in full.items()
                                                if k != "cls/seq_relationship/output_bias"})
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), "lacks sop_head.bias",
                     "AlbertForPreTraining")
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(converted)
    model.sop_head.bias = None   # a SOP weight without its bias
    model.save_pretrained(tmp_path / "half")
    assert_one_error(capsys, main(["convert", str(tmp_path / "half"), str(tmp_path / "out2"), "--to", "hf"]),
                     "lack sop_head.bias")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()
