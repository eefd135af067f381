"""Docs audit 32: docs/{training,model,interop,validation,finetuning}.md against what the thirty-second session made
the code do.

The messages the pages quote are the code's (the TF import's refusal of a config whose layer groups google's float
formula rounds otherwise, the fp16 stop after 24 skipped steps, bf16's emulated-on-an-older-GPU line, the unknown
preset's did-you-mean, predict's refusal of another task's classifier); the configs interop.md lists as refused are
the ones refused; the names the pages give exist (`tf.check_google_layer_groups`, `loop.MAX_OVERFLOWS`,
`precision.warn_emulated_bf16`); what predict / evaluate --help say of their options is what the pages say; a hidden
option is never offered; validation.md's rows point at the functions that check; and no page still says what the
session changed. Function calls and parsers only: a few seconds, CPU-only."""
from __future__ import annotations

import inspect
import types

import pytest
import torch

import test_docs_audit14 as audit14
from albertlm.errors import UserError
from test_docs_audit26 import _flat
from test_docs_audit28 import _quote, check_validation_row

ROOT = audit14.ROOT


# ------------------------------------------------------------------ interop.md: google's layer groups, LAMB slots
def test_the_layer_group_refusal_is_what_interop_md_quotes():
    from albertlm.interop.tf import check_google_layer_groups

    quoted = _quote("docs/interop.md", "google's modeling.py runs layer 30 of 44 with group_14")
    assert quoted.endswith(" ..."), quoted
    with pytest.raises(UserError) as exc:
        check_google_layer_groups(44, 22, "ckpt")
    assert str(exc.value).startswith(f"ckpt: {quoted[:-len(' ...')]}"), str(exc.value)
    assert audit14._resolve("interop.tf.check_google_layer_groups") is check_google_layer_groups
    assert "`tf.check_google_layer_groups`" in _flat("docs/interop.md")


def _refused(layers: int, groups: int) -> bool:
    from albertlm.interop.tf import check_google_layer_groups

    try:
        check_google_layer_groups(layers, groups, "x")
    except UserError:
        return True
    return False


def test_the_configs_interop_md_lists_are_the_first_ones_refused():
    """`L = N = 22, 23, 26, ...; L = 44 with N = 22, L = 46 with N = 23, ...`: the smallest refused, in order; none of
    google's released shapes (12 or 24 layers, one group) is."""
    text = _flat("docs/interop.md")
    assert "(L = N = 22, 23, 26, ...; L = 44 with N = 22, L = 46 with N = 23, ...; none of google's released " \
           "configs)" in text
    same = [n for n in range(1, 40) if _refused(n, n)]
    assert same[:3] == [22, 23, 26], same
    fewer = [(L, N) for L in range(1, 49) for N in range(1, L) if L % N == 0 and _refused(L, N)]
    assert fewer == [(44, 22), (46, 23)], fewer
    assert not any(_refused(L, 1) for L in (12, 24))
    # model.md's sharing section and the interop docstring of test_interop_audit16 say the same
    assert "an exact integer down, L = N = 22 or L = 44 with N = 22: the TF import refuses those" in \
        _flat("docs/model.md")


def test_lamb_slots_are_training_state_as_interop_md_says():
    from albertlm.interop.tf import TRAINING_STATE

    assert "`<var>/lamb_m` and `<var>/lamb_v` (the LAMB slots google's `export_checkpoints.py` leaves out by name;" \
        in _flat("docs/interop.md")
    for slot in ("adam_m", "adam_v", "lamb_m", "lamb_v"):
        assert TRAINING_STATE.search(f"bert/pooler/dense/kernel/{slot}"), slot
    assert not TRAINING_STATE.search("bert/pooler/dense/kernel")


def test_infos_unused_variables_are_said_as_interop_md_quotes():
    from albertlm.cli.model_commands import WITHOUT_POOLER, _in_the_file

    text = _flat("docs/interop.md")
    assert "`the pooler's 1,056 values unused: AlbertForQuestionAnswering has no pooler`" in text
    said = _in_the_file("AlbertForQuestionAnswering", 5000, {"pooler": 1056}, [])
    assert "the pooler's 1,056 values unused: AlbertForQuestionAnswering has no pooler" in said, said
    assert "any other variable the class does not read is `N values in other variables CLASS does not read`" in text
    said = _in_the_file("AlbertForPreTraining", 5000, {"other": 1056}, [])
    assert "1,056 values in other variables AlbertForPreTraining does not read" in said, said
    assert "AlbertForPreTraining" not in WITHOUT_POOLER


# ------------------------------------------------------------------ training.md: fp16 skipped steps, bf16 on GPUs
def test_the_fp16_overflow_stop_is_what_training_md_quotes():
    """The loop's own `_count_overflows` on a stand-in for the loop: steps 3 to 26 skipped from the scaler's initial
    65536 end with the message training.md quotes, with the scale it names."""
    from albertlm.training import loop as loop_module
    from albertlm.training.loop import Loop, TrainingDiverged

    quoted = _quote("docs/training.md", "fp16 loss scaling skipped 24 steps in a row")
    assert quoted.endswith("; stopped, ..."), quoted
    assert loop_module.MAX_OVERFLOWS == 24 and TrainingDiverged.exit_code == 3
    assert torch.amp.GradScaler("cpu").get_scale() == 65536.0
    assert "`loop.MAX_OVERFLOWS` = 24 steps skipped in a row" in _flat("docs/training.md")
    stand_in = types.SimpleNamespace(_last_scale=65536.0, _overflows=0, state=types.SimpleNamespace(step=2),
                                     _diverged=lambda what: TrainingDiverged(what))
    scale = 65536.0
    with pytest.raises(TrainingDiverged) as exc:
        for _ in range(loop_module.MAX_OVERFLOWS):
            scale /= 2
            Loop._count_overflows(stand_in, scale)
            stand_in.state.step += 1
    assert str(exc.value) == quoted[:-len("; stopped, ...")], str(exc.value)
    assert "f\"{what}; stopped, and that step is not saved" in inspect.getsource(Loop._diverged)


