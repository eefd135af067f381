"""The lead's follow-ups in the twenty-fourth session's audits (each fails on the code before it)."""
from __future__ import annotations

from albertlm.data import corpus
from test_formats_audit24 import _documents


def test_an_unclosed_csv_quote_ends_the_file_as_a_bad_row_not_a_field_holding_the_rest(tmp_path, monkeypatch):
    """Memory stays bounded on a CSV corpus: an unclosed quote makes the csv module read every following line into
    one field; past CSV_FIELD_LIMIT (here made small) that is a bad row that ends the file, not a field of the whole
    rest of a many-GB file. The rows before it are read."""
    monkeypatch.setattr(corpus, "CSV_FIELD_LIMIT", 5000)
    path = tmp_path / "broken.csv"
    rest = "".join(f"row {k} of the rest. It is text.\n" for k in range(6000))   # past csv.field_size_limit() too
    path.write_text(f'id,text\n1,A good row. It reads.\n2,"An unclosed quote. Then\n{rest}', encoding="utf-8")
    documents, counts = _documents(path)
    assert documents == [["A good row.", "It reads."]]
    assert counts.bad_rows == 1 and "the rest of the file was not read" in counts.examples["bad_rows"]
    assert corpus.CSV_FIELD_LIMIT <= 10 * corpus.MAX_DOCUMENT_CHARS
