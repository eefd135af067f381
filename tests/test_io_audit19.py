"""The saved-model / transformers-interop audit of the nineteenth session, as a user moving checkpoints between
albertlm and transformers: `convert` read config.json without a byte-order mark and as UTF-8 only (a BOM was refused
that every other command reads; bytes that are not UTF-8 were a UnicodeDecodeError traceback); a transformers
classifier whose id2label does not fit its classifier's rows converted with a random classifier (exit 0), and a
transformers AlbertForPreTraining with a 3-way SOP head with a random SOP head; an earlier model's pytorch_model.bin
or weight shards in DST stayed beside the new model.safetensors (even with --overwrite: two models in one directory);
transformers 4's pruned_heads is refused by name (was a shape error naming no cause); `albertlm info` counted a
pickle's tied MLM decoder twice and printed a config's multi-label warning twice; a bf16 checkpoint converted to
float32 (twice the size) both ways."""
from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error

transformers = pytest.importorskip("transformers")


def hf_dir(path, name: str = "AlbertForSequenceClassification", **changes):
    """A random tiny transformers `name` saved with save_pretrained into `path` (num_labels 3)."""
    torch.manual_seed(0)
    config = transformers.AlbertConfig(**{**dict(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                                 num_attention_heads=2, intermediate_size=24,
                                                 max_position_embeddings=32, num_labels=3), **changes})
    model = getattr(transformers, name)(config).eval()
    model.save_pretrained(path)
    return model


def edit_config(path, **changes) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **changes}))


# ------------------------------------------------------------------------------------- config.json's encoding
def test_convert_reads_a_config_with_a_byte_order_mark_and_refuses_non_utf8_in_one_line(capsys, tmp_path):
    """Notepad's BOM: `info` and every loader read it, `convert` said "cannot read ...: Unexpected UTF-8 BOM";
    random bytes in config.json were a UnicodeDecodeError traceback."""
    hf_dir(tmp_path / "bom")
    text = (tmp_path / "bom" / "config.json").read_text()
    (tmp_path / "bom" / "config.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert main(["convert", str(tmp_path / "bom"), str(tmp_path / "out")]) == 0
    assert "(hf) ->" in capsys.readouterr().out
    shutil.copytree(tmp_path / "bom", tmp_path / "bytes")
    capsys.readouterr()
    (tmp_path / "bytes" / "config.json").write_bytes(b"\xde\xad\xbe\xef" * 20)
    code = main(["convert", str(tmp_path / "bytes"), str(tmp_path / "out2")])
    assert_one_error(capsys, code, "config.json", "not a valid JSON file")
    assert not (tmp_path / "out2").exists()


# ------------------------------------------------------------------------------- heads that do not fit
def test_a_classifier_whose_id2label_does_not_fit_its_weights_is_refused(capsys, tmp_path):
    """id2label names 2 classes, the classifier has 3 rows: convert wrote an albertlm classifier with a freshly
    initialised (random) 2-row head and exit 0; transformers refuses such a directory (size mismatch)."""
    hf_dir(tmp_path / "clf")
    edit_config(tmp_path / "clf", id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1})
    capsys.readouterr()   # transformers' own progress lines
    code = main(["convert", str(tmp_path / "clf"), str(tmp_path / "out")])
    assert_one_error(capsys, code, "classifier.weight has shape (3, 16)", "(2, 16)", "num_labels / id2label")
    assert not (tmp_path / "out").exists()
    from albertlm.interop.hf import import_hf
    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.model.registry import load_saved_model

    for load in (import_hf, load_saved_model):
        with pytest.raises(UserError, match="does not fit the weights"):
            load(tmp_path / "clf")
    # a class chosen by the caller, or other labels asked for, still start a fresh head (fine-tuning)
    assert AlbertForSequenceClassification.from_pretrained(tmp_path / "clf").config.num_labels == 2
    assert load_saved_model(tmp_path / "clf", num_labels=5).config.num_labels == 5


def test_a_three_way_sop_head_is_refused_not_made_random(capsys, tmp_path):
    """transformers sizes AlbertForPreTraining's SOP head by num_labels; ours is 2 wide: the 3-way head was dropped
    for a random one (a note in the summary, exit 0)."""
    hf_dir(tmp_path / "pre", "AlbertForPreTraining")
    capsys.readouterr()
    code = main(["convert", str(tmp_path / "pre"), str(tmp_path / "out")])
    assert_one_error(capsys, code, "sop_head.weight has shape (3, 16)", "always 2 wide")


