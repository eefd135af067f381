"""Model and config audit, session 27: sharing layouts against transformers with padding anywhere, dropout settings,
the CPU fast paths under torch.compile and an emulated AVX2 probe, the paper column of `albertlm params`, and
google's truncated-normal initialiser."""
from __future__ import annotations

import json
import locale
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ConfigError, ModelConfig
from albertlm.config.presets import get_preset, paper_params
from albertlm.model import fast_paths, fused
from albertlm.model.albert import AlbertForPreTraining, AlbertModel

ROOT = Path(__file__).resolve().parents[1]


def small(**kw) -> ModelConfig:
    """H = 36 (head size 9), I = 37, E != H: odd sizes catch transposed shapes."""
    base = dict(vocab_size=99, embedding_size=16, hidden_size=36, num_layers=4, num_heads=4, ffn_size=37,
                max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)
    return ModelConfig(**{**base, **kw})


def padded_batch(B: int = 5, T: int = 9, V: int = 99):
    """Padding at the end, at the start and in the middle, a row of [CLS] alone, and a row with none."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, V, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :3] = 0      # left padding
    mask[2, 4:6] = 0     # a hole
    mask[3, -2:] = 0     # right padding
    mask[4, 1:] = 0      # one real token
    types = (torch.arange(T) >= 4).long().expand(B, T).clone()
    return ids, mask, types


# ------------------------------------------------------------------------ sharing layouts against transformers
@pytest.mark.parametrize("layout", [
    dict(num_hidden_layers=12, num_hidden_groups=3, inner_group_num=2),   # google's L in N groups of K
    dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=3),
    dict(num_hidden_layers=3, num_hidden_groups=3, inner_group_num=2),    # nothing shared (imported as `none`)
])
def test_grouped_layouts_match_transformers_with_padding_anywhere(tmp_path, one_thread, layout):
    """Every real token, the pooled output and every per-block hidden state equal transformers' AlbertModel on
    random weights, with padding on the left, in the middle and on the right; so do the skip-padding (token_index)
    outputs; an all-padding row stays finite (both give the mean over all keys there)."""
    transformers = pytest.importorskip("transformers")
    from test_hf_parity import hf_config, hf_model

    hf = hf_model("AlbertModel", hf_config(**layout))
    hf.save_pretrained(tmp_path)
    ours = AlbertModel.from_pretrained(tmp_path).eval()
    K = layout["inner_group_num"]
    assert len(ours.encoder.plan) == layout["num_hidden_layers"] * K
    ids, mask, types = padded_batch()
    real = mask.bool()
    token_index = mask.flatten().nonzero().squeeze(1)
    with torch.no_grad():
        theirs = hf(ids, mask, types, output_hidden_states=True)
        got = ours(ids, mask, types, output_hidden_states=True)
        packed = ours(ids, mask, types, token_index=token_index)
    close = dict(atol=1e-5, rtol=0)
    torch.testing.assert_close(got.last_hidden_state[real], theirs.last_hidden_state[real], **close)
    torch.testing.assert_close(packed.last_hidden_state[real], theirs.last_hidden_state[real], **close)
    torch.testing.assert_close(got.pooler_output, theirs.pooler_output, **close)
    assert len(got.hidden_states) == len(theirs.hidden_states) == layout["num_hidden_layers"] * K + 1
    for mine, their in zip(got.hidden_states, theirs.hidden_states):
        torch.testing.assert_close(mine[real], their[real], **close)
    mask[4] = 0   # a row of padding only
    with torch.no_grad():
        theirs, got = hf(ids, mask, types), ours(ids, mask, types)
    assert torch.isfinite(got.last_hidden_state).all()
    torch.testing.assert_close(got.last_hidden_state, theirs.last_hidden_state, **close)


def test_attention_and_hidden_dropout_act_where_their_names_say_and_v2_has_none(one_thread):
    """attention_dropout touches the attention probabilities only (the embeddings' output is untouched in training);
    hidden_dropout the embeddings and sublayer outputs; a -v2 preset pretrains without any dropout (SOP head
    included), so training mode gives the eval outputs."""
    ids, mask, types = padded_batch()
    for hidden, attention in ((0.0, 0.5), (0.5, 0.0)):
        model = AlbertModel(small(hidden_dropout=hidden, attention_dropout=attention))
        torch.manual_seed(0)
        trained = model.train()(ids, mask, types, output_hidden_states=True)
        evaluated = model.eval()(ids, mask, types, output_hidden_states=True)
        assert torch.equal(trained.hidden_states[0], evaluated.hidden_states[0]) == (hidden == 0.0)
        assert not torch.allclose(trained.last_hidden_state, evaluated.last_hidden_state)
    sizes = dict(vocab_size=99, hidden_size=36, num_heads=4, ffn_size=37, num_layers=2)
    v1, v2 = get_preset("albert-base-v1", **sizes), get_preset("albert-base-v2", **sizes)
    assert (v1.hidden_dropout, v1.attention_dropout, v2.hidden_dropout, v2.attention_dropout) == (0.1, 0.1, 0.0, 0.0)
    model = AlbertForPreTraining(v2)
    torch.manual_seed(1)
    trained = model.train()(ids, mask, types)
    evaluated = model.eval()(ids, mask, types)
    for key in ("prediction_logits", "sop_logits"):
        torch.testing.assert_close(trained[key], evaluated[key], atol=0, rtol=0)


# ------------------------------------------------------------------------------------------- CPU fast paths
@pytest.mark.skipif(not fused.AVAILABLE, reason="this torch has no oneDNN fused linear")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_model_with_the_fast_paths_compiles_to_one_graph(one_thread, dtype):
    """`torch.compile(fullgraph=True)` of a model the fast paths were swapped into failed (the private oneDNN ops
    have no fake-tensor kernels; the cast scope's context variable broke the bf16 graph), and without fullgraph it
    recompiled once per shared weight. Traced, the swapped model runs the plain ops: the plain model's loss and
    gradients, one graph."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = small(sharing="ffn", num_groups=2, inner_group_num=2)
    model, plain = AlbertForPreTraining(cfg), AlbertForPreTraining(cfg)
    plain.load_state_dict(model.state_dict())
    fast_paths.swap_in(model, dtype)
    ids, mask, types = padded_batch()
    labels = torch.where(mask.bool(), ids, -100)
    labels[:, 0] = -100
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=types,
                 masked_lm_positions=torch.tensor([[1, 2], [3, 4], [1, 7], [2, 5], [0, 0]]),
                 masked_lm_ids=ids[:, :2], sentence_order_label=torch.tensor([0, 1, 1, 0, 1]))
    backend = "aot_eager" if dtype == torch.float32 else "eager"
    if backend == "aot_eager" and not sys.flags.utf8_mode and locale.getpreferredencoding(False).lower() not in (
            "utf-8", "utf8"):      # torch._inductor.utils.load_template opens its UTF-8 templates in the locale's
        pytest.skip("aot_eager reads torch's templates in the locale's encoding (UnicodeDecodeError under ASCII)")
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out, expected = compiled(**batch), plain(**batch)
        out.loss.backward()
        expected.loss.backward()
    torch.testing.assert_close(out.loss, expected.loss, atol=0, rtol=0)
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)
    assert fast_paths.fast_path_dtype(model) == dtype   # still swapped: eager calls take the fused ops again


