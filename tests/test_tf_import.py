"""google-research TF checkpoints: our reader against what TensorFlow itself wrote and read back
(tests/fixtures/tf_albert_tiny, made by tools/make_tf_fixture.py), the name map, and the path
TF -> albertlm -> transformers (transformers is the oracle for the forward pass)."""
from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.errors import UserError
from albertlm.interop import tf_checkpoint as tfc
from albertlm.interop.tf import import_tf_checkpoint, tf_key_map
from albertlm.interop.tf_checkpoint import CheckpointError, TFCheckpoint

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"
CHECKPOINTS = {"main": FIXTURE, "inner2": FIXTURE / "inner2", "dtypes": FIXTURE / "dtypes"}
TRAINING_STATE = ["bert/embeddings/word_embeddings/adam_m", "bert/embeddings/word_embeddings/adam_v",
                  "cls/predictions/output_bias/adam_m", "cls/predictions/output_bias/adam_v", "global_step"]


def expected(directory: Path) -> dict:
    return json.loads((directory / "expected.json").read_text())


def tf_bytes(value: np.ndarray, tf_dtype: str) -> bytes:
    """The bytes TF's own read-back had: bfloat16 (which we widen to float32) is the top 16 bits."""
    if tf_dtype == "bfloat16":
        return (value.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.ascontiguousarray(value).tobytes()


# --- the reader -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_reader_matches_tensorflow_bit_for_bit(name):
    ckpt, reference = TFCheckpoint(CHECKPOINTS[name]), expected(CHECKPOINTS[name])
    assert ckpt.names() == sorted(reference)
    for var, ref in reference.items():
        value = ckpt.read(var, verify=True)
        assert list(value.shape) == ref["shape"], var
        assert ckpt.entries[var].dtype_name == ref["dtype"], var
        if ref["dtype"] != "bfloat16":
            assert value.dtype.name == ref["dtype"], var
        assert hashlib.sha256(tf_bytes(value, ref["dtype"])).hexdigest() == ref["sha256"], var


def test_two_data_shards_and_header():
    ckpt = TFCheckpoint(CHECKPOINTS["inner2"])
    assert ckpt.num_shards == 2
    assert {e.shard_id for e in ckpt.entries.values()} == {0, 1}
    assert TFCheckpoint(FIXTURE).num_shards == 1


def test_prefix_resolution(tmp_path):
    prefix = FIXTURE / "model.ckpt-0"
    for path in (FIXTURE, prefix, Path(f"{prefix}.index")):
        assert tfc.resolve_prefix(path) == prefix
    with pytest.raises(CheckpointError, match="no TF checkpoint"):
        tfc.resolve_prefix(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="expected one"):
        tfc.resolve_prefix(tmp_path)
    for step in (0, 5):  # several checkpoints: the state file (stale absolute paths and all) picks one
        for f in FIXTURE.glob("model.ckpt-0.*"):
            shutil.copyfile(f, tmp_path / f.name.replace("ckpt-0", f"ckpt-{step}"))
    with pytest.raises(CheckpointError, match="expected one"):
        tfc.resolve_prefix(tmp_path)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/elsewhere/run/model.ckpt-5"\n')
    assert tfc.resolve_prefix(tmp_path) == tmp_path / "model.ckpt-5"


def copy_checkpoint(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.glob("model.ckpt-0.*"):
        shutil.copyfile(f, dst / f.name)
    return dst / "model.ckpt-0"


def test_corruption_is_detected(tmp_path):
    prefix = copy_checkpoint(FIXTURE, tmp_path)
    data = Path(f"{prefix}.data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    offset = TFCheckpoint(prefix).entries["bert/pooler/dense/bias"].offset
    raw[offset] ^= 0x40
    data.write_bytes(bytes(raw))
    TFCheckpoint(prefix).read("bert/pooler/dense/bias")  # unchecked read succeeds ...
    with pytest.raises(CheckpointError, match="checksum"):  # ... the CRC32C catches it
        TFCheckpoint(prefix).read("bert/pooler/dense/bias", verify=True)
    index = Path(f"{prefix}.index")
    raw = bytearray(index.read_bytes())
    raw[40] ^= 0x01
    index.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="block checksum"):
        TFCheckpoint(prefix)
    index.write_bytes(b"not a checkpoint" * 4)
    with pytest.raises(CheckpointError, match="magic"):
        TFCheckpoint(prefix)


def test_unknown_variable_and_missing_shard(tmp_path):
    prefix = copy_checkpoint(CHECKPOINTS["inner2"], tmp_path)
    ckpt = TFCheckpoint(prefix)
    with pytest.raises(CheckpointError, match="no variable"):
        ckpt.read("bert/nope")
    Path(f"{prefix}.data-00001-of-00002").unlink()
    name = next(n for n, e in ckpt.entries.items() if e.shard_id == 1)
    with pytest.raises(CheckpointError, match="missing"):
        ckpt.read(name)


def test_crc32c_and_protobuf_varints():
    assert tfc.crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert tfc.read_varint(bytes([0xAC, 0x02]), 0) == (300, 2)
    msg = bytes([0x08, 0x96, 0x01, 0x12, 0x02, 0x08, 0x05, 0x35]) + struct.pack("<I", 7)
    assert tfc.parse_message(msg) == {1: [150], 2: [bytes([0x08, 0x05])], 6: [7]}


def test_snappy_literals_and_overlapping_copies():
    # "abcd" literal, then a 1-byte-offset copy of 8 (overlapping), then a 2-byte-offset copy of 3
    stream = bytes([15, 3 << 2]) + b"abcd" + bytes([(1 << 0) | ((8 - 4) << 2), 4]) + bytes([2 | (2 << 2), 6, 0])
    assert tfc.snappy_decompress(stream) == b"abcdabcdabcdcda"
    with pytest.raises(CheckpointError):
        tfc.snappy_decompress(bytes([5, 1, 9]))  # copy before any output


# A table builder following leveldb's table_format.md, to re-pack what TF wrote in ways TF 2.21's bundle
# writer does not (several data blocks, Snappy-compressed blocks, renamed keys).
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def encode_block(items: list[tuple[bytes, bytes]], restart_interval: int = 3) -> bytes:
    out, restarts, last = bytearray(), [], b""
    for i, (key, value) in enumerate(items):
        shared = 0
        if i % restart_interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        out += varint(shared) + varint(len(key) - shared) + varint(len(value)) + key[shared:] + value
        last = key
    return bytes(out) + struct.pack(f"<{len(restarts)}I", *restarts) + struct.pack("<I", len(restarts))


def snappy_literal(data: bytes) -> bytes:
    """A valid Snappy stream made of literals only (<= 256 bytes each, 1-byte length form)."""
    out = bytearray(varint(len(data)))
    for i in range(0, len(data), 256):
        chunk = data[i:i + 256]
        out += bytes([60 << 2, len(chunk) - 1]) + chunk
    return bytes(out)


def build_table(items: list[tuple[bytes, bytes]], per_block: int, snappy: bool) -> bytes:
    out, index = bytearray(), []

    def add(contents: bytes, kind: int) -> bytes:
        handle = varint(len(out)) + varint(len(contents))
        masked = tfc.crc32c(contents + bytes([kind]))
        masked = (((masked >> 15) | (masked << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        out.extend(contents + bytes([kind]) + struct.pack("<I", masked))
        return handle

    for i in range(0, len(items), per_block):
        block = encode_block(items[i:i + per_block])
        index.append((items[min(i + per_block, len(items)) - 1][0],
                      add(snappy_literal(block), 1) if snappy else add(block, 0)))
    meta = add(encode_block([]), 0)
    footer = meta + add(encode_block(index), 0)
    return bytes(out) + footer + bytes(40 - len(footer)) + struct.pack("<Q", tfc.TABLE_MAGIC)


def repack(tmp_path: Path, rename=lambda k: k, per_block: int = 7, snappy: bool = True) -> Path:
    """The fixture with its index rebuilt; `rename` maps keys (None drops one)."""
    prefix = copy_checkpoint(FIXTURE, tmp_path)
    index = Path(f"{prefix}.index")
    table = tfc.read_table(index.read_bytes(), "fixture")
    items = sorted((rename(k), v) for k, v in table.items() if rename(k) is not None)
    index.write_bytes(build_table(items, per_block, snappy))
    return prefix


def test_multi_block_snappy_table_reads_the_same(tmp_path):
    prefix = repack(tmp_path)
    ours, reference = TFCheckpoint(prefix), expected(FIXTURE)
    assert ours.names() == sorted(reference)
    for var, ref in reference.items():
        assert hashlib.sha256(tf_bytes(ours.read(var), ref["dtype"])).hexdigest() == ref["sha256"], var


def test_tf_hub_module_prefix_is_stripped(tmp_path):
    prefix = repack(tmp_path, rename=lambda k: b"module/" + k if k else k, snappy=False)
    shutil.copyfile(FIXTURE / "albert_config.json", tmp_path / "albert_config.json")
    model, report = import_tf_checkpoint(prefix)
    reference, _ = import_tf_checkpoint(FIXTURE)
    assert not report.unused and not report.missing and len(report.skipped) == len(TRAINING_STATE)
    for key, value in reference.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_run_classifier_checkpoint_becomes_sequence_classifier(tmp_path):
    """run_classifier.py saves the classifier as top-level output_weights (num_labels, H) / output_bias."""
    def as_classifier(key: bytes):
        if key.startswith(b"cls/seq_relationship/"):
            return key.removeprefix(b"cls/seq_relationship/")
        return None if key.startswith(b"cls/") else key

    prefix = repack(tmp_path, rename=as_classifier, snappy=False)
    shutil.copyfile(FIXTURE / "albert_config.json", tmp_path / "albert_config.json")
    model, report = import_tf_checkpoint(prefix)
    assert type(model).__name__ == "AlbertForSequenceClassification" and model.config.num_labels == 2
    assert not report.unused and not report.missing
    ref = np.load(FIXTURE / "forward.npz")  # google's pooled output on these weights
    ckpt = TFCheckpoint(prefix)
    expected_logits = ref["pooled_output"] @ ckpt.read("output_weights").T + ckpt.read("output_bias")
    model.eval()
    with torch.no_grad():
        logits = model(*(torch.from_numpy(ref[k]).long() for k in ("input_ids", "input_mask", "token_type_ids"))).logits
    torch.testing.assert_close(logits, torch.from_numpy(expected_logits), atol=1e-5, rtol=0)


def test_run_squad_checkpoint_becomes_question_answering(tmp_path):
    """run_squad_v1.py's head: cls/squad/output_weights (2, H) on every token -> start / end logits."""
    def as_squad(key: bytes):
        if key.startswith(b"cls/seq_relationship/"):
            return key.replace(b"seq_relationship", b"squad")
        return None if key.startswith(b"cls/") else key

    prefix = repack(tmp_path, rename=as_squad, snappy=False)
    shutil.copyfile(FIXTURE / "albert_config.json", tmp_path / "albert_config.json")
    model, report = import_tf_checkpoint(prefix)
    assert type(model).__name__ == "AlbertForQuestionAnswering" and not report.missing
    assert sorted(report.unused) == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]  # no pooler in QA
    ref, ckpt = np.load(FIXTURE / "forward.npz"), TFCheckpoint(prefix)
    logits = ref["sequence_output"] @ ckpt.read("cls/squad/output_weights").T + ckpt.read("cls/squad/output_bias")
    model.eval()
    with torch.no_grad():
        out = model(*(torch.from_numpy(ref[k]).long() for k in ("input_ids", "input_mask", "token_type_ids")))
    torch.testing.assert_close(out.start_logits, torch.from_numpy(logits[..., 0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(out.end_logits, torch.from_numpy(logits[..., 1]), atol=1e-5, rtol=0)


# --- the name map ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["main", "inner2"])
def test_every_variable_consumed_every_parameter_filled(name):
    model, report = import_tf_checkpoint(CHECKPOINTS[name], verify=True)
    tf_names = set(expected(CHECKPOINTS[name]))
    assert sorted(report.skipped) == (TRAINING_STATE if name == "main" else [])
    assert not report.unused and not report.missing
    assert sorted(report.used) == sorted(tf_names - set(report.skipped))  # each variable used once
    sources = tf_key_map(model.config)
    assert set(sources) == set(model.state_dict())  # the map covers the model, nothing else


def test_values_land_in_the_right_place():
    model, _ = import_tf_checkpoint(FIXTURE)
    ckpt, state = TFCheckpoint(FIXTURE), model.state_dict()
    H = model.config.hidden_size
    p = "bert/encoder/transformer/group_1/inner_group_0"
    qkv = state["albert.encoder.attentions.1.qkv.weight"]
    for i, proj in enumerate(("query", "key", "value")):  # kernels (in, out) -> Linear (out, in)
        assert torch.equal(qkv[i * H:(i + 1) * H], torch.from_numpy(ckpt.read(f"{p}/attention_1/self/{proj}/kernel").T))
    assert torch.equal(state["albert.encoder.ffns.1.norm.weight"], torch.from_numpy(ckpt.read(f"{p}/LayerNorm_1/gamma")))
    assert torch.equal(state["albert.encoder.attentions.1.norm.bias"], torch.from_numpy(ckpt.read(f"{p}/LayerNorm/beta")))
    assert torch.equal(state["albert.embeddings.project.weight"],
                       torch.from_numpy(ckpt.read("bert/encoder/embedding_hidden_mapping_in/kernel").T))
    assert torch.equal(state["sop_head.weight"], torch.from_numpy(ckpt.read("cls/seq_relationship/output_weights")))
    assert model.config.activation == "gelu_new"  # google's "gelu" is the tanh approximation
    assert model.config.num_groups == 2


def test_inner_groups_map_to_consecutive_blocks():
    model, _ = import_tf_checkpoint(CHECKPOINTS["inner2"])
    ckpt = TFCheckpoint(CHECKPOINTS["inner2"])
    assert not model.config.has_embedding_projection  # E == H: google has no embedding_hidden_mapping_in
    for k in range(2):
        gamma = ckpt.read(f"bert/encoder/transformer/group_0/inner_group_{k}/LayerNorm_1/gamma")
        assert torch.equal(model.state_dict()[f"albert.encoder.ffns.{k}.norm.weight"], torch.from_numpy(gamma))


def test_map_covers_the_real_albert_base_v2_config(shared):
    """google's albert-base-v2 albert_config.json: every parameter of the model it builds has a TF source."""
    from albertlm.interop.tf import config_from_google
    from albertlm.model.albert import AlbertForPreTraining

    cfg = config_from_google(json.loads(shared("config", "albert_base_v2_config.json").read_text()))
    assert (cfg.embedding_size, cfg.hidden_size, cfg.num_layers, cfg.num_groups) == (128, 768, 12, 1)
    assert cfg.activation == "gelu_new" and cfg.sharing == "all"
    sources = tf_key_map(cfg)
    assert set(sources) == set(AlbertForPreTraining(cfg).state_dict())
    names = [n for tf_names, _ in sources.values() for n in tf_names]
    assert len(names) == len(set(names)) == 32  # 5 embedding + 2 projection + 16 block + 2 pooler + 7 head variables


def test_config_that_does_not_fit_fails_clearly(tmp_path):
    prefix = copy_checkpoint(FIXTURE, tmp_path)
    config = json.loads((FIXTURE / "albert_config.json").read_text())
    (tmp_path / "albert_config.json").write_text(json.dumps({**config, "intermediate_size": 40}))
    with pytest.raises(UserError, match="intermediate/dense/kernel has shape"):
        import_tf_checkpoint(prefix)
    (tmp_path / "albert_config.json").unlink()
    with pytest.raises(UserError, match="no albert_config.json"):
        import_tf_checkpoint(prefix)
    with pytest.raises(UserError, match="not an ALBERT checkpoint"):
        import_tf_checkpoint(CHECKPOINTS["dtypes"], config=FIXTURE / "albert_config.json")


# --- TF -> albertlm -> transformers ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["main", "inner2"])
def test_tf_to_ours_to_transformers(name, tmp_path):
    transformers = pytest.importorskip("transformers")
    from albertlm.interop.hf import export_hf

    ours, _ = import_tf_checkpoint(CHECKPOINTS[name])
    ours.eval()
    export_hf(ours, tmp_path / "hf")
    hf, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    hf.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 99, (3, 13), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    types = (torch.arange(13) >= 6).long().expand(3, 13)
    with torch.no_grad():
        a, b = ours(ids, mask, types), hf(ids, mask, types)
        base_a, base_b = ours.albert(ids, mask, types), hf.albert(ids, mask, types)
    for x, y in ((base_a.last_hidden_state, base_b.last_hidden_state), (base_a.pooler_output, base_b.pooler_output),
                 (a.prediction_logits, b.prediction_logits), (a.sop_logits, b.sop_logits)):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
    assert a.prediction_logits.abs().max() > 0.1  # real weights, not an all-zero coincidence


# --- against google-research's own TensorFlow forward pass ------------------------------------------

@pytest.mark.parametrize("name", ["main", "inner2"])
def test_matches_google_research_forward(name):
    """forward.npz holds what google's modeling.py + run_pretraining.py heads computed in TF on these
    weights (tools/make_tf_fixture.py): our model on the imported weights must agree."""
    ref = np.load(CHECKPOINTS[name] / "forward.npz")
    model, _ = import_tf_checkpoint(CHECKPOINTS[name])
    model.eval()
    ids, mask, types, positions = (torch.from_numpy(ref[k]).long() for k in
                                   ("input_ids", "input_mask", "token_type_ids", "masked_lm_positions"))
    with torch.no_grad():
        base = model.albert(ids, mask, types)
        out = model(ids, mask, types, masked_lm_positions=positions)
    ours = {"sequence_output": base.last_hidden_state, "pooled_output": base.pooler_output,
            "mlm_log_probs": torch.log_softmax(out.prediction_logits, -1),  # (B * P, V), google's order
            "sop_log_probs": torch.log_softmax(out.sop_logits, -1)}
    for key, value in ours.items():
        torch.testing.assert_close(value, torch.from_numpy(ref[key]), atol=1e-5, rtol=0, msg=key)
