"""TF import / ONNX audit of the twenty-seventh session, as a user holding google-research ALBERT checkpoints (the
released tarball, run_classifier.py / run_squad_v1.py output directories with adam_m/adam_v slots and global_step):
`info` of a checkpoint whose data shard is missing or cut short listed the files that were there and said nothing
(the import failed only at the first variable in them); the directory's `checkpoint` state file, and the prefix
with the '.' shell completion stops at, were "not a directory" / "no such model directory"; `export onnx` took no
--config, so a run_classifier.py --output_dir or a TF-Hub module (no albert_config.json beside them) had to be
converted first; `export onnx PREFIX --out <the checkpoint's folder>` wrote config.json and onnx/ into google's
folder, which every command then read as a transformers model ("no model.safetensors"); a one-score TF classifier's
.onnx metadata had no problem_type (its config.json said regression); the dynamo exporter printed torch's
"torchvision is not installed" lines; a missing onnxruntime was "needs the onnx extra" without naming it.
Checks that held: bf16/fp16 tensors in two data shards import to google's forward, and the ONNX of a fine-tuned
classifier and of the SQuAD v1 head gives google's logits on padded inputs of any batch and length."""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.interop import tf_checkpoint as tfc
from albertlm.interop.tf import import_tf_checkpoint
from conftest import assert_one_error
from test_tf_import import build_table, varint
from test_tfonnx_audit20 import FIXTURE, INPUTS, fixture_tensors, google_reference, write_checkpoint

ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
BF16 = 14   # tensorflow DataType DT_BFLOAT16


def _field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def write_sharded(prefix: Path, tensors: dict[str, np.ndarray], shards: int, bf16: bool) -> Path:
    """A TF V2 bundle of `tensors` in `shards` data files (variable i in shard i % shards), float32 stored as bfloat16
    (its top 16 bits, as TF stores it) when `bf16`."""
    codes = {np.dtype(v): k for k, v in tfc.DTYPES.items()}
    data = [bytearray() for _ in range(shards)]
    items = [(b"", varint(1 << 3) + varint(shards))]   # BundleHeaderProto: num_shards
    for i, name in enumerate(sorted(tensors)):
        array = np.array(tensors[name], order="C")
        if bf16 and array.dtype == np.float32:
            code, raw = BF16, (array.view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            code, raw = codes[array.dtype], array.tobytes()
        shard = i % shards
        shape = b"".join(_field(2, varint(1 << 3) + varint(d)) for d in array.shape)
        entry = (varint(1 << 3) + varint(code) + _field(2, shape) + varint(3 << 3) + varint(shard)
                 + varint(4 << 3) + varint(len(data[shard])) + varint(5 << 3) + varint(len(raw)))
        items.append((name.encode(), entry))
        data[shard] += raw
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.index").write_bytes(build_table(items, per_block=16, snappy=False))
    for shard, raw in enumerate(data):
        Path(f"{prefix}.data-{shard:05d}-of-{shards:05d}").write_bytes(bytes(raw))
    shutil.copyfile(FIXTURE / "albert_config.json", prefix.parent / "albert_config.json")
    return prefix


def tarball(root: Path) -> Path:
    """google's released layout: albert_config.json and model.ckpt-best.{index,data-00000-of-00001}."""
    root.mkdir(parents=True)
    for suffix in ("index", "data-00000-of-00001"):
        shutil.copyfile(FIXTURE / f"model.ckpt-0.{suffix}", root / f"model.ckpt-best.{suffix}")
    shutil.copyfile(FIXTURE / "albert_config.json", root / "albert_config.json")
    return root


def onnx_outputs(path: Path, ref: dict[str, np.ndarray], rows=slice(None)) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {name: ref[key][rows].astype(np.int64) for name, key in zip(ONNX_INPUTS, INPUTS)})


# --- the reader: data files, state file, prefixes ----------------------------------------------------------------

