"""Docs audit 30, third pass: docs/{interop,tokenization,validation,finetuning,data}.md against commits 5ab123f
(numeric labels by exact value, scoring a gold class the model lacks, bzip2 by its whole header, embed's temporary
file held by flock) and 98510bd (an export that AlbertTokenizer would read otherwise names PreTrainedTokenizerFast;
a tokenizer.json that lost its byte fallback warns at load).

The messages the pages quote are the code's (embed's held-temporary error); the rows of validation.md point at the
functions that do the checks; what the pages say a function does it does on a tiny input (two 18-digit ids two
classes, `BZh,label` text, a gold class the model lacks a wrong prediction, a vocab.txt export naming BertTokenizer,
the byte-fallback warning at load); and no page still says what these commits changed. CPU-only, a few seconds."""
from __future__ import annotations

import inspect
import json
import os
import warnings

import pytest

from albertlm.cli.main import main
from test_docs_audit26 import _flat
from test_docs_audit28 import _quote, check_validation_row
from test_docs_audit30 import _rendered
from test_followups_audit18 import _tiny_pretrained
from test_review_audit30 import _examples, _gold_and_predictions
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------ interop.md / validation.md: embed's temporary file
def test_the_held_temporary_error_is_what_interop_md_quotes():
    from albertlm.cli import infer_commands

    quoted = _quote("docs/interop.md", "--out OUT: its temporary file TMP ")
    said = _rendered(inspect.getsource(infer_commands.hold_temporary), "--out ", {"out": "OUT", "tmp": "TMP"})
    head, _, tail = quoted.partition("(...)")
    assert said.startswith(head) and said.endswith(tail), (said, quoted)
    text = _flat("docs/interop.md")
    assert "removes those of this machine's processes that are gone and whose lock it can take (the writer holds " \
           "an exclusive `flock` on its temporary file for its whole life" in text
    assert "fcntl.LOCK_EX" in inspect.getsource(infer_commands._remove_unheld)


def test_a_held_temporary_file_is_kept_and_a_second_holder_refused(tmp_path, monkeypatch):
    """What interop.md says, in one process (flock locks belong to an open file: a second open conflicts)."""
    pytest.importorskip("fcntl")
    from albertlm.cli import infer_commands
    from albertlm.errors import UserError

    monkeypatch.setattr(infer_commands, "_HOLD_WAIT_S", 0.0)
    out = tmp_path / "emb.npy"
    tmp = infer_commands.temporary_name(out, 2 ** 22 + 12345)   # a pid no process here has (pid_max is 2**22)
    held = infer_commands.hold_temporary(tmp, out)
    try:
        assert infer_commands._remove_unheld(tmp) is False and tmp.exists()
        with pytest.raises(UserError, match="is being written by another process"):
            infer_commands.hold_temporary(tmp, out)
    finally:
        os.close(held)
    assert infer_commands.remove_killed_temporaries(out) == [tmp] and not tmp.exists()


