"""`albertlm plot RUN_DIR`: PNG curves of losses, accuracies, learning rate and throughput (matplotlib Agg),
for pretraining and fine-tuning runs alike (both write metrics.jsonl through `metrics.MetricsLogger`)."""
from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from pathlib import Path

from albertlm.errors import UserError
from albertlm.training.metrics import read_metrics

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


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """A 2x2 figure of a run's metrics.jsonl (`run_dir`, or that file itself): losses, accuracies (a fine-tuning
    run's dev metrics join them), learning rate and speed, by step. Written to `out` (its suffix picks the format:
    .png, .pdf, .svg) or RUN/curves.png; returns the path. A UserError when the run has no metrics or the image
    cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if Path(run_dir).is_file() and Path(run_dir).name == "metrics.jsonl":   # the file named instead of its run
        run_dir = Path(run_dir).parent
    records = read_metrics(run_dir)
    path = Path(run_dir) / "metrics.jsonl"
    if not records:
        if path.is_file():   # a run killed before its first record (or while writing it): not a missing file
            raise UserError(f"{path} holds no record yet (a run writes one every --log-every steps and at each "
                            "evaluation; a half-written last line is skipped)")
        raise UserError(f"no metrics in {run_dir} (expected {path})")
    named = {key for _, series in PANELS for split, key, _ in series if split == "eval"}
    task_metrics = sorted({k for r in records if r["split"] == "eval" for k in r
                           if "/" in k and k not in named and is_score(k, 0.0 if r[k] is None else r[k])})
    panels = [(title, series + [("eval", k, f"eval {k}") for k in task_metrics] if title == "accuracy" else series)
              for title, series in PANELS]   # fine-tuning's dev metrics ("dev/accuracy") join the accuracy panel
    raw = [[(label, split, [(r["step"], finite_or_nan(r[key])) for r in records if r["split"] == split and key in r])
            for split, key, label in series] for _, series in panels]
    # a curve of NaN numbers alone draws nothing (`say_not_finite` says so)
    drawn = [[(label, split, points if any(not math.isnan(y) for _, y in points) else [])
              for label, split, points in lines] for lines in raw]
    if not any(points for lines in drawn for _, _, points in lines):
        # only the run's summary (a run with --log-every 0 and no --eval-data) or compile records: the image was
        # four empty panels, written without a word
        kinds = ", ".join(sorted({str(r["split"]) for r in records}))
        raise UserError(f"{path} holds no training or evaluation numbers to draw (only {kinds} records: a run "
                        "with --log-every 0 logs no training records)")
    default = not out
    out = Path(out) if out else Path(run_dir) / "curves.png"
    image_format = check_image_path(out)
    say_not_finite(path, [(label, points) for lines in raw for label, _, points in lines])
    name = Path(run_dir).resolve().name     # `plot .` titled the figure with the run's folder, not ""
    texts = Texts([name] + [label for lines in drawn for label, _, points in lines if points])
    with plt.rc_context(texts.rc):
        fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
        try:
            for ax, (title, _), lines in zip(axes.flat, panels, drawn):
                for label, split, points in lines:
                    if points:
                        xs, ys = zip(*points)
                        # a lone point (a short run logs training once) is a line of no length, and so is a
                        # finite point between NaN ones (null in metrics.jsonl): drawn as markers
                        lone = len(xs) == 1 or any(math.isnan(y) for y in ys)
                        ax.plot(xs, ys, marker="o" if split == "eval" or lone else None, markersize=3,
                                label=texts[label])
                ax.set_title(title)
                ax.set_xlabel("step")
                ax.grid(alpha=0.3)
                if ax.lines:
                    ax.legend(fontsize=8)
            fig.suptitle(texts[name])
            texts.say_missing()
            save_figure(fig, out, image_format, default)
        finally:
            plt.close(fig)
    return out


def save_figure(fig, out: Path, image_format: str, default: bool) -> None:
    """`fig` to `out`, through a temporary file and a rename (never a half-written image under its name); a failed
    write is one line naming `out` (and `--out` where `out` was the default)."""
    with warnings.catch_warnings():     # a glyph no font has: said once (`Texts`), not twice per drawing of it
        warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
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
