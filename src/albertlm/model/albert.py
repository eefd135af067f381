"""ALBERT: A Lite BERT (Lan et al., ICLR 2020), in paper order.

ALBERT is BERT with two parameter reductions and one new loss:
1. Factorized embeddings (section 3.1): tokens are embedded in a small space E and projected to the
   hidden size H, so the vocabulary costs V*E + E*H instead of V*H.
2. Cross-layer sharing (section 3.1): the L layers reuse a few unique attention / FFN modules.
   `sharing_plan(cfg)` is the one place that decides which; the encoder is a flat loop over it.
3. Sentence-order prediction (section 3.2) on the pooled [CLS] output, next to masked-LM.

Shapes: B batch, T tokens, E embedding size, H hidden size, A heads, hs = H / A head size, V vocab,
P masked slots per sequence, M masked tokens in the batch.
Activation checkpointing and torch.compile are applied from outside (`enable_activation_checkpointing`).
`linear` / `residual_linear` (model/fused.py) are act(x W^T + b) and residual + dropout(x W^T + b),
computed inside one oneDNN GEMM on CPU in fp32.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from albertlm.config import ModelConfig
from albertlm.model.fused import attention, cast_once, linear, residual_linear
from albertlm.model.io import PretrainedMixin, init_weights


class ModelOutput(dict):
    """A dict with attribute access (transformers' output names); an absent entry reads as None."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)


# ---------------------------------------------------------------------------------------- embeddings
class Embeddings(nn.Module):
    """Word (V x E) + position + token type, LayerNorm, dropout, then the E -> H projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        self.position = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        # google-research skips the projection when E == H (transformers keeps one: see the config)
        self.project = nn.Linear(cfg.embedding_size, cfg.hidden_size) if cfg.has_embedding_projection else None

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        T = input_ids.shape[1]
        x = self.word(input_ids) + self.position.weight[:T]  # (B, T, E)
        x = x + (self.token_type(token_type_ids) if token_type_ids is not None else self.token_type.weight[0])
        x = self.dropout(self.norm(x))
        return linear(x, self.project) if self.project is not None else x  # (B, T, H)


# ----------------------------------------------------------------------------------------- attention
class Attention(nn.Module):
    """Multi-head self-attention with a post-LN residual; Q, K and V come from one fused matmul."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.dropout_p = cfg.num_heads, cfg.attention_dropout
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        B, T, H = x.shape
        # split (not permute + unbind): the gradients of q, k, v then concatenate without a strided gather
        qkv = linear(x, self.qkv).split(H, -1)  # 3 x (B, T, H)
        q, k, v = (t.view(B, T, self.num_heads, -1).transpose(1, 2) for t in qkv)  # (B, A, T, hs)
        p = self.dropout_p if self.training else 0.0
        y = attention(q, k, v, mask, p)  # (B, A, T, hs): SDPA
        return self.norm(residual_linear(x, y.transpose(1, 2).reshape(B, T, H), self.out, self.dropout))


# ----------------------------------------------------------------------------------------------- FFN
class FeedForward(nn.Module):
    """Position-wise H -> I -> H with the activation ("gelu" exact, "gelu_new" tanh = google's gelu),
    post-LN residual."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.ffn_size)
        self.down = nn.Linear(cfg.ffn_size, cfg.hidden_size)
        self.activation = cfg.activation
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        h = linear(x, self.up, self.activation)  # (B, T, I)
        return self.norm(residual_linear(x, h, self.down, self.dropout))


# -------------------------------------------------------------------------------------- sharing plan
def sharing_plan(cfg: ModelConfig) -> list[tuple[int, int]]:
    """For each of the L * inner_group_num blocks, the (attention, FFN) module index it runs.

    Layer l belongs to group g = l * N // L (google-research). Inside a group, `all` shares both
    sublayers, `attention` only the attention, `ffn` only the FFN; `none` shares nothing (BERT, N
    ignored). google's inner_group_num K gives every layer K distinct blocks run one after another.
    """
    L, N, K = cfg.num_layers, cfg.num_groups, cfg.inner_group_num
    plan = []
    for layer in range(L):
        group = layer * N // L
        shared_attn = cfg.sharing in ("all", "attention")
        shared_ffn = cfg.sharing in ("all", "ffn")
        for k in range(K):
            plan.append(((group if shared_attn else layer) * K + k, (group if shared_ffn else layer) * K + k))
    return plan


def run_block(attention: Attention, ffn: FeedForward, x: Tensor, mask: Tensor | None) -> Tensor:
    return ffn(attention(x, mask))


# ------------------------------------------------------------------------------------------- encoder
class Encoder(nn.Module):
    """Only the unique modules live here (no aliased tensors); forward is a flat loop over the plan."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.plan = sharing_plan(cfg)
        self.attentions = nn.ModuleList(Attention(cfg) for _ in range(1 + max(a for a, _ in self.plan)))
        self.ffns = nn.ModuleList(FeedForward(cfg) for _ in range(1 + max(f for _, f in self.plan)))
        self.run_block = run_block  # replaced from outside, e.g. by enable_activation_checkpointing

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        for a, f in self.plan:
            x = self.run_block(self.attentions[a], self.ffns[f], x, mask)
        return x  # (B, T, H)


def attention_bias(attention_mask: Tensor | None) -> Tensor | None:
    """(B, T) 1 = token, 0 = padding -> (B, 1, 1, T) bool, True = may attend. None when nothing is
    padded, which lets SDPA take its fastest (mask-free) path."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    return attention_mask[:, None, None, :].bool()


class AlbertModel(PretrainedMixin, nn.Module):
    """Embeddings -> shared encoder -> (optional) tanh pooler on the first token ([CLS])."""

    base_prefix = ""

    def __init__(self, cfg: ModelConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if add_pooling_layer else None
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None) -> ModelOutput:
        with cast_once():  # under bf16 autocast each shared weight is cast once, not once per layer
            x = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
            x = self.encoder(x, attention_bias(attention_mask))
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None  # (B, H)
        return ModelOutput(last_hidden_state=x, pooler_output=pooled)


# --------------------------------------------------------------------------------------------- heads
class MaskedLMHead(nn.Module):
    """H -> E dense, activation, LayerNorm, then the decoder tied to the word embeddings (+ own bias)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.embedding_size)
        self.activation = cfg.activation
        self.norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: Tensor, word_embeddings: Tensor) -> Tensor:
        return F.linear(self.norm(linear(h, self.dense, self.activation)), word_embeddings, self.bias)  # (..., V)


