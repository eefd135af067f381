"""Audit 15 of tokenization and `albertlm data build` on real corpora (../shared/data): literal "[SEP]" in
the text, memory bounds on text without line breaks or blank lines, WikiExtractor files with an unclosed
<doc>, tokenizer training on text8-style input, messages that name the file or say what to do."""
from __future__ import annotations

import json
import re
from pathlib import Path

from albertlm.cli.main import main
from albertlm.data import corpus
from albertlm.data.corpus import CorpusCounts, read_documents, split_sentences
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")


def _documents(path: Path, fmt: str = "auto"):
    counts = CorpusCounts()
    return [d.sentences for d in read_documents([path], fmt, "text", counts)], counts


def _sample_lines(n: int = 12) -> list[str]:
    text = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in text if line.strip()][:n]


# -- 1. literal special-token strings in the corpus are text, as in google's builder -------------------------
def test_tokenizer_special_tokens_as_text_wordpiece_and_transformers5_mode():
    wp = load_tokenizer(shared_path(*ZH_VOCAB))
    text = "the [SEP] token and [MASK] here"
    assert wp.sep_id in wp.encode(text)          # transformers' BertTokenizer parity for `encode` stays
    wp.special_tokens_as_text()
    ids = wp.encode(text)
    assert not {wp.sep_id, wp.mask_id, wp.cls_id} & set(ids)
    assert wp.tokenize(text)[:5] == ["the", "[", "sep", "]", "to"]   # BasicTokenizer: "[" "sep" "]"
    sp = load_tokenizer(shared_path(*SPM), split_added_tokens=True)
    assert sp.sep_id in sp.encode(text)
    sp.special_tokens_as_text()
    assert not {sp.sep_id, sp.mask_id} & set(sp.encode(text))
    plain = load_tokenizer(shared_path(*SPM), split_added_tokens=True)
    for line in _sample_lines(40):                    # user-defined symbols ( ) " - . still split as v5 does
        assert sp.encode(line) == plain.encode(line)


def test_wordpiece_build_does_not_turn_literal_sep_mask_cls_into_special_ids(tmp_path):
    lines = _sample_lines()
    lines[2] = "A tutorial says the [CLS] token comes first and a [SEP] token ends each segment."
    lines[5] = "During pretraining a [MASK] token hides a word, and [PAD] fills the rest."
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["data", "build", "--input", str(tmp_path / "a.txt"), "--tokenizer", str(shared_path(*ZH_VOCAB)),
                 "--out", str(out), "--max-seq-length", "512", "--dupe-factor", "3", "--format", "lines",
                 "--no-progress"]) == 0
    from albertlm.data.loader import PretrainingDataset

    ds = PretrainingDataset(out)
    tok = load_tokenizer(shared_path(*ZH_VOCAB))
    special = {tok.cls_id, tok.sep_id, tok.mask_id, tok.pad_id}
    for i in range(len(ds)):
        record = ds.record(i)
        length, boundary = int(record["length"]), int(record["type_boundary"])
        ids = record["input_ids"][:length].tolist()
        inner = [t for k, t in enumerate(ids) if k not in (0, boundary - 1, length - 1)]
        assert not special & set(inner), f"record {i}: {[tok.id_to_token(t) for t in ids]}"
        targets = record["input_ids"][record["masked_positions"][:int(record["num_masked"])]].tolist()
        assert not special & set(targets)


# -- 2. memory bounds: a raw file without blank lines, a line without line breaks ----------------------------
def _wikitext_without_blank_lines() -> list[str]:
    raw = shared_path("text", "wikitext-2-raw", "wiki.test.raw").read_text(encoding="utf-8")
    return [line.strip() for line in raw.splitlines() if line.strip()]


def test_raw_text_without_blank_lines_is_cut_at_the_document_cap_without_losing_text(tmp_path, monkeypatch):
    lines = _wikitext_without_blank_lines()[:1500]       # ~0.45 MB, all one "paragraph"
    path = tmp_path / "wiki.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    whole = split_sentences(" ".join(lines))
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_CHARS", 100_000)
    monkeypatch.setattr(corpus, "MAX_PARAGRAPH_CHARS", 20_000)
    docs, counts = _documents(path, "raw")
    assert len(docs) >= 4 and counts.documents_split == len(docs) - 1
    assert max(sum(map(len, d)) for d in docs) <= 100_000 + 20_000
    assert [s for d in docs for s in d] == whole     # the same sentences as splitting the whole paragraph


def test_a_line_without_breaks_is_read_in_pieces_at_spaces(tmp_path, monkeypatch):
    words = re.sub(r"[^a-z]+", " ", shared_path("text", "gutenberg", "carroll-alice.txt").read_text().lower())
    text = " ".join(words.split())                     # text8 style: one line, no punctuation
    path = tmp_path / "text8.txt"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 4096)
    docs, counts = _documents(path, "lines")
    sentences = [s for d in docs for s in d]
    assert counts.long_lines_cut == 1 and len(sentences) > 30
    assert max(len(s.encode()) for s in sentences) <= 4096
    assert " ".join(sentences) == text                  # cut at spaces: nothing lost, no word broken


