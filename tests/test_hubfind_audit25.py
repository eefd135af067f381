"""Hub finder audit 25, as a user of the Hugging Face Hub's GLUE (`nyu-mll/glue`) and RACE (`ehovy/race`) files:
GLUE and RACE found a split's files each its own way. GLUE read every shard of a split from any one and refused a
missing one; RACE globbed the folder, so a split with a shard missing (a download cut short) trained and scored on
the shards that were there without a word, and a split's shards of two downloads (`train-*-of-00002` beside
`train-*-of-00003`, or beside `train.parquet`) were read together, every question twice. One finder
(`tables.split_exports` / `split_shards`) now serves both, with GLUE's behaviour. It also reads the Hub's
refs/convert/parquet layout (`rte/validation/0000.parquet`, a folder per split: it was "no training file" for
GLUE and "no passages found" for RACE, and its MNLI mismatched test split given as a file was submitted as
MNLI-m.tsv) and a repository's `data/` folder (a dataset of one config, as `push_to_hub` writes it). A Hub GLUE
test split without `idx` is numbered by row through its shards in order (pinned: reading it from its second shard
gives the same indexes); rows with idx beside rows without, which mixed two numberings in one submission, are
refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.config.task import FinetuneConfig
from albertlm.tasks import glue, race, specs
from albertlm.tasks.tables import DataError
from conftest import shared_path
from test_glue_hub_audit24 import CFG, N, ORDER, _hub_table, _parquet, _rows
from test_race import CharTokenizer
from test_race_hub_audit24 import _hub_rows
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)
from test_tasks_audit22 import _seen


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _race_parquet(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="module")
def original():
    """The shared RACE passages' train and dev questions."""
    return {split: race.read_race(shared_path("race", "RACE"), split) for split in ("train", "dev")}


# ------------------------------------------------------------------------------------------------ RACE

def test_a_race_split_with_a_shard_missing_is_refused_naming_it(tmp_path, original):
    """`all/train-00000-of-00002.parquet` without its `-00001-`: the first shard's questions were trained on alone,
    without a word; now the missing shard is named, as GLUE names it. Both there: the split whole."""
    rows = _hub_rows("train")
    first = _race_parquet(rows[:5], tmp_path / "all" / "train-00000-of-00002.parquet")
    with pytest.raises(DataError, match=r"train-00000-of-00002\.parquet: one of the 2 shards of a split, and "
                                        r"train-00001-of-00002\.parquet is not beside it"):
        race.read_race(tmp_path, "train")
    _race_parquet(rows[5:], first.with_name("train-00001-of-00002.parquet"))
    assert _seen(race.read_race(tmp_path, "train")) == _seen(original["train"])


@pytest.mark.parametrize("other", ["train-00000-of-00003.parquet", "train.parquet"])
def test_a_race_splits_shards_of_two_downloads_are_refused(tmp_path, other):
    """The split's shards beside another download of it (another shard count, or one file): every question was
    read twice (the two exports had one name less the shard count); now two exports of one split, refused."""
    rows = _hub_rows("train")
    _race_parquet(rows[:5], tmp_path / "all" / "train-00000-of-00002.parquet")
    _race_parquet(rows[5:], tmp_path / "all" / "train-00001-of-00002.parquet")
    if other == "train.parquet":
        _race_parquet(rows, tmp_path / "all" / other)
    else:
        for k, part in enumerate((rows[:3], rows[3:6], rows[6:])):
            _race_parquet(part, tmp_path / "all" / f"train-0000{k}-of-00003.parquet")
    label = "train.parquet" if other == "train.parquet" else r"train-\*-of-00003\.parquet"
    with pytest.raises(DataError, match=rf"all: train-\*-of-00002\.parquet and {label} are two exports of one split"):
        race.read_race(tmp_path, "train")


