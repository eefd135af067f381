"""Docs audit 26: README.md and docs/{finetuning,training,model,validation,tokenization}.md against what the
twenty-sixth session made the code do. The SQuAD options the pages give `predict` / `evaluate` / `finetune`
(`--squad-head`, `--null-threshold`) and `embed`'s (`--format`, `--text-field`) are those commands' options, and the
refusals the pages list are the code's; validation.md has a row naming each input check this session added (SQuAD
head / threshold refusals, a step's tokenizer, the torchrun resume checks, convert/export's one-step move, the
misread UTF-16 corpus, embed's input and text checks, the '-b.txt' hint), every one of them a real function;
training.md's multi-node quotes are the messages; tokenization.md's kana share is `base.MARKED_SHARE`; README's
`embed ... --out emb.parquet` line runs on a tiny model and writes what its comment says; the module-qualified
names finetuning.md cites exist (test_docs_audit24 reads the other pages). Function calls, one tiny embedding:
a few seconds, CPU-only."""
from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import pytest

import test_docs_audit14 as audit14
import test_docs_audit24 as audit24
from albertlm.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _flat(doc: str) -> str:
    """The page's text with every run of whitespace one space (sentences wrap across lines)."""
    return re.sub(r"\s+", " ", (ROOT / doc).read_text(encoding="utf-8"))


def _options(command: str, sub: str | None) -> set[str]:
    parser = audit14._parser(command, [sub] if sub else [])
    if sub:
        parser = audit14._subparsers(parser)[sub]
    return audit14._options(parser)


# ------------------------------------------------------------------ options the pages give to a command
# (page, a phrase of it that gives the option to the command, command, subcommand, option)
_CLAIMS = [
    ("docs/finetuning.md", "**`--null-threshold X|recorded`** (`predict` and `evaluate --model`", "predict", "squad",
     "--null-threshold"),
    ("docs/finetuning.md", "**`--null-threshold X|recorded`** (`predict` and `evaluate --model`", "evaluate", "squad",
     "--null-threshold"),
    ("docs/finetuning.md", "`finetune` takes a number for a `--dev` file without answers", "finetune", "squad",
     "--null-threshold"),
    ("docs/finetuning.md", "`evaluate --model` use the head the checkpoint holds", "predict", "squad", "--squad-head"),
    ("docs/finetuning.md", "`evaluate --model` use the head the checkpoint holds", "evaluate", "squad",
     "--squad-head"),
    ("docs/finetuning.md", "with `evaluate --predictions` (there `--na-probs` and `--na-prob-thresh`", "evaluate",
     "squad", "--na-prob-thresh"),
    ("README.md", "albertlm embed runs/base --input train.parquet --text-field sentence", "embed", None,
     "--text-field"),
    ("docs/validation.md", "stdin takes neither it nor a `--format` other than lines", "embed", None, "--format"),
]


@pytest.mark.parametrize("doc, phrase, command, sub, flag", _CLAIMS)
def test_the_options_the_pages_give_a_command_are_its_options(doc, phrase, command, sub, flag):
    assert phrase in _flat(doc), (doc, phrase)
    assert flag in _options(command, sub), (command, sub, flag)


def test_squad_head_choices_are_the_heads_the_pages_name():
    """finetuning.md: `--squad-head bert` (BERT's, AlbertForQuestionAnswering) or `xlnet` (AlbertForSquadV2), the
    same choices on finetune, predict and evaluate."""
    from albertlm.cli.task_commands import SQUAD_HEAD_CLASSES

    assert SQUAD_HEAD_CLASSES == {"bert": "AlbertForQuestionAnswering", "xlnet": "AlbertForSquadV2"}
    for command in ("finetune", "predict", "evaluate"):
        parser = audit14._subparsers(audit14._parser(command, ["squad"]))["squad"]
        action = next(a for a in parser._actions if "--squad-head" in a.option_strings)
        shown = action.choices or action.metavar.strip("{}").split(",")   # finetune's: a config field's metavar
        assert set(shown) == set(SQUAD_HEAD_CLASSES), command
    text = _flat("docs/finetuning.md")
    assert "`--squad-head xlnet` trains google-research's `run_squad_v2.py` head (`heads.AlbertForSquadV2`" in text


