"""Multilingual audit 19, as a Korean and a Chinese user end to end (KorNLI dev, the Chinese news, albert_zh's
vocab.txt): text in a legacy encoding (CP949, GB18030) on `tokenizer encode`'s stdin and as `tokenizer train`
input, `encode --pair` fed KorNLI's three-column TSV, and a Korean SentencePiece model whose normalizer does not
compose Hangul loaded with accent stripping."""
from __future__ import annotations

import gzip
import io
import sys
import warnings
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path

ALBERT_ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")


def _kornli_rows(n: int) -> list[str]:
    """The first `n` rows of KorNLI dev (sentence1 TAB sentence2 TAB gold_label), header left out."""
    return shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]


@pytest.fixture(scope="module")
def korean(tmp_path_factory) -> Path:
    """KorNLI dev's first 300 pairs, one sentence a line, UTF-8."""
    path = tmp_path_factory.mktemp("ko") / "ko.txt"
    path.write_text("".join(f"{a}\n{b}\n" for a, b, _ in (r.split("\t") for r in _kornli_rows(300))),
                    encoding="utf-8")
    return path


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_encode_refuses_stdin_that_is_not_utf8(monkeypatch, capsys):
    """Chinese news saved in GB18030 (or Korean in CP949) on stdin: the bytes became U+FFFD, which BERT's text
    cleaning deletes, so most of each line vanished from the ids, exit 0 (embed and fill-mask refuse it)."""
    vocab = str(shared_path(*ALBERT_ZH_VOCAB))
    news = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()[:3]
    _stdin(monkeypatch, ("\n".join(news) + "\n").encode("utf-8"))
    assert main(["tokenizer", "encode", "-t", vocab]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    _stdin(monkeypatch, news[0].encode("utf-8") + b"\n" + news[1].encode("gb18030") + b"\n")
    assert_one_error(capsys, main(["tokenizer", "encode", "-t", vocab]), "stdin line 2", "not UTF-8", "iconv")


def test_encode_pair_refuses_a_line_with_a_third_column(monkeypatch, capsys):
    """`tail -n +2 xnli.dev.ko.tsv | albertlm tokenizer encode --pair`: the label column ("neutral") was
    encoded into segment B, after a tab, without a word."""
    vocab = str(shared_path(*ALBERT_ZH_VOCAB))
    rows = _kornli_rows(3)
    _stdin(monkeypatch, "".join(r.rsplit("\t", 1)[0] + "\n" for r in rows).encode("utf-8"))
    assert main(["tokenizer", "encode", "-t", vocab, "--pair"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    _stdin(monkeypatch, "".join(r + "\n" for r in rows).encode("utf-8"))
    assert_one_error(capsys, main(["tokenizer", "encode", "-t", vocab, "--pair"]),
                     "stdin line 1", "3 tab-separated fields", "cut -f1,2")


@pytest.mark.parametrize("encoding, compress", [("cp949", False), ("euc-kr", True)])
def test_tokenizer_train_refuses_a_corpus_in_a_legacy_encoding(korean, tmp_path, capsys, encoding, compress):
    """KorNLI sentences saved in CP949 / EUC-KR (as Korean Windows tools do): training read every line as
    U+FFFD and stray Greek or Cyrillic, wrote a useless tokenizer and exited 0 ('invalid utf8 lines 600').
    UTF-8 text with a stray bad byte still trains."""
    text = korean.read_text(encoding="utf-8")
    stray = tmp_path / "stray.txt"
    stray.write_bytes(text.encode("utf-8") + b"\xff\xfe one damaged line\n")
    assert main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(stray), "--vocab-size", "300",
                 "--out", str(tmp_path / "ok")]) == 0
    capsys.readouterr()
    legacy = tmp_path / ("legacy.txt.gz" if compress else "legacy.txt")
    data = text.encode(encoding)
    legacy.write_bytes(gzip.compress(data) if compress else data)
    code = main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(korean), str(legacy),
                 "--vocab-size", "300", "--out", str(tmp_path / "bad")])
    assert_one_error(capsys, code, legacy.name, "not UTF-8", "iconv")
    assert not (tmp_path / "bad").exists()
    # `data build` reads its inputs through the same check (it built data of [UNK] with only a warning)
    code = main(["data", "build", "--input", str(legacy), "--tokenizer", str(tmp_path / "ok"),
                 "--out", str(tmp_path / "data")])
    assert_one_error(capsys, code, legacy.name, "not UTF-8", "iconv")
    assert not (tmp_path / "data").exists()


def test_korean_model_without_hangul_composition_warns_with_accent_stripping(korean, tmp_path):
    """A Korean spiece.model trained with sentencepiece's identity rule, loaded as a bare file (transformers'
    defaults: keep_accents=False): NFKD split every syllable into jamo, which it has no pieces for, so Korean
    was all <unk>, without a word (the WordPiece loader warns in the same case)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(korean), model_prefix=str(tmp_path / "ko"), vocab_size=600, normalization_rule_name="identity",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=1,
        minloglevel=2)
    with pytest.warns(UserWarning, match="keep_accents=True"):
        stripped = load_tokenizer(tmp_path / "ko.model")
    assert set(stripped.encode("그리고 그가 말했다")) <= {stripped.unk_id, stripped.token_to_id("▁")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = load_tokenizer(tmp_path / "ko.model", keep_accents=True)
        assert kept.decode(kept.encode("그리고 그가 말했다")) == "그리고 그가 말했다"
