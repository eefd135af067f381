"""Docs audit 31: docs/{training,tokenization,model,interop,validation,finetuning,data}.md against what the
thirty-first session made the code do.

The messages the pages quote are the code's (export onnx's NaN and float16 lines, the table warning's `awk`
command for a pair file and its `gzip -dc` / `iconv` start, SQuAD's missing-prediction line); the options and
usage words they show are the commands' (`--tokenizer PATH` for convert, `evaluate MODEL`, `--threads` of the
benchmarks, the SentencePiece options `--kind wordpiece` refuses); the numbers are the constants (16,384 rows a
window); what they say a function does it does on a tiny input (`13.txt.gz` named `13.txt`, a question predicted
twice refused, a v1.1 question without a span given one stand-in n-best entry, the all-null threshold one below
the lowest odds, an existing --out DIR holding its own staging folder, a tokenizer directory given to convert);
validation.md's rows point at the functions that check; and no page still says what the session changed.
Function calls on tiny inputs: a few seconds, CPU-only."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import test_docs_audit14 as audit14
from albertlm.errors import UserError
from test_docs_audit26 import _flat, _options
from test_docs_audit28 import _quote, check_validation_row

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ finetuning.md: SQuAD
def test_a_v11_question_without_a_span_has_one_stand_in_entry_as_finetuning_md_says():
    from albertlm.tasks.squad import ExamplePrediction, SpanPrediction, nbest_json

    assert "a v1.1 question without any valid span has one entry, text `\"\"` (its prediction) with logits 0, as " \
           "BERT's and transformers' `\"empty\"` stand-in" in _flat("docs/finetuning.md")
    out = nbest_json({"q": ExamplePrediction(SpanPrediction("", 0.0), null_score=0.0, nbest=[])}, "1.1")
    assert out["q"] == [{"text": "", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0, "score": 0.0}], out


def test_the_all_null_threshold_is_one_below_the_lowest_odds_as_finetuning_md_says():
    from albertlm.tasks.metrics import find_best_threshold

    assert "(except `best_*_thresh` where answering nothing is best and the odds reach 0 or below: one below the " \
           "lowest odds, as above, where the official script prints 0.0)" in _flat("docs/finetuning.md")
    has_answer = {"a": False, "b": False}
    preds, scores = {"a": "x", "b": "y"}, {"a": 0.0, "b": 0.0}      # answering is wrong: nulling all is best
    assert find_best_threshold(preds, scores, {"a": -3.0, "b": -2.0}, has_answer)[1] == -4.0
    assert find_best_threshold(preds, scores, {"a": 0.0, "b": 1.0}, has_answer)[1] == -1.0
    assert find_best_threshold(preds, scores, {"a": 0.2, "b": 0.5}, has_answer)[1] == 0.0   # probabilities


def test_the_missing_prediction_line_says_what_validation_md_says_of_the_official_script():
    from albertlm.tasks.squad import SquadEvaluation

    assert "(the official v2.0 script leaves them out of exact/f1, then fails on them with a KeyError)" in \
        _flat("docs/validation.md")
    said = SquadEvaluation({}, ["q1"], 2).warning()
    assert "left out of the scores" in said and "the official v2.0 script fails on them with a KeyError" in said


# ------------------------------------------------------------------ finetuning.md: RACE
def test_compressed_passages_and_predictions_given_twice_are_what_finetuning_md_says(tmp_path):
    import gzip

    from albertlm.tasks import race

    text = _flat("docs/finetuning.md")
    assert "a passage file or `all.txt` may be gzip, bzip2, xz or zstd compressed (`13.txt.gz`, read as `13.txt`, " \
           "its questions `middle/13.txt#0`; beside its plain twin it is refused)" in text
    assert race.passage_name(Path("13.txt.gz")) == "13.txt" and race.passage_name(Path("all.txt.zst")) == "all.txt"
    level = tmp_path / "middle"
    level.mkdir()
    passage = {"article": "A cat sat.", "questions": ["Who sat?"], "options": [["a cat", "a dog", "b", "c"]],
               "answers": ["A"]}
    with gzip.open(level / "13.txt.gz", "wt", encoding="utf-8") as handle:
        json.dump(passage, handle)
    assert [e.qid for e in race._read_level(level, "middle")] == ["middle/13.txt#0"]
    (level / "13.txt").write_text(json.dumps(passage), encoding="utf-8")
    with pytest.raises(UserError, match="again, beside"):
        race._read_level(level, "middle")
    assert "a predictions file naming one question twice is refused" in text
    twice = tmp_path / "dev_predictions.json"
    twice.write_text('{"middle/13.txt#0": "A", "middle/13.txt#0": "B"}', encoding="utf-8")
    with pytest.raises(UserError, match="predicted twice"):
        race.read_predictions(twice)
    assert "(the text ones also compressed: `validation.jsonl.gz`," in text
    assert ".jsonl" in race.TEXT_EXPORT_SUFFIXES and ".csv" in race.TEXT_EXPORT_SUFFIXES


# ------------------------------------------------------------------ finetuning.md: predict's windows
def test_the_predict_window_is_the_size_finetuning_md_gives():
    from albertlm.tasks import specs
    from albertlm.tasks.features import PREDICT_WINDOW

    text = _flat("docs/finetuning.md")
    assert PREDICT_WINDOW == 16384
    assert "read a dev or test file a window of 16,384 rows at a time (`features.PREDICT_WINDOW`)" in text
    assert "(each window of 16,384 features sorted by length and cut into batches on its own" in text
    assert "os.replace(tmp, path)" in inspect.getsource(specs.write_lines_atomic)


# ------------------------------------------------------------------ tokenization.md / data.md: the table warning
def test_the_pair_files_awk_command_is_the_one_tokenization_md_quotes():
    from albertlm.data.build import _column_command, _rows_command, tables_warning
    from albertlm.data.corpus import TableShape

    pair = TableShape(3, ["sentence1", "sentence2", "gold_label"], 1, (1, 2))
    quoted = _quote("docs/tokenization.md", "awk -F")
    assert quoted == f"{_rows_command(Path('FILE'), pair)} > text.txt", quoted
    said = tables_warning([(Path("FILE"), pair)], done="trained on", purpose="train")
    assert f"(`{quoted}`: columns 1 and 2 both hold sentences" in said, said
    one = TableShape(2, ["sentence", "label"], 1)
    assert _quote("docs/tokenization.md", "tail -n +2 FILE | cut -f1") == f"{_column_command(Path('FILE'), one)} " \
                                                                        "> text.txt"
    gz = TableShape(3, ["sentence1", "sentence2", "gold_label"], 1, (1, 2), compression="gz")
    assert _rows_command(Path("FILE"), gz).startswith("gzip -dc FILE | ")
    utf16 = TableShape(2, ["sentence", "label"], 1, encoding="UTF-16LE")
    assert _column_command(Path("FILE"), utf16).startswith("iconv -f UTF-16LE -t UTF-8 FILE")
    text = _flat("docs/tokenization.md")
    assert "begins with `gzip -dc FILE |` (`bzip2`, `xz`, `zstd`) or `iconv -f UTF-16LE -t UTF-8`" in text


# ------------------------------------------------------------------ tokenization.md: WordPiece training
def test_the_options_wordpiece_refuses_are_the_ones_tokenization_md_lists():
    from albertlm.cli.tokenizer_commands import SENTENCEPIECE_ONLY

    text = _flat("docs/tokenization.md")
    listed = "(`--character-coverage`, `--input-sentence-size`, `--no-shuffle`, `--model-type`, " \
             "`--user-defined-symbols`, `--threads`, `--seed`, `--verbose`:"
    assert listed in text
    assert {flag for flag, _ in SENTENCEPIECE_ONLY.values()} == set(listed.replace("`", "").strip("(:").split(", "))


def test_the_wordpiece_alphabet_cap_is_what_tokenization_md_says():
    from albertlm.tokenization import wordpiece

    text = _flat("docs/tokenization.md")
    assert "counting `##` room only for the characters that can continue a word" in text
    assert "`wordpiece.alphabet_cap`" in text
    assert "wider = alphabet_cap(" in inspect.getsource(wordpiece.train_wordpiece)


# ------------------------------------------------------------------ interop.md: export onnx
def test_the_not_finite_lines_are_what_interop_md_quotes():
    from albertlm.cli import export_commands

    own = _quote("docs/interop.md", "albertlm export: warning: PyTorch's own end_logits")
    assert own == "albertlm export: warning: " + export_commands._not_finite({"end_logits": "PyTorch"})[0], own
    runtime = _quote("docs/interop.md", "onnxruntime's logits is not finite")
    assert runtime == export_commands._not_finite({"logits": "onnxruntime"})[0]
    fp16 = _quote("docs/interop.md", "the float16 outputs are not finite")
    assert f'"{fp16[:60]}' in inspect.getsource(export_commands._export)
    assert 'if "onnxruntime" in broken.values()' in inspect.getsource(export_commands._export)


def test_check_with_onnxruntime_is_the_function_interop_md_names():
    from albertlm.interop import onnx as onnx_export

    assert "`albertlm.interop.onnx.check_with_onnxruntime(model, path)` returns the differences and the outputs " \
           "that are not finite" in _flat("docs/interop.md")
    assert list(inspect.signature(onnx_export.check_with_onnxruntime).parameters)[:2] == ["model", "path"]


def test_an_existing_out_dir_holds_the_staging_folder_as_interop_md_says(tmp_path):
    from albertlm.cli.export_commands import _staging_parent

    assert "(inside an existing `--out` DIR, so a DIR that is a mount point or a link to another disk" in \
        _flat("docs/interop.md")
    (tmp_path / "served").mkdir()
    assert _staging_parent(tmp_path / "served", True) == tmp_path / "served"
    assert _staging_parent(tmp_path / "new", True) == tmp_path          # made in its parent
    assert _staging_parent(tmp_path / "model.onnx", False) == tmp_path


def test_convert_takes_a_tokenizer_directory_as_interop_md_shows(tmp_path):
    from albertlm.cli.convert_commands import _tokenizer_file

    text = _flat("docs/interop.md")
    assert "[--tokenizer PATH]" in text and "PATH` copies one explicitly: a tokenizer file, or a directory holding " \
                                               "one" in text
    parser = audit14._parser("convert", [])
    action = next(a for a in parser._actions if "--tokenizer" in a.option_strings)
    assert action.metavar == "PATH"
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("[PAD]\n", encoding="utf-8")
    assert _tokenizer_file(tmp_path / "tok") == tmp_path / "tok" / "vocab.txt"


def test_pairs_are_cut_as_interop_md_says_albertlm_cuts_them():
    from albertlm.tasks.features import truncate_pair

    assert "where albertlm (google's `_truncate_seq_pair`) gives it to the first" in _flat("docs/interop.md")
    a, b = list(range(10)), list(range(10))
    truncate_pair(a, b, 7)
    assert (len(a), len(b)) == (4, 3)


# ------------------------------------------------------------------ training.md
def test_the_options_mechanism_names_what_a_text_field_takes_as_training_md_says():
    from albertlm.config import overrides

    text = _flat("docs/training.md")
    assert "(`overrides.METAVARS`: `--out DIR`, `--tokenizer PATH`, `--task {cola,...}`" in text
    assert overrides.METAVARS["out"] == "DIR" and overrides.METAVARS["tokenizer"] == "PATH"
    assert overrides.METAVARS["task"].startswith("{cola,")
    assert "`Options(required=True)`" in text and overrides.Options.__dataclass_fields__["required"].default is False


def test_evaluates_usage_names_model_as_the_pages_show():
    parser = audit14._parser("evaluate", [])
    positional = [a for a in parser._actions if not a.option_strings and a.dest != "help"]
    assert [a.metavar for a in positional] == ["MODEL"]
    assert "`albertlm evaluate MODEL --data DIR [--max-batches N]`" in _flat("docs/training.md")
    assert "`evaluate MODEL --data DIR` on pretraining data" in _flat("docs/finetuning.md")


def test_the_resume_behaviours_training_md_names_are_the_codes():
    from albertlm.training import checkpoint
    from albertlm.training.loop import Loop

    text = _flat("docs/training.md")
    assert "the resumed run finds that record in metrics.jsonl and starts a new window (`loop.Loop._carried_window`)" \
           in text
    assert "has_record" in inspect.getsource(Loop._logged) and "_logged" in inspect.getsource(Loop._carried_window)
    assert "the next `--resume` evaluates the step again without logging it a second time" in text
    assert "self._evaluate(log=not logged)" in inspect.getsource(Loop._redo_evaluation)
    assert "renamed to `checkpoints/.tmp-pruned-step_N-PID` before it is removed" in text
    assert 'f"{TMP_PREFIX}pruned-{old.name}-{os.getpid()}"' in inspect.getsource(checkpoint.prune_checkpoints)


def test_pruning_leaves_no_partial_step_as_training_md_says(tmp_path, monkeypatch):
    """A removal that stops half-way (a kill) leaves a `.tmp-pruned-*` folder, which the next resume clears."""
    import shutil

    from albertlm.training import checkpoint

    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        (root / f"step_{step:08d}").mkdir(parents=True)
        (root / f"step_{step:08d}" / "model.safetensors").write_bytes(b"x")
    monkeypatch.setattr(checkpoint, "list_checkpoints", lambda run: sorted(root.glob("step_*")))
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)       # killed before the removal did anything
    checkpoint.prune_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step_")) == ["step_00000002", "step_00000003"]
    assert [p.name.split("-")[2] for p in root.glob(".tmp-pruned-*")] == ["step_00000001"]


def test_the_loaders_positional_reads_are_what_training_md_and_data_md_say():
    from albertlm.data.shards import ShardMaps

    assert "The data's records are copied out of its shards with positional reads (`os.preadv`" in \
        _flat("docs/training.md")
    assert "read by positional reads" in _flat("docs/data.md")
    assert "_read_at(" in inspect.getsource(ShardMaps.read_many)   # (ShardMaps.read is read_many of one shard)


def test_the_demo_compares_sop_with_the_length_baseline_as_the_pages_say():
    from albertlm import demo

    assert "the SOP figure is to be read against the 61.3% the segment lengths alone give on the same pairs" in \
        _flat("docs/training.md")
    assert "from segment lengths alone" in inspect.getsource(demo)
    assert "`experiments.evaluation.length_baseline`" in _flat("docs/data.md")


# ------------------------------------------------------------------ benchmarks the pages show
@pytest.mark.parametrize("script, flag", [("benchmarks/train_speed.py", "--threads"),
                                          ("benchmarks/onnx_speed.py", "--threads"),
                                          ("benchmarks/data_speed.py", "--loader"),
                                          ("benchmarks/data_speed.py", "--batch-sizes"),
                                          ("benchmarks/data_speed.py", "--loader-batches")])
def test_the_benchmark_options_the_pages_give_exist(script, flag):
    assert f'add_argument("{flag}"' in (ROOT / script).read_text(encoding="utf-8")
    pages = _flat("docs/model.md") + _flat("docs/training.md") + _flat("docs/interop.md") + _flat("docs/data.md")
    assert flag in pages


# ------------------------------------------------------------------ model.md
def test_model_md_names_the_save_and_load_behaviours_of_model_io():
    from albertlm.errors import UserError as Base
    from albertlm.model import io

    text = _flat("docs/model.md")
    assert "`save_pretrained` writes its files into a temporary folder inside the directory and moves them in " \
           "together" in text
    assert "_swap_in(" in inspect.getsource(io.save_checkpoint)
    assert "is a `model.io.WriteError` (a `UserError` that is an `OSError`)" in text
    assert issubclass(io.WriteError, Base) and issubclass(io.WriteError, OSError)
    assert "a leading `~` expanded" in text and io.user_path("~/x") == Path.home() / "x"
    assert "a `classifier` saved by another of the sequence / token / multiple-choice classes is freshly " \
           "initialised too, whatever its shape" in text
    assert set(io.CLASSIFIER_CLASSES) == {"AlbertForSequenceClassification", "AlbertForTokenClassification",
                                          "AlbertForMultipleChoice"}


def test_a_run_directory_is_refused_naming_its_models_as_model_md_says(tmp_path):
    import albertlm

    assert "a training run directory given to `from_pretrained` is refused naming its models" in \
        _flat("docs/model.md")
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UserError, match="best"):
        albertlm.AlbertModel.from_pretrained(tmp_path)


def test_interop_md_says_when_save_pretrained_writes_an_empty_labels_json():
    from albertlm.model import io

    assert "gets a labels.json of `{}`, which outranks that record, with a warning" in _flat("docs/interop.md")
    assert io.NO_LABELS.strip() == "{}"


# ------------------------------------------------------------------ validation.md's rows for this session's checks
_ROWS = [
    ("| `export onnx --out` |", "albertlm.cli.export_commands._staging_parent", "out.is_dir()"),
    ("| shard files |", "albertlm.data.shards.ShardMaps.read_many", "_read_at("),
    ("| prediction and submission files", "albertlm.tasks.specs.write_lines_atomic", "os.replace"),
]


@pytest.mark.parametrize("row, where, check", _ROWS, ids=[f"{r[0][2:24]}:{r[1].split('.')[-1]}" for r in _ROWS])
def test_validation_md_rows_of_this_session_point_at_their_checks(row, where, check):
    check_validation_row(row, where, check)


# ------------------------------------------------------------------ data.md: masking and SOP
def test_data_md_says_what_the_masking_and_sop_comparison_measured():
    text = _flat("docs/data.md")
    assert '"swapped when A is longer" scores 58% at T=64, 55% at T=128 and 54% at T=512' in text
    assert "google's builder draws the n-gram sizes from numpy's unseeded global generator" in text
    assert "An n-gram is consecutive words, whichever segment they lie in, as in google's builder" in text


# ------------------------------------------------------------------ the options pages give to commands
@pytest.mark.parametrize("command, sub, flag", [("tokenizer", "train", "--verbose"),
                                                ("export", "onnx", "--opset")])
def test_the_options_the_pages_name_exist(command, sub, flag):
    assert flag in _options(command, sub)


# ------------------------------------------------------------------ what the pages said before this session
_STALE = [
    ("docs/validation.md", "instead of leaving them out as the official v2.0 script does"),
    ("docs/tokenization.md", "a pair task's second sentence is another column"),
    ("docs/training.md", "The data is read through memory maps of its shards"),
    ("docs/training.md", "(A shard cut shorter between that check and the read can still end the process so.)"),
    ("docs/training.md", "the memory-mapped shards are read"),
    ("docs/data.md", "memory-mapped to read"),
    ("docs/validation.md", "each shard memory-mapped when first read"),
    ("docs/finetuning.md", "of the length-sorted batches one process runs"),
    ("docs/interop.md", "[--tokenizer FILE]"),
    ("docs/interop.md", "`--tokenizer FILE` copies one explicitly"),
    ("docs/training.md", "`albertlm evaluate CKPT --data DIR"),
    ("docs/tokenization.md", "(`--model-type`, `--user-defined-symbols`, `--character-coverage`, "
                             "`--input-sentence-size`, `--no-shuffle`, `--threads`, `--seed`) and warns"),
]


@pytest.mark.parametrize("doc, phrase", _STALE)
def test_no_page_says_what_this_session_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
