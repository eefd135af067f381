"""`albertlm pretrain`: `--dist.backend nccl` without CUDA is one line before any work (dry run, alone and under
torchrun, where only the first rank says it); run_config.json records absolute paths, so `--resume` works from
any directory (an older run's relative ones are read from the current directory, and the error says so);
`--init-from X --out X --overwrite` no longer removes the checkpoint it starts from; the batch-size error names
the flags the user set."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from conftest import alice_documents, assert_one_error, assert_one_error_line, shared_path

TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "4",
        "--train.progress=false", "--train.tensorboard=false", "--save-every", "0", "--eval-every", "2",
        "--train.eval_batches=1"]
BIN = Path(sys.executable).parent
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """32-token SOP data (train/ and heldout/) from 300 lines of shared text, albert-base-v2's SentencePiece."""
    root = tmp_path_factory.mktemp("audit12_data")
    text = alice_documents(root, 300)
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    for name in ("train", "heldout"):
        assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(root / name),
                     "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    return root


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------- 1. nccl
@no_cuda
def test_nccl_without_cuda_is_one_line_before_any_work(data, tmp_path, capsys):
    out = tmp_path / "run"
    for extra in (["--dry-run"], []):
        code = main(["pretrain", "--data", str(data / "train"), "--out", str(out), *TINY, "--max-steps", "1",
                     "--dist.backend", "nccl", *extra])
        assert_one_error(capsys, code, "--dist.backend nccl needs CUDA", "gloo")
        assert not out.exists()
    assert capsys.readouterr().out == ""      # no config printed before the error
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(out), *TINY, "--max-steps", "1",
                 "--dist.backend", "gloo", "--dry-run"]) == 0


@no_cuda
def test_nccl_without_cuda_is_refused_by_finetune_too(tmp_path, capsys):
    from conftest import save_tiny_pretrained

    model = save_tiny_pretrained(tmp_path)
    rows = tmp_path / "d.jsonl"
    rows.write_text("".join(json.dumps({"text": "the film was good", "label": str(i % 2)}) + "\n" for i in range(4)))
    code = main(["finetune", "classify", "--train", str(rows), "--model", str(model), "--out", str(tmp_path / "ft"),
                 "--max-steps", "1", "--dist.backend=nccl", "--train.progress=false", "--train.tensorboard=false"])
    assert_one_error(capsys, code, "--dist.backend nccl needs CUDA")
    assert not (tmp_path / "ft").exists()


def test_init_distributed_refuses_nccl_on_a_cpu_device():
    from albertlm.errors import UserError
    from albertlm.training.distributed import check_backend, init_distributed

    with pytest.raises(UserError, match="nccl needs CUDA"):
        init_distributed("nccl", "cpu")
    assert check_backend("gloo", "cpu") == torch.device("cpu")
    assert check_backend("auto", "cpu") == torch.device("cpu")


@no_cuda
@pytest.mark.skipif(not (BIN / "torchrun").is_file(), reason="torchrun is not installed")
def test_under_torchrun_an_error_is_one_line_from_the_first_rank(data, tmp_path):
    """Both ranks refuse nccl; only the first says it (torchrun's own report of the failed launch follows)."""
    # TMPDIR: torchrun leaves a torchelastic_* folder of its workers' logs in the temporary directory, one a run
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "albertlm",
                           "pretrain", "--data", str(data / "train"), "--out", str(tmp_path / "run"), *TINY,
                           "--max-steps", "1", "--dist.backend", "nccl"],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if line.startswith("albertlm pretrain")]  # "(rank 1)" too
    assert len(ours) == 1 and "nccl needs CUDA" in ours[0], proc.stderr[-3000:]
    assert "/albertlm/" not in "".join(l for l in proc.stderr.splitlines() if l.strip().startswith('File "'))
    assert not (tmp_path / "run").exists()


@pytest.fixture
def albertlm_log_level():
    """`main()` on another rank sets the "albertlm" logger to ERROR for the rest of the process: put it back, or
    every later test in this xdist worker would see no logged warning (and pass vacuously where it checks none)."""
    import logging

    logger = logging.getLogger("albertlm")
    level = logger.level
    yield
    logger.setLevel(level)                 # setLevel, not the attribute: it clears the loggers' cached levels


def test_other_ranks_exit_non_zero_without_repeating_the_error(data, tmp_path, capsys, monkeypatch,
                                                                albertlm_log_level):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")   # as torchrun sets it (a LOCAL_RANK past WORLD_SIZE is outside a launch)
    code = main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"), *TINY,
                 "--max-steps", "1", "--dry-run"])
    assert code == 2 and capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as exc:                                    # argparse's too
        main(["pretrain", "--out", str(tmp_path / "run"), "--no-such-flag"])
    assert exc.value.code == 2 and capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("WORLD_SIZE")
    code = main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"), *TINY,
                 "--max-steps", "1", "--dry-run"])
    assert_one_error(capsys, code, "missing")


# -------------------------------------------------------------------------------------- 2. absolute paths
def test_run_config_records_absolute_paths_and_resumes_from_elsewhere(data, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(data)
    run = tmp_path / "run"
    assert main(["pretrain", "--data", "train", "--eval-data", "./heldout", "--out", str(run), *TINY,
                 "--max-steps", "2"]) == 0
    saved = json.loads((run / "run_config.json").read_text())
    assert saved["data"]["path"] == str(data / "train") and saved["data"]["eval_path"] == str(data / "heldout")
    step = json.loads((run / "checkpoints" / "step_00000002" / "run_config.json").read_text())
    assert step["data"]["path"] == str(data / "train")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]) == 0
    # the same data spelled another way is not a changed setting
    monkeypatch.chdir(data)
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4", "--data", "./train/"]) == 0
    assert (run / "checkpoints" / "step_00000004").is_dir()


