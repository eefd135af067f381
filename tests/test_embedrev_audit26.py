"""Session 26, a review of `albertlm embed`'s new inputs and outputs: row k of the output is record k of the input
whatever the file's compression (a compressed file of lines is split at "\\n" only, as a plain file and stdin
are), a compressed TSV of pandas' quoting is read quoted, an Arrow stream is taken by `.arrows` or --format arrow,
text UTF-8 cannot hold (a JSON lone surrogate, a string column of other bytes) is one line before anything is
written, --out the --input file is refused, --out is checked before the model loads; the .jsonl numbers read back
as the same float32."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_one_error
from test_embed_audit26 import _embed, _parquet_embedding, tiny  # noqa: F401 (tiny: the module's model fixture)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _texts(out: Path) -> list[str]:
    if out.suffix == ".jsonl":
        return [json.loads(line)["text"] for line in out.read_text(encoding="utf-8").splitlines()]
    return pq.read_table(out)["text"].to_pylist()


def test_a_compressed_file_of_lines_gives_the_rows_of_the_plain_file(tiny, tmp_path, capsys):
    # a lone CR inside a text, CR LF ends, a byte order mark, no "\n" after the last line
    data = b"\xef\xbb\xbfthe film\rwas good\r\nbad plot\n\nthe acting\r\r\nfine"
    expected = ["the film\rwas good", "bad plot", "", "the acting\r", "fine"]
    (tmp_path / "in.txt").write_bytes(data)
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(data))
    (tmp_path / "in.txt.bz2").write_bytes(bz2.compress(data))
    (tmp_path / "in.txt.xz").write_bytes(lzma.compress(data))
    assert _embed(tiny, tmp_path / "in.txt", tmp_path / "ref.parquet") == 0, capsys.readouterr().err
    assert _texts(tmp_path / "ref.parquet") == expected
    reference = _parquet_embedding(tmp_path / "ref.parquet")
    for name in ("in.txt.gz", "in.txt.bz2", "in.txt.xz"):   # were split at the lone CR: a row more, the rest shifted
        out = tmp_path / f"{name}.parquet"
        assert _embed(tiny, tmp_path / name, out) == 0, capsys.readouterr().err
        assert _texts(out) == expected, name
        assert np.array_equal(_parquet_embedding(out), reference), name
    # UTF-16 with a byte order mark in a compressed file is still read, transcoded
    (tmp_path / "w.txt.gz").write_bytes(gzip.compress("\ufeffthe film\r\nbad plot\n".encode("utf-16-le")))
    assert _embed(tiny, tmp_path / "w.txt.gz", tmp_path / "w.jsonl") == 0, capsys.readouterr().err
    assert _texts(tmp_path / "w.jsonl") == ["the film", "bad plot"]


def test_a_compressed_tsv_of_pandas_quoting_is_read_quoted(tiny, tmp_path, capsys):
    # pandas' to_csv("x.tsv.gz", sep="\t") of one text column: a text with a line break, one with quotes
    text = 'text\n"the film\nwas good"\n"the ""plot"""\nbad acting\n'
    (tmp_path / "in.tsv").write_text(text, encoding="utf-8")
    (tmp_path / "in.tsv.gz").write_bytes(gzip.compress(text.encode()))
    expected = ["the film\nwas good", 'the "plot"', "bad acting"]
    for name in ("in.tsv", "in.tsv.gz"):   # the .gz gave 4 rows: '"the film', 'was good"', ... without a word
        out = tmp_path / f"{name}.jsonl"
        assert _embed(tiny, tmp_path / name, out, "--text-field", "text") == 0, capsys.readouterr().err
        assert _texts(out) == expected, name


def test_an_arrow_stream_is_read_by_its_arrows_name_or_format_arrow(tiny, tmp_path, capsys):
    table = pa.table({"sentence": ["the film was good", "", "bad plot"]})
    for name in ("d.arrows", "d.stream"):
        with pa.ipc.new_stream(str(tmp_path / name), table.schema) as writer:
            writer.write_table(table)
    # `.arrows` (the stream format's suffix) was read as lines ("not UTF-8 text"), --format arrow "no Arrow file"
    for name, options in (("d.arrows", []), ("d.stream", ["--format", "arrow"])):
        out = tmp_path / f"{name}.jsonl"
        assert _embed(tiny, tmp_path / name, out, *options) == 0, capsys.readouterr().err
        assert _texts(out) == table["sentence"].to_pylist()


