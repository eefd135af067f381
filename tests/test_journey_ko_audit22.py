"""Audit 22, a Korean BERT user's journey: a WordPiece vocab.txt trained on KorNLI (`tokenizer train --kind
wordpiece`) or brought bare, `data build`, a few pretraining steps, `finetune classify` on KorNLI dev pairs,
`predict`, `convert --to hf`, and the export read by transformers offline (AutoTokenizer ids, logits); the vocab
file as users bring it (a repeated line, one line, tab-separated scores, spaces around tokens) and the Hangul
warning's advice, which named `-o`, an option `data build`, `pretrain`, `finetune` and `convert` do not take."""
from __future__ import annotations

import json
import re
import unicodedata
import warnings

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tokenization import load_tokenizer
from conftest import SHARED

KORNLI = SHARED / "korean" / "KorNLI" / "xnli.dev.ko.tsv"   # (skipif below: no module-level skip)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY = ["--model.vocab_size", "1500", "--model.embedding_size", "8", "--model.hidden_size", "16",
        "--model.num_layers", "1", "--model.num_heads", "2", "--model.ffn_size", "16",
        "--model.max_position_embeddings", "64"]

needs_kornli = pytest.mark.skipif(not KORNLI.is_file(), reason="../shared/data's KorNLI dev file is absent")


def _rows(n: int) -> list[list[str]]:
    return [line.split("\t") for line in KORNLI.read_text(encoding="utf-8").splitlines()[1:n + 1]]


def _cli(*argv) -> None:
    assert main([str(a) for a in argv]) == 0


def _pairs(path, rows) -> None:
    path.write_text("premise\thypothesis\tlabel\n" + "".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def korean_vocab(tmp_path_factory):
    """A WordPiece vocab.txt trained on 600 KorNLI sentences, as `tokenizer train --kind wordpiece` writes it."""
    root = tmp_path_factory.mktemp("ko_wp")
    sentences = dict.fromkeys(s for row in _rows(600) for s in row[:2])
    (root / "corpus.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    _cli("tokenizer", "train", "--kind", "wordpiece", "--input", root / "corpus.txt", "--vocab-size", 1500,
         "--out", root / "wp")
    return root


@needs_kornli
def test_korean_journey_to_transformers_gives_our_ids_and_logits(korean_vocab, tmp_path, monkeypatch, one_thread):
    """Trained vocab -> data build -> 2 pretraining steps -> finetune classify (premise/hypothesis/label from
    KorNLI dev) -> predict -> convert --to hf: AutoTokenizer gives our pair ids on every dev pair, and
    AutoModelForSequenceClassification our logits."""
    transformers = pytest.importorskip("transformers")
    import torch

    from albertlm.model.heads import AlbertForSequenceClassification

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    wp = korean_vocab / "wp"
    assert json.loads((wp / "tokenizer_config.json").read_text())["strip_accents"] is False
    _cli("data", "build", "--input", korean_vocab / "corpus.txt", "--tokenizer", wp, "--out", tmp_path / "data",
         "--max-seq-length", 32, "--dupe-factor", 1, "--workers", 1, "--no-progress")
    _cli("pretrain", "--out", tmp_path / "pt", "--data", tmp_path / "data", *TINY, "--max-steps", 2,
         "--batch-size", 4, "--eval-every", 0, "--save-every", 2, "--no-progress")
    rows = _rows(640)[600:]
    _pairs(tmp_path / "train.tsv", rows[:24])
    _pairs(tmp_path / "dev.tsv", rows[24:])
    _cli("finetune", "classify", "--train", tmp_path / "train.tsv", "--dev", tmp_path / "dev.tsv",
         "--text-column", "premise", "--text-pair-column", "hypothesis", "--model", tmp_path / "pt",
         "--out", tmp_path / "ft", "--max-steps", 2, "--batch-size", 8, "--max-seq-length", 32, "--no-progress")
    _cli("predict", "classify", "--model", tmp_path / "ft" / "best", "--test", tmp_path / "dev.tsv",
         "--out", tmp_path / "pred")
    assert len((tmp_path / "pred" / "test_predictions.tsv").read_text().splitlines()) == len(rows[24:]) + 1
    _cli("convert", tmp_path / "ft" / "best", tmp_path / "hf", "--to", "hf")

    ours = load_tokenizer(tmp_path / "ft" / "best")
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    premises, hypotheses = [r[0] for r in rows], [r[1] for r in rows]
    got = theirs(premises, hypotheses, truncation=False)["input_ids"]
    assert [ours.encode_pair(a, b)[0] for a, b in zip(premises, hypotheses)] == got
    seen = _rows(1)[0][0]       # a sentence of the vocab's corpus: every syllable known
    assert ours.unk_id not in ours.encode(seen)
    # decomposed Hangul (macOS NFD) is [UNK] in BERT's pipeline, ours and transformers' alike (docs say so)
    nfd = unicodedata.normalize("NFD", seen)
    assert ours.encode(nfd) == theirs(nfd, add_special_tokens=False)["input_ids"]

    batch = theirs(premises[:4], hypotheses[:4], padding=True, truncation=True, max_length=32, return_tensors="pt")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "hf")).eval()
    mine = AlbertForSequenceClassification.from_pretrained(tmp_path / "ft" / "best").eval()
    with torch.no_grad():
        want = model(**batch).logits
        have = mine(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                    attention_mask=batch["attention_mask"])["logits"]
    torch.testing.assert_close(have, want, rtol=1e-4, atol=1e-5)


