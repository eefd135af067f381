"""The model audit of the seventeenth session, as a researcher using it as a library and through `albertlm params`:
masked positions outside the sequence are named (with `token_index` they read another sequence's token silently),
a too-long sequence is a ValueError like every other bad input, a checkpoint config.json with missing fields warns
and one with unknown fields says why it is refused, `albertlm params` shows the paper's Table 3 / 4 numbers; and the
checks around them: the partial sharing modes share exactly the planned tensors and accumulate their gradients,
the paper's rounding of every Table 1 / 3 / 4 row, checkpointing, mask dtypes, all-padding rows, determinism."""
from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.config.presets import PRESETS, get_preset
from albertlm.errors import UserError
from albertlm.model.albert import (AlbertForPreTraining, AlbertModel, enable_activation_checkpointing,
                                   sharing_plan)
from albertlm.model.inputs import ModelInputError


def tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=50, embedding_size=8, hidden_size=16, num_layers=4, num_heads=2,
                                 ffn_size=24, max_position_embeddings=16, hidden_dropout=0.0, attention_dropout=0.0,
                                 classifier_dropout=0.0), **changes})


def batch(B: int = 3, T: int = 10):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (B, T), generator=g)
    mask = torch.ones_like(ids)
    mask[1, T - 3:] = 0
    mask[2, T - 5:] = 0
    return ids, mask


def count(cfg: ModelConfig, pooler: bool = True) -> float:
    with torch.device("meta"):
        model = AlbertModel(cfg)
    total = sum(p.numel() for p in model.parameters())
    return (total - (0 if pooler else sum(p.numel() for p in model.pooler.parameters()))) / 1e6


