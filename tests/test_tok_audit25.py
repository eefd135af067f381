"""Audit 25, tokenization as a Korean / Japanese / Chinese pretraining user, against the oracles (transformers'
AlbertTokenizer and BertTokenizer, sentencepiece).

Accent stripping (ALBERT's `keep_accents=false`: NFKD + dropping combining characters; BERT's `strip_accents`:
NFD + dropping nonspacing marks) also drops the voiced sound marks of kana, which are combining characters:
"データ" is read as "テータ", "パソコン" as "ハソコン". google, transformers 4 and 5 do the same, so the ids stay
theirs, but nothing said so: a Japanese model trained with spm_train (no stripping) loaded bare, a Japanese
vocab.txt loaded with BERT's defaults, or `tokenizer train --strip-accents` on Japanese (or, for WordPiece, on
Korean: jamo) lost them without a word. They now warn, as the Hangul cases already did."""
from __future__ import annotations

import random
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import shared_path
from test_journey_ja_audit21 import CORPUS as JAPANESE
from test_multilingual_audit19 import korean  # noqa: F401  (fixture: KorNLI sentences, one a line)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# hiragana with its voiced (が) and semi-voiced (ぱ) forms
KANA = "あいうえおかきくけこがぎぐげごさしすせそざじずぜぞたちつてとだぢづでどなにぬねのはひふへほばびぶべぼぱぴぷぺぽまみむめもらりるれろ"


@pytest.fixture(scope="module")
def japanese_spm(tmp_path_factory):
    """A Japanese unigram model trained the way Japanese users train theirs (sentencepiece itself, its defaults:
    no accent stripping), with ALBERT's special pieces, in a directory without tokenizer_config.json (so it is
    loaded with google's and transformers' default, keep_accents=false), on text written without spaces."""
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("ja_spm")
    rng = random.Random(0)
    words = ["".join(rng.choice(KANA) for _ in range(rng.randint(2, 4))) for _ in range(400)]
    (root / "corpus.txt").write_text("".join("".join(rng.choice(words) for _ in range(8)) + "\n"
                                             for _ in range(2000)), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / "spiece"),
                                   vocab_size=600, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=1, minloglevel=2)
    return root


def _cli(*argv) -> int:
    return main([str(a) for a in argv])


def test_a_japanese_model_loaded_with_accent_stripping_warns(japanese_spm):
    with pytest.warns(UserWarning, match=r"pieces with voiced kana .* drops their sound marks \(ガ -> カ, パ -> ハ\)"
                                         r".*keep_accents=True"):
        stripped = load_tokenizer(japanese_spm)
    assert stripped.encode("ぱぴぷ") == stripped.encode("はひふ")     # what the warning is about
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = load_tokenizer(japanese_spm, keep_accents=True)
    assert kept.encode("ぱぴぷ") != kept.encode("はひふ")
    assert kept.decode(kept.encode("がぎぐぱぴぷ")) == "がぎぐぱぴぷ"


def test_the_stripped_ids_are_transformers_own(japanese_spm):
    """The warning changes no id: transformers' AlbertTokenizer (keep_accents=false by default) drops the
    marks as well, and keep_accents=True gives its ids with keep_accents=True."""
    transformers = pytest.importorskip("transformers")
    texts = ["がぎぐげござじずぜぞ", "ぱぴぷぺぽ", "ばびぶべぼだぢづでど"]
    for keep in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = load_tokenizer(japanese_spm, keep_accents=keep)
            theirs = transformers.AlbertTokenizer.from_pretrained(str(japanese_spm), keep_accents=keep)
        assert ours.encode_batch(texts) == [theirs(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_a_japanese_vocab_txt_read_with_berts_defaults_warns(tmp_path):
    tokens = [a + b for a in "がぎぐげごぱぴぷぺぽ" for b in "あいうえおかきくけこ"]
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIALS + tokens) + "\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"100 tokens with voiced kana .* write \{\"strip_accents\": false\}"):
        stripped = load_tokenizer(tmp_path / "vocab.txt")
    assert stripped.encode("がく") == [stripped.unk_id]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = load_tokenizer(tmp_path / "vocab.txt", strip_accents=False)
    assert kept.encode("がく") == [kept.vocab["がく"]]
    transformers = pytest.importorskip("transformers")
    theirs = transformers.BertTokenizer.from_pretrained(str(tmp_path))
    assert theirs("がく", add_special_tokens=False)["input_ids"] == [stripped.unk_id]


@pytest.mark.parametrize("kind, extra", [("sentencepiece", ["--threads", 1]), ("wordpiece", [])])
def test_training_japanese_with_strip_accents_warns(tmp_path, kind, extra):
    (tmp_path / "ja.txt").write_text("\n".join(JAPANESE * 3) + "\n", encoding="utf-8")
    train = ["tokenizer", "train", "--kind", kind, "--input", tmp_path / "ja.txt", *extra]
    with pytest.warns(UserWarning, match=r"dropped the sound marks of the voiced kana in 54 of the 60 sentences "
                                         r".*train Japanese without it"):   # (it leaves fewer characters)
        assert _cli(*train, "--vocab-size", 136, "--strip-accents", "--out", tmp_path / "stripped") == 0
    assert not any(c in "".join(load_tokenizer(tmp_path / "stripped").id_to_token(i) for i in range(136))
                   for c in "ガデパバブ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # (since session 33 a vocabulary too small for every character says so: not the warning this test is about)
        warnings.filterwarnings("ignore", message="the vocabulary of")
        assert _cli(*train, "--vocab-size", 150, "--out", tmp_path / "kept") == 0


def test_wordpiece_training_with_strip_accents_on_korean_says_it_makes_jamo(korean, tmp_path):  # noqa: F811
    with pytest.warns(UserWarning, match=r"split the Hangul syllables of 600 of the 600 sentences into jamo.*"
                                         r"train Korean without it"):
        assert _cli("tokenizer", "train", "--kind", "wordpiece", "--input", korean, "--vocab-size", 1000,
                    "--strip-accents", "--out", tmp_path / "wp") == 0
    with warnings.catch_warnings():   # SentencePiece's normalizer composes the jamo back: nothing lost
        warnings.simplefilter("error")
        assert _cli("tokenizer", "train", "--input", korean, "--vocab-size", 1000, "--threads", 1,
                    "--strip-accents", "--out", tmp_path / "sp") == 0


def test_cjk_extension_e_is_split_as_transformers_does_not_as_google(tmp_path):
    """tokenizers' BertNormalizer (transformers 5's BertTokenizer and BertTokenizerFast) leaves U+2B820-U+2B91F
    unsplit (its range starts at U+2B920; google's _is_chinese_char at U+2B820). We give transformers' ids, as
    docs/tokenization.md says; google's Python (transformers' BertTokenizerLegacy) splits them."""
    transformers = pytest.importorskip("transformers")
    vocab = shared_path("vocab", "albert_zh_vocab.txt")
    ours = load_tokenizer(vocab)
    (tmp_path / "vocab.txt").write_bytes(vocab.read_bytes())
    theirs = transformers.BertTokenizer.from_pretrained(str(tmp_path))
    for text in ["a\U0002B820b", "中\U0002B91F国", "x\U0002B920y", "a\U0002B81Fb"]:
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"], text
    assert ours.encode("a\U0002B820b") == [ours.unk_id]   # one word: [UNK] for the whole of it
    assert ours.encode("a\U0002B920b") == [ours.vocab["a"], ours.unk_id, ours.vocab["b"]]
