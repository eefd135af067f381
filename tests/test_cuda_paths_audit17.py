"""Audit 17: the code paths that only run on a GPU, exercised through CPU stand-ins (no test here needs a GPU).

The meta device stands in for a GPU where the question is only "are the inputs put where the weights are?"
(mixing CPU inputs with meta weights fails the way CPU inputs with CUDA weights do); monkeypatched
`torch.cuda.*` queries stand in where the code only branches on them.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import save_tiny_pretrained


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny pretrained model directory with its vocab.txt."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("audit17_cuda"))


class _Reached(Exception):
    """Raised by a forward pre-hook once it has seen the inputs (a meta model computes nothing readable)."""


def _input_device_of(module: torch.nn.Module, call) -> torch.device:
    """The device of the first tensor `module` is called with while `call()` runs (stopped there)."""
    seen = []

    def hook(_module, args, kwargs):
        seen.append(next(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)).device)
        raise _Reached

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with pytest.raises(_Reached):
            call()
    finally:
        handle.remove()
    return seen[0]


# ----------------------------------------------------------------------------- inference on the model's device

def test_fill_mask_and_embed_send_their_batches_to_the_models_device(tiny):
    """`FillMask(model, tok)` and `embed_texts(model, tok, texts)` without `device=` built their batches on the CPU
    whatever the model: a model moved to a GPU (`model.cuda()`, as the docstring's "or FillMask(model, tokenizer)"
    invites) failed with "Expected all tensors to be on the same device". They now follow the model's weights."""
    from albertlm.model.albert import AlbertModel
    from albertlm.model.heads import AlbertForMaskedLM
    from albertlm.tasks.inference import FillMask, embed_texts
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(tiny)
    mlm = AlbertForMaskedLM.from_pretrained(tiny).eval().to("meta")
    fill = FillMask(mlm, tok)
    assert fill.device == torch.device("meta")
    assert _input_device_of(mlm.albert, lambda: fill(["the film was [MASK]"])).type == "meta"
    encoder = AlbertModel.from_pretrained(tiny).eval().to("meta")
    assert _input_device_of(encoder, lambda: embed_texts(encoder, tok, ["the film was good"])).type == "meta"
    # an explicit device is still the one used (a string works too), and a CPU model still runs end to end
    assert FillMask(mlm, tok, "cpu").device == torch.device("cpu")
    cpu_fill = FillMask(AlbertForMaskedLM.from_pretrained(tiny).eval(), tok)
    assert cpu_fill.device == torch.device("cpu") and len(cpu_fill(["the [MASK] was good"], top_k=2)[0][0]) == 2
    assert embed_texts(AlbertModel.from_pretrained(tiny).eval(), tok, ["good film"], device="cpu").shape == (1, 32)


def test_fill_mask_and_embed_read_a_lone_string_as_one_text(tiny):
    """A str is an iterable of characters: `embed_texts(model, tok, "the film")` returned one embedding per
    character (8 rows, no word said), and `fill("the film was [MASK]")` failed with "text 1: no [MASK] in 't'"."""
    from albertlm.model.albert import AlbertModel
    from albertlm.model.heads import AlbertForMaskedLM
    from albertlm.tasks.inference import FillMask, embed_texts
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(tiny)
    encoder = AlbertModel.from_pretrained(tiny).eval()
    one = embed_texts(encoder, tok, "the film was good")
    assert one.shape == (1, 32)
    assert (one == embed_texts(encoder, tok, ["the film was good"])).all()
    fill = FillMask(AlbertForMaskedLM.from_pretrained(tiny).eval(), tok)
    assert fill("the film was [MASK]", top_k=3) == fill(["the film was [MASK]"], top_k=3)


def test_inference_device_takes_one_gpu_of_several(monkeypatch, tmp_path, capsys):
    """`--device cuda:1` (and `FillMask.load(..., device="cuda:1")`) was refused ("must be auto, cpu or cuda"), so
    on a machine of several GPUs fill-mask and embed could only use the first, while pretrain, finetune and
    evaluate take cuda:N. A GPU index past the machine's is one line naming the count. The CUDA queries are
    patched: the code only branches on them."""
    from albertlm.cli.main import main
    from albertlm.errors import UserError
    from albertlm.tasks.inference import pick_device
    from conftest import assert_one_error

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert pick_device("cuda") == torch.device("cuda")
    with pytest.raises(UserError, match=r"--device cuda:2: this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        pick_device("cuda:2")
    monkeypatch.undo()
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match="must be auto, cpu, cuda or cuda:N, got 'gpu'"):
        pick_device("gpu")
    if not torch.cuda.is_available():   # the real answer here: no GPU, one line, before anything is read
        assert main(["embed", "no-model", "--input", "x", "--out", str(tmp_path / "e.npy"), "--device", "cuda:1"]) == 2
        assert_one_error(capsys, 2, "--device cuda:1: no CUDA device is available here")
