"""Lead follow-ups of the twenty-fifth session's audits.

1. SQuAD from the Hub read a sharded split (`validation-00000-of-00002.parquet`) as its one given shard, without a
   word, and refused a refs/convert/parquet split folder (`plain_text/validation/0000.parquet`) as "not a file":
   it now reads every shard of the split from any one (`tables.split_shards`, GLUE's and RACE's finder), in shard
   order, a missing shard named, and the split folder.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.tasks import squad
from albertlm.tasks.tables import DataError
from test_qa_tables_audit24 import SQUAD_SCHEMA, _hub_rows


def _shards(folder, rows, names):
    folder.mkdir(parents=True)
    cut = len(rows) // 2
    for name, part in zip(names, (rows[:cut], rows[cut:])):
        pq.write_table(pa.Table.from_pylist(part, schema=SQUAD_SCHEMA), folder / name)


def test_squad_reads_every_shard_of_a_hub_split_from_any_one(tmp_path):
    rows = _hub_rows()
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SQUAD_SCHEMA), whole)
    expected = squad.read_squad(whole)
    assert len(expected) == 14
    names = ("validation-00000-of-00002.parquet", "validation-00001-of-00002.parquet")
    _shards(tmp_path / "sharded", rows, names)
    for name in names:   # either shard given: the whole split, in shard order
        assert squad.read_squad(tmp_path / "sharded" / name) == expected, name
    _shards(tmp_path / "converted" / "validation", rows, ("0000.parquet", "0001.parquet"))
    assert squad.read_squad(tmp_path / "converted" / "validation") == expected
    assert squad.read_squad(tmp_path / "converted" / "validation" / "0001.parquet") == expected
    (tmp_path / "sharded" / names[0]).unlink()
    with pytest.raises(DataError, match="validation-00000-of-00002.parquet is not beside it"):
        squad.read_squad(tmp_path / "sharded" / names[1])
