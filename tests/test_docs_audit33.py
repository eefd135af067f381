"""Docs audit 33: docs/{interop,training,tokenization,data,paper,validation}.md against what the thirty-third
session's commits made the code do.

CRC32C in numpy and `convert`'s reading progress, the refusal of an unknown variable under the backbone's scope and
`info`'s `import_refused`, embed's reserved `.npy` space (interop.md); a resume's notes and record, metrics.jsonl's
rewrite, the fp16 scale read, torchrun's timeout lines and the layout refusal (training.md); WordPiece's whole
alphabet, a corpus of deleted characters, byte pieces, the folders a failed training made (tokenization.md); `data
stats` in blocks, the 64 MiB record limit and the new bad-input rows (data.md); `finetune_tasks = []` and the accents
of a corpus not in Latin letters (paper.md); and no page still saying what those commits changed. Each test checks
the page's sentence and the behaviour on a tiny input (the behaviours are tested at length by the helpers' own
files: tests/test_{interop,train,multinode,tok,data,ablate,infer}_audit33.py). A few seconds, CPU-only."""
from __future__ import annotations

import errno
import inspect
import json
import os
import re
import warnings

import numpy as np
import pytest

import test_docs_audit14 as audit14
from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error
from test_docs_audit26 import _flat
from test_docs_audit28 import _quote, check_validation_row
from test_distributed_audit21 import clean_launch  # noqa: F401  (fixture: no launch variables)

ROOT = audit14.ROOT
PAGES = ("interop", "training", "tokenization", "data", "paper", "finetuning", "validation")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# ------------------------------------------------------------------ no page says what the commits changed
@pytest.mark.parametrize("old", [
    "CRC32C in pure Python", "other variables are listed as unused", "scans each shard through a memory map",
    "`data stats` scans through a memory map", "JSONL lines are read whole", "and the saved config is left as it was",
    "not measured here), or rely", "the input is read again for its characters",
    "alphabet is capped at half of the vocabulary left after the five special tokens (every kept",
    "| the same with every tensor's CRC32C verified | 7.8 s |"])
def test_no_page_says_what_this_sessions_commits_changed(old):
    for page in PAGES:
        assert old not in _flat(f"docs/{page}.md"), (page, old)


# ------------------------------------------------------------------ interop.md
def test_crc32c_in_numpy_as_interop_md_says():
    from albertlm.interop import tf_checkpoint as tfc
    from test_interop_audit33 import reference_crc32c

    text = _flat("docs/interop.md")
    assert "CRC32C runs in numpy at a few hundred MB/s (`tf_checkpoint.crc32c`: a long buffer is cut into pieces " \
           "whose CRCs are computed side by side, then combined" in text
    assert "_LANES" in inspect.getsource(tfc.crc32c)
    data = np.random.default_rng(0).integers(0, 256, 100_003, dtype=np.uint8).tobytes()
    assert tfc.crc32c(data) == reference_crc32c(data)
    assert tfc.crc32c(b"123456789") == 0xE3069283        # RFC 3720's check value


def test_converts_reading_progress_line_is_the_one_interop_md_quotes(monkeypatch, capsys):
    from albertlm import errors
    from albertlm.cli import convert_commands

    quoted = _quote("docs/interop.md", "convert: read 30% of ")
    assert "a progress bar on a terminal after 2 s, a line per tenth in a log after 30 s" in _flat("docs/interop.md")
    assert (convert_commands.PROGRESS_AFTER, convert_commands.PLAIN_PROGRESS_AFTER) == (2.0, 30.0)
    monkeypatch.setattr(errors, "stderr_is_terminal", lambda: False)
    monkeypatch.setattr(convert_commands, "PLAIN_PROGRESS_AFTER", 0.0)
    with convert_commands.tf_read_progress(verify=True) as progress:
        progress(0, 1_234_500_000)
        progress(370_350_000, 1_234_500_000)
    said = capsys.readouterr().err.strip()
    assert said == quoted.replace("0.6 min", "0.0 min"), (said, quoted)


def _unknown_variable_checkpoint(tmp_path):
    from test_tfonnx_audit20 import fixture_tensors, write_checkpoint

    tensors = fixture_tensors()
    tensors["bert/encoder/extra/kernel"] = np.zeros((3, 4), np.float32)
    return write_checkpoint(tmp_path / "ckpt", tensors)


