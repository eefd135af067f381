"""Tokenization findings of the seventeenth session's audit (parity with the reference tokenizers on the real
text of ../shared/data): decode equals the reference decode of each SentencePiece mode (transformers 4's stripped
text by default, transformers 5's Metaspace text with `split_added_tokens`), and text holding surrogate code
points (a JSONL "\\ud83d" escape cut from its pair) is encoded, trained on and built into data instead of
crashing in sentencepiece or `tokenizers`."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import shared_path

# Real lines (SST-2 train, RACE dev middle/13 question, KorNLI dev, Gutenberg austen-emma, Chinese news) whose
# first or last piece is <unk>: decode drops it and used to leave a space at that end.
EDGE_UNK_LINES = {
    "like ` ": "like",
    "'s brilliant ` ": "'s brilliant",
    "We can learn from the passage that   _": "we can learn from the passage that",
    "네, 저는 신용 조합이 있어요": ",",
    "鼎丰(08056.HK)向客户借出5000万人币 月息1.75厘 为期一年": "(08056.hk)5000 1.75",
}
V5_LINES = [
    "_ We _ must begin ; we must go and pay wedding visit very soon . ''",
    "` Tis a sad business . ''",
    "네, 저는 신용 조합이 있어요",
    "鼎丰(08056.HK)向客户借出5000万人币 月息1.75厘 为期一年",
    "like ` ",
    "In 2003, 10,000 (formerly) \"quoted\" £5 – done.",
]


@pytest.fixture(scope="module")
def albert_model():
    return shared_path("spm", "albert-base-v2_spiece.model")


def test_default_decode_strips_like_transformers4(albert_model):
    """transformers 4's AlbertTokenizer (the reference of the default mode) decodes with sentencepiece and strips
    the text; ours kept the space a dropped <unk> left at either end ("like ` " decoded to "like ")."""
    tok = load_tokenizer(albert_model)
    for line, expected in EDGE_UNK_LINES.items():
        assert tok.decode(tok.encode(line)) == expected, line
    ids, _ = tok.encode_pair("like ` ", "fine")
    assert tok.decode(ids) == "like  fine"  # only the ends are stripped, as in transformers 4


def test_split_added_tokens_decode_equals_transformers5(albert_model, tmp_path):
    """With `split_added_tokens` (transformers 5 compatibility) decode is transformers 5's Metaspace decoder: a
    first kept piece "▁" (before a dropped <unk>) gives a leading space there, which ours dropped (4,882 of the
    148,327 lines of the shared corpora differed, 4,316 of them KorNLI)."""
    transformers = pytest.importorskip("transformers")
    shutil.copy(albert_model, tmp_path / "spiece.model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = transformers.AlbertTokenizer.from_pretrained(tmp_path)
    ours = load_tokenizer(albert_model, split_added_tokens=True)
    for line in V5_LINES:
        ids = ours.encode(line)
        assert ids == theirs(line, add_special_tokens=False)["input_ids"], line
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True), line
    assert ours.decode(ours.encode("_ We _ must")) == " we  must"
    assert ours.decode([]) == ""


@pytest.mark.parametrize("options", [{}, {"split_added_tokens": True}])
def test_sentencepiece_encodes_text_with_surrogates(albert_model, options):
    """sentencepiece (and transformers) refuse a str holding a surrogate with a TypeError that names nothing; a
    lone one is now U+FFFD (which albert-base-v2 deletes, as it deletes a U+FFFD in the text), a pair its
    character; the rest of the batch is unchanged."""
    tok = load_tokenizer(albert_model, **options)
    batch = ["Hello there.", "A truncated emoji \ud83d here.", "pair \ud83d\ude00 ok", "𝔥𝔢𝔩𝔩𝔬 \udfff"]
    assert tok.encode_batch(batch) == tok.encode_batch(["Hello there.", "A truncated emoji \ufffd here.",
                                                         "pair \U0001F600 ok", "𝔥𝔢𝔩𝔩𝔬 \ufffd"])
    assert tok.encode("a\ud800b") == tok.encode("a\ufffdb")
    assert tok.tokenize("x \ud800") == tok.tokenize("x \ufffd")


def test_wordpiece_surrogates_give_transformers4_ids():
    """BERT's Python text cleaning (transformers 4's BertTokenizer) deletes surrogates; `tokenizers` refused the
    text with a TypeError. Ours now gives the Python ids (U+FFFD, which BERT's cleaning deletes too)."""
    vocab = shared_path("vocab", "albert_zh_vocab.txt")
    tok = load_tokenizer(vocab)
    texts = ["表情\ud83d符号 end", "a\ud800b", "lone \udfff"]
    expected = [tok.encode("表情符号 end"), tok.encode("ab"), tok.encode("lone")]
    assert tok.encode_batch(texts) == expected
    assert tok.tokenize("a\ud800b") == tok.tokenize("ab")
    legacy = pytest.importorskip("transformers.models.bert.tokenization_bert_legacy")
    reference = legacy.BertTokenizerLegacy(str(vocab))
    assert expected == [reference.encode(t, add_special_tokens=False) for t in texts]


def surrogate_jsonl(path, lines: int = 300):
    """A JSONL corpus of Alice sentences with a truncated emoji escape (\\ud83d) in some records."""
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().split()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            words = text[i * 9:(i + 1) * 9]
            if i % 7 == 0:
                words.insert(3, "\ud83d")
            f.write(json.dumps({"text": " ".join(words)}) + "\n")   # json.dumps writes it as an escape
    return path


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_tokenizer_train_on_jsonl_with_a_lone_surrogate(capsys, tmp_path, kind):
    """`tokenizer train` on JSONL holding "\\ud83d": WordPiece died with a UnicodeEncodeError traceback,
    SentencePiece with pybind's "Unable to cast Python instance of type <class 'str'> to C++ type '?'"."""
    corpus = surrogate_jsonl(tmp_path / "c.jsonl")
    code = main(["tokenizer", "train", "--kind", kind, "--input", str(corpus), "--vocab-size", "200",
                 "--out", str(tmp_path / "tok"), "--threads" if kind == "sentencepiece" else "--lowercase",
                 *(["1"] if kind == "sentencepiece" else [])])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.encode("Alice \ud83d was") == tok.encode("Alice \ufffd was")


def test_data_build_on_jsonl_with_a_lone_surrogate(capsys, tmp_path, albert_model):
    """`data build` crashed with sentencepiece's "List elements must be str or bytes" traceback."""
    corpus = surrogate_jsonl(tmp_path / "c.jsonl", lines=40)
    code = main(["data", "build", "--input", str(corpus), "--tokenizer", str(albert_model), "--out",
                 str(tmp_path / "data"), "--max-seq-length", "32", "--dupe-factor", "1", "--workers", "1",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
