"""albertlm's fine-tuning against google-research/albert's `run_classifier.py` / `classifier_utils.py`,
`run_squad_v1.py` / `run_squad_v2.py` / `squad_utils.py`, `run_race.py` / `race_utils.py` and `optimization.py`,
transcribed below in torch from google's code (not from ours); the recipes against the paper's appendix A.4
(Table 14) and the README. The pretraining side (LAMB, the schedule, clipping) is test_google_pretrain_audit23's;
its transcriptions of google's learning rate and clipping are reused here.

google fine-tunes with `optimization.AdamWeightDecayOptimizer` (create_optimizer's "adamw"): Adam moments with
beta 0.9/0.999, eps 1e-6 added to sqrt(v), NO bias correction, weight decay 0.01 added to the update for every
variable whose name matches none of "LayerNorm", "layer_norm", "bias". albertlm's `--optim.name adamw` is torch's
AdamW, which corrects the moments' bias: in the first updates google's steps are up to ~6.5x ours (c_t =
(1 - 0.9^t) / sqrt(1 - 0.999^t)), and over the paper's RTE / MRPC recipe (800 steps) 2.2x ours on average. That
and the warmup's one-step lead (docs/training.md) are the whole difference, pinned here and in docs/finetuning.md.
"""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
import torch.nn.functional as F

from albertlm.interop.tf import tf_key_map
from albertlm.model.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering,
                                  AlbertForSequenceClassification, span_loss)
from albertlm.tasks import recipes
from albertlm.tasks.features import collate
from albertlm.training.distributed import DistInfo
from albertlm.training.lamb import Lamb, build_optimizer, param_groups
from conftest import save_tiny_pretrained
from test_google_pretrain_audit23 import EXCLUDE, google_lr, ours_per_docs, tf_clip_by_global_norm
from train_fixtures import StubTokenizer, finetune_config, synthetic_task

MODEL_ARGS = ("input_ids", "attention_mask", "token_type_ids")


# ------------------------------------------------------------------------------- google's code, in torch
class GoogleAdamWeightDecay:
    """optimization.AdamWeightDecayOptimizer as create_optimizer builds it for fine-tuning (weight_decay_rate 0.01,
    beta_1 0.9, beta_2 0.999, epsilon 1e-6, exclude_from_weight_decay ["LayerNorm", "layer_norm", "bias"]);
    `apply_gradients` takes (grad, (name, var)) and updates `var` in place. `bias_correction=True` is NOT google's:
    it is torch's AdamW (m / (1 - b1^t), v / (1 - b2^t), eps added after), to show that this is what differs."""

    def __init__(self, learning_rate: float, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                 exclude_from_weight_decay=tuple(EXCLUDE), bias_correction: bool = False):
        self.learning_rate, self.weight_decay_rate = learning_rate, weight_decay_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.exclude_from_weight_decay = exclude_from_weight_decay
        self.bias_correction = bias_correction
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}
        self.t = 0

    def apply_gradients(self, grads_and_vars) -> None:
        self.t += 1
        for grad, (name, param) in grads_and_vars:
            m = self.m.get(name, torch.zeros_like(param))
            v = self.v.get(name, torch.zeros_like(param))
            next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
            next_v = self.beta_2 * v + (1.0 - self.beta_2) * grad ** 2
            if self.bias_correction:        # torch.optim.AdamW, not google
                update = (next_m / (1 - self.beta_1 ** self.t)) / (
                    torch.sqrt(next_v / (1 - self.beta_2 ** self.t)) + self.epsilon)
            else:
                update = next_m / (torch.sqrt(next_v) + self.epsilon)
            if self._do_use_weight_decay(name):
                update = update + self.weight_decay_rate * param
            param.sub_(self.learning_rate * update)
            self.m[name], self.v[name] = next_m, next_v

    def _do_use_weight_decay(self, name: str) -> bool:
        if not self.weight_decay_rate:
            return False
        return not any(re.search(r, name) for r in self.exclude_from_weight_decay)


def google_classifier_loss(model, batch: dict, regression: bool = False) -> torch.Tensor:
    """classifier_utils.create_model (dropout off): logits from the pooled output; softmax cross entropy averaged
    over the batch, or (STS-B) the mean of squared errors."""
    pooled = model.albert(*(batch[k] for k in MODEL_ARGS)).pooler_output
    logits = F.linear(pooled, model.classifier.weight, model.classifier.bias)
    if regression:
        return ((logits.squeeze(-1) - batch["labels"].float()) ** 2).mean()
    log_probs = F.log_softmax(logits, dim=-1)
    one_hot = F.one_hot(batch["labels"], logits.shape[-1]).to(log_probs.dtype)
    return (-(one_hot * log_probs).sum(-1)).mean()


