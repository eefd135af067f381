"""Fine-tuning loop audit 27, as a user reproducing the paper's fine-tuning with `albertlm finetune --recipe`:
`--recipe rte --epochs 3` (the docs: `--epochs` alone replaces a recipe's step count) kept the table's 200 warmup
steps for a run of 201 steps on the shared RTE's 2,127 pairs (the rate at its peak for one step, then down to 0
from 0.15 x lr) without a word: the warmup was only warned of once longer than the whole run. A recipe run for
`--epochs` now warms up for the table's share of the run (RTE 200 of 800 steps: 25%)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tasks import recipes
from conftest import save_tiny_pretrained
from test_finetune_checks import _pairs

QUICK = ["--batch-size", "4", "--max-seq-length", "16", "--seed", "3", "--train.progress=false",
         "--train.tensorboard=false", "--log-every", "1"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`) for every test here."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def _saved(out: Path) -> dict:
    newest = sorted((out / "checkpoints").glob("step_*"))[-1]
    return json.loads((newest / "run_config.json").read_text())


def _first_lr(out: Path) -> float:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(r["lr"] for r in records if r.get("split") == "train" and r["step"] == 1)


def test_a_recipe_trained_for_epochs_warms_up_for_the_tables_share_of_the_run(model_dir, tmp_path, capsys):
    data = _pairs(tmp_path / "d.jsonl", rows=16)          # batch 4: 4 steps an epoch
    out = tmp_path / "run"
    base = ["finetune", "classify", "--train", str(data), "--text-column", "a", "--model", str(model_dir),
            "--out", str(out), "--recipe", "rte", *QUICK]
    assert main([*base, "--epochs", "2"]) == 0
    captured = capsys.readouterr()
    assert "8 steps (batch 4, warmup 2)" in captured.out, captured.out      # was warmup 200
    assert "warmup" not in captured.err
    optim = _saved(out)["optim"]
    assert (optim["warmup_steps"], optim["warmup_ratio"]) == (-1, 0.25)     # rte: 200 of 800 steps
    assert _first_lr(out) == pytest.approx(3e-5 / 2)
    # the first run's command line again, longer: the same settings, accepted
    assert main([*base, "--epochs", "3", "--resume"]) == 0
    assert "the run was started" not in capsys.readouterr().err
    assert _saved(out)["train"]["epochs"] == 3.0 and _saved(out)["optim"]["warmup_ratio"] == 0.25
    # a warmup given wins; --max-steps keeps the table's warmup steps (a longer one warned of, as documented)
    assert main([*base, "--epochs", "2", "--warmup-steps", "1", "--overwrite"]) == 0
    assert "8 steps (batch 4, warmup 1)" in capsys.readouterr().out
    assert main([*base, "--max-steps", "2", "--overwrite"]) == 0
    captured = capsys.readouterr()
    assert "2 steps (batch 4, warmup 200)" in captured.out and "longer than the run" in captured.err


def test_every_recipes_share_gives_back_its_warmup_over_its_own_steps():
    for name, row in recipes.PAPER_TABLE.items():
        steps, warmup = row[4], row[5]
        shared = recipes.warmup_as_share(recipes.recipe(name))
        assert shared.optim.warmup_steps == -1 and shared.optim.warmup(steps) == warmup, name
        assert recipes.warmup_as_share(recipes.FAMILY_DEFAULTS["glue"]) == recipes.FAMILY_DEFAULTS["glue"]
