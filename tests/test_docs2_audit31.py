"""Docs audit 31, second pass: docs/{training,tokenization,model,interop,validation,finetuning,data}.md against what
the thirty-first session's later commits made the code do.

The build summary's `text kept:` line; `convert` staging inside an existing DST; predict / evaluate's help
(`evaluation options`, `--train` hidden, GLUE's `--task` taken from the run); `predict` / `evaluate glue` reading a
window at a time and refusing a file changed between its readings; torchrun fine-tuning comparing what the features
hold (`features_digest`); `~` expanded by the Python entry points; train_speed's attention count over each row's
real tokens; `--opset N`; and no page still saying what those commits changed. Pointers are checked against the
functions they name, behaviours on tiny inputs (the behaviours themselves are tested by the helpers' own files:
tests/test_{clifollow,apifollow,dist,gluestream}_audit31.py). A few seconds, CPU-only."""
from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import numpy as np
import pytest

import test_docs_audit14 as audit14
from albertlm.errors import UserError
from albertlm.tasks.tables import DataError
from test_apifollow_audit31 import home, tiny_model  # noqa: F401  (fixtures: HOME in tmp_path, ~/m a tiny model)
from test_docs_audit26 import _flat
from test_docs_audit28 import check_validation_row

ROOT = Path(__file__).resolve().parents[1]


def _command_parser(command: str, family: str) -> argparse.ArgumentParser:
    return audit14._subparsers(audit14._parser(command, [family]))[family]


# ------------------------------------------------------------------ data.md: the build's summary
def test_the_build_summary_says_how_much_text_the_instances_hold_as_data_md_says():
    from albertlm.cli.data_commands import format_summary

    text = _flat("docs/data.md")
    assert "The build's summary says how much on its `text kept: …` line, as `albertlm data stats` does" in text
    assert "the share of the text the instances hold (`text kept`, below)" in text
    source = inspect.getsource(format_summary)
    assert 'f"text kept: {kept}"' in source and "text_kept(" in source


# ------------------------------------------------------------------ interop.md / validation.md: convert's staging
def test_convert_stages_inside_an_existing_dst_as_interop_md_says(tmp_path):
    from albertlm.cli.convert_commands import _staging

    assert "inside DST where DST is an existing directory, so that a DST that is a mount point or a link to " \
           "another disk, such as a container's volume, takes the files by rename" in _flat("docs/interop.md")
    (tmp_path / "dst").mkdir()
    with _staging(tmp_path / "dst") as stage:          # an existing DST holds the staging folder
        assert stage.parent.parent == tmp_path / "dst" and stage.parent.name.endswith(".convert-tmp")
    with _staging(tmp_path / "new") as stage:          # a new one: beside it
        assert stage.parent.parent == tmp_path
    assert list((tmp_path / "dst").iterdir()) == [] and not (tmp_path / "new").exists()


def test_validation_md_names_converts_staging():
    check_validation_row("| `convert DST` |", "albertlm.cli.convert_commands._staging", "target.is_dir()")
    assert "inside an existing DST, so a DST that is a mount point or a link to another disk takes the files by " \
           "rename" in _flat("docs/validation.md")


def test_validation_md_says_glue_submissions_are_written_as_their_lines_come():
    from albertlm.tasks import glue

    assert "`tasks.specs.write_lines_atomic` (classify's and GLUE's, written as their windows are predicted)" in \
        _flat("docs/validation.md")
    assert "write_lines_atomic(" in inspect.getsource(glue.write_submission)


# ------------------------------------------------------------------ finetuning.md: predict / evaluate's options
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_predict_and_evaluate_options_are_as_finetuning_md_says(command):
    text = _flat("docs/finetuning.md")
    assert "The settings the run recorded are the defaults: max length, GLUE's task," in text
    assert "`--train` (a training file) is not read by `predict` or `evaluate`: it is left out of their usage and " \
           "help and still accepted" in text
    assert "under one heading, `evaluation options`" in text
    parser = _command_parser(command, "glue")
    train = next(a for a in parser._actions if "--train" in a.option_strings)
    assert train.help == argparse.SUPPRESS
    group = next(g for g in parser._action_groups if g.title == "evaluation options")
    flags = {flag for action in group._group_actions for flag in action.option_strings}
    assert {"--max-seq-length", "--eval-batch-size", "--precision", "--device", "--no-progress"} <= flags
    assert not {"train options", "dist options"} & {g.title for g in parser._action_groups}
    task = next(a for a in parser._actions if "--task" in a.option_strings)
    assert not task.required and "the one the model's run recorded" in task.help


# ------------------------------------------------------------------ finetuning.md: GLUE read a window at a time
def test_predict_glue_reads_a_window_at_a_time_as_finetuning_md_says():
    from albertlm.tasks import specs

    text = _flat("docs/finetuning.md")
    assert "`predict` / `evaluate glue` read GLUE's dev and test files the same way (`specs._streamed_examples`)" \
           in text
    assert "a QQP-shaped test file of 200k rows, 585 MB peak (was 819 MB)" in text
    assert "SQuAD and RACE files are read whole, and fine-tuning reads its files whole" in text
    source = inspect.getsource(specs.glue_spec)
    assert "_streamed_glue_set(" in source and "if not training" in source
    assert "_streamed_examples(" in inspect.getsource(specs._streamed_glue_set)


