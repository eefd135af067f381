"""`albertlm params` and `albertlm info` through the CLI entry point."""
from __future__ import annotations

import json

from albertlm.cli.main import main


def test_params_json_with_overrides(capsys):
    assert main(["params", "--preset", "albert-base", "--embedding-size", "768", "--sharing", "attention", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["E"], row["sharing"]) == (768, "attention") and abs(row["params"] - 83e6) < 1.3e6


def test_params_table_lists_every_preset(capsys):
    from albertlm.config.presets import PRESETS

    assert main(["params"]) == 0
    out = capsys.readouterr().out
    assert all(f"\n{name} " in out for name in PRESETS if name != "bert-base") and "235" not in out.split("\n")[0]


def test_params_bad_override_is_one_line_error(capsys):
    assert main(["params", "--preset", "albert-base", "--num-groups", "5"]) == 2
    err = capsys.readouterr().err
    # named by the flag typed since session 28 (it said the field alone: `num_groups=5: ...`)
    assert err.startswith("albertlm params: error: --num-groups") and "num_groups=5" in err and "Traceback" not in err


def test_info_reads_a_checkpoint(tmp_path, capsys, tiny_config):
    from albertlm.model.albert import AlbertForPreTraining

    AlbertForPreTraining(tiny_config).save_pretrained(tmp_path)
    assert main(["info", str(tmp_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "albertlm" and info["config"]["hidden_size"] == 32 and info["parameters"] > 0
    assert main(["info", str(tmp_path / "missing")]) == 2
