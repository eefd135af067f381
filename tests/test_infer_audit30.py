"""Audit 30 of inference (`embed` / `fill-mask`): follow-ups left by earlier audits.

- `embed` printed nothing where stderr is no terminal (nohup, CI, `| tee`): tqdm draws only on a terminal, so an
  embedding of a million rows said nothing for an hour. It now prints predict's plain lines
  (`evaluate.show_progress`: `embed: 12/120 batches` at each tenth), none with --no-progress.
- `--precision` for `embed` and `fill-mask`, as predict / evaluate have it: bf16 autocast with the same probe and
  one-line emulation warning (`training.precision.warn_emulated_bf16`), fp16 refused on a CPU in predict's line;
  embeddings and scores written as float32. bf16 embeddings are within bf16 rounding of fp32 and of each other
  across batch sizes, on the fused bf16 path and on the emulated one (the probe forced to say no bf16 hardware).

- A killed embedding (SIGKILL, the OOM killer) left its temporary file beside --out for good (an .npy's is the whole
  array's size, hidden by its dot); the next embed into that --out removes those of dead processes of this machine.

Checked and found right (not pinned here): a killed embedding never leaves --out itself (a rerun does not take it as
done); fp32 rows equal across batch sizes (audit 27 pins it)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.model import fast_paths, fused
from conftest import assert_one_error, save_tiny_pretrained, shared_path
from test_bf16_audit23 import pretend

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Tiny matrices: one thread (conftest's `one_thread`)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_pretrained(tmp_path_factory.mktemp("tiny30"))


@pytest.fixture(scope="module")
def sst2(tmp_path_factory) -> Path:
    """40 SST-2 dev sentences (real text of many lengths), one a line."""
    rows = shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:41]
    path = tmp_path_factory.mktemp("sst2") / "in.txt"
    path.write_text("".join(row.split("\t")[0] + "\n" for row in rows), encoding="utf-8")
    return path


def _embed(model: Path, source: Path, out: Path, *extra: str) -> int:
    return main(["embed", str(model), "--input", str(source), "--out", str(out), "--device", "cpu", *extra])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


PROGRESS = re.compile(r"^embed: (\d+)/(\d+) batches$")


# ------------------------------------------------------------------------------------------ progress in a log
def test_embed_in_a_log_prints_predicts_progress_lines_at_each_tenth(tiny, sst2, tmp_path, monkeypatch, capsys):
    """stderr no terminal: `embed: k/N batches` lines (predict's form), at most ten whatever N, the last N/N,
    before the `wrote` line; --no-progress: none. Before, nothing at all until the end."""
    monkeypatch.setattr("albertlm.training.metrics._terminal", lambda: False)
    capsys.readouterr()
    assert _embed(tiny, sst2, tmp_path / "a.npy", "--batch-size", "4") == 0       # 40 texts: 10 batches
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if PROGRESS.match(line)] == [f"embed: {k}/10 batches" for k in range(1, 11)]
    assert lines[-1].startswith("wrote 40 x 32 mean-pooled embeddings")
    assert _embed(tiny, sst2, tmp_path / "b.parquet", "--batch-size", "1") == 0   # 40 batches: a line a tenth
    shown = [PROGRESS.match(line).groups() for line in capsys.readouterr().err.splitlines() if PROGRESS.match(line)]
    assert shown == [(str(k), "40") for k in range(4, 41, 4)]
    assert _embed(tiny, sst2, tmp_path / "c.jsonl", "--batch-size", "4", "--no-progress") == 0
    err = capsys.readouterr().err
    assert not [line for line in err.splitlines() if PROGRESS.match(line)] and err.startswith("wrote 40"), err
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"),
                                  np.asarray([json.loads(r)["embedding"] for r in
                                              (tmp_path / "c.jsonl").read_text().splitlines()], np.float32))


@pytest.mark.parametrize("count,batch_size,window", [(13, 2, 5), (13, 4, 0), (0, 3, 0), (64, 1, 64), (300, 4, 256)])
def test_batch_count_is_the_number_of_progress_calls(tiny, count, batch_size, window):
    """The lines' total (`inference.batch_count`) is the batches `embed_windows` runs: each window (which need not
    be a multiple of the batch size) is cut into batches on its own."""
    from albertlm.tasks.inference import batch_count, embed_texts, load_encoder, load_tokenizer_for

    model, model_dir, _ = load_encoder(tiny, "cpu")
    tokenizer = load_tokenizer_for(model_dir)
    calls: list[int] = []
    texts = [" ".join(["good", "film"] * (1 + k % 5)) for k in range(count)]
    embed_texts(model, tokenizer, texts, batch_size=batch_size, window=window, progress=calls.append)
    assert len(calls) == batch_count(count, batch_size, window) and sum(calls) == count


# ----------------------------------------------------------------------------------------------- --precision
def test_bf16_embeddings_are_fp32_files_close_to_fp32_and_to_each_other_across_batch_sizes(tiny, sst2, tmp_path,
                                                                                          capsys):
    """--precision bf16 (this CPU's path: fused bf16 where it has bf16 hardware, else emulated): every output
    kind float32, cosine > 0.99 to fp32's; --batch-size 1 and 32 agree within bf16 rounding (batches are
    length-sorted and padded differently)."""
    for name, extra in (("f32.npy", ()), ("b1.npy", ("--precision", "bf16", "--batch-size", "1")),
                        ("b32.npy", ("--precision", "bf16", "--batch-size", "32")),
                        ("b.parquet", ("--precision", "bf16")), ("b.jsonl", ("--precision", "bf16"))):
        assert _embed(tiny, sst2, tmp_path / name, "--no-progress", *extra) == 0, capsys.readouterr().err
    assert "bf16 autocast" in capsys.readouterr().err
    fp32, one, many = (np.load(tmp_path / name) for name in ("f32.npy", "b1.npy", "b32.npy"))
    assert one.dtype == many.dtype == np.float32 and one.shape == fp32.shape == (40, 32)
    assert not np.array_equal(one, fp32)                     # bf16 did run: not fp32's numbers
    assert _cosines(one, fp32).min() > 0.99 and _cosines(many, fp32).min() > 0.99
    assert _cosines(one, many).min() > 0.999
    np.testing.assert_allclose(many, one, rtol=0, atol=2e-2)
    table = pq.read_table(tmp_path / "b.parquet")
    assert str(table.schema.field("embedding").type.value_type) == "float"
    assert json.loads(table.schema.metadata[b"albertlm"])["precision"] == "bf16"
    parquet = np.asarray(table["embedding"].combine_chunks().flatten()).reshape(40, 32)
    jsonl = np.asarray([json.loads(r)["embedding"] for r in (tmp_path / "b.jsonl").read_text().splitlines()],
                       np.float32)
    np.testing.assert_array_equal(parquet, many)             # the same batches (32) as b32.npy
    np.testing.assert_array_equal(jsonl, many)


def test_emulated_bf16_runs_with_the_one_line_warning(tiny, sst2, tmp_path, monkeypatch, capsys):
    """The probe forced to say no bf16 hardware (AVX-512 without bf16 instructions): no fused bf16 linears, the
    warning of training / predict once on stderr, embeddings and fill-mask scores close to fp32's."""
    assert _embed(tiny, sst2, tmp_path / "f32.npy", "--no-progress") == 0
    reference = main(["fill-mask", str(tiny), "the film was [MASK]", "--json", "--top-k", "17", "--device", "cpu"])
    fp32_scores = {p["token_id"]: p["score"] for p in json.loads(capsys.readouterr().out)["masks"][0]}
    assert reference == 0
    pretend(monkeypatch, onednn=True)
    monkeypatch.setattr(fused, "BF16", fused.bf16_supported())      # what the module computes at import there
    swapped: list = []
    real_swap = fast_paths.swap_in
    monkeypatch.setattr(fast_paths, "swap_in", lambda model, dtype: swapped.append(dtype) or real_swap(model, dtype))
    for size in ("1", "32"):
        assert _embed(tiny, sst2, tmp_path / f"b{size}.npy", "--no-progress", "--precision", "bf16",
                      "--batch-size", size) == 0
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2 and "no bf16 instructions" in err[0] and "emulated" in err[0], err
        assert err[1].startswith("wrote 40 x 32") and "bf16 autocast" in err[1]
    assert torch.bfloat16 not in swapped
    fp32, one, many = (np.load(tmp_path / name) for name in ("f32.npy", "b1.npy", "b32.npy"))
    assert not np.array_equal(one, fp32)
    assert _cosines(one, fp32).min() > 0.99 and _cosines(one, many).min() > 0.999
    assert main(["fill-mask", str(tiny), "the film was [MASK]", "--json", "--top-k", "17", "--device", "cpu",
                 "--precision", "bf16"]) == 0
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1 and "emulated" in captured.err, captured.err
    scores = {p["token_id"]: p["score"] for p in json.loads(captured.out)["masks"][0]}
    assert scores.keys() == fp32_scores.keys()
    assert max(abs(scores[k] - fp32_scores[k]) for k in scores) < 5e-3
    assert torch.bfloat16 not in swapped


