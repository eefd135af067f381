"""Fine-tuning follow-ups, audit 32.

1. A checkpoint fine-tuned on another task whose head the loader already drew fresh (another classifier class of the
   same shape, `io.other_class_head`: STS-B's one-output regression head for RACE's choice scorer, or the reverse)
   had that head drawn a second time by `finetune.load_model`: another head than the same seed's from a pretrained
   checkpoint of the same backbone (and the caller's random stream left elsewhere), and a second warning naming
   weights ("its head (classifier.weight, classifier.bias)") that were not taken from the checkpoint. Now every
   weight a pretrained start would draw is drawn once, from the stream as it was before loading; the fine-tuned-on
   warning names only the weights the loader really took. (A checkpoint without a pooler, a SQuAD run's for GLUE, is
   checked too: it passed before.)
   `predict` / `evaluate --model` of a checkpoint without a task record whose classifier is not the task's (an
   STS-B regression's one output for SST-2: every row class 0, accuracy 0.52 printed without a word; a RACE choice
   scorer for STS-B: a random head, one warning, scores printed) are refused in one line, as a checkpoint without
   the head is (`finetune.check_task_head`).
2. `predict` / `evaluate` --help described --skip-bad-rows, --precision and --train.progress in fine-tuning's words
   (training rows, loss scaling, rank 0): each command now says what the option does for it.
3. `predict glue --trai x` was told "did you mean --train?", an option predict hides and ignores: the hints never
   name it. argparse's abbreviations stay off (`--tra` is no option's prefix match; passes before).
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from albertlm.cli import task_commands
from albertlm.cli.main import Parser, main
from albertlm.config.task import FinetuneConfig
from albertlm.model.heads import AlbertForMaskedLM, AlbertForMultipleChoice, AlbertForQuestionAnswering
from albertlm.tasks import finetune
from conftest import assert_one_error, save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags
from test_ftfollow_audit29 import _spec
from test_glue_audit17 import _glue_model


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _task_model(directory: Path, pretrained: Path, cls, record: dict) -> Path:
    """A fine-tuned checkpoint as finetune writes best/: the pretrained backbone, a random head of `cls`, `record`
    as its task.json."""
    torch.manual_seed(11)
    cls.from_pretrained(pretrained).save_pretrained(directory)
    shutil.copy(pretrained / "vocab.txt", directory / "vocab.txt")
    (directory / "task.json").write_text(json.dumps({**record, "max_seq_length": 16}))
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny pretrained model; STS-B, RACE and SQuAD checkpoints holding its very backbone; the backbone without a
    pooler as a pretrained masked-LM checkpoint."""
    root = tmp_path_factory.mktemp("audit32_ftfix")
    (root / "pre").mkdir()
    pre = save_tiny_pretrained(root / "pre")
    torch.manual_seed(1)
    mlm = root / "mlm"
    AlbertForMaskedLM.from_pretrained(pre).save_pretrained(mlm)
    shutil.copy(pre / "vocab.txt", mlm / "vocab.txt")
    return {"pre": pre, "mlm": mlm, "stsb": _glue_model(root / "stsb", pre, "stsb"),
            "race": _task_model(root / "race", pre, AlbertForMultipleChoice, {"family": "race"}),
            "squad": _task_model(root / "squad", pre, AlbertForQuestionAnswering, {"family": "squad"})}


RACE = finetune.TaskSpec("race", AlbertForMultipleChoice, {}, [], [], "accuracy", info={})


def _loaded(spec, model_dir: Path, seed: int = 5):
    """The model `load_model` gives under `seed`, the next number of the random stream, the warnings said."""
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger, keep = logging.getLogger("albertlm.model"), Keep(logging.WARNING)
    logger.addHandler(keep)
    try:
        torch.manual_seed(seed)
        model = finetune.load_model(spec, model_dir, FinetuneConfig())
        after = torch.rand(4)
    finally:
        logger.removeHandler(keep)
    return model, after, records


def _same_model(a, b) -> bool:
    one, two = a.state_dict(), b.state_dict()
    return one.keys() == two.keys() and all(torch.equal(one[name], two[name]) for name in one)


