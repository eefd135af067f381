"""`albertlm plot RUN_DIR`: PNG curves of losses, accuracies, learning rate and throughput (matplotlib Agg),
for pretraining and fine-tuning runs alike (both write metrics.jsonl through `metrics.MetricsLogger`)."""
from __future__ import annotations

import contextlib
import os
import re
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
                           if "/" in k and k not in named and is_score(k, r[k])})
    panels = [(title, series + [("eval", k, f"eval {k}") for k in task_metrics] if title == "accuracy" else series)
              for title, series in PANELS]   # fine-tuning's dev metrics ("dev/accuracy") join the accuracy panel
    drawn = [[(label, split, [(r["step"], r[key]) for r in records if r["split"] == split and key in r])
              for split, key, label in series] for _, series in panels]
    if not any(points for lines in drawn for _, _, points in lines):
        # only the run's summary (a run with --log-every 0 and no --eval-data) or compile records: the image was
        # four empty panels, written without a word
        kinds = ", ".join(sorted({str(r["split"]) for r in records}))
        raise UserError(f"{path} holds no training or evaluation numbers to draw (only {kinds} records: a run "
                        "with --log-every 0 logs no training records)")
    default = not out
    out = Path(out) if out else Path(run_dir) / "curves.png"
    image_format = check_image_path(out)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (title, _), lines in zip(axes.flat, panels, drawn):
        for label, split, points in lines:
            if points:
                xs, ys = zip(*points)
                # a lone point (a short run logs training once) is a line of no length: drawn as a marker
                ax.plot(xs, ys, marker="o" if split == "eval" or len(xs) == 1 else None, markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(Path(run_dir).resolve().name)     # `plot .` titled the figure with the run's folder, not ""
    fig.tight_layout()
    tmp = out.with_name(f".tmp-{out.name}-{os.getpid()}")   # never a half-written image under its name
    try:
        fig.savefig(tmp, dpi=110, format=image_format)
        os.replace(tmp, out)
    except OSError as exc:
        # on a read-only file system removing the temporary file fails too (EROFS, not "no such file"): that
        # second error named the temporary file instead of the image
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        elsewhere = "; pass --out FILE to draw the curves elsewhere" if default else ""
        raise UserError(f"{out}: cannot write ({exc.strerror or exc}){elsewhere}") from None
    finally:
        plt.close(fig)
    return out


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
