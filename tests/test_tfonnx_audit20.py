"""TF import / ONNX audit of the twentieth session, as a user holding google-research's ALBERT checkpoints:
an albert_config.json with other num_hidden_groups / inner_group_num than the checkpoint imported a different
network (the extra groups only listed as "unused") or named a missing variable; a checkpoint with no head albertlm
reads (run_squad_v2.py's start_logits/ end_logits/ answer_class/) became an AlbertForPreTraining with random
masked-LM and SOP heads; a one-row classifier (STS-B or run_race.py, the same names) was read as a regression
without a word; a TF-Hub module's directory was "expected one *.index" from Python; and `export onnx` refused a
TF checkpoint as "not a model directory". The reference throughout is google's own TF forward (forward.npz)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.interop import tf_checkpoint as tfc
from albertlm.interop.tf import import_tf_checkpoint
from conftest import assert_one_error
from test_tf_import import build_table, varint

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"
INPUTS = ("input_ids", "input_mask", "token_type_ids")


def google_reference() -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURE / "forward.npz"))


def write_checkpoint(directory: Path, tensors: dict[str, np.ndarray], **config_changes) -> Path:
    """A TF V2 bundle of `tensors` (one data shard) with the fixture's albert_config.json (changed) beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    codes = {np.dtype(v): k for k, v in tfc.DTYPES.items()}
    data, items = bytearray(), [(b"", varint(1 << 3) + varint(1))]   # BundleHeaderProto: num_shards 1

    def field(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    for name in sorted(tensors):
        array = np.array(tensors[name], order="C")
        raw = array.tobytes()
        shape = b"".join(field(2, varint(1 << 3) + varint(d)) for d in array.shape)
        entry = (varint(1 << 3) + varint(codes[array.dtype]) + field(2, shape) + varint(4 << 3) + varint(len(data))
                 + varint(5 << 3) + varint(len(raw)))
        items.append((name.encode(), entry))
        data += raw
    prefix = directory / "model.ckpt-1"
    Path(f"{prefix}.index").write_bytes(build_table(items, per_block=16, snappy=False))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))
    config = json.loads((FIXTURE / "albert_config.json").read_text())
    (directory / "albert_config.json").write_text(json.dumps({**config, **config_changes}))
    return prefix


def fixture_tensors() -> dict[str, np.ndarray]:
    ckpt = tfc.TFCheckpoint(FIXTURE)
    return {name: ckpt.read(name) for name in ckpt.names()}


# --- the config's groups must be the checkpoint's ---------------------------------------------------------------

@pytest.mark.parametrize("groups", [1, 4])
def test_a_config_with_other_groups_than_the_checkpoint_is_refused(capsys, tmp_path, groups):
    """The fixture has 2 groups. num_hidden_groups 1 imported group_0 alone (group_1's 16 variables "unused": every
    layer ran group 0, another network); 4 said "not an ALBERT checkpoint of this config: no .../group_2/..."."""
    prefix = write_checkpoint(tmp_path / "ckpt", fixture_tensors(), num_hidden_groups=groups)
    for argv in (["convert", str(prefix), str(tmp_path / "out")], ["info", str(tmp_path / "ckpt")],
                 ["export", "onnx", str(tmp_path / "ckpt"), "--out", str(tmp_path / "m.onnx")]):
        assert_one_error(capsys, main(argv), "albert_config.json does not fit", f"says num_hidden_groups {groups}",
                         "num_hidden_groups 2, inner_group_num 1")
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.onnx").exists()


def test_a_config_with_other_inner_groups_than_the_checkpoint_is_refused(tmp_path):
    from albertlm.errors import UserError

    inner2 = tfc.TFCheckpoint(FIXTURE / "inner2")   # 1 group of 2 inner groups (E = H = 32, L 3)
    tensors = {name: inner2.read(name) for name in inner2.names()}
    config = json.loads((FIXTURE / "inner2" / "albert_config.json").read_text())
    prefix = write_checkpoint(tmp_path, tensors, **{**config, "inner_group_num": 1})
    with pytest.raises(UserError, match="says num_hidden_groups 1, inner_group_num 1, .* inner_group_num 2"):
        import_tf_checkpoint(prefix)


