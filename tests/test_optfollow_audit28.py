"""Audit 28, follow-ups on option errors and scoring speed: a value the config's checks refuse (its range, a field it
must agree with) is named by the flag typed and its other spellings, as a value of the wrong type already was
(`--max-steps -1` said `train.max_steps=-1: must be >= 0`, `data build --max-seq-length 3` said `max_seq_length
must be in [8, 65535], got 3`), while a --config file's value keeps naming the file; and scoring a predictions file
loads no scikit-learn (its import was 3.4 s of 5.5 s for plain accuracy), the accuracy being scikit-learn's."""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys

import numpy as np
import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_flakes_audit17 import _env   # os.environ without a launch's variables (they would silence the child)


@pytest.mark.parametrize("argv, said", [
    (["pretrain", "--data", "D", "--max-steps", "-1"], "--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0"),
    (["pretrain", "--data", "D", "--train.max_steps", "-1"], "--train.max_steps/--max-steps: train.max_steps=-1"),
    (["pretrain", "--data", "D", "--lr", "-1"], "--lr/--optim.lr: optim.lr=-1.0: must be positive"),
    (["pretrain", "--data", "D", "--model.hidden_size", "63"],
     "--model.hidden_size: hidden_size=63: must be divisible by num_heads=12"),
    (["pretrain", "--data", "D", "--dist.device", "gpu"], "--dist.device: dist.device='gpu': must be auto, cpu, cuda"),
    # the key refused is one that the flag typed implies (--train.epochs resets train.max_steps to 0)
    (["pretrain", "--data", "D", "--train.epochs", "0"], "--train.epochs: train.max_steps=0: must be >= 1"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--max-steps", "-1"],
     "--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--epochs", "0"],
     "--epochs/--train.epochs: train.max_steps=0: must be >= 1"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--warmup-ratio", "1.5"],
     "--warmup-ratio/--optim.warmup_ratio: optim.warmup_ratio=1.5: must be in [0, 1)"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--max-seq-length", "4"],
     "--max-seq-length: max_seq_length=4: must be >= 8"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--hidden-dropout", "2"],
     "--hidden-dropout: hidden_dropout=2.0: must be in [0, 1)"),
    (["data", "build", "--input", "A", "--tokenizer", "T", "--max-seq-length", "3"],
     "--max-seq-length: max_seq_length must be in [8, 65535], got 3"),
    (["data", "build", "--input", "A", "--tokenizer", "T", "--masked-lm-prob", "2"],
     "--masked-lm-prob: masked_lm_prob must be in [0, 1], got 2.0"),
])
def test_a_value_out_of_range_is_named_by_the_flag_typed(argv, said, tmp_path, capsys):
    """Each named the dataclass field alone; now the flag as typed, its other spellings, then the check's message
    (kept whole: older tests and the docs quote it): one line, exit 2, nothing made."""
    out = tmp_path / "out"
    assert_one_error(capsys, main([*argv, "--out", str(out)]), said)
    assert not out.exists()


def test_a_message_that_names_its_flag_is_left_as_it_was(tmp_path, capsys):
    """A guard: a check that says the flag itself (data build's) is not said twice."""
    code = main(["data", "build", "--input", "A", "--tokenizer", "T", "--out", str(tmp_path / "o"), "--dupe-factor",
                 "0"])
    assert_one_error(capsys, code, "error: --dupe-factor must be >= 1, got 0")


def test_predict_and_evaluate_name_the_flag(tmp_path, capsys):
    """predict / evaluate's options are read once the model is found: the same message there."""
    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    code = main(["predict", "glue", "--task", "sst2", "--model", str(model), "--out", str(tmp_path / "p"),
                 "--eval-batch-size", "0"])
    assert_one_error(capsys, code, "--eval-batch-size: eval_batch_size=0: must be >= 1")
    code = main(["evaluate", "glue", "--task", "sst2", "--model", str(model), "--max-seq-length", "4"])
    assert_one_error(capsys, code, "--max-seq-length: max_seq_length=4: must be >= 8")


