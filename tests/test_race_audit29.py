"""RACE audit 29, as a user fine-tuning ALBERT on RACE and reading it back in transformers: a blank written as a
full-width low line (`＿`, U+FF3F: text typed with a Chinese input method) was no blank, so the option was appended
after it, where google-research's race_utils (which looks for `_` after its NFKD preprocessing) fills it; an
option with a space at its end filling a blank kept the space (google's preprocessing strips the option:
"in 1990." read "in 1990 ."); a CSV written by `datasets`' `Dataset.to_csv` (its options column as a numpy
array's text, `['a' 'b' 'c' 'd']`, no commas) was "1 options"; a passage file to predict whose answers are empty
texts (`["", ""]`, as a Hugging Face row's empty answer) was refused. Pinned as they were: our choices are, token
for token, what transformers' tokenizer makes of (article, question+option) with `truncation="only_first"` on the
real passages, and the exported AlbertForMultipleChoice gives our logits."""
from __future__ import annotations

import json
import sys
import unicodedata

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.tasks import race
from albertlm.tasks.tables import DataError
from conftest import shared_path
from test_race_hub_audit24 import _hub_rows
from test_squad import albert_tokenizer  # noqa: F401 (a fixture: albert-base-v2's SentencePiece tokenizer)
from test_tasks_audit22 import _seen


def _googles_qa(question: str, option: str) -> str:
    """race_utils.read_examples on SentencePiece models, transcribed: both texts through tokenization's
    `preprocess_text` (whitespace collapsed and stripped, NFKD, combining characters dropped, lower case), then
    every `_` replaced by the option, else `" ".join([question, option])`."""
    def process(text: str) -> str:
        text = unicodedata.normalize("NFKD", " ".join(text.strip().split()))
        return "".join(c for c in text if not unicodedata.combining(c)).lower()

    question, option = process(question), process(option)
    return question.replace("_", option) if "_" in question else " ".join([question, option])


def test_a_full_width_blank_takes_the_option_as_googles_race_utils(albert_tokenizer):
    """The real dev questions with their blanks typed `＿` give the features of the originals (the option was
    appended after an unknown `_` piece); every choice encodes as google's preprocessed text does."""
    dev = race.read_race(shared_path("race", "RACE"), "dev")
    full_width = [race.RaceExample(e.qid, e.level, e.article, e.question.replace("_", "\uff3f"), e.options, e.label)
                  for e in dev]
    assert sum("\uff3f" in e.question for e in full_width) == 8
    for a, b in zip(race.build_features(albert_tokenizer, dev, 512, 128),
                    race.build_features(albert_tokenizer, full_width, 512, 128)):
        assert a.input_ids.tolist() == b.input_ids.tolist()
    cases = [("He was born in \uff3f .", "1990"), ("He was born in _.", "1990 "), ("The \ufe4f is _", " big "),
             ("Where is it?", " In a book. "), ("_ and _ are friends.", "Tom\u00e9"), ("", "alone")]
    cases += [(e.question, option) for e in full_width for option in e.options]
    ours = albert_tokenizer.encode_batch([race.question_with_option(q, o) for q, o in cases])
    assert ours == albert_tokenizer.encode_batch([_googles_qa(q, o) for q, o in cases])


def test_every_character_nfkd_makes_a_low_line_is_a_blank():
    low_lines = {c for c in map(chr, range(sys.maxunicode + 1))
                 if c != "_" and "_" in unicodedata.normalize("NFKD", c)}
    assert {chr(c) for c in race.LOW_LINES} == low_lines


