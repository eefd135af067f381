"""transformers' ALBERT is the oracle: random tiny models, both directions, every head, fp32 within 1e-5."""
from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from albertlm.config import ModelConfig  # noqa: E402
from albertlm.errors import UserError  # noqa: E402
from albertlm.interop.hf import export_hf, import_hf  # noqa: E402
from albertlm.model import heads  # noqa: E402
from albertlm.model.albert import AlbertForPreTraining, AlbertModel  # noqa: E402

ATOL = 1e-5
# odd sizes; N > 1 groups; inner_group_num > 1; E == H; `none` (N == L); gelu exact
HF_CONFIGS = {
    "groups3-inner2": dict(num_hidden_layers=6, num_hidden_groups=3, inner_group_num=2),
    "one-group": dict(num_hidden_layers=5),
    "e-equals-h": dict(num_hidden_layers=3, embedding_size=32, hidden_act="gelu"),
    "not-shared": dict(num_hidden_layers=3, num_hidden_groups=3),
}
HEAD_CLASSES = ["AlbertForMaskedLM", "AlbertForSequenceClassification", "AlbertForTokenClassification",
                "AlbertForQuestionAnswering", "AlbertForMultipleChoice"]


def hf_config(**kw):
    base = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                classifier_dropout_prob=0.0, num_labels=3)
    return transformers.AlbertConfig(**{**base, **kw})


def hf_model(name, cfg, seed=0):
    torch.manual_seed(seed)
    model = getattr(transformers, name)(cfg).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases, so a swapped key shows
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def inputs(B=3, T=11, V=99, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1:, T - 4:] = 0  # padding (the first row has none)
    mask[2:, T - 2:] = 0
    types = (torch.arange(T) >= 5).long().expand(B, T).clone()  # two segments
    return ids, mask, types


def close(a, b):
    assert a.shape == b.shape
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def load_info(cls, directory):
    model, info = cls.from_pretrained(directory, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


@pytest.mark.parametrize("name", list(HF_CONFIGS))
def test_pretraining_both_directions(name, tmp_path):
    hf = hf_model("AlbertForPreTraining", hf_config(**HF_CONFIGS[name], num_labels=2))  # SOP is 2-way
    hf.save_pretrained(tmp_path / "hf")
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = inputs()
    with torch.no_grad():
        theirs_out, base = hf(ids, mask, types), hf.albert(ids, mask, types)
        out, our_base = ours(ids, mask, types), ours.albert(ids, mask, types)
    close(our_base.last_hidden_state, base.last_hidden_state)
    close(our_base.pooler_output, base.pooler_output)
    close(out.prediction_logits, theirs_out.prediction_logits)
    close(out.sop_logits, theirs_out.sop_logits)
    # MLM only at masked positions: the same logits as transformers' at those positions
    positions = torch.tensor([[1, 4, 0], [2, 3, 6], [0, 8, 5]])
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    with torch.no_grad():
        sparse = ours(ids, mask, types, masked_lm_positions=positions, masked_lm_ids=positions,
                      masked_lm_weights=weights).prediction_logits
    rows = theirs_out.prediction_logits.gather(1, positions[..., None].expand(-1, -1, 99)).flatten(0, 1)  # B * P slots
    close(sparse, rows)
    # ours -> transformers again: loads cleanly and gives the same logits
    export_hf(ours, tmp_path / "back")
    again = load_info(transformers.AlbertForPreTraining, tmp_path / "back")
    with torch.no_grad():
        close(again(ids, mask, types).prediction_logits, theirs_out.prediction_logits)


@pytest.mark.parametrize("name", HEAD_CLASSES)
def test_task_heads_both_directions(name, tmp_path):
    num_labels = 2 if name == "AlbertForQuestionAnswering" else 3  # transformers' QA needs 2
    hf = hf_model(name, hf_config(**HF_CONFIGS["groups3-inner2"], num_labels=num_labels))
    hf.save_pretrained(tmp_path / "hf")
    ours = getattr(heads, name).from_pretrained(tmp_path / "hf").eval()
    ids, mask, types = inputs()
    if name == "AlbertForMultipleChoice":  # (B, C, T)
        ids, mask, types = (t.view(1, 3, 11) for t in (ids, mask, types))
    keys = ("start_logits", "end_logits") if name == "AlbertForQuestionAnswering" else ("logits",)
    export_hf(ours, tmp_path / "back")
    again = load_info(getattr(transformers, name), tmp_path / "back")
    with torch.no_grad():
        expected, got, back = hf(ids, mask, types), ours(ids, mask, types), again(ids, mask, types)
    for key in keys:
        close(got[key], expected[key])
        close(back[key], expected[key])


def test_head_losses_match_transformers(tmp_path):
    """Same loss conventions: regression (num_labels 1), classification, span QA with clamped positions."""
    ids, mask, types = inputs()
    for name, num_labels, kwargs in (
        ("AlbertForSequenceClassification", 1, dict(labels=torch.tensor([0.5, -1.0, 2.0]))),
        ("AlbertForSequenceClassification", 3, dict(labels=torch.tensor([0, 2, 1]))),
        ("AlbertForTokenClassification", 3, dict(labels=torch.where(mask == 1, ids % 3, -100))),
        ("AlbertForQuestionAnswering", 2, dict(start_positions=torch.tensor([1, 3, 40]),
                                               end_positions=torch.tensor([2, 5, 6]))),
    ):
        hf = hf_model(name, hf_config(num_hidden_layers=2, num_labels=num_labels))
        hf.save_pretrained(tmp_path / name)
        ours = getattr(heads, name).from_pretrained(tmp_path / name).eval()
        with torch.no_grad():
            close(ours(ids, mask, types, **kwargs).loss, hf(ids, mask, types, **kwargs).loss)


def test_pretraining_loss_with_transformers_labels(tmp_path):
    hf = hf_model("AlbertForPreTraining", hf_config(num_hidden_layers=2, num_labels=2))
    hf.save_pretrained(tmp_path)
    ours = AlbertForPreTraining.from_pretrained(tmp_path).eval()
    ids, mask, types = inputs()
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 4], labels[2, 1] = 5, 7, 9
    sop = torch.tensor([0, 1, 1])
    with torch.no_grad():
        expected = hf(ids, mask, types, labels=labels, sentence_order_label=sop).loss
        close(ours(ids, mask, types, labels=labels, sentence_order_label=sop).loss, expected)


