"""CLI audit 25, as a demanding user of export, convert, embed, fill-mask, info and data outside training:
warning lines had four forms (`albertlm: warning:`, `albertlm <cmd>: warning:`, `warning:`, and the model loader's
bare logged message); `--input -data.txt` said only argparse's "expected one argument"; `export onnx --out x.onnx/`
and `embed --out e.npy/` wrote a file named like the folder; `--out -` (and convert's DST `-`) made a folder or file
named '-'; convert and export wrote a model's config.json into a training run's directory (every command given the
run then read that copy, not the run's checkpoints); a failed export, or an embedding stopped half-way, left the
folders made for --out behind, empty."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained
from test_cliargs_audit23 import _exit_code


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """conftest's tiny AlbertForPreTraining with its vocab.txt (read only by the tests)."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def run_dir(tiny, tmp_path) -> Path:
    """A pretraining run's directory: its only checkpoint is the tiny model."""
    run = tmp_path / "run"
    shutil.copytree(tiny, run / "checkpoints" / "step_2")
    return run


def _texts(tmp_path: Path) -> Path:
    path = tmp_path / "-data.txt"           # a name starting with '-'
    path.write_text("the film was good\nthe plot was bad\n", encoding="utf-8")
    return path


def _console(monkeypatch, *argv: str) -> int:
    """The console command (`albertlm ...`: main() reading sys.argv), in this process."""
    monkeypatch.setattr(sys, "argv", ["albertlm", *argv])
    return main()


# -- one form of warning line ----------------------------------------------------------------------------------
def test_the_model_loaders_logged_warning_is_a_warning_line_of_the_command(tiny, tmp_path, monkeypatch, capsys):
    """A config.json missing a field logs a warning; the console printed the bare message, unlike every other
    warning and error line (`albertlm fill-mask: error: ...`)."""
    old = tmp_path / "old"
    shutil.copytree(tiny, old)
    config = json.loads((old / "config.json").read_text())
    config.pop("always_project_embeddings")
    (old / "config.json").write_text(json.dumps(config))
    assert _console(monkeypatch, "fill-mask", str(old), "the [MASK] was good", "--top-k", "1") == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "always_project_embeddings" in line]
    assert len(said) == 1 and said[0].startswith("albertlm fill-mask: warning: "), said


def test_convert_says_the_loaders_notes_in_its_summary_only(tiny, tmp_path, monkeypatch, capsys):
    """convert collects the loader's notes for its summary: the console's log handler must not say them again."""
    old = tmp_path / "old"
    shutil.copytree(tiny, old)
    config = json.loads((old / "config.json").read_text())
    config.pop("always_project_embeddings")
    (old / "config.json").write_text(json.dumps(config))
    assert _console(monkeypatch, "convert", str(old), str(tmp_path / "hf"), "--to", "hf") == 0
    captured = capsys.readouterr()
    assert "always_project_embeddings" in captured.out
    assert "always_project_embeddings" not in captured.err, captured.err


def test_a_warning_line_names_the_command_as_its_error_line_does(capsys):
    from albertlm.errors import program_named, say_warning, warning_line

    assert warning_line("x\n  y") == "albertlm: warning: x y"        # outside the CLI
    with program_named("albertlm export"):
        say_warning("the ONNX outputs differ")
    assert capsys.readouterr().err == "albertlm export: warning: the ONNX outputs differ\n"
    assert warning_line("z") == "albertlm: warning: z"               # restored


