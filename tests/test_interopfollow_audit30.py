"""Interop follow-up, audit 30: exported tokenizers that transformers' AutoTokenizer and pipeline() load exactly.

- transformers 5's AlbertTokenizer (what AutoTokenizer returned for every `convert --to hf` export) rebuilds the
  Unigram with `byte_fallback=False` and `unk_id=1` and rebuilds the normalizer, whatever tokenizer.json says: a
  `--byte_fallback` model's export gave other ids than albertlm on 4,210 of 4,980 KorNLI sentences, a model in
  sentencepiece's default layout (<unk> 0, <s> 1) on 356 of 2,891 WikiText lines (every unknown character `<s>`;
  2,388 at character coverage 0.98), and `pipeline("fill-mask")` with them; convert only warned. Where (and only where) AlbertTokenizer would give
  other ids, tokenizer_config.json now names `PreTrainedTokenizerFast`, which AutoTokenizer and pipeline() load as
  tokenizer.json is written: every line the same ids, pairs the same token_type_ids, decode the same text.
  albert-base-v2's spiece.model still exports as AlbertTokenizer, tokenizer_config.json byte for byte as before.
- A tokenizer.json source without a tokenizer_config.json (tokenizers' own Unigram, given as `--tokenizer FILE`)
  was exported without one: AutoTokenizer rebuilt it with ALBERT's defaults (lowercased, accents stripped), other
  ids on every KorNLI line, without a word. Now the same: the class named, one warning line. A WordPiece
  tokenizer.json alone made AutoTokenizer fail (AlbertTokenizer builds a Unigram of it): the class is named.
- A tokenizer.json holding the 256 byte pieces without byte fallback (as transformers 5's AlbertTokenizer saves a
  byte-fallback model) read every character outside its vocabulary as <unk> in fill-mask, embed, finetune and
  predict without a word: the loader warns once (convert already did).
"""
from __future__ import annotations

import json
import shutil
import warnings

import pytest

transformers = pytest.importorskip("transformers")

from albertlm.cli.main import main  # noqa: E402
from albertlm.tokenization import load_tokenizer  # noqa: E402
from conftest import shared_path  # noqa: E402
from test_followups_audit18 import _tiny_pretrained  # noqa: E402
from test_interop_audit30 import _kornli, _spm  # noqa: E402

TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
FAST = "PreTrainedTokenizerFast"


