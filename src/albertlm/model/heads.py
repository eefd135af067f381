"""Task heads on the ALBERT backbone (section 4.2): masked-LM, sequence classification / regression
(GLUE), token classification, span QA (SQuAD), multiple choice (RACE).

Each returns `logits` (or `start_logits` / `end_logits`) and, given labels, `loss` — transformers'
names and loss conventions, so the same training code serves both.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertModel, MaskedLMHead, ModelOutput
from albertlm.model.inputs import ModelInputError, check_target
from albertlm.model.io import PretrainedMixin, init_weights


def per_example(name: str, t: Tensor, batch: int, integer: bool = True) -> Tensor:
    """One target per example, (B,) or (B, 1) (transformers flattens its labels too) -> (B,), int64 if `integer`
    (int32 from numpy works too). A (B, 1) regression target used to broadcast against the (B,) predictions into a
    (B, B) loss; another shape is a ModelInputError naming the argument."""
    if isinstance(t, Tensor) and t.dim() == 2 and t.shape[1] == 1:
        t = t[:, 0]
    check_target(name, t, (batch,), integer)
    return t.long() if integer else t


def mean_cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Cross entropy averaged over the targets that are not `ignore_index`, as `F.cross_entropy`; but a batch in which
    every target is ignored gives 0 (with a zero gradient) where the plain mean over no elements is NaN (transformers'
    heads return that NaN). One NaN loss makes NaN gradients, AdamW's moments keep them and every later step writes NaN
    weights; under data parallelism the all-reduce spreads them to every rank. `AlbertForPreTraining` already counts
    its MLM and SOP losses this way (`weighted_cross_entropy`). No host sync: the count stays on the device."""
    total = F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, reduction="sum")
    return total / (targets != ignore_index).sum().clamp(min=1)


def span_loss(start_logits: Tensor, end_logits: Tensor, start_positions: Tensor, end_positions: Tensor,
              attention_mask: Tensor | None = None) -> Tensor:
    """SQuAD's loss: the mean of the start and the end cross entropy over the T positions (B, T); a position
    outside 0..T-1 is ignored (transformers clamps it to T and ignores T).

    Without `attention_mask` this is transformers' (and google's `run_squad.py`) loss, whose softmax also runs over
    the padded positions, so an example's loss depends on how far its batch is padded. With it (B, T, 1 = token)
    the padded positions are left out of the softmax, and a position on the padding is ignored as one past the end
    is: the loss of a padded batch is that of its unpadded examples, whatever the padding. Fine-tuning pads each
    micro-batch to its own longest sequence, so it trains on this one (`tasks.finetune.TaskObjective`): with the
    padded softmax, --micro-batch-size changed the gradient (by half of its norm on mixed lengths)."""
    T = start_logits.shape[1]
    losses = []
    for logits, positions in ((start_logits, start_positions), (end_logits, end_positions)):
        positions = positions.clamp(0, T)
        logits = logits.float()
        if attention_mask is not None:
            padding = attention_mask == 0                                               # (B, T)
            logits = logits.masked_fill(padding, torch.finfo(logits.dtype).min)
            on_padding = F.pad(padding, (0, 1)).gather(1, positions[:, None])[:, 0]    # (B,); T is not padding
            positions = positions.masked_fill(on_padding, T)
        losses.append(mean_cross_entropy(logits, positions, ignore_index=T))
    return (losses[0] + losses[1]) / 2


class _TaskModel(PretrainedMixin, nn.Module):
    base_prefix = "albert."
    pooled = True  # whether the head reads the pooled [CLS] output (else every token)

    def __init__(self, cfg: ModelConfig, num_outputs: int | None = None):
        super().__init__()
        self.config = cfg
        self.albert = AlbertModel(cfg, add_pooling_layer=self.pooled)
        self.dropout = nn.Dropout(cfg.classifier_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_outputs or cfg.num_labels)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def features(self, input_ids: Tensor, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                 output_hidden_states: bool = False) -> tuple[Tensor, ModelOutput]:
        """(what the classifier reads, after dropout; the backbone's output)."""
        out = self.albert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        return self.dropout(out.pooler_output if self.pooled else out.last_hidden_state), out


def with_hidden_states(out: ModelOutput, base: ModelOutput) -> ModelOutput:
    """`out` with the backbone's `hidden_states` where it computed them (`output_hidden_states=True`)."""
    if base.hidden_states is not None:
        out["hidden_states"] = base.hidden_states
    return out


