"""TF checkpoint import, thirty-third session: the leftovers of session 32's audit (tests/test_tfimport_audit32.py).

Fixed:
- `convert --verify` checked every tensor's CRC32C a byte at a time in pure Python (about 6 MB/s: a minute and a half
  on xxlarge, with nothing on the screen). `tf_checkpoint.crc32c` now cuts a buffer into pieces whose CRCs numpy
  computes side by side and combines them (no new dependency), and `convert` shows its reading on stderr once it
  takes long (`convert_commands.tf_read_progress`: a tqdm bar on a terminal, a line per tenth in a log).
- A variable under the backbone's scope (google's `bert/`) that google's modeling.py does not make for the config was
  listed as "unused" and the model imported without it: a model albertlm does not know. Refused in one line naming it;
  training state (`<var>/adam_m`, `<var>/lamb_m`, `global_step`, ...) is still skipped, and variables outside the
  backbone (another head) are still listed as unused.
- `albertlm info` on a checkpoint whose layer groups google computes in floating point differently from albertlm
  (L = N = 22, L = 44 with N = 22) refused to describe it; it describes it now, and warns that (and why) the import
  refuses it; so it does for an unknown backbone variable.

Held: the RFC 3720 CRC32C vectors, the new CRC against the old byte-at-a-time loop (kept below as the oracle) on
random data of many lengths, continued CRCs, and a damaged byte in a tensor long enough for the vectorized path is
still found by --verify.
"""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from albertlm.cli import convert_commands
from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.interop import tf_checkpoint as tfc
from albertlm.interop.tf import describe_tf_checkpoint, import_tf_checkpoint
from conftest import assert_one_error
from test_tfonnx_audit20 import fixture_tensors, write_checkpoint


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def with_crcs(prefix):
    """`write_checkpoint` leaves BundleEntryProto's crc32c field out: each entry gets its tensor's masked CRC32C (the
    oracle's), as TF writes it, so that --verify passes on an undamaged checkpoint."""
    from test_tf_import import build_table

    index = prefix.with_name(prefix.name + ".index")
    data = prefix.with_name(prefix.name + ".data-00000-of-00001").read_bytes()
    table = tfc.read_table(index.read_bytes(), "x")
    for key, value in table.items():
        if key:
            entry = tfc.parse_entry(value)
            crc = reference_crc32c(data[entry.offset:entry.offset + entry.size])
            masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF   # LevelDB's mask
            table[key] = value + bytes([6 << 3 | 5]) + masked.to_bytes(4, "little")
    index.write_bytes(build_table(sorted(table.items()), per_block=16, snappy=False))
    return prefix


# --- CRC32C ---------------------------------------------------------------------------------------------------------

def reference_crc32c(data: bytes, crc: int = 0) -> int:
    """The byte-at-a-time loop `tf_checkpoint.crc32c` was until this session: the oracle."""
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# RFC 3720 (iSCSI), appendix B.4, and the usual check value
ISCSI_READ_PDU = bytes.fromhex("01c00000000000000000000000000000" "14000000000004000000001400000018"
                               "28000000000000000200000000000000")
VECTORS = [(bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43), (bytes(range(32)), 0x46DD794E),
           (bytes(range(31, -1, -1)), 0x113FDB5C), (ISCSI_READ_PDU, 0xD9963A56), (b"123456789", 0xE3069283)]


@pytest.mark.parametrize("data, crc", VECTORS)
def test_crc32c_rfc3720_vectors(data, crc):
    assert tfc.crc32c(data) == crc == reference_crc32c(data)
    # the same bytes repeated past the vectorized path's threshold, against the oracle
    long = data * (40_000 // len(data))
    assert tfc.crc32c(long) == reference_crc32c(long)


@pytest.mark.parametrize("size", [0, 1, 7, 4095, 4096, 4097, 8191, 65536 + 5, 3 * 131072 + 17, (1 << 20) + 3])
def test_crc32c_equals_the_byte_loop_on_random_data(size):
    rng = np.random.default_rng(size)
    data = rng.bytes(size)
    start = int(rng.integers(0, 1 << 32))
    assert tfc.crc32c(data) == reference_crc32c(data)
    assert tfc.crc32c(data, start) == reference_crc32c(data, start)
    cut = size // 3   # a continued CRC, and the buffer types the reader passes (bytes, slices, memoryviews)
    assert tfc.crc32c(memoryview(data)[cut:], tfc.crc32c(bytearray(data[:cut]))) == reference_crc32c(data)


def test_the_byte_loop_only_does_the_tail(monkeypatch):
    """A long buffer is computed by numpy pieces; what is left for the byte loop is shorter than 4 KiB. (The loop
    did every byte: 6 MB/s.)"""
    looped = []
    loop = tfc._crc32c_loop
    monkeypatch.setattr(tfc, "_crc32c_loop", lambda data, register: looped.append(len(data)) or loop(data, register))
    data = np.random.default_rng(0).bytes(5_000_003)
    assert tfc.crc32c(data) == reference_crc32c(data)
    assert sum(looped) < 4096, looped


def test_verify_finds_a_damaged_byte_inside_a_long_tensor(tmp_path, capsys):
    tensors = fixture_tensors()
    name = "bert/embeddings/word_embeddings"     # 99 x 16 float32: 6,336 bytes, the vectorized path
    assert tensors[name].nbytes > 4096
    prefix = with_crcs(write_checkpoint(tmp_path / "ckpt", tensors))
    ckpt = tfc.TFCheckpoint(prefix)
    entry = ckpt.entries[name]
    assert ckpt.read(name, verify=True).shape == (99, 16)
    shard = prefix.with_name(prefix.name + ".data-00000-of-00001")
    raw = bytearray(shard.read_bytes())
    raw[entry.offset + 3001] ^= 0x10
    shard.write_bytes(bytes(raw))
    assert main(["convert", str(prefix), str(tmp_path / "unchecked")]) == 0   # not checked without --verify
    capsys.readouterr()
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out"), "--verify"]),
                     f"{name}: data checksum mismatch")
    assert not (tmp_path / "out").exists()


