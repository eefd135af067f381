"""Audit 30 of what a user watching a long pretrain reads (metrics.jsonl, TensorBoard, the log lines, `albertlm plot`):

- the learning rate of the steps where the schedule bends (the first, the warmup's last and the one after it) is in
  the record of their window (`lr@N`), and in TensorBoard's train/lr at those steps: with --log-every at or above
  the warmup steps every record's lr came after the warmup, and the lr panel of `albertlm plot` showed none; a
  kill and `--resume` still writes the uninterrupted run's records;
- `albertlm plot` takes several runs: one figure, a colour per run named by its folder (parent folders added where two
  names match), the panels of one run, a curve a run lacks said in one line; --out needed, a run given twice refused;
- a run whose stdout alone is a file or a pipe (`> train.log`, `| tee train.log`, the bar on the terminal) writes its
  training lines to it: the log had the evaluations but none of the training numbers.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.training.schedule import lr_at
from conftest import assert_one_error
from test_eval_audit18 import write_metrics
from test_lead_audit24 import _Killed
from test_train_audit16 import _loop, _records


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def lr_points(record: dict) -> list[tuple[int, float]]:
    """(step, lr) a training record gives: its "lr@N" keys' and its own step's."""
    rates = [(int(k[3:]), v) for k, v in record.items() if k.startswith("lr@")]
    return sorted(rates + [(record["step"], record["lr"])])


def _train(run: Path) -> list[dict]:
    """The training records without their timings."""
    return [{k: v for k, v in r.items() if k not in ("time", "tokens_per_s", "data_wait_frac", "window_s")}
            for r in _records(run) if r["split"] == "train"]


# --------------------------------------------------------------- 1. the warmup's learning rate in the records
def test_the_records_keep_the_warmups_learning_rate_when_logged_less_often(tmp_path):
    """tiny_run: lr 0.01, 2 warmup steps; 8 steps logged every 5. The records at 5 and 8 had lr 0.00857 and 0.00143:
    the warmup (0.005 at step 1, 0.01 at step 2) and the decay's start (0.0075 at 3) were in no record. Now the
    record of step 5 has them, and TensorBoard's train/lr has every one of them at its step, equal to the records."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert _loop(tmp_path, max_steps=8, log_every=5, tensorboard=True).run() == "done"
    first, last = [r for r in _records(tmp_path) if r["split"] == "train"]
    rate = [lr_at(step, 0.01, 2, 8) for step in range(8)]          # update k (from 1) has lr_at(k - 1)
    assert lr_points(first) == [(1, rate[0]), (2, rate[1]), (3, rate[2]), (5, rate[4])]
    assert lr_points(last) == [(8, rate[7])]
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("train/lr")] == \
        [(1, rate[0]), (2, rate[1]), (3, rate[2]), (5, rate[4]), (8, rate[7])]
    # every other scalar is its record's number at its record's step, as before
    for record in _records(tmp_path):
        if record["split"] == "train":
            for key in ("loss", "grad_norm", "tokens"):
                assert [e.value for e in events.Scalars(f"train/{key}") if e.step == record["step"]] == \
                    [pytest.approx(record[key])]


def test_the_console_line_leaves_the_warmups_rates_to_the_record(tmp_path, capsys):
    """(The line is the record's numbers; the earlier steps' rates would be three more fields.)"""
    _loop(tmp_path, max_steps=8, log_every=5, progress=False).run()
    lines = [line for line in capsys.readouterr().out.splitlines() if " train: " in line]
    assert len(lines) == 2 and all("lr@" not in line for line in lines), lines


def test_a_kill_in_a_window_holding_the_warmup_resumes_to_the_same_records(tmp_path, monkeypatch):
    """Saved every 2 steps, logged every 5: the step-2 checkpoint keeps the window of steps 1-2 (its warmup rates
    among them); killed at step 4's save, the resumed run writes the uninterrupted run's records."""
    settings = dict(max_steps=8, save_every=2, log_every=5)
    whole = tmp_path / "whole"
    assert _loop(whole, **settings).run() == "done"
    killed = tmp_path / "killed"
    loop = _loop(killed, **settings)
    save = loop.save

    def dies_at_step_4():
        if loop.state.step == 4:
            raise _Killed
        return save()

    monkeypatch.setattr(loop, "save", dies_at_step_4)
    with pytest.raises(_Killed):
        loop.run()
    loop.logger.close()
    assert _loop(killed, resume=True, **settings).run() == "done"
    assert _train(killed) == _train(whole)
    assert [step for step, _ in lr_points(_train(whole)[0])] == [1, 2, 3, 5]


def test_no_rate_is_added_without_a_warmup_inside_the_run(tmp_path):
    """(Passed before.) A warmup as long as the run is one straight line, which the records follow; without one the
    records are as they were."""
    assert _loop(tmp_path / "long", max_steps=2, log_every=2).run() == "done"     # warmup 2 of 2 steps
    assert [lr_points(r) for r in _train(tmp_path / "long")] == [[(2, lr_at(1, 0.01, 2, 2))]]


def _drawn(monkeypatch) -> dict:
    """{"title", "runs": the figure's legend, panel title: [(label, number of points, colour)]} of the next figure."""
    from matplotlib.figure import Figure

    seen: dict = {}
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        seen["title"] = fig._suptitle.get_text()
        seen["runs"] = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
        for ax in fig.axes:
            seen[ax.get_title()] = [(line.get_label(), len(line.get_xdata()), line.get_color()) for line in ax.lines]
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


