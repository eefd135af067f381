"""Audit 27 of inference: `embed` / `fill-mask --tokenizer` on a checkpoint that has its own tokenizer (beside it,
its fine-tuning run's, its pretraining data's) is compared with that one (only one with more pieces than the model's
rows was refused: a tokenizer of the same size and other pieces, or a smaller one, gave nonsense without a word);
where the pretraining data's tokenizer file is gone, meta.json's vocabulary hash is compared, and the missing
tokenizer's error names it. Pinned: a batch of 32 (padded) gives the outputs of batches of one on real data, for
embed, fill-mask and the task heads' predictions (GLUE pairs, SQuAD v2 windows with both heads, RACE choices)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import TINY_WORDS, assert_one_error, save_tiny_pretrained, shared_path


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`); two fought the other xdist worker on a 2-core machine."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny27"))


def _vocab(path: Path, words) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    return path


def test_another_tokenizer_than_the_checkpoints_own_is_refused(tiny, tmp_path, capsys):
    """A vocab.txt of the same size as the model's own and other pieces (the words in another order) passed the size
    check: embed wrote vectors of other ids and fill-mask answered from them. Now one line naming the difference; a
    copy of the model's own tokenizer elsewhere is still taken (and gives the same vectors)."""
    from albertlm.tasks.inference import FillMask

    other = _vocab(tmp_path / "other" / "vocab.txt", list(reversed(TINY_WORDS)))
    lines = tmp_path / "t.txt"
    lines.write_text("the film was good\nthe plot was very bad\n")
    capsys.readouterr()
    assert main(["embed", str(tiny), "--input", str(lines), "--out", str(tmp_path / "e.npy"), "--tokenizer",
                 str(other), "--device", "cpu", "--no-progress"]) == 2
    assert_one_error(capsys, 2, "--tokenizer", "is not the tokenizer of", "piece 5", "leave --tokenizer out")
    assert not (tmp_path / "e.npy").exists()
    assert main(["fill-mask", str(tiny), "the film was [MASK]", "--tokenizer", str(other), "--device", "cpu"]) == 2
    assert_one_error(capsys, 2, "is not the tokenizer of", "the one saved beside it")
    with pytest.raises(UserError, match="is not the tokenizer of"):
        FillMask.load(tiny, other, device="cpu")
    smaller = _vocab(tmp_path / "smaller" / "vocab.txt", TINY_WORDS[:3])   # fewer pieces: was taken as well
    assert main(["fill-mask", str(tiny), "the [MASK]", "--tokenizer", str(smaller), "--device", "cpu"]) == 2
    assert_one_error(capsys, 2, f"{len(TINY_WORDS[:3]) + 5} pieces, not {len(TINY_WORDS) + 5}")

    copy = tmp_path / "copy" / "vocab.txt"
    copy.parent.mkdir()
    shutil.copy(tiny / "vocab.txt", copy)
    for name, extra in (("own.npy", []), ("copy.npy", ["--tokenizer", str(copy)]),
                        ("beside.npy", ["--tokenizer", str(tiny / "vocab.txt")])):
        assert main(["embed", str(tiny), "--input", str(lines), "--out", str(tmp_path / name), "--device", "cpu",
                     "--no-progress", *extra]) == 0
    assert np.array_equal(np.load(tmp_path / "own.npy"), np.load(tmp_path / "copy.npy"))
    assert np.array_equal(np.load(tmp_path / "own.npy"), np.load(tmp_path / "beside.npy"))


