"""Tokenizers against references: google-research's SentencePiece algorithm (an independent implementation in
`google_albert.py`) and transformers' AlbertTokenizer / BertTokenizer on real text, the albert-base-v2 ids
transcribed from transformers' tests, and tiny models trained in-process."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from albertlm.errors import UserError
from albertlm.tokenization import Tokenizer, load_tokenizer
from albertlm.tokenization.sentencepiece import (SentencePieceOptions, SentencePieceTrainOptions,
                                                 train_sentencepiece)
from albertlm.tokenization.wordpiece import WordPieceOptions, train_wordpiece
from conftest import shared_path
import google_albert

transformers = pytest.importorskip("transformers")

ALBERT_MODEL = ("spm", "albert-base-v2_spiece.model")
# albert-base-v2's user-defined symbols: transformers v5 matches them before normalization (see docs).
ADDED_CHARS = re.compile('[()"\\-.–£€]|``|\'\'')
LINES_PER_CORPUS = 1500


def _lines(*parts: str, limit: int = LINES_PER_CORPUS, keep=lambda line: True) -> list[str]:
    text = shared_path(*parts).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and keep(line)][:limit]


CORPORA = {
    # Gutenberg + wiki_00 + RTE sentences: prose, and numbers such as "In 1999," that google's "9," rule splits
    "english": lambda: _lines("text", "gutenberg", "austen-emma.txt") + _lines("text", "sample_text.txt")
    + _lines("text", "wiki_text", "wiki_00") + [c for line in _lines("glue", "RTE", "val.tsv")[1:]
                                                for c in line.split("\t")[1:3]],
    "accented": lambda: _lines("text", "wikitext-2-raw", "wiki.test.raw", keep=lambda s: not s.isascii()),
    "chinese": lambda: _lines("text", "zh", "news_zh_1.txt"),
    "korean": lambda: [c for line in _lines("korean", "KorNLI", "xnli.dev.ko.tsv", limit=2500)
                       for c in line.split("\t")[:2]],
}


@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("albert-base-v2")
    shutil.copy(shared_path(*ALBERT_MODEL), directory / "spiece.model")
    return directory


@pytest.fixture(scope="module")
def hf_albert(albert_dir):
    return transformers.AlbertTokenizer.from_pretrained(str(albert_dir))


@pytest.fixture(scope="module")
def albert(albert_dir):
    return load_tokenizer(albert_dir)


def _hf_ids(hf, lines):
    return hf(lines, add_special_tokens=False)["input_ids"]


# -- albert-base-v2: the reference ids ----------------------------------------------------------------

def test_reference_vocabulary_and_special_ids(albert):
    ref = json.loads(shared_path("reference", "albert_base_v2_reference.json").read_text())["tokenizer"]
    assert isinstance(albert, Tokenizer) and albert.kind == "sentencepiece"
    assert albert.vocab_size == ref["vocab_size"]
    assert [albert.id_to_token(i) for i in range(2)] == ref["first_pieces"]
    assert albert.id_to_token(albert.vocab_size - 1) == ref["last_piece"]
    assert (albert.pad_id, albert.unk_id, albert.cls_id, albert.sep_id, albert.mask_id) == \
        (ref["pad_id"], ref["unk_id"], ref["cls_id"], ref["sep_id"], ref["mask_id"])


def test_reference_cases_and_integration_ids(albert_dir):
    ref = json.loads(shared_path("reference", "albert_base_v2_reference.json").read_text())["tokenizer"]
    for case in ref["cases"]:
        tok = load_tokenizer(albert_dir, **case["options"])
        assert tok.encode(case["text"]) == case["ids"]
        # The reference lists sentencepiece's surface pieces, which keep an unknown character ("é").
        tokens = [t if i != tok.unk_id else "<unk>" for t, i in zip(case["tokens"], case["ids"])]
        assert tok.tokenize(case["text"]) == tokens
    tok = load_tokenizer(albert_dir)  # transformers' defaults: lowercase, strip accents
    for text, expected in zip(ref["integration"]["texts"], ref["integration"]["input_ids"]):
        ids, types = tok.encode_pair(text)
        assert ids == [i for i in expected if i != tok.pad_id]
        assert types == [0] * len(ids)


# -- albert-base-v2: parity with google-research and transformers on real text ------------------------

@pytest.fixture(scope="module")
def albert_sp():
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(shared_path(*ALBERT_MODEL)))


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_default_ids_are_google_research_on_every_line(corpus, albert, albert_dir, albert_sp):
    """Every line, punctuation included, against google's preprocess_text + encode_pieces (google_albert.py)."""
    lines = CORPORA[corpus]()
    assert len(lines) > 50
    expected = [google_albert.encode_ids(albert_sp, line) for line in lines]
    ours = albert.encode_batch(lines)
    differ = [lines[i] for i in range(len(lines)) if ours[i] != expected[i]]
    assert not differ, f"{len(differ)} of {len(lines)} lines differ from google's algorithm, e.g. {differ[:3]}"
    assert [albert.encode(line) for line in lines[:20]] == expected[:20]
    split = sum(google_albert.splits_digit_comma(albert_sp, line) for line in lines)
    assert split > 0 or corpus in ("accented", "chinese")  # the "9," rule is exercised, not skipped
    uncased = load_tokenizer(albert_dir, keep_accents=True, do_lower_case=False)
    sample = lines[:300]
    assert uncased.encode_batch(sample) == [
        google_albert.encode_ids(albert_sp, line, keep_accents=True, do_lower_case=False) for line in sample]