def test_plot_draws_the_warmup_of_a_run_logged_less_often_than_it(tmp_path, monkeypatch):
    from albertlm.training.plots import plot_run

    assert _loop(tmp_path, max_steps=8, log_every=5).run() == "done"
    seen = _drawn(monkeypatch)
    plot_run(tmp_path)
    assert [(label, points) for label, points, _ in seen["learning rate"]] == [("lr", 5)]     # 1, 2, 3, 5, 8
    assert [(label, points) for label, points, _ in seen["loss"]][0] == ("train total", 2)


# ------------------------------------------------------------------------------ 2. several runs in one figure
def _run(root: Path, lr: float, evaluated: bool) -> Path:
    records = [{"step": s, "split": "train", "loss": 5.0 - s * lr, "mlm_loss": 4.0, "lr": lr, "tokens_per_s": 10.0}
               for s in (10, 20, 30)]
    if evaluated:
        records += [{"step": s, "split": "eval", "mlm_loss": 4.5, "mlm_acc": 0.1} for s in (20, 30)]
    write_metrics(root, records)
    return root


def test_plot_compares_runs_of_the_same_name_in_one_figure(tmp_path, monkeypatch, capsys):
    """Two learning rates, each run in a folder named `base`: one figure, a colour per run, named apart by their
    parent folders; a run without evaluations leaves them off its curves, said in one line. `plot` took one run."""
    a = _run(tmp_path / "lr1e-3" / "base", 1e-3, evaluated=True)
    b = _run(tmp_path / "lr2e-3" / "base", 2e-3, evaluated=False)
    out = tmp_path / "compare.svg"
    seen = _drawn(monkeypatch)
    capsys.readouterr()
    assert main(["plot", str(a), str(b / "metrics.jsonl"), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out) and out.stat().st_size > 1000
    assert seen["runs"] == ["lr1e-3/base", "lr2e-3/base"] and seen["title"] == "lr1e-3/base vs lr2e-3/base"
    loss = seen["loss"]
    assert [label for label, _, _ in loss] == ["lr1e-3/base: train total", "lr1e-3/base: train MLM",
                                              "lr1e-3/base: eval MLM", "lr2e-3/base: train total",
                                              "lr2e-3/base: train MLM"]
    assert len({colour for label, _, colour in loss if label.startswith("lr1e-3")}) == 1
    assert {colour for label, _, colour in loss if label.startswith("lr1e-3")} != \
        {colour for label, _, colour in loss if label.startswith("lr2e-3")}
    assert [label for label, _, _ in seen["learning rate"]] == ["lr1e-3/base: lr", "lr2e-3/base: lr"]
    assert captured.err.splitlines() == [
        "albertlm plot: warning: not every run has every curve: lr2e-3/base has no eval MLM (loss), eval MLM "
        "(accuracy) (drawn for the runs that have them)"]


def test_plot_of_several_runs_needs_out_and_each_run_once(tmp_path, capsys):
    a = _run(tmp_path / "a", 1e-3, evaluated=True)
    b = _run(tmp_path / "b", 1e-3, evaluated=True)
    assert_one_error(capsys, main(["plot", str(a), str(b)]), "2 runs make one figure", "--out")
    assert not (a / "curves.png").exists() and not (b / "curves.png").exists()
    assert_one_error(capsys, main(["plot", str(a), str(b), str(tmp_path / "b" / "metrics.jsonl"), "--out",
                                   str(tmp_path / "c.png")]), f"{b} is given twice", "give each run once")
    assert_one_error(capsys, main(["plot", str(a), str(tmp_path / "none"), "--out", str(tmp_path / "c.png")]),
                     "no metrics in", "none")
    assert not (tmp_path / "c.png").exists()
    assert main(["plot", str(a)]) == 0 and (a / "curves.png").is_file()       # one run: as before


# ------------------------------------------------------------------- 3. training lines in a redirected stdout
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_a_stdout_redirected_to_a_log_gets_the_training_lines_while_the_bar_draws(tmp_path):
    """`albertlm pretrain ... > train.log` in a terminal: the bar drew on stderr (the terminal), and train.log had
    the evaluations and checkpoints but no `step N/M train:` line (the README promises them wherever stdout is not a
    terminal). A pseudo-terminal is stderr here; stdout is a file."""
    script = ("import sys\n"
              "from albertlm.training.metrics import MetricsLogger\n"
              "logger = MetricsLogger(sys.argv[1], max_steps=4, tensorboard=False)\n"
              "assert logger.bar is not None, 'no bar on the terminal'\n"
              "logger.advance(2, 3.0, 100.0)\n"
              "logger.log(2, 'train', {'loss': 3.0, 'lr': 0.001})\n"
              "logger.log(2, 'eval', {'loss': 3.5})\n"
              "logger.close()\n")
    try:
        primary, secondary = os.openpty()
    except OSError as exc:   # a container without /dev/pts, or out of pseudo-terminals
        pytest.skip(f"no pseudo-terminal here: {exc}")
    log = tmp_path / "train.log"
    try:
        with open(log, "w") as stdout:
            done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], stdout=stdout,
                                  stderr=secondary, stdin=subprocess.DEVNULL, timeout=300)
    finally:
        os.close(secondary)
        os.close(primary)
    assert done.returncode == 0
    lines = log.read_text().splitlines()
    assert [line.split(": ")[0] for line in lines] == ["step 2/4 train", "step 2 eval"], lines
