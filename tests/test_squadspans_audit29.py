"""Audit 29, SQuAD answer spans on Chinese text with albert_zh's WordPiece vocab (CMRC-style data).

Measured first (scripts, not here): matching pieces back against each whitespace-separated word (`piece_spans`)
cannot place two [UNK]s in a row, and albert_zh's vocab has no "…", "—", "“", "”": the first [UNK] of "……"
took the rest of the word (a Chinese sentence) and every later token an empty span at its end. Of the 25,633
1-3 character Chinese answers of the 213 news lines, 495 were labelled wrong (the [UNK] and everything after it);
transformers' run_qa (BertTokenizerFast offsets, `prepare_train_features`) labelled 165 of the 2,952 two-character
answers of the 64 lines with an [UNK] otherwise. A tiny model fine-tuned 300 steps on 11 such questions predicted
none of them (EM 0: each answer was the [UNK]'s whole sentence); with the tokenizer's own spans, 7 (EM 63.6; the
rest share a context and a meaningless question). Now: 0 wrong labels, run_qa's labels on all 2,952, the ids as
before (tokenize_contexts' ids equal the whole context's on the news and the SQuAD sample), SentencePiece's spans
(spiece.model, or its tokenizer.json) as before.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from albertlm.tasks import squad
from albertlm.tokenization import load_tokenizer
from conftest import shared_path
from test_tokwp_audit29 import _zh_vocab

CJK = re.compile(r"[\u4e00-\u9fff]+")
UNKNOWN_RUN = re.compile("……|——|”“")


@pytest.fixture(scope="module")
def zh():
    return load_tokenizer(_zh_vocab())


@pytest.fixture(scope="module")
def news():
    """The 213 Chinese news lines, 7 of them with two unknown characters in a row (albert_zh's vocab has no
    … — “ ”)."""
    lines = [line for line in shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    assert len([line for line in lines if UNKNOWN_RUN.search(line)]) == 7
    return lines


def _label_text(context: str, ctx: squad.ContextTokens, start: int, end: int) -> str:
    first, last = squad._answer_tokens(ctx.spans, start, end)
    a, b = squad._visible(context, ctx.spans[first][0], ctx.spans[last][1])
    return context[a:b]


def test_an_answer_after_two_unknowns_is_labelled_and_predicted_as_itself(zh):
    """`他说……北京是中国的首都。`, answer 北京: the label was (13, 13), the first "…"'s [UNK] (its span the rest of
    the sentence), and a prediction at 北京's own tokens extracted '' (dropped: no answer at all)."""
    context = "他说……北京是中国的首都。"
    example = squad.SquadExample("q1", "中国的首都是哪里？", context, [("北京", 4)])
    settings = squad.SquadSettings(max_seq_length=64, max_query_length=16)
    (train,) = squad.build_features(zh, [example], settings, training=True)
    start, end = train.label
    assert zh.decode(train.input_ids[start:end + 1].tolist()).replace(" ", "") == "北京"
    (feature,) = squad.build_features(zh, [example], settings, training=False)
    assert feature.input_ids.tolist() == train.input_ids.tolist()
    logits = np.zeros((2, feature.length))
    logits[0, start], logits[1, end] = 10.0, 10.0
    prediction = squad.postprocess([example], [feature], [logits[0]], [logits[1]], zh, settings)["q1"]
    assert (prediction.best.text, prediction.best.start_char, prediction.best.end_char) == ("北京", 4, 6)


def test_every_chinese_answer_of_the_news_maps_back_to_itself(zh, news):
    """Every 1-3 character Chinese answer of the news: the text at its labelled tokens is the answer (was, for
    495 of them: the [UNK] and the rest of the sentence, every answer after a run of two unknowns)."""
    wrong, total = [], 0
    for context, ctx in zip(news, squad.tokenize_contexts(zh, news)):
        for run in CJK.finditer(context):
            for i in range(run.start(), run.end()):
                for n in (1, 2, 3):
                    if i + n <= run.end():
                        total += 1
                        text = _label_text(context, ctx, i, i + n)
                        if text != context[i:i + n]:
                            wrong.append((context[i:i + n], text[:20]))
    assert total > 20000 and not wrong, f"{len(wrong)} of {total}: {wrong[:3]}"


