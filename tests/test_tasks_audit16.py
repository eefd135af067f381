"""Fine-tuning audit 16 (the task side): the examples truncated to max_seq_length are named (the problems tally
said `"first": []`); MRPC's original test file (msr_paraphrase_test.txt) gives a submission numbered by row, as
GLUE's test.tsv is (not by sentence id); two test files with one submission file (or two dev files with one
split name) are refused instead of the second silently replacing the first, and a mismatched MNLI test file is
known by its name; SQuAD maps the pieces of words that tokenizers normalise (full-width digits, ß, ½, ligatures)
back to their own characters (pieces covered nothing, so answers came out empty or cut); a metric on
one-class predictions prints no scikit-learn warning."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import glue, specs, squad
from albertlm.tasks.metrics import glue_metrics
from albertlm.tasks.tables import DataError
from albertlm.tokenization import load_tokenizer
from conftest import TINY_WORDS, save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags

SPM = ("spm", "albert-base-v2_spiece.model")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    """The WordPiece tokenizer of conftest's tiny model (TINY_WORDS)."""
    root = tmp_path_factory.mktemp("audit16_tok")
    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    return load_tokenizer(root / "vocab.txt")


# ------------------------------------------------------------------------------------- truncation names

def test_the_examples_truncated_to_max_seq_length_are_named(tiny_tokenizer, tmp_path):
    """`problems` said `"truncated to 8 tokens (dev.tsv)": {"count": 2, "first": []}`: which examples were cut
    was not said (the count came in bulk, without places). Now the first few file:line places are given."""
    dev = tmp_path / "dev.tsv"
    dev.write_text("index\tsentence1\tsentence2\tlabel\n"
                   "0\tthe film\tgood\tentailment\n"
                   f"1\t{'the film was very good ' * 3}\tbad\tnot_entailment\n"
                   "2\tthe plot\tpoor\tentailment\n"
                   f"3\tthe acting\t{'awful ' * 9}\tnot_entailment\n")
    spec = specs.glue_spec("rte", tiny_tokenizer, FinetuneConfig(max_seq_length=8), dev_files=[dev], training=False)
    list(spec.eval_sets[0].features)    # a streamed set is tokenized (and its truncations counted) as it is read
    problems = spec.problems.to_dict()
    assert problems == {"truncated to 8 tokens (dev.tsv)": {"count": 2, "first": [f"{dev}:3", f"{dev}:5"]}}


