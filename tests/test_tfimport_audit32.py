"""TF import audit of the thirty-second session, as a user holding google-research/ALBERT TF checkpoints (v1/v2, TF-Hub,
mid-pretraining with optimizer slots, num_hidden_groups / inner_group_num > 1, fine-tuned heads), checked against
google's modeling.py and transformers 4's `load_tf_weights_in_albert` (transformers 5 dropped it: its renaming rules
are ported below, as the oracle of which TF variable is which torch weight).

Fixed:
- google's transformer_model runs layer l with group `int(l / L * N)`, computed in floating point; albertlm (and
  transformers) with `l * N // L`. They differ for a few configs: with L = N = 22 (nothing shared) google's layer 15
  reuses group_14 and no group_15 exists (the import said "not an ALBERT checkpoint of this config: no ...group_15..."),
  with L = 44, N = 22 every group exists but layer 30 runs group_14 (imported without a word as another network). Both
  are refused in one line naming the layer (`tf.check_google_layer_groups`).
- `<var>/lamb_m`, `<var>/lamb_v` (the LAMB slots google's export_checkpoints.py leaves out by name) were read as model
  variables: `convert` listed every one as "unused", `info` counted them as weights and said "the pooler's ... values
  unused: AlbertForPreTraining has no pooler". They are training state, skipped as adam_m / adam_v are.

Checks that held (pass before and after): a random transformers ALBERT written as google's variables (grouped,
inner groups, E == H, not shared; MLM + SOP heads and run_classifier.py's head) imports to transformers' logits within
fp32 tolerance, and `convert --to hf` of such a checkpoint is read by transformers to the same logits; the index
reader takes offsets past 4 GiB (the arithmetic, from a synthetic index), Snappy blocks with every copy form, restart
points at every entry and keys sharing long prefixes; a big-endian bundle, a partitioned variable and an unknown block
compression are one-line errors with nothing written.
"""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

import test_tf_import
from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.interop import tf_checkpoint as tfc
from albertlm.interop.tf import import_tf_checkpoint
from conftest import assert_one_error
from test_tf_import import FIXTURE, build_table, varint
from test_tfonnx_audit20 import fixture_tensors, write_checkpoint

transformers = pytest.importorskip("transformers")

from test_hf_parity import hf_config, hf_model, inputs  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# --- google's variables, from a transformers model ------------------------------------------------------------------

def google_names(L: int, N: int, K: int, E: int, H: int, head: str = "pretraining") -> list[str]:
    """The model variables google's modeling.py (+ run_pretraining.py's or run_classifier.py's head) creates for a
    config: layer l's group is int(l / L * N), in floating point, as transformer_model computes it."""
    names = [f"bert/embeddings/{n}" for n in ("word_embeddings", "position_embeddings", "token_type_embeddings",
                                              "LayerNorm/gamma", "LayerNorm/beta")]
    names += ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
    if E != H:
        names += ["bert/encoder/embedding_hidden_mapping_in/kernel", "bert/encoder/embedding_hidden_mapping_in/bias"]
    for g in sorted({int(layer / L * N) for layer in range(L)}):
        for k in range(K):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{k}"
            for dense in ("attention_1/self/query", "attention_1/self/key", "attention_1/self/value",
                          "attention_1/output/dense", "ffn_1/intermediate/dense", "ffn_1/intermediate/output/dense"):
                names += [f"{p}/{dense}/kernel", f"{p}/{dense}/bias"]
            names += [f"{p}/{norm}/{v}" for norm in ("LayerNorm", "LayerNorm_1") for v in ("gamma", "beta")]
    if head == "pretraining":
        names += ["cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
                  "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
                  "cls/predictions/output_bias", "cls/seq_relationship/output_weights",
                  "cls/seq_relationship/output_bias"]
    elif head == "classifier":
        names += ["output_weights", "output_bias"]
    return names


