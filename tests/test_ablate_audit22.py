"""`albertlm ablate` audit 22: a researcher's own tokenizer (`--tokenizer`: a WordPiece vocab for Chinese or
Korean, a SentencePiece model) where the suite trained its own SentencePiece model and nobody could give one;
its record in prepared.json and suite.json, a rerun with another tokenizer (or none) refused in one line, the
report naming it, GLUE's fit counted with its own unknown token and `##` pieces; and a corpus edited in place
under a suite with results (the rerun went on, the suite's runs of one text reported under an edited one).
Only the preparation of a tiny suite runs here; nothing pretrains."""
from __future__ import annotations

import json
import os
import re
import shutil
import string

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import assert_one_error
from test_ablate_audit13 import _corpus, _suite
from test_report_audit18 import _planned, _write

WORDS = ["one", "sentence", "here", "another", "there", "a", "second", "document", "held", "out", "third", "."]


def _vocab(tmp_path, name: str = "vocab.txt", extra: tuple[str, ...] = ()) -> str:
    """A tiny lowercase WordPiece vocab (BERT's special tokens, the corpus's words, single letters and ##letters)."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *extra, *string.ascii_lowercase,
              *(f"##{c}" for c in string.ascii_lowercase)]
    path = tmp_path / name
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return str(path)


def _quiet(*_args) -> None:
    return None


# --------------------------------------------------------------------------------------------- --tokenizer
def test_a_given_wordpiece_vocab_is_the_suites_tokenizer(tmp_path):
    """The suite trained its own SentencePiece model whatever the user had: a Chinese or Korean WordPiece vocab
    could not be given. Now the vocab is copied into prepared/tokenizer/, every model's V is its size, the data
    are built with it, prepared.json and suite.json record it, and GLUE's fit counts its [UNK] and ##pieces."""
    from albertlm.experiments.runner import make_suite, merged_plan, plan_jobs, prepare

    vocab = _vocab(tmp_path)
    suite = _suite(tmp_path, [{"name": "a"}])
    given = make_suite(suite.out, suite.scale, suite.grid, tmp_path / "corpus", suite.glue_dir, tokenizer=vocab)
    v = 5 + len(WORDS) + 52
    assert given.scale.vocab_size == v and all(run.model["vocab_size"] == v for run in given.runs)
    saved = prepare(given, log=_quiet)
    assert (given.tokenizer / "vocab.txt").read_text(encoding="utf-8") == open(vocab, encoding="utf-8").read()
    assert saved["tokenizer"]["given"] == str(tmp_path / "vocab.txt") and saved["tokenizer"]["kind"] == "wordpiece"
    meta = json.loads((given.data("train", "sop") / "meta.json").read_text(encoding="utf-8"))
    assert meta["tokenizer"]["vocab_size"] == v
    # GLUE's English words are mostly spelled (c ##a ##t) or [UNK] here: both were counted as whole words
    fit = saved["glue_tokens"]
    assert fit["unk_share"] > 0 and fit["spelled_word_share"] > 0.5, fit
    assert merged_plan(given, plan_jobs(given.runs))["tokenizer"]["given"] == str(tmp_path / "vocab.txt")


def test_a_rerun_with_another_tokenizer_or_none_is_refused(tmp_path):
    """A finished suite prepared with --tokenizer, continued without it (the suite would have trained its own
    and refused at best "vocab_size: 69 there, 400 now") or with another vocab: one line naming the tokenizer
    it was run with. The same tokenizer at another path continues."""
    from albertlm.experiments.runner import make_suite, prepare, preview, run_suite

    vocab = _vocab(tmp_path)
    grid = [{"name": "a"}]
    first = _suite(tmp_path, grid)
    first = make_suite(first.out, first.scale, first.grid, tmp_path / "corpus", first.glue_dir, tokenizer=vocab)
    prepare(first, log=_quiet)
    jobs = {job.name: job for job, _ in preview(first)}
    _write(first, jobs["a-s1"], {"sst2": 0.8})                      # a result: the suite has measured
    without = _suite(tmp_path, grid)
    with pytest.raises(UserError, match=r"prepared with --tokenizer .*vocab.txt \(wordpiece, V=69\), not its own "
                                         r"SentencePiece tokenizer .*: give --tokenizer .*vocab.txt as it was run"):
        preview(without)
    with pytest.raises(UserError, match="prepared with --tokenizer"):
        run_suite(without, log=_quiet)
    other = make_suite(first.out, first.scale, first.grid, tmp_path / "corpus", first.glue_dir,
                       tokenizer=_vocab(tmp_path, "other.txt", extra=("film",)))
    with pytest.raises(UserError, match=r"not --tokenizer .*other.txt \(wordpiece, V=70\)"):
        preview(other)
    moved = shutil.copy(vocab, tmp_path / "moved.txt")
    same = make_suite(first.out, first.scale, first.grid, tmp_path / "corpus", first.glue_dir, tokenizer=moved)
    assert [state for _, state in preview(same)] == ["done", "to-run"]


