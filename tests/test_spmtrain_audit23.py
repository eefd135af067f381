"""Audit 23 of `albertlm tokenizer train` as a user training a SentencePiece vocabulary for a new language exactly
as google-research ALBERT trained 30k-clean: the model's recorded training and normalization settings equal
albert-base-v2's field by field, and it loads in transformers' AutoTokenizer with our ids; an --out inside the
input directory is refused (the next training read the earlier tokenizer's files as text); a vocabulary size
the corpus cannot fill says which flag and what limit; --no-shuffle announces the training and the summary says
how many sentences were read and sampled; an error raised while sentencepiece reads the sentences itself is the
reader's own (it was a source location), and Ctrl-C stays an interrupt."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.tokenization import load_tokenizer
from albertlm.tokenization.sentencepiece import (SentencePieceOptions, SentencePieceTrainOptions, read_text_lines,
                                                 train_sentencepiece)
from conftest import alice_documents, assert_one_error, shared_path
import google_albert

ALBERT_SYMBOLS = '(,),",-,.,–,£,€'   # google-research ALBERT README's --user_defined_symbols
# what differs by nature: the input and prefix albert-base-v2's spm_train recorded (we record none), the size,
# its 16 threads, and the nmt_nfkc character map of a newer sentencepiece (newer Unicode; see docs)
NOT_COMPARED = {"input", "model_prefix", "vocab_size", "num_threads", "precompiled_charsmap"}


def _train(inputs, out, *extra) -> int:
    return main(["tokenizer", "train", "--input", *map(str, inputs), "--out", str(out), "--threads", "1", *extra])


def _proto(path: Path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    return proto


@pytest.fixture(scope="module")
def albert_like(tmp_path_factory):
    """ALBERT's recipe (--lowercase --strip-accents, its user-defined symbols) on the first 1,200 lines of Alice."""
    root = tmp_path_factory.mktemp("albert_like")
    text = alice_documents(root, 1200)
    assert _train([text], root / "spm", "--vocab-size", "1000", "--lowercase", "--strip-accents",
                  "--user-defined-symbols", ALBERT_SYMBOLS) == 0
    return root / "spm", [line for line in text.read_text().splitlines() if line.strip()]


def test_the_recorded_settings_are_albert_base_v2s(albert_like):
    """A pure check (passes before this session's changes): trainer_spec and normalizer_spec equal those of the
    real albert-base-v2 spiece.model in every field but NOT_COMPARED; the first 13 pieces are the same."""
    out, _ = albert_like
    ours, albert = _proto(out / "spiece.model"), _proto(shared_path("spm", "albert-base-v2_spiece.model"))
    for spec in ("trainer_spec", "normalizer_spec"):
        for field in getattr(albert, spec).DESCRIPTOR.fields:
            if field.name not in NOT_COMPARED:
                a, b = getattr(getattr(albert, spec), field.name), getattr(getattr(ours, spec), field.name)
                assert (list(a) if hasattr(a, "extend") else a) == (list(b) if hasattr(b, "extend") else b), \
                    f"{spec}.{field.name}"
    assert [(p.piece, p.type) for p in ours.pieces[:13]] == [(p.piece, p.type) for p in albert.pieces[:13]]


