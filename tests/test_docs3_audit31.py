"""Docs audit 31, third pass: docs/{training,tokenization,model,validation,finetuning,data}.md against the thirty-first
session's review fixes (commits 8253ab5 and 388c533).

The loader's positional reads (`os.pread` where there is no preadv, a short read read on); `predict` writing no
prediction file until every set is predicted (a too-long streamed row refused as its window is predicted); a killed
`save_pretrained` undone by the next save or load (`config.json` aside first and in last); WordPiece widening its
alphabet only into the room the merges left; validation.md's rows for them; and no page still saying what those
commits changed. Each page's words are checked against the code on tiny inputs (the behaviours themselves are tested
by the fixes' own files: tests/test_reviewfix{a,b}_audit31.py). A few seconds, CPU-only."""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import numpy as np
import pytest

from albertlm.errors import UserError
from test_docs_audit26 import _flat
from test_docs_audit28 import check_validation_row
from test_reviewfixb_audit31 import _dead_pid, _staging


# ------------------------------------------------------------------ training.md / data.md: the loader's reads
def test_the_reads_without_preadv_are_what_training_md_and_data_md_say(tmp_path, monkeypatch):
    from albertlm.data import shards

    training, data = _flat("docs/training.md"), _flat("docs/data.md")
    assert "with positional reads (`os.preadv`, or `os.pread` where the system has none, such as macOS before 11: " \
           "neither moves the file position that forked DataLoader workers share; seek and read only on Windows, " \
           "whose workers are spawned and reopen the files; a short read before the file's end is read on from " \
           "where it stopped;" in training
    assert "(`ShardMaps.read`, `os.preadv`, or `os.pread` where there is none)" in data
    path = tmp_path / "shard.bin"
    path.write_bytes(bytes(range(256)) * 4)
    real_pread, calls = os.pread, []

    def short_pread(fd, size, offset):   # at most 100 bytes a call, as a signal or a network file system may give
        calls.append(offset)
        return real_pread(fd, min(size, 100), offset)

    monkeypatch.delattr(os, "preadv", raising=False)
    monkeypatch.setattr(os, "pread", short_pread)
    with open(path, "rb") as handle:
        handle.seek(7)
        buffer = np.empty(300, dtype=np.uint8)
        assert shards._read_at(handle, handle.fileno(), buffer, 500) == 300
        assert handle.tell() == 7                              # the shared position not moved
        assert buffer.tobytes() == path.read_bytes()[500:800]
        assert calls == [500, 600, 700]                        # read on from where each read stopped
        tail = np.empty(300, dtype=np.uint8)
        assert shards._read_at(handle, handle.fileno(), tail, 900) == 124   # the file's end: a read of nothing


# ------------------------------------------------------------------ finetuning.md / validation.md: predict's files
def test_predict_writes_no_file_until_every_set_is_predicted_as_finetuning_md_says():
    from albertlm.tasks import finetune

    text = _flat("docs/finetuning.md")
    assert "is refused in one line naming the longest length the model takes: before the model loads (for " \
           "`finetune` too), and for a dev or test file that `predict` / `evaluate` read a window at a time " \
           "(classify, GLUE: below) when the window holding such a row comes to be predicted" in text
    assert "Every set is predicted and scored before any prediction file is written, so a `predict` refused " \
           "there writes none" in text
    source = inspect.getsource(finetune.run_evaluation)
    assert source.index("predicted = [") < source.index("eval_set.score(outputs)") < source.index("eval_set.write(")
    assert "s.features.check = check" in inspect.getsource(finetune.check_positions)   # each window as predicted


def test_validation_md_names_predicts_position_check():
    check_validation_row("| `predict` / `evaluate --model` |", "albertlm.tasks.finetune.check_positions",
                         "FeatureWindows")
    assert "examples longer than the checkpoint's position embeddings refused in one line before the model loads " \
           "(a file read a window at a time: as its window is predicted); no prediction file written until every " \
           "set is predicted and scored" in _flat("docs/validation.md")


