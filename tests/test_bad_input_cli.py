"""Bad input through the installed command (`.venv/bin/albertlm` as a subprocess, not only `main(argv)`): one line
`albertlm <cmd>: error: ...` on stderr naming the file and the problem, exit status 2, no traceback, nothing
half-written that looks complete, nothing the user had destroyed. The library side of each case is in
`test_bad_input.py`.

The commands run two at a time in one module fixture, since each one that imports torch costs
seconds; every case is then asserted in its own test.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import SHARED, assert_one_error_line, shared_path

ALBERTLM = Path(sys.executable).parent / "albertlm"  # the command the test environment installed
TIMEOUT = 240  # a hang (the SQuAD windows once looped forever) fails instead of blocking the suite


def _tree_digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Every damaged input the cases below need, plus a tiny model with albert-base-v2's tokenizer."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.interop.hf import export_hf
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("bad-input-cli")
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    squad_dev = shared_path("squad", "dev-v2.0-small.json")
    model = AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_layers=1,
                                             num_heads=2, ffn_size=19, max_position_embeddings=512))
    model.save_pretrained(root / "model")
    shutil.copy(spm, root / "model" / "spiece.model")

    # SQuAD: the files
    data = json.loads(squad_dev.read_text(encoding="utf-8"))
    ids = [q["id"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    broken = json.loads(json.dumps(data))
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"] = "France"
    (root / "answers_string.json").write_text(json.dumps(broken))
    no_qas = json.loads(json.dumps(data))
    for article in no_qas["data"]:
        for paragraph in article["paragraphs"]:
            del paragraph["qas"]
    (root / "no_qas.json").write_text(json.dumps(no_qas))
    (root / "truncated.json").write_text(squad_dev.read_text(encoding="utf-8")[:500])
    (root / "partial.json").write_text(json.dumps(dict.fromkeys(ids[:5], "France")))
    # a 150-token question: with room for fewer tokens than that, main's windows never advanced
    long_question = json.loads(json.dumps(data))
    long_question["data"][0]["paragraphs"][0]["qas"][0]["question"] = "in what country is normandy " * 30
    (root / "long_question.json").write_text(json.dumps(long_question))
    (root / "no_match.json").write_text(json.dumps({"not-a-question": "France"}))
    (root / "latin1.json").write_bytes('{"a": "caf\xe9"}'.encode("latin-1"))

    # GLUE: a dev file with only a header, beside a usable train file; a previous run's results in OUT
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (root / "MRPC").mkdir()
    (root / "MRPC" / "train.tsv").write_text(header + "1\t1\t2\tA cat sat.\tA cat sat down.\n" * 8)
    (root / "MRPC" / "dev.tsv").write_text(header)
    (root / "glue_preds.tsv").write_text("index\tprediction\n0\t1\n")
    (root / "glue_run").mkdir()
    (root / "glue_run" / "metrics.json").write_text('{"best": {"accuracy": 0.9}}\n')

    # classify: a dev file in Latin-1
    (root / "dev.csv").write_bytes("text,label\ncaf\xe9,1\n".encode("latin-1"))
    (root / "preds.tsv").write_text("id\tprediction\n0\t1\n")

    # tokenizers: a truncated model; a directory whose tokenizer_config.json holds a string for a boolean
    (root / "truncated.model").write_bytes(spm.read_bytes()[:5000])
    (root / "tok").mkdir()
    shutil.copy(spm, root / "tok" / "spiece.model")
    (root / "tok" / "tokenizer_config.json").write_text('{"do_lower_case": "false"}')

    # checkpoints: a transformers directory whose pytorch_model.bin is a malicious pickle; a truncated
    # model.safetensors; a TF checkpoint with a truncated data file
    export_hf(model, root / "hf_evil")
    (root / "hf_evil" / "model.safetensors").unlink()
    marker = root / "payload-ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"albert.embeddings.word_embeddings.weight": Payload()}, root / "hf_evil" / "pytorch_model.bin")
    model.save_pretrained(root / "existing_dst")            # what the user had in DST before --force
    shutil.copytree(root / "model", root / "truncated_model")
    weights = root / "truncated_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:2000])
    tf = Path(__file__).parent / "fixtures" / "tf_albert_tiny"
    (root / "tf").mkdir()
    for name in ("albert_config.json", "model.ckpt-0.index"):
        shutil.copy(tf / name, root / "tf" / name)
    data_file = "model.ckpt-0.data-00000-of-00001"
    (root / "tf" / data_file).write_bytes((tf / data_file).read_bytes()[:3000])
    return root


def _cases(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name: (argv after `albertlm`, phrases the error line must hold: the file and the problem). Called at
    collection too (the test ids): the path is named, not checked (`shared_path` would skip the whole collection
    without ../shared); the `inputs` fixture checks it."""
    squad_dev = str(SHARED / "squad" / "dev-v2.0-small.json")
    model = str(root / "model")
    finetune_squad = ["finetune", "squad", "--model", model, "--train", str(root / "long_question.json"),
                      "--dev", squad_dev]
    return {
        # SQuAD files and predictions (the tracebacks)
        "squad answers is a string": (["evaluate", "squad", "--data", str(root / "answers_string.json"),
                                       "--predictions", str(root / "partial.json")],
                                      ["answers_string.json", "'answers' is a string"]),
        "squad without qas": (["evaluate", "squad", "--data", str(root / "no_qas.json"), "--predictions",
                               str(root / "partial.json")], ["no_qas.json", "has no 'qas'"]),
        "squad truncated file": (["evaluate", "squad", "--data", str(root / "truncated.json"), "--predictions",
                                  str(root / "partial.json")], ["truncated.json", "not valid JSON"]),
        "predictions matching no id": (["evaluate", "squad", "--data", squad_dev, "--predictions",
                                        str(root / "no_match.json")], ["no_match.json", "none of its"]),
        "predictions not UTF-8": (["evaluate", "squad", "--data", squad_dev, "--predictions",
                                   str(root / "latin1.json")], ["latin1.json", "not UTF-8"]),
        "v1.1 scoring of a v2.0 file": (["evaluate", "squad", "--version", "1.1", "--data", squad_dev,
                                         "--predictions", str(root / "partial.json")],
                                        ["dev-v2.0-small.json", "v1.1"]),
        # SQuAD settings that made fine-tuning loop forever
        "squad question leaves no room": (finetune_squad + ["--out", str(root / "out_q"), "--max-query-length",
                                                            "200", "--max-seq-length", "128"],
                                          ["max_seq_length=128", "max_query_length=200"]),
        "squad max-seq-length 32": (finetune_squad + ["--out", str(root / "out_32"), "--max-seq-length", "32"],
                                    ["max_seq_length=32", "no room"]),
        "squad doc-stride 0": (finetune_squad + ["--out", str(root / "out_0"), "--doc-stride", "0",
                                                 "--max-seq-length", "96"], ["doc_stride=0"]),
        # GLUE / classify files
        "glue dev file with only a header": (["finetune", "glue", "--task", "mrpc", "--model", model,
                                              "--data-dir", str(root / "MRPC"), "--out", str(root / "glue_run"),
                                              "--overwrite"],
                                             ["dev.tsv", "no examples"]),
        "glue scoring against a header-only dev file": (["evaluate", "glue", "--task", "mrpc", "--dev",
                                                         str(root / "MRPC" / "dev.tsv"), "--predictions",
                                                         str(root / "glue_preds.tsv")], ["dev.tsv", "no examples"]),
        "classify dev file not UTF-8": (["evaluate", "classify", "--data", str(root / "dev.csv"), "--predictions",
                                         str(root / "preds.tsv")], ["dev.csv", "not UTF-8"]),
        # tokenizers
        "truncated tokenizer model": (["tokenizer", "encode", "-t", str(root / "truncated.model")],
                                      ["truncated.model", "cannot read"]),
        "tokenizer option of the wrong type": (["tokenizer", "encode", "-t", str(root / "tok")],
                                               ["tokenizer_config.json", "do_lower_case", "'false'"]),
        # checkpoints
        "malicious pytorch_model.bin": (["convert", str(root / "hf_evil"), str(root / "existing_dst"), "--force"],
                                        ["pytorch_model.bin", "refused"]),
        "truncated model.safetensors": (["convert", str(root / "truncated_model"), str(root / "out_hf"),
                                         "--to", "hf"], ["model.safetensors", "truncated or damaged"]),
        "truncated TF checkpoint": (["convert", str(root / "tf"), str(root / "out_tf")],
                                    ["model.ckpt-0.data-00000-of-00001", "truncated"]),
    }


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(ALBERTLM), *argv], capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(argv, -1, exc.stdout or "", f"TIMEOUT after {TIMEOUT} s (a hang)")