# -------------------------------------------------------------------------------------------- defects fixed
@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("bad", [10, 13, -1])
def test_a_masked_position_outside_the_sequence_is_named(packed, bad):
    """With token_index, position 13 of row 0 read row 1's token 3 (flat b * T + t) and -1 of row 1 read row 0's last
    token, silently; without it, gather's RuntimeError named no argument."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny()).eval()
    ids, mask = batch()
    positions = torch.tensor([[1, 2], [3, 4], [1, 2]])
    positions[0 if bad >= 0 else 1, 1] = bad
    token_index = mask.flatten().nonzero().squeeze(1) if packed else None
    with pytest.raises(ModelInputError, match=rf"masked_lm_positions holds {bad}, outside the sequences' 10 positions"):
        model(ids, mask, masked_lm_positions=positions, masked_lm_ids=torch.ones_like(positions),
              token_index=token_index)
    good = positions.clamp(0, 9)  # the same call with positions inside: packed and padded agree
    args = dict(masked_lm_positions=good, masked_lm_ids=torch.ones_like(good))
    torch.testing.assert_close(model(ids, mask, **args, token_index=mask.flatten().nonzero().squeeze(1)).loss,
                               model(ids, mask, **args).loss)


def test_a_sequence_longer_than_the_position_embeddings_is_a_model_input_error():
    """It was a bare UserError: a Python caller catching ValueError (as for every other bad input) missed it."""
    model = AlbertModel(tiny())
    with pytest.raises(ValueError, match="17 tokens, more than max_position_embeddings=16") as info:
        model(torch.zeros(1, 17, dtype=torch.long))
    assert isinstance(info.value, ModelInputError)


def test_config_fields_missing_from_a_checkpoint_warn_and_unknown_ones_say_why(tmp_path, caplog):
    """A config.json without `activation` / `layer_norm_eps` silently took ModelConfig's defaults; an unknown field
    was refused without saying why (or suggesting the field meant)."""
    AlbertModel(tiny(activation="gelu", layer_norm_eps=1e-6)).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    complete = dict(data)
    del data["activation"], data["layer_norm_eps"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    # the logger that warns (model/io.py's), so that a level another test left on it cannot hide the warning
    with caplog.at_level(logging.WARNING, logger="albertlm"), caplog.at_level(logging.WARNING, logger="albertlm.model"):
        model = AlbertModel.from_pretrained(tmp_path)
        AlbertModel.from_pretrained(tmp_path)  # once per file
    assert model.config.activation == "gelu_new"  # the documented default
    warned = [r.getMessage() for r in caplog.records if "not in the file" in r.getMessage()]
    assert len(warned) == 1 and "activation='gelu_new'" in warned[0] and "layer_norm_eps=1e-12" in warned[0]
    assert str(tmp_path / "config.json") in warned[0]

    (tmp_path / "config.json").write_text(json.dumps({**complete, "hidden_sise": 16}))
    with pytest.raises(UserError, match=r"unknown model config field\(s\): hidden_sise \(did you "
                                                          r"mean hidden_size\?\); refused rather than ignored"):
        AlbertModel.from_pretrained(tmp_path)


def test_params_shows_the_papers_table3_and_table4_rows(capsys):
    """The `paper` column was `-` for every override: Table 3 / 4's rows could not be read next to ours."""
    rows = {}
    for E, sharing in ((64, "none"), (256, "all"), (768, "attention"), (128, "ffn")):
        assert main(["params", "--preset", "albert-base", "--embedding-size", str(E), "--sharing", sharing,
                     "--json"]) == 0
        (rows[E, sharing],) = json.loads(capsys.readouterr().out)
    assert {key: row["paper"] for key, row in rows.items()} == {
        (64, "none"): 87, (256, "all"): 16, (768, "attention"): 83, (128, "ffn"): 38}
    assert main(["params", "--preset", "bert-base", "--preset", "albert-base", "--embedding-size", "32", "--json"]) == 0
    assert [row["paper"] for row in json.loads(capsys.readouterr().out)] == [None, None]  # no such row in the paper
    assert main(["params", "--preset", "albert-base", "--sharing", "none"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[-2:] == ["89M", "0.1M"] and "leave out the pooler" in out


# ------------------------------------------------------------------------------------- checks (the brief's)
@pytest.mark.parametrize("sharing", ["attention", "ffn", "all", "none"])
def test_each_sharing_mode_shares_exactly_the_planned_tensors_and_sums_their_gradients(sharing):
    """L = 4 layers in N = 2 groups of K = 2 inner blocks. Untied copy: one attention and one FFN per block, copied
    from the module the plan runs there; same output, and each shared tensor's gradient is the sum of its uses'."""
    torch.manual_seed(0)
    cfg = tiny(sharing=sharing, num_groups=2, inner_group_num=2)
    model = AlbertModel(cfg)
    plan, encoder = sharing_plan(cfg), model.encoder
    expected = {"all": (4, 4), "attention": (4, 8), "ffn": (8, 4), "none": (8, 8)}[sharing]
    assert (len(encoder.attentions), len(encoder.ffns)) == expected
    for i, (a, f) in enumerate(plan):
        for j, (b, g) in enumerate(plan):  # same module index <=> same storage, for every tensor
            same_a = encoder.attentions[a].qkv.weight.data_ptr() == encoder.attentions[b].qkv.weight.data_ptr()
            same_f = encoder.ffns[f].up.weight.data_ptr() == encoder.ffns[g].up.weight.data_ptr()
            layer_i, layer_j = i // 2, j // 2
            group_i, group_j = layer_i * 2 // 4, layer_j * 2 // 4
            shares = i % 2 == j % 2 and (layer_i == layer_j or group_i == group_j)
            assert same_a == (i == j or (shares and sharing in ("all", "attention"))), (i, j)
            assert same_f == (i == j or (shares and sharing in ("all", "ffn"))), (i, j)
    assert len({p.data_ptr() for p in model.parameters()}) == len(list(model.parameters()))  # no aliases

    untied = AlbertModel(cfg.replace(sharing="none"))
    untied.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("encoder.")}, strict=False)
    for i, (a, f) in enumerate(plan):
        untied.encoder.attentions[i].load_state_dict(encoder.attentions[a].state_dict())
        untied.encoder.ffns[i].load_state_dict(encoder.ffns[f].state_dict())
    ids, mask = batch()
    out, out_untied = model(ids, mask).last_hidden_state, untied(ids, mask).last_hidden_state
    torch.testing.assert_close(out, out_untied, atol=1e-5, rtol=0)
    weights = torch.randn_like(out)
    (out * weights).sum().backward()
    (out_untied * weights).sum().backward()
    for a in range(len(encoder.attentions)):
        uses = [i for i, (b, _) in enumerate(plan) if b == a]
        total = sum(untied.encoder.attentions[i].qkv.weight.grad for i in uses)
        torch.testing.assert_close(encoder.attentions[a].qkv.weight.grad, total, atol=1e-5, rtol=1e-4)
    for f in range(len(encoder.ffns)):
        uses = [i for i, (_, g) in enumerate(plan) if g == f]
        total = sum(untied.encoder.ffns[i].down.weight.grad for i in uses)
        torch.testing.assert_close(encoder.ffns[f].down.weight.grad, total, atol=1e-5, rtol=1e-4)
    assert model.embeddings.project.weight.grad.abs().sum() > 0  # the factorised E -> H projection learns


