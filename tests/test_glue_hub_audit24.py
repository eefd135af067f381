"""GLUE audit 24: the Hugging Face Hub's GLUE (`nyu-mll/glue`), as most users get it today.

`datasets.load_dataset("nyu-mll/glue", TASK)` gives each task datasets' columns (`sentence1, sentence2, label,
idx`, ...), the label a ClassLabel number (MNLI's order, entailment / neutral / contradiction, is not GLUE's sorted
one), -1 in a test split, and `idx` the row's index in GLUE's own file. `finetune|predict|evaluate glue` refused
every such file with a pointer to `classify`; now they read the Hub's Parquet files (a split's shards together),
a `save_to_disk` folder or its Arrow file, and `to_json` / `to_csv` / `to_csv(sep="\\t")` exports, given as
`--train/--dev/--test` or found in `--data-dir` (the task's config folder, the Hub repository's root, or a
DatasetDict's folder). Built here with pyarrow (and datasets' own writers) from the shared GLUE TSVs, no network:
the submission files from a Hub test split are byte for byte those from GLUE's test TSV of the same rows, and the
labels, features, dev predictions and scores are those of GLUE's files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from albertlm.cli.main import main
from albertlm.config.task import FinetuneConfig
from albertlm.tasks import glue, specs
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path

from test_cli_audit12_tasks import QUICK  # the tiny fine-tuning flags
from test_glue_audit17 import MNLI_COLUMNS, _glue_model, _tsv
from test_tasks_audit16 import tiny_tokenizer  # noqa: F401  (the tiny WordPiece tokenizer fixture)

CFG = FinetuneConfig(max_seq_length=16)
N = 24
# datasets' ClassLabel names per label number (nyu-mll/glue's dataset card), as GLUE's label names: written out
# here, not taken from the code under test
HUB_LABELS = {"rte": ["entailment", "not_entailment"], "sst2": ["0", "1"], "cola": ["0", "1"],
              "mnli": ["entailment", "neutral", "contradiction"]}
TEXTS = {"rte": ["sentence1", "sentence2"], "sst2": ["sentence"], "cola": ["sentence"],
         "stsb": ["sentence1", "sentence2"], "mnli": ["premise", "hypothesis"]}
ORDER = [7, 2, 0, 5, 1, 3, 4, 6] + list(range(8, N))   # the rows' idx: a shuffled split, not the row positions


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _rows(task: str) -> list[tuple[str, str | None, str | float]]:
    """N shared GLUE rows (texts and GLUE's label) for the task; MNLI's from RTE's texts, its labels spread unevenly
    over the three classes (a constant prediction scores differently under another label order)."""
    source = {"rte": ("rte", "RTE", "val.tsv"), "mnli": ("rte", "RTE", "val.tsv"), "sst2": ("sst2", "SST-2", "dev.tsv"),
              "cola": ("cola", "CoLA", "val.tsv"), "stsb": ("stsb", "STS-B", "dev.tsv")}[task]
    examples = glue.read_examples(source[0], shared_path("glue", *source[1:]))[:N]
    if task == "mnli":
        return [(e.text_a, e.text_b, "entailment" if e.label == "entailment" else ("neutral" if i % 3 else
                                                                                   "contradiction"))
                for i, e in enumerate(examples)]
    return [(e.text_a, e.text_b, e.label) for e in examples]


def _glue_test_tsv(task: str, path: Path, rows) -> Path:
    """The rows as GLUE's own test file of the task (download_glue_data.py's layout), indexed by ORDER."""
    if task == "mnli":
        return _tsv(path, [MNLI_COLUMNS, *[[i, 9 + i, f"{i}n", "fiction", "( a )", "( b )", "(ROOT a)", "(ROOT b)",
                                            a, b] for i, (a, b, _) in zip(ORDER, rows)]])
    if task == "stsb":
        return _tsv(path, [["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                            "sentence2"], *[[i, "main-news", "headlines", "2015", f"{i:04d}", "none", "none", a, b]
                                            for i, (a, b, _) in zip(ORDER, rows)]])
    texts = TEXTS[task]
    return _tsv(path, [["index", *texts], *[[i, a, *([b] if b is not None else [])]
                                            for i, (a, b, _) in zip(ORDER, rows)]])


def _glue_dev_tsv(task: str, path: Path, rows) -> Path:
    """The rows as GLUE's own labelled dev file of the task."""
    if task == "mnli":
        return _tsv(path, [MNLI_COLUMNS + [f"label{k}" for k in range(1, 6)] + ["gold_label"],
                           *[[i, i, f"{i}n", "slate", "( a )", "( b )", "(ROOT a)", "(ROOT b)", a, b, *[y] * 6]
                             for i, (a, b, y) in enumerate(rows)]])
    if task == "sst2":
        return _tsv(path, [["sentence", "label"], *[[a, y] for a, _, y in rows]])
    if task == "stsb":
        return _tsv(path, [["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                            "sentence2", "score"], *[[i, "main-news", "headlines", "2015", f"{i:04d}", "none", "none",
                                                      a, b, f"{y:.3f}"] for i, (a, b, y) in enumerate(rows)]])
    return _tsv(path, [["index", "sentence1", "sentence2", "label"],
                       *[[i, a, b, y] for i, (a, b, y) in enumerate(rows)]])


