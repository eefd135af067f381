"""Audit 15, second part: findings about tokenization and `albertlm data build` left open by
test_data_audit15.py, on the real data of ../shared/data: a vocab.txt with a byte order mark, a file named twice,
empty JSONL/Parquet records, tokenizer training on binary files only, and the control characters transformers 5
deletes before it splits at whitespace."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.tokenization import load_tokenizer
from conftest import assert_one_error, shared_path

SPM = ("spm", "albert-base-v2_spiece.model")
ZH_VOCAB = ("vocab", "albert_zh_vocab.txt")
BOM = b"\xef\xbb\xbf"


def _sample_lines(n: int = 40) -> list[str]:
    text = shared_path("text", "sample_text.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in text if line.strip()][:n]


def _build(inputs: list[Path], out: Path, *extra: str) -> int:
    return main(["data", "build", "--input", *map(str, inputs), "--tokenizer", str(shared_path(*SPM)),
                 "--out", str(out), "--max-seq-length", "64", "--dupe-factor", "1", "--no-progress", *extra])


# -- 1. a vocab.txt saved with a UTF-8 byte order mark ----------------------------------------------------
def test_wordpiece_vocab_with_a_byte_order_mark_loads_and_saves_without_it(tmp_path, capsys):
    plain_file = shared_path(*ZH_VOCAB)
    bom_dir = tmp_path / "bom"
    bom_dir.mkdir()
    (bom_dir / "vocab.txt").write_bytes(BOM + plain_file.read_bytes())     # Notepad / PowerShell "UTF-8 BOM"
    tok = load_tokenizer(bom_dir / "vocab.txt")                              # was: "lacks ['[PAD]']"
    plain = load_tokenizer(plain_file)
    assert tok.id_to_token(0) == "[PAD]" and tok.pad_id == 0 and tok.vocab_size == plain.vocab_size
    lines = _sample_lines() + [line for line in shared_path("text", "zh", "news_zh_1.txt")
                               .read_text(encoding="utf-8").splitlines() if line.strip()][:40]
    assert tok.encode_batch(lines) == plain.encode_batch(lines)
    tok.save(tmp_path / "saved")                                             # the copy loads in transformers too
    assert (tmp_path / "saved" / "vocab.txt").read_bytes() == plain_file.read_bytes()
    assert main(["tokenizer", "info", "-t", str(bom_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["special_ids"]["pad"] == 0


# -- 2. the same file reached twice is read once, and said so -----------------------------------------------
def test_a_file_given_twice_is_read_once_with_one_warning_line(tmp_path, capsys):
    corpus = tmp_path / "in"
    corpus.mkdir()
    shutil.copy(shared_path("text", "sample_text.txt"), corpus / "a.txt")
    (corpus / "b.txt").write_text("\n".join(shared_path("text", "gutenberg", "carroll-alice.txt")
                                            .read_text().splitlines()[:200]) + "\n", encoding="utf-8")
    assert _build([corpus], tmp_path / "once") == 0
    capsys.readouterr()
    assert _build([corpus, corpus / "a.txt"], tmp_path / "twice") == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "more than once" in line]
    assert len(warnings) == 1 and str(corpus / "a.txt") in warnings[0] and "copy" in warnings[0], err
    meta = json.loads((tmp_path / "twice" / "meta.json").read_text())
    assert meta["inputs"] == [str(corpus / "a.txt"), str(corpus / "b.txt")]
    assert meta["counts"]["corpus"]["files"] == 2
    for name in ("shard-00000.bin", "word_starts.npy"):    # exactly the build of the directory alone
        assert (tmp_path / "twice" / name).read_bytes() == (tmp_path / "once" / name).read_bytes()
    # the same file named twice (one spelled through "..")
    spelled = corpus / ".." / "in" / "a.txt"
    assert _build([corpus / "a.txt", spelled], tmp_path / "same") == 0
    assert "more than once are read once: " + str(spelled) in capsys.readouterr().err
    assert json.loads((tmp_path / "same" / "meta.json").read_text())["counts"]["corpus"]["files"] == 1


# -- 3. empty JSONL / Parquet / Arrow records are counted ---------------------------------------------------
def test_empty_jsonl_and_parquet_records_are_counted_in_the_summary_and_meta(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    texts = _sample_lines(30)
    records = [texts[:10], "", texts[10:20], "  \n ", texts[20:]]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": " ".join(r) if isinstance(r, list) else r}) + "\n"
                             for r in records), encoding="utf-8")
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": [" ".join(texts[:15]), "", " ".join(texts[15:])]}), parquet)
    assert _build([jsonl, parquet], tmp_path / "out") == 0
    err = capsys.readouterr().err
    assert "empty records 3" in err, err
    assert f"first of empty records: {jsonl} line 2: field 'text' is empty" in err
    corpus = json.loads((tmp_path / "out" / "meta.json").read_text())["counts"]["corpus"]
    assert corpus["empty_records"] == 3 and corpus["documents"] == 5
    from albertlm.data.corpus import CorpusCounts, read_documents

    counts = CorpusCounts()
    assert len(list(read_documents([parquet], counts=counts))) == 2
    assert counts.empty_records == 1 and counts.examples["empty_records"] == f"{parquet} row 2: the text is empty"


# -- 4. tokenizer training on binary files only says so -----------------------------------------------------
def test_tokenizer_train_on_binary_files_only_names_the_first_binary_file(tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.txt").write_bytes(shared_path("text", "sample_text.txt").read_text(encoding="utf-8")
                                   .encode("utf-16-le"))
    shutil.copy(shared_path(*SPM), inputs / "b.model")
    for kind in ("sentencepiece", "wordpiece"):
        code = main(["tokenizer", "train", "--kind", kind, "--input", str(inputs), "--vocab-size", "100",
                     "--out", str(tmp_path / "tok")])
        assert_one_error(capsys, code, "training input is empty", "skipped 2 binary files",
                         f"first: {inputs / 'a.txt'}: NUL bytes", "UTF-16")
        assert not (tmp_path / "tok").exists()


# -- 5. transformers-5 mode: \x0b and \x1c-\x1f are deleted, not spaces ---------------------------------------
CONTROLS = "\x0b\x1c\x1d\x1e\x1f"


def _real_lines() -> list[str]:
    """Short real lines and fields: Gutenberg, WikiText-2, GLUE (SST-2, RTE), KorNLI."""
    def lines(*parts, limit=60, column=None):
        rows = [line for line in shared_path(*parts).read_text(encoding="utf-8").splitlines() if line.strip()]
        if column is not None:
            rows = [r.split("\t")[column] for r in rows[1:] if len(r.split("\t")) > column]
        return [r.strip() for r in rows if r.strip()][:limit]
    return (lines("text", "gutenberg", "carroll-alice.txt") + lines("text", "wikitext-2-raw", "wiki.test.raw")
            + lines("glue", "SST-2", "dev.tsv", column=0) + lines("glue", "RTE", "val.tsv", column=1)
            + lines("korean", "KorNLI", "xnli.dev.ko.tsv", column=0))


def test_transformers5_mode_deletes_the_control_characters_transformers_5_deletes(tmp_path):
    transformers = pytest.importorskip("transformers")
    shutil.copy(shared_path(*SPM), tmp_path / "spiece.model")
    real = _real_lines()
    assert len(real) > 250
    # each control character between letters, in place of a space, beside a space or an added token ("."),
    # at the ends, and in real sentences (in words and at spaces)
    probes = [p for c in CONTROLS for p in (f"a{c}b", f"x {c} y{c}", f"{c}(a{c}.b)", f"Caf\u00e9{c}{c}na\u00efve")]
    for k, line in enumerate(real):
        c = CONTROLS[k % len(CONTROLS)]
        probes.append(line.replace(" ", c, 2) if k % 2 else line[: len(line) // 2] + c + line[len(line) // 2:])
    for options in ({}, {"keep_accents": True, "do_lower_case": False}):
        hf = transformers.AlbertTokenizer.from_pretrained(str(tmp_path), **options)
        ours = load_tokenizer(tmp_path, split_added_tokens=True, **options)
        assert hf.tokenize("a\x1fb") == ["▁ab"] == ours.tokenize("a\x1fb")    # was: ["▁a", "▁b"]
        expected = hf(probes, add_special_tokens=False)["input_ids"]
        got = ours.encode_batch(probes)
        differ = [p for p, a, b in zip(probes, expected, got) if a != b]
        assert not differ, f"{len(differ)} of {len(probes)} differ, e.g. {differ[:3]!r}"
        # the real text itself, without control characters, is encoded as before: as transformers 5 does
        assert ours.encode_batch(real) == hf(real, add_special_tokens=False)["input_ids"]
    # google's preprocess_text (the default mode) splits at them first, as before
    import google_albert
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "spiece.model"))
    default = load_tokenizer(tmp_path)
    assert default.tokenize("a\x1fb") == ["▁a", "▁b"]
    assert default.encode_batch(probes) == [google_albert.encode_ids(sp, p) for p in probes]
