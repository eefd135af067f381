"""RACE audit 24, as a user who gets RACE from the Hugging Face Hub (`ehovy/race`: configs all, middle, high; one
row per question, columns example_id, article, answer, question, options; `all/train-00000-of-00001.parquet`):
the Hub's rows come in `datasets`' order (its race.py read the archive's files sorted as paths: high before middle,
`high1.txt`, `high10.txt`, ...), and they were kept in it, so `finetune race` on the Hub's files trained on the same
questions in another order than on the passage files (other losses, other predictions); a
`DatasetDict.save_to_disk` folder (train/, validation/ holding state.json) was "no passages found under middle/,
high/"; a download of the Hub's middle/ and high/ configs alone (no all/) the same; a test file without the answer
column could not be predicted (a passage file without `answers` can); an options list holding a null said
"4 options, RACE has a list of 4 texts". Pinned as they were: the article's start is kept (google-research's
race_utils), every `_` of the question takes the option, `accuracy` is the paper's weighted total, and a malformed
row stops `finetune` in one line naming the file and row."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tasks import race
from albertlm.tasks.tables import DataError
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_race import CharTokenizer
from test_tasks_audit22 import _seen, _write_jsonl

SPLIT_FILES = {"train": "train", "dev": "validation"}     # the Hub's split names


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _hub_rows(split: str, levels=race.LEVELS) -> list[dict]:
    """The shared passages of a split as the Hub's rows, in the order `datasets`' race.py yields them: the
    split's `**/*.txt` sorted as paths (high before middle; 123, 132, 144), each passage's questions in order."""
    root = shared_path("race", "RACE", split)
    rows = []
    for path in sorted(str(path) for path in root.glob("**/*.txt")):
        passage = json.loads(Path(path).read_text(encoding="utf-8"))
        if not passage["id"].startswith(tuple(levels)):
            continue
        for question, options, answer in zip(passage["questions"], passage["options"], passage["answers"]):
            rows.append({"example_id": passage["id"], "article": passage["article"], "answer": answer,
                         "question": question, "options": options})
    return rows


def _hub(folder: Path, config: str = "all", levels=race.LEVELS) -> Path:
    """The Hub's snapshot of one config: `<config>/<split>-00000-of-00001.parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / config).mkdir(parents=True, exist_ok=True)
    for split, name in SPLIT_FILES.items():
        rows = _hub_rows(split, levels)
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), folder / config / f"{name}-00000-of-00001.parquet")
    return folder


def test_the_hubs_rows_come_in_the_passage_files_order(tmp_path):
    """The same examples in the same order (the training order) as the passage files, from every export; the
    Hub's first train row is high/123.txt's, the passage files' middle/2.txt's."""
    original = {split: race.read_race(shared_path("race", "RACE"), split) for split in SPLIT_FILES}
    assert _hub_rows("train")[0]["example_id"] == "high123.txt"
    hub = _hub(tmp_path / "hub")
    for split in SPLIT_FILES:
        assert _seen(race.read_race(hub, split)) == _seen(original[split])
        assert _seen(race.read_race(hub / "all", split)) == _seen(original[split])
    for levels in (("high",), ("high", "middle")):     # the levels in the order asked, as the directories
        assert _seen(race.read_race(hub, "train", levels)) == _seen(
            race.read_race(shared_path("race", "RACE"), "train", levels))


