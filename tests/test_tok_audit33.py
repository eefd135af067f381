"""Audit 33, tokenizers on real non-English data (../shared/data).

1. WordPiece's alphabet on Korean (KorNLI dev): at V=2000 the alphabet was capped at half the vocabulary (997 of
   the 1,077 characters of the training text), so 89 tokens of the training text itself and 145 of held-out
   Korean were [UNK], with nothing said. Every character of the training text is in the alphabet now where the
   vocabulary holds them (`train_wordpiece`); where the "##" forms of all of them fit too, each gets one, as
   google's WordPiece learner makes them (`complete_continuations`): the `tokenizers` trainer adds "##c" only
   where the text has c inside a word, so 고풍을 (풍 began words only) was one [UNK]. What is left are words with
   a character the training text never had. Where the characters do not fit, a warning says how many are lost
   and which vocabulary size keeps them.
2. Parity with transformers: a byte-fallback SentencePiece model's byte pieces (score 0) were taken for
   user-defined symbols in the transformers-5 mode, so the text "<0x41>" became the byte "A", which neither
   sentencepiece nor transformers gives. BERT's CJK ranges and the newer extensions: our ids are BertTokenizer's.
3. `tokenizer train` failures: the folders made for --out (its missing parents too) are removed again, and a
   WordPiece corpus of nothing but characters BERT's normalizer deletes is an error, not a vocabulary of the five
   special tokens.
"""
from __future__ import annotations

import shutil
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path


def _kornli_split():
    """KorNLI dev's sentences: the first nine tenths of its premise groups for training, the rest held out."""
    rows = [line.split("\t") for line in
            shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    cut = len(rows) * 9 // 10
    while cut < len(rows) and rows[cut][0] == rows[cut - 1][0]:   # a premise's three hypotheses stay together
        cut += 1
    return [s for row in rows[:cut] for s in row[:2]], [s for row in rows[cut:] for s in row[:2]]


def _train(tmp_path, lines, size, name="wp"):
    from albertlm.tokenization.sentencepiece import read_text_lines
    from albertlm.tokenization.wordpiece import WordPieceOptions, train_wordpiece

    corpus = tmp_path / f"{name}.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return train_wordpiece([corpus], size, tmp_path / name, WordPieceOptions(do_lower_case=False, strip_accents=False),
                           show_progress=False, read_lines=read_text_lines)


def _unknown(tok, lines) -> int:
    return sum(row.count(tok.unk_id) for row in tok.encode_batch(lines))


def _unknown_words(tok, lines) -> list[str]:
    """The text of each [UNK] token (a whole word: WordPiece gives one [UNK] for a word it cannot spell)."""
    return [text[a:b] for text, (ids, spans) in zip(lines, tok.encode_batch_with_spans(lines))
            for i, (a, b) in zip(ids, spans) if i == tok.unk_id]


# -- 1. the Korean alphabet --------------------------------------------------------------------------------------
def test_korean_wordpiece_at_2000_keeps_every_character_of_its_training_text(tmp_path):
    """V=2000: was 89 [UNK]s in the training text and 145 in the held-out text; now none and 99."""
    train, held = _kornli_split()
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # everything fits: nothing to warn about
        tok = _train(tmp_path, train, 2000)
    assert tok.vocab_size <= 2000
    assert _unknown(tok, train) == 0
    assert _unknown(tok, held) <= 105


def test_held_out_korean_is_unk_only_where_the_training_text_lacked_a_character(tmp_path):
    """V=3000 (every character with its "##" form fits): was 99 held-out [UNK]s, 34 of them words of known
    syllables (고풍을, 마이크로컴퓨터, 주먹을); now each [UNK] is a word holding a syllable never trained on."""
    train, held = _kornli_split()
    tok = _train(tmp_path, train, 3000)
    known = set("".join(train))
    words = _unknown_words(tok, held)
    assert words and all(any(c not in known for c in word) for word in words), \
        [w for w in words if all(c in known for c in w)]
    assert len(words) <= 70
    for word in ("고풍을", "마이크로컴퓨터", "주먹을"):
        assert tok.unk_id not in tok.encode(word)


def test_a_vocabulary_too_small_for_the_alphabet_says_what_is_lost(tmp_path):
    """V=1500 cannot hold KorNLI's 1,077 characters: one warning with the lost share and the size that keeps
    them; at that size the training text has no [UNK]."""
    train, _ = _kornli_split()
    with pytest.warns(UserWarning, match=r"has room for \d+ of the 1,077 characters of the training text: .* read "
                                         r"as \[UNK\]; .* a vocabulary size \(--vocab-size\) of (\d+) keeps them") as got:
        _train(tmp_path, train, 1500)
    need = int(__import__("re").search(r"of (\d+) keeps them", str(got[0].message)).group(1))
    tok = _train(tmp_path, train, need, name="big")
    assert tok.vocab_size <= need and _unknown(tok, train) == 0


