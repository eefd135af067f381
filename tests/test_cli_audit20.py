"""Session-20 CLI follow-ups (the lead's own file)."""
from __future__ import annotations

import pytest

from albertlm.cli.main import main


def _exit_code(argv) -> int:
    """main's return, or the code of argparse's SystemExit (a command's --help exits from its parser)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("argv, first", [(["help"], "usage: albertlm <command>"),
                                         (["help", "pretrain"], "usage: albertlm pretrain"),
                                         (["help", "tokenizer", "train"], "usage: albertlm tokenizer train")])
def test_help_as_a_command_shows_the_help_asked_for(argv, first, capsys):
    """`albertlm help` / `albertlm help pretrain` (as git and pip take them) was "unknown command 'help'", exit 2."""
    assert _exit_code(argv) == 0
    assert capsys.readouterr().out.startswith(first)


def test_help_of_an_unknown_command_is_still_one_line(capsys):
    assert _exit_code(["help", "pretrian"]) == 2
    err = capsys.readouterr().err
    assert "did you mean pretrain?" in err and err.count("\n") == 1


def _mnli_dev(path, labels):
    """An MNLI dev file (16 columns, gold_label last) with one row per label."""
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p", "s2p", "sentence1", "sentence2"]
                       + [f"label{i}" for i in range(1, 6)] + ["gold_label"]) + "\n"
    rows = "".join("\t".join([str(i), "p", "p", "g", "b", "b", "p", "p", f"premise {i}", f"hypothesis {i}"]
                             + ["x"] * 5 + [label]) + "\n" for i, label in enumerate(labels))
    path.write_text(header + rows, encoding="utf-8")
    return path


def test_mnli_predictions_of_the_other_dev_file_are_not_scored(tmp_path, capsys):
    """`evaluate glue --task mnli --dev dev_matched.tsv --predictions dev_mismatched_predictions.tsv` scored the
    mismatched predictions against the matched answers when the two files had as many rows."""
    labels = ["entailment", "neutral", "contradiction"]
    dev = _mnli_dev(tmp_path / "dev_matched.tsv", labels)
    own, other = tmp_path / "dev_matched_predictions.tsv", tmp_path / "dev_mismatched_predictions.tsv"
    for path in (own, other):
        path.write_text("index\tprediction\n" + "".join(f"{i}\t{label}\n" for i, label in enumerate(labels)))
    base = ["evaluate", "glue", "--task", "mnli", "--dev", str(dev), "--predictions"]
    assert main(base + [str(own)]) == 0
    assert '"accuracy": 1.0' in capsys.readouterr().out
    assert main(base + [str(other)]) == 2
    err = capsys.readouterr().err
    assert "predictions of dev_mismatched.tsv" in err and err.count("\n") == 1


@pytest.mark.parametrize("terminal", [True, False])
def test_the_dev_evaluation_during_fine_tuning_shows_a_bar_on_a_terminal_only(tmp_path, monkeypatch, terminal):
    """A fine-tuning run's dev evaluations (minutes on SQuAD's dev set) showed nothing; now a bar on a terminal,
    and still nothing in a log (the evaluation's metrics line follows there)."""
    import dataclasses

    from albertlm.tasks import finetune
    from albertlm.training.distributed import DistInfo
    from conftest import save_tiny_pretrained
    from train_fixtures import StubTokenizer, finetune_config, synthetic_task

    asked = []
    real = finetune.predict
    monkeypatch.setattr(finetune, "predict", lambda *args: asked.append(args[-1]) or real(*args))
    monkeypatch.setattr(finetune, "_terminal", lambda: terminal)
    cfg = finetune_config(max_steps=3)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=True))
    loop = finetune.make_finetune_loop(synthetic_task(), save_tiny_pretrained(tmp_path), StubTokenizer(),
                                       cfg, tmp_path / "run", DistInfo())
    loop.run()
    assert asked and all(flag is terminal for flag in asked)


def _vocab(path, words):
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", *words]) + "\n",
                    encoding="utf-8")
    return path


