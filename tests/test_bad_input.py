"""Bad input, reader by reader (library level): each kind of damage (empty, truncated, wrong type, wrong schema,
wrong encoding, out-of-range, inconsistent with another input) gives a UserError whose one-line message names the
file and the problem; never another exception or a hang. `test_bad_input_cli.py` checks the same through the
installed `albertlm` command; `test_fuzz_readers.py` throws generated input at the same readers.
"""
from __future__ import annotations

import copy
import json
import os
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.errors import UserError
from albertlm.tasks import classify, glue, metrics, race, squad
from conftest import shared_path

LATIN1 = "Caf\xe9 cr\xe8me\tla Fran\xe7aise\n".encode("latin-1")  # not UTF-8


@contextmanager
def time_limit(seconds: float):
    """Fail instead of hanging (the SQuAD windows once looped forever)."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def expect_error(call, *phrases: str):
    """`call()` raises a UserError with a one-line message holding every phrase; returns the message."""
    with time_limit(20), pytest.raises(UserError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, f"not one line: {message!r}"
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in {message!r}"
    return message


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ SQuAD

@pytest.fixture(scope="module")
def squad_v2():
    return json.loads(shared_path("squad", "dev-v2.0-small.json").read_text(encoding="utf-8"))


def _first_qa(data):
    return data["data"][0]["paragraphs"][0]["qas"][0]


def _damaged_squad(squad_v2, damage):
    data = copy.deepcopy(squad_v2)
    damage(data)
    return data


SQUAD_DAMAGE = {  # name: (damage to the parsed v2.0 dev file, phrases of the message)
    "answers is a string": (lambda d: _first_qa(d).update(answers="France"), ["'answers' is a string"]),
    "no qas": (lambda d: [p.pop("qas") for a in d["data"] for p in a["paragraphs"]], ["has no 'qas'"]),
    "answer without text": (lambda d: _first_qa(d)["answers"][0].pop("text"), ["has no 'text'"]),
    "answer_start a word": (lambda d: _first_qa(d)["answers"][0].update(answer_start="x"), ["'answer_start'"]),
    "answer_start negative": (lambda d: _first_qa(d)["answers"][0].update(answer_start=-3), ["'answer_start'"]),
    "answer text not in context": (lambda d: _first_qa(d)["answers"][0].update(text="Atlantis"),
                                   ["'Atlantis'", "not in the context"]),
    "context a number": (lambda d: d["data"][0]["paragraphs"][0].update(context=7), ["'context' is an integer"]),
    "question missing": (lambda d: _first_qa(d).pop("question"), ["has no 'question'"]),
    "is_impossible a string": (lambda d: _first_qa(d).update(is_impossible="false"), ["is_impossible"]),
    "paragraphs an object": (lambda d: d["data"][0].update(paragraphs={}), ["'paragraphs' is an object"]),
    "article a string": (lambda d: d["data"].insert(0, "Normans"), ["data[0] is a string"]),
    "duplicate question id": (lambda d: d["data"][0]["paragraphs"][0]["qas"].append(_first_qa(d)),
                              ["appears more than once"]),
    "no questions": (lambda d: d.update(data=[]), ["no questions"]),
    "data not a list": (lambda d: d.update(data={"x": 1}), ["'data' list"]),
    "newline in a question id": (lambda d: _first_qa(d).update(id="a\nb", answers=[{"text": "Atlantis",
                                                                                      "answer_start": 0}]),
                                 ["question 'a\\nb'", "Atlantis"]),  # quoted: the message stays one line
}


@pytest.mark.parametrize("name", sorted(SQUAD_DAMAGE))
def test_squad_file_damage(name, squad_v2, tmp_path):
    damage, phrases = SQUAD_DAMAGE[name]
    path = write(tmp_path / "dev.json", _damaged_squad(squad_v2, damage))
    expect_error(lambda: squad.read_squad(path), "dev.json", *phrases)


@pytest.mark.parametrize("content, phrase", [
    (b"", "not valid JSON"), (b'{"version": "v2.0", "data": [{"title": "x", "parag', "not valid JSON"),
    (b"[1, 2]", "'data' list"), (LATIN1, "not UTF-8"), (b"[" * 100_000 + b"]" * 100_000, "cannot read this JSON"),
])
def test_squad_file_encoding_and_syntax(content, phrase, tmp_path):
    path = write(tmp_path / "dev.json", content)
    expect_error(lambda: squad.read_squad(path), "dev.json", phrase)
    expect_error(lambda: squad.read_squad(tmp_path), str(tmp_path), "not a file")


def test_squad_flat_layout_damage(tmp_path):
    record = {"id": "q1", "question": "Who?", "context": "Rollo met Charles.",
              "answers": {"text": ["Charles", "Rollo"], "answer_start": [10]}}
    path = write(tmp_path / "flat.json", {"data": [record]})
    expect_error(lambda: squad.read_squad(path), "flat.json", "question q1", "same length")
    record["answers"] = ["Charles"]
    write(path, {"data": [record]})
    expect_error(lambda: squad.read_squad(path), "flat.json", "'answers' is a list")
    write(path, {"data": [{"title": "no layout"}]})
    expect_error(lambda: squad.read_squad(path), "flat.json", "neither 'paragraphs'")


@pytest.mark.parametrize("settings, phrases", [
    (dict(max_seq_length=128, max_query_length=200), ["max_seq_length=128", "max_query_length=200", "no room"]),
    (dict(max_seq_length=32), ["max_seq_length=32", "max_query_length=64", "no room"]),
    (dict(max_seq_length=67), ["max_seq_length=67"]),              # 67 = 64 + 3: not one context token
    (dict(doc_stride=0), ["doc_stride=0"]),
    (dict(doc_stride=-5), ["doc_stride=-5"]),
    (dict(max_answer_length=0), ["max_answer_length=0"]),
    (dict(n_best_size="20"), ["n_best_size='20'"]),
])
def test_squad_settings_that_used_to_hang_are_refused_up_front(settings, phrases):
    expect_error(lambda: squad.SquadSettings(**settings), *phrases)


def test_squad_windows_always_advance():
    with time_limit(5):
        assert squad.window_starts(10, 1, 1) == list(range(10))
        assert squad.window_starts(5, 3, 100) == [0, 3]
        for window, stride in ((0, 10), (-3, 10), (10, 0), (10, -1)):
            expect_error(lambda: squad.window_starts(50, window, stride), "doc_stride")


def test_squad_features_terminate_at_the_tightest_settings(squad_v2, tmp_path):
    """max_seq_length = max_query_length + 4 leaves one context token per window: slow, but it ends."""
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))[:2]
    settings = squad.SquadSettings(max_seq_length=24, max_query_length=20, doc_stride=1)
    with time_limit(20):
        features = squad.build_features(tokenizer, examples, settings, training=True)
    assert all(f.length <= 24 for f in features) and len(features) > 50


# -------------------------------------------------------------------------------------- SQuAD scoring

@pytest.fixture(scope="module")
def squad_ids():
    return [e.qid for e in squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))]


def test_scoring_predictions_that_match_no_question(squad_ids, tmp_path):
    gold = shared_path("squad", "dev-v2.0-small.json")
    preds = write(tmp_path / "predictions.json", {"not-a-question": "France"})
    expect_error(lambda: squad.evaluate_files(gold, preds), "predictions.json", "none of its 1 question ids")
    write(preds, {})
    expect_error(lambda: squad.evaluate_files(gold, preds), "predictions.json", "no predictions")
    # the metric itself (no file names there) no longer divides by zero
    expect_error(lambda: metrics.squad_v2_scores({"q1": ["a"]}, {"q2": "a"}), "none of the 1 predictions")


def test_scoring_a_v2_file_as_v1(squad_ids, tmp_path):
    gold = shared_path("squad", "dev-v2.0-small.json")
    preds = write(tmp_path / "predictions.json", dict.fromkeys(squad_ids, "France"))
    expect_error(lambda: squad.evaluate_files(gold, preds, "1.1"), "dev-v2.0-small.json", "v1.1", "version 2.0")
    expect_error(lambda: metrics.squad_v1_scores({"q1": []}, {"q1": ""}), "q1", "no gold answer")


def test_scoring_wrong_types_and_null_odds(squad_ids, tmp_path):
    gold = shared_path("squad", "dev-v2.0-small.json")
    preds = write(tmp_path / "predictions.json", {squad_ids[0]: ["France"]})
    expect_error(lambda: squad.evaluate_files(gold, preds), "predictions.json", "expected an answer string")
    write(preds, dict.fromkeys(squad_ids, ""))
    odds = write(tmp_path / "null_odds.json", {squad_ids[0]: 1.0})
    expect_error(lambda: squad.evaluate_files(gold, preds, na_probs=odds), "null_odds.json", "no null odds")
    write(odds, "{" + ", ".join(f'"{q}": NaN' for q in squad_ids) + "}")
    expect_error(lambda: squad.evaluate_files(gold, preds, na_probs=odds), "null_odds.json", "finite")


def test_scoring_partial_predictions_reports_missing_ids_and_strict_mode(squad_ids, tmp_path):
    """The issue's case: predictions for 5 of 14 questions scored 100 with nothing but a count in the JSON."""
    gold = shared_path("squad", "dev-v2.0-small.json")
    examples = squad.read_squad(gold)
    right = {e.qid: (e.answers[0][0] if e.answers else "") for e in examples[:5]}
    preds = write(tmp_path / "predictions.json", right)
    result = squad.evaluate_files(gold, preds)
    assert result.metrics["exact"] == 100.0 and result.metrics["missing"] == 9  # the official v2.0 average
    assert result.missing == squad_ids[5:]
    warning = result.warning()
    assert "no prediction for 9 of 14 questions" in warning and squad_ids[5] in warning and "\n" not in warning
    assert squad_ids[-1] not in warning  # the first few ids, not all
    strict = squad.evaluate_files(gold, preds, strict=True)
    assert strict.metrics["exact"] == pytest.approx(500 / 14) and strict.metrics["total"] == 14
    assert strict.metrics["strict"] is True and "scored as wrong" in strict.warning()
    odds = write(tmp_path / "null_odds.json", dict.fromkeys(right, 0.0))
    thresholds = squad.evaluate_files(gold, preds, na_probs=odds, strict=True).metrics
    assert thresholds["best_exact"] == pytest.approx(500 / 14)   # missing ones never count as right
    complete = squad.evaluate_files(gold, write(tmp_path / "all.json", {**right, **dict.fromkeys(squad_ids[5:], "")}))
    assert complete.warning() is None and complete.missing == []


