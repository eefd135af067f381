"""README audit 23 (a new user on a fresh machine: `make demo`, then README's commands in order): the smoke demo
that replaced the full demo's results, the demo's seconds-per-step line whose arithmetic did not hold, and README's
notes on what the pipeline's commands write and how long they are silent. No training: the demo's stages are
stand-ins; seconds, CPU-only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from albertlm import demo

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


class _Stop(Exception):
    """Raised by a stand-in stage: the demo got past its checks of --out."""


# ------------------------------------------------------------------------------------------------ --quick
def test_quick_demo_leaves_the_full_demos_results_in_place(monkeypatch, tmp_path):
    """README: after `make demo`, "`python -m albertlm.demo --quick` is a one-minute smoke version". Run in the
    checkout, it wrote to the same ./demo_run and replaced the full demo's run (its 3575-step checkpoint, curves,
    summary.json) with ten steps' worth; a model fine-tuned from demo_run/run then named a checkpoint that was
    gone. --quick now defaults to demo_run/quick, and the full demo defaults to demo_run as before."""
    monkeypatch.chdir(tmp_path)
    outs = []
    monkeypatch.setattr(demo, "run_demo", lambda out, quick: outs.append((out, quick)) or 0)
    assert demo.main(["--quick"]) == 0
    assert demo.main([]) == 0
    assert demo.main(["--quick", "--out", "elsewhere"]) == 0
    assert outs == [(tmp_path / "demo_run" / "quick", True), (tmp_path / "demo_run", False),
                    (tmp_path / "elsewhere", True)]


def test_full_demo_accepts_the_quick_demos_folder_in_its_out(monkeypatch, tmp_path):
    """The full demo refuses an --out holding other files than an earlier demo's: the quick demo's folder inside
    demo_run is one of its own, so `make demo` after `--quick` runs (and leaves demo_run/quick alone)."""
    out = tmp_path / "demo_run"
    (out / "quick" / "run").mkdir(parents=True)
    (out / "summary.json").write_text("{}")

    def stop(*args, **kwargs):
        raise _Stop

    monkeypatch.setattr(demo, "write_corpus", stop)
    with pytest.raises(_Stop):
        demo.run_demo(out, quick=False)
    (out / "notes.md").write_text("mine")
    with pytest.raises(demo.UserError, match="holds other files"):
        demo.run_demo(out, quick=False)


# --------------------------------------------------------------------------------------- stage 4's line
@pytest.mark.parametrize("seconds, steps, minutes", [(0.12587, 3575, 7.5), (0.0687, 4000, 7.5), (0.5, 900, 7.5),
                                                     (0.033, 4000, 7.5), (1.2345, 364, 7.5)])
def test_the_printed_seconds_per_step_times_the_steps_fit_the_minutes(seconds, steps, minutes):
    """`make demo` printed "0.13 s/step here, so 3575 steps of 32 sequences fit 7.5 min" for a probe of 0.1259 s:
    3575 x 0.13 s is 7.75 min, which a reader checking the line finds does not fit. The seconds now carry the
    decimals (two, or up to four) that keep steps x printed seconds within 3 s of the time fitted."""
    line = demo._plan(demo.FULL, steps, seconds, minutes)
    printed = float(re.match(r"([\d.]+) s/step here", line).group(1))
    assert abs(printed * steps - seconds * steps) <= 3.0, line
    assert f"so {steps} steps of 32 sequences fit {minutes:g} min" in line


def test_the_printed_seconds_keep_two_decimals_where_they_suffice():
    assert demo._plan(demo.FULL, 900, 0.5, 7.5).startswith("0.50 s/step here")
    assert demo._plan(demo.FULL, 3575, 0.12587, 7.5).startswith("0.126 s/step here")


# --------------------------------------------------------------------------------------------- README
def _pipeline_block() -> str:
    return README.split("## The pipeline from the command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]


def test_readme_says_what_its_sample_demo_output_leaves_out():
    """The sample showed the last "saved ..." line followed by stage 5, but the demo prints pretraining's own
    six-line `summary: done at step N of N` block between them (and, where stdout is not a terminal, a
    `step N/M train:` line every 10 steps): README now names both as left out."""
    intro = README.split("### What `make demo` does and prints", 1)[1].split("```", 1)[0]
    assert "summary: done at step" in intro and "progress bar" in intro and "step N/M train" in intro


def test_readme_names_the_files_predict_and_export_write():
    """`predict glue ... --out sub/` printed `"predictions_written": ["test:val.tsv"]` and wrote
    sub/submission/RTE.tsv; `export onnx --quantize int8` wrote rte.int8.onnx beside rte.onnx."""
    block = _pipeline_block()
    predict = next(line for line in block.splitlines() if line.startswith("albertlm predict glue"))
    assert "--out sub/" in predict and "sub/submission/RTE.tsv" in predict
    export = next(line for line in block.splitlines() if line.startswith("albertlm export onnx"))
    assert "--out rte.onnx" in export and "rte.int8.onnx" in export


def test_readme_says_albert_base_v2_is_a_local_directory():
    """`--model albert-base-v2/` reads like a Hub name; the CLI answers `albert-base-v2: no such model directory`.
    The pipeline says it is a local directory and how to fetch one (albertlm downloads nothing)."""
    block = _pipeline_block()
    assert "--model albert-base-v2/" in block
    assert "nothing is downloaded" in block and "huggingface.co/albert/albert-base-v2`" in block


def test_readme_warns_that_the_paper_recipe_step_is_long_and_silent_on_a_cpu():
    """The paper-recipe pretrain line, run as written on 2 CPU cores, printed its config and then nothing for 15
    minutes (one step of 4096 sequences of 512 tokens through 256 micro-batches)."""
    block = _pipeline_block()
    before = block.split("albertlm pretrain --preset albert-base", 1)[0].splitlines()[-2:]
    assert any("CPU" in line and "nothing printed" in line for line in before), before
