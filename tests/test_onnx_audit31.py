"""ONNX audit 31, as a deployer serving albertlm models with onnxruntime: `--out DIR` that exists on another file
system than its folder (a container's volume or another disk mounted there, the usual `--out /models`) was staged
beside DIR, and the export failed after all its work with "--out: cannot write DIR: Invalid cross-device link"; a
checkpoint whose outputs are NaN (a diverged fine-tuning's weights) exported without a word when the NaN output was
not the first (`max` over the differences skipped the NaN), and with `--fp16` was said to be float16's overflow.
Pure checks (they passed before): grouped and unshared sharing layouts at batch 1 and 7, lengths 1, 5 and the
model's maximum; an all-padding row as PyTorch gives it; the serving directory's tokenizer on sentence pairs."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from albertlm.cli.main import main  # noqa: E402
from albertlm.config import ModelConfig  # noqa: E402
from albertlm.interop import onnx as onnx_export  # noqa: E402
from albertlm.model import heads  # noqa: E402
from conftest import TINY_WORDS, save_tiny_pretrained  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread(one_thread, monkeypatch):
    """Tiny matrices: one thread (conftest's `one_thread`), onnxruntime's sessions too (by default one thread a core,
    spinning while they wait: on a shared 2-core machine they fight the other work; tens of sessions here)."""
    session = onnx_export.onnx_session

    def one_thread_session(path, threads: int = 0, quiet: bool = False):
        return session(path, threads or 1, quiet)

    monkeypatch.setattr(onnx_export, "onnx_session", one_thread_session)


def _tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=4, num_heads=2,
                                 ffn_size=24, max_position_embeddings=32, num_labels=3, initializer_range=0.5,
                                 classifier_dropout=0.0), **changes})


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_an_out_directory_on_another_file_system_is_written(tmp_path, capsys, monkeypatch):
    """--out DIR, an existing directory on another file system than its folder: the files are staged inside it, so
    they move in by rename (checked for real on a tmpfs mounted at --out; here a rename across DIR's edge fails as
    it does there). A second export with --overwrite swaps its files in the same way; nothing staged is left."""
    torch.manual_seed(0)
    heads.AlbertForSequenceClassification(_tiny()).save_pretrained(tmp_path / "clf")
    out = tmp_path / "volume"
    out.mkdir()
    edge = os.path.realpath(out)
    rename = os.replace

    def inside(path) -> bool:
        return os.path.realpath(path).startswith(edge + os.sep)

    def across_the_mount(src, dst, *args, **kwargs):
        if inside(src) != inside(dst):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", across_the_mount)
    code = main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--quantize", "int8", "--no-verify"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "config.json", "onnx", "onnx/model.onnx", "onnx/model_quantized.onnx"]
    code = main(["export", "onnx", str(tmp_path / "clf"), "--out", str(out), "--fp16", "--overwrite"])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "config.json", "onnx", "onnx/model.onnx", "onnx/model_fp16.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clf", "volume"]


def _nan_end_logits(directory: Path) -> Path:
    """A QA checkpoint whose end_logits are NaN (a NaN in the end row of qa_outputs): its second output."""
    torch.manual_seed(0)
    model = heads.AlbertForQuestionAnswering(_tiny())
    with torch.no_grad():
        model.qa_outputs.weight[1, 0] = float("nan")
    model.save_pretrained(directory)
    return directory


def test_a_checkpoint_with_nan_outputs_is_warned_of(tmp_path, capsys):
    """The check printed `end_logits nan` and warned of nothing (start_logits, first, was close); with --fp16 it
    said float16 overflowed where PyTorch's outputs were finite. Now one warning: PyTorch's own end_logits."""
    source = _nan_end_logits(tmp_path / "qa")
    assert main(["export", "onnx", str(source), "--out", str(tmp_path / "qa.onnx"), "--fp16"]) == 0
    captured = capsys.readouterr()
    assert "end_logits nan" in captured.out
    said = _warnings(captured.err)
    assert len(said) == 1, said
    assert said[0].startswith("albertlm export: warning: PyTorch's own end_logits is not finite (NaN or inf)")
    assert "do not serve the file" in said[0]


def test_onnxruntime_nan_in_a_later_output_is_warned_of(tmp_path, capsys, monkeypatch):
    """onnxruntime giving NaN where PyTorch's output is finite, in the second output: no warning before (the max
    over {start_logits: 1e-7, end_logits: nan} was 1e-7). `check_with_onnxruntime` names the side."""
    torch.manual_seed(0)
    model = heads.AlbertForQuestionAnswering(_tiny()).eval()
    model.save_pretrained(tmp_path / "qa")
    run = onnx_export.run_onnxruntime

    def nan_end(path, names, feeds):
        got = run(path, names, feeds)
        return [np.full_like(g, np.nan) if name == "end_logits" else g for name, g in zip(names, got)]

    monkeypatch.setattr(onnx_export, "run_onnxruntime", nan_end)
    assert main(["export", "onnx", str(tmp_path / "qa"), "--out", str(tmp_path / "qa.onnx")]) == 0
    said = _warnings(capsys.readouterr().err)
    assert len(said) == 1 and "onnxruntime's end_logits is not finite (NaN or inf) where PyTorch's are" in said[0]
    diffs, broken = onnx_export.check_with_onnxruntime(model, tmp_path / "qa.onnx")
    assert broken == {"end_logits": "onnxruntime"} and diffs["start_logits"] < 1e-4


LAYOUTS = [dict(sharing="none"), dict(sharing="attention", num_groups=2), dict(sharing="ffn", num_groups=2),
           dict(num_groups=2, inner_group_num=2), dict(embedding_size=16, type_vocab_size=3)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
@pytest.mark.parametrize("cls", [heads.AlbertForQuestionAnswering, heads.AlbertForMultipleChoice],
                         ids=lambda c: c.__name__)
def test_sharing_layouts_at_every_batch_and_length(cls, layout, tmp_path):
    """A pure check: grouped, partly shared and unshared layouts (and E = H, three segment types) give PyTorch's
    outputs at batch 1 and 7, lengths 1, 5 and the model's 32 (the export's example is 2 x 16; at length 1 the
    last row is all padding)."""
    torch.manual_seed(0)
    model = cls(_tiny(**layout)).eval()
    onnx_export.export_onnx(model, tmp_path / "m.onnx")
    for batch, length in ((1, 1), (1, 5), (7, 1), (7, 5), (7, 32), (1, 32)):
        diffs = onnx_export.compare_with_onnxruntime(model, tmp_path / "m.onnx", batch, length, seed=length)
        assert all(value < 2e-4 for value in diffs.values()), (batch, length, diffs)   # NaN fails too


def test_an_all_padding_row_is_pytorchs_and_leaves_the_others_alone(tmp_path):
    """A pure check: a row whose attention_mask is all 0 (a server padding its batch with empty rows) gives the
    TorchScript-exported graph PyTorch's finite values; the other rows are as they are alone."""
    torch.manual_seed(0)
    model = heads.AlbertForSequenceClassification(_tiny()).eval()
    onnx_export.export_onnx(model, tmp_path / "m.onnx")
    ids = torch.randint(5, 60, (3, 9))
    mask = torch.ones_like(ids)
    mask[1] = 0
    mask[2, 4:] = 0
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": np.zeros((3, 9), np.int64)}
    got = onnx_export.onnx_session(tmp_path / "m.onnx").run(["logits"], feeds)[0]
    with torch.no_grad():
        expected = model(ids, mask).logits.numpy()
        alone = model(ids[[0, 2]], mask[[0, 2]]).logits.numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(got[[0, 2]], alone, atol=1e-5)


