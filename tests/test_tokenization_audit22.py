"""Tokenization audit 22, as a user who embeds and encodes text holding special tokens and trains on compressed
text: `[SEP]`, `[CLS]`, `[MASK]`, `<pad>`, `<unk>` written in the text are their ids with a SentencePiece model
too (as transformers' AlbertTokenizer, our WordPiece vocabs and fill-mask read them), in `encode`, `embed` and
`tokenizer encode`; a training on .gz input shows the share of the files read, not of their text against their
compressed size."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import shared_path

ALBERT_MODEL = ("spm", "albert-base-v2_spiece.model")
# ids of transformers 5's AlbertTokenizer.from_pretrained(a directory holding albert-base-v2's spiece.model),
# add_special_tokens=False: each special token typed in the text is its id, "[sep]" (not the token) stays text
TYPED = {"a [SEP] b": [21, 3, 334], "a[SEP]b": [21, 3, 334], "[CLS] x": [2, 993], "x <unk> y": [993, 1, 13, 93],
         "<pad>": [0], "a [MASK] b": [21, 4, 334], "a [sep] b": [21, 636, 18, 3492, 500, 334],
         "[SEP][SEP]": [3, 3],
         "Is it [MASK]? [SEP] Yes, 2,000 of them": [25, 32, 4, 13, 60, 3, 1643, 15, 8819, 16, 105]}


@pytest.fixture(scope="module")
def albert():
    return load_tokenizer(shared_path(*ALBERT_MODEL))


def test_sentencepiece_reads_special_tokens_in_the_text_as_transformers_does(albert):
    """"a [SEP] b" was "▁a ▁[ sep ] ▁b" (six ids) with a SentencePiece model and [21, 3, 334] with a WordPiece
    vocab, a tokenizer.json, in fill-mask and in transformers: `embed` and `tokenizer encode` saw no separator."""
    assert [albert.encode(text) for text in TYPED] == list(TYPED.values())
    assert albert.encode_pair("q [SEP] r", "s")[0] == [2, 2593, 3, 761, 3, 13, 18, 3]
    # text without special tokens is google's segmentation, as before; a batch mixing both keeps each
    plain = "In 2003, 10,000 people said (it) was £5."
    alone = albert.encode(plain)
    assert albert.encode_batch([plain, "a [SEP] b", plain]) == [alone, [21, 3, 334], alone]
    # the corpus reader (data build) reads them as text, as google's builder does
    literal = load_tokenizer(shared_path(*ALBERT_MODEL))
    literal.special_tokens_as_text()
    assert literal.tokenize("a [SEP] b") == ["▁a", "▁[", "s", "ep", "]", "▁b"]


def test_ids_equal_transformers_albert_tokenizer_on_text_with_special_tokens(albert, tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "spiece.model").write_bytes(shared_path(*ALBERT_MODEL).read_bytes())
    theirs = transformers.AlbertTokenizer.from_pretrained(str(tmp_path))
    texts = [*TYPED, "The [MASK] of France [SEP] Paris <unk>", "ＡＢＣ [CLS] café 😀\u200b[SEP]\r\n"]
    assert [albert.encode(t) for t in texts] == [theirs(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_embed_reads_a_typed_separator_as_the_separator(albert):
    """embed_texts(model, sentencepiece_tokenizer, ["a [SEP] b"]) embedded the pieces "▁[", "sep", "]"."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertModel
    from albertlm.tasks.inference import embed_batch, embed_texts

    torch.manual_seed(0)
    model = AlbertModel(ModelConfig(vocab_size=albert.vocab_size, embedding_size=8, hidden_size=16, num_layers=1,
                                    num_heads=2, ffn_size=16, max_position_embeddings=32)).eval()
    got = embed_texts(model, albert, ["a [SEP] b", "[CLS] x"], batch_size=2)
    want = np.concatenate([embed_batch(model, [[2, 21, 3, 334, 3]], albert.pad_id, "mean", torch.device("cpu")),
                           embed_batch(model, [[2, 2, 993, 3]], albert.pad_id, "mean", torch.device("cpu"))])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _stdin(monkeypatch, data: bytes) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_tokenizer_encode_reads_a_typed_separator_alike_for_both_kinds(monkeypatch, capsys):
    """`albertlm tokenizer encode` gave the [SEP] id for "[SEP]" in a line with a vocab.txt and the pieces
    "▁[", "s", "ep", "]" with a spiece.model."""
    for tokenizer, expected in ((("vocab", "albert_zh_vocab.txt"), [[143, 102, 144], [101, 143, 102, 144, 102]]),
                                (ALBERT_MODEL, [[21, 3, 334], [2, 21, 3, 334, 3]])):
        for extra, want in (([], expected[0]), (["--special"], expected[1])):
            _stdin(monkeypatch, b"a [SEP] b\r\n")
            assert main(["tokenizer", "encode", "-t", str(shared_path(*tokenizer)), *extra]) == 0
            assert json.loads(capsys.readouterr().out) == want, tokenizer


def test_training_progress_on_compressed_input_counts_the_files_bytes(tmp_path, capsys, monkeypatch):
    """The characters read were counted against the .gz files' sizes: past 100% within the first file (silent
    from there) and back to the file's size at its end; now the bytes of the files read, as data build counts."""
    from albertlm.tokenization import sentencepiece

    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8")
    files = []
    for k in range(4):
        files.append(tmp_path / f"part{k}.txt.gz")
        files[-1].write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    total = sum(f.stat().st_size for f in files)
    seen: list[int] = []
    update = sentencepiece.LogProgress.update

    def recording(self, count: int) -> None:
        update(self, count)
        seen.append(self.n)

    monkeypatch.setattr(sentencepiece.LogProgress, "update", recording)
    monkeypatch.setattr(sentencepiece, "PLAIN_PROGRESS_AFTER", 0.0)
    assert main(["tokenizer", "train", "--input", *map(str, files), "--vocab-size", "300", "--threads", "1",
                 "--out", str(tmp_path / "tok")]) == 0
    assert seen and seen == sorted(seen) and max(seen) == total, (seen, total)
    err = capsys.readouterr().err
    percents = [int(line.split("read ")[1].split("%")[0]) for line in err.splitlines()
                if line.startswith("tokenizer train: read ") and "%" in line]
    assert percents == [20, 50, 70], err     # each .gz is read whole by the decompressor's first 1 MiB read
