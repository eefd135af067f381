"""Interop audit 30: a user's own tokenizer moved to transformers 5 and back (`convert --to hf`, AutoTokenizer,
`convert` of the directory transformers saves).

- A SentencePiece model trained elsewhere with `--byte_fallback` encodes a character outside its pieces as the
  pieces of its UTF-8 bytes (<0xED><0x95><0x9C>) in sentencepiece and albertlm; the exported tokenizer.json said
  `byte_fallback: false`, so it gave <unk> there (2,629 of 3,318 KorNLI sentences with a 1,000-piece Korean model):
  a model pretrained on byte ids read <unk> after export. tokenizer.json now keeps the byte fallback (and the
  ByteFallback decoder step).
- transformers 5's AlbertTokenizer (AutoTokenizer's class for the directory) rebuilds the Unigram with
  `byte_fallback=False` and `unk_id=1` whatever tokenizer.json says: convert now says so in one warning line each
  (a byte fallback model; a model whose <unk> is not id 1, sentencepiece's default layout putting it at 0, where
  every unknown character became id 1, `<s>`, in transformers: 2,555 of 2,792 WikiText lines).
- AutoTokenizer's `save_pretrained` of such an export writes a tokenizer.json without the byte fallback and no
  spiece.model; `convert` of that directory (back to albertlm, or to hf again) copied it silently, and albertlm then
  read <unk> for the bytes too. convert now warns naming the file and the fix.
- Checks that held (pass before): a Chinese WordPiece vocab (albert_zh) and a lowercased English one go to
  transformers and back with the same ids through AutoTokenizer and our import on real lines, the same special
  tokens and ids, model_max_length, do_lower_case, and the same masked-LM logits.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from albertlm.cli.main import main  # noqa: E402
from albertlm.tokenization import load_tokenizer  # noqa: E402
from conftest import shared_path  # noqa: E402
from test_followups_audit18 import _tiny_pretrained  # noqa: E402


# the test extras ask for transformers 5, a user may run them with 4: what these tests check of transformers itself (AlbertTokenizer rebuilding the
# Unigram, save_pretrained writing no spiece.model) is transformers 5's; 4's AutoTokenizer is AlbertTokenizerFast,
# which keeps tokenizer.json as it is (measured with 4.57.6). convert's warnings name transformers 5 and are checked
# whatever the version.
TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
NOT_5 = (f"transformers {transformers.__version__}: AutoTokenizer keeps tokenizer.json's Unigram as written; "
         "the rebuild convert warns of is transformers 5's")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, one_thread):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _kornli(limit: int | None = None) -> list[str]:
    rows = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:limit]
    return [s for row in rows for s in row.split("\t")[:2]]


def _spm(root, name: str, vocab_size: int, **options):
    """A SentencePiece unigram model trained on 300 KorNLI pairs as a user trains one elsewhere (ALBERT's special
    pieces as control symbols), with the trainer's `options`."""
    import sentencepiece as spm

    corpus = root / "ko.txt"
    if not corpus.is_file():
        corpus.write_text("\n".join(_kornli(301)) + "\n", encoding="utf-8")
    layout = dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1)
    layout.update({k: options.pop(k) for k in list(options) if k.endswith("_id")})
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(root / name), vocab_size=vocab_size,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=1, minloglevel=2,
                                   **layout, **options)
    return root / f"{name}.model"


