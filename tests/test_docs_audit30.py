"""Docs audit 30: docs/{training,tokenization,model,interop,validation,finetuning}.md against what the thirtieth
session made the code do.

The options the pages show are the commands' (`embed` / `fill-mask --precision fp32|bf16|fp16`, `plot RUN_DIR
RUN_DIR ...`); the messages they quote are the code's (evaluate's no-sentence-head and NaN lines, embed's progress
line and its killed-temporary line, tokenizer train's `cut -f` advice); the numbers are the constants
(`HANGUL_WARN_PIECES` 100, the `lr@` keys at the schedule's bends); what they say a function does it does on a
tiny input (a number list split at commas, a YAML `--config` refused as not JSON, a byte-fallback tokenizer.json
without it warned about, `position_ids` a TypeError, losses in float64 for a float64 model, a -100 id of weight 1
counting for nothing, `1` / `1.0` / `01` one class, `train.csv.gz` a CSV); validation.md's widened `embed --out`
row points at the function that removes a killed run's file; and no page still says what the session changed.
Function calls on tiny inputs: a few seconds, CPU-only."""
from __future__ import annotations

import ast
import inspect
import json
import socket
import sys
from pathlib import Path

import pytest
import torch

import test_docs_audit14 as audit14
from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error
from test_classify_audit30 import _csv
from test_docs_audit26 import _flat, _options
from test_docs_audit28 import _quote, check_validation_row

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _rendered(code: str, start: str, values: dict[str, str]) -> str:
    """The f-string of `code` (adjacent literals joined) that begins with the literal `start`, with `values`
    put in for its `{name}` fields: the message as the code says it, names standing for paths."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else values[ast.unparse(part.value)]
                           if ast.unparse(part.value) in values else "{" + ast.unparse(part.value) + "}"
                           for part in node.values)
            if text.startswith(start):
                return text
    raise AssertionError(f"no f-string starting {start!r}")


# ------------------------------------------------------------------ training.md
def test_training_md_quotes_evaluates_no_sentence_head_and_nan_lines():
    from albertlm.training import evaluate

    source = inspect.getsource(evaluate)
    quoted = _quote("docs/training.md", "CKPT has no sentence-order/NSP head: ")
    said = _rendered(source, "CKPT has no sentence-order/NSP head",
                     {"source": "CKPT", "task": "sop", "data": "D"})
    assert quoted.endswith(", ...") and said.startswith(quoted.removesuffix(", ...")), (quoted, said)
    quoted = _quote("docs/training.md", "CKPT gave NaN outputs on --data D")
    metrics = {"mlm_loss": float("nan"), "mlm_acc": 0.0, "sop_loss": float("nan"), "sop_acc": 0.44}
    with pytest.warns(UserWarning) as warned:
        evaluate.not_finite_accuracies(metrics, "CKPT", "D", "fp32", True)
    assert [str(w.message) for w in warned][0].startswith(quoted.removesuffix(" ...")), quoted
    assert metrics["sop_acc"] != metrics["sop_acc"] and metrics["mlm_acc"] != metrics["mlm_acc"]   # NaN


def test_a_number_list_takes_commas_and_a_yaml_config_is_refused_as_training_md_says(tmp_path):
    from albertlm.config.overrides import coerce, read_config_file
    from albertlm.config.run import RunConfig

    text = _flat("docs/training.md")
    assert "a list of numbers also takes commas (`--seeds 1,2`), a list of text keeps them" in text
    assert coerce(["1,2", "3"], list[int], "seeds") == [1, 2, 3]
    assert coerce(["a,b.txt", "c.txt"], list[str], "inputs") == ["a,b.txt", "c.txt"]
    assert "a `.yaml`, `.toml`, `.ini`/`.cfg` or `.py` file that is not JSON is refused in one line saying that a " \
           "`--config` file is JSON, nested like the `run_config.json` a run saves" in text
    for name, kind in (("run.yaml", "YAML"), ("run.toml", "TOML"), ("run.ini", "INI"), ("run.cfg", "INI"),
                       ("run.py", "Python")):
        (tmp_path / name).write_text("train:\n  max_steps: 3\n")
        with pytest.raises(UserError, match=f"a --config file is JSON, not {kind}, nested like the run_config.json"):
            read_config_file(RunConfig, tmp_path / name)
    (tmp_path / "json.yaml").write_text('{"train": {"max_steps": 3}}')     # "whatever the file's name"
    assert read_config_file(RunConfig, tmp_path / "json.yaml")


def test_the_options_module_is_stdlib_code_as_training_md_says():
    from albertlm.config import overrides

    assert "The generalised module is stdlib code only" in _flat("docs/training.md")
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(inspect.getsource(overrides)))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(inspect.getsource(overrides)))
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert imported - set(sys.stdlib_module_names) <= {"albertlm"}, imported


def test_the_lr_at_keys_are_the_schedules_bends_as_training_md_says():
    from albertlm.training.loop import Plan
    from albertlm.training.metrics import LR_AT, lr_points

    text = _flat("docs/training.md")
    assert '`"lr@1"`, `"lr@3125"`, `"lr@3126"`' in text and "`loop.Plan.lr_knots`" in text
    assert LR_AT == "lr@"
    record = {"step": 4000, "split": "train", "lr": 0.5, "lr@1": 0.001, "lr@3125": 1.0, "lr@3126": 0.99}
    assert lr_points(record) == [(1, 0.001), (3125, 1.0), (3126, 0.99), (4000, 0.5)]
    assert "def lr_knots" in inspect.getsource(Plan)
    assert "frozenset({1, self.warmup_steps, self.warmup_steps + 1})" in inspect.getsource(Plan.lr_knots)


def test_plot_takes_several_runs_with_out_each_once_as_training_md_says(tmp_path, capsys):
    text = _flat("docs/training.md")
    assert "`albertlm plot RUN_DIR RUN_DIR ... --out compare.png` draws several runs in one figure" in text
    assert "`--out` required; a run given twice refused" in text
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "train", "loss": 1.0}) + "\n")
    assert_one_error(capsys, main(["plot", str(tmp_path / "a"), str(tmp_path / "b")]), "--out")
    assert_one_error(capsys, main(["plot", str(tmp_path / "a"), str(tmp_path / "a"), "--out",
                                   str(tmp_path / "c.png")]), "given twice")
    assert not (tmp_path / "c.png").exists()


def test_training_lines_reach_a_redirected_stdout_as_training_md_says():
    from albertlm.training import metrics

    assert "or where stdout alone is a file or a pipe (`> train.log`, `| tee train.log` with the bar on the " \
           "terminal)" in _flat("docs/training.md")
    assert "self.bar is None or _stdout_elsewhere()" in inspect.getsource(metrics)


# ------------------------------------------------------------------ tokenization.md
def test_tokenization_md_says_tokenizer_trains_table_and_hangul_warnings():
    from albertlm.cli import tokenizer_commands
    from albertlm.data.corpus import TableShape

    text = _flat("docs/tokenization.md")
    assert tokenizer_commands.HANGUL_WARN_PIECES == 100
    assert "100 or more Hangul pieces (`HANGUL_WARN_PIECES`;" in text
    said = tokenizer_commands._tables_warning([("FILE", TableShape(3, ["sentence1", "sentence2", "gold_label"], 1))])
    command = _quote("docs/tokenization.md", "tail -n +2 FILE | cut -f1")
    assert f"(`{command}`)" in said, (command, said)
    assert "to train on a column, extract it first" in said    # data.md's table row quotes `to train on a column`
    assert "`tokenizer train` says the same of its inputs before it trains (`to train on a column`" in \
        _flat("docs/data.md")
    assert "`data/corpus.py`'s `FileFacts`" in text
    assert "facts=None if found is None else [found]" in inspect.getsource(tokenizer_commands._line_reader)


def test_a_byte_fallback_models_byte_pieces_are_the_utf8_bytes_interop_md_quotes():
    pieces = _quote("docs/interop.md", "<0xF0>")
    assert pieces == "".join(f"<0x{b:02X}>" for b in "😀".encode("utf-8"))
    assert "(`<0xF0><0x9F><0x98><0x80>` for 😀)" in _flat("docs/interop.md")


def test_a_tokenizer_json_that_lost_its_byte_fallback_is_warned_as_interop_md_says(tmp_path):
    """The 256 byte pieces in a Unigram without byte fallback (transformers 5's save_pretrained): warned; with
    it, or without the pieces, not."""
    from albertlm.interop.hf import lost_byte_fallback

    text = _flat("docs/interop.md")
    assert "holds a byte-fallback model's 256 pieces `<0x00>`..`<0xFF>` without byte fallback" in text
    vocab = [["<pad>", 0.0], ["<unk>", 0.0]] + [[f"<0x{b:02X}>", 0.0] for b in range(256)] + [["▁a", -1.0]]
    path = tmp_path / "tokenizer.json"
    for fallback, pieces, warned in ((False, vocab, True), (True, vocab, False), (False, vocab[:100], False)):
        path.write_text(json.dumps({"model": {"type": "Unigram", "unk_id": 1, "byte_fallback": fallback,
                                              "vocab": pieces}}))
        said = lost_byte_fallback(path)
        assert bool(said) == warned, (fallback, len(pieces), said)
    assert "byte_fallback: true" in text and "ByteFallback step" in text


# ------------------------------------------------------------------ interop.md: embed and fill-mask
@pytest.mark.parametrize("command", ["embed", "fill-mask"])
def test_embed_and_fill_mask_take_precision_as_interop_md_shows(command):
    assert "--precision" in _options(command, None)
    parser = audit14._parser(command, [])
    action = next(a for a in parser._actions if "--precision" in a.option_strings)
    assert tuple(action.choices) == ("fp32", "bf16", "fp16") and action.default == "fp32"
    assert "`--precision fp32|bf16|fp16`, as predict's" in _flat("docs/interop.md")


def test_embeds_progress_lines_in_a_log_are_what_interop_md_quotes(monkeypatch, capsys):
    from albertlm.cli.infer_commands import embed_progress
    from albertlm.training import metrics

    quoted = _quote("docs/interop.md", "embed: 120/1200")
    monkeypatch.setattr(metrics, "_terminal", lambda: False)
    with embed_progress(12_000, 1200) as progress:
        for _ in range(1200):
            progress(10)
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert quoted in said, said[:3]
    with embed_progress(12_000, 1200, enabled=False) as progress:    # --no-progress: neither
        for _ in range(1200):
            progress(10)
    assert capsys.readouterr().err == ""


def test_a_killed_embeds_temporary_file_is_named_as_interop_md_says(tmp_path):
    from albertlm.cli import infer_commands

    out = tmp_path / "emb.npy"
    assert infer_commands.temporary_name(out, 7).name == f".tmp-emb.npy-{socket.gethostname()}-7"
    assert "`.tmp-NAME-HOST-PID` beside `--out`" in _flat("docs/interop.md")
    quoted = _quote("docs/interop.md", "removed PATH, ")
    said = _rendered(inspect.getsource(infer_commands._embed), "removed PATH", {"gone": "PATH", "out": "OUT"})
    assert said == quoted, (said, quoted)


# (the row's first cell, the check's function, a piece of its source that is the check)
_ROWS = [
    ("| `embed --out` |", "albertlm.cli.infer_commands.remove_killed_temporaries", "process_alive("),
    ("| `embed --out` |", "albertlm.cli.infer_commands.temporary_name", "socket.gethostname()"),
    ("| classify CSV/TSV/JSONL/Parquet/Arrow |", "albertlm.tasks.tables.compressed_text", "cannot decompress it"),
    ("| classify CSV/TSV/JSONL/Parquet/Arrow |", "albertlm.tasks.tables._columnar_records", "two columns named"),
    ("| classify CSV/TSV/JSONL/Parquet/Arrow |", "albertlm.tasks.classify._one_spelling", "_number(label)"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:20]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


# ------------------------------------------------------------------ model.md
def _tiny_config():
    from albertlm.config import ModelConfig

    return ModelConfig(vocab_size=20, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2, ffn_size=16,
                       max_position_embeddings=16)


@pytest.mark.parametrize("keyword", ["output_attentions", "return_dict", "head_mask"])
def test_transformers_keywords_albertlm_lacks_are_a_type_error_as_model_md_says(keyword):
    """(position_ids and inputs_embeds were a TypeError too until session 33: tests/test_model_audit33.py.)"""
    import albertlm

    assert "`output_attentions`, `return_dict` and `head_mask` are a `TypeError` naming the keyword" \
        in _flat("docs/model.md")
    assert "Every class takes transformers' `position_ids` ((B, T), or (1, T)" in _flat("docs/model.md")
    ids = torch.tensor([[2, 5, 6, 3]])
    for name in ("AlbertModel", "AlbertForPreTraining", "AlbertForSequenceClassification"):
        with pytest.raises(TypeError, match=keyword):
            getattr(albertlm, name)(_tiny_config())(ids, **{keyword: True})


def test_loss_dtypes_and_minus_100_ids_are_what_model_md_says():
    from albertlm.model.albert import loss_dtype, weighted_cross_entropy

    text = _flat("docs/model.md")
    assert "Losses are computed in float32 (bf16 and fp16 logits are upcast), or in float64 for a float64 model" \
           in text and "A `masked_lm_ids` value of -100 counts as weight 0 whatever its `masked_lm_weights` entry" \
           in text
    assert [loss_dtype(torch.zeros(1, dtype=d)) for d in (torch.bfloat16, torch.float16, torch.float32)] == \
           [torch.float32] * 3
    assert loss_dtype(torch.zeros(1, dtype=torch.float64)) == torch.float64
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]])
    with_weight = weighted_cross_entropy(logits, torch.tensor([0, 1, -100]), torch.tensor([1.0, 1.0, 1.0]))
    without = weighted_cross_entropy(logits[:2], torch.tensor([0, 1]), torch.tensor([1.0, 1.0]))
    assert torch.allclose(with_weight[0], without[0]) and torch.allclose(with_weight[1], without[1])


def test_the_pad_rows_gradient_is_where_model_md_says():
    """Padding under a classifier gets no gradient in the pad row; under the QA head's own loss it does."""
    import albertlm

    text = _flat("docs/model.md")
    assert "`AlbertForQuestionAnswering`'s own loss, whose softmax runs over the padding" in text
    assert "Padding under classification, token classification and fine-tuning's masked `span_loss` is " \
           "unaffected" in text
    ids = torch.tensor([[2, 5, 6, 3, 0, 0], [2, 7, 8, 9, 3, 0]])
    mask = (ids != 0).long()
    torch.manual_seed(0)
    for name, targets, moved in (
            ("AlbertForSequenceClassification", dict(labels=torch.tensor([0, 1])), False),
            ("AlbertForTokenClassification", dict(labels=torch.where(mask.bool(), 1, -100)), False),
            ("AlbertForQuestionAnswering", dict(start_positions=torch.tensor([1, 2]),
                                                end_positions=torch.tensor([2, 3])), True)):
        model = getattr(albertlm, name)(_tiny_config())
        model(ids, attention_mask=mask, **targets)["loss"].backward()
        assert bool(model.albert.embeddings.word.weight.grad[0].abs().max() > 0) == moved, name


# ------------------------------------------------------------------ finetuning.md
def test_compressed_files_and_number_labels_are_what_finetuning_md_says(tmp_path):
    import gzip

    from albertlm.tasks import classify
    from albertlm.tasks.tables import COMPRESSED_SUFFIXES, guess_format

    text = _flat("docs/finetuning.md")
    assert "A CSV, TSV or JSONL file may be gzip, bzip2, xz or zstd compressed (`train.csv.gz`, `dev.jsonl.zst`;" \
           in text
    assert {".gz", ".bz2", ".xz", ".zst"} <= set(COMPRESSED_SUFFIXES)
    assert guess_format(Path("train.csv.gz")) == "csv" and guess_format(Path("dev.jsonl.zst")) == "jsonl"
    path = tmp_path / "train.csv"              # a gzip file named .csv: read by its first bytes
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("text,label\ngood,1\nbad,1.0\nfine,01\nawful,2\n")
    train = classify.read_examples(path, classify.Columns("text"))
    assert [e.text_a for e in train] == ["good", "bad", "fine", "awful"]
    assert "`1`, `1.0` and `01` in one file are one class (named `1`" in text
    assert classify.label_set(train) == ("1", "2")
    dev = classify.read_examples(_csv(tmp_path / "dev.csv", [["x", "2.0"]]), classify.Columns("text"))
    assert "a dev label `2.0` is the class `2`" in text and classify.label_ids(dev, ("1", "2")) == [1]


def test_evaluate_classify_reads_the_p_label_order_as_finetuning_md_says():
    from albertlm.tasks import scoring

    text = _flat("docs/finetuning.md")
    assert 'name.startswith("p_")' in inspect.getsource(scoring)
    assert "`evaluate classify --predictions` reads the `id` and `prediction` columns, and the label order from " \
           "the `p_<label>` header." in text
    assert "else from the file's `p_<label>` columns (the model's labels in its order" in text


def test_a_headerless_file_and_duplicate_parquet_columns_are_said_as_finetuning_md_says():
    from albertlm.tasks import classify, tables

    text = _flat("docs/finetuning.md")
    assert "when the first line looks like a row of data (a numeric or long name), that the file needs a header " \
           "line" in text
    assert "add a header line naming the columns" in inspect.getsource(classify)
    assert "A Parquet or Arrow file with two columns of one name is refused" in text
    assert "the file has two columns named" in inspect.getsource(tables)


# ------------------------------------------------------------------ what the pages said before this session
_STALE = [
    ("docs/training.md", "The generalised module is under 400 lines of stdlib code"),
    ("docs/interop.md", "A tqdm bar counts texts."),
    ("docs/finetuning.md", "reads the `id` and `prediction` columns and ignores the others"),
    ("docs/finetuning.md", "(give the model's, from `best/task.json`, for the same two-class F1 as the run)"),
    ("docs/tokenization.md", "(SentencePiece's normalizer composes Hangul back, so it is not warned)"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_this_session_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
