"""Session 26, follow-ups of its reviews. `embed` and `fill-mask` on a fine-tuning run's `checkpoints/step_N` said
"no tokenizer beside ... nor recorded by its run" (`tasks.inference.find_tokenizer` did not know step checkpoints,
which hold no tokenizer: predict and convert took the run's best/ copy, else the tokenizer the run recorded); that
lookup now lives in tasks/inference.py and find_tokenizer falls back to it. `data build --format arrow` refused an
Arrow IPC stream not named `.arrow` ("is not an arrow file"), and `.arrows`, the stream format's own suffix, was
read as text; embed had both fixed through private corpus names, now public (`decompressor`, `ARROW_STREAM`)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.training.checkpoint import step_dir
from conftest import assert_one_error
from test_data_audit17 import _build, _meta
from test_stepn_audit26 import RUN, _without_best, run  # noqa: F401 (run: the module's fine-tuning run fixture)

pa = pytest.importorskip("pyarrow")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


TEXTS = "the film was good\nbad plot\n\nthe acting was very poor, the film awful\n"


def _embedded(model: Path, tmp_path: Path, name: str, *extra: str) -> np.ndarray:
    (tmp_path / "in.txt").write_text(TEXTS, encoding="utf-8")
    out = tmp_path / f"{name}.npy"
    assert main(["embed", str(model), "--input", str(tmp_path / "in.txt"), "--out", str(out), "--no-progress",
                 "--device", "cpu", *extra]) == 0
    return np.load(out)


def _best_step(out: Path) -> Path:
    """The step checkpoint best/ holds (best/task.json records it)."""
    return step_dir(out, json.loads((out / "best" / "task.json").read_text())["step"])


# ---------------------------------------------------------------------------------- 1. a step's tokenizer
def test_embed_from_a_step_gives_what_best_gives_and_before_best_the_recorded_tokenizer(run, tmp_path, capsys):
    """embed on RUN/checkpoints/step_N failed ("no tokenizer beside ... nor recorded by its run"): it takes the
    run's best/ copy, else (no best/ yet, or removed) the tokenizer the run recorded in the step's run_config.json."""
    from albertlm.tasks.inference import find_tokenizer

    base, _, out = run
    step = _best_step(out)
    assert find_tokenizer(step) == out / "best"
    reference = _embedded(out / "best", tmp_path, "best")
    assert np.array_equal(_embedded(step, tmp_path, "step"), reference)
    early = _without_best(out, tmp_path / "run")
    step = step_dir(early, int(step.name.split("_")[1]))
    assert find_tokenizer(step) == base.resolve()
    assert np.array_equal(_embedded(step, tmp_path, "early"), reference)
    # the same ids as the tokenizer named outright
    assert np.array_equal(_embedded(step, tmp_path, "named", "--tokenizer", str(base / "vocab.txt")), reference)
    capsys.readouterr()


def test_fill_mask_from_a_step_takes_the_runs_tokenizer(run, tmp_path, capsys):
    """fill-mask needs a masked-LM head, which a classifier's step has not: a step holding the pretrained weights
    (a masked-LM fine-tuning's step) predicts as the pretrained model with its tokenizer does, with best/ and,
    before best/ exists, with the tokenizer the run recorded (both said "no tokenizer beside ...")."""
    base, _, out = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    step = step_dir(copy, 1)
    for name in ("model.safetensors", "config.json"):
        shutil.copyfile(base / name, step / name)
    argv = ["the [MASK] was good", "bad [MASK]", "--json", "--device", "cpu"]
    assert main(["fill-mask", str(base), *argv]) == 0
    reference = capsys.readouterr().out
    assert main(["fill-mask", str(step), *argv]) == 0
    assert capsys.readouterr().out == reference
    shutil.rmtree(copy / "best")
    assert main(["fill-mask", str(step), *argv]) == 0
    assert capsys.readouterr().out == reference


def test_no_tokenizer_for_a_step_says_why_in_embed(run, tmp_path, capsys):
    """No best/ and the recorded tokenizer moved away: embed's line says why (as predict's does) and which
    tokenizer the run was fine-tuned with."""
    _, _, out = run
    early = _without_best(out, tmp_path / "run")
    step = step_dir(early, 1)
    config = json.loads((step / "run_config.json").read_text())
    moved = tmp_path / "moved" / "vocab.txt"
    (step / "run_config.json").write_text(json.dumps({**config, "tokenizer": str(moved)}))
    (tmp_path / "in.txt").write_text(TEXTS, encoding="utf-8")
    assert_one_error(capsys, main(["embed", str(step), "--input", str(tmp_path / "in.txt"), "--out",
                                   str(tmp_path / "e.npy"), "--no-progress", "--device", "cpu"]),
                     "step checkpoint holds none", f"{early / 'best'} does not exist",
                     f"fine-tuned with the tokenizer {moved}", "pass --tokenizer PATH")
    assert not (tmp_path / "e.npy").exists()


def test_the_run_tokenizer_lookup_is_in_the_tasks_layer(run):
    """tasks must not import cli: convert, export and predict share tasks.inference's lookup."""
    from albertlm.cli import convert_commands, export_commands, task_commands
    from albertlm.tasks import inference

    _, _, out = run
    assert inference.run_tokenizer(step_dir(out, 1)) == out / "best"
    assert inference.run_tokenizer(out / "best") is None and inference.missing_run_tokenizer(out / "best") == ""
    for module in (convert_commands, export_commands, task_commands):
        source = Path(module.__file__).read_text(encoding="utf-8")
        assert "from albertlm.cli.task_commands import" not in source, module.__name__
        assert "def run_tokenizer" not in source and "def missing_run_tokenizer" not in source, module.__name__