# ------------------------------------------------------------------------------------------------- GLUE

@pytest.mark.parametrize("content, phrases", [
    ("#1 ID\t#2 ID\tQuality\t#1 String\t#2 String\n", ["no examples", "only a header"]),   # header only
    ("", ["no examples"]),
    ("\n\n", ["no examples"]),
    (LATIN1, ["not UTF-8"]),
    ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\nA\t1\t2\tx\ty\n", [":2", "label 'A'"]),
    ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tonly four fields\n", [":2", "4 tab-separated fields"]),
])
def test_glue_file_damage(content, phrases, tmp_path):
    path = write(tmp_path / "dev.tsv", content)
    expect_error(lambda: glue.read_examples("mrpc", path), "dev.tsv", *phrases)


def test_glue_dev_file_with_only_a_header_is_refused_before_training(tmp_path):
    """glue_spec reads every file before any training step: the header-only dev file stops it there."""
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks.specs import glue_spec
    from albertlm.tokenization import load_tokenizer

    data = tmp_path / "MRPC"
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    write(data / "train.tsv", header + "1\t1\t2\tA cat sat.\tA cat sat down.\n")
    write(data / "dev.tsv", header)
    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    expect_error(lambda: glue_spec("mrpc", tokenizer, FinetuneConfig(), data), "dev.tsv", "no examples")
    with pytest.raises(UserError, match="all 1 rows are malformed"):
        write(data / "dev.tsv", header + "1\tshort\n")
        glue_spec("mrpc", tokenizer, FinetuneConfig(), data, skip_bad_rows=True)