def test_an_emulated_avx2_machine_gets_the_plain_model_and_a_forced_swap_matches_it():
    """No monkeypatch: torch and oneDNN held to AVX2 (docs/model.md's emulation of an AVX2-only EPYC). The probe picks
    the plain model for fp32 and bf16, and a forced fp32 / bf16 swap still gives the plain model's logits (oneDNN's
    AVX2 fp32 GEMM; bf16 falls back to the plain ops)."""
    code = """
import torch
from albertlm.config import ModelConfig
from albertlm.model import fast_paths, fused
from albertlm.model.albert import AlbertForPreTraining
print(fast_paths.cpu_capability(), fused.BF16, fast_paths.choose_fast_path('cpu', 'fp32'),
      fast_paths.choose_fast_path('cpu', 'bf16'))
torch.manual_seed(0)
model = AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=36, num_layers=3, num_heads=4,
                                         ffn_size=37, max_position_embeddings=64)).eval()
ids = torch.randint(5, 99, (3, 11)); mask = torch.ones_like(ids); mask[1, 7:] = 0
for dtype in (torch.float32, torch.bfloat16):
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        plain = model(ids, mask).prediction_logits.float()
        fast_paths.swap_in(model, dtype)
        fast = model(ids, mask).prediction_logits.float()
        fast_paths.remove_fast_paths(model)
    print(float((plain - fast).abs().max()))
"""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
           "MKL_ENABLE_INSTRUCTIONS": "AVX2", "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe, fp32, bf16 = proc.stdout.splitlines()
    assert probe.split() in (["AVX2", "False", "None", "None"], ["DEFAULT", "False", "None", "None"]), probe
    assert float(fp32) < 1e-5 and float(bf16) == 0.0


