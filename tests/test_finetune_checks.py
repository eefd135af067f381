"""What `finetune`, `predict` and `evaluate --model` check and take from a run: a fine-tuning run directory
means its best/, a checkpoint without the task's head is refused, the run's recorded data settings are the
defaults, `--resume` keeps the run's settings, `--overwrite` removes the old prediction files, and the
one-line warnings (warmup longer than the run, one class). Tiny model, a few steps, through the CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import TINY_WORDS, save_tiny_pretrained

WORDS = TINY_WORDS
QUICK = ["--batch-size", "4", "--max-seq-length", "16", "--lr", "1e-3", "--warmup-steps", "0", "--seed", "3",
         "--train.progress=false", "--train.tensorboard=false"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`) for every test here."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A random tiny AlbertForPreTraining (no task head) with a WordPiece vocab.txt beside it."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def _pairs(path: Path, rows: int = 12) -> Path:
    """JSONL sentence pairs: id, a, b, label (the label follows the second text)."""
    with path.open("w") as f:
        for i in range(rows):
            label = "pos" if i % 2 else "neg"
            f.write(json.dumps({"id": f"ex{i}", "a": "the film was", "b": f"very {'good' if i % 2 else 'bad'}",
                                "label": label}) + "\n")
    return path


@pytest.fixture(scope="module")
def pair_run(model_dir, tmp_path_factory) -> Path:
    """A classify run fine-tuned on sentence pairs with an id column (2 steps)."""
    root = tmp_path_factory.mktemp("pair")
    data = _pairs(root / "pairs.jsonl")
    out = root / "run"
    assert main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--text-column", "a",
                 "--text-pair-column", "b", "--id-column", "id", "--model", str(model_dir), "--out", str(out),
                 "--max-steps", "2", *QUICK]) == 0
    return out


def _error(capsys) -> str:
    """The one stderr line of a refused command."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# ----------------------------------------------------------------------------- predict / evaluate --model
def test_a_pretraining_checkpoint_is_not_a_fine_tuned_model(model_dir, tmp_path, capsys):
    data = _pairs(tmp_path / "d.jsonl")
    for command in (["predict", "classify", "--out", str(tmp_path / "p")], ["evaluate", "classify"]):
        code = main([*command, "--model", str(model_dir), "--test", str(data), "--text-column", "a",
                     "--labels", "neg,pos"])
        assert code == 2
        assert "not a fine-tuned checkpoint for this task (no classifier.weight, classifier.bias" in _error(capsys)
    assert not (tmp_path / "p").exists()
    # without --labels the data cannot be read first: no label set is recorded beside the model
    assert main(["evaluate", "classify", "--model", str(model_dir), "--test", str(data), "--text-column", "a"]) == 2
    assert "no task.json beside the model records it): give --labels" in _error(capsys)


def test_the_run_directory_means_best_and_recorded_columns_are_the_defaults(pair_run, tmp_path, capsys):
    """No column flags: the pair model reads a and b and writes the ids, as with the flags given."""
    data = _pairs(tmp_path / "t.jsonl", 6)
    capsys.readouterr()
    assert main(["predict", "classify", "--model", str(pair_run), "--test", str(data), "--out",
                 str(tmp_path / "p1")]) == 0
    assert f"using {pair_run / 'best'}" in capsys.readouterr().err
    assert main(["predict", "classify", "--model", str(pair_run / "best"), "--test", str(data), "--text-column", "a",
                 "--text-pair-column", "b", "--id-column", "id", "--out", str(tmp_path / "p2")]) == 0
    recorded = (tmp_path / "p1" / "test_predictions.tsv").read_text()
    assert recorded == (tmp_path / "p2" / "test_predictions.tsv").read_text()
    assert recorded.splitlines()[1].startswith("ex0\t")
    # evaluate on the run directory scores like on best/
    capsys.readouterr()
    assert main(["evaluate", "classify", "--model", str(pair_run), "--dev", str(data)]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)["dev"]


