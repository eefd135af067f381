"""Audit 20, a Korean NLP engineer's whole journey from README.md and docs/ only: a WordPiece vocab.txt trained
on KorNLI sentences, a tiny ALBERT, `finetune classify` on KorNLI's TSV as 3-class sentence pairs, `predict`,
`convert --to hf`, and the export loaded with transformers (AutoTokenizer / AutoModelForSequenceClassification,
offline). Tests whose docstring starts "Was:" hold defects found on the way, since fixed."""
from __future__ import annotations

import csv
import json

import pytest

from albertlm.cli.main import main
from conftest import SHARED

MAX_LEN = 32        # the fine-tuning's --max-seq-length: most KorNLI pairs are longer
KORNLI = SHARED / "korean" / "KorNLI" / "xnli.dev.ko.tsv"   # (shared_path's skip is for tests, not an import)
PAIR_ARGS = ["--text-column", "sentence1", "--text-pair-column", "sentence2", "--label-column", "gold_label"]

pytestmark = pytest.mark.skipif(not KORNLI.is_file(), reason="../shared/data/korean/KorNLI is absent")


def _cli(*argv: str) -> None:
    assert main([str(a) for a in argv]) == 0


def _labels(path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [row["prediction"] for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """tokenizer train --kind wordpiece -> a tiny pretrained ALBERT -> finetune classify (1 step) on KorNLI
    pairs -> convert --to hf. Returns the paths."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("ko_journey")
    lines = KORNLI.read_text(encoding="utf-8").splitlines()
    (root / "corpus.txt").write_text("\n".join(c for row in lines[1:400] for c in row.split("\t")[:2]) + "\n",
                                     encoding="utf-8")
    (root / "train.tsv").write_text("\n".join([lines[0], *lines[1:41]]) + "\n", encoding="utf-8")
    (root / "dev.tsv").write_text("\n".join([lines[0], *lines[41:61]]) + "\n", encoding="utf-8")
    _cli("tokenizer", "train", "--kind", "wordpiece", "--input", root / "corpus.txt", "--vocab-size", 1500,
         "--out", root / "wp")
    pre = root / "pre"
    pre.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json"):
        (pre / name).write_bytes((root / "wp" / name).read_bytes())
    torch.manual_seed(0)
    vocab = len((root / "wp" / "vocab.txt").read_text(encoding="utf-8").splitlines())
    AlbertForPreTraining(ModelConfig(vocab_size=vocab, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(pre)
    _cli("finetune", "classify", "--train", root / "train.tsv", "--dev", root / "dev.tsv", *PAIR_ARGS,
         "--model", pre, "--out", root / "ft", "--max-steps", 1, "--batch-size", 8, "--lr", 0.01,
         "--max-seq-length", MAX_LEN, "--no-progress")
    _cli("convert", root / "ft", root / "hf", "--to", "hf")
    return {"root": root, "pre": pre, "ft": root / "ft", "hf": root / "hf", "dev": root / "dev.tsv"}


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("transformers")


def _dev_pairs(path) -> tuple[list[str], list[str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence1"] for r in rows], [r["sentence2"] for r in rows]


def test_transformers_classifier_from_the_export_predicts_albertlm_labels(journey, offline, tmp_path):
    """The journey's last step: AutoTokenizer + AutoModelForSequenceClassification on the exported directory,
    truncating to the fine-tuning's length, give `albertlm predict`'s labels on KorNLI dev pairs (Korean
    WordPiece, labels named by id2label)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _cli("predict", "classify", "--model", journey["ft"], "--dev", journey["dev"], "--out", tmp_path, "--no-progress")
    ours = _labels(tmp_path / "dev_predictions.tsv")
    tok = AutoTokenizer.from_pretrained(str(journey["hf"]))
    model = AutoModelForSequenceClassification.from_pretrained(str(journey["hf"])).eval()
    first, second = _dev_pairs(journey["dev"])
    batch = tok(first, second, truncation=True, max_length=MAX_LEN, padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = model(**batch).logits.argmax(-1).tolist()
    assert [model.config.id2label[i] for i in ids] == ours


def test_exported_tokenizer_truncates_to_the_fine_tuned_length(journey, offline):
    """Was: convert --to hf writes no model_max_length into tokenizer_config.json: transformers' truncation=True does
    not truncate (a KorNLI pair stays longer than the 32 tokens the model was fine-tuned and is predicted with by
    albertlm; 6 of 60 dev pairs got another label in pipeline(..., truncation=True); a text over 512 tokens crashed
    the model)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(journey["hf"]))
    first, second = _dev_pairs(journey["dev"])
    lengths = [len(ids) for ids in tok(first, second, truncation=True)["input_ids"]]
    assert max(lengths) <= MAX_LEN, (tok.model_max_length, lengths)


def test_exported_pretraining_tokenizer_truncates_to_the_positions(journey, offline, tmp_path):
    """Was: convert --to hf of a pretraining checkpoint writes no model_max_length: transformers' truncation=True leaves
    a long text longer than the position embeddings."""
    from transformers import AutoTokenizer

    _cli("convert", journey["pre"], tmp_path / "hf", "--to", "hf")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert len(tok("가나다 " * 100, truncation=True)["input_ids"]) <= 64


@pytest.mark.parametrize("labels", [None, "entailment,neutral,contradiction"])
def test_predict_classify_reads_the_label_names_of_a_transformers_export(journey, tmp_path, labels):
    """Was: predict classify on a transformers directory ignores its config.json id2label: without --labels it is
    refused ('the label set is unknown (no task.json ...)'), and with --labels in another order (MNLI's
    entailment,neutral,contradiction) every label is silently another class."""
    _cli("predict", "classify", "--model", journey["ft"], "--dev", journey["dev"], "--out", tmp_path / "ours",
         "--no-progress")
    argv = ["predict", "classify", "--model", str(journey["hf"]), "--dev", str(journey["dev"]), *PAIR_ARGS,
            "--max-seq-length", str(MAX_LEN), "--out", str(tmp_path / "hf"), "--no-progress"]
    code = main(argv + (["--labels", labels] if labels else []))
    if labels and code == 2:    # refusing an order the model's id2label contradicts is fine too
        return
    assert code == 0
    assert _labels(tmp_path / "hf" / "dev_predictions.tsv") == _labels(tmp_path / "ours" / "dev_predictions.tsv")


def test_scoring_classify_predictions_needs_only_the_label_column(journey, capsys):
    """Was: evaluate classify --predictions read the gold file's text column, which scoring never uses: KorNLI's
    gold file (sentence1, sentence2, gold_label) failed with "no column 'text'" until --text-column was given."""
    capsys.readouterr()
    code = main(["evaluate", "classify", "--predictions", str(journey["ft"] / "dev_predictions.tsv"),
                 "--dev", str(journey["dev"]), "--label-column", "gold_label"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "accuracy" in json.loads(out)


def test_model_card_of_a_classifier_shows_how_to_get_its_predictions(journey):
    """Was: the model card of a classify export shows AutoModel (the bare encoder: the classifier is dropped, no
    predictions) though its pipeline_tag is text-classification, and prints an empty task: 'fine-tuned on classify
    (see ...)', 'fine-tuning (classify, ): ...'."""
    card = (journey["hf"] / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag: text-classification" in card
    assert "AutoModelForSequenceClassification" in card or 'pipeline("text-classification"' in card
    assert "classify, )" not in card and "classify  (" not in card