_ROWS = [
    ("| `embed --out` |", "albertlm.cli.infer_commands.hold_temporary", "LOCK_EX"),
    ("| `embed --out` |", "albertlm.cli.infer_commands._remove_unheld", "flock"),
    ("| classify CSV/TSV/JSONL/Parquet/Arrow |", "albertlm.tasks.classify._exact", "Decimal(label)"),
    ("| classify CSV/TSV/JSONL/Parquet/Arrow |", "albertlm.tasks.tables.compressed_text",
     "compression_of(handle.read(10))"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:20]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_the_third_pass_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


# ------------------------------------------------------------------ finetuning.md / validation.md / data.md: 5ab123f
def test_two_18_digit_ids_are_two_classes_as_finetuning_md_says():
    from albertlm.tasks import classify

    assert "two 18-digit ids that are one float (`123456789012345678`, `123456789012345679`) are two classes" \
           in _flat("docs/finetuning.md")
    assert "(numbers compared by exact value: two 18-digit ids stay two classes)" in _flat("docs/validation.md")
    labels = ["123456789012345678", "123456789012345679"]
    assert float(labels[0]) == float(labels[1])
    assert classify.label_set(_examples(labels)) == tuple(labels)


def test_a_bzh_header_is_text_as_validation_md_and_data_md_say(tmp_path):
    import bz2

    from albertlm.data import corpus
    from albertlm.tasks import classify

    assert "(bzip2 by `BZh`, its level digit and block magic: a CSV header `BZh,label` is text)" \
           in _flat("docs/validation.md")
    assert "(bzip2's `BZh` only with its level digit and block magic: a text whose first line starts `BZh` is read " \
           "as text)" in _flat("docs/data.md")
    path = tmp_path / "train.csv"
    path.write_text("BZh,label\nfirst text,1\n", encoding="utf-8")
    assert [e.text_a for e in classify.read_examples(path, classify.Columns("BZh"))] == ["first text"]
    assert corpus.compression_of(b"BZh is a ") is None                 # the corpus reader's 8 bytes
    assert corpus.compression_of(bz2.compress(b"a\n")[:8]) == "bz2"


def test_a_gold_class_the_model_lacks_scores_as_finetuning_md_says(tmp_path, capsys):
    assert "(the model's labels in its order, then the gold file's labels the model lacks, each a wrong " \
           "prediction: the same two-class F1 as the run;" in _flat("docs/finetuning.md")
    dev, with_p, _ = _gold_and_predictions(tmp_path)   # gold spam / ham / other, the model's p_spam, p_ham
    assert main(["evaluate", "classify", "--predictions", str(with_p), "--dev", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(2 / 3)


# ------------------------------------------------------------------ interop.md / tokenization.md: 98510bd
def test_the_class_the_pages_name_is_the_codes():
    from albertlm.interop import hf

    assert hf.FAST_TOKENIZER_CLASS == "PreTrainedTokenizerFast"
    assert f"(tokenizer_config.json names {hf.FAST_TOKENIZER_CLASS})" in hf._AUTO_READS_IT
    assert "`\"tokenizer_class\": \"PreTrainedTokenizerFast\"`" in _flat("docs/interop.md")
    assert "tokenizer_config.json then names `PreTrainedTokenizerFast`, so `AutoTokenizer` and `pipeline` read " \
           "tokenizer.json as written and give our ids" in _flat("docs/tokenization.md")
    assert '"AlbertTokenizer"' in inspect.getsource(hf._albert_rebuilds)


def test_a_vocab_txt_export_still_names_bert_tokenizer_as_interop_md_says(tiny_tokenizer, tmp_path,  # noqa: F811
                                                                          capsys):
    """interop.md: an export AlbertTokenizer reads as written names the class it named before: `BertTokenizer` for
    a vocab.txt (the note said `AlbertTokenizer` for every other export)."""
    assert "`AlbertTokenizer` for a spiece.model such as albert-base-v2's, `BertTokenizer` for a vocab.txt" \
           in _flat("docs/interop.md")
    src = _tiny_pretrained(tmp_path / "src", tiny_tokenizer.vocab_size)
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer",
                 str(tiny_tokenizer.vocab_file)]) == 0
    capsys.readouterr()
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "BertTokenizer"


def test_loading_a_tokenizer_json_that_lost_its_byte_fallback_warns_as_interop_md_says(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer
    from tokenizers.models import Unigram

    from albertlm.tokenization import load_tokenizer

    assert "every command that loads such a tokenizer.json (`fill-mask`, `embed`, `finetune`, `predict`) warns the " \
           "same, once, at load" in _flat("docs/interop.md")
    vocab = [("<pad>", 0.0), ("<unk>", 0.0), ("[CLS]", 0.0), ("[SEP]", 0.0), ("[MASK]", 0.0)] + \
        [(f"<0x{b:02X}>", 0.0) for b in range(256)] + [("▁a", -1.0)]
    path = tmp_path / "tokenizer.json"
    Tokenizer(Unigram(vocab, unk_id=1, byte_fallback=False)).save(str(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_tokenizer(path)
    said = [str(w.message) for w in caught if "256 byte pieces" in str(w.message)]
    from albertlm.interop.hf import lost_byte_fallback   # convert's warning: the same text

    assert said == [lost_byte_fallback(path)], said


# ------------------------------------------------------------------ what the pages said before these commits
_STALE = [
    ("docs/interop.md", "(what `AutoTokenizer` returns)"),
    ("docs/interop.md", "both lines name `PreTrainedTokenizerFast(tokenizer_file=...)`"),
    ("docs/interop.md", "removes those of this machine's processes that are gone, saying so"),
    ("docs/interop.md", "as it says transformers 5's AlbertTokenizer giving other ids"),
    ("docs/tokenization.md", "(what `AutoTokenizer` returns)"),
    ("docs/tokenization.md", "`convert` warns that AutoTokenizer / AlbertTokenizer read `<unk>` there"),
    ("docs/tokenization.md", "(`AutoTokenizer`, `pipeline`) drops those steps"),
    ("docs/validation.md", "(`.tmp-NAME-HOST-PID`, its process gone on this machine)"),
    ("docs/finetuning.md", "(the model's labels in its order: the same two-class F1"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_the_third_pass_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
