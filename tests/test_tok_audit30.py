"""Audit 30, tokenization as a user training a SentencePiece model on their own Korean / Chinese / English corpus
(KorNLI, Chinese news, Gutenberg, WikiText) with `albertlm tokenizer train`, loading it in albertlm and in
transformers.

1. A tab-separated table given as training input (KorNLI's `xnli.dev.ko.tsv`: `sentence1 sentence2 gold_label`)
   was trained on as text without a word: its labels became frequent words of the vocabulary (`▁entailment` at
   id 25 of 3,000). `data build` warns about such inputs; the training now says the same, before it starts.
2. The training read each input file's head several times (the checks, the reader's magic bytes, the reader's own
   format guess, and once more for the first file in the emptiness check): `check_inputs`' `FileFacts` are now
   handed to the reader, as `data build` does (each head inspected once).
3. `--strip-accents` on Korean: albertlm and sentencepiece compose the jamo of NFKD back (ids right), but the
   output directory loaded in transformers 5 (`AutoTokenizer.from_pretrained(OUT)`, `AlbertTokenizer`) reads every
   Hangul syllable as <unk>. Only `convert --to hf` said so; the training now says it in one warning line.
"""
from __future__ import annotations

import gzip
import json
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import shared_path
from test_multilingual_audit19 import korean  # noqa: F401  (fixture: KorNLI sentences, one a line)

KORNLI = ("korean", "KorNLI", "xnli.dev.ko.tsv")


def _train(*args) -> int:
    return main(["tokenizer", "train", "--threads", "1", *map(str, args)])


def test_a_tsv_table_given_as_training_text_is_warned_about_before_training(tmp_path, capsys):
    table = tmp_path / "kornli.tsv"
    table.write_text("\n".join(shared_path(*KORNLI).read_text(encoding="utf-8").splitlines()[:400]) + "\n",
                     encoding="utf-8")
    assert _train("--input", table, "--vocab-size", 1000, "--out", tmp_path / "spm") == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "warning:" in line]
    assert len(said) == 1, err
    assert "look like tables of tab-separated columns" in said[0] and "gold_label" in said[0], said[0]
    assert f"tail -n +2 {table} | cut -f1 > text.txt" in said[0], said[0]
    # the column alone: no warning
    text = tmp_path / "ko.txt"
    text.write_text("".join(line.split("\t")[0] + "\n" for line in table.read_text(encoding="utf-8").splitlines()[1:]),
                    encoding="utf-8")
    assert _train("--input", text, "--vocab-size", 800, "--out", tmp_path / "spm2") == 0
    assert "warning:" not in capsys.readouterr().err


def test_each_input_files_head_is_inspected_once(tmp_path, monkeypatch, capsys):
    import albertlm.data.corpus as corpus

    lines = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    (corpus_dir / "a.txt").write_text("\n".join(lines[:80]) + "\n", encoding="utf-8")
    with gzip.open(corpus_dir / "b.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines[80:160]) + "\n")
    (corpus_dir / "c.jsonl").write_text("".join(json.dumps({"text": line}, ensure_ascii=False) + "\n"
                                                for line in lines[160:]), encoding="utf-8")
    inspected: list[str] = []
    real = corpus._inspect

    def spy(path, *args, **kwargs):
        inspected.append(path.name)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(corpus, "_inspect", spy)
    assert _train("--input", corpus_dir, "--vocab-size", 1400, "--character-coverage", 0.9995,
                  "--out", tmp_path / "spm") == 0
    assert sorted(inspected) == ["a.txt", "b.txt.gz", "c.jsonl"], inspected
    assert "213 sentences" in capsys.readouterr().out   # every file read, in its format
    tok = load_tokenizer(tmp_path / "spm")
    assert tok.vocab_size == 1400 and [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id] == [0, 1, 2, 3, 4]


def test_strip_accents_on_korean_says_transformers_reads_it_as_unk(korean, tmp_path, capsys):  # noqa: F811
    assert _train("--input", korean, "--vocab-size", 1000, "--strip-accents", "--out", tmp_path / "stripped") == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "warning:" in line]
    assert len(said) == 1 and "--strip-accents: transformers 5's AlbertTokenizer" in said[0], err
    assert "Hangul pieces of this vocabulary and reads Korean text as <unk>" in said[0], said[0]
    text = "그는 엄마에게 집에 갔다고 말했다."
    ours = load_tokenizer(tmp_path / "stripped")
    assert ours.unk_id not in ours.encode(text)
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "stripped"))
    ids = theirs(text, add_special_tokens=False)["input_ids"]
    assert ids.count(ours.unk_id) >= 5, theirs.convert_ids_to_tokens(ids)   # what the line says
    # without --strip-accents: no line
    assert _train("--input", korean, "--vocab-size", 1000, "--out", tmp_path / "kept") == 0
    assert "warning:" not in capsys.readouterr().err
