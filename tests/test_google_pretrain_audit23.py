"""albertlm's pretraining step against google-research/albert's `run_pretraining.py`, `optimization.py` and
`lamb_optimizer.py`, transcribed below in torch from google's code (not from ours):

- the learning rate (`create_optimizer`): `tf.train.polynomial_decay(init_lr, global_step, num_train_steps,
  end_learning_rate=0.0, power=poly_power, cycle=False)`, then, when `num_warmup_steps`, blended as
  `(1 - is_warmup) * decayed + is_warmup * init_lr * global_step / num_warmup_steps`;
- `tf.clip_by_global_norm(grads, clip_norm=1.0)`, then `LAMBOptimizer.apply_gradients` once per TF variable
  (no bias correction; weight decay 0.01 and the trust ratio skipped for variables whose name matches
  "LayerNorm", "layer_norm" or "bias"; ratio 1 where ||w|| or ||u|| is 0);
- `get_masked_lm_output`'s loss (weighted sum / (sum of weights + 1e-5)), `get_sentence_order_output`'s (mean),
  total = their sum, and `metric_fn`'s evaluation metrics (weighted MLM accuracy and mean loss, SOP accuracy).

Our attention keeps Q, K and V in one (3H, H) weight where google has three variables; LAMB's trust ratio is
per variable, so it took one ratio over the three (fixed: `lamb.trust_ratio_splits`). The MLM loss divided by
max(weights, 1e-5) where google adds 1e-5 (fixed). What still differs on purpose is pinned here and in
docs/training.md ("Against google-research's run_pretraining.py").
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from albertlm.config.run import OptimConfig, paper_recipe
from albertlm.data import loader
from albertlm.interop.tf import tf_key_map
from albertlm.model.albert import AlbertForPreTraining
from albertlm.training.distributed import DistInfo
from albertlm.training.lamb import Lamb, build_optimizer, param_groups
from albertlm.training.loop import Plan, evaluate
from albertlm.training.pretrain import Datasets, PretrainingObjective, make_loop
from albertlm.training.schedule import lr_at
from train_fixtures import SyntheticPretraining, tiny_run

EXCLUDE = ["LayerNorm", "layer_norm", "bias"]          # optimization.create_optimizer's list
MODEL_ARGS = ("input_ids", "attention_mask", "token_type_ids", "masked_lm_positions")


# ------------------------------------------------------------------------------- google's code, in torch
def google_lr(step: int, init_lr: float, num_train_steps: int, num_warmup_steps: int, poly_power: float = 1.0):
    """optimization.create_optimizer's learning rate at `global_step` = step (start_warmup_step 0)."""
    decay_step = min(step, num_train_steps)                              # polynomial_decay, cycle=False
    decayed = (init_lr - 0.0) * (1 - decay_step / num_train_steps) ** poly_power + 0.0
    if not num_warmup_steps:
        return decayed
    warmup_lr = init_lr * (step / num_warmup_steps)
    is_warmup = float(step < num_warmup_steps)
    return (1.0 - is_warmup) * decayed + is_warmup * warmup_lr


def ours_per_docs(step: int, init_lr: float, num_train_steps: int, num_warmup_steps: int, poly_power: float = 1.0):
    """What docs/training.md says ours is: google's rate from the end of the warmup on; during the warmup google's
    warmup line one step later, init_lr * (step + 1) / warmup (so the last warmup update has the full rate)."""
    if step < num_warmup_steps:
        return init_lr * (step + 1) / num_warmup_steps
    return google_lr(step, init_lr, num_train_steps, num_warmup_steps, poly_power)


def tf_clip_by_global_norm(grads: list[torch.Tensor], clip_norm: float):
    global_norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads))
    scale = clip_norm * torch.minimum(1.0 / global_norm, torch.tensor(1.0, dtype=global_norm.dtype) / clip_norm)
    return [g * scale.to(g.dtype) for g in grads], global_norm


