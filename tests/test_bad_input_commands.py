"""Every command against each kind of damage, through the installed command (`.venv/bin/albertlm` as a
subprocess): empty, truncated, wrong type, wrong schema, wrong encoding, out-of-range values, inconsistent
with another input, interrupted. Each case asserts one line `albertlm <cmd>: error: ...` on stderr holding
the file and the problem, exit status 2, no traceback; the last tests assert that nothing half-written was
left that looks complete and that nothing the user had was destroyed (an existing run, data build, model).

`test_bad_input_cli.py` holds the cases of the issue that found these (SQuAD, GLUE, tokenizers, conversions);
this file walks the commands (`albertlm --help`) and the run directories, checkpoints and pretraining data
that `albertlm pretrain` reads and writes. The inputs are built once (a 400-piece tokenizer, 32-token data,
a 4-step tiny run) and the commands run two at a time.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import assert_one_error_line, shared_path

ALBERTLM = Path(sys.executable).parent / "albertlm"
TIMEOUT = 240
TINY = ["--preset", "albert-tiny", "--batch-size", "8", "--train.progress=false", "--train.tensorboard=false"]


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _albertlm(argv: list[str], stdin: str | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(ALBERTLM), *argv], capture_output=True, text=True, timeout=TIMEOUT, env=_env(),
                              input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                              preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(argv, -1, exc.stdout or "", f"TIMEOUT after {TIMEOUT} s (a hang)")


def _digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path) if p != path else p.name): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files}


def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # a write past the limit fails with EFBIG: a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    if not ALBERTLM.is_file():
        pytest.skip(f"the albertlm command is not installed beside {sys.executable}")
    text = shared_path("text", "sample_text.txt")
    root = tmp_path_factory.mktemp("commands")
    for argv in (["tokenizer", "train", "--input", str(text), "--vocab-size", "400", "--out", str(root / "tok")],
                 ["data", "build", "--input", str(text), "--tokenizer", str(root / "tok"), "--out", str(root / "data"),
                  "--max-seq-length", "32", "--no-progress"],
                 ["pretrain", "--data", str(root / "data"), "--out", str(root / "run"), *TINY, "--max-steps", "2",
                  "--save-every", "1", "--log-every", "1"]):
        proc = _albertlm(argv)
        assert proc.returncode == 0, proc.stderr[-3000:]
    model = root / "run" / "checkpoints" / "step_00000002"
    shutil.copytree(model, root / "model")
    shutil.copy(root / "tok" / "spiece.model", root / "model" / "spiece.model")

    def damaged_run(name: str, damage) -> None:
        shutil.copytree(root / "run", root / name)
        damage(root / name / "checkpoints" / "step_00000002")

    def truncate(path: Path, keep: int) -> None:
        path.write_bytes(path.read_bytes()[:keep])

    # run directories whose newest checkpoint is damaged (the --resume cases)
    damaged_run("run_truncated", lambda c: truncate(c / "model.safetensors", 3000))
    damaged_run("run_empty_state", lambda c: (c / "trainer_state.pt").write_bytes(b""))
    damaged_run("run_foreign_state", lambda c: (c / "trainer_state.pt").write_bytes(b"PK\x03\x04 not a torch file"))
    evil = root / "payload-ran"
    damaged_run("run_evil_state", lambda c: (c / "trainer_state.pt").write_bytes(
        b"cos\nsystem\n(V" + f"touch {evil}".encode() + b"\ntR."))
    damaged_run("run_list_state", lambda c: __import__("torch").save([1, 2], c / "trainer_state.pt"))
    damaged_run("run_copy", lambda c: None)         # resumed with a changed model
    damaged_run("run_disk", lambda c: None)         # resumed onto a full disk
    # models: damaged weights; a config.json of the wrong type; a config.json that is not JSON
    shutil.copytree(root / "model", root / "model_truncated")
    truncate(root / "model_truncated" / "model.safetensors", 2000)
    shutil.copytree(root / "model", root / "model_bad_config")
    config = json.loads((root / "model" / "config.json").read_text())
    (root / "model_bad_config" / "config.json").write_text(json.dumps({**config, "hidden_size": "64"}))
    shutil.copytree(root / "model", root / "model_latin1_config")
    (root / "model_latin1_config" / "config.json").write_bytes(b'{"hidden_size": 64, "name": "caf\xe9"}')
    (root / "not_a_model").mkdir()
    # pretraining data: a meta.json of the wrong schema; a truncated shard; an interrupted build (only .tmp)
    for name in ("data_bad_meta", "data_truncated_shard"):
        shutil.copytree(root / "data", root / name)
    meta = json.loads((root / "data" / "meta.json").read_text())
    (root / "data_bad_meta" / "meta.json").write_text(json.dumps({**meta, "max_seq_length": "32"}))
    shard = next((root / "data_truncated_shard").glob("shard-*.bin"))
    truncate(shard, shard.stat().st_size // 2)
    (root / "data_interrupted").mkdir()
    (root / "data_interrupted" / "shard-00000.bin.tmp").write_bytes(b"\0" * 100)
    # text inputs
    shutil.copy(text, root / "sample_text.txt")
    (root / "MRPC_dev.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat.\tA cat sat.\n")
    (root / "empty.txt").write_text("")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1") * 20)
    (root / "lines.txt").write_text("a line of text\n")
    (root / "metrics_garbage").mkdir()
    (root / "metrics_garbage" / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss"\n')
    # task files
    (root / "no_label.csv").write_text("text,other\nfine words,1\n")
    (root / "empty.csv").write_text("")
    for split in ("train", "dev"):
        race = root / "RACE" / split / "high"
        race.mkdir(parents=True)
        (race / "1.txt").write_text(json.dumps({"article": "A text.", "questions": ["Why?"],
                                                "options": [["a", "b", "c", "d"]], "answers": ["E"], "id": "1.txt"}))
    (root / "glue_preds.tsv").write_text("index\tprediction\n0\tmaybe\n")
    # a fine-tuning run that holds results (refused without --resume/--overwrite)
    (root / "ft_run" / "best").mkdir(parents=True)
    (root / "ft_run" / "metrics.json").write_text('{"best": {"accuracy": 0.9}}\n')
    (root / "existing.npy").write_bytes(b"the user's embeddings")
    return root


def _cases(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name: (argv after `albertlm`, phrases the error line holds), with an optional stdin as a third item."""
    r = lambda *parts: str(root.joinpath(*parts))  # noqa: E731
    tok, data, model, run = r("tok"), r("data"), r("model"), r("run")
    csv = ["--train", r("lines.txt"), "--dev", r("lines.txt")]
    return {
        # params / info
        "params: unknown preset": (["params", "--preset", "albert-huge"], ["albert-huge"]),
        "params: out-of-range size": (["params", "--embedding-size", "-1"], ["embedding_size", "-1"]),
        "info: not a model directory": (["info", r("not_a_model")], ["not_a_model"]),
        "info: config.json of the wrong type": (["info", r("model_bad_config")], ["config.json", "hidden_size"]),
        "info: config.json not UTF-8": (["info", r("model_latin1_config")], ["config.json", "utf-8"]),
        # tokenizer
        "tokenizer train: empty input": (["tokenizer", "train", "--input", r("empty.txt"), "--vocab-size", "100",
                                          "--out", r("tok_out")], ["empty.txt"]),
        "tokenizer train: missing input": (["tokenizer", "train", "--input", r("missing.txt"), "--vocab-size", "100",
                                            "--out", r("tok_out2")], ["missing.txt"]),
        "tokenizer train: vocab size out of range": (["tokenizer", "train", "--input", r("lines.txt"),
                                                      "--vocab-size", "0", "--out", r("tok_out3")], ["vocab", "0"]),
        "tokenizer encode: not a tokenizer": (["tokenizer", "encode", "-t", r("lines.txt")], ["lines.txt"]),
        "tokenizer decode: not JSON ids": (["tokenizer", "decode", "-t", tok], ["line 1"], "hello\n"),
        "tokenizer decode: id out of range": (["tokenizer", "decode", "-t", tok], ["line 1", "[0, 400)"],
                                               "[5, 999999]\n"),
        # data
        "data build: missing tokenizer": (["data", "build", "--input", r("lines.txt"), "--tokenizer", r("nope"),
                                           "--out", r("data_out1")], ["nope"]),
        "data build: empty input": (["data", "build", "--input", r("empty.txt"), "--tokenizer", tok,
                                     "--out", r("data_out2"), "--no-progress"], ["empty.txt"]),
        "data build: length out of range": (["data", "build", "--input", r("lines.txt"), "--tokenizer", tok,
                                             "--out", r("data_out3"), "--max-seq-length", "2"], ["max_seq_length"]),
        "data build: over an existing build": (["data", "build", "--input", r("lines.txt"), "--tokenizer", tok,
                                                "--out", data, "--no-progress"], ["already holds a build"]),
        "data build: full disk": (["data", "build", "--input", r("sample_text.txt"),
                                   "--tokenizer", tok, "--out", r("data_full"), "--max-seq-length", "32",
                                   "--no-progress"], ["data_full", "cannot write", "File too large"], None, True),
        "data inspect: meta.json of the wrong schema": (["data", "inspect", r("data_bad_meta")],
                                                        ["meta.json", "max_seq_length"]),
        "data inspect: truncated shard": (["data", "inspect", r("data_truncated_shard")], ["shard-00000.bin"]),
        "data inspect: start out of range": (["data", "inspect", data, "--start", "100000"], ["--start 100000"]),
        "data stats: interrupted build": (["data", "stats", r("data_interrupted")], ["data_interrupted", ".tmp"]),
        # pretrain: the run directory, the data, the checkpoint to resume from, the disk
        "pretrain: --out holds a run": (["pretrain", "--data", data, "--out", run, *TINY],
                                        ["run", "already holds a run", "--resume", "--overwrite"]),
        "pretrain: --out is a file": (["pretrain", "--data", data, "--out", r("lines.txt"), *TINY],
                                      ["lines.txt", "not a directory"]),
        "pretrain: --resume and --overwrite": (["pretrain", "--out", run, "--resume", "--overwrite"],
                                               ["--resume", "--overwrite"]),
        "pretrain: data meta of the wrong schema": (["pretrain", "--data", r("data_bad_meta"), "--out", r("p1"), *TINY],
                                                    ["meta.json", "max_seq_length"]),
        "pretrain: data longer than the model": (["pretrain", "--data", data, "--out", r("p2"), *TINY,
                                                  "--model.max_position_embeddings=16"],
                                                 ["32 tokens", "max_position_embeddings=16"]),
        "pretrain: vocabulary smaller than the data's": (["pretrain", "--data", data, "--out", r("p3"), *TINY,
                                                          "--model.vocab_size=100"], ["400", "vocab_size"]),
        "pretrain: batch larger than the data": (["pretrain", "--data", data, "--out", r("p4"), *TINY,
                                                  "--batch-size", "100000"], ["fewer than one global batch"]),
        "pretrain: --resume truncated weights": (["pretrain", "--out", r("run_truncated"), "--resume"],
                                                 ["model.safetensors", "truncated"]),
        "pretrain: --resume empty trainer_state.pt": (["pretrain", "--out", r("run_empty_state"), "--resume"],
                                                      ["trainer_state.pt", "empty"]),
        "pretrain: --resume foreign trainer_state.pt": (["pretrain", "--out", r("run_foreign_state"), "--resume"],
                                                        ["trainer_state.pt", "not a readable"]),
        "pretrain: --resume malicious trainer_state.pt": (["pretrain", "--out", r("run_evil_state"), "--resume"],
                                                          ["trainer_state.pt", "refused"]),
        "pretrain: --resume trainer_state.pt of another type": (["pretrain", "--out", r("run_list_state"),
                                                                 "--resume"], ["trainer_state.pt", "not a training state"]),
        "pretrain: --resume with a changed model": (["pretrain", "--out", r("run_copy"), "--resume",
                                                     "--model.hidden_size=32"],
                                                    ["--resume", "model.hidden_size=64, now 32"]),
        "pretrain: full disk at a checkpoint": (["pretrain", "--out", r("run_disk"), "--resume", "--max-steps", "3"],
                                                ["step_00000003", "cannot write the checkpoint",
                                                 "newest complete checkpoint is", "step_00000002"], None, True),
        # evaluate (pretraining data) and plot
        "evaluate: truncated weights": (["evaluate", r("model_truncated"), "--data", data],
                                        ["model.safetensors", "truncated"]),
        "evaluate: not pretraining data": (["evaluate", model, "--data", r("not_a_model")], ["not_a_model"]),
        "evaluate: batch size out of range": (["evaluate", model, "--data", data, "--batch-size", "0"],
                                              ["--batch-size", "0"]),
        "plot: no metrics": (["plot", r("not_a_model")], ["not_a_model"]),
        "plot: metrics.jsonl truncated": (["plot", r("metrics_garbage")], ["metrics.jsonl"]),
        # finetune / predict / evaluate a task
        "finetune: --out holds a run": (["finetune", "classify", *csv, "--model", model, "--out", r("ft_run")],
                                        ["ft_run", "already holds a run"]),
        "finetune: CSV without the label column": (["finetune", "classify", "--train", r("no_label.csv"), "--dev",
                                                    r("no_label.csv"), "--model", model, "--out", r("ft1")],
                                                   ["no_label.csv", "label"]),
        "finetune: truncated model": (["finetune", "classify", "--train", r("no_label.csv"), "--text-column", "text",
                                       "--label-column", "other", "--model", r("model_truncated"), "--out", r("ft2")],
                                      ["model.safetensors", "truncated"]),
        "finetune race: answer outside A-D": (["finetune", "race", "--data-dir", r("RACE"), "--model", model,
                                               "--out", r("ft3")], ["1.txt", "'E'"]),
        "predict: empty CSV": (["predict", "classify", "--data", r("empty.csv"), "--labels", "0,1", "--model", model,
                                "--out", r("pr1")],
                               ["empty.csv"]),
        "evaluate glue: prediction outside the label set": (["evaluate", "glue", "--task", "mrpc", "--dev",
                                                             r("MRPC_dev.tsv"),
                                                             "--predictions", r("glue_preds.tsv")],
                                                            ["glue_preds.tsv", "maybe"]),
        # inference and export
        "fill-mask: truncated model": (["fill-mask", r("model_truncated"), "a [MASK] b"], ["model.safetensors"]),
        "fill-mask: no [MASK] in the text": (["fill-mask", model, "no mask here"], ["[MASK]"]),
        # with --overwrite, so the bad input (not the existing --out, now checked first) is what is refused, and
        # the user's file must survive it
        "embed: input not UTF-8": (["embed", model, "--input", r("latin1.txt"), "--out", r("existing.npy"),
                                    "--overwrite"], ["latin1.txt", "UTF-8"]),
        "embed: missing input": (["embed", model, "--input", r("missing.txt"), "--out", r("e2.npy")], ["missing.txt"]),
        "export onnx: truncated model": (["export", "onnx", r("model_truncated"), "--out", r("m.onnx")],
                                         ["model_truncated"]),
        "convert: not a checkpoint": (["convert", r("not_a_model"), r("conv_out")], ["not_a_model"]),
    }


