"""Audit 29: exact resume of `albertlm pretrain` after a crash (kill -9 at awkward moments), by hand on real runs
(`albertlm data build` of Alice, the CLI, SIGKILL during a checkpoint's write, between its weights and its state,
in the middle of gradient accumulation, after the last step, under bf16, LAMB and AdamW, activation checkpointing,
DataLoader workers, dynamic masking across epochs; every resumed run ended with the uninterrupted run's weights,
optimizer state, metrics.jsonl and TensorBoard scalars). What failed is here: a damaged newest checkpoint said
nothing of the good one before it, another command's run directory was taken for this one's, and a killed rewrite
of a checkpoint's state stayed in it. Each test failed before its fix unless its docstring says it pins what was
already right."""
from __future__ import annotations

import json

import pytest
import torch

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.training import checkpoint as ckpt
from conftest import assert_one_error
from test_lead_audit24 import _Killed
from test_train_audit16 import _loop, _records


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


SETTINGS = dict(max_steps=4, save_every=2, log_every=2)


def _truncate(path, size: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:size])


DAMAGES = {
    "weights truncated": lambda step: _truncate(step / "model.safetensors"),
    "weights missing": lambda step: (step / "model.safetensors").unlink(),
    "state truncated": lambda step: _truncate(step / "trainer_state.pt"),
    "state empty": lambda step: (step / "trainer_state.pt").write_bytes(b""),
    "state missing": lambda step: (step / "trainer_state.pt").unlink(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_newest_checkpoint_names_the_good_one_before_it(tmp_path, damage):
    """The newest checkpoint damaged (a disk fault, a copy of the run that did not finish): `--resume` said only that
    its file was truncated (an empty trainer_state.pt: "remove it to resume from the checkpoint before it", naming
    none), leaving a preemptible job's owner to work out whether the run could go on and from where. Now every such
    error names the checkpoint before it and how to go on from it; moved away as said, the resumed run saves the
    uninterrupted run's step-4 weights, byte for byte."""
    assert _loop(tmp_path, **SETTINGS).run() == "done"
    newest, before = ckpt.step_dir(tmp_path, 4), ckpt.step_dir(tmp_path, 2)
    weights = (newest / "model.safetensors").read_bytes()
    DAMAGES[damage](newest)
    with pytest.raises(UserError) as caught:
        _loop(tmp_path, resume=True, **SETTINGS)
    said = str(caught.value)
    assert str(newest) in said and f"the checkpoint before it, {before}, exactly" in said, said
    assert "\n" not in said

    newest.rename(tmp_path / "damaged-step_00000004")        # as the message says
    assert _loop(tmp_path, resume=True, **SETTINGS).run() == "done"
    assert (newest / "model.safetensors").read_bytes() == weights
    assert [(r["step"], r["split"]) for r in _records(tmp_path) if r["split"] == "train"] == [(2, "train"),
                                                                                          (4, "train")]


def test_a_damaged_only_checkpoint_says_the_run_starts_again_from_step_0(tmp_path):
    """With no checkpoint before the damaged one, the advice is to start again from step 0 (what pretraining's
    `--resume` does once no checkpoint is left), not to resume from a checkpoint that does not exist."""
    settings = dict(max_steps=2, save_every=2, log_every=2)
    assert _loop(tmp_path, **settings).run() == "done"
    (ckpt.step_dir(tmp_path, 2) / "trainer_state.pt").write_bytes(b"")
    with pytest.raises(UserError, match="starts the run again from step 0"):
        _loop(tmp_path, resume=True, **settings)


def _fine_tuning_run(out, evaluated: bool):
    """What `albertlm finetune` leaves in its --out: checkpoints whose run_config.json names the task family, its
    metrics.jsonl and, once it has evaluated, best/ and train_log.json (no run_config.json beside them)."""
    step = ckpt.step_dir(out, 3)
    step.mkdir(parents=True)
    (step / "run_config.json").write_text(json.dumps({"family": "classify", "max_seq_length": 24}))
    (out / "metrics.jsonl").write_text('{"step": 3, "split": "train", "loss": 0.5}\n')
    if evaluated:
        (out / "best").mkdir()
        (out / "train_log.json").write_text("{}")
    return sorted(p.relative_to(out) for p in out.rglob("*"))


@pytest.mark.parametrize("evaluated", [True, False])
@pytest.mark.parametrize("how", ["--resume", "--overwrite", None])
def test_pretraining_into_a_fine_tuning_run_is_refused_and_removes_nothing(tmp_path, capsys, how, evaluated):
    """`albertlm pretrain --out FT --resume` of a fine-tuning run said its run_config.json had "unknown config key
    'family'; start over with --overwrite", and that --overwrite removed the fine-tuning's checkpoints and metrics
    and left its best/ beside the new pretraining run (which `predict --model RUN` then read); without either flag
    it offered `--resume`, which then asked for --overwrite. Now each is one line saying whose run it is."""
    out = tmp_path / "ft"
    before = _fine_tuning_run(out, evaluated)
    code = main(["pretrain", "--out", str(out), "--data", str(tmp_path / "no-data"), *([how] if how else [])])
    assert_one_error(capsys, code, "holds an `albertlm finetune` run, not a pretraining run")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_fine_tuning_into_a_pretraining_run_is_refused(tmp_path):
    """The other way round (`check_run_dir` is fine-tuning's check too): `albertlm finetune --overwrite` with the
    --out of a pretraining run removed its checkpoints, metrics.jsonl and TensorBoard events and left its
    run_config.json, a directory that `albertlm pretrain --resume` then took for a run killed before its first step."""
    from albertlm.tasks.finetune import RUN_FILES

    assert _loop(tmp_path, **SETTINGS).run() == "done"
    for resume, overwrite in ((False, True), (True, False), (False, False)):
        with pytest.raises(UserError, match="holds an `albertlm pretrain` run, not a fine-tuning run"):
            ckpt.check_run_dir(tmp_path, resume, overwrite, RUN_FILES)
    assert ckpt.run_kind(tmp_path) == "pretraining" and len(ckpt.list_checkpoints(tmp_path)) == 2


def test_a_killed_rewrite_of_a_checkpoints_state_is_removed_on_resume(tmp_path):
    """A kill -9 inside `rewrite_train_state` (a resumed run recording the evaluation it redid) left its
    `.tmp-trainer_state.pt-PID`, a copy of the optimizer state, inside the complete checkpoint for good: the resume's
    clean-up removed only `checkpoints/.tmp-*`. Now it goes too, and the checkpoint's own files stay."""
    assert _loop(tmp_path, **SETTINGS).run() == "done"
    step = ckpt.step_dir(tmp_path, 4)
    files = sorted(p.name for p in step.iterdir())
    (step / f"{ckpt.TMP_PREFIX}trainer_state.pt-12345").write_bytes(b"half")
    assert _loop(tmp_path, resume=True, **SETTINGS).run() == "done"
    assert sorted(p.name for p in step.iterdir()) == files


class _KillMidAccumulation:
    """The objective around the loop's, raising `_Killed` (kill -9: nothing after it runs) at the `at`-th training
    forward of `step` (from 1): the step's gradient half accumulated."""

    def __init__(self, objective, step: int, at: int):
        self.objective, self.step, self.at, self.count = objective, step, at, 0

    def __getattr__(self, name):
        return getattr(self.objective, name)

    def forward(self, model, batch, denominators):
        if model.training and self.objective.state.step + 1 == self.step:
            self.count += 1
            if self.count == self.at:
                raise _Killed
        return self.objective.forward(model, batch, denominators)


def test_a_kill_in_the_middle_of_accumulation_under_bf16_and_checkpointing_resumes_exactly(tmp_path):
    """Pins what was already right: bf16 autocast, LAMB, 4 micro-batches per step, activation checkpointing, killed
    in the second micro-batch of step 3 (after the step-2 checkpoint): the resumed run ends with the uninterrupted
    run's weights bit for bit and the same training records."""
    settings = dict(max_steps=4, save_every=2, log_every=1, micro=2, precision="bf16",
                    activation_checkpointing=True)
    whole = tmp_path / "whole"
    assert _loop(whole, **settings).run() == "done"

    killed = tmp_path / "killed"
    loop = _loop(killed, **settings)
    loop.objective = _KillMidAccumulation(loop.objective, step=3, at=2)
    with pytest.raises(_Killed):
        loop.run()
    loop.logger.close()
    assert [p.name for p in ckpt.list_checkpoints(killed)] == ["step_00000002"]
    assert _loop(killed, resume=True, **settings).run() == "done"

    from safetensors.torch import load_file

    a, b = (load_file(ckpt.step_dir(run, 4) / "model.safetensors") for run in (whole, killed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    numbers = [{k: v for k, v in r.items() if k not in ("time", "tokens_per_s", "data_wait_frac", "window_s")}
               for run in (whole, killed) for r in _records(run) if r["split"] == "train"]
    assert numbers[:4] == numbers[4:]
