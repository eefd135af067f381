"""Property-based fuzzing (hypothesis) of every reader: any input gives a result or a one-line UserError, never
another exception or a hang. Inputs are generated near the real formats (valid skeletons with fields replaced by
arbitrary JSON, rows of arbitrary text, flipped bytes), where the bugs live.

Runs are derandomized (the same examples each run, so CI is stable) and keep no example database; set
ALBERTLM_FUZZ_EXAMPLES=500 (and ALBERTLM_FUZZ_RANDOM=1 for fresh examples) to search harder locally.
Each example runs under a time limit (SIGALRM), so a hang fails instead of blocking the suite.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import string
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import google_albert  # noqa: E402
from albertlm.errors import UserError  # noqa: E402
from conftest import shared_path  # noqa: E402
from test_bad_input import make_dataset, time_limit  # noqa: E402

SCALE = int(os.environ.get("ALBERTLM_FUZZ_EXAMPLES", "0"))


def fuzz(examples: int):
    return settings(max_examples=SCALE or examples, deadline=None, database=None,
                    derandomize=not os.environ.get("ALBERTLM_FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much])


def outcome(call, seconds: float = 10):
    """The result of `call()`, or the UserError it raised (one line); any other exception fails the test."""
    with time_limit(seconds):
        try:
            return call()
        except UserError as exc:
            assert "\n" not in str(exc), f"not one line: {exc!r}"
            return exc


json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats() | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
words = st.text(alphabet=string.ascii_letters + string.digits + " ,.'\"-()\t\u00e9\u0301\uac00\u4e2d", max_size=60)


def maybe(strategy, odds: int = 6):
    """Mostly `strategy`, sometimes any JSON value in its place (wrong type, null, nested...)."""
    return st.one_of(*([strategy] * odds), json_values)


def record(required: dict, optional: dict | None = None):
    return st.fixed_dictionaries({k: maybe(v) for k, v in required.items()},
                                 optional={k: maybe(v) for k, v in (optional or {}).items()})


@pytest.fixture(scope="module")
def tokenizer():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ SQuAD

answer = record({"text": words, "answer_start": st.integers(-3, 80)})
question = record({"id": st.text(string.ascii_lowercase + "\n\t", min_size=1, max_size=3), "question": words},
                  {"answers": st.lists(answer, max_size=3), "is_impossible": st.booleans()})
paragraph = record({"context": words, "qas": st.lists(question, max_size=3)})
article = record({"paragraphs": st.lists(paragraph, max_size=3)}, {"title": st.text(max_size=5)})
flat = record({"id": st.text(string.ascii_lowercase, min_size=1, max_size=3), "question": words, "context": words},
              {"answers": record({"text": st.lists(words, max_size=2),
                                  "answer_start": st.lists(st.integers(-1, 50), max_size=2)})})
squad_files = record({"data": st.lists(article | flat, max_size=3)}, {"version": st.text(max_size=4)})


@fuzz(60)
@given(squad_files)
@example({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a", "question": "q", "answers": "x"}]}]}]})
def test_fuzz_squad_reader_and_features(tokenizer, work, data):
    from albertlm.tasks import squad

    path = _write(work / "squad.json", data)
    examples = outcome(lambda: squad.read_squad(path))
    if isinstance(examples, UserError):
        return
    assert examples and all(isinstance(e.context, str) and isinstance(e.qid, str) for e in examples)
    settings_ = squad.SquadSettings(max_seq_length=24, doc_stride=3, max_query_length=8)
    for training in (True, False):
        features = outcome(lambda: squad.build_features(tokenizer, examples, settings_, training))
        assert not isinstance(features, UserError)
        assert all(f.length <= 24 for f in features)


@fuzz(40)
@given(st.dictionaries(st.sampled_from(["q1", "q2", "q3", "x"]), json_values | st.text(max_size=5), max_size=4),
       st.none() | st.dictionaries(st.sampled_from(["q1", "q2", "q3"]), json_scalars, max_size=3),
       st.sampled_from(["1.1", "2.0"]), st.booleans())
def test_fuzz_squad_scoring(work, predictions, odds, version, strict):
    from albertlm.tasks import squad

    gold = _write(work / "gold.json", {"data": [{"paragraphs": [{"context": "Rollo met Charles in 911.", "qas": [
        {"id": "q1", "question": "Who?", "answers": [{"text": "Charles", "answer_start": 10}]},
        {"id": "q2", "question": "When?", "answers": [{"text": "911", "answer_start": 21}]},
        {"id": "q3", "question": "Why?", "answers": [], "is_impossible": version == "2.0"}]}]}]})
    preds = _write(work / "preds.json", predictions)
    odds_file = _write(work / "odds.json", odds) if odds is not None else None
    result = outcome(lambda: squad.evaluate_files(gold, preds, version, odds_file, strict=strict))
    if not isinstance(result, UserError):
        assert 0.0 <= result.metrics.get("exact", result.metrics.get("exact_match")) <= 100.0
        assert (result.warning() is None) == (not result.missing)


@fuzz(40)
@given(st.integers(-2, 80), st.integers(-2, 40), st.integers(-2, 40))
def test_fuzz_squad_settings_never_hang(tokenizer, max_seq_length, doc_stride, max_query_length):
    from albertlm.tasks import squad

    made = outcome(lambda: squad.SquadSettings(max_seq_length, doc_stride, max_query_length))
    if isinstance(made, UserError):
        return
    examples = [squad.SquadExample("q", "where is normandy " * 10, "Normandy is a region in France. " * 8,
                                   [("France", 24)])]
    features = outcome(lambda: squad.build_features(tokenizer, examples, made, True), seconds=20)
    assert features and all(f.length <= max_seq_length for f in features)


# ------------------------------------------------------------------------------------------------- GLUE

tsv_cell = st.text(alphabet=string.printable.replace("\t", "").replace("\n", "").replace("\r", "") + "é中",
                   max_size=8) | st.sampled_from(["0", "1", "entailment", "contradiction", "3.5", "nan", "index"])
tsv_files = st.lists(st.lists(tsv_cell, min_size=1, max_size=11).map("\t".join), max_size=6).map("\n".join)


@fuzz(80)
@given(tsv_files | st.binary(max_size=200), st.sampled_from(["mrpc", "stsb", "cola", "sst2", "mnli", "qqp", "ax"]),
       st.booleans(), st.booleans())
def test_fuzz_glue_reader(work, content, task, labelled, skip):
    from albertlm.tasks import glue
    from albertlm.tasks.tables import Problems

    path = _write(work / "glue" / "dev.tsv", content.encode("utf-8") if isinstance(content, str) else content)
    examples = outcome(lambda: glue.read_examples(task, path, labelled, Problems() if skip else None))
    if not isinstance(examples, UserError):
        assert examples
        if labelled and glue.get_task(task).train.label is not None:
            assert len(glue.label_ids(glue.get_task(task), examples)) == len(examples)
    outcome(lambda: glue.read_predictions(glue.get_task(task), path))


# ------------------------------------------------------------------------------------------------- RACE

passages = record({"article": words, "questions": st.lists(words, max_size=2),
                   "options": st.lists(st.lists(words, min_size=3, max_size=5), max_size=2),
                   "answers": st.lists(st.sampled_from(["A", "B", "C", "D", "E", ""]), max_size=2)})


@fuzz(50)
@given(passages, st.integers(-1, 40), st.integers(-1, 20))
def test_fuzz_race_reader_and_features(tokenizer, work, passage, max_seq_length, max_qa_length):
    from albertlm.tasks import race

    shutil.rmtree(work / "race", ignore_errors=True)
    _write(work / "race" / "dev" / "high" / "1.txt", passage)
    examples = outcome(lambda: race.read_race(work / "race", "dev"))
    if isinstance(examples, UserError):
        return
    features = outcome(lambda: race.build_features(tokenizer, examples, max_seq_length, max_qa_length))
    if not isinstance(features, UserError):
        assert all(f.input_ids.shape[0] == 4 and f.length <= max_seq_length for f in features)


# ---------------------------------------------------------------------------------- classify CSV / JSONL

csv_files = st.lists(st.lists(tsv_cell | st.sampled_from(['"', '""', "a,b", '"x,y"']), min_size=1, max_size=4)
                     .map(",".join), max_size=5).map(lambda rows: "\n".join(["text,label", *rows]))
jsonl_files = st.lists(st.one_of(st.dictionaries(st.sampled_from(["text", "label", "id", "other"]), json_values,
                                                 max_size=4).map(json.dumps), json_values.map(json.dumps),
                                 st.text(max_size=10)), max_size=5).map("\n".join)


@fuzz(80)
@example("jsonl", '{"\\n": null}', False)  # found by this test: a column name's newline broke the one-line message
@given(st.sampled_from(["csv", "jsonl", "tsv"]), csv_files | jsonl_files | st.binary(max_size=100), st.booleans())
def test_fuzz_classify_reader(work, suffix, content, regression):
    from albertlm.tasks import classify

    if suffix == "tsv" and isinstance(content, str):
        content = content.replace(",", "\t")
    path = _write(work / f"data.{suffix}", content.encode("utf-8") if isinstance(content, str) else content)
    columns = classify.Columns("text", None, "label", "id")
    examples = outcome(lambda: classify.read_examples(path, columns, True, regression))
    if isinstance(examples, UserError):
        return
    labels = None if regression else outcome(lambda: classify.label_set(examples))
    if isinstance(labels, UserError):   # number labels with fractions without --regression: refused, by design
        assert "is a real number" in str(labels)
        return
    ids = outcome(lambda: classify.label_ids(examples, labels))
    assert not isinstance(ids, UserError) and len(ids) == len(examples)


# ------------------------------------------------------------------------------------- shard index/meta

META_KEYS = ["format_version", "max_seq_length", "max_predictions_per_seq", "tokenizer", "shards", "num_instances",
             "masking", "counts", "sentence_task"]


@pytest.fixture(scope="module")
def valid_meta(tmp_path_factory):
    directory = tmp_path_factory.mktemp("data")
    return directory, make_dataset(directory)


@fuzz(60)
@given(st.dictionaries(st.sampled_from(META_KEYS), json_values, max_size=3), st.lists(st.sampled_from(META_KEYS),
       max_size=2), st.sampled_from(["vocab_size", "mask_id", "cls_id", None]), json_values)
def test_fuzz_shard_meta(valid_meta, changes, removed, tokenizer_key, tokenizer_value):
    from albertlm.data.loader import PretrainingDataset
    from albertlm.data.shards import META_FILE, read_meta

    directory, meta = valid_meta
    damaged = {k: v for k, v in {**meta, **changes}.items() if k not in removed}
    if tokenizer_key and isinstance(damaged.get("tokenizer"), dict):
        damaged["tokenizer"] = {**damaged["tokenizer"], tokenizer_key: tokenizer_value}
    _write(directory / META_FILE, damaged)
    try:
        read = outcome(lambda: read_meta(directory))
        if not isinstance(read, UserError):
            dataset = outcome(lambda: PretrainingDataset(directory))
            if not isinstance(dataset, UserError) and len(dataset):
                assert dataset[0]["input_ids"].shape[0] == read["max_seq_length"]
    finally:
        _write(directory / META_FILE, meta)


# ------------------------------------------------------------------------------------------ config.json

MODEL_FIELDS = ["vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads", "ffn_size", "activation",
                "hidden_dropout", "initializer_range", "layer_norm_eps", "sharing", "num_groups", "pad_token_id",
                "num_labels", "always_project_embeddings"]
HF_FIELDS = ["model_type", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
             "num_hidden_groups", "id2label", "num_labels", "embedding_size", "hidden_size", "net_structure_type"]
small_numbers = st.integers(-2, 70) | st.floats(-1, 2) | st.sampled_from(["gelu", "all", "none", "relu"])


@fuzz(80)
@example(True, {"id2label": None})  # found by this test: len(None)
@given(st.booleans(), st.dictionaries(st.sampled_from(MODEL_FIELDS + HF_FIELDS), small_numbers | json_values,
                                      max_size=4))
def test_fuzz_model_config(work, transformers_layout, changes):
    from albertlm.model.io import read_config

    if transformers_layout:
        base = {"model_type": "albert", "vocab_size": 99, "embedding_size": 16, "hidden_size": 32,
                "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}
    else:
        base = {"vocab_size": 99, "embedding_size": 16, "hidden_size": 32, "num_layers": 2, "num_heads": 4,
                "ffn_size": 37}
    _write(work / "model" / "config.json", {**base, **changes})
    result = outcome(lambda: read_config(work / "model"))
    if not isinstance(result, UserError):
        config, is_hf = result
        assert is_hf == ("num_hidden_layers" in {**base, **changes})
        config.validate()


# ------------------------------------------------------------------------------------ tokenizer options

OPTION_KEYS = ["do_lower_case", "keep_accents", "remove_space", "split_digit_comma", "split_added_tokens",
               "tokenize_chinese_chars", "strip_accents", "tokenizer_class"]
fuzz_text = st.text(alphabet=st.sampled_from(list("abcXYZ 09,.''``\t\u00a0\u0301\u093f\u094d\u00e9\u0130\u00df"
                                                  "\u4e2d\uac00\u2163\u00b2\u0663()-")), max_size=30)


@fuzz(25)
@given(st.sampled_from(["spm", "wordpiece"]), st.dictionaries(st.sampled_from(OPTION_KEYS),
                                                             st.booleans() | json_values, max_size=3), fuzz_text)
def test_fuzz_tokenizer_options(work, kind, options, text):
    from albertlm.tokenization import load_tokenizer

    directory = work / f"tok-{kind}"
    if not directory.exists():
        directory.mkdir()
        if kind == "spm":
            shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), directory / "spiece.model")
        else:
            (directory / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n##c\n,\n", encoding="utf-8")
    _write(directory / "tokenizer_config.json", options)
    tok = outcome(lambda: load_tokenizer(directory))
    if not isinstance(tok, UserError):
        ids = tok.encode(text)
        assert all(0 <= i < tok.vocab_size for i in ids)
    # the same values as keyword overrides (the CLI's -o): a tokenizer or a UserError as well
    outcome(lambda: load_tokenizer(directory, **{k: v for k, v in options.items() if k in OPTION_KEYS[:5]}))


@functools.lru_cache(maxsize=None)
def _albert(lower: bool, keep_accents: bool, digit_comma: bool | None):
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"), do_lower_case=lower,
                          keep_accents=keep_accents, split_digit_comma=digit_comma)


@fuzz(150)
@given(fuzz_text | texts, st.booleans(), st.booleans(), st.booleans() | st.none())
@example("In 2003, 10,000 people", True, False, None)
@example("x9, ²,", True, False, True)
def test_fuzz_default_encoding_is_google_research(tokenizer, text, lower, keep_accents, digit_comma):
    """Random text with digits, commas, combining marks and quotes: ids = google's algorithm (google_albert.py)."""
    import sentencepiece

    tok = _albert(lower, keep_accents, digit_comma)
    sp = tokenizer.sp
    assert isinstance(sp, sentencepiece.SentencePieceProcessor)
    options = dict(do_lower_case=lower, keep_accents=keep_accents)
    if digit_comma is False:
        expected = sp.encode(google_albert.preprocess_text(text, **options))
    else:
        expected = google_albert.encode_ids(sp, text, **options)
    assert tok.encode(text) == expected