def google_step(ref, batch: dict, opt: GoogleAdamWeightDecay, clip_norm: float = 1.0) -> float:
    """One of google's fine-tuning steps: loss on the whole batch, tf.clip_by_global_norm(grads, 1.0) (`clip_norm`:
    another norm, for a tiny model whose gradients are below 1), AdamWeightDecayOptimizer.apply_gradients on each
    TF variable (named as google's graph names them)."""
    ref.zero_grad(set_to_none=True)
    google_classifier_loss(ref, batch).backward()
    names = tf_key_map(ref.config, "classifier")
    params = dict(ref.named_parameters())
    clipped, norm = tf_clip_by_global_norm([p.grad for p in params.values()], clip_norm)
    pairs = [(g, (names[n][0][0], p.data)) for (n, p), g in zip(params.items(), clipped)]
    with torch.no_grad():
        opt.apply_gradients(pairs)
    return float(norm)


# ----------------------------------------------------------------------------------------- the optimizer
def test_decay_exemptions_are_googles_for_every_fine_tuning_head(tiny_config):
    """create_optimizer's exclude_from_weight_decay regexes on google's variable names: the classifier's
    `output_bias` (GLUE, RACE), SQuAD v1's `cls/squad/output_bias`, the pooler's bias and the LayerNorms are exempt;
    `output_weights` and the kernels decay. Ours picks the same set by module type (lamb.param_groups)."""
    for cls, head in ((AlbertForSequenceClassification, "classifier"), (AlbertForQuestionAnswering, "squad"),
                      (AlbertForMultipleChoice, "classifier")):
        model = cls(tiny_config)
        names = tf_key_map(tiny_config, head)
        by_id = {id(p): n for n, p in model.named_parameters()}
        decayed, exempt = param_groups(model, 0.01)
        for group, exempted in ((decayed, False), (exempt, True)):
            for p in group["params"]:
                tf_names = names[by_id[id(p)]][0]
                assert {any(re.search(r, n) for r in EXCLUDE) for n in tf_names} == {exempted}, (cls, tf_names)


