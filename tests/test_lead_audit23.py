"""Lead follow-ups of the twenty-third session's audits."""
from __future__ import annotations

import pytest

from albertlm.model import fast_paths, fused
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks import finetune
from albertlm.tokenization import load_tokenizer
from conftest import save_tiny_pretrained
from test_fast_paths import pretend_cpu
from test_numerics_audit19 import classifier_on_a_dev_file


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def test_evaluate_runs_the_kernels_finetuning_ran(tmp_path, monkeypatch):
    """`finetune` evaluates its dev set on the model `prepare_model` prepared (the CPU fast paths where this CPU
    gets them); `predict` / `evaluate --model RUN/best` loaded the plain model, whose bf16 rounds differently, and
    a near tie flipped (a SQuAD v2 run's recorded best exact 42.86 read 50.0). Both now run the same kernels."""
    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, "AVX512", False)   # fp32 takes the fused path on any CPU with oneDNN
    model_dir = tmp_path / "pretrained"
    model_dir.mkdir()
    save_tiny_pretrained(model_dir)
    spec, head, tokenizer, cfg = classifier_on_a_dev_file(model_dir, tmp_path, "fp32")
    seen = []
    real_predict = finetune.predict
    monkeypatch.setattr(finetune, "predict", lambda model, *a, **k: seen.append(model) or real_predict(model, *a, **k))
    metrics = finetune.run_evaluation(spec, head, tokenizer, cfg, None)
    assert 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    assert seen, "run_evaluation predicted nothing"
    swapped = [type(m).__name__ for m in seen[0].modules() if isinstance(m, fast_paths.FusedFeedForward)]
    assert swapped, "evaluate ran the plain model, not the one fine-tuning prepared"


# ------------------------------------------------------------------- SQuAD: the version the data shows

def _squad_dev_spec(version: str, gold):
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import specs

    return specs.squad_spec(version, _albert_tokenizer(), FinetuneConfig(max_seq_length=128), dev_file=gold,
                            training=False)


def _albert_tokenizer():
    from conftest import shared_path

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def test_squad_without_version_takes_the_files_own_and_writes_the_null_in_nbest(tmp_path):
    """`--version` defaulted to 2.0: a v1.1 user who left it out was trained and scored as v2.0 (null answers, a
    tuned threshold). With none given the files' own version is used, and where they show none it is asked for;
    a v2.0 run's nbest_predictions.json lists the null answer, as BERT's does."""
    import json

    import numpy as np

    from albertlm.errors import UserError
    from albertlm.tasks.registry import paper_recipe_name
    from albertlm.tasks.options import SquadOptions
    from conftest import shared_path
    from test_squad_audit23 import _v11

    v11 = _v11(tmp_path / "v11.json")
    v20 = shared_path("squad", "dev-v2.0-small.json")
    assert _squad_dev_spec("", v11).info["version"] == "1.1"
    spec = _squad_dev_spec("", v20)
    assert spec.info["version"] == "2.0"
    assert SquadOptions().version == ""
    assert paper_recipe_name("squad", SquadOptions(dev=str(v11))) == "squad1.1"
    assert paper_recipe_name("squad", SquadOptions(dev=str(v20))) == "squad2.0"
    new = tmp_path / "new.json"   # questions without answers and no version: which one is asked
    data = json.loads(v11.read_text(encoding="utf-8"))
    data.pop("version")
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa["answers"] = []
    new.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(UserError, match="give --version 1.1 or --version 2.0"):
        _squad_dev_spec("", new)
    # the run's n-best file: v2.0 lists "" with the [CLS] score, v1.1 spans only
    for gold, has_null in ((v20, True), (v11, False)):
        spec = _squad_dev_spec("", gold)
        (dev,) = spec.eval_sets
        rng = np.random.default_rng(0)
        out = {key: [rng.normal(size=len(f.input_ids)) for f in dev.features] for key in ("start_logits", "end_logits")}
        out_dir = tmp_path / f"out_{has_null}"
        out_dir.mkdir()
        dev.write(out, out_dir)
        nbest = json.loads((out_dir / "nbest_predictions.json").read_text(encoding="utf-8"))
        assert all(("" in [e["text"] for e in entries]) == has_null for entries in nbest.values())


def test_predict_into_an_out_that_is_a_file_is_refused_before_the_work(tmp_path, capsys):
    """`predict classify --out FILE` ran the whole prediction, then stopped with the raw `[Errno 17] File exists`."""
    from albertlm.cli.main import main

    model_dir = tmp_path / "pretrained"
    model_dir.mkdir()
    save_tiny_pretrained(model_dir)
    head = tmp_path / "head"
    AlbertForSequenceClassification.from_pretrained(model_dir, num_labels=2).save_pretrained(head)
    (head / "vocab.txt").write_text((model_dir / "vocab.txt").read_text())
    (tmp_path / "test.tsv").write_text("text\ngood film\nbad plot\n")
    taken = tmp_path / "taken.txt"
    taken.write_text("keep me\n")
    code = main(["predict", "classify", "--model", str(head), "--test", str(tmp_path / "test.tsv"),
                 "--labels", "neg,pos", "--out", str(taken), "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code != 0 and len(err) == 1 and "exists and is not a directory" in err[0], err
    assert taken.read_text() == "keep me\n"


def test_finetune_resume_with_another_model_is_refused(tmp_path, capsys):
    """`finetune --resume --model B` on a run started from A went on silently (B's tokenizer fed the saved weights
    other ids, run_config named B while best/ kept A's tokenizer). Refused in one line; the same model resumes."""
    import shutil

    from conftest import assert_one_error
    from test_classify_audit22 import _finetune

    a = tmp_path / "model_a"
    a.mkdir()
    save_tiny_pretrained(a)
    b = tmp_path / "model_b"
    shutil.copytree(a, b)
    out = tmp_path / "run"
    assert _finetune(a, tmp_path, out) == 0, capsys.readouterr().err
    capsys.readouterr()
    code = _finetune(b, tmp_path, out, "--resume", "--max-steps", "3")
    assert_one_error(capsys, code, "--resume", "started from --model", str(b))
    assert _finetune(a, tmp_path, out, "--resume", "--max-steps", "3") == 0, capsys.readouterr().err


def test_the_diagnostic_set_beside_mnli_is_scored_from_a_predictions_file(tmp_path, capsys):
    """`evaluate glue --task mnli --dev diagnostic-full.tsv --predictions F` read the gold file as MNLI's ("8
    tab-separated fields, mnli needs 10"); it is scored as `--task ax` scores it, with the Matthews correlation."""
    import json

    from sklearn.metrics import matthews_corrcoef

    from albertlm.cli.main import main
    from test_glue_audit17 import _diagnostic_full

    full, gold = _diagnostic_full(tmp_path / "diagnostic-full.tsv")
    guess = ["contradiction", "entailment", "entailment", "entailment", "neutral", "neutral"]
    preds = tmp_path / "diagnostic-full_predictions.tsv"
    preds.write_text("index\tprediction\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(guess)))
    code = main(["evaluate", "glue", "--task", "mnli", "--dev", str(full), "--predictions", str(preds)])
    out, err = capsys.readouterr()
    assert code == 0, err
    scored = json.loads(out)
    assert scored["mcc"] == pytest.approx(matthews_corrcoef(gold, guess))
    assert scored["accuracy"] == pytest.approx(sum(g == p for g, p in zip(gold, guess)) / len(gold))
