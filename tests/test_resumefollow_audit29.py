"""Audit 29 follow-ups to the resume audit (tests/test_resume_audit29.py), as a cluster user whose jobs are
preempted and relaunched: `finetune --resume` on a pretraining run's --out, the training data copied to another
path (a job's scratch disk) that `--resume` refused whatever it held, a job script that always resumes whose first
launch was killed before it wrote anything, and the same `--init-from RUN_DIR` command relaunched with --resume.
Each test failed before its fix unless its docstring says it pins what was already right."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.training import checkpoint as ckpt
from conftest import assert_one_error
from test_resume_audit29 import SETTINGS
from test_train_audit16 import _loop
from train_fixtures import TINY_PRETRAIN_ARGS, alice_sop_data


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def alice(tmp_path_factory) -> Path:
    """32-token SOP data of 80 lines of Alice (albert-base-v2's SentencePiece), built by the CLI."""
    return alice_sop_data(tmp_path_factory.mktemp("resumefollow"), lines=80)


RUN = [*TINY_PRETRAIN_ARGS, "--max-steps", "4", "--save-every", "2", "--log-every", "2", "--warmup-steps", "1",
       "--no-progress"]


def _pretrain(data: Path, out: Path, *extra: str) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(out), *RUN, *extra])


def _killed_after_step_4(out: Path) -> bytes:
    """The run's step-4 weights, then its step-4 checkpoint removed: as a job killed after step 4, before its save,
    whose --resume goes on from step 2."""
    step = ckpt.step_dir(out, 4)
    weights = (step / "model.safetensors").read_bytes()
    shutil.rmtree(step)
    return weights


# ------------------------------------------------------------------- 1. finetune --resume on a pretraining run
@pytest.mark.parametrize("how", ["--resume", "--overwrite", None])
def test_finetune_into_a_pretraining_run_says_whose_run_it_is(tmp_path, capsys, how):
    """`albertlm finetune --out PRETRAINING_RUN --resume` read the pretraining checkpoint's run_config.json as a
    fine-tuning's: it compared its settings as a fine-tuning's ("max_seq_length=128, now 24") or, its `model`
    section being a dict, died in a TypeError traceback (`_check_resumed_model`). Now, as without --resume, one line
    says whose run it is, and nothing there changes."""
    assert _loop(tmp_path, **SETTINGS).run() == "done"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(["finetune", "glue", "--task", "rte", "--model", str(tmp_path), "--out", str(tmp_path),
                 *([how] if how else [])])
    assert_one_error(capsys, code, "holds an `albertlm pretrain` run, not a fine-tuning run")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


# ----------------------------------------------------------------- 2. the data copied to another path
def test_a_resume_on_a_copy_of_the_data_at_another_path_goes_on_exactly(alice, tmp_path, capsys):
    """The data copied to a job's scratch disk (the path it trained on gone): `--resume --data COPY` was refused
    (`data.path` may not change) with advice to start over with --overwrite. Now the copy is compared with what
    the checkpoint recorded of its data (examples, tokenizer sha256, build seed, shards), said in one line, and the
    resumed run writes the uninterrupted run's step-4 weights byte for byte (fp32, CPU); run_config.json records
    the new path. A --resume without --data names the recorded path as gone and asks for --data (it said "not a
    data directory")."""
    data = tmp_path / "data"
    shutil.copytree(alice, data)
    out = tmp_path / "run"
    assert _pretrain(data, out) == 0
    weights = _killed_after_step_4(out)
    scratch = tmp_path / "scratch" / "data"
    shutil.copytree(data, scratch)
    shutil.rmtree(data)                                   # the old path is gone
    capsys.readouterr()
    # without --data: said as the data gone from its recorded place (was "not a data directory: PATH")
    assert_one_error(capsys, main(["pretrain", "--out", str(out), "--resume"]), f"data.path '{data}'",
                     "is not there any more", "pass --data")
    assert main(["pretrain", "--out", str(out), "--resume", "--data", str(scratch), "--no-progress"]) == 0
    said = capsys.readouterr().out
    notes = [line for line in said.splitlines() if line.startswith("note: --resume with --data")]
    assert len(notes) == 1 and "the same data" in notes[0] and "gone now" in notes[0], said[-2000:]
    assert (ckpt.step_dir(out, 4) / "model.safetensors").read_bytes() == weights
    assert json.loads((out / "run_config.json").read_text())["data"]["path"] == str(scratch)