def test_an_unknown_backbone_variable_is_refused_as_interop_md_says(tmp_path, capsys):
    from albertlm.interop.tf import describe_tf_checkpoint, import_tf_checkpoint
    from test_tfonnx_audit20 import FIXTURE

    text = _flat("docs/interop.md")
    assert "Any other variable under the backbone's scope (`bert/`) that google's `modeling.py` does not make for " \
           "the config, and that is not training state, is a model albertlm does not know: it is refused in one " \
           "line naming it" in text
    assert "variables outside the backbone (another head) are listed as unused" in text
    quoted = _quote("docs/interop.md", "... is a variable under the backbone's scope bert/")
    prefix = _unknown_variable_checkpoint(tmp_path)
    with pytest.raises(UserError) as exc:
        import_tf_checkpoint(prefix)
    assert "bert/encoder/extra/kernel " + quoted.strip(". ") in str(exc.value), (str(exc.value), quoted)
    # info describes it and warns why; --json has import_refused (null for a checkpoint the import takes)
    assert "`albertlm info` describes such a checkpoint and warns why the import refuses it " \
           "(`describe_tf_checkpoint`'s `refused`; `info --json`: `import_refused`)" in text
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert main(["info", str(prefix), "--json"]) == 0
    assert "bert/encoder/extra/kernel" in json.loads(capsys.readouterr().out)["import_refused"]
    assert any("`albertlm convert` refuses this checkpoint" in str(w.message) for w in said)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["info", str(FIXTURE), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["import_refused"] is None
    assert describe_tf_checkpoint(FIXTURE)["refused"] is None


def test_import_tf_checkpoints_signature_is_the_one_interop_md_gives():
    from albertlm.interop.tf import import_tf_checkpoint

    assert "`model, report = import_tf_checkpoint(path, config=None, verify=False, progress=None)`" in \
        _flat("docs/interop.md")
    assert [(p.name, p.default) for p in inspect.signature(import_tf_checkpoint).parameters.values()] == \
        [("path", inspect.Parameter.empty), ("config", None), ("verify", False), ("progress", None)]


def test_embeds_reserved_space_is_as_interop_md_says(tmp_path, monkeypatch):
    from albertlm.cli import infer_commands

    quoted = _quote("docs/interop.md", "--out OUT: cannot write there (No space left on device: ")
    assert "An `.npy`'s disk space is reserved before the first batch (`posix_fallocate`)" in _flat("docs/interop.md")
    tmp = tmp_path / "e.npy.tmp"
    tmp.write_bytes(b"\0" * 4096)

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    with pytest.raises(UserError) as exc:
        infer_commands.allocate(tmp, "OUT", 4, 256)
    pattern = re.escape(quoted).replace(re.escape("N x H"), r"[\d,]+\ x\ \d+").replace(re.escape("take S)"),
                                                                                          r"take\ [\d.]+\ \w+\)")
    assert re.fullmatch(pattern, str(exc.value)), (str(exc.value), quoted)


def test_validation_md_names_the_unknown_variable_check():
    assert "a variable under the backbone's scope the import does not know is refused naming it" in \
        _flat("docs/validation.md")
    check_validation_row("| TF checkpoint (`.index` + `.data-*`) |", "albertlm.interop.tf.unknown_backbone_variables",
                         "TRAINING_STATE")


# ------------------------------------------------------------------ training.md
def test_a_resumes_notes_are_the_lines_training_md_quotes(tmp_path, capsys):
    from albertlm.training import checkpoint as ckpt
    from albertlm.training import loop as loop_module
    from test_train_audit16 import _loop
    from test_train_audit33 import _fake_history

    text = _flat("docs/training.md")
    assert "each checkpoint's `trainer_state.pt` records the device each part ran on (`loop.RAN_WITH`;" in text
    assert loop_module.RAN_WITH == "ran_with"
    device = _quote("docs/training.md", "note: resuming with another device cpu")
    length = _quote("docs/training.md", "note: resuming with 8 steps in all")
    assert _loop(tmp_path, max_steps=2, save_every=2).run() == "done"
    _fake_history(ckpt.step_dir(tmp_path, 2), device="cuda (NVIDIA H100 80GB HBM3)")
    capsys.readouterr()
    assert _loop(tmp_path, resume=True, max_steps=4, save_every=2).run() == "done"
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith("note: resuming with another")]
    head, rest = device.split(": ... ", 1)
    assert len(said) == 1 and said[0].startswith(head + ": ") and rest.removesuffix(" ...") in said[0], (said, device)
    assert _loop(tmp_path, resume=True, max_steps=8, save_every=2).run() == "done"
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: resuming with 8 steps")]
    assert len(said) == 1 and said[0].startswith(length.removesuffix("...")), (said, length)
    assert "(said in one line as the resumed run starts, with the new and old rate)" in text


