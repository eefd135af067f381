"""Audit 23: bf16 on CPU, on a CPU that has bf16 instructions (AVX-512 BF16) and on one that has not.

oneDNN's probe (`torch.ops.mkldnn._is_mkldnn_bf16_supported()`) says yes on every AVX-512 CPU, with bf16
instructions or without: on Skylake to Ice Lake it emulates bf16 GEMMs with fp32 FMAs (2.4x slower than fp32 at
albert-base sizes, measured here under ONEDNN_MAX_CPU_ISA=AVX512_CORE). `--precision bf16` there gave no warning
and took the fused bf16 path, against docs/model.md's table ("AVX-512 without bf16 instructions: plain +
warning"). The probe now also asks the CPU for bf16 instructions (the first two tests failed before).

The rest checks what had not run on real bf16 hardware for six sessions: the fused bf16 modules against the plain
ones (odd shapes, padding skipped, dropout, train / eval / no_grad / inference_mode, every task head) and against
transformers under autocast; bf16 pretraining against fp32, exact resume with accumulation and activation
checkpointing; a bf16 fine-tune saving plain fp32 weights that transformers loads. Tests that need oneDNN's bf16
GEMMs skip where the probe refuses them (as tests/test_fast_paths.py does); the others run on any CPU (on AVX2
bf16 takes the plain, emulated ops)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from albertlm.config import ModelConfig
from albertlm.model import fast_paths, fused, heads
from albertlm.model.albert import AlbertForPreTraining, AlbertModel, enable_activation_checkpointing
from albertlm.training import checkpoint as ckpt
from albertlm.training import precision
from albertlm.training.distributed import DistInfo
from conftest import save_tiny_pretrained
from test_fast_paths import batch
from test_train import _same_weights, train
from train_fixtures import StubTokenizer, finetune_config, synthetic_task, tiny_run

ROOT = Path(__file__).resolve().parents[1]
needs_bf16_gemm = pytest.mark.skipif(not fused.BF16, reason="this CPU/torch build has no oneDNN bf16 GEMM in "
                                                            "hardware (AVX-512 BF16 or AMX needed)")
X86_AVX512 = {"architecture": "x86_64", "avx2": True, "avx512_f": True, "avx512_bf16": False, "amx_bf16": False,
              "amx_tile": False, "avx_ne_convert": False, "avx10_1": False}


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`) for every test here."""