@pytest.fixture(scope="module")
def results(inputs):
    if not ALBERTLM.is_file():
        pytest.skip(f"the albertlm command is not installed beside {sys.executable}")
    before = _tree_digest(inputs / "existing_dst")
    cases = _cases(inputs)
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(cases, pool.map(_run, [argv for argv, _ in cases.values()])))
    return done, before


@pytest.mark.parametrize("name", sorted(_cases(Path("/x"))))
def test_one_line_exit_2_naming_file_and_problem(name, results, inputs):
    done, _ = results
    argv, phrases = _cases(inputs)[name]
    proc = done[name]
    assert_one_error_line(proc, phrases)


def test_nothing_half_written_and_nothing_destroyed(results, inputs):
    done, before = results
    # the refused pickle never ran, and the model the user had in DST is intact (convert failed before writing)
    assert not (inputs / "payload-ran").exists()
    assert _tree_digest(inputs / "existing_dst") == before
    # failed conversions leave no output that looks like a model
    for out in ("out_hf", "out_tf"):
        assert not (inputs / out / "model.safetensors").exists() and not (inputs / out / "config.json").exists()
    # fine-tuning refused its settings / its dev file before any training: no checkpoint, no new metrics,
    # and the previous run's metrics.json is untouched
    for out in ("out_q", "out_32", "out_0"):
        assert not (inputs / out / "best").exists() and not (inputs / out / "metrics.json").exists()
    assert (inputs / "glue_run" / "metrics.json").read_text() == '{"best": {"accuracy": 0.9}}\n'
    assert not (inputs / "glue_run" / "best").exists()
    assert "step" not in done["glue dev file with only a header"].stdout