def test_metrics_rewrite_is_as_training_md_says(tmp_path):
    from albertlm.training.metrics import drop_records_after

    assert "The rewrite is fsync'ed before it replaces metrics.jsonl; a `metrics.jsonl.tmp` left by a kill is " \
           "removed at the next start, and a last record without its newline gets one." in _flat("docs/training.md")
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "split": "train"}\n{"step": 2, "split": "train"}', encoding="utf-8")
    (tmp_path / "metrics.jsonl.tmp").write_text("left by a kill", encoding="utf-8")
    drop_records_after(path, 2)
    assert not (tmp_path / "metrics.jsonl.tmp").exists()
    assert path.read_text(encoding="utf-8") == '{"step": 1, "split": "train"}\n{"step": 2, "split": "train"}\n'
    assert "os.fsync" in inspect.getsource(drop_records_after)


def test_the_fp16_scale_read_is_as_training_md_says():
    import types

    from albertlm.training.loop import Loop

    assert "(through GradScaler's private `_get_scale_async`, in torch 2.4 to 2.13; a torch without it: the public " \
           "`get_scale()` after the step's sync, one more copy of one number)" in _flat("docs/training.md")
    no_private = types.SimpleNamespace(scaler=types.SimpleNamespace(get_scale=lambda: 1.0))
    assert Loop._scale_tensor(no_private) is None                      # then train_step reads get_scale()
    assert "float(self.scaler.get_scale())" in inspect.getsource(Loop.train_step)


def test_torchruns_timeout_lines_are_as_training_md_says(clean_launch):   # noqa: F811
    from albertlm.training import distributed

    text = _flat("docs/training.md")
    assert "(`timed out: 1 of 2 processes came`); the line names the ranks that did not come and says their " \
           "node's torchrun reports why." in text
    said = distributed._never_came(0, 2, 1, [1], 30)
    assert "timed out: 1 of 2 processes came" in said and "rank 1 did not" in said
    assert "the torchrun of the node that runs them says why" in said
    assert "A rank that cannot reach torchrun's store (the torchrun of rank 0's node stopped, or its address does " \
           "not resolve from this node) stops within a minute saying so" in text
    assert "cannot reach torchrun's store at" in distributed._store_unreachable(1, 60)
    assert "torchrun's own rendezvous waits 900 s (static, `--rdzv_conf timeout=S`) or 600 s (c10d, `--rdzv_conf " \
           "join_timeout=S`), and `--dist.timeout_minutes` does not apply" in text
    assert "not measured here" not in text
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in distributed._never_came(0, 2, 1, [1], 30, other_count=0)


def test_a_resume_on_three_processes_is_refused_as_training_md_says():
    from albertlm.config.run import TrainConfig
    from albertlm.training import pretrain

    assert "on 3 processes it is refused in one line naming the process counts that work " \
           "(`pretrain.check_layout`)" in _flat("docs/training.md")
    train = TrainConfig(batch_size=8, micro_batch_size=0)
    for works in (1, 2, 4):
        pretrain.check_layout(train, works, resume=True)
    with pytest.raises(UserError) as exc:
        pretrain.check_layout(train, 3, resume=True)
    assert "1, 2, 4 or 8" in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


# ------------------------------------------------------------------ tokenization.md
def test_wordpiece_keeps_every_character_as_tokenization_md_says(tmp_path):
    from test_tok_audit33 import _train

    text = _flat("docs/tokenization.md")
    assert "Its alphabet is every character of the training text where the vocabulary holds them: each that can " \
           "continue a word also as `##c` (as google's WordPiece learner makes it, so a word of known characters is " \
           "never `[UNK]`)" in text
    lines = ["abc def", "fed cba", "xyz"] * 3
    tok = _train(tmp_path, lines, 60)
    vocab = tok.vocab
    assert all(c in vocab and f"##{c}" in vocab for c in "abcdefxyz")
    assert all(tok.unk_id not in tok.encode(w) for w in ("zyx", "fad", "bx"))   # known characters, unseen words


def test_wordpiece_corpus_of_deleted_characters_is_refused_as_tokenization_md_says(tmp_path, capsys):
    assert "A corpus holding only characters BERT's normalizer deletes (control, zero-width, U+FFFD) is refused in " \
           "one line" in _flat("docs/tokenization.md")
    (tmp_path / "in.txt").write_text("\x01\x02\n\u200b\n\ufffd\n", encoding="utf-8")
    code = main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(tmp_path / "in.txt"), "--vocab-size",
                 "100", "--out", str(tmp_path / "a" / "b")])
    assert_one_error(capsys, code, "only characters BERT's normalizer deletes")
    # and a failed training leaves no folder it made, parents too
    assert "no empty `--out` (nor the parent folders it made for it)" in _flat("docs/tokenization.md")
    assert not (tmp_path / "a").exists()


