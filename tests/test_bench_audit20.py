"""Benchmark scripts audit 20: the MFU of emulated bf16, the real-token fraction a row is labelled with, --help
text, and options refused before any work (no timing asserted: the timed parts are stubbed)."""
from __future__ import annotations

import argparse
import sys

import pytest
import torch

from test_benchmarks_audit14 import load, refused_before_work   # a benchmark script as a module

SCRIPTS = ("model_speed", "finetune_speed", "attention_speed", "onnx_speed", "tokenizer_speed")   # (not train_speed)


@pytest.fixture(autouse=True)
def _sys_path_back(monkeypatch):
    """sys.path as it was after each test: a script loaded here may put benchmarks/ on it for good (train_speed.py
    does, to import model_speed by name), where a later test of the process would import its modules from."""
    monkeypatch.setattr(sys, "path", [*sys.path])


def fake_rates(monkeypatch, *modules) -> None:
    """A CPU without bf16 instructions whose fp32 matmuls run at 1 GFLOP/s and emulated bf16 ones at 10 MFLOP/s."""
    rates = {torch.float32: 1e9, torch.bfloat16: 1e7}
    for module in modules:
        monkeypatch.setattr(module, "matmul_rate", lambda dtype, *a, **k: rates[dtype], raising=False)
        monkeypatch.setattr(module, "cpu_has_bf16", lambda: False, raising=False)


def run_stubbed(script: str, argv: list[str], monkeypatch, capsys, tmp_path) -> list[str]:
    """The lines `script` prints for `argv` on a CPU without bf16 (`fake_rates`), each row's work stubbed: our
    step at 40% and transformers' at 20% of the fp32 rate (model_speed, albert-tiny), or 1 GFLOP in 2 s and 4 s
    (train_speed)."""
    from albertlm.config.presets import get_preset

    module = load(script)
    fake_rates(monkeypatch, module, sys.modules.get("model_speed", module))
    if script == "model_speed":
        def run_row(cfg, ours, theirs, variants, B, T, precision, train, *a, **k):
            flops = module.model_flops(get_preset("albert-tiny"), B, T, max(1, round(0.15 * T)), train, tokens=B * T)
            return {v: {"seconds": flops / (0.4 / (1 + i) * 1e9), "compile_s": 0.0, "peak_gib": None}
                    for i, v in enumerate(variants)}

        monkeypatch.setattr(module, "build_models", lambda cfg: (None, None))
        monkeypatch.setattr(module, "run_row", run_row)
        argv = ["--preset", "albert-tiny", "--modes", "infer", *argv]
    else:
        monkeypatch.setattr(module, "build_data", lambda tmp, T: tmp_path)
        monkeypatch.setattr(module, "bench_row", lambda cfg, B, T, precision, *a: {
            "shape": f"{B}x{T}", "dtype": precision, "seconds": {"ours": 2.0, "hf": 4.0}, "flops": 1e9,
            "compile_s": {}, "tokens": B * T, "wait": 0.0})
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--rows", "2x16", *argv])
    module.main()
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("script, mfu", [("model_speed", "40%/20%"), ("train_speed", "| 50% / 25% |")])
def test_bf16_mfu_without_bf16_hardware_is_against_the_fp32_rate(script, mfu, monkeypatch, capsys, tmp_path):
    """On this AVX2 CPU a bf16 row printed MFU 225%: its rate was that of torch's emulated bf16 matmul (60x below
    fp32 here), which measures the emulation, not what the hardware could do."""
    out = run_stubbed(script, ["--dtypes", "bf16"], monkeypatch, capsys, tmp_path)
    rows = [line for line in out if line.startswith(("infer", "| 2x16"))]
    assert len(rows) == 1 and mfu in rows[0], out
    assert "bf16 runs emulated" in out[0]


@pytest.mark.parametrize("script", ["model_speed", "train_speed"])
def test_cpu_without_bf16_times_bf16_only_when_asked(script, monkeypatch, capsys, tmp_path):
    """By default both scripts also timed bf16 on a CPU that emulates it: albert-base's emulated bf16 row of
    train_speed.py had not finished after 13 minutes at 2x16 (its fp32 row took one), so `make bench` ran for hours."""
    out = run_stubbed(script, [], monkeypatch, capsys, tmp_path)
    assert "bf16 is left out" in out[0]
    assert not [line for line in out[1:] if "bf16" in line], out


@pytest.mark.parametrize("B, T, real", [(1, 512, 0.75), (1, 128, 0.5)])
def test_model_speed_rows_have_the_asked_real_fraction(B, T, real):
    """One row (--rows 1x512 --real 0.75) was 50% real under the label "75% real tokens on average":
    torch.linspace of one point is its start, the shortest end of the spread."""
    from albertlm.config.presets import get_preset

    model_speed = load("model_speed")
    batch = model_speed.make_inputs(get_preset("albert-tiny"), B, T, real=real)
    assert abs(batch["attention_mask"].sum().item() / (B * T) - real) < 0.01


@pytest.mark.parametrize("script, argv, phrase", [
    ("model_speed", ["--dtypes", "fp16"], "--dtypes fp16"),                     # albertlm runs no fp16 on a CPU
    ("model_speed", ["--rows", "8x128", "--real", "0.1"], "--real"),            # ran 16% real, labelled 10%
    ("onnx_speed", ["--skip-speed"], "--skip-speed"),                           # ran nothing, exit 0
    ("attention_speed", ["--device", "cuda:3"], "--device cuda:3"),             # torch's assertion, one GPU here
])
def test_benchmarks_refuse_before_any_work(script, argv, phrase, monkeypatch, capsys):
    cuda = script == "attention_speed"       # a machine with one GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(torch.cuda, "set_device", lambda *a: None)
    line = refused_before_work(script, argv, ("build_models", "speed", "sst2", "kernels", "model_check"), monkeypatch,
                               capsys)
    assert phrase in line, line


def test_attention_speed_times_on_the_device_it_was_given(monkeypatch, capsys):
    """--device cuda:1 ran its kernels on GPU 1 while the CUDA events and synchronize() that time them were
    GPU 0's (the current device): the kernels' time was not what was measured."""
    attention = load("attention_speed")
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: current.append(torch.cuda._utils._get_device_index(d)))
    monkeypatch.setattr(attention, "kernels", lambda *a: None)
    for device in ("cuda:1", "cuda"):        # cuda: the current device (set_device refuses a device without index)
        monkeypatch.setattr(sys, "argv", ["attention_speed.py", "--device", device, "--real", "1"])
        attention.main()
    assert current == [1]


def script_parser(script: str, monkeypatch) -> tuple[argparse.ArgumentParser, str]:
    """The argument parser a script's main() builds, and the script's docstring."""
    module = load(script)
    seen = {}

    def capture(self, *args, **kwargs):
        seen["parser"] = self
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(sys, "argv", [f"{script}.py"])
    with pytest.raises(SystemExit):
        module.main()
    return seen["parser"], module.__doc__


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_the_script_and_every_option(script, monkeypatch):
    """attention_speed's and tokenizer_speed's --help description stopped mid-sentence (the docstring's first
    line); finetune_speed and onnx_speed (and a few others) listed options without a word on what they do."""
    parser, doc = script_parser(script, monkeypatch)
    assert " ".join(parser.description.split()) == " ".join(doc.split("\n\n")[0].split())
    assert parser.description.rstrip().endswith(".")
    undocumented = [a.option_strings[0] for a in parser._actions if not a.help]
    assert undocumented == [], f"{script}: {undocumented}"

