"""Skipping the padding: with `token_index` the encoder's per-token layers run on the N real tokens only
(`model.albert.Packing`), and every result on a real token is the padded model's. The data loader's collate
computes the index on the host; pretraining passes it to the model except under CUDA-graph compile modes."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.config import ModelConfig
from albertlm.data import loader
from albertlm.model import albert, fused
from albertlm.model.albert import AlbertForPreTraining, AlbertModel, enable_activation_checkpointing
from albertlm.model.fast_paths import swap_in
from albertlm.training.distributed import DistInfo
from albertlm.training.pretrain import Datasets, PretrainingObjective, is_full, make_loop
from train_fixtures import SyntheticPretraining, tiny_run


def padded_batch(B=4, T=13, V=99, P=3, seed=0):
    """Rows of lengths 13, 5, 9, 2: one without padding, one of [CLS] and one token. The masked slots sit on
    real tokens; slot padding (weight 0) points at position 0, as the data builder writes it."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([13, 5, 9, 2])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    ids = torch.randint(5, V, (B, T), generator=g) * mask
    positions = torch.zeros(B, P, dtype=torch.long)
    weights = torch.zeros(B, P)
    for b, n in enumerate(lengths.tolist()):
        picked = torch.randperm(n - 1, generator=g)[:P] + 1
        positions[b, :len(picked)], weights[b, :len(picked)] = picked, 1.0
    types = ((torch.arange(T)[None] >= (lengths[:, None] // 2)) & mask.bool()).long()
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, masked_lm_positions=positions,
                masked_lm_ids=torch.randint(5, V, (B, P), generator=g), masked_lm_weights=weights,
                sentence_order_label=torch.tensor([0, 1, 1, 0]))


def token_index(mask: torch.Tensor) -> torch.Tensor:
    return mask.flatten().nonzero().squeeze(1)


def config(sharing: str, **kw) -> ModelConfig:
    sizes = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=4, num_heads=4, ffn_size=37,
                 max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)
    return ModelConfig(**{**sizes, **kw}, sharing=sharing)


def forward_backward(model, batch, **extra):
    model.zero_grad()
    out = model(**batch, **extra)
    out.loss.backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("variant", ["all", "none", "attention", "ffn", "groups", "E=H", "checkpointing",
                                     "fused fp32"])
def test_packed_pretraining_step_matches_the_padded_one(variant):
    sharing = variant if variant in ("all", "none", "attention", "ffn") else "all"
    extra = {"num_groups": 2} if variant == "groups" else {"embedding_size": 32} if variant == "E=H" else {}
    torch.manual_seed(0)
    model = AlbertForPreTraining(config(sharing, **extra))
    if variant == "checkpointing":
        enable_activation_checkpointing(model)
    if variant == "fused fp32":
        if not fused.AVAILABLE:
            pytest.skip("this torch build has no oneDNN fused linear")
        swap_in(model, torch.float32)
    model.train()
    batch = padded_batch()
    padded, padded_grads = forward_backward(model, batch)
    packed, packed_grads = forward_backward(model, batch, token_index=token_index(batch["attention_mask"]))
    for key in ("loss", "mlm_loss", "sop_loss", "mlm_accuracy", "prediction_logits", "sop_logits"):
        torch.testing.assert_close(packed[key], padded[key], atol=1e-5, rtol=1e-5, msg=key)
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_packed_hidden_states_match_on_real_tokens_and_are_zero_on_padding():
    torch.manual_seed(0)
    model = AlbertModel(config("all")).eval()
    batch = padded_batch()
    mask = batch["attention_mask"]
    with torch.no_grad():
        padded = model(batch["input_ids"], mask, batch["token_type_ids"])
        packed = model(batch["input_ids"], mask, batch["token_type_ids"], token_index=token_index(mask))
    real = mask.bool()
    torch.testing.assert_close(packed.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    assert packed.last_hidden_state[~real].abs().max() == 0       # the padded model computes values there
    assert padded.last_hidden_state[~real].abs().max() > 0
    torch.testing.assert_close(packed.pooler_output, padded.pooler_output, atol=1e-5, rtol=1e-5)


def test_packed_mlm_over_every_position_without_masked_slots():
    """No `masked_lm_positions` (the (B, T, V) logits path): the packed encoder pads its output back."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(config("none")).eval()
    batch = padded_batch()
    mask = batch["attention_mask"]
    with torch.no_grad():
        padded = model(batch["input_ids"], mask)
        packed = model(batch["input_ids"], mask, token_index=token_index(mask))
    real = mask.bool()
    torch.testing.assert_close(packed.prediction_logits[real], padded.prediction_logits[real], atol=1e-5, rtol=1e-5)


def test_the_packed_step_is_one_graph():
    """The index comes from the host, so the packed forward has no sync either (and N may vary)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = AlbertForPreTraining(config("all"))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    batch = padded_batch()
    out = compiled(**batch, token_index=token_index(batch["attention_mask"]))
    expected = reference(**batch)
    torch.testing.assert_close(out.loss, expected.loss, atol=1e-5, rtol=1e-5)
    out.loss.backward()
    expected.loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_collate_gives_the_real_tokens_and_a_full_batch_is_known_by_their_count():
    items = SyntheticPretraining(n=6, T=24).items
    batch = loader.collate(items)
    mask = batch["attention_mask"]
    assert not mask.bool().all()
    assert torch.equal(batch["token_index"], token_index(mask))
    assert batch["token_index"].dtype == torch.int64
    assert not is_full(batch)
    full = loader.collate([dict(item, attention_mask=np.ones_like(item["attention_mask"])) for item in items])
    assert torch.equal(full["token_index"], torch.arange(full["input_ids"].numel()))
    assert is_full(full)
    del full["token_index"]
    assert not is_full(full)  # without the index nothing is known: the mask stays


def _datasets():
    train = SyntheticPretraining(n=64)
    held_out = SyntheticPretraining(n=16, seed=1)
    return Datasets(train=train, eval=held_out, collate=loader.collate, meta=train.meta)


def _run(tmp_path: Path, objective=None, **train):
    loop = make_loop(tiny_run(max_steps=4, micro=4, **train), tmp_path, _datasets(), DistInfo(), False,
                     objective=objective)
    seen = {}
    loop.on_step = lambda step, metrics: seen.__setitem__(step, metrics)
    loop.run()
    return seen, loop


def test_pretraining_skips_the_padding_and_trains_as_the_padded_model(tmp_path, monkeypatch):
    packings = []
    real_init = albert.Packing.__init__

    def counting_init(self, index, batch, length, mask=None):
        packings.append(len(index) / (batch * length))
        real_init(self, index, batch, length, mask)

    monkeypatch.setattr(albert.Packing, "__init__", counting_init)
    skipped, loop = _run(tmp_path / "skip")
    assert packings and all(f < 1 for f in packings)         # every micro-batch of the synthetic data is padded
    assert loop.evaluate_fn is not None
    count = len(packings)
    padded, _ = _run(tmp_path / "padded", objective=PretrainingObjective(skip_padding=False))
    assert len(packings) == count                            # the reference really ran padded
    for step, metrics in padded.items():
        for key in ("loss", "mlm_acc", "sop_acc"):
            assert skipped[step][key] == pytest.approx(metrics[key], abs=1e-5), (step, key)


def test_cuda_graph_compile_modes_keep_the_padded_shape(tmp_path):
    for mode, skips in (("none", True), ("default", True), ("reduce-overhead", False), ("max-autotune", False)):
        loop = make_loop(tiny_run(max_steps=1, compile=mode), tmp_path / mode, _datasets(), DistInfo(), False)
        assert ("token_index" in loop.objective.objective.inputs) == skips, mode


def test_a_damaged_record_is_one_line_naming_it(tmp_path):
    """A shard record no build writes (a masked position past the sequence, a count past the slots, an id past
    the vocabulary) was an IndexError deep in the batch assembly (or, for an id, the embedding's failure)."""
    import shutil

    from albertlm.data.build import BuildConfig, build
    from albertlm.errors import UserError
    from conftest import alice_documents, shared_path

    text = alice_documents(tmp_path, 120)
    tok = tmp_path / "tok"
    tok.mkdir()
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), tok / "spiece.model")
    out = tmp_path / "data"
    build(BuildConfig(inputs=[str(text)], tokenizer=str(tok), out=str(out), max_seq_length=32, dupe_factor=1,
                      progress=False))
    good = loader.PretrainingDataset(out)
    assert len(loader.collate([good[i] for i in range(4)])["input_ids"]) == 4
    for field, value in (("masked_positions", 200), ("num_masked", 99), ("input_ids", 65000), ("length", 0)):
        ds = loader.PretrainingDataset(out)
        shard = ds._shards[0]
        writable = np.memmap(shard.filename, dtype=shard.dtype, mode="r+", offset=shard.offset, shape=shard.shape)
        column = writable[field]  # a view of the field over the records
        saved = column[1].copy()
        column[1] = value if field in ("num_masked", "length") else np.full_like(saved, value) \
            if field == "masked_positions" else np.where(np.arange(saved.shape[0]) == 3, value, saved)
        writable.flush()
        try:
            with pytest.raises(UserError, match=r"instance 1 \(in shard 0\) is damaged.*albertlm data build"):
                loader.PretrainingDataset(out)[1]
            loader.PretrainingDataset(out)[0]  # its neighbours are fine
        finally:
            column[1] = saved
            writable.flush()