# --- progress -------------------------------------------------------------------------------------------------------

def test_convert_verify_shows_its_progress_in_a_log(tmp_path, capsys, monkeypatch):
    """Where stderr is no terminal, a line at each tenth once reading has taken PLAIN_PROGRESS_AFTER seconds (0
    here); the summary on stdout is as it was."""
    from albertlm import errors

    monkeypatch.setattr(errors, "stderr_is_terminal", lambda: False)
    monkeypatch.setattr(convert_commands, "PLAIN_PROGRESS_AFTER", 0.0)
    prefix = with_crcs(write_checkpoint(tmp_path / "ckpt", fixture_tensors()))
    assert main(["convert", str(prefix), str(tmp_path / "out"), "--verify"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines and all(re.fullmatch(r"convert: read \d0% of 0\.\d MB of weights, CRC32C checked, 0\.0 min", line)
                         for line in lines), captured.err
    percents = [int(re.search(r"(\d+)%", line).group(1)) for line in lines]
    assert percents == sorted(set(percents)) and len(percents) >= 3, percents
    assert "variables imported" in captured.out
    # the default: a short conversion says nothing
    monkeypatch.setattr(convert_commands, "PLAIN_PROGRESS_AFTER", 30.0)
    assert main(["convert", str(prefix), str(tmp_path / "out2"), "--verify"]) == 0
    assert capsys.readouterr().err == ""


def test_convert_shows_a_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    from albertlm import errors

    monkeypatch.setattr(errors, "stderr_is_terminal", lambda: True)
    monkeypatch.setattr(convert_commands, "PROGRESS_AFTER", 0.0)
    prefix = with_crcs(write_checkpoint(tmp_path / "ckpt", fixture_tensors()))
    assert main(["convert", str(prefix), str(tmp_path / "out"), "--verify"]) == 0
    err = capsys.readouterr().err
    assert "albertlm convert: read, verify" in err, err


def test_read_tf_state_reports_every_byte_it_reads(tmp_path):
    prefix = write_checkpoint(tmp_path / "ckpt", fixture_tensors())
    calls = []
    _, report = import_tf_checkpoint(prefix, progress=lambda done, total: calls.append((done, total)))
    ckpt = tfc.TFCheckpoint(prefix)
    total = sum(ckpt.entries[name].size for name in report.used)
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert all(a[0] <= b[0] and a[1] == total for a, b in zip(calls, calls[1:]))


# --- unknown variables under bert/ ----------------------------------------------------------------------------------

UNKNOWN = "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/relative_position/kernel"


@pytest.mark.parametrize("scope", ["bert/", "module/bert/", "albert/"])
def test_an_unknown_variable_under_the_backbone_scope_is_refused_naming_it(tmp_path, capsys, scope):
    """It was "unused variables (1): ..." and a model without it was written."""
    tensors = {(scope + name.removeprefix("bert/") if name.startswith("bert/") else
                "module/" + name if scope == "module/bert/" else name): value
               for name, value in fixture_tensors().items()}
    stored = scope + UNKNOWN.removeprefix("bert/")
    tensors[stored] = np.zeros((32, 8), np.float32)
    prefix = write_checkpoint(tmp_path / "ckpt", tensors)
    with pytest.raises(UserError, match=re.escape(stored)):
        import_tf_checkpoint(prefix)
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), stored,
                     f"under the backbone's scope {scope.removeprefix('module/')}", "a model albertlm does not know")
    assert not (tmp_path / "out").exists()
    # info describes it, and says the import refuses it
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main(["info", str(prefix), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["model_class"] == "AlbertForPreTraining" and shown["unused_parameters"] == 32 * 8
    assert any("`albertlm convert` refuses this checkpoint" in str(w.message) and stored in str(w.message)
               for w in said), [str(w.message) for w in said]


def test_the_refusal_names_the_first_three_and_counts_the_others(tmp_path):
    tensors = fixture_tensors()
    extra = [f"bert/extra_{i}" for i in range(5)]
    tensors.update({name: np.zeros(3, np.float32) for name in extra})
    prefix = write_checkpoint(tmp_path / "ckpt", tensors)
    with pytest.raises(UserError) as caught:
        import_tf_checkpoint(prefix)
    said = str(caught.value)
    assert "bert/extra_0, bert/extra_1, bert/extra_2 and 2 more are variables" in said and "\n" not in said, said


def test_an_embedding_projection_the_config_has_none_of_is_refused(tmp_path, capsys):
    """embedding_size = hidden_size in albert_config.json, a checkpoint with embedding_hidden_mapping_in (and its
    embeddings as wide as H): the projection was "unused" and the model imported without it."""
    tensors = fixture_tensors()
    rng = np.random.default_rng(0)
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        rows = tensors[f"bert/embeddings/{name}"].shape[0]
        tensors[f"bert/embeddings/{name}"] = rng.normal(size=(rows, 32)).astype(np.float32)
    for name in ("gamma", "beta"):
        tensors[f"bert/embeddings/LayerNorm/{name}"] = np.ones(32, np.float32)
    tensors["bert/encoder/embedding_hidden_mapping_in/kernel"] = np.eye(32, dtype=np.float32)
    tensors["bert/encoder/embedding_hidden_mapping_in/bias"] = np.zeros(32, np.float32)
    tensors = {k: v for k, v in tensors.items() if not k.startswith("cls/") and "adam_" not in k}
    prefix = write_checkpoint(tmp_path / "ckpt", tensors, embedding_size=32)
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]),
                     "bert/encoder/embedding_hidden_mapping_in/bias, bert/encoder/embedding_hidden_mapping_in/kernel "
                     "are variables under the backbone's scope bert/")