def test_fill_mask_bf16_from_python_runs_under_autocast(tiny):
    """`FillMask.load(..., precision="bf16")` and `FillMask(model, tok, precision=...)`: scores within bf16
    rounding of fp32's, the same ranking where no two are near a tie; fp16 on a CPU refused in predict's words."""
    from albertlm.errors import UserError
    from albertlm.tasks.inference import FillMask

    texts = ["the film was [MASK]", "[MASK] acting , very [MASK] plot"]
    fp32 = FillMask.load(tiny, device="cpu")(texts, top_k=17)
    bf16 = FillMask.load(tiny, device="cpu", precision="bf16")
    assert bf16.precision == "bf16"
    got = bf16(texts, top_k=17)
    for ours, theirs in zip(got, fp32):
        for a, b in zip(ours, theirs):
            want = {p["token_id"]: p["score"] for p in b}
            assert max(abs(p["score"] - want[p["token_id"]]) for p in a) < 5e-3
            assert isinstance(a[0]["score"], float)
    assert got != fp32                                        # it did run in bf16
    with pytest.raises(UserError, match="fp16 needs a CUDA device; use --precision fp32 or bf16 on CPU"):
        FillMask(bf16.model, bf16.tokenizer, precision="fp16")


def test_fp16_on_a_cpu_is_refused_in_one_line_before_the_model_loads(tiny, sst2, tmp_path, monkeypatch, capsys):
    from albertlm.tasks import inference

    def unexpected(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(inference, "load_encoder", unexpected)
    monkeypatch.setattr(inference.FillMask, "load", unexpected)
    assert_one_error(capsys, _embed(tiny, sst2, tmp_path / "e.npy", "--precision", "fp16"),
                     "fp16 needs a CUDA device; use --precision fp32 or bf16 on CPU")
    assert_one_error(capsys, main(["fill-mask", str(tiny), "the [MASK]", "--precision", "fp16", "--device", "cpu"]),
                     "fp16 needs a CUDA device")
    assert not (tmp_path / "e.npy").exists()


# ------------------------------------------------------------------------------------- a killed run's leftover
def test_a_killed_embeddings_temporary_file_is_removed_by_the_next_run(tiny, sst2, tmp_path, capsys):
    """A killed embed (SIGKILL, the OOM killer) leaves its temporary file, never --out (a rerun does not take it as
    done); the file stayed for good, hidden by its dot (an .npy's is the whole array's size), one more per killed
    rerun. The next embed into that --out removes those of this machine's processes that are gone, and says so;
    a running process's and another machine's stay."""
    import socket
    import subprocess
    import sys

    from albertlm.cli.infer_commands import temporary_name

    child = subprocess.Popen([sys.executable, "-c", "pass"])   # waited for: its pid is no process's now
    child.wait()
    # a process of ours that runs until its stdin closes (not os.getppid(): that is 0 where the parent is outside
    # the container's pid namespace, `docker exec`, and os.kill(0, 0) signals our own process group)
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    out = tmp_path / "e.npy"
    host = socket.gethostname()
    killed = tmp_path / f".tmp-e.npy-{host}-{child.pid}"
    running = tmp_path / f".tmp-e.npy-{host}-{live.pid}"
    elsewhere = tmp_path / f".tmp-e.npy-another-{host}-{child.pid}"
    other_out = tmp_path / f".tmp-f.npy-{host}-{child.pid}"
    for path in (killed, running, elsewhere, other_out):
        path.write_bytes(b"\x93NUMPY half an array")
    assert temporary_name(out, child.pid) == killed
    try:
        assert _embed(tiny, sst2, out, "--no-progress") == 0
    finally:
        live.stdin.close()
        live.wait(timeout=300)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"removed {killed}, the partial output of an earlier embed into {out} that was killed", err
    assert not killed.exists() and running.exists() and elsewhere.exists() and other_out.exists()
    assert np.load(out).shape == (40, 32)
    assert sorted(p.name for p in tmp_path.glob(".tmp-*")) == sorted(p.name for p in (running, elsewhere, other_out))
