"""Task heads on the ALBERT backbone (section 4.2): masked-LM, sequence classification / regression
(GLUE), token classification, span QA (SQuAD; BERT's head, and google's SQuAD v2.0 head with its answerability
classifier, `AlbertForSquadV2`), multiple choice (RACE).

Each returns `logits` (or `start_logits` / `end_logits`) and, given labels, `loss` — transformers'
names and loss conventions, so the same training code serves both. Each takes transformers' `position_ids` and
`inputs_embeds` (keywords, `AlbertModel.forward`). Only `input_ids`, `attention_mask` and `token_type_ids` are
positional (but in `AlbertForSquadV2`, google's head): transformers' 4th positional argument is `position_ids`, which
a 4th positional slot for `labels` would read silently as labels.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertModel, MaskedLMHead, ModelOutput, loss_dtype
from albertlm.model.inputs import ModelInputError, check_embeds, check_one_of, check_target
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
    total = F.cross_entropy(logits.to(loss_dtype(logits)), targets, ignore_index=ignore_index, reduction="sum")
    return total / (targets != ignore_index).sum().clamp(min=1)


def span_loss(start_logits: Tensor, end_logits: Tensor, start_positions: Tensor, end_positions: Tensor,
              attention_mask: Tensor | None = None) -> Tensor:
    """SQuAD's loss: the mean of the start and the end cross entropy over the T positions (B, T); a position
    past the sequence (T or more) is ignored, a negative one is read as 0, [CLS] (transformers clamps both to 0..T
    and ignores T).

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
        logits = logits.to(loss_dtype(logits))
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
        self.albert = AlbertModel(cfg, add_pooling_layer=self.pooled)
        self.config = cfg = self.albert.config   # the backbone's own copy (AlbertModel.__init__)
        self.dropout = nn.Dropout(cfg.classifier_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_outputs or cfg.num_labels)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def features(self, input_ids: Tensor | None, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                 output_hidden_states: bool = False, position_ids: Tensor | None = None,
                 inputs_embeds: Tensor | None = None) -> tuple[Tensor, ModelOutput]:
        """(what the classifier reads, after dropout; the backbone's output)."""
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids=position_ids,
                          inputs_embeds=inputs_embeds, output_hidden_states=output_hidden_states)
        return self.dropout(out.pooler_output if self.pooled else out.last_hidden_state), out


def with_hidden_states(out: ModelOutput, base: ModelOutput) -> ModelOutput:
    """`out` with the backbone's `hidden_states` where it computed them (`output_hidden_states=True`)."""
    if base.hidden_states is not None:
        out["hidden_states"] = base.hidden_states
    return out


class AlbertForSequenceClassification(_TaskModel):
    """Linear on the pooled output; num_labels = 1 is regression (MSE), otherwise cross entropy."""

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, labels: Tensor | None = None,
                position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        x, base = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                position_ids=position_ids, inputs_embeds=inputs_embeds)
        logits = self.classifier(x)  # (B, num_labels)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            regression = self.config.num_labels == 1
            labels = per_example("labels", labels, len(logits), integer=not regression)  # (B,)
            dtype = loss_dtype(logits)   # float32, or float64 for a float64 model
            out["loss"] = (F.mse_loss(logits.squeeze(-1).to(dtype), labels.to(dtype)) if regression
                           else mean_cross_entropy(logits, labels))
        return out


class AlbertForTokenClassification(_TaskModel):
    """Linear on every token; labels -100 are ignored."""

    pooled = False

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, labels: Tensor | None = None,
                position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        x, base = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states,
                                position_ids=position_ids, inputs_embeds=inputs_embeds)
        logits = self.classifier(x)  # (B, T, num_labels)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            check_target("labels", labels, tuple(logits.shape[:2]))  # (B, T)
            out["loss"] = mean_cross_entropy(logits.flatten(0, 1), labels.flatten().long())
        return out


