"""Audit 30 of intrinsic evaluation on pretraining data (`albertlm evaluate`, `experiments.evaluation.intrinsic`,
the paper's Table 5 cross-evaluation), each number against a direct computation written here: the argmax of the
MLM logits at exactly the weighted masked slots, the sentence head over exactly the labelled examples, sums over
masked tokens (not batch means), the same numbers for batch sizes 1, 7 and 64 (the last batch partial) and on
every run. A model whose outputs are NaN scored accuracies as if measured (sop_acc 0.44, the share of label 0);
a masked-LM checkpoint on SOP data had its sentence numbers dropped without a word, after a loader line saying
its SOP head was "freshly initialised (random until trained)"."""
from __future__ import annotations

import functools
import json
import logging
import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from albertlm.cli.main import main
from test_infer_audit19 import build


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """{"sop"/"nsp": Alice built by the real builder (T=32), "model": a tiny 30k-vocabulary AlbertForPreTraining
    whose decoder favours the six commonest masked targets (so its MLM accuracy is neither 0 nor constant)}."""
    from albertlm.config import ModelConfig
    from albertlm.data.loader import PretrainingDataset
    from albertlm.model.albert import AlbertForPreTraining
    from conftest import alice_documents

    root = tmp_path_factory.mktemp("eval30")
    text = alice_documents(root, 120)
    paths = {task: build(text, root / task, "--sentence-task", task) for task in ("sop", "nsp")}
    targets = Counter()
    dataset = PretrainingDataset(paths["sop"])
    for i in range(len(dataset)):
        item = dataset[i]
        targets.update(item["masked_lm_ids"][item["masked_lm_weights"] > 0].tolist())
    torch.manual_seed(0)
    model = AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1,
                                             num_heads=2, ffn_size=16, max_position_embeddings=32))
    with torch.no_grad():
        for token, _ in targets.most_common(6):
            model.mlm_head.bias[token] = 6.0
    model.save_pretrained(root / "model")
    return {**paths, "model": str(root / "model"), "root": root}


@functools.lru_cache(maxsize=None)
@torch.no_grad()
def direct(model_dir: str, data_dir: str) -> dict:
    """The numbers computed here, one example at a time on the full sequence (no packing, no gathering)."""
    from albertlm.data.loader import PretrainingDataset
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(model_dir).eval()
    dataset = PretrainingDataset(data_dir)
    correct = count = sentence_correct = sentences = 0
    loss = sentence_loss = 0.0
    for i in range(len(dataset)):
        item = {k: torch.as_tensor(v) for k, v in dataset[i].items()}
        out = model(item["input_ids"][None], item["attention_mask"][None], item["token_type_ids"][None])
        used = item["masked_lm_weights"] > 0
        logits = out["prediction_logits"][0][item["masked_lm_positions"][used]]
        target = item["masked_lm_ids"][used]
        correct += int((logits.argmax(-1) == target).sum())
        count += int(used.sum())
        loss += float(F.cross_entropy(logits, target, reduction="sum"))
        label = int(item["sentence_order_label"])
        if label != -100:
            sentence = out["sop_logits"][0]
            sentence_correct += int(sentence.argmax() == label)
            sentences += 1
            sentence_loss += float(F.cross_entropy(sentence[None], torch.tensor([label])))
    return {"mlm_acc": correct / count, "mlm_loss": loss / count, "acc": sentence_correct / sentences,
            "loss": sentence_loss / sentences, "count": count, "sentences": sentences}


@pytest.mark.parametrize("task", ["sop", "nsp"])
def test_evaluate_matches_a_direct_computation_at_every_batch_size(data, task, one_thread):
    """Batch sizes 1, 7 (the last batch partial) and 64 give the direct numbers, the accuracies exactly, the
    losses to float rounding; named by the data's task; a second run gives the same (static masks, own seed)."""
    from albertlm.training.evaluate import evaluate_checkpoint

    reference = direct(data["model"], data[task])
    assert reference["count"] > 100 and reference["sentences"] % 7 and 0 < reference["mlm_acc"] < 0.5, reference
    runs = [evaluate_checkpoint(data["model"], data[task], batch_size=size, device="cpu") for size in (1, 7, 64, 7)]
    for metrics in runs:
        assert metrics["sentence_task"] == task and (task == "sop" or "sop_acc" not in metrics), metrics
        assert metrics["mlm_acc"] == pytest.approx(reference["mlm_acc"], abs=1e-12)
        assert metrics[f"{task}_acc"] == pytest.approx(reference["acc"], abs=1e-12)
        assert metrics["mlm_loss"] == pytest.approx(reference["mlm_loss"], rel=1e-5)
        assert metrics[f"{task}_loss"] == pytest.approx(reference["loss"], rel=1e-5)
        assert metrics["loss"] == pytest.approx(metrics["mlm_loss"] + metrics[f"{task}_loss"], rel=1e-9)
    assert runs[1] == runs[3]


