"""Benchmark scripts audit 25: the matmul rate MFU is against, the FLOP count (checked against torch's FLOP counter
on both models), the work each side of a ratio is timed on, and options (no timing asserted)."""
from __future__ import annotations

import sys

import pytest
import torch

from test_bench_audit20 import script_parser
from test_benchmarks_audit14 import load, refused_before_work   # a benchmark script as a module


@pytest.fixture(autouse=True)
def _sys_path_back(monkeypatch):
    """sys.path as it was after each test (train_speed.py puts benchmarks/ on it to import model_speed)."""
    monkeypatch.setattr(sys, "path", [*sys.path])


@pytest.fixture(scope="module")
def ms():
    return load("model_speed")


def counted_flops(model, kwargs: dict, train: bool) -> int:
    """The FLOPs torch's FlopCounterMode counts for one forward (and backward when `train`) of `model`."""
    from torch.utils.flop_counter import FlopCounterMode

    model.train(train)
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(**kwargs)
        if train:
            out.loss.backward()
    return counter.get_total_flops()


def test_matmul_rate_is_the_fastest_gemm_of_the_device(ms, monkeypatch):
    """MFU was against `torch.matmul`'s rate, which on AMD CPUs is MKL's AVX2 code while our fused linears run
    oneDNN's AVX-512 (1.4x faster here): docs/model.md quoted MFU up to 113%. The rate is now the faster of the
    two, and the oneDNN probe computes the same product as torch.matmul."""
    from albertlm.model import fused

    cpu = torch.device("cpu")
    kernels = ms.gemm_kernels(torch.float32, cpu)
    assert list(kernels)[0] == "torch.matmul"
    if fused.AVAILABLE:
        assert "oneDNN" in kernels
    x, w = torch.randn(8, 16), torch.randn(24, 16)
    for name, kernel in kernels.items():
        assert torch.allclose(kernel(x, w), x @ w.t(), atol=1e-5), name
    assert list(ms.gemm_kernels(torch.float32, torch.device("cuda"))) == ["torch.matmul"]

    fake = {"torch.matmul": 1e9, "oneDNN": 1.4e9}
    monkeypatch.setattr(ms, "gemm_kernels", lambda dtype, device: {"torch.matmul": "torch.matmul", "oneDNN": "oneDNN"})
    monkeypatch.setattr(ms, "kernel_rate", lambda kernel, dtype, seconds, device: fake[kernel])
    assert ms.matmul_rate(torch.float32, seconds=0.01) == 1.4e9
    assert ms.gemm_rates(torch.float32, seconds=0.01) == fake


@pytest.mark.parametrize("train", [False, True])
def test_model_flops_equal_transformers_counted_matmuls(ms, train):
    """The hand count against torch's FLOP counter on transformers' model with eager attention (its attention
    matmuls counted too): equal once transformers' MLM head at the unmasked positions is added (model_flops
    counts the head at the masked positions only). A check that found nothing wrong (passes before too)."""
    pytest.importorskip("transformers")
    from albertlm.config.presets import get_preset

    cfg = get_preset("albert-tiny")
    _, theirs = ms.build_models(cfg)
    theirs.set_attn_implementation("eager")
    B, T = 2, 16
    P = max(1, round(ms.MASK_RATE * T))
    batch = ms.make_inputs(cfg, B, T)
    H, E, V = cfg.hidden_size, cfg.embedding_size, cfg.vocab_size
    unmasked_head = B * (T - P) * 2 * (H * E + E * V) * (3 if train else 1)
    assert counted_flops(theirs, ms.variant_inputs("hf", batch), train) == \
        ms.model_flops(cfg, B, T, P, train) + unmasked_head


@pytest.mark.parametrize("preset", ["albert-tiny", "bert-tiny"])
def test_model_flops_count_an_embedding_projection_only_where_there_is_one(ms, preset):
    """A model with E = H (bert-* presets) has no E -> H projection, but its FLOPs counted 2 E H per token for one.
    Checked against our plain model's counted matmuls (the last block at every position: no masked_lm_positions)
    plus attention, which the counter does not see in SDPA on a CPU."""
    from albertlm.config.presets import get_preset
    from albertlm.model.albert import AlbertForPreTraining

    cfg = get_preset(preset)
    B, T = 2, 16
    P = max(1, round(ms.MASK_RATE * T))
    batch = ms.make_inputs(cfg, B, T)
    torch.manual_seed(0)
    model = AlbertForPreTraining(cfg)
    kwargs = {k: batch[k] for k in ("input_ids", "token_type_ids", "labels", "sentence_order_label")}
    attention = cfg.num_layers * cfg.inner_group_num * 4 * cfg.hidden_size * B * T * T
    assert counted_flops(model, kwargs, False) + attention == ms.model_flops(cfg, B, T, P, False)


