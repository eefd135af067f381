"""benchmarks/model_speed.py and train_speed.py: the CUDA-only paths checked on the CPU (peak memory per
variant, fp16 in the reference, warm-up before timing, real-token counts), with albert-tiny."""
from __future__ import annotations

import contextlib
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))          # train_speed imports model_speed by name
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_audit14", ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def refused_before_work(script: str, argv: list[str], stages: tuple[str, ...], monkeypatch, capsys) -> str:
    """Run `script`'s main with `argv`, every one of its `stages` (functions that build, time or read) failing the
    test if reached; returns the one error line after checking the exit (2) and that there is no traceback."""
    module = load(script)
    for name in stages:
        if hasattr(module, name):
            monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail(f"{script} {argv} ran"))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as exc:
        module.main()
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def ms():
    return load("model_speed")


@pytest.fixture(scope="module")
def ts():
    pytest.importorskip("transformers")
    return load("train_speed")


@pytest.fixture(scope="module")
def tiny():
    from albertlm.config.presets import get_preset

    return get_preset("albert-tiny")


def test_peak_memory_is_each_variants_own(ms, tiny, monkeypatch):
    """The variants built before one stay resident: its peak counts from what was allocated when its tracking
    started (before its weights arrive), not from zero, so later variants are not charged for earlier ones."""
    pytest.importorskip("transformers")
    events, allocated = [], [0]

    class FakeMemory:                      # what CudaPeakMemory does, with an allocation counter
        def start(self):
            events.append("start")
            return allocated[0]

        def peak_gib(self, baseline):
            return (allocated[0] - baseline) / 2**30

    build = ms.variant_model

    def variant_model(name, *args):
        events.append(name)
        allocated[0] += 2**30 * (1 if name == "ours" else 3)   # this variant's footprint, kept resident
        return build(name, *args)

    monkeypatch.setattr(ms, "variant_model", variant_model)
    ours, theirs = ms.build_models(tiny)
    r = ms.run_row(tiny, ours, theirs, ["ours", "hf"], 2, 16, "fp32", True, 1, torch.device("cpu"),
                   memory=FakeMemory())
    assert events == ["start", "ours", "start", "hf"]
    assert r["ours"]["peak_gib"] == 1.0 and r["hf"]["peak_gib"] == 3.0


def test_cuda_peak_memory_subtracts_the_baseline(ms, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append(("reset", d)))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 5 * 2**30)
    device = torch.device("cuda", 0)
    memory = ms.CudaPeakMemory(device)
    assert memory.peak_gib(memory.start()) == 2.0
    assert calls == [("reset", device)]


def test_run_row_cpu_has_no_peak(ms, tiny):
    pytest.importorskip("transformers")
    ours, theirs = ms.build_models(tiny)
    r = ms.run_row(tiny, ours, theirs, ["ours", "hf", "ours-padded"], 2, 16, "fp32", False, 1,
                   torch.device("cpu"), real=0.6)
    assert all(v["peak_gib"] is None and v["seconds"] > 0 for v in r.values())


def test_reference_fp16_runs_in_fp16(ts, tiny, monkeypatch):
    """--dtypes fp16 (CUDA): the reference ran fp32 (autocast disabled) while ours ran fp16."""
    seen = []
    real_autocast = torch.autocast

    def autocast(device_type, dtype=None, enabled=True):
        seen.append((device_type, dtype, enabled))
        return contextlib.nullcontext()

    _, theirs = ts.build_models(tiny)
    optimizer = torch.optim.AdamW(theirs.parameters(), lr=1e-5)
    B, T, P = 2, 16, 3
    batch = dict(input_ids=torch.randint(5, 99, (B, T)), attention_mask=torch.ones(B, T, dtype=torch.long),
                 token_type_ids=torch.zeros(B, T, dtype=torch.long), sentence_order_label=torch.tensor([0, 1]),
                 masked_lm_positions=torch.tensor([[1, 2, 3], [4, 5, 0]]), masked_lm_ids=torch.randint(5, 99, (B, P)),
                 masked_lm_weights=torch.tensor([[1.0, 1, 1], [1, 1, 0]]))
    monkeypatch.setattr(torch, "autocast", autocast)
    ts.reference_step(theirs, optimizer, batch, "fp16", torch.device("cpu"))
    ts.reference_step(theirs, optimizer, batch, "bf16", torch.device("cpu"))
    ts.reference_step(theirs, optimizer, batch, "fp32", torch.device("cpu"))
    assert seen == [("cpu", torch.float16, True), ("cpu", torch.bfloat16, True), ("cpu", torch.float32, False)]
    monkeypatch.setattr(torch, "autocast", real_autocast)
    scaler = torch.amp.GradScaler("cpu")                       # the fp16 path with loss scaling runs
    ts.reference_step(theirs, optimizer, batch, "bf16", torch.device("cpu"), scaler)
    assert ts.DTYPES["fp16"] == torch.float16


def test_train_speed_rejects_unusable_options(ts, monkeypatch):
    for argv in (["--steps", "1"], ["--chunks", "0"], ["--dtypes", "fp16"], ["--dtypes", "fp8"]):
        monkeypatch.setattr(sys, "argv", ["train_speed.py", *argv])
        with pytest.raises(SystemExit):
            ts.main()
    with pytest.raises(ValueError, match="steps"):
        ts.bench_row(None, 2, 16, "fp32", Path("nowhere"), Path("nowhere"), 1, 1, torch.device("cpu"), False)


def test_bench_row_warms_up_and_counts_real_tokens(ts, tiny, tmp_path, monkeypatch):
    """An untimed warm-up chunk first (where compiles and dynamic-shape recompiles land), then timed chunks
    whose tok/s and MFU count real tokens, as model_speed.py does, not B x T padded slots."""
    from conftest import shared_path

    shared_path("spm", "albert-base-v2_spiece.model")
    for text in ts.TEXT:
        shared_path("text", "gutenberg", text.name)
    B, T, steps, chunks = 2, 64, 3, 2
    data = ts.build_data(tmp_path, T)
    chunk_calls, reference_batches = [], []
    run_ours, run_ref = ts.run_ours_chunk, ts.run_reference_chunk
    monkeypatch.setattr(ts, "run_ours_chunk", lambda *a: (chunk_calls.append(a[2]), run_ours(*a))[1])
    monkeypatch.setattr(ts, "run_reference_chunk",
                        lambda model, opt, batches, *a: (reference_batches.append(batches),
                                                         run_ref(model, opt, batches, *a))[1])
    r = ts.bench_row(tiny, B, T, "fp32", data, tmp_path, chunks, steps, torch.device("cpu"), False)
    assert chunk_calls == [steps] * (chunks + 1) and len(reference_batches) == chunks + 1
    timed = [b for batches in reference_batches[1:] for b in batches[1:]]
    real = sum(int(b["attention_mask"].sum()) for b in timed) / len(timed)
    assert r["tokens"] == pytest.approx(real)
    P = int(__import__("json").loads((data / "meta.json").read_text())["max_predictions_per_seq"]) \
        if (data / "meta.json").exists() else None
    if P is not None:
        # each timed batch's rows, each token attending to its row's real tokens (the thirty-first session; it
        # was every token over all T positions, which stays an upper bound)
        counts = [ts.model_flops(tiny, B, T, P, train=True, lengths=b["attention_mask"].sum(1).tolist())
                  for b in timed]
        assert r["flops"] == pytest.approx(sum(counts) / len(counts))
        assert r["flops"] <= ts.model_flops(tiny, B, T, P, train=True, tokens=real)
    assert set(r["seconds"]) == {"ours", "hf"} and r["compile_s"] == {}