@pytest.mark.parametrize("score", ["nan", "inf", "-inf", "high"])
def test_glue_regression_scores_must_be_finite_numbers(score, tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    path = write(tmp_path / "dev.tsv", header + f"0\tx\tx\t2012\t1\tx\tx\tA man.\tA dog.\t{score}\n")
    expect_error(lambda: glue.read_examples("stsb", path), "dev.tsv:2", repr(score))


# ------------------------------------------------------------------------------------------------- RACE

def _passage(**changes):
    passage = {"article": "Tom has a red ball.", "questions": ["What color is the ball?"],
               "options": [["red", "blue", "green", "black"]], "answers": ["A"]}
    passage.update(changes)
    return passage


@pytest.mark.parametrize("changes, phrases", [
    (dict(answers=["E"]), ["answer 'E'"]), (dict(answers=[""]), ["answer ''"]), (dict(answers=[["A"]]), ["answer ['A']"]),
    (dict(answers=[0]), ["answer 0"]), (dict(options=[["red", "blue"]]), ["2 options"]),
    (dict(options=["red blue green black"]), ["options"]), (dict(options=[["red", 1, None, "x"]]), ["options must be texts"]),
    (dict(questions="What color?"), ["'questions' is str"]), (dict(article=None), ["'article' is NoneType"]),
    (dict(questions=["a", "b"]), ["2 questions, 1 option lists"]), (dict(questions=[5]), ["question is int"]),
])
def test_race_passage_damage(changes, phrases, tmp_path):
    path = write(tmp_path / "dev" / "middle" / "1.txt", _passage(**changes))
    expect_error(lambda: race.read_race(tmp_path, "dev"), "1.txt", *phrases)


def test_race_damage_beyond_the_passage(tmp_path):
    write(tmp_path / "dev" / "middle" / "1.txt", LATIN1)
    expect_error(lambda: race.read_race(tmp_path, "dev"), "1.txt", "not UTF-8")
    write(tmp_path / "dev" / "middle" / "1.txt", "")
    expect_error(lambda: race.read_race(tmp_path, "dev"), "1.txt", "not valid JSON")
    preds = write(tmp_path / "preds.json", {"middle/1.txt#0": ""})
    expect_error(lambda: race.read_predictions(preds), "preds.json", "expected one of A-D")
    write(preds, {"middle/1.txt#0": True})
    expect_error(lambda: race.read_predictions(preds), "preds.json", "expected one of A-D")
    for length, qa in ((4, 128), (512, 0), (512, -1)):
        expect_error(lambda: race.build_features(None, [], length, qa), "RACE setting")


# ------------------------------------------------------------------------------------- classify (CSV...)

COLUMNS = classify.Columns("text", label="label")


@pytest.mark.parametrize("name, content, phrases", [
    ("train.csv", "text,label\n", ["no rows"]),
    ("train.csv", "", ["empty file"]),
    ("train.csv", LATIN1, ["not UTF-8"]),
    ("train.csv", 'text,label\n"an unterminated quote,1\n', ["train.csv"]),
    ("train.csv", "text,label\nhello,1,extra\n", [":2", "3 fields, the header has 2"]),
    ("train.csv", "words,label\nhello,1\n", [":2", "no column 'text'"]),
    ("train.jsonl", '{"text": ["a", "list"], "label": "x"}\n', [":1", "column 'text' holds list"]),
    ("train.jsonl", '{"text": "fine", "label": null}\n', [":1", "no label"]),
    ("train.jsonl", '{"text": "fine", "label": {"a": 1}}\n', [":1", "not a class name"]),
    ("train.jsonl", '["text", "label"]\n', [":1", "expected a JSON object"]),
    ("train.jsonl", '{"text": "fine", "label": 1\n', [":1", "not valid JSON"]),
    ("train.jsonl", '{"text": ' + "[" * 50_000 + "]" * 50_000 + ', "label": 1}\n', [":1", "cannot read this JSON"]),
    ("train.txt", "text\tlabel\n", ["no rows"]),
    ("train.xml", "<x/>", ["cannot tell the format"]),
])
def test_classify_file_damage(name, content, phrases, tmp_path):
    path = write(tmp_path / name, content)
    expect_error(lambda: classify.read_examples(path, COLUMNS), name, *phrases)


@pytest.mark.parametrize("label", ["nan", "inf", "x", "true"])
def test_classify_regression_labels_must_be_finite_numbers(label, tmp_path):
    path = write(tmp_path / "train.csv", f"text,label\nhello,{label}\n")
    expect_error(lambda: classify.read_examples(path, COLUMNS, regression=True), "train.csv:2", "label")
    jsonl = write(tmp_path / "train.jsonl", '{"text": "hello", "label": true}\n')
    expect_error(lambda: classify.read_examples(jsonl, COLUMNS, regression=True), "train.jsonl:1", "True")


def test_classify_label_sets(tmp_path):
    """Labels such as "²" (str.isdigit, but not int()) used to crash the numeric sort."""
    path = write(tmp_path / "train.csv", "text,label\na,²\nb,1\nc,10\nd,2\n")
    assert classify.label_set(classify.read_examples(path, COLUMNS)) == ("1", "10", "2", "²")
    path = write(tmp_path / "train.csv", "text,label\na,10\nb,-1\nc,2\n")
    assert classify.label_set(classify.read_examples(path, COLUMNS)) == ("-1", "2", "10")
    expect_error(lambda: classify.label_set([], ["a", "b", "a"]), "['a']", "more than once")


# ------------------------------------------------------------------------------------------- tokenizers

@pytest.fixture
def spm_dir(tmp_path):
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "spiece.model").write_bytes(shared_path("spm", "albert-base-v2_spiece.model").read_bytes())
    return directory


