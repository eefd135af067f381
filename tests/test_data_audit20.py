"""Audit 20 of `albertlm data build` as a user with real corpora: JSON lines not named `.jsonl` (WikiExtractor
`--json` writes them to `wiki_00`, other tools to `.ndjson`) were built as raw text, JSON syntax, keys and URLs
included; a build in a log (nohup, a batch scheduler) said nothing until its summary, however long it ran; an
archive of text files (`corpus.tar.gz`, `corpus.zip`) was skipped with the advice to convert UTF-16 text."""
from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

import albertlm.data.build as build_module
from albertlm.cli.main import main
from albertlm.data.corpus import CorpusCounts, check_inputs, detect_format, read_documents
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


def _build(inputs, out: Path, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "32", "--dupe-factor", "1", *extra])


def _wikiextractor_json(path: Path, articles: int, words: int = 12) -> Path:
    """What `WikiExtractor --json` writes: one JSON object per line (id, url, title, text), in `AA/wiki_00`."""
    records = [{"id": str(k), "url": f"https://en.wikipedia.org/wiki?curid={k}", "title": f"Article {k}",
                "text": " ".join(["Its text runs on here."] * words) + f"\nThe end of article {k}."}
               for k in range(articles)]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


# -- 1. JSON lines are JSON lines whatever the file is called --------------------------------------------------
@pytest.mark.parametrize("name", ["wiki_00", "dump.ndjson", "records.txt"])
def test_json_lines_not_named_jsonl_are_read_as_records(tmp_path, name):
    path = _wikiextractor_json(tmp_path / name, 5)
    counts = CorpusCounts()
    docs = list(read_documents([path], "auto", "text", counts))
    assert counts.formats == {"jsonl": 1}
    assert len(docs) == 5 and docs[0].sentences[-1] == "The end of article 0."
    assert not any("curid" in sentence or '"title"' in sentence for doc in docs for sentence in doc.sentences)
    with pytest.raises(UserError, match="no field 'body'"):      # a wrong --text-field fails before the build
        check_inputs([path], "auto", "body")


def test_a_first_json_record_longer_than_the_sniffed_head_is_still_json_lines_and_text_is_text(tmp_path):
    path = _wikiextractor_json(tmp_path / "wiki_00", 2, words=4000)     # ~90 KB a record
    assert detect_format(path, path.read_bytes()[:1 << 16]) == "jsonl"
    docs = list(read_documents([path]))
    assert len(docs) == 2 and docs[1].sentences[-1] == "The end of article 1."
    # text that only looks like JSON is still text
    lines = b"{ This is not JSON. }\nA plain sentence.\nAnother plain sentence.\n"
    assert detect_format(tmp_path / "a.txt", lines) == "lines"
    assert detect_format(tmp_path / "a.txt", b'{"a": 1}\nPlain text one.\nPlain text two.\n') == "lines"


def test_a_build_of_wikiextractor_json_output_has_no_json_in_it(tmp_path, capsys):
    source = tmp_path / "text" / "AA"
    source.mkdir(parents=True)
    _wikiextractor_json(source / "wiki_00", 6)
    assert _build([tmp_path / "text"], tmp_path / "out", "--no-progress") == 0
    assert "(jsonl: 1)" in capsys.readouterr().err
    assert main(["data", "inspect", str(tmp_path / "out"), "-n", "40"]) == 0
    shown = capsys.readouterr().out
    assert "▁its ▁text" in shown and "cur" not in shown and "title" not in shown


# -- 2. progress in a log ---------------------------------------------------------------------------------
def _alice_in_documents(path: Path, documents: int, lines: int = 40) -> Path:
    """The first lines of Alice in Wonderland, `lines` sentences a document (blank lines between)."""
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8").splitlines()
    path.write_text("\n\n".join("\n".join(text[k * lines:(k + 1) * lines]) for k in range(documents)) + "\n",
                    encoding="utf-8")
    return path


def test_a_long_build_in_a_log_prints_plain_progress_lines(tmp_path, capsys, monkeypatch):
    inputs = [_alice_in_documents(tmp_path / "alice.txt", 20)]
    monkeypatch.setattr(build_module, "PLAIN_PROGRESS_AFTER", 0.0, raising=False)   # as if it ran for long
    assert _build(inputs, tmp_path / "out", "--chunk-chars", "4000") == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("data build: ")]
    assert len(lines) >= 3, lines
    assert all("% of" in line and "of input" in line and "instances" in line and "\r" not in line for line in lines)
    percents = [int(line.split(": ")[1].split("%")[0]) for line in lines]
    assert percents == sorted(set(percents)) and percents[-1] <= 90
    # --no-progress: none; nor a short build (the default wait)
    assert _build(inputs, tmp_path / "quiet", "--chunk-chars", "4000", "--no-progress") == 0
    assert "data build: " not in capsys.readouterr().err
    monkeypatch.setattr(build_module, "PLAIN_PROGRESS_AFTER", 1e9, raising=False)
    assert _build(inputs, tmp_path / "short", "--chunk-chars", "4000") == 0
    assert "data build: " not in capsys.readouterr().err


# -- 3. an archive is named as one ------------------------------------------------------------------------
def test_an_archive_of_text_files_is_named_with_what_to_do(tmp_path, capsys):
    text = shared_path("text", "sample_text.txt").read_bytes()
    with tarfile.open(tmp_path / "corpus.tar.gz", "w:gz") as archive:
        info = tarfile.TarInfo("corpus/sample_text.txt")
        info.size = len(text)
        archive.addfile(info, io.BytesIO(text))
    with zipfile.ZipFile(tmp_path / "corpus.zip", "w") as archive:
        archive.writestr("corpus/sample_text.txt", text)
    code = _build([tmp_path / "corpus.tar.gz"], tmp_path / "out", "--no-progress")
    assert_one_error(capsys, code, "no instances were built", "corpus.tar.gz: a tar archive", "extract it")
    counts = CorpusCounts()
    assert list(read_documents([tmp_path / "corpus.zip"], counts=counts)) == []
    assert counts.binary_files == 1 and "a zip archive: unzip it" in counts.examples["binary_files"]
    assert "UTF-16" not in counts.examples["binary_files"]