def test_finetune_predict_and_evaluate_agree_between_the_layouts(tmp_path, capsys):
    """`finetune race` on the Hub's Parquet trains as on the passage files: the same losses, dev predictions (keys
    in the same order) and scores; `predict race` of that model on the Hub's rows writes the passage files'
    predictions; `evaluate race --predictions` scores either file against either layout alike."""
    original, hub = shared_path("race", "RACE"), _hub(tmp_path / "hub")
    model = save_tiny_pretrained(tmp_path)
    run = ["--model", str(model), "--max-steps", "4", "--batch-size", "4", "--max-seq-length", "48",
           "--max-qa-length", "16", "--eval-every", "2", "--seed", "1", "--lr", "1e-2", "--no-progress"]
    for name, data in (("orig", original), ("hub", hub)):
        assert main(["finetune", "race", "--data-dir", str(data), "--out", str(tmp_path / name), *run]) == 0
    capsys.readouterr()
    for name in ("dev_predictions.json", "train_log.json"):
        assert (tmp_path / "orig" / name).read_text() == (tmp_path / "hub" / name).read_text(), name
    assert main(["predict", "race", "--model", str(tmp_path / "orig" / "best"), "--data-dir", str(hub),
                 "--split", "dev", "--no-progress", "--out", str(tmp_path / "predicted")]) == 0
    assert ((tmp_path / "predicted" / "dev_predictions.json").read_text()
            == (tmp_path / "orig" / "dev_predictions.json").read_text())
    best = json.loads((tmp_path / "orig" / "metrics.json").read_text())["best"]["dev"]
    capsys.readouterr()
    for data in (original, hub):
        for run_dir in ("orig", "hub"):
            assert main(["evaluate", "race", "--data-dir", str(data), "--predictions",
                         str(tmp_path / run_dir / "dev_predictions.json")]) == 0
            assert json.loads(capsys.readouterr().out) == best


def test_a_save_to_disk_folder_is_read_as_the_passage_files(tmp_path, capsys):
    """`load_dataset("ehovy/race", "all").save_to_disk(DIR)`: DIR/train, DIR/validation (state.json and Arrow
    files); a split's folder given itself is that split (its name says which), and another split asked of it is
    refused naming the folder to give; a validation/ beside a dev/ folder is two exports of one split."""
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.DatasetDict({name: datasets.Dataset.from_list(_hub_rows(split))
                          for split, name in SPLIT_FILES.items()}).save_to_disk(str(saved))
    original = {split: race.read_race(shared_path("race", "RACE"), split) for split in SPLIT_FILES}
    for split in SPLIT_FILES:
        assert _seen(race.read_race(saved, split)) == _seen(original[split])
    assert _seen(race.read_race(saved / "validation", "dev")) == _seen(original["dev"])
    with pytest.raises(DataError, match=r"validation is the dev split's datasets save_to_disk folder .*give the "
                                        r"folder holding the split folders"):
        race.read_race(saved / "validation", "train")
    predictions = tmp_path / "dev_predictions.json"
    predictions.write_text(json.dumps({e.qid: race.LETTERS[e.label] for e in original["dev"]}), encoding="utf-8")
    for data in (saved, saved / "validation"):
        assert main(["evaluate", "race", "--data-dir", str(data), "--predictions", str(predictions)]) == 0
        assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0
    datasets.Dataset.from_list(_hub_rows("dev")).save_to_disk(str(saved / "dev"))
    with pytest.raises(DataError, match=r"dev and validation are two exports of one split"):
        race.read_race(saved, "dev")


def test_the_hubs_middle_and_high_configs_alone_are_read_together(tmp_path):
    """A download of the Hub's per-level configs (`middle/`, `high/`, no `all/`) given as the folder holding
    them: both levels, in the passage files' order (it was "no passages found under middle/, high/")."""
    hub = tmp_path / "hub"
    _hub(hub, "middle", ("middle",))
    _hub(hub, "high", ("high",))
    for split in SPLIT_FILES:
        assert _seen(race.read_race(hub, split)) == _seen(race.read_race(shared_path("race", "RACE"), split))
    assert _seen(race.read_race(hub / "high", "train")) == _seen(
        race.read_race(shared_path("race", "RACE"), "train", ("high",)))


def test_new_questions_without_the_answer_column_are_predicted(tmp_path):
    """Rows to predict without an `answer` column are read unlabelled (as a passage file without `answers`);
    training or scoring data without it is refused naming the column."""
    rows = [{k: v for k, v in row.items() if k != "answer"} for row in _hub_rows("dev")]
    _write_jsonl(tmp_path / "test.jsonl", rows)
    examples = race.read_race(tmp_path, "test", answers=False)
    assert [e.label for e in examples] == [None] * 11
    assert [e.qid for e in examples] == [e.qid for e in race.read_race(shared_path("race", "RACE"), "dev")]
    with pytest.raises(DataError, match=r"test\.jsonl:1: no answer \(a Hugging Face RACE row has the columns"):
        race.read_race(tmp_path, "test")


