"""Lead's follow-ups of the twenty-seventh session's audits."""
from types import SimpleNamespace

import pytest
import torch

from albertlm.errors import UserError


def test_evaluate_on_pretraining_data_refuses_fp16_on_cpu_with_inferences_reason(tmp_path):
    """`albertlm evaluate` (pretraining data) runs no optimizer: its fp16-on-CPU refusal gave fine-tuning's
    loss-scaling reason."""
    from albertlm.training.evaluate import _evaluate_checkpoint

    info = SimpleNamespace(device=torch.device("cpu"), is_main=True, rank=0, world_size=1)
    with pytest.raises(UserError, match=r"fp16 needs a CUDA device; use --precision fp32 or bf16") as caught:
        _evaluate_checkpoint(tmp_path / "none", tmp_path / "data", 8, 0, "fp16", info, False)
    assert "loss scaling" not in str(caught.value)


def test_export_and_convert_share_the_tf_checkpoint_check(tmp_path):
    """export's --out check and convert's DST check name a TF checkpoint the same way (one function)."""
    from albertlm.cli import convert_commands, export_commands

    (tmp_path / "model.ckpt-best.index").write_bytes(b"")
    assert convert_commands.held_tf_checkpoint(tmp_path) == "model.ckpt-best.index"
    with pytest.raises(UserError, match=r"holds a TF checkpoint \(model.ckpt-best.index\)"):
        export_commands._check_directory(tmp_path, tmp_path / "elsewhere", {}, False)


@pytest.mark.parametrize("code, muted", [("EPIPE", True), ("EIO", True), ("ENOSPC", False), ("EAGAIN", False)])
def test_only_a_console_gone_is_pointed_at_dev_null(monkeypatch, code, muted):
    """A console that went away (EPIPE, EIO) is muted for the rest of the run; another write error (a full disk under
    a redirected stdout, a full non-blocking pipe) costs only its line: muting fd 1/2 would also hide the command's
    final error line."""
    import errno
    import io

    from albertlm.training import metrics

    calls = []
    monkeypatch.setattr(metrics.os, "dup2", lambda src, dst: calls.append(dst))

    class Failing(io.StringIO):
        def write(self, text):
            raise OSError(getattr(errno, code), code)

        def fileno(self):
            return 1

    stream = Failing()
    monkeypatch.setattr(metrics.sys, "stdout", stream)
    logger = metrics.MetricsLogger.__new__(metrics.MetricsLogger)
    logger.bar = None
    logger.note("a line")
    assert calls == ([1] if muted else [])


@pytest.mark.parametrize("given", [{"cola": 0.55}, {"mnli": [0.85, 0.84]}])
def test_glue_score_refuses_a_bare_number_in_one_line(given):
    """A task given as a number (not its metrics by name) was a TypeError traceback."""
    from albertlm.tasks.metrics import glue_score

    with pytest.raises(UserError, match=r"is not a task's metrics; give them by name"):
        glue_score(given)


def test_tokenizer_info_lists_the_tokens_transformers_added(tmp_path, capsys):
    """`tokenizer info` on a WordPiece directory with added tokens said "17 tokens" and named none of them."""
    from test_tokz_audit27 import _v4_directory

    from albertlm.cli.main import main

    assert main(["tokenizer", "info", "-t", str(_v4_directory(tmp_path, "decoder"))]) == 0
    out = capsys.readouterr().out
    added = next(line for line in out.splitlines() if "added tokens" in line)
    assert added.startswith("  added tokens (4): 13 ") and "[E1]" in added and "16 [E2]" in added
