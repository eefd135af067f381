"""predict / evaluate follow-ups on GLUE files, audit 32.

1. `predict glue --skip-bad-rows` wrote the predictions of a dev file with malformed rows (numbered by the rows kept),
   but `evaluate glue --predictions FILE --skip-bad-rows` on the same dev file stopped at the malformed row
   (`scoring.score_glue` ignored the option): predict's file could not be scored. It now skips the gold rows as
   predict skipped them, says how many (a warning naming the first), and scores the rows kept; without the option
   the error names it.
2. An SST-2 row past the first with a tab inside its sentence (`3 tab-separated fields, sst2's layout has 2 (another
   task's file?)`) did not name --skip-bad-rows, as every other malformed dev row does: it says "(a tab inside a
   text?)" and names it now; a first row so (CoLA's file read as SST-2: every row would be skipped) still does not.
3. A dev or test file rewritten between its readings with as many rows (other rows, or the same rows in another
   order) was predicted against the first reading's labels and indexes without a word (only the count was checked):
   each window of the second reading is now checked against a digest of the first's. The rows' ids are kept from
   the first reading (a string a window) for the predictions file, which read the file a third time while the sets'
   files were being written: a change then was refused after an earlier set's file had been written
   (dev_predictions.tsv left behind, `predict` exit 2). Now nothing is written when any set is refused, for `predict`
   and `evaluate --model --out`, GLUE and classify (the families that stream their files).
4. (Checks that held before) every score `predict` / `evaluate` print for GLUE's own dev files (SST-2, CoLA, STS-B,
   RTE, WNLI and an MRPC dev file in GLUE's layout) is scikit-learn's / scipy's of the file written.
"""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import finetune, glue, specs
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_classify_audit22 import NEG, POS, _finetune, spm_model  # noqa: F401  (spm_model: a fixture)
from test_glue_audit17 import W, _glue_model, _tsv
from test_gluestream_audit31 import ROWS, _classify_spec
from test_predict_audit31 import small_windows  # noqa: F401  (small_windows: a fixture)
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("predfollow32"))


def _sst2_dev(path: Path, rows: int | None = None, short: int | None = None, tabbed: int | None = None) -> Path:
    """GLUE's SST-2 dev file (its first `rows` rows), line `short` cut to its sentence alone, a tab put inside the
    sentence of line `tabbed` (1-based lines, the header line 1)."""
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()
    lines = lines[:1 + rows] if rows else lines
    if short:
        lines[short - 1] = lines[short - 1].split("\t")[0]
    if tabbed:
        sentence, label = lines[tabbed - 1].split("\t")
        words = sentence.split(" ")
        lines[tabbed - 1] = f"{' '.join(words[:2])}\t{' '.join(words[2:])}\t{label}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ 1. evaluate --predictions --skip-bad-rows

