"""SQuAD follow-ups of the twenty-sixth session: a v1.1 file read as v2.0 by `evaluate --model` (the model's recorded
version) or `finetune --version 2.0` is said as `evaluate --predictions` says it; `--null-threshold X|recorded`
applies a threshold to predict / evaluate (both heads) instead of re-tuning it on a labelled file, and to the
predictions of finetune's unlabelled --dev; a v2.0 prediction on a file without answers by a model that records no
threshold (a run's checkpoints/step_N) says that 0.0 is applied."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main
from albertlm.tasks import squad
from conftest import SHARED, assert_one_error, save_tiny_pretrained, shared_path
from test_squad_audit23 import _v11
from test_squadj_audit26 import SMALL, _save_squad_model

DEV = SHARED / "squad" / "dev-v2.0-small.json"   # (shared_path here: a collection error where it is absent)
HEADS = {"bert": "AlbertForQuestionAnswering", "xlnet": "AlbertForSquadV2"}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`); each test skipped where the SQuAD dev file is absent."""
    shared_path("squad", "dev-v2.0-small.json")


def _v20_model(path, head: str = "bert", threshold: float | None = None):
    """A tiny random SQuAD model that a v2.0 fine-tuning recorded (task.json), with `threshold` as its tuned one
    (None: none recorded, as a run's checkpoints/step_N has none)."""
    _save_squad_model(path, HEADS[head])
    info = {"family": "squad", "version": "2.0", "max_seq_length": 40,
            "settings": {"doc_stride": 8, "max_query_length": 12, "n_best_size": 20, "max_answer_length": 30}}
    if threshold is not None:
        info["null_threshold"] = threshold
    if head == "xlnet":
        info["squad_head"] = "xlnet"
    (path / "task.json").write_text(json.dumps(info))
    return path


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if ": warning: " in line and "unknown token" not in line]


def _unlabelled(path):
    """dev-v2.0-small.json's questions without answers (new questions to predict on), no version named."""
    data = json.loads(DEV.read_text(encoding="utf-8"))
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{"id": qa["id"], "question": qa["question"], "answers": []}
                                for qa in paragraph["qas"]]
    data.pop("version")
    path.write_text(json.dumps(data))
    return path


# ------------------------------------------------------------------- 1. a v1.1 file read as v2.0 is said
@pytest.mark.parametrize("head, advice", [("bert", "give --version 1.1 if it is v1.1"),
                                          ("xlnet", "give --null-threshold 1e9")])
def test_evaluate_model_of_a_v2_model_on_a_v1_1_file_says_so(tmp_path, capsys, head, advice):
    """The version came from the model's task.json: scored by the v2.0 script without a word before. Tuned on the
    file itself the numbers are v1.1's (a '' prediction scores 0, as the wrong span it replaces: measured equal)."""
    model = _v20_model(tmp_path / "m", head)
    v11 = _v11(tmp_path / "v11.json")
    assert main(["evaluate", "squad", "--model", str(model), "--data", str(v11), *SMALL]) == 0
    captured = capsys.readouterr()
    notes = [line for line in _warnings(captured.err) if "looks like a SQuAD v1.1 file" in line]
    assert len(notes) == 1, captured.err
    assert "read as v2.0 (the version the model was fine-tuned with)" in notes[0] and advice in notes[0]
    assert "(--version 2.0)" not in notes[0]
    if head == "bert":
        as_v2 = json.loads(captured.out)["dev"]
        assert main(["evaluate", "squad", "--model", str(model), "--data", str(v11), "--version", "1.1", *SMALL]) == 0
        captured = capsys.readouterr()
        assert not [line for line in _warnings(captured.err) if "v1.1 file" in line]
        as_v1 = json.loads(captured.out)["dev"]
        assert as_v2["f1"] == pytest.approx(as_v1["f1"]) and as_v2["exact"] == pytest.approx(as_v1["exact_match"])


