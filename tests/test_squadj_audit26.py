"""A SQuAD v2.0 user's journey with google's v2.0 head (`--squad-head xlnet`, `heads.AlbertForSquadV2`) and BERT's,
twenty-sixth session: finetune / predict / evaluate on the real dev questions, a resumed and a bf16 run (checked by
hand: exact, see the report), the files a prediction writes given in each other's place, and google's `p_mask`
as the features carry it against the head's own fallback (`heads.squad_p_mask`) on every window."""
from __future__ import annotations

import json

import pytest
import torch

from albertlm.cli.main import main
from albertlm.tasks import squad
from conftest import TINY_WORDS, assert_one_error, shared_path


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _save_squad_model(out, cls_name: str):
    """A random tiny SQuAD model of class `cls_name` (as save_tiny_pretrained's backbone: WordPiece TINY_WORDS),
    saved with no task.json, as a converted checkpoint is: the version is the data's, the head the weights'."""
    from albertlm.config import ModelConfig
    from albertlm.model import heads

    out.mkdir()
    (out / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=len(TINY_WORDS) + 5, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                      ffn_size=37, max_position_embeddings=64)
    getattr(heads, cls_name)(cfg).save_pretrained(out)
    return out


SMALL = ["--max-seq-length", "40", "--doc-stride", "8", "--max-query-length", "12", "--no-progress", "--device", "cpu"]


# ------------------------------------------------ predict / evaluate --squad-head: the model's head, or one line
def test_predict_and_evaluate_take_the_models_squad_head_and_refuse_another(tmp_path, capsys):
    """`predict ... --squad-head xlnet` was argparse's bare "unrecognized arguments" line (finetune's flag): it is
    accepted when it names the head the checkpoint holds, and another is one line naming the held one."""
    data = str(shared_path("squad", "dev-v2.0-small.json"))
    xlnet = _save_squad_model(tmp_path / "xlnet", "AlbertForSquadV2")
    bert = _save_squad_model(tmp_path / "bert", "AlbertForQuestionAnswering")
    assert main(["predict", "squad", "--model", str(xlnet), "--data", data, "--out", str(tmp_path / "p"),
                 "--squad-head", "xlnet", *SMALL]) == 0
    capsys.readouterr()
    assert set(next(iter(json.loads((tmp_path / "p" / "nbest_predictions.json").read_text()).values()))[0]) >= {
        "start_log_prob", "end_log_prob"}                                       # google's head's decoding
    code = main(["predict", "squad", "--model", str(xlnet), "--data", data, "--out", str(tmp_path / "q"),
                 "--squad-head", "bert", *SMALL])
    assert_one_error(capsys, code, "--squad-head bert", "holds the xlnet SQuAD head (AlbertForSquadV2)",
                     "leave --squad-head out")
    assert not (tmp_path / "q").exists()
    code = main(["evaluate", "squad", "--model", str(bert), "--data", data, "--squad-head", "xlnet", *SMALL])
    assert_one_error(capsys, code, "--squad-head xlnet", "holds the bert SQuAD head (AlbertForQuestionAnswering)")
    assert main(["evaluate", "squad", "--model", str(bert), "--data", data, "--squad-head", "bert", *SMALL]) == 0
    assert "f1" in json.loads(capsys.readouterr().out)["dev"]


# ------------------------------------------- evaluate --predictions given another of the prediction files
def _files(tmp_path):
    gold = shared_path("squad", "dev-v2.0-small.json")
    qids = [e.qid for e in squad.read_squad(gold)]
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(dict.fromkeys(qids, "")))
    odds = tmp_path / "null_odds.json"
    odds.write_text(json.dumps(dict.fromkeys(qids, 0.5)))
    nbest = tmp_path / "nbest_predictions.json"      # google's head's layout, 20 entries a question (as written)
    entry = {"text": "emerged initially in the first half of the 10th century", "probability": 0.05,
             "start_log_prob": -3.8, "end_log_prob": -4.1, "score": -7.9}
    nbest.write_text(json.dumps({qid: [entry] * 20 for qid in qids}))
    return gold, predictions, odds, nbest


@pytest.mark.parametrize("given, role, phrases", [
    ("nbest", "predictions", ("expected an answer string", "looks like nbest_predictions.json",
                              "give predictions.json")),
    ("odds", "predictions", ("expected an answer string", "looks like null_odds.json", "this file as --na-probs")),
    ("predictions", "na_probs", ("expected a number", "looks like predictions.json", "give null_odds.json")),
    ("nbest", "na_probs", ("expected a number", "looks like nbest_predictions.json", "give null_odds.json"))])
def test_a_prediction_file_given_in_anothers_place_is_named_in_a_short_line(tmp_path, capsys, given, role, phrases):
    """nbest_predictions.json as --predictions quoted its whole first n-best list on the error line (4,000+
    characters for a real run's file) and said only "expected an answer string"."""
    gold, predictions, odds, nbest = _files(tmp_path)
    wrong = {"nbest": nbest, "odds": odds, "predictions": predictions}[given]
    argv = ["evaluate", "squad", "--data", str(gold),
            "--predictions", str(wrong if role == "predictions" else predictions)]
    if role == "na_probs":
        argv += ["--na-probs", str(wrong)]
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert all(phrase in lines[0] for phrase in phrases) and len(lines[0]) < 400, lines[0]


# --------------------------------------------------------- p_mask: the features' and the head's fallback agree
def test_the_features_p_mask_is_the_heads_fallback_on_every_window():
    """google's p_mask is built in the features (`squad.build_features`, what training and prediction feed the
    head) and derived from the token types and padding where none is given (`heads.squad_p_mask`): the two agree on
    every window of the real dev questions over several window sizes (questions cut to max_query_length, answers
    straddling windows, windows without the answer), and on an empty question, a whitespace-only context and one of
    spaces, tabs, no-break spaces, zero-width and full-width characters (a pure check: no disagreement found)."""
    from albertlm.model.heads import squad_p_mask
    from albertlm.tasks.finetune import SQUAD_BEAM, task_collate
    from albertlm.tokenization import load_tokenizer

    spm = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))
    odd = "  Der\u00a0Größe   \u200bnach ﬁnance\t\t１２３ Ａｂｃ — café\n\n naïve ½ cup™ 5℃,  "
    examples += [squad.SquadExample("empty question", "", odd, [("Größe", odd.index("Größe"))]),
                 squad.SquadExample("blank context", "why " * 9, " \t\u00a0 ", [], is_impossible=True,
                                    said_unanswerable=True),
                 squad.SquadExample("odd", "what is it?", odd, [("café\n\n naïve", odd.index("café"))])]
    windows = 0
    for length, query, stride in ((12, 4, 1), (24, 8, 5), (40, 16, 7), (96, 24, 128)):
        settings = squad.SquadSettings(max_seq_length=length, max_query_length=query, doc_stride=stride)
        for training in (True, False):
            features = squad.build_features(spm, examples, settings, training)
            windows += len(features)
            for start in range(0, len(features), 16):   # padded batches, as shared_predict makes them
                batch = task_collate(features[start:start + 16], spm.pad_id, torch.long, SQUAD_BEAM)
                derived = squad_p_mask(batch["token_type_ids"], batch["attention_mask"])
                assert torch.equal(batch["p_mask"].bool(), derived)
    assert windows > 1000