@pytest.mark.parametrize("suffix", [".npy", ".parquet", ".jsonl"])
def test_text_utf8_cannot_hold_is_one_line_before_anything_is_written(tiny, tmp_path, capsys, monkeypatch, suffix):
    from albertlm.tasks import inference

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(inference, "load_encoder", no_model)
    # Python's json.dumps of a text decoded with surrogateescape: the writers failed with a traceback
    (tmp_path / "in.jsonl").write_text('{"text": "good film"}\n{"text": "bad \\udcff plot"}\n', encoding="utf-8")
    assert_one_error(capsys, _embed(tiny, tmp_path / "in.jsonl", tmp_path / "out" / f"e{suffix}"),
                     "in.jsonl:2: field 'text' holds a lone surrogate ('\\udcff' at character 5)")
    # a string column of bytes that are no UTF-8 (a writer that does not check): a UnicodeDecodeError traceback
    values = pa.array([b"good film", b"bad \xff plot"], pa.binary())
    column = pa.Array.from_buffers(pa.string(), len(values), values.buffers())
    pq.write_table(pa.table({"text": column}), tmp_path / "in.parquet")
    assert_one_error(capsys, _embed(tiny, tmp_path / "in.parquet", tmp_path / "out" / f"e{suffix}"),
                     "in.parquet row 2: column 'text' is not UTF-8 text (byte 0xff at byte 5)")
    assert not (tmp_path / "out").exists()


def test_out_is_checked_before_the_input_is_read_and_the_model_loads(tiny, tmp_path, capsys, monkeypatch):
    from albertlm.cli import infer_commands
    from albertlm.tasks import inference

    def unexpected(*args, **kwargs):
        raise AssertionError("read or loaded before --out was checked")

    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "good film"}\n', encoding="utf-8")
    before = source.read_bytes()
    # --overwrite with --out the --input file put the embeddings in the texts' place
    assert_one_error(capsys, _embed(tiny, source, source, "--overwrite"), "is the --input file", "another --out")
    assert source.read_bytes() == before
    (tmp_path / "e.parquet").write_bytes(b"the user's embeddings")
    monkeypatch.setattr(inference, "load_encoder", unexpected)
    monkeypatch.setattr(infer_commands, "file_texts", unexpected)
    assert_one_error(capsys, _embed(tiny, source, tmp_path / "e.parquet"), "already exists", "--overwrite")
    (tmp_path / "d.npy").mkdir()
    assert_one_error(capsys, _embed(tiny, source, tmp_path / "d.npy"), "is a directory")
    assert (tmp_path / "e.parquet").read_bytes() == b"the user's embeddings"


def test_jsonl_numbers_read_back_as_the_same_float32(tmp_path):
    """A pure check (passed before): every finite float32, written as write_jsonl writes it, comes back bit-equal
    through json.loads (float64) and a cast to float32; a non-finite one as Python's json writes it."""
    from albertlm.cli.infer_commands import write_jsonl

    bits = np.random.default_rng(0).integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32)
    values = values[np.isfinite(values)][:199_040].reshape(-1, 64)
    edges = np.array([[0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, 1.1754944e-38] + [1.0] * 58], dtype=np.float32)
    vectors = np.concatenate([values, edges])
    rows = write_jsonl(tmp_path / "e.jsonl", [([f"t{k}" for k in range(len(vectors))], vectors)], 64, {})
    back = np.array([json.loads(line)["embedding"] for line in (tmp_path / "e.jsonl").open(encoding="utf-8")],
                    dtype=np.float32)
    assert rows == len(vectors) and np.array_equal(back.view(np.uint32), vectors.view(np.uint32))
    odd = np.array([[np.nan, np.inf, -np.inf, 0.5]], dtype=np.float32)
    write_jsonl(tmp_path / "n.jsonl", [(["x"], odd)], 4, {})
    assert (tmp_path / "n.jsonl").read_text() == '{"text": "x", "embedding": [NaN, Infinity, -Infinity, 0.5]}\n'