@needs_kornli
def test_the_hangul_warning_says_how_to_set_the_option_where_no_option_is_taken(korean_vocab, tmp_path, capsys):
    """A Korean vocab.txt brought bare (BERT's defaults: lowercase, accent stripping) to `data build`: the warning
    said `-o strip_accents=false`, which data build refuses (`unrecognized arguments`). It now says to write a
    tokenizer_config.json beside the vocab.txt; doing so, the build knows every syllable."""
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "vocab.txt").write_bytes((korean_vocab / "wp" / "vocab.txt").read_bytes())
    build = ["data", "build", "--input", korean_vocab / "corpus.txt", "--tokenizer", bare / "vocab.txt",
             "--max-seq-length", 32, "--dupe-factor", 1, "--workers", 1, "--no-progress"]
    with pytest.warns(UserWarning, match=r'Hangul tokens .* write \{"strip_accents": false\} to a '
                                         r"tokenizer_config.json beside the vocab.txt"):
        _cli(*build, "--out", tmp_path / "d1")
    with pytest.raises(SystemExit) as refused:             # what the warning used to advise
        main([str(a) for a in [*build, "--out", tmp_path / "d0", "-o", "strip_accents=false"]])
    assert refused.value.code == 2
    capsys.readouterr()
    (bare / "tokenizer_config.json").write_text('{"strip_accents": false}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _cli(*build, "--out", tmp_path / "d2")
    share = re.search(r"unknown tokens \(\[UNK\]\) [\d,]+ of [\d,]+ tokens of text \(([\d.]+)%\)",
                      capsys.readouterr().err)
    assert share and float(share.group(1)) < 2, share    # was 84% [UNK]: every syllable decomposed


def _vocab(tmp_path, lines: list[str]):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_token_on_two_lines_is_a_warning_naming_the_lines(tmp_path):
    """A token appended to a vocab.txt that already held it (a common way of 'adding' words): BERT and
    transformers give it the last line's id, so a pretrained model's id for it is never produced again, silently.
    We read it as they do and say so."""
    path = _vocab(tmp_path, [*SPECIALS, "그리고", "말했다", "", "", "그리고"])
    with pytest.warns(UserWarning, match=r"1 line\(s\) repeat an earlier token, e.g. line 10 repeats '그리고' of "
                                         r"line 6; .*id 5 \(line 6\) is never produced"):
        tok = load_tokenizer(path, do_lower_case=False)
    assert tok.encode("그리고") == [9] and tok.vocab_size == 10
    with warnings.catch_warnings():          # empty lines repeat without a word: they are never produced
        warnings.simplefilter("error")
        load_tokenizer(_vocab(tmp_path, [*SPECIALS, "a", "", ""]))


@pytest.mark.parametrize("lines, hint", [
    (["[PAD] [UNK] [CLS] [SEP] [MASK] 그리고"], "it holds 1 line(s): a vocab.txt holds one token a line"),
    ([f"{t}\t0" for t in ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁그리고"]],
     "its lines hold tab-separated fields (line 1: '<pad>\\t0'): a vocab.txt holds one token a line and nothing "
     "else (a SentencePiece .vocab is not one: give its .model)"),
    ([f"{t} " for t in [*SPECIALS, "그리고"]], "its lines hold spaces around the tokens ('[PAD] ')"),
])
def test_a_vocab_without_the_special_tokens_says_what_its_lines_hold(tmp_path, lines, hint):
    """A vocab written on one line, a SentencePiece .vocab (token TAB score) or a word-count list renamed to
    vocab.txt, tokens with trailing spaces: all were 'it lacks [all five]', with no word of why."""
    with pytest.raises(UserError, match="it lacks") as error:
        load_tokenizer(_vocab(tmp_path, lines))
    assert hint in str(error.value)
    assert "\n" not in str(error.value)