def test_convert_from_a_step_still_copies_the_runs_tokenizer(run, tmp_path, capsys):
    """find_tokenizer now gives the run's tokenizer for a step: convert must still copy it (best/'s files, or the
    recorded one) into DST, as before."""
    base, _, out = run
    for source, name in ((out, "with"), (_without_best(out, tmp_path / "run"), "early")):
        dst = tmp_path / name
        assert main(["convert", "--to", "hf", str(step_dir(source, 1)), str(dst)]) == 0
        assert "tokenizer: none found" not in capsys.readouterr().out
        assert (dst / "vocab.txt").read_text() == (base / "vocab.txt").read_text(), name


# ----------------------------------------------------------------------------------- 2. Arrow IPC streams
def _stream(path: Path, table) -> Path:
    with pa.ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table)
    return path


def test_data_build_reads_an_arrow_stream_by_arrows_or_format_arrow(tmp_path, capsys):
    """`data build --format arrow` on a stream named other than .arrow: "is not an arrow file"; `.arrows` (the
    stream format's own suffix) was read as text. Both build what the same rows in an Arrow file build."""
    import pyarrow.feather as feather

    table = pa.table({"text": ["The film was good. The plot was not.", "Bad acting, a poor plot."]})
    feather.write_feather(table, tmp_path / "d.arrow", compression="uncompressed")   # an Arrow IPC file (ARROW1)
    assert _build([tmp_path / "d.arrow"], tmp_path / "ref") == 0, capsys.readouterr().err
    reference = _meta(tmp_path / "ref")["counts"]
    assert reference["corpus"]["formats"] == {"arrow": 1} and reference["corpus"]["documents"] == 2
    for name, extra in (("d.arrows", ()), ("d.stream", ("--format", "arrow")), ("e.arrows", ("--format", "arrow"))):
        source = _stream(tmp_path / name, table)
        out = tmp_path / f"out_{name}"
        assert _build([source], out, *extra) == 0, capsys.readouterr().err
        assert _meta(out)["counts"] == reference, name
        assert (out / "shard-00000.bin").read_bytes() == (tmp_path / "ref" / "shard-00000.bin").read_bytes(), name
    capsys.readouterr()


def test_table_format_and_the_public_names():
    from albertlm.data import corpus

    magic = corpus.ARROW_STREAM + b"\x00\x00\x00\x00"
    assert corpus.table_format(Path("d.arrows"), magic) == "arrow"
    assert corpus.table_format(Path("d.stream"), magic, "arrow") == "arrow"
    assert corpus.table_format(Path("d.stream"), magic) is None   # auto: not by its bytes alone
    assert corpus.table_format(Path("d.arrows"), b"the film") is None
    assert ".arrows" in corpus.TABLE_SUFFIXES and callable(corpus.decompressor)
    source = Path(__file__).parents[1] / "src" / "albertlm" / "cli" / "infer_commands.py"
    text = source.read_text(encoding="utf-8")
    assert "corpus._decompressor" not in text and "corpus._ARROW_STREAM" not in text


def test_a_stream_not_arrow_by_its_bytes_is_still_refused(tmp_path, capsys):
    """--format arrow on a file that is no Arrow data at all keeps its one line."""
    (tmp_path / "d.stream").write_text("the film was good\n", encoding="utf-8")
    assert_one_error(capsys, _build([tmp_path / "d.stream"], tmp_path / "out", "--format", "arrow"),
                     "is not an arrow file")