# ------------------------------------------------------------------------------- an earlier model in DST
def test_an_earlier_models_pickle_and_shards_in_dst_are_a_model_and_overwrite_removes_them(capsys, tmp_path):
    """DST holding transformers shards (no config.json) took the new model.safetensors beside them, and with
    --overwrite a pytorch_model.bin and shards outlived the conversion: two models in one directory (loaders that
    glob *.safetensors or prefer the pickle read the old one). The user's own files stay."""
    hf_dir(tmp_path / "src", "AlbertForMaskedLM")
    old = hf_dir(tmp_path / "old")
    old.save_pretrained(tmp_path / "dst", max_shard_size="5KB")
    (tmp_path / "dst" / "config.json").unlink()
    shards = sorted(p.name for p in (tmp_path / "dst").iterdir())
    assert len(shards) > 2 and "model.safetensors.index.json" in shards
    torch.save(old.state_dict(), tmp_path / "dst" / "pytorch_model.bin")
    (tmp_path / "dst" / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    code = main(["convert", str(tmp_path / "src"), str(tmp_path / "dst")])
    assert_one_error(capsys, code, "already holds", "model.safetensors.index.json", "pytorch_model.bin", "--overwrite")
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == sorted([*shards, "pytorch_model.bin", "notes.txt"])
    assert main(["convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["config.json", "model.safetensors", "notes.txt"]


# ------------------------------------------------------------------------------- config fields we cannot honour
def test_pruned_heads_are_refused_by_name(capsys, tmp_path):
    """transformers 4's prune_heads leaves fewer heads in the named layers; the load failed on a tensor shape."""
    hf_dir(tmp_path / "pruned")
    edit_config(tmp_path / "pruned", pruned_heads={"0": [1]})
    capsys.readouterr()
    for command in (["info"], ["convert"]):
        code = main([*command, str(tmp_path / "pruned"), *([str(tmp_path / "out")] if command == ["convert"] else [])])
        assert_one_error(capsys, code, "pruned_heads", "not supported")


# ------------------------------------------------------------------------------- albertlm info
def test_info_counts_a_pickles_tied_decoder_once_and_warns_once(capsys, caplog, tmp_path):
    """A pytorch_model.bin of AlbertForMaskedLM holds the decoder tied to the word embeddings (one storage, two
    names): info counted V*E + V more values than the model has. A multi-label config's warning came twice."""
    model = hf_dir(tmp_path / "one", "AlbertForMaskedLM", problem_type="multi_label_classification")
    (tmp_path / "bin").mkdir()
    shutil.copyfile(tmp_path / "one" / "config.json", tmp_path / "bin" / "config.json")
    state = model.state_dict()
    assert "predictions.decoder.weight" in state
    torch.save(state, tmp_path / "bin" / "pytorch_model.bin")
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        assert main(["info", "--json", str(tmp_path / "bin")]) == 0
    assert json.loads(capsys.readouterr().out)["stored_parameters"] == sum(p.numel() for p in model.parameters())
    assert sum("multi-label classifier" in r.getMessage() for r in caplog.records) == 1, caplog.text


# ------------------------------------------------------------------------------- dtypes
def test_a_bf16_checkpoint_converts_in_bf16_both_ways(capsys, tmp_path):
    """transformers saves a bf16 model in bf16; convert loaded it as float32 and wrote float32 both ways (twice the
    size, and transformers' dtype="auto" then loaded float32)."""
    from safetensors import safe_open

    model = hf_dir(tmp_path / "fp32", "AlbertForMaskedLM").to(torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    assert main(["convert", str(tmp_path / "bf16"), str(tmp_path / "ours")]) == 0
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"), "--to", "hf"]) == 0
    out = capsys.readouterr().out
    assert "kept in the source's dtype (bfloat16)" in out and "all weights mapped" in out, out
    for name in ("ours", "back"):
        with safe_open(str(tmp_path / name / "model.safetensors"), framework="pt") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}, name
    back = transformers.AlbertForMaskedLM.from_pretrained(tmp_path / "back", dtype=torch.bfloat16).eval()
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        assert torch.equal(back(ids).logits, model(ids).logits)
