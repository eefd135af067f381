"""albertlm from a notebook, follow-ups (audit, session 31): the Python entry points that take a path expand a
leading `~` as `from_pretrained` / `save_pretrained` now do (`model.io.user_path`); the `Tokenizer` protocol says
what every tokenizer has; train_speed.py counts attention over each row's real tokens. Each test failed before its
fix unless it says otherwise.

`load_saved_model("~/m")` was "no model.safetensors in ~/m"; `export_hf(model, "~/hf")` wrote a folder named `~`
in the working directory, which `import_hf("~/hf")` then did not find; `load_tokenizer_for("~/m")` found no
tokenizer; `check_own_tokenizer("~/m", ...)` found no tokenizer of the model's to compare with and let another one
through without a word; `load_tokenizer("~nosuchuser/x")` was a RuntimeError traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from albertlm.errors import UserError
from albertlm.interop import hf
from albertlm.model import registry
from albertlm.model.albert import AlbertForPreTraining
from albertlm.model.heads import AlbertForSequenceClassification
from albertlm.tasks import inference
from albertlm.tokenization import Tokenizer, load_tokenizer
from albertlm.tokenization import load as tokenizer_load
from conftest import TINY_WORDS, save_tiny_pretrained
from test_benchmarks_audit14 import load   # a benchmark script as a module


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """HOME is tmp_path/home; the working directory tmp_path/cwd, where a `~` taken literally would land."""
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    yield tmp_path / "home"
    assert not (tmp_path / "cwd" / "~").exists(), "a folder named ~ was made in the working directory"


@pytest.fixture
def tiny_model(home, one_thread) -> Path:
    """~/m: a tiny AlbertForPreTraining with its WordPiece vocab.txt."""
    (home / "m").mkdir()
    return save_tiny_pretrained(home / "m")


def other_vocab(directory: Path) -> Path:
    """A vocab.txt of as many pieces as the tiny model's, in another order: not its tokenizer."""
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                                    *reversed(TINY_WORDS)]) + "\n")
    return directory


# ------------------------------------------------------------------------------------------ model.registry
def test_registry_reads_a_home_path(home, tiny_model):
    assert registry.saved_class_name("~/m") == "AlbertForPreTraining"
    model = registry.load_saved_model("~/m")
    assert isinstance(model, AlbertForPreTraining)
    hf.export_hf(model, home / "hf")                       # a transformers directory, written by its full path
    assert registry.hf_class_name("~/hf") == "AlbertForPreTraining"
    assert registry.architecture_from_weights("~/hf", {}) == "AlbertForPreTraining"
    assert registry.saved_class_name(Path("~/hf")) == "AlbertForPreTraining"


# -------------------------------------------------------------------------------------------- interop.hf
def test_export_and_import_hf_take_a_home_path(home, tiny_config, one_thread):
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_config)
    assert hf.export_hf(model, "~/exports/clf") == home / "exports" / "clf"
    assert (home / "exports" / "clf" / "model.safetensors").is_file()
    for given in ("~/exports/clf", Path("~/exports/clf")):
        back = hf.import_hf(given)
        assert torch.equal(back.classifier.weight, model.classifier.weight)
        again = hf.import_hf(given, AlbertForSequenceClassification)
        assert torch.equal(again.classifier.weight, model.classifier.weight)


def test_the_export_helpers_take_home_paths(home, tiny_model):
    """export_tokenizer, write_model_card, complete_export (its source read for the fine-tuning's max_seq_length)
    and run_facts."""
    model = AlbertForPreTraining.from_pretrained(tiny_model)
    tokenizer = load_tokenizer(tiny_model)
    written, _ = hf.export_tokenizer(tokenizer, "~/tok")
    assert "vocab.txt" in written and (home / "tok" / "vocab.txt").is_file()
    (home / "card").mkdir()
    assert hf.write_model_card(model, "~/card") == home / "card" / "README.md"

    (tiny_model / "task.json").write_text(json.dumps({"family": "classify", "max_seq_length": 32}))
    hf.export_hf(model, "~/out")
    notes = hf.complete_export(model, "~/out", "~/m", "~/m", warnings=[])
    assert any(note.startswith("tokenizer files from ~/m") for note in notes), notes   # shown as given
    config = json.loads((home / "out" / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 32                 # the source's task.json was read (was the model's 64)
    assert (home / "out" / "README.md").is_file()

    data = home / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"num_instances": 12, "max_seq_length": 64}))
    step = home / "run" / "checkpoints" / "step_00000004"
    step.mkdir(parents=True)
    (home / "run" / "run_config.json").write_text(json.dumps({"data": {"path": str(data)}}))
    facts = hf.run_facts("~/run/checkpoints/step_00000004")
    assert facts["data"] and "12 instances" in facts["data"][0]
    assert facts == hf.run_facts(step)


