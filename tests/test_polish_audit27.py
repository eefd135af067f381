"""Polish audit 27: small CLI defects a new user meets.

`finetune classify` without --train ended in a TypeError traceback (`os.fspath(None)`); `finetune squad --recipe
paper` without --train and `predict squad` without --dev said ": which SQuAD version? no file to read" (an empty
file name first). The long-warmup line of `pretrain` began with a bare `warning:` where every other warning is
`albertlm pretrain: warning: ...`. `tokenizer train` printed its options as a Python repr
(`SentencePieceOptions(do_lower_case=False, ...)`), where `tokenizer info` prints `do_lower_case=false ...`. A bad
choice of a config option named the field, not the flag typed, and offered no nearest (`--precision bf61`; data
build's `--sentence-task spo` said `sentence_task must be one of ('sop', 'nsp', 'none')`). `--task rtee` listed the
GLUE tasks without the near one. A `.toml` grid on Python 3.10 (no tomllib) was "not valid TOML: No module named
'tomllib'"."""
from __future__ import annotations

import json
import sys

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import alice_documents, assert_one_error, save_tiny_pretrained


@pytest.fixture
def model(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    return save_tiny_pretrained(out)


# -- 1. a family's missing input is one line ------------------------------------------------------------------
@pytest.mark.parametrize("argv, phrases", [
    (["finetune", "classify"], ("classify fine-tuning needs --train FILE",)),
    (["finetune", "classify", "--labels", "a,b"], ("classify fine-tuning needs --train FILE",)),
    (["finetune", "squad", "--recipe", "paper"], ("SQuAD fine-tuning needs --train FILE",)),
    (["predict", "squad"], ("no SQuAD file to read", "--dev FILE")),
    (["evaluate", "squad"], ("no SQuAD file to read", "--dev FILE")),
])
def test_a_familys_missing_input_is_one_line(model, tmp_path, capsys, argv, phrases):
    code = main([*argv, "--model", str(model), "--out", str(tmp_path / "out")])
    assert_one_error(capsys, code, *phrases)
    assert not (tmp_path / "out").exists()


# -- 2. the long-warmup warning in every warning's form -------------------------------------------------------
def test_the_long_warmup_warning_is_in_the_common_form():
    from albertlm.errors import program_named
    from albertlm.training.loop import Plan
    from albertlm.training.pretrain import long_warmup_warning

    plan = Plan(total_steps=10, warmup_steps=3125, eval_every=10, lr=0.00176)
    with program_named("albertlm pretrain"):
        for resumed in (False, True):
            line = long_warmup_warning(plan, resumed)
            assert line.startswith("albertlm pretrain: warning: the warmup (3125 steps)"), line
            assert "\n" not in line
    assert long_warmup_warning(Plan(total_steps=10, warmup_steps=2, eval_every=10, lr=0.00176)) is None


# -- 3. tokenizer train prints its options as tokenizer info does ---------------------------------------------
@pytest.mark.parametrize("kind, shown", [
    ("sentencepiece", "options: do_lower_case=false keep_accents=true remove_space=true"),
    ("wordpiece", "options: do_lower_case=false tokenize_chinese_chars=true strip_accents=false"),
])
def test_tokenizer_train_prints_the_options_as_info_does(tmp_path, capsys, kind, shown):
    text = alice_documents(tmp_path, 300)
    threads = ["--threads", "1"] if kind == "sentencepiece" else []
    assert main(["tokenizer", "train", "--kind", kind, "--input", str(text), "--vocab-size", "200",
                 "--out", str(tmp_path / "tok"), *threads]) == 0
    out = capsys.readouterr().out
    assert shown in out, out
    assert "Options(" not in out and "False" not in out
    assert main(["tokenizer", "info", "-t", str(tmp_path / "tok")]) == 0
    info = capsys.readouterr().out
    assert shown.split(": ", 1)[1] in info, info


# -- 4. a bad choice names the flag typed and the nearest choice ----------------------------------------------
@pytest.mark.parametrize("argv, phrases", [
    (["pretrain", "--out", "unused", "--dry-run", "--precision", "bf61"],
     ("--precision: train.precision='bf61': must be one of fp32, bf16, fp16", "(did you mean bf16?)")),
    (["pretrain", "--out", "unused", "--dry-run", "--train.precision=BF16"],
     ("--train.precision='BF16': must be one of", "(did you mean bf16?)")),
    (["pretrain", "--out", "unused", "--dry-run", "--optim.warmup_style", "gogle"],
     ("--optim.warmup_style='gogle'", "(did you mean google?)")),
    (["data", "build", "--input", "in.txt", "--tokenizer", "t", "--out", "d", "--sentence-task", "spo"],
     ("--sentence-task: sentence_task='spo': must be one of sop, nsp, none", "(did you mean sop?)")),
    (["data", "build", "--input", "in.txt", "--tokenizer", "t", "--out", "d", "--format", "jsnol"],
     ("--format='jsnol'", "(did you mean jsonl?)")),
    (["finetune", "squad", "--model", "m", "--out", "o", "--squad-head", "xlnt"],
     ("--squad-head: squad_head='xlnt': must be one of bert, xlnet", "(did you mean xlnet?)")),
    # a choice "" (not given) leaves the value to the command's own check: SQuAD's names the version to give
    (["evaluate", "squad", "--predictions", "p.json", "--data", "d.json", "--version", "v1.1"],
     ("--version 'v1.1': SQuAD's version is 1.1 or 2.0 (give --version 1.1)",)),
])
def test_a_bad_choice_names_the_flag_and_the_nearest(tmp_path, monkeypatch, capsys, argv, phrases):
    monkeypatch.chdir(tmp_path)
    assert_one_error(capsys, main(argv), *phrases)
    assert not any(tmp_path.iterdir())


def test_a_bad_choice_outside_the_command_line_gets_the_nearest_too(tmp_path, capsys):
    """A config built in Python, or a --config file's value, is named by its field (the file too), with the hint."""
    from albertlm.config import ModelConfig
    from albertlm.config.model import ConfigError

    with pytest.raises(ConfigError, match=r"sharing='atention': must be one of .*\(did you mean attention\?\)"):
        ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                    sharing="atention")
    (tmp_path / "c.json").write_text(json.dumps({"train": {"precision": "bf61"}}))
    code = main(["pretrain", "--out", str(tmp_path / "r"), "--dry-run", "--config", str(tmp_path / "c.json")])
    assert_one_error(capsys, code, "c.json: train.precision='bf61'", "(did you mean bf16?)")