def test_the_serving_tokenizer_on_sentence_pairs(tmp_path, capsys):
    """A pure check, pinning a difference docs/interop.md must state: the serving directory's tokenizer (transformers,
    tokenizer.json) gives albertlm's ids and token types for a pair that fits; for a pair whose two texts are both
    cut, transformers' fast `truncation=True` (longest_first) gives the odd token of an odd budget to the second text
    where albertlm (google's `_truncate_seq_pair`, `features.truncate_pair`) gives it to the first."""
    from transformers import AutoTokenizer

    from albertlm.tasks.features import encode_pairs
    from albertlm.tokenization import load_tokenizer

    (tmp_path / "pre").mkdir()
    source = save_tiny_pretrained(tmp_path / "pre")
    assert main(["export", "onnx", str(source), "--out", str(tmp_path / "serve"), "--no-verify"]) == 0
    capsys.readouterr()
    served = AutoTokenizer.from_pretrained(tmp_path / "serve")
    ours = load_tokenizer(source / "vocab.txt")
    fits = ("the film was very good", "the acting was poor")
    long_pair = (" ".join(TINY_WORDS[:1] * 30), " ".join(TINY_WORDS[1:2] * 40))   # 30 and 40 tokens
    for pair, length in ((fits, 64), (long_pair, 48)):
        (ids, types), = encode_pairs(ours, [pair[0]], [pair[1]], length)[0]
        enc = served(*pair, truncation=True, max_length=length)
        assert len(enc["input_ids"]) == len(ids)
        if pair is fits:
            assert enc["input_ids"] == ids.tolist() and enc["token_type_ids"] == types.tolist()
        else:   # 45 tokens of text: albertlm keeps 23 + 22, transformers 22 + 23
            assert int(types.sum()) == 22 + 1 and sum(enc["token_type_ids"]) == 23 + 1
