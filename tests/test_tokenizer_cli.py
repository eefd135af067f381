"""`albertlm tokenizer train|encode|decode|info` through `main(argv)`: output format, exit codes, one-line errors."""
from __future__ import annotations

import io
import json
import sys

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import shared_path


def _run(argv, monkeypatch, capsys, stdin: str = ""):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_encode_decode_round_trip(monkeypatch, capsys):
    model = str(shared_path("spm", "albert-base-v2_spiece.model"))
    text = "Hello world, this is ALBERT.\nSecond line\n\n"
    code, out, _ = _run(["tokenizer", "encode", "--tokenizer", model], monkeypatch, capsys, text)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    tok = load_tokenizer(model)
    assert rows == [tok.encode("Hello world, this is ALBERT."), tok.encode("Second line"), []]
    code, decoded, _ = _run(["tokenizer", "decode", "-t", model], monkeypatch, capsys, out)
    assert code == 0 and decoded.splitlines() == ["hello world, this is albert.", "second line", ""]


def test_encode_pairs_with_token_types(monkeypatch, capsys):
    vocab = str(shared_path("vocab", "albert_zh_vocab.txt"))
    code, out, _ = _run(["tokenizer", "encode", "-t", vocab, "--pair", "--token-types"], monkeypatch, capsys,
                        "今天天气很好\t我们去公园\n只有一句\n")
    assert code == 0
    first, second = (json.loads(line) for line in out.splitlines())
    tok = load_tokenizer(vocab)
    ids, types = tok.encode_pair("今天天气很好", "我们去公园")
    assert first == {"input_ids": ids, "token_type_ids": types}
    assert second["input_ids"] == tok.encode_pair("只有一句")[0]


def test_train_then_info_and_encode(tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "spm"
    code, out, _ = _run(["tokenizer", "train", "--input", str(shared_path("text", "gutenberg", "carroll-alice.txt")),
                         "--vocab-size", "400", "--out", str(out_dir), "--lowercase"], monkeypatch, capsys)
    assert code == 0 and "V=400" in out
    assert (out_dir / "spiece.model").is_file() and (out_dir / "tokenizer_config.json").is_file()
    code, out, _ = _run(["tokenizer", "info", "-t", str(out_dir), "--json"], monkeypatch, capsys)
    info = json.loads(out)
    assert info["special_ids"] == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert info["options"]["do_lower_case"] is True and info["options"]["keep_accents"] is True
    code, out, _ = _run(["tokenizer", "encode", "-t", str(out_dir), "--special"], monkeypatch, capsys, "Alice\n")
    ids = json.loads(out)
    assert ids[0] == 2 and ids[-1] == 3 and len(ids) >= 3


def test_train_wordpiece_from_a_directory(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "zh.txt").write_bytes(shared_path("text", "zh", "news_zh_1.txt").read_bytes())
    code, out, _ = _run(["tokenizer", "train", "--kind", "wordpiece", "--input", str(corpus), "--vocab-size", "600",
                         "--out", str(tmp_path / "wp")], monkeypatch, capsys)
    assert code == 0 and "trained wordpiece" in out
    tok = load_tokenizer(tmp_path / "wp")
    assert tok.kind == "wordpiece" and (tok.pad_id, tok.mask_id) == (0, 4) and tok.vocab_size <= 600
    code, out, _ = _run(["tokenizer", "encode", "-t", str(tmp_path / "wp")], monkeypatch, capsys, "中国\n")
    assert json.loads(out) == tok.encode("中国")


@pytest.mark.parametrize("argv, stdin, message", [
    (["tokenizer", "encode", "-t", "/nonexistent/spiece.model"], "", "tokenizer not found"),
    (["tokenizer", "train", "--input", "/nonexistent.txt", "--vocab-size", "50", "--out", "x"], "", "not found"),
    (["tokenizer", "decode", "-t", "MODEL"], "[2, 3\n", "line 1: not a JSON list"),
    (["tokenizer", "decode", "-t", "MODEL"], "[99999999]\n", "expected a JSON list of ids"),
    (["tokenizer", "encode", "-t", "MODEL", "-o", "do_lower_case"], "", "KEY=VALUE"),
])
def test_errors_are_one_line(argv, stdin, message, monkeypatch, capsys):
    model = str(shared_path("spm", "albert-base-v2_spiece.model"))
    argv = [model if a == "MODEL" else a for a in argv]
    code, _, err = _run(argv, monkeypatch, capsys, stdin)
    assert code == 2
    assert message in err and err.startswith("albertlm tokenizer: error:") and len(err.strip().splitlines()) == 1


def test_empty_training_input_is_an_error(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    code, _, err = _run(["tokenizer", "train", "--input", str(empty), "--vocab-size", "50",
                         "--out", str(tmp_path / "o")], monkeypatch, capsys)
    assert code == 2 and "training input is empty" in err
