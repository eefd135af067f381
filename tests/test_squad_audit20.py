"""SQuAD audit 20, end to end as a user: `--version v1.1` (how the files spell it) was scored as v2.0 and any other
version was taken (`2` applied no tuned null threshold); `--na-probs` with v1.1 was read and ignored; a predicted
answer ending on a bare "▁" piece took the space before the next word, and one after a dropped zero-width joiner or
BOM began with it; `evaluate --model` on a file without answers printed {}; nbest_predictions.json lacked BERT's
`probability` and logits."""
from __future__ import annotations

import json

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tasks import squad
from conftest import assert_one_error, save_tiny_pretrained, shared_path


@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def _squad_file(path, contexts: dict[str, str], answered: bool = True):
    """A nested SQuAD file: one question per context (id = its key), answered by the context's last word."""
    paragraphs = []
    for qid, context in contexts.items():
        word = context.split()[-1]
        answers = [{"text": word, "answer_start": context.rindex(word)}] if answered else []
        paragraphs.append({"context": context, "qas": [{"id": qid, "question": "Which one?", "answers": answers}]})
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paragraphs}]},
                               ensure_ascii=False), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- --version

@pytest.mark.parametrize("version, hint", [("v1.1", "give --version 1.1"), ("2", "give --version 2.0"),
                                           ("3", "1.1 or 2.0")])
def test_a_squad_version_other_than_1_1_or_2_0_is_refused(tmp_path, capsys, version, hint):
    """`--version v1.1` scored a v1.1 file with the v2.0 metric (only a version starting with "1" was v1.1)."""
    gold = shared_path("squad", "dev-v2.0-small.json")
    preds = tmp_path / "predictions.json"
    preds.write_text(json.dumps({e.qid: "" for e in squad.read_squad(gold)}))
    code = main(["evaluate", "squad", "--version", version, "--data", str(gold), "--predictions", str(preds)])
    assert_one_error(capsys, code, f"--version {version!r}", hint)
    with pytest.raises(UserError, match="1.1 or 2.0"):
        squad.evaluate_files(gold, preds, version)


def test_squad_spec_refuses_another_version_before_reading(spm):
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import specs

    with pytest.raises(UserError, match="give --version 2.0"):
        specs.squad_spec("v2.0", spm, FinetuneConfig(), dev_file="never-read.json", training=False)


def test_null_odds_with_v1_1_scoring_are_refused(tmp_path, capsys):
    gold = _squad_file(tmp_path / "v11.json", {"q1": "Rollo met Charles"})
    preds, odds = tmp_path / "predictions.json", tmp_path / "null_odds.json"
    preds.write_text(json.dumps({"q1": "Charles"}))
    odds.write_text(json.dumps({"q1": 5.0}))
    code = main(["evaluate", "squad", "--version", "1.1", "--data", str(gold), "--predictions", str(preds),
                 "--na-probs", str(odds)])
    assert_one_error(capsys, code, "--na-probs", "v2.0's")


# ----------------------------------------------------------------------------------- answer text edges

def _pointing(feature, start_token: int, end_token: int):
    """Logits of one window that pick the context tokens start_token..end_token (indices into the context)."""
    x = feature.extra
    start, end = np.full(feature.length, -10.0), np.full(feature.length, -10.0)
    start[x["doc_offset"] + start_token - x["doc_start"]] = 3.0
    end[x["doc_offset"] + end_token - x["doc_start"]] = 4.0
    return start, end


