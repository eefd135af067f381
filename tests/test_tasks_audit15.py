"""Fine-tuning audit 15 (the task side): a labelled GLUE file given to predict is read in its own layout (CoLA's
and SST-2's were read in the test layout: the model saw the label column, the submission was numbered by the
source or the sentence); a first row with a bad label is an error, not a header dropped without a word;
classify's id column and label set are checked; scoring a predictions file refuses one made for another file
and a non-numeric regression prediction (no traceback); SQuAD counts a training answer that no window holds,
records the tuned null threshold beside the best model and applies it when predicting on a file without
answers; a --max-seq-length beyond the model's position embeddings is refused before the model loads; another
tokenizer than the fine-tuned model's is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks import classify, glue, scoring, squad
from albertlm.tasks.options import ClassifyOptions, GlueOptions
from albertlm.tasks.tables import DataError, Problems
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK, _rows  # the tiny fine-tuning flags and a jsonl classify set

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A tiny pretrained model (vocab.txt of TINY_WORDS, 64 positions) and a classify run fine-tuned on it."""
    root = tmp_path_factory.mktemp("audit15_tasks")
    (root / "model").mkdir()
    model = save_tiny_pretrained(root / "model")
    data = _rows(root / "d.jsonl")
    assert main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--out", str(root / "ft"), "--max-steps", "1", *QUICK]) == 0
    return {"model": model, "ft": root / "ft", "data": data, "root": root}


# ------------------------------------------------------------------------------------------------- GLUE

def test_a_labelled_glue_file_to_predict_on_is_read_in_its_own_layout(tmp_path):
    """CoLA's dev file (`source<TAB>label<TAB>*<TAB>sentence`, no header) and SST-2's (`sentence<TAB>label`) read
    for prediction: the texts are the sentences (they were the label column) and the rows are numbered."""
    for task, parts in (("cola", ("glue", "CoLA", "val.tsv")), ("sst2", ("glue", "SST-2", "dev.tsv"))):
        path = shared_path(*parts)
        labelled = glue.read_examples(task, path, True)
        unlabelled = glue.read_examples(task, path, False)
        assert [e.text_a for e in unlabelled] == [e.text_a for e in labelled]
        assert [e.guid for e in unlabelled[:3]] == ["0", "1", "2"]
        assert all(e.label is None for e in unlabelled)
    assert glue.read_examples("cola", shared_path("glue", "CoLA", "val.tsv"), False)[0].text_a == \
        "Bill broke the bathtub."
    # a file in the test layout is still read in it, with and without its header
    for content in ("index\tsentence\n0\tThe cat sat.\n1\tDogs run.\n", "0\tThe cat sat.\n1\tDogs run.\n"):
        for task in ("cola", "sst2"):
            path = tmp_path / "test.tsv"
            path.write_text(content)
            assert [(e.guid, e.text_a) for e in glue.read_examples(task, path, False)] == \
                [("0", "The cat sat."), ("1", "Dogs run.")]


@pytest.mark.parametrize("task, rows, phrase", [
    ("cola", "gj04\t2\t\tThe car honked.\ngj04\t1\t\tBill broke the bathtub.\n", "label '2'"),
    ("rte", "0\tA man sleeps.\tA man rests.\tentailed\n1\tA dog.\tA cat.\tnot_entailment\n", "label 'entailed'"),
    ("stsb", "0\tg\tf\t2012\t1\ts\ts\tA man.\tA dog.\tn/a\n1\tg\tf\t2012\t2\ts\ts\tA man.\tA man.\t5.0\n",
     "score 'n/a'"),
])
def test_a_first_row_with_a_bad_label_is_an_error_not_a_header(task, rows, phrase, tmp_path):
    """The first row's label cell not being a label made it a header, dropped without a word (and a one-row
    file 'holds only a header line')."""
    path = tmp_path / "train.tsv"
    path.write_text(rows)
    with pytest.raises(DataError) as info:
        glue.read_examples(task, path, True)
    assert f"{path}:1" in str(info.value) and phrase in str(info.value)
    # real headers are still headers
    assert len(glue.read_examples("rte", shared_path("glue", "RTE", "train.tsv"))) == 2127
    assert len(glue.read_examples("stsb", shared_path("glue", "STS-B", "dev.tsv"))) == 1500
    assert len(glue.read_examples("sst2", shared_path("glue", "SST-2", "dev.tsv"))) == 872