def test_default_strips_combining_characters_as_google_does(albert, albert_sp):
    """google drops characters with a combining class (NFKD accents, virama, nukta) but keeps spacing marks
    (Devanagari vowel signs), which transformers 5's StripAccents also drops."""
    lines = ["हिन्दी भाषा क़िला", "ఒ్9, ١٢٣,", "Ça n'a pas été facile, 2003,", "ÅŠİ ﬁ ² ½ Straße", "x\u0301\u034f y"]
    assert albert.encode_batch(lines) == [google_albert.encode_ids(albert_sp, line) for line in lines]


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_transformers5_mode_matches_transformers_albert(corpus, albert, albert_dir, hf_albert):
    lines = CORPORA[corpus]()
    expected = _hf_ids(hf_albert, lines)
    # transformers-v5 mode: every line, user-defined symbols and "9," pieces included.
    compat = load_tokenizer(albert_dir, split_added_tokens=True)
    assert compat.encode_batch(lines) == expected
    # The default (google) mode gives the same ids wherever neither v5's added-token split nor google's
    # "9," rule applies.
    plain = [i for i, line in enumerate(lines) if not ADDED_CHARS.search(line) and not re.search(r"\d,", line)]
    assert len(plain) > 10
    assert albert.encode_batch([lines[i] for i in plain]) == [expected[i] for i in plain]


def test_keep_accents_and_case_match_transformers(albert_dir):
    lines = CORPORA["accented"]()[:300] + CORPORA["korean"]()[:300]
    hf = transformers.AlbertTokenizer.from_pretrained(str(albert_dir), keep_accents=True, do_lower_case=False)
    ours = load_tokenizer(albert_dir, keep_accents=True, do_lower_case=False, split_added_tokens=True)
    assert ours.encode_batch(lines) == _hf_ids(hf, lines)
    assert ours.tokenize("Café") != load_tokenizer(albert_dir).tokenize("Café")


def test_added_token_modes_differ_only_around_symbols(albert, albert_dir, hf_albert):
    """transformers v5 drops the word-boundary piece before albert-base-v2's user-defined symbols."""
    compat = load_tokenizer(albert_dir, split_added_tokens=True)
    assert albert.tokenize("emma .") == ["▁emma", "▁", "."]  # sentencepiece, google-research, transformers v4
    assert compat.tokenize("emma .") == ["▁emma", "."] == hf_albert.tokenize("emma .")
    assert albert.tokenize("emma, hi") == compat.tokenize("emma, hi")


def test_digit_comma_rule_is_google_default(albert_dir, hf_albert, albert_sp):
    text = "In 1999, 10,000 people; 9, x9, $5, 2003,"
    default = load_tokenizer(albert_dir)
    assert default.options.split_digit_comma is None and default.options.digit_comma_rule
    pieces = default.tokenize(text)
    assert pieces[:4] == ["▁in", "▁1999", ",", "▁10,000"] and "▁1999," not in pieces
    assert pieces == google_albert.encode_pieces(albert_sp, google_albert.preprocess_text(text))
    # off: sentencepiece's own pieces, which is what transformers 5 gives on this text
    plain = load_tokenizer(albert_dir, split_digit_comma=False)
    assert "▁1999," in plain.tokenize(text) and plain.encode(text) == _hf_ids(hf_albert, [text])[0]
    # transformers-5 mode has no such rule unless asked for
    assert load_tokenizer(albert_dir, split_added_tokens=True).encode(text) == _hf_ids(hf_albert, [text])[0]
    forced = load_tokenizer(albert_dir, split_added_tokens=True, split_digit_comma=True)
    assert "▁1999," not in forced.tokenize(text)
    default.save(albert_dir.parent / "saved-default")  # None survives a save: the rule stays on
    assert load_tokenizer(albert_dir.parent / "saved-default").options.digit_comma_rule