def test_race_from_refs_convert_parquet_and_data_folders(tmp_path, original):
    """The Hub's refs/convert/parquet branch keeps a split as numbered files in a folder named by it
    (`all/train/0000.parquet`, `0001.parquet`; or `middle/train/`, `high/train/`); a `push_to_hub` of one config
    has `data/train-00000-of-00001.parquet`: each reads as the passage files; a split's folder given itself too;
    a numbered shard missing between two is named."""
    rows = {split: _hub_rows(split) for split in ("train", "dev")}
    refs = tmp_path / "refs"
    for split, name in (("train", "train"), ("dev", "validation")):
        _race_parquet(rows[split][:4], refs / "all" / name / "0000.parquet")
        _race_parquet(rows[split][4:], refs / "all" / name / "0001.parquet")
        for level in race.LEVELS:
            _race_parquet([r for r in rows[split] if r["example_id"].startswith(level)],
                          tmp_path / "levels" / level / name / "0000.parquet")
        _race_parquet(rows[split], tmp_path / "pushed" / "data" / f"{name}-00000-of-00001.parquet")
    for root in (refs, refs / "all", tmp_path / "levels", tmp_path / "pushed"):
        for split in ("train", "dev"):
            assert _seen(race.read_race(root, split)) == _seen(original[split]), (root, split)
    assert _seen(race.read_race(refs / "all" / "validation", "dev")) == _seen(original["dev"])
    with pytest.raises(DataError, match=r"validation is the dev split's refs/convert/parquet split folder \(by its "
                                        r"name\): give the folder holding the split folders"):
        race.read_race(refs / "all" / "validation", "train")
    cfg = FinetuneConfig(max_seq_length=64)
    spec = specs.race_spec(refs / "all", CharTokenizer(), cfg, training=False, eval_splits=("dev",))
    assert [(s.name, len(s.features)) for s in spec.eval_sets] == [("dev", len(original["dev"]))]
    _race_parquet(rows["train"][:2], refs / "all" / "train" / "0002.parquet")
    (refs / "all" / "train" / "0001.parquet").unlink()
    with pytest.raises(DataError, match=r"0000\.parquet: one of a split's numbered shards \(0000\.parquet to "
                                        r"0002\.parquet\), and 0001\.parquet is not beside it"):
        race.read_race(refs, "train")


# ------------------------------------------------------------------------------------------------ GLUE

def _refs_glue(root: Path, task: str, rows, splits=("train", "validation", "test"), config: str = "") -> Path:
    """The Hub's refs/convert/parquet layout of glue/<config>: `<config>/<split>/0000.parquet` (test in two files);
    the config is the task's unless named."""
    config = config or task
    for split in splits:
        table = _hub_table(task, rows, test=split.startswith("test"))
        if split.startswith("test"):
            _parquet(table.slice(0, 10), root / config / split / "0000.parquet")
            _parquet(table.slice(10), root / config / split / "0001.parquet")
        else:
            _parquet(table, root / config / split / "0000.parquet")
    return root


def test_glue_from_refs_convert_parquet(tmp_path, tiny_tokenizer):
    """`--data-dir` of the refs/convert/parquet layout (the repository or the config folder) finds each split's
    folder; a split read from its folder or any of its numbered files is the whole split, its dev file named dev
    (not `0000_predictions.tsv`), its submission indexed by idx as from the Hub's one-file split."""
    rows = _rows("rte")
    refs = _refs_glue(tmp_path / "refs", "rte", rows)
    whole = _parquet(_hub_table("rte", rows, True), tmp_path / "hub" / "rte" / "test-00000-of-00001.parquet")
    task = glue.get_task("rte")
    for data_dir in (refs, refs / "rte"):
        assert glue.find_split(task, data_dir, "test") == [refs / "rte" / "test"]
        assert glue.find_split(task, data_dir, "dev") == [refs / "rte" / "validation"]
    expected = [(e.guid, e.text_a, e.text_b) for e in glue.read_examples("rte", whole, has_labels=False)]
    for path in (refs / "rte" / "test", refs / "rte" / "test" / "0000.parquet", refs / "rte" / "test" / "0001.parquet"):
        assert [(e.guid, e.text_a, e.text_b) for e in glue.read_examples("rte", path, has_labels=False)] == expected
    assert [e.guid for e in glue.read_examples("rte", refs / "rte" / "test", has_labels=False)] == [
        str(i) for i in ORDER]
    assert glue.split_name(refs / "rte" / "validation" / "0000.parquet") == "dev"
    spec = specs.glue_spec("rte", tiny_tokenizer, CFG, data_dir=refs / "rte", training=False)
    assert [s.name for s in spec.eval_sets] == ["dev", "test:test"]


