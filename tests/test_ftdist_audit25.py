"""Audit 25: fine-tuning under torchrun (gloo on CPU, 2 processes) shares its dev evaluations.

Before, each dev evaluation ran on rank 0 alone while the other ranks waited in their next collective (so
--dist.timeout_minutes had to cover the whole evaluation, and W-1 processes sat idle). Now every rank runs its share
of the evaluation batches (`finetune.shared_predict`: batch j of the ones a single process runs on rank j % W, as
pretraining's evaluation shares its batches) and rank 0 gathers the outputs in feature order, scores them and keeps
the best model. Each batch holds the same features padded to the same width as in one process, so the outputs are
a single process's bit for bit (CPU kernels are deterministic): checked for GLUE through the CLI (metrics,
best-checkpoint choice, prediction files, metrics.json), and for SQuAD v2.0's beam head (several windows per
question) and RACE (choices), with a last batch that leaves a rank nothing and a single batch for two ranks.
A rank that fails mid-evaluation stops rank 0 with its one line (rank 0 waits in the gather, not a hang).

gloo launches with torch.multiprocessing (127.0.0.1); one pair of spawned ranks runs the four 2-process jobs in turn
(`two_ranks`: each launch cost about 7 s of importing torch on a loaded 2-core machine, four of them most of this
file's time); a hang fails the tests after a guard."""
from __future__ import annotations

import json
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import this module
from conftest import SHARED, save_tiny_pretrained, shared_path  # noqa: E402
from test_distributed_audit24 import _free_port, _join_env  # noqa: E402

HANG_GUARD_S = 300   # a hang guard only (two spawned processes running the four jobs on a loaded 2-core machine)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`), as the spawned ranks use."""


def _job_port(rank: int, root: str, name: str) -> int:
    """The port of job `name`: rank 0 takes a free one as the job starts (ports taken for every job at the launch
    could meanwhile be the local port of a connection of an earlier job or of another test worker) and leaves it in
    ROOT/NAME.port for rank 1."""
    told = Path(root, f"{name}.port")
    if rank == 0:
        told.with_suffix(".tmp").write_text(str(_free_port()))
        told.with_suffix(".tmp").replace(told)           # whole or absent: rank 1 never reads half of it
    while not told.exists():                             # (a hang is the launch's guard)
        time.sleep(0.05)
    return int(told.read_text())


def jobs_worker(rank: int, world_size: int, jobs: list, root: str) -> None:
    """One rank running `worker(rank, world_size, port, *args)` for each (name, worker, args) of `jobs` in turn, each
    on its own port; a job that raises leaves its traceback in ROOT/NAME.error.RANK (its test fails with it) and
    the next job goes on in a fresh process group. The CLI's rank 1 silences warnings and albertlm's logger for the
    rest of its process: each job starts with them as they were."""
    import logging
    import warnings

    from albertlm.training.distributed import shutdown

    logger = logging.getLogger("albertlm")
    level = logger.level
    for name, worker, args in jobs:
        try:
            with warnings.catch_warnings():
                worker(rank, world_size, _job_port(rank, root, name), *args)
        except BaseException:  # noqa: BLE001 (said by the job's test)
            Path(root, f"{name}.error.{rank}").write_text(traceback.format_exc())
            shutdown()
        logger.setLevel(level)