# ------------------------------------------------------------------ model.md / validation.md: a killed save
def test_config_json_goes_aside_first_and_comes_in_last_as_model_md_says(tmp_path, tiny_config, one_thread,
                                                                          monkeypatch):
    from albertlm.model import io
    from albertlm.model.albert import AlbertModel

    assert "A save killed on the way (kill -9, the OOM killer) cannot clean up: it leaves its folder, " \
           "`.albertlm-save-HOST-PID-*` (locked while the save runs). `config.json` goes aside first and comes in " \
           "last, so a directory caught half way has none" in _flat("docs/model.md")
    directory = tmp_path / "model"
    AlbertModel(tiny_config).save_pretrained(directory)
    moves: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def replace(src, dst):
        moves.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    AlbertModel(tiny_config).save_pretrained(directory)
    monkeypatch.undo()
    aside = [(src.name, dst) for src, dst in moves if dst.parent.name == io._ASIDE]
    placed = [dst.name for src, dst in moves if dst.parent == directory]
    assert aside[0][0] == io.CONFIG and placed[-1] == io.CONFIG, moves
    stage = aside[0][1].parent.parent                          # the folder names this machine and this process
    assert stage.parent == directory and stage.name.startswith(io._stage_prefix()), stage
    assert _staging(directory) == []


def test_a_load_puts_a_killed_saves_earlier_model_back_as_model_md_says(tmp_path, tiny_config, one_thread):
    """A save killed half way, built by hand: the earlier config.json and weights aside (in the plan's order), the
    new weights moved in, the new config.json not yet: the directory has no config.json. A load puts the earlier
    model back and removes the folder."""
    from albertlm.model import io
    from albertlm.model.albert import AlbertModel

    assert "The next save into the directory, or a load that finds no `config.json`, puts the earlier model back " \
           "and removes the folder once its process is gone (`model.io.recover_killed_saves`" in _flat("docs/model.md")
    directory = tmp_path / "model"
    AlbertModel(tiny_config).save_pretrained(directory)
    AlbertModel(tiny_config.replace(num_layers=2)).save_pretrained(tmp_path / "new")
    stage = directory / f"{io._stage_prefix(_dead_pid())}abcd1234"
    (stage / io._ASIDE).mkdir(parents=True)
    (stage / io._STAGE_LOCK).touch()
    (stage / io._SWAP_PLAN).write_text(json.dumps({"names": [io.WEIGHTS, io.CONFIG],
                                                   "earlier": [io.CONFIG, io.WEIGHTS]}), encoding="utf-8")
    os.replace(directory / io.CONFIG, stage / io._ASIDE / "0")
    os.replace(directory / io.WEIGHTS, stage / io._ASIDE / "1")
    os.replace(tmp_path / "new" / io.WEIGHTS, directory / io.WEIGHTS)
    os.replace(tmp_path / "new" / io.CONFIG, stage / io.CONFIG)
    assert AlbertModel.from_pretrained(directory).config.num_layers == tiny_config.num_layers
    assert _staging(directory) == []


def test_the_load_names_where_a_running_saves_earlier_files_wait_as_model_md_says(tmp_path):
    from albertlm.model import io

    assert "a running save's folder and another machine's stay, and the load's error names the folder where the " \
           "earlier files wait" in _flat("docs/model.md")
    directory = tmp_path / "model"
    stage = directory / f"{io._stage_prefix()}abcd1234"          # this process: a save on its way
    (stage / io._ASIDE).mkdir(parents=True)
    (stage / io._ASIDE / "0").write_text("{}", encoding="utf-8")
    with pytest.raises(UserError, match="was stopped while it replaced the model's files") as info:
        io.read_config(directory)
    assert str(stage / io._ASIDE) in str(info.value)
    assert _staging(directory) == [stage.name]


def test_validation_md_names_the_saves_recovery():
    check_validation_row("| `save_pretrained DIR` |", "albertlm.model.io.recover_killed_saves", "_undo_swap(")
    check_validation_row("| `save_pretrained DIR` |", "albertlm.model.io._swap_in", "name == CONFIG")
    check_validation_row("| `save_pretrained DIR` |", "albertlm.model.io.read_config", "recover_killed_saves(")
    check_validation_row("| `save_pretrained DIR` |", "albertlm.model.io._killed_stages", "process_alive(")


