"""Audit 26 of torchrun runs across nodes (gloo on the CPU): every rank of a resumed run reads the checkpoint it
continues from in its own --out, so a node given a directory of its own (node-local, or an older copy of the run)
resumes from another checkpoint than rank 0.

Pretraining refused that (`run_identity` compares the checkpoint's name); fine-tuning did not: a node whose --out
held an older copy of the run resumed two steps behind rank 0, trained those steps on the other rank's gradients
with its own optimizer state (only rank 0's weights saved), and at the end left rank 0 waiting for
--dist.timeout_minutes (30 by default) before both blamed a slow rank (measured by hand: two torchrun "nodes" on
127.0.0.1, `finetune glue`). Now it is refused on every rank before anything trains, and the line of either command
says that --out must be one directory every node sees. No process is spawned: the other ranks' answers are
stood in for (`test_dist_audit19._as_if_other_ranks_hold`)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from albertlm.errors import UserError
from albertlm.training.distributed import DistInfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import save_tiny_pretrained  # noqa: E402
from test_dist_audit19 import _as_if_other_ranks_hold  # noqa: E402
from train_fixtures import (StubTokenizer, finetune_config, run_recording_losses, synthetic_task,  # noqa: E402
                            tiny_run)

CHECKPOINT = "the checkpoint it resumes from"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture
def finetuned(tmp_path) -> tuple[Path, Path]:
    """(the tiny pretrained model, a fine-tuning run of it with checkpoints at steps 3 and 6)."""
    from albertlm.tasks.finetune import make_finetune_loop

    model = save_tiny_pretrained(tmp_path)
    out = tmp_path / "run"
    loop = make_finetune_loop(synthetic_task(), model, StubTokenizer(), finetune_config(), out, DistInfo())
    run_recording_losses(loop)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000006"]   # keep_last 1
    return model, out


def test_a_finetuning_node_resuming_from_another_checkpoint_is_refused_before_training(finetuned, tmp_path,
                                                                                          monkeypatch):
    """run_finetune(resume=True) on rank 0 of 3, as though rank 1's --out held an older copy of the run and rank
    2's were a node-local directory with no run (the Python API does not ask the CLI's "no run to resume"): one
    line naming the checkpoints and the shared --out, before any step (before: rank 1 trained from step 3, rank 2
    from step 0, and rank 0 waited at the end for --dist.timeout_minutes)."""
    from albertlm.tasks import finetune

    model, out = finetuned
    spec, cfg = synthetic_task(), finetune_config()
    spec.info["max_seq_length"] = cfg.max_seq_length     # what run_finetune records before the ranks compare
    mine = finetune.finetune_identity(spec, cfg, out, resume=True)
    assert mine[CHECKPOINT] == "step_00000006"
    assert CHECKPOINT not in finetune.finetune_identity(spec, cfg, out)    # a first run: nothing to resume from
    older, none = {**mine, CHECKPOINT: "step_00000003"}, {**mine, CHECKPOINT: None}
    assert finetune.finetune_identity(spec, cfg, tmp_path / "node-local", resume=True) == none
    _as_if_other_ranks_hold(monkeypatch, [older, none])
    monkeypatch.setattr(finetune, "init_distributed", lambda *a, **k: DistInfo(rank=0, world_size=3))
    trained = []
    monkeypatch.setattr(finetune, "make_finetune_loop", lambda *a, **k: trained.append(1))
    with pytest.raises(UserError) as caught:
        finetune.run_finetune(spec, model, StubTokenizer(), cfg, out, log=lambda *a: None, resume=True)
    said = str(caught.value)
    assert "the 3 processes of this run were started with different settings" in said, said
    assert f"{CHECKPOINT} is 'step_00000006' on rank 0, 'step_00000003' on rank 1, None on rank 2" in said, said
    assert "an --out that every node sees as the same directory (a shared file system" in said, said
    assert not trained
    _as_if_other_ranks_hold(monkeypatch, [mine, mine])      # every node sees the same run: nothing said
    finetune.check_same_finetune(spec, cfg, DistInfo(rank=0, world_size=3), out, resume=True)


def test_pretraining_nodes_resuming_from_different_checkpoints_are_told_to_share_the_run_directory(tmp_path,
                                                                                                   monkeypatch):
    """Pretraining refused it already, but told the user only to start the nodes alike "on the same data": a
    node-local --out on node 1 is now named as the cause (a shared file system). A first run says nothing of it."""
    from albertlm.training.pretrain import check_same_run, make_loop, run_identity
    from test_train import datasets

    run, run_dir = tiny_run(max_steps=2, save_every=1), tmp_path / "run"
    assert make_loop(run, run_dir, datasets(), DistInfo(), False).run() == "done"
    info = DistInfo(rank=0, world_size=2)
    mine = run_identity(run, datasets(), run_dir, resume=True)
    _as_if_other_ranks_hold(monkeypatch, [{**mine, CHECKPOINT: None}])
    with pytest.raises(UserError) as caught:
        check_same_run(run, datasets(), run_dir, True, info)
    said = str(caught.value)
    assert f"{CHECKPOINT} is 'step_00000002' on rank 0, None on rank 1" in said, said
    assert "an --out that every node sees as the same directory (a shared file system" in said, said
    first = run_identity(run, datasets(), run_dir, resume=False)
    _as_if_other_ranks_hold(monkeypatch, [{**first, "optim.lr": 0.5}])
    with pytest.raises(UserError) as caught:
        check_same_run(run, datasets(), run_dir, False, info)
    assert "shared file system" not in str(caught.value)
