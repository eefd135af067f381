"""Reading documents: formats, sentence splitting, document boundaries, undecodable bytes."""
from __future__ import annotations

from pathlib import Path

from albertlm.data.corpus import CorpusCounts, detect_format, read_documents, split_sentences
from conftest import shared_path


def test_split_sentences_keeps_abbreviations_initials_and_quotes():
    text = 'Mr. Smith went to Washington. He said "Hi!" Then J. R. R. Tolkien wrote, e.g. books. 你好。再见！'
    assert split_sentences(text) == ["Mr. Smith went to Washington.", 'He said "Hi!"',
                                     "Then J. R. R. Tolkien wrote, e.g. books.", "你好。", "再见！"]
    assert split_sentences("no end in sight") == ["no end in sight"]
    assert split_sentences("  ") == []


def test_each_file_ends_a_document(tmp_path: Path):
    (tmp_path / "a.txt").write_text("One.\nTwo.\n\n\n\nThree.")  # no blank line at the end
    (tmp_path / "b.txt").write_text("Four.\n")
    counts = CorpusCounts()
    docs = list(read_documents([tmp_path / "a.txt", tmp_path / "b.txt"], "lines", counts=counts))
    assert [d.sentences for d in docs] == [["One.", "Two."], ["Three."], ["Four."]]
    assert [d.index for d in docs] == [0, 1, 2] and counts.documents == 3


def test_formats_are_detected(tmp_path: Path):
    assert detect_format(Path("x.jsonl"), b'{"text": "a"}') == "jsonl"
    assert detect_format(Path("wiki_00"), b'<doc id="1" title="A">\nA\n') == "wikiextractor"
    assert detect_format(Path("a.txt"), b"One sentence.\nAnother one.\n") == "lines"
    assert detect_format(Path("a.txt"), b"One sentence. And another. Third.\nMore here. Yes.\n") == "raw"


def test_wikiextractor_documents_drop_the_repeated_title():
    docs = list(read_documents([shared_path("text", "wiki_text", "wiki_00")]))
    assert len(docs) >= 2 and docs[0].sentences[0].startswith("Anarchism is a political philosophy")


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path):
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 au lait.\nfine.\n")
    counts = CorpusCounts()
    (doc,) = read_documents([tmp_path / "bad.txt"], "lines", counts=counts)
    assert doc.sentences[0] == "caf\ufffd au lait." and counts.invalid_utf8_lines == 1
