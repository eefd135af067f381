"""What the model's public `forward`s check about their inputs: types, shapes and dtypes, never values (no
host-device sync), so a wrong call is named by argument instead of failing deep inside a matmul or a loss.
Kept out of `albert.py`, which reads like the paper. Every check is skipped while tracing (`torch.jit.trace`,
the ONNX exporter), which would record it as a constant."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from albertlm.errors import UserError


class ModelInputError(UserError, ValueError):
    """An input the model cannot take (a wrong type, shape or dtype; on the CPU an id outside its embedding table),
    named by argument: a UserError (one line from the command line) and a ValueError (what Python callers catch)."""


def check_inputs(input_ids: Tensor | None, attention_mask: Tensor | None, token_type_ids: Tensor | None,
                 token_index: Tensor | None, position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                 embedding_size: int | None = None) -> None:
    """The types, shapes and dtypes of `AlbertModel`'s inputs, never their values (no device sync). Skipped while
    tracing (`torch.jit.trace`, the ONNX exporter), which would record each check as a constant; but for which
    arguments were given: exactly one of `input_ids` and `inputs_embeds` (B, T, E), as transformers asks."""
    check_one_of(input_ids, inputs_embeds)
    if torch.jit.is_tracing():
        return
    if inputs_embeds is not None:
        check_embeds(inputs_embeds, embedding_size)
        name, ids = "inputs_embeds", inputs_embeds[..., 0]   # the (B, T) the other inputs must match (a view)
        shown = tuple(inputs_embeds.shape)
    else:
        name, ids = "input_ids", input_ids
        if not isinstance(ids, Tensor):
            raise ModelInputError(f"input_ids must be a torch.Tensor of token ids, shape (batch, tokens); got "
                                  f"{type(ids).__name__}")
        if ids.dim() != 2:
            hint = ": one sequence is input_ids[None]" if ids.dim() == 1 else ""
            raise ModelInputError(f"input_ids must have shape (batch, tokens), got {tuple(ids.shape)}{hint}")
        shown = tuple(ids.shape)
    if ids.shape[1] == 0:
        raise ModelInputError(f"{name} has no tokens (shape {shown}); every sequence needs at least one ([CLS], "
                              "which the pooler reads)")
    for arg, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                   ("token_index", token_index), ("position_ids", position_ids)):
        if t is not None and not isinstance(t, Tensor):
            raise ModelInputError(f"{arg} must be a torch.Tensor, got {type(t).__name__}")
    for arg, t in (("input_ids", input_ids), ("token_type_ids", token_type_ids), ("position_ids", position_ids)):
        if t is not None and t.dtype not in (torch.int64, torch.int32):
            raise ModelInputError(f"{arg} must hold integer ids (torch.int64 or torch.int32), got {t.dtype}")
    for arg, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if t is not None and t.shape != ids.shape:
            raise ModelInputError(f"{arg} has shape {tuple(t.shape)}, {name} {shown}: they must match (one value "
                                  "per token)")
    B, T = ids.shape
    if position_ids is not None and (position_ids.dim() != 2 or position_ids.shape[1] != T
                                     or position_ids.shape[0] not in (1, B)):
        raise ModelInputError(f"position_ids has shape {tuple(position_ids.shape)}, {name} {shown}: it must be "
                              f"({B}, {T}), or (1, {T}) for the same positions in every sequence")
    if token_index is not None and (token_index.dim() != 1 or token_index.dtype not in (torch.int64, torch.int32)):
        raise ModelInputError(f"token_index must be 1-D integer positions (N,), attention_mask.flatten().nonzero()"
                              f".squeeze(1); got shape {tuple(token_index.shape)}, {token_index.dtype}")


def check_one_of(input_ids: Tensor | None, inputs_embeds: Tensor | None) -> None:
    """Exactly one of `input_ids` and `inputs_embeds` was given (transformers' ValueError; ours names both)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ModelInputError("give input_ids or inputs_embeds, not both (as in transformers)" if input_ids is not None
                              else "give input_ids (or inputs_embeds): the model got neither")


