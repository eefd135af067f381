"""Audit 27, CLI follow-ups.

`cli.task_commands` kept its own copy of the tokenizer comparison (`tasks.inference.tokenizer_difference`).
`glue.runs_glue_score`'s docstring said an unfinished run is refused; a run the time budget stopped is scored (the
CLI warns). `predict` / `evaluate --model` with fp16 on a CPU gave fine-tuning's reason (loss scaling), after the data
had been read. `finetune` whose console went away (`| tee` whose tee ended) stopped at its first line with
BrokenPipeError, which the CLI takes for `| head`: exit 0, nothing trained. `info` took no --config (a TF-Hub module
or a run_classifier.py output dir has no albert_config.json). `convert hub/variables/variables hub` wrote a model
into the TF-Hub module's root. `predict --model RUN --out RUN` replaced the run's record of its best dev evaluation
(dev_predictions.tsv). Outside a training loop SIGUSR1 (Slurm's notice) and SIGHUP (a closed ssh session) at their
default action ended a command at once with no word (138 / 129); they stop it as Ctrl-C does, unless ignored (nohup).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained

from test_audit12b_tasks import QUICK, _cola_dir   # tiny fine-tuning flags; a CoLA folder of six rows
from test_glue_audit17 import _glue_model          # a GLUE fine-tuned checkpoint as finetune writes best/
from test_glue_audit27 import _metrics_json
from test_tfonnx_audit20 import FIXTURE            # google's tiny TF checkpoint and its albert_config.json


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("clifollow27"))


def _run_with_best(root: Path, pretrained: Path) -> Path:
    """A fine-tuning run's folder: best/, a step checkpoint and the run's record of its best dev evaluation."""
    run = root / "run"
    _glue_model(run / "best", pretrained, "cola")
    shutil.copytree(run / "best", run / "checkpoints" / "step_00000002")
    (run / "dev_predictions.tsv").write_text("index\tprediction\nthe run's record\n")
    return run


# ------------------------------------------------------------------------------------------------ 1
def test_task_commands_uses_the_one_tokenizer_comparison():
    """The copy in the CLI (and its probe text) is gone: the refusals use `tasks.inference`'s."""
    from albertlm.cli import task_commands

    assert not hasattr(task_commands, "tokenizer_difference") and not hasattr(task_commands, "PROBE")


# ------------------------------------------------------------------------------------------------ 2
def test_a_budget_stopped_run_is_scored_as_its_docstring_says(tmp_path):
    """(pin) `runs_glue_score` scores a run the time budget stopped by its best so far; its docstring said such a run
    ("not a finished GLUE run") is refused. The CLI's warning about it is `evaluate glue --score`'s."""
    from albertlm.tasks.glue import runs_glue_score

    run = _metrics_json(tmp_path / "rte", "rte", {"step": 4, "dev": {"accuracy": 0.5}})
    record = (run / "metrics.json").read_text().replace('"status": "done"', '"status": "budget"')
    (run / "metrics.json").write_text(record)
    assert runs_glue_score([run])["tasks"] == {"rte": 0.5}
    assert "finished" not in runs_glue_score.__doc__ and "budget" in runs_glue_score.__doc__


# ------------------------------------------------------------------------------------------------ 3
def test_fp16_on_a_cpu_is_refused_for_predict_with_inferences_reason_before_the_data_is_read(tmp_path, pretrained,
                                                                                             capsys, monkeypatch):
    import torch

    from albertlm.errors import UserError
    from albertlm.tasks import registry
    from albertlm.training.precision import check_precision

    with pytest.raises(UserError, match=r"loss scaling on CPU is not supported\); use --precision bf16 on CPU"):
        check_precision("fp16", torch.device("cpu"))          # fine-tuning's, as it was
    run = _run_with_best(tmp_path, pretrained)
    data = _cola_dir(tmp_path / "CoLA")

    def read(*args, **kwargs):
        raise AssertionError("the data was read before fp16 was refused")

    monkeypatch.setitem(registry.FAMILIES, "glue", dataclasses.replace(registry.FAMILIES["glue"], build_spec=read))
    for command in ("predict", "evaluate"):
        code = main([command, "glue", "--task", "cola", "--data-dir", str(data), "--model", str(run / "best"),
                     "--out", str(tmp_path / "p"), "--precision", "fp16", "--device", "cpu"])
        err = capsys.readouterr().err
        assert code == 2 and "loss scaling" not in err, err
        assert "fp16 needs a CUDA device; use --precision fp32 or bf16 on CPU" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------------------------------------ 4
def test_finetune_whose_console_went_away_trains_and_writes_its_run(tmp_path, pretrained, monkeypatch, capsys):
    """stdout a pipe whose reader has left (`| tee log` in a closed ssh session): the run's first line raised
    BrokenPipeError, taken for `| head`: exit 0 with nothing trained. The run goes on, its lines to /dev/null."""
    data, out = _cola_dir(tmp_path / "CoLA"), tmp_path / "run"
    reader, writer = os.pipe()
    os.close(reader)
    with os.fdopen(writer, "w") as gone:
        with monkeypatch.context() as patched:
            patched.setattr(sys, "stdout", gone)
            code = main(["finetune", "glue", "--task", "cola", "--data-dir", str(data), "--model", str(pretrained),
                         "--out", str(out), *QUICK])
    assert code == 0, capsys.readouterr().err
    assert (out / "metrics.json").is_file() and (out / "best" / "config.json").is_file()


# ------------------------------------------------------------------------------------------------ 5
def _hub_module(root: Path) -> Path:
    """A TF-Hub module: the checkpoint under variables/, no albert_config.json (it is not shipped in the module)."""
    (root / "variables").mkdir(parents=True)
    for suffix in ("index", "data-00000-of-00001"):
        shutil.copyfile(FIXTURE / f"model.ckpt-0.{suffix}", root / "variables" / f"variables.{suffix}")
    return root