def test_finetune_version_2_on_a_v1_1_file_says_so_once_per_file(tmp_path):
    """`finetune --version 2.0` on a v1.1 train and dev file (the same file given twice: one line)."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import specs
    from albertlm.tokenization import load_tokenizer

    v11 = _v11(tmp_path / "v11.json")
    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    cfg = FinetuneConfig(max_seq_length=64)
    cfg.train.progress = False
    settings = squad.SquadSettings(max_seq_length=64, doc_stride=32, max_query_length=16)
    spec = specs.squad_spec("2.0", tokenizer, cfg, train_file=v11, dev_file=v11, settings=settings)
    notes = [line for line in spec.warnings if "looks like a SQuAD v1.1 file" in line]
    assert len(notes) == 1 and "(--version 2.0)" in notes[0] and "give --version 1.1" in notes[0], spec.warnings
    assert not specs.squad_spec("", tokenizer, cfg, train_file=v11, dev_file=v11, settings=settings).warnings


# --------------------------------------------------------------------------------- 2. --null-threshold
def _predicted(out):
    predictions = json.loads((out / "predictions.json").read_text())
    odds = json.loads((out / "null_odds.json").read_text())
    return predictions, odds


@pytest.mark.parametrize("head", ["bert", "xlnet"])
def test_null_threshold_recorded_or_a_number_is_applied_to_a_labelled_file(tmp_path, capsys, head):
    """`predict squad` on a labelled file re-tuned the threshold on it, always: neither the dev-tuned one the run
    recorded nor one of the user's could be applied to a held-out labelled file. The metrics are those of
    predictions.json at the threshold applied, the tuned best_* beside them; without the flag, as before."""
    model = _v20_model(tmp_path / "m", head, threshold=0.25)
    out = tmp_path / "tuned"
    assert main(["predict", "squad", "--model", str(model), "--data", str(DEV), "--out", str(out), *SMALL]) == 0
    tuned = json.loads(capsys.readouterr().out)["dev"]
    assert tuned["null_threshold"] == tuned["best_f1_thresh"]
    odds = _predicted(out)[1]
    middle = sorted(odds.values())[len(odds) // 2]
    for given, applied in (("recorded", 0.25), (str(middle), middle)):
        out = tmp_path / f"p{given}"
        assert main(["predict", "squad", "--model", str(model), "--data", str(DEV), "--out", str(out),
                     "--null-threshold", given, *SMALL]) == 0
        metrics = json.loads(capsys.readouterr().out)["dev"]
        predictions, odds = _predicted(out)
        assert metrics["null_threshold"] == applied and metrics["best_f1_thresh"] == tuned["best_f1_thresh"]
        nulled = {qid for qid, text in predictions.items() if text == ""}
        assert nulled == {qid for qid, value in odds.items() if value > applied}
        from albertlm.tasks.metrics import squad_v2_scores

        golds = squad.gold_answers(squad.read_squad(DEV))
        assert metrics["f1"] == pytest.approx(squad_v2_scores(golds, predictions)["f1"])
    assert 0 < len([1 for value in odds.values() if value > middle]) < len(odds)


def test_null_threshold_refusals_are_one_line(tmp_path, capsys):
    model = _v20_model(tmp_path / "m")            # records no threshold (as a run's checkpoints/step_N)
    base = ["predict", "squad", "--model", str(model), "--data", str(DEV), "--out", str(tmp_path / "p"), *SMALL]
    assert_one_error(capsys, main([*base, "--null-threshold", "high"]), "--null-threshold 'high'", "a number")
    assert_one_error(capsys, main([*base, "--null-threshold", "nan"]), "--null-threshold 'nan'")
    assert_one_error(capsys, main([*base, "--null-threshold", "recorded"]), "records no tuned null threshold",
                     "give a number")
    assert_one_error(capsys, main([*base, "--version", "1.1", "--null-threshold", "0"]),
                     "SQuAD v1.1 has no unanswerable questions")
    assert not (tmp_path / "p").exists()
    preds = tmp_path / "predictions.json"
    preds.write_text(json.dumps({e.qid: "" for e in squad.read_squad(DEV)}))
    assert_one_error(capsys, main(["evaluate", "squad", "--data", str(DEV), "--predictions", str(preds),
                                   "--null-threshold", "0"]), "--null-threshold applies to a model's predictions",
                     "--na-prob-thresh")


def test_finetune_applies_and_records_a_null_threshold_for_an_unlabelled_dev_only(tmp_path, capsys):
    """finetune's unlabelled --dev (its end-of-run prediction) applied 0.0 (nothing to tune on): a number given is
    applied and recorded in best/task.json (predict applies it to new files) and kept by --resume; a labelled
    --dev tunes its own (refused in one line), `recorded` is predict's."""
    (tmp_path / "base").mkdir()
    base = save_tiny_pretrained(tmp_path / "base")
    new = _unlabelled(tmp_path / "new.json")
    out = tmp_path / "run"
    argv = ["finetune", "squad", "--version", "2.0", "--train", str(DEV), "--dev", str(new), "--model", str(base),
            "--out", str(out), "--batch-size", "8", "--eval-batch-size", "64", *SMALL]
    assert_one_error(capsys, main([*argv[:6], "--dev", str(DEV), *argv[8:], "--max-steps", "1",
                                   "--null-threshold", "0.5"]), "tunes the no-answer threshold on a labelled --dev")
    assert_one_error(capsys, main([*argv, "--max-steps", "1", "--null-threshold", "recorded"]),
                     "--null-threshold recorded is for predict / evaluate")
    assert not out.exists()
    assert main([*argv, "--max-steps", "1", "--null-threshold", "-1.25"]) == 0
    assert not [line for line in _warnings(capsys.readouterr().err) if "threshold" in line]
    predictions, odds = _predicted(out)
    assert {q for q, t in predictions.items() if t == ""} == {q for q, v in odds.items() if v > -1.25}
    assert json.loads((out / "best" / "task.json").read_text())["null_threshold"] == -1.25
    assert_one_error(capsys, main([*argv, "--max-steps", "2", "--resume", "--null-threshold", "0"]),
                     "the run was started with --null-threshold -1.25, now --null-threshold 0")
    assert main([*argv, "--max-steps", "2", "--resume"]) == 0
    capsys.readouterr()
    assert json.loads((out / "metrics.json").read_text())["null_threshold"] == -1.25


