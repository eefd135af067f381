"""Audit 27: two google-exact pretraining options. `--initializer truncated_normal` draws a run's weights as
google-research's `tf.truncated_normal_initializer(initializer_range)` (`model.albert.init_truncated_normal`), and
`--optim.warmup_style google` warms up as google's optimization.py (update k at lr x k/warmup, update 0 at rate 0).
Both are recorded in run_config.json and kept by --resume; an older run_config.json without them resumes with the
defaults (what it trained with). Each test failed before the options existed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config.model import ConfigError
from albertlm.training.distributed import DistInfo
from albertlm.training.loop import Plan
from albertlm.training.pretrain import make_loop
from albertlm.training.schedule import lr_at
from test_google_pretrain_audit23 import google_lr
from test_train import datasets, train
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data, finetune_config, synthetic_task, tiny_run, StubTokenizer


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _recorded_lrs(loop) -> dict[int, float]:
    """Runs `loop` to its end; the learning rate each update was taken with."""
    lrs = {}
    loop.on_step = lambda step, metrics: lrs.__setitem__(step, loop.optimizer.param_groups[0]["lr"])
    loop.run()
    return lrs


# ------------------------------------------------------------------------------- 1. the initializer
def test_truncated_normal_draws_every_weight_within_two_std_and_the_default_is_transformers_normal(tmp_path):
    """A run from scratch with initializer=truncated_normal starts from google's distribution: every Linear and
    Embedding weight within 2 x initializer_range (spread ~0.88 std), biases 0, LayerNorms 1/0; the default
    (normal) keeps transformers' normal, ~4.6% of whose weights lie beyond 2 std. Seeded: the same weights twice."""
    std = tiny_run().model.initializer_range
    loops = {name: make_loop(tiny_run().replace(initializer=name), tmp_path / name, datasets(), DistInfo(), False)
             for name in ("normal", "truncated_normal")}
    for name, loop in loops.items():
        matrices = torch.cat([p.detach().flatten() for p in loop.raw_model.parameters() if p.dim() == 2])
        beyond = float((matrices.abs() > 2 * std).float().mean())
        if name == "truncated_normal":
            assert beyond == 0.0
            assert float(matrices.std()) == pytest.approx(0.88 * std, rel=0.05)
        else:
            assert 0.03 < beyond < 0.06, beyond
            assert float(matrices.std()) == pytest.approx(std, rel=0.05)
        vectors = {key: p for key, p in loop.raw_model.named_parameters() if p.dim() == 1}
        assert "mlm_head.bias" in vectors and "albert.embeddings.norm.weight" in vectors
        for key, p in vectors.items():     # every bias (the MLM output bias too) 0, every LayerNorm weight 1
            assert torch.all(p == (1 if key.endswith("norm.weight") else 0)), key
    again = make_loop(tiny_run().replace(initializer="truncated_normal"), tmp_path / "again", datasets(), DistInfo(),
                      False)
    for key, value in _weights(loops["truncated_normal"].raw_model).items():
        assert torch.equal(value, again.raw_model.state_dict()[key]), key


def test_truncated_normal_with_init_from_is_refused():
    """The initializer draws a run's weights from scratch: with init_from it would be dropped without a word."""
    with pytest.raises(ConfigError, match="initializer='truncated_normal'.*drop --init-from"):
        tiny_run().replace(initializer="truncated_normal", init_from="/some/checkpoint")
    tiny_run().replace(init_from="/some/checkpoint")            # the default is fine


def test_a_truncated_normal_run_resumed_equals_the_uninterrupted_one(tmp_path):
    """Stopped at step 3 of 6 and resumed: the same weights as the run that was not stopped (the resumed run loads
    its checkpoint, it does not draw the initial weights again)."""
    run = tiny_run(max_steps=6).replace(initializer="truncated_normal")
    status, _, model = train(run, tmp_path / "whole")
    assert status == "done"
    whole = _weights(model)
    assert train(run, tmp_path / "cut", stop_at=3)[0] == "interrupted"
    status, seen, model = train(run, tmp_path / "cut", resume=True)
    assert status == "done" and sorted(seen) == [4, 5, 6]
    for key, value in _weights(model).items():
        assert torch.equal(value, whole[key]), key


# ------------------------------------------------------------------------------- 2. google's warmup
@pytest.mark.parametrize("warmup,total,power", [(3125, 125_000, 1.0), (1, 2, 1.0), (5, 5, 1.0), (7, 3, 1.0),
                                                (4, 10, 2.0), (0, 6, 1.0), (10, 1000, 0.5)])