def _unpack(case: tuple) -> tuple[list[str], list[str], str | None, bool]:
    argv, phrases, stdin, full_disk = (*case, None, False)[:4]
    return argv, phrases, stdin, full_disk


@pytest.fixture(scope="module")
def results(inputs):
    protected = ["run", "data", "model", "ft_run", "existing.npy"]
    before = {name: _digest(inputs / name) for name in protected}
    cases = {name: _unpack(case) for name, case in _cases(inputs).items()}

    def run(case):
        argv, _, stdin, full_disk = case
        return _albertlm(argv, stdin, _limit_file_size if full_disk else None)

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(cases, pool.map(run, cases.values())))
    return done, before


@pytest.mark.parametrize("name", sorted(_cases(Path("/x"))))
def test_one_line_exit_2_naming_file_and_problem(name, results, inputs):
    done, _ = results
    _, phrases, _, _ = _unpack(_cases(inputs)[name])
    proc = done[name]
    assert_one_error_line(proc, phrases)


def test_pretrain_prints_no_config_before_an_error(results):
    done, _ = results
    for name, proc in done.items():
        if name.startswith("pretrain") and "full disk" not in name:
            assert proc.stdout.strip() == "", f"{name}: {proc.stdout[:300]}"


def test_nothing_destroyed_and_nothing_half_written(results, inputs):
    done, before = results
    for name, digest in before.items():
        assert _digest(inputs / name) == digest, f"{name} changed"
    assert not (inputs / "payload-ran").exists()       # the malicious trainer_state.pt never ran
    # refused or failed outputs hold nothing that looks complete
    for out in ("tok_out", "tok_out2", "tok_out3"):
        assert not (inputs / out / "spiece.model").exists()
    for out in ("data_out1", "data_out2", "data_out3", "data_full"):
        assert not (inputs / out / "meta.json").exists() and not list((inputs / out).glob("shard-*")) \
            if (inputs / out).exists() else True
    for out in ("p1", "p2", "p3", "p4"):
        assert not (inputs / out / "checkpoints").exists() and not (inputs / out / "run_config.json").exists()
    for out in ("ft1", "ft2", "ft3", "pr1", "conv_out"):
        assert not (inputs / out).exists() or not any((inputs / out).rglob("*.safetensors"))
    assert not (inputs / "e2.npy").exists() and not (inputs / "m.onnx").exists()
    # a --resume refused for its checkpoint leaves the run as it was: same checkpoints, no new metrics
    for run in ("run_truncated", "run_empty_state", "run_copy"):
        assert sorted(p.name for p in (inputs / run / "checkpoints").iterdir()) == ["step_00000001", "step_00000002"]
        assert (inputs / run / "metrics.jsonl").read_text() == (inputs / "run" / "metrics.jsonl").read_text()
    # the full disk: no half-written step_00000003 (not even a .tmp), step 2 intact
    assert sorted(p.name for p in (inputs / "run_disk" / "checkpoints").iterdir()) == \
        ["step_00000001", "step_00000002"]


def test_pretrain_overwrite_starts_over_only_once_everything_is_checked(inputs, tmp_path):
    """`--overwrite` with bad data keeps the old run whole; with good data the old run's files are replaced."""
    run = tmp_path / "run"
    shutil.copytree(inputs / "run", run)
    before = _digest(run)
    bad = _albertlm(["pretrain", "--data", str(inputs / "data_bad_meta"), "--out", str(run), *TINY, "--overwrite"])
    assert bad.returncode == 2 and "meta.json" in bad.stderr and _digest(run) == before
    good = _albertlm(["pretrain", "--data", str(inputs / "data"), "--out", str(run), *TINY, "--overwrite",
                      "--max-steps", "1", "--seed", "5"])
    assert good.returncode == 0, good.stderr[-2000:]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000001"]
    assert json.loads((run / "run_config.json").read_text())["train"]["seed"] == 5
    assert [(r["step"], r["split"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] \
        == [(1, "train"), (1, "summary")]
