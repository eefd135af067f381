"""`albertlm tokenizer train`: inputs read as `data build` reads them (compressed, JSONL; a build directory is
refused), an existing tokenizer needs --overwrite and is then replaced whole, a failure leaves nothing, bad
numbers and options of the other kind are one-line errors."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("text")
    lines = shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines()[:600]
    path = root / "a.txt"
    path.write_text("\n".join(line for line in lines if line.strip()) + "\n")
    return path


def _train(inputs, out, *extra) -> int:
    sentencepiece = [] if "wordpiece" in extra else ["--threads", "1", "--input-sentence-size", "0", "--no-shuffle"]
    return main(["tokenizer", "train", "--input", *map(str, inputs), "--out", str(out), "--vocab-size", "300",
                 *sentencepiece, *extra])


def _pieces(directory: Path) -> list[str]:
    tok = load_tokenizer(directory)
    return [tok.id_to_token(i) for i in range(tok.vocab_size)]



def test_compressed_and_jsonl_inputs_are_decoded(text, tmp_path):
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(text.read_bytes()))
    records = tmp_path / "a.jsonl"
    records.write_text("".join(json.dumps({"text": line, "id": k}) + "\n"
                               for k, line in enumerate(text.read_text().splitlines())))
    assert _train([text], tmp_path / "plain") == 0
    assert _train([packed], tmp_path / "gz") == 0
    assert _train([records], tmp_path / "jsonl") == 0
    assert _pieces(tmp_path / "gz") == _pieces(tmp_path / "plain")
    assert not [p for p in _pieces(tmp_path / "jsonl") if "text" in p or "{" in p or '":' in p]


def test_a_data_build_is_not_text(text, tmp_path, capsys):
    spm = shared_path("spm", "albert-base-v2_spiece.model")
    assert main(["data", "build", "--input", str(text), "--tokenizer", str(spm), "--out", str(tmp_path / "built"),
                 "--max-seq-length", "32", "--dupe-factor", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert_one_error(capsys, _train([tmp_path / "built"], tmp_path / "tok"), "output of `albertlm data build`")
    assert not (tmp_path / "tok").exists()


def test_an_existing_tokenizer_needs_overwrite_and_is_replaced_whole(text, tmp_path, capsys):
    out = tmp_path / "tok"
    assert _train([text], out) == 0
    model = (out / "spiece.model").read_bytes()
    capsys.readouterr()
    assert_one_error(capsys, _train([text], out, "--seed", "1"), "already holds a tokenizer", "--overwrite")
    assert_one_error(capsys, _train([text], out, "--kind", "wordpiece"), "already holds a tokenizer")
    assert (out / "spiece.model").read_bytes() == model
    assert_one_error(capsys, _train([text], out, "--vocab-size", "50000", "--overwrite"), "sentencepiece training failed")
    assert (out / "spiece.model").read_bytes() == model and sorted(p.name for p in out.iterdir()) == \
        ["spiece.model", "spiece.vocab", "tokenizer_config.json"]
    assert _train([text], out, "--kind", "wordpiece", "--overwrite") == 0
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer_config.json", "vocab.txt"]
    assert load_tokenizer(out).kind == "wordpiece"


def test_a_failed_training_leaves_no_empty_out(text, tmp_path, capsys):
    assert_one_error(capsys, _train([text], tmp_path / "new" / "tok", "--vocab-size", "50000"), "sentencepiece training failed")
    assert not (tmp_path / "new" / "tok").exists()


@pytest.mark.parametrize("extra, phrase", [
    (["--seed", "-1"], "--seed"),
    (["--seed", "99999999999999999999"], "--seed"),
    (["--input-sentence-size", "-5"], "--input-sentence-size"),
    (["--character-coverage", "0"], "--character-coverage"),
    (["--kind", "wordpiece", "--model-type", "bpe"], "--model-type"),
    (["--kind", "wordpiece", "--user-defined-symbols", "(,)"], "--user-defined-symbols"),
])
def test_bad_options_are_one_line_errors(text, tmp_path, capsys, extra, phrase):
    code = main(["tokenizer", "train", "--input", str(text), "--out", str(tmp_path / "tok"), "--vocab-size", "300",
                 *extra])
    assert_one_error(capsys, code, phrase)
    assert not (tmp_path / "tok").exists()


def test_wordpiece_smaller_than_asked_warns(text, tmp_path, capsys):
    assert main(["tokenizer", "train", "--input", str(text), "--out", str(tmp_path / "wp"), "--vocab-size", "20000",
                 "--kind", "wordpiece"]) == 0
    err = capsys.readouterr().err
    assert "fewer than --vocab-size 20000" in err and len([line for line in err.splitlines() if "warning" in line]) == 1