def _hub_table(task: str, rows, test: bool) -> pa.Table:
    """The rows as datasets keeps glue/<task>: its columns, label numbers in its ClassLabel order (an STS-B score),
    -1 in a test split; idx ORDER for a test split (a shuffled one), the row numbers for a labelled one."""
    columns = {name: [row[k] for row in rows] for k, name in enumerate(TEXTS[task])}
    if task == "stsb":
        labels = [-1.0 if test else float(y) for _, _, y in rows]
    else:
        labels = [-1 if test else HUB_LABELS[task].index(y) for _, _, y in rows]
    return pa.table({**columns, "label": labels, "idx": ORDER[:len(rows)] if test else list(range(len(rows)))})


def _parquet(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit24_glue_hub"))


# ------------------------------------------------------------------------------ labels in datasets' order

@pytest.mark.parametrize("task", ["mnli", "rte", "sst2", "stsb"])
def test_a_hub_split_reads_as_glues_own_file(task, tiny_tokenizer, tmp_path):
    """Hub label numbers are read in datasets' ClassLabel order: MNLI's 0 is entailment (GLUE's label list, which
    the model's outputs follow, has it second). The spec of a Hub train/dev split is GLUE's TSV's: the same label
    ids and the same features, so training and scoring are the same."""
    rows = _rows(task)
    tsv = _glue_dev_tsv(task, tmp_path / "glue" / ("dev_matched.tsv" if task == "mnli" else "dev.tsv"), rows)
    hub = _parquet(_hub_table(task, rows, test=False), tmp_path / "hub" / (
        f"{'validation_matched' if task == 'mnli' else 'validation'}-00000-of-00001.parquet"))
    ours, theirs = glue.read_examples(task, tsv), glue.read_examples(task, hub)
    assert [(e.text_a, e.text_b, e.label) for e in theirs] == [(e.text_a, e.text_b, e.label) for e in ours]
    if task == "mnli":
        assert [e.label for e in theirs[:3]] == [rows[i][2] for i in range(3)]
        assert glue.label_ids(glue.get_task("mnli"), [glue.Example("0", "a", "b", "entailment", "x")]) == [1]
    assert theirs[3].guid == "3" and theirs[3].where == f"{hub}:4"
    a = specs.glue_spec(task, tiny_tokenizer, CFG, train_file=tsv, dev_files=[tsv], training=True)
    b = specs.glue_spec(task, tiny_tokenizer, CFG, train_file=hub, dev_files=[hub], training=True)
    assert [(f.input_ids.tolist(), f.label) for f in b.train] == [(f.input_ids.tolist(), f.label) for f in a.train]
    assert b.eval_sets[0].name == a.eval_sets[0].name == ("dev_matched" if task == "mnli" else "dev")


# ------------------------------------------------------------------------------- the leaderboard's files

@pytest.mark.parametrize("task", ["mnli", "rte", "sst2", "cola", "stsb"])
def test_a_hub_test_split_writes_the_submission_of_glues_test_file(task, tiny_tokenizer, tmp_path):
    """The submission written from a Hub test split (label -1, idx its index) is GLUE's test file's, byte for
    byte, for the same predictions: the index column is idx (a shuffled split's, not the row positions), the
    labels GLUE's names in GLUE's order, the file name the server's (MNLI's mismatched split by its file name or
    by the Hub's mnli_mismatched config folder)."""
    rows = _rows(task)
    logits = np.random.default_rng(0).normal(size=(N, 1 if task == "stsb" else len(HUB_LABELS[task]))) * 3
    table = _hub_table(task, rows, test=True)
    pairs = [(_glue_test_tsv(task, tmp_path / "glue" / "test.tsv", rows),
              _parquet(table, tmp_path / "hub" / task / "test-00000-of-00001.parquet"))]
    if task == "mnli":
        pairs = [(_glue_test_tsv(task, tmp_path / "glue" / "test_mismatched.tsv", rows), hub) for hub in (
            _parquet(table, tmp_path / "hub" / "mnli" / "test_mismatched-00000-of-00001.parquet"),
            _parquet(table, tmp_path / "hub" / "mnli_mismatched" / "test-00000-of-00001.parquet"))]
    for tsv, hub in pairs:
        written = []
        for path, out in ((tsv, tmp_path / "from_tsv"), (hub, tmp_path / f"from_hub_{hub.parent.name}")):
            spec = specs.glue_spec(task, tiny_tokenizer, CFG, test_files=[path], training=False)
            written += spec.eval_sets[0].write({"logits": logits}, out)
        assert written[0].name == written[1].name == {"mnli": "MNLI-mm.tsv", "rte": "RTE.tsv", "sst2": "SST-2.tsv",
                                                      "cola": "CoLA.tsv", "stsb": "STS-B.tsv"}[task]
        assert written[1].read_bytes() == written[0].read_bytes()
        lines = written[1].read_text().splitlines()
        assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in ORDER]
        if task == "mnli":    # GLUE's order: logit 0 is contradiction, whatever datasets' label numbers say
            assert lines[1].split("\t")[1] == ["contradiction", "entailment", "neutral"][int(logits[0].argmax())]
    if task == "mnli":    # the Hub's mnli_mismatched config as --data-dir: its validation and test splits
        config = tmp_path / "hub" / "mnli_mismatched"
        _parquet(_hub_table(task, rows, test=False), config / "validation-00000-of-00001.parquet")
        spec = specs.glue_spec(task, tiny_tokenizer, CFG, data_dir=config, training=False)
        assert [s.name for s in spec.eval_sets] == ["dev_mismatched", "test:test-00000-of-00001.parquet"]
        assert spec.eval_sets[1].write({"logits": logits}, tmp_path / "c")[0].name == "MNLI-mm.tsv"