# ------------------------------------------------------------------------------------------ tokenization
def test_tokenizer_paths_in_home(home, tiny_model):
    """load_tokenizer expanded `~` before (passes before for that line); find_tokenizer did not."""
    assert load_tokenizer("~/m").vocab_size == len(TINY_WORDS) + 5
    assert tokenizer_load.find_tokenizer("~/m") == tiny_model
    from albertlm.tokenization.base import user_path   # (new: the tokenizer layer's own, as model.io's)

    assert user_path("~/m") == tiny_model and user_path(Path("x/y")) == Path("x/y")


def test_a_tilde_user_naming_no_user_is_not_found_not_a_traceback(home):
    """Path.expanduser raised RuntimeError ("Could not determine home directory") out of load_tokenizer."""
    name = "~albertlm-no-such-user-31/tok"
    with pytest.raises(UserError, match="tokenizer not found"):
        load_tokenizer(name)
    from albertlm.tokenization.base import user_path

    assert user_path(name) == Path(name)


def test_the_tokenizer_protocol_says_what_every_tokenizer_has(shared, tmp_path):
    """`help(Tokenizer)` showed typing.Protocol's text: no docstring of its own. Every attribute and method it names
    is there on each kind (SentencePiece, WordPiece, tokenizer.json)."""
    doc = Tokenizer.__dict__.get("__doc__")
    assert doc and "load_tokenizer" in doc
    named = ["kind", "vocab_size", "pad_id", "unk_id", "cls_id", "sep_id", "mask_id", "options", "encode",
             "encode_batch", "encode_pair", "tokenize", "decode", "id_to_token", "token_to_id", "word_start_mask",
             "special_tokens_as_text", "save"]
    for name in named:
        assert name in doc, name
    spm = load_tokenizer(shared("spm", "albert-base-v2_spiece.model"))
    wordpiece = load_tokenizer(save_tiny_pretrained(tmp_path))
    hf.export_tokenizer(wordpiece, tmp_path / "json")
    for tokenizer in (spm, wordpiece, load_tokenizer(tmp_path / "json" / "tokenizer.json")):
        assert isinstance(tokenizer, Tokenizer)
        assert all(hasattr(tokenizer, name) for name in named), type(tokenizer).__name__
        assert tokenizer.kind in ("sentencepiece", "wordpiece")
    assert (spm.pad_id, spm.unk_id, spm.cls_id, spm.sep_id, spm.mask_id) == (0, 1, 2, 3, 4)
    assert wordpiece.encode_pair("good", "bad") == ([wordpiece.cls_id, 5, wordpiece.sep_id, 6, wordpiece.sep_id],
                                                  [0, 0, 0, 1, 1])


# -------------------------------------------------------------------------------------- tasks.inference
def test_inference_entry_points_take_home_paths(home, tiny_model):
    """load_encoder and FillMask.load went through resolve_checkpoint, which expanded `~` (pass before)."""
    assert inference.find_tokenizer("~/m") == tiny_model
    assert inference.load_tokenizer_for("~/m").vocab_size == len(TINY_WORDS) + 5
    assert inference.load_tokenizer_for("~/m", "~/m/vocab.txt", vocab_size=99).vocab_size == len(TINY_WORDS) + 5
    assert inference.has_mlm_head("~/m")
    assert inference.load_encoder("~/m")[1] == tiny_model
    assert inference.FillMask.load("~/m", tokenizer="~/m").tokenizer.vocab_size == len(TINY_WORDS) + 5


