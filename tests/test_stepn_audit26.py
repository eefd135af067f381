"""A fine-tuning run's `RUN/checkpoints/step_N` used as a model (twenty-sixth session), as a user picking an earlier
step does: its label names were lost (`read_labels` looked for a task.json the step and the run directory do not
have: `convert --to hf` wrote LABEL_0.., `from_pretrained(step).labels` was empty), its tokenizer came from the
run's best/ only (before the first evaluation, or with best/ removed, `predict` said "pass --tokenizer" without
saying why or which, and `convert` copied none); now the step's run_config.json gives the labels and records the
tokenizer the run was fine-tuned with. `finetune --resume` with another tokenizer than the run's trained on other
ids without a word; `--tokenizer` on a step_N was not checked against the run's. SQuAD's wording on which
checkpoints record a null threshold follows the step checkpoints that now record one."""
from __future__ import annotations

import json
import shutil

import pytest

from albertlm.cli.main import main
from albertlm.training.checkpoint import step_dir
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained
from test_classify_audit22 import NEG, POS, _sst2_csv
from test_squadj_audit26 import SMALL
from test_squadopt_audit26 import DEV, _v20_model, _warnings

LABELS = [POS, NEG]     # not the sorted order (NEG, POS): the run's own order must survive
RUN = ["--no-progress", "--device", "cpu"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny classify run with --labels POS,NEG (test_classify_audit22's names): 3 steps, evaluated every 2, a
    checkpoint at every step. Returns (its base model, its dev file, its directory)."""
    import torch

    root = tmp_path_factory.mktemp("stepn")
    (root / "base").mkdir()
    base = save_tiny_pretrained(root / "base")
    train, dev = _sst2_csv(root / "train.csv", "train", 12), _sst2_csv(root / "dev.csv", "dev", 6)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(_finetune_argv(base, train, dev, root / "run")) == 0
    finally:
        torch.set_num_threads(before)
    return base, dev, root / "run"


def _finetune_argv(base, train, dev, out, *extra) -> list[str]:
    return ["finetune", "classify", "--train", str(train), "--dev", str(dev), "--labels", ",".join(LABELS),
            "--model", str(base), "--out", str(out), "--max-steps", "3", "--eval-every", "2", "--save-every", "1",
            "--train.keep_last", "3", "--batch-size", "4", "--max-seq-length", "24", "--train.tensorboard", "false",
            *RUN, *extra]


def _without_best(run_dir, where):
    """A copy of the run as it was before its first evaluation (or with best/ removed): no best/."""
    shutil.copytree(run_dir, where)
    shutil.rmtree(where / "best")
    return where


def _predicted(out) -> str:
    return (out / "dev_predictions.tsv").read_text()


# ------------------------------------------------------------------------------------------------ labels
def test_a_step_checkpoint_names_its_labels_as_best_does(run, tmp_path, capsys):
    """read_labels(step_N) was {} (best/ gave them): convert --to hf wrote id2label LABEL_0, LABEL_1 and
    from_pretrained's labels were empty. The step's run_config.json records them, in the run's order."""
    from albertlm.interop.hf import read_labels
    from albertlm.model.heads import AlbertForSequenceClassification

    _, _, out = run
    named = {"id2label": {"0": POS, "1": NEG}, "problem_type": "single_label_classification"}
    assert read_labels(out / "best") == named
    for step in (1, 2, 3):    # before the best one, the best one, after it
        assert read_labels(step_dir(out, step)) == named, step
    assert AlbertForSequenceClassification.from_pretrained(step_dir(out, 3)).labels == named
    assert main(["convert", "--to", "hf", str(step_dir(out, 3)), str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == named["id2label"] and config["label2id"] == {POS: 0, NEG: 1}
    # the converted step predicts under the run's names (it predicted LABEL_0 / LABEL_1, scored against POS / NEG)
    _, dev, _ = run
    assert main(["predict", "classify", "--model", str(tmp_path / "hf"), "--dev", str(dev), "--out",
                 str(tmp_path / "p"), *RUN]) == 0
    assert main(["predict", "classify", "--model", str(step_dir(out, 3)), "--dev", str(dev), "--out",
                 str(tmp_path / "q"), *RUN]) == 0
    capsys.readouterr()
    assert _predicted(tmp_path / "p") == _predicted(tmp_path / "q")


# --------------------------------------------------------------------------------------------- tokenizer
def test_the_run_records_its_tokenizer_and_a_step_uses_it_before_best_exists(run, tmp_path, capsys):
    """A step holds no tokenizer and was given best/'s: before the run's first evaluation (or with best/ removed)
    predict said only "no tokenizer files ...; pass --tokenizer PATH" and convert copied none. Each step's
    run_config.json now names the tokenizer the run found, and predict, convert and export take it."""
    base, dev, out = run
    for step in (1, 2, 3):
        assert json.loads((step_dir(out, step) / "run_config.json").read_text())["tokenizer"] == str(base.resolve())
    assert main(["predict", "classify", "--model", str(step_dir(out, 1)), "--dev", str(dev), "--out",
                 str(tmp_path / "with"), *RUN]) == 0
    early = _without_best(out, tmp_path / "run")
    step = step_dir(early, 1)
    assert main(["predict", "classify", "--model", str(step), "--dev", str(dev), "--out", str(tmp_path / "early"),
                 *RUN]) == 0
    assert _predicted(tmp_path / "early") == _predicted(tmp_path / "with")
    assert main(["convert", "--to", "hf", str(step), str(tmp_path / "hf")]) == 0
    assert "tokenizer: none found" not in capsys.readouterr().out
    assert (tmp_path / "hf" / "vocab.txt").read_text() == (base / "vocab.txt").read_text()
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())


def test_no_tokenizer_for_a_step_says_why_and_which_the_run_used(run, tmp_path, capsys):
    """No best/ and the recorded tokenizer moved away: one line saying that the step holds none, that best/ does
    not exist (yet) and which tokenizer the run was fine-tuned with."""
    _, dev, out = run
    early = _without_best(out, tmp_path / "run")
    step = step_dir(early, 1)
    config = json.loads((step / "run_config.json").read_text())
    (step / "run_config.json").write_text(json.dumps({**config, "tokenizer": str(tmp_path / "moved" / "vocab.txt")}))
    assert_one_error(capsys, main(["predict", "classify", "--model", str(step), "--dev", str(dev), "--out",
                                   str(tmp_path / "p"), *RUN]),
                     "step checkpoint holds none", f"{early / 'best'} does not exist",
                     f"fine-tuned with the tokenizer {tmp_path / 'moved' / 'vocab.txt'}", "pass --tokenizer PATH")
    assert main(["convert", "--to", "hf", str(step), str(tmp_path / "hf")]) == 0
    said = capsys.readouterr().out
    assert f"{early / 'best'} does not exist" in said and "see --tokenizer" in said


def _permuted_vocab(path):
    """A WordPiece vocabulary of the same size as the run's with two words swapped: other ids, same length."""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]
    words[5], words[6] = words[6], words[5]
    path.write_text("\n".join(words) + "\n")
    return path


def test_another_tokenizer_than_the_runs_is_refused_for_a_step_and_on_resume(run, tmp_path, capsys):
    """`predict --model RUN/checkpoints/step_N --tokenizer OTHER` fed the model other ids (the check applied to a
    checkpoint with the tokenizer beside it only); `finetune --resume --tokenizer OTHER` trained on: both
    refused in one line naming the run's tokenizer. The run's own given again is accepted."""
    base, dev, out = run
    other = _permuted_vocab(tmp_path / "vocab.txt")
    assert_one_error(capsys, main(["predict", "classify", "--model", str(step_dir(out, 1)), "--dev", str(dev),
                                   "--out", str(tmp_path / "p"), "--tokenizer", str(other), *RUN]),
                     f"--tokenizer {other} is not the tokenizer", "its run's", "leave --tokenizer out")
    assert not (tmp_path / "p").exists()
    resumed = tmp_path / "run"
    shutil.copytree(out, resumed)
    shutil.rmtree(step_dir(resumed, 3))
    train = dev.parent / "train.csv"
    assert_one_error(capsys, main([*_finetune_argv(base, train, dev, resumed, "--resume", "--tokenizer",
                                                    str(other))]),
                     f"the run in {resumed} was fine-tuned with the tokenizer {base.resolve()}",
                     "a resumed run keeps its tokenizer", "leave --tokenizer out")
    assert not step_dir(resumed, 3).exists()
    assert main([*_finetune_argv(base, train, dev, resumed, "--resume", "--tokenizer", str(base / "vocab.txt"))]) == 0
    capsys.readouterr()
    assert (resumed / "dev_predictions.tsv").read_text() == (out / "dev_predictions.tsv").read_text()


# ------------------------------------------------------------------------------- SQuAD threshold wording
def test_the_null_threshold_lines_say_which_steps_record_one(tmp_path, capsys):
    """They said a checkpoints/step_N folder records no threshold; a step saved right after a dev evaluation does
    (run_config.json) and one saved between evaluations (--save-every) does not."""
    from test_squadopt_audit26 import _unlabelled

    bare = _v20_model(tmp_path / "step")
    base = ["predict", "squad", "--model", str(bare), "--out", str(tmp_path / "p"), *SMALL]
    assert_one_error(capsys, main([*base, "--data", str(DEV), "--null-threshold", "recorded"]),
                     "saved between evaluations (--save-every)", "nearby evaluated step")
    assert main([*base, "--data", str(_unlabelled(tmp_path / "new.json"))]) == 0
    notes = [line for line in _warnings(capsys.readouterr().err) if "threshold" in line]
    assert len(notes) == 1 and "saved between evaluations (--save-every)" in notes[0], notes
    assert "right after a dev evaluation" in notes[0] and "nearby evaluated step" in notes[0]


def test_a_step_converted_to_hf_cuts_at_the_fine_tuned_length_and_says_fine_tuning(run, tmp_path, capsys):
    """convert --to hf from a step wrote model_max_length 64 (the positions; best/ gave the fine-tuned 24) and a
    card saying "held-out evaluation during pretraining" and "Training data: Not recorded"."""
    import json

    from albertlm.cli.main import main

    _, _, out = run
    step = out / "checkpoints" / "step_00000002"
    dst = tmp_path / "hf"
    assert main(["convert", str(step), str(dst), "--to", "hf"]) == 0
    capsys.readouterr()
    config = json.loads((dst / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["model_max_length"] == 24
    card = (dst / "README.md").read_text(encoding="utf-8")
    assert "during fine-tuning at step 2" in card and "during pretraining" not in card
    assert "fine-tuned on classify" in card and "Not recorded" not in card