def test_dropping_the_pair_column_of_a_pair_model_is_refused(pair_run, tmp_path, capsys):
    data = _pairs(tmp_path / "t.jsonl", 4)
    code = main(["predict", "classify", "--model", str(pair_run / "best"), "--test", str(data),
                 "--text-pair-column", "", "--out", str(tmp_path / "p")])
    assert code == 2 and "fine-tuned on sentence pairs (column 'b')" in _error(capsys)


def test_no_data_is_an_error_naming_the_flags(pair_run, tmp_path, capsys):
    assert main(["predict", "classify", "--model", str(pair_run / "best"), "--out", str(tmp_path / "p")]) == 2
    assert "no data to predict: give --dev FILE or --test FILE" in _error(capsys)
    assert main(["evaluate", "classify", "--model", str(pair_run / "best")]) == 2
    assert "no data to evaluate" in _error(capsys)


def _glue_model(directory: Path, model_dir: Path, task: str) -> Path:
    """A GLUE fine-tuned checkpoint as finetune writes best/ (random head weights)."""
    from albertlm.model.heads import AlbertForSequenceClassification

    AlbertForSequenceClassification.from_pretrained(model_dir, num_labels=3 if task == "mnli" else 2
                                                    ).save_pretrained(directory)
    shutil.copy(model_dir / "vocab.txt", directory / "vocab.txt")
    (directory / "task.json").write_text(json.dumps({"family": "glue", "task": task, "max_seq_length": 16}))
    return directory


