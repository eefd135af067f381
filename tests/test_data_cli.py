"""`albertlm data build|inspect|stats` through `main(argv)`: formats, bad input, exit codes, one-line errors."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main
from conftest import shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


def _build(inputs, out, *extra) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress", *extra])


def _one_line_error(capsys, code, pattern):
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert pattern in err


def test_missing_path_is_a_one_line_error(tmp_path, capsys):
    _one_line_error(capsys, _build([tmp_path / "nope.txt"], tmp_path / "out"), "input not found")


def test_directory_without_files_is_an_error(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    _one_line_error(capsys, _build([tmp_path / "in"], tmp_path / "out"), "no files found")


def test_only_empty_input_is_an_error_not_an_empty_output(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n\n  \n")
    _one_line_error(capsys, _build([tmp_path / "empty.txt", tmp_path / "blank.txt"], tmp_path / "out"),
                    "no instances were built")
    assert not (tmp_path / "out" / "meta.json").exists()


def test_bad_inputs_are_skipped_and_counted(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "one.txt").write_text("\n\nA document of one sentence only.\n\n\n\n")
    (tmp_path / "bad.txt").write_bytes(b"Broken \xff\xfe bytes in this line.\nAnd a fine second line.\n")
    (tmp_path / "huge.txt").write_text("word " * 2_000_000 + "\n")  # a single 10 MB line
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02" * 100)
    code = _build(sorted(tmp_path.glob("*.*")), tmp_path / "out", "--max-seq-length", "512")
    err = capsys.readouterr().err
    assert code == 0, err
    for phrase in ("empty files 1", "binary files 1", "invalid utf8 lines 1", "long sentences cut"):
        assert phrase in err
    assert main(["data", "stats", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_instances"] > 3000 and summary["build_counts"]["corpus"]["documents"] == 3
    assert main(["data", "inspect", str(tmp_path / "out"), "-n", "2"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("label") == 2 and "[CLS]" in shown and "→" in shown


def test_existing_output_needs_overwrite(tmp_path, capsys):
    text = shared_path("text", "sample_text.txt")
    assert _build([text], tmp_path / "out") == 0
    capsys.readouterr()
    _one_line_error(capsys, _build([text], tmp_path / "out"), "--overwrite")
    assert _build([text], tmp_path / "out", "--overwrite") == 0


@pytest.mark.parametrize("task", ["sop", "nsp", "none"])
def test_wikiextractor_jsonl_and_tasks(tmp_path, capsys, task):
    wiki = shared_path("text", "wiki_text", "wiki_00")
    records = [{"text": "First sentence here. Second one follows! A third? Yes.\nNew paragraph now."}] * 20
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{broken\n")
    assert _build([wiki, tmp_path / "docs.jsonl"], tmp_path / "out", "--sentence-task", task) == 0
    err = capsys.readouterr().err
    assert "wikiextractor: 1" in err and "jsonl: 1" in err and "bad json lines 1" in err
    assert main(["data", "stats", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    labels = summary["labels"]
    if task == "none":
        assert list(labels) == ["-100"]
    else:
        assert set(labels) == {"0", "1"} and abs(labels["0"] - labels["1"]) < 0.15 * summary["num_instances"]
    assert 0.14 < summary["mask_rate"] < 0.17


def test_stats_of_a_non_build_is_an_error(tmp_path, capsys):
    _one_line_error(capsys, main(["data", "stats", str(tmp_path)]), "no meta.json")


def test_wordpiece_vocab_and_chinese_text(tmp_path, capsys):
    code = main(["data", "build", "--input", str(shared_path("text", "zh", "news_zh_1.txt")), "--tokenizer",
                 str(shared_path("vocab", "albert_zh_vocab.txt")), "--out", str(tmp_path / "zh"),
                 "--max-seq-length", "128", "--dupe-factor", "2", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert main(["data", "stats", str(tmp_path / "zh"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["num_instances"] > 100 and 0.14 < summary["mask_rate"] < 0.16
