"""Audit 29 follow-ups of `albertlm data build` on corpora of very many files (docs/data.md, "Scale (audit 29)").

Found: every input file's head was read three times and more (`check_inputs`, the table check, and the reader, which
guessed each text file's format again): about eight opens and two format guesses a text file, most of the time of a
build of many small files. The checks now hand what they learned on (`FileFacts`): two opens and one guess a file, the
same documents, counts and bytes. And meta.json listed every input file (786 KB for 19,000 files, every training
process reads it): a build of more than META_INPUTS_LISTED files records the --input arguments, the file count and a
digest of the list instead."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.cli.main import main
from albertlm.data.corpus import CorpusCounts, check_inputs, find_input_files, read_documents
from conftest import shared_path
from test_corpus_formats import alice_paragraphs
from test_databuild_audit29 import _build, _small_files


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> list[Path]:
    """Small inputs of every kind the reader tells apart: lines, raw, WikiExtractor, JSONL (by name and by content),
    CSV, gzip, UTF-16, a tab-separated table, Parquet, an empty file, a binary one, a gzip file damaged at once."""
    root = tmp_path_factory.mktemp("every_kind")
    paragraphs = alice_paragraphs()[:120]
    shutil.copy(shared_path("text", "sample_text.txt"), root / "a_lines.txt")
    (root / "b_raw.txt").write_text("\n\n".join(" ".join(paragraphs[k:k + 4]) for k in range(0, 40, 4)) + "\n")
    shutil.copy(shared_path("text", "wiki_text", "wiki_00"), root / "c_wiki_00")
    (root / "d.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in paragraphs[40:60]))
    (root / "e_wiki_json").write_text("".join(json.dumps({"id": k, "text": p}) + "\n"
                                              for k, p in enumerate(paragraphs[60:80])))
    (root / "f.csv").write_text("id,text\n" + "".join(f'{k},"{p}"\n' for k, p in enumerate(paragraphs[80:90])))
    (root / "g_lines.txt.gz").write_bytes(gzip.compress((root / "a_lines.txt").read_bytes()))
    (root / "h_utf16.txt").write_bytes("\n".join(paragraphs[90:100]).encode("utf-16"))
    (root / "i_table.tsv").write_text("sentence\tlabel\n" + "".join(f"{p}\t{k % 2}\n"
                                                                    for k, p in enumerate(paragraphs[100:110])))
    pq.write_table(pa.table({"text": paragraphs[110:120]}), root / "j.parquet")
    (root / "k_empty.txt").write_bytes(b"")
    (root / "l_binary.bin").write_bytes(bytes(range(256)) * 8)
    (root / "m_broken.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    return sorted(root.iterdir())


def _documents(files, **kwargs) -> tuple[list[list[str]], dict]:
    counts = CorpusCounts()
    documents = [doc.sentences for doc in read_documents(files, counts=counts, **kwargs)]
    return documents, counts.__dict__


# -- 1. each file's head is read once ----------------------------------------------------------------------
def test_the_reader_takes_what_the_checks_learned_and_reads_the_same(every_kind):
    facts = check_inputs(every_kind, "auto", "text", [])
    assert len(facts) == len(every_kind)
    by_name = {path.name: found for path, found in zip(every_kind, facts)}
    assert by_name["e_wiki_json"].format == "jsonl" and by_name["h_utf16.txt"].encoding == "UTF-16LE"
    assert by_name["j.parquet"].table == "parquet" and by_name["g_lines.txt.gz"].compression == "gz"
    assert by_name["k_empty.txt"].skipped[0] == "empty_files" and by_name["m_broken.gz"].skipped[0] == "corrupt_files"
    assert by_name["i_table.tsv"].columns is not None and by_name["a_lines.txt"].columns is None
    # the same documents and counts (formats, skips and their examples) as a reader that looks at each file itself
    mine, counts = _documents(every_kind, facts=facts)
    assert (mine, counts) == _documents(every_kind)
    assert counts["formats"] == {"lines": 3, "raw": 2, "wikiextractor": 1, "jsonl": 2, "csv": 1, "parquet": 1}
    assert {"empty_files", "binary_files", "corrupt_files", "transcoded_files"} <= set(counts["examples"])
    with pytest.raises(ValueError):
        next(read_documents(every_kind, facts=facts[1:]))


def test_the_table_warning_takes_what_the_checks_learned(every_kind):
    from albertlm.data.build import tabular_inputs

    facts = check_inputs(every_kind, "auto", "text", [])
    found = tabular_inputs(every_kind, "auto", facts)
    assert [(path.name, shape.columns, shape.header) for path, shape in found] == [
        ("i_table.tsv", 2, ["sentence", "label"])]
    assert found == tabular_inputs(every_kind)   # the same as reading each head here
    assert tabular_inputs(every_kind, "jsonl", facts) == []


def test_plain_text_files_share_one_facts_object():
    """Facts for a million files are a list of pointers, not a million objects."""
    corpus = Path(shared_path("text", "gutenberg"))
    facts = check_inputs(find_input_files([corpus]), "auto", "text", [])
    assert len(facts) == 5 and len({id(found) for found in facts}) == 1


def test_a_build_opens_each_text_file_twice_and_guesses_its_format_once(tmp_path, monkeypatch):
    """Before: eight opens of each text file (the checks' magic, encoding and format heads, the table check's two,
    the reader's magic, head and lines) and two format guesses."""
    import builtins

    import albertlm.data.build as build_module
    import albertlm.data.corpus as corpus

    files = sorted(_small_files(tmp_path / "corpus", 6).iterdir())
    (tmp_path / "corpus" / "t.jsonl").write_text(json.dumps({"text": "One sentence. And another one."}) + "\n")
    files.append(tmp_path / "corpus" / "t.jsonl")
    opened, guessed = Counter(), Counter()

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).parent == tmp_path / "corpus":
            opened[Path(file).name] += 1
        return builtins.open(file, *args, **kwargs)
    real_detect = corpus.detect_format

    def counting_detect(path, head):
        guessed[Path(path).name] += 1
        return real_detect(path, head)
    for module in (corpus, build_module):
        monkeypatch.setattr(module, "open", counting_open, raising=False)
    monkeypatch.setattr(corpus, "detect_format", counting_detect)
    assert _build([tmp_path / "corpus"], tmp_path / "out") == 0
    assert set(opened) == {path.name for path in files}
    assert max(opened.values()) == 2, opened       # the checks' one read of its head, the reader's of its lines
    assert max(guessed.values()) == 1, guessed


