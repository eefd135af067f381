"""Polish audit 24: small user-facing defects.

`predict` / `evaluate --model --out` listed split names under `predictions_written` (`test:test_matched.tsv`, while
the file was `submission/MNLI-m.tsv`): now each split's paths. fill-mask / embed / finetune / predict on a model
path that does not exist said "no such model directory" without the model loader's word that albertlm downloads
nothing (and a TF checkpoint directory was not pointed to `albertlm convert`). benchmarks/assemble_corpus.py run
away from ../shared wrote a corpus without the shared text, exit 0, `shared_text: {}` its only sign. .gitignore
lacked README's outputs (my-spm/, data/, sub/, ours/, hf_dir/, emb.npy, *.onnx). Help: `albertlm tokenizer` did
not name `info`; pretrain, evaluate and ablate printed two "options:" headings; argparse metavars such as
VOCAB_SIZE, TOP_K; finetune's families were described by their own names. A value a `--config` file set that the
config's checks refuse did not name the file; `--data.num_workers 100000` was accepted; a subcommand's usage errors
said `albertlm predict glue: error:` where every other error says `albertlm predict: error:`."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.config.model import ConfigError
from albertlm.config.run import DataConfig
from albertlm.errors import UserError
from conftest import ROOT, assert_one_error, save_tiny_pretrained


def _help(capsys, argv: list[str]) -> str:
    # argparse wraps at $COLUMNS (80 off a terminal): a narrower one split the phrases read here across lines
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit):
        patch.setenv("COLUMNS", "80")
        main([*argv, "--help"])
    return capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------ help
@pytest.mark.parametrize("argv", [["pretrain"], ["evaluate"], ["ablate"]])
def test_help_has_one_options_heading(capsys, argv):
    text = _help(capsys, argv)
    assert text.splitlines().count("options:") == 1, text


def test_the_command_list_names_tokenizer_info(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")         # as `_help`
    assert main(["--help"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("tokenizer "))
    assert "info" in line and "encode" in line and "decode" in line, line


def test_help_metavars_and_subcommand_lines(capsys):
    train = _help(capsys, ["tokenizer", "train"])
    assert "SentencePiece" in train.split("\n\n")[1]      # a description under the usage
    for ugly in ("VOCAB_SIZE", "TEXT_FIELD", "CHARACTER_COVERAGE", "INPUT_SENTENCE_SIZE", "THREADS", "SEED"):
        assert ugly not in train, ugly
    fill = _help(capsys, ["fill-mask"])
    assert "TOP_K" not in fill and "BATCH_SIZE" not in fill and "(default 5)" in fill and "(default 32)" in fill
    assert "MAX_LENGTH" not in _help(capsys, ["embed"])
    for command in ("finetune", "predict"):
        text = _help(capsys, [command])
        assert f"{command} glue" not in text and "SQuAD v1.1 or v2.0" in text, text


# --------------------------------------------------------------------------------------------- error lines
def test_a_subcommands_usage_error_names_the_command_as_other_errors_do(capsys):
    for argv, start in ((["predict", "glue", "--task", "rte"], "albertlm predict: error: the following arguments"),
                        (["tokenizer", "train", "--input", "x", "--bogus"], "albertlm tokenizer: error: ")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith(start) and len(err.splitlines()) == 1, err


# -------------------------------------------------------------------------------------------- --config FILE
def test_a_refused_value_from_a_config_file_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"optim": {"lr": -1}, "model": {"num_heads": 5}}))
    code = main(["pretrain", "--preset", "albert-tiny", "--config", str(bad), "--data", str(tmp_path / "d"),
                 "--out", str(tmp_path / "run"), "--model.num_heads", "2"])
    assert_one_error(capsys, code, f"{bad}: optim.lr=-1.0: must be positive")
    # a section's check names its field without the section (`hidden_size=64: ... num_heads=5`)
    bad.write_text(json.dumps({"model": {"num_heads": 5}}))
    code = main(["pretrain", "--preset", "albert-tiny", "--config", str(bad), "--data", str(tmp_path / "d"),
                 "--out", str(tmp_path / "run")])
    assert_one_error(capsys, code, str(bad), "num_heads=5")
    # the command line's own value is not blamed on the file
    bad.write_text(json.dumps({"optim": {"weight_decay": 0.0}}))
    code = main(["pretrain", "--preset", "albert-tiny", "--config", str(bad), "--lr", "-2", "--data",
                 str(tmp_path / "d"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "optim.lr=-2.0" in err and str(bad) not in err, err
    ft = tmp_path / "ft.json"
    ft.write_text(json.dumps({"train": {"batch_size": 0}}))
    code = main(["finetune", "glue", "--task", "rte", "--data-dir", str(tmp_path), "--model", str(tmp_path / "m"),
                 "--out", str(tmp_path / "ft"), "--config", str(ft)])
    assert_one_error(capsys, code, f"{ft}: train.batch_size=0: must be >= 1")


def test_num_workers_has_an_upper_bound():
    from albertlm.config.run import NUM_WORKERS_LIMIT

    assert DataConfig(num_workers=NUM_WORKERS_LIMIT).num_workers == NUM_WORKERS_LIMIT
    for workers in (-1, 100_000):
        with pytest.raises(ConfigError, match=r"data.num_workers=.*must be in \[0, "):
            DataConfig(num_workers=workers)


# ---------------------------------------------------------------------------------------- model paths
def test_a_missing_model_directory_says_albertlm_downloads_nothing(tmp_path):
    from albertlm.tasks.inference import resolve_checkpoint

    with pytest.raises(UserError, match="albert-base-v2: no such model directory .*downloads nothing.*hf download"):
        resolve_checkpoint(tmp_path / "albert-base-v2")
    tf = ROOT / "tests" / "fixtures" / "tf_albert_tiny"
    if tf.is_dir():
        with pytest.raises(UserError, match="TF checkpoint.*albertlm convert"):
            resolve_checkpoint(tf)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a model directory") as caught:
        resolve_checkpoint(tmp_path / "empty")
    assert "convert" not in str(caught.value)


# ---------------------------------------------------------------------------------------- predictions
def test_predictions_written_are_the_paths_to_open(tmp_path, capsys, one_thread):
    from test_glue_audit20 import MNLI_HEAD, _hf_order_mnli_model

    model = _hf_order_mnli_model(tmp_path / "hf_mnli", save_tiny_pretrained(tmp_path))
    rows = [MNLI_HEAD + ["gold_label"]] + [[i, i, f"{i}e", "fiction", "( a )", "( b )", "(R a)", "(R b)",
                                            "good film", "bad plot", label]
                                           for i, label in enumerate(["entailment", "neutral"])]
    dev, test = tmp_path / "dev_matched.tsv", tmp_path / "test_matched.tsv"
    dev.write_text("\n".join("\t".join(map(str, row)) for row in rows) + "\n")
    test.write_text("\n".join("\t".join(map(str, row[:-1])) for row in rows) + "\n")
    out = tmp_path / "pred"
    argv = ["predict", "glue", "--task", "mnli", "--model", str(model), "--dev", str(dev), "--test", str(test),
            "--out", str(out), "--no-progress"]
    for _ in range(2):          # a second run rewrites the same files: they are still the ones written
        assert main(argv) == 0
        written = json.loads(capsys.readouterr().out)["predictions_written"]
        assert written == {"dev_matched": [str(out / "dev_matched_predictions.tsv")],
                           "test:test_matched.tsv": [str(out / "submission" / "MNLI-m.tsv")]}, written
        assert all(Path(path).is_file() for paths in written.values() for path in paths)


# ---------------------------------------------------------------------------------------- assemble_corpus
def test_assemble_corpus_says_what_is_missing(tmp_path, monkeypatch, capsys):
    from test_assemble_corpus import _module

    module = _module()
    monkeypatch.chdir(tmp_path)                 # no ../shared here: the defaults are missing
    assert module.main(["--out", str(tmp_path / "c"), "--usr-share-doc", ""]) == 2
    err = capsys.readouterr().err
    assert "--shared-text ../shared/data/text: no such folder" in err and "repository root" in err, err
    assert not (tmp_path / "c").exists()        # nothing written
    (tmp_path / "text").mkdir()
    assert module.main(["--out", str(tmp_path / "c"), "--shared-text", str(tmp_path / "text")]) == 2
    assert "holds none of gutenberg/*.txt" in capsys.readouterr().err
    assert module.main(["--out", str(tmp_path / "c"), "--shared-text", "", "--usr-share-doc", ""]) == 2
    assert "--task-text ../shared/data/glue: no such folder" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


# ---------------------------------------------------------------------------------------------- .gitignore
def _pipeline_outputs() -> list[str]:
    """The paths README's command lines write into the checkout: every --out value, and convert's destination."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [block.split("\n", 1)[1] for block in readme.split("```")[1::2] if block.startswith("bash")]
    outputs = []
    for block in blocks:
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            outputs += [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--out" and words[i + 1] != "..."]
            if words[:2] == ["albertlm", "convert"]:
                outputs.append(words[3])
    return outputs


def test_gitignore_covers_what_readmes_commands_write(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the checkout's .git")
    outputs = _pipeline_outputs()
    assert {"my-spm", "data/sop512", "sub/", "emb.npy", "rte.onnx", "ours/", "hf_dir/", "corpus/en"} <= set(outputs)
    paths = [out if Path(out).suffix in (".npy", ".onnx") else f"{out.rstrip('/')}/file" for out in outputs]
    paths += ["rte.int8.onnx", "albert-base-v2/config.json", "demo_run/quick/summary.json"]

    def ignored(path: str) -> bool:
        proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, capture_output=True,
                              text=True)
        if proc.returncode not in (0, 1):       # 128: git refuses this checkout (another owner's, "dubious ownership")
            pytest.skip(f"git check-ignore cannot run in {ROOT}: {proc.stderr.strip()[:300]}")
        return proc.returncode == 0

    assert [path for path in paths if not ignored(path)] == []
    assert not ignored("src/albertlm/data/new_module.py")      # the source folder named data stays visible