class GoogleLamb:
    """lamb_optimizer.LAMBOptimizer as create_optimizer builds it; `apply_gradients` takes (grad, (name, var))
    with `var` a tensor updated in place (here a view of one of our parameters)."""

    def __init__(self, learning_rate: float, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=tuple(EXCLUDE), exclude_from_layer_adaptation=None):
        self.learning_rate, self.weight_decay_rate = learning_rate, weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay
        self.exclude_from_layer_adaptation = exclude_from_layer_adaptation or exclude_from_weight_decay
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def apply_gradients(self, grads_and_vars) -> None:
        for grad, (name, param) in grads_and_vars:
            m = self.m.get(name, torch.zeros_like(param))
            v = self.v.get(name, torch.zeros_like(param))
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * grad ** 2
            update = next_m / (torch.sqrt(next_v) + self.epsilon)
            if self._do_use_weight_decay(name):
                update = update + self.weight_decay_rate * param
            ratio = 1.0
            if self._do_layer_adaptation(name):
                w_norm, g_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(update)
                ratio = torch.where(w_norm > 0, torch.where(g_norm > 0, w_norm / g_norm, 1.0), 1.0)
            param.sub_(ratio * self.learning_rate * update)
            self.m[name], self.v[name] = next_m, next_v

    def _do_use_weight_decay(self, name: str) -> bool:
        if not self.weight_decay_rate:
            return False
        return not any(re.search(r, name) for r in self.exclude_from_weight_decay)

    def _do_layer_adaptation(self, name: str) -> bool:
        return not any(re.search(r, name) for r in self.exclude_from_layer_adaptation)


def google_variables(model, cfg) -> list[tuple[str, str, torch.Tensor]]:
    """(our parameter, google's variable name, the rows of our parameter that variable is), for every trainable
    TF variable of run_pretraining.py's graph: a weight made of k TF variables (Q, K, V) is cut in k along dim 0
    (transposing a kernel changes neither its norm nor an element-wise update)."""
    names = tf_key_map(cfg)
    out = []
    for ours, param in model.named_parameters():
        tf_names = names[ours][0]
        for name, rows in zip(tf_names, param.data.chunk(len(tf_names), 0)):
            out.append((ours, name, rows))
    return out


def google_losses(out, batch):
    """get_masked_lm_output and get_sentence_order_output: (masked_lm_loss, sentence_order_loss, total_loss)
    and the per-example values metric_fn reads."""
    logits = out["prediction_logits"]
    log_probs = F.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)      # (in the model's dtype)
    label_ids = batch["masked_lm_ids"].reshape(-1)
    label_weights = batch["masked_lm_weights"].reshape(-1).to(log_probs.dtype)
    one_hot_labels = F.one_hot(label_ids, logits.shape[-1]).to(log_probs.dtype)
    per_example_loss = -(log_probs * one_hot_labels).sum(-1)
    mlm = (label_weights * per_example_loss).sum() / (label_weights.sum() + 1e-5)
    sop_log_probs = F.log_softmax(out["sop_logits"], dim=-1)
    sop_labels = batch["sentence_order_label"].reshape(-1)
    sop_example_loss = -(F.one_hot(sop_labels, 2).to(sop_log_probs.dtype) * sop_log_probs).sum(-1)
    sop = sop_example_loss.mean()
    return mlm, sop, mlm + sop, (per_example_loss, log_probs, sop_example_loss, sop_log_probs)


def google_metrics(outs_and_batches) -> dict[str, float]:
    """metric_fn over the whole evaluation (tf.metrics accumulate over batches)."""
    correct = weight = loss = sop_correct = sop_n = sop_loss = 0.0
    for out, batch in outs_and_batches:
        _, _, _, (per_example_loss, log_probs, sop_example_loss, sop_log_probs) = google_losses(out, batch)
        w = batch["masked_lm_weights"].reshape(-1).float()
        ids = batch["masked_lm_ids"].reshape(-1)
        correct += float((w * (log_probs.argmax(-1) == ids).float()).sum())
        loss += float((w * per_example_loss).sum())
        weight += float(w.sum())
        labels = batch["sentence_order_label"].reshape(-1)
        sop_correct += float((sop_log_probs.argmax(-1) == labels).sum())
        sop_loss += float(sop_example_loss.sum())
        sop_n += len(labels)
    return {"masked_lm_accuracy": correct / weight, "masked_lm_loss": loss / weight,
            "sentence_order_accuracy": sop_correct / sop_n, "sentence_order_loss": sop_loss / sop_n}


def collated(n: int = 16, seed: int = 0) -> tuple[SyntheticPretraining, dict]:
    ds = SyntheticPretraining(n=n, seed=seed)
    return ds, loader.collate([ds[i] for i in range(len(ds))])