class AlbertForSequenceClassification(_TaskModel):
    """Linear on the pooled output; num_labels = 1 is regression (MSE), otherwise cross entropy."""

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, labels: Tensor | None = None, *,
                output_hidden_states: bool = False) -> ModelOutput:
        x, base = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = self.classifier(x)  # (B, num_labels)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            regression = self.config.num_labels == 1
            labels = per_example("labels", labels, len(logits), integer=not regression)  # (B,)
            out["loss"] = (F.mse_loss(logits.squeeze(-1).float(), labels.float()) if regression
                           else mean_cross_entropy(logits, labels))
        return out


class AlbertForTokenClassification(_TaskModel):
    """Linear on every token; labels -100 are ignored."""

    pooled = False

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, labels: Tensor | None = None, *,
                output_hidden_states: bool = False) -> ModelOutput:
        x, base = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = self.classifier(x)  # (B, T, num_labels)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            check_target("labels", labels, tuple(input_ids.shape))
            out["loss"] = mean_cross_entropy(logits.flatten(0, 1), labels.flatten().long())
        return out


class AlbertForQuestionAnswering(_TaskModel):
    """Span start / end logits per token (no dropout, as transformers); positions outside the sequence
    are ignored in the loss, which is transformers' (its softmax includes the padded positions; `span_loss` with
    the attention mask leaves them out, as fine-tuning does)."""

    pooled = False

    def __init__(self, cfg: ModelConfig):
        nn.Module.__init__(self)
        self.config = cfg
        self.albert = AlbertModel(cfg, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, start_positions: Tensor | None = None,
                end_positions: Tensor | None = None, *, output_hidden_states: bool = False) -> ModelOutput:
        if (start_positions is None) != (end_positions is None):
            raise ModelInputError("give both start_positions and end_positions for a loss (one of them alone gave none)")
        base = self.albert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        start, end = self.qa_outputs(base.last_hidden_state).unbind(-1)  # 2 x (B, T)
        out = with_hidden_states(ModelOutput(start_logits=start, end_logits=end), base)
        if start_positions is not None and end_positions is not None:
            start_positions = per_example("start_positions", start_positions, len(start))
            end_positions = per_example("end_positions", end_positions, len(start))
            out["loss"] = span_loss(start, end, start_positions, end_positions)   # transformers': padding included
        return out


class AlbertForMultipleChoice(_TaskModel):
    """input_ids (B, C, T): every choice is scored from its pooled output; softmax over the C choices."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, num_outputs=1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, labels: Tensor | None = None, *,
                output_hidden_states: bool = False) -> ModelOutput:
        """`hidden_states` (with `output_hidden_states`) are the backbone's over the B * C flattened choices."""
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 3:
            shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise ModelInputError(f"input_ids must have shape (batch, choices, tokens), got {shape}")
        B, C, T = input_ids.shape
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            check_target(name, t, (B, C, T), integer=False)
        flat = [t.reshape(B * C, T) if t is not None else None for t in (input_ids, attention_mask, token_type_ids)]
        x, base = self.features(*flat, output_hidden_states)
        logits = self.classifier(x).view(B, C)  # (B, C)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            out["loss"] = mean_cross_entropy(logits, per_example("labels", labels, B))
        return out


class AlbertForMaskedLM(PretrainedMixin, nn.Module):
    """The pretraining MLM head alone (no pooler, no SOP): logits for every token, or `labels` (B, T)
    with -100 where nothing is predicted."""

    base_prefix = "albert."

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.albert = AlbertModel(cfg, add_pooling_layer=False)
        self.mlm_head = MaskedLMHead(cfg)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, labels: Tensor | None = None, *,
                output_hidden_states: bool = False) -> ModelOutput:
        base = self.albert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        logits = self.mlm_head(base.last_hidden_state, self.albert.embeddings.word.weight)  # (B, T, V)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            check_target("labels", labels, tuple(input_ids.shape))
            out["loss"] = mean_cross_entropy(logits.flatten(0, 1), labels.flatten().long())
        return out


__all__ = ["AlbertForMaskedLM", "AlbertForSequenceClassification", "AlbertForTokenClassification",
           "AlbertForQuestionAnswering", "AlbertForMultipleChoice"]
