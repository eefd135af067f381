"""Audit 32: parity of the pretraining optimizer, schedule and heads with google-research/albert, read line by line
from google's `lamb_optimizer.py`, `optimization.py`, `run_pretraining.py` (`get_masked_lm_output`,
`get_sentence_order_output`), `modeling.py` (`gelu`, `layer_norm`, the pooler) and with transformers' ALBERT heads.

The earlier audits transcribed google's code in torch (tests/test_google_pretrain_audit23.py, test_trainmath_audit30,
test_google_finetune_audit24, test_googleinit_audit27, test_squadv2_audit25). What is pinned here and was not:
- LAMB against a numpy (not torch) rewrite of `LAMBOptimizer.apply_gradients`, deciding decay and layer adaptation
  by google's regexes on google's variable names (`interop.tf.tf_key_map`), on layouts the earlier test did not
  run: N groups with inner_group_num 2, no sharing, E == H (no embedding_hidden_mapping_in), and the SQuAD v2.0
  head (its LayerNorm, its bias-less answer_class/dense_1); with a zero decayed variable (ratio 1) and a decayed
  variable whose gradient is zero (the update is the decay alone);
- the schedule as literal numbers for the paper recipe at updates 0, 1, W-1, W, W+1 and the last, in both warmup
  styles, and through the loop with gradient accumulation and a resume;
- the masked-LM and SOP heads against numpy's get_masked_lm_output / get_sentence_order_output (google's tanh
  gelu, layer_norm's 1e-12, the decoder tied to the word embeddings plus its own output_bias, the loss summed over
  the weighted slots / (sum of weights + 1e-5): padding slots count for nothing);
- the fine-tuning heads in training mode against transformers' (dropout where transformers draws it, at its rate).
All of them pass on the code as it was: guards (nothing was found to differ from google or transformers here).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.config.run import OptimConfig
from albertlm.interop.tf import tf_key_map
from albertlm.model.albert import AlbertForPreTraining
from albertlm.model.heads import AlbertForSquadV2
from albertlm.training.distributed import DistInfo
from albertlm.training.lamb import build_optimizer
from albertlm.training.loop import Plan
from albertlm.training.pretrain import PretrainingObjective, make_loop
from albertlm.training.schedule import lr_at
from test_train import datasets
from train_fixtures import SyntheticPretraining, tiny_run

EXCLUDE = ("LayerNorm", "layer_norm", "bias")       # optimization.create_optimizer's exclude_from_weight_decay


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------------------------ 1. LAMB, numpy
def numpy_lamb(variables: dict[str, np.ndarray], grads: list[dict[str, np.ndarray]], lr: float,
               weight_decay_rate: float = 0.01, beta_1: float = 0.9, beta_2: float = 0.999,
               epsilon: float = 1e-6) -> dict[str, np.ndarray]:
    """lamb_optimizer.LAMBOptimizer.apply_gradients, once per entry of `grads`, as create_optimizer builds it
    (exclude_from_layer_adaptation None, so it is exclude_from_weight_decay). float64, by TF variable name."""
    w = {name: value.copy() for name, value in variables.items()}
    m = {name: np.zeros_like(value) for name, value in w.items()}
    v = {name: np.zeros_like(value) for name, value in w.items()}
    for step in grads:
        for name, grad in step.items():
            m[name] = beta_1 * m[name] + (1.0 - beta_1) * grad
            v[name] = beta_2 * v[name] + (1.0 - beta_2) * np.square(grad)
            update = m[name] / (np.sqrt(v[name]) + epsilon)
            exempt = any(re.search(r, name) is not None for r in EXCLUDE)
            if weight_decay_rate and not exempt:                    # _do_use_weight_decay
                update = update + weight_decay_rate * w[name]
            ratio = 1.0
            if not exempt:                                          # _do_layer_adaptation
                w_norm, g_norm = np.linalg.norm(w[name]), np.linalg.norm(update)
                ratio = (w_norm / g_norm if g_norm > 0 else 1.0) if w_norm > 0 else 1.0
            w[name] = w[name] - ratio * lr * update
    return w


def tf_views(model: torch.nn.Module, head: str) -> dict[str, tuple[str, int, int]]:
    """google's variable name -> (our parameter, k, i): the variable is block i of k of that parameter's rows (the
    fused Q/K/V weight and bias hold three). A kernel is our weight transposed: neither its norm nor an element-wise
    update changes, so the numpy side works on our layout."""
    names = tf_key_map(model.config, head)
    out = {}
    for ours, _ in model.named_parameters():
        tf_names = names[ours][0]
        for i, name in enumerate(tf_names):
            out[name] = (ours, len(tf_names), i)
    return out


LAYOUTS = {
    "all-shared": (AlbertForPreTraining, "pretraining", {}),
    "groups3-inner2": (AlbertForPreTraining, "pretraining", dict(num_layers=6, num_groups=3, inner_group_num=2)),
    "not-shared": (AlbertForPreTraining, "pretraining", dict(num_layers=3, sharing="none")),
    "e-equals-h": (AlbertForPreTraining, "pretraining", dict(num_layers=3, embedding_size=32)),
    "squad-v2-head": (AlbertForSquadV2, "squad_v2", dict(num_layers=2)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_lamb_updates_are_googles_numpy_lamb_per_tf_variable(layout, tiny_config):
    """Three LAMB updates (build_optimizer, as pretraining builds it; float64) against numpy's LAMBOptimizer on
    google's variables: decay and layer adaptation decided by google's regexes on google's names, one trust ratio
    per variable (Q, K and V of the fused weight each their own, their gradients scaled 1 : 10 : 100), the token
    type embeddings all zero (ratio 1 where ||w|| = 0) and the position embeddings' gradient zero (the update is
    the decay alone, its ratio ||w|| / ||wd w|| = 100)."""
    cls, head, changes = LAYOUTS[layout]
    cfg = tiny_config.replace(**changes)
    torch.manual_seed(0)
    model = cls(cfg).double()
    with torch.no_grad():
        model.albert.embeddings.token_type.weight.zero_()
        for p in model.parameters():              # non-trivial LayerNorms and biases, so an exemption shows
            p.add_(0.05 * torch.randn_like(p) * (p.abs().sum() > 0))
    views = tf_views(model, head)
    if layout == "e-equals-h":
        assert not any("embedding_hidden_mapping_in" in name for name in views)
    params = dict(model.named_parameters())
    start = {name: params[ours].detach().chunk(k, 0)[i].numpy().copy() for name, (ours, k, i) in views.items()}
    generator = torch.Generator().manual_seed(1)
    steps = []
    for _ in range(3):
        grads = {ours: torch.randn(p.shape, generator=generator, dtype=torch.float64) for ours, p in params.items()}
        grads["albert.embeddings.position.weight"].zero_()
        for ours, g in grads.items():
            if ours.endswith("qkv.weight"):
                for block, scale in zip(g.chunk(3, 0), (1.0, 10.0, 100.0)):
                    block.mul_(scale)
        steps.append(grads)
    lr = 0.01
    optimizer = build_optimizer(model, OptimConfig(lr=lr))
    for grads in steps:
        for ours, p in params.items():
            p.grad = grads[ours].clone()
        optimizer.step()
    expected = numpy_lamb(start, [{name: grads[ours].chunk(k, 0)[i].numpy() for name, (ours, k, i) in views.items()}
                                  for grads in steps], lr)
    for name, (ours, k, i) in views.items():
        got = params[ours].detach().chunk(k, 0)[i].numpy()
        np.testing.assert_allclose(got, expected[name], rtol=1e-12, atol=1e-15, err_msg=name)
    # the special cases were reached: the zero table moved by lr x its update (ratio 1), the position table by
    # lr x ||w|| per step (ratio ||w|| / ||wd w||): a relative (1 - lr)^3
    assert not start["bert/embeddings/token_type_embeddings"].any()
    assert expected["bert/embeddings/token_type_embeddings"].any()
    np.testing.assert_allclose(expected["bert/embeddings/position_embeddings"],
                               start["bert/embeddings/position_embeddings"] * (1 - lr) ** 3, rtol=1e-12)


# ------------------------------------------------------------------------------------ 2. the schedule
def test_the_paper_recipes_rates_at_the_named_steps_are_googles_numbers():
    """lr 0.00176, warmup 3125, 125000 updates (run_pretraining.py's flags). google's create_optimizer gives update
    k the rate 0.00176 k / 3125 while k < 3125, then 0.00176 (1 - k / 125000): 0 at update 0, 5.632e-7 at 1,
    0.00176 x 3124/3125 at 3124, 0.001716 at 3125, 0.00176 x 121874/125000 at 3126, 1.408e-8 at 124999. The default
    style is one warmup increment ahead (5.632e-7 at update 0, the full 0.00176 at 3124), google's after it."""
    lr, warmup, total = 0.00176, 3125, 125_000
    google = {0: 0.0, 1: 5.632e-7, 3124: 0.00176 * 3124 / 3125, 3125: 0.001716, 3126: 0.00176 * 121874 / 125000,
              124999: 1.408e-8}
    ahead = {0: 5.632e-7, 1: 1.1264e-6, 3124: 0.00176}
    for step, rate in google.items():
        plan = Plan(total_steps=total, warmup_steps=warmup, eval_every=1000, lr=lr, warmup_style="google")
        assert plan.lr_at(step) == pytest.approx(rate, rel=1e-9, abs=0), step  # (1 - k/T): float64 cancellation
        assert lr_at(step, lr, warmup, total) == pytest.approx(ahead.get(step, rate), rel=1e-9, abs=0), step
    assert lr_at(total, lr, warmup, total) == 0.0 == lr_at(total, lr, warmup, total, warmup_style="google")


def recorded_rates(run, run_dir: Path, resume: bool = False, stop_at: int | None = None) -> dict[int, float]:
    """{update (from 1): the learning rate the optimizer took it with} of `make_loop(run)`, stopped (as Ctrl-C) after
    update `stop_at`."""
    loop = make_loop(run, run_dir, datasets(n=32), DistInfo(), resume)
    rates: dict[int, float] = {}

    def on_step(step: int, metrics: dict) -> None:
        rates[step] = loop.optimizer.param_groups[0]["lr"]
        if step == stop_at:
            raise KeyboardInterrupt

    loop.on_step = on_step
    loop.run()
    return rates


@pytest.mark.parametrize("style", ["albertlm", "google"])
def test_rates_count_updates_not_micro_batches_and_a_resume_takes_them_on(style, tmp_path):
    """Batch 8 as 4 micro-batches of 2 (accumulation), warmup 3 of 6 updates, lr 0.01: update k (from 0) gets
    0.01 x (k + 1) / 3 (albertlm) or 0.01 x k / 3 (google) in the warmup and 0.01 x (1 - k / 6) after it, as google's
    global_step counts updates; stopped after update 2 and resumed, updates 3 to 6 get the same rates."""
    run = tiny_run(max_steps=6, batch_size=8, micro=2)
    run = run.replace(optim=run.optim.replace(warmup_steps=3, warmup_style=style))
    lead = 1 if style == "albertlm" else 0
    expected = {k + 1: 0.01 * ((k + lead) / 3 if k < 3 else 1 - k / 6) for k in range(6)}
    whole = recorded_rates(run, tmp_path / "whole")
    assert whole.keys() == expected.keys()
    for step, rate in expected.items():
        assert whole[step] == pytest.approx(rate, rel=1e-12, abs=0), step
    assert recorded_rates(run, tmp_path / "cut", stop_at=2) == {1: whole[1], 2: whole[2]}
    assert recorded_rates(run, tmp_path / "cut", resume=True) == {k: whole[k] for k in (3, 4, 5, 6)}


# ---------------------------------------------------------------------------- 3. the pretraining heads
def google_gelu(x: np.ndarray) -> np.ndarray:
    """modeling.gelu (the tanh form; hidden_act "gelu" in google's configs)."""
    return x * 0.5 * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * np.power(x, 3))))