def test_digit_comma_rule_on_a_model_with_an_unknown_comma(tmp_path):
    """A tiny model whose comma is unknown: google splits an unknown piece "9," too (its surface is seen)."""
    import sentencepiece

    corpus = tmp_path / "digits.txt"
    corpus.write_text("\n".join(f"x{i} y{i % 7} z" for i in range(400)) + "\n", encoding="utf-8")
    tok = train_sentencepiece([corpus], tmp_path / "m", SentencePieceTrainOptions(vocab_size=40),
                              SentencePieceOptions(), show_progress=False)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "m" / "spiece.model"))
    assert sp.piece_to_id(",") == sp.unk_id()
    lines = ["x9, y٣, z", "²,", "x1,2,", "9,,", ",9,", "ab, 1 , 2,"]
    options = dict(do_lower_case=True, keep_accents=False)
    assert tok.encode_batch(lines) == [google_albert.encode_ids(sp, line, **options) for line in lines]


def test_decode_and_pairs(albert):
    text = "The quick brown fox jumps over the lazy dog."
    assert albert.decode(albert.encode(text)) == text.lower()
    ids, types = albert.encode_pair("Hello world", "Second part")
    a, b = albert.encode("Hello world"), albert.encode("Second part")
    assert ids == [albert.cls_id, *a, albert.sep_id, *b, albert.sep_id]
    assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    assert albert.decode(ids) == "hello world second part"  # special tokens dropped


def test_word_start_mask_follows_google_rule(albert):
    mask = albert.word_start_mask()
    assert mask.shape == (albert.vocab_size,) and mask.dtype == bool
    starts = ["▁the", ",", ".", "[CLS]", "[MASK]", "<pad>", "<unk>", "2000", "5%"]  # digits: as google
    continuations = ["ing", "house", "s"]
    assert all(mask[albert.token_to_id(t)] for t in starts)
    assert not any(mask[albert.token_to_id(t)] for t in continuations)
    assert 0.5 < mask.mean() < 0.95


# -- training SentencePiece ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny unigram model with ALBERT-English preprocessing (lowercase, strip accents)."""
    out = tmp_path_factory.mktemp("spm-en")
    files = [shared_path("text", "gutenberg", "carroll-alice.txt"), shared_path("text", "wiki_text", "wiki_00")]
    tok = train_sentencepiece(files, out, SentencePieceTrainOptions(vocab_size=700),
                              SentencePieceOptions(do_lower_case=True, keep_accents=False), show_progress=False)
    return out, tok


def test_trained_model_has_albert_layout(trained):
    out, tok = trained
    assert [tok.id_to_token(i) for i in range(5)] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.vocab_size == 700 and tok.sp.bos_id() == -1 and tok.sp.eos_id() == -1
    assert tok.sp.is_control(2) and tok.sp.is_control(4)
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["keep_accents"] is False
    again = load_tokenizer(out)
    assert again.options == tok.options and again.encode("Café Alice") == tok.encode("Café Alice")


def test_trained_model_loads_in_transformers_with_same_ids(trained):
    out, tok = trained
    hf = transformers.AlbertTokenizer.from_pretrained(str(out))
    lines = _lines("text", "sample_text.txt") + ["Ünïcödé CAFÉ, said Alice (twice)."]
    assert tok.encode_batch(lines) == _hf_ids(hf, lines)
    assert tok.encode_pair("Alice", "the Queen")[0] == hf("Alice", "the Queen")["input_ids"]