# ------------------------------------------------------------------------------------ TF checkpoint index

@fuzz(40)
@given(st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=4), st.integers(0, 2300))
def test_fuzz_tf_checkpoint_bytes(work, flips, keep):
    from albertlm.interop.tf_checkpoint import TFCheckpoint

    src = Path(__file__).parent / "fixtures" / "tf_albert_tiny"
    directory = work / "tf"
    if not directory.exists():
        directory.mkdir()
        shutil.copy(src / "model.ckpt-0.data-00000-of-00001", directory)
    index = bytearray((src / "model.ckpt-0.index").read_bytes())
    for position, value in flips:
        index[position % len(index)] = value
    _write(directory / "model.ckpt-0.index", bytes(index[: max(keep, 1)] if keep < len(index) else index))

    def read_all():
        ckpt = TFCheckpoint(directory)
        return [ckpt.read(name) for name in ckpt.names()]

    outcome(read_all)


# --------------------------------------------------------------------------- corpus lines / JSONL (formats)

@fuzz(60)
@given(st.sampled_from(["auto", "lines", "raw", "jsonl", "wikiextractor"]), jsonl_files | tsv_files | st.binary(max_size=200))
def test_fuzz_corpus_reader(work, fmt, content):
    from albertlm.data.corpus import read_documents

    path = _write(work / "corpus.txt", content.encode("utf-8") if isinstance(content, str) else content)
    documents = outcome(lambda: list(read_documents([path], fmt)))
    if not isinstance(documents, UserError):
        assert all(isinstance(s, str) and s for d in documents for s in d.sentences)


def test_corpus_jsonl_line_nested_deeper_than_the_stack(work):
    from albertlm.data.corpus import CorpusCounts, read_documents

    path = _write(work / "deep.jsonl", '{"text": "fine"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    counts = CorpusCounts()
    documents = list(read_documents([path], "jsonl", counts=counts))
    assert len(documents) == 1 and counts.bad_json_lines == 1
