"""Tools audit 29: what a user watching a long run reads (log lines, metrics.jsonl, `albertlm plot`).

- the log lines' ETA is taken from the pace after the invocation's first step (its compiling and start-up made the
  ETA 13x the time left at step 10 after a 60 s first step, and still 12% high at step 1,000);
- NaN or infinite numbers (null in metrics.jsonl) are said by `plot` in one line naming the curves and steps, a
  finite point between two of them is drawn as a marker, a dev score that was NaN at every evaluation is named
  (it was left off the panel without a word);
- a run named in a script matplotlib's default font lacks (运行) is plotted with one warning line, not two
  `Glyph ... missing` warnings per character; its title keeps the name; the caller's matplotlib settings are kept.
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from albertlm.training import metrics as metrics_module
from albertlm.training.metrics import MetricsLogger
from test_eval_audit18 import write_metrics


def _saved_figure(monkeypatch) -> dict:
    """{"title": the figure's title, panel title: [(label, marker, number of points)]} of the next saved figure."""
    from matplotlib.figure import Figure

    seen: dict = {}
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        seen["title"] = fig._suptitle.get_text() if fig._suptitle is not None else ""
        for ax in fig.axes:
            seen[ax.get_title()] = [(line.get_label(), line.get_marker(), len(line.get_xdata())) for line in ax.lines]
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


# ------------------------------------------------------------------------------- 1. the ETA of the log lines
def test_the_eta_leaves_out_the_first_steps_one_time_costs(tmp_path, monkeypatch):
    """A first step of 60 s (torch.compile, the DataLoader's workers starting) then steps of 0.5 s: at step 10 the
    990 steps left take 8m15s; the line said 1h46m (the running mean over the invocation, first step included)."""
    clock = [1000.0]
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    logger = MetricsLogger(tmp_path, max_steps=1000, tensorboard=False, progress=False)
    try:
        clock[0] += 60.0
        logger.advance(1, 3.0, 100.0)
        assert logger._train_line(1, {"loss": 3.0}).endswith("ETA 16h39m")      # one step: all there is to go on
        for step in range(2, 11):
            clock[0] += 0.5
            logger.advance(step, 3.0, 100.0)
        assert logger._train_line(10, {"loss": 3.0}).endswith("ETA 8m15s")
    finally:
        logger.close()


def test_a_resumed_runs_eta_still_counts_its_own_steps_only(tmp_path, monkeypatch):
    """Resumed at step 90 of 100: its first step (3 s, the start-up) left out, then 4 steps in 8 s: 5 steps
    left take 10 s."""
    clock = [1000.0]
    monkeypatch.setattr(metrics_module, "time", SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    logger = MetricsLogger(tmp_path, max_steps=100, start_step=90, tensorboard=False, progress=False)
    try:
        clock[0] += 3.0
        logger.advance(91, 3.0, 100.0)
        for step in range(92, 96):
            clock[0] += 2.0
            logger.advance(step, 3.0, 100.0)
        assert logger._train_line(95, {"loss": 3.0}).endswith("ETA 10s")
        assert "ETA" not in logger._train_line(100, {"loss": 3.0})
    finally:
        logger.close()


# ------------------------------------------------------------------------------------ 2. NaN in metrics.jsonl
def test_plot_says_where_numbers_are_nan_and_draws_the_points_between(tmp_path, monkeypatch, capsys):
    from albertlm.training.plots import plot_run

    records = [{"step": s, "split": "train", "loss": None if s in (20, 40) else 5.0 - s / 100, "lr": 1e-3,
                "tokens_per_s": 100.0, "grad_norm": None} for s in (10, 20, 30, 40, 50)]
    records += [{"step": s, "split": "eval", "dev/pearson": None, "dev/accuracy": 0.5} for s in (25, 50)]
    write_metrics(tmp_path, records)
    seen = _saved_figure(monkeypatch)
    capsys.readouterr()
    plot_run(tmp_path)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"albertlm: warning: {tmp_path / 'metrics.jsonl'}: NaN or infinite numbers (null) in train total "
                   "at steps 20, 40; eval dev/pearson at steps 25, 50 (every record: not drawn): gaps in the curves"]
    # the lone finite point at step 30 (between the NaN of 20 and 40) is a marker, not a line of no length
    assert seen["loss"] == [("train total", "o", 5)]
    assert [label for label, _, _ in seen["accuracy"]] == ["eval dev/accuracy"]


def test_plot_of_a_finite_run_says_nothing(tmp_path, capsys):
    """(Passed before.) No NaN, no word; grad_norm's null (not drawn) is not said either."""
    from albertlm.training.plots import plot_run

    write_metrics(tmp_path, [{"step": s, "split": "train", "loss": 3.0, "lr": 1e-3, "grad_norm": None}
                             for s in (1, 2)])
    capsys.readouterr()
    plot_run(tmp_path)
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------- 3. a run named in CJK
def test_a_run_named_in_a_script_no_font_draws_is_one_line(tmp_path, monkeypatch, capsys):
    import matplotlib

    from albertlm.training import plots

    monkeypatch.setattr(plots, "FALLBACK_FONTS", (), raising=False)     # as on a machine with DejaVu alone
    run = tmp_path / "运行-été"
    write_metrics(run, [{"step": s, "split": "train", "loss": 3.0 - s / 10, "lr": 1e-3} for s in (1, 2)])
    family = list(matplotlib.rcParams["font.family"])
    seen = _saved_figure(monkeypatch)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.plot_run(run)
    assert [str(w.message) for w in caught if "Glyph" in str(w.message)] == []
    assert seen["title"] == "运行-été"         # the name kept (boxes in the image; an SVG's text stays the name)
    assert capsys.readouterr().err.splitlines() == [
        "albertlm: warning: no installed font draws 运行 (in the run's name or a legend): drawn as empty boxes; a font that "
        "covers them (e.g. Noto Sans CJK, fonts-noto-cjk) draws them"]
    assert list(matplotlib.rcParams["font.family"]) == family      # the caller's settings kept
