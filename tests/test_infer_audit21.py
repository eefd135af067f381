"""Session 21's fill-mask / embed fixes: special tokens typed in a fill-mask text, a tokenizer's own mask token,
fill-mask answering a terminal line by line, embed's --out named for another format, embed's stdin kept out of
memory."""
from __future__ import annotations

import io
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks.inference import FillMask, encode_masked
from albertlm.tokenization import load_tokenizer
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained, shared_path


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny21"))


def test_fill_mask_reads_special_tokens_written_in_the_text_as_transformers_does():
    # ids of transformers 5's AutoTokenizer on `albertlm convert --to hf` of a model with this vocabulary: "[SEP]"
    # typed between two sentences is the separator (it was encoded as the pieces "▁[", "sep", "]": other ids and
    # other predictions than pipeline("fill-mask") on the exported model)
    tok = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    assert encode_masked(tok, "a [SEP] b [MASK]") == [2, 21, 3, 334, 4, 3]
    assert encode_masked(tok, "[CLS] x [MASK]") == [2, 2, 993, 4, 3]
    assert encode_masked(tok, "<pad> [MASK] <unk>") == [2, 0, 4, 1, 3]
    assert encode_masked(tok, "Hello,[MASK]!") == [tok.cls_id, *tok.encode("Hello,"), 4, *tok.encode("!"), tok.sep_id]
    with pytest.raises(UserError, match=r"^no \[MASK\] in 'a \[SEP\] b'$"):
        encode_masked(tok, "a [SEP] b")


def test_fill_mask_takes_the_tokenizers_own_mask_token(tmp_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    save_tiny_pretrained(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "<mask>", *TINY_WORDS])}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.save(str(tmp_path / "tokenizer.json"))
    fill = FillMask.load(tmp_path, device="cpu")
    own, typed = fill(["the film was <mask>", "the film was [MASK]"], top_k=3)   # "no [MASK] in ..." before
    assert len(own) == 1 and own == typed
    with pytest.raises(UserError, match=r"no \[MASK\] or <mask> in 'the film'"):
        fill(["the film"])


def test_fill_mask_answers_each_line_typed_at_a_terminal(tiny_mlm, monkeypatch, capsys):
    # from a terminal the results of a line came only when --batch-size (32) lines were typed, or at Ctrl-D
    printed_before_each_read = []

    def typed():
        for line in (b"the film was [MASK]\n", b"the [MASK] was good\n"):
            printed_before_each_read.append(capsys.readouterr().out)
            yield line

    class Terminal:
        buffer = typed()

        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal())
    assert main(["fill-mask", str(tiny_mlm), "--top-k", "1", "--device", "cpu"]) == 0
    assert printed_before_each_read[0] == ""
    assert printed_before_each_read[1].startswith("the film was [MASK]\n  ")
    assert capsys.readouterr().out.startswith("the [MASK] was good\n  ")


@pytest.mark.parametrize("name", ["emb.npz", "emb"])   # .parquet / .jsonl are outputs since audit26
def test_embed_out_named_for_another_format_is_refused(tiny_mlm, tmp_path, capsys, name):
    # .npy bytes were written under any name: emb.parquet, emb.npz, emb.jsonl held an .npy array, without a word
    (tmp_path / "in.txt").write_text("the film was good\n")
    code = main(["embed", str(tiny_mlm), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / name),
                 "--no-progress", "--device", "cpu"])
    assert_one_error(capsys, code, f"--out {tmp_path / name}", "NumPy .npy array", "emb.npy")
    assert not (tmp_path / name).exists()


def test_embed_stdin_is_not_held_in_memory(tiny_mlm, tmp_path, monkeypatch, capsys):
    # every text of stdin (and of a pipe) was kept in a list until the end: memory grew with the input
    import albertlm.tasks.inference as inference

    def count_rows(model, tokenizer, texts, *, out, progress, **_):
        rows = 0
        for rows, text in enumerate(texts, 1):
            assert text == f"the film was good {rows:06d} " + "x" * 40
        assert rows == len(out)
        progress(rows)
        return out

    monkeypatch.setattr(inference, "embed_texts", count_rows)

    def embed_stdin(lines: int, out: str) -> tuple[int, int]:
        data = "".join(f"the film was good {k:06d} {'x' * 40}\n" for k in range(1, lines + 1)).encode()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        tracemalloc.start()
        try:
            code = main(["embed", str(tiny_mlm), "--input", "-", "--out", str(tmp_path / out), "--no-progress",
                         "--device", "cpu"])
            return code, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert embed_stdin(10, "warm.npy")[0] == 0      # imports and the model's first load are not what is measured
    code, peak = embed_stdin(60_000, "e.npy")       # 4.4 MB of text: a list of it is 9 MB of str objects
    assert code == 0, capsys.readouterr().err
    assert peak < 2_000_000, f"peak {peak:,} bytes of Python objects for 4.4 MB of stdin"
    assert np.load(tmp_path / "e.npy", mmap_mode="r").shape == (60_000, 32)
