"""Session-23 audit of mistyped command lines (`albertlm <command> ...` with bad values, huge values, empty paths,
unknown options): each is one line, exit 2, no traceback, nothing written.

Found: `--epochs 1e308` (finite, so the config took it) overflowed when the run counted its steps (an OverflowError
traceback after the model was built, pretrain and finetune); `--dist.timeout_minutes 99999999999999` overflowed
datetime.timedelta where the process group forms; `--lr -inf` / `-nan` were read by argparse as an unknown
option ("expected one argument"); `--out ""` (a script's unset `--out "$OUT"`) wrote a run, a tokenizer or
prediction files into the current directory; a model or batch too big for memory was a traceback of torch's
allocator; an unknown option was offered another subcommand's option or --help (`predict classify --lr` ->
"did you mean --help?", `data build --jobs` -> stats' --json)."""
from __future__ import annotations

import datetime

import pytest

from albertlm.cli.main import main
from albertlm.config.model import ConfigError
from albertlm.config.run import DistConfig, TrainConfig
from conftest import assert_one_error, shared_path
from train_fixtures import alice_sop_data

TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "4",
        "--train.progress=false", "--train.tensorboard=false"]


def _exit_code(argv) -> int:
    """main's return, or the code of argparse's SystemExit (a usage error exits from the parser)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------------------------------- step counts
def test_epochs_past_a_step_counter_are_a_config_error():
    train = TrainConfig(max_steps=0, epochs=1e308)        # finite: the config takes it, the step count cannot
    with pytest.raises(ConfigError, match=r"train.epochs=1e\+308: .* more steps than a run can count"):
        train.total_steps(10)
    assert TrainConfig(max_steps=0, epochs=2.5).total_steps(10) == 25
    assert TrainConfig(max_steps=0, epochs=1e-300).total_steps(10) == 1
    assert TrainConfig(max_steps=7, epochs=1e308).total_steps(10) == 7


def test_pretrain_with_epochs_past_a_step_counter_is_one_line_and_writes_nothing(tmp_path, capsys):
    data = alice_sop_data(tmp_path, lines=60)
    capsys.readouterr()
    out = tmp_path / "run"
    code = main(["pretrain", "--data", str(data), "--out", str(out), *TINY, "--train.epochs", "1e308"])
    assert_one_error(capsys, code, "train.epochs=1e+308", "more steps than a run can count")
    assert not out.exists()


# ---------------------------------------------------------------------------------------- dist timeout
def test_a_timeout_past_what_timedelta_holds_is_refused_when_read():
    with pytest.raises(ConfigError, match="dist.timeout_minutes=99999999999999: must be in"):
        DistConfig(timeout_minutes=99999999999999)
    from albertlm.config.run import TIMEOUT_MINUTES_LIMIT

    assert DistConfig(timeout_minutes=TIMEOUT_MINUTES_LIMIT).timeout_minutes == TIMEOUT_MINUTES_LIMIT
    datetime.timedelta(minutes=TIMEOUT_MINUTES_LIMIT)     # what init_process_group is given: no OverflowError


# ---------------------------------------------------------------------------------------- -inf and -nan
@pytest.mark.parametrize("value, shown", [("-inf", "-inf"), ("-Infinity", "-inf"), ("-nan", "nan")])
def test_negative_infinity_and_nan_reach_the_config_check(value, shown, capsys):
    code = _exit_code(["pretrain", "--out", "unused", "--dry-run", "--lr", value])
    assert_one_error(capsys, code, f"optim.lr={shown}: must be a finite number")


# ------------------------------------------------------------------------------------------- --out ""
@pytest.mark.parametrize("argv", [
    ["pretrain", "--dry-run", "--out", ""],
    ["pretrain", "--dry-run", "--out= "],
    ["tokenizer", "train", "--input", "TEXT", "--vocab-size", "400", "--out", ""],
    ["predict", "classify", "--model", "m", "--test", "t.tsv", "--out", ""],
    ["embed", "m", "--input", "TEXT", "--out", ""],
])
def test_an_empty_out_is_refused_not_read_as_the_current_directory(argv, tmp_path, monkeypatch, capsys):
    text = str(shared_path("text", "gutenberg", "carroll-alice.txt"))
    monkeypatch.chdir(tmp_path)
    code = _exit_code([text if word == "TEXT" else word for word in argv])
    assert_one_error(capsys, code, "argument --out:", "is empty")
    assert list(tmp_path.iterdir()) == []                 # nothing written where the command was run


# --------------------------------------------------------------------------------------- out of memory
@pytest.mark.parametrize("error, phrase", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                  "tried to allocate 12800000000000 bytes. Error code 12 (Cannot allocate memory)"),
     "out of memory: 12.8 TB asked of the allocator at once"),
    (MemoryError(), "out of memory; a smaller model"),
])
def test_out_of_memory_is_one_line(error, phrase, monkeypatch, capsys):
    """`pretrain --model.vocab_size 100000000000` was a traceback of torch's allocator (faked here: a real
    allocation that size may be granted lazily on an overcommitting machine)."""
    from albertlm.cli import model_commands

    def run(args, command):
        raise error

    monkeypatch.setattr(model_commands, "run", run)
    assert_one_error(capsys, main(["params"]), phrase, "--batch-size")


def test_another_runtime_error_is_still_raised(monkeypatch):
    from albertlm.cli import model_commands

    def run(args, command):
        raise RuntimeError("a bug")

    monkeypatch.setattr(model_commands, "run", run)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["params"])


# ----------------------------------------------------------------------------------------- suggestions
@pytest.mark.parametrize("argv, meant", [
    (["predict", "classify", "--model", "m", "--out", "o", "--lr", "1"], None),              # was --help
    (["data", "build", "--input", "x", "--tokenizer", "t", "--out", "o", "--jobs", "2"], None),   # was --json
    (["tokenizer", "train", "--input", "x", "--out", "o", "--workers", "2"], None),         # was --tokenizer
    (["pretrain", "--out", "o", "--gpu"], None),                                            # was --out
    (["finetune", "classify", "--model", "m", "--out", "o", "--max_length", "16"], "--max-seq-length"),
    (["embed", "m", "--input", "x", "--out", "o.npy", "--normalise"], "--normalize"),
    (["pretrain", "--out", "o", "--log", "1"], "--log-every"),                              # was --lr
])
def test_an_unknown_option_is_matched_against_the_command_given(argv, meant, capsys):
    code = _exit_code(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "unrecognized arguments" in err, err
    if meant is None:
        assert "did you mean" not in err, err
    else:
        assert err.endswith(f"(did you mean {meant}?)"), err
