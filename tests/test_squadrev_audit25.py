"""Second review of google's SQuAD v2.0 head (`heads.AlbertForSquadV2`, twenty-fifth session; its own checks against
google's TF code are tests/test_squadv2_audit25.py).

The head computed its -1e30 mask, softmaxes and answer_class input in float32 whatever the weights' dtype: a model
loaded with `from_pretrained(dtype=torch.bfloat16)` (or float16, float64, `.half()`, `dtype="auto"` of a bf16 save)
failed in answer_class with "mat1 and mat2 must have the same dtype" (BERT's head, AlbertForQuestionAnswering, runs
in any dtype). Under autocast (`--precision bf16`) the mask stays float32: -1e30 is -inf in float16."""
from __future__ import annotations

import copy

import pytest
import torch

from albertlm.model.heads import NEG_INF, AlbertForSquadV2


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _windows():
    """Two `[CLS] question [SEP] context [SEP]` windows, the second padded; gold spans (one answered, one not)."""
    ids = torch.tensor([[2, 7, 8, 3, 9, 10, 11, 12, 13, 14, 3, 0],
                        [2, 7, 3, 15, 16, 17, 18, 3, 0, 0, 0, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0],
                          [0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0]])
    labels = (torch.tensor([5, 0]), torch.tensor([7, 0]), torch.tensor([0, 1]))
    return (ids, (ids != 0).long(), types), labels


@pytest.fixture(scope="module")
def model():
    from albertlm.config import ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)
    return AlbertForSquadV2(cfg).eval()


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-5), (torch.float16, 2e-2), (torch.bfloat16, 1e-1)])
def test_the_head_runs_in_the_weights_dtype(model, dtype, tol):
    inputs, labels = _windows()
    with torch.no_grad():
        ref, ref_loss = model(*inputs), model(*inputs, *labels).loss
        cast = copy.deepcopy(model).to(dtype)
        out, loss = cast(*inputs), cast(*inputs, *labels)
    acc = torch.promote_types(dtype, torch.float32)    # float32 (float64 for a float64 model): -1e30 holds
    assert out.cls_logits.dtype == acc and out.start_top_log_probs.dtype == acc and loss.loss.dtype == acc
    torch.testing.assert_close(out.cls_logits.float(), ref.cls_logits, atol=tol, rtol=tol)
    torch.testing.assert_close(loss.loss.float(), ref_loss, atol=tol, rtol=tol)
    assert (out.start_logits == NEG_INF).tolist() == (ref.start_logits == NEG_INF).tolist()   # the same p_mask
    assert torch.isfinite(out.start_top_log_probs).all() and torch.isfinite(loss.loss)


def test_a_model_loaded_in_bfloat16_predicts(model, tmp_path):
    inputs, _ = _windows()
    model.save_pretrained(tmp_path / "m")
    for dtype in (torch.bfloat16, torch.float16):
        loaded = AlbertForSquadV2.from_pretrained(tmp_path / "m", dtype=dtype)
        assert next(loaded.parameters()).dtype == dtype
        with torch.no_grad():
            out = loaded(*inputs)
        assert out.end_top_index.shape == (2, 25) and out.cls_logits.dtype == torch.float32


def test_the_mask_stays_float32_under_bf16_autocast(model):
    """`--precision bf16`: the layers run in bf16, the -1e30 mask and the log-softmaxes in float32 (a pure check)."""
    inputs, labels = _windows()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, beam = model(*inputs, *labels), model(*inputs)
    assert out.start_logits.dtype == out.end_logits.dtype == torch.float32
    assert (out.start_logits[1, 8:] == NEG_INF).all() and (out.end_logits[0, 1:4] == NEG_INF).all()
    assert torch.isfinite(out.loss) and out.loss.dtype == torch.float32 and beam.cls_logits.dtype == torch.float32
    assert beam.start_top_log_probs.dtype == torch.float32
    assert sorted(beam.start_top_index[1].tolist()) == [0, 3, 4, 5, 6]     # the open places: [CLS], the context


