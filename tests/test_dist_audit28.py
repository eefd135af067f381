"""Audit 28 of multi-process training (torchrun): the GPU each process of a node takes. `--dist.device cuda` (and
`evaluate --device cuda`, which docs/training.md says gives each process its own GPU) handed every rank the bare
device "cuda": `torch.cuda.set_device` refuses it (a ValueError traceback on every rank when the group forms), and
used, every process would have run on the current GPU; now it is cuda:LOCAL_RANK, as auto is. A GPU named by its
index (cuda:1) is the GPU of every process of the node, since torchrun gives them all the same options, which NCCL
refuses ("Duplicate GPU detected", a traceback per rank): refused in one line before anything is read. There is no
GPU here: the CUDA queries are faked (the code only branches on them) and no process group is formed. Each test
failed before its fix."""
from __future__ import annotations

import pytest
import torch

from albertlm.errors import UserError
from albertlm.training import distributed
from test_distributed_audit21 import clean_launch  # noqa: F401  (fixture: no launch variables from outside)


@pytest.fixture
def four_gpus(clean_launch):  # noqa: F811
    """A node of 4 GPUs, as torch.cuda answers; process LOCAL_RANK 1 of 2 on it (torchrun's variables)."""
    clean_launch.setattr(torch.cuda, "is_available", lambda: True)
    clean_launch.setattr(torch.cuda, "device_count", lambda: 4)
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        clean_launch.setenv(name, value)
    return clean_launch


def test_cuda_without_an_index_is_this_processs_own_gpu(four_gpus):
    assert distributed.pick_device("cuda", 1) == torch.device("cuda", 1)
    assert distributed.pick_device("cuda") == torch.device("cuda", 0)       # alone: the first, as before in effect
    assert distributed.pick_device("auto", 3) == torch.device("cuda", 3)
    with pytest.raises(UserError, match=r"device cuda: this process is LOCAL_RANK 4 .* only 4 CUDA device"):
        distributed.pick_device("cuda", 4)


def test_the_process_group_forms_on_local_rank_s_gpu_with_device_cuda(four_gpus):
    """What init_distributed hands torch: before, set_device(torch.device('cuda')) (torch raises "Expected a
    torch.device with a specified index") and a DistInfo whose device was the bare 'cuda' on every rank."""
    chosen, joined = [], []
    four_gpus.setattr(torch.cuda, "set_device", lambda device: chosen.append(torch.device(device)))
    four_gpus.setattr(distributed, "wait_for_ranks", lambda *a: None)
    four_gpus.setattr(distributed.dist, "is_initialized", lambda: False)
    four_gpus.setattr(distributed.dist, "init_process_group", lambda backend, **kw: joined.append(backend))
    four_gpus.setattr(distributed, "joined_group", lambda: None)
    four_gpus.setattr(distributed, "_in_group", {"group": False})
    info = distributed.init_distributed("auto", "cuda")
    assert chosen == [torch.device("cuda", 1)] and joined == ["nccl"]
    assert info.device == torch.device("cuda", 1) and info.local_rank == 1


@pytest.mark.parametrize("backend", ["nccl", "auto"])
def test_one_gpu_named_for_every_process_of_a_node_is_refused_for_nccl(four_gpus, backend):
    with pytest.raises(UserError, match=r"device cuda:2: the 2 processes of this node would all run on that one "
                                        r"GPU.*as cuda or auto"):
        distributed.check_backend(backend, "cuda:2")


def test_a_named_gpu_stays_allowed_alone_one_process_per_node_or_with_gloo(four_gpus):
    assert distributed.check_backend("gloo", "cuda:2") == torch.device("cuda", 2)   # gloo shares a GPU
    four_gpus.setenv("LOCAL_WORLD_SIZE", "1")                                       # one process per node
    assert distributed.check_backend("nccl", "cuda:2") == torch.device("cuda", 2)
    four_gpus.setenv("LOCAL_WORLD_SIZE", "2")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):                               # alone (a variable left over)
        four_gpus.delenv(name)
    assert distributed.check_backend("auto", "cuda:2") == torch.device("cuda", 2)


def test_pretrain_dry_run_refuses_the_shared_gpu_in_one_line(four_gpus, tmp_path, capsys):
    from albertlm.cli.main import main
    from conftest import assert_one_error

    four_gpus.setenv("RANK", "0")
    four_gpus.setenv("LOCAL_RANK", "0")      # the rank that reports
    code = main(["pretrain", "--data", str(tmp_path / "no-data"), "--out", str(tmp_path / "run"),
                 "--preset", "albert-tiny", "--dist.device", "cuda:1", "--dry-run"])
    assert_one_error(capsys, code, "device cuda:1: the 2 processes of this node", "NCCL")
