"""Pretraining maths against google-research/albert's `run_pretraining.py`, `optimization.py` and
`lamb_optimizer.py` (their transcription in torch is `tests/test_google_pretrain_audit23.py`'s, imported here;
each helper there was read against google's code: `google_lr` is `create_optimizer`'s polynomial decay blended
with its warmup, `tf_clip_by_global_norm` TF's `clip_norm * min(1 / global_norm, 1 / clip_norm)`, `GoogleLamb`
`LAMBOptimizer.apply_gradients` line for line, `google_losses` `get_masked_lm_output` + `get_sentence_order_output`).

What is pinned here and was not before:
- one update accumulated over micro-batches of very different masked counts (a last micro-batch with one masked
  token, or none) is google's update on the whole batch: the gradient itself, before the optimizer (LAMB's
  normalised update hides a gradient off by a factor, so comparing weights alone could not catch a
  normalisation or a DDP-averaging error), clipped once after the sum, its pre-clip norm as logged;
- two processes under torchrun (gloo, the real CLI on real data with dynamic masking, two micro-batches per
  process) train the very weights of one process on the global batch, with the same logged losses and norms;
- every update of a short run with google's warmup and a decay power of 2 is google's rate and google's LAMB step;
- LAMB alone against google's formula where the epsilon's place and the trust ratio's special cases decide.
Those pass on the code as it was: guards (nothing in google's maths was found wrong). One fix, outside google's
recipe: `optim.bias_correction` took a whole group's step count from its first tensor.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.data import loader
from albertlm.model.albert import AlbertForPreTraining
from albertlm.training.distributed import DistInfo
from albertlm.training.lamb import Lamb
from albertlm.training.pretrain import Datasets, make_loop
from conftest import alice_documents, shared_path
from test_google_pretrain_audit23 import (MODEL_ARGS, GoogleLamb, google_losses, google_lr, google_step,
                                          tf_clip_by_global_norm)
from train_fixtures import SyntheticPretraining, tiny_run

BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def uneven_batch(last_masked: int) -> tuple[SyntheticPretraining, list[dict], dict]:
    """12 synthetic examples as three micro-batches of 4 and as one batch: the first two micro-batches hold 3-4
    masked tokens per example, the last `last_masked` masked tokens in all (weights 0 elsewhere)."""
    ds = SyntheticPretraining(n=12, seed=5)
    items = [dict(item) for item in ds.items]
    for item in items[8:]:
        item["masked_lm_weights"] = np.zeros_like(item["masked_lm_weights"])
    for item in items[8:8 + last_masked]:
        item["masked_lm_weights"][0] = 1.0
    return ds, [loader.collate(items[i:i + 4]) for i in (0, 4, 8)], loader.collate(items)


def recording_loop(run, run_dir: Path, ds):
    """`make_loop` (the CPU fast paths, as the CLI runs it), its starting weights, and a dict that each optimizer
    step fills with the gradients it is given (after the loop's clipping)."""
    loop = make_loop(run, run_dir, Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta), DistInfo(),
                     False)
    start = {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}
    grads: dict[str, torch.Tensor] = {}
    step = loop.optimizer.step

    def recording_step(*args, **kwargs):
        grads.update({n: p.grad.detach().clone() for n, p in loop.raw_model.named_parameters()})
        return step(*args, **kwargs)

    loop.optimizer.step = recording_step
    return loop, start, grads


def global_norm(grads) -> float:
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))