def _launch(jobs: list, root: Path) -> None:
    """`jobs_worker` on two spawned processes; fails the tests on a hang."""
    context = mp.start_processes(jobs_worker, args=(2, jobs, str(root)), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + HANG_GUARD_S
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the 2-process run still ran after {HANG_GUARD_S} s (a hang)")


# ------------------------------------------------------------------------------------- GLUE through the CLI
def _glue_files(root: Path) -> dict[str, Path]:
    """A small RTE sample of the shared files: 12 training pairs, 11 dev pairs (eval batches of 4: a last batch
    of 3, and an odd number of batches, so rank 0 takes one more), 5 test pairs."""
    rows = shared_path("glue", "RTE", "train.tsv").read_text(encoding="utf-8").splitlines()
    header, body = rows[0], rows[1:]
    files = {}
    for name, part in (("train", body[:12]), ("dev", body[12:23]), ("test", body[23:28])):
        if name == "test":   # GLUE's test layout: no label column
            part = ["\t".join(row.split("\t")[:3]) for row in part]
            head = "\t".join(header.split("\t")[:3])
        else:
            head = header
        files[name] = root / f"{name}.tsv"
        files[name].write_text("\n".join([head, *part]) + "\n", encoding="utf-8")
    return files


def _glue_argv(model: Path, files: dict[str, Path], out: Path) -> list[str]:
    # --lr 1e-30: the updates are below every weight's last bit, so one process and two (whose summed gradients
    # differ in their last bits) hold the same weights at every evaluation, and the evaluations are compared bit for
    # bit; 6 steps, evaluated every 2 (three evaluations, the best kept by the first: they tie)
    return ["finetune", "glue", "--task", "rte", "--train", str(files["train"]), "--dev", str(files["dev"]),
            "--test", str(files["test"]), "--model", str(model), "--out", str(out), "--batch-size", "4",
            "--eval-batch-size", "4", "--max-seq-length", "24", "--lr", "1e-30", "--warmup-steps", "0",
            "--max-steps", "6", "--eval-every", "2", "--seed", "3", "--train.progress=false",
            "--train.tensorboard=false", "--dist.backend", "gloo", "--device", "cpu", "--hidden-dropout", "0",
            "--attention-dropout", "0", "--classifier-dropout", "0"]   # dropout draws differ with the layout


def cli_worker(rank: int, world_size: int, port: int, argv: list, record: str) -> None:
    """One rank of `albertlm finetune ...` (RANK/WORLD_SIZE set by hand); records how many features each
    `predict` call on this rank was given, and the exit code."""
    _join_env(rank, world_size, port)
    from albertlm.cli.main import main
    from albertlm.tasks import finetune

    given = []
    real = finetune.predict
    finetune.predict = lambda model, features, *a, **k: (given.append(len(features)), real(model, features, *a, **k))[1]
    try:
        code = main(argv)
    finally:
        finetune.predict = real     # the next job runs in this process
    Path(f"{record}.{rank}").write_text(json.dumps({"code": code, "given": given}))


def _normalised(path: Path, out: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8").replace(str(out), "OUT"))


def test_two_processes_share_glue_dev_evaluations_and_write_what_one_process_writes(two_ranks, tmp_path, capsys):
    from albertlm.cli.main import main

    root = _job_done(two_ranks, "glue")
    files = _glue_files(root)
    alone, shared = tmp_path / "alone", root / "glue"
    assert main(_glue_argv(root, files, alone)) == 0
    ranks = [json.loads((root / f"glue.record.{rank}").read_text()) for rank in range(2)]
    assert [r["code"] for r in ranks] == [0, 0]
    # three dev evaluations of 11 pairs in batches of 4 (4, 4, 3 for batches 0-2): batches 0 and 2 (7 pairs) on
    # rank 0, batch 1 (4 pairs) on rank 1; then the best model's test predictions (5 pairs: batches of 4 and 1)
    assert ranks[1]["given"] == [4, 4, 4, 1], ranks       # before: rank 1 predicted nothing
    assert ranks[0]["given"] == [7, 7, 7, 4], ranks       # before: [11, 11, 11, 5]
    # the run's files are one process's, bit for bit (paths aside); not the weights: 1e-30 still moves the biases,
    # which start at 0, by a different last bit in each
    written = sorted(p.relative_to(alone).as_posix() for p in alone.rglob("*") if p.is_file()
                     and "checkpoints" not in p.parts and "metrics.jsonl" not in p.name)
    assert written == sorted(p.relative_to(shared).as_posix() for p in shared.rglob("*") if p.is_file()
                             and "checkpoints" not in p.parts and "metrics.jsonl" not in p.name)
    for name in written:
        if name.endswith(".tsv") or name == "best/task.json":
            assert (alone / name).read_bytes() == (shared / name).read_bytes(), name
    one, two = _normalised(alone / "metrics.json", alone), _normalised(shared / "metrics.json", shared)
    # the training losses: summed over the ranks in another order (their last bits); the rest exactly
    for key in ("train_loss_first", "train_loss_last"):
        assert two.pop(key) == pytest.approx(one.pop(key), rel=1e-6), key
    assert one == two
    log_one, log_two = (json.loads((d / "train_log.json").read_text()) for d in (alone, shared))
    assert log_one["history"] == log_two["history"] and len(log_one["history"]) == 3
    assert log_two["losses"] == pytest.approx(log_one["losses"], rel=1e-6)


def _squad_argv(model: Path, out: Path) -> list[str]:
    squad_dir = shared_path("squad")
    return ["finetune", "squad", "--train", str(squad_dir / "sample.json"), "--dev",
            str(squad_dir / "dev-v2.0-small.json"), "--model", str(model), "--out", str(out), "--squad-head",
            "xlnet", "--max-seq-length", "32", "--max-query-length", "8", "--doc-stride", "8", "--batch-size", "4",
            "--eval-batch-size", "7", "--lr", "1e-30", "--max-steps", "2", "--train.progress=false",
            "--train.tensorboard=false", "--device", "cpu", "--dist.backend", "gloo", "--hidden-dropout", "0",
            "--attention-dropout", "0", "--classifier-dropout", "0"]


def test_two_processes_fine_tune_squad_v2_with_the_beam_head_as_one_process(two_ranks, tmp_path, capsys):
    """SQuAD v2.0 with google's beam head (several windows per question, no test set): the same prediction files
    and metrics. A run without a test set: rank 1 has nothing to predict at the end."""
    from albertlm.cli.main import main

    root = _job_done(two_ranks, "squad")
    alone, shared = tmp_path / "alone", root / "squad"
    assert main(_squad_argv(root, alone)) == 0
    ranks = [json.loads((root / f"squad.record.{rank}").read_text()) for rank in range(2)]
    assert [r["code"] for r in ranks] == [0, 0]
    assert len(ranks[1]["given"]) == 1 and ranks[1]["given"][0] > 0, ranks    # its share of the one evaluation
    for name in ("predictions.json", "null_odds.json", "nbest_predictions.json", "best/task.json"):
        assert (alone / name).read_bytes() == (shared / name).read_bytes(), name
    one, two = _normalised(alone / "metrics.json", alone), _normalised(shared / "metrics.json", shared)
    for key in ("train_loss_first", "train_loss_last"):
        assert two.pop(key) == pytest.approx(one.pop(key), rel=1e-6), key
    assert one == two and one["best"]["step"] == 2


# ------------------------------------------------------------------------- SQuAD v2.0's beam head and RACE
def _qa_sets(model_dir: Path):
    """The SQuAD v2.0 dev sample (windows of 24 tokens: several per question; google's beam head and the BERT-style
    one) and RACE's dev passages, with the tiny model's tokenizer, and their specs' output layouts."""
    import dataclasses

    from albertlm.config.task import FinetuneConfig, finetune_train
    from albertlm.tasks import specs, squad
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    cfg = FinetuneConfig(train=finetune_train(progress=False), max_seq_length=24, squad_head="xlnet")
    settings = squad.SquadSettings(max_seq_length=24, doc_stride=6, max_query_length=6, n_best_size=5)
    qa = specs.squad_spec("2.0", tokenizer, cfg, dev_file=shared_path("squad", "dev-v2.0-small.json"),
                          settings=settings, training=False)
    bert = specs.squad_spec("2.0", tokenizer, dataclasses.replace(cfg, squad_head="bert"),   # per-token logits
                            dev_file=shared_path("squad", "dev-v2.0-small.json"), settings=settings, training=False)
    race = specs.race_spec(shared_path("race", "RACE", "dev"), tokenizer, FinetuneConfig(max_seq_length=40),
                           max_qa_length=16, training=False, eval_splits=("dev",))
    return tokenizer, {"squad": qa, "squad-bert": bert, "race": race}


def _heads(root: Path) -> dict[str, Path]:
    """The tiny pretrained model with (seeded, random) SQuAD v2.0 beam, span and multiple-choice heads."""
    from albertlm.model.heads import AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSquadV2

    base = save_tiny_pretrained(root)
    out = {}
    for name, cls in (("squad", AlbertForSquadV2), ("squad-bert", AlbertForQuestionAnswering),
                      ("race", AlbertForMultipleChoice)):
        torch.manual_seed(1)
        out[name] = root / name
        cls.from_pretrained(base).save_pretrained(out[name])
        (out[name] / "vocab.txt").write_text((base / "vocab.txt").read_text())
    return out


BATCHES = (3, 5, 1000)   # a last batch of 1-4 windows; an odd count of batches; one batch, which leaves rank 1 none


def shared_qa_worker(rank: int, world_size: int, port: int, heads: dict, out_file: str) -> None:
    """One rank: `shared_predict` over every set and batch size; rank 0 saves what it got, rank 1 that it got None."""
    _join_env(rank, world_size, port)
    from albertlm.tasks.finetune import shared_predict
    from albertlm.training.distributed import init_distributed, shutdown

    info = init_distributed("gloo", "cpu")
    tokenizer, task_specs = _qa_sets(Path(heads["squad"]))
    got = {}
    for name, spec in task_specs.items():
        model = spec.model_class.from_pretrained(heads[name]).eval()
        for size in BATCHES:
            got[f"{name}/{size}"] = shared_predict(model, spec.eval_sets[0].features, spec.outputs, tokenizer.pad_id,
                                                   size, info)
    if rank == 0:
        torch.save(got, out_file)
    else:
        Path(out_file + ".1").write_text(json.dumps({key: value is None for key, value in got.items()}))
    shutdown()


def test_squad_v2_beams_and_race_choices_are_gathered_as_one_process_predicts_them(two_ranks):
    from albertlm.tasks.finetune import predict
    from albertlm.training.distributed import DistInfo

    root = _job_done(two_ranks, "qa")
    heads = {name: root / name for name in ("squad", "squad-bert", "race")}
    out = root / "shared.pt"
    got = torch.load(out, weights_only=False)
    assert all(json.loads(Path(str(out) + ".1").read_text()).values())     # rank 1 gets None
    tokenizer, task_specs = _qa_sets(heads["squad"])
    windows = task_specs["squad"].eval_sets[0].features
    assert len(windows) > len({f.example_index for f in windows})          # several windows per question
    for name, spec in task_specs.items():
        model = spec.model_class.from_pretrained(heads[name]).eval()
        for size in BATCHES:
            alone = predict(model, spec.eval_sets[0].features, spec.outputs, tokenizer.pad_id, size,
                            DistInfo().device)
            two = got[f"{name}/{size}"]
            assert sorted(two) == sorted(alone) == sorted(spec.outputs.keys)
            for key, value in alone.items():
                if spec.outputs.per_token:   # a list of per-feature rows, each cut to its feature's length
                    assert len(two[key]) == len(value) and all(
                        a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(two[key], value)), (name, key)
                else:
                    assert two[key].dtype == value.dtype and np.array_equal(two[key], value), (name, size, key)
            # and the spec's scores from them are the same
            assert spec.eval_sets[0].score(two) == spec.eval_sets[0].score(alone), (name, size)


# ------------------------------------------------------------------------------ a rank failing mid-evaluation
def failing_rank_worker(rank: int, world_size: int, port: int, model_dir: str, out_dir: str, record: str) -> None:
    """A 2-process fine-tune whose rank 1 fails in its share of the first dev evaluation; each rank records the
    error it stopped with."""
    _join_env(rank, world_size, port)
    import dataclasses

    from albertlm.errors import UserError
    from albertlm.tasks import finetune
    from albertlm.training.distributed import init_distributed, shutdown
    from train_fixtures import StubTokenizer, finetune_config, run_recording_losses, synthetic_task

    if rank == 1:
        def broken(*args, **kwargs):
            raise UserError("cannot read the dev batch (AUDIT)")
        finetune.predict = broken
    info = init_distributed("gloo", "cpu")
    cfg = dataclasses.replace(finetune_config(micro=2), eval_batch_size=4)    # 12 dev features: 3 batches
    loop = finetune.make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), cfg, out_dir, info)
    said = ""
    try:
        run_recording_losses(loop)
    except UserError as exc:
        said = f"{type(exc).__name__}: {exc}"
    Path(f"{record}.{rank}").write_text(said)
    shutdown()


