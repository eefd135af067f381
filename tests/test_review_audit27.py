"""Audit 27 review of the session's changes. `embed` / `fill-mask --tokenizer` on a pretraining checkpoint: the
tokenizer file at the path its data records, replaced since the build (another vocabulary there now), was taken as
the checkpoint's own: a copy of the real one was refused ("leave --tokenizer out") and, without --tokenizer, the
replaced file was used without a word; now meta.json's vocabulary hash decides. A spiece.model directory whose
tokenizer_config.json lists the model's own user-defined pieces (transformers 5's `extra_special_tokens`,
transformers 4.4x's `added_tokens_decoder`) loads; it was refused as holding "added tokens"."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.errors import UserError
from conftest import shared_path

# a WordPiece vocabulary that splits the probe text ("Hello World, ALBERT's ...") differently cased and uncased
WORDS = ["hello", "world", ",", "albert", "'", "s", "!", "the", "film"]


def _wordpiece_dir(directory: Path, words: list[str], options: dict | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    if options is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(options))
    return directory


def _pretraining_checkpoint(root: Path, tokenizer_dir: Path) -> Path:
    """A pretraining run's checkpoint (run_config.json -> data -> meta.json) whose data was built with
    `tokenizer_dir`, as `data build` records it (path, size, vocabulary hash)."""
    from albertlm.data.build import vocab_fingerprint
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    data = root / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"tokenizer": {
        "path": str(tokenizer_dir), "vocab_size": tok.vocab_size, "vocab_sha256": vocab_fingerprint(tok)}}))
    step = root / "run" / "checkpoints" / "step_00000002"
    step.mkdir(parents=True)
    (step / "run_config.json").write_text(json.dumps({"data": {"path": str(data)}}))
    return step


def test_a_pretraining_checkpoints_data_tokenizer_is_compared_in_full(tmp_path):
    """Pinned (passes before this review too): data built with a cased vocabulary (do_lower_case false) and
    `--tokenizer` given the same vocab.txt alone (which lowercases, transformers' default) has the same pieces, so the
    vocabulary hash alone would pass it; the data's tokenizer, still there, is compared as a checkpoint's own is
    (pieces, then how a probe text is split). A copy of it, and it, are taken; another vocabulary is refused."""
    from albertlm.tasks.inference import load_tokenizer_for

    cased = _wordpiece_dir(tmp_path / "cased", WORDS, {"do_lower_case": False})
    step = _pretraining_checkpoint(tmp_path, cased)
    uncased = _wordpiece_dir(tmp_path / "uncased", WORDS)
    with pytest.raises(UserError, match=r"is not the tokenizer of .*the one its pretraining data was built with.*"
                                        r"splits .* differently"):
        load_tokenizer_for(step, uncased / "vocab.txt", len(WORDS) + 5)
    copy = shutil.copytree(cased, tmp_path / "copy")
    assert load_tokenizer_for(step, copy, len(WORDS) + 5).options.do_lower_case is False
    assert load_tokenizer_for(step, cased, len(WORDS) + 5).vocab_size == len(WORDS) + 5   # the recorded one
    other = _wordpiece_dir(tmp_path / "other", list(reversed(WORDS)), {"do_lower_case": False})
    with pytest.raises(UserError, match="is not the tokenizer of"):
        load_tokenizer_for(step, other, len(WORDS) + 5)

    assert load_tokenizer_for(step).options.do_lower_case is False            # without --tokenizer: the data's


def test_a_replaced_data_tokenizer_is_no_reference(tmp_path):
    """The tokenizer trained again into the folder the data was built with (another vocabulary at the recorded
    path): `--tokenizer` given a copy of the one the data was built with was refused as "not the tokenizer ... leave
    --tokenizer out", and without it the replaced file was taken without a word (every id another piece). Now the
    file there is checked against meta.json's vocabulary hash: the copy is taken, the replaced file is refused with
    or without --tokenizer, and another vocabulary still is."""
    from albertlm.tasks.inference import load_tokenizer_for

    built = _wordpiece_dir(tmp_path / "tok", WORDS, {"do_lower_case": False})
    step = _pretraining_checkpoint(tmp_path, built)
    copy = shutil.copytree(built, tmp_path / "copy")
    other = _wordpiece_dir(tmp_path / "other", list(reversed(WORDS)), {"do_lower_case": False})
    shutil.copyfile(other / "vocab.txt", built / "vocab.txt")            # trained again into the same folder
    assert load_tokenizer_for(step, copy, len(WORDS) + 5).vocab_size == len(WORDS) + 5
    with pytest.raises(UserError, match="was pretrained with: .*the file there now holds another vocabulary"):
        load_tokenizer_for(step, built, len(WORDS) + 5)
    with pytest.raises(UserError, match="was pretrained with"):
        load_tokenizer_for(step, other, len(WORDS) + 5)
    with pytest.raises(UserError, match="holds another vocabulary now than when the data was built.*--tokenizer"):
        load_tokenizer_for(step, None, len(WORDS) + 5)


# ALBERT's spiece.model: its user-defined pieces (ids 5-12), as transformers lists them when it saves the tokenizer
USER_DEFINED = ["(", ")", "\"", "-", ".", "–", "£", "€"]


@pytest.mark.parametrize("config", [
    {"do_lower_case": True, "keep_accents": False, "remove_space": True, "tokenizer_class": "AlbertTokenizer",
     "extra_special_tokens": ["<pad>", "[CLS]", "[SEP]", "[MASK]", *USER_DEFINED]},   # transformers 5.x
    {"do_lower_case": True, "tokenizer_class": "AlbertTokenizer", "added_tokens_decoder": {
        str(i): {"content": c, "lstrip": c == "[MASK]", "normalized": False, "rstrip": False, "single_word": False,
                 "special": i < 5} for i, c in enumerate(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", *USER_DEFINED])}},
], ids=["transformers5", "added_tokens_decoder"])
def test_a_sentencepiece_directory_listing_the_models_own_pieces_loads(tmp_path, config):
    """spiece.model beside the tokenizer_config.json transformers 5 writes for it (its `extra_special_tokens` list
    ALBERT's user-defined pieces "(", "€", ...), or one whose added_tokens_decoder lists them at their own ids:
    `load_tokenizer` refused the directory ("transformers added 8 token(s) ... '(', ')', '\"'"), so embed, finetune
    and every other command could not read it, though those pieces are the model's own and sentencepiece cuts them
    out whole. Now it loads and encodes as the bare .model does; a token that is no piece is still refused."""
    from albertlm.tokenization import load_tokenizer

    spm = shared_path("spm", "albert-base-v2_spiece.model")
    directory = tmp_path / "albert"
    directory.mkdir()
    shutil.copyfile(spm, directory / "spiece.model")
    (directory / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    text = 'The "café" (in Paris) costs £3.50 - or €4.'
    assert load_tokenizer(directory).encode(text) == load_tokenizer(spm).encode(text)

    if "extra_special_tokens" in config:
        config = {**config, "extra_special_tokens": [*config["extra_special_tokens"], "[E1]"]}
    else:
        config["added_tokens_decoder"]["30000"] = {"content": "[E1]", "special": False}
    (directory / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(UserError, match=r"transformers added 1 token\(s\) to this tokenizer \('\[E1\]'"):
        load_tokenizer(directory)