def hf4_target(model: torch.nn.Module, name: str) -> tuple[torch.Tensor, bool]:
    """transformers 4's load_tf_weights_in_albert for one TF variable: the torch tensor it is loaded into, and
    whether it is transposed (a `kernel`). Its renaming rules in its order, its pointer walk (an attribute the model
    lacks, such as the `cls` of cls/seq_relationship, is skipped, as it skipped it)."""
    for old, new in (("module/", ""), ("ffn_1", "ffn"), ("bert/", "albert/"), ("attention_1", "attention"),
                     ("transform/", ""), ("LayerNorm_1", "full_layer_layer_norm"), ("LayerNorm", "attention/LayerNorm"),
                     ("transformer/", ""), ("intermediate/dense/", ""),
                     ("ffn/intermediate/output/dense/", "ffn_output/"),
                     ("/output/", "/"), ("/self/", "/"), ("pooler/dense", "pooler"), ("cls/predictions", "predictions"),
                     ("predictions/attention", "predictions"), ("embeddings/attention", "embeddings"),
                     ("inner_group_", "albert_layers/"), ("group_", "albert_layer_groups/")):
        name = name.replace(old, new)
    if len(name.split("/")) == 1 and ("output_bias" in name or "output_weights" in name):
        name = "classifier/" + name
    if "seq_relationship" in name:
        name = name.replace("seq_relationship/output_", "sop_classifier/classifier/").replace("weights", "weight")
    pointer = model
    for part in name.split("/"):
        scope = re.split(r"_(\d+)", part) if re.fullmatch(r"[A-Za-z]+_\d+", part) else [part]
        if scope[0] in ("kernel", "gamma", "output_weights"):
            pointer = pointer.weight
        elif scope[0] in ("output_bias", "beta"):
            pointer = pointer.bias
        elif hasattr(pointer, scope[0]):
            pointer = getattr(pointer, scope[0])
        else:
            continue
        if len(scope) >= 2:
            pointer = pointer[int(scope[1])]
    if part.endswith("_embeddings"):
        pointer = pointer.weight
    return pointer, part == "kernel"


def google_config(cfg) -> dict:
    """albert_config.json of a transformers AlbertConfig (google's "gelu" is transformers' "gelu_new")."""
    return dict(vocab_size=cfg.vocab_size, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
                num_hidden_layers=cfg.num_hidden_layers, num_hidden_groups=cfg.num_hidden_groups,
                num_attention_heads=cfg.num_attention_heads, intermediate_size=cfg.intermediate_size,
                inner_group_num=cfg.inner_group_num, down_scale_factor=1, hidden_act="gelu", hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, max_position_embeddings=cfg.max_position_embeddings,
                type_vocab_size=cfg.type_vocab_size, initializer_range=0.02)


def write_from_hf(directory: Path, model: torch.nn.Module, head: str = "pretraining",
                  slots: tuple[str, ...] = ()) -> Path:
    """`model` saved as google's TF checkpoint (the variables `google_names` lists, each the tensor transformers 4
    loads it into, kernels transposed back to (in, out)), with `slots` per variable and global_step, as a run saves."""
    cfg = model.config
    tensors = {"global_step": np.array(1000, dtype=np.int64)}
    for name in google_names(cfg.num_hidden_layers, cfg.num_hidden_groups, cfg.inner_group_num, cfg.embedding_size,
                             cfg.hidden_size, head):
        target, transposed = hf4_target(model, name)
        value = target.detach().numpy()
        tensors[name] = np.ascontiguousarray(value.T if transposed else value, dtype=np.float32)
        tensors.update({f"{name}/{slot}": np.zeros_like(tensors[name]) for slot in slots})
    prefix = write_checkpoint(directory, tensors)
    (directory / "albert_config.json").write_text(json.dumps(google_config(cfg)))
    return prefix


def random_hf(cls: str = "AlbertForPreTraining", **config):
    model = hf_model(cls, hf_config(**{"num_labels": 2, **config}))
    if model.config.embedding_size == model.config.hidden_size:
        # google has no embedding_hidden_mapping_in where E == H; transformers always has one: the identity here
        with torch.no_grad():
            mapping = model.albert.encoder.embedding_hidden_mapping_in
            mapping.weight.copy_(torch.eye(model.config.hidden_size))
            mapping.bias.zero_()
    return model


# --- fixed: google's floating-point layer groups ---------------------------------------------------------------------

