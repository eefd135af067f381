"""Lead's audit, session 33: small follow-ups on the lead's own files."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from test_distributed_audit21 import agent_store, clean_launch  # noqa: F401  (fixtures)

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


def test_a_stop_during_the_torch_import_tells_no_peer_through_a_second_torch_import(monkeypatch, capsys):
    """Under torchrun, `_say` left the error line in torchrun's store through `albertlm.training.distributed`, which
    imports torch: after a signal cut torch's import short that second import printed tracebacks instead of the line
    (multinode audit, session 33)."""
    import types

    from albertlm.cli import main as cli_main
    from albertlm.training import distributed

    told = []
    monkeypatch.setattr(distributed, "tell_peers_before_joining", lambda line: told.append(line))
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    cli_main._say("albertlm pretrain: interrupted", linger=False)
    assert told == ["albertlm pretrain: interrupted"]          # torch imported whole: the peers are told

    half = types.ModuleType("torch")
    half.__spec__ = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, "torch", half)
    cli_main._say("albertlm pretrain: interrupted", linger=False)
    assert told == ["albertlm pretrain: interrupted"]          # not again
    assert "albertlm pretrain: interrupted" in capsys.readouterr().err


def test_an_input_gone_before_the_build_sized_it_is_named_not_taken_for_a_write_error(tmp_path, monkeypatch, capsys):
    """build._build_into summed the inputs' sizes with Path.stat: an input deleted after the checks was an OSError
    that `_build` said as "--out ...: cannot write the data (No such file or directory)"."""
    from albertlm.data import build

    text = tmp_path / "a.txt"
    text.write_text("One sentence here. Another one there.\n\nA second document.\n", encoding="utf-8")
    real = build._build_into

    def delete_then_build(staging, cfg, ctx, files, *args, **kwargs):
        text.unlink()
        return real(staging, cfg, ctx, files, *args, **kwargs)

    monkeypatch.setattr(build, "_build_into", delete_then_build)
    from albertlm.cli.main import main

    spm = ROOT.parent / "shared" / "data" / "spm" / "albert-base-v2_spiece.model"
    code = main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(tmp_path / "out"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"input {text} is gone" in err and "cannot write the data" not in err, err


@pytest.mark.parametrize("rank, world_size, looks", [(1, 40, True), (0, 300, True), (1, 300, False)])
def test_only_rank_0_looks_up_the_missing_ranks_of_a_large_job(agent_store, monkeypatch, rank, world_size,
                                                                looks):  # noqa: F811
    """At a timeout every rank asked torchrun's store about every rank (world_size² requests: 16 M at 4096 ranks, all
    at once); above MISSING_LOOKUP_RANKS processes rank 0 alone looks (review, session 33)."""
    from albertlm.training import distributed

    asked = []
    real = distributed._missing_ranks
    monkeypatch.setattr(distributed, "_missing_ranks",
                        lambda *args, **kwargs: asked.append(1) or real(*args, **kwargs))
    agent_store.setenv("RANK", str(rank))
    with pytest.raises(UserError, match=f"timed out: 1 of {world_size} processes came"):
        distributed.wait_for_ranks(rank, world_size, timeout_s=0.2)
    assert bool(asked) is looks


def test_finetuning_md_says_the_prediction_files_move_in_together():
    import inspect

    from albertlm.cli import task_commands

    text = " ".join((ROOT / "docs/finetuning.md").read_text(encoding="utf-8").split())
    assert "are written into a folder in `--out` (`.tmp-predict-*`) and moved in together at the end" in text
    assert task_commands.PREDICTION_STAGING == ".tmp-predict-"
    assert "swap_into_place" in inspect.getsource(task_commands._install_predictions)


def test_data_md_says_a_micro_batch_is_read_in_one_pass():
    from albertlm.data import loader, shards

    text = " ".join((ROOT / "docs/data.md").read_text(encoding="utf-8").split())
    assert "(a micro-batch in one pass, `ShardMaps.read_many`: one read per run of a shard's records at most 8 KiB " \
           "apart" in text
    assert shards.NEAR_BYTES == 8192 and hasattr(loader, "Instances")
