"""Audit 29 of inference (`embed` / `fill-mask` / `predict classify` on real inputs): a CSV cell's quoted "\\r" and
"\\r\\n" came back as "\\n" in the `text` written to .parquet / .jsonl (pandas, pyarrow and the csv module read them
unchanged); `--pooling pooler` gives transformers' `pooler_output` (the trained pooler a sequence classifier's head
reads), refused in one line where the checkpoint holds none. Checked and found right (not pinned again here: earlier
audits pin them): row order and count over every input kind, mean/cls pooling against transformers' AlbertModel on
the same ids, batch 1 vs 64, fill-mask with several masks against AlbertForMaskedLM, predict classify's row order
and bf16."""
from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained, shared_path

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny AlbertForPreTraining (its SOP head reads a trained pooler) with a WordPiece vocab.txt."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny29"))


def _sst2(n: int) -> list[str]:
    rows = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    return [row.split("\t")[0] for row in rows]


def _embed(model: Path, source: Path, out: Path, *extra: str) -> int:
    return main(["embed", str(model), "--input", str(source), "--out", str(out), "--no-progress", "--device", "cpu",
                 *extra])


@pytest.mark.parametrize("compressed", [False, True])
def test_a_quoted_csv_cell_keeps_its_carriage_returns(tiny, tmp_path, capsys, compressed):
    """Texts with paragraphs written on Windows ("\\r\\n" inside a quoted cell) or an old Mac's "\\r": the csv module
    writes them quoted, and reads them back unchanged, as pandas and pyarrow do; embed's universal line reading made
    both "\\n", so the `text` column of its output was not the file's (a join on it missed those rows)."""
    sst = _sst2(8)
    texts = [sst[0] + "\r\n" + sst[1], sst[2] + "\r" + sst[3], sst[4], "two\r\n\r\nbreaks", sst[5]]
    source = tmp_path / ("in.csv.gz" if compressed else "in.csv")
    with (gzip.open(source, "wt", newline="", encoding="utf-8") if compressed
          else source.open("w", newline="", encoding="utf-8")) as handle:
        writer = csv.writer(handle)    # "\r\n" row ends, the cells holding "\r" quoted
        writer.writerow(["id", "text"])
        writer.writerows([k, text] for k, text in enumerate(texts))
    assert _embed(tiny, source, tmp_path / "e.parquet", "--text-field", "text") == 0, capsys.readouterr().err
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.column("text").to_pylist() == texts
    # the embeddings are those of the same texts given one a line of JSON
    import json

    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    assert _embed(tiny, lines, tmp_path / "j.npy") == 0
    got = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(got, np.load(tmp_path / "j.npy"))


def test_a_lone_carriage_return_outside_quotes_still_ends_a_csv_row(tiny, tmp_path, capsys):
    """An old Mac file's lone "\\r" row ends (outside quotes) still end rows, as pandas reads them; the quoted "\\r"
    inside a cell was "\\n" in the output before."""
    source = tmp_path / "mac.csv"
    source.write_bytes(b'text\rthe film\r"the plot\rwas bad"\rgood\r')
    assert _embed(tiny, source, tmp_path / "e.jsonl", "--text-field", "text") == 0, capsys.readouterr().err
    import json

    got = [json.loads(line)["text"] for line in (tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()]
    assert got == ["the film", "the plot\rwas bad", "good"]


def test_pooler_pooling_is_the_trained_poolers_output(tiny, tmp_path, capsys):
    """transformers users take `pooler_output` (tanh(W [CLS] + b), what a sequence classifier's head reads); embed
    offered only mean and [CLS]. Now `--pooling pooler`: the model's own pooler_output for each text, alone or in a
    padded batch."""
    from albertlm.model.albert import AlbertModel
    from albertlm.tokenization import load_tokenizer

    texts = [" ".join(TINY_WORDS[k % 7:k % 7 + 2 + k % 9]) for k in range(21)] + ["", "the film"]
    source = tmp_path / "t.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    for batch in ("1", "8"):
        assert _embed(tiny, source, tmp_path / f"p{batch}.npy", "--pooling", "pooler", "--batch-size", batch) == 0
        assert "pooler_output embeddings" in capsys.readouterr().err
    tokenizer = load_tokenizer(tiny)
    model = AlbertModel.from_pretrained(tiny).eval()
    with torch.no_grad():
        want = np.stack([model(torch.tensor([[tokenizer.cls_id, *tokenizer.encode(text), tokenizer.sep_id]]))
                         .pooler_output[0].numpy() for text in texts])
    for batch in ("1", "8"):
        np.testing.assert_allclose(np.load(tmp_path / f"p{batch}.npy"), want, atol=1e-5, rtol=0)


def test_pooler_pooling_without_a_trained_pooler_is_one_line(tiny, tmp_path, capsys):
    """A masked-LM checkpoint has no pooler (load_backbone leaves it out): one line, nothing written."""
    from albertlm.model.heads import AlbertForMaskedLM
    from albertlm.model.io import load_backbone

    mlm = tmp_path / "mlm"
    AlbertForMaskedLM(load_backbone(tiny).config).save_pretrained(mlm)
    (mlm / "vocab.txt").write_bytes((tiny / "vocab.txt").read_bytes())
    source = tmp_path / "t.txt"
    source.write_text("the film\nthe plot\n", encoding="utf-8")
    capsys.readouterr()
    code = _embed(mlm, source, tmp_path / "p.npy", "--pooling", "pooler")
    assert_one_error(capsys, code, "--pooling pooler", "no trained pooler", "--pooling mean or cls")
    assert list(tmp_path.glob("*.npy")) == [] and list(tmp_path.glob(".tmp-*")) == []
