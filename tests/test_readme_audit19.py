"""README audit 19 (a new user's first hour: `make install`, `make demo`, then README's commands in order): what the
install prints, what `make demo` says and does on a slow machine, the README's sample demo output against the
demo's own arithmetic, and every `albertlm` command README shows against the CLI's parsers. No training, no
network, no subprocess: the demo's stages are stand-ins; seconds, CPU-only."""
from __future__ import annotations

import importlib
import json
import re
import shlex
import tomllib
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ install
def test_install_builds_without_setuptools_license_deprecation():
    """`make install` printed setuptools' 12-line "`project.license` as a TOML table is deprecated ... By
    2027-Feb-18 ... your builds will no longer be supported" block three times: pyproject.toml's license was
    `{ text = "Apache-2.0" }`. It is now the SPDX string, which needs setuptools 77+ to build."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["license"] == "Apache-2.0"
    setuptools = next(r for r in project["build-system"]["requires"] if r.startswith("setuptools"))
    minimum = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert minimum and int(minimum.group(1)) >= 77, setuptools


# ------------------------------------------------------------------------------------------------ the demo
def _run_demo(monkeypatch, tmp_path, capsys, seconds_per_step: float, records: list[dict]) -> tuple[dict, str, list]:
    """`python -m albertlm.demo` with every stage a stand-in: the probe measures `seconds_per_step`, pretraining
    writes a checkpoint at step 7 and `records` as its metrics.jsonl. (summary.json, stdout, the checkpoints
    `evaluate_checkpoint` was asked to evaluate)."""
    from albertlm import demo
    from albertlm.training import checkpoint, evaluate, plots, pretrain

    evaluated = []

    def corpus(path, limit_chars=0):
        path.mkdir(parents=True)
        sizes = {split: {"documents": 3, "MB": 0.1} for split in ("train", "heldout")}
        return path / "train.txt", path / "heldout.txt", sizes

    def train(run, run_dir):
        (Path(run_dir) / "checkpoints" / "step_00000007").mkdir(parents=True)
        (Path(run_dir) / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return "done"

    def evaluate_again(final, data, device="cpu"):
        evaluated.append(Path(final).name)
        return {"mlm_acc": 0.5, "mlm_loss": 1.0, "sop_acc": 0.9}

    monkeypatch.setattr(demo, "write_corpus", corpus)
    monkeypatch.setattr(demo, "train_tokenizer", lambda corpus_path, path, vocab: path)
    monkeypatch.setattr(demo, "build_data", lambda *a, **k: {"num_instances": 10, "tokenizer": {"vocab_size": 2000}})
    monkeypatch.setattr(demo, "fit_steps", lambda run, size, scratch: (0, seconds_per_step))
    monkeypatch.setattr(demo, "unigram_baseline", lambda train_dir, eval_dir: (0.04, "7"))
    monkeypatch.setattr(pretrain, "pretrain", train)
    monkeypatch.setattr(checkpoint, "latest_checkpoint", lambda d: Path(d) / "checkpoints" / "step_00000007")
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", evaluate_again)
    monkeypatch.setattr(plots, "plot_run", lambda d: Path(d) / "curves.png")
    # the stages' time: the stand-ins take none (a busy machine's imports must not shrink the budget printed)
    monkeypatch.setattr(demo, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    out = tmp_path / "demo"
    assert demo.main(["--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text()), capsys.readouterr().out, evaluated


EVAL_AT_7 = {"step": 7, "split": "eval", "mlm_acc": 0.31, "mlm_loss": 2.5, "loss": 3.1, "sop_acc": 0.8}


def test_demo_does_not_say_its_fewest_steps_fit_when_they_do_not(monkeypatch, tmp_path, capsys):
    """On a busy 2-core machine `make demo` printed "5.07 s/step here, so 100 steps of 32 sequences fit 7.01 min":
    100 steps at 5.07 s are 8.5 min (100 is the fewest the demo trains), and the time budget then stopped the run
    at step 69. The line now says how long the fewest steps take."""
    _, printed, _ = _run_demo(monkeypatch, tmp_path, capsys, 6.0, [EVAL_AT_7])
    line = next(line for line in printed.splitlines() if "4/6 pretraining" in line)
    assert "100 steps of 32 sequences fit" not in line
    assert "100 of 32 sequences, take about 10.0 min, over the 7.5 min" in line


def test_demo_still_says_the_steps_fit_where_they_do(monkeypatch, tmp_path, capsys):
    _, printed, _ = _run_demo(monkeypatch, tmp_path, capsys, 0.5, [EVAL_AT_7])
    assert "0.50 s/step here, so 900 steps of 32 sequences fit 7.5 min" in printed


def test_demo_takes_the_final_evaluation_from_the_run_instead_of_repeating_it(monkeypatch, tmp_path, capsys):
    """Stage 5 evaluated the final checkpoint on the held-out data again, though pretraining had just evaluated
    that checkpoint on all of that data (the same numbers to the last digit): on a busy machine 16-60 s of a
    demo that ran 10.9 of its "about 10" minutes. The run's record of its last step is used now."""
    summary, _, evaluated = _run_demo(monkeypatch, tmp_path, capsys, 0.5, [EVAL_AT_7])
    assert evaluated == []
    assert (summary["mlm_accuracy"], summary["mlm_loss"], summary["sop_accuracy"]) == (0.31, 2.5, 0.8)


