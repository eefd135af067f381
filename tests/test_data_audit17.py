"""Audit 17 of `albertlm data build` and its corpus readers, on the real data of ../shared/data: the progress bar
reached 100% while the last chunks were still being built (it counted the bytes read, and the reader runs ahead
of the work); raw Greek, Cyrillic or Polish text was never cut into sentences (only Latin capitals started one);
files under a symbolic link to a directory were skipped without a word; a pipe given as input was "not found";
a quoted glob pattern was "not found" too."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")


def _build(inputs, out: Path, *extra: str, tokenizer=SPM) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*tokenizer)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress", *extra])


def _meta(out: Path) -> dict:
    return json.loads((out / "meta.json").read_text())


# -- 1. the progress bar follows the work, not the reader -----------------------------------------------------
class _RecordingBar:
    """Stands in for tqdm: keeps its position (tqdm keeps none when disabled)."""

    bars: list["_RecordingBar"] = []

    def __init__(self, *args, total=None, **kwargs):
        self.total, self.n, self.closed = total, 0, False
        _RecordingBar.bars.append(self)

    def update(self, n=1):
        self.n += n

    def set_postfix_str(self, *args, **kwargs):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def refresh(self, *args, **kwargs):
        pass

    def close(self):
        self.closed = True


@pytest.mark.parametrize("workers", [1, 2])
def test_the_progress_bar_reaches_100_percent_only_when_the_build_is_done(tmp_path, monkeypatch, workers):
    import tqdm

    from albertlm.data import build as build_module

    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8")
    lines = text.splitlines()[:600]
    corpus = tmp_path / "alice.txt"       # six documents: blank lines every 100 lines
    corpus.write_text("\n".join(line if k % 100 else "" for k, line in enumerate(lines, 1)) + "\n")
    size = corpus.stat().st_size
    _RecordingBar.bars = []
    monkeypatch.setattr(tqdm, "tqdm", _RecordingBar)
    positions: list[tuple[str, int]] = []
    real_write, real_close = build_module.ShardWriter.write, build_module.ShardWriter.close

    def write(self, records):
        positions.append(("write", _RecordingBar.bars[-1].n))
        return real_write(self, records)

    def close(self):
        positions.append(("close", _RecordingBar.bars[-1].n))
        return real_close(self)

    monkeypatch.setattr(build_module.ShardWriter, "write", write)
    monkeypatch.setattr(build_module.ShardWriter, "close", close)
    assert main(["data", "build", "--input", str(corpus), "--tokenizer", str(shared_path(*SPM)), "--out",
                 str(tmp_path / "out"), "--max-seq-length", "64", "--dupe-factor", "1", "--format", "lines",
                 "--chunk-chars", "3000", "--workers", str(workers)]) == 0
    bar = _RecordingBar.bars[-1]
    writes = [n for kind, n in positions if kind == "write"]
    assert bar.total == size and len(writes) >= 4, positions
    # when a chunk's records are being written, the bar shows the chunks before it done, never the whole input
    assert writes[0] == 0, positions
    assert writes == sorted(writes) and len(set(writes)) == len(writes), positions   # it moves with each chunk
    assert max(n for _, n in positions) < size, positions      # not 100% while the last shard is not closed
    assert bar.n == size and bar.closed                         # and 100% at the end
    assert _meta(tmp_path / "out")["num_instances"] > 0


# -- 2. raw text in Greek, Cyrillic or Polish was never split into sentences -----------------------------------
def test_raw_text_is_split_before_capitals_of_every_script_and_keeps_their_initials():
    from albertlm.data.corpus import split_sentences

    assert split_sentences("Привет, мир. Как дела? Всё хорошо.") == ["Привет, мир.", "Как дела?", "Всё хорошо."]
    assert split_sentences("Είναι καλά. Ναι, πολύ.") == ["Είναι καλά.", "Ναι, πολύ."]
    assert split_sentences("Byłem w domu. Łódź jest duża. Ćma leci.") == [
        "Byłem w domu.", "Łódź jest duża.", "Ćma leci."]
    assert split_sentences("Поэт А. С. Пушкин родился в Москве. Это известно.") == [
        "Поэт А. С. Пушкин родился в Москве.", "Это известно."]          # Cyrillic initials stay
    assert split_sentences("He left. 그는 갔다. 彼は行った。Then.") == ["He left.", "그는 갔다.", "彼は行った。", "Then."]
    # unchanged: lowercase, abbreviations and Latin initials do not end a sentence
    assert split_sentences("It costs 3.5 dollars. ok then. Mr. Smith and J. R. R. Tolkien met. 3 cats.") == [
        "It costs 3.5 dollars. ok then.", "Mr. Smith and J. R. R. Tolkien met.", "3 cats."]
    # the real data: the Greek capital Mu that starts a sentence of the WikiExtractor sample
    from albertlm.data.corpus import read_documents

    sentences = [s for doc in read_documents([shared_path("text", "wiki_text", "wiki_00")]) for s in doc.sentences]
    greek = [k for k, s in enumerate(sentences) if s.startswith("\u039cilitant black bloc")]
    assert len(greek) == 1 and sentences[greek[0] - 1].endswith("Mexico or Greece.")


# -- 3. files under a symbolic link to a directory were skipped without a word ---------------------------------
def test_a_directory_reads_the_files_under_its_links_to_directories(tmp_path, capsys):
    from albertlm.data.corpus import find_input_files

    elsewhere = tmp_path / "disk2" / "wiki"
    elsewhere.mkdir(parents=True)
    (elsewhere / "wiki_00").write_bytes(shared_path("text", "wiki_text", "wiki_00").read_bytes())
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "sample.txt").write_bytes(shared_path("text", "sample_text.txt").read_bytes())
    (corpus / "wiki").symlink_to(elsewhere, target_is_directory=True)      # the usual way to gather a corpus
    (corpus / "wiki" / "again").symlink_to(corpus, target_is_directory=True)  # a loop is not followed
    assert find_input_files([corpus]) == [corpus / "sample.txt", corpus / "wiki" / "wiki_00"]
    assert _build([corpus], tmp_path / "out") == 0
    meta = _meta(tmp_path / "out")
    assert meta["inputs"] == [str(corpus / "sample.txt"), str(corpus / "wiki" / "wiki_00")]
    assert meta["counts"]["corpus"]["formats"] == {"lines": 1, "wikiextractor": 1}
    assert "warning" not in capsys.readouterr().err


# -- 4. a pipe given as input was "not found" ---------------------------------------------------------------
def test_a_pipe_as_input_is_named_as_such_not_as_missing(tmp_path, capsys):
    import os

    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)
    assert_one_error(capsys, _build([fifo], tmp_path / "out"), str(fifo), "not a file or a directory", "pipe",
                     "write it to a file first")
    assert not (tmp_path / "out").exists()


# -- 5. a quoted glob pattern (google's builder takes them; a shell cannot pass a million names) ----------------
def test_a_quoted_glob_pattern_gives_the_files_it_matches(tmp_path, capsys):
    from albertlm.errors import UserError
    from albertlm.data.corpus import find_input_files

    wiki = shared_path("text", "wiki_text", "wiki_00").read_bytes()
    for name in ("AA/wiki_00", "AA/wiki_01", "AB/wiki_00", "AB/notes.md", "AB/.hidden_wiki_02"):
        path = tmp_path / "extracted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(wiki if "wiki" in name else b"not the corpus\n")
    root = tmp_path / "extracted"
    assert find_input_files([f"{root}/*/wiki_*"]) == [root / "AA/wiki_00", root / "AA/wiki_01", root / "AB/wiki_00"]
    assert find_input_files([f"{root}/**"]) == [root / "AA/wiki_00", root / "AA/wiki_01", root / "AB/notes.md",
                                                 root / "AB/wiki_00"]     # each file once, hidden ones left out
    with pytest.raises(UserError, match="no file matches the pattern .*/nothing_\\*"):
        find_input_files([f"{root}/*/nothing_*"])
    assert _build([f"{root}/A?/wiki_0[01]"], tmp_path / "out") == 0
    assert len(_meta(tmp_path / "out")["inputs"]) == 3 and "warning" not in capsys.readouterr().err