def test_evaluate_classify_names_the_truncated_examples(tmp_path, capsys):
    """The known defect, end to end: `albertlm evaluate classify --model RUN --dev FILE` printed
    `"first": []` for "truncated to N tokens (dev)"."""
    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"the film was {'good' if i % 2 else 'bad'}"
                                        + (" very" * 20 if i == 3 else ""), "label": "pos" if i % 2 else "neg"})
                            + "\n" for i in range(6)))
    assert main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model),
                 "--out", str(tmp_path / "ft"), "--max-steps", "1", *QUICK]) == 0
    capsys.readouterr()
    assert main(["evaluate", "classify", "--model", str(tmp_path / "ft"), "--dev", str(data), "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["problems"]["truncated to 16 tokens (dev)"] == {"count": 1, "first": [f"{data}:4"]}
    saved = json.loads((tmp_path / "ft" / "metrics.json").read_text())["problems"]
    assert saved["truncated to 16 tokens (train)"]["first"] == [f"{data}:4"]


# ------------------------------------------------------------------------------------------- GLUE files

def test_mrpc_original_test_file_is_numbered_by_row_as_glue_test_tsv(tiny_tokenizer, tmp_path):
    """msr_paraphrase_test.txt (the train layout: Quality, #1 ID, #2 ID, #1 String, #2 String) was read with the
    #1 ID as the index, so the submission's index column held sentence ids (1355540, ...) instead of the row
    numbers GLUE's MRPC test.tsv has (download_glue_data.py writes 0, 1, ...): no row matched on the server."""
    msr = tmp_path / "msr_paraphrase_test.txt"
    msr.write_bytes(shared_path("glue_samples", "MRPC", "dev.tsv").read_bytes())   # same layout, with a BOM
    examples = glue.read_examples("mrpc", msr, False)
    assert [e.guid for e in examples] == [str(i) for i in range(len(examples))]
    assert examples[0].text_a.startswith("He said the foodservice pie business")
    assert all(e.label is None for e in examples)
    assert glue.find_split(glue.get_task("mrpc"), tmp_path, "test") == [msr]
    spec = specs.glue_spec("mrpc", tiny_tokenizer, FinetuneConfig(max_seq_length=16), data_dir=tmp_path,
                           training=False)
    (test,) = spec.eval_sets
    import numpy as np

    test.write({"logits": np.zeros((len(examples), 2))}, tmp_path / "out")
    rows = (tmp_path / "out" / "submission" / "MRPC.tsv").read_text().splitlines()
    assert rows[0] == "index\tprediction" and [r.split("\t")[0] for r in rows[1:]] == \
        [str(i) for i in range(len(examples))]


def _mnli_test(path: Path) -> Path:
    header = "\t".join(["index", "promptID", "pairID", "genre", "s1b", "s2b", "s1p", "s2p", "sentence1",
                        "sentence2"])
    path.write_text(header + "\n" + "0\t1\t1\tg\tb\tb\tp\tp\tthe film\tgood\n1\t2\t2\tg\tb\tb\tp\tp\tthe plot\tbad\n")
    return path


def test_mnli_test_files_never_write_one_submission_file(tiny_tokenizer, tmp_path):
    """Test files named otherwise than test_matched.tsv / test_mismatched.tsv both became MNLI-m.tsv, the
    mismatched predictions silently replacing the matched ones; two dev files with one stem reported one set
    of metrics and wrote one dev_predictions.tsv. A mismatched file is now known by its name, and a clash is
    refused before anything is read."""
    import numpy as np

    cfg = FinetuneConfig(max_seq_length=16)
    matched, mismatched = _mnli_test(tmp_path / "mnli_test_matched.tsv"), _mnli_test(tmp_path / "mnli_test_mismatched.tsv")
    spec = specs.glue_spec("mnli", tiny_tokenizer, cfg, test_files=[matched, mismatched], training=False)
    for eval_set in spec.eval_sets:
        eval_set.write({"logits": np.zeros((2, 3))}, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out" / "submission").iterdir()) == ["MNLI-m.tsv", "MNLI-mm.tsv"]

    other = _mnli_test(tmp_path / "second.tsv")
    with pytest.raises(DataError, match="would both write submission/MNLI-m.tsv"):
        specs.glue_spec("mnli", tiny_tokenizer, cfg, test_files=[matched, other], training=False)
    (tmp_path / "b").mkdir()
    dev = tmp_path / "dev.tsv"
    dev.write_text("index\tsentence1\tsentence2\tlabel\n0\tthe film\tgood\tentailment\n")
    (tmp_path / "b" / "dev.tsv").write_text(dev.read_text())
    with pytest.raises(DataError, match="would both write dev_predictions.tsv"):
        specs.glue_spec("rte", tiny_tokenizer, cfg, dev_files=[dev, tmp_path / "b" / "dev.tsv"], training=False)


def test_a_test_file_clash_is_one_line_from_the_cli(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    train = tmp_path / "train.tsv"
    train.write_text("index\tsentence1\tsentence2\tlabel\n0\tthe film\tgood\tentailment\n"
                     "1\tthe plot\tbad\tnot_entailment\n")
    tests = []
    for d in ("a", "b"):
        tests.append(tmp_path / d / "test.tsv")
        tests[-1].write_text("index\tsentence1\tsentence2\n0\tthe film\tgood\n")
    code = main(["finetune", "glue", "--task", "rte", "--train", str(train), "--test", *map(str, tests),
                 "--model", str(model), "--out", str(tmp_path / "run"), "--max-steps", "1", *QUICK])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "would both write submission/RTE.tsv" in err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ SQuAD

@pytest.mark.parametrize("word, wanted", [
    ("x１２３ｙ", ["x", "１２", "３", "ｙ"]),        # full-width digits and letters (NFKC in the tokenizer)
    ("Größe", ["Grö", "ß", "e"]),                  # an accent dropped, then an unknown piece
    ("½", ["½", "½", "½"]),                        # one character, three pieces: each covers it
])
def test_squad_pieces_of_normalised_words_cover_their_characters(word, wanted):
    """Pieces were matched against the word only lower-cased: a piece the tokenizer had normalised (`12` for
    `１２`, `gro` for `Grö`) matched nothing, the first such piece swallowed the word and the rest covered no
    characters, so an answer ending on them came out empty or cut."""
    tokenizer = load_tokenizer(shared_path(*SPM))
    (tokens,) = squad.tokenize_contexts(tokenizer, [f"a {word} b"])
    texts = [f"a {word} b"[s:e] for s, e in tokens.spans]
    pieces = [tokenizer.id_to_token(i) for i in tokens.ids]
    inner = [t for t, p in zip(texts, pieces) if p != "▁"][1:-1]   # drop "a", "b" and bare "▁" pieces
    assert inner == wanted, list(zip(pieces, texts))


def test_a_squad_answer_on_full_width_digits_maps_back_to_them():
    """End to end through post-processing: a predicted span over the piece `3` of `１２３` gave ''."""
    import numpy as np

    tokenizer = load_tokenizer(shared_path(*SPM))
    context = "The code is x１２３ｙ today."
    example = squad.SquadExample("q1", "What is the code?", context, [("x１２３ｙ", 12)])
    settings = squad.SquadSettings(64, 32, 16, 20, 30)
    (feature,) = squad.build_features(tokenizer, [example], settings, False)
    pieces = [tokenizer.id_to_token(int(i)) for i in feature.input_ids]
    k = pieces.index("3")
    start, end = np.zeros(feature.length), np.zeros(feature.length)
    start[k], end[k] = 10.0, 10.0
    prediction = squad.postprocess([example], [feature], [start], [end], tokenizer, settings)["q1"]
    assert prediction.best.text == "３"
    # training: the answer's tokens are found from its characters, first to last
    (train,) = squad.build_features(tokenizer, [example], settings, True)
    s, e = train.label
    assert pieces[s] == "▁x" and pieces[e] == "y"


# ---------------------------------------------------------------------------------------------- metrics

def test_metrics_of_one_class_predictions_warn_nothing():
    """CoLA's MCC on labels and predictions of one class printed scikit-learn's multi-line UserWarning on stderr
    (evaluate's output is the metrics JSON and at most one line on stderr); the value is 0.0, no NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert glue_metrics("cola", [1, 1, 1], [1, 1, 1]) == {"accuracy": 1.0, "mcc": 0.0}
        assert glue_metrics("cola", [0, 0], [0, 0])["mcc"] == 0.0
        assert glue_metrics("mrpc", [0, 0], [0, 0]) == {"accuracy": 1.0, "f1": 0.0, "acc_and_f1": 0.5}
        assert glue_metrics("stsb", [1.0, 2.0, 3.0], [2.0, 2.0, 2.0])["pearson"] == 0.0


# ------------------------------------------------------------------------------------------------- RACE

def test_race_truncations_name_their_split(tiny_tokenizer):
    """RACE's train/ and dev/ hold files of the same names (middle/2.txt): a truncated passage was placed at
    `middle/2.txt#0` whichever split it came from."""
    root = shared_path("race", "RACE")
    spec = specs.race_spec(root, tiny_tokenizer, FinetuneConfig(max_seq_length=64), max_qa_length=16)
    places = spec.problems.examples["passage truncated to max_seq_length"]
    assert places == ["train/middle/2.txt#0", "train/middle/2.txt#1", "train/middle/2.txt#2"]
    spec = specs.race_spec(root, tiny_tokenizer, FinetuneConfig(max_seq_length=64), max_qa_length=16,
                           training=False)
    assert spec.problems.examples["passage truncated to max_seq_length"][0] == "dev/middle/13.txt#0"


def test_race_predicts_on_a_split_directory(tiny_tokenizer):
    """`evaluate race --model RUN --data-dir RACE/dev` (a split directory, which `evaluate race --predictions`
    and read_race take) found no data: "no data to evaluate: give --data-dir DIR with dev/ or test/"."""
    dev = shared_path("race", "RACE", "dev")
    cfg = FinetuneConfig(max_seq_length=64)
    for splits in (("dev", "test"), ("dev",)):
        spec = specs.race_spec(dev, tiny_tokenizer, cfg, max_qa_length=16, training=False, eval_splits=splits)
        assert [(s.name, len(s.features), s.score is not None) for s in spec.eval_sets] == [("dev", 11, True)]
    with pytest.raises(DataError, match="RACE's dev split, not its test split"):    # --split test on RACE/dev
        specs.race_spec(dev, tiny_tokenizer, cfg, max_qa_length=16, training=False, eval_splits=("test",))
