"""GLUE stream audit 31 (QQP's 390,965 test rows): `predict glue` and `evaluate glue --model` read every dev and
test file whole, held every row's texts and features until the end (about 1.8 kB a row: some 700 MB for QQP's test
set) and wrote each submission from one string. They now go the way `predict classify` goes
(`specs._streamed_examples`, shared by both): every row checked in a first reading as `glue.iter_examples` reads it
(layout, labels, a test index given twice, malformed rows, the diagnostic set's width), the file then tokenized and
predicted a window of PREDICT_WINDOW rows at a time, and the submission written as its rows are read again, through
a temporary file renamed into place. A file of up to one window gives the same files byte for byte (checked against
the earlier code on GLUE's dev sets and official-layout test files); fine-tuning still reads its files whole."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import classify, glue, specs
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained
from test_glue_audit17 import MNLI, W, _glue_model, _tsv
from test_glue_audit30 import MISMATCHED, _mnli_file
from test_predict_audit31 import WINDOW, small_windows  # noqa: F401  (small_windows: a fixture)
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)

ROWS = 40      # windows of 16, 16, 8


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("gluestream31"))


def _short_row(path: Path, line: int, fields: int) -> Path:
    """`path` with its line `line` (1-based) cut to its first `fields` fields (a malformed row)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = "\t".join(lines[line - 1].split("\t")[:fields])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_predict_glue_reads_each_file_a_window_at_a_time(pretrained, small_windows, tmp_path, capsys):
    """MNLI's mismatched dev set and a renamed mismatched test file (`test.tsv`), 40 rows each, a malformed dev row
    skipped with --skip-bad-rows: tokenized 16, 16, 7 and 16, 16, 8 rows at a time (the whole file at once before),
    the submission named by its genres (MNLI-mm.tsv) with every test row in the file's order, the dev predictions
    numbered by row and scored as scikit-learn scores them, the skipped row counted once (the file is read three
    times), no temporary file left."""
    from sklearn.metrics import accuracy_score

    model = _glue_model(tmp_path / "best", pretrained, "mnli")
    genres = (MISMATCHED * 7)[:ROWS]
    dev = _short_row(_mnli_file(tmp_path / "dev_mismatched.tsv", genres, labelled=True), 31, 4)
    test = _mnli_file(tmp_path / "renamed" / "test.tsv", genres)
    out = tmp_path / "out"
    code = main(["predict", "glue", "--task", "mnli", "--model", str(model), "--dev", str(dev), "--test", str(test),
                 "--out", str(out), "--skip-bad-rows", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert small_windows == [16, 16, 7, 16, 16, 8]
    printed = json.loads(captured.out)
    assert printed["problems"]["malformed row skipped"] == {"count": 1, "first": [f"{dev}:31"]}
    submission = (out / "submission" / "MNLI-mm.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in submission[1:]] == [str(i) for i in range(ROWS)]
    assert {line.split("\t")[1] for line in submission[1:]} <= set(MNLI)
    written = (out / "dev_mismatched_predictions.tsv").read_text().splitlines()[1:]
    assert [line.split("\t")[0] for line in written] == [str(i) for i in range(ROWS - 1)]
    gold = [e.label for e in glue.read_examples("mnli", dev, problems=glue.Problems())]
    assert printed["dev_mismatched"]["accuracy"] == pytest.approx(
        accuracy_score(gold, [line.split("\t")[1] for line in written]))
    assert not [p.name for p in [*out.iterdir(), *(out / "submission").iterdir()] if p.name.startswith(".tmp-")]


def test_a_hub_test_split_is_read_a_window_at_a_time(pretrained, small_windows, tmp_path, capsys):
    """The Hub's RTE test split (Parquet, label -1, idx in another order) streams as GLUE's own files do: RTE.tsv
    keyed by idx, in the file's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    order = list(reversed(range(ROWS)))
    path = tmp_path / "rte" / "test-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"sentence1": [W[i % 6] for i in range(ROWS)], "sentence2": [W[(i + 1) % 6]
                                                                                        for i in range(ROWS)],
                             "label": [-1] * ROWS, "idx": order}), path)
    model = _glue_model(tmp_path / "best", pretrained, "rte")
    out = tmp_path / "out"
    code = main(["predict", "glue", "--task", "rte", "--model", str(model), "--test", str(path), "--out", str(out),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert small_windows == [16, 16, 8]
    lines = (out / "submission" / "RTE.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in order]


def _qqp_test(path: Path, index_of=lambda i: i) -> Path:
    return _tsv(path, [["id", "question1", "question2"], *[[index_of(i), W[i % 6], W[(i + 2) % 6]]
                                                             for i in range(ROWS)]])


@pytest.mark.parametrize("case", ["index twice", "short test row", "wide diagnostic row"])
def test_a_bad_test_row_past_the_first_window_is_refused_before_anything_is_predicted(
        pretrained, small_windows, tmp_path, capsys, case):
    """Every row is checked in the first reading, as when the file was read whole: a test index given twice, a
    malformed test row (never skipped, even with --skip-bad-rows: the server wants every row) and a diagnostic.tsv
    row with an MNLI test file's columns, each on line 36 (the third window), are one error line naming it, before
    any text is tokenized, and nothing is written. (A check that held before: it guards the streamed reading.)"""
    task, model_task, extra = "qqp", "qqp", ["--skip-bad-rows"]
    if case == "index twice":
        path, phrases = _qqp_test(tmp_path / "QQP" / "test.tsv", lambda i: 3 if i == 34 else i), [
            "test.tsv:36: index 3 is also the index of", "test.tsv:5"]
    elif case == "short test row":
        path, phrases = _short_row(_qqp_test(tmp_path / "QQP" / "test.tsv"), 36, 2), [
            "test.tsv:36: 2 tab-separated fields", "--skip-bad-rows skips training and dev rows only"]
    else:
        task, model_task, extra = "ax", "mnli", []
        path = _tsv(tmp_path / "diagnostic.tsv", [["index", "sentence1", "sentence2"], *[
            [i, W[i % 6], W[(i + 1) % 6], *(["fiction", "x"] if i == 34 else [])] for i in range(ROWS)]])
        phrases = ["diagnostic.tsv:36: 5 tab-separated fields, GLUE's diagnostic.tsv has 3"]
    model = _glue_model(tmp_path / "best", pretrained, model_task)
    out = tmp_path / "out"
    code = main(["predict", "glue", "--task", task, "--model", str(model), "--test", str(path), "--out", str(out),
                 "--no-progress", *extra])
    assert_one_error(capsys, code, *phrases)
    assert small_windows == [] and not out.exists()


def test_a_submission_is_written_as_its_rows_come(tmp_path):
    """`glue.write_submission` takes the rows and predictions as they come and writes each line as it is made,
    into a temporary file beside the submission (it built the whole text first); a stop half-way (Ctrl-C) leaves
    the earlier submission as it was and no temporary file."""
    task = glue.get_task("qqp")
    path = tmp_path / "QQP.tsv"
    rows = [glue.Example(str(i), W[i % 6], W[(i + 1) % 6], None, f"test.tsv:{i + 2}") for i in range(ROWS)]
    glue.write_submission(task, iter(rows), iter([0] * ROWS), path, by_guid=True)
    before = path.read_bytes()
    assert before.decode().splitlines() == ["index\tprediction", *(f"{i}\t0" for i in range(ROWS))]
    seen: list[list[str]] = []

    def predictions():
        for i in range(ROWS):
            if i == 20:     # half-way: the lines so far are in a temporary file beside the submission
                seen.append(sorted(p.name for p in tmp_path.iterdir()))
                raise KeyboardInterrupt
            yield 1

    with pytest.raises(KeyboardInterrupt):
        glue.write_submission(task, iter(rows), predictions(), path, by_guid=True)
    assert len(seen[0]) == 2 and seen[0][0].startswith(".tmp-QQP.tsv")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["QQP.tsv"]


def _classify_spec(tokenizer, path: Path):
    columns = classify.Columns(text="text", label="label")
    return specs.classify_spec(tokenizer, FinetuneConfig(max_seq_length=16), columns, dev_file=path,
                               labels=["neg", "pos"], training=False)


@pytest.mark.parametrize("family", ["glue", "classify"])
@pytest.mark.parametrize("change", ["shorter", "longer"])
def test_a_file_rewritten_between_its_readings_is_an_error(tiny_tokenizer, small_windows, tmp_path, family,
                                                           change):
    """A dev file is read once to be checked and again for its features: rows removed or added in between (a file
    still being written) were predicted and written against the first reading's labels and count (classify's
    streamed reading: a traceback from the metrics, or predictions of other rows); now one error naming the file."""
    if family == "glue":
        path = _tsv(tmp_path / "dev.tsv", [["index", "sentence1", "sentence2", "label"],
                                           *[[i, W[i % 6], W[(i + 1) % 6], ["entailment", "not_entailment"][i % 2]]
                                             for i in range(ROWS)]])
        spec = specs.glue_spec("rte", tiny_tokenizer, FinetuneConfig(max_seq_length=16), dev_files=[path],
                               training=False)
    else:
        path = tmp_path / "dev.jsonl"
        path.write_text("".join(json.dumps({"text": W[i % 6], "label": ["neg", "pos"][i % 2]}) + "\n"
                                for i in range(ROWS)))
        spec = _classify_spec(tiny_tokenizer, path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-3] if change == "shorter" else lines + lines[-3:]))
    with pytest.raises(DataError, match=rf"{path.name}: changed while it was read \({ROWS} rows when it was "
                                        r"checked, (37|more) now\)"):
        list(spec.eval_sets[0].features)


def test_the_streamed_dev_sets_score_as_the_rows_held_whole(tiny_tokenizer, small_windows, tmp_path):
    """The gold labels kept from the first reading (a number a row) are `glue.label_ids` of the rows held whole,
    for a classification and a regression (STS-B) dev file; the features made window by window are those of the
    rows held whole (ids, types, index in the file)."""
    stsb = _tsv(tmp_path / "sts" / "dev.tsv", [
        ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2", "score"],
        *[[i, "g", "f", "y", i, "s", "s", W[i % 6], W[(i + 3) % 6], f"{(i * 0.37) % 5:.3f}"] for i in range(ROWS)]])
    rte = _tsv(tmp_path / "rte" / "dev.tsv", [["index", "sentence1", "sentence2", "label"], *[
        [i, W[i % 6], W[(i + 1) % 6], ["entailment", "not_entailment"][i % 3 == 0]] for i in range(ROWS)]])
    cfg = FinetuneConfig(max_seq_length=16)
    for task, path in ((glue.get_task("stsb"), stsb), (glue.get_task("rte"), rte)):
        examples = glue.read_examples(task, path)
        streamed = specs.glue_spec(task.name, tiny_tokenizer, cfg, dev_files=[path], training=False).eval_sets[0]
        whole = specs._pair_features(tiny_tokenizer, examples, glue.label_ids(task, examples), 16, glue.Problems(),
                                     path.name)
        assert [(f.input_ids.tolist(), f.token_type_ids.tolist(), f.example_index, f.label) for f in
                streamed.features] == [(f.input_ids.tolist(), f.token_type_ids.tolist(), f.example_index, f.label)
                                       for f in whole]
        logits = np.random.default_rng(0).normal(size=(ROWS, task.num_labels))
        expected = specs._glue_dev_set(task, path, examples, whole).score({"logits": logits})
        assert streamed.score({"logits": logits}) == expected