def test_the_report_names_the_given_tokenizer(tmp_path):
    from albertlm.experiments.report import corpus_facts
    from albertlm.experiments.runner import _write_json, given_tokenizer

    (tmp_path / "prepared").mkdir()
    record = given_tokenizer(_vocab(tmp_path))
    _write_json(tmp_path / "prepared" / "prepared.json", {"settings": {"vocab_size": 69}, "tokenizer": record})
    line = corpus_facts(tmp_path)[0]
    assert line == f"Tokenizer: given with `--tokenizer {tmp_path / 'vocab.txt'}` (WordPiece, V=69), not trained " \
                   f"on the corpus.", line


@pytest.mark.parametrize("args, message", [
    (["--tokenizer", "{tmp}/none.model"], "--tokenizer {tmp}/none.model: tokenizer not found"),
    (["--tokenizer", "{vocab}", "--vocab-size", "500"], "--vocab-size sets the vocabulary of the tokenizer"),
])
def test_tokenizer_option_errors_are_one_line(capsys, tmp_path, args, message):
    vocab = _vocab(tmp_path)
    fill = {"tmp": str(tmp_path), "vocab": vocab}
    rc = main(["ablate", "--grid", "table5", "--scale", "smoke", "--corpus", str(_corpus(tmp_path)), "--out",
               str(tmp_path / "o"), *(a.format(**fill) for a in args)])
    assert_one_error(capsys, rc, message.format(**fill))
    assert not (tmp_path / "o").exists()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "suite.json").write_text("{}")
    assert_one_error(capsys, main(["ablate", "--out", str(tmp_path / "o"), "--report-only", "--tokenizer", vocab]),
                     "--tokenizer cannot be used with it")


# ------------------------------------------------------------------------------- a corpus edited in place
def _measured_suite(tmp_path):
    """A suite with one finished job whose prepared.json records the corpus as it was prepared."""
    from albertlm.experiments.runner import _write_json, corpus_fingerprint, glue_paths, prepare_settings

    suite, jobs = _planned(tmp_path, [{"name": "a"}])
    _write(suite, jobs["a-s1"], {"sst2": 0.8})
    suite.prepared.mkdir()
    _write_json(suite.prepared / "prepared.json", {"settings": prepare_settings(suite), "glue": glue_paths(suite),
                                                    "corpus_files": corpus_fingerprint(suite)})
    return suite


@pytest.mark.parametrize("edit, message", [
    ("append", r"train.txt changed \(\d+ bytes then, \d+ now\)"),
    ("same size", r"train.txt changed \(the same size, other text\)"),
])
def test_a_corpus_edited_in_place_under_a_measured_suite_is_refused(tmp_path, edit, message):
    """The corpus's train.txt edited (a sentence added, a typo fixed) after a job finished: the rerun went on
    as if nothing had changed (only the path was compared), so the suite's report stood for a text it was not
    run on. Now --list-jobs and the run refuse it in one line, before anything is written; the same bytes
    written again (a newer time only) continue."""
    from albertlm.experiments.runner import preview, run_suite

    suite = _measured_suite(tmp_path)
    stat = suite.train_text.stat()               # written again with the same bytes (a newer time): continues
    suite.train_text.write_bytes(suite.train_text.read_bytes())
    os.utime(suite.train_text, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert [state for _, state in preview(suite)] == ["done", "to-run"]
    text = suite.train_text.read_text(encoding="utf-8")
    edited = text + "A new sentence.\n" if edit == "append" else text.replace("One", "Ono")
    stat = suite.train_text.stat()
    suite.train_text.write_text(edited, encoding="utf-8")
    os.utime(suite.train_text, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2 * 10**9))   # (a coarse clock's edit)
    before = sorted(p.relative_to(suite.out) for p in suite.out.rglob("*"))
    full = (rf"--corpus {re.escape(str(tmp_path / 'corpus'))}: {message} since .* was prepared from it; "
            rf".*restore it, or give another --out")
    with pytest.raises(UserError, match=full):
        preview(suite)
    with pytest.raises(UserError, match=message):
        run_suite(suite, log=_quiet)
    assert sorted(p.relative_to(suite.out) for p in suite.out.rglob("*")) == before

