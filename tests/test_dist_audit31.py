"""Audit 31: fine-tuning under torchrun (gloo on the CPU, 2 processes) once dev evaluations and test predictions run
in windows of `features.PREDICT_WINDOW` features (`finetune.predict_windows`, `shared_predict`).

1. Ranks given other dev data of the same size (a node's stale copy of the dev file, another tokenizer at the same
   path): each rank ran its share of the batches of its *own* features and rank 0 put the outputs at its own
   features' places, so the dev metrics, the best checkpoint and the prediction files mixed outputs of other texts
   into rank 0's, without a word (dev texts of other lengths were a RuntimeError traceback at the first evaluation;
   a test set one node lacked, collectives out of step at the end). The same for the training features: only their
   number was compared, so a node with another training file of as many rows trained its share of every batch on it.
   `finetune_identity` now holds each eval set's features and the training features by a digest of what they feed
   the model (`finetune.features_digest`): refused on every rank before anything trains, in one line naming them.
2. `shared_predict` over several windows (PREDICT_WINDOW made 7 in both processes and here): rows split across the
   ranks within and across windows (a window of an odd number of batches starts the next on rank 1), an uneven last
   window, one row for two ranks: rank 0 gets what one process predicts, bit for bit, and rank 1 None, for a
   classifier, SQuAD's span and v2.0 beam heads and RACE's choices (a guard: it passed before).
3. A 2-process fine-tuning stopped by a SIGTERM to rank 0 and resumed ends as an uninterrupted 2-process run: the
   same losses, dev history, best record and weights (a guard: it passed before).

One pair of spawned ranks runs the jobs in turn (`test_ftdist_audit25.jobs_worker`); a hang fails the tests."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module
from conftest import SHARED, save_tiny_pretrained  # noqa: E402
from test_dist_audit19 import _as_if_other_ranks_hold  # noqa: E402
from test_distributed_audit24 import _join_env  # noqa: E402
from test_ftdist_audit25 import _heads, _job_done, _launch, _qa_sets  # noqa: E402
from train_fixtures import StubTokenizer, finetune_config, synthetic_task  # noqa: E402

from albertlm.errors import UserError  # noqa: E402
from albertlm.training.distributed import DistInfo  # noqa: E402

WINDOW = 7            # PREDICT_WINDOW in the windows job: 3 windows of the 16 classify rows, many of SQuAD's
BATCHES = (3, 5, 1000)   # 3 batches a window (3, 3, 1: the next window starts on rank 1); 2; one a window
DEV = "the dev set's features"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`), as the spawned ranks use."""


def _other_token(spec, set_index: int = 0, feature: int = 0) -> None:
    """One token of one feature of eval set `set_index` replaced by another (the same length: the same batches)."""
    ids = spec.eval_sets[set_index].features[feature].input_ids
    ids[3] = 5 + (int(ids[3]) - 5 + 1) % 12


# -------------------------------------------------------------------- 1. what every rank must agree on
def test_each_eval_sets_features_and_the_training_features_are_compared_by_what_they_hold():
    from albertlm.tasks.finetune import EvalSet, finetune_identity

    cfg = finetune_config()
    mine = finetune_identity(synthetic_task(), cfg)
    assert finetune_identity(synthetic_task(), cfg) == mine           # built again alike: the same
    assert DEV in mine and mine[DEV].startswith("12, ")

    def differs(spec) -> set[str]:
        other = finetune_identity(spec, cfg)
        return {key for key in {*mine, *other} if mine.get(key) != other.get(key)}

    other_dev = synthetic_task()
    _other_token(other_dev)
    assert differs(other_dev) == {DEV}
    other_train = synthetic_task()
    other_train.train[5].input_ids[2] = 5 + (int(other_train.train[5].input_ids[2]) - 5 + 1) % 12
    assert differs(other_train) == {"the training features' tokens and labels"}
    other_label = synthetic_task()
    other_label.train[0].label = 1 - other_label.train[0].label
    assert differs(other_label) == {"the training features' tokens and labels"}
    with_test = synthetic_task()
    with_test.eval_sets.append(EvalSet("test", list(with_test.eval_sets[0].features), None))
    assert differs(with_test) == {"the test set's features"}


def test_a_rank_with_other_dev_texts_is_refused_in_one_line(monkeypatch):
    from albertlm.tasks.finetune import check_same_finetune, finetune_identity

    spec, cfg = synthetic_task(), finetune_config()
    other = synthetic_task()
    _other_token(other)
    _as_if_other_ranks_hold(monkeypatch, [finetune_identity(other, cfg)])
    with pytest.raises(UserError) as caught:
        check_same_finetune(spec, cfg, DistInfo(rank=0, world_size=2))
    said = str(caught.value)
    assert "the 2 processes of this run were started with different settings" in said, said
    assert f"{DEV} is '12, " in said and "' on rank 0, '12, " in said and "' on rank 1" in said, said
    assert "on the same data" in said


