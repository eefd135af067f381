"""Audit 21 of `albertlm data build` as a user with real data: a GLUE/classification .tsv given as pretraining
text was built line by line, header, labels and ids included, without a word; parts copied together without
`word_starts.npy` (or with another build's) failed in dynamic masking with a bare FileNotFoundError (or an
IndexError deep in the masking); a build into a read-only --out was asked "is the disk full?"."""
from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path

import numpy as np
import pytest

import albertlm.data.build as build_module
from albertlm.cli.main import main
from albertlm.data.loader import PretrainingDataset
from albertlm.errors import UserError
from conftest import alice_documents, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


def _build(inputs, out: Path, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress", *extra])


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("albertlm data: warning:")]


# -- 1. a GLUE / classification table is named before it is built as text --------------------------------------
def test_a_glue_tsv_given_as_pretraining_text_is_named_in_one_warning(tmp_path, capsys):
    sentences = [f"The film number {k} was a pleasant surprise for everyone who saw it ." for k in range(30)]
    sst = tmp_path / "train.tsv"
    sst.write_text("sentence\tlabel\n" + "".join(f"{s}\t{k % 2}\n" for k, s in enumerate(sentences)),
                   encoding="utf-8")
    cola = tmp_path / "cola.txt.gz"   # CoLA's layout: no header, the sentence last; compressed, not named .tsv
    cola.write_bytes(gzip.compress("".join(f"gj04\t{k % 2}\t\t{s}\n" for k, s in enumerate(sentences)).encode()))
    text = alice_documents(tmp_path, 60)
    assert _build([text, sst, cola], tmp_path / "out") == 0
    warnings = [w for w in _warnings(capsys.readouterr().err) if "tables" in w]
    assert len(warnings) == 1, warnings
    line = warnings[0]
    assert "2 input file(s)" in line and f"{sst} (2 columns, header: sentence, label)" in line
    assert f"{cola} (4 columns)" in line and str(text) not in line
    assert f"tail -n +2 {sst} | cut -f1" in line   # the text column, its header left out
    assert (tmp_path / "out" / "meta.json").is_file()   # a warning, not a refusal: the build is made


def test_real_glue_files_are_tables_and_real_text_is_not():
    glue = [shared_path("glue", "SST-2", "dev.tsv"), shared_path("glue", "RTE", "val.tsv"),
            shared_path("glue_samples", "MRPC", "train.tsv")]
    text = [shared_path("text", "sample_text.txt"), shared_path("text", "wiki_text", "wiki_00"),
            shared_path("text", "gutenberg", "carroll-alice.txt"), shared_path("text", "zh", "news_zh_1.txt"),
            shared_path("text", "wikitext-2-raw", "wiki.test.raw")]
    found = {path: shape for path, shape in build_module.tabular_inputs(glue + text)}
    assert set(found) == set(glue)
    assert found[glue[0]].header == ["sentence", "label"] and found[glue[0]].text_column == 1
    assert found[glue[1]].header is None and found[glue[1]].columns == 4   # RTE's re-split file has no header
    assert found[glue[2]].header[0] == "Quality"   # MRPC's byte order mark is not part of the column name


def test_tables_are_looked_for_only_where_text_is_read(tmp_path):
    tsv = tmp_path / "a.tsv"
    rows = "A sentence here.\t1\n" * (build_module.TABLE_SNIFF_BYTES // 10)
    tsv.write_text("text\tlabel\n" + rows, encoding="utf-8")
    assert [path for path, _ in build_module.tabular_inputs([tsv])] == [tsv]   # a head cut mid-line still reads
    assert build_module.tabular_inputs([tsv], "jsonl") == []
    one_tab = tmp_path / "prose.txt"   # a stray tab in prose is no table
    one_tab.write_text("It began\twith a tab.\nThen came plain lines.\nAnd more of them.\n", encoding="utf-8")
    assert build_module.tabular_inputs([one_tab]) == []


# -- 2. dynamic masking needs word_starts.npy: a missing or foreign one is one line ------------------------------
@pytest.fixture
def small_build(tmp_path):
    out = tmp_path / "data"
    assert _build([alice_documents(tmp_path, 80)], out, "--num-shards", "1") == 0
    return out


def test_parts_copied_without_word_starts_are_one_line_for_dynamic_masking(small_build):
    (small_build / "word_starts.npy").unlink()
    assert len(PretrainingDataset(small_build)) > 0   # static masks need no word starts
    with pytest.raises(UserError, match="has no word_starts.npy.*copy it along with the shards"):
        PretrainingDataset(small_build, dynamic_masking=True)


@pytest.mark.parametrize("content", ["other vocabulary", "not npy"])
def test_a_foreign_or_damaged_word_starts_file_is_one_line(small_build, content):
    path = small_build / "word_starts.npy"
    if content == "not npy":
        path.write_bytes(b"garbage")
    else:
        np.save(path, np.ones(99, dtype=bool))
    with pytest.raises(UserError, match="word_starts.npy.*rebuild the data"):
        PretrainingDataset(small_build, dynamic_masking=True)


# -- 3. a failed write says why, without guessing a full disk ---------------------------------------------------
@pytest.mark.parametrize("code, said", [(errno.EROFS, "Read-only file system: choose another --out)"),
                                        (errno.ENOSPC, "free some space or choose another --out")])
def test_a_read_only_out_is_not_called_a_full_disk(tmp_path, capsys, monkeypatch, code, said):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(build_module, "_build_into", fail)
    out = tmp_path / "out"
    status = _build([alice_documents(tmp_path, 40)], out)
    err = capsys.readouterr().err
    assert status == 2 and "is the disk full" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"--out {out}: cannot write the data" in lines[0] and said in lines[0], err
    assert not out.exists()
