"""Docs audit 29: README.md and docs/*.md against what the twenty-ninth session made the code do.

The rows docs/validation.md gained or widened for this session's checks (a CSV record's first line, RACE's empty
answers and numpy-text options, BertJapaneseTokenizer directories, convert / export onnx making up no head weights,
the old TF-Hub module's missing SOP head, shards mapped when first read, another command's run directory, a damaged
newest checkpoint, another dev set's predictions, another task's head, dynamo's opset 23, the grid file's key
errors) point at functions that hold those checks; the messages the pages quote are the code's (finetune's fresh-head
warning, the loader's fresh-weights warning, convert's SOP-head and missing-index lines, info's file accounting,
export's onnxruntime line, the data build's many-files note, a damaged checkpoint's advice); the numbers the pages
give are the constants (1,000 listed inputs, the 10,000-file note, 64 maps, dynamo's opsets 18 to 22); and no page
still says what the session changed. Function calls on tiny models and directories: a few seconds, CPU-only."""
from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, save_tiny_pretrained
from test_docs_audit26 import _flat
from test_docs_audit28 import _quote

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------ validation.md's rows for this session's checks
# (the row's first cell, the check's function, a piece of its source that is the check)
_ROWS = [
    ("| any task file |", "albertlm.tasks.tables._long_field_rows", "starts.append(start)"),
    ("| RACE passages |", "albertlm.tasks.race._passage_examples", 'answer in ("", None)'),
    ("| RACE passages |", "albertlm.tasks.race._numpy_texts", "tokenize.STRING"),
    ("| a `BertJapaneseTokenizer` directory (`vocab.txt`) |", "albertlm.tokenization.wordpiece.is_bert_japanese",
     "_JAPANESE_KEYS"),
    ("| a `BertJapaneseTokenizer` directory (`vocab.txt`) |", "albertlm.tokenization.wordpiece.japanese_options",
     '"tokenize_chinese_chars": False'),
    ("| `convert SRC` weights |", "albertlm.cli.convert_commands.load_model", "the class its head variables make it"),
    ("| `convert SRC` weights |", "albertlm.cli.convert_commands._lacks_only_the_sop_head", "SOP_HEAD"),
    ("| shard files |", "albertlm.data.shards.ShardMaps", "changed_shard"),
    ("| shard files |", "albertlm.data.shards.map_budget", "RLIMIT_NOFILE"),
    ("| `pretrain --out` / `finetune --out` |", "albertlm.training.checkpoint.check_run_kind",
     "not a fine-tuning run"),
    ("| `pretrain --resume` |", "albertlm.cli.train_commands._moved_data", "ckpt.recorded_data(last)"),
    ("| `pretrain --resume` |", "albertlm.cli.train_commands._resume_or_start", "decides by itself"),
    ("| `--resume`: `model.safetensors` |", "albertlm.training.checkpoint.damaged_advice",
     "the checkpoint before it"),
    ("| `--resume`: `trainer_state.pt` |", "albertlm.training.checkpoint.remove_stale_tmp", "step_*/"),
    ("| `finetune --model` a run of another task |", "albertlm.tasks.finetune.other_task", "fine_tuning_record"),
    ("| `finetune --model` a run of another task |", "albertlm.tasks.finetune.load_model", "starts fresh"),
    ("| `export onnx MODEL` / `--opset` |", "albertlm.cli.export_commands._load_tf", "makes up none"),
    ("| `export onnx MODEL` / `--opset` |", "albertlm.interop.onnx.check_opset", "ATTENTION_OP_OPSET"),
    ("| `export onnx MODEL` / `--opset` |", "albertlm.cli.export_commands._verify", "nothing was written"),
    ("| `predict` / `evaluate --model glue --dev ... --out` |",
     "albertlm.cli.task_commands._check_out_keeps_other_predictions", "other_predictions"),
    ("| `ablate` grid files |", "albertlm.experiments.grids._key_hint", "did you mean"),
    ("| `ablate` grid files |", "albertlm.experiments.grids.check_against_scale", "type_vocab_size"),
    ("| `ablate` grid files |", "albertlm.experiments.grids.read_grid_file", "not YAML"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:30]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    from test_docs_audit28 import check_validation_row

    check_validation_row(row, where, check)


# ------------------------------------------------------------------ messages the pages quote
def test_finetuning_md_quotes_the_fresh_head_warning_of_another_tasks_run(tmp_path, monkeypatch, caplog):
    """`finetune glue --task mrpc --model runs/sst2/best`: the warning finetuning.md quotes, word for word up to
    its `...` (the CLI says the record as `albertlm finetune: warning: MESSAGE`)."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import finetune
    from test_ftfollow_audit29 import _spec
    from test_glue_audit17 import _glue_model

    quoted = _quote("docs/finetuning.md", "albertlm finetune: warning: runs/sst2/best was fine-tuned on")
    assert quoted.endswith(", ...")
    (tmp_path / "pre").mkdir()
    _glue_model(tmp_path / "runs" / "sst2" / "best", save_tiny_pretrained(tmp_path / "pre"), "sst2")
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        caplog.clear()
        finetune.load_model(_spec("glue", "mrpc", 2), "runs/sst2/best", FinetuneConfig())
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1, said
    assert ("albertlm finetune: warning: " + said[0]).startswith(quoted.removesuffix("..."))


def test_interop_and_model_md_quote_the_fresh_weights_warning(tmp_path, caplog):
    """A bare AlbertModel directory loaded as a classifier: one warning naming the directory and the class, as
    interop.md and model.md quote it (DIR for the directory)."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertModel
    from albertlm.model.heads import AlbertForSequenceClassification

    start = "DIR: freshly initialised weights of AlbertForSequenceClassification"
    quoted = _quote("docs/interop.md", start)
    assert _quote("docs/model.md", start) == quoted
    torch.manual_seed(0)
    AlbertModel(ModelConfig(vocab_size=20, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                            ffn_size=16, max_position_embeddings=16)).save_pretrained(tmp_path / "bare")
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        caplog.clear()
        AlbertForSequenceClassification.from_pretrained(tmp_path / "bare", num_labels=2)
    said = [record.getMessage().replace(str(tmp_path / "bare"), "DIR") for record in caplog.records]
    assert said == [quoted], said


def test_interop_md_quotes_converts_sop_head_line_and_infos_accounting():
    from albertlm.cli.convert_commands import NO_SOP_HEAD
    from albertlm.cli.model_commands import _in_the_file

    assert NO_SOP_HEAD.startswith(_quote("docs/interop.md", "no SOP head in the source ("))
    held = _quote("docs/interop.md", "AlbertForPreTraining's pooler and masked-LM head")
    assert held in _in_the_file("AlbertForPreTraining", 100, {}, ["SOP head"])
    unused = _quote("docs/interop.md", "the pooler's 1,056 values unused")
    assert unused in _in_the_file("AlbertForQuestionAnswering", 100, {"pooler": 1056}, [])


def test_interop_md_quotes_the_missing_index_line(tmp_path, capsys):
    """`PREFIX.index is missing: PREFIX.data-00000-of-00001 is there without it` (PREFIX the checkpoint's)."""
    quoted = _quote("docs/interop.md", "PREFIX.index is missing: ")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.ckpt-1.data-00000-of-00001").write_bytes(b"\0" * 16)
    code = main(["convert", str(tmp_path / "ckpt"), str(tmp_path / "out")])
    assert_one_error(capsys, code, quoted.replace("PREFIX.index", f"{tmp_path / 'ckpt' / 'model.ckpt-1'}.index")
                     .replace("PREFIX.data", "model.ckpt-1.data"))
    assert not (tmp_path / "out").exists()


def test_interop_md_says_export_onnxs_opsets_and_onnxruntime_line():
    from albertlm.cli.export_commands import _verify
    from albertlm.interop.onnx import ATTENTION_OP_OPSET, MIN_OPSET, run_onnxruntime

    text = _flat("docs/interop.md")
    assert f"{MIN_OPSET['dynamo']} to {ATTENTION_OP_OPSET - 1} for dynamo (from {ATTENTION_OP_OPSET} " in text
    quoted = _quote("docs/interop.md", "onnxruntime cannot run OUT: ")
    start, _, end = quoted.partition("...")
    assert start.replace("OUT", "{path}") in inspect.getsource(run_onnxruntime)
    assert end in inspect.getsource(_verify)


def test_data_md_quotes_the_many_files_note_and_its_numbers():
    from albertlm.data import build, shards

    quoted = _quote("docs/data.md", "data build: checking 1,000,000 input files")
    assert "f\"data build: checking {len(files):,} input files (formats, encodings, tables) before the build\"" \
        in inspect.getsource(build)
    files = range(1_000_000)
    assert quoted == f"data build: checking {len(files):,} input files (formats, encodings, tables) before the build"
    text = _flat("docs/data.md")
    assert build.CHECK_NOTE_FILES == 10_000 and "with 10,000 files or more (`CHECK_NOTE_FILES`)" in text
    assert build.META_INPUTS_LISTED == 1000 and "a build of at most 1,000 files (`META_INPUTS_LISTED`)" in text
    assert shards.MAX_OPEN_SHARDS == 64 and "at least 64 (`map_budget`, `MAX_OPEN_SHARDS`)" in text


@pytest.mark.parametrize("kind", ["pretraining", "fine-tuning"])
def test_a_damaged_checkpoints_advice_is_what_the_pages_say(tmp_path, kind):
    """The newest checkpoint named with the one before it; a fine-tuning run at finetune's default
    `--train.keep_last 1` has none before it, and is started over (finetuning.md)."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.training.checkpoint import damaged_advice

    run = tmp_path / "run"
    steps = [run / "checkpoints" / name for name in ("step_00000004", "step_00000008")]
    for step in steps:
        step.mkdir(parents=True)
    if kind == "fine-tuning":
        (run / "best").mkdir()
    said = damaged_advice(steps[1])
    assert f"move {steps[1]} out of {run / 'checkpoints'} (e.g. to {run / 'damaged-step_00000008'})" in said
    assert f"`--resume` goes on from the checkpoint before it, {steps[0]}, exactly" in said
    steps[0].rmdir()
    alone = damaged_advice(steps[1])
    if kind == "fine-tuning":
        assert FinetuneConfig().train.keep_last == 1
        assert "start the run over with --overwrite" in alone
        assert "with the default `--train.keep_last 1` there is none: start over with `--overwrite`" in \
            _flat("docs/finetuning.md")
    else:
        assert "starts the run again from step 0" in alone


def test_finetune_into_a_pretraining_run_is_refused_as_finetuning_md_says(tmp_path, capsys):
    """An `albertlm pretrain` run's --out, with --overwrite: one line that says to give another --out or to pass it
    as --model; nothing removed."""
    run = tmp_path / "pt"
    (run / "checkpoints" / "step_00000002").mkdir(parents=True)
    (run / "run_config.json").write_text("{}")
    code = main(["finetune", "glue", "--task", "rte", "--data-dir", str(tmp_path / "none"), "--model", str(run),
                 "--out", str(run), "--overwrite"])
    assert_one_error(capsys, code, "holds an `albertlm pretrain` run, not a fine-tuning run: give another --out",
                     f"pass --model {run}")
    assert (run / "checkpoints" / "step_00000002").is_dir() and (run / "run_config.json").is_file()
    assert "in one line that says to give another `--out` or to pass it as `--model`, nothing removed" in \
        _flat("docs/finetuning.md")


# ------------------------------------------------------------------ pages that name this session's behaviours
def test_the_xxlarge_v1_preset_has_no_dropout_as_readme_and_model_md_say():
    from albertlm.config.presets import get_preset

    for doc in ("README.md", "docs/model.md"):
        assert "`albert-xxlarge-v1`" in _flat(doc) and "0, as google released it" in _flat(doc), doc
    cfg = get_preset("albert-xxlarge-v1")
    assert (cfg.hidden_dropout, cfg.attention_dropout, cfg.classifier_dropout) == (0.0, 0.0, 0.1)
    assert get_preset("albert-xlarge-v1").hidden_dropout == 0.1


def test_tokenization_md_file_table_names_this_sessions_tokenizer_functions():
    from albertlm.tokenization import base, wordpiece

    text = (ROOT / "docs/tokenization.md").read_text(encoding="utf-8")
    base_row = next(line for line in text.splitlines() if line.startswith("| `base.py`"))
    wordpiece_row = next(line for line in text.splitlines() if line.startswith("| `wordpiece.py`"))
    assert "`TokenizersBacked`" in base_row and "`encode_batch_with_spans()`" in base_row
    assert callable(base.TokenizersBacked.encode_batch_with_spans)
    assert "`japanese_options()`" in wordpiece_row and callable(wordpiece.japanese_options)
    assert issubclass(wordpiece.WordPieceTokenizer, base.TokenizersBacked)


@pytest.mark.parametrize("doc, phrase", [
    ("docs/finetuning.md", "a `<pad>` written in an article is an input like any other token"),
    ("docs/finetuning.md", "is part of a record whose errors name the line it begins on"),
    ("docs/finetuning.md", "a blank typed `＿`, or any character NFKD turns into `_`, is one too"),
    ("docs/finetuning.md", "the numpy text `Dataset.to_csv` writes, `['a' 'b' 'c' 'd']`"),
    ("docs/finetuning.md", "`tasks.finetune.other_task`"),
    ("docs/interop.md", "exports to one file as its masked-LM half (`AlbertForMaskedLM`, outputs `logits`)"),
    ("docs/model.md", "A model keeps its own copy of the config it was built from"),
    ("docs/tokenization.md", "### Japanese BERT vocabs (`BertJapaneseTokenizer`)"),
    ("docs/tokenization.md", "SQuAD's features now take these spans for WordPiece"),
    ("docs/finetuning.md", "A WordPiece or byte-level BPE tokenizer gives each token's span itself"),
    ("docs/finetuning.md", "or to remove it where it is an earlier prediction of this task's dev file since changed"),
    ("docs/validation.md", "| `finetune --model` a run of another task |"),
])
def test_the_pages_say_this_sessions_behaviours(doc, phrase):
    assert phrase in _flat(doc), (doc, phrase)


# what the pages said before this session, and no longer hold
_STALE = [
    ("docs/validation.md", "to predict, `answers` absent or `[]` in every passage"),
    ("docs/validation.md", "an existing file (and its `.data` / `.int8.onnx`) replaced"),
    ("docs/model.md", "missing head weights are freshly initialised (logged as a warning)"),
    ("docs/data.md", "`meta.json`'s `inputs` lists each file once"),
    ("docs/interop.md", "module without the SOP head imports as AlbertForMaskedLM"),
    ("docs/tokenization.md", "what SQuAD's features do, `tasks/squad.py`'s `piece_spans`, for every tokenizer"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_this_session_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)


def test_squad_takes_the_tokenizers_own_spans_where_tokenization_md_says():
    """WordPiece (albert_zh's vocab.txt) gives SQuAD its own spans, two [UNK]s in a row each placed; SentencePiece
    (albert-base-v2's spiece.model) keeps matching pieces."""
    from albertlm.tasks.squad import _exact_spans, tokenize_contexts
    from albertlm.tokenization import load_tokenizer
    from conftest import shared_path

    wordpiece = load_tokenizer(shared_path("vocab", "albert_zh_vocab.txt"))
    assert _exact_spans(wordpiece)
    assert not _exact_spans(load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model")))
    context = "他说……好的。"
    tokens = tokenize_contexts(wordpiece, [context])[0]
    assert [context[a:b] for a, b in tokens.spans] == ["他", "说", "…", "…", "好", "的", "。"]