def test_labels_are_transformers_run_qa_labels(zh, news, tmp_path):
    """run_qa's `prepare_train_features` (BertTokenizerFast of the same vocab, whole context, offsets) gives the
    same ids and the same start/end token for every two-character Chinese answer (was: 165 differed)."""
    transformers = pytest.importorskip("transformers")
    zh.save(tmp_path)
    fast = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    compared = 0
    for context, ctx in zip(news, squad.tokenize_contexts(zh, news)):
        encoding = fast(context, add_special_tokens=False, return_offsets_mapping=True)
        assert encoding["input_ids"] == ctx.ids
        offsets = encoding["offset_mapping"]
        for run in CJK.finditer(context):
            for i in range(run.start(), run.end() - 1):
                start_char, end_char = i, i + 2
                first, last = 0, len(offsets) - 1     # run_qa's walk from both ends
                while first < len(offsets) and offsets[first][0] <= start_char:
                    first += 1
                while offsets[last][1] >= end_char:
                    last -= 1
                assert squad._answer_tokens(ctx.spans, start_char, end_char) == (first - 1, last + 1), \
                    context[i:i + 2]
                compared += 1
    assert compared > 8000


def test_ids_are_each_words_encode_batch_ids_and_the_whole_contexts(zh):
    """The spans changed, not the ids: on the news and the SQuAD sample (albert_zh's vocab) they are
    `encode_batch` of each word, as before, and `encode` of the whole context, as transformers' run_qa. Every
    token covers a character (was: 223 empty spans on the news, each after an [UNK])."""
    import json

    news = [line for line in shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    sample = json.loads(shared_path("squad", "sample.json").read_text(encoding="utf-8"))["data"]
    contexts = [*news, *dict.fromkeys(r["context"] for r in sample)]
    tokens = squad.tokenize_contexts(zh, contexts)
    per_word = [[i for ids in zh.encode_batch([c[s:e] for s, e in squad.split_words(c)]) for i in ids]
                for c in contexts]
    assert [t.ids for t in tokens] == per_word == zh.encode_batch(contexts)
    for context, t in zip(contexts, tokens):
        assert len(t.spans) == len(t.ids) and all(a < b for a, b in t.spans)


def test_sentencepiece_spans_are_matched_pieces_from_either_file(tmp_path):
    """albert-base-v2 as spiece.model or as its tokenizer.json: the same ids and the same spans, a bare "▁"
    zero-width (`tokenizers` gives it the next character) and "``" whole (`tokenizers`: its second backtick)."""
    from albertlm.interop.hf import tokenizer_pipeline

    spm = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    pipeline, why_not = tokenizer_pipeline(spm)
    assert why_not is None
    pipeline.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    as_json = load_tokenizer(tmp_path / "tokenizer.json")
    context = "He said ``Normandy (France)'' in 911 AD."
    (ours,), (theirs,) = (squad.tokenize_contexts(t, [context]) for t in (spm, as_json))
    assert (ours.ids, ours.spans) == (theirs.ids, theirs.spans)
    pieces = [spm.id_to_token(i) for i in ours.ids]
    texts = [context[a:b] for a, b in ours.spans]
    assert [texts[k] for k, piece in enumerate(pieces) if piece in ('"', "▁")] == ["", "``", "", "''"]


def test_a_decomposed_accent_stays_with_its_letter(zh):
    """BERT's accent stripping deletes a combining mark (e + U+0301); `tokenizers` gives it to no token, so an
    answer ending on the letter would lose it: it belongs to the token before it, as `piece_spans` had it
    (passes before the change too: a check of the rule that keeps it so)."""
    context = "un cafe\u0301 au lait"
    (ctx,) = squad.tokenize_contexts(zh, [context])
    start = context.index("cafe")
    assert _label_text(context, ctx, start, start + 5) == "cafe\u0301"
    assert all(not context[b:b + 1] == "\u0301" for _, b in ctx.spans)


def test_a_byte_level_bpe_tokenizer_json_maps_its_byte_pieces_back(tmp_path):
    """A byte-level BPE tokenizer.json (pieces of UTF-8 bytes, "Ã" "¼" for ü): matching pieces against the word
    gave "ürich" to the first byte piece of ü and nothing to the rest; its own offsets place each."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(["the city of Zurich is in Switzerland"] * 4, trainer)
    backend.save(str(tmp_path / "tokenizer.json"))
    tokenizer = load_tokenizer(tmp_path / "tokenizer.json")
    context = "In Zürich, 北京."
    (ctx,) = squad.tokenize_contexts(tokenizer, [context])
    start = context.index("Zürich")
    assert _label_text(context, ctx, start + 2, start + 6) == "rich"
    assert _label_text(context, ctx, start, start + 2) == "Zü"
    assert _label_text(context, ctx, context.index("京"), context.index("京") + 1) == "京"
