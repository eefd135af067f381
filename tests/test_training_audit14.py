"""Audit 14 of `albertlm pretrain` / `evaluate` / `plot` as a demanding user: infinite values, damaged or missing
run_config.json on --resume, data rebuilt in place (another tokenizer, another sequence length), malformed device
strings, `plot --out` names, data of another tokenizer for `evaluate` and `--init-from`, `--out` under a file, a
foreign checkpoint's hint, and a warmup as long as the run. Each test failed before its fix."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import alice_documents, assert_one_error, shared_path

TINY = ["--preset", "albert-tiny", "--model.embedding_size=16", "--model.hidden_size=32", "--model.num_layers=1",
        "--model.num_heads=2", "--model.ffn_size=37", "--model.max_position_embeddings=64", "--batch-size", "4",
        "--train.progress=false", "--train.tensorboard=false", "--eval-every", "0", "--train.eval_batches=1",
        "--warmup-steps", "1", "--lr", "0.01"]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """32-token SOP data from 300 lines of Alice: `spm/` (albert-base-v2's SentencePiece, V=30000) and `small/`
    (a 200-piece tokenizer trained here, `tok200/`), the same text."""
    root = tmp_path_factory.mktemp("audit14_data")
    text = alice_documents(root, 300)
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["tokenizer", "train", "--input", str(text), "--vocab-size", "200", "--out", str(root / "tok200")]) == 0
    for name, tokenizer in (("spm", spm), ("small", root / "tok200")):
        assert main(["data", "build", "--input", str(text), "--tokenizer", str(tokenizer), "--out", str(root / name),
                     "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    return root


@pytest.fixture(scope="module")
def run(data, tmp_path_factory) -> Path:
    """A finished 2-step run on `spm/` (checkpoints at steps 1 and 2); tests copy it before changing it."""
    out = tmp_path_factory.mktemp("audit14_run") / "run"
    assert main(["pretrain", "--data", str(data / "spm"), "--out", str(out), *TINY, "--max-steps", "2",
                 "--save-every", "1"]) == 0
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


# ------------------------------------------------------------------------------ 1. infinite numbers
@pytest.mark.parametrize("option", ["--train.epochs=inf", "--lr=inf", "--optim.weight_decay=inf", "--optim.eps=inf"])
def test_infinite_values_are_refused_in_one_line(data, tmp_path, capsys, option):
    """Before: `--train.epochs inf` was an OverflowError traceback, `--lr inf` trained and then stopped on a NaN
    loss, `--optim.eps inf` trained nothing; all passed a dry run."""
    out = tmp_path / "x"
    code = main(["pretrain", "--data", str(data / "spm"), "--out", str(out), *TINY, "--max-steps", "2", option,
                 "--dry-run"])
    assert_one_error(capsys, code, option.split("=")[0].lstrip("-").replace("lr", "optim.lr"), "must be a finite")
    assert not out.exists()


# ---------------------------------------------------------------- 2. run_config.json damaged or missing
@pytest.mark.parametrize("content", ["xx{", "[1, 2]", '{"train": {"batch_size": -3}}', '{"train": 5}'])
def test_resume_with_a_damaged_run_config_is_one_line_naming_the_copy(run, tmp_path, capsys, content):
    """Before: a JSONDecodeError / AttributeError traceback."""
    copy = _copy(run, tmp_path)
    (copy / "run_config.json").write_text(content)
    before = sorted(p.name for p in copy.rglob("*"))
    code = main(["pretrain", "--out", str(copy), "--resume", "--max-steps", "3"])
    assert_one_error(capsys, code, "run_config.json", "step_00000002/run_config.json")
    assert sorted(p.name for p in copy.rglob("*")) == before


def test_resume_without_run_config_uses_the_checkpoints_copy(run, tmp_path, capsys):
    """Before: the paper recipe became the base, and the error was `no training data: pass --data DIR`."""
    copy = _copy(run, tmp_path)
    (copy / "run_config.json").unlink()
    assert main(["pretrain", "--out", str(copy), "--resume", "--max-steps", "3"]) == 0
    assert (copy / "checkpoints" / "step_00000003").is_dir()
    assert json.loads((copy / "run_config.json").read_text())["train"]["max_steps"] == 3


# ------------------------------------------------------------------------- 3. data rebuilt in place
def test_resume_after_the_data_was_rebuilt_with_another_tokenizer(data, tmp_path, capsys):
    """Before: the model's vocabulary followed the new data, and the error blamed `--model.*` options that were
    never given (model.safetensors shapes 30000 vs 200)."""
    place = tmp_path / "data"
    shutil.copytree(data / "spm", place)
    out = tmp_path / "run"
    assert main(["pretrain", "--data", str(place), "--out", str(out), *TINY, "--max-steps", "1"]) == 0
    capsys.readouterr()
    shutil.rmtree(place)
    shutil.copytree(data / "small", place)
    code = main(["pretrain", "--out", str(out), "--resume", "--max-steps", "2"])
    assert_one_error(capsys, code, "cannot resume exactly", "the training data changed")


def test_resume_refuses_same_size_data_of_another_sequence_length(tmp_path):
    """Before: data with as many examples but another sequence length (or tokenizer) was trained on silently."""
    from albertlm.data import loader
    from albertlm.training.distributed import DistInfo
    from albertlm.training.pretrain import Datasets, make_loop
    from train_fixtures import SyntheticPretraining, tiny_run

    def datasets(T):
        ds = SyntheticPretraining(n=32, T=T)
        return Datasets(train=ds, eval=None, collate=loader.collate, meta=ds.meta)

    assert make_loop(tiny_run(max_steps=2, save_every=1), tmp_path, datasets(24), DistInfo(), False).run() == "done"
    longer = tiny_run(max_steps=3, save_every=1)
    with pytest.raises(UserError, match="data_max_seq_length is 24, now 32.*training data changed"):
        make_loop(longer, tmp_path, datasets(32), DistInfo(), resume=True)
    assert make_loop(longer, tmp_path, datasets(24), DistInfo(), resume=True).state.step == 2


# ---------------------------------------------------------------------------------- 4. device strings
@pytest.mark.parametrize("device", ["cuda:x", "tpu", "cudaA"])
def test_malformed_device_is_one_line(device, data, run, tmp_path, capsys):
    """Before: torch's RuntimeError traceback, from `pretrain --dist.device` and `evaluate --device`."""
    from albertlm.training.distributed import pick_device

    with pytest.raises(UserError, match="not a device"):
        pick_device(device)
    code = main(["pretrain", "--data", str(data / "spm"), "--out", str(tmp_path / "x"), *TINY, "--max-steps", "1",
                 f"--dist.device={device}", "--dry-run"])
    assert_one_error(capsys, code, "cuda:N")             # the config refuses 'tpu' itself, in its own words
    code = main(["evaluate", str(run), "--data", str(data / "spm"), "--device", device, "--no-progress"])
    assert_one_error(capsys, code, "not a device")


# --------------------------------------------------------------------------------------- 5. plot --out
def test_plot_out_names(run, tmp_path, capsys):
    """Before: `--out c` wrote c.png and printed c; `--out c.txt` was a ValueError traceback; `--out DIR` wrote
    DIR.png."""
    for bad, phrase in ((tmp_path / "c", "extension"), (tmp_path / "c.txt", "extension"),
                        (tmp_path, "is a directory"), (tmp_path / "missing" / "c.png", "does not exist")):
        code = main(["plot", str(run), "--out", str(bad)])
        assert_one_error(capsys, code, phrase)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert main(["plot", str(run), "--out", str(tmp_path / "c.svg")]) == 0
    printed = capsys.readouterr().out.strip()
    assert Path(printed).is_file() and printed.endswith("c.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.svg"]      # no temporary file left


# ------------------------------------------------------------------ 6. data of another tokenizer
def test_evaluate_and_init_from_refuse_data_of_another_tokenizer(data, run, tmp_path, capsys):
    """Before: a model trained with a 30000-piece vocabulary was evaluated on (and trained further on) ids of a
    200-piece one without a word."""
    code = main(["evaluate", str(run), "--data", str(data / "small"), "--no-progress"])
    assert_one_error(capsys, code, "another tokenizer", "vocab_size 200 vs 30000")
    assert main(["evaluate", str(run), "--data", str(data / "spm"), "--no-progress", "--max-batches", "1",
                 "--json"]) == 0
    capsys.readouterr()
    out = tmp_path / "x"
    code = main(["pretrain", "--data", str(data / "small"), "--init-from", str(run), "--out", str(out), *TINY,
                 "--max-steps", "1", "--dry-run"])
    assert_one_error(capsys, code, "another tokenizer", "vocab_size 200 vs 30000")
    assert not out.exists()


# ------------------------------------------------------------------------------------- 7. small ones
def test_out_under_a_file_says_it_is_a_file(data, tmp_path, capsys):
    """Before: `(FILE is not writable)`."""
    (tmp_path / "afile").write_text("")
    code = main(["pretrain", "--data", str(data / "spm"), "--out", str(tmp_path / "afile" / "run"), *TINY,
                 "--max-steps", "1"])
    assert_one_error(capsys, code, "afile is a file, not a directory")


def test_resume_from_a_foreign_checkpoint_does_not_blame_options_never_given(data, run, tmp_path, capsys):
    """Before: `drop the --model.* options that change it`, though none was given (and --resume refuses them)."""
    other = tmp_path / "other"
    assert main(["pretrain", "--data", str(data / "spm"), "--out", str(other), *TINY, "--max-steps", "2",
                 "--model.hidden_size=48"]) == 0
    copy = _copy(run, tmp_path)
    shutil.rmtree(copy / "checkpoints" / "step_00000002")
    shutil.copytree(other / "checkpoints" / "step_00000002", copy / "checkpoints" / "step_00000002")
    capsys.readouterr()
    code = main(["pretrain", "--out", str(copy), "--resume", "--max-steps", "3"])
    assert_one_error(capsys, code, "another model than the run's run_config.json")
    assert "--model.*" not in capsys.readouterr().err


def test_a_warmup_as_long_as_the_run_is_said(data, tmp_path, capsys):
    """Before: the paper recipe's 3125 warmup steps in a 2-step run trained at lr/1500 without a word."""
    long_warmup = [a for a in TINY if a not in ("--warmup-steps", "1")]
    assert main(["pretrain", "--data", str(data / "spm"), "--out", str(tmp_path / "a"), *long_warmup,
                 "--max-steps", "2", "--save-every", "0"]) == 0
    captured = capsys.readouterr()
    assert "warning: the warmup (3125 steps) is not shorter than the run (2 steps)" in captured.out
    assert captured.err == ""
    assert main(["pretrain", "--data", str(data / "spm"), "--out", str(tmp_path / "b"), *TINY,
                 "--max-steps", "2", "--save-every", "0"]) == 0
    assert "warning" not in capsys.readouterr().out


@pytest.mark.parametrize("make", [
    lambda: __import__("albertlm.config.run", fromlist=["x"]).TrainConfig(epochs=float("inf"), max_steps=0),
    lambda: __import__("albertlm.config.run", fromlist=["x"]).TrainConfig(max_minutes=float("inf")),
    lambda: __import__("albertlm.config.run", fromlist=["x"]).OptimConfig(lr=float("inf")),
    lambda: __import__("albertlm.config.run", fromlist=["x"]).OptimConfig(eps=float("inf")),
])
def test_the_shared_configs_refuse_infinity_for_fine_tuning_too(make):
    """Fine-tuning builds the same TrainConfig / OptimConfig without going through pretraining's resolve_run."""
    from albertlm.errors import UserError

    with pytest.raises(UserError, match="must be a finite number"):
        make()


def test_resuming_a_finished_run_says_there_is_nothing_to_train(run, tmp_path, capsys):
    """Before: the config and 'done' were printed, and nothing said that no step had run."""
    copy = _copy(run, tmp_path)
    capsys.readouterr()
    assert main(["pretrain", "--out", str(copy), "--resume", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "the run is already at step 2 of 2: nothing to train" in out
    assert not (copy / "checkpoints" / "step_00000003").exists()


def test_a_compiled_model_is_compiled_once_for_every_real_token_count(tiny_config):
    """Skip-padding batches have a different number of real tokens each; without marking that length dynamic,
    torch.compile compiled the first count as a constant and compiled again at the second batch (inside the
    timed, logged steps: the logged compile time came out near 0)."""
    import torch

    import torch._dynamo  # noqa: F401  (loaded, as under --train.compile)
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training.pretrain import PretrainingObjective

    torch._dynamo.reset()
    model = AlbertForPreTraining(tiny_config).eval()
    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=backend, fullgraph=True)
    objective = PretrainingObjective()
    generator = torch.Generator().manual_seed(0)
    for lengths in ((9, 5, 12), (7, 12, 3), (12, 11, 2)):   # 26, 22 and 25 real tokens
        batch = _packed_batch(lengths, tiny_config.vocab_size, generator)
        with torch.no_grad():
            objective.forward(compiled, batch, torch.tensor([1.0, 1.0]))
    assert len(graphs) == 1, f"compiled {len(graphs)} times"
    torch._dynamo.reset()


def _packed_batch(lengths, vocab, generator):
    """A (B, T=12) batch with `lengths` real tokens per row, P=2 masked slots, and its token_index."""
    import torch

    B, T = len(lengths), 12
    mask = torch.zeros(B, T, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    return {"input_ids": torch.randint(5, vocab, (B, T), generator=generator) * mask,
            "attention_mask": mask, "token_type_ids": torch.zeros(B, T, dtype=torch.long),
            "masked_lm_positions": torch.ones(B, 2, dtype=torch.long),
            "masked_lm_ids": torch.randint(5, vocab, (B, 2), generator=generator),
            "masked_lm_weights": torch.ones(B, 2), "sentence_order_label": torch.zeros(B, dtype=torch.long),
            "token_index": mask.reshape(-1).nonzero().squeeze(1)}
