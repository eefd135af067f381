"""QA and tables audit 24: the files users have from Hugging Face `datasets`, and torchrun.

1. SQuAD from the Hub (`rajpurkar/squad`, `squad_v2`) as Parquet, Arrow or a `save_to_disk` folder was refused by
   `finetune`, `predict` and `evaluate squad` ("a Parquet file, not text", "not a file"), though JSON lines of the
   same rows read; they are read as `classify` reads them, and the version is detected from them (v2.0 by its
   questions without answers) and said in the fine-tuning's log.
2. A `.tsv` written by pandas or `datasets`' `to_csv(sep="\\t")` keeps CSV quoting: `classify` read it without
   quoting, so `"he said ""hi"" to me"` was the text, quotes and all (a tab inside a field split it); such a file
   is told by its head and read with CSV quoting, while GLUE's own files (bare and unbalanced quotes) read as before.
3. The error for an Arrow file read as text said "a Arrow file" and advised pandas' read_parquet, which fails on
   Arrow; it names the pyarrow reader for the file's kind (an Arrow stream, as save_to_disk writes, or file).
4. `predict` / `evaluate` under torchrun ran the whole prediction on every rank, printing the metrics and writing
   the same files once per process; they are refused in one line from the first rank.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.cli.main import main
from albertlm.tasks import classify, squad
from albertlm.tasks.tables import DataError, read_json, read_records
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_cli_audit12_pretrain import albertlm_log_level  # noqa: F401  (a fixture: the logger level put back)

BIN = Path(sys.executable).parent
ANSWERS = pa.struct([("text", pa.list_(pa.string())), ("answer_start", pa.list_(pa.int32()))])
SQUAD_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("context", pa.string()),
                          ("question", pa.string()), ("answers", ANSWERS)])   # datasets' "squad" / "squad_v2"


def _hub_rows() -> list[dict]:
    """The 14 shared SQuAD v2.0 dev questions as `squad_v2` holds them (6 with empty answer lists)."""
    data = json.loads(shared_path("squad", "sample.json").read_text(encoding="utf-8"))["data"]
    return [{"id": r["id"], "title": "Normans", "context": r["context"], "question": r["question"],
             "answers": r["answers"]} for r in data]


def _exports(root: Path, rows: list[dict], name: str = "dev") -> dict[str, Path]:
    """The rows as the Hub and `datasets` write them: Parquet, an Arrow stream (save_to_disk's .arrow), an Arrow
    IPC file, a save_to_disk folder (state.json and its stream), and JSON lines (which read before)."""
    root.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SQUAD_SCHEMA)
    paths = {"parquet": root / f"{name}.parquet", "stream": root / f"{name}.arrow",
             "ipc": root / f"{name}-file.arrow", "folder": root / f"{name}_saved", "jsonl": root / f"{name}.jsonl"}
    pq.write_table(table, paths["parquet"])
    with pa.OSFile(str(paths["stream"]), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=5)
    with pa.OSFile(str(paths["ipc"]), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    paths["folder"].mkdir()
    (paths["folder"] / "data-00000-of-00001.arrow").write_bytes(paths["stream"].read_bytes())
    (paths["folder"] / "state.json").write_text(json.dumps({"_data_files": [
        {"filename": "data-00000-of-00001.arrow"}], "_split": "validation"}), encoding="utf-8")
    paths["jsonl"].write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return paths


# ---------------------------------------------------------------------------- 1. SQuAD from datasets
def test_squad_reads_the_hubs_parquet_arrow_and_save_to_disk_exports(tmp_path):
    rows = _hub_rows()
    paths = _exports(tmp_path, rows)
    expected = squad.read_squad(paths["jsonl"])
    assert len(expected) == 14 and sum(not e.answers for e in expected) == 6
    unanswerable = next(e.qid for e in expected if not e.answers)
    for kind in ("parquet", "stream", "ipc", "folder"):
        examples = squad.read_squad(paths[kind])
        assert examples == expected, kind
        assert all(e.title == "Normans" for e in examples)
        # no version field, no is_impossible: v2.0 by its questions without answers, and why
        assert squad.detect_version(examples) == ("2.0", f"question {unanswerable} has no answer"), kind
    # `squad` (v1.1): every question answered, as the detection says
    v11 = _exports(tmp_path / "v11", [row for row in rows if row["answers"]["text"]])
    assert squad.detect_version(squad.read_squad(v11["parquet"])) == (
        "1.1", "every question has an answer and none has v2.0's is_impossible field")
    # a Parquet file of other columns names its row (`data[0]` was the JSON layout's place)
    other = tmp_path / "sst2.parquet"
    pq.write_table(pa.table({"sentence": ["good film"], "label": [1]}), other)
    with pytest.raises(DataError, match=r"sst2\.parquet: row 1 has neither 'paragraphs'"):
        squad.read_squad(other)


SHORT = ["--max-seq-length", "48", "--doc-stride", "16", "--max-query-length", "12", "--max-steps", "1",
         "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def squad_data(tmp_path_factory):
    """A tiny pretrained model, the exports of the shared questions, and a tiny model fine-tuned on their JSON lines."""
    root = tmp_path_factory.mktemp("qa_tables24")
    (root / "base").mkdir()
    model = save_tiny_pretrained(root / "base")
    paths = _exports(root / "data", _hub_rows())
    assert main(["finetune", "squad", "--version", "2.0", "--train", str(paths["jsonl"]), "--model", str(model),
                 "--out", str(root / "tuned"), *SHORT]) == 0
    return root, model, paths


def test_finetune_predict_and_evaluate_squad_read_datasets_exports(squad_data, tmp_path, capsys):
    """`finetune squad` without --version on the Hub's Parquet (train) and a save_to_disk folder (dev); `predict`
    on the Arrow file, `evaluate --model` on the Parquet file, `evaluate --predictions` on each as gold."""
    root, model, paths = squad_data
    run = tmp_path / "run"
    capsys.readouterr()
    assert main(["finetune", "squad", "--train", str(paths["parquet"]), "--dev", str(paths["folder"]), "--model",
                 str(model), "--out", str(run), *SHORT]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "SQuAD v2.0: the version the data shows (no --version given)", out[:500]
    assert json.loads((run / "best" / "task.json").read_text())["version"] == "2.0"
    predictions = json.loads((run / "predictions.json").read_text(encoding="utf-8"))
    assert set(predictions) == {row["id"] for row in _hub_rows()}
    # predict on the Arrow file: the run's answers; evaluate --model on the Parquet file: the run's dev metrics
    assert main(["predict", "squad", "--model", str(run), "--dev", str(paths["stream"]), "--out",
                 str(tmp_path / "predicted"), "--no-progress", "--device", "cpu"]) == 0
    assert json.loads((tmp_path / "predicted" / "predictions.json").read_text(encoding="utf-8")) == predictions
    capsys.readouterr()
    assert main(["evaluate", "squad", "--model", str(run), "--dev", str(paths["parquet"]), "--no-progress",
                 "--device", "cpu"]) == 0
    dev = json.loads((run / "metrics.json").read_text())["best"]["dev"]
    assert json.loads(capsys.readouterr().out)["dev"]["best_f1"] == pytest.approx(dev["best_f1"])
    # the gold file of `evaluate --predictions`: each export scores as its JSON lines do
    scored = []
    for kind in ("jsonl", "parquet", "ipc", "folder"):
        assert main(["evaluate", "squad", "--data", str(paths[kind]), "--predictions", str(run / "predictions.json"),
                     "--na-probs", str(run / "null_odds.json")]) == 0
        scored.append(json.loads(capsys.readouterr().out))
    assert scored[0]["HasAns_total"] == 8 and all(metrics == scored[0] for metrics in scored)


@pytest.mark.skipif(not (BIN / "torchrun").is_file(), reason="torchrun is not installed")
def test_predict_under_torchrun_is_refused_in_one_line(squad_data, tmp_path):
    """Two processes (torchrun, CPU): each ran the whole prediction, printed the metrics and wrote the files."""
    root, _, paths = squad_data
    # TMPDIR: torchrun leaves a torchelastic_* folder of its workers' logs in the temporary directory, one a run
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"))
    out = tmp_path / "predicted"
    proc = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "albertlm",
                           "predict", "squad", "--model", str(root / "tuned"), "--dev",
                           str(paths["jsonl"]), "--out", str(out), "--no-progress", "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode != 0 and proc.stdout == "", proc.stdout[-2000:]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("albertlm predict")]
    assert len(ours) == 1 and "run predict in one process, without torchrun (WORLD_SIZE=2" in ours[0], proc.stderr
    assert not out.exists()


def test_evaluate_under_torchrun_is_said_by_the_first_rank_only(tmp_path, capsys, monkeypatch,
                                                                albertlm_log_level):  # noqa: F811
    gold = shared_path("squad", "dev-v2.0-small.json")
    preds = tmp_path / "predictions.json"
    preds.write_text(json.dumps({e.qid: "" for e in squad.read_squad(gold)}), encoding="utf-8")
    argv = ["evaluate", "squad", "--data", str(gold), "--predictions", str(preds)]
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", rank)
        code = main(argv)
        if rank == "1":
            assert code == 2 and capsys.readouterr() == ("", "")
    assert_one_error(capsys, code, "run evaluate in one process, without torchrun (WORLD_SIZE=2")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main(argv) == 0 and "exact" in json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------- 2. quoted TSV files
TEXTS = ['he said "hi" to me', "a tab\tinside", "two\nlines", '"wholly quoted"', "plain text", ' "a quote',
         "ends with a quote\"", "it 's a charming journey . "]


def _pandas_tsv(path: Path, rows: list[list]) -> Path:
    """As pandas' and datasets' to_csv(sep="\\t") write it: minimal CSV quoting, a header line."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["sentence", "label", "idx"])
        writer.writerows(rows)
    return path


def test_a_tsv_written_with_csv_quoting_reads_the_texts_as_written(tmp_path):
    rows = [[text, k % 2, k] for k, text in enumerate(TEXTS * 3)]
    tsv = _pandas_tsv(tmp_path / "train.tsv", rows)
    assert '"he said ""hi"" to me"' in tsv.read_text(encoding="utf-8")
    columns = classify.Columns("sentence", None, "label", "idx")
    examples = classify.read_examples(tsv, columns)
    assert [(e.text_a, e.label, e.guid) for e in examples] == [(t, str(y), str(k)) for t, y, k in rows]
    assert examples[3].where == f"{tsv}:6"       # row 3 is on line 6: row 2's text holds a line break


def test_glue_tsv_files_still_read_without_quoting(tmp_path):
    """Every shared GLUE file reads as before (a field opening with a quote, bare and unbalanced quotes), and so
    does a GLUE-style file whose quotes would mean something as CSV's."""
    files = sorted(p for root in ("glue", "glue_samples") for p in shared_path(root).rglob("*")
                   if p.suffix == ".tsv" or p.name.startswith("msr_paraphrase"))
    assert len(files) >= 15
    for path in files:          # each line's cells as they are, split at its tabs (the first line the header)
        lines = [line for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        header = lines[0].split("\t")
        assert [record for _, record in read_records(path)] == [dict(zip(header, line.split("\t")))
                                                                for line in lines[1:]], path
    sst = shared_path("glue", "STS-B", "train.tsv")     # a quoted span there crosses a tab, unbalanced
    first = next(record for _, record in read_records(sst) if record["sentence1"].startswith('"Oh, you'))
    assert first["sentence1"].endswith("!") and first["sentence2"].endswith('"')
    lines = ["sentence\tlabel", '"a quoted title" is good\t1', '" opens and never closes\t0', 'he said ""no""\t0',
             '"wholly quoted, no doubled quote"\t1', 'it ends "\t1']
    glue_like = tmp_path / "sst2.tsv"
    glue_like.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [r["sentence"] for _, r in read_records(glue_like)] == [line.split("\t")[0] for line in lines[1:]]


# ------------------------------------------------------------------------------ 3. Arrow read as text
def test_an_arrow_or_parquet_file_read_as_text_names_the_reader_for_its_kind(tmp_path):
    paths = _exports(tmp_path, _hub_rows()[:3])
    advice = {"stream": "pyarrow.ipc.open_stream(FILE).read_pandas()", "ipc": "pyarrow.ipc.open_file(FILE)"
              ".read_pandas()", "parquet": "pandas.read_parquet(FILE)"}
    for kind, reader in advice.items():
        named = tmp_path / f"{kind}_predictions.json"
        named.write_bytes(paths[kind].read_bytes())
        with pytest.raises(DataError) as raised:
            read_json(named)
        message = str(raised.value)
        article = "an Arrow" if kind != "parquet" else "a Parquet"
        assert f"{article} file, not text" in message and f"{reader}.to_json(" in message, message
        assert "`classify`, `squad` and `race` read Parquet and Arrow files" in message
        if kind != "parquet":
            assert "read_parquet" not in message
    pandas = pytest.importorskip("pandas")    # (datasets installs it) the advice's own line, run as given  # noqa: F841
    import pyarrow  # noqa: F401

    for kind in ("stream", "ipc", "parquet"):
        out = tmp_path / f"{kind}.jsonl"
        eval(advice[kind].replace("FILE", repr(str(paths[kind]))) + f".to_json({str(out)!r}, orient='records', "
             "lines=True)")
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [r["id"] for r in _hub_rows()[:3]]