def test_a_config_files_value_still_names_the_file(tmp_path, capsys):
    """A --config file's value is said with its file, as before; of a file's and a flag's value that disagree,
    the one the message names first is said."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"optim": {"lr": -1}, "model": {"num_heads": 5}}))
    base = ["pretrain", "--data", "D", "--out", str(tmp_path / "o"), "--config", str(bad)]
    assert_one_error(capsys, main([*base, "--lr", "1e-3"]), f"{bad}: hidden_size=768: must be divisible by "
                                                            "num_heads=5")
    assert_one_error(capsys, main([*base, "--model.hidden_size", "64"]), "error: --model.hidden_size: "
                                                                         "hidden_size=64: must be divisible")
    assert_one_error(capsys, main([*base, "--model.num_heads", "4"]), f"error: {bad}: optim.lr=-1.0: must be positive")


def test_values_rebuilt_from_given_values_keep_their_flags():
    """`finetune --resume` builds the saved config with `GivenValues(asked, given.files)` (a recipe's values under
    the given ones): the flags travel with the sources, so its refusals name them too."""
    from albertlm.cli.task_commands import finetune_options
    from albertlm.config.overrides import GivenValues, add_options, build, given_values
    from albertlm.config.task import FinetuneConfig
    from albertlm.errors import UserError

    flags = finetune_options("glue", "finetune")
    parser = argparse.ArgumentParser()
    add_options(parser, flags)
    given = given_values(parser.parse_args(["--lr", "-2"]), flags)
    with pytest.raises(UserError, match=r"^--lr/--optim.lr: optim.lr=-2.0: must be positive$"):
        build(FinetuneConfig, GivenValues({"train.max_steps": 5, **given}, given.files))


def test_accuracy_is_scikit_learns_on_random_labels():
    """A guard (passes before): accuracy, now computed without scikit-learn for ids and names, is float-equal to
    `accuracy_score` on 200 random trials of each kind; what it refuses is still refused."""
    from sklearn.metrics import accuracy_score

    from albertlm.tasks.metrics import accuracy

    rng = random.Random(0)
    for _ in range(200):
        n, k = rng.choice([1, 2, 7, 872, 1000]), rng.choice([2, 3, 5])
        labels = [rng.randrange(k) for _ in range(n)]
        preds = [rng.randrange(k) if rng.random() < 0.3 else label for label in labels]
        for gold, pred in ((labels, preds), (np.array(labels, dtype=np.uint8), np.array(preds)),
                           ([f"c{x}" for x in labels], [f"c{x}" for x in preds])):
            want = accuracy_score(gold, pred)
            assert accuracy(gold, pred) == want and type(accuracy(gold, pred)) is float
    for gold, pred in (([0.5, 1.5], [0, 1]), ([0, 1], [0]), (["a", "b"], [0, 1])):
        with pytest.raises(ValueError):
            accuracy(gold, pred)


def test_scoring_an_sst2_predictions_file_loads_no_sklearn(tmp_path):
    """`evaluate glue --task sst2 --predictions FILE` imported scikit-learn (and scipy through it) for accuracy."""
    sst2 = shared_path("glue", "SST-2", "dev.tsv")
    rows = len(sst2.read_text(encoding="utf-8").splitlines()) - 1
    preds = tmp_path / "dev_predictions.tsv"
    preds.write_text("index\tprediction\n" + "".join(f"{i}\t{i % 2}\n" for i in range(rows)), encoding="utf-8")
    child = ("import sys; from albertlm.cli.main import main; "
             f"code = main(['evaluate', 'glue', '--task', 'sst2', '--dev', {str(sst2)!r}, '--predictions', "
             f"{str(preds)!r}]); print(code, sorted(m for m in ('sklearn', 'scipy', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "0 []", proc.stdout
    assert '"accuracy"' in proc.stdout