@pytest.mark.parametrize("layers, groups, layer, group", [(22, 22, 15, 14), (44, 22, 30, 14)])
def test_a_config_whose_google_layer_groups_albertlm_cannot_build_is_refused(tmp_path, capsys, layers, groups, layer,
                                                                             group):
    """(22, 22): google made no group_15 (the import named a 'missing' variable); (44, 22): every group is there and
    the import gave layer 30 group_15's weights, where google's network runs group_14's."""
    model = random_hf(num_hidden_layers=layers, num_hidden_groups=groups, hidden_size=8, embedding_size=4,
                      num_attention_heads=1, intermediate_size=8)
    prefix = write_from_hf(tmp_path / "ckpt", model)
    said = f"google's modeling.py runs layer {layer} of {layers} with group_{group}"
    with pytest.raises(UserError, match=re.escape(said)):
        import_tf_checkpoint(prefix)
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), said, "cannot rebuild")
    assert not (tmp_path / "out").exists()
    # info describes such a checkpoint (session 33) and says why the import refuses it
    with pytest.warns(UserWarning, match=re.escape(said)):
        assert main(["info", str(prefix), "--json"]) == 0
    assert said in json.loads(capsys.readouterr().out)["import_refused"]


def test_the_layer_group_check_is_googles_formula_for_every_divisible_config():
    from albertlm.interop.tf import check_google_layer_groups

    refused = []
    for L in range(1, 65):
        for N in (n for n in range(1, L + 1) if L % n == 0):
            same = [int(layer / L * N) for layer in range(L)] == [layer * N // L for layer in range(L)]
            try:
                check_google_layer_groups(L, N, "x")
            except UserError:
                refused.append((L, N))
                assert not same
            else:
                assert same
    # google's released shapes (12 / 24 layers, one group, or one per layer) are not among them
    assert (12, 1) not in refused and (24, 24) not in refused and (12, 12) not in refused
    assert (22, 22) in refused and (44, 22) in refused


# --- fixed: LAMB slots ----------------------------------------------------------------------------------------------

def test_lamb_slots_are_training_state(tmp_path, capsys):
    tensors = {k: v for k, v in fixture_tensors().items() if "adam_" not in k}
    model_vars = [k for k in tensors if k != "global_step"]
    tensors.update({f"{k}/{slot}": np.zeros_like(tensors[k]) for k in model_vars for slot in ("lamb_m", "lamb_v")})
    prefix = write_checkpoint(tmp_path / "ckpt", tensors)
    model, report = import_tf_checkpoint(prefix)
    assert not report.unused and not report.missing and len(report.skipped) == 2 * len(model_vars) + 1
    assert main(["info", str(prefix)]) == 0
    out = capsys.readouterr().out
    stored = sum(int(np.prod(tensors[k].shape)) for k in model_vars)
    assert f"in the file, with AlbertForPreTraining's heads: {stored:,}\n" in out, out
    assert "unused" not in out and "has no pooler" not in out
    assert main(["convert", str(prefix), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"{len(model_vars)} variables imported, {2 * len(model_vars) + 1} training-state variables skipped" in out
    assert "unused" not in out


# --- held: a transformers model through google's variables -----------------------------------------------------------

SHAPES = {"ungrouped": dict(num_hidden_layers=3),
          "groups2-inner2": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
          "not-shared-e-equals-h": dict(num_hidden_layers=3, num_hidden_groups=3, embedding_size=32)}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_transformers_albert_written_as_googles_variables_imports_to_its_logits(tmp_path, shape):
    hf = random_hf(**SHAPES[shape])
    prefix = write_from_hf(tmp_path, hf, slots=("adam_m", "adam_v"))
    ours, report = import_tf_checkpoint(prefix)
    assert not report.unused and not report.missing and len(report.skipped) == 2 * len(report.used) + 1
    ids, mask, types = inputs()
    with torch.no_grad():
        a, b = ours(ids, mask, types), hf(ids, mask, types)
        hidden_a, hidden_b = ours.albert(ids, mask, types), hf.albert(ids, mask, types)
    for x, y in ((hidden_a.last_hidden_state, hidden_b.last_hidden_state), (hidden_a.pooler_output,
                 hidden_b.pooler_output), (a.prediction_logits, b.prediction_logits), (a.sop_logits, b.sop_logits)):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_a_run_classifier_checkpoint_of_a_transformers_classifier_gives_its_logits(tmp_path):
    hf = random_hf("AlbertForSequenceClassification", num_hidden_layers=4, num_hidden_groups=2, num_labels=3)
    ours, report = import_tf_checkpoint(write_from_hf(tmp_path, hf, head="classifier"))
    assert type(ours).__name__ == "AlbertForSequenceClassification" and ours.config.num_labels == 3
    assert not report.unused and not report.missing
    ids, mask, types = inputs()
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask, types).logits, hf(ids, mask, types).logits, atol=1e-5, rtol=0)


def test_convert_to_hf_of_a_grouped_checkpoint_gives_the_source_logits_in_transformers(tmp_path, capsys):
    hf = random_hf(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)
    prefix = write_from_hf(tmp_path / "google", hf, slots=("adam_m", "adam_v"))
    assert main(["convert", str(prefix), str(tmp_path / "hf"), "--to", "hf"]) == 0
    assert "80 variables imported, 161 training-state variables skipped" in capsys.readouterr().out
    back, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not any(info.values()), info
    ids, mask, types = inputs()
    with torch.no_grad():
        a, b = back.eval()(ids, mask, types), hf(ids, mask, types)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, atol=1e-5, rtol=0)


