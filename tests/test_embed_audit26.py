"""Session 26, `albertlm embed` on datasets: --input read as `data build` reads a corpus (compressed text, JSON
lines, CSV/TSV, Parquet, Arrow; --format, --text-field), one text per record, never split, stripped or skipped;
--out .parquet (text + fixed-size float32 list, a row group per window) and .jsonl besides .npy, all equal to the
bit and to the model computed directly; ambiguous columns and bad records refused in one line before anything is
written; a stopped embedding leaves nothing; how many texts gave no token said; a legacy-encoded file named with
the iconv hint."""
from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained, shared_path

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny26"))


def _sst2(n: int = 30) -> list[str]:
    """SST-2 dev sentences (real text, with GLUE's bare quotes), a multi-sentence text, an empty text."""
    rows = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    return [row.split("\t")[0] for row in rows] + ["The film was good. The plot was bad!  ", ""]


def _embed(tiny: Path, source: Path, out: Path, *extra: str) -> int:
    return main(["embed", str(tiny), "--input", str(source), "--out", str(out), "--no-progress", "--device", "cpu",
                 "--batch-size", "4", *extra])


def _parquet_embedding(path: Path) -> np.ndarray:
    table = pq.read_table(path)
    return np.asarray(table["embedding"].combine_chunks().flatten()).reshape(table.num_rows, -1)


def test_parquet_and_jsonl_outputs_equal_the_npy_and_the_model(tiny, tmp_path, capsys):
    import torch

    from albertlm.model.albert import AlbertModel
    from albertlm.tasks.inference import embed_batch, load_tokenizer_for

    texts = _sst2()
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    for name in ("e.npy", "e.parquet", "e.jsonl"):
        assert _embed(tiny, tmp_path / "in.txt", tmp_path / name) == 0, capsys.readouterr().err
    npy = np.load(tmp_path / "e.npy")
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 32)
    assert table["text"].to_pylist() == texts
    meta = json.loads(table.schema.metadata[b"albertlm"])
    assert meta["pooling"] == "mean" and meta["hidden_size"] == 32 and meta["normalize"] is False
    assert pq.ParquetFile(tmp_path / "e.parquet").metadata.num_row_groups == 1   # 32 texts: one window of 64 x 4
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in records] == texts
    assert npy.shape == (len(texts), 32)
    assert np.array_equal(_parquet_embedding(tmp_path / "e.parquet"), npy)
    assert np.array_equal(np.array([r["embedding"] for r in records], dtype=np.float32), npy)   # shortest repr
    # the model computed directly, each text alone (no length buckets, no padding): within float32 noise
    model = AlbertModel.from_pretrained(tiny).eval()
    tok = load_tokenizer_for(tiny)
    direct = np.concatenate([embed_batch(model, [[tok.cls_id, *tok.encode(t), tok.sep_id]], tok.pad_id, "mean",
                                         torch.device("cpu")) for t in texts])
    assert np.abs(direct - npy).max() < 1e-5


def _write_formats(root: Path, texts: list[str]) -> dict[str, tuple[Path, list[str]]]:
    """The same texts in every format embed reads, with the options each needs."""
    labels = [k % 2 for k in range(len(texts))]
    out: dict[str, tuple[Path, list[str]]] = {}
    pq.write_table(pa.table({"idx": list(range(len(texts))), "sentence": texts, "label": labels}),
                   root / "d.parquet", row_group_size=7)                       # several row groups, one column
    out["parquet"] = (root / "d.parquet", [])
    table = pa.table({"sentence": texts, "title": ["t"] * len(texts)})
    with pa.ipc.new_stream(str(root / "d.arrow"), table.schema) as writer:   # save_to_disk's Arrow stream
        writer.write_table(table, max_chunksize=5)
    out["arrow"] = (root / "d.arrow", ["--text-field", "sentence"])
    with gzip.open(root / "d.jsonl.gz", "wt", encoding="utf-8") as handle:   # one string field: taken
        handle.write("".join(json.dumps({"sentence": t, "label": l}) + "\n\n" for t, l in zip(texts, labels)))
    out["jsonl.gz"] = (root / "d.jsonl.gz", [])
    with open(root / "d.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence", "label"])
        writer.writerows(zip(texts, labels))
    out["csv"] = (root / "d.csv", ["--text-field", "sentence"])
    with lzma.open(root / "d.tsv.xz", "wt", encoding="utf-8") as handle:    # GLUE's TSV: bare quotes, no quoting
        handle.write("label\tsentence\n" + "".join(f"{l}\t{t}\n" for t, l in zip(texts, labels)))
    out["tsv.xz"] = (root / "d.tsv.xz", ["--text-field", "sentence"])
    (root / "d.bz2").write_bytes(bz2.compress("".join(t + "\n" for t in texts).encode()))
    out["lines.bz2"] = (root / "d.bz2", [])
    return out