def test_info_takes_config_for_a_tf_checkpoint_without_one_and_refuses_it_for_other_sources(tmp_path, pretrained,
                                                                                           capsys):
    import json

    hub = _hub_module(tmp_path / "hub")
    assert_one_error(capsys, main(["info", str(hub)]), "no albert_config.json")
    assert main(["info", str(hub), "--json", "--config", str(FIXTURE / "albert_config.json")]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["format"] == "tf" and shown["model_class"] == "AlbertForPreTraining"
    assert shown["config"]["num_groups"] == 2 and "albert_config.json" in shown["files"]
    assert_one_error(capsys, main(["info", str(pretrained), "--config", str(FIXTURE / "albert_config.json")]),
                     "--config is only for TF checkpoints")


# ------------------------------------------------------------------------------------------------ 6
def test_convert_does_not_write_into_a_folder_holding_a_tf_checkpoint(tmp_path, capsys):
    """`convert hub/variables/variables hub`: only DST equal to the source's own folder was refused, so the model's
    config.json and weights went into the module's root (read as that model from then on)."""
    hub = _hub_module(tmp_path / "hub")
    shutil.copyfile(FIXTURE / "albert_config.json", hub / "albert_config.json")
    code = main(["convert", str(hub / "variables" / "variables"), str(hub)])
    assert_one_error(capsys, code, f"DST {hub} holds a TF checkpoint (variables/variables.index)", "another DST")
    assert sorted(p.name for p in hub.iterdir()) == ["albert_config.json", "variables"]
    tarball = tmp_path / "albert_base"       # a checkpoint's own folder, given by a file in it: refused as before
    shutil.copytree(FIXTURE, tarball)
    assert_one_error(capsys, main(["convert", str(tarball / "model.ckpt-0.index"), str(tarball)]), "DST")
    assert not (tarball / "config.json").exists()


# ------------------------------------------------------------------------------------------------ 7
def test_predict_into_a_fine_tuning_runs_folder_is_refused(tmp_path, pretrained, capsys):
    """`predict --model RUN --out RUN` replaced RUN/dev_predictions.tsv (the record of the run's best dev evaluation)
    with predictions on whatever --dev was given; predict has no --overwrite, so another --out is the way."""
    run = _run_with_best(tmp_path, pretrained)
    data = _cola_dir(tmp_path / "CoLA")
    base = ["glue", "--task", "cola", "--dev", str(data / "dev.tsv"), "--no-progress"]
    for command, model in (("predict", run), ("predict", run / "best"),
                           ("evaluate", run / "checkpoints" / "step_00000002")):
        code = main([command, *base, "--model", str(model), "--out", str(run)])
        assert_one_error(capsys, code, f"--out {run} is the directory of the run --model {model} comes from",
                         f"such as {run / 'predictions'}")
    other = _run_with_best(tmp_path / "other", pretrained)    # another run's folder: its record too
    assert_one_error(capsys, main(["predict", *base, "--model", str(run), "--out", str(other)]),
                     f"--out {other} is a fine-tuning run's directory")
    assert (run / "dev_predictions.tsv").read_text() == "index\tprediction\nthe run's record\n"
    assert main(["predict", *base, "--model", str(run), "--out", str(run / "predictions")]) == 0
    assert (run / "predictions" / "dev_predictions.tsv").is_file()


# ------------------------------------------------------------------------------------------------ 8
def _child(code: str, ignored: bool = False) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter with SIGHUP and SIGUSR1 at their defaults (or ignored, as under nohup), whatever
    this test session inherited (ignored under `nohup` / `trap '' HUP`, or blocked: unblocked here, or the raised
    signal would stay pending and the command go on)."""
    def dispositions() -> None:
        for signum in (signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_IGN if ignored else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP, signal.SIGUSR1})

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          preexec_fn=dispositions, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGUSR1", "SIGHUP"])
def test_a_stop_signal_outside_a_training_loop_stops_a_command_as_ctrl_c_does(signame):
    """A command that gets Slurm's SIGUSR1 or a closed session's SIGHUP while it sets up (no training loop yet):
    `interrupted`, exit 130, as SIGTERM (it ended at once, 138 / 129, no word). Ignored (nohup), it stays ignored."""
    code = ("import signal, sys\nfrom albertlm.cli import model_commands\n"
            f"model_commands.run_info = lambda args: signal.raise_signal(signal.{signame}) or print('went on')\n"
            "from albertlm.cli.main import main\nsys.exit(main(['info', 'x']))")
    stopped = _child(code)
    assert stopped.returncode == 130, (stopped.returncode, stopped.stderr[-2000:])
    assert stopped.stderr.strip() == "albertlm info: interrupted" and "went on" not in stopped.stdout
    kept = _child(code, ignored=True)
    assert kept.returncode == 0 and "went on" in kept.stdout, kept.stderr[-2000:]


def test_sigterm_stops_puts_each_default_back_and_leaves_an_ignored_one():
    import threading

    from albertlm.errors import _sigterm_interrupts, sigterm_stops

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set in the main thread only")
    signums = (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in signums}
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with sigterm_stops():
            assert [signal.getsignal(s) for s in signums] == [_sigterm_interrupts, _sigterm_interrupts, signal.SIG_IGN]
        assert [signal.getsignal(s) for s in signums] == [signal.SIG_DFL, signal.SIG_DFL, signal.SIG_IGN]
    finally:
        for s, handler in before.items():
            if handler is not None:
                signal.signal(s, handler)