def test_scoring_glue_predictions_of_a_longer_file_is_refused(tmp_path):
    """A predictions file numbered past the dev file's rows (CoLA train's predictions scored against val) was
    scored on its first rows without a word."""
    dev = shared_path("glue", "CoLA", "val.tsv")
    rows = len(glue.read_examples("cola", dev))
    preds = tmp_path / "CoLA.tsv"
    preds.write_text("index\tprediction\n" + "".join(f"{i}\t1\n" for i in range(rows + 5)))
    with pytest.raises(UserError) as info:
        scoring.score_glue(GlueOptions(task="cola", dev=[str(dev)]), str(preds))
    assert f"{rows + 5} predictions for the {rows} rows" in str(info.value)
    preds.write_text("index\tprediction\n" + "".join(f"{i}\t1\n" for i in range(rows)))
    assert scoring.score_glue(GlueOptions(task="cola", dev=[str(dev)]), str(preds))["mcc"] == 0.0


def test_a_file_not_utf8_from_its_first_line_names_no_line_0(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"\xff\xfe caf\xe9\t1\n")
    with pytest.raises(DataError) as info:
        glue.read_examples("sst2", path)
    assert "not UTF-8 text" in str(info.value) and "line 0" not in str(info.value)


# --------------------------------------------------------------------------------------------- classify

def test_a_missing_id_column_is_an_error(tmp_path):
    """--id-column naming no column numbered the predictions by row without a word."""
    path = tmp_path / "d.csv"
    path.write_text("text,label,ident\ngood,pos,a1\nbad,neg,a2\n")
    with pytest.raises(DataError, match="no column 'id'"):
        classify.read_examples(path, classify.Columns("text", None, "label", "id"))
    assert [e.guid for e in classify.read_examples(path, classify.Columns("text", None, "label", "ident"))] == \
        ["a1", "a2"]


def test_the_label_set_is_stripped_and_each_label_given_once(tiny, tmp_path, capsys):
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\ngood,pos\nbad,neg\nfine,pos\n")
    preds = tmp_path / "p.tsv"
    preds.write_text("id\tprediction\n0\tpos\n1\tneg\n2\tneg\n")
    opts = ClassifyOptions(dev=str(dev), labels="neg, pos")    # as a shell user types it
    assert scoring.score_classify(opts, str(preds))["accuracy"] == pytest.approx(2 / 3)
    for labels in ("pos,neg,pos", "pos,,neg"):
        with pytest.raises(DataError):
            scoring.score_classify(ClassifyOptions(dev=str(dev), labels=labels), str(preds))
    capsys.readouterr()
    code = main(["finetune", "classify", "--train", str(tiny["data"]), "--model", str(tiny["model"]), "--out",
                 str(tmp_path / "run"), "--labels", "pos,neg,pos", "--max-steps", "1", *QUICK])
    assert_one_error(capsys, code, "['pos'] more than once")
    assert not (tmp_path / "run").exists()


def test_scoring_classify_refuses_a_bad_regression_prediction_and_another_files_predictions(tmp_path, capsys):
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\ngood,1.5\nbad,2\n")
    preds = tmp_path / "p.tsv"
    preds.write_text("id\tprediction\n0\tabc\n1\t2\n")
    capsys.readouterr()
    code = main(["evaluate", "classify", "--dev", str(dev), "--predictions", str(preds), "--regression"])
    assert_one_error(capsys, code, "p.tsv", "id 0", "'abc'")
    preds.write_text("id\tprediction\n0\t1.5\n1\t2\n2\t3\n")
    code = main(["evaluate", "classify", "--dev", str(dev), "--predictions", str(preds), "--regression"])
    assert_one_error(capsys, code, "3 predictions for the 2 rows")


# ------------------------------------------------------------------------------------------------ SQuAD

def test_a_training_answer_in_no_window_is_counted():
    """Windows too small for an answer trained it as unanswerable without a word."""
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path(*SPM))
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))
    problems = Problems()
    squad.build_features(tokenizer, examples, squad.SquadSettings(24, 2, 16), True, problems)
    assert problems.counts[squad.NO_WINDOW] == 1
    assert problems.examples[squad.NO_WINDOW] == ["56e16839cd28a01900c67887"]
    roomy = Problems()
    squad.build_features(tokenizer, examples, squad.SquadSettings(128, 64, 16), True, roomy)
    assert squad.NO_WINDOW not in roomy.counts