def test_every_input_format_gives_the_rows_of_the_lines_file(tiny, tmp_path, capsys):
    texts = [t for t in _sst2() if "\t" not in t]
    (tmp_path / "in.txt").write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    assert _embed(tiny, tmp_path / "in.txt", tmp_path / "ref.npy") == 0
    reference = np.load(tmp_path / "ref.npy")
    for kind, (path, options) in _write_formats(tmp_path, texts).items():
        out = tmp_path / f"{kind}.parquet"
        assert _embed(tiny, path, out, *options) == 0, (kind, capsys.readouterr().err)
        assert pq.read_table(out)["text"].to_pylist() == texts, kind   # one text per record, not per sentence
        assert np.array_equal(_parquet_embedding(out), reference), kind
    # a record's text with a line break inside is one text (data build would split it into sentences)
    (tmp_path / "nl.jsonl").write_text(json.dumps({"text": "the film\nwas good. Very good."}) + "\n")
    assert _embed(tiny, tmp_path / "nl.jsonl", tmp_path / "nl.jsonl.out.jsonl") == 0
    assert [json.loads(line)["text"] for line in (tmp_path / "nl.jsonl.out.jsonl").read_text().splitlines()] == \
        ["the film\nwas good. Very good."]


@pytest.mark.parametrize("case", ["two text columns", "jsonl two fields", "null", "no field", "not a string",
                                  "short row", "damaged gzip", "wrong column", "column not text", "stdin field",
                                  "lines field", "compressed parquet", "json array",
                                  "csv without field"])
def test_ambiguous_or_bad_records_are_one_line_and_nothing_is_written(tiny, tmp_path, capsys, case, monkeypatch,
                                                                      request):
    source, options = tmp_path / "in.parquet", []
    if case in ("two text columns", "wrong column", "column not text"):
        pq.write_table(pa.table({"sentence": ["a", "b"], "title": ["x", "y"], "n": [1, 2]}), source)
        options = {"two text columns": [], "wrong column": ["--text-field", "text"],
                   "column not text": ["--text-field", "n"]}[case]
        phrases = {"two text columns": ["2 text columns", "'sentence'", "'title'", "--text-field"],
                   "wrong column": ["no column 'text'", "'sentence', 'title', 'n'"],
                   "column not text": ["column 'n' holds int64, not text", "'sentence'"]}[case]
    elif case == "jsonl two fields":
        source = tmp_path / "in.jsonl"
        source.write_text('{"id": "7", "text": "good film"}\n')
        phrases = ["in.jsonl:1", "2 text fields ('id', 'text')", "--text-field"]
    elif case == "null":
        pq.write_table(pa.table({"text": ["a", "b", None, "c", None]}), source)
        phrases = ["in.parquet row 3", "column 'text' is null", "and 1 more"]
    elif case in ("no field", "not a string"):
        source = tmp_path / "in.jsonl"
        bad = '{"title": "x"}' if case == "no field" else '{"text": null}'
        source.write_text('{"text": "good film"}\n\n' + bad + "\n")
        phrases = ["in.jsonl:3", "no field 'text'" if case == "no field" else "field 'text' is a JSON null"]
    elif case == "csv without field":   # a one-column file without a header lost its first text as the header
        source = tmp_path / "in.tsv"
        source.write_text("good film\nbad plot\n")
        phrases = ["in.tsv: a TSV file's texts are read from the column its first line names ('good film')",
                   "--text-field", "--format lines"]
    elif case == "short row":
        source = tmp_path / "in.csv"
        source.write_text("text,label\ngood film,1\nbad plot\n")
        options = ["--text-field", "text"]
        phrases = ["in.csv:3", "1 field(s), the header has 2"]
    elif case == "damaged gzip":
        source = tmp_path / "in.txt.gz"
        source.write_bytes(gzip.compress(b"".join(b"the film was good %d\n" % k for k in range(3000)))[:2000])
        phrases = ["in.txt.gz", "gz data is damaged or cut short"]
    elif case == "stdin field":
        stdin = open(__file__, encoding="utf-8")
        request.addfinalizer(stdin.close)   # (left open, it was a ResourceWarning)
        monkeypatch.setattr("sys.stdin", stdin)
        source, options = "-", ["--text-field", "text"]
        phrases = ["stdin is read as one text per line", "--text-field"]
    elif case == "lines field":
        source = tmp_path / "in.txt"
        source.write_text("good film\n")
        options = ["--text-field", "text"]
        phrases = ["in.txt is read as one text per line", "--text-field"]
    elif case == "json array":   # pandas' to_json default: one JSON document
        source = tmp_path / "in.json"
        source.write_text('[{"text": "good film"}, {"text": "bad plot"}]')
        phrases = ["in.json:1: a JSON array, not an object", "lines=True"]
    else:
        source = tmp_path / "in.parquet.gz"
        source.write_bytes(gzip.compress(b"PAR1" + b"\0" * 100))
        phrases = ["no Parquet file (gz-compressed)", "decompress it first"]
    code = _embed(tiny, source, tmp_path / "out" / "e.parquet", *options)
    assert_one_error(capsys, code, *phrases)
    assert not (tmp_path / "out").exists()