# ------------------------------------------------------------------ 1. a head the loader drew is not drawn again

@pytest.mark.parametrize("start, spec", [("stsb", RACE), ("race", _spec("glue", "stsb", 1))],
                         ids=["stsb-to-race", "race-to-stsb"])
def test_another_classifier_class_of_the_same_shape_is_drawn_once(models, start, spec):
    """STS-B's one-output classifier for RACE (and RACE's for STS-B): the model, its outputs and the random stream
    after it are those of the same seed from the pretrained checkpoint of that backbone; one warning, the loader's
    (another classifier class), none naming the classifier as taken from the checkpoint."""
    model, after, said = _loaded(spec, models[start])
    fresh, fresh_after, _ = _loaded(spec, models["pre"])
    assert _same_model(model, fresh)
    assert torch.equal(after, fresh_after)
    ids = torch.tensor([[2, 5, 6, 7, 3, 0], [2, 8, 9, 3, 10, 3]])
    inputs = {"input_ids": ids[:, None].expand(-1, 4, -1)} if spec is RACE else {"input_ids": ids}
    assert torch.equal(model(**inputs).logits, fresh(**inputs).logits)
    assert len(said) == 1 and "its classifier was trained as" in said[0], said


def test_a_checkpoint_without_a_pooler_draws_as_a_pretrained_one_without(models):
    """(passes before) A SQuAD run's model (no pooler) for SST-2: pooler and classifier as the same seed draws them
    from a pretrained checkpoint of that backbone without a pooler."""
    model, after, said = _loaded(_spec("glue", "sst2", 2), models["squad"])
    fresh, fresh_after, _ = _loaded(_spec("glue", "sst2", 2), models["mlm"])
    assert _same_model(model, fresh) and torch.equal(after, fresh_after)
    assert not any("fine-tuned on" in line for line in said), said


def test_finetune_from_another_classifier_class_trains_as_from_the_pretrained_model(models, tmp_path, caplog):
    """`finetune glue --task stsb --model RACE_RUN` (the RACE run's backbone is the pretrained one): every step's
    loss equals the run's from the pretrained model with the same --seed; one warning line about the head."""
    data = shared_path("glue_samples", "STS-B")
    losses = {}
    for start in ("race", "pre"):
        out = tmp_path / start
        with caplog.at_level(logging.WARNING, logger="albertlm"):
            caplog.clear()
            assert main(["finetune", "glue", "--task", "stsb", "--data-dir", str(data), "--model",
                         str(models[start]), "--out", str(out), "--max-steps", "3", *QUICK]) == 0
        losses[start] = json.loads((out / "train_log.json").read_text())["losses"]
        if start == "race":
            heads = [r.getMessage() for r in caplog.records if "classifier" in r.getMessage()]
            assert len(heads) == 1 and "AlbertForMultipleChoice" in heads[0], caplog.text
    assert len(losses["race"]) == 3 and losses["race"] == losses["pre"], losses


def _bare(model_dir: Path, out: Path) -> Path:
    """The checkpoint's model and vocabulary without its task record (a model saved or exported on its own)."""
    out.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        shutil.copy(model_dir / name, out / name)
    return out


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("start, task, said", [("stsb", "sst2", "its classifier has 1 output(s), the task 2"),
                                               ("race", "stsb", "trained as AlbertForMultipleChoice's")])
def test_a_head_of_another_task_without_a_record_is_refused(models, tmp_path, capsys, command, start, task, said):
    from test_glue_audit17 import W, _tsv

    model = _bare(models[start], tmp_path / "model")
    dev = (shared_path("glue_samples", "STS-B", "dev.tsv") if task == "stsb" else
           _tsv(tmp_path / "dev.tsv", [["sentence", "label"], *[[W[i % 6], i % 2] for i in range(6)]]))
    out = tmp_path / "out"
    code = main([command, "glue", "--task", task, "--model", str(model), "--dev", str(dev), "--out", str(out),
                 "--no-progress"])
    assert_one_error(capsys, code, f"{model}: not a fine-tuned checkpoint for this task", said)
    assert not out.exists()