def test_torchs_adamw_is_googles_adamweightdecay_with_bias_correction_and_lamb_without_trust_ratio_is_google():
    """One parameter, eight updates: build_optimizer's AdamW (`--optim.name adamw`, fine-tuning's) equals google's
    update with the moments' bias corrected (which google's AdamWeightDecayOptimizer does not do), not google's;
    `Lamb` with the trust ratio off and no bias correction is google's AdamWeightDecayOptimizer exactly (the
    optimizer a faithful `--optim` choice would build: see docs/finetuning.md)."""
    from albertlm.config.run import OptimConfig

    generator = torch.Generator().manual_seed(0)
    start = torch.randn(5, 3, generator=generator, dtype=torch.float64)
    grads = [torch.randn(5, 3, generator=generator, dtype=torch.float64) for _ in range(8)]
    lr = 1e-3
    model = torch.nn.Linear(3, 5, bias=False).double()
    model.weight.data.copy_(start)
    adamw = build_optimizer(model, OptimConfig(name="adamw", lr=lr, weight_decay=0.01, eps=1e-6))
    lamb_param = torch.nn.Parameter(start.clone())
    lamb = Lamb([{"params": [lamb_param], "weight_decay": 0.01, "trust_ratio": False}], lr=lr, eps=1e-6)
    google = {"output_weights": start.clone()}
    corrected = {"output_weights": start.clone()}
    g_opt, c_opt = GoogleAdamWeightDecay(lr), GoogleAdamWeightDecay(lr, bias_correction=True)
    for g in grads:
        model.weight.grad, lamb_param.grad = g.clone(), g.clone()
        adamw.step()
        lamb.step()
        g_opt.apply_gradients([(g, ("output_weights", google["output_weights"]))])
        c_opt.apply_gradients([(g, ("output_weights", corrected["output_weights"]))])
    torch.testing.assert_close(model.weight.data, corrected["output_weights"], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(lamb_param.data, google["output_weights"], rtol=1e-12, atol=1e-15)
    moved_google = float((google["output_weights"] - start).norm())
    moved_ours = float((model.weight.data - start).norm())
    assert moved_google / moved_ours > 3.0        # google's early steps are several times torch AdamW's


def test_finetuning_steps_are_googles_but_for_adams_bias_correction_and_the_warmup_lead(tmp_path, one_thread):
    """Six updates of `make_finetune_loop` (a tiny classifier on a pretraining checkpoint; the whole training set in
    each batch; lr 5e-3, warmup 1, dropout off, clipped at 0.3 so that the tiny model's gradients are clipped; the
    CPU fast paths as the CLI runs them) against google's
    run_classifier step (create_model's loss on the batch, clip_by_global_norm 1.0, AdamWeightDecayOptimizer per TF
    variable). Ours equals google's step with the moments' bias corrected and the warmup's (k+1)/W rate; with
    google's own update (no correction, rate k/W: its first update has rate 0) the weights move otherwise."""
    from albertlm.tasks.finetune import make_finetune_loop

    (tmp_path / "tiny").mkdir()
    model_dir = save_tiny_pretrained(tmp_path / "tiny")
    spec = synthetic_task(n=8)
    cfg = finetune_config(max_steps=6)
    cfg.optim = dataclasses.replace(cfg.optim, clip_norm=0.3)
    loop = make_finetune_loop(spec, model_dir, StubTokenizer(), cfg, tmp_path / "run", DistInfo())
    start = {k: v.detach().clone() for k, v in loop.raw_model.state_dict().items()}
    assert loop.run() == "done"
    ours = loop.raw_model.state_dict()

    batch = collate(spec.train, pad_id=0, label_dtype=torch.long)
    total, warmup, lr = cfg.train.max_steps, cfg.optim.warmup_steps, cfg.optim.lr
    results = {}
    for name, correct, rate in (("as documented", True, ours_per_docs), ("google", False, google_lr)):
        ref = AlbertForSequenceClassification.from_pretrained(model_dir, num_labels=2, hidden_dropout=0.0,
                                                               attention_dropout=0.0, classifier_dropout=0.0)
        ref.load_state_dict(start)
        opt = GoogleAdamWeightDecay(0.0, bias_correction=correct)
        norms = []
        for k in range(total):
            opt.learning_rate = rate(k, lr, total, warmup)
            norms.append(google_step(ref, batch, opt, cfg.optim.clip_norm))
        assert max(norms) > cfg.optim.clip_norm             # the clipping is exercised
        results[name] = ref.state_dict()
    for key, value in ours.items():
        torch.testing.assert_close(value, results["as documented"][key], rtol=1e-4, atol=2e-6, msg=key)
    word = "albert.embeddings.word.weight"
    moved_ours = float((ours[word] - start[word]).norm())
    moved_google = float((results["google"][word] - start[word]).norm())
    assert moved_google > 1.5 * moved_ours       # google's uncorrected Adam steps are larger early in a run


def test_bias_correction_factor_over_the_paper_recipes():
    """What google's missing bias correction is worth over each recipe: the learning-rate-weighted mean of
    c_t = (1 - 0.9^t) / sqrt(1 - 0.999^t) (google's step over torch AdamW's for a steady gradient). The numbers
    docs/finetuning.md quotes."""
    def factor(name: str) -> float:
        from albertlm.training.schedule import lr_at

        _, _, _, _, steps, warmup, _ = recipes.PAPER_TABLE[name]
        rates = [lr_at(k, 1.0, warmup, steps) for k in range(steps)]
        c = [(1 - 0.9 ** (k + 1)) / math.sqrt(1 - 0.999 ** (k + 1)) for k in range(steps)]
        return sum(r * x for r, x in zip(rates, c)) / sum(rates)

    assert factor("rte") == pytest.approx(2.19, abs=0.01) and factor("mrpc") == pytest.approx(2.19, abs=0.01)
    assert factor("qnli") == pytest.approx(1.02, abs=0.01) and factor("squad1.1") == pytest.approx(1.35, abs=0.01)
    assert max((1 - 0.9 ** t) / math.sqrt(1 - 0.999 ** t) for t in range(1, 100)) == pytest.approx(6.57, abs=0.01)


# ------------------------------------------------------------------------------------------------ the heads
@torch.no_grad()
def test_losses_are_googles_classifier_regression_multiple_choice_and_squad_v1(tiny_config):
    """create_model's softmax cross entropy and STS-B's mean squared error on the pooled output; race_utils'
    cross entropy over the four choices' single logits; squad_utils.create_v1_model's loss (start and end cross
    entropy, averaged) on an unpadded batch. (google pads to max_seq_length and its softmax runs over the padding;
    fine-tuning's `span_loss` with the attention mask leaves padding out: the same loss on unpadded windows.)"""
    torch.manual_seed(0)
    ids = torch.randint(5, 99, (4, 9))
    ids[:, 0] = 2
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    classifier = AlbertForSequenceClassification(tiny_config.replace(num_labels=3)).eval()
    labels = torch.tensor([0, 2, 1, 2])
    ours = classifier(**batch, labels=labels)["loss"]
    assert float(ours) == pytest.approx(float(google_classifier_loss(classifier, {**batch, "labels": labels})),
                                        rel=1e-6)
    regressor = AlbertForSequenceClassification(tiny_config.replace(num_labels=1)).eval()
    scores = torch.tensor([0.5, 4.2, 3.0, 1.25])
    ours = regressor(**batch, labels=scores)["loss"]
    assert float(ours) == pytest.approx(float(google_classifier_loss(regressor, {**batch, "labels": scores},
                                                                     regression=True)), rel=1e-6)

    chooser = AlbertForMultipleChoice(tiny_config).eval()
    choices = {k: v.reshape(1, 4, 9) for k, v in batch.items()}
    out = chooser(**choices, labels=torch.tensor([3]))
    pooled = chooser.albert(*(batch[k] for k in MODEL_ARGS)).pooler_output
    logits = F.linear(pooled, chooser.classifier.weight, chooser.classifier.bias).reshape(1, 4)   # race_utils
    assert float(out["loss"]) == pytest.approx(float(-F.log_softmax(logits, -1)[0, 3]), rel=1e-6)

    reader = AlbertForQuestionAnswering(tiny_config).eval()
    out = reader(**batch)
    starts, ends = torch.tensor([1, 0, 5, 8]), torch.tensor([3, 0, 5, 8])
    google = 0.0
    for logits, positions in ((out["start_logits"], starts), (out["end_logits"], ends)):
        one_hot = F.one_hot(positions, logits.shape[1]).float()
        google = google + (-(one_hot * F.log_softmax(logits, -1)).sum(-1)).mean() / 2
    ours = span_loss(out["start_logits"], out["end_logits"], starts, ends, batch["attention_mask"])
    assert float(ours) == pytest.approx(float(google), rel=1e-6)


# ------------------------------------------------------------------------------------------- the recipes
def test_race_v2_keeps_googles_classifier_dropout():
    """The README's v2 RACE run: `run_race.py --learning_rate=1e-5 --train_step=12000 --warmup_step=1000
    --train_batch_size=32 --max_seq_length=512 --max_qa_length=128`, and "0 ALBERT DR (dropout rate for ALBERT in
    finetuning)" (Table 14's "ALBERT DR" column; v2 configs have hidden/attention dropout 0). The classifier's
    dropout is run_race's `--dropout_prob`, 0.1 by default and not changed there (race_utils.create_model drops
    the pooled output with keep_prob 1 - dropout_prob): `race-v2` had it 0."""
    cfg = recipes.recipe("race-v2")
    assert (cfg.optim.lr, cfg.train.batch_size, cfg.train.max_steps, cfg.optim.warmup_steps, cfg.max_seq_length) \
        == (1e-5, 32, 12000, 1000, 512)
    assert (cfg.hidden_dropout, cfg.attention_dropout) == (0.0, 0.0)
    assert cfg.classifier_dropout == 0.1


def test_recipes_and_defaults_are_the_papers_and_googles_flags():
    """Table 14 rows for SQuAD and RACE (GLUE's are test_glue_audit23's, against run_glue.sh); SQuAD's steps are
    google's count of questions, not windows: int(87599 / 48 * 2) = 3649 (v1.1 train, 2 epochs) and
    int(130319 / 48 * 3) = 8144 (v2.0 train, 3 epochs), as run_squad_v*.py compute num_train_steps from
    len(train_examples). The data options' defaults are run_squad_v*.py's and run_race.py's flags."""
    from albertlm.tasks.options import RaceOptions, SquadOptions
    from albertlm.tasks.squad import SquadSettings

    assert recipes.PAPER_TABLE["squad1.1"] == (5e-5, 48, 0.0, 0.1, int(87599 / 48 * 2), 365, 384)
    assert recipes.PAPER_TABLE["squad2.0"] == (3e-5, 48, 0.0, 0.1, int(130319 / 48 * 3), 814, 512)
    assert recipes.PAPER_TABLE["race"] == (2e-5, 32, 0.1, 0.1, 12000, 1000, 512)
    squad = SquadOptions()
    assert (squad.doc_stride, squad.max_query_length, squad.n_best_size, squad.max_answer_length) == (128, 64, 20, 30)
    settings = SquadSettings(384)
    assert (settings.doc_stride, settings.max_query_length, settings.n_best_size, settings.max_answer_length) \
        == (128, 64, 20, 30)
    assert recipes.FAMILY_DEFAULTS["squad"].max_seq_length == 384              # run_squad_v*.py --max_seq_length
    assert RaceOptions().max_qa_length == 128 and recipes.FAMILY_DEFAULTS["race"].max_seq_length == 512
    for name in ("squad", "race", "glue", "classify"):
        optim = recipes.FAMILY_DEFAULTS[name].optim
        assert (optim.name, optim.weight_decay, optim.beta1, optim.beta2, optim.eps, optim.clip_norm) == \
            ("adamw", 0.01, 0.9, 0.999, 1e-6, 1.0)