def test_predict_on_the_hubs_mnli_folder_writes_what_glues_folder_gives(pretrained, tmp_path, capsys):
    """`predict glue --task mnli --data-dir` on the Hub's repository (its mnli/ config: validation_matched,
    validation_mismatched, test_matched, test_mismatched) and on GLUE's MNLI folder of the same rows: the same
    metrics, dev prediction files and MNLI-m.tsv / MNLI-mm.tsv, byte for byte. The Hub's ax config's test split
    beside MNLI writes AX.tsv."""
    rows = _rows("mnli")
    model = _glue_model(tmp_path / "model", pretrained, "mnli")
    glue_dir, hub_dir = tmp_path / "glue" / "MNLI", tmp_path / "hub"
    for kind in ("matched", "mismatched"):
        _glue_dev_tsv("mnli", glue_dir / f"dev_{kind}.tsv", rows)
        _glue_test_tsv("mnli", glue_dir / f"test_{kind}.tsv", rows)
        _parquet(_hub_table("mnli", rows, False), hub_dir / "mnli" / f"validation_{kind}-00000-of-00001.parquet")
        _parquet(_hub_table("mnli", rows, True), hub_dir / "mnli" / f"test_{kind}-00000-of-00001.parquet")
    ax = _parquet(_hub_table("mnli", rows[:6], True), hub_dir / "ax" / "test-00000-of-00001.parquet")
    printed = []
    for data, out in ((glue_dir, tmp_path / "a"), (hub_dir, tmp_path / "b")):
        assert main(["predict", "glue", "--task", "mnli", "--model", str(model), "--data-dir", str(data),
                     "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
        printed.append({k: v for k, v in json.loads(capsys.readouterr().out).items() if k.startswith("dev")})
    assert printed[0] == printed[1] and set(printed[1]) == {"dev_matched", "dev_mismatched"}
    names = ["dev_matched_predictions.tsv", "dev_mismatched_predictions.tsv", "submission/MNLI-m.tsv",
             "submission/MNLI-mm.tsv"]
    for name in names:
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name
    # `evaluate --predictions` scores a Hub dev split as GLUE's file (the labels in datasets' order)
    for dev in (glue_dir / "dev_mismatched.tsv", hub_dir / "mnli" / "validation_mismatched-00000-of-00001.parquet"):
        assert main(["evaluate", "glue", "--task", "mnli", "--dev", str(dev), "--predictions",
                     str(tmp_path / "b" / "dev_mismatched_predictions.tsv")]) == 0
        assert json.loads(capsys.readouterr().out) == printed[0]["dev_mismatched"]
    assert main(["predict", "glue", "--task", "mnli", "--model", str(model), "--test", str(ax), "--out",
                 str(tmp_path / "b"), "--no-progress"]) == 0
    assert (tmp_path / "b" / "submission" / "AX.tsv").read_text().splitlines()[0] == "index\tprediction"


def test_finetune_on_the_hubs_rte_files_is_the_run_on_glues(pretrained, tmp_path, capsys):
    """`finetune glue --task rte` on the Hub's rte/ config folder (train, validation, test Parquet) and on GLUE's
    TSVs of the same rows: the same dev scores, dev predictions and submission/RTE.tsv."""
    rows = _rows("rte")
    glue_dir, hub_dir = tmp_path / "glue" / "RTE", tmp_path / "hub" / "rte"
    _glue_dev_tsv("rte", glue_dir / "train.tsv", rows)
    _glue_dev_tsv("rte", glue_dir / "dev.tsv", rows[:12])
    _glue_test_tsv("rte", glue_dir / "test.tsv", rows)
    _parquet(_hub_table("rte", rows, False), hub_dir / "train-00000-of-00001.parquet")
    _parquet(_hub_table("rte", rows[:12], False), hub_dir / "validation-00000-of-00001.parquet")
    _parquet(_hub_table("rte", rows, True), hub_dir / "test-00000-of-00001.parquet")
    scores = []
    for data, out in ((glue_dir, tmp_path / "a"), (hub_dir, tmp_path / "b")):
        assert main(["finetune", "glue", "--task", "rte", "--model", str(pretrained), "--data-dir", str(data),
                     "--out", str(out), *QUICK, "--max-steps", "4", "--eval-every", "2"]) == 0, \
            capsys.readouterr().err
        capsys.readouterr()
        scores.append({k: v for k, v in json.loads((out / "metrics.json").read_text()).items()
                       if k in ("best", "train_loss_first", "train_loss_last")})
    assert scores[0] == scores[1] and scores[0]
    for name in ("dev_predictions.tsv", "submission/RTE.tsv"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name


# ----------------------------------------------------------------------------------- datasets' own exports

def test_datasets_exports_read_as_its_parquet(tmp_path):
    """save_to_disk (a DatasetDict's folder and one split's), its .arrow file, to_json, to_csv and a tab-separated
    to_csv (which quotes texts holding a quote: the texts are read unquoted of it) all give the Parquet's examples;
    `--data-dir` of the DatasetDict's folder finds its splits."""
    datasets = pytest.importorskip("datasets")
    rows = _rows("rte")
    rows[1] = ('He said "no" to a "deal".', rows[1][1], rows[1][2])   # a text with quotes, as to_csv quotes it
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["entailment", "not_entailment"]),
                                  "idx": datasets.Value("int32")})
    split = {"validation": datasets.Dataset.from_dict(_hub_table("rte", rows, False).to_pydict(), features=features),
             "test": datasets.Dataset.from_dict(_hub_table("rte", rows, True).to_pydict(), features=features)}
    saved = tmp_path / "rte_saved"
    datasets.DatasetDict(split).save_to_disk(str(saved))
    split["validation"].to_json(str(tmp_path / "validation.jsonl"))
    split["validation"].to_csv(str(tmp_path / "validation.csv"), index=False)
    split["validation"].to_csv(str(tmp_path / "rte_validation.tsv"), sep="\t", index=False)
    parquet = _parquet(_hub_table("rte", rows, False), tmp_path / "p" / "validation-00000-of-00001.parquet")
    expected = [(e.guid, e.text_a, e.text_b, e.label) for e in glue.read_examples("rte", parquet)]
    assert expected[1][1] == 'He said "no" to a "deal".'
    arrow = next((saved / "validation").glob("*.arrow"))
    for path in (saved / "validation", arrow, tmp_path / "validation.jsonl", tmp_path / "validation.csv",
                 tmp_path / "rte_validation.tsv"):
        assert [(e.guid, e.text_a, e.text_b, e.label) for e in glue.read_examples("rte", path)] == expected, path
    task = glue.get_task("rte")
    assert glue.find_split(task, saved, "dev") == [saved / "validation"]
    assert glue.find_split(task, saved, "test") == [saved / "test"]
    assert [e.guid for e in glue.read_examples("rte", saved / "test", has_labels=False)] == [str(i) for i in ORDER]
    with pytest.raises(DataError, match=r"a datasets DatasetDict folder \(save_to_disk\); give one split's folder"):
        glue.read_examples("rte", saved)


