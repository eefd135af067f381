"""Audit 20, a Chinese NLP engineer's whole journey from README.md and docs/ only: albert_zh's WordPiece vocab.txt
and a SentencePiece model trained on the Chinese news (`--character-coverage 0.9995`, what docs/tokenization.md
says Chinese corpora usually take), a tiny ALBERT, `convert --to hf`, and the export read by transformers offline
(AutoTokenizer, pipeline("fill-mask")) on mixed Chinese / English / number text, full-width forms and spaces,
traditional characters. Tests whose docstring starts "Was:" hold defects of the raw-text sentence splitter found
on the way (Chinese JSONL / raw corpora, e.g. one paragraph a record), since fixed."""
from __future__ import annotations

import json
import shutil

import pytest

from albertlm.cli.main import main
from conftest import SHARED

ZH_VOCAB = SHARED / "vocab" / "albert_zh_vocab.txt"
ZH_NEWS = SHARED / "text" / "zh" / "news_zh_1.txt"
# mixed scripts, full-width letters / digits / spaces / punctuation, traditional characters, curly quotes
MIXED = ["ALBERT[MASK]型在2019年发布，参数量12M。", "　全角[MASK]格和，。！？", "臺灣的[MASK]體字測試",
         "Hello[MASK]界123abc", "Ｈｅｌｌｏ[MASK]界１２３", "他说：“你[MASK]”……", "数字12[MASK]45", "[MASK]"]

needs_data = pytest.mark.skipif(not (ZH_VOCAB.is_file() and ZH_NEWS.is_file()),
                                reason="../shared/data's albert_zh vocab or Chinese news is absent")


def _cli(*argv) -> None:
    assert main([str(a) for a in argv]) == 0


def _random_model(directory, vocab_size: int) -> None:
    """A random AlbertForPreTraining with wide weights (init std 0.5: distinct top-k per text) in DIRECTORY."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_layers=2,
                                     num_heads=4, ffn_size=37, max_position_embeddings=128,
                                     initializer_range=0.5)).save_pretrained(directory)


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    """albert_zh's vocab.txt and a Chinese SentencePiece model (tokenizer train, coverage 0.9995), each with a
    random tiny model, exported with convert --to hf."""
    root = tmp_path_factory.mktemp("zh_journey")
    (root / "wp").mkdir()
    shutil.copy(ZH_VOCAB, root / "wp" / "vocab.txt")
    _random_model(root / "wp", 21128)
    _cli("tokenizer", "train", "--input", ZH_NEWS, "--vocab-size", 2000, "--character-coverage", 0.9995,
         "--threads", 1, "--out", root / "spm")
    _random_model(root / "spm", 2000)
    for name in ("wp", "spm"):
        _cli("convert", root / name, root / f"hf_{name}", "--to", "hf")
    return root


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("transformers")


@needs_data
@pytest.mark.parametrize("name", ["wp", "spm"])
def test_fill_mask_on_chinese_text_equals_the_transformers_pipeline(zh, offline, name):
    """`albertlm fill-mask`'s top 5 on mixed / full-width / traditional Chinese text are those of
    pipeline("fill-mask") on the export, for albert_zh's vocab.txt and for a Chinese SentencePiece model."""
    from transformers import pipeline

    from albertlm.tasks.inference import FillMask

    ours = FillMask.load(zh / name)(MIXED, top_k=5)
    pipe = pipeline("fill-mask", model=str(zh / f"hf_{name}"), top_k=5)
    for text, result in zip(MIXED, ours):
        expected = [c["token"] for c in pipe(text)]
        assert [c["token_id"] for c in result[0]] == expected, text


