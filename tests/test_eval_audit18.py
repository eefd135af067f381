"""Audit 18 of what a user does after training: `albertlm plot` of a fine-tuning run, `albertlm evaluate` on data
longer than the model's positions, and the benchmark scripts' bad arguments and output (no timing asserted)."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from conftest import assert_one_error
from test_benchmarks_audit14 import load, refused_before_work   # a benchmark script as a module


def write_metrics(run, records: list[dict]) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def plotted_labels(monkeypatch, run) -> dict[str, list[str]]:
    """{panel title: legend labels} of the figure `plot_run` saves."""
    from matplotlib.figure import Figure

    from albertlm.training.plots import plot_run

    seen = {}
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        seen.update({ax.get_title(): ax.get_legend_handles_labels()[1] for ax in fig.axes})
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    plot_run(run)
    return seen


def test_plot_keeps_counts_and_thresholds_off_the_accuracy_panel(tmp_path, monkeypatch):
    """A RACE run logs dev/num_middle (1,436 questions on the real dev set) and a SQuAD v2 run dev/total,
    dev/HasAns_total, dev/missing and its null-odds thresholds beside the scores: all of them were drawn on the
    accuracy panel, whose axis then ran to 1,436 and flattened every accuracy to a line along 0."""
    race, squad = tmp_path / "race", tmp_path / "squad"
    write_metrics(race, [{"step": s, "split": "eval", "dev/accuracy": 0.3 + s / 100, "dev/accuracy_middle": 0.3,
                          "dev/num_middle": 1436.0} for s in (2, 4)] + [{"step": 4, "split": "train", "loss": 1.3}])
    write_metrics(squad, [{"step": s, "split": "eval", "dev/exact": 50.0, "dev/f1": 55.0 + s, "dev/total": 11873.0,
                           "dev/HasAns_exact": 40.0, "dev/HasAns_total": 5928.0, "dev/NoAns_total": 5945.0,
                           "dev/missing": 0.0, "dev/null_threshold": -2.5, "dev/best_exact": 51.0,
                           "dev/best_exact_thresh": -3.0, "dev/best_f1_thresh": -2.5} for s in (2, 4)])
    assert plotted_labels(monkeypatch, race)["accuracy"] == ["eval dev/accuracy", "eval dev/accuracy_middle"]
    assert plotted_labels(monkeypatch, squad)["accuracy"] == [
        "eval dev/HasAns_exact", "eval dev/best_exact", "eval dev/exact", "eval dev/f1"]


def test_evaluate_names_the_data_when_its_sequences_outrun_the_positions(tmp_path, capsys, shared):
    """Data built with --max-seq-length 80 for a model of 64 positions failed at the first batch with the
    model's advice for raw text ("truncate them, or split them into windows"), which built data cannot take;
    now it is refused before any batch, naming --data and the --max-seq-length to rebuild it with."""
    from albertlm.cli.main import main
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining
    from conftest import alice_documents

    text = alice_documents(tmp_path, 60)
    spm = shared("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(tmp_path / "data"),
                 "--max-seq-length", "80", "--dupe-factor", "1", "--no-progress"]) == 0
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=16, max_position_embeddings=64)).save_pretrained(tmp_path / "model")
    capsys.readouterr()
    code = main(["evaluate", str(tmp_path / "model"), "--data", str(tmp_path / "data"), "--no-progress"])
    assert_one_error(capsys, code, "--data", "80 tokens", "max_position_embeddings=64", "--max-seq-length 64")


@pytest.mark.parametrize("script, argv, phrase", [
    ("model_speed", ["--device", "cuda"], "--device cuda"),          # torch's "not compiled with CUDA" traceback
    ("model_speed", ["--device", "tpu"], "--device 'tpu'"),          # torch's "Expected one of cpu, ..."
    ("model_speed", ["--rows", "8x"], "--rows"),                     # int('') ValueError
    ("model_speed", ["--rows", "0x16"], "--rows"),                   # an empty torch.stack
    ("model_speed", ["--rows", "2x1024"], "--rows"),                 # past albert-base's 512 positions
    ("model_speed", ["--reps", "0"], "--reps"),                      # timed nothing
    ("model_speed", ["--modes", "infer", "--infer-reps", "0"], "--infer-reps"),
    ("model_speed", ["--preset", "albert-huge"], "--preset"),        # a ConfigError traceback
    ("model_speed", ["--threads", "-1"], "--threads"),
    ("train_speed", ["--device", "cuda"], "--device cuda"),
    ("train_speed", ["--rows", "2x4"], "--rows"),                    # shorter than the data builder's 8
    ("train_speed", ["--rows", "abc"], "--rows"),
    ("attention_speed", ["--shape", "32x512"], "--shape"),           # refused as "needs a GPU" here, a traceback there
    ("attention_speed", ["--real", "half"], "--real"),
    ("attention_speed", ["--reps", "0"], "--reps"),
    ("finetune_speed", ["--steps", "0"], "--steps"),                 # modulo by zero after reading SST-2
    ("finetune_speed", ["--batch-size", "0"], "--batch-size"),       # range() step zero
    ("onnx_speed", ["--reps", "0"], "--reps"),                       # median of nothing, after the export
    ("onnx_speed", ["--batch", "0"], "--batch"),
    ("onnx_speed", ["--length", "4096"], "--length"),
    ("data_speed", ["--dupe-factor", "0"], "--dupe-factor"),         # refused by a build, minutes in
])
def test_benchmarks_refuse_bad_arguments_in_one_line(script, argv, phrase, monkeypatch, capsys):
    """Each refused before any model, data or timing: the one error line names the option."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = refused_before_work(script, argv, ("build_models", "load_features", "speed", "format_speeds", "bench_row",
                                              "kernels"), monkeypatch, capsys)
    assert phrase in line, line


def test_train_speed_prints_only_its_table(tmp_path, capsys):
    """Since the loop prints each training record and a summary where there is no terminal, every timed
    chunk of our loop wrote "step 1/2 train: ..." and a five-line summary between the table's rows."""
    from albertlm.config.presets import get_preset
    from train_fixtures import alice_sop_data

    pytest.importorskip("transformers")
    train_speed = load("train_speed")
    data = alice_sop_data(tmp_path, lines=60)
    cfg = get_preset("albert-tiny")
    ours, _ = train_speed.build_models(cfg)
    loop = train_speed.our_loop(cfg, ours, data, tmp_path / "run", 2, "fp32", torch.device("cpu"))
    capsys.readouterr()
    times, waits = train_speed.run_ours_chunk(loop, tmp_path / "run", 2)
    assert len(times) == 1 and len(waits) == 1
    assert capsys.readouterr().out == ""