def test_a_csv_written_by_datasets_to_csv_is_read(tmp_path):
    """`load_dataset("ehovy/race", "all")["validation"].to_csv("race_validation.csv")`: the options column is
    written as numpy's text of an array (no commas, a long one wrapped onto more lines); read as the passage
    files (train's long options included), and an option holding quotes, commas and brackets kept whole."""
    datasets = pytest.importorskip("datasets")
    original = {split: race.read_race(shared_path("race", "RACE"), split) for split in ("train", "dev")}
    for split, name in (("train", "train"), ("dev", "validation")):
        datasets.Dataset.from_list(_hub_rows(split)).to_csv(str(tmp_path / f"race_{name}.csv"))
    text = (tmp_path / "race_train.csv").read_text(encoding="utf-8")
    assert "' '" in text and "', '" not in text          # numpy's form, not a Python list
    for split in ("train", "dev"):
        assert _seen(race.read_race(tmp_path, split)) == _seen(original[split])
    odd = ["It's \"red\"", "a, b", "[c] 'd'", ""]
    (tmp_path / "odd").mkdir()
    datasets.Dataset.from_list([{**_hub_rows("dev")[0], "options": odd}]).to_csv(
        str(tmp_path / "odd" / "validation.csv"))
    assert race.read_race(tmp_path / "odd", "dev")[0].options == odd


def test_a_passage_with_empty_answers_is_predicted(tmp_path):
    """As a Hugging Face row's empty answer: questions to predict; scoring or training data still refuses
    them, and an empty answer beside real ones in a split to predict is refused (the accuracy would leave it out)."""
    level = tmp_path / "RACE" / "test" / "middle"
    level.mkdir(parents=True)
    passage = json.loads(shared_path("race", "RACE", "dev", "middle", "13.txt").read_text(encoding="utf-8"))
    (level / "13.txt").write_text(json.dumps({**passage, "answers": [""] * 5}), encoding="utf-8")
    assert [e.label for e in race.read_race(tmp_path / "RACE", "test", answers=False)] == [None] * 5
    with pytest.raises(DataError, match=r"13\.txt: question 0: answer '' is not one of A, B, C, D"):
        race.read_race(tmp_path / "RACE", "test")
    (level / "13.txt").write_text(json.dumps({**passage, "answers": ["", "A", None, "", ""]}), encoding="utf-8")
    with pytest.raises(DataError, match=r"13\.txt: question 0: answer ''"):
        race.read_race(tmp_path / "RACE", "test", answers=False)


def test_transformers_gets_our_choices_and_logits(tmp_path, capsys, albert_tokenizer, one_thread):
    """A tiny ALBERT with albert-base-v2's vocabulary, fine-tuned 2 steps on the real RACE sample and exported with
    `convert --to hf`: AutoTokenizer(article, question+option, truncation="only_first") gives our rows (long
    passages cut included), and AlbertForMultipleChoice.from_pretrained our logits."""
    transformers = pytest.importorskip("transformers")
    import shutil

    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.heads import AlbertForMultipleChoice

    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=37, max_position_embeddings=512)).save_pretrained(tmp_path / "model")
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), tmp_path / "model" / "spiece.model")
    assert main(["finetune", "race", "--data-dir", str(shared_path("race", "RACE")), "--model",
                 str(tmp_path / "model"), "--out", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "11",
                 "--max-seq-length", "512", "--lr", "1e-2", "--no-progress"]) == 0
    assert main(["convert", str(tmp_path / "run" / "best"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    capsys.readouterr()
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    hf_model = transformers.AlbertForMultipleChoice.from_pretrained(str(tmp_path / "hf"), local_files_only=True)
    ours = AlbertForMultipleChoice.from_pretrained(tmp_path / "run" / "best").eval()
    examples = race.read_race(shared_path("race", "RACE"), "dev") + race.read_race(shared_path("race", "RACE"),
                                                                                    "train", ("high",))
    for length in (512, 160):        # 160: the high school passages cut
        features = race.build_features(albert_tokenizer, examples, length, 128)
        for example, feature in zip(examples, features):
            encoded = theirs([example.article] * 4, [race.question_with_option(example.question, option)
                                                     for option in example.options],
                             truncation="only_first", max_length=length, padding=True, return_tensors="pt")
            assert encoded["input_ids"].tolist() == feature.input_ids.tolist(), example.qid
            assert encoded["token_type_ids"].tolist() == feature.token_type_ids.tolist(), example.qid
            if length == 512:
                with torch.no_grad():
                    expected = hf_model.eval()(**{k: v[None] for k, v in encoded.items()}).logits
                    got = ours(encoded["input_ids"][None], encoded["attention_mask"][None],
                               encoded["token_type_ids"][None])["logits"]
                np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-5)
