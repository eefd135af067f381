"""Audit 29, WordPiece as a Korean / Japanese / Chinese BERT user, against transformers 5's BertTokenizer (and
BertJapaneseTokenizer) built offline from the same vocab.txt.

Measured first (scripts, not here): albert_zh's vocab.txt and a KorNLI-trained one, every combination of
do_lower_case, strip_accents (None/True/False) and tokenize_chinese_chars, on KorNLI dev (NFC and NFD), Chinese
news, Gutenberg, WikiText-2, SQuAD and 3,000 synthesised lines of kana/kanji, full-width and half-width forms,
emoji and ZWJ sequences, combining marks, control characters, U+FFFD, special-token strings and 99-150 character
words: 0 lines differ from `BertTokenizer.from_pretrained`; an exported directory (vocab.txt, tokenizer.json,
tokenizer_config.json) gives our pair ids in `AutoTokenizer` and `PreTrainedTokenizerFast` alike. Found:

- a transformers `BertJapaneseTokenizer` directory (cl-tohoku's Japanese BERTs) was read with BertTokenizer's
  defaults (lowercasing, every kanji split off as a word): 1,488 of 2,303 Japanese/Chinese/English lines gave
  other ids than transformers, silently; its MeCab / character modes (which we cannot run) likewise;
- SQuAD's character spans, matched back from the pieces, lose their place after two [UNK]s in a row ("……",
  "——", "”“": albert_zh's vocab has none of them): every later token of the whitespace-delimited "word" (a whole
  Chinese sentence) got an empty span at its end, so an answer after it was labelled as the [UNK].
  `encode_batch_with_spans` gives `tokenizers`' exact spans (tasks/squad.py uses it: tests/test_squadspans_audit29.py).
"""
from __future__ import annotations

import json
import shutil
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path
from test_journey_ja_audit21 import CORPUS as JAPANESE

MIXED = ["東京に行きました。ＡＢＣ１２３！ ﾃﾞｰﾀﾍﾞｰｽ", "吾輩は猫である。Hello World, naïve café",
         "他说……北京是中国的首都。“你好”——再见", "漢字かな交じり文 😀👨\u200d👩\u200d👧 e\u0301 \ufffd\x07",
         "[SEP] [MASK] 東京" + "ア" * 101, "한국어 문장입니다. ΟΔΟΣ"]


def _zh_vocab():
    return shared_path("vocab", "albert_zh_vocab.txt")


