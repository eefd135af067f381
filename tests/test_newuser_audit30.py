"""A new user's clone, README top to bottom (audit 30): every pipeline command run (shrunk where long) on the shared
data, `python -m albertlm.demo --quick` run twice (the same numbers), the full demo's stages 1-3 against README's
sample (3875 / 249 documents, 26907 / 581 sequences, baseline 4.4%). Found: `--out` given a folder of the user's
own whose names are the demo's (`run/`, `corpus/`, `tokenizer/`) was taken for an earlier demo's, and the demo
deleted the user's run and overwrote their text; `--out FILE` was said to "hold other files"; README said the
unsuffixed presets have no dropout (`bert-base` has BERT's 0.1); README gained `albertlm plot` of several runs. No
training: the demo's stages are stand-ins; seconds, CPU-only."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from albertlm import demo
from albertlm.cli.main import main
from conftest import ROOT
from test_readme_audit21 import _corpus_stand_in

README = (ROOT / "README.md").read_text(encoding="utf-8")


class _Started(Exception):
    """Raised by the stand-in first stage: the demo accepted its --out and began writing there."""


def _first_stage_stops(monkeypatch) -> None:
    def started(*args, **kwargs):
        raise _Started

    monkeypatch.setattr(demo, "write_corpus", started)


def _refused(capsys, out: Path) -> str:
    code = demo.main(["--quick", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("albertlm demo: error: --out ") and err.count("\n") == 1, err
    return err


# ------------------------------------------------------------------------------------------ the demo's --out
@pytest.mark.parametrize("mine", ["run/metrics.jsonl", "corpus/train.txt", "tokenizer/spiece.model",
                                  "data/train/meta.json"])
def test_a_folder_of_the_users_own_under_the_demos_names_is_refused(monkeypatch, tmp_path, capsys, mine):
    """`python -m albertlm.demo --out work` where `work/run` was the user's own pretraining run (`albertlm pretrain
    --out work/run`): the names run/, corpus/, tokenizer/, data/ are the demo's, so the folder was taken for an
    earlier demo's; the demo overwrote work/corpus/train.txt with its own text and deleted work/run (found with a
    real `--quick` run). Nothing is written now, and the user's file is as it was."""
    _first_stage_stops(monkeypatch)
    out = tmp_path / "work"
    (out / mine).parent.mkdir(parents=True)
    (out / mine).write_text("the user's own")
    err = _refused(capsys, out)
    assert "nothing there says a demo wrote them" in err and f"{mine.split('/')[0]}/" in err, err
    assert (out / mine).read_text() == "the user's own"
    assert sorted(p.name for p in out.iterdir()) == [mine.split("/")[0]]        # no mark, no summary written


def test_out_naming_a_file_says_it_is_a_file(monkeypatch, tmp_path, capsys):
    """`--out README.md` was told it "holds other files than an earlier demo's (corpus, data, ...)"."""
    _first_stage_stops(monkeypatch)
    path = tmp_path / "README.md"
    path.write_text("# mine")
    err = _refused(capsys, path)
    assert "is a file, not a directory" in err and "holds" not in err, err
    assert path.read_text() == "# mine"


def _old_demo_with_summary(out: Path) -> None:
    """A demo's folder from before the mark, finished: its summary.json beside its stages' folders."""
    for name in ("corpus", "tokenizer", "data", "run"):
        (out / name).mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps({"steps": 4000}))


def _old_demo_stopped_in_pretraining(out: Path) -> None:
    """A demo's folder from before the mark, stopped in pretraining: no summary, its run's config says "demo"."""
    (out / "run").mkdir(parents=True)
    (out / "corpus").mkdir()
    (out / "run" / "run_config.json").write_text(json.dumps({"preset": "demo", "model": {}}))


@pytest.mark.parametrize("earlier", [_old_demo_with_summary, _old_demo_stopped_in_pretraining])
def test_an_earlier_demos_folder_is_still_replaced(monkeypatch, tmp_path, earlier):
    """(Passes before the change too: what the stricter check must keep accepting.)"""
    _first_stage_stops(monkeypatch)
    out = tmp_path / "demo_run"
    earlier(out)
    with pytest.raises(_Started):
        demo.run_demo(out, quick=False)
    assert (out / demo.MARK).is_file() and not (out / "summary.json").exists()


def test_a_demo_stopped_before_pretraining_is_known_by_its_mark(monkeypatch, tmp_path):
    """A demo stopped in its tokenizer stage leaves corpus/ and no summary.json (the demo deletes the last one as it
    starts); its mark, written before anything else, makes the next run accept the folder."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    out = tmp_path / "demo_run"
    monkeypatch.setattr(demo, "write_corpus", _corpus_stand_in)
    monkeypatch.setattr(demo, "train_tokenizer", interrupted)
    assert demo.main(["--out", str(out)]) == 130
    assert sorted(p.name for p in out.iterdir()) == [demo.MARK, "corpus"]
    _first_stage_stops(monkeypatch)
    with pytest.raises(_Started):
        demo.run_demo(out, quick=False)


def test_the_full_demos_folder_holding_only_the_quick_demos_is_accepted(monkeypatch, tmp_path):
    """`make demo` after `python -m albertlm.demo --quick` (whose default folder is demo_run/quick)."""
    _first_stage_stops(monkeypatch)
    out = tmp_path / "demo_run"
    (out / "quick" / "run").mkdir(parents=True)
    with pytest.raises(_Started):
        demo.run_demo(out, quick=False)


# --------------------------------------------------------------------------------------------------- README
def _pipeline_line(start: str) -> list[str]:
    block = README.split("## The pipeline from the command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith(start)]
    assert len(lines) == 1, (start, lines)
    return shlex.split(lines[0], comments=True)


def test_readmes_plot_of_several_runs_draws_them_in_one_figure(monkeypatch, tmp_path, capsys):
    """README shows `albertlm plot` comparing runs (the command takes several since 541b45d): run as written on
    two runs' records, it writes the one figure README names (under runs/, which .gitignore keeps out of git)."""
    words = _pipeline_line("albertlm plot runs/lr1 ")
    assert "several runs in one figure" in README
    runs, out = words[2:words.index("--out")], words[words.index("--out") + 1]
    assert len(runs) == 2 and out.startswith("runs/"), words
    monkeypatch.chdir(tmp_path)
    for lr, run in zip((1e-3, 2e-3), runs):
        Path(run).mkdir(parents=True)
        records = [{"step": step, "split": "train", "loss": 9.0 - step * lr, "mlm_loss": 8.0, "lr": lr * step / 4}
                   for step in (1, 2, 3, 4)]
        Path(run, "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(words[1:]) == 0
    assert capsys.readouterr().out.strip() == out and Path(out).stat().st_size > 1000


def test_readme_says_which_presets_have_dropout():
    """README: "`-v1` presets use hidden and attention dropout 0.1 ..., `-v2` (and the unsuffixed names) none", but
    `bert-base`, `bert-large` and `bert-xlarge` (unsuffixed) keep BERT's 0.1. Every preset against README's rule."""
    from albertlm.config.presets import PRESETS, get_preset

    text = " ".join(README.split())
    assert "(and the unsuffixed `albert-*` names) none" in text
    assert "`bert-base`, `bert-large` and `bert-xlarge` keep BERT's 0.1 (the two tiny presets none)" in text
    for name in PRESETS:
        config = get_preset(name)
        if name.endswith("-tiny") or name == "albert-xxlarge-v1" or re.fullmatch(r"albert-\w+(-v2)?", name):
            expected = 0.0
        else:                                                  # albert-*-v1 and the BERT presets
            expected = 0.1
        assert (config.hidden_dropout, config.attention_dropout) == (expected, expected), name
