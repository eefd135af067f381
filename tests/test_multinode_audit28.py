"""Audit 28 of multi-node training (two torchrun "nodes" on one machine, gloo): a node given an --out of its own.

Only rank 0 writes the run directory, so a node whose --out is a directory of its own (its local disk, a relative
path from another working directory) trained a first multi-node run without a word; with torchrun's c10d
rendezvous rank 0 may be on either node, and the run went to whichever --out that node was given (measured by hand:
`--out local0` on one node, `--out local1` on the other, the run in local1 and local0 never made). Its `--resume`
was refused later. `distributed.check_shared_out` finds it before anything is written: rank 0 leaves a file of a
random name in its --out, and every rank looks for it in its own; a rank that does not see it makes every rank
refuse in the same one line. Nothing is left behind either way. The test failed before (no such check)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module's worker
from test_dist_audit19 import _free_port  # noqa: E402


def _two_nodes(rank: int, port: int, root: str) -> None:
    """One of two processes, each as the first of its own node (LOCAL_RANK 0), checking three --out layouts in
    one process group: a shared new directory, a shared directory holding a run, and one directory per node.
    Writes what each check said to ROOT/rankN.json."""
    import torch

    from albertlm.errors import UserError
    from albertlm.training import distributed

    for name in ("LOCAL_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID"):
        os.environ.pop(name, None)     # a launch's, from the environment the tests run in: not this one's
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK="0")
    torch.set_num_threads(1)
    # a timeout for a loaded machine (each child imports torch before it joins); the checks wait 1 s each (wait_s)
    info = distributed.init_distributed("gloo", "cpu", timeout_minutes=5)
    said = {}
    layouts = {"new shared": f"{root}/shared/new/run", "old shared": f"{root}/old",
               "one per node": f"{root}/node{rank}/run"}
    for name, out in layouts.items():
        try:
            distributed.check_shared_out(out, info, wait_s=1.0)
            said[name] = "ok"
        except UserError as exc:
            said[name] = str(exc)
    distributed.barrier()
    distributed.shutdown()
    Path(root, f"rank{rank}.json").write_text(json.dumps(said))


def test_a_node_local_out_is_refused_on_every_node_and_a_shared_one_passes(tmp_path):
    (tmp_path / "old" / "checkpoints").mkdir(parents=True)
    (tmp_path / "old" / "run_config.json").write_text("{}")
    mp.start_processes(_two_nodes, args=(_free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    said = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert said[0]["new shared"] == said[1]["new shared"] == "ok"
    assert said[0]["old shared"] == said[1]["old shared"] == "ok"
    refusal = said[0]["one per node"]
    assert refusal == said[1]["one per node"] and "\n" not in refusal      # the same one line on both nodes
    assert refusal.startswith("--out is not one directory that every node sees: rank 0 (host ")
    assert f"writes the run in {tmp_path}/node0/run, and a file it made there is not in {tmp_path}/node1/run " \
           "(its --out) on rank 1 (host " in refusal
    assert "give --out a directory on a file system they share" in refusal
    # nothing is left behind: the new directories rank 0 made for its file are gone, the old run is as it was
    assert not (tmp_path / "shared").exists() and not (tmp_path / "node0").exists()
    assert not (tmp_path / "node1").exists()                              # the other node writes nothing
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == ["checkpoints", "run_config.json"]