def test_an_older_run_with_relative_paths_resumes_from_its_directory_and_says_why_elsewhere(data, tmp_path,
                                                                                           monkeypatch, capsys):
    run = tmp_path / "run"
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(run), *TINY, "--max-steps", "2"]) == 0
    config = json.loads((run / "run_config.json").read_text())
    config["data"]["path"] = "train"                         # as runs recorded it before
    (run / "run_config.json").write_text(json.dumps(config, indent=2) + "\n")
    before = _files(run)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert_one_error(capsys, main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3"]),
                     "data.path 'train'", "relative", str(tmp_path), "--data")
    assert _files(run) == before
    # the data given again (from anywhere) continues the run; so does the directory it was started in
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3", "--data", str(data / "train")]) == 0
    monkeypatch.chdir(data)
    config = json.loads((run / "run_config.json").read_text())
    config["data"]["path"] = "train"
    (run / "run_config.json").write_text(json.dumps(config, indent=2) + "\n")
    assert main(["pretrain", "--out", str(run), "--resume", "--max-steps", "4"]) == 0
    assert json.loads((run / "run_config.json").read_text())["data"]["path"] == str(data / "train")


def test_a_different_data_path_on_resume_is_still_refused(data, tmp_path, capsys):
    """Other data at another path (the same text built with another --seed); the same data copied elsewhere is
    accepted (tests/test_resumefollow_audit29.py)."""
    run = tmp_path / "run"
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(run), *TINY, "--max-steps", "2"]) == 0
    other = tmp_path / "other"
    assert main(["data", "build", "--input", str(data / "a.txt"), "--tokenizer",
                 str(shared_path("spm", "albert-base-v2_spiece.model")), "--out", str(other), "--max-seq-length", "32",
                 "--dupe-factor", "1", "--seed", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert_one_error(capsys, main(["pretrain", "--out", str(run), "--resume", "--max-steps", "3",
                                   "--data", str(other)]), "--resume: the run was started with data.path",
                     "which holds other data")


# ------------------------------------------------------------------------- 3. --init-from X --out X --overwrite
def test_init_from_the_run_being_overwritten_is_refused_and_its_checkpoint_kept(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(run), *TINY, "--max-steps", "2"]) == 0
    before = _files(run)
    capsys.readouterr()
    checkpoint = run / "checkpoints" / "step_00000002"
    for source in (run, checkpoint):
        for extra in (["--overwrite"], []):
            code = main(["pretrain", "--data", str(data / "train"), "--out", str(run), *TINY, "--max-steps", "1",
                         "--init-from", str(source), *extra])
            assert_one_error(capsys, code, f"--out {run}", "--init-from", "another --out")
    # a model directory as its own --out
    assert_one_error(capsys, main(["pretrain", "--data", str(data / "train"), "--out", str(checkpoint), *TINY,
                                   "--max-steps", "1", "--init-from", str(checkpoint), "--overwrite"]),
                     "is the checkpoint --init-from")
    assert _files(run) == before
    # another --out inside the source's directory (not among the files a run replaces) is fine
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(run / "next"), *TINY, "--max-steps", "1",
                 "--init-from", str(run)]) == 0
    assert {k: v for k, v in _files(run).items() if not k.startswith("next")} == before


# ------------------------------------------------------------------------------------ 6. batch-size message
def test_the_batch_size_error_names_the_flags_the_user_set(data, tmp_path, capsys, monkeypatch):
    base = ["pretrain", "--data", str(data / "train"), "--out", str(tmp_path / "run"), *TINY, "--max-steps", "1",
            "--dry-run"]
    assert_one_error(capsys, main([*base, "--batch-size", "10", "--micro-batch-size", "4"]),
                     "--batch-size (train.batch_size) 10", "--micro-batch-size (train.micro_batch_size) 4", "1 process")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    code = main([*base, "--batch-size", "5"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--batch-size (train.batch_size) 5" in err and "2 processes" in err
    assert "micro" not in err                     # the user set no micro-batch size: none is named
    assert_one_error(capsys, main([*base, "--batch-size", "12", "--micro-batch-size", "4"]),
                     "2 processes x --micro-batch-size (train.micro_batch_size) 4 = 8")


def test_the_python_api_records_absolute_paths_too(data, tmp_path, monkeypatch):
    """`training.pretrain.pretrain` (what ablate and the demo call) writes absolute paths like the CLI."""
    import dataclasses

    from albertlm.config.run import RunConfig
    from albertlm.training.pretrain import pretrain

    monkeypatch.chdir(data)
    first = tmp_path / "cli"
    assert main(["pretrain", "--data", "train", "--out", str(first), *TINY, "--max-steps", "1"]) == 0
    run = RunConfig.from_dict(json.loads((first / "run_config.json").read_text()))
    run = run.replace(data=dataclasses.replace(run.data, path="train", eval_path=""))
    assert pretrain(run, tmp_path / "api") == "done"
    assert json.loads((tmp_path / "api" / "run_config.json").read_text())["data"]["path"] == str(data / "train")


def test_the_closing_line_names_only_what_the_run_wrote(data, tmp_path, capsys):
    """It always said "metrics.jsonl, tensorboard/, checkpoints/", also with --train.tensorboard=false."""
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(data / "train"), "--out", str(out), *TINY, "--max-steps", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "tensorboard/" not in last and "metrics.jsonl" in last and "checkpoints/" in last, last