def test_another_tokenizer_for_a_home_path_model_is_refused(home, tiny_model):
    """The model's own tokenizer (beside it) was not found under "~/m", so any tokenizer of its size passed."""
    other = load_tokenizer(other_vocab(home / "other"))
    with pytest.raises(UserError, match="is not the tokenizer of"):
        inference.check_own_tokenizer("~/m", "~/other", other)
    with pytest.raises(UserError, match="is not the tokenizer of"):
        inference.load_tokenizer_for("~/m", "~/other")
    inference.check_own_tokenizer("~/m", "~/m", load_tokenizer(tiny_model))   # its own passes


def test_a_fine_tuning_step_under_home_finds_its_runs_tokenizer(home, tiny_model):
    step = home / "run" / "checkpoints" / "step_00000004"
    step.mkdir(parents=True)
    (step / "run_config.json").write_text(json.dumps({"family": "classify", "tokenizer": str(tiny_model)}))
    given = "~/run/checkpoints/step_00000004"
    assert inference.step_record(given)["family"] == "classify"
    assert inference.run_tokenizer(given) == tiny_model
    assert inference.find_tokenizer(given) == tiny_model
    (step / "run_config.json").write_text(json.dumps({"family": "classify", "tokenizer": str(home / "gone")}))
    assert "not found there now" in inference.missing_run_tokenizer(given)


# ------------------------------------------------------------------------------ benchmarks/train_speed.py
def test_train_speed_counts_attention_over_each_rows_real_tokens(tiny_config, monkeypatch):
    """train_speed counted every real token as attending to all T positions (model_flops(tokens=...), an upper
    bound with padding), where model_speed counts each row's real lengths. Now the mean over the timed batches of
    model_flops(lengths=...), checked against a hand count for tiny padded batches."""
    monkeypatch.setattr(sys, "path", [*sys.path])          # train_speed puts benchmarks/ on it
    ts = load("train_speed")
    B, T, P, steps, chunks = 2, 8, 2, 2, 2

    def batch(lengths: list[int]) -> dict:
        mask = torch.tensor([[1] * n + [0] * (T - n) for n in lengths])
        return {"input_ids": mask * 7, "attention_mask": mask, "token_type_ids": torch.zeros(B, T, dtype=torch.long),
                "sentence_order_label": torch.zeros(B, dtype=torch.long),
                "masked_lm_positions": torch.tensor([[1, 2]] * B), "masked_lm_ids": torch.full((B, P), 5),
                "masked_lm_weights": torch.ones(B, P)}

    # chunk 0 (the warm-up) then two timed chunks; the first step of each chunk is not timed
    shown = [[8, 8], [8, 8], [8, 8], [8, 3], [8, 8], [5, 2]]
    feed = iter([(batch(lengths),) for lengths in shown])
    data = SimpleNamespace(steps=lambda start: feed, dataset=SimpleNamespace(meta={"max_predictions_per_seq": P}))
    monkeypatch.setattr(ts, "build_models", lambda cfg: (None, torch.nn.Linear(2, 2)))
    monkeypatch.setattr(ts, "our_loop", lambda *a, **k: SimpleNamespace(data=data, run_dir=None))
    monkeypatch.setattr(ts, "run_ours_chunk", lambda loop, run_dir, n: ([1.0] * (n - 1), [0.0]))
    monkeypatch.setattr(ts, "run_reference_chunk", lambda model, opt, batches, *a: [2.0] * (len(batches) - 1))
    r = ts.bench_row(tiny_config, B, T, "fp32", None, Path("nowhere"), chunks, steps, torch.device("cpu"), False)

    H, E, I, V, L = (tiny_config.hidden_size, tiny_config.embedding_size, tiny_config.ffn_size,
                     tiny_config.vocab_size, tiny_config.num_layers)
    per_token = 2 * E * H + L * 2 * (4 * H * H + 2 * H * I)   # E -> H, then Q, K, V, output and the FFN per layer
    per_row = P * 2 * (H * E + E * V) + 2 * (H * H + 2 * H)  # the MLM head at P slots, the pooler and SOP head

    def by_hand(rows: list[int]) -> int:   # forward + backward (x 3); each token attends to its row's real tokens
        return 3 * sum(n * per_token + L * 4 * H * n * n + per_row for n in rows)

    assert r["tokens"] == (11 + 7) / 2
    assert r["flops"] == pytest.approx((by_hand([8, 3]) + by_hand([5, 2])) / 2)
    upper = ts.model_flops(tiny_config, B, T, P, train=True, tokens=r["tokens"])   # the count before
    assert r["flops"] < upper