def masked_targets(hidden: Tensor, positions: Tensor | None, ids: Tensor | None, weights: Tensor | None,
                   labels: Tensor | None) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Gather the M masked rows of `hidden` (B, T, H) -> (M, H), with their targets and weights.

    Either google's (positions, ids, weights) (B, P) with weight 0 on padding slots, or transformers'
    `labels` (B, T) with -100 where nothing is predicted."""
    if positions is not None:
        rows = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, P, H)
        keep = weights > 0 if weights is not None else torch.ones_like(positions, dtype=torch.bool)
        return rows[keep], (ids[keep] if ids is not None else None), (
            weights[keep].float() if weights is not None else None)
    keep = labels != -100
    return hidden[keep], labels[keep], None


def weighted_cross_entropy(logits: Tensor, targets: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor]:
    """Mean cross entropy and accuracy over rows, weighted like google's `masked_lm_weights`."""
    loss = F.cross_entropy(logits.float(), targets, reduction="none")
    correct = (logits.argmax(-1) == targets).float()
    if weights is None:
        return loss.mean(), correct.mean()
    total = weights.sum().clamp(min=1e-5)
    return (loss * weights).sum() / total, (correct * weights).sum() / total


class AlbertForPreTraining(PretrainedMixin, nn.Module):
    """Masked-LM (only at masked positions) + sentence-order prediction (same head serves NSP)."""

    base_prefix = "albert."

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.albert = AlbertModel(cfg)
        self.mlm_head = MaskedLMHead(cfg)
        self.sop_dropout = nn.Dropout(cfg.classifier_dropout)
        self.sop_head = nn.Linear(cfg.hidden_size, 2)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, masked_lm_positions: Tensor | None = None,
                masked_lm_ids: Tensor | None = None, masked_lm_weights: Tensor | None = None,
                labels: Tensor | None = None, sentence_order_label: Tensor | None = None) -> ModelOutput:
        base = self.albert(input_ids, attention_mask, token_type_ids)
        out = ModelOutput(sop_logits=self.sop_head(self.sop_dropout(base.pooler_output)))  # (B, 2)
        self._add_mlm(out, base.last_hidden_state, masked_lm_positions, masked_lm_ids, masked_lm_weights, labels)
        self._add_sop_loss(out, sentence_order_label)
        losses = [out[k] for k in ("mlm_loss", "sop_loss") if k in out]
        if losses:
            out["loss"] = sum(losses)
        return out

    def _add_mlm(self, out: ModelOutput, hidden: Tensor, positions, ids, weights, labels) -> None:
        word = self.albert.embeddings.word.weight
        if positions is None and labels is None:
            out["prediction_logits"] = self.mlm_head(hidden, word)  # (B, T, V): no targets, every position
            return
        rows, targets, weights = masked_targets(hidden, positions, ids, weights, labels)
        out["prediction_logits"] = self.mlm_head(rows, word)  # (M, V)
        if targets is not None:
            out["mlm_loss"], out["mlm_accuracy"] = weighted_cross_entropy(out.prediction_logits, targets, weights)

    @staticmethod
    def _add_sop_loss(out: ModelOutput, label: Tensor | None) -> None:
        """-100 (or no label) means no sentence task for that example (MLM-only data)."""
        if label is None or not bool((label != -100).any()):
            return
        keep = label != -100
        out["sop_loss"], out["sop_accuracy"] = weighted_cross_entropy(out.sop_logits[keep], label[keep], None)


def enable_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Recompute each block's activations in backward (saves memory, costs one more forward).
    Works on any model holding an `Encoder`; applied from outside, the model code does not change."""
    for module in model.modules():
        if isinstance(module, Encoder):
            module.run_block = functools.partial(checkpoint, run_block, use_reentrant=False)
    return model
