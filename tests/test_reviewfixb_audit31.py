"""Fixes of review31's findings in model saving and WordPiece training (area reviewfixb31).

1. model/io.py `save_checkpoint` / `_swap_in`: a save killed (kill -9, the OOM killer) while it replaced the files,
   after the earlier ones were moved aside, left no config.json ("not a model directory") and the earlier model
   hidden in `.albertlm-save-*/.earlier/` under numbers for names. Now the staging folder names its host and
   process and holds a lock, config.json goes aside first and comes in last, the earlier files wait under their
   names beside a plan, and the next save or load puts the earlier model back (`recover_killed_saves`).
2. tokenization/wordpiece.py: the alphabet widened past the half-vocabulary cap took the merges' place on a mixed
   corpus (Emma + KorNLI + Chinese news at V=3000: 258 merged tokens instead of 740, Alice in 18% more tokens, and a
   second training); it widens now only into the room the merges left unused (Chinese news at V=2000 keeps all of
   its characters, tests/test_journey_audit31.py).
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from albertlm.model import io
from conftest import shared_path
from test_journey_audit31 import KORNLI, NEWS, _cli


def _run_python(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(io.__file__).parents[2]),
                                                                        os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _staging(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(io.SAVE_TMP_PREFIX))


# -- 1. a save killed while it swaps the files in -------------------------------------------------------------------
_KILLED_IN_SWAP = """
import os, sys
from albertlm.config import ModelConfig
from albertlm.model import io
from albertlm.model.heads import AlbertForSequenceClassification
config = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=1, num_heads=4, ffn_size=37,
                     max_position_embeddings=64)
earlier = AlbertForSequenceClassification(config)
earlier.labels = {"id2label": {"0": "neg", "1": "pos"}}
earlier.save_pretrained(sys.argv[1])
replace = os.replace
def killed(src, dst):   # killed once the new weights are moved in, the earlier files aside
    replace(src, dst)
    if os.path.basename(dst) == io.WEIGHTS and io.SAVE_TMP_PREFIX in str(src):
        os._exit(9)
os.replace = killed
AlbertForSequenceClassification(config.replace(num_layers=2)).save_pretrained(sys.argv[1])
"""


def test_a_save_killed_while_it_swaps_the_files_in_leaves_the_earlier_model_to_load(tmp_path, one_thread, caplog):
    from albertlm.model.heads import AlbertForSequenceClassification

    directory = tmp_path / "model"
    proc = _run_python(_KILLED_IN_SWAP, str(directory))
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert not (directory / io.CONFIG).exists() and _staging(directory)    # no model: its files moved aside
    loaded = AlbertForSequenceClassification.from_pretrained(directory)    # was "not a model directory"
    assert loaded.config.num_layers == 1 and loaded.labels["id2label"] == {"0": "neg", "1": "pos"}
    assert _staging(directory) == []
    assert any("killed save_pretrained" in r.getMessage() for r in caplog.records)


def test_a_save_stopped_in_a_running_process_is_named_by_the_load(tmp_path, one_thread):
    """The staging folder of a live process is its own (a save on its way): the load says where the earlier model's
    files wait; once the process is gone, the load puts them back."""
    from albertlm.errors import UserError
    from albertlm.model.heads import AlbertForSequenceClassification

    directory = tmp_path / "model"
    assert _run_python(_KILLED_IN_SWAP, str(directory)).returncode == 9
    [killed] = _staging(directory)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) as child:
        try:
            live = directory / f"{io._stage_prefix(child.pid)}abcd1234"
            (directory / killed).rename(live)
            with pytest.raises(UserError, match="was stopped while it replaced the model's files") as info:
                AlbertForSequenceClassification.from_pretrained(directory)
            assert str(live / ".earlier") in str(info.value)
        finally:
            child.kill()
    live.rename(directory / killed)
    assert AlbertForSequenceClassification.from_pretrained(directory).config.num_layers == 1


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_saves_folder_whose_lock_is_held_stays(tmp_path, tiny_config, one_thread):
    """Pure check: a process id dead here may be a live save's in another container of this host name (its own
    process ids, one shared folder); a folder whose lock another process holds is left alone."""
    from albertlm.model.heads import AlbertForSequenceClassification

    directory = tmp_path / "model"
    stage = directory / f"{io._stage_prefix(_dead_pid())}abcd1234"
    stage.mkdir(parents=True)
    fd = os.open(stage / io._STAGE_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        AlbertForSequenceClassification(tiny_config).save_pretrained(directory)
        assert _staging(directory) == [stage.name]
    finally:
        os.close(fd)
    AlbertForSequenceClassification(tiny_config).save_pretrained(directory)   # unheld now: removed
    assert _staging(directory) == []


def test_a_running_saves_folder_stays(tmp_path, tiny_config, one_thread):
    """Pure check: a folder named by a live process of this machine is that process's save, whatever its lock."""
    from albertlm.model.heads import AlbertForSequenceClassification

    directory = tmp_path / "model"
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) as child:
        try:
            stage = directory / f"{io._stage_prefix(child.pid)}abcd1234"
            stage.mkdir(parents=True)
            (stage / io._STAGE_LOCK).touch()
            AlbertForSequenceClassification(tiny_config).save_pretrained(directory)
            assert _staging(directory) == [stage.name]
        finally:
            child.kill()