def test_byte_pieces_are_not_added_tokens_as_tokenization_md_says():
    from albertlm.tokenization.sentencepiece import SentencePieceTokenizer

    assert "A byte-fallback model's byte pieces are not added tokens: the text `<0x41>` reads as sentencepiece " \
           "reads it" in _flat("docs/tokenization.md")
    assert "not sp.is_byte(i)" in inspect.getsource(SentencePieceTokenizer._added_tokens_pattern)


# ------------------------------------------------------------------ data.md
def test_data_stats_reads_blocks_as_data_md_says():
    from albertlm.data import stats

    text = _flat("docs/data.md")
    assert "`data stats` reads each shard in blocks of 8,192 records into one buffer with plain reads " \
           "(`albertlm.data.stats.shard_blocks`)" in text
    assert stats.BLOCK == 8192 and "memmap" not in inspect.getsource(stats.shard_blocks)
    assert "`data stats` reads blocks of 8,192 records with plain reads" in _flat("docs/validation.md")


def test_the_record_limit_is_as_data_md_says(tmp_path):
    from albertlm.data import corpus

    text = _flat("docs/data.md")
    assert "JSONL records and CSV lines are read whole (a record is one JSON value), up to 64 MiB each " \
           "(`corpus.MAX_RECORD_BYTES`); a longer one stops the build with one line naming the file and line." in text
    assert corpus.MAX_RECORD_BYTES == 64 << 20
    quoted = _quote("docs/data.md", "error: FILE line N: a line over 67,108,864 bytes")
    said = corpus.record_too_long("FILE", 3)
    assert said.startswith(quoted[len("error: "):].removesuffix("...").replace("line N", "line 3")), (said, quoted)
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "A sentence here."}\n{"text": "' + "x" * 300 + '"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=re.escape(f"{path} line 2: a line over 100 bytes")):
        list(corpus.read_documents([path], fmt="jsonl", max_record_bytes=100))


def test_the_new_bad_input_rows_are_the_readers_messages(tmp_path):
    from albertlm.data import corpus

    gone = _quote("docs/data.md", "error: input FILE is gone")
    assert gone == "error: " + corpus.unreadable_input("FILE", FileNotFoundError())
    two = _quote("docs/data.md", "error: FILE has 2 columns named 'text'")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_arrays([pa.array(["A."]), pa.array(["B."])], names=["text", "text"]), path)
    with pytest.raises(UserError) as exc:
        corpus.check_inputs([path])
    assert "error: " + str(exc.value) == two.replace("FILE", str(path))
    assert "| a `**` pattern through symbolic-link loops (`ln -s . self`, `ln -s .. up`) | each file read once; a " \
           "link back to a directory above is not followed" in _flat("docs/data.md")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("Hello.\n")
    os.symlink(".", tmp_path / "c" / "self")
    assert [p.name for p in corpus.find_input_files([f"{tmp_path}/c/**/*.txt"])] == ["a.txt"]


# ------------------------------------------------------------------ paper.md
def test_a_scale_without_finetuning_is_as_paper_md_says(tmp_path, capsys):
    from albertlm.experiments import report, runner
    from albertlm.experiments.scales import read_scale_file

    text = _flat("docs/paper.md")
    assert "`finetune_tasks = []` makes a suite without fine-tuning, for a corpus with no labelled task in its " \
           "language" in text
    assert 'claims 2, 3 and 5 read "not measured (no fine-tuning task in this scale)", as does `results.json`\'s ' \
           "`downstream`" in text
    assert report.NO_FINETUNING == "not measured (no fine-tuning task in this scale)"
    path = tmp_path / "ko.toml"
    path.write_text('base = "smoke"\nfinetune_tasks = []\n', encoding="utf-8")
    assert read_scale_file(path).intrinsic_only
    assert "`--finetune-seeds` and `--finetune-lr` are refused with it." in text
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.txt", "heldout.txt"):
        (corpus / name).write_text("하나.\n둘.\n", encoding="utf-8")
    code = main(["ablate", "--scale", str(path), "--corpus", str(corpus), "--out", str(tmp_path / "out"),
                 "--finetune-lr", "1e-5", "--list-jobs"])
    assert_one_error(capsys, code, "finetune_tasks = []")
    assert "A scale file with `finetune_tasks = []` skips them altogether." in text
    # the suite's tokenizer keeps accents on a corpus fewer than half of whose letters are ASCII Latin
    assert "accents stripped as ALBERT's, except for a corpus fewer than half of whose letters are ASCII Latin, " \
           "where they are kept: stripping turned ガ into カ" in text
    assert runner.KEEP_ACCENTS_BELOW == 0.5
