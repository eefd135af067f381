"""Docs audit 32, second pass: docs/{training,model,validation,finetuning}.md against what the thirty-second
session's later commits made the code do.

torchrun's elastic restarts (`--resume-or-start`, each attempt's own store keys) and the refusal of srun tasks started
without a distributed launch (training.md, validation.md); `AlbertForPreTraining` without `masked_lm_weights`
(model.md); `evaluate glue --predictions --skip-bad-rows`, the later SST-2 row with a tab inside, and a streamed file
rewritten with as many rows (finetuning.md, validation.md); and no page still saying what those commits changed. The
messages the pages quote are the code's, the names they give exist, the behaviours hold on tiny inputs (the
behaviours themselves are tested by the helpers' own files: tests/test_{multinode,predfollow,parity}_audit32.py).
A few seconds, CPU-only."""
from __future__ import annotations

import inspect
import types

import pytest
import torch

import test_docs_audit14 as audit14
from albertlm.errors import UserError
from test_distributed_audit21 import clean_launch  # noqa: F401  (fixture: no launch variables)
from test_docs_audit26 import _flat, _options
from test_predfollow_audit32 import _sst2_dev   # a dev file with a short and a tabbed row
from test_docs_audit28 import _quote, check_validation_row

ROOT = audit14.ROOT


# ------------------------------------------------------------------ training.md: elastic restarts and Slurm
def test_the_srun_refusal_is_what_training_md_quotes(clean_launch):   # noqa: F811
    from albertlm.training import distributed

    quoted = _quote("docs/training.md", "this process is task SLURM_PROCID=1 of the 8 tasks srun started")
    assert quoted.endswith("; ..."), quoted
    clean_launch.setenv("SLURM_PROCID", "1")
    clean_launch.setenv("SLURM_STEP_NUM_TASKS", "8")
    with pytest.raises(UserError) as exc:
        distributed.launch_settings()
    assert str(exc.value).startswith(quoted[:-len(" ...")]), str(exc.value)
    # the launch the page describes is the one the message spells out
    assert "(one srun task per node, each a torchrun of `--nnodes $SLURM_NNODES` with the c10d rendezvous; the " \
           "refusal below spells out the command line)" in _flat("docs/training.md")
    assert "start one torchrun per node (`srun --ntasks-per-node 1 torchrun --nnodes $SLURM_NNODES --nproc-per-node " \
           "GPUS --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m albertlm ...`)" in str(exc.value)
    clean_launch.setenv("SLURM_STEP_NUM_TASKS", "1")               # `srun -n 1`, a batch script: a run, as the page says
    assert distributed.launch_settings() == (0, 1, 0)
    assert "A batch script's own process, and `srun -n 1`, run as before." in _flat("docs/training.md")


def test_elastic_restarts_are_as_training_md_says():
    from albertlm.training import checkpoint, distributed

    text = _flat("docs/training.md")
    assert "torchrun's elastic restarts (`--max_restarts N`) start the same command line again: give it " \
           "`--resume-or-start`" in text
    assert "--resume-or-start" in _options("pretrain", None) and "--dist.timeout_minutes" in _options("pretrain", None)
    # a plain command where the run exists: the line the page quotes
    quoted = _quote("docs/training.md", "--out RUN already holds a run")
    assert quoted == "--out RUN already holds a run ...", quoted
    assert "already holds a run (" in inspect.getsource(checkpoint.check_run_dir)
    # each attempt's own keys: the function the page names, keyed by torchrun's run id and restart count
    assert "(`training.distributed.attempt_store`)" in text
    source = inspect.getsource(distributed.attempt_store)
    assert "PrefixStore" in source and "_early_prefix()" in source
    assert "TORCHELASTIC_RESTART_COUNT" in inspect.getsource(distributed._early_prefix)
    # the measurement the page gives is the test's: rank 1 of 2 killed after step 3 of 8, --max-restarts 1
    assert "rank 1 of `torchrun --standalone --nproc-per-node 2 --max_restarts 1` killed with SIGKILL after step 3 " \
           "of 8, dropout on, the restarted run's step-8 weights equal the uninterrupted run's bit for bit" in text
    test = (ROOT / "tests/test_multinode_audit32.py").read_text(encoding="utf-8")
    for piece in ("STEPS = 8", '"--max-restarts", "1"', "_kill_rank_after(proc, 1, run_dir, 3)",
                  '"--standalone", "--nproc-per-node", "2"', "--model.hidden_dropout=0.1",
                  "_weights_equal(_weights(run_dir, STEPS), _weights(full_dir, STEPS))"):
        assert piece in test, piece