def test_a_chinese_line_without_spaces_is_cut_between_characters(tmp_path, monkeypatch):
    text = re.sub(r"\s+", "", shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8"))
    path = tmp_path / "zh.txt"
    path.write_text(text + "\n" + "第二行。\n", encoding="utf-8")
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 1000)
    docs, counts = _documents(path, "lines")
    sentences = [s for d in docs for s in d]
    assert counts.long_lines_cut == 1 and counts.invalid_utf8_lines == 0
    assert "".join(sentences[:-1]) == text and sentences[-1] == "第二行。"
    assert max(len(s.encode()) for s in sentences) <= 1000


def test_a_long_jsonl_record_is_cut_at_the_document_cap(tmp_path, monkeypatch):
    text = "\n".join(_wikitext_without_blank_lines()[:300])
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": text}) + "\n", encoding="utf-8")
    monkeypatch.setattr(corpus, "MAX_DOCUMENT_CHARS", 20_000)
    docs, counts = _documents(path)
    assert len(docs) > 2 and counts.documents_split == len(docs) - 1
    assert [s for d in docs for s in d] == corpus._text_sentences(text)


# -- 3. WikiExtractor: a <doc> left open is kept and counted, stray text is counted ---------------------------
def test_wikiextractor_unclosed_doc_is_kept_and_counted(tmp_path):
    text = shared_path("text", "wiki_text", "wiki_00").read_text(encoding="utf-8")
    complete, _ = _documents(shared_path("text", "wiki_text", "wiki_00"))
    damaged = text.replace("</doc>\n", "", 1) + "\nstray text after the last document.\n"
    path = tmp_path / "wiki_00"
    path.write_text(damaged, encoding="utf-8")
    docs, counts = _documents(path)
    assert docs == complete                           # "Anarchism" was dropped without a count
    assert counts.unclosed_documents == 1 and counts.lines_outside_documents == 1
    assert "wiki_00 line 116" in counts.examples["unclosed_documents"]


# -- 4. tokenizer training on text8-style input and sentencepiece's messages ----------------------------------
def test_tokenizer_trains_on_a_file_without_line_breaks(tmp_path, capsys):
    words = re.sub(r"[^a-z]+", " ", shared_path("text", "gutenberg", "carroll-alice.txt").read_text().lower())
    path = tmp_path / "text8.txt"
    path.write_text(" ".join(words.split()), encoding="utf-8")   # 140 KB, one line: sentencepiece skipped it
    out = tmp_path / "tok"
    code = main(["tokenizer", "train", "--input", str(path), "--vocab-size", "300", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "sentences over 4192 bytes cut 1" in err
    tok = load_tokenizer(out)
    assert tok.vocab_size == 300 and tok.decode(tok.encode("alice was beginning")) == "alice was beginning"


def test_sentencepiece_training_error_is_its_sentence_not_a_source_location(tmp_path, capsys):
    code = main(["tokenizer", "train", "--input", str(shared_path("text", "sample_text.txt")),
                 "--vocab-size", "30000", "--out", str(tmp_path / "tok")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "failed: Vocabulary size too high (30000). Please set it to a value <=" in err   # as docs promise
    assert ".cc(" not in err and "INTERNAL" not in err
    assert not (tmp_path / "tok").exists()


def test_fit_bytes_cuts_at_spaces_or_between_characters():
    from albertlm.tokenization.sentencepiece import fit_bytes

    assert fit_bytes("ab cd", 3) == ["ab", "cd"]
    assert fit_bytes("北京天安门", 7) == ["北京", "天安", "门"]
    assert fit_bytes("x" * 10, 4) == ["xxxx", "xxxx", "xx"]


# -- 5. messages that name the file or say what to do --------------------------------------------------------
def test_build_summary_names_the_empty_and_the_binary_file(tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_text(shared_path("text", "sample_text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    (inputs / "b.txt").write_bytes("UTF-16 text here. Two sentences.\n".encode("utf-16-le"))
    (inputs / "c.txt").write_text("\n \n", encoding="utf-8")
    code = main(["data", "build", "--input", str(inputs), "--tokenizer", str(shared_path(*SPM)), "--out",
                 str(tmp_path / "out"), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"first of binary files: {inputs / 'b.txt'}: NUL bytes" in err and "UTF-16" in err
    assert f"first of empty files: {inputs / 'c.txt'}" in err


def test_inspect_says_to_pass_tokenizer_when_the_recorded_one_is_gone(tmp_path, capsys):
    import shutil

    tok = tmp_path / "tok"
    tok.mkdir()
    shutil.copy(shared_path(*SPM), tok / "spiece.model")
    out = tmp_path / "out"
    assert main(["data", "build", "--input", str(shared_path("text", "sample_text.txt")), "--tokenizer", str(tok),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress"]) == 0
    shutil.rmtree(tok)
    capsys.readouterr()
    assert_one_error(capsys, main(["data", "inspect", str(out), "-n", "1"]), str(tok), "--tokenizer")
    assert main(["data", "inspect", str(out), "-n", "1", "--tokenizer", str(shared_path(*SPM))]) == 0
