"""Fine-tuning audit 18 (GLUE end to end, as a new user runs it).

`--skip-bad-rows` no longer drops a row of a test file (the submission missed that row, which the GLUE server
rejects): the row is an error that says why. A row with more fields than its file's header (a tab inside a
text) is malformed, not read with a text cut at the tab. STS-B's dev predictions keep the scores the metrics
saw (rounded to 3 decimals, scoring the file gave other numbers than the run). A fine-tuning stopped by its
time budget writes metrics.json (status "budget", the best so far), train_log.json and the test predictions,
and prints its result (it left none of them). MRPC trained on the original msr_paraphrase_train.txt (GLUE's
train and dev sets in one file) says it has no dev set, and leaves a given dev set's pairs out of training."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import glue, scoring
from albertlm.tasks.metrics import glue_metrics
from albertlm.tasks.options import GlueOptions
from albertlm.tasks.specs import glue_spec
from albertlm.tasks.tables import DataError, Problems
from conftest import save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit18_finetune"))


def _tokenizer(model: Path):
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(model)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- malformed rows

def test_skip_bad_rows_never_drops_a_test_row(pretrained, tmp_path):
    """A malformed test row was skipped under --skip-bad-rows and the submission lacked its index (rows 0, 2 of
    0, 1, 2): the GLUE server rejects such a file. Now the row stops the run, naming it and why; training and
    dev rows are still skipped and counted."""
    test = _write(tmp_path / "test.tsv", "index\tsentence1\tsentence2\n0\tgood film\tbad plot\n1\tonly one field\n"
                                         "2\tthe film\tthe plot\n")
    with pytest.raises(DataError, match=r"test\.tsv:3: 2 tab-separated fields.*--skip-bad-rows skips training and "
                                        r"dev rows only"):
        glue.read_examples("rte", test, has_labels=False, problems=Problems())
    train = _write(tmp_path / "train.tsv", RTE_HEADER + "0\tgood film\tgreat film\tentailment\n1\tbroken\n"
                                           "2\tbad plot\tgood film\tnot_entailment\n")
    cfg = FinetuneConfig(max_seq_length=16)
    with pytest.raises(DataError, match=r"test\.tsv:3"):
        glue_spec("rte", _tokenizer(pretrained), cfg, train_file=train, test_files=[test], skip_bad_rows=True)
    spec = glue_spec("rte", _tokenizer(pretrained), cfg, train_file=train, skip_bad_rows=True)
    assert len(spec.train) == 2 and spec.problems.counts["malformed row skipped"] == 1


def test_a_row_with_more_fields_than_its_header_is_malformed(tmp_path):
    """RTE's label is its last field: a tab inside sentence1 made the row's texts 'A man' and 'runs.' (the real
    second sentence dropped) without a word. Now the row is an error, or skipped and counted with
    --skip-bad-rows; a header-less file and rows as wide as the header read as before."""
    path = _write(tmp_path / "dev.tsv", RTE_HEADER + "0\tA man\truns.\tA person moves.\tentailment\n"
                                        "1\tgood film\tbad plot\tnot_entailment\n")
    with pytest.raises(DataError, match=r"dev\.tsv:2: 5 tab-separated fields, the header line has 4"):
        glue.read_examples("rte", path)
    problems = Problems()
    examples = glue.read_examples("rte", path, problems=problems)
    assert [(e.text_a, e.text_b) for e in examples] == [("good film", "bad plot")]
    assert problems.examples["malformed row skipped"] == [f"{path}:2"]
    # a trailing tab (an empty field past the header's) cuts no text: read as before
    ax = _write(tmp_path / "diagnostic-full.tsv", "Lexical Semantics\tPredicate-Argument Structure\tLogic\t"
                "Knowledge\tDomain\tPremise\tHypothesis\tLabel\n\t\t\t\tNews\tgood film\tbad plot\tneutral\t\n")
    assert [(e.text_a, e.label) for e in glue.read_examples("ax", ax)] == [("good film", "neutral")]
    # the real files read whole
    assert len(glue.read_examples("rte", shared_path("glue", "RTE", "train.tsv"))) == 2127
    assert len(glue.read_examples("stsb", shared_path("glue", "STS-B", "dev.tsv"))) == 1500


# ----------------------------------------------------------------------------------- STS-B predictions

def test_stsb_dev_predictions_score_as_the_run_scored_them(tmp_path):
    """An early STS-B model's scores lie close together: written with 3 decimals they were nearly all one value
    and `evaluate --predictions` reported other correlations than the run (0.0 for -0.009). The dev file keeps
    them in full now (3 decimals where those are exact); the submission keeps GLUE's 3 decimals."""
    from scipy.stats import pearsonr, spearmanr

    dev = shared_path("glue", "STS-B", "dev.tsv")
    examples = glue.read_examples("stsb", dev)
    gold = glue.label_ids(glue.get_task("stsb"), examples)
    rng = np.random.default_rng(0)
    preds = (0.012 + 0.0004 * np.asarray(gold) + rng.normal(0, 0.0003, len(gold))).astype(np.float32)
    run = glue_metrics("stsb", gold, preds)
    assert run["pearson"] == pytest.approx(pearsonr(preds.astype(np.float64), gold)[0], abs=1e-12)
    assert run["spearman"] == pytest.approx(spearmanr(preds, gold)[0], abs=1e-12)
    task = glue.get_task("stsb")
    glue.write_submission(task, examples, preds, tmp_path / "dev_predictions.tsv")
    scored = scoring.score_glue(GlueOptions(task="stsb", dev=[str(dev)]), str(tmp_path / "dev_predictions.tsv"))
    assert scored["pearson"] == pytest.approx(run["pearson"], abs=1e-12)
    assert scored["spearman"] == pytest.approx(run["spearman"], abs=1e-12)
    glue.write_submission(task, examples, preds, tmp_path / "STS-B.tsv", by_guid=True)
    assert all(len(line.split("\t")[1].split(".")[1]) == 3
               for line in (tmp_path / "STS-B.tsv").read_text().splitlines()[1:])
    glue.write_submission(task, examples[:2], np.array([1.25, -0.4]), tmp_path / "exact.tsv")
    assert (tmp_path / "exact.tsv").read_text().splitlines()[1:] == ["0\t1.250", "1\t-0.400"]