def test_a_cased_vocab_read_lowercased_is_named(tmp_path):
    """A BERT-cased vocab.txt without tokenizer_config.json is read lowercased (BertTokenizer's default), so its
    tokens with capitals never came out, silently; now a warning says so. An uncased vocab, or the cased one read
    cased, gives none."""
    import warnings

    from albertlm.tokenization import load_tokenizer

    words = [f"Word{i}" for i in range(120)] + [f"word{i}" for i in range(120)]
    (tmp_path / "cased").mkdir()
    (tmp_path / "uncased").mkdir()
    cased = _vocab(tmp_path / "cased" / "vocab.txt", words)
    uncased = _vocab(tmp_path / "uncased" / "vocab.txt", [f"word{i}" for i in range(240)])
    with pytest.warns(UserWarning, match="looks cased .*do_lower_case=False"):
        tok = load_tokenizer(cased)
    assert tok.vocab["Word7"] not in tok.encode("Word7")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_tokenizer(uncased)
        tok = load_tokenizer(cased, do_lower_case=False)
    assert tok.encode("Word7") == [tok.vocab["Word7"]]


def test_a_saved_or_exported_model_is_readable_as_its_config_is(tmp_path):
    """safetensors writes model.safetensors as 0600 whatever the umask: save_pretrained's and export_hf's weights were
    the one file of the directory that another user (a teammate, a serving process) could not read."""
    import os
    import stat

    from albertlm.interop.hf import export_hf
    from albertlm.model.albert import AlbertModel
    from train_fixtures import tiny_model_config

    old = os.umask(0o022)
    try:
        model = AlbertModel(tiny_model_config())
        model.save_pretrained(tmp_path / "ours")
        export_hf(model, tmp_path / "hf")
    finally:
        os.umask(old)
    for directory in (tmp_path / "ours", tmp_path / "hf"):
        modes = {stat.S_IMODE((directory / name).stat().st_mode) for name in ("config.json", "model.safetensors")}
        assert modes == {0o644}, (directory, modes)


def test_embeddings_and_fill_mask_of_a_model_with_dropout_are_deterministic():
    """`embed_texts(AlbertModel.from_pretrained(d), ...)` and `FillMask(model, tok)` ran the model in training mode
    (torch's default), so with dropout the same text gave another vector or other scores at each call; the model's
    own mode is left as it was."""
    import numpy as np
    import torch

    from albertlm.config.presets import get_preset
    from albertlm.model.heads import AlbertForMaskedLM
    from albertlm.tasks.inference import FillMask, embed_texts
    from albertlm.tokenization import load_tokenizer
    from conftest import shared_path

    tok = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    torch.manual_seed(0)
    model = AlbertForMaskedLM(get_preset("albert-tiny", vocab_size=tok.vocab_size, hidden_dropout=0.3,
                                         attention_dropout=0.3))
    assert model.training
    texts = ["the cat sat on the mat", "a much longer sentence about nothing at all"]
    first, second = embed_texts(model.albert, tok, texts), embed_texts(model.albert, tok, texts)
    np.testing.assert_array_equal(first, second)
    fill = FillMask(model, tok)
    assert fill("the [MASK] sat on the mat") == fill("the [MASK] sat on the mat")
    assert model.training and model.albert.training


def test_evaluating_a_checkpoint_leaves_the_callers_random_generator_alone(tmp_path):
    """`evaluate_checkpoint` seeded torch's global generator with 0 (its own masking is seeded), so a caller's
    random numbers after it repeated from seed 0."""
    import torch

    from albertlm.config.presets import get_preset
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training.evaluate import evaluate_checkpoint
    from train_fixtures import alice_sop_data

    data = alice_sop_data(tmp_path, lines=60)
    AlbertForPreTraining(get_preset("albert-tiny", vocab_size=30000)).save_pretrained(tmp_path / "model")
    after = []
    for seed in (123, 456):   # the numbers after it follow the caller's seed (they were seed 0's, whatever it was)
        torch.manual_seed(seed)
        assert "mlm_acc" in evaluate_checkpoint(tmp_path / "model", data, batch_size=4, max_batches=2)
        after.append(torch.rand(3))
    assert not torch.equal(*after)


