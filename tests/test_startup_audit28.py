"""Audit 28, CLI start-up: commands that need no model load no torch (scoring a predictions file imported it
through tasks.registry -> tasks.specs, ~2 s), a flag's value of the wrong type is named by the flag typed, and
a required option missing because its name was misspelt names the misspelling."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from albertlm.cli.main import main
from conftest import assert_one_error, shared_path
from test_flakes_audit17 import _env   # os.environ without a launch's variables (they would silence the child)

# runs each argv (a JSON list of lists) through main() in one process, printing per command its exit code and
# whether torch is imported by then (once imported it stays: a command that loads it shows at its own line)
CHILD = """
import contextlib, io, json, sys
from albertlm.cli.main import main
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(argv)
    except SystemExit as stop:
        code = stop.code
    print(json.dumps([argv[:2], code, 'torch' in sys.modules, out.getvalue()[-300:]]))
"""


def _torch_loaded_by(commands: list[list[str]], stdin: str = "") -> list[list]:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(commands)], input=stdin, capture_output=True,
                          text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_scoring_a_predictions_file_loads_no_torch(tmp_path):
    """`evaluate <family> --predictions FILE` runs no model: tasks.specs imported torch, the heads and the fine-tuning
    driver at module level, and tasks.registry (the scorers' table) imports tasks.specs."""
    sst2 = shared_path("glue", "SST-2", "dev.tsv")
    squad = shared_path("squad", "dev-v2.0-small.json")
    rows = len(sst2.read_text(encoding="utf-8").splitlines()) - 1
    glue_preds = tmp_path / "dev_predictions.tsv"
    glue_preds.write_text("index\tprediction\n" + "".join(f"{i}\t1\n" for i in range(rows)), encoding="utf-8")
    gold = json.loads(squad.read_text(encoding="utf-8"))
    squad_preds = tmp_path / "predictions.json"
    squad_preds.write_text(json.dumps({q["id"]: "" for a in gold["data"] for p in a["paragraphs"] for q in p["qas"]}))
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\ngood film,pos\nawful plot,neg\n", encoding="utf-8")
    classify_preds = tmp_path / "classify_predictions.tsv"
    classify_preds.write_text("id\tprediction\n0\tpos\n1\tpos\n", encoding="utf-8")
    results = _torch_loaded_by([
        ["evaluate", "glue", "--task", "sst2", "--dev", str(sst2), "--predictions", str(glue_preds)],
        ["evaluate", "squad", "--data", str(squad), "--predictions", str(squad_preds)],
        ["evaluate", "classify", "--data", str(dev), "--predictions", str(classify_preds)],
    ])
    assert [(code, torch) for _, code, torch, _ in results] == [(0, False)] * 3, results
    assert '"accuracy"' in results[0][3] and '"exact"' in results[1][3] and '"accuracy"' in results[2][3]


def test_help_version_tokenizer_and_data_commands_load_no_torch(tmp_path):
    """A guard (these were torch-free before this audit): --version, every command's --help, and the tokenizer and
    data commands, which need no model."""
    from albertlm.cli.main import COMMANDS

    spm = shared_path("spm", "albert-base-v2_spiece.model")
    text = tmp_path / "a.txt"
    text.write_text(shared_path("text", "gutenberg", "carroll-alice.txt").read_text()[:20_000], encoding="utf-8")
    data = tmp_path / "data"
    commands = [["--version"], ["--help"], *([name, "--help"] for name in COMMANDS),
                ["finetune", "glue", "--help"], ["evaluate", "squad", "--help"], ["data", "build", "--help"],
                ["tokenizer", "info", "--tokenizer", str(spm)],
                ["tokenizer", "encode", "--tokenizer", str(spm)],    # reads stdin
                ["tokenizer", "train", "--input", str(text), "--out", str(tmp_path / "tok"), "--vocab-size", "300"],
                ["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(data),
                 "--max-seq-length", "64", "--no-progress"],
                ["data", "stats", str(data)], ["data", "inspect", str(data)]]
    results = _torch_loaded_by(commands, stdin="A rabbit-hole.\n")
    assert len(results) == len(commands)
    assert [(argv, code, torch) for argv, code, torch, _ in results if code != 0 or torch] == [], results


@pytest.mark.parametrize("argv, flag, value, kind", [
    (["pretrain", "--max-steps", "1.5"], "--max-steps/--train.max_steps", "'1.5'", "int (a whole number)"),
    (["pretrain", "--train.max_steps", "1.5"], "--train.max_steps/--max-steps", "'1.5'", "int (a whole number)"),
    (["pretrain", "--optim.lr", "abc"], "--optim.lr/--lr", "'abc'", "float (a number)"),
    (["pretrain", "--model.hidden_size", "x"], "--model.hidden_size:", "'x'", "int (a whole number)"),
    (["pretrain", "--train.progress", "maybe"], "--train.progress:", "'maybe'", "bool (1, true, yes, on or 0,"),
    (["finetune", "glue", "--task", "sst2", "--model", "M", "--lr", "abc"], "--lr/--optim.lr", "'abc'", "float"),
    (["finetune", "squad", "--model", "M", "--doc-stride", "x"], "--doc-stride:", "'x'", "int (a whole number)"),
    (["ablate", "--max-steps", "x"], "--max-steps:", "'x'", "int (a whole number)"),
    (["ablate", "--seeds", "1", "2.5"], "--seeds:", "'2.5'", "int (a whole number)"),
    (["params", "--embedding-size", "x"], "--embedding-size:", "'x'", "int (a whole number)"),
    (["data", "build", "--input", "A", "--tokenizer", "T", "--max-seq-length", "1e3"], "--max-seq-length:", "'1e3'",
     "int (a whole number)"),
    (["evaluate", "squad", "--data", "A", "--predictions", "B", "--na-prob-thresh", "x"], "--na-prob-thresh:", "'x'",
     "float (a number)"),
    (["evaluate", "RUN", "--data", "D", "--batch-size", "x"], "--batch-size:", "'x'", "int (a whole number)"),
])
def test_a_value_of_the_wrong_type_is_named_by_the_flag_typed(argv, flag, value, kind, tmp_path, capsys):
    """Each said the dataclass field (`train.max_steps: cannot read '1.5' as int`, `max_seq_length: ...`), not the
    flag; now the flag as typed first, the key's other spelling after it, the value and the type: one line, exit 2,
    nothing made."""
    out = tmp_path / "out"
    if argv[0] in ("pretrain", "finetune", "data", "ablate"):
        argv = [*argv, "--out", str(out)]
    code = main(argv)
    assert_one_error(capsys, code, flag, f"cannot read {value} as {kind}")
    assert not out.exists()


@pytest.mark.parametrize("argv, typed, meant", [
    (["pretrain", "--data", "D", "--output-dir", "RUN"], "--output-dir", "--out"),   # transformers' name
    (["pretrain", "--data", "D", "--ouput", "RUN"], "--ouput", "--out"),
    (["pretrain", "--data", "D", "--OUT", "RUN"], "--OUT", "--out"),
    (["data", "build", "--input", "A", "--out", "O", "--tokenzer", "T"], "--tokenzer", "--tokenizer"),
    (["predict", "glue", "--task", "sst2", "--out", "O", "--modle", "M"], "--modle", "--model"),
])
def test_a_misspelt_required_option_is_named(argv, typed, meant, capsys):
    """argparse checks the required options before the unknown ones: `--output-dir RUN` was told only "the following
    arguments are required: --out", the misspelling not named."""
    assert_one_error(capsys, _code(argv), "the following arguments are required", f"{typed} is no option here",
                     f"did you mean {meant}?")


def test_an_option_in_other_case_is_offered_its_spelling(capsys):
    """`--LR 1` was offered nothing (difflib compares case: 'LR' is nothing like 'lr')."""
    assert_one_error(capsys, _code(["pretrain", "--out", "RUN", "--data", "D", "--LR", "1"]),
                     "unrecognized arguments: --LR 1", "did you mean --lr?")


@pytest.mark.parametrize("argv", [
    ["pretrain", "--out", "RUN", "--data", "D", "--max-step", "5"],
    ["finetune", "glue", "--task", "sst2", "--model", "M", "--out", "O", "--max-ste", "5"],
    ["data", "build", "--input", "A", "--tokenizer", "T", "--out", "O", "--max-seq", "8"]])
def test_an_abbreviated_option_is_refused_not_taken(argv, capsys):
    """A guard (allow_abbrev is off in every parser and subparser): `--max-step 5` is not silently --max-steps."""
    assert_one_error(capsys, _code(argv), "unrecognized arguments", "did you mean")


def _code(argv) -> int:
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code
