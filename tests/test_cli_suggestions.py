"""An unknown option names the option the user most likely meant: other tools' names for ours
(`--learning-rate`, `--num_train_epochs`, `--dropout`, `--bf16`), a dotted key whose last part is ours
(`--optim.learning_rate`), and a subcommand's own options (`finetune glue --dropout`), besides near spellings."""
from __future__ import annotations

import pytest

from albertlm.cli.main import main


@pytest.mark.parametrize("argv, meant", [
    (["pretrain", "--out", "o", "--learning-rate", "1e-3"], "--lr"),
    (["pretrain", "--out", "o", "--optim.learning_rate=1e-3"], "--lr"),
    (["pretrain", "--out", "o", "--num_train_epochs", "3"], "--train.epochs"),
    (["pretrain", "--out", "o", "--dropout", "0.1"], "--model.hidden_dropout"),
    (["pretrain", "--out", "o", "--num_hidden_layers", "3"], "--model.num_layers"),
    (["pretrain", "--out", "o", "--bf16"], "--precision"),
    (["pretrain", "--out", "o", "--model.hiden_size", "3"], "--model.hidden_size"),
    (["finetune", "glue", "--model", "m", "--out", "o", "--dropout", "0.1"], "--hidden-dropout"),
    (["finetune", "squad", "--model", "m", "--out", "o", "--learning_rate", "0.1"], "--lr"),
])
def test_an_unknown_option_names_the_one_meant(argv, meant, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unrecognized arguments" in err
    assert err.endswith(f"(did you mean {meant}?)")