def test_partial_squad_predictions_warn_on_stderr_and_strict_scores_them_as_wrong(inputs):
    """v2.0 averages over the predicted ids (the official script), so 5 right answers of 14 questions print
    exact 100; the missing ids are named on stderr, and `--strict` scores them as wrong."""
    if not ALBERTLM.is_file():
        pytest.skip(f"the albertlm command is not installed beside {sys.executable}")
    squad_dev = str(shared_path("squad", "dev-v2.0-small.json"))
    data = json.loads(Path(squad_dev).read_text(encoding="utf-8"))
    ids = [q["id"] for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]
    argv = ["evaluate", "squad", "--data", squad_dev, "--predictions", str(inputs / "partial.json")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        plain, strict = pool.map(_run, [argv, argv + ["--strict"]])
    for proc in (plain, strict):
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("albertlm evaluate: warning: "), proc.stderr
        assert "partial.json" in lines[0] and f"no prediction for {len(ids) - 5} of {len(ids)} questions" in lines[0]
        assert ids[5] in lines[0] and ids[-1] not in lines[0]          # the first few ids, not all
    assert "left out of the scores" in plain.stderr and "scored as wrong (strict)" in strict.stderr
    plain_metrics, strict_metrics = json.loads(plain.stdout), json.loads(strict.stdout)
    assert plain_metrics["missing"] == strict_metrics["missing"] == len(ids) - 5
    assert strict_metrics["strict"] is True and "strict" not in plain_metrics
    assert strict_metrics["exact"] == pytest.approx(plain_metrics["exact"] * 5 / len(ids))
