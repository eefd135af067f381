"""Session-20 CLI follow-ups (the lead's own file)."""
from __future__ import annotations

import pytest

from albertlm.cli.main import main


def _exit_code(argv) -> int:
    """main's return, or the code of argparse's SystemExit (a command's --help exits from its parser)."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("argv, first", [(["help"], "usage: albertlm <command>"),
                                         (["help", "pretrain"], "usage: albertlm pretrain"),
                                         (["help", "tokenizer", "train"], "usage: albertlm tokenizer train")])
def test_help_as_a_command_shows_the_help_asked_for(argv, first, capsys):
    """`albertlm help` / `albertlm help pretrain` (as git and pip take them) was "unknown command 'help'", exit 2."""
    assert _exit_code(argv) == 0
    assert capsys.readouterr().out.startswith(first)


def test_help_of_an_unknown_command_is_still_one_line(capsys):
    assert _exit_code(["help", "pretrian"]) == 2
    err = capsys.readouterr().err
    assert "did you mean pretrain?" in err and err.count("\n") == 1