def test_demo_evaluates_the_final_checkpoint_when_the_run_recorded_no_evaluation_there(monkeypatch, tmp_path, capsys):
    earlier = dict(EVAL_AT_7, step=5)
    summary, _, evaluated = _run_demo(monkeypatch, tmp_path, capsys, 0.5, [earlier])
    assert evaluated == ["step_00000007"]
    assert summary["mlm_accuracy"] == 0.5


def test_readme_sample_demo_line_agrees_with_the_demos_arithmetic():
    """README's sample line 4 read "[   9.8s] ... fit 7.5 min (...; stopped at 9.07 min if slower)", but 9.8 s
    into the demo its stop is 10 - 9.8/60 - 0.75 = 9.09 min (the line is printed after the numbers are taken)."""
    from albertlm.demo import FULL, steps_for, training_minutes

    match = re.search(r"\[\s*([\d.]+)s\] 4/6 pretraining .*?: ([\d.]+) s/step here, so (\d+) steps of (\d+) "
                      r"sequences fit ([\d.]+) min \(.*?stopped at ([\d.]+) min if slower\)", README)
    assert match, "README's sample demo output has no stage-4 line"
    elapsed, seconds, steps, batch, fitted, stop = (float(g) for g in match.groups())
    assert (fitted, stop) == training_minutes(FULL, elapsed)
    assert steps == steps_for(FULL, fitted, seconds) and batch == FULL.batch_size


# --------------------------------------------------------------------------------------- README commands
def _readme_commands() -> list[tuple[str, list[str]]]:
    """Every `albertlm <command> ...` of README's bash blocks (line continuations joined, comments dropped,
    pipelines and `;` lists split) as (the line it came from, its words after `albertlm`)."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in words + [";"]:
                if word in (";", "|", "&&"):
                    if command[:1] == ["albertlm"]:
                        found.append((line.strip(), command[1:]))
                    command = []
                else:
                    command.append(word)
    return found


def test_every_albertlm_command_in_the_readme_parses_with_its_options():
    """README's commands are what a new user types first: each is parsed by the command's own parser (nothing
    runs), so an option renamed or dropped in the CLI fails here, not in the user's shell."""
    from albertlm.cli.main import COMMANDS, Parser, _module_for

    commands = _readme_commands()
    assert len(commands) >= 25
    assert {words[0] for _, words in commands} >= {"tokenizer", "data", "pretrain", "evaluate", "finetune",
                                                   "convert", "fill-mask", "embed", "export", "params", "ablate"}
    refused = []
    for line, (name, *rest) in commands:
        if "..." in rest:                              # "--model ... --out ...": placeholders, not values
            rest = [word if word != "..." else "x" for word in rest]
        assert name in COMMANDS, line
        module = importlib.import_module(_module_for(name, rest))
        parser = Parser(prog=f"albertlm {name}")
        module.add_arguments(parser, name)
        try:
            parser.parse_args(rest)
        except SystemExit:
            refused.append(line)
    assert not refused, refused