def _spm_model(directory: Path) -> Path:
    """A tiny model on the ALBERT 30k vocabulary (16-wide embeddings) with its spiece.model."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    directory.mkdir()
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_layers=1, num_heads=4, ffn_size=37,
                      max_position_embeddings=64)
    AlbertForPreTraining(cfg).save_pretrained(directory)
    (directory / "spiece.model").write_bytes(shared_path(*SPM).read_bytes())
    return directory


def test_squad_predict_applies_the_null_threshold_tuned_on_dev(tmp_path, capsys):
    """A v2.0 file without answers was predicted with threshold 0, not the run's dev-tuned one (task.json did not
    record it); metrics.json gave the last evaluation's threshold, not the best one's."""
    model = _spm_model(tmp_path / "model")
    dev = shared_path("squad", "dev-v2.0-small.json")
    out = tmp_path / "run"
    assert main(["finetune", "squad", "--version", "2.0", "--train", str(shared_path("squad", "sample.json")),
                 "--dev", str(dev), "--model", str(model), "--out", str(out), "--doc-stride", "32",
                 "--max-query-length", "16", "--max-steps", "2", "--eval-every", "1", *QUICK,
                 "--max-seq-length", "64"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    task = json.loads((out / "best" / "task.json").read_text())
    assert task["null_threshold"] == metrics["best"]["dev"]["null_threshold"] == metrics["null_threshold"]
    data = json.loads(dev.read_text())
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                qa.update(answers=[], is_impossible=False)
                qa.pop("plausible_answers", None)
    unlabelled = tmp_path / "unlabelled.json"
    unlabelled.write_text(json.dumps(data))
    assert main(["predict", "squad", "--dev", str(unlabelled), "--model", str(out), "--out", str(tmp_path / "p"),
                 "--no-progress"]) == 0
    odds = json.loads((tmp_path / "p" / "null_odds.json").read_text())
    predictions = json.loads((tmp_path / "p" / "predictions.json").read_text())
    assert len(predictions) == 14
    for qid, value in odds.items():
        assert (predictions[qid] == "") == (value > task["null_threshold"]), qid


# ------------------------------------------------------------------------------------- model and tokenizer

def test_a_max_seq_length_beyond_the_position_embeddings_is_refused_before_the_model_loads(tiny, tmp_path, capsys):
    """The forward pass stopped at the first long batch: after the model's load notice (two lines on stderr),
    leaving a half-made run in --out that the next try was refused for."""
    long = tmp_path / "long.jsonl"
    long.write_text("".join(json.dumps({"text": " ".join(["good"] * 90), "label": lab}) + "\n"
                            for lab in ("pos", "neg") * 2))
    out = tmp_path / "run"
    capsys.readouterr()
    code = main(["finetune", "classify", "--train", str(long), "--model", str(tiny["model"]), "--out", str(out),
                 "--max-steps", "1", *QUICK, "--max-seq-length", "100"])
    assert_one_error(capsys, code, "position embeddings cover 64", "--max-seq-length 64")
    assert not out.exists()
    code = main(["evaluate", "classify", "--dev", str(long), "--model", str(tiny["ft"]), "--max-seq-length", "100",
                 "--no-progress"])
    assert_one_error(capsys, code, "position embeddings cover 64")


def test_predicting_with_another_tokenizer_than_the_fine_tuned_models_is_refused(tiny, tmp_path, capsys):
    other = tmp_path / "vocab.txt"   # as many pieces, other words: other ids for the same text
    other.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *reversed(TINY_WORDS)]) + "\n")
    capsys.readouterr()
    code = main(["predict", "classify", "--test", str(tiny["data"]), "--model", str(tiny["ft"]), "--out",
                 str(tmp_path / "p"), "--tokenizer", str(other), "--no-progress"])
    assert_one_error(capsys, code, "not the tokenizer", "leave --tokenizer out")
    same = tiny["ft"] / "best" / "vocab.txt"
    assert main(["predict", "classify", "--test", str(tiny["data"]), "--model", str(tiny["ft"]), "--out",
                 str(tmp_path / "p"), "--tokenizer", str(same), "--no-progress"]) == 0


def test_a_model_that_is_a_file_says_so(tiny, capsys):
    capsys.readouterr()
    code = main(["predict", "classify", "--test", str(tiny["data"]), "--model", str(tiny["data"]), "--out",
                 str(tiny["root"] / "p")])
    assert_one_error(capsys, code, "a file, not a model directory")
