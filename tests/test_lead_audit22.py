"""The lead's follow-ups of session 22's audits (metric order on stdout, summaries, model cards)."""
from __future__ import annotations

import json

import pytest

from conftest import shared_path
from test_cluster_audit22 import corpus  # noqa: F401  (a fixture)
from test_unk_audit22 import korean  # noqa: F401  (a fixture)

from albertlm.cli.main import main


def test_evaluate_prints_sts_b_metrics_in_glues_order(tmp_path, capsys):
    """`evaluate glue --predictions` printed STS-B's metrics sorted by name (corr, pearson, spearman) while
    `finetune` logged them in GLUE's order (pearson, spearman, corr)."""
    dev = shared_path("glue/STS-B/dev.tsv")
    rows = [line.rstrip("\n").split("\t") for line in dev.read_text(encoding="utf-8").splitlines()[1:]]
    (tmp_path / "p.tsv").write_text("index\tprediction\n" + "".join(f"{r[0]}\t{float(r[-1]) / 2 + 1}\n" for r in rows))
    assert main(["evaluate", "glue", "--task", "stsb", "--data-dir", str(dev.parent),
                 "--predictions", str(tmp_path / "p.tsv")]) == 0
    out = capsys.readouterr().out
    assert list(json.loads(out[out.index("{"):])) == ["pearson", "spearman", "corr"]


def test_the_run_summary_shows_a_count_as_a_whole_number():
    """The step's eval line printed RACE's num_middle as 11, the run's summary still as 11.0000."""
    from albertlm.training.metrics import summary_lines

    lines = summary_lines({"status": "done", "step": 4, "first_step": 1, "total_steps": 4, "wall_s": 1.0,
                           "examples_trained": 8, "tokens_trained": 64, "tokens_per_s": 64.0, "train_s": 1.0,
                           "eval_step": 4, "eval": {"accuracy": 0.5, "num_middle": 11}, "checkpoint": None})
    line = next(line for line in lines if line.strip().startswith("evaluation"))
    assert "num_middle 11" in line and "11.0000" not in line and "accuracy 0.5000" in line


def test_a_model_card_reads_a_null_score_in_metrics_jsonl(tmp_path):
    """metrics.jsonl holds null for a NaN score now; the model card's facts formatted every value with :.4f
    and raised TypeError on it."""
    from albertlm.interop.hf import run_facts

    step = tmp_path / "run" / "checkpoints" / "step_2"
    step.mkdir(parents=True)
    (tmp_path / "run" / "metrics.jsonl").write_text(
        json.dumps({"step": 2, "split": "eval", "time": 0, "pearson": None, "accuracy": 0.25}) + "\n")
    text = " ".join(sum(run_facts(step).values(), []))
    assert "pearson None" in text or "pearson null" in text
    assert "accuracy 0.2500" in text


def test_an_ablation_job_puts_the_callers_thread_count_back(tmp_path, monkeypatch):
    """`runner.run_job` set torch's thread count to the suite's `threads` and left it so in the calling
    process (a notebook running a job went on with one thread)."""
    import dataclasses

    import torch
    from test_ablate_audit13 import _suite

    from albertlm.experiments import runner

    suite = dataclasses.replace(_suite(tmp_path, [{"name": "a"}]), threads=1)
    job = runner.plan_jobs(suite.runs)[0]
    seen = []

    def pretrain_run(suite, run, run_dir):
        seen.append(torch.get_num_threads())
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "pretrain_run", pretrain_run)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with pytest.raises(KeyboardInterrupt):
            runner.run_job(suite, job)
        assert seen == [1] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_a_part_that_read_other_text_is_refused_when_built_into_a_shared_out(corpus, tmp_path, capsys):
    """Parts built from other text were refused only when read (`shards.corpus_difference`); building one into
    an --out holding the other parts was accepted. It is refused after its build, and --out is left as it was."""
    from conftest import assert_one_error
    from test_cluster_audit22 import _part

    out = tmp_path / "data"
    _part([corpus], out, 0)
    before = sorted(p.name for p in out.iterdir())
    half = tmp_path / "half.txt"
    half.write_text("\n".join(corpus.read_text().splitlines()[:60]) + "\n")
    capsys.readouterr()
    code = main(["data", "build", "--input", str(half), "--out", str(out), "--max-seq-length", "32",
                 "--dupe-factor", "1", "--chunk-chars", "2000", "--no-progress", "--num-shards", "2",
                 "--shard-index", "1", "--tokenizer", str(shared_path("spm", "albert-base-v2_spiece.model"))])
    assert_one_error(capsys, code, "meta.part-00000-of-00002.json", "read another corpus", "the same --input")
    assert sorted(p.name for p in out.iterdir()) == before


def test_classify_regression_predictions_are_written_in_full(tmp_path):
    """`finetune classify --regression` wrote dev predictions to 4 decimals, so `evaluate classify --predictions`
    on them gave another Pearson than the run's (0.2128 against 0.2021)."""
    import numpy as np

    from albertlm.tasks.classify import TextExample
    from albertlm.tasks.specs import _classify_set

    examples = [TextExample(str(i), f"text {i}", None, float(i), f"f:{i}") for i in range(3)]
    logits = np.array([[0.012345678], [1.5], [2.00001234]], dtype=np.float64)
    _classify_set("dev", examples, [], None, labelled=True).write({"logits": logits}, tmp_path)
    rows = [line.split("\t") for line in (tmp_path / "dev_predictions.tsv").read_text().splitlines()[1:]]
    assert [float(value) for _, value in rows] == logits[:, 0].tolist()
    assert rows[1][1] == "1.5000"


def test_an_empty_parts_summary_says_why_it_holds_nothing(corpus, tmp_path, capsys):
    """An empty part's summary read `masked 0.00% of 0 tokens; labels ; ...`."""
    from test_cluster_audit22 import _part

    capsys.readouterr()
    _part([corpus], tmp_path / "empty", 39, "--num-shards", "40")
    err = capsys.readouterr().err
    assert "labels ;" not in err and "masked 0.00% of 0" not in err, err
    assert "owns none of the corpus's chunks" in err


def test_tokenizer_encode_tells_decomposed_hangul_to_convert_to_nfc(korean, monkeypatch, capsys):
    """`tokenizer encode` on macOS-decomposed Korean said only "N [UNK] token(s) ... characters the vocabulary does
    not hold", where data build and fine-tuning now say to convert the text to NFC; NFC text is not told so."""
    import unicodedata

    from test_tokenizer_cli import _run
    from test_unk_audit22 import _kornli

    text = "\n".join(row[0] for row in _kornli(8)) + "\n"
    vocab = str(korean / "model")
    _, _, err = _run(["tokenizer", "encode", "-t", vocab], monkeypatch, capsys, unicodedata.normalize("NFD", text))
    assert "[UNK] token(s)" in err and "convert the text to NFC" in err, err
    _, _, err = _run(["tokenizer", "encode", "-t", vocab], monkeypatch, capsys, text + "\U0001F600\n")
    assert "[UNK] token(s)" in err and "NFC" not in err, err