@pytest.mark.parametrize("config, phrases", [
    ({"do_lower_case": "false"}, ["do_lower_case", "'false'"]),
    ({"keep_accents": 1}, ["keep_accents"]),
    ({"split_digit_comma": "yes"}, ["split_digit_comma"]),
    ([1, 2], ["expected a JSON object"]),
    ("{not json", ["not a valid JSON file"]),
])
def test_tokenizer_config_damage(config, phrases, spm_dir):
    from albertlm.tokenization import load_tokenizer

    write(spm_dir / "tokenizer_config.json", config)
    expect_error(lambda: load_tokenizer(spm_dir), "tokenizer_config.json", *phrases)


def test_tokenizer_model_damage_and_option_values(spm_dir, tmp_path):
    from albertlm.tokenization import load_tokenizer

    good = (spm_dir / "spiece.model").read_bytes()
    for name, content in (("empty", b""), ("truncated", good[: len(good) // 3]), ("text", b"hello")):
        path = write(tmp_path / f"{name}.model", content)
        expect_error(lambda: load_tokenizer(path), f"{name}.model", "cannot read")
    expect_error(lambda: load_tokenizer(spm_dir, do_lower_case="no"), "do_lower_case", "'no'")
    expect_error(lambda: load_tokenizer(spm_dir, lowercase=True), "unknown tokenizer option")
    vocab = write(tmp_path / "wp" / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\n")
    write(tmp_path / "wp" / "tokenizer_config.json", {"strip_accents": "no"})
    expect_error(lambda: load_tokenizer(vocab.parent), "tokenizer_config.json", "strip_accents")


# ------------------------------------------------------------------------------------------ checkpoints

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    directory = tmp_path_factory.mktemp("tiny-model")
    config = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                         max_position_embeddings=64)
    AlbertForPreTraining(config).save_pretrained(directory)
    return directory


def _copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.parametrize("change, phrases", [
    ("not json", ["not a valid JSON file"]), ([1], ["expected a JSON object"]),
    ({"hidden_size": "32"}, ["hidden_size is '32'", "an integer"]),
    ({"initializer_range": "x"}, ["initializer_range is 'x'"]),
    ({"layer_norm_eps": None}, ["layer_norm_eps is None"]),
    ({"hidden_size": 30}, ["hidden_size=30", "divisible"]),
    ({"num_layers": 0}, ["num_layers=0"]),
    ({"warp_drive": True}, ["warp_drive"]),
])
def test_model_config_damage(change, phrases, tiny_model_dir, tmp_path):
    from albertlm.model.io import read_config

    directory = _copy_model(tiny_model_dir, tmp_path / "m")
    if isinstance(change, dict):
        config = json.loads((directory / "config.json").read_text())
        write(directory / "config.json", {**config, **change})
    else:
        write(directory / "config.json", change)
    expect_error(lambda: read_config(directory), "config.json", *phrases)


@pytest.mark.parametrize("change, phrases", [
    ({"num_hidden_layers": "12"}, ["num_hidden_layers is '12'"]), ({"id2label": 3}, ["id2label is 3"]),
    ({"hidden_act": ["gelu"]}, ["hidden_act"]), ({"num_hidden_groups": 5}, ["num_hidden_groups=5"]),
])
def test_transformers_config_damage(change, phrases, tmp_path):
    from albertlm.model.io import read_config

    config = {"model_type": "albert", "vocab_size": 99, "embedding_size": 16, "hidden_size": 32,
              "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37, **change}
    write(tmp_path / "config.json", config)
    expect_error(lambda: read_config(tmp_path), "config.json", *phrases)


@pytest.fixture
def malicious_pickle(tmp_path):
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return Payload, marker


def test_weights_damage(tiny_model_dir, tmp_path, malicious_pickle):
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import read_metadata, read_state

    directory = _copy_model(tiny_model_dir, tmp_path / "m")
    weights = directory / "model.safetensors"
    good = weights.read_bytes()
    for content in (good[: len(good) // 2], good[:-1], b"", b"\x00" * 64):
        weights.write_bytes(content)
        expect_error(lambda: read_state(directory), "model.safetensors", "truncated or damaged")
        expect_error(lambda: read_metadata(weights), "model.safetensors", "truncated or damaged")
        expect_error(lambda: AlbertForPreTraining.from_pretrained(directory), "model.safetensors")
    weights.unlink()
    bin_file = directory / "pytorch_model.bin"
    payload, marker = malicious_pickle
    torch.save({"albert.embeddings.word.weight": payload()}, bin_file)
    expect_error(lambda: read_state(directory), "pytorch_model.bin", "refused", "weights_only")
    assert not marker.exists(), "the pickle's payload ran"
    torch.save({"a": torch.zeros(3)}, bin_file)
    good = bin_file.read_bytes()
    for content in (good[: len(good) // 2], b"", b"hello"):
        bin_file.write_bytes(content)
        expect_error(lambda: read_state(directory), "pytorch_model.bin", "truncated or damaged")
    torch.save([torch.zeros(3)], bin_file)
    expect_error(lambda: read_state(directory), "pytorch_model.bin", "expected a state dict")


def test_phase2_hooks_for_resume(tiny_model_dir, tmp_path, malicious_pickle):
    """The readers `training/checkpoint.py` is to use on --resume (issue 10 phase 2): an empty or malicious
    trainer_state.pt, and weights of another shape, as one-line errors."""
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.model.io import check_shapes, read_safetensors, read_torch_file

    state_file = write(tmp_path / "trainer_state.pt", b"")
    expect_error(lambda: read_torch_file(state_file), "trainer_state.pt", "truncated or damaged")
    payload, marker = malicious_pickle
    torch.save({"step": payload()}, state_file)
    expect_error(lambda: read_torch_file(state_file), "trainer_state.pt", "refused")
    assert not marker.exists()
    torch.save({"step": 3, "rng": torch.zeros(2)}, state_file)
    assert read_torch_file(state_file)["step"] == 3
    state = read_safetensors(tiny_model_dir / "model.safetensors")
    wider = AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=48, num_layers=2,
                                             num_heads=4, ffn_size=37, max_position_embeddings=64))
    expect_error(lambda: check_shapes(wider, state, "run/checkpoint-2"), "run/checkpoint-2", "do not fit",
                 "(32,) vs (48,)")
    check_shapes(AlbertForPreTraining.from_pretrained(tiny_model_dir), state, "same")


# --------------------------------------------------------------------------------------- TF checkpoints

@pytest.fixture
def tf_dir(tmp_path):
    src = Path(__file__).parent / "fixtures" / "tf_albert_tiny"
    dst = tmp_path / "tf"
    dst.mkdir()
    for name in ("albert_config.json", "checkpoint", "model.ckpt-0.index", "model.ckpt-0.data-00000-of-00001"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


INDEX, DATA = "model.ckpt-0.index", "model.ckpt-0.data-00000-of-00001"


@pytest.mark.parametrize("damage, phrases", [
    (lambda d: (d / INDEX).unlink(), ["found none"]),
    (lambda d: (d / DATA).unlink(), [DATA, "missing"]),
    (lambda d: (d / INDEX).write_bytes((d / INDEX).read_bytes()[:1000]), [INDEX, "bad magic number"]),
    (lambda d: (d / INDEX).write_bytes(b""), [INDEX, "too short"]),
    (lambda d: (d / DATA).write_bytes((d / DATA).read_bytes()[:5000]), [DATA, "truncated"]),
    (lambda d: (d / DATA).write_bytes(b""), [DATA, "truncated"]),
    (lambda d: (d / "albert_config.json").write_text("{"), ["albert_config.json", "not a valid JSON"]),
    (lambda d: (d / "albert_config.json").write_text("[]"), ["albert_config.json", "expected a JSON object"]),
    (lambda d: (d / "albert_config.json").write_text('{"hidden_size": "32"}'), ["albert_config.json", "hidden_size"]),
])
def test_tf_checkpoint_damage(damage, phrases, tf_dir):
    from albertlm.interop.tf import import_tf_checkpoint

    damage(tf_dir)
    expect_error(lambda: import_tf_checkpoint(tf_dir), *phrases)


def test_tf_checkpoint_flipped_index_bytes(tf_dir):
    from albertlm.interop.tf import import_tf_checkpoint

    index = (tf_dir / INDEX).read_bytes()
    for position in range(0, len(index), 97):
        damaged = bytearray(index)
        damaged[position] ^= 0x5A
        (tf_dir / INDEX).write_bytes(bytes(damaged))
        try:
            import_tf_checkpoint(tf_dir)
        except UserError as exc:
            assert "\n" not in str(exc)


# ---------------------------------------------------------------------------------- pretraining shards

def make_dataset(directory: Path, num_instances: int = 6, length: int = 16, predictions: int = 3,
                 vocab: int = 99) -> dict:
    """A valid data directory written the way `data build` writes it (ShardWriter + meta.json)."""
    from albertlm.data.shards import META_FILE, ShardWriter, record_dtype, write_json_atomic

    directory.mkdir(parents=True, exist_ok=True)
    dtype = record_dtype(length, predictions, vocab)
    records = np.zeros(num_instances, dtype=dtype)
    records["length"] = length
    records["input_ids"][:, 0] = 2
    writer = ShardWriter(directory, dtype, records_per_shard=4)
    writer.write(records)
    shards = writer.close()
    meta = {"format_version": 1, "max_seq_length": length, "max_predictions_per_seq": predictions,
            "tokenizer": {"vocab_size": vocab, "pad_id": 0, "unk_id": 1, "cls_id": 2, "sep_id": 3, "mask_id": 4},
            "sentence_task": "sop", "masking": {}, "counts": {}, "num_instances": num_instances, "shards": shards,
            "num_shards": 1, "shard_index": None}
    write_json_atomic(directory / META_FILE, meta)
    return meta


META_DAMAGE = {
    "not json": ("{", ["not a valid JSON file"]),
    "a list": ([], ["expected a JSON object"]),
    "length a string": (dict(max_seq_length="16"), ["max_seq_length is '16'"]),
    "length beyond uint16": (dict(max_seq_length=70_000), ["max_seq_length is 70000", "1..65535"]),
    "more predictions than tokens": (dict(max_predictions_per_seq=17), ["max_predictions_per_seq is 17"]),
    "no tokenizer": (dict(tokenizer=None), ["tokenizer is None"]),
    "mask id outside the vocabulary": (dict(tokenizer={"vocab_size": 99, "mask_id": 99}), ["tokenizer.mask_id"]),
    "shard outside the directory": (dict(shards=[{"file": "../x.bin", "num_instances": 6}]), ["'../x.bin'"]),
    "shard without a count": (dict(shards=[{"file": "shard-00000.bin"}]), ["shards[0].num_instances"]),
    "counts disagree": (dict(num_instances=7), ["num_instances is 7", "hold 6"]),
    "newer format": (dict(format_version=2), ["format_version 2"]),
}


@pytest.mark.parametrize("name", sorted(META_DAMAGE))
def test_shard_meta_damage(name, tmp_path):
    from albertlm.data.shards import read_meta

    meta = make_dataset(tmp_path / "data")
    change, phrases = META_DAMAGE[name]
    write(tmp_path / "data" / "meta.json", {**meta, **change} if isinstance(change, dict) else change)
    expect_error(lambda: read_meta(tmp_path / "data"), "meta.json", *phrases)


def test_shard_files_damage(tmp_path):
    from albertlm.data.loader import PretrainingDataset
    from albertlm.data.shards import open_shards, read_meta

    meta = make_dataset(tmp_path / "data")
    assert len(PretrainingDataset(tmp_path / "data")) == 6
    shard = tmp_path / "data" / meta["shards"][0]["file"]
    shard.write_bytes(shard.read_bytes()[:-5])
    expect_error(lambda: open_shards(tmp_path / "data", read_meta(tmp_path / "data")), shard.name, "wrong size")
    shard.unlink()
    expect_error(lambda: PretrainingDataset(tmp_path / "data"), shard.name, "missing")
    parts = make_dataset(tmp_path / "parts")
    (tmp_path / "parts" / "meta.json").unlink()
    write(tmp_path / "parts" / "meta.part-00000-of-00002.json", {**parts, "num_shards": 2, "shard_index": 0})
    expect_error(lambda: read_meta(tmp_path / "parts"), "parts [0] of 2", "missing [1]")
    write(tmp_path / "parts" / "meta.part-00001-of-00002.json", {**parts, "num_shards": 2, "shard_index": 5})
    expect_error(lambda: read_meta(tmp_path / "parts"), "meta.part-00001-of-00002.json", "shard_index is 5")