def test_model_flops_attend_over_each_rows_real_tokens(ms):
    """With padding (--real < 1) every real token's attention was counted over the T positions of its row: ours
    skips the padding, so MFU counted work nobody needs (about 2% of albert-base's FLOPs at 75% real, 512)."""
    from albertlm.config.presets import get_preset

    cfg = get_preset("albert-tiny")
    B, T, P = 2, 16, 2
    blocks, H = cfg.num_layers * cfg.inner_group_num, cfg.hidden_size
    for train in (False, True):
        assert ms.model_flops(cfg, B, T, P, train, lengths=[16, 16]) == ms.model_flops(cfg, B, T, P, train)
        short_row = blocks * 4 * H * 8 * (16 - 8) * (3 if train else 1)   # its 8 tokens attend to 8 keys, not 16
        assert ms.model_flops(cfg, B, T, P, train, lengths=[16, 8]) == \
            ms.model_flops(cfg, B, T, P, train, tokens=24) - short_row


def test_model_speed_clock_cpu_needs_one_thread(monkeypatch, capsys):
    """--clock cpu with two threads timed the CPU seconds of both, OpenMP's spin-waits included: tok/s per CPU
    second, printed as a throughput."""
    line = refused_before_work("model_speed", ["--preset", "albert-tiny", "--clock", "cpu", "--threads", "2"],
                               ("build_models", "run_row", "matmul_rate"), monkeypatch, capsys)
    assert "--threads 1" in line, line


def test_train_speed_reference_steps_get_batches_already_prepared():
    """The reference's timed loop copied each batch to the device and built transformers' labels by boolean
    indexing (a device sync on a GPU) inside its timed steps, while docs/model.md says it gets the batches
    already on the GPU. Now `reference_batch` prepares them before the timer and the loop passes them as they are."""
    pytest.importorskip("transformers")
    ts = load("train_speed")
    batch = dict(input_ids=torch.randint(5, 99, (2, 8)), attention_mask=torch.ones(2, 8, dtype=torch.long),
                 token_type_ids=torch.zeros(2, 8, dtype=torch.long), sentence_order_label=torch.tensor([0, 1]),
                 masked_lm_positions=torch.tensor([[1, 2], [4, 0]]), masked_lm_ids=torch.tensor([[7, 8], [9, 10]]),
                 masked_lm_weights=torch.tensor([[1.0, 1], [1, 0]]), token_index=torch.arange(16))
    prepared = ts.reference_batch(batch, torch.device("cpu"))
    expected = torch.full((2, 8), -100)
    expected[0, 1], expected[0, 2], expected[1, 4] = 7, 8, 9       # the weight-0 slot (position 0) is no label
    assert torch.equal(prepared["labels"], expected)
    assert set(prepared) == {"input_ids", "attention_mask", "token_type_ids", "sentence_order_label", "labels"}

    seen = []
    original = ts.reference_step
    ts.reference_step = lambda model, optimizer, b, *a: seen.append(b)
    try:
        ts.run_reference_chunk(None, None, [prepared, prepared], "fp32", torch.device("cpu"))
    finally:
        ts.reference_step = original
    assert len(seen) == 2 and all(b is prepared for b in seen)


def test_onnx_speed_pytorch_row_runs_what_predict_runs(monkeypatch):
    """`albertlm predict` runs `prepare_model`'s model (the CPU fast paths where the probe picks them); the
    benchmark's PyTorch row ran the plain model, so on such a CPU it timed something predict does not run."""
    from albertlm.config.presets import get_preset
    from albertlm.model import fast_paths
    from albertlm.model.heads import AlbertForSequenceClassification

    onnx_speed = load("onnx_speed")
    plain = AlbertForSequenceClassification(get_preset("albert-tiny", num_labels=2)).eval()
    monkeypatch.setattr(fast_paths, "choose_fast_path", lambda device, precision: torch.float32)
    served = onnx_speed.pytorch_model(plain)
    assert any(isinstance(m, fast_paths.FusedLinear) for m in served.modules()) and not served.training
    assert not any(isinstance(m, fast_paths.FusedLinear) for m in plain.modules())   # the exported model
    monkeypatch.setattr(fast_paths, "choose_fast_path", lambda device, precision: None)
    assert not any(isinstance(m, fast_paths.FusedLinear) for m in onnx_speed.pytorch_model(plain).modules())


@pytest.mark.parametrize("script", ["data_speed", "train_speed"])
def test_help_names_what_every_option_does(script, monkeypatch):
    """data_speed's --dupe-factor and --skip-10x had no help text (audit 20's check left these two scripts out)."""
    parser, doc = script_parser(script, monkeypatch)
    assert " ".join(parser.description.split()) == " ".join(doc.split("\n\n")[0].split())
    assert [a.option_strings[0] for a in parser._actions if not a.help] == []


def test_tokenizer_speed_says_how_many_lines_match():
    """A speed ratio between tokenizers that split differently compares different work (transformers 5's
    AlbertTokenizer agrees with our default SentencePiece path on a fifth of the benchmark's lines): each row
    now says on how many lines its ids equal albertlm's."""
    tokenizer_speed = load("tokenizer_speed")
    ours = [[1, 2, 3], [4, 5], [6]]
    assert tokenizer_speed.agreement(ours, ours) == 1.0
    assert tokenizer_speed.agreement({"input_ids": [[1, 2, 3], [4, 9], (6,)]}, ours) == pytest.approx(2 / 3)