@needs_data
def test_chinese_sentencepiece_export_gives_our_ids_on_the_news(zh, offline):
    """AutoTokenizer on the exported Chinese SentencePiece model gives our ids on every news line and on mixed
    text (full-width forms and spaces, which the model's NFKC normalizer folds, digits with commas)."""
    from transformers import AutoTokenizer

    from albertlm.tokenization import load_tokenizer

    lines = [line for line in ZH_NEWS.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines += [t.replace("[MASK]", "") for t in MIXED] + ["价格为1,234.5元,同比增长3,5%，2019年", "ＡＬＢＥＲＴ　模型"]
    theirs = AutoTokenizer.from_pretrained(str(zh / "hf_spm"))(lines, add_special_tokens=False)["input_ids"]
    assert [list(ids) for ids in load_tokenizer(zh / "spm").encode_batch(lines)] == theirs


@needs_data
def test_a_chinese_word_is_one_character_for_whole_word_masking():
    """With albert_zh's vocab.txt every Chinese character is a token of its own and a whole-word start: BERT's
    Chinese-character split never yields the vocab's "##中"-style tokens (which Chinese whole-word masking
    builds with a word segmenter), so n-gram masking masks runs of 1-3 characters."""
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(ZH_VOCAB)
    starts = tok.word_start_mask()
    ids = [i for row in tok.encode_batch(ZH_NEWS.read_text(encoding="utf-8").splitlines()) for i in row]
    tokens = {i: tok.id_to_token(i) for i in set(ids)}
    assert not [t for t in tokens.values() if t.startswith("##") and "\u4e00" <= t[2:3] <= "\u9fff"]
    hanzi = [i for i, t in tokens.items() if "\u4e00" <= t[:1] <= "\u9fff"]
    assert len(hanzi) > 1000 and all(len(tokens[i]) == 1 and starts[i] for i in hanzi)


# -- the raw-text sentence splitter on Chinese ---------------------------------------------------------------
def test_a_run_of_chinese_full_stops_ends_one_sentence():
    """Was: split_sentences cut after the first of a run of full-width stops: '真的吗？！' gave '真的吗？' and a sentence
    '！'; '等等。。。' gave two sentences '。'."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("真的吗？！我不信。等等。。。然后呢？？？太好了！！！") == [
        "真的吗？！", "我不信。", "等等。。。", "然后呢？？？", "太好了！！！"]


def test_a_half_width_question_mark_before_chinese_ends_a_sentence():
    """Was: a half-width ? or ! right before Chinese (no space, as Chinese is written) was no sentence end:
    '真的吗?我不信!好吧。' stayed one sentence, though data.md says . ! ? cut before a letter of a script without case."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("真的吗?我不信!好吧。") == ["真的吗?", "我不信!", "好吧。"]
    assert split_sentences("Wow!!!Great. He said \"hi!\" and left.") == ["Wow!!!Great.", "He said \"hi!\" and left."]


def test_an_abbreviation_after_chinese_is_no_sentence_end():
    """Was: an abbreviation or initial right after a Chinese character (no space between Chinese and Latin) was not
    protected: '美国总统Mr. Smith来了。' was cut after 'Mr.', '由J. K. Rowling' after 'J.'."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("美国总统Mr. Smith来了。这本书由J. K. Rowling创作。") == [
        "美国总统Mr. Smith来了。", "这本书由J. K. Rowling创作。"]


@pytest.mark.parametrize("fmt", ["raw", "jsonl"])
def test_wrapped_chinese_lines_join_without_a_space(tmp_path, fmt):
    """Was: the lines of a paragraph were joined with a space: Chinese wrapped at a fixed width ('南京大学位于南' / '京市。')
    became '南京大学位于南 京市。', a word boundary (a '▁' piece for SentencePiece) inside a word, in data build and
    tokenizer train."""
    from albertlm.data.corpus import read_documents

    wrapped = ["南京大学位于南", "京市，是一所大", "学。It is old.", "东京は日本の", "首都です。"]
    sentences = wrapped_sentences(tmp_path / f"zh.{'txt' if fmt == 'raw' else 'jsonl'}", fmt, wrapped, read_documents)
    assert sentences == ["南京大学位于南京市，是一所大学。", "It is old.", "东京は日本の首都です。"]


def wrapped_sentences(path, fmt: str, wrapped: list[str], read_documents) -> list[str]:
    """The sentences of `wrapped` (lines of one paragraph) written to `path` as raw text or as one JSONL record."""
    if fmt == "raw":
        path.write_text("\n".join(wrapped) + "\n", encoding="utf-8")
    else:
        path.write_text(json.dumps({"text": "\n".join(wrapped)}, ensure_ascii=False) + "\n", encoding="utf-8")
    return [s for doc in read_documents([path], fmt) for s in doc.sentences]
