"""Two gloo processes on 127.0.0.1 train exactly like one process with the same global batch; leaving the group
frees what still holds it."""
from __future__ import annotations

import gc
import socket
import sys
import weakref
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from albertlm.data import loader
from albertlm.training import checkpoint as ckpt
from albertlm.training.distributed import DistInfo, shutdown
from albertlm.training.pretrain import Datasets, make_loop

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import train_fixtures
from train_fixtures import SyntheticPretraining, ddp_worker, tiny_run  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_equal_one_process(tmp_path):
    steps = 4
    out = tmp_path / "ddp.pt"
    mp.start_processes(ddp_worker, args=(2, _free_port(), str(tmp_path / "ddp"), str(out), steps), nprocs=2,
                       join=True, start_method="spawn")
    ddp = torch.load(out, weights_only=True)

    ds = SyntheticPretraining(n=64)
    data = Datasets(train=ds, eval=SyntheticPretraining(n=16, seed=1), collate=loader.collate,
                    meta=ds.meta)
    loop = make_loop(tiny_run(max_steps=steps, micro=8), tmp_path / "single", data, DistInfo(), False)
    losses = {}
    loop.on_step = lambda step, metrics: losses.__setitem__(step, metrics["loss"])
    loop.run()

    assert sorted(ddp["losses"]) == list(range(1, steps + 1))
    for step, loss in losses.items():
        assert ddp["losses"][step] == pytest.approx(loss, abs=1e-5), step
    for name, value in loop.model.state_dict().items():
        torch.testing.assert_close(ddp["weights"][name], value, atol=2e-5, rtol=1e-4, msg=name)
    single_eval = loop.evaluate_fn()
    for key, value in single_eval.items():
        assert ddp["eval"][key] == pytest.approx(value, abs=1e-5), key
    assert ckpt.latest_checkpoint(tmp_path / "ddp").name == f"step_{steps:08d}"    # rank 0 saved


def test_shutdown_frees_a_ddp_model_left_in_a_reference_cycle_before_destroying_the_group(tmp_path):
    """Else gloo's group outlives destroy_process_group and a finished 2-process run can abort at exit
    (`shutdown`'s docstring has the measurements)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    was_enabled = gc.isenabled()
    gc.disable()                               # only shutdown's own collection may free the cycle
    try:
        holder = {"model": torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))}
        holder["self"] = holder                # a reference cycle, as the training loop's closures make
        alive = weakref.ref(holder["model"])
        del holder
        assert alive() is not None
        shutdown()
        assert alive() is None
        assert not dist.is_initialized()
    finally:
        if was_enabled:
            gc.enable()
        if dist.is_initialized():
            dist.destroy_process_group()
