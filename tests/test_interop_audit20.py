"""The transformers-interop audit of the twentieth session, as a user moving checkpoints between albertlm and
transformers directories of every kind: a directory re-saved by transformers 5 (always safetensors, here sharded by
max_shard_size) over a transformers 4 pickle keeps the old `pytorch_model.bin` beside the new shards; transformers
loads the shards, albertlm loaded the stale pickle (another model, silently). And albertlm's own `save_pretrained` /
`export_hf` into a directory holding an earlier model's pickle or shards left them beside the new model.safetensors:
two models in one directory, the older under a config.json that no longer describes it. `embed --input <(cmd)` (a
pipe) said "no such file"."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from albertlm.interop.hf import export_hf, import_hf
from albertlm.model import io

transformers = pytest.importorskip("transformers")

WORD = "albert.embeddings.word_embeddings.weight"


def hf_masked_lm(seed: int, dtype: torch.dtype = torch.float32):
    """A random tiny transformers AlbertForMaskedLM whose word embeddings (32 kB in fp16) outgrow a 20 kB shard."""
    torch.manual_seed(seed)
    config = transformers.AlbertConfig(vocab_size=1000, embedding_size=16, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=16)
    return transformers.AlbertForMaskedLM(config).eval().to(dtype)


def pickle_then_shards(path):
    """transformers 4's `save_pretrained(safe_serialization=False)` (a float32 pickle), then transformers 5's sharded
    re-save of another (fp16) model into the same directory: the models (old, new)."""
    old, new = hf_masked_lm(0), hf_masked_lm(1, torch.float16)
    old.save_pretrained(path)
    torch.save(old.state_dict(), path / io.PICKLE_WEIGHTS)
    (path / io.WEIGHTS).unlink()
    new.save_pretrained(path, max_shard_size="20kB")
    assert (path / "model.safetensors.index.json").is_file() and (path / io.PICKLE_WEIGHTS).is_file()
    return old, new


def test_new_shards_are_read_before_a_stale_pickle_as_transformers_reads_them(tmp_path):
    old, new = pickle_then_shards(tmp_path)
    theirs = transformers.AlbertForMaskedLM.from_pretrained(tmp_path)
    assert torch.equal(theirs.state_dict()[WORD], new.state_dict()[WORD])   # transformers: the new shards
    ours = import_hf(tmp_path).state_dict()["albert.embeddings.word.weight"]
    assert torch.equal(ours, new.state_dict()[WORD].float())
    assert not torch.equal(ours, old.state_dict()[WORD])
    # every reader of the directory agrees on which weights it holds
    assert io.weights_source(tmp_path).name == "model.safetensors.index.json"
    assert io.stored_float_dtype(tmp_path) == torch.float16
    keys = io.state_keys(tmp_path)   # the shards' (save_pretrained leaves the tied decoder out; the pickle has it)
    assert "predictions.decoder.weight" in old.state_dict() and "predictions.decoder.weight" not in keys
    assert sorted(keys) == sorted(io.read_state(tmp_path)) and len(io.stored_shapes(tmp_path)) == len(keys)


def weight_files(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith(("model", "pytorch_model")))


def test_a_save_replaces_an_earlier_models_pickle_and_shards(tmp_path):
    """albertlm's save_pretrained and export_hf into a directory holding an earlier model's pytorch_model.bin and
    shards: only the new model is left there, and transformers and albertlm load it."""
    pickle_then_shards(tmp_path)
    earlier = weight_files(tmp_path)
    assert io.PICKLE_WEIGHTS in earlier and "model-00001-of-00002.safetensors" in earlier
    (tmp_path / "notes.txt").write_text("mine")
    model = import_hf(tmp_path)
    model.save_pretrained(tmp_path)
    assert weight_files(tmp_path) == [io.WEIGHTS] and (tmp_path / "notes.txt").read_text() == "mine"
    assert torch.equal(type(model).from_pretrained(tmp_path).state_dict()["albert.embeddings.word.weight"],
                       model.state_dict()["albert.embeddings.word.weight"])

    again = tmp_path / "hf"
    pickle_then_shards(again)
    export_hf(model, again)
    assert weight_files(again) == [io.WEIGHTS]
    theirs = transformers.AlbertForMaskedLM.from_pretrained(again)
    assert torch.equal(theirs.state_dict()[WORD], model.state_dict()["albert.embeddings.word.weight"])



def test_shards_saved_by_transformers_beside_an_earlier_model_safetensors_are_named(tmp_path, caplog):
    """transformers' sharded save_pretrained into a directory albertlm exported keeps the earlier model.safetensors
    (its cleanup removes only stale shards), and transformers and albertlm both read that one: the load now says so,
    once, with what to remove; a Hub-style model.safetensors beside pytorch_model.bin (one model in two formats)
    is read without a word."""
    old, new = hf_masked_lm(0), hf_masked_lm(1)
    export_hf(import_hf_of(old, tmp_path / "src"), tmp_path / "hf")
    new.save_pretrained(tmp_path / "hf", max_shard_size="20kB")
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file() and (tmp_path / "hf" / io.WEIGHTS).is_file()
    theirs = transformers.AlbertForMaskedLM.from_pretrained(tmp_path / "hf").state_dict()[WORD]
    with caplog.at_level("WARNING", logger="albertlm.model"):
        ours = import_hf(tmp_path / "hf").state_dict()["albert.embeddings.word.weight"]
    assert torch.equal(ours, theirs) and torch.equal(ours, old.state_dict()[WORD])   # the same (stale) one
    said = [r.getMessage() for r in caplog.records if "two saves" in r.getMessage()]
    assert len(said) == 1 and "remove model.safetensors" in said[0], said
    caplog.clear()
    torch.save(old.state_dict(), tmp_path / "src" / io.PICKLE_WEIGHTS)
    with caplog.at_level("WARNING", logger="albertlm.model"):
        import_hf(tmp_path / "src")
    assert not [r for r in caplog.records if "two saves" in r.getMessage()]


def import_hf_of(model, path):
    """`model` (transformers) saved into `path` and loaded by albertlm."""
    model.save_pretrained(path)
    return import_hf(path)

# ------------------------------------------------------------------------------------ embed --input <(cmd)
@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="needs /dev/fd (bash's process substitution)")
def test_embed_reads_a_pipe_given_as_input(tmp_path, capsys):
    """bash's `albertlm embed M --input <(grep ... file) --out e.npy` names a pipe (/dev/fd/63): it was "--input
    /dev/fd/63: no such file"; now its lines are read once, as stdin's are, and a line that is not UTF-8 is named."""
    import numpy as np

    from albertlm.cli.main import main
    from conftest import assert_one_error, save_tiny_pretrained

    model = save_tiny_pretrained(tmp_path)
    (tmp_path / "in.txt").write_text("the film was good\nvery bad plot\n")
    assert main(["embed", str(model), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "file.npy")]) == 0

    opened: list[int] = []

    def pipe(data: bytes) -> str:   # written whole (it fits the pipe's buffer) and closed: no writer thread
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        opened.append(read)
        return f"/dev/fd/{read}"

    source = pipe(b"the film was good\nvery bad plot\n")
    assert main(["embed", str(model), "--input", source, "--out", str(tmp_path / "pipe.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "pipe.npy"), np.load(tmp_path / "file.npy"))
    capsys.readouterr()
    source = pipe(b"the film\nvery \xff bad\n")
    code = main(["embed", str(model), "--input", source, "--out", str(tmp_path / "bad.npy")])
    assert_one_error(capsys, code, f"--input {source} line 2: not UTF-8")
    assert not (tmp_path / "bad.npy").exists()
    for fd in opened:
        os.close(fd)
