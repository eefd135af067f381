"""Benchmark scripts audit 31 (bench31): data_speed.py's --loader mode (the training loader's read + collate timed
against memory-mapped references on the same batches), what its variants read and how its ratios are formed, the
psutil the builds need said before the minutes of the format speeds, finetune_speed's transformers reference built
from our model's weights, and model_flops against a hand count (no timing asserted: tiny data, stubbed clocks)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from test_bench_audit25 import _sys_path_back  # noqa: F401  (fixture: sys.path put back after each test)
from test_benchmarks_audit14 import load, refused_before_work   # a benchmark script as a module
from test_data_audit31 import shards  # noqa: F401  (fixture: a T=32 build of 25-record shards)

LOADER = "loader: __getitems__ + collate"
DYNAMIC = "loader, dynamic masking"
MAPPED = "loader, records through memory maps"
POSITIONAL = "records: positional reads (ShardMaps.read)"


@pytest.fixture(scope="module")
def ds_mod():
    return load("data_speed")


# -- 1. data_speed.py --loader ---------------------------------------------------------------------------------------
def test_loader_mode_prints_every_variant_and_the_ratios(ds_mod, shards, monkeypatch, capsys):
    """data_speed.py timed only the builder; the loader's reads (positional reads since 2e72d74) had no benchmark.
    `--loader DIR` prints each variant's records/s, CPU per record and CPU time over the memmap gather's, per batch
    size, and positional reads over memory maps."""
    monkeypatch.setattr(ds_mod, "format_speeds", lambda *a: pytest.fail("timed the formats with --loader"))
    monkeypatch.setattr(ds_mod, "run_build", lambda *a: pytest.fail("ran a build with --loader DIR"))
    monkeypatch.setattr(sys, "argv", ["data_speed.py", "--loader", str(shards), "--batch-sizes", "4,8",
                                      "--loader-batches", "2"])
    ds_mod.main()
    out = capsys.readouterr().out
    assert f"loader: {shards}: " in out and "shard(s), T=32" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith(("| 4 |", "| 8 |"))]
    names = [LOADER, DYNAMIC, MAPPED, POSITIONAL, ds_mod.REFERENCE]
    for size in ("4", "8"):
        mine = [r for r in rows if r[0] == f"| {size}"]
        assert [r[1] for r in mine[:-1]] == names, out
        assert mine[len(names) - 1][4] == "1.00x |"         # the reference against itself
        assert mine[-1][1] == "positional reads / memory maps, CPU per record", out
        assert " | ".join(mine[-1]).endswith("x |") and "| loader " in " | ".join(mine[-1]), out


def test_loader_variants_read_what_training_reads(ds_mod, shards):
    """Every variant reads the same records: the loader (as StepData's DataLoader calls it) gives the batches of
    `collate([ds[i] ...])`, through memory maps the same batch, and both ways of reading the records give the
    stored bytes."""
    from albertlm.data.loader import PretrainingDataset, collate
    from albertlm.data.shards import read_meta, record_dtype

    meta = read_meta(shards)
    dtype = record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"], meta["tokenizer"]["vocab_size"])
    stored = np.concatenate([np.fromfile(shards / s["file"], dtype=dtype) for s in meta["shards"]])
    variants = ds_mod.loader_variants(shards)
    assert list(variants) == [LOADER, DYNAMIC, MAPPED, POSITIONAL, ds_mod.REFERENCE]
    indices = np.random.default_rng(1).permutation(len(stored))[:16]      # across several 25-record shards
    plain, dynamic = PretrainingDataset(shards), PretrainingDataset(shards, dynamic_masking=True, seed=0)
    expected = {LOADER: collate([plain[int(i)] for i in indices]),
                DYNAMIC: collate([dynamic[(0, int(i))] for i in indices])}
    expected[MAPPED] = expected[LOADER]
    for name, batch in expected.items():
        got = variants[name](indices)
        assert got.keys() == batch.keys() and all(torch.equal(got[k], batch[k]) for k in batch), name
    for name in (POSITIONAL, ds_mod.REFERENCE):
        assert variants[name](indices).tobytes() == stored[indices].tobytes(), name
    ds_mod.check_loader_variants(variants, indices)     # passes on the same data ...
    variants[ds_mod.REFERENCE] = lambda idx: stored[(idx + 1) % len(stored)]
    with pytest.raises(SystemExit, match="read different data"):    # ... and refuses to time different work
        ds_mod.check_loader_variants(variants, indices)


def test_loader_timing_alternates_reads_each_batch_first_and_drops_the_warmup(ds_mod):
    """Every batch's records are read once untimed before the variants take it (the page cache alike for all),
    the variants' order rotates, and the first LOADER_WARMUP batches are not kept."""
    calls = []
    names = [LOADER, MAPPED, POSITIONAL, ds_mod.REFERENCE]
    variants = {name: (lambda idx, name=name: calls.append((name, int(idx[0])))) for name in names}
    batches = [np.array([k]) for k in range(5)]
    reads = ds_mod.time_loader(variants, batches, warmup=2)
    assert all(len(r["wall"]) == len(r["cpu"]) == 3 for r in reads.values())
    for k in range(5):
        seen = [name for name, batch in calls if batch == k]
        assert seen[0] == POSITIONAL and sorted(seen[1:]) == sorted(names)    # read once first, then each variant
        assert seen[1] == names[k % len(names)]                                # in a rotating order


def test_loader_ratios_are_each_variant_over_the_reference(ds_mod):
    """The printed ratios the right way round: CPU time per record of a variant over the memmap gather's (above
    1: slower than the plain gather), and positional reads over memory maps; records/s is the batch size over the
    median batch's wall seconds."""
    reads = {LOADER: {"wall": [4.0, 1.0, 2.0], "cpu": [0.5, 0.3, 0.4]},
             MAPPED: {"wall": [1.0], "cpu": [0.2]},
             POSITIONAL: {"wall": [1.0], "cpu": [0.15]},
             ds_mod.REFERENCE: {"wall": [0.5], "cpu": [0.1]}}
    rows = {name: rest for _, name, *rest in ds_mod.loader_rows(10, reads)}
    per_second, us, vs = rows[LOADER]
    assert per_second == pytest.approx(10 / 2.0) and us == pytest.approx(0.4 / 10 * 1e6) and vs == pytest.approx(4.0)
    assert rows[ds_mod.REFERENCE][2] == pytest.approx(1.0)
    assert ds_mod.positional_over_maps(ds_mod.loader_rows(10, reads)) == (pytest.approx(2.0), pytest.approx(1.5))


@pytest.mark.parametrize("argv, phrase", [
    (["--batch-sizes", "8"], "--batch-sizes is for --loader"),        # ignored without a word, hours of builds
    (["--loader-batches", "5"], "--loader-batches is for --loader"),
    (["--loader", "--formats-only"], "--formats-only"),
    (["--loader", "--batch-sizes", "8,x"], "--batch-sizes"),
    (["--loader", "--batch-sizes", "0"], "--batch-sizes"),
    (["--loader", "--loader-batches", "0"], "--loader-batches"),
])
def test_loader_options_refused_before_any_work(argv, phrase, monkeypatch, capsys):
    line = refused_before_work("data_speed", argv, ("format_speeds", "run_build", "loader_speeds",
                                                    "build_loader_data"), monkeypatch, capsys)
    assert phrase in line and "unrecognized" not in line, line


def test_loader_dir_that_is_not_a_build_is_one_line(tmp_path, monkeypatch, capsys):
    line = refused_before_work("data_speed", ["--loader", str(tmp_path)], ("loader_speeds", "build_loader_data"),
                               monkeypatch, capsys)
    assert line.startswith("data_speed.py: error: --loader ") and str(tmp_path) in line, line


def test_loader_dir_missing_a_shard_is_one_line(shards, monkeypatch, capsys):
    from albertlm.data.shards import read_meta

    (shards / read_meta(shards)["shards"][2]["file"]).unlink()
    line = refused_before_work("data_speed", ["--loader", str(shards)], ("build_loader_data", "time_loader"),
                               monkeypatch, capsys)
    assert line.startswith(f"data_speed.py: error: --loader {shards}: shard ") and "is missing" in line, line


def test_builds_without_psutil_are_refused_before_the_format_speeds(monkeypatch, capsys):
    """Without psutil (the bench extra) the script read the formats for minutes, then died at the first build with
    ModuleNotFoundError's traceback; --formats-only and --loader need no psutil."""
    monkeypatch.setitem(sys.modules, "psutil", None)      # `import psutil` raises ImportError
    line = refused_before_work("data_speed", ["--skip-10x"], ("format_speeds", "run_build"), monkeypatch, capsys)
    assert "psutil" in line and "--formats-only" in line, line


# -- 2. the transformers reference of finetune_speed.py, and transformers missing -----------------------------------
def test_finetune_reference_is_our_model_in_transformers(monkeypatch):
    """finetune_speed.py built transformers' classifier from an AlbertConfig of a few fields with its own random
    weights: not the model our rows train. Now it is our seeded model exported (every config field, the same
    weights): the two give the same logits."""
    pytest.importorskip("transformers")
    from albertlm.config.presets import get_preset
    from albertlm.model import fast_paths

    finetune = load("finetune_speed")
    monkeypatch.setattr(fast_paths, "choose_fast_path", lambda device, precision: torch.float32)
    cfg = get_preset("albert-tiny", num_labels=2)
    torch.manual_seed(0)
    ours, theirs = finetune.models(cfg)
    assert any(isinstance(m, fast_paths.FusedLinear) for m in ours.modules())     # as `albertlm finetune` runs it
    assert theirs.config._attn_implementation == "sdpa"
    assert (theirs.config.hidden_dropout_prob, theirs.config.attention_probs_dropout_prob,
            theirs.config.classifier_dropout_prob, theirs.config.hidden_act, theirs.config.layer_norm_eps,
            theirs.config.max_position_embeddings) == (cfg.hidden_dropout, cfg.attention_dropout,
                                                       cfg.classifier_dropout, cfg.activation, cfg.layer_norm_eps,
                                                       cfg.max_position_embeddings)
    ids = torch.randint(5, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    with torch.no_grad():
        a = ours.eval()(input_ids=ids, attention_mask=mask).logits
        b = theirs.eval()(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(a, b, atol=1e-5), (a, b)


@pytest.mark.parametrize("script, argv, stages", [
    ("model_speed", ["--preset", "albert-tiny"], ("build_models", "run_row", "matmul_rate")),
    ("train_speed", ["--rows", "2x16"], ("build_models", "build_data", "bench_row", "mfu_rate")),
    ("finetune_speed", [], ("load_features", "models", "hf_model")),
    ("tokenizer_speed", [], ("read_lines",)),
])
def test_a_missing_transformers_is_one_line_before_any_work(script, argv, stages, monkeypatch, capsys):
    """Without transformers (the bench extra) each comparison died with ModuleNotFoundError's traceback, for
    finetune_speed after a minute of reading SST-2."""
    monkeypatch.setitem(sys.modules, "transformers", None)    # not installed, as importlib sees it
    line = refused_before_work(script, argv, stages, monkeypatch, capsys)
    assert "transformers is not installed" in line and ".[bench]" in line, line


# -- 3. --threads where the other scripts had it -------------------------------------------------------------------
@pytest.mark.parametrize("script, argv, stage", [("onnx_speed", [], "speed"),
                                                 ("train_speed", ["--rows", "2x16"], "build_data")])
def test_threads_option_sets_both_sides_thread_count(script, argv, stage, monkeypatch, capsys):
    """onnx_speed.py and train_speed.py ran on torch's default threads with no way to pin them (model_speed and
    finetune_speed have --threads): on this shared 2-core machine torch's two OpenMP threads wait for each other
    (an albert-base 1x8 forward 1.1-2.9 s on 2 threads, about 0.2 s on one) while onnxruntime's pool does not, so
    onnx_speed's ratio measured the contention. onnx_speed's sessions take torch's thread count."""
    module = load(script)
    threads = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(module, stage, lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv, "--threads", "1"])
    with pytest.raises(KeyboardInterrupt):     # stopped at the first work, after the options took effect
        module.main()
    assert threads == [1]
    line = refused_before_work(script, [*argv, "--threads", "-1"], (stage,), monkeypatch, capsys)
    assert "--threads must be >= 0" in line, line


# -- 4. model_flops by hand (a pure check: passes before too) ---------------------------------------------------
@pytest.mark.parametrize("train", [False, True])
def test_model_flops_equal_a_hand_count(train):
    """V=99, E=8, H=16, I=37, 2 layers, B=2, T=8, P=2, every token real. Per token: the E->H projection 2*8*16 = 256;
    per block Q, K, V, output 4 * 2*16*16 = 2048 and the FFN 2 * 2*16*37 = 2368. Per row and block: QK^T and the
    weighted sum, 2 * 2*8*8*16 = 4096. Per masked slot: the MLM head's H->E and E->V, 2*16*8 + 2*8*99 = 1840. Per
    row: the pooler 2*16*16 = 512 and the SOP head 2*16*2 = 64. Training: the backward twice the forward."""
    from albertlm.config import ModelConfig

    ms = load("model_speed")
    cfg = ModelConfig(vocab_size=99, embedding_size=8, hidden_size=16, num_layers=2, num_heads=2, ffn_size=37,
                      max_position_embeddings=16)
    forward = (16 * 256 + 2 * 16 * (2048 + 2368)   # 16 tokens: projection; 2 blocks
               + 2 * 2 * 4096                       # 2 rows x 2 blocks of attention
               + 2 * 2 * 1840                       # B x P MLM-head slots
               + 2 * (512 + 64))                    # pooler and SOP head per row
    assert forward == 170304
    assert ms.model_flops(cfg, 2, 8, 2, train) == forward * (3 if train else 1)