# -- 2. WordPiece: a wider alphabet only in the merges' unused room --------------------------------------------------
def _merged(tok) -> int:
    from albertlm.tokenization.wordpiece import SPECIAL_TOKENS

    return sum(1 for t in tok.vocab if t not in SPECIAL_TOKENS and len(t.removeprefix("##")) > 1)


@pytest.mark.skipif(not (NEWS.is_file() and KORNLI.is_file()), reason="../shared/data's news or KorNLI is absent")
def test_wordpiece_on_a_mixed_corpus_keeps_the_half_caps_merges(tmp_path, capsys):
    """Emma + KorNLI + Chinese news at V=3000: the alphabet was widened to 1,921 characters, leaving 258 merged
    tokens (740 at the half cap), and Alice took 65,827 tokens instead of 55,808."""
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.sentencepiece import read_text_lines
    from albertlm.tokenization.wordpiece import WordPieceOptions, train_wordpiece

    emma, alice = shared_path("text", "gutenberg", "austen-emma.txt"), shared_path("text", "gutenberg",
                                                                                    "carroll-alice.txt")
    rows = [line.split("\t") for line in KORNLI.read_text(encoding="utf-8").splitlines()[1:]]
    (tmp_path / "ko.txt").write_text("\n".join(s for row in rows for s in row[:2]) + "\n", encoding="utf-8")
    files = [emma, tmp_path / "ko.txt", NEWS]
    _cli("tokenizer", "train", "--kind", "wordpiece", "--input", *files, "--vocab-size", 3000, "--out", tmp_path / "wp")
    tok = load_tokenizer(tmp_path / "wp")
    half = train_wordpiece(files, 3000, tmp_path / "half", WordPieceOptions(do_lower_case=False, strip_accents=False),
                           limit_alphabet=(3000 - 5) // 2, show_progress=False, read_lines=read_text_lines)
    lines = [line for line in alice.read_text(encoding="utf-8").splitlines() if line.strip()]
    tokens = sum(map(len, tok.encode_batch(lines)))
    assert _merged(tok) >= _merged(half) - 10
    assert tokens <= 1.01 * sum(map(len, half.encode_batch(lines)))


def test_alphabet_cap_widens_only_into_the_room_left():
    from albertlm.tokenization.wordpiece import SPECIAL_TOKENS, WordPieceOptions, alphabet_cap, build_pipeline

    backend = build_pipeline({t: i for i, t in enumerate(SPECIAL_TOKENS)}, WordPieceOptions())
    han = {chr(0x4E00 + i): 1000 - i for i in range(300)}       # CJK: one token each
    assert alphabet_cap(han, backend, 1000, room=50, cap=100) == 150
    assert alphabet_cap(han, backend, 1000, room=500, cap=100) == 300
    letters = {**han, **{c: 5000 for c in "abcdefghij"}}        # the most frequent: two tokens each ("##c")
    assert alphabet_cap(letters, backend, 1000, room=10, cap=5) == 10
    assert alphabet_cap(letters, backend, 1000, room=30, cap=5) == 30   # 5 more letters (10 tokens), 20 Han
    assert alphabet_cap(letters, backend, 1000) == 310                  # no room given: as before