# --------------------------------------------------------------------------------------- time budget

def test_a_run_stopped_by_its_time_budget_leaves_its_results(pretrained, tmp_path, capsys):
    """`--train.max_minutes` stopped the run after evaluating and saving, but metrics.json, train_log.json and
    the submission were never written and nothing was printed: a GPU lent for 15 minutes gave no result file.
    Now they are written from the best model so far, marked "budget" with the step reached; `--resume` to the
    end replaces them."""
    rows = [("good film", "great film", "entailment"), ("bad plot", "good film", "not_entailment")] * 6
    train = _write(tmp_path / "train.tsv", RTE_HEADER + "".join(f"{i}\t{a}\t{b}\t{y}\n"
                                                                for i, (a, b, y) in enumerate(rows)))
    dev = _write(tmp_path / "dev.tsv", train.read_text())
    test = _write(tmp_path / "test.tsv", "index\tsentence1\tsentence2\n0\tgood film\tbad plot\n7\tthe film\tthe plot\n")
    out = tmp_path / "run"
    args = ["finetune", "glue", "--task", "rte", "--train", str(train), "--dev", str(dev), "--test", str(test),
            "--model", str(pretrained), "--out", str(out), "--max-steps", "6", *QUICK]
    capsys.readouterr()
    assert main([*args, "--train.max_minutes", "1e-9"]) == 0           # used up after the first step
    printed = _printed(capsys.readouterr().out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "budget" and metrics["step"] == 1 and metrics["total_steps"] == 6
    assert metrics["best"]["step"] == 1 and "accuracy" in metrics["best"]["dev"]
    assert printed["status"] == "budget" and printed["step"] == 1 and printed["best"] == metrics["best"]
    assert json.loads((out / "train_log.json").read_text())["losses"]
    assert [line.split("\t")[0] for line in (out / "submission" / "RTE.tsv").read_text().splitlines()] == \
        ["index", "0", "7"]
    assert main([*args, "--resume", "--train.max_minutes", "0"]) == 0
    printed = _printed(capsys.readouterr().out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "done" and metrics["step"] == 6 and "status" not in printed


def _printed(out: str) -> dict:
    """The result JSON `finetune` prints last on stdout (after its log lines)."""
    return json.loads(out[out.rfind("\n{\n") + 1:] if not out.startswith("{") else out)


# ----------------------------------------------------------------------------- MRPC's original files

def _msr_dev(path: Path, msr: Path, rows: int) -> Path:
    """A dev.tsv in GLUE's MRPC layout holding the first `rows` pairs of msr_paraphrase_train.txt, as GLUE cuts
    its dev.tsv out of that file."""
    lines = msr.read_text(encoding="utf-8-sig").splitlines()
    return _write(path, "\n".join(lines[: rows + 1]) + "\n")


def test_mrpc_from_msr_paraphrase_train_says_it_has_no_dev_set(pretrained, tmp_path):
    """msr_paraphrase_train.txt is GLUE's MRPC train and dev sets together. Without a dev file the run said only
    "no labelled dev set"; now it says why and what to give. With GLUE's dev pairs as --dev, they trained too
    (the dev scores were not held out): they are left out of training now, counted and said."""
    from albertlm.tasks.specs import MSR_DEV_PAIR

    msr = shared_path("glue", "MRPC", "msr_paraphrase_train.txt")
    tokenizer, cfg = _tokenizer(pretrained), FinetuneConfig(max_seq_length=16)
    alone = glue_spec("mrpc", tokenizer, cfg, data_dir=msr.parent)
    assert len(alone.train) == 4076
    def told(spec) -> list[str]:   # the tiny test tokenizer knows few English words: its [UNK] warning aside
        return [line for line in spec.warnings if "unknown token" not in line]

    said = told(alone)
    assert len(said) == 1 and "no dev file was given" in said[0] and "--dev" in said[0]
    dev = _msr_dev(tmp_path / "dev.tsv", msr, 40)
    spec = glue_spec("mrpc", tokenizer, cfg, train_file=msr, dev_files=[dev])
    assert len(spec.train) == 4076 - 40 and spec.problems.counts[MSR_DEV_PAIR] == 40
    assert "40 of the 4076 pairs" in told(spec)[0]
    # transformers' tokenized copy of GLUE's dev rows has other texts: the pairs are known by their ids
    fixture = shared_path("glue_samples", "MRPC", "dev.tsv")
    spec = glue_spec("mrpc", tokenizer, cfg, train_file=msr, dev_files=[fixture])
    assert spec.problems.counts[MSR_DEV_PAIR] == len(glue.read_examples("mrpc", fixture))
    # GLUE's own train.tsv (any file but the original one) is trained on as given
    train = _msr_dev(tmp_path / "train.tsv", msr, 60)
    spec = glue_spec("mrpc", tokenizer, cfg, train_file=train, dev_files=[dev])
    assert len(spec.train) == 60 and not told(spec)
