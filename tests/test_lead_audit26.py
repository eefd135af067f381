"""Lead's fixes of the twenty-sixth session."""
import warnings

import pytest

from albertlm.tokenization.base import MARKED_SHARE
from albertlm.tokenization.sentencepiece import warn_kana_marks_dropped


def test_kana_warning_skips_a_corpus_that_only_quotes_japanese():
    # the ablation suite's English corpus (220,744 sentences, one with a voiced kana) was warned to "train
    # Japanese without it"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_kana_marks_dropped(1, 220_744)
        warn_kana_marks_dropped(0, 220_744, hangul=3)
    with pytest.warns(UserWarning, match=r"voiced kana in 300 of the 220,744 sentences"):
        warn_kana_marks_dropped(300, 220_744)


def test_kana_warning_names_only_the_language_over_the_share():
    read = 10_000
    enough = int(MARKED_SHARE * read) + 1
    with pytest.warns(UserWarning) as caught:
        warn_kana_marks_dropped(1, read, hangul=enough)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "jamo" in message and "kana" not in message and "train Korean without it" in message


def _as_rank(monkeypatch, rank: str) -> None:
    """RANK=`rank`, nothing else of a torchrun launch in the environment (a runner's LOCAL_RANK / WORLD_SIZE would
    silence this process: `errors.reports_here`)."""
    for name in ("LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", rank)


def test_resume_without_a_run_on_another_node_names_the_shared_directory(tmp_path, monkeypatch):
    # a torchrun rank other than 0 (another node, whose --out was its own local folder) was told to "leave out
    # --resume to start a new run there": wrong there; the run is rank 0's
    from albertlm.errors import UserError
    from albertlm.training.checkpoint import check_run_dir

    _as_rank(monkeypatch, "1")
    with pytest.raises(UserError, match=r"on rank 1, which reads .*every node sees") as caught:
        check_run_dir(tmp_path / "run", resume=True, must_exist=True)
    assert "leave out --resume" not in str(caught.value)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(UserError, match=r"leave out --resume to start a new run there"):
        check_run_dir(tmp_path / "run", resume=True, must_exist=True)


def test_a_file_named_with_a_leading_dash_gets_a_hint(tmp_path, monkeypatch, capsys):
    # `data build --input a.txt -b.txt`: argparse reads -b.txt as an option and said only "unrecognized arguments"
    from albertlm.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("one sentence.\n", encoding="utf-8")
    (tmp_path / "-b.txt").write_text("another sentence.\n", encoding="utf-8")
    with pytest.raises(SystemExit) as caught:
        main(["data", "build", "--input", "a.txt", "-b.txt", "--out", "out"])
    assert caught.value.code != 0
    err = capsys.readouterr().err
    assert "unrecognized arguments: -b.txt" in err and "write ./-b.txt" in err
    with pytest.raises(SystemExit):
        main(["data", "build", "--input", "a.txt", "-c.txt", "--out", "out"])
    assert "write ./" not in capsys.readouterr().err   # no such file: the plain line


def test_finetune_resume_without_a_run_on_another_node_names_the_shared_directory(tmp_path, monkeypatch, capsys):
    from albertlm.cli.main import main

    _as_rank(monkeypatch, "1")
    code = main(["finetune", "glue", "--task", "rte", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "run"),
                 "--resume"])
    assert code != 0
    err = capsys.readouterr().err
    assert "no run to resume" in err and "on rank 1" in err and "every node sees" in err


def test_torchrun_ranks_do_not_compare_the_recorded_tokenizer_path():
    # the CLI records the tokenizer's absolute path in spec.info; nodes reaching the same files by other paths
    # were refused as differing in "the task's labels"
    from types import SimpleNamespace

    from albertlm.tasks.finetune import FinetuneConfig, finetune_identity

    def spec(path):
        return SimpleNamespace(family="glue", train=[1, 2], info={"labels": ["a", "b"], "tokenizer": path})

    cfg = FinetuneConfig()
    assert finetune_identity(spec("/node0/spm.model"), cfg) == finetune_identity(spec("/node1/spm.model"), cfg)
    other = SimpleNamespace(family="glue", train=[1, 2], info={"labels": ["b", "a"], "tokenizer": "/x"})
    assert finetune_identity(other, cfg) != finetune_identity(spec("/x"), cfg)


def test_a_silent_rank_does_not_leave_warnings_off_for_its_caller(tmp_path, monkeypatch):
    # main() on a torchrun rank that does not report set warnings.simplefilter("ignore") and the albertlm logger
    # to ERROR for the rest of the process (an in-process caller, a test worker)
    import logging

    from albertlm.cli.main import main

    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    level, filters = logging.getLogger("albertlm").level, list(warnings.filters)
    main(["info", str(tmp_path / "missing")])
    assert logging.getLogger("albertlm").level == level
    assert warnings.filters == filters