def test_a_file_changed_between_the_readings_is_refused_as_finetuning_md_says():
    from albertlm.tasks.specs import _same_rows

    assert "a file whose rows change in number between the readings (rewritten under the run) is refused (`FILE: " \
           "changed while it was read (N rows when it was checked, ...)`)" in _flat("docs/finetuning.md")
    assert list(_same_rows(iter("abc"), 3, "f.tsv")) == ["a", "b", "c"]
    for rows in ("ab", "abcd"):
        with pytest.raises(DataError, match=r"f\.tsv: changed while it was read \(3 rows when it was checked"):
            list(_same_rows(iter(rows), 3, "f.tsv"))


# ------------------------------------------------------------------ finetuning.md / training.md: torchrun
def test_ranks_compare_what_the_features_hold_as_the_pages_say():
    from albertlm.tasks import finetune
    from albertlm.tasks.features import Feature

    assert "other training features (another number of them, or other tokens or labels: a node's own copy of the " \
           "file, another tokenizer) or other dev or test features" in _flat("docs/finetuning.md")
    assert "the training features (their number and a digest of their tokens and labels), the task's labels, each " \
           "dev and test set's features (their number and digest, `tasks.finetune.features_digest`)" in \
        _flat("docs/training.md")
    source = inspect.getsource(finetune.finetune_identity)
    assert "features_digest(spec.train)" in source and "set's features\"] = f\"{len(features)}" in source

    def feature(ids, label):
        return Feature(np.asarray(ids), np.zeros(len(ids), dtype=np.int64), 0, label)

    same = finetune.features_digest([feature([2, 5, 3], 1)])
    assert same == finetune.features_digest([feature([2, 5, 3], 1)])
    assert same != finetune.features_digest([feature([2, 6, 3], 1)])     # other tokens
    assert same != finetune.features_digest([feature([2, 5, 3], 0)])     # another label


# ------------------------------------------------------------------ model.md / interop.md / tokenization.md: `~`
def test_the_python_entry_points_expand_home_as_the_pages_say(home, tiny_model):  # noqa: F811
    from albertlm.interop import hf
    from albertlm.model import registry
    from albertlm.tasks import inference
    from albertlm.tokenization import load_tokenizer

    assert "as do `registry.load_saved_model` / `saved_class_name` and `interop.hf.export_hf` / `import_hf` / " \
           "`export_tokenizer` / `complete_export`" in _flat("docs/model.md")
    assert registry.saved_class_name("~/m") == "AlbertForPreTraining"
    model = registry.load_saved_model("~/m")
    hf.export_hf(model, "~/hf")
    assert type(hf.import_hf("~/hf")).__name__ == "AlbertForPreTraining"
    assert "`import_hf`, `export_hf`, `export_tokenizer` and `complete_export` take a str or a `pathlib.Path`, a " \
           "leading `~` expanded" in _flat("docs/interop.md")
    assert "the paths `FillMask.load`, `load_encoder` and `inference.load_tokenizer_for` take (a model, a run, a " \
           "tokenizer) may be a str or a `pathlib.Path`, a leading `~` expanded" in _flat("docs/interop.md")
    assert inference.load_encoder("~/m")[1] == tiny_model
    assert inference.load_tokenizer_for("~/m").vocab_size == model.config.vocab_size
    text = _flat("docs/tokenization.md")
    assert "a leading `~` (or `~user`) expanded as the shell does, as in `load.find_tokenizer`, the backends' " \
           "constructors" in text
    tokenizer = load_tokenizer("~/m")
    tokenizer.save("~/tok")
    assert (home / "tok" / "vocab.txt").is_file()
    assert "a `~user` naming no user is left as it is, so it is `tokenizer not found: ~user/...`" in text
    with pytest.raises(UserError, match="tokenizer not found: ~albertlm-no-user-docs31/"):
        load_tokenizer("~albertlm-no-user-docs31/tok")


def test_help_of_the_tokenizer_protocol_describes_its_members_as_tokenization_md_says():
    from albertlm.tokenization.base import Tokenizer

    assert "`Tokenizer` protocol (`help(Tokenizer)` describes each member" in _flat("docs/tokenization.md")
    doc = Tokenizer.__dict__["__doc__"]
    for member in ("encode", "encode_batch", "encode_pair", "tokenize", "decode", "id_to_token", "token_to_id",
                   "word_start_mask", "save", "vocab_size", "kind", "mask_id"):
        assert f"{member}" in doc, member


# ------------------------------------------------------------------ model.md: train_speed's FLOPs
def test_train_speed_counts_attention_over_each_rows_real_tokens_as_model_md_says():
    assert "`train_speed.py` counts each token's attention over its row's real tokens, as `model_speed.py` does" in \
        _flat("docs/model.md")
    source = (ROOT / "benchmarks" / "train_speed.py").read_text(encoding="utf-8")
    assert "lengths=rows" in source and "tokens=tokens)" not in source


# ------------------------------------------------------------------ interop.md: --opset N
def test_export_takes_opset_n_as_interop_md_shows():
    parser = _command_parser("export", "onnx")
    assert next(a for a in parser._actions if "--opset" in a.option_strings).metavar == "N"
    assert "`--opset N` (default 18)" in _flat("docs/interop.md")


# ------------------------------------------------------------------ what the pages said before these commits
_STALE = [
    ("docs/data.md", "without comparing them"),
    ("docs/interop.md", "Everything is written into a temporary folder beside DST and moved"),
    ("docs/finetuning.md", "GLUE, SQuAD and RACE files are read whole"),
    ("docs/finetuning.md", "another task or another number of training features"),
    ("docs/training.md", "the task, the number of training features, the task's labels"),
    ("docs/model.md", "over the T positions (an upper bound for its few short rows)"),
    ("docs/interop.md", "OPSET"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_these_commits_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