def test_google_warmup_is_googles_formula_at_every_step(warmup, total, power):
    """lr_at(..., warmup_style="google") is google's optimization.py rate (test_google_pretrain_audit23's
    transcription: polynomial_decay over num_train_steps from step 0, replaced by init_lr x global_step/warmup while
    global_step < warmup), exactly, at step 0 (rate 0), through the warmup, at its end and at the last step; the
    default style is unchanged (one warmup step ahead)."""
    lr = 0.00176
    steps = sorted({0, 1, max(warmup - 1, 0), warmup, warmup + 1, total // 2, total - 1} & set(range(total)))
    if total < 50:
        steps = list(range(total))
    for k in steps:
        assert lr_at(k, lr, warmup, total, power, "google") == google_lr(k, lr, total, warmup, power), k
        plan = Plan(total_steps=total, warmup_steps=warmup, eval_every=1, lr=lr, decay_power=power,
                    warmup_style="google")
        assert plan.lr_at(k) == google_lr(k, lr, total, warmup, power), k
        if k < warmup:
            assert lr_at(k, lr, warmup, total, power) == pytest.approx(lr * (k + 1) / warmup)
    if warmup:
        assert lr_at(0, lr, warmup, total, power, "google") == 0.0
    with pytest.raises(ValueError, match="warmup_style='tf'"):
        lr_at(0, lr, warmup, total, power, "tf")


def test_the_loop_takes_each_update_at_googles_rate_and_a_resume_keeps_it(tmp_path):
    """The pretraining loop's optimizer gets google's rate at every update (update 1 at rate 0) with
    optim.warmup_style=google; stopped at step 2 and resumed, it goes on at google's rates."""
    run = tiny_run(max_steps=5)
    run = run.replace(optim=run.optim.replace(warmup_style="google", warmup_steps=3))
    expected = {k + 1: google_lr(k, run.optim.lr, 5, 3) for k in range(5)}
    loop = make_loop(run, tmp_path / "whole", datasets(), DistInfo(), False)
    assert loop.plan.warmup_style == "google"
    assert _recorded_lrs(loop) == expected and expected[1] == 0.0
    assert train(run, tmp_path / "cut", stop_at=2)[0] == "interrupted"
    resumed = make_loop(run, tmp_path / "cut", datasets(), DistInfo(), True)
    assert _recorded_lrs(resumed) == {k: expected[k] for k in (3, 4, 5)}


def test_fine_tuning_takes_googles_warmup_too(tmp_path):
    """FinetuneConfig shares OptimConfig, so `albertlm finetune --optim.warmup_style google` exists: the fine-tuning
    loop (trainer.build_loop's plan) trains with it, not with the default warmup."""
    from conftest import save_tiny_pretrained

    from albertlm.tasks.finetune import make_finetune_loop

    model_dir = save_tiny_pretrained(tmp_path)
    cfg = finetune_config(max_steps=4)
    cfg = cfg.replace(optim=cfg.optim.replace(warmup_style="google", warmup_steps=2))
    loop = make_finetune_loop(synthetic_task(), model_dir, StubTokenizer(), cfg, tmp_path / "run", DistInfo())
    hook = loop.on_step
    lrs = {}
    loop.on_step = lambda step, metrics: (hook(step, metrics),
                                          lrs.__setitem__(step, loop.optimizer.param_groups[0]["lr"]))
    loop.run()
    assert lrs == {k + 1: google_lr(k, cfg.optim.lr, 4, 2) for k in range(4)}
    saved = json.loads((tmp_path / "run" / "checkpoints" / "step_00000004" / "run_config.json").read_text())
    assert saved["optim"]["warmup_style"] == "google"


# ------------------------------------------------------------------- 3. the CLI: recorded, kept on --resume
@pytest.fixture(scope="module")
def alice(tmp_path_factory) -> Path:
    return alice_sop_data(tmp_path_factory.mktemp("googleinit"), lines=80)


def _pretrain(data: Path, out: Path, *extra: str) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(out), *TINY_PRETRAIN_ARGS, "--warmup-steps", "2",
                 "--no-progress", "--log-every", "1", *extra])


def test_the_options_are_recorded_and_a_resume_keeps_them(alice, tmp_path, capsys):
    """`albertlm pretrain --initializer truncated_normal --optim.warmup_style google` records both in
    run_config.json (and its checkpoints'); `--resume` with another value of either is refused, naming it, and
    the saved config is left as it was; a plain --resume trains on."""
    out = tmp_path / "run"
    assert _pretrain(alice, out, "--max-steps", "2", "--initializer", "truncated_normal",
                     "--optim.warmup_style", "google") == 0
    saved = json.loads((out / "run_config.json").read_text())
    assert saved["initializer"] == "truncated_normal" and saved["optim"]["warmup_style"] == "google"
    step = json.loads((out / "checkpoints" / "step_00000002" / "run_config.json").read_text())
    assert step["initializer"] == "truncated_normal" and step["optim"]["warmup_style"] == "google"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["lr"] for r in records if r.get("split") == "train"][0] == 0.0       # google's update 0
    capsys.readouterr()
    for option, value, key in (("--initializer", "normal", "initializer"),
                               ("--optim.warmup_style", "albertlm", "optim.warmup_style")):
        assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3", option, value]) == 2
        err = capsys.readouterr().err
        assert f"the run was started with {key}=" in err and len(err.strip().splitlines()) == 1, err
    assert json.loads((out / "run_config.json").read_text()) == saved
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3", "--no-progress"]) == 0
    assert json.loads((out / "run_config.json").read_text())["initializer"] == "truncated_normal"


def test_an_older_run_config_without_the_options_resumes_with_the_defaults(alice, tmp_path, capsys):
    """A run recorded before the options (no `initializer`, no `optim.warmup_style` in its run_config.json) resumes,
    with the defaults it trained with; asking it for google's warmup is refused."""
    out = tmp_path / "run"
    assert _pretrain(alice, out, "--max-steps", "2") == 0
    for path in (out / "run_config.json", out / "checkpoints" / "step_00000002" / "run_config.json"):
        saved = json.loads(path.read_text())
        del saved["initializer"], saved["optim"]["warmup_style"]
        path.write_text(json.dumps(saved, indent=2) + "\n")
    capsys.readouterr()
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3", "--optim.warmup_style", "google"]) == 2
    assert "optim.warmup_style='albertlm', now 'google'" in capsys.readouterr().err
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "3", "--no-progress"]) == 0
    saved = json.loads((out / "run_config.json").read_text())
    assert saved["initializer"] == "normal" and saved["optim"]["warmup_style"] == "albertlm"