def test_a_hub_splits_shards_are_read_together(tmp_path):
    """The Hub keeps a large split in shards (`train-00000-of-00002.parquet`, ...): one of them given (or found
    by --data-dir) reads the split whole, in shard order (a test split's submission needs every row); a shard
    missing beside it is named."""
    rows = _rows("sst2")
    table = _hub_table("sst2", rows, test=True)
    first = _parquet(table.slice(0, 10), tmp_path / "sst2" / "test-00000-of-00002.parquet")
    second = _parquet(table.slice(10), tmp_path / "sst2" / "test-00001-of-00002.parquet")
    assert glue.find_split(glue.get_task("sst2"), tmp_path, "test") == [first]
    examples = glue.read_examples("sst2", second, has_labels=False)
    assert [e.guid for e in examples] == [str(i) for i in ORDER]
    assert examples[10].where == f"{second}:1"
    second.unlink()
    with pytest.raises(DataError, match=r"test-00000-of-00002\.parquet: one of the 2 shards of a split, and "
                                        r"test-00001-of-00002\.parquet is not beside it"):
        glue.read_examples("sst2", first, has_labels=False)


# ------------------------------------------------------------------------------------------ refusals

def test_a_test_split_of_minus_ones_is_predicted_not_trained_on(pretrained, tmp_path, capsys):
    """A Hub test split (every label -1) given as --dev or --train is refused in one line (it was scored against
    a class no row has, or trained as one); a -1 among labelled rows is named; as --test it is predicted."""
    rows = _rows("rte")
    test = _parquet(_hub_table("rte", rows, True), tmp_path / "test-00000-of-00001.parquet")
    model = _glue_model(tmp_path / "model", pretrained, "rte")
    code = main(["predict", "glue", "--task", "rte", "--model", str(model), "--dev", str(test), "--out",
                 str(tmp_path / "out"), "--no-progress"])
    assert_one_error(capsys, code, f"{test}:1: every label is -1", "predicted with --test")
    labels = [0, 1, -1] + [0] * (N - 3)
    mixed = _parquet(_hub_table("rte", rows, False).set_column(2, "label", pa.array(labels)), tmp_path / "m.parquet")
    with pytest.raises(DataError, match=r"m\.parquet:3: label -1 \(no label, as in a test split\) among labelled "
                                        r"rows \(1 of 24"):
        glue.read_examples("rte", mixed)
    assert main(["predict", "glue", "--task", "rte", "--model", str(model), "--test", str(test), "--out",
                 str(tmp_path / "out"), "--no-progress"]) == 0
    assert len((tmp_path / "out" / "submission" / "RTE.tsv").read_text().splitlines()) == N + 1