def pretend(monkeypatch, onednn: bool, **caps) -> None:
    """oneDNN's bf16 probe says `onednn`; torch's cpuinfo reports an AVX-512 x86 CPU with `caps` on top."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn, raising=False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {**X86_AVX512, **caps}, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


# ------------------------------------------------------------------------------------ the probe and warning
def test_avx512_without_bf16_instructions_is_emulated_bf16_with_a_warning(monkeypatch, capsys):
    """Skylake / Cascade Lake / Ice Lake: oneDNN builds bf16 GEMMs (emulated); bf16 there is not in hardware, so
    no fused bf16 path and the emulation warning (it printed nothing)."""
    pretend(monkeypatch, onednn=True)
    assert not fused.bf16_supported() and not precision.cpu_has_bf16()
    monkeypatch.setattr(fused, "BF16", fused.bf16_supported())      # what the module computes at import there
    model = AlbertForPreTraining(tiny_run().model)
    precision.prepare_model(model, precision="bf16", device=torch.device("cpu"))
    assert fast_paths.fast_path_dtype(model) in (None, torch.float32)  # never bf16 (fp32: not asked here)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no bf16 instructions" in err[0] and "emulated" in err[0]
    # the CPUs that have them, and the limits of oneDNN's own probe
    for caps in ({"avx512_bf16": True}, {"amx_bf16": True}, {"avx_ne_convert": True}):
        pretend(monkeypatch, onednn=True, **caps)
        assert fused.bf16_supported() and precision.cpu_has_bf16(), caps
        pretend(monkeypatch, onednn=False, **caps)    # AVX2-only or no oneDNN: the fused linear cannot be built
        assert not fused.bf16_supported(), caps
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"architecture": "aarch64", "bf16": True})
    assert not fused.bf16_supported()                 # ARM: oneDNN's probe asks the CPU itself, and decides
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert fused.bf16_supported()
    # oneDNN held below bf16 instructions on a CPU that has them: emulated too, and the warning says why
    pretend(monkeypatch, onednn=True, avx512_bf16=True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_vnni")
    assert not fused.bf16_supported()
    precision.warn_emulated_bf16("bf16", "cpu")
    assert "ONEDNN_MAX_CPU_ISA=avx512_core_vnni keeps oneDNN from bf16 instructions" in capsys.readouterr().err


def test_the_real_probe_under_onednn_held_to_avx512_core():
    """No monkeypatch: oneDNN held to AVX-512 without bf16 (what a Skylake-class CPU gives it). Before, the probe
    said bf16 was supported on this AVX-512 BF16 machine and `--precision bf16` gave no word; on an AVX2-only CPU
    oneDNN refuses bf16 either way."""
    code = ("import torch; from albertlm.model import fused, fast_paths; from albertlm.training import precision; "
            "print(fused.BF16, fast_paths.choose_fast_path('cpu', 'bf16')); "
            "precision.warn_emulated_bf16('bf16', 'cpu')")
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "None"]
    assert "emulated" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------- fused bf16 against the plain model
def odd_config(**kw) -> ModelConfig:
    """H = 36 (not a multiple of 16), head size 9, I = 37, E != H (the E -> H projection is fused too)."""
    base = dict(vocab_size=99, embedding_size=16, hidden_size=36, num_layers=3, num_heads=4, ffn_size=37,
                max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)
    return ModelConfig(**{**base, **kw})


def count_fused(monkeypatch) -> list:
    """Every weight the fused kernels cast to bf16 (only the fused path casts through `fused._cast`)."""
    calls: list = []
    real = fused._cast
    monkeypatch.setattr(fused, "_cast", lambda t, d: calls.append(d) or real(t, d))
    return calls


def bf16(mode: str):
    grad = {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode()}.get(mode, torch.enable_grad())
    return grad, torch.autocast("cpu", dtype=torch.bfloat16)


def assert_grads_close(ours: dict, reference: dict, tol: float, skip: tuple[str, ...] = ()) -> None:
    """fp32 gradients, all together and each tensor, within `tol` of the reference (relative L2). `skip`: tensors
    whose gradient is a sum of terms that nearly cancel (the pooler's and SOP head's biases), where bf16 rounding
    leaves a large relative error in a tiny number."""
    assert ours.keys() == reference.keys()
    names = [n for n, g in reference.items() if g is not None]
    assert all(ours[n].dtype == torch.float32 for n in names)
    flat = [torch.cat([d[n].flatten() for n in names]) for d in (ours, reference)]
    assert (flat[0] - flat[1]).norm() <= tol * flat[1].norm()
    for name in names:
        if not name.endswith(skip):
            assert (ours[name] - reference[name]).norm() <= tol * reference[name].norm(), name


@needs_bf16_gemm
@pytest.mark.parametrize("B,T,skip,dropout,mode", [
    (1, 7, False, 0.0, "train"),            # batch 1, T not a multiple of 8
    (3, 13, True, 0.0, "train"),            # padding skipped: (N, H) rows into the fused linears
    (3, 13, True, 0.1, "train"),            # dropout: the residual add unfused, the same masks as plain
    (3, 13, False, 0.1, "eval"),            # eval mode with grad: no dropout, the residual fused with autograd
    (3, 13, True, 0.0, "no_grad"),          # inference: the GELU inside the GEMM
    (1, 13, False, 0.1, "inference_mode"),
])
def test_fused_bf16_matches_the_plain_model(monkeypatch, B, T, skip, dropout, mode):
    torch.manual_seed(0)
    plain = AlbertModel(odd_config(hidden_dropout=dropout, attention_dropout=dropout, activation="gelu"))
    fast = fast_paths.swap_in(copy.deepcopy(plain), torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[0, T - 3:] = 0
    extra = {"token_index": mask.flatten().nonzero().squeeze(1)} if skip else {}
    casts = count_fused(monkeypatch)
    results = []
    for model in (fast, plain):
        model.train(mode == "train")
        torch.manual_seed(3)
        grad, autocast = bf16(mode)
        with grad, autocast:
            out = model(ids, mask, **extra)
        hidden = out.last_hidden_state
        assert hidden.dtype == torch.bfloat16 and out.pooler_output.dtype == torch.bfloat16
        grads = {}
        if torch.is_grad_enabled() and mode in ("train", "eval"):
            (hidden.float()[mask.bool()].pow(2).mean() + out.pooler_output.float().sum()).backward()
            grads = {n: p.grad for n, p in model.named_parameters()}
        results.append((hidden.float()[mask.bool()], out.pooler_output.float(), grads))
    assert casts and set(casts) == {torch.bfloat16}, "the fused bf16 kernels did not run"
    (h_fast, p_fast, g_fast), (h_plain, p_plain, g_plain) = results
    torch.testing.assert_close(h_fast, h_plain, atol=0.05, rtol=0.02)     # bf16 rounding in another order
    torch.testing.assert_close(p_fast, p_plain, atol=0.02, rtol=0.02)
    if g_plain:
        assert_grads_close(g_fast, g_plain, 0.03, skip=("pooler.bias",))
    assert fused._CASTS.get() is None


@needs_bf16_gemm
@pytest.mark.parametrize("head", ["AlbertForSequenceClassification", "AlbertForQuestionAnswering",
                                  "AlbertForMultipleChoice"])
def test_task_heads_fused_in_bf16_match_the_plain_ones(monkeypatch, head):
    """classify / SQuAD / RACE heads: loss and gradients in training, outputs in inference."""
    torch.manual_seed(0)
    plain = getattr(heads, head)(odd_config(num_labels=3))
    fast = fast_paths.swap_in(copy.deepcopy(plain), torch.bfloat16)
    g = torch.Generator().manual_seed(2)
    shape = (2, 4, 11) if head == "AlbertForMultipleChoice" else (3, 11)
    ids = torch.randint(5, 99, shape, generator=g)
    mask = torch.ones_like(ids)
    mask[..., 8:] = 0
    labels = ({"labels": torch.tensor([1, 3])} if head == "AlbertForMultipleChoice" else
              {"start_positions": torch.tensor([1, 2, 0]), "end_positions": torch.tensor([3, 2, 0])}
              if head == "AlbertForQuestionAnswering" else {"labels": torch.tensor([0, 2, 1])})
    casts = count_fused(monkeypatch)
    outs = []
    for model in (fast, plain):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, **labels).loss
        loss.backward()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = [v.float() for k, v in model.eval()(input_ids=ids, attention_mask=mask).items() if "logits" in k]
        outs.append((loss, logits, {n: p.grad for n, p in model.named_parameters()}))
    assert casts
    (loss_a, logits_a, grads_a), (loss_b, logits_b, grads_b) = outs
    torch.testing.assert_close(loss_a, loss_b, atol=0.02, rtol=0.02)
    for a, b in zip(logits_a, logits_b):
        torch.testing.assert_close(a, b, atol=0.03, rtol=0.03)
    assert_grads_close(grads_a, grads_b, 0.03, skip=("pooler.bias", "classifier.bias", "qa_outputs.bias"))


def test_bf16_against_transformers_under_autocast(tmp_path):
    """The same weights in transformers' AlbertModel and ours (fused where this CPU has bf16 GEMMs, plain
    elsewhere), both under bf16 autocast: as close as either is to fp32."""
    pytest.importorskip("transformers")
    from test_hf_parity import hf_config, hf_model, inputs

    hf = hf_model("AlbertModel", hf_config(num_hidden_layers=3, hidden_size=36, num_attention_heads=4))
    hf.save_pretrained(tmp_path / "hf")
    ours = AlbertModel.from_pretrained(tmp_path / "hf").eval()
    reference = copy.deepcopy(ours)
    fast_paths.apply_fast_paths(ours, "cpu", "bf16")
    assert fast_paths.fast_path_dtype(ours) == (torch.bfloat16 if fused.BF16 else None)
    ids, mask, types = inputs()
    real = mask.bool()
    with torch.no_grad():
        exact = reference(ids, mask, types)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a, b = ours(ids, mask, types), hf(ids, mask, types)
    assert a.last_hidden_state.dtype == b.last_hidden_state.dtype == torch.bfloat16
    ha, hb, h32 = (x.last_hidden_state.float()[real] for x in (a, b, exact))
    bf16_error = (hb - h32).abs().max().item()
    assert 0 < bf16_error < 0.1
    assert (ha - hb).abs().max().item() <= 2 * bf16_error
    torch.testing.assert_close(a.pooler_output.float(), b.pooler_output.float(), atol=0.02, rtol=0.02)


# ----------------------------------------------------------------------------------------------- training
def test_bf16_gradients_are_close_to_fp32_ones():
    """One pretraining step's loss and every gradient, bf16 (fast paths as `prepare_model` picks them) against
    fp32 plain: within 3% (relative L2), all together and each tensor."""
    torch.manual_seed(0)
    exact = AlbertForPreTraining(odd_config())
    ours = precision.prepare_model(copy.deepcopy(exact), precision="bf16", device=torch.device("cpu"))
    losses, grads = [], []
    for model, enabled in ((exact, False), (ours, True)):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            loss = model(**batch()).loss
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert losses[1] == pytest.approx(losses[0], abs=0.01)
    assert_grads_close(grads[1], grads[0], 0.03, skip=("pooler.bias", "sop_head.bias"))


def test_bf16_pretraining_resumes_exactly_with_accumulation_and_checkpointing(tmp_path):
    """bf16 with micro-batches, activation checkpointing and dropout: stopped at step 3 and resumed equals the
    uninterrupted run; activation checkpointing changes nothing; accumulation and fp32 are close."""
    def run(**kw):
        return tiny_run(max_steps=6, micro=4, dropout=0.1, precision="bf16", activation_checkpointing=True,
                        **kw)

    _, full, full_model = train(run(), tmp_path / "full")
    assert fast_paths.fast_path_dtype(full_model) == (torch.bfloat16 if fused.BF16 else None)
    status, first, _ = train(run(), tmp_path / "cut", stop_at=3)
    assert status == "interrupted" and ckpt.latest_checkpoint(tmp_path / "cut").name == "step_00000003"
    status, second, resumed = train(run(), tmp_path / "cut", resume=True)
    assert status == "done" and sorted(second) == [4, 5, 6]
    for step in range(1, 7):
        assert (first | second)[step]["loss"] == full[step]["loss"], step
    _same_weights(full_model, resumed)
    saved = load_file(ckpt.latest_checkpoint(tmp_path / "cut") / "model.safetensors")
    assert {v.dtype for v in saved.values()} == {torch.float32}
    _, plain_blocks, _ = train(tiny_run(max_steps=6, micro=4, dropout=0.1, precision="bf16"), tmp_path / "blocks")
    _, fp32, _ = train(tiny_run(max_steps=6, micro=4, dropout=0.1), tmp_path / "fp32")
    # without dropout (each micro-batch draws its own dropout masks): 2 micro-batches of 4 or one batch of 8
    _, two, _ = train(tiny_run(max_steps=6, micro=4, precision="bf16"), tmp_path / "two")
    _, one, _ = train(tiny_run(max_steps=6, precision="bf16"), tmp_path / "one")
    for step in range(1, 7):
        assert plain_blocks[step]["loss"] == full[step]["loss"], step
        assert fp32[step]["loss"] == pytest.approx(full[step]["loss"], abs=5e-3), step
        assert two[step]["loss"] == pytest.approx(one[step]["loss"], abs=2e-3), step


def test_a_bf16_fine_tune_saves_plain_fp32_weights_that_transformers_loads(tmp_path):
    """The model fine-tuned in bf16 (its modules swapped where this CPU has bf16 GEMMs) is saved as the plain
    model: fp32 tensors, the plain keys; exported, transformers loads it with every key and gives its outputs."""
    transformers = pytest.importorskip("transformers")
    from albertlm.interop.hf import export_hf
    from albertlm.tasks.finetune import make_finetune_loop

    (tmp_path / "tiny").mkdir()
    model_dir = save_tiny_pretrained(tmp_path / "tiny")
    cfg = finetune_config(max_steps=3)
    cfg = cfg.replace(train=replace(cfg.train, precision="bf16", eval_every=3))
    loop = make_finetune_loop(synthetic_task(vocab_size=17), model_dir, StubTokenizer(), cfg, tmp_path / "run",
                              DistInfo())
    assert fast_paths.fast_path_dtype(loop.raw_model) == (torch.bfloat16 if fused.BF16 else None)
    assert loop.run() == "done"
    best = tmp_path / "run" / "best"
    saved = load_file(best / "model.safetensors")
    plain = heads.AlbertForSequenceClassification.from_pretrained(best).eval()
    assert {v.dtype for v in saved.values()} == {torch.float32}
    assert set(saved) <= set(plain.state_dict()) and fast_paths.fast_path_dtype(plain) is None
    export_hf(plain, tmp_path / "hf")
    theirs, info = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "hf",
                                                                               output_loading_info=True)
    assert not any(info.values()), info
    ids = torch.randint(5, 17, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(theirs.eval()(ids).logits, plain(ids).logits, atol=1e-5, rtol=0)
