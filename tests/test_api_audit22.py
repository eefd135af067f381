"""albertlm as a library inside a larger program or a notebook (audit, session 22): process-wide state a library
call changed and left changed, and the optimizer's checks as torch's own. Each test failed before its fix.

Reading a CSV/TSV table (classify's, RACE's Hugging Face export) raised the csv module's field limit to 2**31-1
for the whole process and never put it back: the program's own csv reading after it accepted 2 GB fields.
`evaluate_checkpoint` loaded the model with the caller's generator (a module initialises its weights before the
checkpoint's are read), so a notebook's `torch.rand` after an evaluation differed from the one without it.
`Lamb(params, lr=float("nan"))` was accepted (every weight NaN at the first step), `betas=(0.9,)` failed at the
first step ("not enough values to unpack"), a sparse gradient failed inside a foreach kernel.
"""
from __future__ import annotations

import csv

import pytest
import torch

from albertlm.tasks import tables
from albertlm.training.lamb import Lamb

CSV_DEFAULT = 131072


@pytest.fixture
def csv_limit():
    """csv's own default field limit for the test, and the process's limit back after it."""
    before = csv.field_size_limit(CSV_DEFAULT)
    yield
    csv.field_size_limit(before)


# ------------------------------------------------------------------------------------------- csv field limit
@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_reading_a_table_leaves_the_csv_field_limit_as_the_program_set_it(tmp_path, suffix, csv_limit):
    """A 200 kB field is still read (the reason the limit is raised), but only while our reader reads a row: the
    program's limit holds between rows and after, and a field over it is refused in its own csv reading."""
    long_text = "word " * 40_000
    path = tmp_path / f"t{suffix}"
    sep = "," if suffix == ".csv" else "\t"
    path.write_text(sep.join(["text", "label"]) + "\n" + sep.join([long_text, "a"]) + "\n"
                    + sep.join(["short", "b"]) + "\n", encoding="utf-8")
    records = tables.read_records(path)
    line, first = next(records)
    assert (line, len(first["text"]), first["label"]) == (2, len(long_text), "a")
    assert csv.field_size_limit() == CSV_DEFAULT        # between two rows: the notebook's own csv code runs here
    assert [record["label"] for _, record in records] == ["b"]
    assert csv.field_size_limit() == CSV_DEFAULT
    with path.open(encoding="utf-8", newline="") as handle, pytest.raises(csv.Error, match="field limit"):
        list(csv.reader(handle, delimiter=sep))


# ------------------------------------------------------------------------------------- the caller's generator
def test_evaluating_a_checkpoint_does_not_move_the_callers_random_stream(tmp_path, one_thread):
    """`torch.manual_seed(0); evaluate_checkpoint(...); torch.rand(3)` gave other numbers than
    `torch.manual_seed(0); torch.rand(3)`: loading the model drew the initial weights of every module from the
    caller's generator (session 20 kept only the evaluation's own seeding away from it)."""
    from albertlm.config.presets import get_preset
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.training.evaluate import evaluate_checkpoint
    from train_fixtures import alice_sop_data

    data = alice_sop_data(tmp_path, lines=60)
    AlbertForPreTraining(get_preset("albert-tiny", vocab_size=30000)).save_pretrained(tmp_path / "model")
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert "mlm_acc" in evaluate_checkpoint(tmp_path / "model", data, batch_size=4, max_batches=1)
    assert torch.equal(torch.rand(3), expected)


# -------------------------------------------------------------------------------------------------- LAMB
@pytest.mark.parametrize("options", [dict(lr=float("nan")), dict(eps=float("nan")),
                                     dict(weight_decay=float("nan")), dict(betas=(0.9,))])
def test_lamb_refuses_what_torchs_optimizers_refuse(options):
    """NaN passed the `lr <= 0` check (NaN weights after one step); one beta failed only at the first step."""
    weight = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match="bad LAMB hyper-parameters"):
        Lamb([weight], **options)


def test_lamb_names_a_sparse_gradient():
    """nn.Embedding(sparse=True): "Could not run 'aten::lerp_.Scalar' with arguments from the 'SparseCPU'
    backend", with nothing about what to do; torch's Adam says it does not support sparse gradients."""
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    before = embedding.weight.detach().clone()
    optimizer = Lamb(embedding.parameters())
    embedding(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="Lamb does not support sparse gradients"):
        optimizer.step()
    assert torch.equal(embedding.weight.detach(), before)


# ------------------------------------------------------------- training from Python (fixes in files not this audit's)
def _stream_after(call) -> torch.Tensor:
    """torch.rand(3) after `torch.manual_seed(0); call()`."""
    torch.manual_seed(0)
    call()
    return torch.rand(3)


def test_pretraining_from_python_does_not_move_the_callers_random_stream(tmp_path, one_thread):
    from dataclasses import replace

    from albertlm.config.run import DataConfig
    from albertlm.training.pretrain import pretrain
    from train_fixtures import alice_sop_data, tiny_run

    run = tiny_run(max_steps=2, batch_size=4, dropout=0.1)
    run = replace(run, model=replace(run.model, vocab_size=30000),
                  data=DataConfig(path=str(alice_sop_data(tmp_path, lines=60))))
    assert torch.equal(_stream_after(lambda: pretrain(run, tmp_path / "run")), _stream_after(lambda: None))


def test_fine_tuning_from_python_does_not_move_the_callers_random_stream(tmp_path, one_thread):
    from albertlm.tasks.finetune import run_finetune
    from conftest import save_tiny_pretrained
    from train_fixtures import StubTokenizer, finetune_config, synthetic_task

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    fine_tune = lambda: run_finetune(synthetic_task(), model, StubTokenizer(), finetune_config(max_steps=2),  # noqa: E731
                                     tmp_path / "out", log=lambda *_: None)
    assert torch.equal(_stream_after(fine_tune), _stream_after(lambda: None))
