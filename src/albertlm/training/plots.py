"""`albertlm plot RUN_DIR [RUN_DIR ...]`: PNG curves of losses, accuracies, learning rate and throughput
(matplotlib Agg), for pretraining and fine-tuning runs alike (both write metrics.jsonl through
`metrics.MetricsLogger`), of one run or several in one figure."""
from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from pathlib import Path
from typing import Sequence

from albertlm.errors import UserError
from albertlm.training.metrics import lr_points, read_metrics

PANELS = [  # (title, [(split, key, label)]). Pretraining logs the sentence head's numbers as sop_* whatever its
    # data's task ("SOP/NSP"); nsp_* (the name `albertlm evaluate` gives NSP numbers) is drawn as NSP
    ("loss", [("train", "loss", "train total"), ("train", "mlm_loss", "train MLM"),
              ("train", "sop_loss", "train SOP/NSP"), ("train", "nsp_loss", "train NSP"),
              ("eval", "mlm_loss", "eval MLM"), ("eval", "sop_loss", "eval SOP/NSP"),
              ("eval", "nsp_loss", "eval NSP")]),
    ("accuracy", [("train", "mlm_acc", "train MLM"), ("train", "sop_acc", "train SOP/NSP"),
                  ("train", "nsp_acc", "train NSP"), ("eval", "mlm_acc", "eval MLM"),
                  ("eval", "sop_acc", "eval SOP/NSP"), ("eval", "nsp_acc", "eval NSP")]),
    ("learning rate", [("train", "lr", "lr")]),
    ("throughput (tokens/s)", [("train", "tokens_per_s", "tokens/s")]),
]

# fine-tuning's dev numbers that are not scores, by the name after the eval set's ("dev/num_middle"): counts
# (SQuAD's total, HasAns_total and missing, RACE's num_middle) and SQuAD's null-odds thresholds. On the accuracy
# panel a count of 1,436 questions flattened every accuracy to a line along 0.
NOT_A_SCORE = re.compile(r"(^|_)(total|missing|count|strict)$|^num_|thresh")