@pytest.mark.parametrize("context, first, last, expected", [
    # pieces ▁it ▁cost ▁5000 ▁ yen ...: the bare ▁ sits at "yen"'s start, so the span took the space before it
    ("It cost 5000 yen in 1990.", 1, 3, "cost 5000"),
    # ▁weird ▁bo m: the BOM the tokenizer dropped began the answer
    ("Weird \ufeffBOM inside text.", 1, 2, "BOM"),
    # ▁zero ▁width: the zero-width joiner is read as a space and began the answer
    ("Zero\u200dwidth joiner test.", 1, 1, "width"),
])
def test_a_predicted_answer_has_no_invisible_characters_at_its_ends(spm, context, first, last, expected):
    example = squad.SquadExample("q", "Which one?", context, [])
    settings = squad.SquadSettings(max_seq_length=32, max_query_length=8)
    (feature,) = squad.build_features(spm, [example], settings, training=False)
    start, end = _pointing(feature, first, last)
    prediction = squad.postprocess([example], [feature], [start], [end], spm, settings)["q"]
    assert prediction.best.text == expected
    assert context[prediction.best.start_char:prediction.best.end_char] == expected


# ------------------------------------------------------------------------------- evaluate / nbest files

@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    """A tiny QA checkpoint (random head) with its WordPiece vocabulary."""
    from albertlm.model.heads import AlbertForQuestionAnswering

    base = save_tiny_pretrained(tmp_path_factory.mktemp("audit20_base"))
    head = tmp_path_factory.mktemp("audit20_qa")
    AlbertForQuestionAnswering.from_pretrained(base).save_pretrained(head)
    (head / "vocab.txt").write_text((base / "vocab.txt").read_text())
    return head


def _spec(model_dir, data):
    from albertlm.config.task import FinetuneConfig, finetune_train
    from albertlm.tasks import specs
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    cfg = FinetuneConfig(train=finetune_train(progress=False), max_seq_length=24)
    settings = squad.SquadSettings(max_seq_length=24, doc_stride=4, max_query_length=6, n_best_size=5)
    return tokenizer, cfg, specs.squad_spec("2.0", tokenizer, cfg, dev_file=data, settings=settings, training=False)


def test_evaluating_a_model_on_a_file_without_answers_is_refused(qa_model, tmp_path):
    """`evaluate squad --model` on new questions ran the model and printed {} (exit 0); with --out it writes them."""
    from albertlm.tasks.finetune import run_evaluation

    data = _squad_file(tmp_path / "test.json", {"q1": "the film was very good", "q2": "the plot was bad"},
                       answered=False)
    tokenizer, cfg, spec = _spec(qa_model, data)
    with pytest.raises(UserError, match="nothing to score.*albertlm predict squad"):
        run_evaluation(spec, qa_model, tokenizer, cfg, None)
    metrics = run_evaluation(spec, qa_model, tokenizer, cfg, tmp_path / "out")
    out = tmp_path / "out"
    assert metrics["predictions_written"] == {"dev": [str(out / "predictions.json"), str(out / "null_odds.json"),
                                                      str(out / "nbest_predictions.json")]}
    assert set(json.loads((tmp_path / "out" / "predictions.json").read_text())) == {"q1", "q2"}


def test_nbest_predictions_have_berts_probability_and_logits(qa_model, tmp_path):
    data = _squad_file(tmp_path / "dev.json", {"q1": "the film was very good acting", "q2": "the plot was bad"})
    tokenizer, cfg, spec = _spec(qa_model, data)
    (dev,) = spec.eval_sets
    rng = np.random.default_rng(0)
    out = {"start_logits": [rng.normal(size=f.length) for f in dev.features],
           "end_logits": [rng.normal(size=f.length) for f in dev.features]}
    dev.write(out, tmp_path)
    nbest = json.loads((tmp_path / "nbest_predictions.json").read_text(encoding="utf-8"))
    final = json.loads((tmp_path / "predictions.json").read_text(encoding="utf-8"))
    assert set(nbest) == set(final) == {"q1", "q2"}
    for entries in nbest.values():
        assert entries and sum(e["probability"] for e in entries) == pytest.approx(1.0)
        assert [e["probability"] for e in entries] == sorted((e["probability"] for e in entries), reverse=True)
        for e in entries:
            assert e["start_logit"] + e["end_logit"] == pytest.approx(e["score"])
            assert set(e) == {"text", "probability", "start_logit", "end_logit", "score"}