# -- 2. meta.json of a build of many files ------------------------------------------------------------------
def _meta(out: Path) -> dict:
    return json.loads((out / "meta.json").read_text(encoding="utf-8"))


def _digest(files) -> str:
    return hashlib.sha256("".join(f"{f}\n" for f in files).encode()).hexdigest()


def test_meta_records_the_input_arguments_count_and_digest_and_lists_few_files(tmp_path):
    corpus = _small_files(tmp_path / "corpus", 3)
    files = [str(path) for path in sorted(corpus.iterdir())]
    assert _build([corpus], tmp_path / "out") == 0
    meta = _meta(tmp_path / "out")
    assert meta["inputs"] == files                 # a few files: listed as before
    assert meta["input_arguments"] == [str(corpus)]
    assert meta["num_input_files"] == 3 and meta["inputs_sha256"] == _digest(files)
    # the same files named one by one: another --input, the same files and digest
    assert _build(files, tmp_path / "again") == 0
    again = _meta(tmp_path / "again")
    assert again["input_arguments"] == files and again["inputs_sha256"] == meta["inputs_sha256"]
    assert _build(files[:2], tmp_path / "fewer") == 0
    assert _meta(tmp_path / "fewer")["inputs_sha256"] != meta["inputs_sha256"]


def test_a_build_of_many_files_does_not_list_them_in_meta(tmp_path, monkeypatch, capsys):
    """Before: meta.json listed every file (786 KB for 19,000 files, ~40 MB for a million), read by every training
    process and pickled into DataLoader workers."""
    import albertlm.data.build as build_module
    from albertlm.data.loader import PretrainingDataset
    from albertlm.data.shards import read_meta

    monkeypatch.setattr(build_module, "META_INPUTS_LISTED", 4, raising=False)   # as if it were 1,000
    corpus = _small_files(tmp_path / "corpus", 5)
    files = [str(path) for path in sorted(corpus.iterdir())]
    assert _build([corpus], tmp_path / "out") == 0
    meta = _meta(tmp_path / "out")
    assert "inputs" not in meta, meta["inputs"]
    assert meta["num_input_files"] == 5 and meta["input_arguments"] == [str(corpus)]
    assert meta["inputs_sha256"] == _digest(files)
    assert len(PretrainingDataset(tmp_path / "out")) == meta["num_instances"] > 0   # read as any build
    # parts of a --num-shards build record the same and merge (their inputs are not compared)
    for index in range(2):
        assert _build([corpus], tmp_path / "parts", "--num-shards", "2", "--shard-index", str(index)) == 0
    merged = read_meta(tmp_path / "parts")
    assert merged["num_input_files"] == 5 and "inputs" not in merged
    assert main(["data", "stats", str(tmp_path / "parts")]) == 0
    capsys.readouterr()
