"""Benchmark scripts audit 28: attention_speed's FLOP count against torch's FLOP counter, what transformers' side of
each ratio runs (attention implementation, dropout, dtype, train/eval mode, inputs), and the header that says so
(no timing asserted: the timed parts are stubbed or only their arguments are looked at)."""
from __future__ import annotations

import sys

import pytest
import torch

from test_bench_audit25 import _sys_path_back, ms  # noqa: F401  (fixtures: sys.path put back; model_speed)
from test_benchmarks_audit14 import load   # a benchmark script as a module


@pytest.fixture(scope="module")
def tiny():
    from albertlm.config.presets import get_preset

    return get_preset("albert-tiny")


def counted_attention(lengths: list[int], heads: int, head_size: int) -> int:
    """torch's FLOP counter over plain attention math (QK^T, softmax, weighted sum), forward + backward, each row
    over its own real tokens: the useful work, with nothing recomputed."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    g = torch.Generator().manual_seed(0)
    with counter:
        for n in lengths:
            q, k, v = (torch.randn(1, heads, n, head_size, generator=g).requires_grad_() for _ in range(3))
            y = torch.softmax(q @ k.transpose(-1, -2) / head_size ** 0.5, -1) @ v
            y.backward(torch.ones_like(y))
    return counter.get_total_flops()


def test_attention_speed_flops_are_the_useful_work_model_flops_counts():
    """attention_speed.py counted forward + backward as 3.5x the forward (flash-attn's convention: its backward
    recomputes QK^T), so its TFLOP/s were 1.17x those of the same work counted as model_flops counts it (x3,
    nothing recomputed counted). Now `attention_flops` equals torch's FLOP counter on plain attention math over
    each row's real tokens, forward + backward."""
    pytest.importorskip("torch.nn.attention")
    attention = load("attention_speed")
    lengths, heads, head_size = [7, 3, 5], 2, 8
    assert attention.attention_flops(torch.tensor(lengths), heads, head_size) == \
        counted_attention(lengths, heads, head_size)


def test_attention_speed_flops_match_model_flops_attention_term(ms):
    """The same count as model_speed's: one block's attention over rows of these lengths, training (x3)."""
    from albertlm.config.presets import get_preset

    attention = load("attention_speed")
    cfg = get_preset("albert-tiny")
    heads, head_size = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    blocks = cfg.num_layers * cfg.inner_group_num
    B, T, P = 2, 8, 1
    # the same tokens (8), attended differently: the difference is attention's alone
    model_term = (ms.model_flops(cfg, B, T, P, True, lengths=[7, 1]) -
                  ms.model_flops(cfg, B, T, P, True, lengths=[4, 4])) / blocks
    kernel_term = (attention.attention_flops(torch.tensor([7, 1]), heads, head_size) -
                   attention.attention_flops(torch.tensor([4, 4]), heads, head_size))
    assert kernel_term == model_term


def test_transformers_side_runs_sdpa_with_our_dropout_and_float32(ms, tiny):
    """What each ratio's reference runs: transformers' attention named (SDPA, as ours), not left to its version's
    default; the preset's dropout; float32 weights equal to ours. (With transformers 5.24 the default was already
    SDPA: this pins it and the header says it.)"""
    pytest.importorskip("transformers")
    ours, theirs = ms.build_models(tiny)
    assert ms.HF_ATTENTION == "sdpa" and theirs.config._attn_implementation == "sdpa"
    assert (theirs.config.hidden_dropout_prob, theirs.config.attention_probs_dropout_prob) == \
        (tiny.hidden_dropout, tiny.attention_dropout)
    assert {p.dtype for p in theirs.parameters()} == {torch.float32} == {p.dtype for p in ours.parameters()}
    assert torch.equal(theirs.albert.embeddings.word_embeddings.weight, ours.albert.embeddings.word.weight)

    finetune_speed = load("finetune_speed")
    from albertlm.config.presets import get_preset

    cfg = get_preset("albert-tiny", num_labels=2)
    hf = finetune_speed.hf_model(cfg)
    assert hf.config._attn_implementation == "sdpa"
    assert (hf.config.hidden_dropout_prob, hf.config.attention_probs_dropout_prob, hf.config.classifier_dropout_prob,
            hf.config.hidden_act) == (cfg.hidden_dropout, cfg.attention_dropout, cfg.classifier_dropout, cfg.activation)


@pytest.mark.parametrize("train", [False, True])
def test_run_row_gives_every_variant_the_same_batch_in_the_rows_mode(ms, tiny, train, monkeypatch):
    """Each variant's model is in train mode for a training row and eval mode for an inference row, and the two
    sides get the same tensors (ours the masked positions and targets, transformers the labels built from them)
    in the row's precision. A check that found nothing wrong (passes before too)."""
    pytest.importorskip("transformers")
    seen = {}

    def step_fn(model, params, kwargs, train_, precision, device):
        seen[len(seen)] = (model.training, train_, precision, kwargs)
        return lambda: None

    monkeypatch.setattr(ms, "step_fn", step_fn)
    ours, theirs = ms.build_models(tiny)
    ms.run_row(tiny, ours, theirs, ["ours", "hf", "ours-padded"], 2, 16, "bf16", train, 1, torch.device("cpu"),
               real=0.75)
    (o_mode, o_train, o_dtype, o), (h_mode, h_train, h_dtype, h), (p_mode, *_rest, p) = seen[0], seen[1], seen[2]
    assert o_mode == h_mode == p_mode == o_train == h_train == train and o_dtype == h_dtype == "bf16"
    for key in ("input_ids", "token_type_ids", "sentence_order_label"):
        assert torch.equal(o[key], h[key]) and torch.equal(o[key], p[key])
    assert torch.equal(h["attention_mask"], p["attention_mask"]) and "token_index" in o
    labels = torch.full_like(h["labels"], -100).scatter_(1, o["masked_lm_positions"], o["masked_lm_ids"])
    assert torch.equal(h["labels"], labels)


def test_model_speed_header_names_transformers_attention(ms, monkeypatch, capsys):
    """The header says which attention transformers runs, beside the fast paths ours runs."""
    monkeypatch.setattr(ms, "build_models", lambda cfg: (None, None))
    monkeypatch.setattr(ms, "run_row", lambda *a, **k: pytest.fail("timed"))
    monkeypatch.setattr(sys, "argv", ["model_speed.py", "--preset", "albert-tiny", "--rows", "2x16", "--modes", "infer",
                                      "--dtypes", "fp32", "--infer-reps", "1"])
    monkeypatch.setattr(ms, "mfu_rate", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):     # stopped at the first row's matmul probe, after the header
        ms.main()
    header = capsys.readouterr().out.splitlines()[0]
    assert "transformers' attention: sdpa" in header, header