def _directory(tmp_path, config: dict, model_config: dict | None = None):
    """albert_zh's vocab.txt (21,128 tokens, 553 with kana) with `config` as its tokenizer_config.json."""
    shutil.copy(_zh_vocab(), tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    if model_config is not None:
        (tmp_path / "config.json").write_text(json.dumps(model_config), encoding="utf-8")
    return tmp_path


def _texts():
    return [*JAPANESE, *MIXED]


JAPANESE_CONFIGS = {
    "class": {"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "basic",
              "subword_tokenizer_type": "wordpiece"},
    "class in config.json": {"do_lower_case": False},            # older cl-tohoku uploads
    "keys only": {"word_tokenizer_type": "basic", "subword_tokenizer_type": "wordpiece"},
    "class, tokenize_chinese_chars true ignored": {"tokenizer_class": "BertJapaneseTokenizer",
                                                  "tokenize_chinese_chars": True},
}


@pytest.mark.parametrize("name", list(JAPANESE_CONFIGS))
def test_a_bert_japanese_vocab_gives_transformers_ids(tmp_path, name):
    """BertJapaneseTokenizer's basic/wordpiece mode is BertTokenizer's pipeline with no lowercasing and no CJK
    splitting by default: read with BertTokenizer's defaults, kanji were split off one by one (and cased text
    lowercased), other ids than transformers gives, without a word."""
    transformers = pytest.importorskip("transformers")
    model = {"model_type": "bert", "tokenizer_class": "BertJapaneseTokenizer"} if "config.json" in name else None
    directory = _directory(tmp_path, JAPANESE_CONFIGS[name], model)
    ours = load_tokenizer(directory)
    assert (ours.options.do_lower_case, ours.options.tokenize_chinese_chars) == (False, False)
    # a bare tokenizer_config.json with the Japanese keys names no class: AutoTokenizer cannot tell, the class can
    reference = (transformers.BertJapaneseTokenizer if name == "keys only" else transformers.AutoTokenizer
                 ).from_pretrained(directory)
    assert type(reference).__name__ == "BertJapaneseTokenizer"
    texts = _texts()
    assert ours.encode_batch(texts) == [reference.encode(t, add_special_tokens=False) for t in texts]
    # saved (and so exported) as a BertTokenizer with those options: transformers 5 reads the same ids
    ours.save(tmp_path / "saved")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert again(texts, add_special_tokens=False)["input_ids"] == ours.encode_batch(texts)
    assert load_tokenizer(tmp_path / "saved").encode_batch(texts) == ours.encode_batch(texts)


def test_a_bert_japanese_vocab_keeps_an_explicit_lowercasing_and_overrides(tmp_path):
    directory = _directory(tmp_path, {"tokenizer_class": "BertJapaneseTokenizer", "do_lower_case": True})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # the kana-marks warning of a lowercased (accent-stripping) read
        assert load_tokenizer(directory).options.do_lower_case is True
    assert load_tokenizer(directory, tokenize_chinese_chars=True).options.tokenize_chinese_chars is True


@pytest.mark.parametrize("config, named", [
    ({"tokenizer_class": "BertJapaneseTokenizer", "word_tokenizer_type": "mecab",
      "mecab_kwargs": {"mecab_dic": "unidic_lite"}}, "word_tokenizer_type 'mecab'"),
    ({"tokenizer_class": "BertJapaneseTokenizer", "subword_tokenizer_type": "character"},
     "subword_tokenizer_type 'character'"),
    ({"word_tokenizer_type": "sudachi"}, "word_tokenizer_type 'sudachi'"),
    ({"tokenizer_class": "BertJapaneseTokenizer", "do_word_tokenize": False}, "do_word_tokenize false"),
])
def test_japanese_modes_we_cannot_run_are_one_line(tmp_path, capsys, config, named):
    """MeCab/Sudachi word splitting and character subwords (bert-base-japanese-char: a character vocab, where our
    WordPiece made every kana word [UNK]) were read as BERT's WordPiece, other ids without a word."""
    directory = _directory(tmp_path, config)
    with pytest.raises(UserError, match="BertJapaneseTokenizer"):
        load_tokenizer(directory)
    assert_one_error(capsys, main(["tokenizer", "info", "-t", str(directory)]), named,
                     "BertJapaneseTokenizer", "tokenizer_config.json")


def test_a_bert_tokenizer_named_keeps_berts_defaults(tmp_path):
    """The Japanese keys under an explicit BertTokenizer (transformers reads BertTokenizer then) change nothing."""
    directory = _directory(tmp_path, {"tokenizer_class": "BertTokenizer", "word_tokenizer_type": "mecab"},
                           {"tokenizer_class": "BertJapaneseTokenizer"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = load_tokenizer(directory).options
    assert (options.do_lower_case, options.tokenize_chinese_chars) == (True, True)


@pytest.mark.parametrize("lower, strip, chinese", [(True, None, True), (False, False, True), (True, False, False),
                                                   (False, True, False)])
def test_ids_equal_bert_tokenizer_on_cjk_and_edge_text(tmp_path, lower, strip, chinese):
    """A check that found nothing (passes before): the ids of BertTokenizer.from_pretrained on the same options."""
    transformers = pytest.importorskip("transformers")
    kornli = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:40]
    news = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()[:40]
    texts = [*_texts(), *(s for row in kornli for s in row.split("\t")[:2]), *news]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = load_tokenizer(_zh_vocab(), do_lower_case=lower, strip_accents=strip, tokenize_chinese_chars=chinese)
    ours.save(tmp_path)
    reference = transformers.BertTokenizer.from_pretrained(tmp_path)
    assert ours.encode_batch(texts) == reference(texts, add_special_tokens=False)["input_ids"]


def test_spans_after_two_unknowns_in_a_row_are_exact(tmp_path):
    """"他说……北京是中国的首都。": albert_zh has no "…", so two [UNK]s; matching pieces back against the text gave the
    first [UNK] the rest of the sentence and every later token an empty span at its end (SQuAD then labelled the
    answer 北京 as the [UNK]). `encode_batch_with_spans` gives each token its own characters."""
    tok = load_tokenizer(_zh_vocab())
    text = "他说……北京是中国的首都。“你好”"
    [(ids, spans)] = tok.encode_batch_with_spans([text])
    assert ids == tok.encode(text)
    assert [text[a:b] for a, b in spans] == list(text)
    assert tok.id_to_token(ids[2]) == tok.id_to_token(ids[3]) == "[UNK]"


def test_spans_equal_transformers_offsets_on_real_text(tmp_path):
    """Spans = transformers' offset_mapping (what its run_qa uses for answer spans) on Chinese news, KorNLI,
    SQuAD and the edge lines; a surrogate pair counts as two characters, as Python indexes the text."""
    transformers = pytest.importorskip("transformers")
    squad = json.loads(shared_path("squad", "sample.json").read_text(encoding="utf-8"))["data"]
    news = shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()[:60]
    kornli = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:30]
    texts = [*_texts(), *news, *(r["context"] for r in squad), *(s for row in kornli for s in row.split("\t")[:2])]
    for options in ({}, {"do_lower_case": False}):
        ours = load_tokenizer(_zh_vocab(), **options)
        ours.save(tmp_path / str(len(options)))
        reference = transformers.BertTokenizer.from_pretrained(tmp_path / str(len(options)))
        got = ours.encode_batch_with_spans(texts)
        want = reference(texts, add_special_tokens=False, return_offsets_mapping=True)
        assert [ids for ids, _ in got] == want["input_ids"] == ours.encode_batch(texts)
        assert [[tuple(s) for s in spans] for _, spans in got] == \
            [[tuple(s) for s in spans] for spans in want["offset_mapping"]]
    text = "a\ud83d\ude00 北\ud83d京 x"    # a pair (one emoji), a lone half (U+FFFD: deleted)
    [(ids, spans)] = ours.encode_batch_with_spans([text])
    assert ids == ours.encode(text)
    assert [text[a:b] for a, b in spans] == ["a\ud83d\ude00", "北", "京", "x"]


def test_spans_of_a_tokenizer_json_leave_the_spaces_out(tmp_path):
    """A tokenizer.json (here a WordPiece one written by `save` through `tokenizers`) gives the same spans; for
    a Metaspace (SentencePiece-style) one `tokenizers` counts the space before a word into "▁word": trimmed."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    ours = load_tokenizer(_zh_vocab())
    ours.backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    text = "他说……北京 hello world"
    assert load_tokenizer(tmp_path / "tokenizer.json").encode_batch_with_spans([text]) == \
        ours.encode_batch_with_spans([text])
    meta = Tokenizer(models.WordLevel({"▁hello": 0, "▁world": 1, "<unk>": 2, "[CLS]": 3, "[SEP]": 4,
                                       "[MASK]": 5, "<pad>": 6}, unk_token="<unk>"))
    meta.pre_tokenizer = pre_tokenizers.Metaspace()
    meta.save(str(tmp_path / "meta.json"))
    text = "hello world"
    [(ids, spans)] = load_tokenizer(tmp_path / "meta.json").encode_batch_with_spans([text])
    assert ids == [0, 1] and [text[a:b] for a, b in spans] == ["hello", "world"]
