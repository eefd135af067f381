"""`albertlm pretrain` / `evaluate` / `data inspect` refuse what would crash or silently do nothing, before the
run directory changes: eval data of another tokenizer, a resume without a run or past --max-steps, bad seeds
and counts; a resumed run's metrics.jsonl holds each step once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.training.metrics import MetricsLogger
from conftest import assert_one_error, shared_path

TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "4",
        "--train.progress=false", "--train.tensorboard=false", "--train.log_every=1", "--save-every", "0",
        "--eval-every", "2", "--train.eval_batches=1"]


def _build(text: Path, out: Path, tokenizer: Path, length: int = 32) -> Path:
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(tokenizer), "--out", str(out),
                 "--max-seq-length", str(length), "--dupe-factor", "1", "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:300]
    text = root / "a.txt"
    text.write_text("\n".join(lines[:150]) + "\n\n" + "\n".join(lines[150:]) + "\n")
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    return {"train": _build(text, root / "train", spm), "eval": _build(text, root / "eval", spm, 24),
            "zh": _build(text, root / "zh", shared_path("vocab", "albert_zh_vocab.txt"))}



def _pretrain(data, out, *extra):
    return main(["pretrain", "--data", str(data["train"]), "--out", str(out), *TINY, *extra])


def test_eval_data_of_another_tokenizer_is_refused_before_the_run_changes(data, tmp_path, capsys):
    run = tmp_path / "run"
    bad = ["--eval-data", str(data["zh"])]
    assert_one_error(capsys, _pretrain(data, run, "--max-steps", "2", *bad, "--dry-run"), "another tokenizer", "vocab")
    assert_one_error(capsys, _pretrain(data, run, "--max-steps", "2", *bad), "another tokenizer")
    assert not run.exists() or not (run / "run_config.json").exists()
    assert _pretrain(data, run, "--max-steps", "2", "--eval-data", str(data["eval"])) == 0   # shorter: fine
    saved = (run / "run_config.json").read_text()
    capsys.readouterr()
    assert_one_error(capsys, main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4", *bad]), "another tokenizer")
    assert (run / "run_config.json").read_text() == saved


def test_resume_without_a_run_or_past_max_steps_is_an_error(data, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error(capsys, _pretrain(data, empty, "--max-steps", "2", "--resume"), "no run to resume in")
    assert_one_error(capsys, main(["pretrain", "--out", str(tmp_path / "nothing"), "--resume"]), "no run to resume in")
    assert not list(empty.iterdir()) and not (tmp_path / "nothing").exists()
    run = tmp_path / "run"
    assert _pretrain(data, run, "--max-steps", "3") == 0
    saved = (run / "run_config.json").read_text()
    capsys.readouterr()
    assert_one_error(capsys, main(["pretrain", "--out", str(run), "--resume", "--max-steps", "2"]), "already at step 3")
    assert (run / "run_config.json").read_text() == saved


@pytest.mark.parametrize("seed", ["-1", "99999999999999999999", "4294967296"])
def test_bad_seeds_are_one_line_errors(data, tmp_path, capsys, seed):
    assert_one_error(capsys, _pretrain(data, tmp_path / "run", "--max-steps", "2", "--seed", seed, "--dry-run"), "seed")
    assert_one_error(capsys, main(["data", "build", "--input", str(shared_path("text", "gutenberg", "carroll-alice.txt")),
                         "--tokenizer", str(shared_path("spm", "albert-base-v2_spiece.model")),
                         "--out", str(tmp_path / "d"), "--seed", seed]), "--seed")
    assert not (tmp_path / "run").exists() and not (tmp_path / "d").exists()


def test_counts_out_of_range_are_errors(data, capsys):
    assert_one_error(capsys, main(["data", "inspect", str(data["train"]), "-n", "0"]), "--num")
    assert_one_error(capsys, main(["data", "inspect", str(data["train"]), "-n", "-1"]), "--num")
    assert_one_error(capsys, main(["evaluate", "/nonexistent", "--data", str(data["train"]), "--max-batches", "-1"]),
           "--max-batches")


def _steps(run: Path, split: str = "train") -> list[int]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["split"] == split]


def test_a_resumed_run_logs_each_step_once(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert _pretrain(data, run, "--max-steps", "2", "--eval-data", str(data["eval"])) == 0
    with open(run / "metrics.jsonl", "a") as f:       # what a run killed at step 4 had logged past step 2
        for step in (3, 4):
            f.write(json.dumps({"step": step, "split": "train", "loss": 99.0}) + "\n")
        f.write('{"step": 5, "spl')
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4"]) == 0
    assert _steps(run) == [1, 2, 3, 4] and _steps(run, "eval") == [2, 4]
    assert all(r.get("loss") != 99.0 for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()))


def test_resuming_before_the_first_checkpoint_drops_every_record(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "split": "train"}) + "\n" for s in (1, 2)))
    MetricsLogger(tmp_path, 4, 0, tensorboard=False, progress=False).close()
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_init_from_a_run_directory_starts_from_its_newest_checkpoint(data, tmp_path, capsys):
    first = tmp_path / "first"
    assert _pretrain(data, first, "--max-steps", "2") == 0
    capsys.readouterr()
    assert _pretrain(data, tmp_path / "second", "--max-steps", "1", "--init-from", str(first)) == 0
    saved = json.loads((tmp_path / "second" / "run_config.json").read_text())
    assert saved["init_from"] == str(first / "checkpoints" / "step_00000002")


def test_dry_run_refuses_what_the_run_would(data, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    assert_one_error(capsys, _pretrain(data, tmp_path / "run", "--max-steps", "2", "--precision", "fp16", "--dry-run"), "fp16")
    assert_one_error(capsys, _pretrain(data, tmp_path / "run", "--max-steps", "2", "--dist.device=cuda", "--dry-run"), "CUDA")


def test_resume_refuses_a_changed_learning_setting_and_keeps_the_run_config(data, tmp_path, capsys):
    """`pretrain --resume --lr X` used to rewrite run_config.json (even when no step ran), so every later
    resume trained at X: a resumed run keeps what it learns with; its length may change."""
    run = tmp_path / "run"
    assert _pretrain(data, run, "--max-steps", "2") == 0
    before = (run / "run_config.json").read_text()
    capsys.readouterr()
    assert_one_error(capsys, main(["pretrain", "--out", str(run), "--resume", "--lr", "0.1"]),
                     "--resume: the run was started with optim.lr=")
    assert (run / "run_config.json").read_text() == before
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]) == 0