def test_complete_continuations_adds_the_missing_forms_in_the_last_merges_place():
    from albertlm.tokenization.wordpiece import (SPECIAL_TOKENS, WordPieceOptions, build_pipeline,
                                                 complete_continuations)

    backend = build_pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, WordPieceOptions(do_lower_case=False))
    # as the trainer numbers them: specials, alphabet, the "##" forms seen, merges in the order made
    tokens = [*SPECIAL_TOKENS, "a", "b", "c", "中", ".", "##b", "ab", "abc", "##bc"]
    vocab = {t: i for i, t in enumerate(tokens)}
    done = complete_continuations(vocab, backend, len(tokens))
    # "##a" and "##c" added (中 and "." never continue a word), the last two merges dropped for them
    assert set(done) == set(tokens) - {"abc", "##bc"} | {"##a", "##c"}
    assert len(done) == len(tokens)
    assert complete_continuations(vocab, backend, len(tokens) + 2) == {**vocab, "##a": 14, "##c": 15}
    assert complete_continuations(vocab, backend, 9) == vocab     # 5 + 5 characters + 3 forms do not fit


# -- 2. parity with transformers ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def byte_fallback_model(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("bf")
    train, _ = _kornli_split()
    (root / "text.txt").write_text("\n".join(train[:1500]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(root / "text.txt"), model_prefix=str(root / "spiece"), vocab_size=800,
                                   byte_fallback=True, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], character_coverage=0.98,
                                   num_threads=1, minloglevel=2)
    return root


def test_byte_piece_names_in_the_text_are_text_in_the_transformers_mode(byte_fallback_model):
    """"<0x41>" was cut out as the byte piece A ([70]-style, no "▁"): sentencepiece reads its characters."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(byte_fallback_model / "spiece.model"))
    ours = load_tokenizer(byte_fallback_model, split_added_tokens=True, do_lower_case=False, keep_accents=True)
    for text in ("<0x41>", "a<0x41>b", "x <0xE3><0x81><0x82> y", "😀 한국어"):
        assert ours.encode(text) == sp.encode(text), text
    assert ours.encode("[CLS] a")[0] == ours.cls_id          # the control pieces are still matched


EXTENSIONS = [0x3400, 0x20000, 0x2A700, 0x2B740, 0x2B81D, 0x2B820, 0x2B920, 0x2CEB0, 0x2EBF0, 0x30000, 0x31350,
              0xF900, 0x2F800]


def test_cjk_extensions_give_bert_tokenizers_ids(tmp_path):
    """BERT's Chinese-character ranges and the extensions after them (F, G, H, I: words, not split), with the
    albert_zh vocab and the Chinese news: the ids of transformers' BertTokenizer."""
    transformers = pytest.importorskip("transformers")
    shutil.copyfile(shared_path("vocab", "albert_zh_vocab.txt"), tmp_path / "vocab.txt")
    news = [line for line in shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    lines = news + [f"{a}{chr(cp)}{b}" for cp in EXTENSIONS for a, b in (("a", "b"), ("中", "文"), ("", " x"))]
    ours = load_tokenizer(tmp_path)
    theirs = transformers.BertTokenizer.from_pretrained(str(tmp_path))
    assert ours.encode_batch(lines) == theirs(lines, add_special_tokens=False)["input_ids"]


# -- 3. tokenizer train failures -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
@pytest.mark.parametrize("content, phrase", [
    (b"", "training input is empty"),
    ("\u4e2d\u6587\u6587\u672c\u6d4b\u8bd5\n".encode("gbk") * 50, "is not UTF-8 text"),
])
def test_a_failed_training_leaves_no_folders_behind(tmp_path, capsys, kind, content, phrase):
    (tmp_path / "in.txt").write_bytes(content)
    code = main(["tokenizer", "train", "--kind", kind, "--input", str(tmp_path / "in.txt"), "--vocab-size", "100",
                 "--out", str(tmp_path / "new" / "deeper" / "tok")])
    assert_one_error(capsys, code, phrase)
    assert not (tmp_path / "new").exists()


def test_sentencepiece_vocab_size_past_the_corpus_leaves_no_folders_behind(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("one line of text\nand another one\n", encoding="utf-8")
    code = main(["tokenizer", "train", "--input", str(tmp_path / "in.txt"), "--vocab-size", "5000", "--threads", "1",
                 "--out", str(tmp_path / "new" / "tok")])
    assert_one_error(capsys, code, "more than this corpus can fill")
    assert not (tmp_path / "new").exists()


def test_wordpiece_corpus_of_deleted_characters_is_an_error(tmp_path, capsys):
    """Control and zero-width characters and U+FFFD only: was a vocab.txt of the five special tokens, exit 0."""
    (tmp_path / "in.txt").write_text("\x01\x02\n\u200b\n\ufffd\ufffd\n", encoding="utf-8")
    existing = tmp_path / "out"
    existing.mkdir()
    code = main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(tmp_path / "in.txt"), "--vocab-size",
                 "100", "--out", str(existing)])
    assert_one_error(capsys, code, "no text to train on", "only characters BERT's normalizer deletes")
    assert existing.is_dir() and not any(existing.iterdir())   # a folder that was there stays, empty