@pytest.mark.parametrize("last_masked", [1, 0])
def test_an_accumulated_update_with_a_short_last_micro_batch_is_googles_whole_batch_update(last_masked, tmp_path):
    """3 micro-batches of 4 (masked tokens 13, 15 and `last_masked`) against google's step on the 12 examples at
    once: total_loss = Σ w·ce / (Σ w + 1e-5) over the whole batch + mean SOP cross entropy, its gradient clipped by
    global norm 1.0 (once, after the sum), then LAMB. The same through the loop's whole-batch path (no accumulation).
    A mean of the micro-batches' own losses, or a clip of each micro-batch's gradient, is far from it (checked, so
    the comparison can tell)."""
    ds, micro, whole = uneven_batch(last_masked)
    assert [float(b["masked_lm_weights"].sum()) for b in micro] == [13.0, 15.0, float(last_masked)]
    run = tiny_run(max_steps=4, batch_size=12, micro=4)
    accumulated, start, grads = recording_loop(run, tmp_path / "accumulated", ds)
    result = accumulated.train_step([dict(b) for b in micro])
    one_pass, one_start, one_grads = recording_loop(tiny_run(max_steps=4, batch_size=12), tmp_path / "whole", ds)
    one_result = one_pass.train_step([dict(whole)])

    ref = AlbertForPreTraining(run.model)
    ref.load_state_dict(start)
    for name, value in one_start.items():
        assert torch.equal(value, start[name])
    google_losses(ref(**{k: whole[k] for k in MODEL_ARGS}), whole)[2].backward()
    names = [n for n, _ in ref.named_parameters()]
    raw = [p.grad.detach().clone() for _, p in ref.named_parameters()]
    clipped, norm = tf_clip_by_global_norm(raw, 1.0)
    assert float(norm) > 1.0                                      # the clipping is exercised
    for name, expected in zip(names, clipped):
        torch.testing.assert_close(grads[name], expected, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(one_grads[name], expected, rtol=1e-5, atol=1e-6, msg=name)
    assert result.grad_norm == pytest.approx(float(norm), rel=1e-5)         # logged: the norm before clipping
    assert one_result.grad_norm == pytest.approx(float(norm), rel=1e-5)
    assert global_norm(grads.values()) == pytest.approx(1.0, rel=1e-5)     # clipped once, to the clip norm
    with torch.no_grad():
        total = google_losses(ref(**{k: whole[k] for k in MODEL_ARGS}), whole)[2]
    assert result.loss == pytest.approx(float(total), rel=1e-5)

    # what the comparison tells apart: the mean of per-micro-batch losses, and a clip per micro-batch
    ref.zero_grad(set_to_none=True)
    for batch in micro:
        (google_losses(ref(**{k: batch[k] for k in MODEL_ARGS}), batch)[2] / len(micro)).backward()
    mean_of_means = tf_clip_by_global_norm([p.grad for _, p in ref.named_parameters()], 1.0)[0]
    assert max(float((a - b).abs().max()) for a, b in zip(mean_of_means, clipped)) > 1e-3
    per_micro = [torch.zeros_like(g) for g in raw]
    counts = float(whole["masked_lm_weights"].sum()) + 1e-5
    for batch in micro:
        ref.zero_grad(set_to_none=True)
        out = ref(**{k: batch[k] for k in MODEL_ARGS})
        _, _, _, (per_example, _, sop_example, _) = google_losses(out, batch)
        share = (batch["masked_lm_weights"].reshape(-1) * per_example).sum() / counts + sop_example.sum() / 12
        share.backward()
        for total_grad, g in zip(per_micro, tf_clip_by_global_norm([p.grad for _, p in ref.named_parameters()],
                                                                   1.0)[0]):
            total_grad += g
    assert abs(global_norm(per_micro) - 1.0) > 0.05

    # and the update: google's LAMB per TF variable at the step's rate
    ref.load_state_dict(start)
    google_step(ref, run.model, whole, GoogleLamb(learning_rate=accumulated.plan.lr_at(0)))
    theirs = ref.state_dict()
    for loop in (accumulated, one_pass):
        for name, value in loop.raw_model.state_dict().items():
            torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


def test_every_update_of_a_short_run_is_googles_rate_and_googles_lamb(tmp_path):
    """Eight updates through `Loop.run` (global batch 16 as 4 micro-batches, `--optim.warmup_style google`, warmup
    3, poly_power 2, weight decay 0.01, clip 1.0): each update's rate is `create_optimizer`'s at that global_step
    (update 0 at rate 0, warmup, then (1 - k/8)^2), and the weights after the run are google's eight steps on the
    whole batch. No optimizer group corrects the moments' bias (google's LAMB has none)."""
    ds = SyntheticPretraining(n=16, seed=2)
    batch = loader.collate([ds[i] for i in range(len(ds))])
    run = tiny_run(max_steps=8, batch_size=16, micro=4)
    run = run.replace(optim=run.optim.replace(warmup_steps=3, warmup_style="google", decay_power=2.0))
    loop, start, _ = recording_loop(run, tmp_path / "run", ds)
    assert not any(group["bias_correction"] for group in loop.optimizer.param_groups)
    rates, step = [], loop.optimizer.step

    def rate_recording_step(*args, **kwargs):
        rates.append(loop.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    loop.optimizer.step = rate_recording_step
    norms: list[float] = []
    train_step = loop.train_step
    loop.train_step = lambda *args, **kwargs: (result := train_step(*args, **kwargs), norms.append(result.grad_norm))[0]
    assert loop.run() == "done"

    ref = AlbertForPreTraining(run.model)
    ref.load_state_dict(start)
    google = GoogleLamb(learning_rate=0.0)
    for k in range(8):
        google.learning_rate = google_lr(k, run.optim.lr, 8, 3, 2.0)
        assert rates[k] == pytest.approx(google.learning_rate, rel=1e-12, abs=0.0), k
        assert norms[k] == pytest.approx(google_step(ref, run.model, batch, google), rel=1e-4), k
    assert rates[0] == 0.0 and rates[3] == pytest.approx(run.optim.lr * (1 - 3 / 8) ** 2)
    theirs = ref.state_dict()
    for name, value in loop.raw_model.state_dict().items():
        torch.testing.assert_close(value, theirs[name], rtol=1e-5, atol=1e-6, msg=name)


def test_lamb_is_googles_formula_where_epsilon_and_the_trust_ratios_special_cases_decide():
    """float64, four steps: gradients of 1e-7 (the size of epsilon, so its place decides: google adds it to
    sqrt(v), not inside it, and corrects no bias), a weight of zeros with a gradient (ratio 1, as google's outer
    tf.where), a gradient of zeros on a decayed weight (the update is the decay alone, its ratio ||w|| / ||wd w||),
    and an exempt tensor (no decay, no ratio). Names as google's regexes see them."""
    generator = torch.Generator().manual_seed(3)
    weights = {"layer/kernel": torch.randn(5, 3, generator=generator, dtype=torch.float64),
               "zero/kernel": torch.zeros(4, 2, dtype=torch.float64),
               "still/kernel": torch.randn(6, generator=generator, dtype=torch.float64),
               "layer/LayerNorm/gamma": 1 + 0.1 * torch.randn(3, generator=generator, dtype=torch.float64)}
    grads = [{"layer/kernel": 1e-7 * torch.randn(5, 3, generator=generator, dtype=torch.float64),
              "zero/kernel": torch.randn(4, 2, generator=generator, dtype=torch.float64),
              "still/kernel": torch.zeros(6, dtype=torch.float64),
              "layer/LayerNorm/gamma": 1e-6 * torch.randn(3, generator=generator, dtype=torch.float64)}
             for _ in range(4)]
    ours = {name: torch.nn.Parameter(w.clone()) for name, w in weights.items()}
    decayed = [ours[n] for n in ("layer/kernel", "zero/kernel", "still/kernel")]
    optimizer = Lamb([{"params": decayed, "weight_decay": 0.01, "trust_ratio": True},
                      {"params": [ours["layer/LayerNorm/gamma"]], "weight_decay": 0.0, "trust_ratio": False}],
                     lr=0.05)
    theirs = {name: w.clone() for name, w in weights.items()}
    google = GoogleLamb(learning_rate=0.05)
    for step_grads in grads:
        for name, p in ours.items():
            p.grad = step_grads[name].clone()
        optimizer.step()
        google.apply_gradients([(step_grads[name], (name, theirs[name])) for name in theirs])
    for name in weights:
        torch.testing.assert_close(ours[name].detach(), theirs[name], rtol=1e-12, atol=1e-15, msg=name)
    assert not torch.equal(theirs["zero/kernel"], weights["zero/kernel"])          # ratio 1 moved it
    # epsilon inside the square root (or a bias correction) would have moved the small-gradient weight otherwise
    inside = weights["layer/kernel"].clone()
    m = v = torch.zeros_like(inside)
    for step_grads in grads:
        g = step_grads["layer/kernel"]
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        update = m / torch.sqrt(v + 1e-6) + 0.01 * inside
        inside -= 0.05 * torch.linalg.vector_norm(inside) / torch.linalg.vector_norm(update) * update
    assert float((inside - theirs["layer/kernel"]).abs().max()) > 1e-3


def test_bias_correction_counts_each_tensors_own_steps():
    """`--optim.bias_correction=true` (not google's; Adam's): a tensor that first gets a gradient at the group's
    second step is corrected for its first step (m / (1 - b1), v / (1 - b2)), as torch's Adam counts per tensor.
    Before, the whole group took its first tensor's count: the late tensor's first update was scaled by
    (1 - b2^2)^0.5 / (1 - b1^2) x (1 - b1) / (1 - b2)^0.5 = 0.74 of the right one."""
    generator = torch.Generator().manual_seed(4)
    first, late = (torch.nn.Parameter(torch.randn(4, 3, generator=generator, dtype=torch.float64)) for _ in range(2))
    alone = torch.nn.Parameter(late.detach().clone())
    grads = [torch.randn(4, 3, generator=generator, dtype=torch.float64) for _ in range(3)]
    group = {"weight_decay": 0.0, "trust_ratio": False}
    optimizer = Lamb([{"params": [first, late], **group}], lr=0.1, bias_correction=True)
    first.grad = grads[0]                                   # step 1: `late` has no gradient (left out of it)
    optimizer.step()
    first.grad, late.grad = grads[1], grads[2]
    optimizer.step()
    alone.grad = grads[2]
    Lamb([{"params": [alone], **group}], lr=0.1, bias_correction=True).step()
    torch.testing.assert_close(late.detach(), alone.detach(), rtol=1e-14, atol=0)
    assert [optimizer.state[p]["step"] for p in (first, late)] == [2, 1]


# ---------------------------------------------------------------------------------- torchrun, the real CLI
TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "8",
        "--max-steps", "4", "--warmup-steps", "1", "--lr", "0.01", "--data.dynamic_masking=true",
        "--train.progress=false", "--train.tensorboard=false", "--save-every", "0", "--eval-every", "0",
        "--log-every", "1"]


def records(run_dir: Path) -> list[tuple[int, float, float, float]]:
    """(step, loss, mlm_loss, grad_norm) of each training record of metrics.jsonl."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "grad_norm" in record:
            out.append((record["step"], record["loss"], record["mlm_loss"], record["grad_norm"]))
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="gloo on the CPU: a machine without CUDA")
@pytest.mark.skipif(not (BIN / "torchrun").is_file(), reason="torchrun is not installed")
def test_two_torchrun_processes_train_the_weights_of_one_process(tmp_path):
    """`torchrun --nproc-per-node 2 -m albertlm pretrain --dist.backend gloo --micro-batch-size 2` (each process 2
    micro-batches of 2 a step, different masked counts on each: dynamic masks of real text) against one process of
    the global batch of 8: the same losses and gradient norms at every step, the same weights after 4 updates."""
    text = alice_documents(tmp_path, 300)
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(tmp_path / "data"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    common = ["pretrain", "--data", str(tmp_path / "data"), *TINY]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    # TMPDIR: torchrun leaves a torchelastic_* folder of its workers' logs in the temporary directory, one a run
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "albertlm", *common,
                           "--out", str(tmp_path / "two"), "--micro-batch-size", "2", "--dist.backend", "gloo"],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]

    one, two = records(tmp_path / "one"), records(tmp_path / "two")
    assert [r[0] for r in one] == [r[0] for r in two] == [1, 2, 3, 4]
    for a, b in zip(one, two):
        assert b[1:] == pytest.approx(a[1:], rel=1e-5), a[0]
    assert max(r[3] for r in one) > 1.0                          # the clipping is exercised
    from safetensors.torch import load_file

    ours = load_file(tmp_path / "one" / "checkpoints" / "step_00000004" / "model.safetensors")
    theirs = load_file(tmp_path / "two" / "checkpoints" / "step_00000004" / "model.safetensors")
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        torch.testing.assert_close(theirs[name], value, rtol=1e-5, atol=1e-6, msg=name)
