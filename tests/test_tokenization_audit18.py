"""Tokenization audit 18, as a Korean / Chinese user (KorNLI dev, the Chinese news, albert_zh's vocab.txt):
`tokenizer decode` on odd JSON numbers, --character-coverage in sentencepiece's range before any input is read,
Korean user-defined symbols with accent stripping, `encode_batch` given one string, the BPE warning about
transformers 5, and albertlm's own loading warnings as one CLI line."""
from __future__ import annotations

import importlib.util
import io
import sys
import warnings
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path

ALBERT_ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")
CHINESE_NEWS = ("text", "zh", "news_zh_1.txt")


@pytest.fixture(scope="module")
def korean(tmp_path_factory) -> Path:
    """The first 300 sentence pairs of KorNLI dev, one sentence a line."""
    rows = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:301]
    path = tmp_path_factory.mktemp("ko") / "ko.txt"
    path.write_text("".join(f"{a}\n{b}\n" for a, b, *_ in (row.split("\t") for row in rows)), encoding="utf-8")
    return path


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8")), encoding="utf-8"))


def _train(*argv: str) -> int:
    return main(["tokenizer", "train", "--threads", "1", *argv])


@pytest.mark.parametrize("line", ["[" + "9" * 5000 + "]", "[true]", '{"input_ids": [false]}'])
def test_decode_refuses_numbers_that_are_no_ids(line, monkeypatch, capsys):
    """An integer of over 4300 digits was a ValueError traceback (Python's int conversion limit); JSON true and
    false are Python ints, so `[true]` decoded as id 1 (<unk> of a SentencePiece model), exit 0."""
    _stdin(monkeypatch, f"{line}\n")
    code = main(["tokenizer", "decode", "-t", str(shared_path(*ALBERT_ZH_VOCAB))])
    assert_one_error(capsys, code, "stdin line 1", "expected a JSON list of ids in [0, 21128)")


def test_character_coverage_below_sentencepiece_range_is_refused_before_reading(tmp_path, capsys):
    """sentencepiece takes --character-coverage in [0.98, 1] only; 0.9 (a guess for a CJK corpus) passed our
    check and failed after the whole input was read, with its `INTERNAL: ...cc(94) [...]` message."""
    from albertlm.errors import UserError
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    code = _train("--input", str(shared_path(*CHINESE_NEWS)), "--vocab-size", "2000", "--out", str(tmp_path / "zh"),
                  "--character-coverage", "0.9")
    assert_one_error(capsys, code, "--character-coverage must be in [0.98, 1]", "got 0.9")
    with pytest.raises(UserError, match=r"character_coverage must be in \[0.98, 1\]"):   # before the input is read
        train_sentencepiece([tmp_path / "missing.txt"], tmp_path / "api",
                            SentencePieceTrainOptions(vocab_size=100, character_coverage=0.5), show_progress=False)
    assert not (tmp_path / "zh").exists() and not (tmp_path / "api").exists()


def test_a_vocabulary_smaller_than_the_characters_names_our_flags(tmp_path, capsys):
    """sentencepiece's advice named its own spm_train flag (`--character_coverage option`)."""
    code = _train("--input", str(shared_path(*CHINESE_NEWS)), "--vocab-size", "7", "--out", str(tmp_path / "zh"))
    assert_one_error(capsys, code, "smaller than required_chars", "--vocab-size", "--character-coverage (down to 0.98)")


def test_korean_user_defined_symbols_work_with_accent_stripping(korean, tmp_path, capsys):
    """Accent stripping (NFKD) splits "사람" into jamo, which sentencepiece's normalizer composes back, so the
    symbol matches; it was refused as "'사람' is '사람' in preprocessed text ... could never occur"."""
    assert _train("--input", str(korean), "--vocab-size", "1000", "--out", str(tmp_path / "ko"), "--strip-accents",
                  "--lowercase", "--user-defined-symbols", "사람,한국") == 0
    tok = load_tokenizer(tmp_path / "ko")
    assert [tok.token_to_id("사람"), tok.token_to_id("한국")] == [5, 6]
    ids = tok.encode("그 사람은 한국 사람이다")
    assert ids.count(5) == 2 and ids.count(6) == 1
    capsys.readouterr()
    # what accent stripping does change stays refused: が is か after it
    code = _train("--input", str(korean), "--vocab-size", "1000", "--out", str(tmp_path / "ja"), "--strip-accents",
                  "--user-defined-symbols", "が")
    assert_one_error(capsys, code, "'が' is 'か' in preprocessed text")


@pytest.mark.parametrize("path", [ALBERT_ZH_VOCAB, ("spm", "albert-base-v2_spiece.model")])
def test_encode_batch_refuses_one_string_and_names_what_is_not_text(path):
    """`encode_batch("안녕")` encoded each character as a text of its own, without a word; `encode(None)` said
    "argument of type 'NoneType' is not iterable" (or tokenizers' `TextEncodeInput must be Union[...]`)."""
    tok = load_tokenizer(shared_path(*path))
    with pytest.raises(TypeError, match="encode_batch expects a list of texts, got one str"):
        tok.encode_batch("안녕하세요")
    with pytest.raises(TypeError, match=r"texts\[1\] is NoneType, not str"):
        tok.encode_batch(["中文", None])
    with pytest.raises(TypeError, match="encode expects a str, got bytes"):
        tok.encode("한국어".encode())
    assert tok.encode_batch(("中文", "한국어")) == [tok.encode("中文"), tok.encode("한국어")]


def test_bpe_training_warns_that_transformers5_reads_it_as_unigram(korean, tmp_path, capsys):
    """transformers 5's AlbertTokenizer builds a Unigram from any spiece.model: a BPE model gave other ids there
    on most KorNLI lines, while the docs promised our trained models load in it with the same ids."""
    out = tmp_path / "bpe"
    assert _train("--input", str(korean), "--vocab-size", "1000", "--out", str(out), "--model-type", "bpe") == 0
    assert "reads every spiece.model as a unigram model" in capsys.readouterr().err
    if importlib.util.find_spec("transformers") is None:
        return
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = transformers.AlbertTokenizer.from_pretrained(out)
    ours = load_tokenizer(out)
    lines = korean.read_text(encoding="utf-8").splitlines()
    assert ours.encode_batch(lines) == ours.sp.encode(lines)   # sentencepiece's own BPE segmentation
    if int(transformers.__version__.split(".")[0]) >= 5:
        differ = sum(ours.encode(t) != theirs.encode(t, add_special_tokens=False) for t in lines)
        assert differ > len(lines) // 10, differ


def test_a_korean_vocab_warning_is_one_cli_line(tmp_path, monkeypatch, capsys):
    """Loading a Korean vocab.txt with BERT's default accent stripping warns; the CLI printed Python's two-line
    form (our load.py path and its source line) and did not say how to pass the option there."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "vocab.txt").write_text("\n".join(specials + [chr(0xAC00 + i) for i in range(150)]) + "\n",
                                        encoding="utf-8")
    _stdin(monkeypatch, "가나\n")
    assert main(["tokenizer", "encode", "-t", str(tmp_path)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[0].startswith("albertlm tokenizer: warning: ") and "150 Hangul tokens" in err[0] and "-o strip_accents=false" in err[0]
    assert not any("load.py" in line or "return wp_tok" in line for line in err), err