def check_embeds(inputs_embeds: Tensor, embedding_size: int | None, shape: str = "(batch, tokens, E)") -> None:
    """`inputs_embeds`, which stand in for the word embeddings: a floating-point tensor of `shape`, E the model's
    `embedding_size` (the factorized E, not the hidden size H)."""
    if not isinstance(inputs_embeds, Tensor):
        raise ModelInputError(f"inputs_embeds must be a torch.Tensor {shape}, got {type(inputs_embeds).__name__}")
    if (inputs_embeds.dim() != shape.count(",") + 1 or not inputs_embeds.is_floating_point()
            or embedding_size is not None and inputs_embeds.shape[-1] != embedding_size):
        raise ModelInputError(f"inputs_embeds must be floating-point vectors {shape}, E = the model's embedding_size"
                              f"={embedding_size} (what model.embeddings.word gives); got shape "
                              f"{tuple(inputs_embeds.shape)}, {inputs_embeds.dtype}")


def describe_bad_indices(model: nn.Module, shape: tuple[int, int], input_ids: Tensor | None,
                         token_type_ids: Tensor | None, token_index: Tensor | None,
                         position_ids: Tensor | None = None) -> str | None:
    """After an IndexError in the embeddings of a (B, T) batch (`shape`): which input holds an index outside its
    table, and the index (read from the tensors only on this failure path, so a good batch pays nothing); None if no
    input does."""
    B, T = shape
    tables = (("input_ids", input_ids, model.embeddings.word.num_embeddings, "vocab_size"),
              ("token_type_ids", token_type_ids, model.embeddings.token_type.num_embeddings, "type_vocab_size"),
              ("position_ids", position_ids, model.embeddings.position.num_embeddings, "max_position_embeddings"),
              ("token_index", token_index, B * T, None))
    for name, t, size, field in tables:
        if t is None or t.numel() == 0:
            continue
        low, high = int(t.min()), int(t.max())
        if low >= 0 and high < size:
            continue
        bad = low if low < 0 else high
        if field is None:
            return (f"token_index holds position {bad}, outside the batch's {B} x {T} = {size} positions (the flat "
                    "positions b * T + t of the real tokens)")
        hint = ("" if name != "input_ids" else ": -100 marks an ignored label, not a token" if bad == -100 else
                ": a tokenizer with more pieces than the model's vocabulary?" if bad >= size else "")
        return f"{name} holds {bad}, outside this model's {field}={size} (ids 0 to {size - 1}){hint}"
    return None


def describe_bad_positions(positions: Tensor | None, length: int) -> str | None:
    """After an index error in the encoder: the `masked_lm_positions` value outside the sequences' `length`
    positions, or None if there is none (read from the tensor only on this failure path)."""
    if positions is None or positions.numel() == 0:
        return None
    low, high = int(positions.min()), int(positions.max())
    if low >= 0 and high < length:
        return None
    bad = low if low < 0 else high
    return (f"masked_lm_positions holds {bad}, outside the sequences' {length} positions (0 to {length - 1}; "
            "padding slots point at 0, [CLS], with weight 0)")


def check_target(name: str, t: Tensor | None, shape: tuple[int | None, ...], integer: bool = True) -> None:
    """A target tensor of a forward has `shape` (None: any size there) and, if `integer`, an integer dtype; else a
    ModelInputError naming it (a wrong shape broadcast or failed deep inside the loss). Skipped while tracing."""
    if t is None or torch.jit.is_tracing():
        return
    if not isinstance(t, Tensor):
        raise ModelInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        want = ", ".join("P" if w is None else str(w) for w in shape) + ("," if len(shape) == 1 else "")
        raise ModelInputError(f"{name} has shape {tuple(t.shape)}, expected ({want}) for this batch")
    if integer and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
        raise ModelInputError(f"{name} must hold integer class ids, got {t.dtype}")