# ------------------------------------------------------------------ the refusals the pages list
def test_the_null_threshold_and_squad_head_refusals_finetuning_and_validation_md_list():
    from albertlm.tasks import specs
    from albertlm.tasks.registry import _null_threshold

    refused = {
        "not a number": lambda: _null_threshold("high", None, False, {}, "2.0"),
        "not finite": lambda: _null_threshold("inf", None, False, {}, "2.0"),
        "recorded with none recorded": lambda: _null_threshold("recorded", None, False, {}, "2.0"),
        "recorded to finetune": lambda: _null_threshold("recorded", None, True, {}, "2.0"),
        "v1.1": lambda: _null_threshold("0.5", None, False, {}, "1.1"),
        "another on --resume": lambda: _null_threshold("2", None, True, {"given_null_threshold": 1.0}, "2.0"),
        "finetune on a labelled --dev": lambda: specs._check_applied_threshold(0.5, "2.0", True, True),
        "xlnet with v1.1": lambda: specs._check_squad_head("xlnet", "1.1", True),
    }
    messages = {}
    for case, call in refused.items():
        with pytest.raises(UserError) as caught:
            call()
        messages[case] = str(caught.value)
    # finetuning.md: "refused in one line naming `predict --null-threshold`"; "`recorded` ... refused in one line
    # for a model that records none"; kept by --resume (another is refused)
    assert "predict squad --null-threshold" in messages["finetune on a labelled --dev"]
    assert "records no tuned null threshold" in messages["recorded with none recorded"]
    assert messages["another on --resume"].startswith("--resume: the run was started with --null-threshold 1")
    # what is not refused: a number on an unlabelled --dev, the recorded one given to predict, the run's own one
    assert specs._check_applied_threshold(0.5, "2.0", True, False) is None
    assert _null_threshold("recorded", -1.5, False, {}, "2.0") == -1.5
    assert _null_threshold("", None, True, {"given_null_threshold": 1.0}, "2.0") == 1.0
    text = _flat("docs/validation.md")
    for phrase in ("`--null-threshold` not a finite number or `recorded`", "any with v1.1",
                   "with `finetune` on a labelled `--dev`", "on `--resume` another than the run started with",
                   "a `--squad-head` other than the head the checkpoint holds"):
        assert phrase in text, phrase


def test_a_squad_head_other_than_the_checkpoints_is_refused_naming_it(tmp_path):
    """finetuning.md: given to predict / evaluate, `--squad-head` may only name the head the checkpoint holds
    (another is refused in one line naming that head)."""
    import argparse

    from albertlm.cli.task_commands import CHECKED_SQUAD_HEAD, _check_given_squad_head
    from test_squadj_audit26 import _save_squad_model

    model = _save_squad_model(tmp_path / "m", "AlbertForQuestionAnswering")
    args = argparse.Namespace(command="predict", **{CHECKED_SQUAD_HEAD: "xlnet"})
    with pytest.raises(UserError, match=r"holds the bert SQuAD head \(AlbertForQuestionAnswering\)"):
        _check_given_squad_head(args, model)
    _check_given_squad_head(argparse.Namespace(command="predict", **{CHECKED_SQUAD_HEAD: "bert"}), model)