def other_dev_worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str, record: str) -> None:
    """`run_finetune` on 2 ranks; rank 1's dev set holds one other token (a stale copy of the file)."""
    _join_env(rank, world_size, port)
    from albertlm.tasks.finetune import run_finetune
    from albertlm.training.distributed import shutdown

    spec = synthetic_task()
    if rank == 1:
        _other_token(spec)
    said = ""
    try:
        run_finetune(spec, model_dir, StubTokenizer(), finetune_config(), out_dir, log=lambda *a: None)
    except UserError as exc:
        said = str(exc)
    Path(f"{record}.{rank}").write_text(said)
    shutdown()


def test_two_ranks_fine_tuning_on_other_dev_texts_are_refused_before_training(two_ranks):
    """Before: the run trained and kept a best model scored on rank 1's texts' outputs, exit 0."""
    root = _job_done(two_ranks, "other_dev")
    said = [(root / f"said.{rank}").read_text() for rank in range(2)]
    assert said[0] == said[1] and f"{DEV} is '12, " in said[0] and "\n" not in said[0], said
    assert not (root / "run" / "checkpoints").exists()                # nothing trained


# ------------------------------------------------------------------------- 2. windows across the ranks
def _window(monkeypatch_or_none=None) -> None:
    """PREDICT_WINDOW made WINDOW where `predict` and `shared_predict` read it."""
    from albertlm.tasks import features, finetune

    for module in (features, finetune):
        if monkeypatch_or_none is None:
            setattr(module, "PREDICT_WINDOW", WINDOW)
        else:
            monkeypatch_or_none.setattr(module, "PREDICT_WINDOW", WINDOW)


def _classify(root: Path):
    """A seeded tiny classifier and three sets of the synthetic task's features: 16 (3 windows, the last of 2), 7
    (one whole window) and 1 (fewer rows than ranks)."""
    from albertlm.model.heads import AlbertForSequenceClassification

    spec = synthetic_task(n=16)
    sets = {"16": spec.train, "7": spec.train[:WINDOW], "1": spec.train[:1]}
    model_dir = root / "classify"
    if not model_dir.exists():
        torch.manual_seed(1)
        AlbertForSequenceClassification.from_pretrained(save_tiny_pretrained(root), num_labels=2).save_pretrained(
            model_dir)
    return AlbertForSequenceClassification.from_pretrained(model_dir).eval(), spec.outputs, sets


def _has_qa_data() -> bool:
    return SHARED.joinpath("squad", "dev-v2.0-small.json").exists() and SHARED.joinpath("race", "RACE", "dev").exists()


def _qa(root: Path) -> dict:
    """{name: (model, outputs, {set: features})} of SQuAD v2.0 (beam and span heads) and RACE, where the shared data
    is; with the classifier's."""
    got = {"classify": _classify(root)}
    if _has_qa_data():
        heads = {name: root / name for name in ("squad", "squad-bert", "race")}
        if not all(path.exists() for path in heads.values()):
            heads = _heads(root)
        _, task_specs = _qa_sets(heads["squad"])
        for name, spec in task_specs.items():
            model = spec.model_class.from_pretrained(heads[name]).eval()
            got[name] = (model, spec.outputs, {"dev": spec.eval_sets[0].features})
    return got


def windows_worker(rank: int, world_size: int, port: int, root: str, out_file: str) -> None:
    """One rank: `shared_predict` of every set at every batch size, PREDICT_WINDOW made WINDOW; rank 0 saves what it
    got, rank 1 whether it got None."""
    _join_env(rank, world_size, port)
    _window()
    from albertlm.tasks.finetune import shared_predict
    from albertlm.training.distributed import init_distributed, shutdown

    info = init_distributed("gloo", "cpu")
    got = {}
    for name, (model, outputs, sets) in _qa(Path(root)).items():
        for set_name, features in sets.items():
            for size in BATCHES:
                got[f"{name}/{set_name}/{size}"] = shared_predict(model, features, outputs, 0, size, info)
    if rank == 0:
        torch.save(got, out_file)
    else:
        Path(out_file + ".1").write_text(json.dumps({key: value is None for key, value in got.items()}))
    shutdown()


