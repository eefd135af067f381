"""Lead follow-ups of the twenty-third session's audits."""
from __future__ import annotations

import pytest

from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train
from albertlm.model import fast_paths, fused
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks import finetune
from albertlm.tokenization import load_tokenizer
from conftest import save_tiny_pretrained
from test_fast_paths import pretend_cpu


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def test_evaluate_runs_the_kernels_finetuning_ran(tmp_path, monkeypatch):
    """`finetune` evaluates its dev set on the model `prepare_model` prepared (the CPU fast paths where this CPU
    gets them); `predict` / `evaluate --model RUN/best` loaded the plain model, whose bf16 rounds differently, and
    a near tie flipped (a SQuAD v2 run's recorded best exact 42.86 read 50.0). Both now run the same kernels."""
    from albertlm.tasks import specs
    from albertlm.tasks.classify import Columns

    if not fused.AVAILABLE:
        pytest.skip("this torch build has no oneDNN linear ops")
    pretend_cpu(monkeypatch, "AVX512", False)   # fp32 takes the fused path on any CPU with oneDNN
    model_dir = tmp_path / "pretrained"
    model_dir.mkdir()
    save_tiny_pretrained(model_dir)
    tokenizer = load_tokenizer(model_dir)
    head = tmp_path / "head"
    AlbertForSequenceClassification.from_pretrained(model_dir, num_labels=2).save_pretrained(head)
    (tmp_path / "dev.tsv").write_text("text\tlabel\ngood film\tpos\nbad plot\tneg\n")
    cfg = FinetuneConfig(finetune_optim(), finetune_train(precision="fp32", progress=False), max_seq_length=16)
    spec = specs.classify_spec(tokenizer, cfg, Columns("text"), dev_file=tmp_path / "dev.tsv", labels=["neg", "pos"],
                               training=False)
    seen = []
    real_predict = finetune.predict
    monkeypatch.setattr(finetune, "predict", lambda model, *a, **k: seen.append(model) or real_predict(model, *a, **k))
    metrics = finetune.run_evaluation(spec, head, tokenizer, cfg, None)
    assert 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    assert seen, "run_evaluation predicted nothing"
    swapped = [type(m).__name__ for m in seen[0].modules() if isinstance(m, fast_paths.FusedFeedForward)]
    assert swapped, "evaluate ran the plain model, not the one fine-tuning prepared"