# ------------------------------------------------------------------ validation.md: a row for each new check
# (a phrase of the row, the function its 'where' cell names for it)
_NEW_ROWS = [
    ("SQuAD head / `--null-threshold`", "cli.task_commands._check_given_squad_head"),
    ("SQuAD head / `--null-threshold`", "tasks.registry._null_threshold"),
    ("SQuAD head / `--null-threshold`", "tasks.specs._check_applied_threshold"),
    ("`nbest_predictions.json` or `null_odds.json` given as `--predictions`", "tasks.squad._which_file"),
    ("a `--tokenizer` other than the one the run recorded is refused", "cli.task_commands._check_resumed_tokenizer"),
    ("takes the tokenizer the run recorded (another `--tokenizer` refused", "cli.task_commands._tokenizer"),
    ("every rank continues from the same checkpoint", "tasks.finetune.check_same_finetune"),
    ("every rank continues from the same checkpoint", "training.pretrain.check_same_run"),
    ("on a torchrun rank other than 0 the line says `--out` must be one directory every node sees",
     "training.checkpoint.no_run_advice"),
    ("`convert DST`", "cli.convert_commands.swap_into_place"),
    ("an error, Ctrl-C or SIGTERM during the move leaves the earlier files whole", "cli.export_commands._install"),
    ("a signal acted on once the move is done", "cli.convert_commands._stops_held"),
    ("a Latin-1 file beginning \"ÿþ\"", "data.corpus.misread_wide"),
    ("text UTF-8 cannot hold: a lone surrogate", "cli.infer_commands._encodable"),
    ("the `--input` file itself refused", "cli.infer_commands._embed"),
    ("stdin takes neither it nor a `--format` other than lines", "cli.infer_commands.check_input_options"),
    ("gets the hint to write `./-b.txt`", "cli.main.Parser.error"),
]


