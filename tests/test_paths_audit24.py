"""Audit 24, a Korean or Japanese user's paths: folders and files with Hangul, kana and kanji, spaces, parentheses,
`,` and `=` in their names (`내 프로젝트/데이터 2024/말뭉치 1.txt`, `日本語 データ/model v2/`) through the CLI pipeline;
and an --out the shell left `~` in (`guards.check_home_expanded`). (Names whose bytes are not UTF-8, a CP949 folder
unzipped from a Windows archive, still fail in the compiled libraries albertlm hands paths to: not handled.)"""
from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from conftest import alice_documents
from train_fixtures import TINY_PRETRAIN_ARGS

def _cli(*argv) -> None:
    assert main([str(a) for a in argv]) == 0


def test_the_pipeline_runs_through_hangul_kana_spaces_commas_and_equals_in_paths(tmp_path, capsys, one_thread,
                                                                                 monkeypatch):
    """tokenizer train (SentencePiece, WordPiece) -> data build -> pretrain -> --resume -> evaluate -> info ->
    convert to transformers and back -> fill-mask, every path holding Hangul or kana, spaces, parentheses, `,`
    and `=`: each command ends with 0 and writes where it was told (the names kept byte for byte). Nothing was
    wrong here: a check that it stays so."""
    project = tmp_path / "내 프로젝트" / "데이터 2024"
    project.mkdir(parents=True)
    alice_documents(project, 160).rename(project / "말뭉치 1.txt")
    shutil.copy(project / "말뭉치 1.txt", project / "train (copy).txt")
    japanese = tmp_path / "日本語 データ"
    spm, wp = japanese / "토크나이저 spm, v2=1", japanese / "トークナイザー wp"
    _cli("tokenizer", "train", "--input", f"{project}/", "--vocab-size", 300, "--out", f"{spm}/")
    _cli("tokenizer", "train", "--kind", "wordpiece", "--input", project / "말뭉치 1.txt", "--vocab-size", 300,
         "--out", wp)
    assert (spm / "spiece.model").is_file() and (wp / "vocab.txt").is_file()
    data = japanese / "데이터 sop (64)"
    _cli("data", "build", "--input", project / "말뭉치 1.txt", project / "train (copy).txt", "--tokenizer", spm,
         "--out", data, "--max-seq-length", 32, "--dupe-factor", 1, "--no-progress")
    run = tmp_path / "내 프로젝트" / "실행 run (v2)"
    tiny = [a if a != "4" else "2" for a in TINY_PRETRAIN_ARGS]   # batch 2
    _cli("pretrain", *tiny, "--data", data, "--eval-data", data, "--out", f"{run}/", "--max-steps", 2,
         "--warmup-steps", 1, "--save-every", 2, "--eval-every", 0, "--train.progress=false")
    capsys.readouterr()
    _cli("pretrain", "--out", run, "--resume", "--max-steps", 3, "--train.progress=false")
    # the plot command it prints can be pasted into a shell as it is (it was unquoted)
    assert f"`albertlm plot {shlex.quote(str(run))}` draws the curves" in capsys.readouterr().out
    import matplotlib.figure
    titles = []
    monkeypatch.setattr(matplotlib.figure.Figure, "suptitle", lambda self, text, *a, **k: titles.append(text))
    monkeypatch.chdir(run)
    _cli("plot", ".", "--out", "curves.svg")
    assert titles == ["실행 run (v2)"]                # `plot .` was titled ""
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000002", "step_00000003"]
    assert json.loads((run / "run_config.json").read_text(encoding="utf-8"))["data"]["path"] == str(data.resolve())
    capsys.readouterr()
    _cli("evaluate", f"{run}/", "--data", data, "--json")
    assert "mlm_acc" in json.loads(capsys.readouterr().out)
    _cli("info", run)
    hf, back = japanese / "hf 変換 (transformers)", japanese / "戻り, ours=1"
    _cli("convert", run, hf, "--to", "hf")
    _cli("convert", hf, back)
    assert (back / "model.safetensors").is_file() and (back / "spiece.model").is_file()
    capsys.readouterr()
    _cli("fill-mask", back, "Alice was [MASK].", "--json")
    assert json.loads(capsys.readouterr().out.splitlines()[0])["masks"]


# ------------------------------------------------------------------------------- an unexpanded ~
def test_an_out_the_shell_left_a_tilde_in_is_refused_naming_the_home_path(tmp_path, monkeypatch, capsys):
    """`--out '~/runs'` or `--out=~/runs` (bash and sh expand neither) made a folder named `~` here without a word
    (tokenizer train then wrote into ./~/tok and said `tokenizer not found: /home/.../tok`, as its reload expands
    `~`). A `~` folder that exists is used as it is; `~tmp` naming no user is an ordinary name; `a/~/b` too."""
    from albertlm.cli.guards import check_home_expanded

    monkeypatch.chdir(tmp_path)
    home = os.path.expanduser("~")
    for given in ("~/runs", "~", "~/"):
        with pytest.raises(UserError) as caught:
            check_home_expanded(given, "--out")
        assert f"--out {given}: the shell did not expand '~'" in str(caught.value)
        assert f"write {home}{given[1:]}" in str(caught.value)
    for given in ("runs", "a/~/b", "~no-such-user-albertlm/x", "~no-such-user-albertlm", None):
        check_home_expanded(given, "--out")
    from conftest import assert_one_error
    from test_cliargs_audit23 import _exit_code

    assert_one_error(capsys, _exit_code(["tokenizer", "train", "--input", "x.txt", "--out=~/tok"]),
                     "--out ~/tok: the shell did not expand '~'")
    assert not (tmp_path / "~").exists()
    (tmp_path / "~").mkdir()
    check_home_expanded("~/runs", "--out")