def test_the_torch_behaviour_training_md_relies_on_is_the_installed_torchs():
    """The options the page gives exist in this torch, and a restart for a new round (a node whose worker did not
    fail) does not count one: the nodes' restart counts, which key each attempt's store, can differ."""
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from torch.distributed import run as torchrun

    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in _flat("docs/training.md")
    assert '"--max_restarts"' in inspect.getsource(torchrun)           # the spelling the page gives (torchrun's too)
    assert '"TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "0"' in inspect.getsource(dynamic_rendezvous)
    source = inspect.getsource(api.SimpleElasticAgent._invoke_run)
    assert "self._remaining_restarts -= 1" in source and "membership changes do not count as retries" in source
    assert "spec.max_restarts - self._remaining_restarts" in inspect.getsource(api)


# ------------------------------------------------------------------ model.md: no masked_lm_weights
def test_without_masked_lm_weights_the_padding_slots_count_as_model_md_says():
    from albertlm import AlbertForPreTraining, get_preset

    assert "Called with `masked_lm_positions` and `masked_lm_ids` but no `masked_lm_weights`, the MLM loss and " \
           "accuracy count every slot, padding slots (position 0, id 0, as the loader's batches pad them) included: " \
           "pass the weights whenever slots are padded (or give the padding slots the id -100)" in \
        _flat("docs/model.md")
    torch.manual_seed(0)
    model = AlbertForPreTraining(get_preset("albert-tiny")).eval()
    ids = torch.randint(5, 100, (2, 16))
    positions = torch.tensor([[3, 5, 0, 0], [2, 0, 0, 0]])
    targets = torch.tensor([[7, 9, 0, 0], [8, 0, 0, 0]])
    weights = (targets != 0).float()
    mask, segments = torch.ones_like(ids), torch.zeros_like(ids)

    def loss(**kw) -> float:
        with torch.no_grad():
            return float(model(ids, mask, segments, masked_lm_positions=positions, **kw).mlm_loss)

    weighted = loss(masked_lm_ids=targets, masked_lm_weights=weights)
    assert loss(masked_lm_ids=targets) != pytest.approx(weighted, abs=1e-6)          # the 5 padding slots counted
    assert loss(masked_lm_ids=torch.where(weights > 0, targets, -100)) == pytest.approx(weighted, abs=1e-6)
    # the loader's batches are padded so (ids 0 past the masked tokens), and the training path passes the weights
    from albertlm.data import loader
    from albertlm.training import pretrain

    assert '"masked_lm_ids": np.where(used, np.take_along_axis(original, slots, axis=1), 0)' in \
        inspect.getsource(loader)
    assert "masked_lm_weights" in pretrain.MODEL_INPUTS


# ------------------------------------------------------------------ finetuning.md: GLUE's malformed rows


def test_evaluate_predictions_skip_bad_rows_warning_is_what_finetuning_md_quotes(tmp_path, capsys):
    from albertlm.cli.main import main

    dev = _sst2_dev(tmp_path / "SST-2" / "dev.tsv", short=101, tabbed=501)
    predictions = tmp_path / "dev_predictions.tsv"
    predictions.write_text("index\tprediction\n" + "".join(f"{i}\t1\n" for i in range(870)), encoding="utf-8")
    quoted = _quote("docs/finetuning.md", "DEV: 2 malformed rows skipped")
    assert quoted.endswith(", ..."), quoted
    assert "With `--skip-bad-rows` the dev file's malformed rows are skipped as `predict --skip-bad-rows` skipped " \
           "them, and the rows kept are numbered from 0" in _flat("docs/finetuning.md")
    argv = ["evaluate", "glue", "--task", "sst2", "--predictions", str(predictions), "--dev", str(dev)]
    assert main([*argv, "--skip-bad-rows"]) == 0
    err = capsys.readouterr().err
    assert quoted[:-len(" ...")].replace("DEV", str(dev)) in err, err
    # without the option: the first malformed row, naming it
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{dev}:101: 1 tab-separated fields, sst2 needs 2; --skip-bad-rows skips such training and dev rows" in err


