"""Compressed, Parquet and Arrow corpora (issue 12): the same documents and the same shard bytes as the
plain text; bad rows and damaged files are counted skips; a wrong --text-field is one line, exit 2."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from albertlm.cli.main import main
from albertlm.data.build import BuildConfig, build
from albertlm.data.corpus import CorpusCounts, check_inputs, find_input_files, read_documents
from albertlm.errors import UserError
from conftest import shared_path

COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
            "zst": lambda data: zstandard.ZstdCompressor().compress(data)}
SPM = ("spm", "albert-base-v2_spiece.model")


def alice_paragraphs() -> list[str]:
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]  # the NLTK layout: a line a paragraph


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """One shared file per text format (JSONL written here from a shared book, a paragraph a record)."""
    root = tmp_path_factory.mktemp("sources")
    jsonl = root / "alice.jsonl"
    jsonl.write_text("".join(json.dumps({"id": k, "text": p}) + "\n" for k, p in enumerate(alice_paragraphs())))
    return {"lines": shared_path("text", "sample_text.txt"), "raw": shared_path("text", "gutenberg", "carroll-alice.txt"),
            "jsonl": jsonl, "wikiextractor": shared_path("text", "wiki_text", "wiki_00")}


def documents(files, fmt="auto", text_field="text", counts=None, progress=None):
    return [d.sentences for d in read_documents(files, fmt, text_field, counts, progress)]


@pytest.mark.parametrize("compression", sorted(COMPRESS))
@pytest.mark.parametrize("fmt", ["lines", "raw", "jsonl", "wikiextractor"])
def test_compressed_files_read_like_the_plain_file(sources, tmp_path, fmt, compression):
    plain = sources[fmt]
    packed = tmp_path / f"{plain.name}.{compression}"
    packed.write_bytes(COMPRESS[compression](plain.read_bytes()))
    counts, seen = CorpusCounts(), []
    assert documents([packed], fmt, counts=counts, progress=seen.append) == documents([plain], fmt)
    assert counts.compressed == {compression: 1} and counts.corrupt_files == 0
    assert sum(seen) == packed.stat().st_size  # the progress bar counts the bytes as stored
    auto = CorpusCounts()  # auto-detection looks through the compression and its suffix
    documents([packed], counts=auto)
    assert auto.formats == ({fmt: 1} if fmt != "raw" else auto.formats) and auto.documents >= 1


def test_a_truncated_compressed_file_keeps_its_text_and_is_counted(tmp_path):
    plain = shared_path("text", "gutenberg", "austen-emma.txt")
    full = documents([plain], "raw")[0]
    for compression in ("gz", "zst", "xz", "bz2"):
        data = bz2.compress(plain.read_bytes(), 1) if compression == "bz2" else COMPRESS[compression](plain.read_bytes())
        cut = tmp_path / f"emma.txt.{compression}"
        cut.write_bytes(data[:len(data) * 2 // 3])
        counts = CorpusCounts()
        (kept,) = documents([cut], "raw", counts=counts)
        assert counts.corrupt_files == 1 and str(cut) in counts.examples["corrupt_files"], compression
        assert 0 < len(kept) < len(full) and kept[:-1] == full[:len(kept) - 1]


def write_parquet(path: Path, columns: dict, row_group_size: int = 64) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != "meta.json"}


def build_dir(inputs, out: Path, **options) -> Path:
    build(BuildConfig(inputs=[str(i) for i in inputs], tokenizer=str(shared_path(*SPM)), out=str(out),
                      max_seq_length=64, dupe_factor=1, progress=False, **options))
    return out


def test_parquet_and_zst_builds_give_the_bytes_of_the_plain_text(sources, tmp_path):
    texts = alice_paragraphs()
    parquet = write_parquet(tmp_path / "alice.parquet", {"id": list(range(len(texts))), "text": texts})
    from_jsonl = shard_bytes(build_dir([sources["jsonl"]], tmp_path / "jsonl"))
    assert len(from_jsonl) >= 2 and sum(map(len, from_jsonl.values())) > 100_000
    assert shard_bytes(build_dir([parquet], tmp_path / "parquet", workers=2)) == from_jsonl
    zst = tmp_path / "alice.txt.zst"
    zst.write_bytes(COMPRESS["zst"](sources["raw"].read_bytes()))
    assert shard_bytes(build_dir([zst], tmp_path / "zst")) == shard_bytes(build_dir([sources["raw"]], tmp_path / "raw"))
    meta = json.loads((tmp_path / "zst" / "meta.json").read_text())
    assert meta["counts"]["corpus"]["compressed"] == {"zst": 1}


def test_datasets_parquet_and_save_to_disk_directories(sources, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    texts = alice_paragraphs()
    ds = datasets.Dataset.from_dict({"content": texts, "id": list(range(len(texts)))})
    hub = tmp_path / "hub"  # a Hub dataset's layout: README.md and data/train-0000K-of-00002.parquet
    (hub / "data").mkdir(parents=True)
    (hub / "README.md").write_text("---\nlicense: public domain\n---\n# Alice\n")
    for k in range(2):
        ds.shard(2, k, contiguous=True).to_parquet(str(hub / "data" / f"train-{k:05d}-of-00002.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"), num_shards=3)
    expected = documents([sources["jsonl"]])
    for directory in (hub, tmp_path / "saved"):
        files = find_input_files([directory])
        assert all(f.suffix in (".parquet", ".arrow") for f in files) and len(files) in (2, 3)
        assert documents(files, text_field="content") == expected
    code = main(["data", "build", "--input", str(tmp_path / "saved"), "--text-field", "content", "--tokenizer",
                 str(shared_path(*SPM)), "--out", str(tmp_path / "out"), "--max-seq-length", "64",
                 "--dupe-factor", "1", "--no-progress"])
    assert code == 0 and "arrow: 3" in capsys.readouterr().err
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(UserError, match=r"DatasetDict with splits train, test: pass one split's directory"):
        find_input_files([tmp_path / "dict"])


def test_null_rows_are_counted_and_a_missing_column_is_one_line(tmp_path, capsys):
    parquet = write_parquet(tmp_path / "a.parquet", {"text": ["One doc. Two sentences.", None, "Third doc."],
                                                     "title": ["a", "b", "c"]})
    counts = CorpusCounts()
    assert documents([parquet], counts=counts) == [["One doc.", "Two sentences."], ["Third doc."]]
    assert counts.bad_rows == 1 and counts.examples["bad_rows"] == f"{parquet} row 2: the text is null"
    code = main(["data", "build", "--input", str(parquet), "--text-field", "body", "--tokenizer",
                 str(shared_path(*SPM)), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{parquet} has no column 'body' (columns: text, title)" in err
    assert not (tmp_path / "out").exists()  # checked before any work
    with pytest.raises(UserError, match="column 'title' holds int64, not text"):
        check_inputs([write_parquet(tmp_path / "b.parquet", {"title": [1, 2]})], text_field="title")


def test_jsonl_without_the_text_field_names_file_line_and_field(tmp_path, capsys):
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"content": "A doc."}\n{"content": "Another."}\n')
    code = main(["data", "build", "--input", str(wrong), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{wrong} line 1: no field 'text' (fields: content; see --text-field)" in err
    some = tmp_path / "some.jsonl"
    some.write_text('{"text": "Fine. Really."}\n{"body": "x"}\n[1]\n{"text": 3}\n{"text": "Also fine."}\n')
    counts = CorpusCounts()
    assert documents([some], counts=counts) == [["Fine.", "Really."], ["Also fine."]]
    assert counts.bad_json_lines == 3
    assert counts.examples["bad_json_lines"] == f"{some} line 2: no field 'text' (fields: body; see --text-field)"


def test_format_parquet_refuses_other_files(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("Hello.\n")
    with pytest.raises(UserError, match="is not a parquet file"):
        check_inputs([text], "parquet")


def test_parquet_and_arrow_stream_with_bounded_memory(tmp_path):
    """10 MB of text in 50 row groups / 50 stream batches: pyarrow's pool never holds more than a few
    row groups' worth (measured: 1.4 MB for Parquet); a whole-table read would hold all 10 MB."""
    row = "This sentence is part of a long synthetic document used to check memory. " * 3
    texts = [f"{k}. {row}" for k in range(45_000)]
    total = sum(map(len, texts))
    parquet = write_parquet(tmp_path / "big.parquet", {"text": texts}, row_group_size=900)
    arrow = tmp_path / "big.arrow"
    table = pa.table({"text": texts})
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=900):
            writer.write_batch(batch)
    del table
    for path in (parquet, arrow):
        base, peak, count = pa.total_allocated_bytes(), 0, 0
        for doc in read_documents([path]):
            count += 1
            if count % 500 == 0:
                peak = max(peak, pa.total_allocated_bytes() - base)
        assert count == len(texts)
        assert peak < total / 4, (path.name, peak, total)