def test_a_pretraining_checkpoint_whose_data_tokenizer_moved_is_checked_by_its_hash(tmp_path, capsys):
    """A pretraining checkpoint finds its tokenizer through its data (run_config.json -> meta.json); once that file
    is moved, --tokenizer is needed, and any tokenizer that fit the rows was taken. Now the data's recorded
    vocabulary hash is compared; and without --tokenizer the error names the tokenizer the data was built with."""
    from albertlm.model.albert import AlbertForPreTraining

    (tmp_path / "src").mkdir()
    tiny = save_tiny_pretrained(tmp_path / "src")
    tokenizer = tmp_path / "tok" / "vocab.txt"
    tokenizer.parent.mkdir()
    shutil.move(tiny / "vocab.txt", tokenizer)
    text = tmp_path / "text.txt"
    text.write_text("".join(f"the film was {w} . the plot was {w} .\n\n" for w in TINY_WORDS))
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(tokenizer), "--out",
                 str(tmp_path / "data"), "--max-seq-length", "16", "--dupe-factor", "1", "--no-progress"]) == 0
    step = tmp_path / "run" / "checkpoints" / "step_00000002"      # a pretraining run's checkpoint, as saved
    AlbertForPreTraining.from_pretrained(tiny).save_pretrained(step)
    (step / "run_config.json").write_text(json.dumps({"data": {"path": str(tmp_path / "data")}}))
    moved = tmp_path / "moved" / "vocab.txt"
    moved.parent.mkdir()
    shutil.move(tokenizer, moved)
    capsys.readouterr()

    assert main(["fill-mask", str(tmp_path / "run"), "the film was [MASK]", "--device", "cpu"]) == 2
    assert_one_error(capsys, 2, "its pretraining data was built with", str(tokenizer), "not found there now",
                     "--tokenizer PATH")
    other = _vocab(tmp_path / "other" / "vocab.txt", list(reversed(TINY_WORDS)))
    assert main(["fill-mask", str(tmp_path / "run"), "the film was [MASK]", "--tokenizer", str(other),
                 "--device", "cpu"]) == 2
    assert_one_error(capsys, 2, "is not the tokenizer", "was pretrained with", str(tokenizer))
    assert main(["fill-mask", str(tmp_path / "run"), "the film was [MASK]", "--tokenizer", str(moved),
                 "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["masks"]


def _sst2(n: int) -> list[str]:
    rows = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:n + 1]
    return [row.split("\t")[0] for row in rows]


def test_a_padded_batch_gives_the_outputs_of_batches_of_one(tiny, tmp_path, capsys):
    """embed and fill-mask over real SST-2 sentences of many lengths: --batch-size 32 (padded to each batch's
    longest) gives the vectors and scores of --batch-size 1 (within float32 rounding: the kernels differ by shape)."""
    lines = tmp_path / "sst2.txt"
    texts = _sst2(40)
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")      # "amélie": UTF-8 whatever the locale
    for size in ("1", "32"):
        assert main(["embed", str(tiny), "--input", str(lines), "--out", str(tmp_path / f"b{size}.npy"),
                     "--device", "cpu", "--no-progress", "--batch-size", size]) == 0
    one, many = np.load(tmp_path / "b1.npy"), np.load(tmp_path / "b32.npy")
    assert one.shape == (40, 32)
    np.testing.assert_allclose(many, one, rtol=0, atol=1e-5)

    from albertlm.tasks.inference import FillMask

    fill = FillMask.load(tiny, device="cpu")
    masked = [" ".join(text.split()[:-1] + ["[MASK]"]) for text in texts]
    alone = fill(masked, top_k=3, batch_size=1)
    together = fill(masked, top_k=3, batch_size=32)
    for a, b in zip(alone, together):
        assert [p["token_id"] for p in a[0]] == [p["token_id"] for p in b[0]]
        np.testing.assert_allclose([p["score"] for p in b[0]], [p["score"] for p in a[0]], rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def spm_model_config():
    from albertlm.config import ModelConfig

    return ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2, ffn_size=16,
                       max_position_embeddings=512)


def test_task_predictions_do_not_depend_on_the_batch(spm_model_config):
    """`predict` (what `albertlm predict` / `evaluate --model` run) over real data: GLUE RTE pairs (long, cut),
    SQuAD v2.0 windows with the BERT-style and google's beam head (p_mask padded as masked) and RACE's choices
    (each padded to the question's longest): eval batch 32 gives batch 1's outputs, the beam's indices equal."""
    from albertlm.model.heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering,
                                      AlbertForSequenceClassification, AlbertForSquadV2)
    from albertlm.tasks import race, squad
    from albertlm.tasks.features import Feature, encode_pairs
    from albertlm.tasks.finetune import SPANS, SQUAD_BEAM, Outputs, predict
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    rte = [row.split("\t") for row in shared_path("glue", "RTE", "val.tsv").read_text(encoding="utf-8").splitlines()]
    pairs, _ = encode_pairs(tok, [r[1] for r in rte[:40]], [r[2] for r in rte[:40]], 128)
    glue_features = [Feature(ids, types, k) for k, (ids, types) in enumerate(pairs)]
    examples = squad.read_squad(shared_path("squad", "dev-v2.0-small.json"))
    squad_features = squad.build_features(tok, examples, squad.SquadSettings(96, 32), training=False)
    race_features = race.build_features(tok, race.read_race(shared_path("race", "RACE"), "dev"), 512)
    cases = [(AlbertForSequenceClassification, {"num_labels": 2}, glue_features, Outputs()),
             (AlbertForQuestionAnswering, {}, squad_features, SPANS),
             (AlbertForSquadV2, {}, squad_features, SQUAD_BEAM),
             (AlbertForMultipleChoice, {}, race_features, Outputs())]
    assert len({f.length for f in squad_features}) > 1 and len({f.length for f in race_features}) > 1
    for model_class, overrides, features, outputs in cases:
        torch.manual_seed(0)
        model = model_class(spm_model_config.replace(**overrides) if overrides else spm_model_config)
        one = predict(model, features, outputs, tok.pad_id, 1, torch.device("cpu"))
        many = predict(model, features, outputs, tok.pad_id, 32, torch.device("cpu"))
        for key in outputs.keys:
            for a, b in zip(one[key], many[key]):
                if np.asarray(a).dtype.kind in "iu":
                    assert np.array_equal(a, b), (model_class.__name__, key)
                else:
                    np.testing.assert_allclose(b, a, rtol=0, atol=1e-5, err_msg=f"{model_class.__name__} {key}")