def test_an_options_list_holding_a_null_names_the_option(tmp_path):
    row = _hub_rows("dev")[0]
    _write_jsonl(tmp_path / "validation.jsonl", [{**row, "options": [*row["options"][:2], None, row["options"][3]]}])
    with pytest.raises(DataError, match=r"validation\.jsonl:1: option C is NoneType, expected text"):
        race.read_race(tmp_path, "dev")


@pytest.mark.parametrize("change, phrases", [
    ({"answer": "E"}, ("train-00000-of-00001.parquet:3", "answer 'E' is not one of A, B, C, D")),
    ({"options": ["a", "b", "c"]}, ("train-00000-of-00001.parquet:3", "3 options, RACE has a list of 4")),
])
def test_a_malformed_hub_row_stops_finetune_in_one_line(tmp_path, capsys, change, phrases):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _hub_rows("train")
    rows[2] = {**rows[2], **change}
    (tmp_path / "hub" / "all").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hub" / "all" / "train-00000-of-00001.parquet")
    model = save_tiny_pretrained(tmp_path)
    code = main(["finetune", "race", "--data-dir", str(tmp_path / "hub"), "--model", str(model), "--out",
                 str(tmp_path / "run"), "--max-steps", "1", "--max-seq-length", "48", "--no-progress"])
    assert_one_error(capsys, code, *phrases)


def _googles_choice(context: list[int], ending: list[int], max_seq_length: int, max_qa_length: int) -> list[int]:
    """google-research race_utils.convert_single_example for one choice, transcribed (ids, not padded)."""
    ending = ending[-max_qa_length:]
    if len(context) + len(ending) > max_seq_length - 3:
        context = context[: max_seq_length - 3 - len(ending)]
    return [2] + context + [3] + ending + [3]


def test_a_long_article_keeps_its_start_as_googles_race_utils():
    """An article longer than max_seq_length keeps its first tokens (race_utils cuts `context_tokens_choice` at
    its end), question+option its last max_qa_length; every choice equals google's, token for token."""
    tokenizer = CharTokenizer()
    dev = race.read_race(shared_path("race", "RACE"), "dev")
    for max_seq_length, max_qa_length in ((64, 16), (100, 20), (512, 128)):
        features = race.build_features(tokenizer, dev, max_seq_length, max_qa_length)
        for example, feature in zip(dev, features):
            context = tokenizer.encode_batch([example.article])[0]
            for c, option in enumerate(example.options):
                ending = tokenizer.encode_batch([race.question_with_option(example.question, option)])[0]
                expected = _googles_choice(context, ending, max_seq_length, max_qa_length)
                row = feature.input_ids[c]
                assert row[: len(expected)].tolist() == expected and not row[len(expected):].any()


def test_every_blank_takes_the_option_as_googles_race_utils():
    """race_utils: `question.replace("_", option)` when the question holds a `_` (every one of them, an option
    holding `_` itself included), else `" ".join([question, option])`."""
    for question, option in (("_ and _ are friends.", "Tom"), ("He was born in ____ .", "1990"),
                             ("What is it?", "a_b"), ("The _ is _", "x_y"), ("", "alone")):
        google = question.replace("_", option) if "_" in question else " ".join([question, option])
        assert race.question_with_option(question, option) == google


def test_accuracy_is_the_papers_weighted_total_of_race_m_and_race_h():
    """The paper's RACE number is over all questions: (m * RACE-m + h * RACE-h) / (m + h)."""
    examples = race.read_race(shared_path("race", "RACE"), "train")
    rng = np.random.default_rng(0)
    preds = rng.integers(0, 4, len(examples))
    out = race.race_metrics(examples, preds)
    m, h = out["num_middle"], out["num_high"]
    assert (m, h) == (10, 12)
    assert out["accuracy"] == pytest.approx((m * out["accuracy_middle"] + h * out["accuracy_high"]) / (m + h))
