"""Audit 21, a Japanese NLP engineer's journey from README.md and docs/ only (the Korean and Chinese ones are
tests/test_journey_audit20.py and tests/test_journey_zh_audit20.py): raw Japanese text (no spaces between words,
wrapped mid-sentence, 「」 quotes, full-width ＡＢＣ１２３, half-width ｶﾀｶﾅ) read into sentences, a SentencePiece
tokenizer trained with the coverage docs/tokenization.md gives for Japanese (0.9995), a tiny ALBERT fine-tuned
on Japanese reviews labelled 肯定 / 否定, `convert --to hf`, and the export read by transformers offline.
Defects found on the way have a test each, failing on the code before their fix."""
from __future__ import annotations

import contextlib
import io
import json

import pytest

from albertlm.cli.main import main

# a small corpus written for these tests: voiced / semi-voiced katakana (デ, パ, ガ, ブ, ヴ) so that their
# half-width forms (ﾃﾞ, ﾊﾟ) have pieces to become
CORPUS = """吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。
データベースにデータを保存した。パソコンが壊れてしまった。
ガラスのコップでジュースを飲んだ。ブログにビデオを投稿した。
ヴァイオリンとピアノとギターを弾いた。デパートでバッグを買った。
東京は日本の首都です。人口は約１４００万人です。
ＡＬＢＥＲＴは２０１９年に発表された言語モデルです。
コーヒーとケーキを注文しました。値段は５００円〜８００円です。
「こんにちは。」と彼女は言った。「今日はいい天気ですね！」
彼はパンとサラダを食べた。ドアを開けてベランダに出た。
ゲームをしてからテレビでドラマを見た。バスと電車で学校へ行った。""".splitlines()
REVIEWS = [("この商品はとても良かったです。", "肯定"), ("最高の映画でした！", "肯定"), ("料理がおいしかった。", "肯定"),
           ("デザインが素晴らしい。", "肯定"), ("この商品は最悪でした。", "否定"), ("二度と行きません。", "否定"),
           ("料理が冷めていた。", "否定"), ("パソコンが壊れていました！", "否定")]
HALF_WIDTH = ["ﾃﾞｰﾀﾍﾞｰｽにﾃﾞｰﾀを保存した。", "ﾊﾟｿｺﾝとﾋﾞﾃﾞｵ", "ｳﾞｧｲｵﾘﾝとｷﾞﾀｰ", "ｶﾞﾗｽのｺｯﾌﾟ", "ﾄﾞｱとﾍﾞﾗﾝﾀﾞ"]


def _cli(*argv) -> str:
    """Run `albertlm ARGV` in process; its stdout and stderr together (exit 0 asserted)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(a) for a in argv])
    assert code == 0, out.getvalue()
    return out.getvalue()


@pytest.fixture(scope="module")
def ja(tmp_path_factory):
    """tokenizer train (coverage 0.9995) on CORPUS -> a random tiny ALBERT beside it -> finetune classify
    (2 steps) on REVIEWS as JSONL -> convert --to hf of both. Returns the root and the convert summaries."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("ja_journey")
    (root / "corpus.txt").write_text("\n".join(CORPUS * 3) + "\n", encoding="utf-8")
    _cli("tokenizer", "train", "--input", root / "corpus.txt", "--vocab-size", 150, "--character-coverage", 0.9995,
         "--threads", 1, "--out", root / "spm")
    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=150, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(root / "spm")
    with open(root / "reviews.jsonl", "w", encoding="utf-8") as handle:
        for text, label in REVIEWS:
            handle.write(json.dumps({"text": text, "label": label}, ensure_ascii=False) + "\n")
    _cli("finetune", "classify", "--train", root / "reviews.jsonl", "--dev", root / "reviews.jsonl", "--model",
         root / "spm", "--out", root / "ft", "--max-steps", 2, "--batch-size", 4, "--lr", 0.05,
         "--max-seq-length", 32, "--no-progress")
    notes = {name: _cli("convert", root / name, root / f"hf_{name}", "--to", "hf") for name in ("spm", "ft")}
    return root, notes


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("transformers")


def test_transformers_classifier_gives_the_japanese_labels_of_albertlm_predict(ja, offline, tmp_path):
    """The journey's last step: AutoTokenizer + AutoModelForSequenceClassification on the export of a classifier
    fine-tuned with Japanese label names give `albertlm predict`'s labels, spelled as in the training file."""
    import csv

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    root, _ = ja
    _cli("predict", "classify", "--model", root / "ft", "--dev", root / "reviews.jsonl", "--out", tmp_path,
         "--no-progress")
    with open(tmp_path / "dev_predictions.tsv", encoding="utf-8", newline="") as handle:
        ours = [row["prediction"] for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]
    tok = AutoTokenizer.from_pretrained(str(root / "hf_ft"))
    model = AutoModelForSequenceClassification.from_pretrained(str(root / "hf_ft")).eval()
    assert set(model.config.id2label.values()) == {"肯定", "否定"}
    with torch.no_grad():
        ids = model(**tok([t for t, _ in REVIEWS], padding=True, return_tensors="pt")).logits.argmax(-1).tolist()
    assert [model.config.id2label[i] for i in ids] == ours


def test_exported_tokenizer_gives_our_ids_on_full_width_japanese(ja, offline):
    """AutoTokenizer on the export gives our ids on the corpus and on full-width forms (ＡＢＣ１２３, the
    ideographic space), which the model's NFKC charsmap folds alike."""
    from transformers import AutoTokenizer

    from albertlm.tokenization import load_tokenizer

    root, _ = ja
    lines = CORPUS + ["ＡＢＣ１２３とABC123", "全角　スペース", "「」『』（）・ー〜"]
    theirs = AutoTokenizer.from_pretrained(str(root / "hf_spm"))(lines, add_special_tokens=False)["input_ids"]
    assert [list(ids) for ids in load_tokenizer(root / "spm").encode_batch(lines)] == theirs