def test_a_stopped_or_failed_table_embedding_leaves_nothing_and_keeps_the_old_out(tiny, tmp_path, monkeypatch,
                                                                                  capsys):
    import builtins

    from albertlm.cli import infer_commands
    from albertlm.tasks import inference

    real = inference.embed_windows

    def one_window_then_stopped(*args, **kwargs):
        yield next(iter(real(*args, **kwargs)))
        raise KeyboardInterrupt

    class FullDisk:   # the file opens, its first write fails
        def __init__(self, path, *args, **kwargs):
            self.handle = builtins.open(path, *args, **kwargs)

        def write(self, data):
            raise OSError(28, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    def open_on_a_full_disk(path, mode="r", *args, **kwargs):
        return FullDisk(path, mode, *args, **kwargs) if "w" in mode else builtins.open(path, mode, *args, **kwargs)

    (tmp_path / "in.txt").write_text("the film was good\nthe plot was bad\n")
    for suffix in (".parquet", ".jsonl"):
        out = tmp_path / "new" / "sub" / f"e{suffix}"
        with monkeypatch.context() as patch:
            patch.setattr(inference, "embed_windows", one_window_then_stopped)
            assert _embed(tiny, tmp_path / "in.txt", out) == 130
        assert "interrupted" in capsys.readouterr().err
        assert not (tmp_path / "new").exists()
        # an --overwrite that fails (a full disk) leaves the file it would have replaced as it was, and no temporary
        old = tmp_path / f"old{suffix}"
        old.write_bytes(b"the user's embeddings")
        with monkeypatch.context() as patch:
            if suffix == ".parquet":
                patch.setattr(pq.ParquetWriter, "write_table", full_disk)
            else:
                patch.setattr(infer_commands, "open", open_on_a_full_disk, raising=False)
            code = _embed(tiny, tmp_path / "in.txt", old, "--overwrite")
        assert_one_error(capsys, code, f"--out {old}: cannot write there (No space left on device)")
        assert old.read_bytes() == b"the user's embeddings"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", *(["old.jsonl"] if suffix == ".jsonl" else []),
                                                              "old.parquet"]


def test_write_parquet_puts_out_a_row_group_per_window(tmp_path):
    from albertlm.cli.infer_commands import write_parquet

    written = []

    def windows():
        for k in range(3):
            if k:   # the window before was written (a row group in the file) before this one is computed
                written.append((tmp_path / "e.parquet").stat().st_size)
            yield [f"text {k}.{j}" for j in range(5)], np.full((5, 4), k, dtype=np.float32)

    assert write_parquet(tmp_path / "e.parquet", windows(), 4, {}) == 15
    assert written[0] < written[1]
    assert pq.ParquetFile(tmp_path / "e.parquet").metadata.num_row_groups == 3
    assert _parquet_embedding(tmp_path / "e.parquet")[:, 0].tolist() == [0.0] * 5 + [1.0] * 5 + [2.0] * 5


def test_out_names_and_the_note_on_texts_without_tokens(tiny, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the film\n\n   \nthe plot\n")
    assert _embed(tiny, tmp_path / "in.txt", tmp_path / "e.npy") == 0
    err = capsys.readouterr().err
    assert "2 texts (empty or blank) gave no token: their rows are the embedding of [CLS] [SEP] alone" in err
    assert np.load(tmp_path / "e.npy").shape == (4, 32)                        # row k is line k
    for name in ("e.npz", "e"):
        assert_one_error(capsys, _embed(tiny, tmp_path / "in.txt", tmp_path / name), "NumPy .npy array",
                         "e.parquet", "e.jsonl")
    assert_one_error(capsys, _embed(tiny, tmp_path / "in.txt", f"{tmp_path / 'x.parquet'}/"),
                     "embed writes one .parquet file", "'/'")


def test_a_legacy_encoded_file_is_named_with_the_iconv_hint(tiny, tmp_path, capsys):
    korean = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:4]
    (tmp_path / "ko.txt").write_bytes("\n".join(korean).encode("cp949"))
    assert_one_error(capsys, _embed(tiny, tmp_path / "ko.txt", tmp_path / "e.npy"), "ko.txt:1: not UTF-8 text",
                     "iconv -f cp949 -t utf-8")
    (tmp_path / "ko.txt.gz").write_bytes(gzip.compress("\n".join(korean).encode("cp949")))
    assert_one_error(capsys, _embed(tiny, tmp_path / "ko.txt.gz", tmp_path / "e.npy"), "ko.txt.gz:1: not UTF-8",
                     "iconv -f cp949 -t utf-8")
    assert not (tmp_path / "e.npy").exists()
