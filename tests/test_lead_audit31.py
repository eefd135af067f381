"""The lead's follow-ups of the thirty-first session's audits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from albertlm.cli.main import main

RACE = Path("../shared/data/race/RACE")


def test_race_predictions_on_a_split_missing_a_level_warn_as_fine_tuning_does(tmp_path, capsys):
    """`evaluate race --predictions` on the shared dev split (middle/ only) scored middle alone without a word,
    where docs/finetuning.md says a warning is given (fine-tuning's `_note_missing_levels` gives it)."""
    root = tmp_path / "RACE"
    shutil.copytree(RACE / "dev", root / "dev")
    answers = {}
    for path in sorted((root / "dev" / "middle").glob("*.txt")):
        record = json.loads(path.read_text(encoding="utf-8"))
        for i, answer in enumerate(record["answers"]):
            answers[f"middle/{path.name}#{i}"] = answer
    predictions = tmp_path / "dev_predictions.json"
    predictions.write_text(json.dumps(answers), encoding="utf-8")
    code = main(["evaluate", "race", "--data-dir", str(root), "--predictions", str(predictions)])
    out = capsys.readouterr()
    assert code == 0
    assert "RACE dev has no high passages: its accuracy is over middle alone" in out.err + out.out
    # asked for middle alone: nothing to say
    code = main(["evaluate", "race", "--data-dir", str(root), "--predictions", str(predictions), "--levels", "middle"])
    out = capsys.readouterr()
    assert code == 0 and "has no high" not in out.err + out.out