# ------------------------------------------------- the beam's decoding against google's, on real windows
def google_accumulate_and_write_v2(features, outputs, n_best_size, max_answer_length, text_of):
    """squad_utils.accumulate_predictions_v2 + write_predictions_v2 for one question's windows (`features`, their
    rows of `outputs`): its filters, its (start, end) dict per window, its sort and n-best loop, its min cls_logits.
    `text_of(feature, start_idx, end_idx)` maps a span back (google: tok_*_to_orig_index, paragraph slice, strip)."""
    result_dict, score_null = {}, 1000000
    for row, feature in features:
        x = feature.extra
        doc_offset, doc_len = x["doc_offset"], x["doc_length"]
        score_null = min(score_null, float(outputs["cls_logits"][row]))
        result_dict[row] = {}
        for i in range(5):
            for j in range(5):
                start_log_prob, start_index = outputs["start_top_log_probs"][row, i], outputs["start_top_index"][row, i]
                j_index = i * 5 + j
                end_log_prob, end_index = outputs["end_top_log_probs"][row, j_index], outputs["end_top_index"][row, j_index]
                if start_index - doc_offset >= doc_len or start_index - doc_offset < 0:
                    continue
                if end_index - doc_offset >= doc_len:
                    continue
                if not x["max_context"][start_index - doc_offset]:      # token_is_max_context.get(start_index)
                    continue
                if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                    continue
                key = (start_index - doc_offset, end_index - doc_offset)
                result_dict[row].setdefault(key, []).append((start_log_prob, end_log_prob))
    prelim = [(row, s, e, sum(p[0] for p in lps) / len(lps), sum(p[1] for p in lps) / len(lps))
              for row, _ in features for (s, e), lps in result_dict[row].items()]
    prelim = sorted(prelim, key=lambda p: p[3] + p[4], reverse=True)
    seen, nbest = set(), []
    feature_of = dict(features)
    for row, s, e, start_log_prob, end_log_prob in prelim:
        if len(nbest) >= n_best_size:
            break
        final_text = text_of(feature_of[row], s, e)
        if final_text in seen or not final_text:    # albertlm drops a span of no text (docs/finetuning.md)
            continue
        seen.add(final_text)
        nbest.append((final_text, start_log_prob, end_log_prob))
    return nbest or [("", -1e6, -1e6)], score_null


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_beam_decodes_as_googles_over_real_windows(seed):
    """The dev file's 14 questions cut into 111 windows (several per question, max-context starts), beams of
    distinct starts and, per start, distinct ends (as top_k gives them) with random log-probabilities: the n-best
    texts, their log-probabilities and the null odds are those of google's code transcribed (a pure check)."""
    import numpy as np

    from albertlm.tasks import squad
    from albertlm.tokenization import load_tokenizer
    from conftest import shared_path

    spm = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"), None)
    settings = squad.SquadSettings(max_seq_length=64, max_query_length=16, doc_stride=16, n_best_size=7,
                                   max_answer_length=6)
    features = squad.build_features(spm, examples, settings, training=False)
    assert len(features) > 3 * len(examples)
    rng = np.random.default_rng(seed)
    n = len(features)
    outputs = {"start_top_index": np.stack([rng.choice(f.length, 5, replace=False) for f in features]),
               "start_top_log_probs": -rng.random((n, 5)) * 3,
               "end_top_index": np.stack([np.concatenate([rng.choice(f.length, 5, replace=False) for _ in range(5)])
                                          for f in features]),
               "end_top_log_probs": -rng.random((n, 25)) * 3, "cls_logits": rng.normal(size=n)}
    preds = squad.postprocess_beam(examples, features, outputs, spm, settings)
    contexts = dict(zip([e.context for e in examples], squad.tokenize_contexts(spm, [e.context for e in examples])))

    for index, example in enumerate(examples):
        spans = contexts[example.context].spans

        def text_of(feature, s, e):
            a, b = spans[feature.extra["doc_start"] + s][0], spans[feature.extra["doc_start"] + e][1]
            return example.context[a:b].strip()

        windows = [(row, f) for row, f in enumerate(features) if f.example_index == index]
        nbest, null = google_accumulate_and_write_v2(windows, outputs, settings.n_best_size,
                                                     settings.max_answer_length, text_of)
        ours = preds[example.qid]
        assert [s.text for s in ours.nbest] == [t for t, _, _ in nbest]
        assert [v for s in ours.nbest for v in (s.start_logit, s.end_logit)] == pytest.approx(
            [float(v) for _, a, b in nbest for v in (a, b)])
        assert ours.score_diff == pytest.approx(null)
