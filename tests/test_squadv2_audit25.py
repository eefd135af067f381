"""google-research/albert's SQuAD v2.0 head (`run_squad_v2.py`, `squad_utils.create_v2_model`), built in the
twenty-fifth session as `heads.AlbertForSquadV2` (`--squad-head xlnet`; `--recipe squad2.0` picks it). Before it,
v2.0 trained BERT's start/end head and a run_squad_v2.py checkpoint imported as its backbone alone.

The reference is google's TF code transcribed below in plain torch (`google_create_v2_model`, `google_v2_loss`: TF
ops as written there, time-major `lbh` tensors, one-hot einsums, tiling; nothing imported from albertlm), run on
the sequence output google's own TF forward gave (tests/fixtures/tf_albert_tiny/forward.npz) with the head
variables of a run_squad_v2.py checkpoint; albertlm's model is that checkpoint imported (`import_tf_checkpoint`).
The post-processing is checked against a hand-made beam and google's threshold search (`official_find_best_thresh`),
and the whole path end to end: `finetune squad --squad-head xlnet`, `predict`, `evaluate`."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from albertlm.cli.main import main
from albertlm.interop.tf import import_tf_checkpoint
from albertlm.tasks import squad
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_squad_audit23 import official_find_best_thresh
from test_tfonnx_audit20 import fixture_tensors, google_reference, squad_v2_heads, write_checkpoint


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


# ------------------------------------------------------------------ google's create_v2_model, in torch
def tf_dense(x, kernel, bias=None):
    """tf.layers.dense: x @ kernel (in, out) + bias."""
    y = torch.tensordot(x, kernel, dims=([x.dim() - 1], [0]))
    return y + bias if bias is not None else y


def tf_layer_norm(x, gamma, beta):
    """contrib_layers.layer_norm(begin_norm_axis=-1): tf.nn.moments over the last axis, variance_epsilon 1e-12."""
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(variance + 1e-12) * gamma + beta


def tf_one_hot(indices, depth):
    return F.one_hot(indices.long(), depth).to(torch.float64)


def google_create_v2_model(output, p_mask, w, is_training, start_positions=None, start_n_top=5, end_n_top=5):
    """squad_utils.create_v2_model after create_albert (`output` (B, L, H), the final hidden states), in float64;
    `w`: the checkpoint's head variables by TF name. Dropout is off (the fixture's config, predict mode)."""
    max_seq_length = output.shape[1]
    bsz = output.shape[0]
    return_dict = {}
    output = output.permute(1, 0, 2)                                          # tf.transpose(output, [1, 0, 2])
    p_mask = p_mask.to(torch.float64)
    # start_logits
    start_logits = tf_dense(output, w["start_logits/dense/kernel"], w["start_logits/dense/bias"])
    start_logits = start_logits.squeeze(-1).permute(1, 0)
    start_logits_masked = start_logits * (1 - p_mask) - 1e30 * p_mask
    start_log_probs = F.log_softmax(start_logits_masked, -1)

    def end_head(x):
        x = torch.tanh(tf_dense(x, w["end_logits/dense_0/kernel"], w["end_logits/dense_0/bias"]))
        x = tf_layer_norm(x, w["end_logits/LayerNorm/gamma"], w["end_logits/LayerNorm/beta"])
        return tf_dense(x, w["end_logits/dense_1/kernel"], w["end_logits/dense_1/bias"])

    if is_training:
        start_index = tf_one_hot(start_positions.reshape(-1), max_seq_length)
        start_features = torch.einsum("lbh,bl->bh", output, start_index)
        start_features = start_features[None].repeat(max_seq_length, 1, 1)        # tf.tile
        end_logits = end_head(torch.cat([output, start_features], -1))
        end_logits = end_logits.squeeze(-1).permute(1, 0)
        end_logits_masked = end_logits * (1 - p_mask) - 1e30 * p_mask
        return_dict["start_log_probs"] = start_log_probs
        return_dict["end_log_probs"] = F.log_softmax(end_logits_masked, -1)
    else:
        start_top_log_probs, start_top_index = torch.topk(start_log_probs, k=start_n_top)
        start_index = tf_one_hot(start_top_index, max_seq_length)
        start_features = torch.einsum("lbh,bkl->bkh", output, start_index)
        end_input = output[:, :, None].repeat(1, 1, start_n_top, 1)
        start_features = start_features[None].repeat(max_seq_length, 1, 1, 1)
        end_logits = end_head(torch.cat([end_input, start_features], -1))
        end_logits = end_logits.reshape(max_seq_length, -1, start_n_top).permute(1, 2, 0)
        end_logits_masked = end_logits * (1 - p_mask[:, None]) - 1e30 * p_mask[:, None]
        end_log_probs = F.log_softmax(end_logits_masked, -1)
        end_top_log_probs, end_top_index = torch.topk(end_log_probs, k=end_n_top)
        return_dict.update(start_top_log_probs=start_top_log_probs, start_top_index=start_top_index,
                           end_top_log_probs=end_top_log_probs.reshape(-1, start_n_top * end_n_top),
                           end_top_index=end_top_index.reshape(-1, start_n_top * end_n_top))
    # answer_class
    cls_index = tf_one_hot(torch.zeros(bsz, dtype=torch.long), max_seq_length)
    cls_feature = torch.einsum("lbh,bl->bh", output, cls_index)
    start_p = F.softmax(start_logits_masked, -1)
    start_feature = torch.einsum("lbh,bl->bh", output, start_p)
    ans_feature = torch.cat([start_feature, cls_feature], -1)
    ans_feature = torch.tanh(tf_dense(ans_feature, w["answer_class/dense_0/kernel"], w["answer_class/dense_0/bias"]))
    return_dict["cls_logits"] = tf_dense(ans_feature, w["answer_class/dense_1/kernel"]).squeeze(-1)
    return_dict["start_logits_masked"] = start_logits_masked
    return return_dict


def google_v2_loss(outputs, start_positions, end_positions, is_impossible):
    """v2_model_fn_builder's TRAIN loss."""
    seq_length = outputs["start_log_probs"].shape[1]

    def compute_loss(log_probs, positions):
        one_hot_positions = tf_one_hot(positions, seq_length)
        return (-(one_hot_positions * log_probs).sum(-1)).mean()

    total_loss = (compute_loss(outputs["start_log_probs"], start_positions)
                  + compute_loss(outputs["end_log_probs"], end_positions)) * 0.5
    x, z = outputs["cls_logits"], is_impossible.to(torch.float64)
    regression_loss = (x.clamp(min=0) - x * z + torch.log1p(torch.exp(-x.abs()))).mean()   # sigmoid_cross_entropy
    return total_loss + regression_loss * 0.5


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A run_squad_v2.py checkpoint (the fixture's backbone + the head's 11 variables), imported; google's inputs
    and sequence output; the head variables in float64; a p_mask as google's features build it for these inputs
    ([CLS] kept, the question (token type 0), the closing [SEP] (last real token) and the padding masked)."""
    heads = squad_v2_heads(32)
    backbone = {n: v for n, v in fixture_tensors().items() if n.startswith("bert/") or n == "global_step"}
    prefix = write_checkpoint(tmp_path_factory.mktemp("squad2_tf"), {**backbone, **heads})
    model, report = import_tf_checkpoint(prefix)
    ref = google_reference()
    mask = ref["input_mask"]
    p_mask = (ref["token_type_ids"] == 0).astype(np.int64)
    p_mask[:, 0] = 0
    p_mask[mask == 0] = 1
    p_mask[np.arange(len(mask)), mask.sum(-1) - 1] = 1
    weights = {name: torch.from_numpy(v).to(torch.float64) for name, v in heads.items()}
    return model, report, ref, torch.from_numpy(p_mask), weights, prefix


def _inputs(ref):
    return [torch.from_numpy(ref[k]).long() for k in ("input_ids", "input_mask", "token_type_ids")]


# -------------------------------------------------------------------- 1. the head against google's TF
def test_a_run_squad_v2_checkpoint_imports_with_its_head(imported, capsys):
    model, report, _, _, _, prefix = imported
    assert type(model).__name__ == "AlbertForSquadV2" and not report.missing
    assert set(report.unused) == {"bert/pooler/dense/kernel", "bert/pooler/dense/bias"}   # the head reads [CLS]
    assert any("run_squad_v2.py's SQuAD v2.0 head" in line for line in report.lines())
    assert main(["info", str(prefix.parent)]) == 0
    assert "(tf format, AlbertForSquadV2)" in capsys.readouterr().out


def test_training_logits_and_loss_are_googles(imported):
    """is_training: the end logits read the gold start's state; loss = (start CE + end CE) / 2 + 0.5 BCE."""
    model, _, ref, p_mask, w, _ = imported
    starts, ends, impossible = torch.tensor([6, 0, 5]), torch.tensor([8, 0, 7]), torch.tensor([0, 1, 0])
    google = google_create_v2_model(torch.from_numpy(ref["sequence_output"]).double(), p_mask, w, True, starts)
    want = google_v2_loss(google, starts, ends, impossible)
    with torch.no_grad():
        for given in (p_mask, None):     # None: the head derives the same mask from the token types and padding
            out = model.eval()(*_inputs(ref), starts, ends, impossible, p_mask=given)
            torch.testing.assert_close(out.loss.double(), want, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(out.cls_logits.double(), google["cls_logits"], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(F.log_softmax(out.end_logits, -1).double(), google["end_log_probs"],
                                       atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(out.start_logits.double(), google["start_logits_masked"], atol=1e-4, rtol=1e-4)


def test_the_inference_beam_is_googles(imported):
    """5 starts x 5 ends; row 1 has 2 open positions ([CLS] and one context token): the places past them hold
    masked positions in google's beam (never a span) and index 0 / -1e30 here."""
    model, _, ref, p_mask, w, _ = imported
    google = google_create_v2_model(torch.from_numpy(ref["sequence_output"]).double(), p_mask, w, False)
    with torch.no_grad():
        out = model.eval()(*_inputs(ref), p_mask=p_mask)
    assert out.start_top_index.shape == (3, 5) and out.end_top_index.shape == (3, 25)
    torch.testing.assert_close(out.cls_logits.double(), google["cls_logits"], atol=1e-4, rtol=1e-4)
    open_positions = (p_mask == 0).sum(-1)
    for b in range(3):
        n = int(open_positions[b])
        k = min(n, 5)
        assert out.start_top_index[b, :k].tolist() == google["start_top_index"][b, :k].tolist()
        torch.testing.assert_close(out.start_top_log_probs[b, :k].double(), google["start_top_log_probs"][b, :k],
                                   atol=1e-4, rtol=1e-4)
        assert (out.start_top_log_probs[b, k:] < -1e29).all() and (google["start_top_log_probs"][b, k:] < -1e29).all()
        for i in range(k):            # each open start's end beam
            ours, theirs = slice(i * 5, i * 5 + k), slice(i * 5, i * 5 + k)
            assert out.end_top_index[b, ours].tolist() == google["end_top_index"][b, theirs].tolist()
            torch.testing.assert_close(out.end_top_log_probs[b, ours].double(), google["end_top_log_probs"][b, theirs],
                                       atol=1e-4, rtol=1e-4)
    assert (open_positions < 5).any()                   # the short row is there


def test_the_loss_does_not_depend_on_the_padding(imported):
    model, _, ref, p_mask, _, _ = imported
    ids, mask, types = _inputs(ref)
    labels = (torch.tensor([6, 0, 5]), torch.tensor([8, 0, 7]), torch.tensor([0, 1, 0]))
    pad = lambda t, v: F.pad(t, (0, 7), value=v)   # noqa: E731
    with torch.no_grad():
        short = model.eval()(ids, mask, types, *labels)
        long = model(pad(ids, 0), pad(mask, 0), pad(types, 0), *labels)
        beam = model(pad(ids, 0), pad(mask, 0), pad(types, 0))
        beam_short = model(ids, mask, types)
    torch.testing.assert_close(long.loss, short.loss, atol=1e-6, rtol=1e-6)
    open_ = beam_short.start_top_log_probs > -1e29      # the masked places past a short row's open positions tie
    assert (beam.start_top_log_probs > -1e29).tolist() == open_.tolist()
    assert beam.start_top_index[open_].tolist() == beam_short.start_top_index[open_].tolist()
    torch.testing.assert_close(beam.cls_logits, beam_short.cls_logits, atol=1e-5, rtol=1e-5)


def test_the_converted_checkpoint_keeps_its_head(imported, tmp_path):
    """TF -> albertlm -> loaded by name (registry): the same outputs."""
    from albertlm.model.registry import load_saved_model

    _, _, ref, _, _, prefix = imported
    assert main(["convert", str(prefix), str(tmp_path / "out")]) == 0
    loaded = load_saved_model(tmp_path / "out")
    model = import_tf_checkpoint(prefix)[0]
    assert type(loaded).__name__ == "AlbertForSquadV2"
    with torch.no_grad():
        a, b = model(*_inputs(ref)), loaded(*_inputs(ref))
    for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits"):
        torch.testing.assert_close(a[key], b[key])


# ------------------------------------------------------------------------------ 2. the features
@pytest.fixture(scope="module")
def spm():
    from albertlm.tokenization import load_tokenizer

    return load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))


def test_features_carry_googles_p_mask_and_is_impossible(spm):
    from albertlm.model.heads import squad_p_mask
    from albertlm.tasks.finetune import SQUAD_BEAM, task_collate

    answered = squad.SquadExample("a", "Which one?", "Rollo met Charles in 911.", [("Charles", 10)])
    none = squad.SquadExample("b", "Who?", "Rollo met Charles in 911.", [], is_impossible=True)
    settings = squad.SquadSettings(max_seq_length=11, max_query_length=4, doc_stride=2)
    features = squad.build_features(spm, [answered, none], settings, training=True)
    for f in features:
        x = f.extra
        want = np.ones(f.length, dtype=np.int64)
        want[0] = 0
        want[x["doc_offset"]:x["doc_offset"] + x["doc_length"]] = 0
        assert f.extra["p_mask"].tolist() == want.tolist()
        assert x["is_impossible"] == int(f.label == (0, 0))
    assert [f.extra["is_impossible"] for f in features] == [0, 0, 1, 1]   # Charles in both windows of a; b none
    batch = task_collate(features, spm.pad_id, torch.long, SQUAD_BEAM)
    assert (batch["p_mask"] == squad_p_mask(batch["token_type_ids"], batch["attention_mask"]).long()).all()


# ----------------------------------------------------------------------------- 3. post-processing
def _beam_case(spm, cls_logits=(0.3, -0.2)):
    """Two windows of 'Rollo met Charles in 911.' (max_seq_length 11: window A roll o met charles in, B met charles
    in 911 .; doc tokens from position 5), a 2 x 2 beam each."""
    example = squad.SquadExample("q", "Which one?", "Rollo met Charles in 911.", [])
    settings = squad.SquadSettings(max_seq_length=11, max_query_length=4, doc_stride=2, n_best_size=3,
                                   max_answer_length=3)
    features = squad.build_features(spm, [example], settings, training=False)
    assert len(features) == 2
    outputs = {  # A: (5,7) "Rollo met" -0.7; (5,9) 5 tokens: too long; (8,8) "Charles" -1.6; (8,9) "Charles in" -3.5
                 # B: (8,9) "911." -0.6; (8,7) end before start; (7,8) "in 911" -1.1; (7,10) [SEP]: not the context
        "start_top_index": np.array([[5, 8], [8, 7]]), "start_top_log_probs": np.array([[-0.5, -1.5], [-0.3, -0.6]]),
        "end_top_index": np.array([[7, 9, 8, 9], [9, 7, 8, 10]]),
        "end_top_log_probs": np.array([[-0.2, -0.4, -0.1, -2.0], [-0.3, -0.5, -0.5, -0.7]]),
        "cls_logits": np.array(cls_logits)}
    return example, features, outputs, settings


def test_the_beam_is_post_processed_as_googles_write_predictions_v2(spm):
    example, features, outputs, settings = _beam_case(spm)
    preds = squad.postprocess_beam([example], features, outputs, spm, settings)
    p = preds["q"]
    assert [s.text for s in p.nbest] == ["911.", "Rollo met", "in 911"]          # n_best_size 3, by log-prob
    assert [s.score for s in p.nbest] == pytest.approx([-0.6, -0.7, -1.1])
    assert p.score_diff == pytest.approx(-0.2)                                     # the lowest cls_logits
    assert squad.null_odds(preds) == {"q": pytest.approx(-0.2)}
    assert squad.final_predictions(preds, "2.0", 0.0) == {"q": "911."}             # -0.2 < 0: answered
    assert squad.final_predictions(preds, "2.0", -0.5) == {"q": ""}
    entries = squad.nbest_json(preds, "2.0")["q"]
    assert [e["text"] for e in entries] == ["911.", "Rollo met", "in 911"]         # no null entry: another scale
    assert (entries[0]["start_log_prob"], entries[0]["end_log_prob"]) == pytest.approx((-0.3, -0.3))
    probs = np.exp([-0.6, -0.7, -1.1])
    assert [e["probability"] for e in entries] == pytest.approx(list(probs / probs.sum()))


def test_a_question_without_a_valid_span_gets_googles_stand_in(spm):
    example, features, outputs, settings = _beam_case(spm)
    outputs = {**outputs, "start_top_index": np.array([[1, 2], [3, 0]])}           # every start in the question
    preds = squad.postprocess_beam([example], features, outputs, spm, settings)
    assert squad.final_predictions(preds, "2.0", 100.0) == {"q": ""}
    assert squad.nbest_json(preds, "2.0")["q"] == [{"text": "", "probability": 1.0, "start_log_prob": -1e6,
                                                     "end_log_prob": -1e6, "score": -2e6}]


def test_the_threshold_is_googles_find_best_thresh(spm):
    """evaluate_v2 tunes the threshold on the best non-null texts and the null odds (no ties here)."""
    example, features, outputs, settings = _beam_case(spm)
    preds = {}
    golds = {"a": ["911"], "b": [], "c": ["Rollo"], "d": []}
    for qid, odds in zip(golds, (-0.2, 1.5, 0.4, 0.9)):
        e = squad.SquadExample(qid, example.question, example.context, [])
        beam = {**outputs, "cls_logits": np.array([odds, 5.0])}
        if qid == "c":        # "Rollo met" first (-0.3)
            beam["start_top_log_probs"] = np.array([[-0.1, -1.5], [-0.3, -0.6]])
        preds.update(squad.postprocess_beam([e], features, beam, spm, settings))
    spans = {qid: p.best.text for qid, p in preds.items()}
    assert spans == {"a": "911.", "b": "911.", "c": "Rollo met", "d": "911."}
    f1 = {"a": 1.0, "b": 0.0, "c": 2 / 3, "d": 0.0}
    has_answer = {qid: bool(answers) for qid, answers in golds.items()}
    best_f1, thresh = official_find_best_thresh(spans, f1, squad.null_odds(preds), has_answer)
    tuned = squad.tune_threshold(golds, preds)
    assert thresh == pytest.approx(0.4)
    assert tuned["best_f1_thresh"] == pytest.approx(thresh) and tuned["best_f1"] == pytest.approx(best_f1)


# ------------------------------------------------------------------------------ 4. end to end
@pytest.fixture(scope="module")
def v2_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("squadv2_run")
    (root / "base").mkdir()
    model = save_tiny_pretrained(root / "base")
    data = shared_path("squad", "dev-v2.0-small.json")
    argv = ["finetune", "squad", "--train", str(data), "--dev", str(data), "--model", str(model), "--out",
            str(root / "run"), "--max-seq-length", "40", "--doc-stride", "8", "--max-query-length", "12",
            "--max-steps", "4", "--batch-size", "8", "--eval-every", "2", "--no-progress", "--device", "cpu",
            "--recipe", "paper"]    # SQuAD v2.0 data: google's squad2.0 recipe, with its head
    assert main(argv) == 0
    return root, data


def test_finetune_predict_and_evaluate_with_googles_head(v2_run, capsys):
    root, data = v2_run
    run = root / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["config"]["squad_head"] == "xlnet" and metrics["squad_head"] == "xlnet"
    assert metrics["config"]["optim"]["name"] == "adamweightdecay"
    meta = json.loads((run / "best" / "task.json").read_text())
    assert meta["squad_head"] == "xlnet"
    from albertlm.model.registry import saved_class_name

    assert saved_class_name(run / "best") == "AlbertForSquadV2"
    losses = json.loads((run / "train_log.json").read_text())["losses"]
    assert len(losses) == 4 and all(np.isfinite(losses))
    best = metrics["best"]["dev"]
    nbest = json.loads((run / "nbest_predictions.json").read_text())
    assert {"start_log_prob", "end_log_prob"} <= set(next(iter(nbest.values()))[0])
    capsys.readouterr()
    # predict from the saved run: the same files, the run's tuned threshold
    assert main(["predict", "squad", "--model", str(run), "--data", str(data), "--out", str(root / "pred"),
                 "--no-progress", "--device", "cpu"]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["dev"]["f1"] == pytest.approx(best["f1"])
    for name in ("predictions.json", "null_odds.json", "nbest_predictions.json"):
        assert json.loads((root / "pred" / name).read_text()) == json.loads((run / name).read_text())
    # the files score to the run's numbers
    assert main(["evaluate", "squad", "--data", str(data), "--predictions", str(root / "pred" / "predictions.json"),
                 "--na-probs", str(root / "pred" / "null_odds.json")]) == 0
    rescored = json.loads(capsys.readouterr().out)
    assert rescored["f1"] == pytest.approx(best["f1"]) and rescored["best_f1"] == pytest.approx(best["best_f1"])
    assert main(["evaluate", "squad", "--data", str(data), "--model", str(run), "--no-progress",
                 "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["dev"]["f1"] == pytest.approx(best["f1"])


def test_recipes_and_the_default_head():
    from albertlm.config.task import FinetuneConfig
    from albertlm.tasks import recipes

    assert recipes.recipe("squad2.0").squad_head == "xlnet"
    assert recipes.recipe("squad1.1").squad_head == "bert" and recipes.recipe("rte").squad_head == "bert"
    assert FinetuneConfig().squad_head == "bert" and recipes.FAMILY_DEFAULTS["squad"].squad_head == "bert"


# ------------------------------------------------------------------------------------ 5. refusals
def test_v1_1_with_the_xlnet_head_is_refused_in_one_line(v2_run, tmp_path, capsys):
    root, data = v2_run
    v11 = tmp_path / "v11.json"
    raw = json.loads(data.read_text(encoding="utf-8"))
    for article in raw["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{k: v for k, v in qa.items() if k != "is_impossible"}
                                for qa in paragraph["qas"] if not qa.get("is_impossible")]
    raw["version"] = "1.1"
    v11.write_text(json.dumps(raw))
    for version in (["--version", "1.1"], []):      # given, or shown by the file
        code = main(["finetune", "squad", *version, "--squad-head", "xlnet", "--train", str(v11), "--model",
                     str(root / "base"), "--out", str(tmp_path / "out"), "--device", "cpu"])
        assert_one_error(capsys, code, "xlnet SQuAD head", "is for SQuAD v2.0, not v1.1", "--squad-head")
        assert not (tmp_path / "out").exists()
    code = main(["predict", "squad", "--model", str(root / "run"), "--data", str(v11), "--version", "1.1",
                 "--out", str(tmp_path / "p"), "--device", "cpu"])
    assert_one_error(capsys, code, "is for SQuAD v2.0, not v1.1")
    assert not (tmp_path / "p").exists()


def test_only_squad_offers_the_head_option(capsys):
    for family, offered in (("glue", False), ("race", False), ("squad", True)):
        with pytest.raises(SystemExit):
            main(["finetune", family, "--help"])
        assert ("--squad-head {bert,xlnet}" in capsys.readouterr().out) == offered


def test_transformers_and_onnx_exports_are_refused_in_one_line(v2_run, tmp_path, capsys):
    best = v2_run[0] / "run" / "best"
    assert_one_error(capsys, main(["convert", str(best), str(tmp_path / "hf"), "--to", "hf"]),
                     "cannot export AlbertForSquadV2", "transformers has no ALBERT class",
                     "AlbertModel.from_pretrained")
    assert_one_error(capsys, main(["export", "onnx", str(best), "--out", str(tmp_path / "m.onnx")]),
                     "cannot export AlbertForSquadV2", "to ONNX", "albertlm predict squad", "--encoder")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "m.onnx").exists()