@pytest.fixture(scope="module")
def byte_fallback_export(tmp_path_factory):
    """A tiny model beside a Korean `--byte_fallback` spiece.model with user-defined symbols (keep_accents, as a
    Korean tokenizer is loaded), exported with `convert --to hf`; (source, export, convert's stderr)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    root = tmp_path_factory.mktemp("bytes")
    model = _spm(root, "ko", 1000, byte_fallback=True, character_coverage=0.98, user_defined_symbols=["<usr>", "<sys>"])
    src = _tiny_pretrained(root / "src", 1000)
    shutil.copyfile(model, src / "spiece.model")
    (src / "tokenizer_config.json").write_text(json.dumps({"keep_accents": True, "do_lower_case": False}))
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        assert main(["convert", str(src), str(root / "hf"), "--to", "hf"]) == 0
    return src, root / "hf", err.getvalue()


def test_the_exported_tokenizer_json_keeps_the_byte_fallback(byte_fallback_export):
    """Every KorNLI sentence gets albertlm's (and sentencepiece's) ids from the exported tokenizer.json, byte
    pieces included, and decodes to the same text."""
    import sentencepiece as spm
    from tokenizers import Tokenizer

    src, hf, _ = byte_fallback_export
    ours, sp = load_tokenizer(src), spm.SentencePieceProcessor(model_file=str(src / "spiece.model"))
    exported = Tokenizer.from_file(str(hf / "tokenizer.json"))
    lines = _kornli()
    expected = [ours.encode(t) for t in lines]
    got = [e.ids for e in exported.encode_batch(lines, add_special_tokens=False)]
    byte_ids = {i for i in range(ours.vocab_size) if sp.is_byte(i)}
    assert sum(bool(byte_ids & set(row)) for row in expected) > len(lines) // 2   # the case is exercised
    assert [i for i, (a, b) in enumerate(zip(expected, got)) if a != b] == []      # 2,629 lines differed
    assert expected[:50] == sp.encode(lines[:50])
    for row in expected[:50]:
        assert exported.decode(row) == ours.decode(row) == sp.decode(row)
    text = "<usr> 한국어 😀 <sys>"
    assert exported.encode(text, add_special_tokens=False).ids == ours.encode(text)
    assert load_tokenizer(hf).encode(text) == ours.encode(text)    # our import of the export


def test_convert_says_transformers_rebuilds_it_without_the_byte_fallback(byte_fallback_export):
    """AutoTokenizer (AlbertTokenizer) rebuilds the Unigram with byte_fallback=False: <unk> where the model was
    trained on byte ids. convert says so in one warning line, naming the loader that keeps them."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    src, hf, err = byte_fallback_export
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1, err
    assert said[0].startswith("albertlm convert: warning: transformers 5's AlbertTokenizer.from_pretrained"), said
    assert "without its byte fallback" in said[0] and "'😀' (<0xF0><0x9F><0x98><0x80>)" in said[0], said[0]
    assert "AutoTokenizer and pipeline() load this directory's tokenizer.json as written" in said[0], said[0]
    assert "(tokenizer_config.json names PreTrainedTokenizerFast)" in said[0], said[0]
    if not TRANSFORMERS_5:
        pytest.skip(NOT_5)
    from transformers import AlbertTokenizer

    ours = load_tokenizer(src)
    albert = AlbertTokenizer.from_pretrained(str(hf))       # named explicitly: still the rebuild
    auto = AutoTokenizer.from_pretrained(str(hf))
    fast = PreTrainedTokenizerFast(tokenizer_file=str(hf / "tokenizer.json"))
    text = "hello 😀"                                         # no Latin letters among the pieces: bytes
    assert albert(text, add_special_tokens=False)["input_ids"] != ours.encode(text)   # what the warning says
    assert albert.unk_token_id in albert(text, add_special_tokens=False)["input_ids"]
    assert auto(text, add_special_tokens=False)["input_ids"] == ours.encode(text)
    assert fast(text, add_special_tokens=False)["input_ids"] == ours.encode(text)


