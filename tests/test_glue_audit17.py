"""GLUE audit 17 (fine-tuning, prediction and the leaderboard submission).

A whole GLUE submission predicted from tiny files in each task's official test layout: the eleven files the
server takes, `index<TAB>prediction`, the test file's own index in its order, label names, and STS-B scores on
the gold scale [0, 5] (a regression head's -3.0 was written as -3.000). The diagnostic set's labelled release
(diagnostic-full.tsv) is scored; an unlabelled file given as labelled is an error naming it, not a KeyError
traceback. `--task` in GLUE's own spelling (RTE, SST-2, MNLI-m, AX) works for predict, evaluate, --resume and
--recipe paper. A --data-dir that does not exist is named. Metrics are checked against scikit-learn / scipy on
real predictions."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tasks import glue, metrics
from albertlm.tasks.options import GlueOptions
from albertlm.tasks.registry import paper_recipe_name
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags

W = ["good film", "bad plot", 'the "acting', "very poor acting", "great film", "awful plot"]  # a bare quote
NLI2 = ["entailment", "not_entailment"]
MNLI = ["contradiction", "entailment", "neutral"]
MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit17_glue"))


def _glue_model(directory: Path, pretrained: Path, task: str, bias: float | None = None) -> Path:
    """A GLUE fine-tuned checkpoint as finetune writes best/; `bias`: a head that predicts that score (STS-B)."""
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification

    model = AlbertForSequenceClassification.from_pretrained(pretrained, num_labels=glue.get_task(task).num_labels)
    if bias is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(bias)
    model.save_pretrained(directory)
    shutil.copy(pretrained / "vocab.txt", directory / "vocab.txt")
    (directory / "task.json").write_text(json.dumps({"family": "glue", "task": task, "max_seq_length": 16}))
    return directory


def _tsv(path: Path, rows: list[list], bom: bool = False, trailer: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join("\t".join(map(str, row)) for row in rows) + trailer
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


INDICES = [5, 3, 0, 4, 1, 2]   # the test file's own index column, not in row order


def _official_test_files(root: Path) -> dict[str, list[Path]]:
    """Each task's unlabelled test file(s) in GLUE's layout (download_glue_data.py), with a BOM, a bare quote and
    trailing empty lines here and there; MNLI's and QQP's folders also hold labelled dev files."""
    pair = [[i, W[i], W[(i + 1) % 6]] for i in INDICES]
    files = {
        "cola": [_tsv(root / "CoLA" / "test.tsv", [["index", "sentence"], *[[i, W[i]] for i in INDICES]], bom=True)],
        "sst2": [_tsv(root / "SST-2" / "test.tsv", [["index", "sentence"], *[[i, W[i]] for i in INDICES]],
                      trailer="\n\n\n")],
        "mrpc": [_tsv(root / "MRPC" / "test.tsv", [["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                                                   *[[i, 1000 + i, 2000 + i, W[i], W[5 - i]] for i in INDICES]])],
        "stsb": [_tsv(root / "STS-B" / "test.tsv", [
            ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"],
            *[[i, "main-captions", "MSRvid", "2012test", f"{i:04d}", "none", "none", W[i], W[5 - i]]
              for i in INDICES]])],
        "qqp": [_tsv(root / "QQP" / "test.tsv", [["id", "question1", "question2"], *pair])],
        "qnli": [_tsv(root / "QNLI" / "test.tsv", [["index", "question", "sentence"], *pair])],
        "rte": [_tsv(root / "RTE" / "test.tsv", [["index", "sentence1", "sentence2"], *pair])],
        "wnli": [_tsv(root / "WNLI" / "test.tsv", [["index", "sentence1", "sentence2"], *pair])],
        "mnli": [_tsv(root / "MNLI" / f"test_{kind}.tsv", [MNLI_COLUMNS, *[
            [i, i, f"{i}n", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)", W[i], W[5 - i]] for i in INDICES]])
            for kind in ("matched", "mismatched")],
        "ax": [_tsv(root / "diagnostic" / "diagnostic.tsv", [["index", "sentence1", "sentence2"], *pair])],
    }
    for kind in ("matched", "mismatched"):   # dev: five annotator labels and the gold label last
        _tsv(root / "MNLI" / f"dev_{kind}.tsv", [MNLI_COLUMNS + [f"label{k}" for k in range(1, 6)] + ["gold_label"],
                                                 *[[i, i, f"{i}n", "slate", "( a )", "( b )", "(ROOT a)", "(ROOT b)",
                                                    W[i], W[(i + 2) % 6], *[MNLI[i % 3]] * 6] for i in range(6)]])
    _tsv(root / "QQP" / "dev.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                                    *[[i, 2 * i, 2 * i + 1, W[i], W[(i + 3) % 6], i % 2] for i in range(6)]])
    return files


SUBMISSION = {"cola": ["CoLA.tsv"], "sst2": ["SST-2.tsv"], "mrpc": ["MRPC.tsv"], "stsb": ["STS-B.tsv"],
              "qqp": ["QQP.tsv"], "mnli": ["MNLI-m.tsv", "MNLI-mm.tsv"], "qnli": ["QNLI.tsv"], "rte": ["RTE.tsv"],
              "wnli": ["WNLI.tsv"], "ax": ["AX.tsv"]}


def test_a_whole_glue_submission_in_the_servers_format(pretrained, tmp_path, capsys):
    """The eleven files, one predict per task into one --out: header, the test file's index column in its order,
    the task's label names, STS-B scores clipped to [0, 5] (the head predicts -3.0 for every pair). MNLI's
    matched and mismatched dev sets are both scored, QQP's dev file in its own layout."""
    files = _official_test_files(tmp_path / "glue")
    models = {task: _glue_model(tmp_path / "models" / task, pretrained, task, bias=-3.0 if task == "stsb" else None)
              for task in ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")}
    out = tmp_path / "sub"
    for task, tests in files.items():
        model = models["mnli" if task == "ax" else task]
        data = (["--data-dir", str(tests[0].parent)] if task in ("mnli", "qqp")
                else ["--test", *map(str, tests)])
        capsys.readouterr()
        assert main(["predict", "glue", "--task", task, "--model", str(model), *data, "--out", str(out),
                     "--no-progress"]) == 0, capsys.readouterr().err
        printed = json.loads(capsys.readouterr().out)
        if task == "mnli":
            assert set(printed) >= {"dev_matched", "dev_mismatched"}
            assert set(printed["dev_mismatched"]) == {"accuracy"}
        if task == "qqp":
            assert set(printed["dev"]) >= {"f1", "accuracy"}
    assert sorted(p.name for p in (out / "submission").iterdir()) == sorted(
        ["CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "QNLI.tsv",
         "RTE.tsv", "WNLI.tsv", "AX.tsv"])
    for task, names in SUBMISSION.items():
        labels = MNLI if task == "ax" else glue.get_task(task).labels
        for name in names:
            lines = (out / "submission" / name).read_text(encoding="utf-8").splitlines()
            assert lines[0] == "index\tprediction", name
            rows = [line.split("\t") for line in lines[1:]]
            assert [int(index) for index, _ in rows] == INDICES, name
            if task == "stsb":
                assert [value for _, value in rows] == ["0.000"] * len(INDICES)
            else:
                assert {value for _, value in rows} <= set(labels), name


def test_stsb_scores_are_clipped_in_the_submission_only(tmp_path):
    """A submission file holds scores on the gold scale; dev predictions stay as the metrics saw them."""
    task = glue.get_task("STS-B")
    examples = [glue.Example(str(i), "a", "b", None, "x") for i in (7, 8, 9)]
    glue.write_submission(task, examples, np.array([-0.4, 2.5, 5.6]), tmp_path / "STS-B.tsv", by_guid=True)
    assert (tmp_path / "STS-B.tsv").read_text().splitlines() == ["index\tprediction", "7\t0.000", "8\t2.500",
                                                                 "9\t5.000"]
    glue.write_submission(task, examples, np.array([-0.4, 2.5, 5.6]), tmp_path / "dev.tsv")
    assert (tmp_path / "dev.tsv").read_text().splitlines()[1:] == ["0\t-0.400", "1\t2.500", "2\t5.600"]


# ------------------------------------------------------------------------------------------------ AX

def _diagnostic_full(path: Path) -> tuple[Path, list[str]]:
    gold = ["contradiction", "entailment", "neutral", "entailment", "contradiction", "neutral"]
    rows = [["Lexical Semantics", "Predicate-Argument Structure", "Logic", "Knowledge", "Domain", "Premise",
             "Hypothesis", "Label"]]
    rows += [["Negation" if i % 2 else "", "", "", "", "Artificial", W[i], W[5 - i], gold[i]] for i in range(6)]
    return _tsv(path, rows), gold


def test_the_diagnostic_set_is_scored_from_its_labelled_release(pretrained, tmp_path, capsys):
    """`evaluate glue --task ax` with GLUE's unlabelled diagnostic.tsv as the gold file was a KeyError traceback;
    the labelled diagnostic-full.tsv is read in its own layout and scored with Matthews corr. (GLUE's R3)."""
    from sklearn.metrics import accuracy_score, matthews_corrcoef

    files = _official_test_files(tmp_path / "glue")
    diagnostic = files["ax"][0]
    full, gold = _diagnostic_full(diagnostic.parent / "diagnostic-full.tsv")
    preds = ["contradiction", "neutral", "neutral", "entailment", "entailment", "neutral"]
    predictions = _tsv(tmp_path / "AX.tsv", [["index", "prediction"], *[[i, p] for i, p in enumerate(preds)]])

    code = main(["evaluate", "glue", "--task", "ax", "--dev", str(diagnostic), "--predictions", str(predictions)])
    assert_one_error(capsys, code, str(diagnostic), "give it with --test")
    assert main(["evaluate", "glue", "--task", "ax", "--dev", str(full), "--predictions", str(predictions)]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["mcc"] == pytest.approx(matthews_corrcoef(gold, preds))
    assert scored["accuracy"] == pytest.approx(accuracy_score(gold, preds))

    examples = glue.read_examples("ax", full, True)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [(W[i], W[5 - i], gold[i]) for i in range(6)]
    with pytest.raises(DataError, match="no label"):
        glue.label_ids(glue.get_task("ax"), glue.read_examples("ax", diagnostic, False))

    # predict with an MNLI model on the diagnostic folder: the labelled file scored, the unlabelled one submitted
    mnli = _glue_model(tmp_path / "mnli", pretrained, "mnli")
    assert main(["predict", "glue", "--task", "ax", "--model", str(mnli), "--data-dir", str(diagnostic.parent),
                 "--out", str(tmp_path / "p"), "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed["diagnostic-full"]) == {"accuracy", "mcc"}
    assert len((tmp_path / "p" / "submission" / "AX.tsv").read_text().splitlines()) == 7


# ------------------------------------------------------------------------------------------ task names

def test_task_names_in_glues_own_spelling(pretrained, tmp_path, capsys):
    """`--task RTE` / `SST-2` / `AX` (the folder and submission names) were refused by predict ("fine-tuned on
    rte, not RTE"), `--recipe paper --task MNLI-m` was an unknown recipe, and a misspelt task was blamed on the
    model instead of being named."""
    files = _official_test_files(tmp_path / "glue")
    rte = _glue_model(tmp_path / "rte", pretrained, "rte")
    mnli = _glue_model(tmp_path / "mnli", pretrained, "mnli")
    sst2 = _glue_model(tmp_path / "sst2", pretrained, "sst2")
    for task, model, test in (("RTE", rte, files["rte"][0]), ("SST-2", sst2, files["sst2"][0]),
                              ("AX", mnli, files["ax"][0]), ("MNLI-m", mnli, files["mnli"][0])):
        capsys.readouterr()
        assert main(["predict", "glue", "--task", task, "--model", str(model), "--test", str(test),
                     "--out", str(tmp_path / "p" / task), "--no-progress"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main(["predict", "glue", "--task", "RTEE", "--model", str(rte), "--test", str(files["rte"][0]),
                 "--out", str(tmp_path / "p" / "x")])
    assert_one_error(capsys, code, "unknown GLUE task 'RTEE'", "rte")
    assert paper_recipe_name("glue", GlueOptions(task="MNLI-m")) == "mnli"
    assert paper_recipe_name("glue", GlueOptions(task="AX")) == "mnli"
    assert paper_recipe_name("glue", GlueOptions(task="STS-B")) == "stsb"


def test_resume_takes_the_task_in_glues_spelling(pretrained, tmp_path, capsys):
    data = tmp_path / "RTE"
    _tsv(data / "train.tsv", [["index", "sentence1", "sentence2", "label"],
                              *[[i, W[i], W[5 - i], NLI2[i % 2]] for i in range(6)]])
    out = tmp_path / "run"
    base = ["finetune", "glue", "--data-dir", str(data), "--model", str(pretrained), "--out", str(out), *QUICK]
    assert main([*base, "--task", "rte", "--max-steps", "1", "--train.save_every", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "--task", "RTE", "--max-steps", "2", "--resume"]) == 0, capsys.readouterr().err
    assert json.loads((out / "best" / "task.json").read_text())["task"] == "rte"


# ------------------------------------------------------------------------------------------ bad input

def test_a_data_dir_that_does_not_exist_is_named(pretrained, tmp_path, capsys):
    """It was "no data to predict" / "no training file": as if the folder were empty."""
    rte = _glue_model(tmp_path / "rte", pretrained, "rte")
    missing = tmp_path / "glue" / "RTE"
    code = main(["predict", "glue", "--task", "rte", "--model", str(rte), "--data-dir", str(missing),
                 "--out", str(tmp_path / "p")])
    assert_one_error(capsys, code, f"{missing}: no such directory")
    code = main(["finetune", "glue", "--task", "rte", "--model", str(pretrained), "--data-dir", str(missing),
                 "--out", str(tmp_path / "run"), *QUICK])
    assert_one_error(capsys, code, f"{missing}: no such directory")
    a_file = _tsv(tmp_path / "train.tsv", [["index", "sentence1", "sentence2", "label"]])
    code = main(["evaluate", "glue", "--task", "rte", "--data-dir", str(a_file), "--predictions", str(a_file)])
    assert_one_error(capsys, code, f"{a_file}: not a directory")


@pytest.mark.parametrize("task", ["rte", "sst2", "cola", "stsb", "mnli", "qqp"])
def test_an_unlabelled_test_file_read_as_labelled_says_so(task, tmp_path):
    """A test file given as --dev / --train: the error names its line and suggests --test."""
    tests = _official_test_files(tmp_path / "glue")[task]
    with pytest.raises(DataError) as info:
        glue.read_examples(task, tests[0], True)
    assert f"{tests[0]}:" in str(info.value) and "give it with --test" in str(info.value)
    headerless = _tsv(tmp_path / "cola.tsv", [[0, "good film"], [1, "bad plot"]])   # CoLA's test rows, no header
    with pytest.raises(DataError, match="give it with --test"):
        glue.read_examples("cola", headerless, True)
    with pytest.raises(DataError) as info:   # a labelled file with a wrong label: no such hint
        glue.read_examples("rte", _tsv(tmp_path / "bad.tsv", [["index", "sentence1", "sentence2", "label"],
                                                               [0, "a", "b", "entailed"]]), True)
    assert "--test" not in str(info.value)


# ---------------------------------------------------------------------------------------------- metrics

def test_glue_metrics_match_scikit_learn_and_scipy_on_real_labels():
    """Official metrics on real dev labels with noisy predictions, against the libraries' own formulas, and the
    degenerate cases: one class everywhere (MCC 0) and a constant score (correlation undefined: 0.0, not NaN)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    cola = glue.label_ids(glue.get_task("cola"), glue.read_examples("cola", shared_path("glue", "CoLA", "val.tsv")))
    preds = np.where(rng.random(len(cola)) < 0.7, cola, 1 - np.asarray(cola))
    assert metrics.glue_metrics("cola", cola, preds)["mcc"] == pytest.approx(matthews_corrcoef(cola, preds))
    mrpc = metrics.glue_metrics("mrpc", cola, preds)
    assert mrpc["f1"] == pytest.approx(f1_score(cola, preds))
    assert mrpc["acc_and_f1"] == pytest.approx((mrpc["f1"] + mrpc["accuracy"]) / 2)
    scores = glue.label_ids(glue.get_task("stsb"), glue.read_examples("stsb", shared_path("glue", "STS-B", "dev.tsv")))
    noisy = np.asarray(scores) + rng.normal(0, 1.0, len(scores))
    sts = metrics.glue_metrics("stsb", scores, noisy)
    assert sts["pearson"] == pytest.approx(pearsonr(noisy, scores)[0])
    assert sts["spearman"] == pytest.approx(spearmanr(noisy, scores)[0])
    assert sts["corr"] == pytest.approx((sts["pearson"] + sts["spearman"]) / 2)
    assert metrics.glue_metrics("cola", [1] * 5, [1] * 5)["mcc"] == 0.0
    assert metrics.glue_metrics("stsb", scores[:5], [2.5] * 5) == {"pearson": 0.0, "spearman": 0.0, "corr": 0.0}
