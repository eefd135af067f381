"""Audit 28 of `albertlm tokenizer train` as a user training their own ALBERT vocabulary: sentences holding
U+2585 ("▅", ASCII-art bars in web text), which sentencepiece's trainer drops whole and says so only in its
info log, are trained with a space in its place and counted; an input of characters sentencepiece's normalizer
deletes is one plain line (it was an `INTERNAL: ...cc(576) [(all_chars_count) > (0)]` line); a vocabulary
size the --input-sentence-size sample cannot fill says to raise the sample (it said the whole corpus was too
small: "train on more text")."""
from __future__ import annotations

import re

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import alice_documents, assert_one_error

RESERVED = "\u2585"


def _train(inputs, out, *extra) -> int:
    return main(["tokenizer", "train", "--input", *map(str, inputs), "--out", str(out), "--threads", "1", *extra])


def test_sentences_holding_the_reserved_bar_are_trained_not_dropped(tmp_path, capsys):
    """sentencepiece skipped every sentence holding ▅ (trainer_interface.cc: 'Reserved chars are found.
    Skipped', at info level, so not even --verbose's warnings said it): the Korean of these lines never reached
    the model and encoded as <unk> only, and the summary counted the lines as trained on."""
    text = alice_documents(tmp_path, 600)
    with text.open("a", encoding="utf-8") as handle:
        for i in range(40):
            handle.write(f"신호 {RESERVED}{RESERVED} 강함 사람들이 모였다 {i}\n")
    assert _train([text], tmp_path / "spm", "--vocab-size", "400") == 0
    err = capsys.readouterr().err
    assert re.search(r"sentences holding U\+2585 ▅ trained with a space for it \(sentencepiece reserves it\) 40\b",
                     err), err
    tok = load_tokenizer(tmp_path / "spm")
    ids = tok.encode("사람들이 모였다")
    assert ids and tok.unk_id not in ids, tok.tokenize("사람들이 모였다")
    assert tok.unk_id in tok.encode(RESERVED)    # the bar itself is still unknown, as it was


def test_an_input_of_deleted_characters_only_is_one_plain_line(tmp_path, capsys):
    """Lines of control characters pass the emptiness check (they are not whitespace) and sentencepiece's
    normalizer deletes them: the error was sentencepiece's `INTERNAL: src/trainer_interface.cc(576)
    [(all_chars_count) > (0)]`, naming nothing; lines of ▅ alone are the same case."""
    (tmp_path / "ctl.txt").write_text("\x01\x02\n\x7f\x01\n", encoding="utf-8")
    assert_one_error(capsys, _train([tmp_path / "ctl.txt"], tmp_path / "a", "--vocab-size", "100"),
                     "no text to train on", "2 sentences read", "only characters its normalizer deletes")
    (tmp_path / "bars.txt").write_text(f"{RESERVED}\n{RESERVED} {RESERVED}\n", encoding="utf-8")
    assert_one_error(capsys, _train([tmp_path / "bars.txt"], tmp_path / "b", "--vocab-size", "100"),
                     "no text to train on", "U+2585")
    for out in ("a", "b"):
        assert not (tmp_path / out).exists()


def test_a_sample_too_small_for_the_vocabulary_says_to_raise_the_sample(tmp_path, capsys):
    """With --input-sentence-size below the corpus, sentencepiece's limit is the sample's: the message said
    'the 1,xxx sentences read give at most N pieces; train on more text' (the corpus read could fill far more)."""
    text = alice_documents(tmp_path, 1200)
    for extra in ((), ("--no-shuffle",)):
        code = _train([text], tmp_path / "spm", "--vocab-size", "8000", "--input-sentence-size", "150", *extra)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, err
        assert "Please set it to a value <=" in err and "more than this sample can fill" in err, err
        assert "raise --input-sentence-size (0 = all)" in err and "train on more text" not in err, err
        assert ("the first 150 sentences (--no-shuffle" if extra else "the 150 sentences sampled of the ") in err, err