def test_bf16_and_fp16_tensors_in_two_data_shards_import_as_stored(tmp_path):
    """(held) bfloat16 and float16 variables spread over data-0000{0,1}-of-00002 come back exactly as stored."""
    tensors = fixture_tensors()
    for bf16 in (True, False):
        stored = tensors if bf16 else {k: v.astype(np.float16) if v.dtype == np.float32 else v
                                       for k, v in tensors.items()}
        prefix = write_sharded(tmp_path / str(bf16) / "model.ckpt-7", stored, shards=2, bf16=bf16)
        ckpt = tfc.TFCheckpoint(prefix.parent)
        assert ckpt.num_shards == 2 and {e.shard_id for e in ckpt.entries.values()} == {0, 1}
        model, report = import_tf_checkpoint(prefix.parent)
        assert not report.missing and not report.unused and len(report.skipped) == 5
        word = tensors["bert/embeddings/word_embeddings"]
        expected = ((word.view(np.uint32) >> 16) << 16).view(np.float32) if bf16 else word.astype(np.float16)
        assert torch.equal(model.albert.embeddings.word.weight, torch.from_numpy(expected.astype(np.float32)))


def test_a_missing_or_cut_data_file_is_said_by_info_and_before_the_import(capsys, tmp_path):
    """`info` listed the data files that were there (one of two, or a cut one with its short size) and exited 0:
    the command a user runs to check a download said nothing; convert failed only when a tensor was read."""
    prefix = write_sharded(tmp_path / "ckpt" / "model.ckpt-3", fixture_tensors(), shards=2, bf16=False)
    second = Path(f"{prefix}.data-00001-of-00002")
    kept = second.read_bytes()
    second.unlink()
    for argv in (["info", str(prefix.parent)], ["convert", str(prefix), str(tmp_path / "out")]):
        assert_one_error(capsys, main(argv), "model.ckpt-3.data-00001-of-00002 is missing", "names 2 data files")
    second.write_bytes(kept[:-1])
    assert_one_error(capsys, main(["info", str(prefix.parent)]), "data-00001-of-00002 is truncated",
                     f"{len(kept) - 1:,} bytes where the index needs {len(kept):,}")
    with pytest.raises(tfc.CheckpointError, match="truncated"):
        tfc.TFCheckpoint(prefix).check_data_files()
    assert not (tmp_path / "out").exists()