def test_shared_predictions_across_windows_are_one_processs_bit_for_bit(two_ranks, monkeypatch):
    from albertlm.tasks.features import feature_windows
    from albertlm.tasks.finetune import predict

    root = _job_done(two_ranks, "windows")
    _window(monkeypatch)
    shared = torch.load(root / "shared.pt", weights_only=False)
    nones = json.loads((root / "shared.pt.1").read_text())
    assert set(nones) == set(shared) and all(nones.values())          # rank 1 gets None, every time
    checked = 0
    for name, (model, outputs, sets) in _qa(root).items():
        for set_name, features in sets.items():
            if set_name == "16":
                assert [len(w) for w in feature_windows(features)] == [7, 7, 2]
            for size in BATCHES:
                alone, two = predict(model, features, outputs, 0, size, torch.device("cpu")), \
                    shared[f"{name}/{set_name}/{size}"]
                assert alone.keys() == two.keys()
                for key, value in alone.items():
                    if outputs.per_token:
                        assert len(two[key]) == len(value) and all(
                            a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(two[key], value)), key
                    else:
                        assert two[key].dtype == value.dtype and np.array_equal(two[key], value), (name, size, key)
                checked += 1
    assert checked == 9 + (9 if _has_qa_data() else 0)     # the classifier's 3 sets; SQuAD's 2 heads', RACE's


# ------------------------------------------------------------------------------ 3. a 2-process resume
def resume_worker(rank: int, world_size: int, port: int, model_dir: str, root: str) -> None:
    """An uninterrupted 2-process fine-tuning (6 steps, evaluated and saved at 3 and 6) into ROOT/full; the same
    into ROOT/cut stopped by a SIGTERM to rank 0 in step 2 (both ranks stop after one step, rank 0 saves), then
    resumed. Rank 0 records the statuses."""
    _join_env(rank, world_size, port)
    from albertlm.tasks.finetune import run_finetune
    from albertlm.training.distributed import shutdown
    from albertlm.training.loop import Loop

    def run(out: str, resume: bool = False) -> str:
        return run_finetune(synthetic_task(), model_dir, StubTokenizer(), finetune_config(), Path(root, out),
                            log=lambda *a: None, resume=resume)["status"]

    statuses = [run("full")]
    real = Loop.after_step

    def term_at_2(self, window):
        real(self, window)
        if rank == 0 and self.state.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)        # the loop's handler: stop after this step, save

    Loop.after_step = term_at_2
    try:
        statuses.append(run("cut"))
    finally:
        Loop.after_step = real
    statuses.append(sorted(p.name for p in Path(root, "cut", "checkpoints").iterdir()) if rank == 0 else [])
    statuses.append(run("cut", resume=True))
    if rank == 0:
        Path(root, "statuses.json").write_text(json.dumps(statuses))
    shutdown()


def test_a_two_process_fine_tuning_stopped_and_resumed_ends_as_an_uninterrupted_one(two_ranks):
    from safetensors.torch import load_file

    root = _job_done(two_ranks, "resume")
    full, cut, saved, resumed = json.loads((root / "statuses.json").read_text())
    assert (full, cut, resumed) == ("done", "interrupted", "done")
    assert saved and all(name < "step_00000006" for name in saved), saved   # stopped before the end, saved there

    def ended(run: Path):
        metrics = json.loads((run / "metrics.json").read_text())
        return ({k: v for k, v in metrics.items() if k not in ("config",)},
                json.loads((run / "train_log.json").read_text()))

    assert ended(root / "cut") == ended(root / "full")
    for name in ("best", "checkpoints/step_00000006"):
        ours, theirs = (load_file(root / run / name / "model.safetensors") for run in ("cut", "full"))
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours), name


# ------------------------------------------------------------------------- one launch for the jobs
@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, Path]:
    """The 2-process jobs, run in turn by one pair of spawned ranks; each in its own folder, holding the tiny model
    its ranks read (the windows job's models made here first, so that this process reads the same ones)."""
    roots = {name: tmp_path_factory.mktemp(f"dist31_{name}") for name in ("other_dev", "windows", "resume")}
    _qa(roots["windows"])
    jobs = [("other_dev", other_dev_worker, (str(save_tiny_pretrained(roots["other_dev"])),
                                             str(roots["other_dev"] / "run"), str(roots["other_dev"] / "said"))),
            ("windows", windows_worker, (str(roots["windows"]), str(roots["windows"] / "shared.pt"))),
            ("resume", resume_worker, (str(save_tiny_pretrained(roots["resume"])), str(roots["resume"])))]
    errors = tmp_path_factory.mktemp("dist31_errors")
    _launch(jobs, errors)
    return {"errors": errors, **roots}
