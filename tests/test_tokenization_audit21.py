"""Tokenization audit 21, as a user who inspects the tokenizers they are handed and trains in a batch job:
`tokenizer info` says what a SentencePiece model is (algorithm, normalization rule, character coverage, byte
fallback, user-defined symbols) and where the preprocessing comes from, shows a tokenizer.json's pipeline instead
of transformers' whole tokenizer_config.json, and has --json as `albertlm info` has; a WordPiece (and
SentencePiece) training whose stderr is a log says when the silent vocabulary computation starts and ends."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from albertlm.cli.main import main
from conftest import shared_path


def _info(capsys, path: Path, *extra: str) -> str:
    assert main(["tokenizer", "info", "-t", str(path), *extra]) == 0
    return capsys.readouterr().out


def _lines(path: Path, count: int) -> Path:
    """The first `count` non-blank lines of Alice in Wonderland, in `path`."""
    text = shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join([line for line in text if line.strip()][:count]) + "\n", encoding="utf-8")
    return path


def test_info_says_what_a_sentencepiece_model_is(capsys):
    """info printed kind, size, special ids and options only: not that albert-base-v2 is a unigram model with
    nmt_nfkc normalization and eight user-defined symbols (which transformers 5 splits off as added tokens), nor
    that its preprocessing is the defaults because no tokenizer_config.json was read."""
    model = shared_path("spm", "albert-base-v2_spiece.model")
    out = _info(capsys, model)
    assert out.startswith(f"{model}: SentencePiece unigram model, 30,000 pieces\n")
    for phrase in ("normalization: nmt_nfkc", "character_coverage 0.99995", "byte_fallback false",
                   'user-defined symbols (8): ( ) " - . – £ €', "pad 0 <pad>", "mask 4 [MASK]",
                   "preprocessing (defaults: no tokenizer_config.json read): do_lower_case=true keep_accents=false"):
        assert phrase in out, out
    info = json.loads(_info(capsys, model, "--json", "-o", "keep_accents=true"))
    assert info["model"]["model_type"] == "unigram" and info["model"]["character_coverage"] == 0.99995
    assert info["model"]["user_defined_symbols"] == ["(", ")", '"', "-", ".", "–", "£", "€"]
    assert info["special_ids"]["unk"] == 1 and info["special_tokens"]["cls"] == "[CLS]"
    assert info["options"]["keep_accents"] is True and info["options_overridden"] is True
    assert info["options_from"] is None


def test_info_names_a_bpe_model_and_the_config_it_read(tmp_path, capsys):
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    train = SentencePieceTrainOptions(vocab_size=120, model_type="bpe", num_threads=1, input_sentence_size=0,
                                      character_coverage=1.0)
    train_sentencepiece([_lines(tmp_path / "a.txt", 300)], tmp_path / "bpe", train, show_progress=False)
    out = _info(capsys, tmp_path / "bpe")
    assert "SentencePiece bpe model, 120 pieces" in out and "character_coverage 1" in out, out
    assert f"preprocessing (from {tmp_path / 'bpe' / 'tokenizer_config.json'})" in out, out
    assert "user-defined symbols: none" in out


def test_info_of_a_tokenizer_json_shows_its_pipeline_not_the_whole_config(tmp_path, capsys):
    """A transformers 5 save_pretrained directory (tokenizer.json + a tokenizer_config.json of dozens of keys,
    model_max_length 1e30 for "no limit") had its whole config printed as the "options", and not the pipeline
    that decides the ids (the config's do_lower_case there only describes it)."""
    from albertlm.tokenization.wordpiece import WordPieceOptions, build_pipeline, read_vocab

    vocab = read_vocab(shared_path("vocab", "albert_zh_vocab.txt"))
    build_pipeline(vocab, WordPieceOptions(do_lower_case=False)).save(str(tmp_path / "tokenizer.json"))
    config = {"backend": "tokenizers", "do_lower_case": False, "is_local": True, "extra_special_tokens": ["[X]"],
              "model_max_length": 1000000000000000019884624838656, "tokenizer_class": "BertTokenizer",
              "strip_accents": None, "tokenize_chinese_chars": True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    out = _info(capsys, tmp_path)
    assert out.startswith(f"{tmp_path / 'tokenizer.json'}: tokenizer.json, WordPiece model (wordpiece), 21,128 tokens")
    assert "normalizer: BertNormalizer(clean_text=true, handle_chinese_chars=true" in out and "lowercase=false" in out
    assert "pre-tokenizer: BertPreTokenizer" in out and "unk 100 [UNK]" in out
    assert "tokenizer_class=BertTokenizer do_lower_case=false" in out
    assert "extra_special_tokens" not in out and "is_local" not in out and "1000000000000" not in out, out
    info = json.loads(_info(capsys, tmp_path, "--json"))
    assert info["model"]["model_type"] == "WordPiece" and "model_max_length" not in info["options"]
    config["model_max_length"] = 512   # a real limit (our exports record it) is shown
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    assert json.loads(_info(capsys, tmp_path, "--json"))["options"]["model_max_length"] == 512


@pytest.mark.parametrize("kind, phrases", [
    ("wordpiece", ("computing the WordPiece vocabulary (V=300) shows no progress until it ends",
                   "tokenizer train: computing the WordPiece vocabulary done, ")),
    ("sentencepiece", ("training the unigram model (V=300, 1 threads) shows no progress",
                       "tokenizer train: training the unigram model done, ")),
])
def test_training_in_a_log_says_when_the_silent_part_starts_and_ends(tmp_path, capsys, monkeypatch, kind, phrases):
    """Where stderr is no terminal the `tokenizers` trainer draws nothing, so a long WordPiece training in a log
    printed nothing until it ended (SentencePiece said when its training started, never when it ended). Reading
    that takes long (here: at once) now gives the progress lines, the start line and an end line with the time."""
    from albertlm.tokenization import sentencepiece

    monkeypatch.setattr(sentencepiece, "PLAIN_PROGRESS_AFTER", 0.0)
    text = _lines(tmp_path / "a.txt", 2000)
    extra = ["--threads", "1"] if kind == "sentencepiece" else []
    assert main(["tokenizer", "train", "--kind", kind, "--input", str(text), "--vocab-size", "300",
                 "--out", str(tmp_path / "tok"), *extra]) == 0
    err = capsys.readouterr().err
    assert "tokenizer train: read " in err and " MB, " in err, err
    for phrase in phrases:
        assert phrase in err, err
    assert err.index(phrases[0]) < err.index(phrases[1]) and err.rstrip().endswith("min in all"), err


def test_a_short_training_in_a_log_stays_quiet(tmp_path, capsys):
    """No progress, start or end line for a training that read its input quickly (a failure stays one line)."""
    text = _lines(tmp_path / "a.txt", 300)
    assert main(["tokenizer", "train", "--kind", "wordpiece", "--input", str(text), "--vocab-size", "200",
                 "--out", str(tmp_path / "wp")]) == 0
    err = capsys.readouterr().err
    assert "tokenizer train:" not in err and "shows no progress" not in err, err
