"""Dropout in pretraining: the v2 presets have none at all (the SOP head applies none, as google-research's
`run_pretraining.py`; `classifier_dropout` is the fine-tuning heads'), and where dropout is on (v1 presets,
hidden/attention dropout > 0) each rank draws its own masks, seeded by (seed, rank, step, micro-batch), so a
resumed multi-process run equals an uninterrupted one; the data order and masks stay layout-independent."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from albertlm.config.presets import PRESETS, get_preset
from albertlm.data import loader
from albertlm.model.albert import AlbertForPreTraining
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import Datasets, make_loop
from albertlm.training.trainer import dropout_seed

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module and train_fixtures
from train_fixtures import SyntheticPretraining, tiny_run  # noqa: E402

SMALL = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
             max_position_embeddings=64)
# albert-xxlarge-v1 was released without dropout, as the v2 models (config/presets.py)
V2 = [name for name in PRESETS if name.startswith("albert-") and name != "albert-tiny"
      and (not name.endswith("-v1") or name == "albert-xxlarge-v1")]
V1 = [name for name in PRESETS if name.endswith("-v1") and name != "albert-xxlarge-v1"]


def _pretraining_outputs(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 99, (4, 12), generator=g)
    positions = torch.tensor([[1, 3], [2, 5], [4, 6], [7, 8]])
    torch.manual_seed(seed)
    out = model(ids, torch.ones_like(ids), (torch.arange(12) >= 6).long().expand(4, 12),
                masked_lm_positions=positions, masked_lm_ids=ids.gather(1, positions),
                masked_lm_weights=torch.ones(4, 2), sentence_order_label=torch.tensor([0, 1, 1, 0]))
    return {k: out[k] for k in ("prediction_logits", "sop_logits", "loss")}


@pytest.mark.parametrize("name", V2)
def test_v2_presets_pretrain_without_any_dropout(name):
    """Training mode, two different RNG states: the same numbers, the SOP logits included. (The preset keeps
    classifier_dropout 0.1: that is the fine-tuning heads' dropout, which the pretraining model never applies.)"""
    cfg = get_preset(name, **SMALL)
    assert cfg.hidden_dropout == cfg.attention_dropout == 0.0
    model = AlbertForPreTraining(cfg).train()
    a, b = _pretraining_outputs(model, seed=0), _pretraining_outputs(model, seed=1)
    for key in a:
        assert torch.equal(a[key], b[key]), f"{name}: {key} changes with the RNG in training mode"


@pytest.mark.parametrize("name", V1)
def test_v1_presets_pretrain_with_dropout(name):
    cfg = get_preset(name, **SMALL)
    assert cfg.hidden_dropout == cfg.attention_dropout == 0.1
    model = AlbertForPreTraining(cfg).train()
    a, b = _pretraining_outputs(model, seed=0), _pretraining_outputs(model, seed=1)
    assert not torch.equal(a["prediction_logits"], b["prediction_logits"])
    model.eval()
    a, b = _pretraining_outputs(model, seed=0), _pretraining_outputs(model, seed=1)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sop_head_equals_transformers_in_eval_mode_with_classifier_dropout(tmp_path):
    """transformers' AlbertSOPHead has dropout (classifier_dropout_prob) in training; in eval mode, where the
    parity tests compare, the heads agree whatever the setting."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4,
                                       intermediate_size=37, num_hidden_layers=3, max_position_embeddings=64,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                       classifier_dropout_prob=0.1)
    torch.manual_seed(0)
    hf = transformers.AlbertForPreTraining(config).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    assert ours.config.classifier_dropout == pytest.approx(0.1)
    ids = torch.randint(5, 99, (3, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids).sop_logits, hf(ids).sop_logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours(ids).prediction_logits, hf(ids).prediction_logits, atol=1e-5, rtol=0)


def test_dropout_seeds_differ_by_rank_step_and_micro_batch():
    seeds = {dropout_seed(7, rank, step, micro) for rank in range(4) for step in range(50) for micro in range(4)}
    assert len(seeds) == 4 * 50 * 4
    assert dropout_seed(7, 1, 3, 0) == dropout_seed(7, 1, 3, 0) != dropout_seed(8, 1, 3, 0)
    assert all(0 <= s < 2**64 for s in seeds)


# ------------------------------------------------------------------------------- training, end to end
class DropoutMasks:
    """Records, per training forward, which units the embeddings' dropout zeroed (eval forwards skipped)."""

    def __init__(self, model: nn.Module):
        self.masks: list[torch.Tensor] = []
        dropout = model.albert.embeddings.dropout
        dropout.register_forward_hook(lambda m, args, out: self.masks.append(out == 0) if m.training else None)


def _train(run_dir: Path, info: DistInfo, *, max_steps: int, micro: int, dropout: float, classifier_dropout: float,
           resume: bool = False, save_every: int = 0):
    """Pretrains the tiny model on synthetic data; returns (losses by step, final weights, dropout masks)."""
    from albertlm.training.pretrain import build_model

    run = tiny_run(max_steps=max_steps, micro=micro, dropout=dropout, save_every=save_every)
    run = run.replace(model=run.model.replace(classifier_dropout=classifier_dropout))
    ds = SyntheticPretraining(n=64)
    data = Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta)
    torch.manual_seed(run.train.seed)
    model = build_model(run)
    masks = DropoutMasks(model)
    loop = make_loop(run, run_dir, data, info, resume, model=model)
    losses: dict[int, float] = {}
    loop.on_step = lambda step, metrics: losses.__setitem__(step, metrics["loss"])
    loop.run()
    weights = {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}
    return losses, weights, masks.masks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_worker(rank: int, world_size: int, port: int, root: str, out_file: str) -> None:
    """One rank of three 2-process gloo runs (spawned below): v2-like (classifier_dropout 0.1 only), dropout
    0.1 for 4 steps, and dropout 0.1 for 2 steps then resumed to 4."""
    import os

    from albertlm.training.distributed import init_distributed, shutdown

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    info = init_distributed("gloo", "cpu")
    root_dir = Path(root)
    v2 = _train(root_dir / "v2", info, max_steps=3, micro=4, dropout=0.0, classifier_dropout=0.1)
    straight = _train(root_dir / "straight", info, max_steps=4, micro=2, dropout=0.1, classifier_dropout=0.1)
    _train(root_dir / "resumed", info, max_steps=2, micro=2, dropout=0.1, classifier_dropout=0.1, save_every=2)
    resumed = _train(root_dir / "resumed", info, max_steps=4, micro=2, dropout=0.1, classifier_dropout=0.1,
                     resume=True)
    torch.save({"v2": v2[0], "straight": straight, "resumed": resumed}, f"{out_file}.{rank}")
    shutdown()