def google_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """modeling.layer_norm: contrib layer_norm over the last axis, variance epsilon 1e-12."""
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * gamma + beta


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_mlm_and_sop_heads_are_googles_get_masked_lm_output_and_get_sentence_order_output(tiny_config):
    """float64, the sequence output and pooled output of our backbone fed to numpy's google heads: cls/predictions
    (dense H -> E with google's tanh gelu, layer_norm 1e-12, logits against the word embedding table + output_bias)
    on the gathered masked slots (B x P, google's order), the loss sum(w x ce) / (sum(w) + 1e-5) with padding slots
    weighted 0 (a padding slot holds position 0 and id 0: it counts for nothing, however wrong its prediction), and
    cls/seq_relationship on the pooled output (no dropout), the batch's mean cross entropy; the training objective's
    loss is their sum."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ds = SyntheticPretraining(n=5, seed=3)
    from albertlm.data.loader import collate

    batch = collate([ds[i] for i in range(len(ds))])
    assert float(batch["masked_lm_weights"].sum()) < batch["masked_lm_weights"].numel()    # padding slots exist
    args = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        base = model.albert(**args)
        out = model(**args, masked_lm_positions=batch["masked_lm_positions"])
        objective = PretrainingObjective(skip_padding=False)
        loss, _ = objective.forward(model, batch, objective.denominators([batch]))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    sequence, pooled = base.last_hidden_state.numpy(), base.pooler_output.numpy()
    positions = batch["masked_lm_positions"].numpy()
    gathered = sequence[np.arange(len(positions))[:, None], positions].reshape(-1, sequence.shape[-1])  # (B*P, H)
    x = google_gelu(gathered @ state["mlm_head.dense.weight"].T + state["mlm_head.dense.bias"])
    x = google_layer_norm(x, state["mlm_head.norm.weight"], state["mlm_head.norm.bias"])
    logits = x @ state["albert.embeddings.word.weight"].T + state["mlm_head.bias"]
    np.testing.assert_allclose(out.prediction_logits.numpy(), logits, rtol=1e-9, atol=1e-12)
    log_probs = log_softmax(logits)
    ids, weights = batch["masked_lm_ids"].numpy().reshape(-1), batch["masked_lm_weights"].numpy().reshape(-1)
    per_example = -log_probs[np.arange(len(ids)), ids]
    mlm = (weights * per_example).sum() / (weights.sum() + 1e-5)
    sop_logits = pooled @ state["sop_head.weight"].T + state["sop_head.bias"]
    np.testing.assert_allclose(out.sop_logits.numpy(), sop_logits, rtol=1e-9, atol=1e-12)
    labels = batch["sentence_order_label"].numpy()
    sop = -log_softmax(sop_logits)[np.arange(len(labels)), labels].mean()
    assert float(loss) == pytest.approx(mlm + sop, rel=1e-6)          # (the objective sums in float32)
    # the pooler is modeling.py's: tanh(dense) on the first token
    np.testing.assert_allclose(pooled, np.tanh(sequence[:, 0] @ state["albert.pooler.weight"].T
                                               + state["albert.pooler.bias"]), rtol=1e-9, atol=1e-12)
    assert model.config.activation == "gelu_new" and math.isclose(model.config.layer_norm_eps, 1e-12)


# ----------------------------------------------------------------- 4. fine-tuning heads in training mode
TRAINING_HEADS = ["AlbertForSequenceClassification", "AlbertForTokenClassification", "AlbertForMultipleChoice",
                  "AlbertForQuestionAnswering"]


@pytest.mark.parametrize("name", TRAINING_HEADS)
def test_heads_in_training_mode_drop_what_transformers_drops(name, tmp_path):
    """transformers' heads loaded into ours, both in training mode with classifier_dropout_prob 0.5 (the encoder's
    dropout 0): under the same seed each gives the same logits and loss as transformers', so the dropout sits where
    transformers draws it (the pooled output; every token; each choice's pooled output; none before the QA head),
    at its rate. (In eval mode test_hf_parity compares every head; the SOP head's dropout is the documented
    difference, docs/model.md.)"""
    pytest.importorskip("transformers")
    from albertlm.model import heads
    from test_hf_parity import hf_config, hf_model, inputs

    question = name == "AlbertForQuestionAnswering"
    hf = hf_model(name, hf_config(num_hidden_layers=2, num_labels=2 if question else 3, classifier_dropout_prob=0.5))
    hf.save_pretrained(tmp_path)
    ours = getattr(heads, name).from_pretrained(tmp_path)
    assert ours.config.classifier_dropout == 0.5
    hf.train()
    ours.train()
    ids, mask, types = inputs()
    labels: dict = {"labels": torch.tensor([0, 2, 1])}
    if name == "AlbertForMultipleChoice":
        ids, mask, types = (t.view(1, 3, 11) for t in (ids, mask, types))
        labels = {"labels": torch.tensor([2])}
    elif name == "AlbertForTokenClassification":
        labels = {"labels": torch.where(mask == 1, ids % 3, -100)}
    elif question:
        labels = {"start_positions": torch.tensor([1, 3, 4]), "end_positions": torch.tensor([2, 5, 6])}
    results = []
    for model in (hf, ours):
        torch.manual_seed(5)
        results.append(model(ids, mask, types, **labels))
    theirs, got = results
    for key in ("start_logits", "end_logits") if question else ("logits",):
        torch.testing.assert_close(got[key], theirs[key], atol=1e-5, rtol=0)
    torch.testing.assert_close(got["loss"], theirs["loss"], atol=1e-5, rtol=0)
    if not question:                  # the dropout is on: another seed gives other logits
        torch.manual_seed(6)
        assert not torch.allclose(ours(ids, mask, types)["logits"], got["logits"])
