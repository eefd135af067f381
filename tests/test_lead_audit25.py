"""Lead follow-ups of the twenty-fifth session's audits.

1. SQuAD from the Hub read a sharded split (`validation-00000-of-00002.parquet`) as its one given shard, without a
   word, and refused a refs/convert/parquet split folder (`plain_text/validation/0000.parquet`) as "not a file":
   it now reads every shard of the split from any one (`tables.split_shards`, GLUE's and RACE's finder), in shard
   order, a missing shard named, and the split folder.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.tasks import squad
from albertlm.tasks.tables import DataError
from test_qa_tables_audit24 import SQUAD_SCHEMA, _hub_rows
from test_squadv2_audit25 import v2_run  # noqa: F401  (a fixture: a tiny run with google's v2.0 head)


def _shards(folder, rows, names):
    folder.mkdir(parents=True)
    cut = len(rows) // 2
    for name, part in zip(names, (rows[:cut], rows[cut:])):
        pq.write_table(pa.Table.from_pylist(part, schema=SQUAD_SCHEMA), folder / name)


def test_squad_reads_every_shard_of_a_hub_split_from_any_one(tmp_path):
    rows = _hub_rows()
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=SQUAD_SCHEMA), whole)
    expected = squad.read_squad(whole)
    assert len(expected) == 14
    names = ("validation-00000-of-00002.parquet", "validation-00001-of-00002.parquet")
    _shards(tmp_path / "sharded", rows, names)
    for name in names:   # either shard given: the whole split, in shard order
        assert squad.read_squad(tmp_path / "sharded" / name) == expected, name
    _shards(tmp_path / "converted" / "validation", rows, ("0000.parquet", "0001.parquet"))
    assert squad.read_squad(tmp_path / "converted" / "validation") == expected
    assert squad.read_squad(tmp_path / "converted" / "validation" / "0001.parquet") == expected
    (tmp_path / "sharded" / names[0]).unlink()
    with pytest.raises(DataError, match="validation-00000-of-00002.parquet is not beside it"):
        squad.read_squad(tmp_path / "sharded" / names[1])


# 2. Follow-ups of the corpus reader's UTF-16 / stray-NUL reading (tests/test_encodings_audit25.py): a table with a
#    stray NUL was not named as a table (its NUL test predated the stray-NUL rule), a UTF-16 table neither; the data
#    build's and the tokenizer training's "skipped or changed" lines left out the files converted and the NULs
#    dropped; tokenizer training counted a UTF-16 file's progress in UTF-8 bytes against its stored size.
def _tsv(rows: int = 30) -> str:
    return "sentence\tlabel\n" + "".join(f"The film number {k} was a pleasant surprise for all .\t{k % 2}\n"
                                         for k in range(rows))


def test_a_table_with_a_stray_nul_or_in_utf16_is_still_named_a_table(tmp_path):
    import albertlm.data.build as build_module

    text = _tsv()
    nul = tmp_path / "nul.tsv"
    nul.write_bytes(text.replace("number 3 ", "number 3\x00 ").encode("utf-8"))
    wide = tmp_path / "wide.txt"
    wide.write_bytes(text.encode("utf-16"))   # with its byte order mark
    found = {path: shape for path, shape in build_module.tabular_inputs([nul, wide])}
    assert set(found) == {nul, wide}
    assert found[wide].header == ["sentence", "label"]


def test_build_and_tokenizer_summaries_say_what_was_converted_and_dropped(tmp_path, capsys):
    from albertlm.cli.main import main
    from conftest import shared_path

    text = shared_path("text", "sample_text.txt").read_text(encoding="utf-8")
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_bytes(text.encode("utf-16"))
    (inputs / "b.txt").write_bytes(text.replace("\n", "\x00\n", 1).encode("utf-8"))
    assert main(["data", "build", "--input", str(inputs), "--tokenizer",
                 str(shared_path("spm", "albert-base-v2_spiece.model")), "--out", str(tmp_path / "out"),
                 "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress"]) == 0
    captured = capsys.readouterr()
    line = next(line for line in (captured.out + captured.err).splitlines() if line.startswith("skipped or changed:"))
    assert "transcoded files 1" in line and "nul lines 1" in line, line
    assert main(["tokenizer", "train", "--input", str(inputs), "--vocab-size", "200", "--out",
                 str(tmp_path / "tok")]) == 0
    captured = capsys.readouterr()
    line = next(line for line in (captured.out + captured.err).splitlines() if line.startswith("skipped or changed:"))
    assert "transcoded files 1" in line and "nul lines 1" in line, line


def test_tokenizer_training_counts_a_utf16_files_progress_in_its_stored_bytes(tmp_path):
    from albertlm.cli.tokenizer_commands import _line_reader
    from albertlm.data.corpus import CorpusCounts
    from conftest import shared_path

    path = tmp_path / "a.txt"
    path.write_bytes(shared_path("text", "sample_text.txt").read_text(encoding="utf-8").encode("utf-16"))
    told: list[int] = []
    lines = list(_line_reader("auto", "text", CorpusCounts())(path, told.append))
    assert lines and sum(told) == path.stat().st_size   # (UTF-8 bytes: about half of it)


# 3. `finetune squad --model RUN/best` of a run with google's v2.0 head (or a run_squad_v2.py import), without
#    --squad-head or --recipe, trained a fresh BERT head, the trained one dropped with a "freshly initialised" line
#    only, while `predict` used the checkpoint's head: it now goes on with the checkpoint's head; an explicit
#    --squad-head bert there is said in one warning line.
def test_finetune_from_a_v2_head_checkpoint_keeps_its_head(v2_run, tmp_path, capsys):
    import json

    from albertlm.cli.main import main
    from albertlm.model.registry import saved_class_name

    root, data = v2_run
    common = ["finetune", "squad", "--train", str(data), "--model", str(root / "run"), "--max-seq-length", "40",
              "--doc-stride", "8", "--max-query-length", "12", "--max-steps", "1", "--batch-size", "8",
              "--no-progress", "--device", "cpu"]
    assert main([*common, "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "metrics.json").read_text())["config"]["squad_head"] == "xlnet"
    assert saved_class_name(tmp_path / "again" / "best") == "AlbertForSquadV2"
    assert "freshly initialised" not in capsys.readouterr().err
    assert main([*common, "--out", str(tmp_path / "bert"), "--squad-head", "bert"]) == 0
    err = capsys.readouterr().err
    assert "albertlm finetune: warning:" in err and "holds google's SQuAD v2.0 head" in err
    assert saved_class_name(tmp_path / "bert" / "best") == "AlbertForQuestionAnswering"


# 4. `albertlm info` of a checkpoint whose class has no pooler (SQuAD heads, token classification, masked LM) said
#    "(embeddings + encoder + pooler)" beside the file's count as if the file held one.
def test_info_says_which_classes_keep_no_pooler(tmp_path, capsys, tiny_config):
    from albertlm.cli.main import main
    from albertlm.cli.model_commands import WITHOUT_POOLER
    from albertlm.model.registry import MODEL_CLASSES
    from conftest import save_tiny_pretrained

    cfg = tiny_config
    for name, cls in MODEL_CLASSES.items():
        has_pooler = any(".pooler." in key or key.startswith("pooler.") for key in cls(cfg).state_dict())
        assert (name in WITHOUT_POOLER) == (not has_pooler), name
    from albertlm.model.heads import AlbertForSquadV2

    (tmp_path / "base").mkdir()
    base = save_tiny_pretrained(tmp_path / "base")
    AlbertForSquadV2.from_pretrained(base).save_pretrained(tmp_path / "squad")
    assert main(["info", str(tmp_path / "squad")]) == 0
    assert "AlbertForSquadV2's heads and no pooler:" in capsys.readouterr().out


# 5. SIGUSR1 and SIGHUP became stop signals of the training loop and the ablate suite (tests/test_sigs_audit25.py);
#    a run started with nohup (SIGHUP ignored) would then have stopped when its session closed, the very thing
#    nohup is for: an ignored SIGUSR1 / SIGHUP stays ignored.
def test_a_nohup_run_keeps_ignoring_sighup():
    import signal

    from albertlm.experiments.runner import _suite_stop_signals
    from albertlm.training.loop import stop_on_signals, stop_signals

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signal.SIGHUP not in stop_signals() and signal.SIGHUP not in _suite_stop_signals()
        with stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_IGN, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert signal.SIGHUP in stop_signals() and signal.SIGHUP in _suite_stop_signals()
    finally:
        signal.signal(signal.SIGHUP, before)
