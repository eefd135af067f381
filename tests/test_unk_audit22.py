"""Audit 22, text the tokenizer does not know: `finetune`, `predict` and `evaluate` said nothing when most of a
split's tokens were the unknown token (a KorNLI file saved by macOS, decomposed Hangul, read with a vocab.txt of
syllables: every word `[UNK]`, the predictions made from nothing); now one warning line per split names it, in
`data build`'s words. When most of the unknown characters are conjoining jamo (NFD), both warnings say to convert
the text to NFC, unless the tokenizer composes it itself (SentencePiece's NFKC), where NFC would change nothing."""
from __future__ import annotations

import unicodedata

import pytest

from albertlm.cli.main import main
from conftest import shared_path

NFD_ADVICE = "decomposed Hangul (NFD, as macOS writes it): convert the text to NFC"
GENERIC_ADVICE = "normalize those characters or use a tokenizer that covers them"


def _kornli(n: int) -> list[list[str]]:
    path = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv")
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:n + 1]]


def _table(path, rows, form: str):
    text = "".join("\t".join(row) + "\n" for row in rows)
    path.write_text("premise\thypothesis\tlabel\n" + unicodedata.normalize(form, text), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def korean(tmp_path_factory):
    """A tiny random ALBERT with a vocab.txt of the Hangul syllables of 40 KorNLI pairs (as a Korean BERT's:
    strip_accents false), and those pairs as train (NFD), dev (NFC) and test (NFD, NFC) files."""
    import torch

    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    root = tmp_path_factory.mktemp("unk_ko")
    rows = _kornli(40)
    chars = sorted({c for row in rows for text in row[:2] for c in text if not c.isspace()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    model = root / "model"
    model.mkdir()
    (model / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (model / "tokenizer_config.json").write_text('{"strip_accents": false}\n')
    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=len(vocab), embedding_size=8, hidden_size=16, num_layers=1,
                                     num_heads=2, ffn_size=16, max_position_embeddings=64)).save_pretrained(model)
    for name, part, form in (("train", rows[:24], "NFD"), ("dev", rows[24:], "NFC"), ("test_nfd", rows[24:], "NFD"),
                             ("test_nfc", rows[24:], "NFC")):
        _table(root / f"{name}.tsv", part, form)
    return root


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "unknown token" in line]


def test_finetune_and_predict_warn_once_per_split_of_decomposed_hangul(korean, tmp_path, capsys, one_thread):
    """NFD train file: one warning naming `train` and telling to convert to NFC; the NFC dev file: none. Then
    `predict classify` on the NFD test file warns naming `test`, and on the NFC one says nothing."""
    assert main(["finetune", "classify", "--train", str(korean / "train.tsv"), "--dev", str(korean / "dev.tsv"),
                 "--text-column", "premise", "--text-pair-column", "hypothesis", "--model", str(korean / "model"),
                 "--out", str(tmp_path / "ft"), "--max-steps", "1", "--batch-size", "8", "--max-seq-length", "32",
                 "--no-progress"]) == 0
    found = _warnings(capsys.readouterr().err)
    assert len(found) == 1, found
    assert found[0].startswith("albertlm finetune: warning: train: ") and NFD_ADVICE in found[0], found[0]
    assert "[UNK]" in found[0] and "first: '그리고" in unicodedata.normalize("NFC", found[0]), found[0]

    for name, expected in (("test_nfd", 1), ("test_nfc", 0)):
        assert main(["predict", "classify", "--model", str(tmp_path / "ft" / "best"), "--test",
                     str(korean / f"{name}.tsv"), "--out", str(tmp_path / name)]) == 0
        found = _warnings(capsys.readouterr().err)
        assert len(found) == expected, (name, found)
    assert (tmp_path / "test_nfd" / "test_predictions.tsv").is_file()


def test_data_build_tells_decomposed_hangul_to_convert_to_nfc(korean, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(unicodedata.normalize("NFD", "\n".join(row[0] for row in _kornli(24)) + "\n"),
                      encoding="utf-8")
    assert main(["data", "build", "--input", str(corpus), "--tokenizer", str(korean / "model"), "--out",
                 str(tmp_path / "data"), "--max-seq-length", "32", "--dupe-factor", "1", "--workers", "1",
                 "--no-progress"]) == 0
    found = [line for line in capsys.readouterr().err.splitlines() if line.startswith("albertlm data: warning:")]
    assert len(found) == 1 and NFD_ADVICE in found[0] and GENERIC_ADVICE not in found[0], found


def test_sentencepiece_composes_nfd_itself_so_the_advice_stays_generic_and_english_is_not_warned():
    """albert-base-v2's SentencePiece (NFKC) reads NFD Korean as NFC: its unknown characters are the syllables,
    and converting to NFC would change nothing; SST-2's English gives no warning at all."""
    from albertlm.tasks.features import tokenizing
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    english = [line.split("\t")[0] for line in
               shared_path("glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:101]]
    korean = [unicodedata.normalize("NFD", row[0]) for row in _kornli(20)]
    lines: list[str] = []
    for what, texts in (("english", english), ("korean", korean)):
        with tokenizing(tokenizer, what, False, lines) as counted:
            counted.encode_batch(texts)
    assert len(lines) == 1 and lines[0].startswith("korean: "), lines
    assert GENERIC_ADVICE in lines[0] and "NFC" not in lines[0] and "<unk>" in lines[0], lines[0]