def test_glue_refs_convert_mnli_mismatched_and_ax_are_named_by_their_folders(tmp_path, tiny_tokenizer):
    """refs/convert/parquet's `mnli_mismatched/test/0000.parquet` given as --test was submitted as MNLI-m.tsv (the
    matched set's file: the server scores it against the matched labels), `ax/test/0000.parquet` was not the
    diagnostic set; by their folders now, as the Hub's `mnli_mismatched/test-00000-of-00001.parquet`."""
    rows = _rows("mnli")
    refs = _refs_glue(tmp_path, "mnli", rows, ("validation", "test"), "mnli_mismatched")
    _refs_glue(tmp_path, "mnli", rows, ("test",), "ax")
    logits = np.random.default_rng(0).normal(size=(N, 3))
    for test in (refs / "mnli_mismatched" / "test" / "0000.parquet", refs / "mnli_mismatched" / "test"):
        spec = specs.glue_spec("mnli", tiny_tokenizer, CFG, test_files=[test], training=False)
        assert spec.eval_sets[0].write({"logits": logits}, tmp_path / "out")[0].name == "MNLI-mm.tsv"
    assert glue.split_name(refs / "mnli_mismatched" / "validation" / "0000.parquet") == "dev_mismatched"
    assert glue.is_diagnostic(refs / "ax" / "test" / "0000.parquet")
    assert glue.is_diagnostic(refs / "ax" / "test")


def test_glue_from_a_pushed_datasets_data_folder(tmp_path):
    """A `push_to_hub` of one config keeps its splits in `data/`: `--data-dir` of the repository finds them."""
    rows = _rows("sst2")
    train = _parquet(_hub_table("sst2", rows, False), tmp_path / "data" / "train-00000-of-00001.parquet")
    test = _parquet(_hub_table("sst2", rows, True), tmp_path / "data" / "test-00000-of-00001.parquet")
    task = glue.get_task("sst2")
    assert glue.find_split(task, tmp_path, "train") == [train]
    assert glue.find_split(task, tmp_path, "test") == [test]


def test_a_glue_shard_of_another_count_and_an_empty_shard(tmp_path):
    """A shard number past its count (another download's) is named; two files of one shard number (another width)
    too; a shard without rows is read (the Hub writes one for a split smaller than its shards)."""
    rows = _rows("sst2")
    table = _hub_table("sst2", rows, True)
    first = _parquet(table, tmp_path / "test-00000-of-00002.parquet")
    _parquet(table.slice(0, 0), tmp_path / "test-00001-of-00002.parquet")
    assert [e.guid for e in glue.read_examples("sst2", first, has_labels=False)] == [str(i) for i in ORDER]
    stray = _parquet(table.slice(0, 1), tmp_path / "test-00002-of-00002.parquet")
    with pytest.raises(DataError, match=r"test-00002-of-00002\.parquet: shard 2 of a split of 2 \(numbered 0 to 1\)"):
        glue.read_examples("sst2", first, has_labels=False)
    stray.unlink()
    _parquet(table, tmp_path / "test-0-of-00002.parquet")
    with pytest.raises(DataError, match=r"shard 0 of a split again, beside test-0"):
        glue.read_examples("sst2", first, has_labels=False)


def test_a_glue_test_split_without_idx_is_numbered_by_row_through_its_shards(tmp_path):
    """Without `idx` (removed before `to_parquet`), a test split is numbered by row, on through its shards in shard
    order, whichever shard is given (the indexes GLUE's test file has for the whole split in datasets' order). A
    split with idx in one shard and not in another mixed the two numberings in one submission: refused."""
    rows = _rows("sst2")
    table = _hub_table("sst2", rows, True)
    bare = table.drop(["idx"])
    second = _parquet(bare.slice(10), tmp_path / "a" / "test-00001-of-00002.parquet")
    _parquet(bare.slice(0, 10), tmp_path / "a" / "test-00000-of-00002.parquet")
    assert [e.guid for e in glue.read_examples("sst2", second, has_labels=False)] == [str(i) for i in range(N)]
    mixed = _parquet(table.slice(0, 10), tmp_path / "b" / "test-00000-of-00002.parquet")
    _parquet(bare.slice(10), tmp_path / "b" / "test-00001-of-00002.parquet")
    with pytest.raises(DataError, match=r"test-00001-of-00002\.parquet:1: no idx column, and .*test-00000-of-00002"
                                        r"\.parquet:1 has one"):
        glue.read_examples("sst2", mixed, has_labels=False)