# ------------------------------------------------------------------------------------------ params / presets
def test_params_keeps_the_papers_row_for_overrides_that_change_no_count(capsys):
    """`albertlm params --preset albert-base-v1 --hidden-dropout 0` (v1 without dropout: the count is the same) read
    `paper -`; so did a preset's own value given again and --num-groups under --sharing none, which ignores it."""
    cases = [(["--preset", "albert-base-v1", "--hidden-dropout", "0", "--attention-dropout", "0"], 12),
             (["--preset", "albert-large", "--activation", "gelu", "--initializer-range", "0.01"], 18),
             (["--preset", "albert-base", "--sharing", "none", "--num-groups", "12"], 89),
             (["--preset", "albert-base", "--sharing", "all", "--embedding-size", "768"], 31),
             (["--preset", "bert-base", "--embedding-size", "768", "--num-labels", "3"], 108),
             (["--preset", "albert-base", "--num-groups", "3"], None),
             (["--preset", "albert-base", "--sharing", "none", "--num-groups", "3", "--num-layers", "6"], None)]
    for argv, paper in cases:
        assert main(["params", *argv, "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert row["paper"] == paper, (argv, row)
    assert paper_params("albert-base", {"hidden_dropout": 0.0}) == 12
    assert paper_params("no-such-preset", {"hidden_dropout": 0.0}) is None


# --------------------------------------------------------------------------------------- google's initialiser
def test_init_truncated_normal_draws_googles_distribution():
    """google-research draws every dense and embedding weight from tf.truncated_normal_initializer(0.02): within two
    standard deviations, their spread ~0.88 x 0.02; biases 0, LayerNorms 1 / 0; shared modules once."""
    from albertlm.model.albert import init_truncated_normal

    torch.manual_seed(0)
    model = AlbertForPreTraining(get_preset("albert-tiny", vocab_size=2000, initializer_range=0.02))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(0.5)
    assert init_truncated_normal(model) is model
    weights = {name: p for name, p in model.named_parameters() if p.dim() == 2}
    drawn = torch.cat([p.flatten() for p in weights.values()])
    assert drawn.abs().max() <= 0.04 and abs(drawn.mean()) < 1e-3
    assert 0.0170 < drawn.std() < 0.0182   # 0.02 x 0.8796 for the cut at 2 std (0.02 for the plain normal)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            expected = 1.0 if name.endswith("norm.weight") else 0.0
            assert torch.all(p == expected), name
    out = model(torch.randint(5, 2000, (2, 7)), sentence_order_label=torch.tensor([0, 1]))
    assert torch.isfinite(out.sop_logits).all()
    init_truncated_normal(model, std=0.1)
    assert 0.04 < model.albert.embeddings.word.weight.abs().max() <= 0.2
    with pytest.raises(ConfigError, match="std"):
        init_truncated_normal(model, std=0.0)


def test_a_packed_batch_of_padding_only_with_masked_positions_runs_as_the_padded_one(one_thread):
    """token_index of a batch with no real token (N = 0) and masked_lm_positions was an IndexError traceback from
    the last block's row gather (padded positions map to row 0 of the packing, which N = 0 lacks); the padded model
    runs such a batch. Now both give the same shapes, a finite output and the same (zero-weighted) loss."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(small())
    ids, mask, types = padded_batch()
    mask.zero_()
    token_index = mask.flatten().nonzero().squeeze(1)
    batch = dict(masked_lm_positions=torch.tensor([[1, 2]] * 5), masked_lm_ids=ids[:, :2],
                 masked_lm_weights=torch.zeros(5, 2), sentence_order_label=torch.full((5,), -100))
    packed = model(ids, mask, types, token_index=token_index, **batch)
    padded = model(ids, mask, types, **batch)
    assert packed.prediction_logits.shape == padded.prediction_logits.shape == (10, 99)
    assert torch.isfinite(packed.prediction_logits).all() and torch.isfinite(packed.sop_logits).all()
    assert packed.loss.item() == padded.loss.item() == 0.0
    packed.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
