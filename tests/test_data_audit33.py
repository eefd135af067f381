"""Session 33, data: `data stats` reads shards with plain reads (no memory map), a JSONL record or CSV line has a
maximum size, an input that vanishes mid-build is named, Parquet columns of one name, `**` patterns and link loops."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.data import corpus, shards, stats
from albertlm.data.corpus import CorpusCounts, check_inputs, find_input_files, read_documents
from albertlm.errors import UserError
from conftest import alice_documents, assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny build in several shards (7 records each)."""
    root = tmp_path_factory.mktemp("built")
    text = alice_documents(root, 120)
    code = main(["data", "build", "--input", str(text), "--tokenizer", str(shared_path(*SPM)), "--out",
                 str(root / "out"), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress",
                 "--records-per-shard", "7"])
    assert code == 0
    return root / "out"


def _stats_json(directory, capsys) -> dict:
    assert main(["data", "stats", str(directory), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# -- data stats: plain reads, not memory maps ----------------------------------------------------------------
def test_stats_maps_no_shard(built, capsys, monkeypatch):
    """A memory map kept every page of a shard it had read in the process's resident memory: `data stats` peaked at
    334 MB on a 203 MB shard, 140 MB on a 19 MB one (58 MB for both now)."""
    before = _stats_json(built, capsys)
    assert len(json.loads((built / "meta.json").read_text())["shards"]) >= 3

    def no_map(*args, **kwargs):
        raise AssertionError("data stats mapped a shard")

    monkeypatch.setattr(shards.np, "memmap", no_map)
    assert _stats_json(built, capsys) == before


def test_stats_in_small_blocks_are_the_same(built, capsys, monkeypatch):
    whole = _stats_json(built, capsys)
    monkeypatch.setattr(stats, "BLOCK", 3)   # blocks cut inside shards and across their ends
    assert _stats_json(built, capsys) == whole


def test_stats_names_a_damaged_record_in_a_later_shard_with_small_blocks(built, tmp_path, capsys, monkeypatch):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in built.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    meta = json.loads((copy / "meta.json").read_text())
    dtype = shards.record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"],
                                meta["tokenizer"]["vocab_size"])
    shard = copy / meta["shards"][2]["file"]
    records = np.fromfile(shard, dtype=dtype)
    records["length"][5] = 0   # a length no build writes
    records.tofile(shard)
    monkeypatch.setattr(stats, "BLOCK", 3)
    first = meta["shards"][0]["num_instances"] + meta["shards"][1]["num_instances"]
    assert_one_error(capsys, main(["data", "stats", str(copy)]), f"instance {first + 5} (in shard 2)",
                     meta["shards"][2]["file"])


def test_stats_of_a_shard_cut_short_after_the_check_is_one_line(built, tmp_path, capsys, monkeypatch):
    """Through a map, a shard cut shorter after `open_shards` checked it was a ValueError traceback (or SIGBUS
    mid-read); now the one-line error."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in built.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    meta = json.loads((copy / "meta.json").read_text())
    opened = stats.open_shards

    def open_then_cut(directory, meta, *args):
        found = opened(directory, meta, *args)
        victim = Path(directory) / meta["shards"][1]["file"]
        os.truncate(victim, victim.stat().st_size // 2)
        return found

    monkeypatch.setattr(stats, "open_shards", open_then_cut)
    assert_one_error(capsys, main(["data", "stats", str(copy)]), meta["shards"][1]["file"], "changed while it was read")


# -- a JSONL record or CSV line has a maximum size -----------------------------------------------------------
def _record(text: str) -> str:
    return json.dumps({"text": text})


def test_a_jsonl_record_over_the_limit_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    short, long = _record("A short one. It fits."), _record("Word " * 40)
    path.write_text(short + "\n" + long + "\n" + short + "\n")
    limit = len(short.encode()) + 10
    with pytest.raises(UserError) as caught:
        list(read_documents([path], max_record_bytes=limit))
    message = str(caught.value)
    assert f"{path} line 2:" in message and f"over {limit:,} bytes" in message and "\n" not in message
    check_inputs([path], max_record_bytes=limit)   # the checks stop at the first record with the field
    assert len(list(read_documents([path], max_record_bytes=len(long.encode())))) == 3
    path.write_text(long + "\n" + short + "\n")
    with pytest.raises(UserError, match="line 1:"):   # ... which they read under the same limit
        check_inputs([path], max_record_bytes=limit)


def test_a_record_exactly_at_the_limit_is_read_whatever_its_line_end(tmp_path):
    record = _record("Exactly the limit. No more.")
    for end in ("\n", "\r\n", "\r"):
        path = tmp_path / f"a{len(end)}{end == chr(13)}.jsonl"
        path.write_bytes((record + end + record).encode())   # the last without a line end
        docs = list(read_documents([path], max_record_bytes=len(record)))
        assert [d.sentences for d in docs] == [["Exactly the limit.", "No more."]] * 2
        with pytest.raises(UserError, match="line 1:"):
            list(read_documents([path], max_record_bytes=len(record) - 1))


def test_a_csv_line_over_the_limit_is_an_error(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id,text\n1,A short row.\n2," + "word " * 50 + "\n")
    with pytest.raises(UserError, match=r"a\.csv line 3: a line over 60 bytes"):
        list(read_documents([path], max_record_bytes=60))
    check_inputs([path], max_record_bytes=60)   # the checks read the header line only
    with pytest.raises(UserError, match="line 1:"):
        check_inputs([path], max_record_bytes=6)
    counts = CorpusCounts()
    assert len(list(read_documents([path], counts=counts))) == 2


def test_a_jsonl_line_over_64_mib_is_a_one_line_build_error(tmp_path, capsys):
    """The default limit, through the CLI: refused by the checks before the build reads anything else."""
    path, limit = tmp_path / "big.jsonl", 64 << 20
    with open(path, "w") as handle:
        handle.write(_record("A fine record.") + "\n")
        handle.write('{"text": "' + "a" * (limit + 10) + '"}\n')
    code = main(["data", "build", "--input", str(path), "--tokenizer", str(shared_path(*SPM)), "--out",
                 str(tmp_path / "out"), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress"])
    assert_one_error(capsys, code, f"{path} line 2:", f"over {limit:,} bytes")
    assert not (tmp_path / "out").exists()


# -- an input that goes away -----------------------------------------------------------------------------------
def test_an_input_deleted_mid_read_is_named(tmp_path):
    """The build turned the FileNotFoundError into `--out ...: cannot write the data (No such file or
    directory)`."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("One sentence here.\nAnother one.\n")
    second.write_text("Second file.\n")
    facts = check_inputs([first, second], facts=[])
    documents = read_documents([first, second], facts=facts)
    assert next(documents).sentences == ["One sentence here.", "Another one."]
    second.unlink()
    with pytest.raises(UserError, match=f"input {second} is gone"):
        next(documents)


def test_an_input_deleted_before_the_checks_is_named(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("Text.\n")
    files = find_input_files([tmp_path])
    path.unlink()
    with pytest.raises(UserError, match=f"input {path} is gone"):
        check_inputs(files)


def test_a_build_whose_input_vanishes_mid_read_says_so(tmp_path, capsys, monkeypatch):
    from albertlm.data import build

    (tmp_path / "in").mkdir()
    alice_documents(tmp_path / "in", 60)
    (tmp_path / "in" / "b.txt").write_text("A second file. It goes away.\n")
    reader = build.read_documents

    def read_then_delete(*args, **kwargs):
        for k, document in enumerate(reader(*args, **kwargs)):
            if k == 0:
                (tmp_path / "in" / "b.txt").unlink()
            yield document

    monkeypatch.setattr(build, "read_documents", read_then_delete)
    code = main(["data", "build", "--input", str(tmp_path / "in"), "--tokenizer", str(shared_path(*SPM)), "--out",
                 str(tmp_path / "out"), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress"])
    assert_one_error(capsys, code, "b.txt is gone")


# -- Parquet -------------------------------------------------------------------------------------------------
def test_parquet_with_two_text_columns_is_an_error(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["A."]), pa.array(["B."])], names=["text", "text"]), path)
    with pytest.raises(UserError, match="2 columns named 'text'"):
        check_inputs([path])
    with pytest.raises(UserError, match="2 columns named 'text'"):
        list(read_documents([path]))


def test_parquet_nulls_and_an_empty_row_group(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": ["First doc.", None]}))
        writer.write_table(pa.table({"text": pa.array([], pa.string())}))
        writer.write_table(pa.table({"text": ["", "Third doc."]}))
    counts = CorpusCounts()
    assert [d.sentences for d in read_documents([path], counts=counts)] == [["First doc."], ["Third doc."]]
    assert (counts.bad_rows, counts.empty_records) == (1, 1)


# -- `**` patterns and symbolic link loops -------------------------------------------------------------------
def _looped_tree(root: Path) -> Path:
    (root / "c" / "sub").mkdir(parents=True)
    (root / "c" / "sub" / "a.txt").write_text("Hello there. General Kenobi.\n")
    (root / "c" / "top.txt").write_text("Top.\n")
    os.symlink(".", root / "c" / "self")
    os.symlink("..", root / "c" / "sub" / "up")
    return root / "c"


def test_a_double_star_pattern_through_two_link_loops_ends(tmp_path):
    """glob's `**` went round both loops, doubling the paths at each level: it never ended (a subprocess, so that
    a hang fails the test instead of stopping the suite)."""
    tree = _looped_tree(tmp_path)
    script = ("import sys; from albertlm.data.corpus import find_input_files; "
              "print([str(p) for p in find_input_files(sys.argv[1:])])")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(corpus.__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-c", script, f"{tree}/**", f"{tree}/**/*.txt"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("find_input_files did not end on a `**` pattern through two symbolic link loops")
    assert proc.returncode == 0, proc.stderr
    assert sorted(eval(proc.stdout)) == [f"{tree}/sub/a.txt", f"{tree}/top.txt"]


def test_double_star_patterns_match_as_glob_does_without_loops(tmp_path, monkeypatch):
    for name in ("t/a/1.txt", "t/a/b/2.txt", "t/a/b/c/3.json", "t/.h/x/4.txt", "t/.5.txt", "t/d/.6.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("Text.\n")
    os.symlink("../a", tmp_path / "t" / "d" / "link")
    monkeypatch.chdir(tmp_path)
    import glob

    for pattern in ("t/**", "t/**/*.txt", "**/*.txt", "t/*/**/*.json", "t/**/.6.txt", "t/**/b/**", "t/**/.*",
                    f"{tmp_path}/t/**/*.txt", "t/**/**/*.txt", "t/.h/**", "t/**/"):
        assert sorted(corpus._glob_paths(pattern)) == sorted(glob.glob(pattern, recursive=True)), pattern