def test_another_tasks_export_and_unknown_labels_are_named(tmp_path):
    """An SST-2 export given to RTE names the columns it has and whose they are; a label number past datasets'
    classes is named with what each number means; a test split's index given twice is refused (one prediction
    per index); two exports of one split in a --data-dir are refused."""
    sst2 = _parquet(_hub_table("sst2", _rows("sst2"), False), tmp_path / "sst2.parquet")
    with pytest.raises(DataError, match=r"sst2\.parquet:1: no column 'sentence1', 'sentence2': a Hugging Face "
                                        r"datasets export of glue/rte has the columns sentence1, sentence2, label, "
                                        r"idx; this one has sentence, label, idx \(the columns of glue/cola, "
                                        r"glue/sst2\)"):
        glue.read_examples("rte", sst2)
    bad = tmp_path / "validation.jsonl"
    bad.write_text('{"premise": "a", "hypothesis": "b", "label": 3, "idx": 0}\n')
    with pytest.raises(DataError, match=r"validation\.jsonl:1: label 3 is not one of datasets' glue/mnli labels "
                                        r"\(0 entailment, 1 neutral, 2 contradiction; -1 in a test split\)"):
        glue.read_examples("mnli", bad)
    twice = tmp_path / "test.jsonl"
    twice.write_text('{"sentence": "a", "label": -1, "idx": 4}\n{"sentence": "b", "label": -1, "idx": 4}\n')
    with pytest.raises(DataError, match=r"test\.jsonl:2: idx 4 is also the idx of .*test\.jsonl:1"):
        glue.read_examples("sst2", twice, has_labels=False)
    _parquet(_hub_table("sst2", _rows("sst2"), True), tmp_path / "test-00000-of-00001.parquet")
    with pytest.raises(DataError, match=r"test-\*-of-00001\.parquet and test\.jsonl are two exports of the split "
                                        r"test"):
        glue.find_split(glue.get_task("sst2"), tmp_path, "test")
