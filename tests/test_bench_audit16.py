"""benchmarks/attention_speed.py, finetune_speed.py and model_speed.py: the work each ratio is computed from is
what the script says it is (no timing here, albert-tiny or pure functions only)."""
from __future__ import annotations

import sys

import pytest
import torch

from test_benchmarks_audit14 import load   # a benchmark script as a module


@pytest.mark.parametrize("real", [0.1, 0.25, 0.4, 0.75, 0.9])
def test_attention_rows_have_the_asked_mean_fraction_of_real_tokens(real):
    """--real 0.25 printed "rows 25% real tokens on average" while its rows were about 50% real (the range of
    lengths was clamped to start at 1 and end at T)."""
    attention = load("attention_speed")
    T = 512
    lengths = attention.lengths_for(4096, T, real, torch.Generator().manual_seed(0))
    assert lengths.min() >= 1 and lengths.max() <= T
    assert abs(lengths.float().mean().item() / T - real) < 0.02


def test_attention_rejects_a_real_fraction_outside_0_1(monkeypatch, capsys):
    attention = load("attention_speed")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(attention, "kernels", lambda *a: pytest.fail("timed with --real 1.5"))
    monkeypatch.setattr(sys, "argv", ["attention_speed.py", "--real", "1.5"])
    with pytest.raises(SystemExit):
        attention.main()
    assert "--real" in capsys.readouterr().err


def test_finetune_ours_gets_the_cpu_fast_paths_albertlm_finetune_uses(monkeypatch):
    """`albertlm finetune` runs `prepare_model` (the CPU fast paths where the probe picks them); the benchmark's
    "albertlm" rows ran the plain model, so on such a CPU they timed something `albertlm finetune` does not run."""
    pytest.importorskip("transformers")
    from albertlm.config.presets import get_preset
    from albertlm.model import fast_paths

    finetune = load("finetune_speed")
    monkeypatch.setattr(fast_paths, "choose_fast_path", lambda device, precision: torch.float32)
    model = finetune.our_model(get_preset("albert-tiny", num_labels=2))
    assert any(isinstance(m, fast_paths.FusedLinear) for m in model.modules())
    monkeypatch.setattr(fast_paths, "choose_fast_path", lambda device, precision: None)
    model = finetune.our_model(get_preset("albert-tiny", num_labels=2))
    assert not any(isinstance(m, fast_paths.FusedLinear) for m in model.modules())


@pytest.mark.parametrize("option", [["--modes", "training"], ["--modes", "train,inference"],
                                    ["--dtypes", "bfloat16"], ["--dtypes", "fp32,float16"]])
def test_model_speed_rejects_a_mode_or_dtype_it_would_mislabel(option, monkeypatch, capsys):
    """`--modes training` ran inference steps under the label "training"; `--dtypes bfloat16` ran fp32 (no
    autocast, fp32 matmul rate) under the label "bfloat16"."""
    model_speed = load("model_speed")
    monkeypatch.setattr(model_speed, "build_models", lambda cfg: pytest.fail(f"ran with {option}"))
    monkeypatch.setattr(sys, "argv", ["model_speed.py", "--preset", "albert-tiny", *option])
    with pytest.raises(SystemExit):
        model_speed.main()
    assert option[0] in capsys.readouterr().err


def test_tokenizer_speed_refuses_a_repeat_below_one(monkeypatch, capsys):
    """--repeat 0 timed nothing: every rate was 0 and the ratio line divided by zero."""
    tokenizer_speed = load("tokenizer_speed")
    monkeypatch.setattr(tokenizer_speed, "read_lines", lambda: pytest.fail("read the corpus with --repeat 0"))
    monkeypatch.setattr(sys, "argv", ["tokenizer_speed.py", "--repeat", "0"])
    with pytest.raises(SystemExit) as exc:
        tokenizer_speed.main()
    assert exc.value.code == 2 and "--repeat must be >= 1" in capsys.readouterr().err