class AlbertForQuestionAnswering(_TaskModel):
    """Span start / end logits per token (no dropout, as transformers); positions outside the sequence
    are ignored in the loss, which is transformers' (its softmax includes the padded positions; `span_loss` with
    the attention mask leaves them out, as fine-tuning does)."""

    pooled = False

    def __init__(self, cfg: ModelConfig):
        nn.Module.__init__(self)
        self.albert = AlbertModel(cfg, add_pooling_layer=False)
        self.config = cfg = self.albert.config   # the backbone's own copy (AlbertModel.__init__)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, start_positions: Tensor | None = None,
                end_positions: Tensor | None = None, position_ids: Tensor | None = None,
                inputs_embeds: Tensor | None = None, output_hidden_states: bool = False) -> ModelOutput:
        if (start_positions is None) != (end_positions is None):
            raise ModelInputError("give both start_positions and end_positions for a loss (one of them alone gave none)")
        base = self.albert(input_ids, attention_mask, token_type_ids, position_ids=position_ids,
                           inputs_embeds=inputs_embeds, output_hidden_states=output_hidden_states)
        start, end = self.qa_outputs(base.last_hidden_state).unbind(-1)  # 2 x (B, T)
        out = with_hidden_states(ModelOutput(start_logits=start, end_logits=end), base)
        if start_positions is not None and end_positions is not None:
            start_positions = per_example("start_positions", start_positions, len(start))
            end_positions = per_example("end_positions", end_positions, len(start))
            out["loss"] = span_loss(start, end, start_positions, end_positions)   # transformers': padding included
        return out


def squad_p_mask(token_type_ids: Tensor, attention_mask: Tensor | None) -> Tensor:
    """(B, T) bool, True where no answer may start or end, for SQuAD's `[CLS] question [SEP] context [SEP]`
    windows (`tasks.squad.build_features`): the question and its [SEP] (token type 0 but [CLS]), the closing [SEP]
    (the last real token) and the padding; [CLS] stays open (the no-answer position). google's `p_mask`
    (squad_utils.convert_examples_to_features), which the features also carry."""
    B, T = token_type_ids.shape
    mask = token_type_ids == 0
    mask[:, 0] = False
    if attention_mask is None:
        last = token_type_ids.new_full((B,), T - 1)
    else:
        mask |= attention_mask == 0
        last = (attention_mask != 0).sum(-1) - 1
    mask[torch.arange(B, device=mask.device), last.clamp(min=1)] = True
    return mask


NEG_INF = -1e30   # google's mask value (`logits * (1 - p_mask) - 1e30 * p_mask`); float32, as the head computes