def test_training_state_and_variables_outside_the_backbone_are_not_refused(tmp_path, capsys):
    tensors = fixture_tensors()
    for name in [n for n in tensors if n.startswith("bert/") and "adam_" not in n]:
        tensors[f"{name}/lamb_m"] = np.zeros_like(tensors[name])
    tensors["cls/other_head/output_weights"] = np.zeros((3, 32), np.float32)   # another head: listed as unused
    prefix = write_checkpoint(tmp_path / "ckpt", tensors)
    model, report = import_tf_checkpoint(prefix)
    assert report.unused == ["cls/other_head/output_weights"] and not report.missing
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # nothing to say about the import
        assert describe_tf_checkpoint(prefix)["refused"] is None


# --- info on google's layer groups albertlm cannot rebuild -----------------------------------------------------------

def google_layer_groups_checkpoint(directory, layers: int, groups: int):
    """The fixture's embeddings and heads with group_0's block copied to every group google's modeling.py makes for
    `layers` layers in `groups` groups (int(l / L * N), in floating point)."""
    base = {k: v for k, v in fixture_tensors().items() if "/group_1/" not in k}
    block = "bert/encoder/transformer/group_0/"
    tensors = {k: v for k, v in base.items() if not k.startswith(block)}
    made = sorted({int(layer / layers * groups) for layer in range(layers)})
    for g in made:
        tensors.update({k.replace("/group_0/", f"/group_{g}/"): v for k, v in base.items() if k.startswith(block)})
    return write_checkpoint(directory, tensors, num_hidden_layers=layers, num_hidden_groups=groups), made


@pytest.mark.parametrize("layers, groups, layer, group", [(22, 22, 15, 14), (44, 22, 30, 14)])
def test_info_describes_a_checkpoint_of_layer_groups_albertlm_cannot_rebuild(tmp_path, capsys, layers, groups, layer,
                                                                             group):
    """`info` said only the import's error; it describes the checkpoint and warns why `convert` refuses it, which
    still refuses it."""
    prefix, made = google_layer_groups_checkpoint(tmp_path / "ckpt", layers, groups)
    assert (15 in made) == (layers == 44)   # L = N = 22: google makes no group_15
    said = f"google's modeling.py runs layer {layer} of {layers} with group_{group}"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert main(["info", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "(tf format, AlbertForPreTraining)" in out and f"num_layers = {layers}" in out, out
    assert "not in the file" not in out, out   # the group google never made is the refusal's, not a lack
    messages = [str(w.message) for w in warned]
    assert any("`albertlm convert` refuses this checkpoint" in m and said in m and "cannot rebuild" in m
               for m in messages), messages
    with pytest.warns(UserWarning, match="refuses this checkpoint"):
        described = describe_tf_checkpoint(prefix)
    assert said in described["refused"] and described["missing"] == []
    assert_one_error(capsys, main(["convert", str(prefix), str(tmp_path / "out")]), said, "cannot rebuild")
    assert not (tmp_path / "out").exists()


def test_info_still_refuses_a_config_whose_group_count_is_not_the_checkpoints(tmp_path, capsys):
    prefix = write_checkpoint(tmp_path / "ckpt", fixture_tensors(), num_hidden_groups=1)
    assert_one_error(capsys, main(["info", str(prefix)]), "albert_config.json does not fit")