def test_base_model_export_and_bin_with_position_ids(tmp_path):
    """A bare AlbertModel exports cleanly; an old pytorch_model.bin (persistent position_ids) loads."""
    hf = hf_model("AlbertModel", hf_config(num_hidden_layers=2))
    state = dict(hf.state_dict())
    state["embeddings.position_ids"] = torch.arange(64)[None]
    (tmp_path / "old").mkdir()
    torch.save(state, tmp_path / "old" / "pytorch_model.bin")
    hf.config.to_json_file(tmp_path / "old" / "config.json")
    ours = AlbertModel.from_pretrained(tmp_path / "old").eval()
    ids, mask, types = inputs()
    with torch.no_grad():
        close(ours(ids, mask, types).last_hidden_state, hf(ids, mask, types).last_hidden_state)
    export_hf(ours, tmp_path / "back")
    again = load_info(transformers.AlbertModel, tmp_path / "back")
    with torch.no_grad():
        close(again(ids, mask, types).pooler_output, hf(ids, mask, types).pooler_output)


def test_our_e_equals_h_exports_identity_projection(tmp_path):
    """google-style E == H (no projection) exports as transformers' identity projection."""
    cfg = ModelConfig(vocab_size=99, embedding_size=32, hidden_size=32, num_layers=3, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, sharing="none")
    ours = AlbertForPreTraining(cfg).eval()
    assert ours.albert.embeddings.project is None
    export_hf(ours, tmp_path)
    theirs = load_info(transformers.AlbertForPreTraining, tmp_path)
    ids, mask, types = inputs()
    with torch.no_grad():
        close(theirs(ids, mask, types).prediction_logits, ours(ids, mask, types).prediction_logits)
    assert import_hf(tmp_path).config.always_project_embeddings  # transformers always projects


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_export_refuses_sharing_transformers_cannot_express(sharing, tmp_path):
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, sharing=sharing)
    with pytest.raises(UserError, match=f"sharing='{sharing}'"):
        export_hf(AlbertForPreTraining(cfg), tmp_path)


def test_albert_base_v2_shape_round_trips(shared, tmp_path):
    """google's released albert-base-v2 config builds (its `gelu` is the tanh GELU) and round-trips."""
    data = json.loads(shared("config", "albert_base_v2_config.json").read_text())
    (tmp_path / "google").mkdir()
    (tmp_path / "google" / "config.json").write_text(json.dumps(data))
    from albertlm.model.io import read_config

    cfg, _ = read_config(tmp_path / "google")
    assert (cfg.hidden_size, cfg.embedding_size, cfg.num_layers, cfg.vocab_size) == (768, 128, 12, 30000)
    assert cfg.activation == "gelu_new" and not cfg.always_project_embeddings
    ours = AlbertForPreTraining(cfg.replace(num_layers=2)).eval()  # 2 of the 12 (shared) passes: cheap
    export_hf(ours, tmp_path / "hf")
    theirs = load_info(transformers.AlbertForPreTraining, tmp_path / "hf")
    assert theirs.config.hidden_act == "gelu_new"
    ids, mask, types = inputs(B=1, T=16, V=30000)
    with torch.no_grad():
        close(theirs(ids, mask, types).sop_logits, ours(ids, mask, types).sop_logits)
