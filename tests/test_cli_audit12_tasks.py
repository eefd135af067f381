"""`albertlm finetune / predict / evaluate`: `--model X --out X --overwrite` no longer removes the checkpoint the
run starts from; "using <checkpoint>" is said only once the command has checked its inputs (an error stays one
line); `finetune --lr`'s help is fine-tuning's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained

QUICK = ["--batch-size", "4", "--max-seq-length", "16", "--lr", "1e-3", "--warmup-steps", "0", "--seed", "3",
         "--train.progress=false", "--train.tensorboard=false"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _rows(path: Path, rows: int = 8) -> Path:
    with path.open("w") as f:
        for i in range(rows):
            f.write(json.dumps({"text": f"the film was {'good' if i % 2 else 'bad'}",
                                "label": "pos" if i % 2 else "neg"}) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A tiny pretrained model, a pretraining-like run holding it in checkpoints/, and a classify run on it."""
    root = tmp_path_factory.mktemp("audit12_tasks")
    (root / "model").mkdir()
    model = save_tiny_pretrained(root / "model")
    data = _rows(root / "d.jsonl")
    ft = root / "ft"
    assert main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--out", str(ft), "--max-steps", "2", *QUICK]) == 0
    pre = root / "pre"
    step = pre / "checkpoints" / "step_00000002"
    step.mkdir(parents=True)
    for f in model.iterdir():
        (step / f.name).write_bytes(f.read_bytes())
    return {"model": model, "ft": ft, "pre": pre, "data": data}


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def _finetune(model, out, data, *extra):
    return main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--out", str(out), "--max-steps", "1", *QUICK, *extra])


def test_finetune_into_the_run_it_starts_from_is_refused_and_the_source_kept(runs, capsys):
    capsys.readouterr()
    for run, source in ((runs["ft"], runs["ft"]), (runs["ft"], runs["ft"] / "best"), (runs["pre"], runs["pre"]),
                        (runs["pre"], runs["pre"] / "checkpoints" / "step_00000002")):
        before = _files(run)
        for extra in (["--overwrite"], []):
            assert_one_error(capsys, _finetune(source, run, runs["data"], *extra), f"--out {run}", "--model",
                             "another --out")
        assert _files(run) == before
    model = runs["model"]
    before = _files(model)
    assert_one_error(capsys, _finetune(model, model, runs["data"], "--overwrite"), "is the checkpoint --model")
    assert _files(model) == before


def test_using_is_said_after_the_checks_not_before_an_error(runs, tmp_path, capsys):
    capsys.readouterr()
    missing = tmp_path / "missing.jsonl"
    # finetune from a run directory with a bad data file: the error alone
    assert_one_error(capsys, _finetune(runs["pre"], tmp_path / "out", missing), "missing.jsonl")
    # predict / evaluate with a run directory and a bad file: the error alone
    for command in (["predict", "classify", "--out", str(tmp_path / "p")], ["evaluate", "classify"]):
        assert_one_error(capsys, main([*command, "--model", str(runs["ft"]), "--test", str(missing)]), "missing.jsonl")
    # on success it is said (stderr: stdout is predict's metrics JSON)
    assert main(["predict", "classify", "--model", str(runs["ft"]), "--test", str(runs["data"]),
                 "--out", str(tmp_path / "p")]) == 0
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == f"using {runs['ft'] / 'best'}"   # after the progress bar
    json.loads(captured.out)
    assert _finetune(runs["pre"], tmp_path / "out", runs["data"]) == 0
    captured = capsys.readouterr()
    assert f"using {runs['pre'] / 'checkpoints' / 'step_00000002'}" in captured.err


def test_finetune_lr_help_is_fine_tunings(capsys):
    for family, default in (("glue", "2e-05"), ("squad", "3e-05")):
        with pytest.raises(SystemExit):
            main(["finetune", family, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        start = text.index("--lr X, --optim.lr X")
        lr = text[start:text.index("--weight-decay X", start)]
        assert "fine-tuning" in lr and f"(default: {default})" in lr and "0.00176" not in lr, lr
    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0.00176" in text[text.index("--lr X"):]