def test_the_model_loads_in_auto_tokenizer_with_our_ids(albert_like, monkeypatch):
    """A pure check: default ids = google's algorithm (tests/google_albert.py); transformers 5's AutoTokenizer
    splits user-defined symbols off first (docs), which `split_added_tokens=True` reproduces exactly."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out, lines = albert_like
    ours = load_tokenizer(out)
    assert ours.options.do_lower_case and not ours.options.keep_accents
    sample = lines[:400] + ["Ünïcödé CAFÉ (said) Alice -- £5, €10, 1,000."]
    assert ours.encode_batch(sample) == [google_albert.encode_ids(ours.sp, t) for t in sample]
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))
    assert [theirs.convert_tokens_to_ids(t) for t in ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "(", "€")] == \
        [0, 1, 2, 3, 4, 5, 12]
    assert load_tokenizer(out, split_added_tokens=True).encode_batch(sample) == \
        theirs(sample, add_special_tokens=False)["input_ids"]


def test_an_out_inside_the_input_directory_is_refused(tmp_path, capsys):
    """The first training into corpus/spm worked; the next (--overwrite) read spm/spiece.vocab and
    tokenizer_config.json as training text (here: a JSON-lines error naming the config file)."""
    (tmp_path / "corpus").mkdir()
    alice_documents(tmp_path / "corpus", 200)
    assert_one_error(capsys, _train([tmp_path / "corpus"], tmp_path / "corpus" / "spm", "--vocab-size", "300"),
                     "--out", "inside the input directory", "outside the inputs")
    assert not (tmp_path / "corpus" / "spm").exists()
    assert _train([tmp_path / "corpus"], tmp_path / "spm", "--vocab-size", "300") == 0


def test_a_vocabulary_the_corpus_cannot_fill_names_the_flag_and_the_limit(tmp_path, capsys):
    text = alice_documents(tmp_path, 300)
    code = _train([text], tmp_path / "a", "--vocab-size", "30000")
    err = capsys.readouterr().err
    limit = re.search(r"Please set it to a value <= (\d+)", err).group(1)   # sentencepiece's sentence is kept
    capsys.readouterr()
    assert code == 2 and f"--vocab-size {limit} or less" in err and "--vocab-size 30000 is more than this corpus" \
        in err and "sentences read" in err and len(err.strip().splitlines()) == 1, err
    assert _train([text], tmp_path / "b", "--vocab-size", limit) == 0
    news = shared_path("text", "zh", "news_zh_1.txt")
    assert_one_error(capsys, _train([news], tmp_path / "c", "--vocab-size", "800"), "800 vs 1394.",
                     "1,389 characters of this corpus and 5 special and user-defined pieces make 1,394")


def test_no_shuffle_announces_the_training_and_the_summary_says_what_was_sampled(tmp_path, capsys):
    """sentencepiece stops asking for sentences at the --input-sentence-size-th with --no-shuffle, so the line
    announcing its silent training was never printed; the summary named no sentence counts at all."""
    text = alice_documents(tmp_path, 1200)
    train_sentencepiece([text], tmp_path / "api", SentencePieceTrainOptions(
        vocab_size=300, num_threads=1, input_sentence_size=400, shuffle_input_sentence=False), show_progress=True)
    assert "read 400 sentences (--no-shuffle: the first ones); training the unigram model" in \
        capsys.readouterr().err
    assert _train([text], tmp_path / "sampled", "--vocab-size", "300", "--input-sentence-size", "400") == 0
    assert re.search(r"[\d,]+ sentences \(a random sample of 400 trained on", capsys.readouterr().out)
    assert _train([text], tmp_path / "first", "--vocab-size", "300", "--input-sentence-size", "400",
                  "--no-shuffle") == 0
    assert "the first 400 sentences (--no-shuffle" in capsys.readouterr().out


@pytest.mark.parametrize("error", [UserError("cannot read x.parquet as Parquet (damaged)"), KeyboardInterrupt()])
def test_an_error_while_sentencepiece_reads_is_the_readers_own(tmp_path, error):
    """Unsampled (--input-sentence-size 0, or --no-shuffle), sentencepiece pulls the sentences itself and turned
    what the reader raised into `sentencepiece training failed:   .../x.py(7): reader`, Ctrl-C included."""
    text = alice_documents(tmp_path, 600)

    def reader(path):
        for number, line in enumerate(read_text_lines(path)):
            if number == 300:
                raise error
            yield line

    with pytest.raises(type(error)) as caught:
        train_sentencepiece([text], tmp_path / "tok", SentencePieceTrainOptions(
            vocab_size=300, num_threads=1, input_sentence_size=0), SentencePieceOptions(), show_progress=False,
            read_lines=reader, check_lines=read_text_lines)
    assert caught.value is error