# --- held: the index reader's edge cases ----------------------------------------------------------------------------

def _field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _entry(shape: tuple[int, ...], offset: int, size: int) -> bytes:
    """A BundleEntryProto of a float32 tensor in shard 0."""
    dims = b"".join(_field(2, varint(1 << 3) + varint(d)) for d in shape)
    return (varint(1 << 3) + varint(1) + _field(2, dims) + varint(3 << 3) + varint(0) + varint(4 << 3) + varint(offset)
            + varint(5 << 3) + varint(size))


def _bundle(prefix: Path, entries: dict[bytes, bytes], header: bytes = varint(1 << 3) + varint(1),
            data: bytes = bytes(64)) -> Path:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(build_table(sorted({b"": header, **entries}.items()), per_block=4,
                                                    snappy=False))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(data)
    return prefix


def test_offsets_past_4_gib_are_read_where_the_index_says(tmp_path, monkeypatch):
    """No 4 GiB file: the index says so, the size check does its sums on it, and the read seeks there."""
    far = (1 << 32) + (1 << 31) + 8
    prefix = _bundle(tmp_path / "big", {b"bert/far": _entry((4,), far, 16), b"bert/near": _entry((2,), 0, 8)})
    ckpt = tfc.TFCheckpoint(prefix)
    assert ckpt.entries["bert/far"].offset == far and ckpt.entries["bert/far"].size == 16
    with pytest.raises(tfc.CheckpointError, match=f"64 bytes where the index needs {far + 16:,}"):
        ckpt.check_data_files()
    value = np.arange(4, dtype="<f4")

    class Shard:   # a data file whose bytes at `far` are `value`
        def __init__(self):
            self.position = 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def seek(self, position):
            self.position = position

        def read(self, n):
            return value.tobytes()[:n] if self.position == far else bytes(n)

    monkeypatch.setattr(tfc, "open", lambda path, mode: Shard(), raising=False)
    np.testing.assert_array_equal(ckpt.read("bert/far"), value)


