"""audit25 (warnform): every standalone warning line the CLI prints has one form, `albertlm <command>: warning:
<text>`, the form of its error lines (`errors.warning_line` / `errors.say_warning`, the command named by
`cli.main` while it runs). These lines were `warning: ...` (albertlm's UserWarnings on the console, `tokenizer
train`'s and `tokenizer encode`'s), `albertlm: warning: ...` (data build's, the corpus reader's, bf16 emulated) or
named a fixed command (`albertlm ablate: warning:` from the report, whatever called it)."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

from albertlm.cli.main import main
from conftest import alice_documents
from test_data_audit21 import _build
from test_tokenization_audit18 import _stdin, _train


def _said(err: str, phrase: str) -> list[str]:
    return [line for line in err.splitlines() if phrase in line]


def _korean_vocab(root: Path) -> Path:
    """A vocab.txt of 150 Hangul syllables: loaded with BERT's default accent stripping it warns."""
    root.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (root / "vocab.txt").write_text("\n".join(specials + [chr(0xAC00 + k) for k in range(150)]) + "\n",
                                    encoding="utf-8")
    return root / "vocab.txt"


# -- cli/main.py `_one_line_warning`: albertlm's UserWarnings on the console command -----------------------------
def test_the_console_command_names_itself_in_albertlms_userwarning(tmp_path, monkeypatch, capsys):
    vocab = _korean_vocab(tmp_path / "tok")
    text = tmp_path / "in.txt"
    text.write_text(("가나다 라마바. 사아자 차카타.\n" * 3 + "\n") * 20, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["albertlm", "data", "build", "--input", str(text), "--tokenizer", str(vocab),
                                      "--out", str(tmp_path / "d"), "--max-seq-length", "32", "--dupe-factor", "1",
                                      "--workers", "1", "--no-progress"])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main() == 0                       # argv None: the console command's warning display
    said = _said(capsys.readouterr().err, "Hangul")
    assert len(said) == 1 and said[0].startswith("albertlm data: warning: "), said


# -- cli/data_commands.py: the unknown-token warning after the build's summary ---------------------------------
def test_data_builds_unknown_token_warning_names_the_command(tmp_path, capsys):
    lines = alice_documents(tmp_path, 40).read_text(encoding="utf-8").splitlines()
    corpus = tmp_path / "unk.txt"
    corpus.write_text("\n".join(f"{line} 笸聩笸聩" if line else "" for line in lines) + "\n", encoding="utf-8")
    assert _build([corpus], tmp_path / "out", "--workers", "1") == 0
    said = _said(capsys.readouterr().err, "are the unknown token")
    assert len(said) == 1 and said[0].startswith("albertlm data: warning: "), said


# -- data/build.py: a GLUE table given as text, and --workers above the cores ------------------------------------
def test_data_builds_table_warning_names_the_command(tmp_path, capsys):
    tsv = tmp_path / "train.tsv"
    tsv.write_text("sentence\tlabel\n" + "".join(f"The film number {k} was a pleasant surprise .\t{k % 2}\n"
                                                 for k in range(30)), encoding="utf-8")
    assert _build([tsv], tmp_path / "out", "--workers", "1") == 0
    said = _said(capsys.readouterr().err, "look like tables")
    assert len(said) == 1 and said[0].startswith("albertlm data: warning: 1 input file(s) look like tables"), said


def test_data_builds_workers_warning_names_the_command(tmp_path, capsys, monkeypatch):
    from albertlm.data import build

    monkeypatch.setattr(build, "available_cores", lambda: 1)
    assert _build([alice_documents(tmp_path, 40)], tmp_path / "out", "--workers", "2") == 0
    said = _said(capsys.readouterr().err, "--workers 2")
    assert said == ["albertlm data: warning: --workers 2 is more than the 1 CPU core(s) this process may use; "
                    "using 1 (the output is the same for any number of workers)"], said


