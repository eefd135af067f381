"""Lead's own fixes and follow-ups of session 28.

1. A corpus file compressed in a format the reader does not decompress (lz4, Unix compress `.Z`, lzip, lzop) was
   skipped as "NUL bytes ... not text (convert other text to UTF-8)" when its head held NUL bytes, and read as
   garbage text (replacement characters built into the data) when it held none, as short lz4 frames can. It is
   named by its magic bytes, with what to do, and never read.
2. Fine-tuning's "cannot write the best model" error named the folder as given (relative), pretraining's
   checkpoint errors name it absolutely: now both do.
3. A LOCAL_RANK left in the shell (LOCAL_RANK=1 with no WORLD_SIZE, or past it) made every error of every
   command silent (exit 2, no line): such a process is outside a launch and reports.
4. `tokenizer train --kind wordpiece --vocab-size 6` wrote 7 tokens (the trainer keeps a character as a word start
   and as its ## continuation), past the documented "never exceeds --vocab-size": refused below 7.
5. `export onnx DIR/` printed the tokenizer export's warnings (a BPE model has no tokenizer.json) inside stdout's
   summary; they go to stderr as `albertlm export: warning: ...`, as convert's do since this session.
6. `albertlm info` did not say what a fine-tuned model is for: a classifier's labels and problem type, and the
   fine-tuning's family, task and length (the first things checked after a conversion): said now, and in --json.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from albertlm.data.corpus import CorpusCounts, binary_reason, read_documents
from conftest import shared_path
from test_hf_audit28 import bpe_spiece  # noqa: F401  (a fixture)

UNREAD = {"lz4": b"\x04\x22\x4d\x18", "Unix compress": b"\x1f\x9d\x90", "lzip": b"LZIP\x01", "lzop": b"\x89LZO\x00"}


@pytest.mark.parametrize("name", sorted(UNREAD))
@pytest.mark.parametrize("with_nul", [True, False])
def test_unread_compressions_are_named_and_not_read(tmp_path: Path, name: str, with_nul: bool) -> None:
    body = (bytes(range(256)) * 4) if with_nul else b"hello world, some words of text\n" * 8
    head = UNREAD[name] + body
    reason = binary_reason(head)
    assert reason is not None and reason.startswith(name) and "not read" in reason and "gzip" in reason
    text = tmp_path / "a.txt"
    text.write_text(shared_path("text", "sample_text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    packed = tmp_path / "b.txt.x"
    packed.write_bytes(head)
    counts = CorpusCounts()
    docs = list(read_documents([text, packed], counts=counts))
    assert counts.binary_files == 1
    assert all("\ufffd" not in line and "hello world" not in line for doc in docs for line in doc.sentences)
    assert name in counts.describe_skipped()


def test_text_starting_like_no_magic_is_still_text() -> None:
    assert binary_reason(b"LZ is a family of compressors\n") is None
    assert binary_reason("\u00e9t\u00e9 sans compression\n".encode()) is None


# -- 2. fine-tuning's best-model write error names the folder absolutely, as pretraining's checkpoint errors do ----
def test_best_model_write_error_names_the_absolute_folder(tmp_path: Path, monkeypatch) -> None:
    from albertlm.errors import UserError
    from albertlm.tasks import finetune

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(finetune, "_write_best", full_disk)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    with pytest.raises(UserError) as caught:
        finetune.save_best(None, None, None, Path("run") / "best", step=3)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path.resolve() / 'run' / 'best'}: cannot write the best model"), message
    assert "previous best is unchanged" in message and not list((tmp_path / "run").iterdir())


# -- 3. a stray LOCAL_RANK outside a launch does not silence errors -----------------------------------------------
@pytest.mark.parametrize("env, speaks", [({"LOCAL_RANK": "1"}, True), ({"LOCAL_RANK": "1", "WORLD_SIZE": "1"}, True),
                                         ({"LOCAL_RANK": "2", "WORLD_SIZE": "2"}, True),
                                         ({"LOCAL_RANK": "1", "WORLD_SIZE": "2", "RANK": "1"}, False),
                                         ({"LOCAL_RANK": "0", "WORLD_SIZE": "2", "RANK": "1"}, True),
                                         ({"RANK": "1", "WORLD_SIZE": "2"}, False), ({"RANK": "1"}, True)])
def test_reports_here_outside_a_launch(monkeypatch, env: dict, speaks: bool) -> None:
    from albertlm.errors import reports_here

    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert reports_here() is speaks


def test_a_stray_local_rank_still_prints_the_error_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")}
    env["LOCAL_RANK"] = "1"
    done = subprocess.run([sys.executable, "-m", "albertlm", "pretrain", "--out", "x", "--max-steps", "1.5"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)   # a hang guard
    assert done.returncode == 2 and "--max-steps" in done.stderr and "cannot read '1.5'" in done.stderr, done.stderr


# -- 4. a WordPiece vocabulary never exceeds --vocab-size ------------------------------------------------------------
def test_wordpiece_vocab_size_below_seven_is_refused_and_seven_fits(tmp_path: Path, capsys) -> None:
    from albertlm.cli.main import main
    from albertlm.tokenization import load_tokenizer
    from conftest import assert_one_error

    text = tmp_path / "a.txt"
    text.write_text(shared_path("text", "sample_text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    args = ["tokenizer", "train", "--kind", "wordpiece", "--input", str(text)]
    assert_one_error(capsys, main([*args, "--out", str(tmp_path / "six"), "--vocab-size", "6"]), "at least 7")
    assert not (tmp_path / "six" / "vocab.txt").exists()
    assert main([*args, "--out", str(tmp_path / "seven"), "--vocab-size", "7"]) == 0
    assert load_tokenizer(tmp_path / "seven").vocab_size <= 7


# -- 5. export onnx DIR/: the tokenizer's warnings on stderr, in the command's warning form ------------------------
def test_export_onnx_directory_says_the_tokenizer_warning_on_stderr(bpe_spiece, tmp_path: Path, capsys,
                                                                     one_thread) -> None:
    pytest.importorskip("onnx")
    from albertlm.cli.main import main
    from test_followups_audit18 import _tiny_pretrained

    src = _tiny_pretrained(tmp_path / "m", 300)
    capsys.readouterr()
    assert main(["export", "onnx", str(src), "--out", str(tmp_path / "served"), "--tokenizer", str(bpe_spiece)]) == 0
    out, err = capsys.readouterr()
    assert "warning:" not in out, out
    said = [line for line in err.splitlines() if "warning:" in line]
    assert len(said) == 1 and said[0].startswith("albertlm export: warning: no tokenizer.json: a BPE"), err


# -- 6. info says a classifier's labels and a fine-tuned model's task ------------------------------------------------
def test_info_names_labels_and_fine_tuning(tmp_path: Path, capsys) -> None:
    import json

    from albertlm.cli.main import main
    from test_hf_parity import hf_config, hf_model

    hf = hf_model("AlbertForSequenceClassification", hf_config(num_hidden_layers=2, num_labels=3,
                                                                   id2label={0: "모순", 1: "중립", 2: "함의"}))
    hf.save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "labels: 0 = 모순, 1 = 중립, 2 = 함의" in out, out
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours"), "--to", "albertlm"]) == 0
    (tmp_path / "ours" / "task.json").write_text(json.dumps({"family": "classify", "max_seq_length": 32,
                                                             "labels": ["모순", "중립", "함의"]}))
    capsys.readouterr()
    assert main(["info", str(tmp_path / "ours"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["task"] == {"family": "classify", "max_seq_length": 32}
    assert info["labels"]["id2label"] == {"0": "모순", "1": "중립", "2": "함의"}
    assert main(["info", str(tmp_path / "ours")]) == 0
    assert "fine-tuned: classify, max_seq_length 32" in capsys.readouterr().out


# -- 7. export_hf on a full disk from Python: one UserError; the best model's reason without the temporary path ------
def _full_disk_safetensors(monkeypatch) -> None:
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)


def test_export_hf_on_a_full_disk_is_a_user_error(tmp_path: Path, monkeypatch, tiny_config) -> None:
    from albertlm.errors import UserError
    from albertlm.interop.hf import export_hf
    from albertlm.model.albert import AlbertForPreTraining

    _full_disk_safetensors(monkeypatch)
    with pytest.raises(UserError, match=r"cannot write .*hf: No space left on device"):
        export_hf(AlbertForPreTraining(tiny_config), tmp_path / "hf")


def test_best_model_full_disk_reason_is_the_systems_words(tmp_path: Path, monkeypatch, tiny_config) -> None:
    from albertlm.errors import UserError
    from albertlm.model.albert import AlbertForPreTraining
    from albertlm.tasks import finetune

    _full_disk_safetensors(monkeypatch)
    monkeypatch.setattr(finetune, "_write_best", lambda model, *a, **k: model.save_pretrained(tmp_path / "x"))
    with pytest.raises(UserError) as caught:
        finetune.save_best(AlbertForPreTraining(tiny_config), None, None, tmp_path / "best", step=1)
    assert "(No space left on device; is the disk full?)" in str(caught.value), caught.value


# -- 8. paper.md's three seeds at 4x agree with their per-seed rows -------------------------------------------------
def test_paper_md_third_seed_at_4x_follows_from_the_seed_rows() -> None:
    from test_docs_audit27 import _raw_section, _seed_rows

    sop_nsp = _raw_section("docs/paper.md", "### SOP and NSP with four times the tokens",
                           "### The None model with four times the tokens")
    none = _raw_section("docs/paper.md", "### The None model with four times the tokens",
                        "### A third seed of the three models")
    third = _raw_section("docs/paper.md", "### A third seed of the three models", "### A fourth seed of the three models")
    seeds = {"None": {**_seed_rows(none, "None"), **_seed_rows(third, "None")},
             "NSP": {**_seed_rows(sop_nsp, "NSP"), **_seed_rows(third, "NSP")},
             "SOP": {**_seed_rows(sop_nsp, "SOP"), **_seed_rows(third, "SOP")},
             "scratch": {**_seed_rows(sop_nsp, "scratch"), **_seed_rows(third, "scratch")}}
    check_seed_means(third, seeds, (1, 2, 3))
    assert min(seeds["None"].values()) > max(seeds["scratch"].values())   # claim 5 with every seed


def check_seed_means(table: str, seeds: dict[str, dict[int, float]], numbers: tuple[int, ...]) -> None:
    """The means table in paper.md section `table` (mean ± sd (seeds), Δ over scratch) follows from the per-seed Avg
    rows `seeds` of seeds `numbers`, and README quotes each mean ± sd (the 4x sections, sessions 28 and later)."""
    import statistics

    from test_docs_audit27 import _flat, _rows

    assert all(set(avgs) == set(numbers) for avgs in seeds.values()), seeds
    scratch = statistics.mean(seeds["scratch"].values())
    readme = _flat("README.md")
    for model in ("None", "NSP", "SOP"):
        (row,) = [row for row in _rows(table, model) if "±" in row[1]]
        mean, sd = (float(x) for x in row[-2].split(" (")[0].split(" ± "))
        listed = [float(x) for x in row[-2].split(" (")[1].rstrip(")").split(", ")]
        values = [seeds[model][seed] for seed in numbers]
        assert listed == values, (model, listed, values)
        assert abs(statistics.mean(values) - mean) <= 0.06 and abs(statistics.stdev(values) - sd) <= 0.06, model
        assert float(row[-1]) == pytest.approx(mean - scratch, abs=0.11), model
        assert f"{model} {mean} ± {sd}" in readme, model
