"""`albertlm data build` and what --out holds: an earlier build survives every refused or failed build, user
files are never removed, parts built with other settings are refused (when built and when read)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.data.shards import read_meta
from albertlm.errors import UserError
from conftest import alice_documents, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("text")
    return alice_documents(root, 400)


def _build(inputs, out, *extra, tokenizer=None) -> int:
    """Exit status; a success's summary is not kept on stderr."""
    code = main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(tokenizer or shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress",
                 "--chunk-chars", "2000", *extra])
    if code == 0 and _CAPSYS:
        _CAPSYS[0].readouterr()
    return code


_CAPSYS: list = []


@pytest.fixture(autouse=True)
def _keep_capsys(capsys):
    _CAPSYS[:] = [capsys]
    yield
    _CAPSYS.clear()


def _digest(directory: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def _error(capsys, code, *phrases) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for phrase in phrases:
        assert phrase in err, err
    return err


def test_a_refused_or_failed_overwrite_keeps_the_earlier_build(text, tmp_path, capsys):
    out = tmp_path / "out"
    assert _build([text], out) == 0
    before = _digest(out)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    _error(capsys, _build([text], out, "--overwrite", tokenizer=tmp_path / "typo.model"), "tokenizer not found")
    _error(capsys, _build([empty], out, "--overwrite"), "no instances were built")
    _error(capsys, _build([text], out, "--overwrite", "--format", "parquet"), "not a parquet file")
    assert _digest(out) == before and not [p for p in out.iterdir() if p.name.startswith(".")]
    assert _build([text], out, "--overwrite", "--seed", "7") == 0     # a good one replaces it
    after = _digest(out)
    assert after.keys() == before.keys() and after != before


def test_a_failed_build_leaves_no_empty_out(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    _error(capsys, _build([empty], tmp_path / "new" / "out"), "no instances were built")
    assert not (tmp_path / "new" / "out").exists()


def test_user_files_are_never_removed(text, tmp_path, capsys):
    spark = tmp_path / "spark"
    spark.mkdir()
    shutil.copy(text, spark / "part-00000")
    shutil.copy(text, spark / "shard-00000")
    before = _digest(spark)
    _error(capsys, _build([spark], spark), "inside the input directory")
    _error(capsys, _build([spark], spark / "built"), "inside the input directory")
    _error(capsys, _build([spark / "part-00000"], spark), "holds the input file")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "part-00001").write_text("mine")
    _error(capsys, _build([text], notes), "not empty and holds no data build")
    assert _digest(spark) == before and _digest(notes) == {"part-00001": hashlib.sha256(b"mine").hexdigest()}
    # a build's directory: the user's own files stay through --overwrite, a crash's leftovers go
    out = tmp_path / "out"
    assert _build([text], out) == 0
    (out / "part-00000").write_text("mine")
    (out / "shard-00099.bin").write_bytes(b"left over")
    assert _build([text], out, "--overwrite") == 0
    assert (out / "part-00000").read_text() == "mine" and not (out / "shard-00099.bin").exists()


def test_a_part_must_match_the_parts_in_out(text, tmp_path, capsys):
    out = tmp_path / "parts"
    assert _build([text], out, "--num-shards", "2", "--shard-index", "0") == 0
    _error(capsys, _build([text], out, "--num-shards", "2", "--shard-index", "1", "--max-seq-length", "32"),
           "meta.part-00000-of-00002.json", "max_seq_length 32 vs 64")
    _error(capsys, _build([text], out, "--num-shards", "3", "--shard-index", "1"), "num_shards 3 vs 2")
    _error(capsys, _build([text], out, "--num-shards", "2", "--shard-index", "1",
                          tokenizer=shared_path("vocab", "albert_zh_vocab.txt")), "tokenizer")
    assert _build([text], out, "--num-shards", "2", "--shard-index", "1") == 0
    assert read_meta(out)["num_shards"] == 2


@pytest.mark.parametrize("extra, phrases", [
    (["--num-shards", "2", "--shard-index", "1", "--max-seq-length", "32"], ["max_seq_length 32 vs 64"]),
    (["--num-shards", "2", "--shard-index", "1", "--masking", "token"], ["masking"]),
    (["--num-shards", "3", "--shard-index", "1"], ["meta.part-00001-of-00003.json", "num_shards 3 vs 2"]),
    (["--num-shards", "2", "--shard-index", "1", "--tokenizer", "ZH"], ["tokenizer"]),
])
def test_reading_parts_built_apart_names_the_part_and_the_setting(text, tmp_path, capsys, extra, phrases):
    """Parts built elsewhere and copied together are checked when read (training would crash otherwise)."""
    out, other = tmp_path / "parts", tmp_path / "other"
    assert _build([text], out, "--num-shards", "2", "--shard-index", "0") == 0
    extra = [str(shared_path("vocab", "albert_zh_vocab.txt")) if a == "ZH" else a for a in extra]
    assert main(["data", "build", "--input", str(text), "--out", str(other), "--dupe-factor", "1",
                 "--no-progress", "--chunk-chars", "2000", *(["--max-seq-length", "64"] if "32" not in extra else []),
                 *(["--tokenizer", str(shared_path(*SPM))] if "--tokenizer" not in extra else []), *extra]) == 0
    for path in other.iterdir():
        if path.name != "word_starts.npy":
            shutil.copy(path, out / path.name)
    with pytest.raises(UserError) as caught:
        read_meta(out)
    for phrase in phrases:
        assert phrase in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_corpus_of_fewer_chunks_than_parts_leaves_the_last_parts_empty(tmp_path, capsys):
    """Two documents in one chunk, built as 3 parts: parts 1 and 2 own no chunk and are empty builds (not an
    error that leaves the set unfinishable), and the union of the parts is the single build."""
    from albertlm.data.loader import PretrainingDataset

    docs = tmp_path / "in.txt"
    docs.write_text("The cat sat on the mat. It was warm there.\nThe dog barked at it.\n\n"
                    "A second document starts. It has two sentences.\n")
    single, parts = tmp_path / "single", tmp_path / "parts"
    assert _build([docs], single) == 0
    for i in range(3):
        assert _build([docs], parts, "--num-shards", "3", "--shard-index", str(i)) == 0, capsys.readouterr().err
    meta = read_meta(parts)
    assert meta["num_shards"] == 3 and meta["num_instances"] == read_meta(single)["num_instances"] > 0
    a, b = PretrainingDataset(single), PretrainingDataset(parts)
    assert len(a) == len(b) and all((a[i]["input_ids"] == b[i]["input_ids"]).all() for i in range(len(a)))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    _error(capsys, _build([empty], tmp_path / "none", "--num-shards", "2", "--shard-index", "1"),
           "no instances were built")
