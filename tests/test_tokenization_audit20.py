"""Tokenization audit 20, as a user who brings their own tokenizer files and trains on a server: sentencepiece's
own limits (--input-sentence-size 1..100, --threads over 1024, a --vocab-size no trainer takes) as one line
before any input is read, progress lines for a training whose stderr is a log, and the files that sit beside a
tokenizer (sentencepiece's .vocab dump, tokenizer_config.json, a BERT vocab under another name) named for what
they are when given as the tokenizer."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path

ALBERT_MODEL = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    """The non-blank lines of Alice in Wonderland (about 150 kB)."""
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8").splitlines()
    path = tmp_path_factory.mktemp("text") / "alice.txt"
    path.write_text("\n".join(line for line in lines if line.strip()) + "\n", encoding="utf-8")
    return path


def _train(text: Path, out: Path, *extra: str) -> int:
    return main(["tokenizer", "train", "--input", str(text), "--out", str(out), *extra])


def _never_read(path: Path):
    raise AssertionError(f"{path} was read before the options were checked")


@pytest.mark.parametrize("extra, phrase", [
    (["--input-sentence-size", "100"], "--input-sentence-size must be 0 (all sentences) or at least 101"),
    (["--input-sentence-size", "1", "--no-shuffle"], "--input-sentence-size must be 0"),
    (["--threads", "1025"], "--threads must be in [0, 1024]"),
    (["--vocab-size", "5000000000"], "--vocab-size must be in [6, 16,777,216]"),
])
def test_sentencepiece_limits_are_one_line_before_reading(text, tmp_path, capsys, extra, phrase):
    """sentencepiece refused these only after the whole input was read (and sampled), with `INTERNAL:
    src/trainer_interface.cc(102) [trainer_spec.input_sentence_size() <= 0 || ...]`; a vocabulary size over 2**31
    was a ValueError traceback."""
    code = _train(text, tmp_path / "tok", *extra)
    assert_one_error(capsys, code, phrase)
    assert not (tmp_path / "tok").exists()


def test_the_python_api_checks_them_before_reading(tmp_path):
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece
    from albertlm.tokenization.wordpiece import train_wordpiece

    for train in (SentencePieceTrainOptions(vocab_size=300, input_sentence_size=50),
                  SentencePieceTrainOptions(vocab_size=300, num_threads=5000),
                  SentencePieceTrainOptions(vocab_size=2**31)):
        with pytest.raises(UserError):
            train_sentencepiece([tmp_path / "x.txt"], tmp_path / "sp", train, read_lines=_never_read,
                                show_progress=False)
    # the WordPiece trainer reserved the whole vocabulary up front: 5e9 aborted Python with a Rust OOM stack
    with pytest.raises(UserError, match="vocab_size must be in"):
        train_wordpiece([tmp_path / "x.txt"], 5_000_000_000, tmp_path / "wp", read_lines=_never_read,
                        show_progress=False)


def test_a_training_logged_to_a_file_says_how_far_it_is(text, tmp_path, capsys, monkeypatch):
    """Without a terminal (nohup, a batch job) `tokenizer train` printed nothing until it ended, hours later on a
    big corpus: now, once reading has taken PLAIN_PROGRESS_AFTER seconds, a line per tenth of the input and the
    line announcing sentencepiece's silent training phase (a short training stays quiet)."""
    import albertlm.tokenization.sentencepiece as spm_tok

    second = tmp_path / "more.txt"
    shutil.copy(text, second)
    args = ["--input", str(text), str(second), "--vocab-size", "300", "--threads", "1",
            "--input-sentence-size", "1000"]
    monkeypatch.setattr(spm_tok, "PLAIN_PROGRESS_AFTER", 1e9)   # a short reading, however slow the machine is
    assert main(["tokenizer", "train", *args, "--out", str(tmp_path / "quiet")]) == 0
    quiet = capsys.readouterr().err
    assert "tokenizer train: read" not in quiet and "training the unigram model" not in quiet, quiet
    monkeypatch.setattr(spm_tok, "PLAIN_PROGRESS_AFTER", 0.0)
    assert main(["tokenizer", "train", *args, "--out", str(tmp_path / "logged")]) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("tokenizer train: read ")]
    assert progress and all("% of 0.3 MB" in line for line in progress), err
    assert "(a sample of 1,000); training the unigram model (V=300, 1 threads)" in err
    assert "\r" not in err


def _one_line_info(capsys, path: Path, *phrases: str) -> None:
    assert_one_error(capsys, main(["tokenizer", "info", "-t", str(path)]), *phrases)


def test_files_beside_a_tokenizer_are_named_for_what_they_are(tmp_path, capsys):
    """Each was `cannot read X as a SentencePiece model (INTERNAL: could not parse ModelProto from X)`, or for
    tokenizer_config.json `... as a tokenizer.json (expected ',' or '}' at line 2 column 21)`."""
    from albertlm.tokenization import load_tokenizer

    vocab_dump = shared_path("spm", "albert_base_v2_30k-clean.vocab")
    _one_line_info(capsys, vocab_dump, "sentencepiece's text vocabulary", "30k-clean.model")
    load_tokenizer(shared_path(*ALBERT_MODEL)).save(tmp_path / "saved")
    _one_line_info(capsys, tmp_path / "saved" / "tokenizer_config.json", 'no tokenizer "model"', "options only")
    bert = tmp_path / "zh.vocab"
    shutil.copy(shared_path("vocab", "albert_zh_vocab.txt"), bert)
    _one_line_info(capsys, bert, "a BERT WordPiece vocabulary", "ending in .txt")
    # the tokenizers themselves still load; a file that is none of these keeps the parser's words
    assert main(["tokenizer", "info", "-t", str(tmp_path / "saved")]) == 0
    capsys.readouterr()
    (tmp_path / "junk.model").write_bytes(b"\x00\x01 not a model")
    _one_line_info(capsys, tmp_path / "junk.model", "cannot read", "as a SentencePiece model")