# ------------------------------------------------------------------------------ 2. predict / evaluate --help

def _usage_error(argv: list[str]) -> int:
    """The exit status of `main(argv)` refused by argparse (its `SystemExit`)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


def _help(argv: list[str], capsys) -> str:
    """The option descriptions of `argv --help` (after the usage lines), on one line. argparse wraps them at the
    terminal's width (COLUMNS, or the terminal pytest runs in) and breaks words at hyphens (`--skip-bad-` `rows` at
    250 columns): a width no description reaches, so the text is the same wherever the tests run."""
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit):
        patch.setenv("COLUMNS", "1000")
        main([*argv, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    return text[text.index("show this help message and exit"):]


def _option_help(text: str, option: str, after: str) -> str:
    start = text.index(option)
    return text[start:text.index(after, start + len(option))]


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_predict_and_evaluate_help_say_what_their_options_do_for_them(command, capsys):
    text = _help([command, "glue"], capsys)
    skip = _option_help(text, "--skip-bad-rows [BOOL]", "evaluation options:")
    assert "training" not in skip and "malformed dev rows" in skip and "test rows are never skipped" in skip, skip
    precision = _option_help(text, "--precision {fp32,bf16,fp16}", "--train.progress")
    assert "loss scaling" not in precision and "the precision the model" in precision, precision
    progress = _option_help(text, "--train.progress [BOOL]", "--no-progress")
    assert "rank 0" not in progress and "record" not in progress, progress
    for family in ("squad", "race", "classify"):
        text = _help([command, family], capsys)
        assert "loss scaling" not in _option_help(text, "--precision {fp32,bf16,fp16}", "--train.progress")


def test_finetune_help_keeps_the_training_words(capsys):
    text = _help(["finetune", "glue"], capsys)
    assert "malformed training/dev rows" in _option_help(text, "--skip-bad-rows [BOOL]", "fine-tuning options:")
    assert "loss scaling" in _option_help(text, "--precision {fp32,bf16,fp16}, --train.precision", "(default: ")


# ------------------------------------------------------------------ 3. hints never name a hidden option

@pytest.mark.parametrize("argv", [["predict", "glue", "--out", "o"], ["evaluate", "glue"],
                                  ["predict", "classify", "--out", "o"], ["evaluate", "squad"]])
@pytest.mark.parametrize("typed", ["--trai", "--tran", "--train-file"])
def test_a_misspelt_train_is_not_offered_the_hidden_train(argv, typed, capsys):
    assert _usage_error([*argv, "--model", "M", typed, "x.tsv"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"unrecognized arguments: {typed} x.tsv" in lines[0], lines
    assert "--train?" not in lines[0] and "--train " not in lines[0], lines


def test_finetune_still_offers_train_and_predict_still_takes_it(capsys):
    code = _usage_error(["finetune", "glue", "--task", "sst2", "--model", "M", "--out", "o", "--trai", "x.tsv"])
    assert_one_error(capsys, code, "unrecognized arguments: --trai x.tsv", "did you mean --train?")
    parser = Parser(prog="albertlm predict")
    task_commands.add_arguments(parser, "predict")
    args = parser.parse_args(["glue", "--train", "t.tsv", "--model", "M", "--out", "o"])   # taken, unused
    assert args.model == "M"
    assert "--train " not in _help(["predict", "glue"], capsys)


@pytest.mark.parametrize("argv", [["predict", "glue", "--model", "M", "--out", "o"],
                                  ["finetune", "glue", "--task", "sst2", "--model", "M", "--out", "o"]])
@pytest.mark.parametrize("typed", ["--tra", "--train.prog", "--skip-bad", "--max-seq", "--dev-f"])
def test_no_abbreviation_is_taken_for_an_option(argv, typed, capsys):
    """(passes before) A prefix of an option is no option: `--tra x` is not --train (hidden or not),
    `--train.prog` not --train.progress."""
    assert_one_error(capsys, _usage_error([*argv, typed, "1"]), "unrecognized arguments:")
