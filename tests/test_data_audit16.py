"""Audit 16 of `albertlm data build|inspect|stats` on the real data of ../shared/data: unknown tokens were never
counted (every “ ” of the Chinese news became [UNK] without a word), the merged metas of a --num-shards build
counted the corpus K times, a damaged shard crashed `inspect`/`stats`, Ctrl-C with --workers printed a
traceback per worker and a worker killed by the system a BrokenProcessPool traceback, a stopped build's
directory gave no hint, and JSONL type names were Python's."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from conftest import ROOT, assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")
ZH_NEWS = ("text", "zh", "news_zh_1.txt")


def _build(inputs, out: Path, tokenizer=SPM, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*tokenizer)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress", *extra])


def _meta(out: Path) -> dict:
    return json.loads((out / "meta.json").read_text())


# -- 1. unknown tokens are counted, recorded and warned about ------------------------------------------------
def test_unknown_tokens_are_counted_recorded_and_warned_about_on_chinese_news(tmp_path, capsys):
    from albertlm.data.corpus import read_documents
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(shared_path(*ZH_VOCAB))
    sentences = [s for doc in read_documents([shared_path(*ZH_NEWS)]) for s in doc.sentences]
    ids = tok.encode_batch(sentences)
    expected_unk, expected_total = sum(row.count(tok.unk_id) for row in ids), sum(map(len, ids))
    assert expected_unk > 100                                   # the curly quotes of the news text

    assert _build([shared_path(*ZH_NEWS)], tmp_path / "zh", ZH_VOCAB, "--chunk-chars", "4000") == 0
    err = capsys.readouterr().err
    assert f"unknown tokens ([UNK]) {expected_unk:,} of {expected_total:,} tokens of text" in err, err
    warnings = [line for line in err.splitlines() if line.startswith("albertlm data: warning:")]
    assert len(warnings) == 1 and "[UNK]" in warnings[0] and "“" in warnings[0] and "”" in warnings[0], err
    inst = _meta(tmp_path / "zh")["counts"]["instances"]
    assert inst["unk_tokens"] == expected_unk and inst["text_tokens"] == expected_total
    assert inst["unk_token"] == "[UNK]" and inst["unk_characters"]["“"] > 10 and inst["unk_characters"]["”"] > 10
    # the same counts (and bytes) with worker processes
    assert _build([shared_path(*ZH_NEWS)], tmp_path / "zh2", ZH_VOCAB, "--chunk-chars", "4000", "--workers", "2") == 0
    capsys.readouterr()
    assert (tmp_path / "zh2" / "meta.json").read_bytes().replace(b"zh2", b"zh") == \
        (tmp_path / "zh" / "meta.json").read_bytes()
    # `data stats` counts them in the records
    assert main(["data", "stats", str(tmp_path / "zh")]) == 0
    assert "unknown tokens" in capsys.readouterr().out
    assert main(["data", "stats", str(tmp_path / "zh"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["unk_tokens"] > 0 and 0 < stats["unk_rate"] < 0.1


def test_a_small_unknown_share_is_reported_without_a_warning(tmp_path, capsys):
    assert _build([shared_path("text", "sample_text.txt")], tmp_path / "en") == 0
    err = capsys.readouterr().err
    assert "unknown tokens (<unk>) " in err and "warning" not in err, err
    assert 0 < _meta(tmp_path / "en")["counts"]["instances"]["unk_tokens"] < 10


# -- 2. the merged meta of parts counts the corpus once -------------------------------------------------------
def test_merged_parts_count_the_corpus_once_and_keep_examples_whole(tmp_path, capsys):
    from albertlm.data.loader import PretrainingDataset

    corpus = tmp_path / "in"
    corpus.mkdir()
    (corpus / "a.txt").write_text(shared_path("text", "sample_text.txt").read_text(encoding="utf-8"), encoding="utf-8")
    (corpus / "b.txt").write_text("\n".join(shared_path("text", "gutenberg", "carroll-alice.txt")
                                            .read_text().splitlines()[:300]) + "\n", encoding="utf-8")
    (corpus / "c.txt").write_text("  \n", encoding="utf-8")                  # an empty file: an example string
    assert _build([corpus], tmp_path / "whole", SPM, "--chunk-chars", "3000") == 0
    for index in range(2):
        assert _build([corpus], tmp_path / "parts", SPM, "--chunk-chars", "3000", "--num-shards", "2",
                      "--shard-index", str(index)) == 0
    capsys.readouterr()
    whole, parts = _meta(tmp_path / "whole"), PretrainingDataset(tmp_path / "parts").meta
    assert parts["counts"]["corpus"] == whole["counts"]["corpus"]      # was: documents, files... doubled
    assert parts["counts"]["corpus"]["examples"]["empty_files"] == str(corpus / "c.txt")
    for key in ("instances", "text_tokens", "unk_tokens"):
        assert parts["counts"]["instances"][key] == whole["counts"]["instances"][key], key
    assert parts["counts"]["instances"]["unk_token"] == "<unk>"
    assert parts["counts"]["tokens"] == whole["counts"]["tokens"]


# -- 3. a damaged shard is one line in inspect and stats ----------------------------------------------------
def test_inspect_and_stats_of_a_damaged_shard_are_one_line_errors(tmp_path, capsys):
    out = tmp_path / "out"
    assert _build([shared_path("text", "sample_text.txt")], out) == 0
    shard = out / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    rng = np.random.default_rng(0)
    data[: len(data) // 2] = rng.integers(0, 256, len(data) // 2, dtype=np.uint8).tobytes()  # same size
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert_one_error(capsys, main(["data", "inspect", str(out), "-n", "1"]), "instance 0", "damaged", "rebuild")
    assert_one_error(capsys, main(["data", "stats", str(out)]), "instance 0", "shard 0", "damaged")


# -- 4. a worker killed by the system is a UserError -----------------------------------------------------------
def test_a_worker_that_dies_is_a_user_error_not_a_traceback():
    from albertlm.data.build import BuildConfig, Chunk, ChunkContext, _results
    from albertlm.data.corpus import read_documents
    from albertlm.errors import UserError

    cfg = BuildConfig([], str(shared_path(*SPM)), "unused", max_seq_length=32, dupe_factor=1)
    ctx = ChunkContext(cfg.tokenizer, cfg.instance_config(), cfg.masking_config(), 1, cfg.seed).load()
    docs = list(read_documents([shared_path("text", "sample_text.txt")]))
    chunks = iter([Chunk(i, docs) for i in range(12)])
    results = _results(chunks, ctx, 2)
    next(results)
    workers = [p for p in multiprocessing.active_children() if "Spawn" in p.name]
    assert workers
    for process in workers:                       # what the kernel's OOM killer does
        os.kill(process.pid, signal.SIGKILL)
    with pytest.raises(UserError, match="worker process of the build died"):
        for _ in results:
            pass


# -- 5. Ctrl-C during a build with workers: one line, nothing left -------------------------------------------
def test_ctrl_c_with_workers_prints_one_line_and_leaves_no_output(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from albertlm.cli.main import main; sys.exit(main(sys.argv[1:]))",
         "data", "build", "--input",
         str(shared_path("text", "gutenberg")), "--tokenizer", str(shared_path(*SPM)), "--out", str(out),
         "--max-seq-length", "64", "--dupe-factor", "40", "--workers", "2", "--no-progress"],   # 40: a build of
        # ~45 s, not 11 s: on a loaded machine (CI beside other jobs) the Ctrl-C once came as the build ended (exit 0)
        cwd=ROOT, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as a terminal's foreground job
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 240          # a loaded machine is slow to import torch; the loop ends early
    started = False
    while time.monotonic() < deadline and proc.poll() is None:    # wait until both workers run
        if children.exists() and len(children.read_text().split()) >= 3:   # 2 workers + the resource tracker
            started = True
            break
        time.sleep(0.05)
    if not started:                             # never send Ctrl-C at some other moment (mid-import)
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the build's workers did not start (exit {proc.returncode}): {err[-2000:]}")
    time.sleep(0.3)                                          # the workers are starting: the old code's
    assert proc.poll() is None, "the build ended before Ctrl-C"
    os.killpg(proc.pid, signal.SIGINT)                       # a terminal's Ctrl-C reaches the whole job
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err == "albertlm data: interrupted\n", err
    assert not out.exists()


# -- 6. a stopped build's directory says so ------------------------------------------------------------------
def test_stats_on_a_directory_a_stopped_build_left_names_it(tmp_path, capsys):
    out = tmp_path / "out"
    (out / ".building-all").mkdir(parents=True)                # what a killed (SIGKILL) build leaves
    (out / ".building-all" / "shard-00000.bin.tmp").write_bytes(b"\0" * 100)
    assert_one_error(capsys, main(["data", "stats", str(out)]), "no meta.json", ".building-all",
                     "run the build again")


# -- 7. JSONL type names are JSON's --------------------------------------------------------------------------
def test_a_jsonl_text_field_of_another_type_is_named_in_json_terms(tmp_path, capsys):
    lines = [line for line in shared_path("text", "sample_text.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    records = [{"text": " ".join(lines[:10])}, {"text": None}, {"text": 7}, {"text": lines[10:20]},
               {"text": " ".join(lines[20:30])}]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "[1, 2]\n", encoding="utf-8")
    assert _build([path], tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "bad json lines 4" in err and f"{path} line 2: field 'text' is a JSON null, not a string" in err, err
    from albertlm.data.corpus import _json_text

    assert _json_text('{"text": 7}', "text")[1] == "field 'text' is a JSON number, not a string"
    assert _json_text('{"text": ["a"]}', "text")[1] == "field 'text' is a JSON array, not a string"
    assert _json_text("[1]", "text")[1] == "a JSON array, not an object"