def plot_run(run_dir: str | Path | Sequence[str | Path], out: str | Path | None = None) -> Path:
    """A 2x2 figure of a run's metrics.jsonl (`run_dir`, or that file itself): losses, accuracies (a fine-tuning
    run's dev metrics join them), learning rate and speed, by step. Written to `out` (its suffix picks the format:
    .png, .pdf, .svg) or RUN/curves.png; returns the path. A UserError when the run has no metrics or the image
    cannot be written.

    `run_dir` may be several runs (a list): one figure with the same panels, a colour per run (a legend of the runs
    above the panels, named by their folders, with as many parent folders as it takes to tell two apart), a line
    style per curve; a curve a run lacks (another run's evaluation, an older run's lr) is drawn for the runs that
    have it, said in one line. Several runs need `out`: no run's folder is the comparison's.

    The learning rate is drawn through the training records' lr and the rates they keep of the steps where the
    schedule bends (`loop.Plan.lr_knots`, `metrics.LR_AT`): with --log-every at or above the warmup steps, the
    records' own lr skipped the warmup."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    given = [run_dir] if isinstance(run_dir, (str, os.PathLike)) else list(run_dir)
    if not given:
        raise UserError("no run directory given")
    several = len(given) > 1
    if several and not out:
        raise UserError(f"{len(given)} runs make one figure: name its file with --out (e.g. --out compare.png); "
                        "a run's own curves.png is `albertlm plot RUN_DIR` alone")
    runs = [_read_run(d) for d in given]
    _refuse_a_run_twice(runs)
    named = {key for _, series in PANELS for split, key, _ in series if split == "eval"}
    task_metrics = sorted({k for _, _, records in runs for r in records if r["split"] == "eval" for k in r
                           if "/" in k and k not in named and is_score(k, 0.0 if r[k] is None else r[k])})
    panels = [(title, series + [("eval", k, f"eval {k}") for k in task_metrics] if title == "accuracy" else series)
              for title, series in PANELS]   # fine-tuning's dev metrics ("dev/accuracy") join the accuracy panel
    raws, drawns = [], []
    for _, path, records in runs:
        raw = [[(label, split, series_points(records, split, key)) for split, key, label in series]
               for _, series in panels]
        # a curve of NaN numbers alone draws nothing (`say_not_finite` says so)
        drawn = [[(label, split, points if any(not math.isnan(y) for _, y in points) else [])
                  for label, split, points in lines] for lines in raw]
        if not any(points for lines in drawn for _, _, points in lines):
            # only the run's summary (a run with --log-every 0 and no --eval-data) or compile records: the image
            # was four empty panels, written without a word
            kinds = ", ".join(sorted({str(r["split"]) for r in records}))
            raise UserError(f"{path} holds no training or evaluation numbers to draw (only {kinds} records: a run "
                            "with --log-every 0 logs no training records)")
        raws.append(raw)
        drawns.append(drawn)
    default = not out
    out = Path(out) if out else Path(runs[0][0]) / "curves.png"
    image_format = check_image_path(out)
    for (_, path, _), raw in zip(runs, raws):
        say_not_finite(path, [(label, points) for lines in raw for label, _, points in lines])
    names = run_names([run for run, _, _ in runs])
    if several:
        say_lacking(names, [title for title, _ in panels], raws)
    # `plot .` titled the figure with the run's folder, not ""
    title = names[0] if not several else " vs ".join(names) if len(" vs ".join(names)) <= 90 else f"{len(names)} runs"
    texts = Texts([title, *names] + [label for drawn in drawns for lines in drawn for label, _, points in lines
                                     if points])
    with plt.rc_context(texts.rc):
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5 if not several else 8.0))
        try:
            for p, (ax, (panel, _)) in enumerate(zip(axes.flat, panels)):
                # the curves any run draws, in the panel's order: one line style each (several runs)
                kinds = [(label, split) for j, (label, split, _) in enumerate(drawns[0][p])
                         if any(drawn[p][j][2] for drawn in drawns)]
                for r, drawn in enumerate(drawns):
                    for label, split, points in drawn[p]:
                        if not points:
                            continue
                        xs, ys = zip(*points)
                        # a lone point (a short run logs training once) is a line of no length, and so is a
                        # finite point between NaN ones (null in metrics.jsonl): drawn as markers
                        lone = len(xs) == 1 or any(math.isnan(y) for y in ys)
                        marker = "o" if split == "eval" or lone else None
                        if several:
                            ax.plot(xs, ys, marker=marker, markersize=3, color=f"C{r % 10}",
                                    linestyle=LINE_STYLES[kinds.index((label, split)) % len(LINE_STYLES)],
                                    label=f"{texts[names[r]]}: {texts[label]}")
                        else:
                            ax.plot(xs, ys, marker=marker, markersize=3, label=texts[label])
                ax.set_title(panel)
                ax.set_xlabel("step")
                ax.grid(alpha=0.3)
                if ax.lines and several:     # the curves by line style here; the runs by colour above
                    from matplotlib.lines import Line2D

                    ax.legend(handles=[Line2D([], [], color="0.3", marker="o" if split == "eval" else None,
                                              markersize=3, linestyle=LINE_STYLES[k % len(LINE_STYLES)],
                                              label=texts[label]) for k, (label, split) in enumerate(kinds)],
                              fontsize=8)
                elif ax.lines:
                    ax.legend(fontsize=8)
            fig.suptitle(texts[title])
            top = 1.0
            if several:
                from matplotlib.lines import Line2D

                columns = min(len(names), 4)
                rows = math.ceil(len(names) / columns)
                top = 0.96 - 0.03 * rows
                fig.legend(handles=[Line2D([], [], color=f"C{r % 10}", label=texts[name])
                                    for r, name in enumerate(names)],
                           loc="upper center", bbox_to_anchor=(0.5, 0.955), ncol=columns, fontsize=9,
                           frameon=False)
            texts.say_missing()
            save_figure(fig, out, image_format, default, top=top)
        finally:
            plt.close(fig)
    return out


# the line style of each curve of a panel when several runs share it (a colour per run)
LINE_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2))]


def _read_run(run_dir: str | Path) -> tuple[Path, Path, list[dict]]:
    """(the run's directory, its metrics.jsonl, its records); a UserError when it has none."""
    if Path(run_dir).is_file() and Path(run_dir).name == "metrics.jsonl":   # the file named instead of its run
        run_dir = Path(run_dir).parent
    records = read_metrics(run_dir)
    path = Path(run_dir) / "metrics.jsonl"
    if not records:
        if path.is_file():   # a run killed before its first record (or while writing it): not a missing file
            raise UserError(f"{path} holds no record yet (a run writes one every --log-every steps and at each "
                            "evaluation; a half-written last line is skipped)")
        raise UserError(f"no metrics in {run_dir} (expected {path})")
    return Path(run_dir), path, records


def _refuse_a_run_twice(runs: list[tuple[Path, Path, list[dict]]]) -> None:
    """A UserError when two of `runs` are the same directory (its curves would be drawn twice, in two colours)."""
    seen: dict[Path, Path] = {}
    for run, _, _ in runs:
        if run.resolve() in seen:
            same = seen[run.resolve()]
            twice = f"{run} is given twice" if str(same) == str(run) else f"{same} and {run} are the same run"
            raise UserError(f"{twice}: give each run once")
        seen[run.resolve()] = run


def series_points(records: list[dict], split: str, key: str) -> list[tuple[int, float]]:
    """(step, number) of `key` in the `split` records, by step; the training lr with the rates a record keeps of
    its window's steps where the schedule bends (`metrics.lr_points`: the warmup, which records logged less often
    than it skipped)."""
    if (split, key) != ("train", "lr"):
        return [(r["step"], finite_or_nan(r[key])) for r in records if r["split"] == split and key in r]
    points = {step: finite_or_nan(lr) for r in records if r["split"] == split for step, lr in lr_points(r)}
    return sorted(points.items())


def run_names(runs: list[Path]) -> list[str]:
    """Each run's folder name (`.` is the current folder's), with as many of its parent folders as it takes to tell
    it from another run of the same name (runs/lr1e-3/base and runs/lr2e-3/base: lr1e-3/base and lr2e-3/base)."""
    parts = [run.resolve().parts for run in runs]
    depth = [1] * len(runs)
    while True:
        names = [str(Path(*p[-k:])) if p else "/" for p, k in zip(parts, depth)]
        clashing = [i for i, name in enumerate(names) if names.count(name) > 1 and depth[i] < len(parts[i])]
        if not clashing:
            return names
        for i in clashing:
            depth[i] += 1


def say_lacking(names: list[str], titles: list[str], raws: list) -> None:
    """One warning line naming, for each run, the curves another run has and it lacks (no record holds the
    number: an evaluation it did not run, an older run's fields), which its panels draw without it."""
    parts = []
    for name, raw in zip(names, raws):
        lacking: list[str] = []
        for p, title in enumerate(titles):
            lacking += [f"{label} ({title})" for j, (label, _, points) in enumerate(raw[p])
                        if not points and any(other[p][j][2] for other in raws)]
        if lacking:
            parts.append(f"{name} has no {', '.join(lacking)}")
    if parts:
        from albertlm.errors import say_warning

        say_warning("not every run has every curve: " + "; ".join(parts) + " (drawn for the runs that have them)")


def save_figure(fig, out: Path, image_format: str, default: bool, top: float = 1.0) -> None:
    """`fig` to `out`, through a temporary file and a rename (never a half-written image under its name); a failed
    write is one line naming `out` (and `--out` where `out` was the default). The panels fill the figure up to
    `top` (a fraction of its height: the legend of several runs is above)."""
    with warnings.catch_warnings():     # a glyph no font has: said once (`Texts`), not twice per drawing of it
        warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
        if top < 1.0:
            fig.tight_layout(rect=(0, 0, 1, top))
        else:
            fig.tight_layout()
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
            fig.savefig(tmp, dpi=110, format=image_format)
        os.replace(tmp, out)
    except OSError as exc:
        # on a read-only file system removing the temporary file fails too (EROFS, not "no such file"): that
        # second error named the temporary file instead of the image
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        elsewhere = "; pass --out FILE to draw the curves elsewhere" if default else ""
        raise UserError(f"{out}: cannot write ({exc.strerror or exc}){elsewhere}") from None


def finite_or_nan(value) -> float:
    """A record's number as drawn: NaN for null (how metrics.jsonl writes a NaN or infinite number), a NaN or an
    infinity (an older file's literals), which leave a gap in the curve (`say_not_finite` says where)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return math.nan
    return float(value)


def say_not_finite(path: Path, series: list[tuple[str, list[tuple[int, float]]]]) -> None:
    """One warning line naming the curves with NaN or infinite numbers (null in metrics.jsonl) and their steps: they
    were drawn as gaps without a word, and a curve whose every number was NaN was left out of its panel silently."""
    parts = []
    for label, points in series:
        steps = [step for step, y in points if math.isnan(y)]
        if steps:
            more = f" and {len(steps) - 3} more" if len(steps) > 3 else ""
            shown = ", ".join(str(step) for step in steps[:3]) + more
            every = " (every record: not drawn)" if len(steps) == len(points) else ""
            parts.append(f"{label} at step{'s' if len(steps) > 1 else ''} {shown}{every}")
    if parts:
        from albertlm.errors import say_warning

        say_warning(f"{path}: NaN or infinite numbers (null) in " + "; ".join(parts) + ": gaps in the curves")


# fonts that draw scripts DejaVu Sans (matplotlib's default) lacks, tried in this order where installed
FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR", "Source Han Sans",
                  "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "Noto Sans",
                  "Noto Sans Devanagari",
                  "Noto Sans Bengali", "Noto Sans Arabic", "Noto Sans Hebrew", "Noto Sans Thai", "Arial Unicode MS",
                  "Unifont")


class Texts:
    """The figure's own texts (the run's folder name, legend labels such as a dev set's name) as they can be drawn.
    matplotlib's default font has no CJK, Indic or Thai glyphs: a run named 运行 was titled with empty boxes and
    two warning lines per character (`Glyph 36816 ... missing from font(s) DejaVu Sans`). Installed fonts that
    draw them (`FALLBACK_FONTS`) are added behind the default one; a character no installed font draws keeps its
    place in the text (an empty box in the image; the text of an SVG or PDF stays the name) and is said once
    (`say_missing`), matplotlib's own warnings about it silenced (`save_figure`)."""

    def __init__(self, texts: list[str]) -> None:
        chars = {c for text in texts for c in text if not c.isascii()}
        covered = covered_chars(chars)
        # in the order they are written
        self._missing = list(dict.fromkeys(c for text in texts for c in text if c in chars - covered))
        self._missing_set = set(self._missing)
        # matplotlib's rc for the figure (`plt.rc_context`): the caller's own settings are left as they were
        self.rc = {"font.family": font_chain(chars)} if chars else {}

    def __getitem__(self, text: str) -> str:
        return text

    def say_missing(self) -> None:
        if self._missing:
            from albertlm.errors import say_warning

            say_warning(f"no installed font draws {''.join(self._missing[:12])}"
                        f"{'...' if len(self._missing) > 12 else ''} (in the run's name or a legend): drawn as empty boxes; "
                        "a font that covers them (e.g. Noto Sans CJK, fonts-noto-cjk) draws them")


def _fonts() -> list[tuple[str, str]]:
    """(family, file) of matplotlib's default font and the installed `FALLBACK_FONTS`, in that order."""
    from matplotlib import font_manager

    default = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"), fallback_to_default=True)
    installed = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    return [("DejaVu Sans", default)] + [(name, installed[name]) for name in FALLBACK_FONTS if name in installed]


def _charmap(fname: str) -> set[int]:
    from matplotlib.ft2font import FT2Font

    try:
        return set(FT2Font(fname).get_charmap())
    except (OSError, RuntimeError, ValueError):     # a font file matplotlib cannot read: no help
        return set()


def covered_chars(chars: set[str]) -> set[str]:
    """The characters of `chars` some font of `_fonts()` draws."""
    codes = set()
    for _, fname in _fonts():
        codes |= _charmap(fname) & {ord(c) for c in chars}
    return {c for c in chars if ord(c) in codes}


def font_chain(chars: set[str]) -> list[str]:
    """matplotlib's font.family: the default font, then each installed fallback that draws one of `chars` it lacks
    (matplotlib >= 3.6 takes a glyph from the first family in the list that has it)."""
    chain, seen = [], set()
    wanted = {ord(c) for c in chars}
    for name, fname in _fonts():
        drawn = _charmap(fname) & wanted
        if not chain or drawn - seen:
            chain.append(name)
            seen |= drawn
    return chain


def is_score(key: str, value) -> bool:
    """Whether a fine-tuning evaluation's `key` ("dev/accuracy", "dev/f1") is a score to draw on the accuracy
    panel: a number that is not a count or a threshold (`NOT_A_SCORE`)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and not NOT_A_SCORE.search(key.rsplit("/", 1)[-1]))


def check_image_path(out: Path) -> str:
    """The image format `out`'s extension names (png, pdf, svg, ...): before, a name without one was written as
    NAME.png while NAME was printed, an unknown one was a traceback, and a directory became DIR.png."""
    from matplotlib.backend_bases import FigureCanvasBase

    supported = sorted(FigureCanvasBase.get_supported_filetypes())
    if out.is_dir():
        raise UserError(f"--out {out} is a directory; give an image file name, e.g. {out / 'curves.png'}")
    image_format = out.suffix[1:].lower()
    if image_format not in supported:
        raise UserError(f"--out {out}: the file name must end in an image format's extension "
                        f"({', '.join('.' + f for f in supported)}), e.g. .png")
    if not out.parent.is_dir():
        raise UserError(f"--out {out}: the directory {out.parent} does not exist")
    return image_format