# ------------------------------------------------------- 3. no threshold tuned, recorded or given: said
def test_a_v2_prediction_on_new_questions_without_a_recorded_threshold_says_0_is_applied(tmp_path, capsys):
    """A run's checkpoints/step_N records no tuned threshold (best/task.json does): predict on new questions
    applied 0.0 without a word. Said in one line naming --null-threshold; not said where one is recorded or
    given, nor for a labelled file (it tunes its own)."""
    new = _unlabelled(tmp_path / "new.json")
    bare = _v20_model(tmp_path / "step", threshold=None)
    recorded = _v20_model(tmp_path / "best", threshold=-0.5)
    cases = [(bare, new, [], 1), (bare, new, ["--null-threshold", "-0.5"], 0), (recorded, new, [], 0),
             (bare, DEV, [], 0)]
    for i, (model, data, extra, said) in enumerate(cases):
        assert main(["predict", "squad", "--model", str(model), "--data", str(data), "--out", str(tmp_path / f"o{i}"),
                     *extra, *SMALL]) == 0
        notes = [line for line in _warnings(capsys.readouterr().err) if "threshold" in line]
        assert len(notes) == said, (i, notes)
        if said:
            assert "has no answers to tune" in notes[0] and "0.0" in notes[0] and "--null-threshold" in notes[0]
    assert _predicted(tmp_path / "o1")[0] == _predicted(tmp_path / "o2")[0]   # -0.5 given = -0.5 recorded
