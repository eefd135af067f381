"""Lead's follow-ups of session 29's audits."""
from __future__ import annotations

import numpy as np
import pytest

from albertlm.tasks.features import Feature, collate


def test_multiple_choice_mask_keeps_a_pad_token_typed_in_the_text():
    # RACE rows (C, T) are padded on the right to the example's longest choice. A literal "<pad>" in the text
    # encodes to pad_id (0) as it does in transformers, whose mask keeps it: only the right padding is masked.
    ids = np.array([[2, 7, 0, 9, 3, 0, 0],       # "<pad>" typed inside the text, then right padding
                    [2, 7, 8, 9, 5, 6, 3]])
    feature = Feature(input_ids=ids, token_type_ids=np.zeros_like(ids), example_index=0, label=1)
    batch = collate([feature], pad_id=0, pad_to=9)
    assert batch["attention_mask"][0].tolist() == [[1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 0, 0]]
    assert batch["input_ids"].shape == (1, 2, 9)


def test_csv_errors_name_the_line_a_multiline_record_begins_on(tmp_path):
    # a quoted article over several lines (as `datasets`' to_csv writes RACE): the error named the record's last line
    from albertlm.tasks.tables import DataError, read_records

    path = tmp_path / "rows.csv"
    path.write_text('id,text,label\n1,"one\nlong\narticle",0\n2,"two\nlines",1\n3,x\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"rows\.csv:7: 2 fields, the header has 3"):
        list(read_records(path))
    path.write_text('id,text,label\n1,"one\nlong\narticle",0\n', encoding="utf-8")
    assert [(line, record["id"]) for line, record in read_records(path)] == [(2, "1")]
