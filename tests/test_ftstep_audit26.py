"""Fine-tuning step checkpoints (twenty-sixth session): the checkpoint of a step evaluated records the SQuAD v2.0
no-answer threshold tuned at that evaluation in its run_config.json, so `predict squad --model RUN/checkpoints/step_N`
on new questions applies it, as `predict` from best/ (task.json) does (it applied 0.0, with a warning); a checkpoint of
a step not evaluated (`--save-every`) records none (another step's model's threshold is not its own); a resumed run,
also one that evaluates again a step whose evaluation was interrupted, saves the same run configs as an uninterrupted
run."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from albertlm.cli.main import main
from albertlm.tasks import squad
from albertlm.training.checkpoint import step_dir
from conftest import save_tiny_pretrained, shared_path
from test_squadj_audit26 import SMALL
from test_squadopt_audit26 import _predicted, _unlabelled, _warnings

STEPS = 6     # evaluated at 2, 4 and 6; a checkpoint at every step


def _argv(base, out, *extra):
    data = shared_path("squad", "dev-v2.0-small.json")
    return ["finetune", "squad", "--version", "2.0", "--train", str(data), "--dev", str(data), "--model", str(base),
            "--out", str(out), "--batch-size", "8", "--eval-batch-size", "64", "--lr", "1e-3", "--max-steps",
            str(STEPS), "--eval-every", "2", "--save-every", "1", "--train.keep_last", str(STEPS), *SMALL, *extra]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny SQuAD v2.0 run (BERT's head): (its base model, its directory)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("ftstep")
        (root / "base").mkdir()
        base = save_tiny_pretrained(root / "base")
        assert main(_argv(base, root / "run")) == 0
    finally:
        torch.set_num_threads(before)
    return base, root / "run"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _run_config(run_dir, step: int) -> dict:
    return json.loads((step_dir(run_dir, step) / "run_config.json").read_text())


def _tuned(run_dir) -> dict[int, float]:
    """dev/null_threshold per evaluated step, from metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["dev/null_threshold"] for r in records if "dev/null_threshold" in r}


def test_each_step_checkpoint_records_the_threshold_of_its_own_evaluation_only(run):
    _, out = run
    tuned = _tuned(out)
    assert sorted(tuned) == [2, 4, 6]
    for step in range(1, STEPS + 1):
        config = _run_config(out, step)
        if step in tuned:
            assert config["null_threshold"] == tuned[step], step
        else:   # saved between evaluations: no other step's threshold
            assert "null_threshold" not in config, (step, config.get("null_threshold"))
        assert "given_null_threshold" not in config     # what --resume keeps: nothing was given
    best = json.loads((out / "best" / "task.json").read_text())
    assert best["null_threshold"] == tuned[best["step"]]


def test_predict_from_an_evaluated_step_applies_its_threshold_as_best_does(run, tmp_path, capsys):
    """predict squad from checkpoints/step_N on new questions applied 0.0 (and said so); now the threshold tuned at
    step N: the best step's checkpoint predicts what best/ predicts. A step saved between evaluations still says
    that 0.0 is applied."""
    _, out = run
    new = _unlabelled(tmp_path / "new.json")
    best_step = json.loads((out / "best" / "task.json").read_text())["step"]
    predicted = {}
    for name, model in (("best", out / "best"), ("step", step_dir(out, best_step)), ("between", step_dir(out, 3))):
        assert main(["predict", "squad", "--model", str(model), "--data", str(new), "--out", str(tmp_path / name),
                     *SMALL]) == 0
        notes = [line for line in _warnings(capsys.readouterr().err) if "threshold" in line]
        assert len(notes) == (name == "between"), (name, notes)
        predicted[name] = _predicted(tmp_path / name)
    assert predicted["step"] == predicted["best"]
    predictions, odds = predicted["step"]
    threshold = _tuned(out)[best_step]
    assert {q for q, text in predictions.items() if text == ""} == {q for q, value in odds.items() if value > threshold}
    predictions, odds = predicted["between"]
    assert {q for q, text in predictions.items() if text == ""} == {q for q, value in odds.items() if value > 0.0}


def test_resume_from_a_step_recording_a_threshold_ends_as_the_uninterrupted_run(run, tmp_path, capsys):
    """A run killed after step 4's checkpoint (its run_config.json holds step 4's threshold) resumes from it and ends
    with the uninterrupted run's losses, best model, predictions and step checkpoints' run configs."""
    base, out = run
    killed = tmp_path / "run"
    shutil.copytree(out, killed)
    for step in (5, 6):
        shutil.rmtree(step_dir(killed, step))
    assert "null_threshold" in _run_config(killed, 4)
    assert main([*_argv(base, killed), "--resume"]) == 0
    capsys.readouterr()
    for name in ("train_log.json", "predictions.json", "null_odds.json", "best/task.json"):
        assert (killed / name).read_text() == (out / name).read_text(), name
    for step in (5, 6):
        assert _run_config(killed, step) == _run_config(out, step)
    assert json.loads((killed / "metrics.json").read_text())["best"] == json.loads((out / "metrics.json").read_text())["best"]


def test_a_step_evaluated_again_on_resume_gets_its_threshold_in_its_checkpoint(run, tmp_path, capsys, monkeypatch):
    """A Ctrl-C during step 4's evaluation saves step 4 without it; the resumed run evaluates step 4 first and
    rewrote only its trainer_state.pt: its run_config.json kept no threshold, unlike the uninterrupted run's."""
    base, out = run
    stopped = tmp_path / "run"
    tune = squad.tune_threshold
    calls = []

    def interrupted_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return tune(*args, **kwargs)

    monkeypatch.setattr(squad, "tune_threshold", interrupted_second)
    assert main(_argv(base, stopped)) == 130
    monkeypatch.setattr(squad, "tune_threshold", tune)
    assert "null_threshold" not in _run_config(stopped, 4)
    assert main([*_argv(base, stopped), "--resume"]) == 0
    assert "evaluating step 4 first" in capsys.readouterr().out
    assert _run_config(stopped, 4)["null_threshold"] == _tuned(out)[4]
    for step in range(1, STEPS + 1):
        assert _run_config(stopped, step) == _run_config(out, step), step
    assert (stopped / "train_log.json").read_text() == (out / "train_log.json").read_text()
