"""GLUE audit 23 (a researcher submitting all nine tasks and AX to gluebenchmark.com).

The diagnostic set goes with MNLI only: given to another task (`--task rte --test diagnostic.tsv`) it wrote AX.tsv
with RTE's two classes named contradiction and entailment, and its labelled release as an RTE dev file was a
KeyError traceback; beside MNLI's dev files it is scored with its Matthews correlation (GLUE's R3), as `--task ax`
scores it. `--task ax` on an MNLI test file predicted on its promptID and pairID columns and wrote AX.tsv;
diagnostic-full.tsv given as `--test` predicted on its header line and category columns. A malformed training
row (QQP's older train.tsv cuts questions in two at line breaks) names --skip-bad-rows. WNLI's adversarial dev
set is said when fine-tuning. Pure checks that held before: every task's metrics against scikit-learn / scipy
computed as the `evaluate` library's glue metric computes them, and `--recipe paper` against google-research
ALBERT's run_glue.sh."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from albertlm.config.task import FinetuneConfig
from albertlm.tasks import glue, metrics, specs
from albertlm.tasks.tables import DataError
from conftest import shared_path

from test_glue_audit17 import MNLI, MNLI_COLUMNS, W, _diagnostic_full, _tsv
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)

CFG = FinetuneConfig(max_seq_length=16)


def _diagnostic(path: Path) -> Path:
    return _tsv(path, [["index", "sentence1", "sentence2"], *[[i, W[i], W[5 - i]] for i in range(4)]])


def _mnli_test(path: Path) -> Path:
    return _tsv(path, [MNLI_COLUMNS, *[[i, 100 + i, f"{i}n", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)",
                                        W[i], W[5 - i]] for i in range(4)]])


def _mnli_dev(path: Path) -> Path:
    return _tsv(path, [MNLI_COLUMNS + [f"label{k}" for k in range(1, 6)] + ["gold_label"],
                       *[[i, i, f"{i}n", "slate", "( a )", "( b )", "(ROOT a)", "(ROOT b)", W[i], W[(i + 2) % 6],
                          *[MNLI[i % 3]] * 6] for i in range(6)]])


# ------------------------------------------------------------------------------------------- the diagnostic set

def test_the_diagnostic_set_given_to_another_task_is_refused(tiny_tokenizer, tmp_path):
    """An RTE run's `--test diagnostic.tsv` wrote submission/AX.tsv from the RTE head, its class 1 (not_entailment)
    named `entailment`; `--dev diagnostic-full.tsv` was a KeyError ('contradiction'). Both are refused before
    anything is read, naming the file and the way (an MNLI model, --task ax)."""
    for given in ({"test_files": [_diagnostic(tmp_path / "diagnostic.tsv")]},
                  {"dev_files": [_diagnostic_full(tmp_path / "diagnostic-full.tsv")[0]]}):
        with pytest.raises(DataError, match=r"diagnostic.*GLUE's diagnostic set \(AX\).*MNLI model, not for "
                                            r"--task rte.*--task ax"):
            specs.glue_spec("rte", tiny_tokenizer, CFG, training=False, **given)
    # with MNLI (and AX) it is read as before
    spec = specs.glue_spec("mnli", tiny_tokenizer, CFG, test_files=[tmp_path / "diagnostic.tsv"], training=False)
    spec.eval_sets[0].write({"logits": np.eye(3)[[2, 1, 0, 2]]}, tmp_path)
    assert (tmp_path / "submission" / "AX.tsv").read_text().splitlines()[1:] == \
        ["0\tneutral", "1\tentailment", "2\tcontradiction", "3\tneutral"]


def test_the_diagnostic_set_beside_mnli_dev_is_scored_with_its_matthews_correlation(tiny_tokenizer, tmp_path):
    """`finetune/evaluate glue --task mnli --dev dev_matched.tsv diagnostic-full.tsv` scored the diagnostic set
    with accuracy alone; `--task ax` scores it with R3 (multi-class Matthews corr.): now both do."""
    from sklearn.metrics import matthews_corrcoef

    full, gold = _diagnostic_full(tmp_path / "diagnostic-full.tsv")
    spec = specs.glue_spec("mnli", tiny_tokenizer, CFG, dev_files=[_mnli_dev(tmp_path / "dev_matched.tsv"), full],
                           training=False)
    preds = [0, 1, 1, 1, 0, 2]
    scored = spec.eval_sets[1].score({"logits": np.eye(3)[preds]})
    assert list(scored) == ["mcc", "accuracy"]
    assert scored["mcc"] == pytest.approx(matthews_corrcoef([MNLI.index(g) for g in gold], preds))
    assert list(spec.eval_sets[0].score({"logits": np.eye(3)[preds]})) == ["accuracy"]   # MNLI's own: accuracy


def test_an_mnli_test_file_given_to_ax_is_refused(tmp_path):
    """`predict glue --task ax --test test_matched.tsv` read the MNLI test file in diagnostic.tsv's layout (index,
    sentence1, sentence2): its promptID and pairID columns were the texts, and AX.tsv held their predictions."""
    with pytest.raises(DataError, match=r"test_matched\.tsv:1: 10 tab-separated fields, GLUE's diagnostic\.tsv has 3 "
                                        r"\(index, sentence1, sentence2\); an MNLI test file is predicted with "
                                        r"--task mnli"):
        glue.read_examples("ax", _mnli_test(tmp_path / "test_matched.tsv"), has_labels=False)
    # a headerless one too, at its first row; diagnostic.tsv itself (trailing empty fields included) is read
    headerless = _tsv(tmp_path / "plain.tsv", [[0, 100, "0n", "fiction", "( a )", "( b )", "x", "y", W[0], W[1]]])
    with pytest.raises(DataError, match=r"plain\.tsv:1: 10 tab-separated fields"):
        glue.read_examples("ax", headerless, has_labels=False)
    ok = _tsv(tmp_path / "diagnostic.tsv", [["index", "sentence1", "sentence2"], [0, W[0], W[1], ""]])
    assert [(e.guid, e.text_a, e.text_b) for e in glue.read_examples("ax", ok, has_labels=False)] == \
        [("0", W[0], W[1])]


def test_the_labelled_diagnostic_set_given_to_predict_is_read_in_its_own_layout(tmp_path):
    """diagnostic-full.tsv as `--test`: its header line (Lexical Semantics, ...) was read as a row, and the category
    columns (Predicate-Argument Structure, Logic) were the texts. Now the header is known and the premise and
    hypothesis are predicted, rows numbered 0, 1, ... as diagnostic.tsv numbers them."""
    full, _ = _diagnostic_full(tmp_path / "diagnostic-full.tsv")
    examples = glue.read_examples("ax", full, has_labels=False)
    assert [(e.guid, e.text_a, e.text_b) for e in examples] == [(str(i), W[i], W[5 - i]) for i in range(6)]


# ----------------------------------------------------------------------------------------------- malformed rows

def test_a_malformed_training_row_names_skip_bad_rows(tiny_tokenizer, tmp_path):
    """QQP's older train.tsv has questions cut in two by a line break (a 4-field line, then a 3-field one, as GLUE's
    own issue tracker reports): the error names the option that skips and counts such rows."""
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    train = _tsv(tmp_path / "train.tsv", [header, [0, 1, 2, "good film", "bad plot", 0], [1, 3, 4, "the film"],
                                          ['"', "was the plot good?", 1], [2, 5, 6, "great film", "the plot", 1]])
    with pytest.raises(DataError, match=r"train\.tsv:3: 4 tab-separated fields, qqp needs 6; --skip-bad-rows skips "
                                        r"such training and dev rows"):
        specs.glue_spec("qqp", tiny_tokenizer, CFG, train_file=train)
    spec = specs.glue_spec("qqp", tiny_tokenizer, CFG, train_file=train, skip_bad_rows=True)
    assert len(spec.train) == 2 and spec.problems.counts["malformed row skipped"] == 2
    # a test row is never skipped, and the hint is not given for it
    test = _tsv(tmp_path / "test.tsv", [["id", "question1", "question2"], [0, "the film"]])
    with pytest.raises(DataError) as info:
        specs.glue_spec("qqp", tiny_tokenizer, CFG, test_files=[test], training=False)
    assert "--skip-bad-rows" not in str(info.value)


# ------------------------------------------------------------------------------------------------------- WNLI

def test_wnlis_adversarial_dev_set_is_said_when_fine_tuning(tiny_tokenizer):
    """The real WNLI files (train.tsv + val.tsv, GLUE's train re-split): 46 of the 70 val pairs share their first
    sentence only with training pairs of the other label, as in GLUE's adversarial dev set; the warning says so and
    gives the training majority class's score there (35 of 70)."""
    folder = shared_path("glue", "WNLI")
    spec = specs.glue_spec("wnli", tiny_tokenizer, CFG, data_dir=folder)
    said = [line for line in spec.warnings if "adversarial" in line]
    assert len(said) == 1
    assert said[0].startswith("val.tsv: 46 of its 70 pairs share their first sentence with training pairs of the "
                              "other label only") and "majority class (0) scores 50.0% on it" in said[0]
    # another task's files say nothing of the kind
    rte = specs.glue_spec("rte", tiny_tokenizer, CFG, train_file=shared_path("glue", "RTE", "val.tsv"),
                          dev_files=[shared_path("glue", "RTE", "val.tsv")])
    assert not [line for line in rte.warnings if "adversarial" in line]


# ------------------------------------------------------------------------------------------ pure checks (held)

def _evaluate_glue(task: str, labels, preds) -> dict:
    """The `evaluate` library's glue metric (metrics/glue/glue.py), as it computes each configuration."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    labels, preds = np.asarray(labels), np.asarray(preds)
    if task == "cola":
        return {"matthews_correlation": matthews_corrcoef(labels, preds)}
    if task == "stsb":
        return {"pearson": float(pearsonr(preds, labels)[0]), "spearmanr": float(spearmanr(preds, labels)[0])}
    accuracy = float((preds == labels).mean())
    if task in ("mrpc", "qqp"):
        return {"accuracy": accuracy, "f1": float(f1_score(y_true=labels, y_pred=preds))}
    return {"accuracy": accuracy}


@pytest.mark.parametrize("task, path", [
    ("cola", ("CoLA", "val.tsv")), ("sst2", ("SST-2", "dev.tsv")), ("mrpc", ("MRPC", "msr_paraphrase_train.txt")),
    ("stsb", ("STS-B", "dev.tsv")), ("rte", ("RTE", "val.tsv")), ("wnli", ("WNLI", "val.tsv")),
])
def test_every_tasks_metrics_are_the_evaluate_librarys(task, path):
    """On the real dev labels with noisy predictions (MRPC's labels also stand for QQP's, RTE's for QNLI's and
    MNLI's), each task's metrics equal the `evaluate` glue metric's; the two-metric tasks' GLUE score is the mean
    of the two (GLUE's task score: acc_and_f1, corr)."""
    rng = np.random.default_rng(1)
    gold = glue.label_ids(glue.get_task(task), glue.read_examples(task, shared_path("glue", *path)))
    if task == "stsb":
        preds = np.asarray(gold) + rng.normal(0, 1.0, len(gold))
    else:
        preds = np.where(rng.random(len(gold)) < 0.75, gold, 1 - np.asarray(gold))
    for name in {"mrpc": ("mrpc", "qqp"), "rte": ("rte", "qnli", "mnli")}.get(task, (task,)):
        ours, theirs = metrics.glue_metrics(name, gold, preds), _evaluate_glue(name, gold, preds)
        renamed = {"matthews_correlation": "mcc", "spearmanr": "spearman"}
        assert {renamed.get(k, k): ours[renamed.get(k, k)] for k in theirs} == pytest.approx(
            {renamed.get(k, k): v for k, v in theirs.items()}), name
        if name in ("mrpc", "qqp"):
            assert ours["acc_and_f1"] == pytest.approx((theirs["accuracy"] + theirs["f1"]) / 2)
        if name == "stsb":
            assert ours["corr"] == pytest.approx((theirs["pearson"] + theirs["spearmanr"]) / 2)
    # three classes (MNLI) and AX's R3: sklearn's multi-class Matthews correlation (Gorodkin's R_K)
    from sklearn.metrics import matthews_corrcoef
    three_gold, three_preds = rng.integers(0, 3, 200), rng.integers(0, 3, 200)
    assert metrics.glue_metrics("ax", three_gold, three_preds)["mcc"] == pytest.approx(
        matthews_corrcoef(three_gold, three_preds))


# google-research/albert run_glue.sh: run_task TASK warmup lr steps save batch (and --max_seq_length=512)
RUN_GLUE_SH = {"SST-2": (1256, 1e-5, 20935, 32), "MNLI": (1000, 3e-5, 10000, 128), "CoLA": (320, 1e-5, 5336, 16),
               "QNLI": (1986, 1e-5, 33112, 32), "QQP": (1000, 5e-5, 14000, 128), "RTE": (200, 3e-5, 800, 32),
               "STS-B": (214, 2e-5, 3598, 16), "MRPC": (200, 2e-5, 800, 32)}


def test_recipe_paper_is_albert_run_glue_sh_for_every_task():
    """`--recipe paper` per task (GLUE's spelling, as run_glue.sh names them) against run_glue.sh; AX takes MNLI's."""
    from albertlm.tasks.options import GlueOptions
    from albertlm.tasks.recipes import recipe
    from albertlm.tasks.registry import paper_recipe_name

    for task, (warmup, lr, steps, batch) in RUN_GLUE_SH.items():
        cfg = recipe(paper_recipe_name("glue", GlueOptions(task=task)))
        assert (cfg.optim.warmup_steps, cfg.optim.lr, cfg.train.max_steps, cfg.train.batch_size,
                cfg.max_seq_length) == (warmup, lr, steps, batch, 512), task
    assert paper_recipe_name("glue", GlueOptions(task="AX")) == "mnli"