def test_the_nearest_choice():
    from albertlm.config.overrides import nearest_choice

    assert nearest_choice("FP16", ("fp32", "bf16", "fp16")) == "fp16"       # the same letters in other case
    assert nearest_choice("1", ("", "1.1", "2.0")) == "1.1"                  # the one choice it begins
    assert nearest_choice("f", ("fp32", "bf16", "fp16")) is None             # two begin with it: none is near
    assert nearest_choice("zzz", ("sop", "nsp", "none")) is None


# -- 5. a GLUE task name near a task is offered it ------------------------------------------------------------
@pytest.mark.parametrize("given, near", [("rtee", "rte"), ("RTEE", "rte"), ("sst", "sst2"), ("mrcp", "mrpc")])
def test_a_misspelt_glue_task_is_offered_the_nearest(given, near):
    from albertlm.tasks import glue

    with pytest.raises(UserError, match=rf"unknown GLUE task '{given}' \(did you mean {near}\?\); choose from"):
        glue.get_task(given)


def test_finetune_task_rtee_names_rte(model, tmp_path, capsys):
    code = main(["finetune", "glue", "--task", "rtee", "--model", str(model), "--out", str(tmp_path / "out")])
    assert_one_error(capsys, code, "unknown GLUE task 'rtee' (did you mean rte?)")


# -- 6. a TOML grid without a TOML reader -----------------------------------------------------------------------
GRID = 'name = "mine"\n[[variants]]\nname = "a"\nsharing = "all"\n'


def test_a_toml_grid_without_tomllib_says_what_it_needs(tmp_path, monkeypatch):
    """Python 3.10 (pyproject allows it) has no tomllib: simulated by hiding it (None in sys.modules makes the
    import fail), with tomli hidden too; with tomli there, it reads the grid."""
    from albertlm.experiments.grids import read_grid_file

    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    real = pytest.importorskip("tomllib")
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(UserError, match=r"TOML grid and scale files need Python 3\.11\+ \(tomllib\) or the tomli package") as exc:
        read_grid_file(path)
    assert "not valid TOML" not in str(exc.value)
    monkeypatch.setitem(sys.modules, "tomli", real)    # tomli is tomllib's origin: the same API
    grid = read_grid_file(path)
    assert grid.name == "mine" and [v.label for v in grid.variants] == ["a"]
    path.write_text("name = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        read_grid_file(path)
