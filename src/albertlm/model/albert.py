"""ALBERT: A Lite BERT (Lan et al., ICLR 2020), in paper order.

ALBERT is BERT with two parameter reductions and one new loss:
1. Factorized embeddings (section 3.1): tokens are embedded in a small space E and projected to the
   hidden size H, so the vocabulary costs V*E + E*H instead of V*H.
2. Cross-layer sharing (section 3.1): the L layers reuse a few unique attention / FFN modules.
   `sharing_plan(cfg)` is the one place that decides which; the encoder is a flat loop over it.
3. Sentence-order prediction (section 3.2) on the pooled [CLS] output, next to masked-LM.

Shapes: B batch, T tokens, E embedding size, H hidden size, A heads, hs = H / A head size, V vocab,
P masked slots per sequence, M masked tokens in the batch, N real (not padding) tokens in the batch.
Plain PyTorch ops only (nn.Linear, scaled_dot_product_attention, nn.LayerNorm; on a GPU, switched on from
outside, torch's varlen_attn for attention over the packed real tokens), and no host-device
synchronisation in `forward` (no `.item()`, no boolean indexing on the pretraining path), so one
`torch.compile(model, fullgraph=True)` graph covers the whole pretraining forward. Activation
checkpointing, torch.compile and the CPU fast paths (`model/fast_paths.py`) are applied from outside.
"""
from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from albertlm.config import ConfigError, ModelConfig
from albertlm.model.inputs import (ModelInputError, check_inputs, check_target, describe_bad_indices,
                                   describe_bad_positions)
from albertlm.model.io import PretrainedMixin, init_weights

try:  # flash attention over packed sequences of different lengths (torch >= 2.10, CUDA); SDPA otherwise
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # an older torch
    varlen_attn = None


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu, "gelu_new": functools.partial(F.gelu, approximate="tanh"), "relu": F.relu}


# transformers' field order in its output classes (each holds a subset, in this order): `out[0]` is its loss if
# given, else its first logits / hidden state, as in transformers; albertlm's own entries (mlm_loss, ...) come after
TRANSFORMERS_ORDER = ("loss", "logits", "prediction_logits", "sop_logits", "start_logits", "end_logits",
                      "last_hidden_state", "pooler_output", "hidden_states", "attentions")


class ModelOutput(dict):
    """A dict with attribute access (transformers' output names); an absent entry reads as None.
    An integer index reads `to_tuple()`, transformers' order (`model(...)[0]` is the loss when labels are given,
    else the logits or `last_hidden_state`), whatever order the entries were added in.
    Registered as a pytree node (as transformers' ModelOutput), so `torch.export.export` and other pytree
    users see the tensors inside it."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self.get(name)

    def __missing__(self, key):  # dict's [] calls this for a key it lacks: an integer is a position
        if isinstance(key, int) and not isinstance(key, bool):
            return self.to_tuple()[key]
        raise KeyError(key)

    def to_tuple(self) -> tuple:
        """The entries that are not None, transformers' fields first in its order (`TRANSFORMERS_ORDER`), then
        albertlm's own in the order they were added."""
        first = [k for k in TRANSFORMERS_ORDER if k in self]
        return tuple(self[k] for k in first + [k for k in self if k not in first] if self[k] is not None)


torch.utils._pytree.register_pytree_node(
    ModelOutput, lambda out: (list(out.values()), list(out.keys())),
    lambda values, keys: ModelOutput(zip(keys, values)), serialized_type_name="albertlm.model.albert.ModelOutput",
    flatten_with_keys_fn=lambda out: ([(torch.utils._pytree.MappingKey(k), v) for k, v in out.items()], list(out)))


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

    def forward(self, input_ids: Tensor | None, token_type_ids: Tensor | None, packing: Packing | None = None,
                position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None) -> Tensor:
        """`inputs_embeds` (B, T, E) stand in for the word embeddings of `input_ids`; `position_ids` (B or 1, T) for
        the positions 0..T-1 (as transformers')."""
        x = self.word(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, E)
        T = x.shape[1]
        if position_ids is None and T > self.position.num_embeddings:  # a shape, not a value: no device sync
            raise ModelInputError(f"the sequences have {T} tokens, more than max_position_embeddings="
                                  f"{self.position.num_embeddings} (the longest this model's position embeddings "
                                  "cover): truncate them, or split them into windows")
        x = x + (self.position.weight[:T] if position_ids is None else self.position(position_ids))
        x = x + (self.token_type(token_type_ids) if token_type_ids is not None else self.token_type.weight[0])
        x = self.dropout(self.norm(x))
        if packing is not None:
            x = packing.unpad(x)  # (N, E)
        return self.project(x) if self.project is not None else x  # (B, T, H), or (N, H) packed