# --- a checkpoint with no head albertlm reads ---------------------------------------------------------------------

def squad_v2_heads(hidden: int) -> dict[str, np.ndarray]:
    """run_squad_v2.py's (squad_utils.create_v2_model) head variables."""
    rng = np.random.default_rng(0)
    shapes = {"start_logits/dense/kernel": (hidden, 1), "start_logits/dense/bias": (1,),
              "end_logits/dense_0/kernel": (2 * hidden, hidden), "end_logits/dense_0/bias": (hidden,),
              "end_logits/LayerNorm/gamma": (hidden,), "end_logits/LayerNorm/beta": (hidden,),
              "end_logits/dense_1/kernel": (hidden, 1), "end_logits/dense_1/bias": (1,),
              "answer_class/dense_0/kernel": (2 * hidden, hidden), "answer_class/dense_0/bias": (hidden,),
              "answer_class/dense_1/kernel": (hidden, 1)}
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def test_a_run_squad_v2_checkpoint_imports_with_its_squad_v2_head(capsys, tmp_path):
    """It became an AlbertForPreTraining whose masked-LM and SOP heads were random ("left initialised"): a
    fill-mask model of made-up weights; then (twentieth session) the AlbertModel it holds; now (twenty-fifth) an
    AlbertForSquadV2 with google's head, its backbone equal to google's forward (only the pooler is unused)."""
    backbone = {n: v for n, v in fixture_tensors().items() if n.startswith("bert/") or n == "global_step"}
    prefix = write_checkpoint(tmp_path / "squad2", {**backbone, **squad_v2_heads(32)})
    model, report = import_tf_checkpoint(prefix)
    assert type(model).__name__ == "AlbertForSquadV2" and not report.missing
    assert set(report.unused) == {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
    assert any("run_squad_v2.py's SQuAD v2.0 head" in line for line in report.lines())
    ref = google_reference()
    with torch.no_grad():
        out = model.eval().albert(*(torch.from_numpy(ref[k]).long() for k in INPUTS))
    torch.testing.assert_close(out.last_hidden_state, torch.from_numpy(ref["sequence_output"]), atol=1e-5, rtol=0)
    assert main(["info", str(tmp_path / "squad2")]) == 0
    assert "(tf format, AlbertForSquadV2)" in capsys.readouterr().out


def test_a_one_row_classifier_says_it_may_be_a_race_model(tmp_path):
    """run_classifier.py's STS-B regression and run_race.py's multiple-choice head are both (1, H) output_weights."""
    rng = np.random.default_rng(1)
    backbone = {n: v for n, v in fixture_tensors().items() if n.startswith("bert/")}
    head = {"output_weights": rng.standard_normal((1, 32)).astype(np.float32), "output_bias": np.zeros(1, np.float32)}
    model, report = import_tf_checkpoint(write_checkpoint(tmp_path, {**backbone, **head}))
    assert type(model).__name__ == "AlbertForSequenceClassification" and model.config.num_labels == 1
    assert any("run_race.py" in line and "AlbertForMultipleChoice" in line for line in report.lines())


# --- TF-Hub module directories from Python; export onnx of a TF checkpoint ----------------------------------------

def hub_module(root: Path) -> Path:
    """google's TF-Hub layout: variables/variables.{index,data-*}, albert_config.json and assets/ at the top."""
    (root / "variables").mkdir(parents=True)
    (root / "assets").mkdir()
    for suffix in ("index", "data-00000-of-00001"):
        shutil.copyfile(FIXTURE / f"model.ckpt-0.{suffix}", root / "variables" / f"variables.{suffix}")
    shutil.copyfile(FIXTURE / "albert_config.json", root / "albert_config.json")
    (root / "saved_model.pb").write_bytes(b"")
    return root


def test_a_tf_hub_module_directory_imports_from_python(tmp_path):
    """`albertlm convert` took the module's directory; `import_tf_checkpoint` and `TFCheckpoint` said "expected one
    *.index checkpoint file, found none"."""
    root = hub_module(tmp_path / "albert_base")
    assert tfc.TFCheckpoint(root).prefix == root / "variables" / "variables"
    model, report = import_tf_checkpoint(root)
    assert type(model).__name__ == "AlbertForPreTraining" and not report.missing and not report.unused


@pytest.mark.parametrize("layout", ["tarball", "hub"])
def test_export_onnx_takes_a_google_checkpoint(capsys, tmp_path, layout, one_thread):
    """It was "not a model directory (no config.json) nor a run with checkpoints": convert first. Now the ONNX of
    google's tarball runs in onnxruntime as google's TF forward ran."""
    ort = pytest.importorskip("onnxruntime")
    if layout == "hub":
        src = hub_module(tmp_path / "hub")
    else:
        src = tmp_path / "albert_base"
        src.mkdir()
        for suffix in ("index", "data-00000-of-00001"):
            shutil.copyfile(FIXTURE / f"model.ckpt-0.{suffix}", src / f"model.ckpt-best.{suffix}")
        shutil.copyfile(FIXTURE / "albert_config.json", src / "albert_config.json")
    out = tmp_path / "albert.onnx"
    assert main(["export", "onnx", str(src), "--out", str(out), "--encoder", "--no-verify"]) == 0
    printed = capsys.readouterr().out
    assert "48 variables imported, 5 training-state variables skipped" in printed
    assert "exported AlbertModel" in printed and "outputs: last_hidden_state, pooler_output" in printed
    ref = google_reference()
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = ("input_ids", "attention_mask", "token_type_ids")
    hidden, pooled = session.run(None, {name: ref[key].astype(np.int64) for name, key in zip(names, INPUTS)})
    real = ref["input_mask"].astype(bool)   # google's padded positions are not compared
    np.testing.assert_allclose(hidden[real], ref["sequence_output"][real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pooled, ref["pooled_output"], atol=1e-5, rtol=0)


def test_export_onnx_of_a_damaged_tf_checkpoint_is_one_line(capsys, tmp_path):
    src = tmp_path / "albert_base"
    src.mkdir()
    shutil.copyfile(FIXTURE / "albert_config.json", src / "albert_config.json")
    shutil.copyfile(FIXTURE / "model.ckpt-0.index", src / "model.ckpt-best.index")
    data = (FIXTURE / "model.ckpt-0.data-00000-of-00001").read_bytes()
    (src / "model.ckpt-best.data-00000-of-00001").write_bytes(data[: len(data) // 2])   # an interrupted download
    code = main(["export", "onnx", str(src), "--out", str(tmp_path / "m.onnx")])
    assert_one_error(capsys, code, "truncated")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["albert_base"]   # no .onnx, no staging left


def test_a_tf2_object_based_checkpoint_is_named_for_what_it_is(capsys, tmp_path):
    """TF Model Garden's ALBERT (TF-Hub albert_en_base/3) names variables by object path: the error listed three
    google names it lacked ("not an ALBERT checkpoint of this config: no bert/embeddings/...")."""
    rng = np.random.default_rng(2)
    tensors = {f"encoder/layer_with_weights-{i}/kernel/.ATTRIBUTES/VARIABLE_VALUE": rng.standard_normal((4, 4))
               .astype(np.float32) for i in range(3)}
    tensors["_CHECKPOINTABLE_OBJECT_GRAPH"] = np.zeros(1, np.uint8)
    prefix = write_checkpoint(tmp_path / "albert_en_base" / "variables", tensors)
    code = main(["convert", str(prefix), str(tmp_path / "out")])
    assert_one_error(capsys, code, "TF 2 object-based checkpoint", "not google-research's")