class AlbertForSquadV2(PretrainedMixin, nn.Module):
    """google-research/albert's SQuAD v2.0 head (`run_squad_v2.py`, `squad_utils.create_v2_model`), XLNet's:

    - start: dense(H -> 1) on every token, masked by `p_mask` (question, [SEP]s and padding; [CLS] kept);
    - end: dense(2H -> H, tanh), LayerNorm, dense(H -> 1) on each token's state concatenated with the start
      token's state: the gold start in training, at inference each of the `start_n_top` most likely starts,
      whose `end_n_top` most likely ends make a beam of start_n_top x end_n_top spans (5 x 5, google's flags);
    - answer_class: dense(2H -> H, tanh) on [the start-probability-weighted state, the [CLS] state], dropout
      (`classifier_dropout`; run_squad_v2.py's --dropout_prob 0.1), dense(H -> 1, no bias): `cls_logits`, whose
      lowest over a question's windows is its null odds (higher: unanswerable).

    Loss (with `start_positions`, `end_positions`, `is_impossible`): (start CE + end CE) / 2 + 0.5 x sigmoid
    cross entropy of `cls_logits` against `is_impossible`, each averaged over the batch. The masked positions
    have logits -1e30, so neither the loss nor the beam depend on how far a batch is padded.

    Outputs: training, `start_logits` and `end_logits` (B, T, masked) and `cls_logits` (B,); inference (no
    positions), `start_logits`, `start_top_log_probs` / `start_top_index` (B, start_n_top) and
    `end_top_log_probs` / `end_top_index` (B, start_n_top * end_n_top; the j-th end of the i-th start at
    i * end_n_top + j), as google's predictions. A window shorter than the beam fills it with index 0 ([CLS],
    never a span) and log-probability -1e30. `p_mask` (B, T; 1 = masked) defaults to `squad_p_mask` of the
    token types and attention mask, the layout of albertlm's SQuAD features."""

    base_prefix = "albert."
    start_n_top = 5
    end_n_top = 5

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.albert = AlbertModel(cfg, add_pooling_layer=False)
        self.config = cfg = self.albert.config   # the backbone's own copy (AlbertModel.__init__)
        H = cfg.hidden_size
        self.start_dense = nn.Linear(H, 1)                   # start_logits/dense
        self.end_dense = nn.Linear(2 * H, H)                 # end_logits/dense_0: [token state, start state]
        self.end_norm = nn.LayerNorm(H, eps=1e-12)           # end_logits/LayerNorm (TF contrib layer_norm's epsilon)
        self.end_out = nn.Linear(H, 1)                       # end_logits/dense_1
        self.answer_dense = nn.Linear(2 * H, H)              # answer_class/dense_0: [start feature, [CLS] state]
        self.answer_dropout = nn.Dropout(cfg.classifier_dropout)
        self.answer_out = nn.Linear(H, 1, bias=False)        # answer_class/dense_1
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def end_logits(self, hidden: Tensor, start_states: Tensor) -> Tensor:
        """(B, K, T) end logits of each token for K start states (B, K, H): dense_0 on the concatenation
        [token, start], computed as the token's and the start's halves of its kernel summed (the same sum, without
        the (B, K, T, 2H) concatenation), then tanh, LayerNorm, dense_1."""
        H = hidden.shape[-1]
        weight = self.end_dense.weight
        tokens = F.linear(hidden, weight[:, :H], self.end_dense.bias)       # (B, T, H)
        starts = F.linear(start_states, weight[:, H:])                      # (B, K, H)
        x = torch.tanh(tokens[:, None] + starts[:, :, None])                # (B, K, T, H)
        return self.end_out(self.end_norm(x)).squeeze(-1)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, start_positions: Tensor | None = None,
                end_positions: Tensor | None = None, is_impossible: Tensor | None = None, *,
                p_mask: Tensor | None = None, position_ids: Tensor | None = None,
                inputs_embeds: Tensor | None = None, output_hidden_states: bool = False) -> ModelOutput:
        given = [t is not None for t in (start_positions, end_positions, is_impossible)]
        if any(given) and not all(given):
            raise ModelInputError("give start_positions, end_positions and is_impossible together for a loss "
                                  "(the end logits of training read the gold start)")
        if p_mask is None and token_type_ids is None:
            raise ModelInputError("give token_type_ids (question 0, context 1) or p_mask: the head masks the "
                                  "question out of the answer positions")
        base = self.albert(input_ids, attention_mask, token_type_ids, position_ids=position_ids,
                           inputs_embeds=inputs_embeds, output_hidden_states=output_hidden_states)
        hidden = base.last_hidden_state                                     # (B, T, H)
        B, T, H = hidden.shape
        if p_mask is None:
            p_mask = squad_p_mask(token_type_ids, attention_mask)
        else:
            check_target("p_mask", p_mask, (B, T), integer=False)
            p_mask = p_mask.bool()
        # the -1e30 mask, softmaxes and beam in float32 (float64 for a float64 model): -1e30 is -inf in float16; the
        # layers run in the weights' dtype (a model loaded with dtype=torch.bfloat16 / float16 / float64 or .half())
        acc = torch.promote_types(hidden.dtype, torch.float32)
        start_logits = self.start_dense(hidden).squeeze(-1).to(acc).masked_fill(p_mask, NEG_INF)
        start_log_probs = F.log_softmax(start_logits, -1)
        out = ModelOutput(start_logits=start_logits)
        rows = torch.arange(B, device=hidden.device)
        if all(given):
            start_positions = per_example("start_positions", start_positions, B)
            end_positions = per_example("end_positions", end_positions, B)
            is_impossible = per_example("is_impossible", is_impossible, B, integer=False)
            if not torch.compiler.is_compiling() and bool(((start_positions < 0) | (start_positions >= T)
                                                           | (end_positions < 0) | (end_positions >= T)).any()):
                raise ModelInputError(f"start_positions and end_positions must be positions of the sequence (0 to "
                                      f"{T - 1}; 0, [CLS], for no answer)")
            start_states = hidden[rows, start_positions][:, None]           # (B, 1, H): the gold start
            end_logits = self.end_logits(hidden, start_states)[:, 0].to(acc).masked_fill(p_mask, NEG_INF)
            end_log_probs = F.log_softmax(end_logits, -1)
            out["end_logits"] = end_logits
        else:
            k = min(self.start_n_top, T)
            start_top_log_probs, start_top_index = start_log_probs.topk(k, -1)   # (B, k)
            start_states = hidden[rows[:, None], start_top_index]              # (B, k, H)
            end_logits = self.end_logits(hidden, start_states).to(acc).masked_fill(p_mask[:, None], NEG_INF)
            end_top_log_probs, end_top_index = F.log_softmax(end_logits, -1).topk(min(self.end_n_top, T), -1)
            beam = (self.start_n_top, self.end_n_top)
            out["start_top_log_probs"] = _fill(start_top_log_probs, beam[:1], NEG_INF)
            out["start_top_index"] = _fill(start_top_index, beam[:1], 0)
            out["end_top_log_probs"] = _fill(end_top_log_probs, beam, NEG_INF).flatten(1)
            out["end_top_index"] = _fill(end_top_index, beam, 0).flatten(1)
        # answerability from [CLS] and the start distribution (no end: one cls_logits per window)
        start_probs = start_logits.softmax(-1)                                  # (B, T)
        start_feature = torch.einsum("bt,bth->bh", start_probs, hidden.to(acc))
        features = torch.cat([start_feature, hidden[:, 0].to(acc)], -1)         # (B, 2H): start first, as google
        features = features.to(self.answer_dense.weight.dtype)                 # (float32 under autocast: it casts)
        answer = self.answer_dropout(torch.tanh(self.answer_dense(features)))
        cls_logits = self.answer_out(answer).squeeze(-1).to(acc)                # (B,)
        out["cls_logits"] = cls_logits
        out = with_hidden_states(out, base)
        if all(given):
            start_loss = -start_log_probs[rows, start_positions].mean()
            end_loss = -end_log_probs[rows, end_positions].mean()
            answer_loss = F.binary_cross_entropy_with_logits(cls_logits, is_impossible.to(acc))
            out["loss"] = (start_loss + end_loss) / 2 + 0.5 * answer_loss
        return out