# ----------------------------------------------------------------------------------- padding skipped
class Packing:
    """Where the N real tokens of a padded (B, T) batch sit, so that every per-token layer (the QKV, output
    and FFN matmuls, LayerNorm, the residuals) runs on (N, ...) rows and never on padding; only attention
    itself sees the (B, T) layout, with zeros in the padded slots, which the attention mask hides as keys.
    The same arithmetic as the padded model on every real token; a batch that is 40% padding costs ~40% less.
    `index` (N,): the flat positions b * T + t of the real tokens, ascending; the caller computes it where
    the mask lives (the data loader, on the host), so the model never syncs to learn N."""

    def __init__(self, index: Tensor, batch: int, length: int, mask: Tensor | None = None):
        self.index, self.batch, self.length, self.mask = index, batch, length, mask
        self._starts = None

    def starts(self) -> Tensor:
        """(B + 1,) int32: where each sequence's real tokens start in the (N, ...) packing, then N (the
        `cu_seqlens` of packed attention). From the mask's row sums, on the device: no sync. Each row's real
        tokens are contiguous in the packing whatever the mask's pattern, since `index` is ascending."""
        if self._starts is None:
            self._starts = F.pad(self.mask.sum(1).cumsum(0), (1, 0)).to(torch.int32)
        return self._starts

    def pad(self, x: Tensor) -> Tensor:
        """(N, D) -> (B, T, D), zeros at the padding."""
        full = x.new_zeros(self.batch * self.length, x.shape[-1]).index_copy(0, self.index, x)
        return full.unflatten(0, (self.batch, self.length))

    def unpad(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (N, D)."""
        return x.flatten(0, 1).index_select(0, self.index)

    def rows(self, rows: Tensor) -> Tensor:
        """(B, R) positions in the padded batch -> their rows in the (N, ...) packing. A padded position maps to
        row 0, the first real token of the batch: what is computed there is meaningless, as in the padded
        model (pretraining's slot padding points at [CLS], a real token). A position outside 0..T-1 is an
        error as in the padded model's gather (eager CPU; a device assert on CUDA), never another sequence's
        token (flat indexing b * T + t read row b + 1's token t - T silently)."""
        slot = self.index.new_zeros(self.batch * self.length)
        slot = slot.index_copy(0, self.index, torch.arange(len(self.index), device=self.index.device))
        return slot.view(self.batch, self.length).gather(1, rows.long())


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

    # The packed kernel (`varlen_attn`: flash attention over sequences of different lengths) is switched on from
    # outside (`enable_packed_attention`) where the device runs it. With packing it attends over the (N, A, hs)
    # real tokens directly: no padding in attention either, no mask, no pad / unpad around it (fp16 / bf16).
    packed_kernel = None

    def forward(self, x: Tensor, mask: Tensor | None, rows: Tensor | None = None,
                packing: Packing | None = None) -> Tensor:
        """x (B, T, H) -> (B, T, H); with `rows` (B, R) only those positions are computed -> (B, R, H).
        With `packing`, x is (N, H) and so is the result (or (B, R, H) with rows)."""
        H = x.shape[-1]
        p = self.dropout_p if self.training else 0.0
        if rows is None:  # queries, keys and values at every position: qkv (.., 3H)
            residual, q, kv = x, None, self.qkv(x)
        else:  # keys and values from every position, queries only from the rows asked for
            residual = self.gather_rows(x, rows, packing)  # (B, R, H)
            q = F.linear(residual, self.qkv.weight[:H], self.qkv.bias[:H])  # (B, R, H)
            kv = F.linear(x, self.qkv.weight[H:], self.qkv.bias[H:])  # (.., 2H)
        if packing is not None and self.can_pack(kv, p):
            y = self.attend_packed(q, kv, rows, packing)
        else:
            y = self.attend(q, kv, mask, rows, packing, p)
        return self.output(residual, y)

    def attend(self, q: Tensor | None, kv: Tensor, mask: Tensor | None, rows: Tensor | None,
               packing: Packing | None, p: float) -> Tensor:
        """SDPA in the padded (B, T) layout (packed inputs are padded for it); the mask hides the padded keys."""
        H = kv.shape[-1] // (2 if q is not None else 3)
        kv = packing.pad(kv) if packing is not None else kv
        if q is None:
            q, k, v = kv.split(H, -1)  # 3 x (B, T, H); split, so the gradients concatenate cheaply
        else:
            k, v = kv.split(H, -1)
        q, k, v = (t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2) for t in (q, k, v))  # (B, A, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, A, R, hs)
        y = y.transpose(1, 2).flatten(2)  # (B, T or R, H)
        return packing.unpad(y) if packing is not None and rows is None else y  # (N, H) packed

    def can_pack(self, kv: Tensor, p: float) -> bool:
        """The packed kernel runs here: switched on, half precision, no attention dropout, head size a multiple
        of 8 up to 256 (flash attention's). Decided from dtypes and shapes only (no sync, compiles)."""
        hs = self.qkv.out_features // 3 // self.num_heads
        return (self.packed_kernel is not None and kv.dtype in (torch.float16, torch.bfloat16) and p == 0.0
                and hs % 8 == 0 and hs <= 256)

    def attend_packed(self, q: Tensor | None, kv: Tensor, rows: Tensor | None, packing: Packing) -> Tensor:
        """Attention of each sequence's real tokens over its own real tokens, in the packing: (N, H), or
        (B, R, H) for the query rows (R per sequence)."""
        A, T, starts = self.num_heads, packing.length, packing.starts()
        if q is None:
            q, k, v = kv.unflatten(-1, (3, A, -1)).unbind(1)  # 3 x (N, A, hs)
            return self.packed_kernel(q, k, v, starts, starts, T, T).flatten(1)  # (N, H)
        (B, R, H) = q.shape
        k, v = kv.unflatten(-1, (2, A, -1)).unbind(1)  # 2 x (N, A, hs)
        q_starts = torch.arange(0, B * R + 1, R, device=q.device, dtype=torch.int32)  # R queries per sequence
        y = self.packed_kernel(q.reshape(B * R, A, -1), k, v, q_starts, starts, R, T)  # (B * R, A, hs)
        return y.reshape(B, R, H)

    @staticmethod
    def gather_rows(x: Tensor, rows: Tensor, packing: Packing | None) -> Tensor:
        """The hidden states at the (B, R) positions `rows`: (B, R, H). A packed batch of padding only (N = 0, a
        shape: no sync) has no row to point at: its rows are read from the padded layout, zeros."""
        if packing is not None and len(packing.index) > 0:
            return x[packing.rows(rows)]
        if packing is not None:
            x = packing.pad(x)  # (B, T, H) zeros
        return x.gather(1, rows[..., None].expand(-1, -1, x.shape[-1]))

    def output(self, residual: Tensor, y: Tensor) -> Tensor:
        """Post-LN residual: LayerNorm(x + dropout(y W_o^T + b_o))."""
        return self.norm(residual + self.dropout(self.out(y)))


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
        h = ACTIVATIONS[self.activation](self.up(x))  # (B, T, I)
        return self.norm(x + self.dropout(self.down(h)))


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


def run_block(attention: Attention, ffn: FeedForward, x: Tensor, mask: Tensor | None,
              rows: Tensor | None = None, packing: Packing | None = None) -> Tensor:
    return ffn(attention(x, mask, rows, packing))


# ------------------------------------------------------------------------------------------- encoder
class Encoder(nn.Module):
    """Only the unique modules live here (no aliased tensors); forward is a flat loop over the plan."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.plan = sharing_plan(cfg)
        self.attentions = nn.ModuleList(Attention(cfg) for _ in range(1 + max(a for a, _ in self.plan)))
        self.ffns = nn.ModuleList(FeedForward(cfg) for _ in range(1 + max(f for _, f in self.plan)))
        self.run_block = run_block  # replaced from outside, e.g. by enable_activation_checkpointing

    def forward(self, x: Tensor, mask: Tensor | None, rows: Tensor | None = None,
                packing: Packing | None = None, states: list[Tensor] | None = None) -> Tensor:
        """`rows` (B, R): the positions whose output is read; only the last block narrows to them (exact:
        every earlier block's output is needed at every position as keys and values). With `packing`, x is
        (N, H), the real tokens only, until the end. `states`, a list: the input and each block's output are
        appended to it, (B, T, H) each (transformers 5's `hidden_states`: L + 1 with one inner group)."""
        last = len(self.plan) - 1
        if states is not None:
            states.append(packing.pad(x) if packing is not None else x)
        for i, (a, f) in enumerate(self.plan):
            x = self.run_block(self.attentions[a], self.ffns[f], x, mask, rows if i == last else None, packing)
            if states is not None:
                states.append(packing.pad(x) if packing is not None and (rows is None or i < last) else x)
        if packing is not None and rows is None:
            x = packing.pad(x)
        return x  # (B, T, H) (zeros at the padding if packed), or (B, R, H) with rows


def attention_bias(attention_mask: Tensor | None) -> Tensor | None:
    """(B, T) 1 = token, 0 = padding -> (B, 1, 1, T) bool, True = may attend. Decided from the argument
    alone, never from its values (that would be a device sync and a graph break): pass None for no mask."""
    return None if attention_mask is None else attention_mask[:, None, None, :].bool()


def checked_config(cfg: ModelConfig) -> ModelConfig:
    """`cfg`, checked again as it is built into a model: a field assigned after the config was made
    (`cfg.sharing = "atention"`, `cfg.num_groups = 5`) is not checked when assigned, and the model used to take it
    as it was (a mistyped sharing mode built an unshared model, 5 groups of 12 layers uneven groups). Anything but
    a ModelConfig (a preset's name, a dict, transformers' AlbertConfig) is a ConfigError saying what to pass."""
    if not isinstance(cfg, ModelConfig):
        kind = type(cfg).__name__
        how = ("get_preset(name), or Cls.from_pretrained(directory) for a checkpoint" if isinstance(cfg, str) else
               "ModelConfig.from_dict(d)" if isinstance(cfg, dict) else
               "albertlm.model.hf_format.config_from_hf(config.to_dict()) converts transformers' AlbertConfig"
               if type(cfg).__module__.startswith("transformers") else "get_preset(name) or ModelConfig(...)")
        raise ConfigError(f"an albertlm model is built from an albertlm.ModelConfig, got {kind}: {how}")
    cfg.validate()
    return cfg


class AlbertModel(PretrainedMixin, nn.Module):
    """Embeddings -> shared encoder -> (optional) tanh pooler on the first token ([CLS])."""

    base_prefix = ""

    def __init__(self, cfg: ModelConfig, add_pooling_layer: bool = True):
        super().__init__()
        # the model's own copy: the caller's config changed after this (one config object reused for several models,
        # `cfg.num_layers = 6`) left `model.config` saying what the model is not, and `save_pretrained` wrote that
        # (an all-shared model's weights reload into any L without a word)
        self.config = cfg = checked_config(cfg).replace()
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size) if add_pooling_layer else None
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, rows: Tensor | None = None,
                token_index: Tensor | None = None, position_ids: Tensor | None = None,
                inputs_embeds: Tensor | None = None, output_hidden_states: bool = False) -> ModelOutput:
        """`rows` (B, R), first column 0 ([CLS], which the pooler reads): compute the output only there,
        so `last_hidden_state` is (B, R, H). Pretraining reads [CLS] and the masked positions only.
        `token_index` (N,): the flat positions of the real tokens, `attention_mask.flatten().nonzero()`
        computed by the caller (the data loader does); the per-token layers then skip the padding
        (`Packing`), and `last_hidden_state` holds zeros there. `output_hidden_states`: also `hidden_states`,
        transformers' tuple of (B, T, H) tensors, the embeddings' output and each block's: L + 1 of them, or
        L * inner_group_num + 1 as transformers 5 records them (the last with `rows` is (B, R, H), as
        `last_hidden_state`; zeros at the padding with `token_index`). `inputs_embeds` (B, T, E) instead of
        `input_ids`, and `position_ids`, as transformers' (`Embeddings.forward`). Everything after `token_type_ids` is a
        keyword: transformers' 4th positional argument is `position_ids`, which would otherwise be read as `rows`."""
        check_inputs(input_ids, attention_mask, token_type_ids, token_index, position_ids, inputs_embeds,
                     self.config.embedding_size)
        B, T = (input_ids if inputs_embeds is None else inputs_embeds).shape[:2]
        if token_index is not None and attention_mask is None:  # the padded keys must still be hidden
            raise ModelInputError("token_index needs the attention_mask it was computed from")
        if token_index is not None:
            token_index = token_index.long()  # index_copy takes int64 only (a no-op for int64)
        packing = Packing(token_index, B, T, attention_mask) if token_index is not None else None
        try:
            x = self.embeddings(input_ids, token_type_ids, packing, position_ids, inputs_embeds)  # (B, T, H) or (N, H)
        except IndexError:  # an id outside its table (eager CPU; CUDA asserts on the device instead)
            problem = describe_bad_indices(self, (B, T), input_ids, token_type_ids, token_index, position_ids)
            if problem is None:
                raise
            raise ModelInputError(problem) from None
        states: list[Tensor] | None = [] if output_hidden_states else None
        x = self.encoder(x, attention_bias(attention_mask), rows, packing, states)
        pooled = torch.tanh(self.pooler(x[:, 0])) if self.pooler is not None else None  # (B, H)
        out = ModelOutput(last_hidden_state=x, pooler_output=pooled)
        if states is not None:
            out["hidden_states"] = tuple(states)
        return out


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
        h = self.norm(ACTIVATIONS[self.activation](self.dense(h)))  # (..., E)
        return F.linear(h, word_embeddings, self.bias)  # (..., V)


def loss_dtype(logits: Tensor) -> torch.dtype:
    """The dtype a loss is computed in: float32 for float32 and half-precision logits (bf16 / fp16 logits are
    upcast, as autocast does for cross entropy), float64 for a float64 model (transformers' losses stay in its
    dtype; a float32 loss of a float64 model lost half its digits, and `torch.autograd.gradcheck` failed)."""
    return torch.promote_types(logits.dtype, torch.float32)


def weighted_cross_entropy(logits: Tensor, targets: Tensor, weights: Tensor | None) -> tuple[Tensor, Tensor]:
    """Mean cross entropy and accuracy over rows, weighted like google's `masked_lm_weights` (weight 0
    drops a row without changing any shape; targets -100 count as weight 0, whatever weight they are given:
    with a weight they had a loss of 0 and a wrong prediction counted in the mean, diluting both)."""
    loss = F.cross_entropy(logits.to(loss_dtype(logits)), targets, reduction="none")  # 0 where the target is -100
    correct = (logits.argmax(-1) == targets).to(loss.dtype)
    kept = (targets != -100).to(loss.dtype)
    weights = kept if weights is None else weights.to(loss.dtype) * kept
    total = weights.sum().clamp(min=1e-5)
    return (loss * weights).sum() / total, (correct * weights).sum() / total


class AlbertForPreTraining(PretrainedMixin, nn.Module):
    """Masked-LM (only at masked positions) + sentence-order prediction (same head serves NSP).

    The SOP head reads the pooled output without dropout, as google-research's `run_pretraining.py`
    (`get_sentence_order_output`) does; `classifier_dropout` is the fine-tuning heads' (`model/heads.py`).
    transformers' `AlbertSOPHead` applies `classifier_dropout_prob` there in training; in eval mode both agree.
    So a model without hidden/attention dropout (the v2 presets) pretrains without any dropout."""

    base_prefix = "albert."

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.albert = AlbertModel(cfg)
        self.config = cfg = self.albert.config   # the backbone's own checked copy (`AlbertModel.__init__`)
        self.mlm_head = MaskedLMHead(cfg)
        self.sop_head = nn.Linear(cfg.hidden_size, 2)
        self.apply(functools.partial(init_weights, std=cfg.initializer_range))

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                token_type_ids: Tensor | None = None, *, masked_lm_positions: Tensor | None = None,
                masked_lm_ids: Tensor | None = None, masked_lm_weights: Tensor | None = None,
                labels: Tensor | None = None, sentence_order_label: Tensor | None = None,
                token_index: Tensor | None = None, position_ids: Tensor | None = None,
                inputs_embeds: Tensor | None = None, output_hidden_states: bool = False) -> ModelOutput:
        """`output_hidden_states`: also the backbone's `hidden_states` (`AlbertModel.forward`; with
        `masked_lm_positions` the last holds [CLS] and the masked rows only). `position_ids`, `inputs_embeds`:
        as transformers' (`AlbertModel.forward`). Everything after `token_type_ids` is a keyword (transformers' 4th
        positional argument is `position_ids`, which would otherwise be read as `masked_lm_positions`)."""
        if masked_lm_positions is None and (masked_lm_ids is not None or masked_lm_weights is not None):
            raise ModelInputError("masked_lm_ids / masked_lm_weights need the masked_lm_positions they belong to")
        if masked_lm_positions is not None and labels is not None:
            raise ModelInputError("give the MLM targets one way: masked_lm_positions + masked_lm_ids (google's), "
                                  "or labels (B, T) (transformers'), not both")
        tokens, rank = (input_ids, 2) if inputs_embeds is None else (inputs_embeds, 3)  # (B, T) ids, (B, T, E) vectors
        if not torch.jit.is_tracing() and isinstance(tokens, Tensor) and tokens.dim() == rank:  # shapes only
            B, T = tokens.shape[:2]
            check_target("masked_lm_positions", masked_lm_positions, (B, None))
            P = masked_lm_positions.shape[1] if masked_lm_positions is not None else None
            check_target("masked_lm_ids", masked_lm_ids, (B, P))
            check_target("masked_lm_weights", masked_lm_weights, (B, P), integer=False)
            check_target("labels", labels, (B, T))
            check_target("sentence_order_label", sentence_order_label, (B,))
        labels, masked_lm_ids, sentence_order_label = (
            t.long() if t is not None else None for t in (labels, masked_lm_ids, sentence_order_label))  # int32 too
        rows = None
        if masked_lm_positions is not None:  # the heads read [CLS] and the P masked slots: (B, 1 + P)
            masked_lm_positions = masked_lm_positions.long()  # gather takes int64 (a no-op for int64)
            rows = torch.cat([masked_lm_positions.new_zeros(len(masked_lm_positions), 1), masked_lm_positions], 1)
        try:
            base = self.albert(input_ids, attention_mask, token_type_ids, rows=rows, token_index=token_index,
                               position_ids=position_ids, inputs_embeds=inputs_embeds,
                               output_hidden_states=output_hidden_states)
        except (IndexError, RuntimeError):  # a masked position outside the sequence (eager CPU; CUDA asserts)
            problem = describe_bad_positions(masked_lm_positions, tokens.shape[1])
            if problem is None:
                raise
            raise ModelInputError(problem) from None
        out = ModelOutput(sop_logits=self.sop_head(base.pooler_output))  # (B, 2), no dropout (google's)
        hidden = base.last_hidden_state if rows is None else base.last_hidden_state[:, 1:]  # (B, T or P, H)
        self._add_mlm(out, hidden, masked_lm_positions, masked_lm_ids, masked_lm_weights, labels)
        if sentence_order_label is not None:  # -100: no sentence task for that example (MLM-only data)
            out["sop_loss"], out["sop_accuracy"] = weighted_cross_entropy(out.sop_logits, sentence_order_label, None)
        losses = [out[k] for k in ("mlm_loss", "sop_loss") if k in out]
        if losses:
            out["loss"] = sum(losses)
        if base.hidden_states is not None:
            out["hidden_states"] = base.hidden_states
        return out

    def _add_mlm(self, out: ModelOutput, hidden: Tensor, positions, ids, weights, labels) -> None:
        """google's (positions, ids, weights) (B, P): logits for all B * P slots, (B * P, V) in google's
        order, the loss weighted (padding slots have weight 0). transformers' `labels` (B, T), -100 where
        nothing is predicted: logits (M, V) for the M labelled tokens (a data-dependent shape, eager only).
        Neither: (B, T, V) for every position."""
        word = self.albert.embeddings.word.weight
        if positions is not None:
            out["prediction_logits"] = self.mlm_head(hidden.flatten(0, 1), word)  # (B * P, V)
            targets, weights = ids, weights
        elif labels is not None:
            keep = labels != -100
            out["prediction_logits"] = self.mlm_head(hidden[keep], word)  # (M, V)
            targets = labels[keep]
        else:
            out["prediction_logits"] = self.mlm_head(hidden, word)  # (B, T, V)
            return
        if targets is not None:
            w = weights.flatten().float() if weights is not None else None
            out["mlm_loss"], out["mlm_accuracy"] = weighted_cross_entropy(out.prediction_logits, targets.flatten(), w)


def packed_attention_supported(device: torch.device | str) -> bool:
    """Whether `varlen_attn` runs on this device: a torch that has it, and a CUDA GPU with flash attention
    (compute capability 8.0 or later: A100, H100, RTX 30xx and later)."""
    device = torch.device(device)
    if varlen_attn is None or device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 0)