def test_a_big_endian_bundle_a_sliced_variable_and_other_compression_are_one_line(tmp_path, capsys):
    prefix = _bundle(tmp_path / "be" / "model.ckpt-1", {b"x": _entry((2,), 0, 8)},
                     header=varint(1 << 3) + varint(1) + varint(2 << 3) + varint(1))   # endianness BIG
    with pytest.raises(tfc.CheckpointError, match="big-endian checkpoints are not supported"):
        tfc.TFCheckpoint(prefix)
    # a partitioned word embedding (its slices under \x00 keys): refused when read, nothing written
    prefix = write_checkpoint(tmp_path / "sliced", fixture_tensors())
    index = Path(f"{prefix}.index")
    table = tfc.read_table(index.read_bytes(), "x")
    name = b"bert/embeddings/word_embeddings"
    table[name] += _field(7, _field(1, b""))
    index.write_bytes(build_table(sorted(table.items()), per_block=16, snappy=False))
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), name.decode(),
                     "partitioned (sliced) variables are not supported")
    assert not (tmp_path / "out").exists()
    # a block compressed other than none / Snappy (LevelDB's later zstd is type 2)
    raw = bytearray(index.read_bytes())
    footer = raw[-tfc.FOOTER_SIZE:]
    _, pos = tfc._read_handle(bytes(footer), 0)
    (offset, size), _ = tfc._read_handle(bytes(footer), pos)
    raw[offset + size] = 2
    crc = tfc.crc32c(bytes(raw[offset:offset + size + 1]))
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF   # LevelDB's masked CRC
    raw[offset + size + 1:offset + size + 5] = struct.pack("<I", masked)
    index.write_bytes(bytes(raw))
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), "unknown block compression type 2")
    assert not (tmp_path / "out").exists()


def snappy_compress(data: bytes, used: set) -> bytes:
    """A real Snappy compressor (greedy, 4-byte hash matches), emitting every element form: literals with 0-2 length
    bytes, copies with 1-, 2- and 4-byte offsets; `used` collects the forms emitted."""
    out, literal, table, i = bytearray(varint(len(data))), bytearray(), {}, 0

    def flush():
        for start in range(0, len(literal), 300):
            chunk = literal[start:start + 300]
            n = len(chunk) - 1
            form = 0 if n < 60 else 60 if n < 256 else 61
            out.extend(bytes([n << 2]) if form == 0 else bytes([form << 2]) + n.to_bytes(form - 59, "little"))
            out.extend(chunk)
            used.add(f"literal{form}")
        literal.clear()

    copies = 0
    while i < len(data):
        candidate = table.get(data[i:i + 4]) if i + 4 <= len(data) else None
        if i + 4 <= len(data):
            table[data[i:i + 4]] = i
        if candidate is None:
            literal.append(data[i])
            i += 1
            continue
        length = 4
        while i + length < len(data) and length < 64 and data[candidate + length] == data[i + length]:
            length += 1
        offset = i - candidate
        flush()
        copies += 1
        if length <= 11 and offset < 2048 and copies % 3:
            out += bytes([1 | (length - 4) << 2 | (offset >> 8) << 5, offset & 0xFF])
            used.add("copy1")
        elif copies % 2:
            out += bytes([2 | (length - 1) << 2]) + offset.to_bytes(2, "little")
            used.add("copy2")
        else:
            out += bytes([3 | (length - 1) << 2]) + offset.to_bytes(4, "little")
            used.add("copy4")
        for j in range(i + 1, min(i + length, len(data) - 3)):
            table[data[j:j + 4]] = j
        i += length
    flush()
    return bytes(out)


def test_snappy_blocks_restart_points_and_long_shared_prefixes(tmp_path, monkeypatch):
    """The fixture's index re-packed with keys sharing 200-byte prefixes, a restart point at every entry or every
    16th, and each block Snappy-compressed with copies of every offset width: the same variables and bytes."""
    used: set = set()
    monkeypatch.setattr(test_tf_import, "snappy_literal", lambda block: snappy_compress(block, used))
    index = FIXTURE / "model.ckpt-0.index"
    table = tfc.read_table(index.read_bytes(), "fixture")
    long = b"module/" + b"a" * 200 + b"/"
    items = sorted((long + k if k else k, v) for k, v in table.items())
    for interval in (1, 16):
        monkeypatch.setattr(test_tf_import, "encode_block",
                            lambda entries, restart_interval=3, _i=interval: ENCODE(entries, _i))
        packed = build_table(items, per_block=5, snappy=True)
        assert tfc.read_table(packed, "packed") == dict(items)
    assert {"copy1", "copy2", "copy4", "literal0", "literal60"} <= used, used
    noise = np.random.default_rng(0).bytes(280)   # a literal of 257+ bytes: its 2-byte length form
    assert tfc.snappy_decompress(snappy_compress(noise + noise, used)) == noise + noise and "literal61" in used


ENCODE = test_tf_import.encode_block
