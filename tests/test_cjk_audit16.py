"""Audit 16, a Korean / Chinese user's journey: tokenizer export to transformers, tokenizer encode on stdin,
and their own classification labels."""
from __future__ import annotations

import io
import json
import sys
import unicodedata

import pytest

from albertlm.cli.main import main
from conftest import shared_path


def _korean_lines(n: int) -> list[str]:
    rows = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [cell for row in rows[:n] for cell in row.split("\t")[:2]]


@pytest.fixture(scope="module")
def korean_spm(tmp_path_factory):
    """A small SentencePiece model trained on KorNLI sentences (as `albertlm tokenizer train` does)."""
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    root = tmp_path_factory.mktemp("ko")
    corpus = root / "ko.txt"
    corpus.write_text("\n".join(_korean_lines(600)) + "\n", encoding="utf-8")
    train_sentencepiece([corpus], root / "spm", SentencePieceTrainOptions(vocab_size=1200, num_threads=1),
                        show_progress=False)
    return root / "spm"


def _run(argv, monkeypatch, capsys, stdin: bytes):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("keep_accents", [True, False])
def test_the_exported_tokenizer_json_gives_our_ids_on_decomposed_hangul(korean_spm, keep_accents):
    """Korean text in NFD (macOS), or Hangul that accent stripping (NFKD) decomposed, became <unk> in the
    exported tokenizer.json (`tokenizers`' Precompiled does not recompose a 9-byte jamo syllable), where our
    tokenizer (sentencepiece's normalizer) reads the syllables."""
    pytest.importorskip("tokenizers")
    from albertlm.interop.hf import tokenizer_pipeline
    from albertlm.tokenization import load_tokenizer

    ours = load_tokenizer(korean_spm, keep_accents=keep_accents)
    pipeline, why_not = tokenizer_pipeline(ours)
    assert why_not is None
    lines = _korean_lines(40)
    texts = lines + [unicodedata.normalize("NFD", line) for line in lines]
    expected = ours.encode_batch(texts)
    got = [e.ids for e in pipeline.encode_batch(texts, add_special_tokens=False)]
    assert [list(ids) for ids in expected] == got
    assert ours.unk_id not in got[len(lines)]   # the NFD line is read, not <unk>


def test_convert_warns_when_transformers5_would_turn_hangul_into_unk(korean_spm, tmp_path, capsys, tiny_config):
    """A `--strip-accents` Korean tokenizer exported silently: transformers 5's AlbertTokenizer rebuilds the
    normalizer and encodes every Hangul syllable as <unk>. The convert summary now says so, once; a model kept
    with its accents gets no warning."""
    pytest.importorskip("tokenizers")
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    config = ModelConfig(**{**tiny_config.__dict__, "vocab_size": 1200})
    src = tmp_path / "src"
    AlbertForPreTraining(config).save_pretrained(src)
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    (stripped / "spiece.model").write_bytes((korean_spm / "spiece.model").read_bytes())
    data = json.loads((korean_spm / "tokenizer_config.json").read_text())
    (stripped / "tokenizer_config.json").write_text(json.dumps({**data, "keep_accents": False}))
    code = main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(stripped / "spiece.model")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "transformers 5's AlbertTokenizer" in out + err and "<unk>" in out + err
    code = main(["convert", str(src), str(tmp_path / "hf2"), "--to", "hf", "--tokenizer",
                 str(korean_spm / "spiece.model")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "transformers 5's AlbertTokenizer" not in out + err


def test_encode_keeps_a_carriage_return_inside_its_line(korean_spm, monkeypatch, capsys):
    """`tokenizer encode` promises one list per stdin line; a lone "\\r" inside a line (a spreadsheet cell)
    was read as a line end, so that line gave two lists and every later list was one line off."""
    code, out, err = _run(["tokenizer", "encode", "-t", str(korean_spm)], monkeypatch, capsys,
                          "엄마\r저 왔어요\r\n한국어\n".encode())
    assert code == 0, err
    lists = [json.loads(line) for line in out.splitlines()]
    assert len(lists) == 2
    code, out2, _ = _run(["tokenizer", "encode", "-t", str(korean_spm)], monkeypatch, capsys, "한국어\n".encode())
    assert lists[1] == json.loads(out2)


def test_encode_says_when_text_became_unk(korean_spm, monkeypatch, capsys):
    """Emoji and Han in a Korean vocabulary are <unk>, which decode drops: the characters vanished without a
    word. encode now reports them on stderr (stdout unchanged)."""
    code, out, err = _run(["tokenizer", "encode", "-t", str(korean_spm)], monkeypatch, capsys,
                          "한국어\n안녕 😀 中文\n".encode())
    assert code == 0, err
    assert len(out.splitlines()) == 2
    assert "<unk>" in err and "1 of 2 lines" in err and "line 2" in err
    code, _, err = _run(["tokenizer", "encode", "-t", str(korean_spm)], monkeypatch, capsys, "한국어\n".encode())
    assert code == 0 and "<unk>" not in err


def test_decomposed_korean_labels_are_the_same_class(tmp_path):
    """A dev file written on macOS (labels in NFD) failed with "label '모순' is not in the label set ['모순',
    ...]", two spellings that look the same; labels are now compared in NFC."""
    from albertlm.tasks.classify import Columns, label_ids, label_set, read_examples

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    train.write_text("".join(json.dumps({"t": t, "label": label}, ensure_ascii=False) + "\n"
                             for t, label in [("가", "모순"), ("나", "중립"), ("다", "함의")]), encoding="utf-8")
    dev.write_text("".join(json.dumps({"t": t, "label": unicodedata.normalize("NFD", label)}, ensure_ascii=False)
                           + "\n" for t, label in [("라", "중립"), ("마", "모순")]), encoding="utf-8")
    columns = Columns(text="t")
    labels = label_set(read_examples(train, columns))
    assert label_ids(read_examples(dev, columns), labels) == [1, 0]
    # a label set given in NFD (--labels, an older task.json) matches NFC data the same way
    nfd = [unicodedata.normalize("NFD", label) for label in labels]
    assert label_ids(read_examples(train, columns), label_set([], nfd)) == [0, 1, 2]