@pytest.mark.parametrize("phrase, where", _NEW_ROWS)
def test_validation_md_has_a_row_for_each_check_this_session_added(phrase, where):
    rows = [line for line in (ROOT / "docs/validation.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and phrase in line]
    assert rows, phrase
    module, _, name = where.rpartition(".")
    short = name if "." not in module or module.split(".")[-1][:1].islower() else f"{module.split('.')[-1]}.{name}"
    assert any(f"`{where}`" in row or f"`{short}`" in row or f"`{name}`" in row for row in rows), (phrase, where)
    assert audit14._resolve(where) is not None, where


def test_the_misread_utf16_corpus_is_refused_and_real_utf16_read(tmp_path):
    """validation.md / tokenization.md: a file starting with a UTF-16 byte order mark that does not read as UTF-16
    (Latin-1 text beginning 'ÿþ') is refused naming the bytes; real UTF-16 is read."""
    from albertlm.data import corpus

    misread = tmp_path / "latin1.txt"
    misread.write_bytes(b"\xff\xfe" + ("Un caf\xe9 tr\xe8s bon. " * 200).encode("latin-1"))
    real = tmp_path / "utf16.txt"
    real.write_bytes("Un café très bon.\n".encode("utf-16") * 1)
    with pytest.raises(UserError, match="starts with FF FE, the byte order mark of UTF-16LE"):
        corpus.check_inputs([misread])
    corpus.check_inputs([real])
    assert "Latin-1 text beginning `ÿþ`, is refused" in _flat("docs/tokenization.md")


def test_the_unrecognized_file_hint_validation_md_quotes(tmp_path, monkeypatch, capsys):
    from albertlm.cli.main import main
    from conftest import assert_one_error

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("one.\n")
    (tmp_path / "-b.txt").write_text("two.\n")
    with pytest.raises(SystemExit) as stopped:
        main(["data", "build", "--input", "a.txt", "-b.txt", "--tokenizer", "t", "--out", "o"])
    assert_one_error(capsys, stopped.value.code, "unrecognized arguments: -b.txt", "write ./-b.txt")


# ------------------------------------------------------------------ training.md's multi-node quotes
def test_training_md_multi_node_quotes_are_the_messages(monkeypatch):
    import inspect

    from albertlm.tasks import finetune
    from albertlm.training import pretrain
    from albertlm.training.checkpoint import no_run_advice
    from albertlm.training.distributed import SHARED_OUT

    text = _flat("docs/training.md")
    quoted = re.search(r"`the checkpoint it resumes from is 'step_\d+' on rank 0, 'step_\d+' on rank 1; \.\.\. "
                       r"(with an --out that every node sees as the same directory \(a shared file system) \.\.\.\)`",
                       text)
    assert quoted, "training.md's quote of the refusal"
    assert SHARED_OUT.startswith(", " + quoted.group(1))
    for function in (pretrain.run_identity, finetune.finetune_identity):
        assert '"the checkpoint it resumes from"' in inspect.getsource(function), function.__name__
    assert "(`no run to resume in RUN`)" in text
    monkeypatch.setenv("RANK", "1")
    assert "must be one directory every node sees" in no_run_advice("RUN")
    monkeypatch.setenv("RANK", "0")
    assert no_run_advice("RUN") == "; leave out --resume to start a new run there"
    assert "the line says instead that `--out` must be one directory every node sees" in _flat("docs/finetuning.md")
    assert "with `--resume`, is a rank continuing from another checkpoint than rank 0's" in _flat("docs/finetuning.md")


# ------------------------------------------------------------------ tokenization.md's kana share
def test_tokenization_md_kana_share_is_marked_share():
    from albertlm.tokenization import base
    from albertlm.tokenization.sentencepiece import warn_kana_marks_dropped

    stated = re.search(r"at least ([\d.]+)% of the corpus \(`base\.MARKED_SHARE`\)", _flat("docs/tokenization.md"))
    assert stated and float(stated.group(1)) / 100 == pytest.approx(base.MARKED_SHARE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_kana_marks_dropped(1, 220_744)                  # one quoted word in an English corpus: not warned
        assert not caught
        warn_kana_marks_dropped(round(base.MARKED_SHARE * 220_744) + 1, 220_744)
    assert len(caught) == 1 and "train Japanese without it" in str(caught[0].message)


# ------------------------------------------------------------------ README's embed line, run
def test_readme_embed_parquet_line_runs_and_writes_what_it_says(tmp_path, monkeypatch, capsys):
    """`albertlm embed runs/base --input train.parquet --text-field sentence --out emb.parquet   # a dataset
    column -> text + float32 embedding columns`, on a tiny model; and --out equal to --input refused (validation)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from albertlm.cli.main import main
    from conftest import assert_one_error, save_tiny_pretrained

    line = next(line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
                if "--out emb.parquet" in line)
    command, comment = line.split("#", 1)
    assert "text + float32 embedding columns" in comment
    words = shlex.split(command)[1:]
    assert words[:2] == ["embed", "runs/base"]
    (tmp_path / "runs" / "base").mkdir(parents=True)
    save_tiny_pretrained(tmp_path / "runs" / "base")
    monkeypatch.chdir(tmp_path)
    sentences = ["the film was good", "a bad plot", ""]
    pq.write_table(pa.table({"sentence": sentences, "label": [1, 0, 1]}), "train.parquet")
    assert main([*words, "--no-progress", "--device", "cpu"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    table = pq.read_table("emb.parquet")
    assert table.column_names == ["text", "embedding"]
    assert table["text"].to_pylist() == sentences
    assert table.schema.field("embedding").type.value_type == pa.float32()
    code = main(["embed", "runs/base", "--input", "train.parquet", "--out", "train.parquet", "--overwrite"])
    assert_one_error(capsys, code, "is the --input file")


# ------------------------------------------------------------------ names finetuning.md cites
def test_module_qualified_names_finetuning_md_cites_exist(monkeypatch):
    """test_docs_audit24 checks `module.name` citations on the other pages; finetuning.md's (`squad.best_threshold`,
    `heads.AlbertForSquadV2`, `model.heads.span_loss`, ...) the same way, and its `albertlm.x.y` ones."""
    monkeypatch.setattr(audit24, "OWN", ["docs/finetuning.md", "docs/training.md"])
    cited = audit24._cited_names(audit24._modules())
    assert len(cited) >= 8

    missing = [f"{where}: {name}" for where, name, owners, attributes in cited
               if not audit24._exists(owners, attributes)]
    assert not missing, "\n".join(missing)
    for doc in ("docs/finetuning.md", "docs/training.md"):
        for name in re.findall(r"`(albertlm(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", (ROOT / doc).read_text()):
            assert audit14._resolve(name) is not None, (doc, name)