def test_ax_needs_an_mnli_model(model_dir, tmp_path, capsys):
    ax = tmp_path / "diagnostic.tsv"
    ax.write_text("index\tsentence1\tsentence2\n0\tthe film was good\tthe film was bad\n")
    rte = _glue_model(tmp_path / "rte", model_dir, "rte")
    code = main(["predict", "glue", "--task", "ax", "--model", str(rte), "--test", str(ax),
                 "--out", str(tmp_path / "p")])
    assert code == 2 and "fine-tuned on rte, not mnli" in _error(capsys)
    mnli = _glue_model(tmp_path / "mnli", model_dir, "mnli")
    assert main(["predict", "glue", "--task", "ax", "--model", str(mnli), "--test", str(ax),
                 "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "submission" / "AX.tsv").is_file()


def test_squad_recorded_settings_are_the_defaults(model_dir, tmp_path, monkeypatch):
    """A SQuAD run's doc stride and query length (task.json) are used unless a flag is given."""
    from albertlm.model.heads import AlbertForQuestionAnswering
    from albertlm.tasks import specs

    best = tmp_path / "best"
    AlbertForQuestionAnswering.from_pretrained(model_dir).save_pretrained(best)
    shutil.copy(model_dir / "vocab.txt", best / "vocab.txt")
    settings = {"max_seq_length": 48, "doc_stride": 16, "max_query_length": 12, "n_best_size": 5,
                "max_answer_length": 7}
    (best / "task.json").write_text(json.dumps({"family": "squad", "version": "1.1", "settings": settings,
                                                "max_seq_length": 48}))
    seen = []

    def capture(version, tokenizer, cfg, train, dev, squad_settings, training):
        seen.append((version, vars(squad_settings)))
        raise SystemExit(0)

    monkeypatch.setattr(specs, "squad_spec", capture)
    for extra in ([], ["--doc-stride", "20"]):
        with pytest.raises(SystemExit):
            main(["evaluate", "squad", "--model", str(best), "--dev", "unused.json", *extra])
    assert seen[0] == ("1.1", settings)
    assert seen[1] == ("1.1", {**settings, "doc_stride": 20})


# ------------------------------------------------------------------------------------------- finetune
def _run_config(out: Path) -> dict:
    newest = sorted((out / "checkpoints").glob("step_*"))[-1]
    return json.loads((newest / "run_config.json").read_text())


def test_resume_keeps_the_runs_settings(model_dir, tmp_path, capsys):
    data = _pairs(tmp_path / "d.jsonl")
    out = tmp_path / "run"
    base = ["finetune", "classify", "--train", str(data), "--text-column", "a", "--model", str(model_dir),
            "--out", str(out), "--batch-size", "4", "--max-seq-length", "16", "--train.progress=false",
            "--train.tensorboard=false"]
    assert main([*base, "--recipe", "rte", "--max-steps", "2", "--warmup-steps", "0"]) == 0
    assert _run_config(out)["optim"]["lr"] == 3e-5
    capsys.readouterr()
    # a changed learning rate (or recipe) is refused, naming the setting
    assert main([*base, "--resume", "--max-steps", "3", "--lr", "2e-5"]) == 2
    assert "the run was started with optim.lr=3e-05, now 2e-05" in _error(capsys)
    assert main([*base, "--resume", "--max-steps", "3", "--recipe", "mrpc"]) == 2
    assert "optim.lr=3e-05" in _error(capsys)
    assert main([*base, "--resume", "--max-steps", "3", "--text-pair-column", "b"]) == 2
    assert "text_pair_column=''" in _error(capsys)
    # no recipe, no lr: the run's own settings (not the family defaults), and a longer run is allowed
    assert main([*base, "--resume", "--max-steps", "3"]) == 0
    saved = _run_config(out)
    assert saved["optim"]["lr"] == 3e-5 and saved["optim"]["warmup_steps"] == 0 and saved["train"]["max_steps"] == 3
    assert saved["hidden_dropout"] == 0.1        # rte's recipe
    # the first run's own command line again (recipe and flags) is the same settings: accepted
    assert main([*base, "--resume", "--recipe", "rte", "--warmup-steps", "0", "--max-steps", "4"]) == 0
    assert _run_config(out)["train"]["max_steps"] == 4


def test_resume_without_a_checkpoint_is_refused(model_dir, tmp_path, capsys):
    """As `pretrain --resume`: nothing to resume is one line, not a new run started quietly."""
    data = _pairs(tmp_path / "d.jsonl")
    assert main(["finetune", "classify", "--train", str(data), "--text-column", "a", "--model", str(model_dir),
                 "--out", str(tmp_path / "new"), "--max-steps", "1", "--resume", *QUICK]) == 2
    assert "no run to resume in" in _error(capsys) and not (tmp_path / "new").exists()


def test_overwrite_removes_the_old_runs_prediction_files(model_dir, tmp_path, capsys):
    data = _pairs(tmp_path / "d.jsonl")
    out = tmp_path / "run"
    args = ["finetune", "classify", "--train", str(data), "--text-column", "a", "--model", str(model_dir),
            "--out", str(out), "--max-steps", "1", *QUICK]
    assert main([*args, "--test", str(data)]) == 0
    assert (out / "test_predictions.tsv").is_file()
    for name in ("predictions.json", "null_odds.json", "nbest_predictions.json", "test_metrics.json",
                 "dev_predictions.json"):
        (out / name).write_text("{}\n")               # as a SQuAD or RACE run in this OUT would have left
    (out / "submission").mkdir()
    (out / "submission" / "RTE.tsv").write_text("index\tprediction\n")
    (out / "notes.txt").write_text("mine\n")
    assert main([*args, "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["best", "checkpoints", "metrics.json", "metrics.jsonl",
                                                     "notes.txt", "train_log.json"]


def test_warnings_for_a_warmup_longer_than_the_run_and_a_single_class(model_dir, tmp_path, capsys):
    data = tmp_path / "one.csv"
    data.write_text("text,label\n" + "the film was good,pos\n" * 8)
    assert main(["finetune", "classify", "--train", str(data), "--model", str(model_dir), "--out", str(tmp_path / "r"),
                 "--max-steps", "2", *QUICK, "--warmup-steps", "5"]) == 0
    err = capsys.readouterr().err
    assert "warning: the warmup (5 steps) is longer than the run (2 steps)" in err
    assert "warning: every one of the 8 training examples has the same label" in err
