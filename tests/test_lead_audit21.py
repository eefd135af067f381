"""The lead's follow-ups of session 21's audits (fine-tuning output and help, RACE, torchrun, logs, signals)."""
from __future__ import annotations

import json

from albertlm.cli.main import main
from test_ablate_audit20 import default_sigterm  # noqa: F401  (a fixture)


def test_finetune_help_says_what_save_every_0_means_for_fine_tuning(capsys):
    """`--save-every 0` saves at every dev evaluation in fine-tuning; the help showed pretraining's meaning
    ("only at the end")."""
    try:
        main(["finetune", "classify", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert "0 = at every dev evaluation" in text and "0 = only at the end" not in text


def test_finetune_prints_null_not_nan_for_a_nan_best_score(tmp_path, capsys, monkeypatch):
    """The summary `finetune` prints on stdout held a bare NaN (not JSON) when the best score was NaN."""
    from conftest import TINY_WORDS, save_tiny_pretrained

    import albertlm.tasks.finetune as finetune

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    (tmp_path / "data.csv").write_text("text,label\n" + "".join(f"{w},{'pos' if i % 2 else 'neg'}\n"
                                                             for i, w in enumerate(TINY_WORDS)))
    monkeypatch.setattr(finetune, "run_finetune",
                        lambda *a, **k: {"best": {"step": 2, "dev": {"accuracy": float("nan")}}, "status": "done"})
    assert main(["finetune", "classify", "--train", str(tmp_path / "data.csv"), "--model", str(model),
                 "--out", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out[out.index("{"):], parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert printed["best"]["dev"]["accuracy"] is None


def test_race_prediction_files_are_replaced_whole(tmp_path, monkeypatch):
    """The prediction files of the task evaluations were written in place: a write that failed midway (full
    disk, a kill) left a truncated file under the name of the last good one. Now they are written beside and
    renamed; a failed write is one UserError and the previous file stays whole."""
    import os

    import numpy as np
    import pytest

    from albertlm.errors import UserError
    from albertlm.tasks import race, specs

    examples = [race.RaceExample(f"middle/1.txt#{i}", "middle", "a b", "q", ["w", "x", "y", "z"], i % 4)
                for i in range(3)]
    eval_set = specs._race_eval_set("test", examples, [], selects=False)
    logits = np.eye(4, dtype=np.float32)[[0, 1, 2]]
    eval_set.write({"logits": logits}, tmp_path)
    before = (tmp_path / "test_predictions.json").read_text()
    assert json.loads(before) == {"middle/1.txt#0": "A", "middle/1.txt#1": "B", "middle/1.txt#2": "C"}

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(UserError, match="No space left"):
        eval_set.write({"logits": np.eye(4, dtype=np.float32)[[3, 3, 3]]}, tmp_path)
    assert (tmp_path / "test_predictions.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test_metrics.json", "test_predictions.json"]


def test_atomic_text_writes_are_utf8_whatever_the_locale(tmp_path):
    """write_text_atomic used the locale's encoding: under a non-UTF-8 locale a non-ASCII label or answer
    (predictions.json is written with ensure_ascii=False) raised UnicodeEncodeError."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    code = ("import sys; from pathlib import Path; from albertlm.training.checkpoint import write_text_atomic; "
            "write_text_atomic(Path(sys.argv[1]), 'caf\\u00e9 \\u65e5\\u672c')")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.json")], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "x.json").read_text(encoding="utf-8") == "caf\u00e9 \u65e5\u672c"


def test_a_tf_import_comes_back_in_eval_mode():
    """`from_pretrained` returns eval mode (as transformers'); `import_tf_checkpoint` returned training mode, so
    a TF import's first forward ran its dropout."""
    from test_tf_import import FIXTURE

    from albertlm.interop.tf import import_tf_checkpoint

    model, _ = import_tf_checkpoint(FIXTURE)
    assert not model.training and not any(m.training for m in model.modules())


def test_predicting_a_race_level_directory_names_what_to_give(tmp_path, capsys):
    """`predict race --data-dir RACE/dev/middle` (one level) said only "no data to predict: give --data-dir DIR
    with dev/ or test/"; it now says which directory and --levels to give."""
    from conftest import assert_one_error, save_tiny_pretrained, shared_path

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    code = main(["predict", "race", "--model", str(model), "--data-dir", str(shared_path("race", "RACE", "dev",
                 "middle")), "--out", str(tmp_path / "pred"), "--no-progress"])
    assert_one_error(capsys, code, "is one level", "--levels middle")


def test_task_commands_describe_what_they_do(capsys):
    """`finetune glue --help` (and every task command's) had only its own name as its description."""
    import pytest

    for command in ("finetune", "predict", "evaluate"):
        for family, phrase in (("glue", "GLUE task"), ("squad", "SQuAD"), ("race", "RACE"), ("classify", "own")):
            with pytest.raises(SystemExit):
                main([command, family, "--help"])
            text = " ".join(capsys.readouterr().out.split("options:")[0].split())
            assert phrase in text and "docs/finetuning.md" in text, (command, family, text)


def test_an_error_under_torchrun_is_left_for_the_other_nodes(tmp_path, capsys, monkeypatch):
    """A rank that stops on an error before joining left the other nodes' ranks waiting out
    --dist.timeout_minutes (30): the CLI now leaves its line in torchrun's store (tell_peers_before_joining)."""
    import albertlm.training.distributed as distributed

    told = []
    monkeypatch.setattr(distributed, "tell_peers_before_joining", told.append)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    code = main(["pretrain", "--resume", "--out", str(tmp_path / "missing")])
    assert code != 0 and len(told) == 1 and "missing" in told[0]


def test_a_rank_past_a_world_of_one_says_its_error(monkeypatch):
    """RANK=1 with no WORLD_SIZE outside torchrun exited 2 printing nothing (treated as a quiet rank)."""
    from albertlm.errors import reports_here

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "1")
    assert reports_here()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not reports_here()


def test_the_log_lines_eta_is_capped_by_the_time_budget(tmp_path):
    """A run under --train.max_minutes (the demo's) printed `ETA 1h56m` while the budget would stop it in 8
    minutes: the line now says when the budget ends."""
    import time

    from albertlm.training.metrics import MetricsLogger

    logger = MetricsLogger(tmp_path, 1000, tensorboard=False, progress=False)
    logger._started = time.monotonic() - 100.0      # 10 steps in 100 s: 990 more need ~2.75 h
    assert "ETA 2h" in logger._train_line(10, {"loss": 1.0})
    logger.deadline = time.monotonic() + 8 * 60
    line = logger._train_line(10, {"loss": 1.0})
    assert "time budget ends in 7m" in line or "time budget ends in 8m" in line, line
    assert "ETA" not in line
    logger.close()


def test_sigterm_outside_a_training_loop_stops_any_command_as_ctrl_c(tmp_path, capsys, monkeypatch, default_sigterm):
    """SIGTERM while a fine-tuning set up or wrote its last files (outside the loop's own handler) ended the process
    with 143 and no word; every command now stops as on Ctrl-C: `interrupted`, exit 130, SIGTERM's default back."""
    import signal

    from conftest import save_tiny_pretrained
    from test_ablate_audit20 import _terminate

    import albertlm.tasks.finetune as finetune

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    (tmp_path / "data.csv").write_text("text,label\ngood film,pos\nbad film,neg\n")
    monkeypatch.setattr(finetune, "run_finetune", lambda *a, **k: _terminate())
    code = main(["finetune", "classify", "--train", str(tmp_path / "data.csv"), "--model", str(model),
                 "--out", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "2", "--no-progress"])
    assert code == 130 and capsys.readouterr().err.strip().splitlines()[-1] == "albertlm finetune: interrupted"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_evaluation_line_shows_a_count_as_a_whole_number(tmp_path, capsys):
    """RACE's dev evaluation line printed `dev/num_middle 11.0000`: a count is now `11`."""
    from albertlm.training.metrics import MetricsLogger

    logger = MetricsLogger(tmp_path, 10, tensorboard=False, progress=False)
    logger.log(2, "eval", {"dev/accuracy": 0.5, "dev/num_middle": 11})
    logger.close()
    assert "dev/accuracy 0.5000, dev/num_middle 11" in capsys.readouterr().out
