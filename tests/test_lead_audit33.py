"""Lead's audit, session 33: small follow-ups on the lead's own files."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from albertlm.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def test_scale_and_grid_files_share_one_reader_without_private_imports():
    """scales.py read grid files' private helpers (_toml_reader, _TwiceGiven, _unique_keys); both now go through
    the public `grids.read_table_file`."""
    tree = ast.parse((ROOT / "src/albertlm/experiments/scales.py").read_text(encoding="utf-8"))
    private = [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               for alias in node.names if alias.name.startswith("_")]
    assert private == []


def test_a_toml_scale_file_without_a_toml_reader_says_so_for_scale_files(tmp_path, monkeypatch):
    from albertlm.experiments.scales import read_scale_file

    path = tmp_path / "mine.toml"
    path.write_text('base = "smoke"\n', encoding="utf-8")
    pytest.importorskip("tomllib")
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(UserError, match=r"TOML grid and scale files need Python 3\.11\+") as exc:
        read_scale_file(path)
    assert str(path) in str(exc.value) and "not valid TOML" not in str(exc.value)


@pytest.mark.parametrize("text, message", [
    ('{"base": "smoke", "steps": 3, "steps": 4}', "key 'steps' is given twice"),
    ('{"base": ', "not valid JSON"),
])
def test_a_json_scale_file_keeps_its_checks_through_the_shared_reader(tmp_path, text, message):
    from albertlm.experiments.scales import read_scale_file

    path = tmp_path / "mine.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        read_scale_file(path)
    path.write_bytes(b"\xef\xbb\xbf" + b'{"base": "smoke"}')   # a BOM reads as without
    assert read_scale_file(path).name
