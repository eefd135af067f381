"""Audit of `albertlm tokenizer train` as a user preparing a new language's tokenizer: a sampled SentencePiece
training is reproducible (same input and --seed, same model bytes, whatever --out), WordPiece keeps the
characters of a CJK corpus and writes its vocabulary in one order, user-defined symbols that cannot work and
WordPiece options that do nothing are one-line errors before any input is read, and the long silent training
phase after reading is announced."""
from __future__ import annotations

from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    """About 1,400 non-blank lines of Alice in Wonderland."""
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:1800]
    path = tmp_path_factory.mktemp("text") / "a.txt"
    path.write_text("\n".join(line for line in lines if line.strip()) + "\n")
    return path


def _train(inputs, out, *extra) -> int:
    return main(["tokenizer", "train", "--input", *map(str, inputs), "--out", str(out), *extra])


def test_a_sampled_training_gives_the_same_model_for_the_same_seed(text, tmp_path, capsys):
    """sentencepiece's reservoir sampler ignored the seed: two runs on more sentences than
    --input-sentence-size gave different models (and the staging path inside the model made even unsampled
    runs into different --out directories differ byte for byte)."""
    sample = ["--vocab-size", "200", "--threads", "1", "--input-sentence-size", "300"]
    assert _train([text], tmp_path / "one", *sample) == 0
    assert _train([text], tmp_path / "two", *sample) == 0
    assert _train([text], tmp_path / "seven", *sample, "--seed", "7") == 0
    first = (tmp_path / "one" / "spiece.model").read_bytes()
    assert (tmp_path / "two" / "spiece.model").read_bytes() == first
    assert (tmp_path / "seven" / "spiece.model").read_bytes() != first     # the seed still picks the sample
    assert b".training-tokenizer" not in first


def test_wordpiece_keeps_the_characters_of_a_chinese_corpus(tmp_path, capsys):
    """The alphabet was capped at min(1000, V/3) characters: 1,395 distinct characters of Chinese news at
    V=3000 left hundreds of Hanzi [UNK] in the tokenizer's own training text."""
    news = shared_path("text", "zh", "news_zh_1.txt")
    assert _train([news], tmp_path / "wp", "--kind", "wordpiece", "--vocab-size", "3000") == 0
    tok = load_tokenizer(tmp_path / "wp")
    assert tok.vocab_size <= 3000
    lines = [line for line in news.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert sum(row.count(tok.unk_id) for row in tok.encode_batch(lines)) == 0


def test_wordpiece_vocab_order_does_not_depend_on_the_process(tmp_path, capsys):
    """The trainer numbers tokens in hash-map order, so the same corpus gave other ids in each run; the
    vocab.txt is now written specials first, then word starts, then "##" pieces, each sorted."""
    news = shared_path("text", "zh", "news_zh_1.txt")
    for name in ("a", "b"):
        assert _train([news], tmp_path / name, "--kind", "wordpiece", "--vocab-size", "3000") == 0
    lines = (tmp_path / "a" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    starts = [t for t in lines[5:] if not t.startswith("##")]
    assert lines[5:] == sorted(starts) + sorted(t for t in lines[5:] if t.startswith("##"))
    assert (tmp_path / "b" / "vocab.txt").read_bytes() == (tmp_path / "a" / "vocab.txt").read_bytes()


@pytest.mark.parametrize("extra, phrase", [
    (["--user-defined-symbols", "x,y,x"], "'x' is given twice"),
    (["--user-defined-symbols", "[MASK]"], "special pieces"),
    (["--user-defined-symbols", "New York"], "whitespace"),
    (["--lowercase", "--user-defined-symbols", "Alice"], "'alice'"),
    (["--strip-accents", "--user-defined-symbols", "café"], "'cafe'"),
    (["--vocab-size", "8", "--user-defined-symbols", "a,b,c"], "no room"),
])
def test_user_defined_symbols_that_cannot_work_are_refused(text, tmp_path, capsys, extra, phrase):
    """Duplicates and special pieces failed with sentencepiece's "INTERNAL:" message; symbols with a space or
    that the preprocessing changes trained fine and stayed dead vocabulary entries no text could produce."""
    code = _train([text], tmp_path / "tok", "--vocab-size", "300", "--threads", "1", *extra)
    assert_one_error(capsys, code, "--user-defined-symbols", phrase)
    assert not (tmp_path / "tok").exists()


def test_albert_symbols_pass_with_albert_preprocessing(text, tmp_path, capsys):
    assert _train([text], tmp_path / "tok", "--vocab-size", "300", "--threads", "1", "--lowercase",
                  "--strip-accents", "--user-defined-symbols", '(,),",-,.,–,£,€') == 0
    assert load_tokenizer(tmp_path / "tok").tokenize("(a)") == ["▁", "(", "a", ")"]


@pytest.mark.parametrize("flag, value", [("--seed", "3"), ("--threads", "1")])
def test_wordpiece_refuses_options_it_ignores(text, tmp_path, capsys, flag, value):
    """The tokenizers trainer has no seed and uses every core: --seed and --threads were accepted and did nothing."""
    code = _train([text], tmp_path / "wp", "--kind", "wordpiece", "--vocab-size", "300", flag, value)
    assert_one_error(capsys, code, flag, "unused by --kind wordpiece")


def test_the_training_phase_after_reading_is_announced(text, tmp_path, capsys):
    """Reading showed a bar that vanished; sentencepiece's training then ran for minutes without a word."""
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    train_sentencepiece([text], tmp_path / "tok", SentencePieceTrainOptions(vocab_size=200, num_threads=1),
                        show_progress=True)
    err = capsys.readouterr().err
    lines = sum(1 for line in text.read_text().splitlines() if line.strip())
    assert f"read {lines:,} sentences; training the unigram model (V=200, 1 threads)" in err
    train_sentencepiece([text], tmp_path / "sampled", SentencePieceTrainOptions(
        vocab_size=200, num_threads=1, input_sentence_size=300), show_progress=True)
    assert f"read {lines:,} sentences (a sample of 300); training" in capsys.readouterr().err