# ------------------------------------------------------------------ tokenization.md: the WordPiece alphabet
def test_the_alphabet_widens_only_into_the_room_left_as_tokenization_md_says():
    from albertlm.tokenization.wordpiece import SPECIAL_TOKENS, WordPieceOptions, alphabet_cap, build_pipeline
    from albertlm.tokenization import wordpiece

    text = _flat("docs/tokenization.md")
    assert "Where that cap cuts characters and the merges left part of the vocabulary unused" in text
    assert "the training reruns with the cut characters, the most frequent first, that fit in that room, counting " \
           "`##` room only for the characters that can continue a word" in text
    assert "Where the merges fill the vocabulary, nothing is widened, read or trained again" in text
    assert "room > 0 and _alphabet_was_cut(" in inspect.getsource(wordpiece.train_wordpiece)
    backend = build_pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, WordPieceOptions())
    han = {chr(0x4E00 + i): 1000 - i for i in range(300)}      # CJK: no "##" form, one token each
    assert alphabet_cap(han, backend, 1000, room=0, cap=100) == 100
    assert alphabet_cap(han, backend, 1000, room=40, cap=100) == 140
    letters = {**han, "a": 5000, "b": 4000}                      # the most frequent, two tokens each
    assert alphabet_cap(letters, backend, 1000, room=4, cap=0) == 2


def test_a_corpus_whose_merges_fill_the_vocabulary_is_read_once_as_tokenization_md_says(tmp_path, monkeypatch,
                                                                                          capsys):
    """Emma + KorNLI + Chinese news at V=3000 (a cut alphabet, the vocabulary full of merges): no second reading,
    its 740 merged tokens kept (a token or two either way: the trainer's ties), Alice's token count as quoted."""
    from conftest import shared_path
    from test_journey_audit31 import KORNLI, NEWS, _cli
    from test_reviewfixb_audit31 import _merged
    from albertlm.tokenization import load_tokenizer, wordpiece

    text = _flat("docs/tokenization.md")
    assert "Emma + KorNLI + Chinese news at `--vocab-size 3000` keeps its 740 merged tokens" in text
    assert "Alice in Wonderland took 18% more tokens: 65,827 instead of 55,808" in text
    emma, alice = shared_path("text", "gutenberg", "austen-emma.txt"), shared_path("text", "gutenberg",
                                                                                    "carroll-alice.txt")
    if not (NEWS.is_file() and KORNLI.is_file()):
        pytest.skip("../shared/data's news or KorNLI is absent")
    rows = [line.split("\t") for line in KORNLI.read_text(encoding="utf-8").splitlines()[1:]]
    (tmp_path / "ko.txt").write_text("\n".join(s for row in rows for s in row[:2]) + "\n", encoding="utf-8")

    def read_again(*args, **kwargs):
        raise AssertionError("the input was read again")

    monkeypatch.setattr(wordpiece, "_corpus_characters", read_again)
    _cli("tokenizer", "train", "--kind", "wordpiece", "--input", emma, tmp_path / "ko.txt", NEWS, "--vocab-size", 3000,
         "--out", tmp_path / "wp")
    tok = load_tokenizer(tmp_path / "wp")
    assert abs(_merged(tok) - 740) <= 5
    lines = [line for line in alice.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert abs(sum(map(len, tok.encode_batch(lines))) - 55_808) <= 100
    assert round(65_827 / 55_808 - 1, 2) == 0.18


@pytest.mark.parametrize("doc, phrase", [
    ("docs/tokenization.md", "only when characters were cut"),
    ("docs/tokenization.md", "reruns with the largest cap that cannot take the vocabulary past"),
    ("docs/training.md", "positional reads (`os.preadv`; a shard opened"),
    ("docs/data.md", "(`ShardMaps.read`, `os.preadv`) and"),
    ("docs/finetuning.md", "is refused in one line before the model loads (for `finetune` too), naming the longest"),
    ("docs/training.md", "so does a shard cut shorter under the read (a short read)"),
])
def test_no_page_says_what_the_review_fixes_changed(doc, phrase):
    assert phrase not in _flat(doc), (doc, phrase)