def test_a_tokenizer_json_transformers_saved_without_the_byte_fallback_is_warned(byte_fallback_export, tmp_path,
                                                                                  capsys):
    """AutoTokenizer.save_pretrained of the export writes tokenizer.json without the byte fallback and no
    spiece.model; converted back, albertlm read it with <unk> for the bytes, without a word."""
    from transformers import AutoTokenizer

    if not TRANSFORMERS_5:
        pytest.skip(f"transformers {transformers.__version__}: save_pretrained keeps the byte fallback and writes "
                    "spiece.model (the file this test converts is transformers 5's)")
    src, hf, _ = byte_fallback_export
    saved = tmp_path / "saved"
    # AlbertTokenizer named explicitly (AutoTokenizer's class for the export keeps the byte fallback when it saves)
    transformers.AlbertTokenizer.from_pretrained(str(hf)).save_pretrained(str(saved))
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(hf / name, saved / name)
    assert not (saved / "spiece.model").exists()
    capsys.readouterr()
    assert main(["convert", str(saved), str(tmp_path / "back")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1, said
    assert said[0].startswith(f"albertlm convert: warning: {tmp_path / 'back' / 'tokenizer.json'} holds the 256 byte "
                              "pieces"), said[0]
    assert "spiece.model" in said[0] and '"byte_fallback": true' in said[0], said[0]
    text = "hello 😀"
    assert load_tokenizer(tmp_path / "back").encode(text) != load_tokenizer(src).encode(text)   # what it warns of
    # the same file exported again to transformers: the same warning, naming the new directory's file
    assert main(["convert", str(tmp_path / "back"), str(tmp_path / "again"), "--to", "hf"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1 and str(tmp_path / "again" / "tokenizer.json") in said[0], said
    # our own export (byte fallback kept, spiece.model beside it) converts back without one
    assert main(["convert", str(hf), str(tmp_path / "ours")]) == 0
    assert capsys.readouterr().err.strip() == ""


def test_convert_says_transformers_puts_unk_at_id_1(tmp_path, capsys):
    """A spiece.model with sentencepiece's default layout (<unk> 0, <s> 1, </s> 2) plus ALBERT's pieces: AlbertTokenizer
    rebuilds the Unigram with unk_id=1, so every unknown character was <s> in transformers, silently."""
    from transformers import AutoTokenizer

    model = _spm(tmp_path, "unk0", 700, unk_id=0, bos_id=1, eos_id=2, pad_id=3, character_coverage=0.98)
    src = _tiny_pretrained(tmp_path / "src", 700)
    shutil.copyfile(model, src / "spiece.model")
    (src / "tokenizer_config.json").write_text(json.dumps({"keep_accents": True, "do_lower_case": False}))
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1, said
    assert "with <unk> at id 1, ALBERT's, but this model's <unk> is id 0" in said[0], said[0]
    assert "gets id 1 ('<s>') there" in said[0], said[0]
    ours = load_tokenizer(src)
    text = "😀 한국어"
    assert ours.unk_id == 0 and 0 in ours.encode(text)
    if not TRANSFORMERS_5:
        pytest.skip(NOT_5)
    albert = transformers.AlbertTokenizer.from_pretrained(str(tmp_path / "hf"))    # named explicitly: the rebuild
    assert 1 in albert(text, add_special_tokens=False)["input_ids"]
    assert AutoTokenizer.from_pretrained(str(tmp_path / "hf"))(text, add_special_tokens=False)["input_ids"] == \
        ours.encode(text)


def _lines(*parts: str, limit: int = 600) -> list[str]:
    text = shared_path(*parts).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()][:limit]


@pytest.mark.parametrize("kind", ["chinese", "english"])
def test_a_wordpiece_model_goes_to_transformers_and_back_with_its_ids(kind, tmp_path, capsys):
    """A pure check that held: albert_zh's vocab.txt on Chinese news, and a lowercased English WordPiece trained
    on Emma (Gutenberg) read on Alice; AutoTokenizer of the export and our import of the directory converted back
    give the source's ids, special tokens, model_max_length and do_lower_case; masked-LM logits agree."""
    from transformers import AlbertForMaskedLM, AutoTokenizer

    from albertlm.model.albert import AlbertForPreTraining

    if kind == "chinese":
        vocab, lines = shared_path("vocab", "albert_zh_vocab.txt"), _lines("text", "zh", "news_zh_1.txt")
    else:
        (tmp_path / "emma.txt").write_text("\n".join(_lines("text", "gutenberg", "austen-emma.txt", limit=4000)))
        assert main(["tokenizer", "train", "--input", str(tmp_path / "emma.txt"), "--kind", "wordpiece",
                     "--vocab-size", "600", "--lowercase", "--strip-accents", "--out", str(tmp_path / "wp")]) == 0
        vocab, lines = tmp_path / "wp" / "vocab.txt", _lines("text", "gutenberg", "carroll-alice.txt")
    size = load_tokenizer(vocab).vocab_size
    src = _tiny_pretrained(tmp_path / "src", size)
    shutil.copyfile(vocab, src / "vocab.txt")
    if vocab.with_name("tokenizer_config.json").is_file():
        shutil.copyfile(vocab.with_name("tokenizer_config.json"), src / "tokenizer_config.json")
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf"]) == 0
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "back")]) == 0
    capsys.readouterr()
    ours, back = load_tokenizer(src), load_tokenizer(tmp_path / "back")
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    expected = [ours.encode(t) for t in lines]
    assert auto(lines, add_special_tokens=False)["input_ids"] == expected
    assert [back.encode(t) for t in lines] == expected
    assert auto.model_max_length == 32 and auto.do_lower_case is True
    assert [auto.cls_token_id, auto.sep_token_id, auto.pad_token_id, auto.mask_token_id, auto.unk_token_id] == [
        ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id, ours.unk_id]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (ours.cls_id, ours.sep_id)
    batch = auto(lines[:3], lines[3:6], padding=True, truncation=True, return_tensors="pt")
    assert batch["token_type_ids"].max() == 1 and batch["input_ids"].shape[1] <= 32
    theirs = AlbertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    mine = AlbertForPreTraining.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        a = theirs(**batch).logits
        b = mine(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                 attention_mask=batch["attention_mask"])["prediction_logits"]
    mask = batch["attention_mask"].bool()
    assert torch.allclose(a[mask], b[mask], atol=1e-5)