def test_the_state_file_and_a_prefix_ending_in_a_dot_are_checkpoints(capsys, tmp_path):
    """TF's `checkpoint` state file (what tf.train.latest_checkpoint reads) was "not a directory" to info and "no TF
    checkpoint here" to the import; `model.ckpt-best.` (where tab completion stops: .data-*, .index and .meta share
    it) "no such model directory"."""
    src = tarball(tmp_path / "albert_base")
    for f in FIXTURE.glob("model.ckpt-0.*"):   # an earlier checkpoint beside it: the state file picks
        shutil.copyfile(f, src / f.name.replace("ckpt-0", "ckpt-100"))
    (src / "checkpoint").write_text('model_checkpoint_path: "/gcs/run/model.ckpt-best"\n'
                                    'all_model_checkpoint_paths: "/gcs/run/model.ckpt-100"\n')
    for given in (src / "checkpoint", Path(f"{src}/model.ckpt-best.")):
        assert tfc.resolve_prefix(given) == src / "model.ckpt-best"
        assert main(["info", str(given)]) == 0
        assert capsys.readouterr().out.startswith(f"{src / 'model.ckpt-best'}  (tf format, AlbertForPreTraining)")
    assert main(["convert", str(src / "checkpoint"), str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()
    capsys.readouterr()
    (src / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-900"\n')   # kept past keep_checkpoint_max
    assert_one_error(capsys, main(["info", str(src / "checkpoint")]), "the state file picks model.ckpt-900",
                     "model.ckpt-900.index is not in its directory")
    with pytest.raises(tfc.CheckpointError, match="found model.ckpt-100.index, model.ckpt-best.index .its "
                                                  "`checkpoint` state file picks model.ckpt-900, which is not there"):
        tfc.resolve_prefix(src)


# --- export onnx of google's checkpoints ----------------------------------------------------------------------------

def classifier_output_dir(root: Path, rows: int) -> tuple[Path, dict[str, np.ndarray]]:
    """run_classifier.py's --output_dir: two checkpoints (adam_m/adam_v slots of every variable, global_step), the
    `checkpoint` state file naming the later, and no albert_config.json (it stays with the pretrained model)."""
    rng = np.random.default_rng(rows)
    backbone = {n: v for n, v in fixture_tensors().items() if n.startswith("bert/") and "adam" not in n}
    head = {"output_weights": rng.standard_normal((rows, 32)).astype(np.float32),
            "output_bias": rng.standard_normal(rows).astype(np.float32)}
    slots = {f"{n}/adam_{s}": np.zeros_like(v) for n, v in {**backbone, **head}.items() for s in "mv"}
    for step, scale in ((100, 0.0), (200, 1.0)):
        tensors = {**backbone, **{n: v * scale for n, v in head.items()}, **slots, "global_step": np.int64(step)}
        write_checkpoint(root, tensors)
        for f in root.glob("model.ckpt-1.*"):
            f.rename(root / f.name.replace("ckpt-1", f"ckpt-{step}"))
    (root / "albert_config.json").unlink()
    (root / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-200"\n')
    return root, head


def test_export_onnx_takes_config_for_a_run_classifier_output_dir(capsys, tmp_path, one_thread):
    """No --config: the output directory had to be converted first (the error said `albertlm convert` takes one).
    The exported classifier gives google's logits (pooled output x output_weights) on padded rows, batch 1 too."""
    pytest.importorskip("onnxruntime")
    out_dir, head = classifier_output_dir(tmp_path / "mrpc_out", rows=2)
    out = tmp_path / "mrpc.onnx"
    assert_one_error(capsys, main(["export", "onnx", str(out_dir), "--out", str(out)]),
                     "no albert_config.json", "`albertlm export onnx` also take --config FILE")
    assert main(["export", "onnx", str(out_dir), "--out", str(out), "--config",
                 str(FIXTURE / "albert_config.json")]) == 0
    printed = capsys.readouterr().out
    assert "model.ckpt-200: 43 variables imported, 87 training-state variables skipped" in printed
    ref = google_reference()
    expected = ref["pooled_output"] @ head["output_weights"].T + head["output_bias"]
    (logits,) = onnx_outputs(out, ref)
    np.testing.assert_allclose(logits, expected, atol=2e-5, rtol=0)
    (one,) = onnx_outputs(out, ref, rows=slice(1, 2))   # a padded row alone
    np.testing.assert_allclose(one, expected[1:2], atol=2e-5, rtol=0)
    model_dir = tmp_path / "ours"
    assert main(["convert", str(out_dir), str(model_dir), "--config", str(FIXTURE / "albert_config.json")]) == 0
    assert_one_error(capsys, main(["export", "onnx", str(model_dir), "--out", str(tmp_path / "x.onnx"), "--config",
                                   str(FIXTURE / "albert_config.json")]), "--config is only for TF checkpoints")


def test_a_one_score_tf_classifier_onnx_says_regression(capsys, tmp_path, one_thread):
    """The serving directory's config.json said problem_type regression; the .onnx's metadata said nothing (an
    albertlm STS-B model's says regression: docs/interop.md, metadata)."""
    pytest.importorskip("onnxruntime")
    from albertlm.interop.onnx import onnx_metadata

    out_dir, _ = classifier_output_dir(tmp_path / "sts_out", rows=1)
    shutil.copyfile(FIXTURE / "albert_config.json", out_dir / "albert_config.json")
    assert main(["export", "onnx", str(out_dir), "--out", str(tmp_path / "sts.onnx"), "--no-verify"]) == 0
    assert onnx_metadata(tmp_path / "sts.onnx")["problem_type"] == "regression"
    assert main(["export", "onnx", str(out_dir), "--out", str(tmp_path / "sts"), "--no-verify"]) == 0
    assert onnx_metadata(tmp_path / "sts" / "onnx" / "model.onnx")["problem_type"] == "regression"
    assert json.loads((tmp_path / "sts" / "config.json").read_text())["problem_type"] == "regression"


def test_the_squad_v1_head_exports_googles_start_and_end_logits(capsys, tmp_path, one_thread):
    """(held) run_squad_v1.py's cls/squad/output_* through `export onnx`: google's sequence output x the (2, H) weights
    at every real token of padded rows, in a batch and alone."""
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    backbone = {n: v for n, v in fixture_tensors().items() if not n.startswith("cls/")}
    weights, bias = rng.standard_normal((2, 32)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    src = write_checkpoint(tmp_path / "squad_out", {**backbone, "cls/squad/output_weights": weights,
                                                    "cls/squad/output_bias": bias}).parent
    out = tmp_path / "squad.onnx"
    assert main(["export", "onnx", str(src), "--out", str(out)]) == 0
    assert "exported AlbertForQuestionAnswering" in capsys.readouterr().out
    ref = google_reference()
    logits = ref["sequence_output"] @ weights.T + bias
    real = ref["input_mask"].astype(bool)
    for rows in (slice(None), slice(2, 3)):
        start, end = onnx_outputs(out, ref, rows)
        np.testing.assert_allclose(start[real[rows]], logits[rows][..., 0][real[rows]], atol=2e-5, rtol=0)
        np.testing.assert_allclose(end[real[rows]], logits[rows][..., 1][real[rows]], atol=2e-5, rtol=0)


@pytest.mark.parametrize("given", ["prefix", "index", "hub"])
def test_a_serving_directory_is_not_written_into_a_tf_checkpoints_folder(capsys, tmp_path, given):
    """`export onnx albert_base/model.ckpt-best --out albert_base` wrote config.json and onnx/ beside google's files:
    from then on info, convert and export read the folder as a transformers model ("no model.safetensors")."""
    src = tarball(tmp_path / "albert_base")
    model = {"prefix": src / "model.ckpt-best", "index": src / "model.ckpt-best.index", "hub": src}[given]
    out = src
    if given == "hub":   # a TF-Hub module's variables/ below the folder given as --out
        (src / "variables").mkdir()
        for suffix in ("index", "data-00000-of-00001"):
            (src / f"model.ckpt-best.{suffix}").rename(src / "variables" / f"variables.{suffix}")
        model, out = src / "variables" / "variables", src
    code = main(["export", "onnx", str(model), "--out", str(out), "--no-verify"])
    assert_one_error(capsys, code, f"--out {out} holds a TF checkpoint", "would hide")
    assert not (src / "config.json").exists() and not (src / "onnx").exists()
    assert main(["info", str(src)]) == 0


# --- onnx.py: what the console shows -------------------------------------------------------------------------------

def test_a_missing_onnxruntime_is_named(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)   # `import onnxruntime` raises ImportError
    src = tarball(tmp_path / "albert_base")
    code = main(["export", "onnx", str(src), "--out", str(tmp_path / "m.onnx"), "--no-verify"])
    assert_one_error(capsys, code, "onnxruntime is not installed", "pip install 'albertlm[onnx]'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["albert_base"]


def test_the_dynamo_exporter_logs_nothing_of_torchvision(monkeypatch, tmp_path, tiny_config):
    """torch.onnx logged "torchvision is not installed. Skipping torchvision::nms" (and three more) on stderr at every
    `--exporter dynamo` export. The exporter is stubbed here: what matters is what its logger lets through."""
    from albertlm.interop import onnx as onnx_export
    from albertlm.model.albert import AlbertModel

    pytest.importorskip("onnxscript")
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    class Program:
        def save(self, path, external_data=False):
            Path(path).write_bytes(b"")

    def export(*args, **kwargs):
        registry.warning("torchvision is not installed. Skipping torchvision::nms")
        return Program()

    handler = Keep()
    registry.addHandler(handler)
    monkeypatch.setattr(torch.onnx, "export", export)
    before = logging.getLogger("torch.onnx").level
    try:
        model = AlbertModel(tiny_config.replace(num_layers=1)).eval()
        wrapper = onnx_export._Outputs(model, ("last_hidden_state",))
        args = onnx_export.example_inputs(model)
        onnx_export._export_dynamo(wrapper, args, tmp_path / "m.onnx", ("last_hidden_state",),
                                   {0: onnx_export.BATCH, 1: onnx_export.SEQUENCE}, 18)
    finally:
        registry.removeHandler(handler)
    assert not records and logging.getLogger("torch.onnx").level == before