def test_table5_intrinsic_scores_each_task_on_its_own_data(data, one_thread):
    """`intrinsic` (the suite's Table 5 row): MLM on the SOP held-out data, the sentence head on each task's."""
    from albertlm.experiments.evaluation import intrinsic

    out = intrinsic(data["model"], {"sop": data["sop"], "nsp": data["nsp"]}, device="cpu")
    sop, nsp = direct(data["model"], data["sop"]), direct(data["model"], data["nsp"])
    assert out["mlm_acc"] == pytest.approx(sop["mlm_acc"], abs=1e-12)
    assert out["sop_acc"] == pytest.approx(sop["acc"], abs=1e-12)
    assert out["nsp_acc"] == pytest.approx(nsp["acc"], abs=1e-12)
    assert out["nsp_loss"] == pytest.approx(nsp["loss"], rel=1e-5)


def test_nan_outputs_are_no_accuracy(data, capsys, one_thread):
    """A model whose every output is NaN (diverged weights, an fp16 overflow) printed mlm_loss nan beside
    mlm_acc 0.0 and sop_acc 0.44 (the argmax of NaN logits is the NaN's index: 0, the share of label 0), and
    intrinsic() handed those to the report as measurements. Now the accuracies are NaN too, with a warning."""
    from albertlm.experiments.evaluation import intrinsic
    from albertlm.model.albert import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(data["model"])
    with torch.no_grad():
        model.albert.embeddings.position.weight.fill_(math.nan)
    model.save_pretrained(data["root"] / "nan")
    capsys.readouterr()
    with pytest.warns(UserWarning) as warned:
        assert main(["evaluate", str(data["root"] / "nan"), "--data", data["sop"], "--device", "cpu",
                     "--no-progress", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out.replace("NaN", "null"))
    assert all(metrics[key] is None for key in ("mlm_loss", "mlm_acc", "sop_loss", "sop_acc")), metrics
    messages = [str(w.message) for w in warned]
    assert len(messages) == 1 and "NaN outputs" in messages[0] and "masked-LM and sentence-task" in messages[0]
    with pytest.warns(UserWarning, match="NaN outputs"):
        out = intrinsic(data["root"] / "nan", {"sop": data["sop"], "nsp": data["nsp"]}, device="cpu")
    assert all(math.isnan(out[key]) for key in ("mlm_acc", "sop_acc", "nsp_acc")), out


def test_a_masked_lm_checkpoint_says_its_sentence_labels_are_not_scored(data, capsys, caplog, one_thread):
    """On SOP data a masked-LM checkpoint (no sentence head) printed only MLM numbers, after the loader's line
    that its pooler and SOP head were "freshly initialised (random until trained)", which read as if the numbers
    used a random head; now one line says the SOP labels are not scored, and the numbers are the direct MLM ones."""
    from albertlm.model.heads import AlbertForMaskedLM

    model = AlbertForMaskedLM.from_pretrained(data["model"])
    model.save_pretrained(data["root"] / "mlm")
    capsys.readouterr()
    with pytest.warns(UserWarning) as warned, caplog.at_level(logging.INFO, logger="albertlm"):
        assert main(["evaluate", str(data["root"] / "mlm"), "--data", data["sop"], "--device", "cpu",
                     "--no-progress", "--json"]) == 0
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)
    assert set(metrics) == {"mlm_loss", "mlm_acc", "loss", "sentence_task"}, metrics
    assert metrics["mlm_acc"] == pytest.approx(direct(data["model"], data["sop"])["mlm_acc"], abs=1e-12)
    messages = [str(w.message) for w in warned]
    assert len(messages) == 1 and "no sentence-order/NSP head" in messages[0] and "sop labels" in messages[0]
    assert "freshly initialised" not in captured.err + caplog.text