# -- data/corpus.py: a file given twice; text files beside Parquet ----------------------------------------------
def test_a_file_given_twice_is_said_in_the_commands_warning_line(tmp_path, capsys):
    text = alice_documents(tmp_path, 40)
    assert _build([text, text], tmp_path / "out", "--workers", "1") == 0
    said = _said(capsys.readouterr().err, "given more than once")
    assert len(said) == 1 and said[0].startswith("albertlm data: warning: 1 input file(s) given more than once"), said


def test_text_beside_parquet_is_said_in_the_commands_warning_line(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "hub"
    folder.mkdir()
    lines = alice_documents(tmp_path, 40).read_text(encoding="utf-8").split("\n\n")
    pq.write_table(pa.table({"text": lines}), folder / "train.parquet")
    (folder / "notes.txt").write_text("not read\n", encoding="utf-8")
    assert _build([folder], tmp_path / "out", "--workers", "1") == 0
    said = _said(capsys.readouterr().err, "holds Parquet/Arrow files")
    assert len(said) == 1 and said[0].startswith(f"albertlm data: warning: {folder} holds Parquet"), said


# -- cli/tokenizer_commands.py: train's two warnings, and a load's UserWarning -------------------------------------
def test_tokenizer_train_smaller_than_asked_names_the_command(tmp_path, capsys):
    text = alice_documents(tmp_path, 60)
    assert main(["tokenizer", "train", "--input", str(text), "--out", str(tmp_path / "wp"), "--vocab-size", "20000",
                 "--kind", "wordpiece"]) == 0
    said = _said(capsys.readouterr().err, "fewer than --vocab-size")
    assert len(said) == 1 and said[0].startswith("albertlm tokenizer: warning: the input gave only "), said


def test_tokenizer_train_bpe_warning_names_the_command(tmp_path, capsys):
    text = alice_documents(tmp_path, 200)
    assert _train("--input", str(text), "--out", str(tmp_path / "bpe"), "--vocab-size", "300",
                  "--model-type", "bpe") == 0
    said = _said(capsys.readouterr().err, "reads every spiece.model as a unigram model")
    assert len(said) == 1 and said[0].startswith("albertlm tokenizer: warning: transformers 5's"), said


def test_tokenizer_encodes_load_warning_names_the_command(tmp_path, monkeypatch, capsys):
    vocab = _korean_vocab(tmp_path / "tok")
    _stdin(monkeypatch, "가나\n")
    assert main(["tokenizer", "encode", "-t", str(vocab.parent)]) == 0
    said = _said(capsys.readouterr().err, "Hangul")
    assert len(said) == 1 and said[0].startswith("albertlm tokenizer: warning: "), said


# -- training/precision.py: bf16 emulated on this CPU -------------------------------------------------------------
def test_emulated_bf16_warning_names_the_command_that_runs(monkeypatch, capsys):
    from albertlm.errors import program_named
    from albertlm.training import precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    with program_named("albertlm predict"):     # as `cli.main` runs `predict`
        precision.warn_emulated_bf16("bf16", "cpu")
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith("albertlm predict: warning: "), said
    assert said[0].endswith("--precision bf16 runs emulated and is slower than fp32 here"), said


# -- experiments/report.py: a result the report leaves out ------------------------------------------------------
def test_the_reports_left_out_line_names_the_caller_not_a_fixed_ablate(tmp_path):
    from albertlm.errors import program_named
    from albertlm.experiments.report import write_report
    from test_ablate_audit16 import _finished, _suite

    suite = _suite(tmp_path)
    _finished(suite)
    cut = suite.out / "runs" / "E128-all-nsp-s1" / "result.json"
    cut.write_text(cut.read_text()[:60])
    said: list[str] = []
    write_report(suite.out, said.append)                          # from Python: no command runs
    assert len(said) == 1 and said[0].startswith(f"albertlm: warning: {cut}: left out of the report"), said
    with program_named("albertlm ablate"):                        # as `albertlm ablate --report-only` runs it
        write_report(suite.out, said.append)
    assert len(said) == 2 and said[1].startswith(f"albertlm ablate: warning: {cut}: left out"), said