# Each Table 1 / 3 / 4 row: (preset, overrides, the paper's millions, counted with the pooler?, rounding step)
PAPER_ROWS = [
    ("bert-base", {}, 108, False, 1), ("bert-large", {}, 334, False, 1), ("bert-xlarge", {}, 1270, False, 10),
    ("albert-base", {}, 12, True, 1), ("albert-large", {}, 18, True, 1),
    *[("albert-base", dict(embedding_size=E, sharing="none"), m, False, 1)
      for E, m in ((64, 87), (128, 89), (256, 93), (768, 108))],
    *[("albert-base", dict(embedding_size=E, sharing="all"), m, True, 1)
      for E, m in ((64, 10), (128, 12), (256, 16), (768, 31))],
    *[("albert-base", dict(embedding_size=E, sharing=s), m, True, 1)
      for E, s, m in ((768, "attention", 83), (768, "ffn", 57), (128, "attention", 64), (128, "ffn", 38))],
]


@pytest.mark.parametrize("name,overrides,paper,pooler,step", PAPER_ROWS)
def test_the_papers_counts_are_ours_rounded_as_docs_model_md_says(name, overrides, paper, pooler, step):
    """Tighter than test_presets' +-1.3M (which a lost bias or LayerNorm would pass): the paper's BERT / not-shared
    rows are our count less the pooler, its shared rows our count, each rounded; `params` shows the same number."""
    from albertlm.config.presets import paper_params

    assert round(count(get_preset(name, **overrides), pooler) / step) * step == paper
    assert paper_params(name, overrides) == paper


def test_the_two_albert_rows_no_counting_reproduces_are_documented():
    from pathlib import Path

    assert round(count(PRESETS["albert-xlarge"].config)) == 59 and PRESETS["albert-xlarge"].paper_params == 60
    assert round(count(PRESETS["albert-xxlarge"].config)) == 223 and PRESETS["albert-xxlarge"].paper_params == 235
    doc = " ".join((Path(__file__).parents[1] / "docs" / "model.md").read_text(encoding="utf-8").split())
    assert "albert-xlarge 58.7M against 60M" in doc and "ALBERT-xxlarge: 223M, not 235M" in doc


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_checkpointing_gives_the_same_gradients_with_dropout_and_partial_sharing(sharing):
    torch.manual_seed(0)
    plain = AlbertForPreTraining(tiny(sharing=sharing, num_groups=2, inner_group_num=2, hidden_dropout=0.2,
                                      attention_dropout=0.2)).train()
    checkpointed = enable_activation_checkpointing(copy.deepcopy(plain))
    ids, mask = batch()
    grads = []
    for model in (plain, checkpointed):
        torch.manual_seed(5)  # the same dropout masks; checkpointing replays them in backward
        model(ids, mask, labels=ids, sentence_order_label=torch.tensor([0, 1, 1])).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    assert all(g is not None for g in grads[0].values())
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=0, rtol=0)


def test_masks_of_any_dtype_all_padding_rows_and_eval_are_well_behaved():
    torch.manual_seed(0)
    model = AlbertModel(tiny(hidden_dropout=0.3, attention_dropout=0.3))
    ids, mask = batch()
    mask[2] = 0  # a row of padding only
    model.eval()
    reference = model(ids, mask).last_hidden_state
    assert torch.isfinite(reference).all()
    for other in (mask.bool(), mask.float(), mask.int()):
        assert torch.equal(model(ids, other).last_hidden_state, reference)  # eval: deterministic, no dropout
    assert torch.equal(model(ids).last_hidden_state, model(ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state)
    pretraining = AlbertForPreTraining(tiny(hidden_dropout=0.3, attention_dropout=0.3)).train()
    labels = torch.where(mask.bool(), ids, -100)
    out = pretraining(ids, mask, labels=labels, sentence_order_label=torch.tensor([0, 1, 1]))
    out.loss.backward()
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in pretraining.parameters())
