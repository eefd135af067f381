"""`make demo` in its one-minute form, then the CLI (`pretrain`, `--resume`, `evaluate`, `plot`) on its data."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main as cli


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    from albertlm.demo import main as demo

    out = tmp_path_factory.mktemp("demo")
    assert demo(["--quick", "--out", str(out)]) == 0
    return out


def test_quick_demo_writes_everything(demo_dir):
    summary = json.loads((demo_dir / "summary.json").read_text())
    assert 1 <= summary["steps"] <= 10          # fewer only if the time budget ran out on a busy machine
    assert 0 <= summary["mlm_accuracy"] <= 1 and 0 <= summary["unigram_baseline_accuracy"] <= 1
    assert (demo_dir / "run" / "curves.png").stat().st_size > 10_000
    assert (demo_dir / "tokenizer" / "spiece.model").is_file()
    lines = (demo_dir / "run" / "metrics.jsonl").read_text().splitlines()
    assert any('"split": "eval"' in line for line in lines)


def test_cli_pretrain_resume_evaluate_plot(demo_dir, tmp_path, capsys):
    data = demo_dir / "data"
    run = tmp_path / "run"
    args = ["pretrain", "--preset", "albert-tiny", "--data", str(data / "train"), "--eval-data", str(data / "heldout"),
            "--out", str(run), "--batch-size", "8", "--micro-batch-size", "4", "--lr", "0.01", "--warmup-steps", "1",
            "--save-every", "2", "--eval-every", "2", "--log-every", "1", "--model.hidden_size=32",
            "--model.num_heads", "2", "--model.max_position_embeddings=64", "--train.progress=false"]
    assert cli(args + ["--max-steps", "2"]) == 0
    saved = json.loads((run / "run_config.json").read_text())
    assert saved["model"]["hidden_size"] == 32 and saved["model"]["vocab_size"] == 2000   # follows the data
    assert saved["train"]["micro_batch_size"] == 4 and saved["optim"]["lr"] == 0.01
    assert cli(["pretrain", "--out", str(run), "--resume", "--max-steps", "3", "--train.progress=false"]) == 0
    assert (run / "checkpoints" / "step_00000003").is_dir()
    capsys.readouterr()
    assert cli(["evaluate", str(run), "--data", str(data / "heldout"), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert {"mlm_loss", "mlm_acc", "sop_acc", "sentence_task"} <= set(metrics)
    assert cli(["plot", str(run)]) == 0 and (run / "curves.png").is_file()


def test_dynamic_masking_changes_masks_between_epochs(demo_dir):
    from albertlm.training.pretrain import open_dataset

    def positions(dynamic: bool, epoch: int) -> list:
        items = open_dataset(demo_dir / "data" / "train", dynamic, seed=0)
        return [items[(epoch, i)]["masked_lm_positions"].tolist() for i in range(20)]

    assert positions(True, 0) != positions(True, 1)
    assert positions(True, 1) == positions(True, 1)
    assert positions(False, 0) == positions(False, 1)


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert cli(["pretrain", "--out", str(tmp_path), "--optim.weight_decay=abc"]) == 2
    assert "optim.weight_decay" in capsys.readouterr().err
    assert cli(["pretrain", "--out", str(tmp_path), "--data", str(tmp_path / "missing")]) == 2
    assert "not a data directory" in capsys.readouterr().err
    assert cli(["pretrain", "--out", str(tmp_path), "--batch-size", "6", "--micro-batch-size", "4",
                "--dry-run"]) == 2


def test_demo_refuses_an_out_with_other_files(tmp_path, capsys):
    """The demo replaces its run/ in --out: a directory holding anything but an earlier demo's is refused."""
    from albertlm.demo import main as demo_main

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("precious")
    (tmp_path / "notes.md").write_text("mine")
    assert demo_main(["--out", str(tmp_path), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("albertlm demo: error: --out") and err.count("\n") == 1
    assert (tmp_path / "run" / "mine.txt").read_text() == "precious"