def test_trained_korean_keeps_hangul_intact(tmp_path):
    lines = [c for line in _lines("korean", "KorNLI", "xnli.dev.ko.tsv", limit=800) for c in line.split("\t")[:2]]
    corpus = tmp_path / "ko.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_sentencepiece([corpus], tmp_path / "ko", SentencePieceTrainOptions(
        vocab_size=1200, character_coverage=1.0), show_progress=False)
    assert tok.options.keep_accents and not tok.options.do_lower_case  # trained defaults keep information
    pieces = [tok.id_to_token(i) for i in range(tok.vocab_size)]
    assert any(re.search("[가-힣]", p) for p in pieces)
    assert not any(re.search("[\u1100-\u11ff]", p) for p in pieces)  # no decomposed jamo
    mask = tok.word_start_mask()  # Hangul continues a word after "▁" (google's rule would split it)
    continuation = [p for p in pieces if re.fullmatch("[가-힣]+", p)]
    assert continuation and not any(mask[tok.token_to_id(p)] for p in continuation)
    assert all(mask[tok.token_to_id(p)] for p in pieces if p.startswith("▁"))
    sample = lines[:200]
    assert [tok.decode(ids) for ids in tok.encode_batch(sample)] == [" ".join(s.split()) for s in sample]
    hf = transformers.AlbertTokenizer.from_pretrained(str(tmp_path / "ko"))
    assert tok.encode_batch(sample) == _hf_ids(hf, sample)
    hangul = [s for s in sample if not re.search("[À-ÿ]", s)]
    stripped = load_tokenizer(tmp_path / "ko", keep_accents=False)  # NFKD jamo are recomposed by the model's NFKC
    assert stripped.encode_batch(hangul) == tok.encode_batch(hangul)


def test_training_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        train_sentencepiece([empty], tmp_path / "out", show_progress=False)
    with pytest.raises(UserError, match="empty"):
        train_wordpiece([empty], 100, tmp_path / "out", show_progress=False)
    with pytest.raises(UserError, match="not found"):
        train_sentencepiece([tmp_path / "missing.txt"], tmp_path / "out", show_progress=False)
    small = tmp_path / "small.txt"
    small.write_text("a tiny corpus\n", encoding="utf-8")
    with pytest.raises(UserError, match="sentencepiece training failed"):
        train_sentencepiece([small], tmp_path / "out", SentencePieceTrainOptions(vocab_size=5000),
                            show_progress=False)


# -- WordPiece ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def zh_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("albert-zh")
    shutil.copy(shared_path("vocab", "albert_zh_vocab.txt"), directory / "vocab.txt")
    return directory


@pytest.mark.parametrize("lower", [True, False])
def test_wordpiece_matches_transformers_bert(zh_dir, lower):
    lines = CORPORA["chinese"]() + _lines("text", "gutenberg", "carroll-alice.txt", limit=500) + \
        CORPORA["accented"]()[:100] + ["[MASK] is special, [CLS] too", "Straße ÀÉÎ naïve"]
    hf = transformers.BertTokenizer.from_pretrained(str(zh_dir), do_lower_case=lower)
    tok = load_tokenizer(zh_dir, do_lower_case=lower)
    assert tok.kind == "wordpiece" and tok.vocab_size == 21128
    assert tok.encode_batch(lines) == _hf_ids(hf, lines)
    assert tok.encode_pair(lines[0], lines[1])[0] == hf(lines[0], lines[1])["input_ids"]
    assert tok.encode_pair(lines[0], lines[1])[1] == hf(lines[0], lines[1])["token_type_ids"]


def test_wordpiece_file_special_ids_and_word_starts(zh_dir):
    tok = load_tokenizer(zh_dir / "vocab.txt")
    assert isinstance(tok, Tokenizer)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 100, 101, 102, 103)
    mask = tok.word_start_mask()
    assert mask[tok.token_to_id("今")] and mask[tok.cls_id]
    assert not mask[tok.token_to_id("##ing")]
    assert tok.decode(tok.encode("今天天气很好")).replace(" ", "") == "今天天气很好"


def test_trained_wordpiece_loads_in_transformers(tmp_path):
    files = [shared_path("text", "zh", "news_zh_1.txt"), shared_path("text", "gutenberg", "carroll-alice.txt")]
    tok = train_wordpiece(files, 800, tmp_path / "wp", WordPieceOptions(do_lower_case=True), show_progress=False)
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    hf = transformers.BertTokenizer.from_pretrained(str(tmp_path / "wp"))
    lines = _lines("text", "sample_text.txt") + CORPORA["chinese"]()[:50]
    assert load_tokenizer(tmp_path / "wp").encode_batch(lines) == _hf_ids(hf, lines)