def test_evaluate_predictions_skips_the_gold_rows_predict_skipped(pretrained, tmp_path, capsys):
    from sklearn.metrics import accuracy_score

    dev = _sst2_dev(tmp_path / "SST-2" / "dev.tsv", short=101, tabbed=501)
    model = _glue_model(tmp_path / "best", pretrained, "sst2")
    out = tmp_path / "out"
    assert main(["predict", "glue", "--model", str(model), "--dev", str(dev), "--out", str(out), "--skip-bad-rows",
                 "--no-progress"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["problems"]["malformed row skipped"] == {"count": 2, "first": [f"{dev}:101", f"{dev}:501"]}
    written = out / "dev_predictions.tsv"

    code = main(["evaluate", "glue", "--task", "sst2", "--predictions", str(written), "--dev", str(dev),
                 "--skip-bad-rows"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out) == predicted["dev"]
    said = [line for line in captured.err.splitlines() if line.strip()]
    assert len(said) == 1 and "warning" in said[0], said
    for phrase in (f"{dev}: 2 malformed rows skipped", f"{dev}:101, {dev}:501", "the other 870 rows"):
        assert phrase in said[0], said[0]
    # scikit-learn's accuracy of the file against the rows kept
    kept = [line.split("\t") for n, line in enumerate(dev.read_text(encoding="utf-8").splitlines(), 1)
            if n not in (1, 101, 501)]
    preds = [line.split("\t")[1] for line in written.read_text().splitlines()[1:]]
    assert len(preds) == len(kept) == 870
    assert json.loads(captured.out)["accuracy"] == pytest.approx(accuracy_score([row[1] for row in kept], preds),
                                                                 abs=1e-15)

    # without the option: one line naming the row and the option (it named neither the option nor a way on)
    code = main(["evaluate", "glue", "--task", "sst2", "--predictions", str(written), "--dev", str(dev)])
    assert_one_error(capsys, code, f"{dev}:101: 1 tab-separated fields, sst2 needs 2", "--skip-bad-rows")


# ------------------------------------------------------------------ 2. a later row with a tab inside names the option

def test_a_later_sst2_row_with_a_tab_inside_names_skip_bad_rows(pretrained, tmp_path, capsys):
    dev = _sst2_dev(tmp_path / "dev.tsv", rows=30, tabbed=20)
    model = _glue_model(tmp_path / "best", pretrained, "sst2")
    code = main(["predict", "glue", "--model", str(model), "--dev", str(dev), "--out", str(tmp_path / "out"),
                 "--no-progress"])
    assert_one_error(capsys, code, "dev.tsv:20: 3 tab-separated fields, sst2's layout has 2 (a tab inside a text?)",
                     "; --skip-bad-rows skips such training and dev rows")
    assert not (tmp_path / "out").exists()
    # a file in another task's layout from its first row (CoLA's read as SST-2): skipping would skip every row
    cola = _tsv(tmp_path / "cola.tsv", [["gj04", 1, "", "the film was good"], ["gj04", 0, "", "the film was bad"]])
    with pytest.raises(DataError) as caught:
        glue.read_examples("sst2", cola, skip_option="--skip-bad-rows")
    assert str(caught.value) == f"{cola}:1: 4 tab-separated fields, sst2's layout has 2 (another task's file?)"


# ------------------------------------------------------------------ 3. a file rewritten with as many rows

def _rte_rows(path: Path, labelled: bool = True, text_of=lambda i: W[i % 6]) -> Path:
    header = ["index", "sentence1", "sentence2", *(["label"] if labelled else [])]
    return _tsv(path, [header, *[[i, text_of(i), W[(i + 1) % 6], *([["entailment", "not_entailment"][i % 2]]
                                                                    if labelled else [])] for i in range(ROWS)]])


def _swap(path: Path, first: int, second: int) -> None:
    """Lines `first` and `second` (1-based) of `path` exchanged: as many rows, in another order."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[first - 1], lines[second - 1] = lines[second - 1], lines[first - 1]
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.parametrize("family", ["glue", "classify"])
def test_a_file_rewritten_with_as_many_rows_is_refused(tiny_tokenizer, small_windows, tmp_path, family):
    """Rows 20 and 21 (in the second window of 16) exchanged between the first reading and the second: the count is
    the same, the labels kept from the first reading are another row's. One error naming the window."""
    if family == "glue":
        path = _rte_rows(tmp_path / "dev.tsv", text_of=lambda i: " ".join([W[i % 6]] * (1 + i % 3)))
        spec = specs.glue_spec("rte", tiny_tokenizer, FinetuneConfig(max_seq_length=16), dev_files=[path],
                               training=False)
        first, second = 21, 22      # rows 20 and 21 (a header line first)
    else:
        path = tmp_path / "dev.jsonl"
        path.write_text("".join(json.dumps({"text": " ".join([W[i % 6]] * (1 + i % 3)), "label": ["neg", "pos"][i % 2]})
                                + "\n" for i in range(ROWS)))
        spec = _classify_spec(tiny_tokenizer, path)
        first, second = 20, 21
    _swap(path, first, second)
    with pytest.raises(DataError, match=rf"{path.name}: changed while it was read \(rows 17-32 are not the rows it "
                                        r"was checked with\)"):
        list(spec.eval_sets[0].features)


def _classify_files(root: Path) -> tuple[Path, Path]:
    rows = [("good film", POS), ("bad film", NEG), ("the plot was great", POS), ("awful acting", NEG)]
    dev, test = root / "dev.csv", root / "test.csv"
    with dev.open("w", newline="", encoding="utf-8") as a, test.open("w", newline="", encoding="utf-8") as b:
        labelled, unlabelled = csv.writer(a), csv.writer(b)
        labelled.writerow(["id", "text", "label"])
        unlabelled.writerow(["id", "text"])
        for i in range(ROWS):
            text, label = rows[i % 4]
            labelled.writerow([f"d{i}", f"{text} {i}", label])
            unlabelled.writerow([f"t{i}", f"{text} {i}"])
    return dev, test


@pytest.fixture(scope="module")
def classify_run(spm_model, tmp_path_factory) -> Path:   # noqa: F811  (spm_model: the fixture imported)
    root = tmp_path_factory.mktemp("predfollow32_classify")
    assert _finetune(spm_model, root, root / "run") == 0
    return root / "run"


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("family", ["glue", "classify"])
@pytest.mark.parametrize("when", ["as it is predicted", "once every set is predicted"])
def test_a_test_file_rewritten_under_the_run_leaves_no_file_written(pretrained, classify_run, small_windows, tmp_path,
                                                                     monkeypatch, capsys, command, family, when):
    """`--dev DEV --test TEST --out OUT`, the test file rewritten with as many rows (two rows exchanged in its second
    window) once the dev set is predicted: the test set is refused as it is predicted and no file is written (the
    dev predictions were written before). Rewritten once every set is predicted, the files are written from the rows
    read and predicted (the test file was read again for its indexes as the files were written: refused after
    dev_predictions.tsv had been written, exit 2)."""
    if family == "glue":
        model = _glue_model(tmp_path / "best", pretrained, "rte")
        dev, test = _rte_rows(tmp_path / "RTE" / "dev.tsv"), _rte_rows(tmp_path / "RTE" / "test.tsv", labelled=False)
        argv = [command, "glue", "--model", str(model), "--dev", str(dev), "--test", str(test)]
        submission, indexes, swapped = "submission/RTE.tsv", [str(i) for i in range(ROWS)], (21, 22)
    else:
        dev, test = _classify_files(tmp_path)
        argv = [command, "classify", "--model", str(classify_run), "--dev", str(dev), "--test", str(test),
                "--id-column", "id"]
        submission, indexes, swapped = "test_predictions.tsv", [f"t{i}" for i in range(ROWS)], (21, 22)
    out = tmp_path / "out"
    real, calls = finetune.predict, []

    def predict(*args, **kwargs):
        outputs = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == (1 if when == "as it is predicted" else 2):
            _swap(test, *swapped)
        return outputs

    monkeypatch.setattr(finetune, "predict", predict)
    capsys.readouterr()
    code = main([*argv, "--out", str(out), "--no-progress"])
    if when == "as it is predicted":
        assert_one_error(capsys, code, f"{test}: changed while it was read (rows 17-32 are not the rows it was "
                                       "checked with)")
        assert not out.exists() or [str(p.relative_to(out)) for p in out.rglob("*")] == []
        return
    assert code == 0, capsys.readouterr().err
    lines = (out / submission).read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[0] for line in lines[1:]] == indexes   # the indexes read and predicted
    assert (out / "dev_predictions.tsv").is_file()
    assert not [p.name for p in out.rglob(".tmp-*")]


# ------------------------------------------------------------------ 4. the printed scores against scikit-learn's

def _gold(task: str, path: Path) -> list:
    """A GLUE dev file's labels read here (not by the library): CoLA's second column (no header), SST-2's second,
    STS-B's last (a score), MRPC's first (BOM, header), RTE's / WNLI's last (val.tsv: no header in RTE's)."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    if task == "cola":
        return [row[1] for row in rows]
    if task in ("rte", "wnli") and rows[0][-1] != "label":
        return [row[-1] for row in rows]
    column = {"sst2": 1, "stsb": -1, "mrpc": 0, "rte": -1, "wnli": -1}[task]
    return [float(row[column]) if task == "stsb" else row[column] for row in rows[1:]]


def _reference(task: str, gold: list, preds: list) -> dict:
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if task == "stsb":
        return {"pearson": float(pearsonr(gold, preds)[0]), "spearman": float(spearmanr(gold, preds)[0])}
    scores = {"accuracy": accuracy_score(gold, preds)}
    if task == "cola":
        scores["mcc"] = matthews_corrcoef(gold, preds)
    if task == "mrpc":
        scores["f1"] = f1_score(gold, preds, pos_label="1")
    return scores


@pytest.mark.parametrize("task, parts", [("sst2", ("SST-2", "dev.tsv")), ("cola", ("CoLA", "val.tsv")),
                                         ("stsb", ("STS-B", "dev.tsv")), ("rte", ("RTE", "val.tsv")),
                                         ("wnli", ("WNLI", "val.tsv")), ("mrpc", ("MRPC", "msr_paraphrase_train.txt"))])
def test_printed_scores_are_scikit_learns_of_the_files(pretrained, tmp_path, capsys, task, parts):
    """`predict` on GLUE's own dev file prints the metrics of the dev_predictions.tsv it writes, as scikit-learn
    (scipy for STS-B) computes them from the files; `evaluate --predictions` of a file of other predictions (half
    of them wrong, a score of 3 decimals for STS-B) prints scikit-learn's too. MRPC: GLUE's dev.tsv layout (the
    original file's last 400 pairs, under a header). (Held before: a check of the scores, not a fix.)"""
    dev = shared_path("glue", *parts)
    if task == "mrpc":
        lines = dev.read_text(encoding="utf-8-sig").splitlines()
        dev = tmp_path / "MRPC" / "dev.tsv"
        dev.parent.mkdir()
        dev.write_text("\n".join([lines[0], *lines[-400:]]) + "\n", encoding="utf-8")
    gold = _gold(task, dev)
    model = _glue_model(tmp_path / "best", pretrained, task)
    out = tmp_path / "out"
    assert main(["predict", "glue", "--model", str(model), "--dev", str(dev), "--out", str(out), "--no-progress",
                 "--max-seq-length", "16"]) == 0
    printed = json.loads(capsys.readouterr().out)["dev"]
    written = [line.split("\t") for line in (out / "dev_predictions.tsv").read_text().splitlines()[1:]]
    assert [row[0] for row in written] == [str(i) for i in range(len(gold))]
    preds = [float(row[1]) if task == "stsb" else row[1] for row in written]
    if task != "stsb" or len(set(preds)) > 1:   # (a constant prediction scores 0 here, NaN in scipy)
        for name, value in _reference(task, gold, preds).items():
            assert printed[name] == pytest.approx(value, abs=1e-12), name

    rng = random.Random(7)
    labels = sorted(set(gold)) if task != "stsb" else None
    other = [round(score + rng.uniform(-2, 2), 3) if task == "stsb" else
             (label if rng.random() < 0.5 else rng.choice(labels)) for score, label in zip(gold, gold)]
    path = tmp_path / "other.tsv"
    path.write_text("index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(other)))
    assert main(["evaluate", "glue", "--task", task, "--predictions", str(path), "--dev", str(dev)]) == 0
    scored = json.loads(capsys.readouterr().out)
    for name, value in _reference(task, gold, other).items():
        assert scored[name] == pytest.approx(value, abs=1e-12), name
    if task in ("mrpc", "stsb"):    # GLUE's mean of the task's two metrics
        pair = ("f1", "accuracy") if task == "mrpc" else ("pearson", "spearman")
        assert scored["acc_and_f1" if task == "mrpc" else "corr"] == pytest.approx(sum(scored[k] for k in pair) / 2)


def test_a_test_file_cut_short_once_predicted_leaves_the_run_whole(pretrained, small_windows, tmp_path, monkeypatch,
                                                                    capsys):
    """The test file cut short once every set is predicted: the submission of the rows predicted is written, with
    the dev predictions (it was read again for its indexes as the files were written: `changed while it was read
    (40 rows when it was checked, 39 now)`, exit 2, with dev_predictions.tsv written and submission/ empty)."""
    model = _glue_model(tmp_path / "best", pretrained, "rte")
    dev, test = _rte_rows(tmp_path / "RTE" / "dev.tsv"), _rte_rows(tmp_path / "RTE" / "test.tsv", labelled=False)
    real, calls = finetune.predict, []

    def predict(*args, **kwargs):
        outputs = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            test.write_text("".join(test.read_text().splitlines(keepends=True)[:-1]))
        return outputs

    monkeypatch.setattr(finetune, "predict", predict)
    out = tmp_path / "out"
    code = main(["predict", "glue", "--model", str(model), "--dev", str(dev), "--test", str(test), "--out", str(out),
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert len((out / "submission" / "RTE.tsv").read_text().splitlines()) == 1 + ROWS
    assert len((out / "dev_predictions.tsv").read_text().splitlines()) == 1 + ROWS
