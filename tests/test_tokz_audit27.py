"""Audit 27, tokenization: tokens transformers added to a tokenizer.

A transformers 4 `save_pretrained` after `add_tokens([...])` / `add_special_tokens({"additional_special_tokens":
[...]})` (entity markers "[E1]", domain words, on a fine-tuned model with resized embeddings) keeps vocab.txt or
spiece.model as it was and records the additions beside it: tokenizer_config.json's `added_tokens_decoder`
(transformers >= 4.34) or `added_tokens.json` (older). transformers 5 reads them; we read only the vocabulary, so
"[E1]" was [UNK] and "코로나19" pieces, other ids than the model was trained with, and `vocab_size` was short of the
model's, without a word. WordPiece now matches them as transformers 5 does; a SentencePiece model (which has no
added tokens here) is refused in one line naming the tokenizer.json to load."""
from __future__ import annotations

import json
import shutil
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tokenization import load_tokenizer
from conftest import shared_path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
ALBERT_SPECIALS = ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["그는", "엄마", "학교", "##에", "버스", "가", "the", "bus"]
TEXT = "그는 코로나19 환자 [E1] 엄마 [E2] covid-19 the bus"


def _entry(content: str, special: bool) -> dict:
    return {"content": content, "lstrip": False, "normalized": not special, "rstrip": False, "single_word": False,
            "special": special}


def _v4_directory(root, style: str):
    """A Korean vocab.txt and what transformers 4 saves after adding two words and two special markers."""
    (root / "vocab.txt").write_text("\n".join(SPECIALS + WORDS) + "\n", encoding="utf-8")
    added = {"코로나19": 13, "covid-19": 14, "[E1]": 15, "[E2]": 16}
    markers = ["[E1]", "[E2]"]
    config = {"do_lower_case": False, "tokenizer_class": "BertTokenizer"}
    if style == "decoder":   # transformers >= 4.34
        config["added_tokens_decoder"] = {str(i): _entry(t, True) for i, t in enumerate(SPECIALS)} | {
            str(i): _entry(t, t in markers) for t, i in added.items()}
        config["additional_special_tokens"] = markers
    else:                    # older: added_tokens.json, the markers in special_tokens_map.json
        (root / "added_tokens.json").write_text(json.dumps(added, ensure_ascii=False), encoding="utf-8")
        (root / "special_tokens_map.json").write_text(json.dumps({"additional_special_tokens": markers}),
                                                      encoding="utf-8")
    (root / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return root


@pytest.mark.parametrize("style", ["decoder", "legacy"])
def test_wordpiece_reads_the_tokens_transformers_added(tmp_path, style):
    tok = load_tokenizer(_v4_directory(tmp_path, style))
    assert tok.vocab_size == 17
    assert tok.encode(TEXT) == [5, 13, 1, 15, 6, 16, 14, 11, 12]   # the additions were [UNK]s; V was 13
    assert tok.decode(tok.encode(TEXT)) == "그는 코로나19 엄마 covid-19 the bus"   # [UNK] and the markers dropped
    assert tok.word_start_mask().shape == (17,) and tok.word_start_mask()[13:].all()
    tok.save(tmp_path / "again")   # written as added_tokens_decoder, read back alike
    assert load_tokenizer(tmp_path / "again").encode(TEXT) == tok.encode(TEXT)


@pytest.mark.parametrize("style", ["decoder", "legacy"])
def test_the_ids_are_transformers_5s(tmp_path, style):
    transformers = pytest.importorskip("transformers")
    directory = _v4_directory(tmp_path, style)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = transformers.AutoTokenizer.from_pretrained(str(directory))
    ours = load_tokenizer(directory)
    texts = [TEXT, "[E1]엄마[E2]", "x코로나19y", "covid-19covid-19", "[E1][SEP]"]
    assert ours.encode_batch(texts) == [theirs(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert len(theirs) == ours.vocab_size


def test_an_added_id_that_the_vocabulary_cannot_give_is_one_line(tmp_path, capsys):
    directory = _v4_directory(tmp_path, "decoder")
    config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"]["20"] = config["added_tokens_decoder"].pop("16")   # a gap
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["tokenizer", "info", "-t", str(directory)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'[E2]' is recorded at id 20, but the vocabulary gives it id 16" in err


def test_a_sentencepiece_directory_with_added_tokens_is_refused(tmp_path):
    shutil.copy(shared_path("spm", "albert-base-v2_spiece.model"), tmp_path / "spiece.model")
    decoder = {str(i): _entry(t, True) for i, t in enumerate(ALBERT_SPECIALS)}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}), encoding="utf-8")
    assert load_tokenizer(tmp_path).encode("a [MASK] b") == [21, 4, 334]   # its own special tokens: as before
    decoder["30000"] = _entry("[E1]", True)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}), encoding="utf-8")
    with pytest.raises(UserError, match=r"transformers added 1 token\(s\) .*'\[E1\]' \(id 30000\).* tokenizer.json"):
        load_tokenizer(tmp_path)
