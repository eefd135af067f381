"""Fine-tuning audit 20 (the driver as a user runs it, and SQuAD's leftovers): a SQuAD v2.0 dev file whose every
question is unanswerable was taken for a file to predict on (predictions written, nothing scored); a v1.1 prediction
into a folder holding an earlier v2.0 prediction left its null_odds.json beside the new predictions.json; SQuAD's
tolerated problems were one tally for train and dev (a file given as both counted its questions twice, under one
name); a first dev evaluation of NaN was kept as the best to the end, and a mistyped TaskSpec.main_metric was a
KeyError after the first steps."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from albertlm.errors import UserError
from conftest import save_tiny_pretrained, shared_path
from train_fixtures import StubTokenizer, finetune_config, synthetic_task


@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def _squad(spm, version: str, dev=None, train=None, query: int = 64):
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import specs, squad

    settings = squad.SquadSettings(max_seq_length=96, doc_stride=32, max_query_length=query)
    cfg = FinetuneConfig(max_seq_length=96)
    cfg.train.progress = False
    return specs.squad_spec(version, spm, cfg, train_file=train, dev_file=dev, settings=settings,
                            training=train is not None)


def _only_questions(tmp_path, name: str, keep, change=None):
    """dev-v2.0-small.json with only the questions `keep(qa)` picks, each changed by `change(qa)`."""
    data = json.loads(shared_path("squad", "dev-v2.0-small.json").read_text(encoding="utf-8"))
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [qa for qa in paragraph["qas"] if keep(qa)]
            for qa in paragraph["qas"]:
                (change or (lambda qa: None))(qa)
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _zero_outputs(features) -> dict:
    return {key: [np.zeros(f.length, np.float32) for f in features] for key in ("start_logits", "end_logits")}


# --------------------------------------------------------------------------------------------------- SQuAD
def test_a_dev_file_of_only_unanswerable_questions_is_scored(spm, tmp_path):
    """Every question `"is_impossible": true`: the gold is "no answer" for each, so it is scored (NoAns_*); a file
    whose questions only lack answers (`"answers": []`, not said impossible) is still one to predict on."""
    labelled = _only_questions(tmp_path, "impossible.json", lambda qa: qa.get("is_impossible"))
    (dev,) = _squad(spm, "2.0", dev=labelled).eval_sets
    assert dev.score is not None
    metrics = dev.score(_zero_outputs(dev.features))
    assert metrics["NoAns_total"] == 6 and "HasAns_total" not in metrics
    unlabelled = _only_questions(tmp_path, "bare.json", lambda qa: True,
                                 lambda qa: qa.update(answers=[], is_impossible=False))
    assert _squad(spm, "2.0", dev=unlabelled).eval_sets[0].score is None
    # the same file said to be v1.1: its questions are said to have no answer, which v1.1 does not allow
    with pytest.raises(UserError, match="use --version 2.0"):
        _squad(spm, "1.1", dev=labelled)


def test_a_v1_1_prediction_removes_the_null_odds_of_an_earlier_v2_0_one(spm, tmp_path):
    """`predict squad --version 1.1` into an --out holding a v2.0 prediction left that one's null_odds.json beside
    the new predictions.json, as if it were theirs (`evaluate --na-probs` would pair them)."""
    answered = _only_questions(tmp_path, "answered.json", lambda qa: not qa.get("is_impossible"))
    out = tmp_path / "out"
    out.mkdir()
    (v2,) = _squad(spm, "2.0", dev=answered).eval_sets
    v2.write(_zero_outputs(v2.features), out)
    assert (out / "null_odds.json").is_file()
    (v1,) = _squad(spm, "1.1", dev=answered).eval_sets
    v1.write(_zero_outputs(v1.features), out)
    assert (out / "predictions.json").is_file() and not (out / "null_odds.json").exists()


def test_squad_problems_are_counted_per_split(spm):
    """One file as --train and --dev: its questions cut to max_query_length were one tally of both reads (twice
    the questions there are); each split's own count is named by it, as GLUE's and RACE's are."""
    from albertlm.tasks import squad
    from albertlm.tasks.tables import Problems

    sample = shared_path("squad", "sample.json")
    alone = Problems()
    squad.build_features(spm, squad.read_squad(sample), squad.SquadSettings(96, 32, 6), False, alone)
    cut = alone.counts["question truncated to max_query_length"]
    assert cut > 0
    spec = _squad(spm, "2.0", dev=sample, train=sample, query=6)
    problems = spec.problems.to_dict()
    assert problems["question truncated to max_query_length (train)"]["count"] == cut
    assert problems["question truncated to max_query_length (dev)"]["count"] == cut
    assert "question truncated to max_query_length" not in problems


# ------------------------------------------------------------------------------------------- the best model
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def test_a_nan_evaluation_is_never_the_best(tiny_model, tmp_path):
    """The first evaluation's main metric NaN (`NaN > x` is False): no later one replaced it, and best/ held the
    step-3 model to the end. NaN now never wins and anything beats it."""
    from albertlm.tasks.finetune import run_finetune

    spec = synthetic_task()
    scores = iter([math.nan, 0.25])
    spec.eval_sets[0].score = lambda out: {"accuracy": next(scores)}
    metrics = run_finetune(spec, tiny_model, StubTokenizer(), finetune_config(max_steps=6), tmp_path / "run",
                           log=lambda *a: None)
    assert metrics["best"] == {"step": 6, "dev": {"accuracy": 0.25}}


def test_a_main_metric_the_scorer_does_not_report_is_one_clear_error(tiny_model, tmp_path):
    from albertlm.tasks.finetune import run_finetune

    spec = synthetic_task()
    spec.main_metric = "acc"
    with pytest.raises(UserError, match="'acc' .* not among dev's: accuracy"):
        run_finetune(spec, tiny_model, StubTokenizer(), finetune_config(max_steps=3), tmp_path / "run",
                     log=lambda *a: None)


# ------------------------------------------------------------------------------------------ the run directory
def test_an_out_another_run_is_writing_is_refused_and_kept(tiny_model, tmp_path):
    """Fine-tuning took no lock on --out (pretraining does): the same command with --overwrite in a second terminal
    removed the files of the run still going there, and both wrote into it."""
    from albertlm.tasks.finetune import run_finetune
    from albertlm.training import checkpoint as ckpt

    out = tmp_path / "run"
    (out / "best").mkdir(parents=True)
    (out / "metrics.json").write_text("{}")
    with ckpt.directory_lock(out, "held by the test"):
        with pytest.raises(UserError, match="another run is writing there now"):
            run_finetune(synthetic_task(), tiny_model, StubTokenizer(), finetune_config(max_steps=3), out,
                         log=lambda *a: None, overwrite=True)
    assert (out / "metrics.json").read_text() == "{}" and (out / "best").is_dir()


def test_a_best_model_half_saved_by_a_killed_run_is_removed(tiny_model, tmp_path):
    """A run killed (kill -9) while writing best/ left `.tmp-best-PID` (a model-sized copy) that nothing removed."""
    from albertlm.tasks.finetune import run_finetune

    out = tmp_path / "run"
    stale = out / ".tmp-best-99999"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    run_finetune(synthetic_task(), tiny_model, StubTokenizer(), finetune_config(max_steps=3), out,
                 log=lambda *a: None)
    assert not stale.exists() and (out / "best" / "model.safetensors").is_file()