def test_korean_wordpiece_keeps_hangul_and_warns_about_bert_accent_stripping(tmp_path):
    lines = [c for line in _lines("korean", "KorNLI", "xnli.dev.ko.tsv", limit=800) for c in line.split("\t")[:2]]
    corpus = tmp_path / "ko.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tok = train_wordpiece([corpus], 2000, tmp_path / "wp", WordPieceOptions(do_lower_case=False, strip_accents=False),
                          show_progress=False)
    sample = lines[:100]
    ids = tok.encode_batch(sample)
    assert sum(row.count(tok.unk_id) for row in ids) < 0.01 * sum(map(len, ids))  # rare syllables only
    known = [i for i, row in enumerate(ids) if tok.unk_id not in row]
    assert len(known) > 50
    assert [tok.decode(ids[i]).replace(" ", "") for i in known] == [sample[i].replace(" ", "") for i in known]
    with pytest.warns(UserWarning, match="Hangul"):
        broken = load_tokenizer(tmp_path / "wp", do_lower_case=True, strip_accents=None)  # BERT default
    korean = next(sample[i] for i in known if re.search("[가-힣]", sample[i]))
    assert broken.encode(korean).count(broken.unk_id) > 0
    fixed = load_tokenizer(tmp_path / "wp", do_lower_case=True, strip_accents=False)
    hf = transformers.BertTokenizer.from_pretrained(str(tmp_path / "wp"), do_lower_case=True, strip_accents=False)
    assert fixed.encode_batch(sample) == _hf_ids(hf, sample)
    assert fixed.encode(korean) == tok.encode(korean)


# -- loading and saving --------------------------------------------------------------------------------

def test_save_round_trip(albert, tmp_path):
    albert.save(tmp_path / "saved")
    again = load_tokenizer(tmp_path / "saved")
    text = "Saving keeps the options: Café 1999, done."
    assert again.options == albert.options and again.encode(text) == albert.encode(text)


def test_load_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_tokenizer(tmp_path / "nope.model")
    garbage = tmp_path / "garbage.model"
    garbage.write_bytes(b"\x00not a model")
    with pytest.raises(UserError, match="cannot read"):
        load_tokenizer(garbage)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(UserError, match="no tokenizer"):
        load_tokenizer(tmp_path / "empty_dir")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(UserError, match="lacks"):
        load_tokenizer(vocab)
    with pytest.raises(UserError, match="unknown tokenizer option"):
        load_tokenizer(shared_path(*ALBERT_MODEL), lowercase=True)
    test_model = shared_path("spm", "test_sentencepiece.model")  # XLNet-style: no [CLS]/[SEP]/[MASK]
    with pytest.raises(UserError, match="special pieces"):
        load_tokenizer(test_model)


def test_transformers_v5_saved_directory_loads_with_same_ids(hf_albert, albert, zh_dir, tmp_path):
    """transformers v5 `save_pretrained` writes only tokenizer.json (+ config): run it with `tokenizers`."""
    hf_albert.save_pretrained(str(tmp_path / "albert"))
    hf_bert = transformers.BertTokenizer.from_pretrained(str(zh_dir))
    hf_bert.save_pretrained(str(tmp_path / "bert"))
    lines = CORPORA["english"]()[:300] + CORPORA["korean"]()[:100] + CORPORA["chinese"]()[:100]
    for name, hf, kind in (("albert", hf_albert, "sentencepiece"), ("bert", hf_bert, "wordpiece")):
        assert not (tmp_path / name / "spiece.model").exists() and not (tmp_path / name / "vocab.txt").exists()
        tok = load_tokenizer(tmp_path / name)
        assert isinstance(tok, Tokenizer) and tok.kind == kind and tok.vocab_size == hf.vocab_size
        assert tok.encode_batch(lines) == _hf_ids(hf, lines)
        assert tok.encode_pair(lines[0], lines[1])[0] == hf(lines[0], lines[1])["input_ids"]
        assert (tok.cls_id, tok.sep_id, tok.mask_id) == (hf.cls_token_id, hf.sep_token_id, hf.mask_token_id)
    assert (load_tokenizer(tmp_path / "albert").word_start_mask() == albert.word_start_mask()).all()
    with pytest.raises(UserError, match="options"):
        load_tokenizer(tmp_path / "albert", do_lower_case=False)
