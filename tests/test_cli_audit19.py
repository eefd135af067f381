"""Session-19 CLI follow-ups (the lead's own file)."""
from __future__ import annotations

import pytest
import torch

from albertlm.cli.main import main


def test_a_bool_option_before_the_positional_does_not_swallow_it(tmp_path, capsys):
    """`evaluate --progress RUN` took RUN as --progress's value and then asked for the checkpoint; now RUN is the
    checkpoint (and a bool word after the option is still its value)."""
    missing = tmp_path / "run1"
    for argv in (["evaluate", "--progress", str(missing), "--data", str(tmp_path)],
                 ["evaluate", "--progress", "false", str(missing), "--data", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "run1: no such model directory" in err, err   # (the path is the checkpoint)
        assert "required" not in err


def test_a_bad_bool_value_is_still_refused_where_no_positional_follows(capsys):
    """Commands without positionals keep refusing a word that is no bool as the option's value."""
    assert main(["ablate", "--list-jobs", "maybe"]) == 2
    err = capsys.readouterr().err
    assert "maybe" in err and "Traceback" not in err


def test_a_tf_checkpoint_state_file_with_a_stray_byte_still_picks_its_checkpoint(tmp_path):
    """A TF directory holding two checkpoints and a `checkpoint` state file with a non-UTF-8 byte (a Latin-1 path
    written on another machine) was a UnicodeDecodeError traceback; the state file's pick is still read."""
    from albertlm.interop.tf_checkpoint import resolve_prefix

    for name in ("model.ckpt-100", "model.ckpt-200"):
        (tmp_path / f"{name}.index").write_bytes(b"")
    (tmp_path / "checkpoint").write_bytes(b'model_checkpoint_path: "/home/j\xe9r\xf4me/model.ckpt-100"\n'
                                          b'all_model_checkpoint_paths: "model.ckpt-200"\n')
    assert resolve_prefix(tmp_path) == tmp_path / "model.ckpt-100"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_transformers_export_records_its_dtype_as_save_pretrained_does(tmp_path, dtype, tiny_config):
    """config.json of an export said nothing of the weights' dtype (transformers' save_pretrained writes `dtype`)."""
    import json

    from albertlm.interop.hf import export_hf
    from albertlm.model.heads import AlbertForMaskedLM

    export_hf(AlbertForMaskedLM(tiny_config).to(dtype), tmp_path)
    assert json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))["dtype"] == str(dtype)[6:]


def _finetuned(tmp_path, cfg, spec) -> None:
    """One step of fine-tuning a tiny pretrained model on `spec` from Python, into tmp_path/run."""
    from albertlm.tasks.finetune import run_finetune
    from conftest import save_tiny_pretrained
    from train_fixtures import StubTokenizer

    (tmp_path / "model").mkdir()
    run_finetune(spec, save_tiny_pretrained(tmp_path / "model"), StubTokenizer(), cfg, tmp_path / "run",
                 log=lambda *a, **k: None)


def test_a_finetune_from_python_records_its_max_seq_length_beside_best(tmp_path):
    """finetuning.md's Python `run_finetune` left max_seq_length out of best/task.json (only the CLI wrote it),
    so a later `predict` / `evaluate --model RUN/best` used the family's default length, not the run's."""
    import dataclasses
    import json

    from train_fixtures import finetune_config, synthetic_task

    _finetuned(tmp_path, dataclasses.replace(finetune_config(max_steps=1), max_seq_length=48), synthetic_task(n=8))
    assert json.loads((tmp_path / "run" / "best" / "task.json").read_text(encoding="utf-8"))["max_seq_length"] == 48



def test_predict_in_fp16_on_a_cpu_is_refused_as_finetune_and_evaluate_refuse_it(tmp_path):
    """`predict` / `evaluate --model` ran fp16 autocast on the CPU, while finetune and `evaluate` on pretraining
    data refuse fp16 without CUDA."""
    import dataclasses

    from albertlm.errors import UserError
    from albertlm.tasks.finetune import run_evaluation
    from train_fixtures import StubTokenizer, finetune_config, synthetic_task

    cfg, spec = finetune_config(max_steps=1), synthetic_task(n=8)
    _finetuned(tmp_path, cfg, spec)
    fp16 = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision="fp16"),
                               dist=dataclasses.replace(cfg.dist, device="cpu"))
    with pytest.raises(UserError, match="fp16 needs a CUDA device"):
        run_evaluation(spec, tmp_path / "run" / "best", StubTokenizer(), fp16, None)


def test_predict_progress_in_a_log_is_plain_lines(capsys, tiny_config):
    """`predict` drew a tqdm bar whenever progress was on, so a log (nohup, a pipe) got carriage-return redraws;
    without a terminal it now says `predict: N/M batches` lines, as evaluate does."""
    from albertlm.model.heads import AlbertForSequenceClassification
    from albertlm.tasks.finetune import predict
    from train_fixtures import synthetic_task

    spec = synthetic_task(n=8)
    model = AlbertForSequenceClassification(tiny_config.replace(num_labels=2))
    features = spec.eval_sets[0].features
    out = predict(model, features, spec.outputs, 0, 2, torch.device("cpu"), progress=True)
    assert len(out["logits"]) == len(features)
    err = capsys.readouterr().err
    assert "\r" not in err and f"predict: {len(features) // 2}/{len(features) // 2} batches" in err, err