# -- a value starting with '-' -----------------------------------------------------------------------------------
def test_a_value_starting_with_a_dash_is_told_how_to_give_it(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _texts(tmp_path)
    code = _exit_code(["embed", str(tiny), "--input", "-data.txt", "--out", "e.npy"])
    assert_one_error(capsys, code, "argument --input: expected one argument", "write --input=-data.txt")
    code = _exit_code(["data", "build", "--input", "-data.txt", "--tokenizer", str(tiny), "--out", "d"])
    assert_one_error(capsys, code, "expected at least one argument", "write --input=-data.txt")
    # the hint's spelling works
    assert main(["embed", str(tiny), "--input=-data.txt", "--out", "e.npy", "--no-progress"]) == 0
    capsys.readouterr()
    # a missing value (the next word is an option of the command) gets no hint
    code = _exit_code(["embed", str(tiny), "--input", "--out", "e2.npy"])
    assert_one_error(capsys, code, "argument --input: expected one argument")
    assert not (tmp_path / "e2.npy").exists()


# -- outputs named like folders, '-' -----------------------------------------------------------------------------
def test_export_onnx_out_dot_onnx_slash_is_refused_not_written_as_a_file(tiny, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "x.onnx"
    code = main(["export", "onnx", str(tiny), "--out", f"{out}/", "--no-verify"])
    assert_one_error(capsys, code, "a name ending in .onnx is the file to write", "'/'")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_embed_out_dot_npy_slash_is_refused_not_written_as_a_file(tiny, tmp_path, capsys):
    out = tmp_path / "e.npy"
    code = main(["embed", str(tiny), "--input", str(_texts(tmp_path)), "--out", f"{out}/"])
    assert_one_error(capsys, code, "embed writes one .npy file", "'/'")
    assert not out.exists()


def test_out_dash_and_convert_dst_dash_are_refused(tiny, tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime")
    monkeypatch.chdir(tmp_path)
    code = _exit_code(["export", "onnx", str(tiny), "--out", "-", "--no-verify"])
    assert_one_error(capsys, code, "argument --out: '-' is not stdout here")
    code = main(["convert", str(tiny), "-", "--to", "hf"])
    assert_one_error(capsys, code, "DST -: convert writes a directory")
    assert not (tmp_path / "-").exists()


# -- a training run's directory is no output ------------------------------------------------------------------
def test_convert_into_the_run_it_reads_is_refused(run_dir, capsys):
    code = main(["convert", str(run_dir), str(run_dir), "--to", "hf"])
    assert_one_error(capsys, code, "training run's directory", "checkpoints/", str(run_dir / "converted"))
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints"]
    assert main(["convert", str(run_dir), str(run_dir / "converted"), "--to", "hf"]) == 0   # what it suggests
    capsys.readouterr()


def test_export_onnx_into_a_run_directory_is_refused(run_dir, capsys):
    pytest.importorskip("onnxruntime")
    code = main(["export", "onnx", str(run_dir), "--out", str(run_dir), "--no-verify"])
    assert_one_error(capsys, code, "--out", "training run's directory", "checkpoints/")
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints"]


# -- nothing left after a failure ----------------------------------------------------------------------------
def test_a_failed_export_leaves_no_folders_it_made(tiny, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    bad = tmp_path / "bad"
    shutil.copytree(tiny, bad)
    (bad / "model.safetensors").write_bytes((tiny / "model.safetensors").read_bytes()[:1000])   # truncated
    for out in (tmp_path / "new" / "sub" / "m.onnx", tmp_path / "new" / "sub" / "serving"):
        code = main(["export", "onnx", str(bad), "--out", str(out), "--no-verify"])
        assert_one_error(capsys, code, "model.safetensors")
        assert not (tmp_path / "new").exists()


def test_an_embedding_stopped_half_way_leaves_no_folders_it_made(tiny, tmp_path, monkeypatch, capsys):
    from albertlm.tasks import inference

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(inference, "embed_texts", stopped)
    out = tmp_path / "new" / "sub" / "e.npy"
    assert main(["embed", str(tiny), "--input", str(_texts(tmp_path)), "--out", str(out), "--no-progress"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_convert_given_a_file_of_a_model_names_its_directory(tiny, tmp_path, capsys):
    """`convert model/config.json out` said "not a model (no config.json, ...)" of the config.json itself."""
    code = main(["convert", str(tiny / "config.json"), str(tmp_path / "out"), "--to", "hf"])
    assert_one_error(capsys, code, "a file of a model directory", f"({tiny})")
    assert not (tmp_path / "out").exists()
