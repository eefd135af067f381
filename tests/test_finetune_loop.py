"""Fine-tuning on the shared training loop: a killed and resumed fine-tune equals an uninterrupted one
(through the CLI's --resume), two gloo processes equal one, SIGTERM stops like Ctrl-C, and
train.compile is wired through the one set-up."""
from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from albertlm.cli.main import main
from albertlm.training.distributed import DistInfo

sys.path.insert(0, str(Path(__file__).resolve().parent))   # spawned children import train_fixtures
from conftest import TINY_WORDS, save_tiny_pretrained  # noqa: E402
from train_fixtures import StubTokenizer, finetune_config, finetune_ddp_worker, synthetic_task  # noqa: E402

WORDS = TINY_WORDS


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`) for every test here."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random tiny AlbertForPreTraining with a WordPiece vocab.txt beside it."""
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny"))


def _csv(path: Path, rows: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    lines = ["text,label"]
    for _ in range(rows):
        label = rng.integers(0, 2)
        words = rng.choice(WORDS[6:], size=4).tolist() + [WORDS[int(rng.integers(0, 3)) * 2 + int(label)]]
        lines.append(f"{' '.join(rng.permutation(words))},{'pos' if label == 0 else 'neg'}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _finetune(model_dir, data, out, *extra) -> int:
    return main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(model_dir),
                 "--out", str(out), "--max-steps", "8", "--batch-size", "4", "--eval-every", "4", "--save-every", "2",
                 "--lr", "5e-3", "--warmup-steps", "2", "--seed", "3", "--log-every", "1", "--hidden-dropout", "0.1",
                 "--classifier-dropout", "0.1", "--max-seq-length", "16", "--train.progress=false", *extra])


def test_killed_and_resumed_finetune_equals_uninterrupted(model_dir, tmp_path, monkeypatch):
    from albertlm.training.loop import Loop

    data = _csv(tmp_path / "d.csv", 24, 0)
    assert _finetune(model_dir, data, tmp_path / "full") == 0
    real = Loop.after_step

    def interrupt_at_5(self, window):
        real(self, window)
        if self.state.step == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(Loop, "after_step", interrupt_at_5)
    assert _finetune(model_dir, data, tmp_path / "cut") == 130
    monkeypatch.undo()
    assert (tmp_path / "cut" / "checkpoints" / "step_00000005").is_dir()
    assert not (tmp_path / "cut" / "metrics.json").exists()
    assert _finetune(model_dir, data, tmp_path / "cut", "--resume") == 0

    def outputs(run):
        metrics = json.loads((run / "metrics.json").read_text())
        log = json.loads((run / "train_log.json").read_text())
        return metrics["best"], log, (run / "dev_predictions.tsv").read_text()

    full, cut = outputs(tmp_path / "full"), outputs(tmp_path / "cut")
    assert len(full[1]["losses"]) == len(cut[1]["losses"]) == 8
    np.testing.assert_allclose(cut[1]["losses"], full[1]["losses"], atol=1e-6)
    assert cut[1]["history"] == full[1]["history"] and cut[0] == full[0] and cut[2] == full[2]
    from safetensors.torch import load_file

    a, b = (load_file(str(run / "best" / "model.safetensors")) for run in (tmp_path / "full", tmp_path / "cut"))
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-6, rtol=0, msg=key)
    records = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert {r["split"] for r in records} >= {"train", "eval"}     # the shared metrics logger
    assert any("dev/accuracy" in r for r in records)
    assert main(["plot", str(tmp_path / "cut")]) == 0 and (tmp_path / "cut" / "curves.png").stat().st_size > 10_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_finetune_like_one(model_dir, tmp_path):
    from albertlm.tasks.finetune import make_finetune_loop

    out = tmp_path / "ddp.pt"
    mp.start_processes(finetune_ddp_worker, args=(2, _free_port(), str(model_dir), str(tmp_path / "ddp"), str(out)),
                       nprocs=2, join=True, start_method="spawn")
    ddp = torch.load(out, weights_only=True)
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), finetune_config(micro=4),
                              tmp_path / "single", DistInfo())
    losses = {}
    hook = loop.on_step
    loop.on_step = lambda step, metrics: (hook(step, metrics), losses.__setitem__(step, metrics["loss"]))
    loop.run()
    assert sorted(ddp["losses"]) == list(range(1, 7))
    for step, loss in losses.items():
        assert ddp["losses"][step] == pytest.approx(loss, abs=1e-5), step
    for name, value in loop.raw_model.state_dict().items():
        torch.testing.assert_close(ddp["weights"][name], value, atol=2e-5, rtol=1e-4, msg=name)
    assert ddp["best"]["dev"]["accuracy"] == loop.state.extra["best"]["dev"]["accuracy"]
    assert ddp["best"]["step"] == loop.state.extra["best"]["step"]
    assert (tmp_path / "ddp" / "best" / "model.safetensors").is_file()          # rank 0 kept the best


def test_sigterm_stops_like_ctrl_c(model_dir, tmp_path):
    import os
    import signal

    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training import checkpoint as ckpt

    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), finetune_config(), tmp_path, DistInfo())
    hook = loop.on_step
    loop.on_step = lambda step, m: (hook(step, m), step == 2 and os.kill(os.getpid(), signal.SIGTERM))
    assert loop.run() == "interrupted"
    assert ckpt.latest_checkpoint(tmp_path).name == "step_00000002"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_compile_is_applied_after_ddp_and_its_time_logged(model_dir, tmp_path, monkeypatch):
    """train.compile reaches compile_model (after prepare_model and the DDP wrap) and the first step's
    extra time is logged; the compiler itself is speed's (a stand-in here keeps the test fast)."""
    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training import trainer
    from albertlm.training.metrics import MetricsLogger, read_metrics

    calls = []
    monkeypatch.setattr(trainer, "prepare_model", lambda model, **kw: calls.append(("prepare", kw)) or model)
    monkeypatch.setattr(trainer, "compile_model", lambda model, mode: calls.append(("compile", mode)) or model)
    from dataclasses import replace

    cfg = finetune_config(max_steps=3)
    cfg = cfg.replace(train=replace(cfg.train, compile="reduce-overhead"))
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), cfg, tmp_path, DistInfo())
    assert [c[0] for c in calls] == ["prepare", "compile"] and calls[1][1] == "reduce-overhead"
    assert calls[0][1]["activation_checkpointing"] is False and calls[0][1]["precision"] == "fp32"
    loop.logger = MetricsLogger(tmp_path, 3, tensorboard=False, progress=False)
    loop.run()
    (record,) = [r for r in read_metrics(tmp_path) if r["split"] == "compile"]
    assert record["step"] == 2 and record["first_step_s"] > 0 and "compile_s" in record


def test_finetune_accepts_a_transformers5_model_dir_with_only_tokenizer_json(model_dir, tmp_path, capsys):
    """transformers 5 saves tokenizer.json without vocab.txt / spiece.model: finetune and predict find it."""
    import shutil

    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.pre_tokenizers import BertPreTokenizer

    hf = tmp_path / "hf5"
    hf.mkdir()
    for name in ("model.safetensors", "config.json"):
        shutil.copy(model_dir / name, hf / name)
    vocab = {t: i for i, t in enumerate((model_dir / "vocab.txt").read_text().split())}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = BertPreTokenizer()
    tok.save(str(hf / "tokenizer.json"))
    from albertlm.tokenization.load import find_tokenizer

    assert find_tokenizer(hf) == hf and find_tokenizer(tmp_path) is None
    data = _csv(tmp_path / "d.csv", 12, 1)
    code = main(["finetune", "classify", "--train", str(data), "--dev", str(data), "--model", str(hf),
                 "--out", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "16",
                 "--train.progress=false"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "run" / "best" / "tokenizer.json").is_file()
    capsys.readouterr()
    assert main(["predict", "classify", "--data", str(data), "--model", str(tmp_path / "run" / "best"),
                 "--out", str(tmp_path / "pred"), "--device", "cpu", "--no-progress"]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)["dev"]


def test_checkpoint_discovery_and_model_registry(model_dir, tmp_path):
    from albertlm.errors import UserError
    from albertlm.model.io import resolve_checkpoint
    from albertlm.model.registry import MODEL_CLASSES, load_saved_model, saved_class_name

    assert resolve_checkpoint(model_dir) == model_dir
    for step in (3, 12):
        (tmp_path / "run" / "checkpoints" / f"step_{step:08d}").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / ".tmp-step_00000020-1").mkdir()
    assert resolve_checkpoint(tmp_path / "run").name == "step_00000012"
    with pytest.raises(UserError, match="nothing: no such model directory .*downloads nothing"):
        resolve_checkpoint(tmp_path / "nothing")
    assert saved_class_name(model_dir) == "AlbertForPreTraining"
    assert type(load_saved_model(model_dir)) is MODEL_CLASSES["AlbertForPreTraining"]
    assert set(MODEL_CLASSES) >= {"AlbertModel", "AlbertForSequenceClassification", "AlbertForQuestionAnswering",
                                  "AlbertForMultipleChoice", "AlbertForMaskedLM", "AlbertForTokenClassification"}


def test_evaluate_checkpoint_on_a_device_with_a_progress_bar(tmp_path, capsys):
    """`albertlm evaluate` takes --device; the progress bar goes to stderr, the numbers to stdout."""
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    from conftest import shared_path

    data, spm = shared_path("text", "sample_text.txt"), shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(data), "--tokenizer", str(spm), "--out", str(tmp_path / "d"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1, num_heads=2,
                                     ffn_size=16, max_position_embeddings=32)).save_pretrained(tmp_path / "m")
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--device", "cpu",
                 "--max-batches", "2", "--json"]) == 0
    out = capsys.readouterr()
    assert {"mlm_loss", "mlm_acc"} <= set(json.loads(out.out)) and "evaluate" in out.err
    if not torch.cuda.is_available():
        assert main(["evaluate", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--device", "cuda:7"]) == 2
        assert "CUDA is not available" in capsys.readouterr().err


def test_compile_time_is_never_negative():
    """A first compiled step faster than the second (inductor's cache; a recompile for a new length bucket)
    is reported as no measurable compile time, not as a negative one (seen on an H200: '-0.0 s')."""
    from types import SimpleNamespace

    from albertlm.training.loop import Loop

    printed, logged = [], []
    fake = SimpleNamespace(train=SimpleNamespace(compile="default"), state=SimpleNamespace(step=2),
                           plan=SimpleNamespace(total_steps=10), _print=printed.append,
                           logger=SimpleNamespace(log=lambda step, split, rec: logged.append(rec)))
    steps: list[float] = []
    Loop._report_compile(fake, steps, 0.02)
    Loop._report_compile(fake, steps, 0.5)
    assert logged == [{"first_step_s": 0.02, "next_step_s": 0.5, "compile_s": 0.0}]
    assert "no compile time was measurable" in printed[0] and "-" not in printed[0].split("took")[1]
    printed.clear(), logged.clear()
    steps = []
    Loop._report_compile(fake, steps, 30.0)
    Loop._report_compile(fake, steps, 0.5)
    assert logged[0]["compile_s"] == 29.5 and "about 29.5 s went to compiling" in printed[0]


def test_finetune_dropout_is_seeded_per_rank_and_step(model_dir, tmp_path):
    """Fine-tuning shares pretraining's dropout seeding (training.trainer.SeededDropout): each rank its own
    masks, and a step's masks a function of (seed, rank, step, micro-batch), not of the RNG's history."""
    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training.trainer import SeededDropout

    cfg = finetune_config(max_steps=3)
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), cfg, tmp_path, DistInfo())
    assert isinstance(loop.objective, SeededDropout)
    assert (loop.objective.seed, loop.objective.rank) == (cfg.train.seed, 0) and loop.objective.state is loop.state


def test_a_budget_stop_on_an_eval_and_save_step_does_neither_twice(model_dir, tmp_path, monkeypatch):
    """The demo's budget ran out on step 2400, an eval and save step: the evaluation was logged twice and the
    same checkpoint written twice. Now the stop reuses what the step's schedule just did."""
    from dataclasses import replace

    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training.loop import Loop
    from albertlm.training.metrics import MetricsLogger, read_metrics

    cfg = finetune_config(max_steps=6)
    cfg = cfg.replace(train=replace(cfg.train, save_every=3, max_minutes=60.0))
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), cfg, tmp_path, DistInfo())
    loop.logger = MetricsLogger(tmp_path, 6, tensorboard=False, progress=False)
    saves = []
    real_save = Loop.save
    monkeypatch.setattr(Loop, "save", lambda self: saves.append(self.state.step) or real_save(self))
    monkeypatch.setattr(Loop, "_stop_reason", lambda self, request, deadline: "budget" if self.state.step == 3 else None)
    assert loop.run() == "budget"
    assert saves == [3]
    evals = [r["step"] for r in read_metrics(tmp_path) if r["split"] == "eval"]
    assert evals == [3]


def test_an_evaluation_with_nothing_to_report_prints_no_empty_line(model_dir, tmp_path, capsys):
    """A run without a labelled dev set printed 'step N eval: ' with nothing after it."""
    from albertlm.tasks.finetune import make_finetune_loop
    from albertlm.training.metrics import MetricsLogger, read_metrics

    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), finetune_config(max_steps=3), tmp_path,
                              DistInfo())
    loop.evaluate_fn = lambda: {}
    loop.logger = MetricsLogger(tmp_path, 3, tensorboard=False, progress=False)
    capsys.readouterr()
    loop.run()
    out = capsys.readouterr()
    assert "eval:" not in out.out + out.err
    assert not [r for r in read_metrics(tmp_path) if r["split"] == "eval"]


def test_resume_does_not_claim_the_head_is_freshly_initialised(model_dir, tmp_path, caplog):
    """A first fine-tune rightly logs that the head is new; `--resume` restores it from the checkpoint, so
    the same line would be a false alarm."""
    import logging

    data = _csv(tmp_path / "d.csv", 24, 0)
    with caplog.at_level(logging.WARNING, logger="albertlm.model"):
        assert _finetune(model_dir, data, tmp_path / "run") == 0
        assert "freshly initialised" in caplog.text
        caplog.clear()
        assert _finetune(model_dir, data, tmp_path / "run", "--resume") == 0
        assert "freshly initialised" not in caplog.text