def test_an_sst2_row_with_a_tab_inside_is_said_as_finetuning_md_says(tmp_path):
    from albertlm.tasks import glue
    from albertlm.tasks.tables import DataError

    text = _flat("docs/finetuning.md")
    assert "a row past the first with a tab inside its sentence says `(a tab inside a text?)` and names " \
           "`--skip-bad-rows`, a first row in another layout says `(another task's file?)` and does not" in text
    assert "`(a tab inside a text?)`, naming the option; a first row so is another task's file, `(another task's " \
           "file?)`, and the option is not offered" in _flat("docs/validation.md")
    later = tmp_path / "later.tsv"
    later.write_text("sentence\tlabel\na good film\t1\na bad\tfilm\t0\n", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        glue.read_examples("sst2", later, skip_option="--skip-bad-rows")
    assert str(exc.value) == f"{later}:3: 3 tab-separated fields, sst2's layout has 2 (a tab inside a text?); " \
                             "--skip-bad-rows skips such training and dev rows (counted in the notes)"
    first = tmp_path / "first.tsv"
    first.write_text("gj04\t1\t\ta good film\ngj04\t0\t\ta bad film\n", encoding="utf-8")
    with pytest.raises(DataError) as exc:
        glue.read_examples("sst2", first, skip_option="--skip-bad-rows")
    assert str(exc.value) == f"{first}:1: 4 tab-separated fields, sst2's layout has 2 (another task's file?)"


# ------------------------------------------------------------------ finetuning.md: a file rewritten with as many rows
def test_a_window_of_other_rows_is_refused_as_finetuning_md_quotes():
    from albertlm.tasks import features, specs
    from albertlm.tasks.tables import DataError

    text = _flat("docs/finetuning.md")
    # the sentence test_docs2_audit31 quotes is kept, the new one follows it
    assert "changed while it was read (N rows when it was checked, ...)`), not predicted against other rows; one " \
           "rewritten with as many rows (other rows, or the same in another order) is refused too" in text
    assert "a window of 16,384 rows at a time" in text and features.PREDICT_WINDOW == 16384
    quoted = _quote("docs/finetuning.md", "FILE: changed while it was read (rows ")
    size = features.PREDICT_WINDOW
    rows = [types.SimpleNamespace(guid=str(i), text_a=f"text {i}", text_b=None) for i in range(2 * size)]
    digests = [specs._window_digest(rows[:size]), specs._window_digest(rows[size:])]
    assert len(list(specs._checked_windows(iter(rows), len(rows), "FILE", digests, size))) == 2
    swapped = [*rows[:size + 3], rows[size + 4], rows[size + 3], *rows[size + 5:]]   # as many rows, two exchanged
    with pytest.raises(DataError) as exc:
        list(specs._checked_windows(iter(swapped), len(rows), "FILE", digests, size))
    assert str(exc.value).startswith(quoted), (str(exc.value), quoted)
    # the predictions files are written from the ids kept from the first reading, not from a third reading
    assert "The predictions files are written from the ids kept from the first reading (a string a window), not " \
           "from a third reading of the file" in text
    source = inspect.getsource(specs._streamed_examples)
    assert "_WindowIds(" in source and 'read("ids")' not in source


# ------------------------------------------------------------------ validation.md's rows for these checks
_ROWS = [
    ("| a launch of several processes (`pretrain`, `finetune`) |", "albertlm.training.distributed.launch_settings",
     "_refuse_bare_srun_tasks()"),
    ("| a launch of several processes (`pretrain`, `finetune`) |",
     "albertlm.training.distributed._refuse_bare_srun_tasks", "SLURM_STEP_NUM_TASKS"),
    ("| a launch of several processes (`pretrain`, `finetune`) |", "albertlm.training.distributed.attempt_store",
     "PrefixStore"),
    ("| GLUE predictions |", "albertlm.tasks.scoring.score_glue", "skip_bad_rows"),
    ("| `predict` / `evaluate --model` |", "albertlm.tasks.specs._checked_windows", "_window_digest(window)"),
    ("| `predict` / `evaluate --model` |", "albertlm.tasks.specs._same_rows", "changed while it was read"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:24]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_these_checks_point_at_them(row, where, check):
    check_validation_row(row, where, check)


# ------------------------------------------------------------------ what the pages said before these commits
_STALE = [
    ("docs/finetuning.md", "nor a row of the dev file an `evaluate --predictions` file is scored against"),
    ("docs/finetuning.md", "once more for the submission's indexes"),
    ("docs/validation.md", "nor the rows of the dev file a --predictions file is scored against"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_these_commits_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
