"""benchmarks/assemble_corpus.py: the ablation corpus's GLUE task text is training text only, never a label
and never a dev sentence (the downstream evaluation would otherwise see its own test text)."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLUE = ROOT.parent / "shared" / "data" / "glue"


def _module():
    spec = importlib.util.spec_from_file_location("assemble_corpus", ROOT / "benchmarks" / "assemble_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not GLUE.is_dir(), reason="needs ../shared/data/glue")
def test_task_text_is_training_text_without_labels_or_dev_sentences():
    module = _module()
    documents = list(module.task_text_documents(GLUE))
    text = {sentence for _, sentences in documents for sentence in sentences}
    folders = {name.split("/")[1].split("#")[0] for name, _ in documents}
    assert folders == {"SST-2", "STS-B", "CoLA", "MRPC", "RTE"}
    assert "contains no wit , only labored gags" in text               # SST-2 train row 2
    assert "A plane is taking off." in text and "An air plane is taking off." in text   # STS-B row 1, both sides
    labels = {"0", "1", "entailment", "not_entailment", "5.000", "sentence", "label"}
    assert not text & labels

    def fields(path):
        return {field.strip() for line in path.read_text(encoding="utf-8-sig").splitlines()
                for field in line.split("\t") if len(field.split()) >= 4}

    sst2_dev = fields(GLUE / "SST-2" / "dev.tsv")
    assert sst2_dev and not (sst2_dev & text)
    # STS-B, RTE and CoLA reuse some sentences between their train and dev files (GLUE's own data): the
    # corpus holds such a sentence only because the labeled training file already does
    train_files = set().union(*(fields(GLUE / folder / name) for folder, name, _, _ in module.TASK_TEXT_FILES))
    for folder, name in (("STS-B", "dev.tsv"), ("RTE", "val.tsv"), ("CoLA", "val.tsv")):
        shared = fields(GLUE / folder / name) & text
        assert shared <= train_files


def _assemble_task_text_only(module, tmp_path, **options):
    empty = tmp_path / "empty"
    empty.mkdir(parents=True)
    summary = module.assemble(tmp_path / "out", empty, None, GLUE, **options)
    return summary, (tmp_path / "out" / "train.txt").read_text(encoding="utf-8")


@pytest.mark.skipif(not GLUE.is_dir(), reason="needs ../shared/data/glue")
def test_task_text_goes_to_training_part_once(tmp_path):
    module = _module()
    summary, train = _assemble_task_text_only(module, tmp_path, task_words_per_doc=0)   # a document per row
    heldout = (tmp_path / "out" / "heldout.txt").read_text(encoding="utf-8")
    assert "contains no wit , only labored gags" in train and "labored gags" not in heldout
    stats = summary["sources"]["glue_train_text"]
    stdlib = summary["sources"]["python_stdlib"]["train_documents"]      # always read (no file needed)
    assert stats["train_documents"] + stdlib == train.count("\n\n") and stats["train_documents"] > 50_000
    assert stats["duplicate_rows"] > 0                                 # repeated rows kept once
    documents = train.split("\n\n")
    assert len(set(documents)) == len(documents)


@pytest.mark.skipif(not GLUE.is_dir(), reason="needs ../shared/data/glue")
def test_task_rows_packed_into_documents_of_one_task(tmp_path):
    module = _module()
    one_per_row, rows_text = _assemble_task_text_only(module, tmp_path / "rows", task_words_per_doc=0)
    summary, train = _assemble_task_text_only(module, tmp_path / "packed", task_words_per_doc=50)
    stats, before = summary["sources"]["glue_train_text"], one_per_row["sources"]["glue_train_text"]
    assert stats["train_words"] == before["train_words"] and stats["rows_read"] == before["rows_read"]
    assert sorted(train.split()) == sorted(rows_text.split())           # the same text, only regrouped
    assert stats["train_documents"] < before["train_documents"] / 3
    stdlib = summary["sources"]["python_stdlib"]["train_documents"]
    glue_docs = train.split("\n\n")[stdlib:-1]
    short = [d for d in glue_docs if len(d.split()) < 50]
    assert len(short) <= len(module.TASK_TEXT_FILES)                    # only each task's last document
    sst2_row, cola_row = "contains no wit , only labored gags", "Our friends won't buy this analysis, let alone the next one we propose."
    assert not any(sst2_row in d and cola_row in d for d in glue_docs)   # tasks are never mixed