@pytest.mark.parametrize("section, wrong, hint", [("DataConfig", "train", ""), ("TrainConfig", "max_step", "max_steps"),
                                                  ("OptimConfig", "learning_rate", ""), ("DistConfig", "backnd", "backend")])
def test_an_unknown_keyword_of_a_run_config_section_is_a_config_error(section, wrong, hint):
    """`DataConfig(train=...)` was Python's TypeError where `ModelConfig(hiden_size=...)` is a ConfigError naming
    the field meant."""
    from albertlm.config import run
    from albertlm.config.model import ConfigError

    with pytest.raises(ConfigError, match=f"unknown {section} field\\(s\\): {wrong}" + (f".*{hint}" if hint else "")):
        getattr(run, section)(**{wrong: 1})


def test_a_fine_tuning_out_without_checkpoints_is_not_offered_resume(tmp_path):
    """`finetune` into an --out holding a run that saved no checkpoint suggested `--resume to start again from step 0`,
    which fine-tuning then refused ("no run to resume"); pretraining keeps the suggestion."""
    from albertlm.errors import UserError
    from albertlm.tasks.finetune import RUN_FILES as FINETUNE_FILES
    from albertlm.training.checkpoint import check_run_dir

    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "config.json").write_text("{}")
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "train_log.json").write_text("{}")
    with pytest.raises(UserError) as refused:
        check_run_dir(tmp_path, resume=False, run_files=FINETUNE_FILES)
    assert "saved no checkpoint" in str(refused.value) and "--resume" not in str(refused.value)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 1.0}\n')
    (tmp_path / "run_config.json").write_text("{}")
    with pytest.raises(UserError, match="--resume to start again from step 0"):
        check_run_dir(tmp_path, resume=False)


def test_predict_with_a_fine_tuning_runs_intermediate_checkpoint(tmp_path, capsys):
    """`predict classify --model OUT/checkpoints/step_N` asked for --tokenizer (none beside it) and for the label
    set, and would have read at the family's default length: the run_config.json saved in the checkpoint and the
    run's best/ tokenizer now stand in for best/'s task.json and tokenizer."""
    import csv as csv_module
    import json

    from conftest import TINY_WORDS, save_tiny_pretrained

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    rows = [["text", "label"]] + [[f"{w} {v}", "pos" if i % 2 else "neg"]
                                  for i, (w, v) in enumerate(zip(TINY_WORDS, reversed(TINY_WORDS)))]
    with (tmp_path / "data.csv").open("w", newline="") as handle:
        csv_module.writer(handle).writerows(rows)
    out = tmp_path / "run"
    assert main(["finetune", "classify", "--train", str(tmp_path / "data.csv"), "--dev", str(tmp_path / "data.csv"),
                 "--model", str(model), "--out", str(out), "--max-steps", "2", "--save-every", "2",
                 "--batch-size", "4", "--max-seq-length", "24", "--no-progress"]) == 0
    step = sorted((out / "checkpoints").iterdir())[-1]
    capsys.readouterr()
    assert main(["predict", "classify", "--model", str(step), "--dev", str(tmp_path / "data.csv"),
                 "--out", str(tmp_path / "pred"), "--no-progress"]) == 0, capsys.readouterr().err
    predicted = [line.split("\t") for line in (tmp_path / "pred" / "dev_predictions.tsv").read_text().splitlines()]
    assert predicted[0] == ["id", "prediction", "p_neg", "p_pos"] and len(predicted) == len(rows)
    assert {row[1] for row in predicted[1:]} <= {"neg", "pos"}
    from albertlm.cli.task_commands import _task_info

    assert _task_info(step)["max_seq_length"] == 24 and "optim" not in _task_info(step)
    assert json.loads((out / "best" / "task.json").read_text())["labels"] == _task_info(step)["labels"]