@pytest.fixture(autouse=True)
def _offline(monkeypatch, one_thread):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _wikitext() -> list[str]:
    text = shared_path("text", "wikitext-2-raw", "wiki.test.raw").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _export(root, name: str, model_file, capsys, options=None):
    """A tiny model beside `model_file` (as spiece.model, with `options` as its tokenizer_config.json) exported by
    `convert --to hf`; (source, export, convert's warning lines)."""
    import sentencepiece as spm

    size = spm.SentencePieceProcessor(model_file=str(model_file)).get_piece_size()
    src = _tiny_pretrained(root / f"{name}_src", size)
    shutil.copyfile(model_file, src / "spiece.model")
    if options is not None:
        (src / "tokenizer_config.json").write_text(json.dumps(options))
    capsys.readouterr()
    assert main(["convert", str(src), str(root / f"{name}_hf"), "--to", "hf"]) == 0
    return src, root / f"{name}_hf", [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{"bytes": a Korean `--byte_fallback` model (KorNLI), "unk0": a WikiText model in sentencepiece's default
    layout (<unk> 0, <s> 1, </s> 2, <pad> 3)}: each (source, export, convert's warning lines)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import sentencepiece as spm

    root = tmp_path_factory.mktemp("follow")
    (root / "wt.txt").write_text("\n".join(_wikitext()[:1500]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(root / "wt.txt"), model_prefix=str(root / "unk0"), vocab_size=700,
                                   control_symbols=["[CLS]", "[SEP]", "[MASK]"], num_threads=1, minloglevel=2,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=3, character_coverage=0.9995)
    models = {"bytes": _spm(root, "ko", 1000, byte_fallback=True, character_coverage=0.98,
                            user_defined_symbols=["<usr>", "<sys>"]),
              "unk0": root / "unk0.model"}
    out = {}
    for name, model_file in models.items():
        size = spm.SentencePieceProcessor(model_file=str(model_file)).get_piece_size()
        src = _tiny_pretrained(root / f"{name}_src", size)
        shutil.copyfile(model_file, src / "spiece.model")
        (src / "tokenizer_config.json").write_text(json.dumps({"keep_accents": True, "do_lower_case": False}))
        err = io.StringIO()
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            assert main(["convert", str(src), str(root / f"{name}_hf"), "--to", "hf"]) == 0
        out[name] = src, root / f"{name}_hf", [line for line in err.getvalue().splitlines() if line.strip()]
    return out


@pytest.mark.parametrize("name", ["bytes", "unk0"])
def test_autotokenizer_gives_albertlms_ids_on_every_line(exports, name):
    """AutoTokenizer of the export: albertlm's ids on every KorNLI / WikiText line (with and without [CLS]/[SEP]),
    pairs with albertlm's token_type_ids, the same decoded text, the same special ids and model_max_length; it
    gave other ids on 4,210 of 4,980 KorNLI sentences and 356 of 2,891 WikiText lines."""
    from transformers import AutoTokenizer

    src, hf, _ = exports[name]
    ours = load_tokenizer(src)
    lines = _kornli() if name == "bytes" else _wikitext()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoTokenizer.from_pretrained(str(hf))
    config = json.loads((hf / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == FAST and (hf / "spiece.model").is_file()
    expected = [ours.encode(t) for t in lines]
    if name == "bytes":     # the case is exercised: byte pieces on most lines
        assert sum(any(ours.id_to_token(i).startswith("<0x") for i in row) for row in expected) > len(lines) // 2
    else:                   # ... and unknown characters (<unk> 0) on many
        assert ours.unk_id == 0 and sum(0 in row for row in expected) > 300
    got = auto(lines, add_special_tokens=False)["input_ids"]
    assert [i for i, (a, b) in enumerate(zip(got, expected)) if a != b] == []
    assert auto(lines[:100])["input_ids"] == [[ours.cls_id, *row, ours.sep_id] for row in expected[:100]]
    pairs = auto(lines[0:80:2], lines[1:80:2])
    for k, (a, b) in enumerate(zip(lines[0:80:2], lines[1:80:2])):
        ids, types = ours.encode_pair(a, b)
        assert (pairs["input_ids"][k], pairs["token_type_ids"][k]) == (list(ids), list(types)), (a, b)
    for row in expected[:300]:
        assert auto.decode(row, skip_special_tokens=True).rstrip() == ours.decode(row)
    assert [auto.cls_token_id, auto.sep_token_id, auto.pad_token_id, auto.mask_token_id, auto.unk_token_id] == [
        ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id, ours.unk_id]
    assert auto.model_max_length == 32
    # our own import of the export, and of the directory converted back, read the same ids
    assert [load_tokenizer(hf).encode(t) for t in lines[:300]] == expected[:300]


@pytest.mark.parametrize("name", ["bytes", "unk0"])
def test_fill_mask_pipeline_gives_albertlms_top_k(exports, name):
    """transformers' pipeline("fill-mask") on the export: albertlm's top-5 ids and probabilities for masks in texts
    holding byte pieces / unknown characters."""
    import numpy as np
    from transformers import pipeline

    from albertlm.tasks.inference import FillMask, encode_masked

    src, hf, _ = exports[name]
    ours = load_tokenizer(src)
    lines = _kornli(200) if name == "bytes" else _wikitext()[:400]

    def exercised(text: str) -> bool:   # holds byte pieces / an unknown character
        ids = ours.encode(text)
        return ours.unk_id in ids if name == "unk0" else any(ours.id_to_token(i).startswith("<0x") for i in ids)

    texts = []
    for line in lines:   # windows of 6 words, the third masked, short enough for the tiny model's 32 positions
        words = line.split()
        for start in range(0, len(words) - 5, 6):
            text = " ".join(words[start:start + 2] + ["[MASK]"] + words[start + 3:start + 6])
            if exercised(text.replace("[MASK]", "")) and len(ours.encode(text)) <= 24 and text not in texts:
                texts.append(text)
    texts = texts[:6]
    assert len(texts) == 6
    mine = FillMask.load(src, device="cpu")(texts, top_k=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = pipeline("fill-mask", model=str(hf), top_k=5, device="cpu")
    for text, (masks,) in zip(texts, mine):
        # the pipeline's own tokenizer gives our ids (the tiny model's top-k barely moves with one input id)
        assert theirs.tokenizer(text)["input_ids"] == encode_masked(ours, text), text
        result = theirs(text)
        assert [p["token"] for p in result] == [p["token_id"] for p in masks], text
        np.testing.assert_allclose([p["score"] for p in result], [p["score"] for p in masks], atol=1e-5)


def test_the_warnings_say_what_autotokenizer_now_does(exports):
    """One line each, as before, now saying that AutoTokenizer reads our ids and AlbertTokenizer named explicitly
    is what still rebuilds (which it does: other ids there)."""
    from transformers import AlbertTokenizer, AutoTokenizer

    for name, what in (("bytes", "without its byte fallback"), ("unk0", "with <unk> at id 1, ALBERT's, but this "
                                                                         "model's <unk> is id 0")):
        src, hf, said = exports[name]
        assert len(said) == 1, said
        assert said[0].startswith("albertlm convert: warning: transformers 5's AlbertTokenizer.from_pretrained "
                                  f"rebuilds this tokenizer {what}"), said[0]
        assert said[0].endswith("; AutoTokenizer and pipeline() load this directory's tokenizer.json as written, "
                                "with albertlm's ids (tokenizer_config.json names PreTrainedTokenizerFast): only "
                                "AlbertTokenizer named explicitly rebuilds it"), said[0]
        assert "AutoTokenizer's class for this directory" not in said[0]
        if not TRANSFORMERS_5:
            continue
        text = "hello 😀" if name == "bytes" else "😀 ☃ Ω"
        ours = load_tokenizer(src).encode(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert AutoTokenizer.from_pretrained(str(hf))(text, add_special_tokens=False)["input_ids"] == ours
            assert AlbertTokenizer.from_pretrained(str(hf))(text, add_special_tokens=False)["input_ids"] != ours


def test_the_stripped_korean_normalizer_case_names_the_fast_class_too(tmp_path, capsys):
    """A `--strip-accents` Korean model: AlbertTokenizer's rebuilt normalizer reads Hangul as <unk>; AutoTokenizer
    now reads the export's NFC step and gives albertlm's ids (the warning's start is the line tokenization.md
    quotes)."""
    from transformers import AutoTokenizer

    model = _spm(tmp_path, "ko", 800, character_coverage=0.98)
    src, hf, said = _export(tmp_path, "strip", model, capsys, {"keep_accents": False, "do_lower_case": False})
    assert len(said) == 1 and said[0].startswith("albertlm convert: warning: transformers 5's AlbertTokenizer."
                                                 "from_pretrained rebuilds this tokenizer's normalizer"), said
    assert "pieces otherwise" in said[0] and "names PreTrainedTokenizerFast" in said[0], said[0]
    assert json.loads((hf / "tokenizer_config.json").read_text())["tokenizer_class"] == FAST
    ours, lines = load_tokenizer(src), _kornli(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoTokenizer.from_pretrained(str(hf))
    assert auto(lines, add_special_tokens=False)["input_ids"] == [ours.encode(t) for t in lines]


def test_albert_base_v2_still_exports_as_albert_tokenizer(tmp_path, capsys):
    """The ordinary case (a pure check: it held before): albert-base-v2's spiece.model exports as AlbertTokenizer,
    tokenizer_config.json byte for byte as before, no warning, AutoTokenizer our ids."""
    from transformers import AutoTokenizer

    from albertlm.tokenization.sentencepiece import SentencePieceOptions, transformers_config

    spiece = shared_path("spm", "albert-base-v2_spiece.model")
    src = _tiny_pretrained(tmp_path / "src", 30000)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(spiece)]) == 0
    assert capsys.readouterr().err.strip() == ""
    expected = {**transformers_config(SentencePieceOptions()),
                "model_input_names": ["input_ids", "token_type_ids", "attention_mask"], "model_max_length": 32}
    assert (tmp_path / "hf" / "tokenizer_config.json").read_text() == json.dumps(expected, indent=2) + "\n"
    auto = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(auto).__name__.startswith("AlbertTokenizer")
    ours = load_tokenizer(spiece)
    lines = [line for line in shared_path("text", "sample_text.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    assert auto(lines, add_special_tokens=False)["input_ids"] == [ours.encode(t) for t in lines]


def test_a_tokenizer_json_source_without_its_config_is_read_as_written(exports, tmp_path, capsys):
    """tokenizers' own cased Unigram (a tokenizer.json alone, no tokenizer_config.json) exported to transformers: the
    export held no tokenizer_config.json, so AutoTokenizer rebuilt it as AlbertTokenizer with ALBERT's defaults
    (lowercased, accents stripped): other ids on every KorNLI line, without a word. Now the class is named (and the
    special tokens, model_max_length), in one warning line; albertlm reads the export with the same ids."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    model = _spm(tmp_path, "cased", 800, character_coverage=0.98)
    src, hf, _ = _export(tmp_path, "cased", model, capsys, {"keep_accents": True, "do_lower_case": False})
    alone = _tiny_pretrained(tmp_path / "alone", spm.SentencePieceProcessor(model_file=str(model)).get_piece_size())
    shutil.copyfile(hf / "tokenizer.json", alone / "tokenizer.json")
    assert main(["convert", str(alone), str(tmp_path / "hf2"), "--to", "hf"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(said) == 1 and "do_lower_case (true) and keep_accents (false)" in said[0], said
    config = json.loads((tmp_path / "hf2" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == FAST and config["model_max_length"] == 32
    assert (config["unk_token"], config["mask_token"]) == ("<unk>", "[MASK]")
    ours, lines = load_tokenizer(src), _kornli(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoTokenizer.from_pretrained(str(tmp_path / "hf2"))
    expected = [ours.encode(t) for t in lines]
    assert auto(lines, add_special_tokens=False)["input_ids"] == expected
    assert [load_tokenizer(tmp_path / "hf2").encode(t) for t in lines] == expected
    # a tokenizer.json that AlbertTokenizer rebuilds as it is (its config says so) keeps its class, without a word
    shutil.copyfile(src / "tokenizer_config.json", alone / "tokenizer_config.json")
    assert main(["convert", str(alone), str(tmp_path / "hf3"), "--to", "hf"]) == 0
    assert capsys.readouterr().err.strip() == ""
    assert json.loads((tmp_path / "hf3" / "tokenizer_config.json").read_text()).get("tokenizer_class") != FAST
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert AutoTokenizer.from_pretrained(str(tmp_path / "hf3"))(lines, add_special_tokens=False)["input_ids"] == \
            expected


def _lost_fallback(exports, directory):
    """The byte-fallback export's tokenizer.json with `"byte_fallback": false` (what transformers 5's AlbertTokenizer
    saves) and its tokenizer_config.json, in `directory`, beside no spiece.model."""
    _, hf, _ = exports["bytes"]
    directory.mkdir(exist_ok=True)
    data = json.loads((hf / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["byte_fallback"] = False
    (directory / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    shutil.copyfile(hf / "tokenizer_config.json", directory / "tokenizer_config.json")
    return directory


def test_loading_a_tokenizer_json_that_lost_its_byte_fallback_warns_once(exports, tmp_path):
    """albertlm read such a file with <unk> for every character outside the vocabulary, silently, in every command;
    the loader now warns (once per load); a file with its byte fallback, or without the byte pieces, says nothing."""
    lost = _lost_fallback(exports, tmp_path / "lost")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tokenizer = load_tokenizer(lost)
    said = [str(w.message) for w in caught if "256 byte pieces" in str(w.message)]
    assert len(said) == 1, said
    assert said[0].startswith(f"{lost / 'tokenizer.json'} holds the 256 byte pieces"), said[0]
    assert tokenizer.unk_id in tokenizer.encode("hello 😀")          # what it warns of
    from albertlm.interop.hf import lost_byte_fallback               # convert's check: the same text
    assert lost_byte_fallback(lost / "tokenizer.json") == said[0]
    _, hf, _ = exports["bytes"]
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copyfile(hf / "tokenizer.json", kept / "tokenizer.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_tokenizer(kept)
        load_tokenizer(exports["unk0"][1] / "tokenizer.json")
    assert [str(w.message) for w in caught if "byte pieces" in str(w.message)] == []


def test_fill_mask_on_a_directory_that_lost_its_byte_fallback_says_so_once(exports, tmp_path, capsys):
    """`albertlm fill-mask` on a transformers directory whose tokenizer.json lost the byte fallback: one warning, the
    results still printed."""
    src, _, _ = exports["bytes"]
    lost = _lost_fallback(exports, tmp_path / "model")
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(src / name, lost / name)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["fill-mask", str(lost), "그는 [MASK] 😀", "--device", "cpu"]) == 0
    said = [str(w.message) for w in caught if "256 byte pieces" in str(w.message)]
    assert len(said) == 1, said
    assert capsys.readouterr().out.strip()


def test_a_wordpiece_tokenizer_json_alone_loads_in_autotokenizer(tmp_path, capsys):
    """albert_zh's WordPiece as a tokenizer.json alone (`--tokenizer tokenizer.json`, no tokenizer_config.json):
    the export held none, AutoTokenizer took AlbertTokenizer and failed (`TypeError: 'dict' object is not an instance
    of 'Sequence'`). Now the fast class is named (no warning: nothing differs where it loads); our ids on Chinese
    news."""
    from transformers import AutoTokenizer

    from albertlm.interop.hf import tokenizer_pipeline

    wordpiece = load_tokenizer(shared_path("vocab", "albert_zh_vocab.txt"))
    (tmp_path / "wp").mkdir()
    tokenizer_pipeline(wordpiece)[0].save(str(tmp_path / "wp" / "tokenizer.json"))
    src = _tiny_pretrained(tmp_path / "src", wordpiece.vocab_size)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer",
                 str(tmp_path / "wp" / "tokenizer.json")]) == 0
    assert capsys.readouterr().err.strip() == ""
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == FAST and config["model_max_length"] == 32
    lines = [line for line in shared_path("text", "zh", "news_zh_1.txt").read_text(encoding="utf-8").splitlines()
             if line.strip()][:200]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert auto(lines, add_special_tokens=False)["input_ids"] == [wordpiece.encode(t) for t in lines]
    assert [auto.cls_token_id, auto.sep_token_id, auto.mask_token_id] == [wordpiece.cls_id, wordpiece.sep_id,
                                                                          wordpiece.mask_id]
