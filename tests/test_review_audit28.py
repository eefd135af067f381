"""Audit 28, independent review of the session's commits (0fa9d4e..HEAD). Two bugs found there, fixed by the lead
(their tests failed before): the default `--dist.device auto` under torchrun with several GPUs per node raised in
the new shared-GPU check, and a text file beginning with the word "LZIP" was skipped as lzip; the others guard what was checked and found right (or the part of a
fix that must stay: a real lzip file is still named). No GPU and no process group: CUDA's answers are faked, as in
test_dist_audit28."""
from __future__ import annotations

import json

import pytest
import torch

from albertlm.data.corpus import binary_reason
from albertlm.training import distributed
from test_dist_audit28 import four_gpus  # noqa: F401  (fixture: a faked node of 4 GPUs, LOCAL_RANK 1 of 2)
from test_distributed_audit21 import clean_launch  # noqa: F401  (the fixture four_gpus builds on)


# --------------------------------------------------------------- 3e6d830: check_backend's shared-GPU refusal
@pytest.mark.parametrize("backend", ["auto", "nccl"])
def test_default_device_auto_on_a_node_of_several_processes_is_local_rank_s_gpu(four_gpus, backend):  # noqa: F811
    """torchrun --nproc-per-node 2 on a 2-GPU node, every option left at its default: each process takes
    cuda:LOCAL_RANK (here 1). The refusal added for `--dist.device cuda:N` parsed "auto" as a device name."""
    assert distributed.check_backend(backend, "auto") == torch.device("cuda", 1)


def test_named_gpu_and_bare_cuda_under_several_processes_unchanged(four_gpus):  # noqa: F811
    """What the fix above must keep: cuda is cuda:LOCAL_RANK, cuda:N refused for NCCL, cpu with gloo."""
    assert distributed.check_backend("auto", "cuda") == torch.device("cuda", 1)
    assert distributed.check_backend("gloo", "cpu") == torch.device("cpu")
    with pytest.raises(distributed.UserError, match="would all run on that one GPU"):
        distributed.check_backend("nccl", "cuda:0")


# -------------------------------------------------------------------- 52dcca3: unread compressions by magic
def test_a_text_file_beginning_with_the_word_lzip_is_text():
    head = (b"LZIP is a lossless data compressor with a user interface similar to the one of gzip or bzip2.\n"
            b"It uses a simplified form of LZMA.\n")
    assert binary_reason(head) is None


def test_a_real_lzip_lz4_compress_and_lzop_head_is_still_named():
    """The other half of the fix above: lzip's own header (version 1, then the coded dictionary size), with no
    NUL byte in it, stays refused by name, as do the others that commit named."""
    for head, name in ((b"LZIP\x01\x0c" + b"]\x81\xa3" * 20, "lzip"), (b"\x04\x22\x4d\x18d@\xa7" * 10, "lz4"),
                       (b"\x1f\x9d\x90T\x80" * 10, "Unix compress"), (b"\x89LZO\x00\r\n\x1a\n" * 5, "lzop")):
        reason = binary_reason(head)
        assert reason is not None and reason.startswith(name), (name, reason)


# ------------------------------------------------------------------ 7b5dc4e: safetensors metadata sorted
def test_sort_metadata_keeps_every_header_readable_and_the_same(tmp_path):
    """Checked, found right: metadata with non-ASCII, escapes and control characters, and safetensors' space
    padding, is rewritten in place only where the sorted header has the same length; the file reads back the same
    tensors and metadata, and its size never changes."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from albertlm.model.io import sort_metadata

    state = {"b": torch.arange(3, dtype=torch.float32), "a": torch.ones(2, 2)}
    metas = [{"format": "pt", "albertlm_class": "AlbertForPreTraining"},
             {"z\u00e9": "\u6f22\u5b57", "a\"q": "back\\slash/", "m": "\x01\t\u2028"},
             {"zz": "", "aa": "x" * 13, "mm": "\u2585"}]
    for meta in metas:
        path = tmp_path / "w.safetensors"
        save_file(state, path, metadata=meta)
        size = path.stat().st_size
        sort_metadata(path)
        assert path.stat().st_size == size
        with safe_open(path, "pt") as f:
            assert f.metadata() == meta
        loaded = load_file(path)
        assert all(torch.equal(loaded[k], v) for k, v in state.items())
        header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
        assert list(header["__metadata__"]) == sorted(meta)