def test_ranks_draw_their_own_dropout_masks_and_resume_exactly(tmp_path, one_thread):
    """Two gloo processes: (1) without hidden/attention dropout (a v2 preset's setting, classifier_dropout 0.1
    kept) the losses equal one process's: no dropout is left anywhere; (2) with dropout 0.1 the two ranks'
    dropout masks differ (they were the same before: every rank was seeded alike), and (3) stopping at
    step 2 and resuming equals the uninterrupted run on both ranks, losses and weights."""
    out = tmp_path / "ddp.pt"
    mp.start_processes(gloo_worker, args=(2, _free_port(), str(tmp_path), str(out)), nprocs=2, join=True,
                       start_method="spawn")
    ranks = [torch.load(f"{out}.{r}", weights_only=True) for r in range(2)]

    single, _, _ = _train(tmp_path / "single", DistInfo(), max_steps=3, micro=8, dropout=0.0, classifier_dropout=0.1)
    assert sorted(single) == [1, 2, 3]
    for step, loss in single.items():
        assert ranks[0]["v2"][step] == pytest.approx(loss, abs=1e-5), step

    masks = [r["straight"][2] for r in ranks]
    assert len(masks[0]) == len(masks[1]) == 4 * 2             # 4 steps x 2 micro-batches per rank
    assert all(m.any() for m in masks[0])                       # dropout 0.1 did drop units
    for step_micro, (a, b) in enumerate(zip(*masks)):
        assert not torch.equal(a, b), f"forward {step_micro}: both ranks dropped the same units"

    for r, rank in enumerate(ranks):
        straight, resumed = rank["straight"], rank["resumed"]
        assert sorted(resumed[0]) == [3, 4]
        for step in (3, 4):
            assert resumed[0][step] == pytest.approx(straight[0][step], abs=1e-6), (r, step)
        for i, (a, b) in enumerate(zip(straight[2][4:], resumed[2])):   # steps 3-4 drop the same units
            assert torch.equal(a, b), (r, i)
        for name, value in straight[1].items():
            torch.testing.assert_close(resumed[1][name], value, atol=0, rtol=0, msg=name)


def test_one_process_dropout_is_a_function_of_the_step(tmp_path, one_thread):
    """The same run twice gives the same losses; a resumed one too (the RNG state saved in the checkpoint is
    no longer what dropout depends on)."""
    a, wa, ma = _train(tmp_path / "a", DistInfo(), max_steps=4, micro=4, dropout=0.1, classifier_dropout=0.1)
    b, wb, mb = _train(tmp_path / "b", DistInfo(), max_steps=4, micro=4, dropout=0.1, classifier_dropout=0.1)
    assert a == b and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert all(torch.equal(x, y) for x, y in zip(ma, mb))
    _train(tmp_path / "c", DistInfo(), max_steps=2, micro=4, dropout=0.1, classifier_dropout=0.1, save_every=2)
    torch.manual_seed(12345)                                     # another RNG state before the resume
    c, wc, mc = _train(tmp_path / "c", DistInfo(), max_steps=4, micro=4, dropout=0.1, classifier_dropout=0.1,
                       resume=True)
    for step in (3, 4):
        assert c[step] == pytest.approx(a[step], abs=1e-6)
    assert all(torch.equal(x, y) for x, y in zip(ma[4:], mc))
