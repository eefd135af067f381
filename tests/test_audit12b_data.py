"""Audit 12b of `albertlm data build` / `albertlm tokenizer train` on awkward real-world input: byte order
marks, option limits, counts that were doubled or wrong, WikiExtractor titles with HTML entities."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.data import corpus
from albertlm.data.build import BuildConfig
from albertlm.data.corpus import CorpusCounts, read_documents
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
BOM = b"\xef\xbb\xbf"


def _documents(path: Path, fmt: str = "auto"):
    counts = CorpusCounts()
    return [d.sentences for d in read_documents([path], fmt, "text", counts)], counts


# -- a UTF-8 byte order mark (Notepad, Excel "CSV UTF-8", PowerShell) ----------------------------------------
def test_bom_jsonl_keeps_its_first_record(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(BOM + b'{"text": "First doc. It has two sentences."}\n{"text": "Second doc. Also two."}\n')
    docs, counts = _documents(path)
    assert counts.bad_json_lines == 0
    assert docs == [["First doc.", "It has two sentences."], ["Second doc.", "Also two."]]
    corpus.check_inputs([path], "auto", "text")  # the pre-build check reads the first record too


def test_bom_jsonl_wrong_field_is_still_refused_before_the_build(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(BOM + b'{"body": "First doc."}\n')
    with pytest.raises(UserError, match="no field 'text'"):
        corpus.check_inputs([path], "auto", "text")


def test_bom_wikiextractor_file_is_detected_and_split_into_documents(tmp_path):
    path = tmp_path / "wiki_00"
    path.write_bytes(BOM + b'<doc id="1" url="u" title="Alpha">\nAlpha\n\nAlpha is first. It is a letter.\n</doc>\n'
                           b'<doc id="2" url="u" title="Beta">\nBeta\n\nBeta is second. It follows.\n</doc>\n')
    docs, counts = _documents(path)
    assert counts.formats == {"wikiextractor": 1}
    assert docs == [["Alpha is first.", "It is a letter."], ["Beta is second.", "It follows."]]


def test_bom_crlf_lines_file_has_no_bom_in_its_text(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(BOM + b"First line here.\r\nSecond line here.\r\n\r\nOther doc.\r\n")
    docs, _ = _documents(path, "lines")
    assert docs == [["First line here.", "Second line here."], ["Other doc."]]


def test_bom_compressed_jsonl(tmp_path):
    import gzip

    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(gzip.compress(BOM + b'{"text": "One. Two."}\n'))
    docs, counts = _documents(path)
    assert docs == [["One.", "Two."]] and counts.bad_json_lines == 0


# -- WikiExtractor titles with HTML entities ----------------------------------------------------------------
def test_wikiextractor_escaped_title_line_is_dropped(tmp_path):
    path = tmp_path / "wiki_01"
    path.write_text('<doc id="7" url="u" title="AT&amp;T">\nAT&T\n\nAT&T is a company. It sells phones.\n</doc>\n',
                    encoding="utf-8")
    docs, _ = _documents(path)
    assert docs == [["AT&T is a company.", "It sells phones."]]


# -- documents_split counts only real splits ----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["lines", "raw"])
def test_documents_split_not_counted_at_the_end_of_a_file(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_CHARS", 50)
    path = tmp_path / "a.txt"
    path.write_text("A sentence that is long enough to pass the cap by itself alone.\n", encoding="utf-8")
    docs, counts = _documents(path, fmt)
    assert len(docs) == 1 and counts.documents_split == 0
    path.write_text("A sentence that is long enough to pass the cap by itself alone.\n\nMore text follows.\n",
                    encoding="utf-8")
    docs, counts = _documents(path, fmt)
    assert len(docs) == 2 and counts.documents_split == 1


# -- option limits ------------------------------------------------------------------------------------------
def _build(tmp_path, *extra) -> int:
    return main(["data", "build", "--input", str(shared_path("text", "sample_text.txt")), "--tokenizer",
                 str(shared_path(*SPM)), "--out", str(tmp_path / "out"), "--dupe-factor", "1", "--no-progress",
                 *extra])


@pytest.mark.parametrize("extra, phrase", [
    (["--num-shards", "0"], "--num-shards must be >= 1"),
    (["--chunk-chars", "0"], "--chunk-chars must be >= 1"),
    (["--chunk-chars", "-5"], "--chunk-chars must be >= 1"),
    (["--records-per-shard", "0"], "--records-per-shard must be >= 1"),
    (["--records-per-shard", "-1"], "--records-per-shard must be >= 1"),
    (["--max-seq-length", "16", "--max-predictions-per-seq", "17"], "--max-predictions-per-seq must be <="),
])
def test_out_of_range_options_are_one_line_errors(tmp_path, capsys, extra, phrase):
    shared_path(*SPM)
    assert_one_error(capsys, _build(tmp_path, *extra), phrase)
    assert not (tmp_path / "out").exists()


def test_default_prediction_cap_never_exceeds_a_tiny_max_seq_length():
    assert BuildConfig(inputs=["x"], tokenizer="t", out="o", max_seq_length=8).max_predictions_per_seq == 8
    assert BuildConfig(inputs=["x"], tokenizer="t", out="o", max_seq_length=19).max_predictions_per_seq == 19
    assert BuildConfig(inputs=["x"], tokenizer="t", out="o", max_seq_length=128).max_predictions_per_seq == 20
    assert BuildConfig(inputs=["x"], tokenizer="t", out="o", max_seq_length=512).max_predictions_per_seq == 77


def test_tiny_max_seq_length_build_is_readable(tmp_path, capsys):
    shared_path(*SPM)
    assert _build(tmp_path, "--max-seq-length", "8") == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["data", "inspect", str(tmp_path / "out"), "-n", "2"]) == 0, capsys.readouterr().err
    assert main(["data", "stats", str(tmp_path / "out"), "--json"]) == 0, capsys.readouterr().err
    from albertlm.data.loader import PretrainingDataset

    ds = PretrainingDataset(tmp_path / "out")
    assert len(ds) > 100 and ds.meta["max_predictions_per_seq"] == 8


# -- tokenizer train: counts are not doubled by the emptiness check -----------------------------------------
@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_tokenizer_train_counts_each_skip_once(tmp_path, capsys, kind):
    (tmp_path / "empty.txt").write_text("")
    lines = "".join(f"Sentence number {i} has some words in it, like apple{i % 7}.\n" for i in range(200))
    (tmp_path / "bad.txt").write_bytes(b"good text \xff\xfe bad bytes.\n" + lines.encode())
    code = main(["tokenizer", "train", "--kind", kind, "--input", str(tmp_path / "empty.txt"),
                 str(tmp_path / "bad.txt"), "--vocab-size", "50", "--out", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "empty files 1," in err and "invalid utf8 lines 1" in err and "lines 2" not in err


def test_tokenizer_train_bom_jsonl_reads_the_first_record(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    records = [json.dumps({"text": f"Record {i} says hello to the world. Then it waves."}) for i in range(50)]
    path.write_bytes(BOM + "\n".join(records).encode() + b"\n")
    code = main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(path), "--vocab-size", "60",
                 "--out", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "bad json lines" not in err


# -- inspect refuses a tokenizer with another vocabulary ----------------------------------------------------
def test_inspect_with_another_vocabulary_is_refused(tmp_path, capsys):
    assert _build(tmp_path, "--max-seq-length", "64") == 0
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in
                                                ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]))
    capsys.readouterr()
    code = main(["data", "inspect", str(tmp_path / "out"), "-n", "1", "--tokenizer", str(tmp_path / "vocab.txt")])
    assert_one_error(capsys, code, "has another vocabulary", "V=7", "V=30000")
    assert main(["data", "inspect", str(tmp_path / "out"), "-n", "1", "--tokenizer", str(shared_path(*SPM))]) == 0


def test_text_files_beside_parquet_files_are_named_in_a_warning(tmp_path, capsys):
    """A directory with Parquet files reads only those (a Hub dataset's README/JSON are not text); a .txt
    the user put beside them used to be skipped without a word."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from albertlm.data.corpus import find_input_files

    directory = tmp_path / "ds"
    directory.mkdir()
    pq.write_table(pa.table({"text": ["one sentence here.", "another one here."]}), directory / "s.parquet")
    (directory / "README.md").write_text("# a dataset card\n")
    assert find_input_files([directory]) == [directory / "s.parquet"]
    assert capsys.readouterr().err == ""
    (directory / "notes.txt").write_text("my own text\n")
    assert find_input_files([directory]) == [directory / "s.parquet"]
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "notes.txt" in err and "--input" in err
