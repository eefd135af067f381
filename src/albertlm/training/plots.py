"""`albertlm plot RUN_DIR`: PNG curves of losses, accuracies, learning rate and throughput (matplotlib Agg),
for pretraining and fine-tuning runs alike (both write metrics.jsonl through `metrics.MetricsLogger`)."""
from __future__ import annotations

from pathlib import Path

from albertlm.errors import UserError
from albertlm.training.metrics import read_metrics

PANELS = [  # (title, [(split, key, label)])
    ("loss", [("train", "loss", "train total"), ("train", "mlm_loss", "train MLM"),
              ("train", "sop_loss", "train SOP/NSP"), ("eval", "mlm_loss", "eval MLM"),
              ("eval", "sop_loss", "eval SOP/NSP")]),
    ("accuracy", [("train", "mlm_acc", "train MLM"), ("train", "sop_acc", "train SOP/NSP"),
                  ("eval", "mlm_acc", "eval MLM"), ("eval", "sop_acc", "eval SOP/NSP")]),
    ("learning rate", [("train", "lr", "lr")]),
    ("throughput (tokens/s)", [("train", "tokens_per_s", "tokens/s")]),
]


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    if not records:
        raise UserError(f"no metrics in {run_dir} (expected {Path(run_dir) / 'metrics.jsonl'})")
    out = Path(out) if out else Path(run_dir) / "curves.png"
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    named = {key for _, series in PANELS for split, key, _ in series if split == "eval"}
    task_metrics = sorted({k for r in records if r["split"] == "eval" for k in r if "/" in k and k not in named})
    panels = [(title, series + [("eval", k, f"eval {k}") for k in task_metrics] if title == "accuracy" else series)
              for title, series in PANELS]   # fine-tuning's dev metrics ("dev/accuracy") join the accuracy panel
    for ax, (title, series) in zip(axes.flat, panels):
        for split, key, label in series:
            points = [(r["step"], r[key]) for r in records if r["split"] == split and key in r]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o" if split == "eval" else None, markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(str(Path(run_dir).name))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