def test_a_rank_failing_in_its_share_of_the_dev_evaluation_stops_rank_0_with_its_line(two_ranks):
    root = _job_done(two_ranks, "failing")
    said = [(root / f"said.{rank}").read_text() for rank in range(2)]
    assert "(AUDIT)" in said[1]
    # the evaluation of step 3 (the loop names the step it would train next: "at step 4")
    assert re.fullmatch(r"PeerFailed: rank 1 stopped at step \d: cannot read the dev batch \(AUDIT\); "
                        r"rank 0 stopped too at step \d", said[0]), said


# ------------------------------------------------------------------------- one launch for the four jobs
def _has(*parts: str) -> bool:
    return SHARED.joinpath(*parts).exists()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[str, Path]:
    """The four 2-process jobs, run in turn by one pair of spawned ranks (`jobs_worker`), each in its own folder
    (ROOT/NAME, holding the tiny model its ranks read: `save_tiny_pretrained`, seed 0, so each test's one-process
    run reads the same weights); the failing rank's job last. A job whose shared data is absent is left out (its
    test skips). Returns the folder of each job."""
    roots = {name: tmp_path_factory.mktemp(f"ftdist_{name}") for name in ("glue", "squad", "qa", "failing")}
    jobs = []
    if _has("glue", "RTE", "train.tsv"):
        model = save_tiny_pretrained(roots["glue"])
        jobs.append(("glue", cli_worker, (_glue_argv(model, _glue_files(roots["glue"]), roots["glue"] / "glue"),
                                          str(roots["glue"] / "glue.record"))))
    if _has("squad", "sample.json") and _has("squad", "dev-v2.0-small.json"):
        model = save_tiny_pretrained(roots["squad"])
        jobs.append(("squad", cli_worker, (_squad_argv(model, roots["squad"] / "squad"),
                                           str(roots["squad"] / "squad.record"))))
    if _has("squad", "dev-v2.0-small.json") and _has("race", "RACE", "dev"):
        heads = _heads(roots["qa"])
        jobs.append(("qa", shared_qa_worker, ({k: str(v) for k, v in heads.items()}, str(roots["qa"] / "shared.pt"))))
    jobs.append(("failing", failing_rank_worker, (str(save_tiny_pretrained(roots["failing"])),
                                                  str(roots["failing"] / "run"), str(roots["failing"] / "said"))))
    errors = tmp_path_factory.mktemp("ftdist_errors")
    _launch(jobs, errors)
    return {"errors": errors, **{name: roots[name] for name, _, _ in jobs}}


def _job_done(two_ranks: dict[str, Path], name: str) -> Path:
    """The folder of job `name` once both ranks ran it without raising (else the test fails with the traceback)."""
    if name not in two_ranks:
        pytest.skip(f"shared data not found for the {name} job under {SHARED}")
    said = [two_ranks["errors"] / f"{name}.error.{rank}" for rank in range(2)]
    if any(path.exists() for path in said):
        pytest.fail("\n".join(path.read_text() for path in said if path.exists()), pytrace=False)
    return two_ranks[name]