def test_a_resume_on_other_data_at_another_path_is_refused_in_one_line(alice, tmp_path, capsys):
    """Other data at the new path (another build of other text) is refused in one line that names what differs and
    the run's own data, without the --overwrite advice that threw the run away; nothing in the run changes."""
    out = tmp_path / "run"
    assert _pretrain(alice, out, "--max-steps", "2") == 0
    (tmp_path / "other").mkdir()
    other = alice_sop_data(tmp_path / "other", lines=60)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    for dry in ([], ["--dry-run"]):
        code = main(["pretrain", "--out", str(out), "--resume", "--data", str(other), *dry])
        err = capsys.readouterr().err
        assert_one_error_text(code, err, "the run was started with data.path", "which holds other data",
                              "the checkpoint step_00000002",
                              f"give --data {alice}")
        assert "--overwrite" not in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def assert_one_error_text(code: int, err: str, *phrases: str) -> None:
    """`conftest.assert_one_error` on an error already read from capsys."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


def test_a_run_without_a_checkpoint_yet_resumes_on_data_moved_elsewhere(alice, tmp_path, capsys):
    """A run killed before its first checkpoint (its run_config.json alone), its data moved: `--resume --data NEW`
    starts it again from step 0 there, saying so (there is nothing recorded to compare NEW with)."""
    data = tmp_path / "data"
    shutil.copytree(alice, data)
    out = tmp_path / "run"
    assert _pretrain(data, out, "--dry-run") == 0
    saved = json.loads(capsys.readouterr().out)
    out.mkdir()
    (out / "run_config.json").write_text(json.dumps(saved))
    moved = data.rename(tmp_path / "moved")
    assert main(["pretrain", "--out", str(out), "--resume", "--data", str(moved), "--dry-run"]) == 0
    assert "the run saved no checkpoint, so it starts again from step 0" in capsys.readouterr().out


# --------------------------------------------------------------------- 3. a job script that always resumes
def test_resume_or_start_starts_a_run_where_there_is_none_and_resumes_it_after(alice, tmp_path, capsys):
    """A preemption script passing --resume failed for good when its first launch was killed before the run
    directory was written ("no run to resume"). `--resume-or-start` starts the run there, saying so in one line,
    and the same command relaunched resumes it exactly; a plain --resume there is still refused (pinned by
    test_pretrain_checks), and --resume-or-start with --resume or --overwrite is one line."""
    out = tmp_path / "never-written"
    assert _pretrain(alice, out, "--resume-or-start") == 0
    assert "note: --resume-or-start: no run in" in capsys.readouterr().out
    weights = _killed_after_step_4(out)
    assert _pretrain(alice, out, "--resume-or-start") == 0
    said = capsys.readouterr().out
    assert "--resume-or-start" not in said and "resuming from" in said
    assert (ckpt.step_dir(out, 4) / "model.safetensors").read_bytes() == weights
    for flag in ("--resume", "--overwrite"):
        assert_one_error(capsys, _pretrain(alice, out, "--resume-or-start", flag),
                         f"give it without {flag}")


def test_the_same_init_from_command_relaunched_with_resume_is_accepted(alice, tmp_path, capsys):
    """`pretrain --init-from RUN_DIR` records RUN_DIR's newest checkpoint as its start, so the same command with
    --resume (a relaunched job) was refused ("the run was started with init_from='RUN_DIR/checkpoints/step_...',
    now 'RUN_DIR'; ... start over with --overwrite"). Now the run directory of the recorded checkpoint is the same
    start, and the record is kept; another --init-from is still refused."""
    source = tmp_path / "source"
    assert _pretrain(alice, source, "--max-steps", "2") == 0
    out = tmp_path / "run"
    assert _pretrain(alice, out, "--max-steps", "2", "--init-from", str(source)) == 0
    started = json.loads((out / "run_config.json").read_text())["init_from"]
    assert started == str(ckpt.step_dir(source, 2))
    capsys.readouterr()
    assert _pretrain(alice, out, "--max-steps", "2", "--init-from", str(source), "--resume", "--dry-run") == 0
    assert json.loads(capsys.readouterr().out)["init_from"] == started
    assert_one_error(capsys, _pretrain(alice, out, "--max-steps", "2", "--init-from", str(tmp_path / "elsewhere"),
                                       "--resume", "--dry-run"), "the run was started with init_from=")