def enable_packed_attention(model: nn.Module, kernel: Callable | None = None) -> nn.Module:
    """Attention over the packed real tokens (`Attention.attend_packed`) with `kernel` (default `varlen_attn`) in every
    attention module; used when the caller skips the padding (`token_index`). Applied from outside, like
    activation checkpointing; `kernel=None` with no varlen_attn in this torch leaves the model as it was."""
    kernel = kernel if kernel is not None else varlen_attn
    for module in model.modules():
        if isinstance(module, Attention):
            module.packed_kernel = kernel
    return model


def init_truncated_normal(model: nn.Module, std: float | None = None) -> nn.Module:
    """google-research's initialisation, in place: every `nn.Linear` and `nn.Embedding` weight drawn from a normal of
    standard deviation `std` (default: the model's `config.initializer_range`, 0.02 in every preset) truncated at two
    standard deviations (`tf.truncated_normal_initializer`, which redraws what falls outside: samples in [-2 std,
    2 std], their own spread about 0.88 std), biases and the MLM output bias zero, LayerNorms 1 and 0. The model
    classes initialise as transformers does (`init_weights`: the same, with a plain normal); call this right after
    building a model to start from google's distribution instead. Shared modules are drawn once."""
    if std is None:
        std = model.config.initializer_range
    if not (isinstance(std, (int, float)) and not isinstance(std, bool) and 0 < std < float("inf")):
        raise ConfigError(f"std={std!r}: must be a positive finite number")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
            if isinstance(module, (nn.Linear, nn.LayerNorm, MaskedLMHead)) and getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
    return model


def enable_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Recompute each block's activations in backward (saves memory, costs one more forward).
    Works on any model holding an `Encoder`; applied from outside, the model code does not change."""
    for module in model.modules():
        if isinstance(module, Encoder):
            module.run_block = functools.partial(checkpoint, run_block, use_reentrant=False)
    return model
