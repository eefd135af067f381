"""Question answering and inference, audit 18: SQuAD files as `datasets` writes them (JSON lines, a bare list of
flat records), `embed --input` files holding a lone carriage return, stdin lines that are not UTF-8 (embed and
fill-mask), and `embed_texts` into an array of another length than the texts."""
from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks import squad
from conftest import assert_one_error, save_tiny_pretrained, shared_path


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny18"))


# ------------------------------------------------------------------------------ SQuAD as datasets writes it

def test_squad_json_lines_and_a_list_of_flat_records_read_as_the_flat_layout(tmp_path, capsys):
    """`load_dataset("squad_v2")[...].to_json(path)` writes one flat record a line: it was 'not valid JSON (line 2:
    Extra data)'; a bare list of the records was 'expected an object with a 'data' list'. Both read as the flat
    layout, and a JSON lines gold file scores predictions."""
    sample = shared_path("squad", "sample.json")
    records = json.loads(sample.read_text(encoding="utf-8"))["data"]
    lines, listed = tmp_path / "dev.jsonl", tmp_path / "dev.json"
    lines.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    listed.write_text(json.dumps(records), encoding="utf-8")
    expected = squad.read_squad(sample)
    assert squad.read_squad(lines) == expected and squad.read_squad(listed) == expected

    preds = tmp_path / "predictions.json"
    preds.write_text(json.dumps({e.qid: e.answers[0][0] if e.answers else "" for e in expected}))
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(lines), "--predictions", str(preds)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["exact"] == 100.0 and scores["total"] == len(expected)

    # a damaged line is still named by its line; a file that is no SQuAD JSON at all keeps its JSON error
    lines.write_text(json.dumps(records[0]) + "\n{bad\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"dev.jsonl:2: not valid JSON"):
        squad.read_squad(lines)
    listed.write_text('{"data": [}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"dev.json: not valid JSON \(line 1"):
        squad.read_squad(listed)


# ---------------------------------------------------------------------------------------------- embed

def _embed(model, path, out, *options) -> int:
    return main(["embed", str(model), "--input", str(path), "--out", str(out), "--device", "cpu", "--no-progress",
                 *options])


def test_embed_a_file_with_a_lone_carriage_return_has_one_row_per_line(tmp_path, capsys, tiny_mlm):
    """Lines were counted at "\\n" but read in text mode, which also splits at a lone "\\r": 3 rows for 4 texts, a
    numpy broadcast traceback and no --out. Now a line is what ends in "\\n" (a "\\r\\n" end dropped)."""
    from albertlm.tasks.inference import embed_texts, load_encoder, load_tokenizer_for

    path = tmp_path / "in.txt"
    path.write_bytes(b"the film\rwas good\nthe plot\r\nbad acting\n")
    assert _embed(tiny_mlm, path, tmp_path / "e.npy") == 0, capsys.readouterr().err
    got = np.load(tmp_path / "e.npy")
    model, model_dir, _ = load_encoder(tiny_mlm, "cpu")
    expected = embed_texts(model, load_tokenizer_for(model_dir), ["the film\rwas good", "the plot", "bad acting"])
    assert got.shape == expected.shape == (3, 32)
    np.testing.assert_allclose(got, expected, atol=1e-6)


class _BytesStdin(io.TextIOWrapper):
    """stdin as Python makes it under a C.UTF-8 locale: UTF-8 with surrogateescape, over a byte buffer."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


def test_stdin_lines_that_are_not_utf8_are_named(monkeypatch, tmp_path, capsys, tiny_mlm):
    """A byte that is not UTF-8 on stdin was read as a lone surrogate (a C.UTF-8 locale) and embedded or filled
    without a word, exit 0 (a strict locale: a UnicodeDecodeError traceback); an --input file with it was already
    refused. Now it is one line naming the stdin line, fill-mask after printing the lines before it."""
    monkeypatch.setattr(sys, "stdin", _BytesStdin(b"the film\n\xffthe plot\n"))
    capsys.readouterr()
    code = _embed(tiny_mlm, "-", tmp_path / "e.npy")
    assert_one_error(capsys, code, "stdin line 2: not UTF-8 text", "0xff")
    assert not (tmp_path / "e.npy").exists()

    monkeypatch.setattr(sys, "stdin", _BytesStdin(b"the [MASK] was good\r\nthe \xfe[MASK]\n"))
    code = main(["fill-mask", str(tiny_mlm), "--json", "--device", "cpu", "--top-k", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.strip()] == \
        ["albertlm fill-mask: error: stdin line 2: not UTF-8 text (byte 0xfe at column 5)"]
    assert [json.loads(line)["text"] for line in out.splitlines()] == ["the [MASK] was good"]

    monkeypatch.setattr(sys, "stdin", _BytesStdin("the [MASK] café\n".encode()))   # UTF-8 is read as it is
    assert main(["fill-mask", str(tiny_mlm), "--json", "--device", "cpu", "--top-k", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "the [MASK] café"


def test_embed_texts_into_an_array_of_another_length_is_refused(tiny_mlm):
    """`embed_texts(..., out=array)` with more texts than rows raised a numpy broadcast error after embedding the
    first window; with fewer, the last rows stayed zero without a word."""
    from albertlm.tasks.inference import embed_texts, load_encoder, load_tokenizer_for

    model, model_dir, _ = load_encoder(tiny_mlm, "cpu")
    tokenizer = load_tokenizer_for(model_dir)
    with pytest.raises(UserError, match="more texts than the 2 rows"):
        embed_texts(model, tokenizer, ["the film", "good", "bad"], out=np.zeros((2, 32), np.float32))
    with pytest.raises(UserError, match="1 texts for the 2 rows of the output array"):
        embed_texts(model, tokenizer, ["the film"], out=np.zeros((2, 32), np.float32))
    out = np.zeros((2, 32), np.float32)
    assert embed_texts(model, tokenizer, ["the film", "good"], out=out) is out and (np.abs(out).sum(1) > 0).all()