# --------------------------------------------------------------------------------------------- schedule
@pytest.mark.parametrize("warmup,total,power", [(5, 20, 1.0), (5, 20, 2.0), (0, 20, 1.0), (3125, 125_000, 1.0)])
def test_the_schedule_is_googles_after_the_warmup_and_one_increment_above_it_during_it(warmup, total, power):
    """Update k (from 0) gets google's global_step k rate from the end of the warmup on, down to lr/T at the last
    update (google's 124999th of 125000); during the warmup ours is (k+1)/W x lr where google's is k/W x lr (its
    first update has rate 0, its last warmup update (W-1)/W x lr): documented in docs/training.md, pinned here."""
    lr = 0.00176
    steps = sorted({0, 1, max(warmup - 1, 0), warmup, warmup + 1, total // 2, total - 1, total})
    for k in steps:
        ours = lr_at(k, lr, warmup, total, power)
        assert ours == pytest.approx(ours_per_docs(k, lr, total, warmup, power), rel=1e-12, abs=1e-15), k
        if k >= warmup:
            assert ours == pytest.approx(google_lr(k, lr, total, warmup, power), rel=1e-12, abs=1e-15), k
        else:
            assert ours - google_lr(k, lr, total, warmup, power) == pytest.approx(lr / warmup, rel=1e-9), k
    assert lr_at(total - 1, lr, warmup, total, power) == pytest.approx(lr * (1 / total) ** power)
    if warmup:
        assert google_lr(0, lr, total, warmup, power) == 0.0 and lr_at(0, lr, warmup, total, power) == lr / warmup
        # the rate falls at the end of the warmup in both: from the full lr (google: (W-1)/W lr) to (1-W/T) lr
        assert lr_at(warmup, lr, warmup, total, power) == pytest.approx(lr * (1 - warmup / total) ** power)


def test_the_paper_recipe_is_googles_run_pretraining_defaults():
    """run_pretraining.py's flags: train_batch_size 4096, optimizer lamb, learning_rate 0.00176, poly_power 1,
    num_train_steps 125000, num_warmup_steps 3125; create_optimizer: weight decay 0.01, betas 0.9/0.999, eps 1e-6,
    clip_norm 1.0 (max_seq_length 512 and max_predictions_per_seq 20 are the data's: docs/data.md)."""
    run = paper_recipe()
    o, t = run.optim, run.train
    assert (t.batch_size, t.max_steps) == (4096, 125_000)
    assert (o.name, o.lr, o.decay_power, o.warmup_steps, o.weight_decay) == ("lamb", 0.00176, 1.0, 3125, 0.01)
    assert (o.beta1, o.beta2, o.eps, o.clip_norm, o.bias_correction) == (0.9, 0.999, 1e-6, 1.0, False)
    plan = Plan(total_steps=t.max_steps, warmup_steps=o.warmup(t.max_steps), eval_every=1000, lr=o.lr,
                decay_power=o.decay_power)
    assert plan.lr_at(3125) == pytest.approx(google_lr(3125, 0.00176, 125_000, 3125))


# ------------------------------------------------------------------------------------------------- LAMB
def test_decay_and_trust_ratio_exemptions_are_googles_regexes(tiny_config):
    """Every parameter: exempt from weight decay and the trust ratio exactly when the TF variable(s) it holds
    match "LayerNorm", "layer_norm" or "bias" (cls/predictions/output_bias, LayerNorm/gamma and beta, ...)."""
    model = AlbertForPreTraining(tiny_config)
    decayed, exempt = param_groups(model, 0.01)
    by_id = {id(p): n for n, p in model.named_parameters()}
    names = tf_key_map(tiny_config)
    for group, exempted in ((decayed, False), (exempt, True)):
        for p in group["params"]:
            tf_names = names[by_id[id(p)]][0]
            assert {any(re.search(r, n) for r in EXCLUDE) for n in tf_names} == {exempted}, tf_names


def google_step(ref, cfg, batch, google: GoogleLamb) -> float:
    """One of google's training steps on `ref` (our plain model, its parameters cut into TF variables): total_loss
    on the whole batch, its gradients, clip_by_global_norm 1.0, LAMBOptimizer.apply_gradients. Returns the
    global norm before clipping."""
    ref.zero_grad(set_to_none=True)
    google_losses(ref(**{key: batch[key] for key in MODEL_ARGS}), batch)[2].backward()
    params = dict(ref.named_parameters())
    clipped, global_norm = tf_clip_by_global_norm([p.grad for p in params.values()], 1.0)
    clipped = dict(zip(params, clipped))
    pairs, seen = [], {}
    for ours_name, name, rows in google_variables(ref, cfg):
        i = seen[ours_name] = seen.get(ours_name, -1) + 1
        pairs.append((clipped[ours_name].chunk(len(tf_key_map(cfg)[ours_name][0]), 0)[i], (name, rows)))
    with torch.no_grad():
        google.apply_gradients(pairs)
    return float(global_norm)


def test_lamb_steps_are_googles_per_tf_variable_with_shared_and_tied_weights(tiny_config):
    """Four LAMB updates of a tiny all-shared ALBERT (5 layers, one set of weights; the MLM decoder tied to the
    word embeddings), float64: ours (build_optimizer) against google's LAMBOptimizer applied to each TF variable,
    both after google's clip. google's query, key and value are three variables, three trust
    ratios; ours took one ratio over the fused (3H, H) weight (here Q's norm is made 3x K's and V's, as training
    makes them differ), so the Q/K/V weights moved by the wrong amounts."""
    torch.manual_seed(0)
    ours = AlbertForPreTraining(tiny_config).double()
    with torch.no_grad():
        for block in ours.albert.encoder.attentions:
            block.qkv.weight[: tiny_config.hidden_size] *= 3.0
    ref = AlbertForPreTraining(tiny_config).double()
    ref.load_state_dict(ours.state_dict())
    _, batch = collated()
    optim = OptimConfig(lr=0.01)
    opt = build_optimizer(ours, optim)
    google = GoogleLamb(learning_rate=optim.lr)
    for _ in range(4):
        ours.zero_grad(set_to_none=True)
        google_losses(ours(**{key: batch[key] for key in MODEL_ARGS}), batch)[2].backward()
        grads = [p.grad for p in ours.parameters()]
        for g, clipped in zip(grads, tf_clip_by_global_norm(grads, optim.clip_norm)[0]):
            g.copy_(clipped)           # google's clip (torch's differs by 1e-6: see the clipping test)
        opt.step()
        global_norm = google_step(ref, tiny_config, batch, google)
        assert global_norm > 1.0                                         # the clipping is exercised
    theirs = ref.state_dict()
    for name, value in ours.state_dict().items():
        torch.testing.assert_close(value, theirs[name], rtol=1e-10, atol=1e-12, msg=name)


def test_split_trust_ratios_are_per_block_refuse_uneven_blocks_and_skip_an_overflowed_step(tiny_config):
    """`Lamb(..., trust_ratio_splits={w: k})`: each of w's k row blocks gets the ratio a tensor of its own gets;
    a tensor that does not split evenly is refused; under fp16 loss scaling an overflowed step leaves the split
    tensor as it was (the device-side skip multiplies the update, blocks included, by 0)."""
    from albertlm.training.lamb import trust_ratio_splits

    generator = torch.Generator().manual_seed(0)
    whole = torch.nn.Parameter(torch.randn(6, 4, generator=generator, dtype=torch.float64))
    whole.data[:2] *= 5.0
    blocks = [torch.nn.Parameter(whole.data[i:i + 2].clone()) for i in (0, 2, 4)]
    grad = torch.randn(6, 4, generator=generator, dtype=torch.float64)
    whole.grad = grad.clone()
    for i, block in enumerate(blocks):
        block.grad = grad[2 * i:2 * i + 2].clone()
    Lamb([whole], lr=0.1, trust_ratio_splits={whole: 3}).step()
    Lamb(blocks, lr=0.1).step()
    torch.testing.assert_close(whole.data, torch.cat([b.data for b in blocks]), rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="does not split into 4 equal blocks"):
        Lamb([whole], trust_ratio_splits={whole: 4})

    model = AlbertForPreTraining(tiny_config)
    assert list(trust_ratio_splits(model).values()) == [3] * len(model.albert.encoder.attentions)
    opt = build_optimizer(model, OptimConfig())
    qkv = model.albert.encoder.attentions[0].qkv.weight
    before = qkv.detach().clone()
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.found_inf, opt.grad_scale = torch.ones(()), torch.ones(())
    opt.step()
    assert torch.equal(qkv.detach(), before)


def test_clipping_is_tf_clip_by_global_norm_up_to_torchs_epsilon():
    """The loop clips with torch's clip_grad_norm_ before LAMB, as google clips before apply_gradients: the same
    global norm, and the same scale up to torch's 1e-6 (max_norm / (norm + 1e-6) where TF has clip_norm / norm): a
    relative 1e-6 on the gradient, which LAMB's normalised update all but ignores (see docs/training.md)."""
    generator = torch.Generator().manual_seed(0)
    for scale in (0.1, 3.0, 1e4):            # below the clip norm (untouched), above it, far above it
        grads = [torch.randn(shape, generator=generator, dtype=torch.float64) * scale for shape in ((7, 5), (11,))]
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        expected, global_norm = tf_clip_by_global_norm(grads, 1.0)
        assert float(norm) == pytest.approx(float(global_norm), rel=1e-14)
        for p, e in zip(params, expected):
            torch.testing.assert_close(p.grad, e, rtol=1.1e-6 if global_norm > 1 else 1e-14, atol=0)


# ----------------------------------------------------------------------------------------------- losses
def test_the_training_loss_is_googles_total_loss(tiny_config):
    """total_loss = masked_lm_loss (weighted sum / (sum of weights + 1e-5)) + sentence_order_loss (mean). With one
    or two masked tokens per batch google's + 1e-5 is a 5e-6 share of the MLM loss, which ours left out (it
    divided by max(weights, 1e-5))."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config)
    _, batch = collated(n=4)
    batch["masked_lm_weights"] = torch.zeros_like(batch["masked_lm_weights"])
    batch["masked_lm_weights"][0, 0] = 1.0
    batch["masked_lm_weights"][2, 0] = 1.0
    objective = PretrainingObjective(skip_padding=False)
    with torch.no_grad():
        ours, _ = objective.forward(model, batch, objective.denominators([batch]))
        out = model(**{k: batch[k] for k in MODEL_ARGS})
        mlm, sop, total, _ = google_losses(out, batch)
    assert float(ours) == pytest.approx(float(total), rel=1e-6)
    assert float(mlm) < float(total)                      # a sentence loss is in it


def test_reported_metrics_are_googles_evaluation_metrics(tiny_config):
    """evaluate's mlm_loss / mlm_acc / sop_loss / sop_acc are metric_fn's masked_lm_loss (weighted mean over the
    whole evaluation), masked_lm_accuracy (weighted), sentence_order_loss and sentence_order_accuracy, over
    two batches of different masked counts (pooled, not a mean of per-batch ratios)."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config).eval()
    _, first = collated(n=6, seed=3)
    _, second = collated(n=3, seed=4)
    second["masked_lm_weights"][:, 1:] = 0.0
    metrics = evaluate(model, iter([first, second]), PretrainingObjective(skip_padding=False), "fp32", DistInfo())
    with torch.no_grad():
        expected = google_metrics([(model(**{k: b[k] for k in MODEL_ARGS}), b) for b in (first, second)])
    assert metrics["mlm_loss"] == pytest.approx(expected["masked_lm_loss"], rel=1e-6)
    assert metrics["mlm_acc"] == pytest.approx(expected["masked_lm_accuracy"], abs=1e-9)
    assert metrics["sop_loss"] == pytest.approx(expected["sentence_order_loss"], rel=1e-6)
    assert metrics["sop_acc"] == pytest.approx(expected["sentence_order_accuracy"], abs=1e-9)
    assert metrics["loss"] == pytest.approx(metrics["mlm_loss"] + metrics["sop_loss"], rel=1e-12)


# ------------------------------------------------------------------------------------------ whole steps
def test_pretraining_steps_are_googles_with_accumulation(tmp_path, one_thread):
    """Six updates of `make_loop` (global batch 16 as 4 micro-batches of 4: accumulation; warmup 2; the CPU fast
    paths as the CLI runs them) against google's step on the whole batch at once: total loss, clip_by_global_norm
    1.0, LAMB per TF variable, with google's rate at every update after the warmup ((k+1)/W x lr during it, as
    documented). Steps count optimizer updates, not micro-batches."""
    ds, batch = collated(n=16)
    run = tiny_run(max_steps=6, batch_size=16, micro=4)
    loop = make_loop(run, tmp_path / "run", Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta),
                     DistInfo(), False)
    start = {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}
    rates, step = [], loop.optimizer.step

    def recording_step(*args, **kwargs):
        rates.append(loop.optimizer.param_groups[0]["lr"])
        return step(*args, **kwargs)

    loop.optimizer.step = recording_step
    assert loop.run() == "done"

    cfg, optim, total, warmup = run.model, run.optim, run.train.max_steps, run.optim.warmup_steps
    ref = AlbertForPreTraining(cfg)
    ref.load_state_dict(start)
    google = GoogleLamb(learning_rate=0.0)
    for k in range(total):
        google.learning_rate = ours_per_docs(k, optim.lr, total, warmup, optim.decay_power)
        assert rates[k] == pytest.approx(google.learning_rate, rel=1e-12), k
        google_step(ref, cfg, batch, google)
    assert len(rates) == total
    theirs = ref.state_dict()
    for name, value in loop.raw_model.state_dict().items():
        torch.testing.assert_close(value, theirs[name], rtol=1e-4, atol=2e-6, msg=name)
