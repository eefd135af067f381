"""fill-mask, embed, and `convert --to hf` directories that work as a whole in transformers (issue 12).

The oracle is transformers itself, offline: `pipeline("fill-mask")`, AutoTokenizer and AutoModel on the
exported directory must give our top-k, our ids and our hidden states."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertForPreTraining, AlbertModel
from albertlm.tasks.inference import FillMask, embed_texts, encode_masked, find_tokenizer, length_buckets
from albertlm.tokenization import load_tokenizer
from conftest import shared_path

TEXTS = ["The capital of France is [MASK].", "Alice was [MASK] tired of sitting, and of having [MASK] to do.",
         "hello (world) [MASK]x"]


def tiny(vocab_size: int) -> ModelConfig:
    # initializer_range 0.5: a random model with clearly ranked predictions (no near-ties in top-k)
    return ModelConfig(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_layers=3, num_heads=4, ffn_size=37,
                       max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, classifier_dropout=0.0,
                       initializer_range=0.5)


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    """A tiny AlbertForPreTraining with the real ALBERT SentencePiece vocabulary, saved our way."""
    directory = tmp_path_factory.mktemp("ours")
    tok = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    torch.manual_seed(0)
    AlbertForPreTraining(tiny(tok.vocab_size)).save_pretrained(directory)
    tok.save(directory)
    return directory


@pytest.fixture(scope="module")
def exported(ours, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf") / "albert-tiny"
    assert main(["convert", str(ours), str(out), "--to", "hf"]) == 0
    return out


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models: on a shared 2-core machine, intra-op threads only wait for each other (20 s -> 4 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_exported_directory_has_tokenizer_files_and_a_model_card(exported):
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "spiece.model", "tokenizer_config.json", "tokenizer.json",
            "README.md"} <= names
    card = (exported / "README.md").read_text()
    params = sum(p.numel() for p in AlbertForPreTraining(tiny(30000)).parameters())
    assert "pipeline_tag: fill-mask" in card and f"| parameters | {params:,}" in card
    assert "| layers L | 3 |" in card and "| sharing | all (1 group(s)) |" in card


def test_transformers_pipeline_gives_our_top_k(ours, exported):
    from transformers import pipeline

    fill = FillMask.load(ours, device="cpu")
    mine = fill(TEXTS, top_k=5)
    from_hf = FillMask.load(exported, device="cpu")(TEXTS, top_k=5)  # a transformers directory works too
    assert [[[p["token_id"] for p in top] for top in masks] for masks in from_hf] == \
        [[[p["token_id"] for p in top] for top in masks] for masks in mine]
    theirs = pipeline("fill-mask", model=str(exported), top_k=5, device="cpu")
    for text, masks in zip(TEXTS, mine):
        result = theirs(text)
        result = result if isinstance(result[0], list) else [result]  # one list per [MASK]
        assert len(result) == len(masks) == text.count("[MASK]")
        for our_top, their_top in zip(masks, result):
            assert [p["token_id"] for p in our_top] == [p["token"] for p in their_top]
            np.testing.assert_allclose([p["score"] for p in our_top], [p["score"] for p in their_top], atol=1e-5)
            assert np.diff([p["score"] for p in our_top]).max() < -1e-5  # a ranking, not ties within tolerance


def test_auto_tokenizer_and_auto_model_give_our_ids_and_states(ours, exported):
    from transformers import AutoModel, AutoTokenizer

    tok, theirs = load_tokenizer(ours), AutoTokenizer.from_pretrained(str(exported))
    lines = [l for l in shared_path("text", "sample_text.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    for line in lines + TEXTS:
        assert theirs(line)["input_ids"] == encode_masked(tok, line) if "[MASK]" in line else \
            theirs(line)["input_ids"] == [tok.cls_id, *tok.encode(line), tok.sep_id], line
    batch = theirs(lines[:8], padding=True, truncation=True, max_length=64, return_tensors="pt")
    hf_model = AutoModel.from_pretrained(str(exported)).eval()
    model = AlbertModel.from_pretrained(ours).eval()
    with torch.no_grad():
        expected = hf_model(**batch).last_hidden_state
        got = model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")).last_hidden_state
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-4, rtol=1e-4)  # init std 0.5: large values


@pytest.fixture(scope="module")
def run_dir(ours, tmp_path_factory) -> Path:
    """A pretraining run's layout (training/checkpoint.py): checkpoints/step_*, metrics.jsonl, and the data
    build (a real one, of a shared text) whose meta.json names the tokenizer."""
    from albertlm.data.build import BuildConfig, build

    root = tmp_path_factory.mktemp("run")
    data = root / "data"
    build(BuildConfig(inputs=[str(shared_path("text", "sample_text.txt"))], out=str(data), max_seq_length=64,
                      tokenizer=str(shared_path("spm", "albert-base-v2_spiece.model")), dupe_factor=1, progress=False))
    run = root / "run"
    for step in (5, 10):
        checkpoint = run / "checkpoints" / f"step_{step:08d}"
        checkpoint.mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            (checkpoint / name).write_bytes((ours / name).read_bytes())
        (checkpoint / "run_config.json").write_text(json.dumps({"data": {"path": str(data)}}))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"step": 5, "split": "eval", "time": 1.0, "mlm_loss": 9.1, "mlm_accuracy": 0.01},
        {"step": 10, "split": "train", "time": 2.0, "loss": 8.0},
        {"step": 10, "split": "eval", "time": 3.0, "mlm_loss": 8.5, "mlm_accuracy": 0.05}]))
    return run


def test_a_run_directory_converts_with_its_data_and_metrics(run_dir, tmp_path, capsys):
    assert find_tokenizer(run_dir / "checkpoints" / "step_00000010") is not None
    assert main(["convert", str(run_dir), str(tmp_path / "hf"), "--to", "hf"]) == 0
    out = capsys.readouterr().out
    assert "step_00000010" in out and "tokenizer.json" in out
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "at step 10: mlm_loss 8.5000, mlm_accuracy 0.0500" in card
    assert "sample_text.txt" in card and "sentence task `sop`" in card
    assert (tmp_path / "hf" / "tokenizer.json").is_file()


def test_fill_mask_cli_text_json_stdin_and_errors(run_dir, ours, capsys, monkeypatch):
    import io

    assert main(["fill-mask", str(run_dir), TEXTS[0], "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == TEXTS[0] and len(out[1].split("  ")) == 4  # "  " + three "token score" pairs
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(TEXTS) + "\n"))
    assert main(["fill-mask", str(ours), "--json", "--batch-size", "2", "--device", "cpu"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = FillMask.load(ours, device="cpu")(TEXTS)
    assert [r["text"] for r in records] == TEXTS
    ids = lambda results: [[[p["token_id"] for p in top] for top in masks] for masks in results]  # noqa: E731
    scores = lambda results: [p["score"] for masks in results for top in masks for p in top]  # noqa: E731
    assert ids([r["masks"] for r in records]) == ids(expected)  # batches of 2 vs 3: other padding, same result
    np.testing.assert_allclose(scores([r["masks"] for r in records]), scores(expected), atol=1e-6)
    assert main(["fill-mask", str(ours), "no mask here"]) == 2
    assert "error: no [MASK] in 'no mask here'" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["fill-mask", str(ours), TEXTS[0], "--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err


def test_fill_mask_refuses_a_model_without_mlm_head(tmp_path, capsys):
    from albertlm.model.heads import AlbertForSequenceClassification

    AlbertForSequenceClassification(tiny(99)).save_pretrained(tmp_path)
    assert main(["fill-mask", str(tmp_path), "a [MASK]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no masked-LM head" in err


def test_embed_keeps_input_order_through_length_buckets(ours, tmp_path, capsys):
    lines = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:201]
    texts = [line.split("\t")[0] for line in lines]
    source = tmp_path / "sst2.txt"
    source.write_text("\n".join(texts) + "\n")
    for pooling in ("mean", "cls"):
        out = tmp_path / f"{pooling}.npy"
        assert main(["embed", str(ours), "--input", str(source), "--out", str(out), "--pooling", pooling,
                     "--batch-size", "16", "--no-progress", "--device", "cpu"]) == 0
        got = np.load(out)
        assert got.shape == (200, 32) and got.dtype == np.float32
        model, tok = AlbertModel.from_pretrained(ours).eval(), load_tokenizer(ours)
        one_by_one = np.concatenate([embed_texts(model, tok, [t], pooling=pooling) for t in texts[:20]])
        np.testing.assert_allclose(got[:20], one_by_one, atol=1e-4, rtol=1e-4)  # fused vs plain GEMM: ~1e-5 apart
    assert "wrote 200 x 32 cls-pooled embeddings" in capsys.readouterr().err
    buckets = length_buckets([3, 9, 1, 9, 4], 2)
    assert sorted(i for b in buckets for i in b) == [0, 1, 2, 3, 4] and buckets[0] == [1, 3]


def test_a_fine_tuning_run_directory_means_its_best_checkpoint(ours, tmp_path, capsys):
    """A fine-tuning run has checkpoints/ (the newest step) and best/ (the best dev model): best/ is used."""
    from albertlm.tasks.inference import resolve_checkpoint

    run = tmp_path / "run"
    for where in (run / "checkpoints" / "step_00000010", run / "best"):
        where.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "spiece.model"):
            (where / name).write_bytes((ours / name).read_bytes())
    assert resolve_checkpoint(run) == run / "best"
    (tmp_path / "in.txt").write_text("hello world\n")
    assert main(["embed", str(run), "--input", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy"),
                 "--no-progress", "--device", "cpu"]) == 0
    assert f"({run / 'best'}, cpu)" in capsys.readouterr().err


def test_embed_does_not_replace_a_file_without_overwrite(ours, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a line\n")
    mine = tmp_path / "mine.npy"
    mine.write_text("precious")
    argv = ["embed", str(ours), "--input", str(tmp_path / "in.txt"), "--out", str(mine), "--no-progress"]
    assert main(argv) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err and mine.read_text() == "precious"
    assert main(argv + ["--overwrite"]) == 0 and np.load(mine).shape == (1, 32)