def test_exported_tokenizer_json_reads_half_width_katakana_with_sound_marks(ja, offline):
    """tokenizer.json (tokenizers, PreTrainedTokenizerFast(tokenizer_file=...), which docs/tokenization.md names
    for our ids) gave other ids than albertlm and sentencepiece on half-width katakana with ﾞ / ﾟ: sentencepiece
    makes デ of ﾃﾞ, `tokenizers`' Precompiled maps the two characters one by one (テ + U+3099), mostly <unk>."""
    from transformers import PreTrainedTokenizerFast

    from albertlm.tokenization import load_tokenizer

    root, _ = ja
    ours = [list(ids) for ids in load_tokenizer(root / "spm").encode_batch(HALF_WIDTH)]
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(root / "hf_spm" / "tokenizer.json"))
    assert theirs(HALF_WIDTH, add_special_tokens=False)["input_ids"] == ours


def test_convert_warns_that_autotokenizer_reads_half_width_katakana_otherwise(ja, offline):
    """transformers 5's AlbertTokenizer (AutoTokenizer, pipeline) rebuilds the normalizer from its options and
    reads ﾃﾞ as two characters, whatever tokenizer.json holds: another id than albertlm's for half-width text,
    and the convert summary said nothing (it warns for Korean with accent stripping)."""
    from transformers import AlbertTokenizer, AutoTokenizer

    from albertlm.tokenization import load_tokenizer

    root, notes = ja
    ours = [list(ids) for ids in load_tokenizer(root / "spm").encode_batch(HALF_WIDTH)]
    # AlbertTokenizer named explicitly: AutoTokenizer reads the export's tokenizer.json as written where the
    # rebuild would differ (tokenizer_config.json names PreTrainedTokenizerFast, thirtieth session)
    if AlbertTokenizer.from_pretrained(str(root / "hf_spm"))(HALF_WIDTH, add_special_tokens=False)["input_ids"] != ours:
        assert "half-width katakana" in notes["spm"] and "PreTrainedTokenizerFast" in notes["spm"]
        theirs = AutoTokenizer.from_pretrained(str(root / "hf_spm"))(HALF_WIDTH, add_special_tokens=False)
        assert theirs["input_ids"] == ours


# -- the raw-text reader on Japanese -------------------------------------------------------------------------
def test_a_japanese_quote_followed_by_to_is_one_sentence():
    """'「こんにちは。」と彼女は言った。' was cut after the quote: a sentence 'と彼女は言った。' starting with a particle
    (Japanese marks reported speech with 「...」と); a quote followed by a new sentence is still cut."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("「こんにちは。」と彼女は言った。「今日はいい天気ですね！」「行こう！」って彼は叫んだ。") == [
        "「こんにちは。」と彼女は言った。", "「今日はいい天気ですね！」", "「行こう！」って彼は叫んだ。"]
    assert split_sentences("彼は言った。「行こう！」「うん。」ところで何時？") == [
        "彼は言った。", "「行こう！」", "「うん。」", "ところで何時？"]


def test_a_full_stop_inside_japanese_brackets_ends_no_sentence():
    """'彼は「はい。そうです。」と答えた。' became three pieces with unbalanced brackets: '彼は「はい。', 'そうです。」',
    'と答えた。'. A bracket never closed stops no splitting."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("彼は「はい。そうです。」と答えた。（注：例です。次も例です。）終わり。") == [
        "彼は「はい。そうです。」と答えた。", "（注：例です。次も例です。）", "終わり。"]
    assert split_sentences("「閉じない括弧。次の文。") == ["「閉じない括弧。", "次の文。"]


def test_japanese_full_width_period_and_half_width_full_stop_end_sentences():
    """Japanese technical writing ends sentences with ． (with ， for commas), and half-width text with ｡: a
    paragraph of either was one 'sentence' (cut only at the length limit). ． between digits stays (１．５)."""
    from albertlm.data.corpus import split_sentences

    assert split_sentences("本研究では，手法を提案する．精度は１．５倍に向上した．") == [
        "本研究では，手法を提案する．", "精度は１．５倍に向上した．"]
    assert split_sentences("ﾃｽﾄです｡次の文です｡") == ["ﾃｽﾄです｡", "次の文です｡"]


@pytest.mark.parametrize("fmt", ["raw", "jsonl"])
def test_wrapped_half_width_katakana_lines_join_without_a_space(tmp_path, fmt):
    """Half-width katakana wrapped at a fixed width ('彼は週末にｺ' / 'ﾝﾋﾞﾆで...') was joined with a space, a word
    boundary (a '▁' piece) inside the word: 'ｺ ﾝﾋﾞﾆ', in data build and tokenizer train."""
    from albertlm.data.corpus import read_documents

    from test_journey_zh_audit20 import wrapped_sentences

    wrapped = ["彼は週末にｺ", "ﾝﾋﾞﾆで映画を見た。ﾃﾞｰ", "ﾀを保存した。"]
    sentences = wrapped_sentences(tmp_path / f"ja.{'txt' if fmt == 'raw' else 'jsonl'}", fmt, wrapped, read_documents)
    assert sentences == ["彼は週末にｺﾝﾋﾞﾆで映画を見た。", "ﾃﾞｰﾀを保存した。"]