def _fill(t: Tensor, shape: tuple[int, ...], value) -> Tensor:
    """(B, *k) -> (B, *shape), the missing places `value` (a beam wider than a short window's tokens)."""
    pads = [p for have, want in zip(reversed(t.shape[1:]), reversed(shape)) for p in (0, want - have)]
    return F.pad(t, pads, value=value) if any(pads) else t


class AlbertForMultipleChoice(_TaskModel):
    """input_ids (B, C, T): every choice is scored from its pooled output; softmax over the C choices."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, num_outputs=1)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, labels: Tensor | None = None,
                position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        """`hidden_states` (with `output_hidden_states`) are the backbone's over the B * C flattened choices;
        `inputs_embeds` (B, C, T, E) stand in for `input_ids`, `position_ids` (B, C, T) or (1, T) (transformers')."""
        check_one_of(input_ids, inputs_embeds)
        tokens = input_ids if inputs_embeds is None else inputs_embeds
        if inputs_embeds is not None:
            check_embeds(inputs_embeds, self.config.embedding_size, "(batch, choices, tokens, E)")
        elif not isinstance(input_ids, Tensor) or input_ids.dim() != 3:
            shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
            raise ModelInputError(f"input_ids must have shape (batch, choices, tokens), got {shape}")
        B, C, T = tokens.shape[:3]
        for arg, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            check_target(arg, t, (B, C, T), integer=False)
        flat = [t.flatten(0, 1) if t is not None else None
                for t in (input_ids, attention_mask, token_type_ids, inputs_embeds)]
        if isinstance(position_ids, Tensor):
            position_ids = position_ids.reshape(-1, position_ids.shape[-1])   # (B * C, T), or (1, T) as it was
        x, base = self.features(*flat[:3], output_hidden_states, position_ids=position_ids, inputs_embeds=flat[3])
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
        self.albert = AlbertModel(cfg, add_pooling_layer=False)
        self.config = cfg = self.albert.config   # the backbone's own copy (AlbertModel.__init__)
        self.mlm_head = MaskedLMHead(cfg)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, labels: Tensor | None = None,
                position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                output_hidden_states: bool = False) -> ModelOutput:
        base = self.albert(input_ids, attention_mask, token_type_ids, position_ids=position_ids,
                           inputs_embeds=inputs_embeds, output_hidden_states=output_hidden_states)
        logits = self.mlm_head(base.last_hidden_state, self.albert.embeddings.word.weight)  # (B, T, V)
        out = with_hidden_states(ModelOutput(logits=logits), base)
        if labels is not None:
            check_target("labels", labels, tuple(logits.shape[:2]))  # (B, T)
            out["loss"] = mean_cross_entropy(logits.flatten(0, 1), labels.flatten().long())
        return out


__all__ = ["AlbertForMaskedLM", "AlbertForSequenceClassification", "AlbertForTokenClassification",
           "AlbertForQuestionAnswering", "AlbertForSquadV2", "AlbertForMultipleChoice"]
