"""Docs audit 28: README.md and docs/*.md against what the twenty-eighth session made the code do.

The rows docs/validation.md gained for this session's checks (convert making up no weights, `--dist.device cuda` as
cuda:LOCAL_RANK and `cuda:N` under NCCL, a multi-node `--out` every node must see, a stray LOCAL_RANK, atomic GLUE
prediction files, full disks under convert / export onnx / tokenizer train, WordPiece's smallest vocabulary,
U+2585, an input of deleted characters only, flag values named as typed, a misspelt required option, the
compressions that are not read) point at functions that hold those checks; the messages the pages quote are the
code's (the data build's lz4 line, the option errors, `--OUT`'s hint, tokenizer train's refusals, `info`'s task and
label lines); convert's and export's tokenizer warnings are said as `albertlm convert: warning:` lines on stderr, as
tokenization.md now says (it said a bare `warning:` in the summary); a checkpoint's `model.safetensors` header
metadata is sorted, as training.md says. Parsers, a few function calls, one tiny tokenizer training and one tiny
convert: a few seconds, CPU-only."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import test_docs_audit14 as audit14
from albertlm.cli.main import main
from conftest import assert_one_error, shared_path
from test_docs_audit26 import _flat
from test_followups_audit18 import _tiny_pretrained

ROOT = Path(__file__).resolve().parents[1]


def _quote(doc: str, start: str) -> str:
    """The backquoted text in `doc` (flattened) that begins with `start`: the longest, where a page quotes it whole
    once and cut short (`...`) elsewhere."""
    text = _flat(doc)
    found = re.findall(r"`(" + re.escape(start) + r"[^`]*)`", text)
    assert found, (doc, start)
    return max(found, key=len)


# ------------------------------------------------------------------ validation.md's rows for this session's checks
# (the row's first cell, the check's function, a piece of its source that is the check)
_ROWS = [
    ("| `convert SRC` weights |", "albertlm.cli.convert_commands._nothing_made_up", "makes up none"),
    ("| text files (plain or compressed) |", "albertlm.data.corpus.binary_reason", "_UNREAD_COMPRESSIONS"),
    ("| `--dist.device` / finetune's `--device` |", "albertlm.training.distributed.pick_device", "_local_gpu"),
    ("| `--dist.device` / finetune's `--device` |", "albertlm.training.distributed.check_backend",
     "NCCL needs a GPU of its own"),
    ("| `--out` of a multi-node run (`pretrain`, `finetune`) |", "albertlm.training.distributed.check_shared_out",
     "is not one directory that every node sees"),
    ("| messages under torchrun |", "albertlm.errors.reports_here", "WORLD_SIZE"),
    ("| prediction and submission files", "albertlm.tasks.glue.write_submission", "write_lines_atomic"),
    ("| a full disk under `convert`, `export onnx`, `tokenizer train` |", "albertlm.cli.convert_commands.run",
     "SafetensorError"),
    ("| a full disk under `convert`, `export onnx`, `tokenizer train` |", "albertlm.cli.export_commands._export",
     "cannot write the export"),
    ("| a full disk under `convert`, `export onnx`, `tokenizer train` |",
     "albertlm.tokenization.sentencepiece._reproducible_model", "is the disk full?"),
    ("| `tokenizer train --out` |", "albertlm.tokenization.wordpiece.train_wordpiece", "for WordPiece"),
    ("| `tokenizer train --out` |", "albertlm.tokenization.sentencepiece.iter_training_lines", "RESERVED_CHAR"),
    ("| `tokenizer train --out` |", "albertlm.tokenization.sentencepiece._no_text", "no text to train on"),
    ("| `tokenizer train --out` |", "albertlm.tokenization.sentencepiece._explain_failure",
     "raise --input-sentence-size"),
    ("| a flag's value |", "albertlm.config.overrides._as_typed", "_spellings"),
    ("| a flag's value |", "albertlm.config.overrides.coerce", "_READ_AS"),
    ("| an unrecognized argument |", "albertlm.cli.main.Parser._meant_required", "did you mean"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:30]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


def check_validation_row(row: str, where: str, check: str) -> None:
    """validation.md has one row starting `row`, its last cell names `where`'s function, and that function's source
    holds `check` (docs audits 28 and later)."""
    rows = [line for line in (ROOT / "docs/validation.md").read_text(encoding="utf-8").splitlines()
            if line.startswith(row)]
    assert len(rows) == 1, row
    name = where.split(".")[-1]
    where_cell = rows[0].rstrip().rstrip("|").split("|")[-1]
    assert f"`{name}`" in where_cell or f".{name}`" in where_cell, (row, where)
    function = audit14._resolve(where)
    assert function is not None, where
    assert check in inspect.getsource(function), (where, check)


# ------------------------------------------------------------------ messages the pages quote
def test_data_md_quotes_the_skipped_lz4_file_as_the_reader_names_it():
    from albertlm.data.corpus import binary_reason

    quoted = _quote("docs/data.md", "first of binary files: a.txt.lz4: ")
    said = binary_reason(b"\x04\x22\x4d\x18" + b"short text, no NUL byte in it\n")
    assert quoted == f"first of binary files: a.txt.lz4: {said}"
    for magic in (b"\x1f\x9d\x90", b"LZIP\x01", b"\x89LZO\x00\r\n"):     # Unix compress, lzip, lzop: the same form
        assert "-compressed, which is not read: decompress it" in binary_reason(magic + b"text")


def test_training_md_quotes_the_option_errors_as_the_flag_typed(capsys, tmp_path):
    """training.md: `--max-steps/--train.max_steps: cannot read '1.5' as int (a whole number)` and
    `--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0` (refused as the options are read)."""
    text = _flat("docs/training.md")
    for value, message in (("1.5", "--max-steps/--train.max_steps: cannot read '1.5' as int (a whole number)"),
                           ("-1", "--max-steps/--train.max_steps: train.max_steps=-1: must be >= 0")):
        assert f"`{message}`" in text, message
        code = main(["pretrain", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "run"),
                     "--max-steps", value])
        assert_one_error(capsys, code, f"albertlm pretrain: error: {message}")
    assert not (tmp_path / "run").exists()


def test_validation_md_quotes_the_misspelt_required_option_hint(capsys, tmp_path):
    quoted = _quote("docs/validation.md", "... required: --out (")
    with pytest.raises(SystemExit) as stopped:      # argparse's error: SystemExit, as the CLI exits
        raise SystemExit(main(["pretrain", "--data", str(tmp_path / "none"), "--OUT", str(tmp_path / "run")]))
    assert_one_error(capsys, stopped.value.code, quoted.removeprefix("... "))


def test_tokenization_md_quotes_tokenizer_trains_refusals(tmp_path):
    """The input of deleted characters only, and WordPiece's smallest vocabulary (refused before any input is
    read: the input named here does not exist)."""
    from albertlm.errors import UserError
    from albertlm.tokenization.sentencepiece import _no_text
    from albertlm.tokenization.wordpiece import train_wordpiece

    quoted = _quote("docs/tokenization.md", "no text to train on: ")
    assert _no_text(2, 0) == f"sentencepiece training failed: {quoted}"
    assert "(7 at least for WordPiece" in _flat("docs/tokenization.md")
    with pytest.raises(UserError, match=r"vocab_size must be at least 7 for WordPiece .* got 6 "
                                        r"\(the trainer would write 7 tokens\)"):
        train_wordpiece([tmp_path / "absent.txt"], 6, tmp_path / "wp")


def test_interop_md_quotes_infos_task_and_label_lines():
    from albertlm.cli.model_commands import _task_lines

    text = _flat("docs/interop.md")
    lines = _task_lines({"task": {"family": "glue", "task": "sst2", "max_seq_length": 128},
                         "labels": {"id2label": {"1": "positive", "0": "negative"},
                                    "problem_type": "single_label_classification"}})
    assert lines[:2] == ["fine-tuned: glue sst2, max_seq_length 128", "labels: 0 = negative, 1 = positive"]
    for line in lines[:2]:
        assert f"`{line}`" in text, line
    assert "`--json`: `labels`, `task`" in text


# ------------------------------------------------------------------ convert's tokenizer warnings: stderr, one form
_STALE_WARNING_PHRASES = ("warns in its summary (`warning:", "in a `warning:` line of its summary")


@pytest.mark.parametrize("doc", ["README.md", "docs/tokenization.md", "docs/interop.md", "docs/model.md"])
def test_no_page_says_converts_warnings_are_bare_lines_of_its_summary(doc):
    text = _flat(doc)
    for phrase in _STALE_WARNING_PHRASES:
        assert phrase not in text, (doc, phrase)


def test_converts_rebuild_warning_is_the_line_tokenization_md_quotes(tmp_path, capsys, one_thread):
    """A `--strip-accents` Korean tokenizer: transformers 5's AlbertTokenizer rebuilds its normalizer without the NFC
    step and reads Hangul as <unk>; convert says so in one `albertlm convert: warning:` line on stderr after its
    summary, as tokenization.md says (it said a bare `warning:` inside the summary)."""
    pytest.importorskip("tokenizers")
    quoted = _quote("docs/tokenization.md", "albertlm convert: warning: transformers 5's AlbertTokenizer")
    start, _, end = quoted.partition(" ... ")
    text = [line.split("\t")[1] for line in
            shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    (tmp_path / "ko.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--input", str(tmp_path / "ko.txt"), "--vocab-size", "1000",
                 "--strip-accents", "--threads", "1", "--out", str(tmp_path / "spm")]) == 0
    src = _tiny_pretrained(tmp_path / "model", 1000)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf",
                 "--tokenizer", str(tmp_path / "spm" / "spiece.model")]) == 0
    out, err = capsys.readouterr()
    assert "warning:" not in out.replace(str(tmp_path), "DIR"), out     # tmp_path's name holds "warning"
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1, err
    assert said[0].startswith(start), (said[0], start)
    assert re.search(re.escape(end.replace("N of its V", "@")).replace("@", r"[\d,]+ of its 1,000"), said[0]), said[0]


# ------------------------------------------------------------------ training.md: the same weights, the same bytes
def test_a_checkpoints_safetensors_metadata_is_sorted_as_training_md_says(tmp_path):
    import json

    from albertlm.model.io import sort_metadata

    assert "`model.io.sort_metadata`" in _flat("docs/training.md")
    assert callable(sort_metadata)
    saved = _tiny_pretrained(tmp_path / "m", 20) / "model.safetensors"
    raw = saved.read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert list(header["__metadata__"]) == sorted(header["__metadata__"]) == ["albertlm_class", "format"]


# ------------------------------------------------------------------ pages that name this session's behaviours
@pytest.mark.parametrize("doc, phrase", [
    ("docs/finetuning.md", "`--out is not one directory that every node sees: ...`"),
    ("docs/finetuning.md", "is written to a temporary file and renamed into place"),
    ("docs/interop.md", "`predict` / `evaluate --model` and `export onnx` read the export at that length too"),
    ("docs/interop.md", "`--out rte-onnx: cannot write the export (No space left on device)`"),
    ("docs/training.md", "a `LOCAL_RANK=1` left exported silenced every error of every command"),
])
def test_the_pages_say_this_sessions_behaviours(doc, phrase):
    assert phrase in _flat(doc), (doc, phrase)


def test_the_quoted_export_and_shared_out_messages_are_the_codes():
    """The f-strings behind the two messages finetuning.md and interop.md quote."""
    from albertlm.cli import export_commands
    from albertlm.training import distributed

    assert 'f"--out {out}: cannot write the export (' in inspect.getsource(export_commands._export)
    assert 'f"{option} is not one directory that every node sees: ' in inspect.getsource(distributed.check_shared_out)
