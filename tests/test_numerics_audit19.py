"""Fine-tuning numerics audit 19: SQuAD's loss ran its softmax over the padding of each micro-batch, so one example's
loss depended on how far its batch was padded and `--micro-batch-size` changed the gradient (by more than half of
its norm on mixed lengths); it now trains on the span loss over the real tokens, the gradient of one unpadded
example at a time. `predict` / `evaluate --precision bf16` on a CPU without bf16 instructions say, as `finetune`
does, that it runs emulated."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train
from albertlm.model.heads import AlbertForQuestionAnswering, AlbertForSequenceClassification
from albertlm.tasks import finetune
from albertlm.tasks.features import Feature, collate
from albertlm.tokenization import load_tokenizer
from albertlm.training.distributed import DistInfo
from conftest import TINY_WORDS, save_tiny_pretrained

NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit19_model"))


def span_features(lengths, vocab_size: int) -> list[Feature]:
    """[CLS] + random tokens, one answer span inside each: windows of mixed lengths, as SQuAD's are."""
    rng = np.random.default_rng(5)
    features = []
    for k, n in enumerate(lengths):
        ids = rng.integers(5, vocab_size, n)
        ids[0] = 2
        start = int(rng.integers(1, n))
        features.append(Feature(ids, np.zeros(n, np.int64), k, label=(start, int(rng.integers(start, n)))))
    return features


def first_step_gradients(loop) -> dict[str, torch.Tensor]:
    """The accumulated gradient the optimizer's first update gets."""
    grads = {}
    step = loop.optimizer.step

    def capture(*args, **kwargs):
        if not grads:
            grads.update({n: p.grad.clone() for n, p in loop.raw_model.named_parameters() if p.grad is not None})
        return step(*args, **kwargs)

    loop.optimizer.step = capture
    loop.run()
    return grads


def test_squad_micro_batches_train_as_unpadded_examples_one_at_a_time(model_dir, tmp_path):
    """A batch of 6 windows of 5..40 tokens: the whole batch at once (padded to 40), and in micro-batches of 1
    (no padding), give the gradient of a plain loop over the unpadded examples with the head's own loss. The
    padded softmax gave a loss of 3.48 where the unpadded examples have 2.88 (a tiny model), and a gradient off by
    63% of its norm."""
    tokenizer = load_tokenizer(model_dir)
    features = span_features([40, 9, 23, 5, 31, 14], len(TINY_WORDS) + 5)
    results = []
    for micro in (0, 1):
        spec = finetune.TaskSpec("squad", AlbertForQuestionAnswering, {}, list(features), [], "f1", torch.long,
                                 outputs=finetune.SPANS)
        cfg = FinetuneConfig(finetune_optim(lr=1e-3, warmup_steps=0, clip_norm=0.0),
                             finetune_train(batch_size=6, micro_batch_size=micro, max_steps=1, seed=3,
                                            progress=False, tensorboard=False), max_seq_length=64, **NO_DROPOUT)
        loop = finetune.make_finetune_loop(spec, model_dir, tokenizer, cfg, tmp_path / f"run{micro}", DistInfo())
        assert [len(p) for p in next(loop.data.plan(0))] == ([6] if micro == 0 else [1] * 6)
        start = copy.deepcopy(loop.raw_model)
        results.append(first_step_gradients(loop))
    reference = start.train()          # the same initial weights (the run is seeded): one example at a time
    for feature in features:
        batch = collate([feature], tokenizer.pad_id, torch.long)
        positions = batch.pop("labels")
        loss = reference(**batch, start_positions=positions[:, 0], end_positions=positions[:, 1]).loss
        (loss / len(features)).backward()
    for grads in results:
        total = torch.cat([g.flatten() for g in grads.values()])
        for name, parameter in reference.named_parameters():
            torch.testing.assert_close(grads[name], parameter.grad, rtol=1e-4, atol=1e-6 * total.norm().item(),
                                       msg=name)


def test_the_span_loss_over_the_real_tokens_ignores_the_padding_and_keeps_transformers_loss_without_it():
    """`span_loss` with the mask: the same loss however far a batch is padded (a gold position on the padding is
    ignored, as one past the end is); the head's own loss (no mask) stays transformers' on an unpadded batch."""
    from albertlm.config import ModelConfig
    from albertlm.model.heads import span_loss

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, **NO_DROPOUT)
    model = AlbertForQuestionAnswering(cfg).eval()
    ids = torch.randint(5, 99, (2, 9))
    starts, ends = torch.tensor([1, 4]), torch.tensor([3, 8])
    plain = model(ids, start_positions=starts, end_positions=ends).loss
    padded = torch.nn.functional.pad(ids, (0, 7))
    mask = (torch.arange(16) < 9).long().expand(2, 16)
    out = model(padded, mask)
    torch.testing.assert_close(span_loss(out.start_logits, out.end_logits, starts, ends, mask), plain)
    on_padding = span_loss(out.start_logits, out.end_logits, starts, torch.tensor([3, 12]), mask)
    beyond = model(ids, start_positions=starts, end_positions=torch.tensor([3, 40])).loss
    torch.testing.assert_close(on_padding, beyond)


def classifier_on_a_dev_file(model_dir, tmp_path, precision: str):
    """A two-class head on the tiny pretrained model (tmp_path/head) and the classify spec of a two-row dev file:
    (spec, head, tokenizer, cfg) for `finetune.run_evaluation`."""
    from albertlm.tasks import specs
    from albertlm.tasks.classify import Columns

    tokenizer = load_tokenizer(model_dir)
    head = tmp_path / "head"
    AlbertForSequenceClassification.from_pretrained(model_dir, num_labels=2).save_pretrained(head)
    (tmp_path / "dev.tsv").write_text("text\tlabel\ngood film\tpos\nbad plot\tneg\n")
    cfg = FinetuneConfig(finetune_optim(), finetune_train(precision=precision, progress=False), max_seq_length=16)
    spec = specs.classify_spec(tokenizer, cfg, Columns("text"), dev_file=tmp_path / "dev.tsv", labels=["neg", "pos"],
                               training=False)
    return spec, head, tokenizer, cfg


def test_predict_in_bf16_on_a_cpu_without_bf16_says_it_runs_emulated(model_dir, tmp_path, monkeypatch, capsys):
    """`finetune --precision bf16` warned that this CPU emulates bf16 (slower than fp32); `predict` / `evaluate
    --model` with the same option ran it silently."""
    from albertlm.training import precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    spec, head, tokenizer, cfg = classifier_on_a_dev_file(model_dir, tmp_path, "bf16")
    capsys.readouterr()
    metrics = finetune.run_evaluation(spec, head, tokenizer, cfg, None)
    assert 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "emulated" in lines[0], lines