def test_bf16_on_an_older_gpu_is_warned_as_the_pages_say(monkeypatch, capsys):
    from albertlm.training import precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    precision.warn_emulated_bf16("bf16", torch.device("cuda", 0))
    err = capsys.readouterr().err
    assert "cuda:0 has compute capability 7.0" in err and "slower than fp16 here: use --precision fp16" in err, err
    assert "on a GPU before Ampere (compute capability below 8.0: T4, V100), runs emulated: one warning line says " \
           "so, slower than fp32 on the CPU, than fp16 on the GPU (`use --precision fp16`; " \
           "`precision.warn_emulated_bf16`)" in _flat("docs/training.md")
    assert audit14._resolve("training.precision.warn_emulated_bf16") is precision.warn_emulated_bf16
    assert "on a GPU before Ampere, compute capability below 8.0 such as T4 or V100, emulated, slower than fp16" in \
        _flat("docs/interop.md")
    assert "or on a GPU before Ampere (compute capability below 8.0: T4, V100), in emulated bf16, slowly" in \
        _flat("docs/finetuning.md")


# ------------------------------------------------------------------ model.md: presets
def test_the_unknown_preset_line_and_preset_copies_are_what_model_md_says():
    from albertlm.config.model import ConfigError
    from albertlm.config.presets import PRESETS, get_preset

    quoted = _quote("docs/model.md", "unknown preset 'ALBERT-BASE'")
    assert quoted.endswith("; presets: ..."), quoted
    with pytest.raises(ConfigError) as exc:
        get_preset("ALBERT-BASE")
    assert str(exc.value).startswith(quoted[:-len(" ...")]), str(exc.value)
    assert "`PRESETS[name].config`, the table's row with `paper_params` and `source`, is a fresh copy too" in \
        _flat("docs/model.md")
    row = PRESETS["albert-base"]    # each lookup: the row with a fresh copy of its config
    assert row.config is not PRESETS["albert-base"].config and row.config == get_preset("albert-base")
    assert row.paper_params == 12 and row.source


# ------------------------------------------------------------------ finetuning.md / validation.md: predict, evaluate
def test_the_refusal_of_another_tasks_classifier_is_what_finetuning_md_quotes():
    from albertlm.tasks.finetune import check_task_head

    quoted = _quote("docs/finetuning.md", "its classifier has 1 output(s)")
    assert quoted == "its classifier has 1 output(s), the task 2", quoted
    source = inspect.getsource(check_task_head)
    assert "its classifier has \"\n" in source and "{config.num_labels} output(s), the task {num_labels}" in source
    assert "its classifier was trained as \"" in source


@pytest.mark.parametrize("command, said", [
    ("predict", "they get no prediction and are not scored; test rows are never skipped"),
    ("evaluate", "with --predictions the gold file's are skipped as predict --skip-bad-rows skipped them")])
def test_predict_and_evaluate_skip_bad_rows_help_is_what_finetuning_md_says(command, said, capsys):
    from test_ftfix_audit32 import _help, _option_help

    text = _help([command, "glue"], capsys)
    assert said in _option_help(text, "--skip-bad-rows [BOOL]", "evaluation options:")
    for flag in ("--skip-bad-rows", "--precision", "--train.progress"):
        assert flag in audit14._options(audit14._subparsers(audit14._parser(command, ["glue"]))["glue"])
    page = _flat("docs/finetuning.md")
    assert "says what `--skip-bad-rows` (GLUE), `--precision` and `--train.progress` do for these commands" in page
    assert "which get no prediction and are not scored, never a test row; `evaluate --predictions FILE " \
           "--skip-bad-rows` skips the gold file's malformed rows the same way" in page


def test_a_hidden_option_is_never_offered_as_the_pages_say(capsys):
    from test_ftfix_audit32 import _usage_error

    assert "never a hidden one (a misspelling of predict's `--train`, an option it takes and ignores, was offered " \
           "it)" in _flat("docs/validation.md")
    assert "(and never offered by a `did you mean`: a misspelling of it was)" in _flat("docs/finetuning.md")
    assert _usage_error(["predict", "glue", "--model", "M", "--out", "o", "--trai", "x"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --trai x" in err and "--train" not in err, err


# ------------------------------------------------------------------ validation.md's rows for this session's checks
_ROWS = [
    ("| `predict` / `evaluate --model` |", "albertlm.tasks.finetune.check_task_head", "output(s), the task"),
    ("| an unrecognized argument |", "albertlm.cli.main._unknown_option_hint", "argparse.SUPPRESS"),
    ("| `finetune --model` a run of another task |", "albertlm.tasks.finetune.load_model", "_fresh_as_pretrained"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:24]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


# ------------------------------------------------------------------ what the pages said before this session
_STALE = [
    ("docs/interop.md", "Layer l uses group `l * N // L` in both codes"),
    ("docs/model.md", "Layer l belongs to group l·N // L (google-research's rule)"),
    ("docs/interop.md", "(on a CPU without bf16 instructions emulated, slower than fp32, with predict's one-line "
                        "warning)"),
    ("docs/finetuning.md", "would then predict on a CPU without bf16 instructions in emulated bf16, slowly."),
    ("docs/model.md", "so changing what it gives never changes the preset) / `get_preset(name, **overrides)`: "),
    ("tests/test_interop_audit16.py", "runs layer l on group l * N // L for any num_hidden_groups"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_this_session_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
