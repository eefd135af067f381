"""`albertlm tokenizer train|encode|decode|info`: train SentencePiece / WordPiece, encode stdin to JSON ids and back.

Heavy imports (sentencepiece, tokenizers) happen inside the handlers so `albertlm --help` stays fast.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from albertlm.data.corpus import FORMATS, NOT_UTF8_HINT  # standard library only
from albertlm.errors import UserError, say_warning, stderr_is_terminal

BATCH_LINES = 4096  # lines per native encode_batch call


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    sub = parser.add_subparsers(dest="action", metavar="{train,encode,decode,info}", required=True)
    train = "train a SentencePiece unigram model (or a WordPiece vocab)"
    _add_train(sub.add_parser("train", help=train, description=f"{train} on text files (docs/tokenization.md)"))
    for name, text in (("encode", "read lines on stdin, print one JSON list of ids per line"),
                       ("decode", "read JSON lists of ids on stdin, print one text per line"),
                       ("info", "print a tokenizer's file, kind, algorithm, vocabulary size, special ids and "
                                "preprocessing")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--tokenizer", "-t", required=True, metavar="PATH",
                       help="spiece.model / *.model, vocab.txt, tokenizer.json, or a directory holding one")
        p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                       help="override a preprocessing option, e.g. do_lower_case=false (repeatable)")
        if name == "encode":
            p.add_argument("--pair", action="store_true",
                           help="lines are 'A<TAB>B'; print [CLS] A [SEP] B [SEP] ids")
            p.add_argument("--special", action="store_true", help="add [CLS] ... [SEP] to single lines")
            p.add_argument("--token-types", action="store_true",
                           help="print {\"input_ids\": [...], \"token_type_ids\": [...]} per line")
        if name == "info":
            p.add_argument("--json", action="store_true", help="print one JSON object instead of lines of text")


def _add_train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", nargs="+", required=True, metavar="PATH",
                   help="files or directories, read as `albertlm data build` reads them: text (one sentence per "
                        "line, or paragraphs), JSONL, WikiExtractor, CSV, Parquet, Arrow, compressed (.gz/.bz2/.xz/.zst)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="input format, as for `albertlm data build` (default: auto, see docs/data.md)")
    p.add_argument("--text-field", default="text", metavar="NAME",
                   help="JSONL field / CSV, Parquet or Arrow column holding the text (default: text)")
    p.add_argument("--vocab-size", type=int, default=30000, metavar="N",
                   help="vocabulary size (default 30000, as ALBERT)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (spiece.model or vocab.txt)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a tokenizer already in --out (all of its files), once the new one is trained")
    p.add_argument("--kind", choices=("sentencepiece", "wordpiece"), default="sentencepiece",
                   help="SentencePiece (ALBERT) or a WordPiece vocab.txt (BERT) (default: sentencepiece)")
    p.add_argument("--lowercase", action="store_true", help="lowercase text (ALBERT's English models do)")
    p.add_argument("--strip-accents", action="store_true",
                   help="NFKD + drop accents (café -> cafe); ALBERT's English models do. Off by default")
    # the options WordPiece training has no use for (SENTENCEPIECE_ONLY): `--kind wordpiece --seed 1` is refused, and the
    # help listed them among the others without a word of it
    sp = p.add_argument_group("SentencePiece options", "--kind sentencepiece only: --kind wordpiece refuses them")
    sp.add_argument("--character-coverage", type=float, default=0.99995, metavar="X",
                   help="share of characters the vocabulary must cover, in [0.98, 1]; the rarest others "
                        "become <unk> (default 0.99995, as ALBERT; 0.9995 is usual for Chinese or Japanese)")
    sp.add_argument("--input-sentence-size", type=int, default=10_000_000, metavar="N",
                   help="sentences sampled from the input for training (0 = all, else at least 101; default 10M "
                        "as ALBERT)")
    sp.add_argument("--no-shuffle", action="store_true", help="take the first sentences instead of a random sample")
    sp.add_argument("--model-type", choices=("unigram", "bpe"), default="unigram",
                   help="SentencePiece algorithm: unigram (ALBERT) or BPE (default: unigram)")
    sp.add_argument("--user-defined-symbols", default="", metavar="A,B,...",
                   help="pieces always kept whole (ALBERT used '(,),\",-,.,–,£,€'; see docs/tokenization.md)")
    sp.add_argument("--threads", type=int, default=0, metavar="N",
                   help="SentencePiece training threads, at most 1024 (default 0: all usable cores, at most 8)")
    sp.add_argument("--seed", type=int, default=12345, metavar="N",
                   help="seed of the --input-sentence-size sample: same input, seed and --threads, same model "
                        "(default 12345)")
    sp.add_argument("--verbose", action="store_true", help="show sentencepiece's own log")


def run(args: argparse.Namespace, command: str) -> int:
    return {"train": _train, "encode": _encode, "decode": _decode, "info": _info}[args.action](args)


# -- train -----------------------------------------------------------------------------------------

# the files `load_tokenizer` finds in a directory, and what our training writes
TOKENIZER_FILES = ("spiece.model", "spiece.vocab", "vocab.txt", "tokenizer.json", "tokenizer_config.json")
# options WordPiece training does not use: argument name -> (flag, default)
SENTENCEPIECE_ONLY = {"model_type": ("--model-type", "unigram"),
                      "user_defined_symbols": ("--user-defined-symbols", ""),
                      "character_coverage": ("--character-coverage", 0.99995),
                      "input_sentence_size": ("--input-sentence-size", 10_000_000),
                      "no_shuffle": ("--no-shuffle", False),
                      "threads": ("--threads", 0),   # the tokenizers trainer uses every core and has no seed
                      "seed": ("--seed", 12345),
                      "verbose": ("--verbose", False)}   # the tokenizers trainer has no log to show: it did nothing


def _check_train_args(args: argparse.Namespace) -> None:
    from albertlm.config.run import SEED_LIMIT
    from albertlm.tokenization.sentencepiece import check_vocab_size

    check_vocab_size(args.vocab_size, "--vocab-size")
    if not 0 <= args.seed < SEED_LIMIT:
        raise UserError(f"--seed must be in [0, 2**32), got {args.seed}")
    if args.input_sentence_size < 0:
        raise UserError(f"--input-sentence-size must be >= 0 (0 = all), got {args.input_sentence_size}")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0 (0 = all usable cores), got {args.threads}")
    if args.kind != "wordpiece":
        from albertlm.tokenization.sentencepiece import check_character_coverage, check_sample_and_threads

        check_character_coverage(args.character_coverage, "--character-coverage")
        check_sample_and_threads(args.input_sentence_size, args.threads, ("--input-sentence-size", "--threads"))
    if args.kind == "wordpiece":
        given = [flag for name, (flag, default) in SENTENCEPIECE_ONLY.items() if getattr(args, name) != default]
        if given:
            raise UserError(f"{', '.join(given)}: SentencePiece option(s), unused by --kind wordpiece; leave them out")
    else:
        from albertlm.tokenization.sentencepiece import check_user_defined_symbols

        check_user_defined_symbols(_symbols(args), _sentencepiece_options(args), args.vocab_size,
                                   "--user-defined-symbols")


def _symbols(args: argparse.Namespace) -> tuple[str, ...]:
    """--user-defined-symbols "A,B": its comma-separated symbols; empty entries ("A,,B", a trailing comma) skipped."""
    return tuple(s for s in args.user_defined_symbols.split(",") if s)


def _sentencepiece_options(args: argparse.Namespace):
    from albertlm.tokenization.sentencepiece import SentencePieceOptions

    return SentencePieceOptions(do_lower_case=args.lowercase, keep_accents=not args.strip_accents)


def _existing_tokenizer(out: Path) -> list[str]:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    if not out.is_dir():
        return []
    return [name for name in TOKENIZER_FILES if (out / name).exists()]


def _check_out_outside_inputs(out: Path, inputs: list[str], files: list[Path]) -> None:
    """Refuse an --out that is (or is inside) an input directory, or holds an input file, as `data build` does.
    The first training there worked, but the next one (--overwrite, another --vocab-size) read the earlier
    tokenizer as training text: spiece.vocab's "piece<TAB>score" lines trained into the model, and its
    tokenizer_config.json stopped an auto-detected run with a JSON-lines error naming neither --out nor the cause."""
    target = out.resolve()
    for item in inputs:
        directory = Path(item).resolve()
        if directory.is_dir() and (target == directory or directory in target.parents):
            raise UserError(f"--out {out} is inside the input directory {item}: a later training would read this "
                            "tokenizer's files as text; pick an --out outside the inputs")
    for path in files:
        if target in path.resolve().parents:
            raise UserError(f"--out {out} holds the input file {path}; pick an --out outside the inputs")


def _line_reader(fmt: str, text_field: str, counts, facts: dict | None = None):
    """A file -> its sentences, read as `albertlm data build` reads it (formats, compression, damage).

    `progress(n)`, when given, is told how far into the file as stored the reading is (the training's progress,
    over the files' sizes; see `sentencepiece.read_with_progress`): for a compressed file (whose text is several
    times its size), a UTF-16/UTF-32 one or a Parquet/Arrow one, the stored bytes the reader has consumed, document by document; for
    plain text, the UTF-8 bytes of the sentences given out, every ~64 kB (a file without blank lines is one
    document of up to 32 MB, so counting documents there would leap from 0 to 100%).

    `facts`: path -> what `check_inputs` learned of its head (`corpus.FileFacts`), so that the reader opens each
    file once, to read it (as `data build` does): the training opened every file four times (the checks, the
    magic bytes here, and the reader's own format guess, twice for the first file's emptiness check)."""
    from albertlm.data.corpus import compression_of, read_documents, table_format, wide_encoding

    def read_lines(path: Path, progress=None):
        stored = False
        found = facts.get(path) if facts is not None else None
        if progress is not None and found is not None:
            stored = found.table is not None or found.compression is not None or found.encoding is not None
        elif progress is not None:
            try:
                with open(path, "rb") as handle:
                    magic = handle.read(8)
            except OSError:   # the reader says why
                magic = b""
            # UTF-16/UTF-32 text is counted in its stored bytes too: its UTF-8 sentences are another size
            stored = (compression_of(magic) is not None or table_format(path, magic, fmt) is not None
                      or wide_encoding(magic) is not None)
        pending = 0
        for document in read_documents([path], fmt, text_field, counts, progress=progress if stored else None,
                                       facts=None if found is None else [found]):
            for sentence in document.sentences:
                if progress is not None and not stored:
                    pending += 1 + (len(sentence) if sentence.isascii() else len(sentence.encode("utf-8", "replace")))
                    if pending > 65536:
                        progress(pending)
                        pending = 0
                yield sentence
        if pending:
            progress(pending)
    read_lines.reports_bytes = True   # type: ignore[attr-defined]
    return read_lines


def _tables_warning(tables: list) -> str | None:
    """The one warning line about inputs that look like tab-separated tables ((path, `corpus.TableShape`) pairs,
    from `check_inputs`), or None, as `data build` says it: a GLUE or KorNLI .tsv given to the training is read
    as text, so its header's column names and its labels ("entailment", "neutral") trained into the vocabulary
    as frequent words, without a word."""
    from albertlm.data.build import tables_warning

    return tables_warning(tables, done="trained on", purpose="train")


def _train(args: argparse.Namespace) -> int:
    """Everything is checked before --out changes; the tokenizer is trained into a staging directory inside
    --out and moved in (replacing an earlier one's files with --overwrite) only when training succeeded."""
    import shutil

    from albertlm.data.corpus import CorpusCounts, check_inputs, find_input_files

    _check_train_args(args)
    files = find_input_files(args.input)
    out = Path(args.out)
    _check_out_outside_inputs(out, args.input, files)
    # (and that the text files are UTF-8); what it learns of each file's head is handed to the reader
    facts = dict(zip(files, check_inputs(files, args.format, args.text_field, [])))
    existing = _existing_tokenizer(out)
    if existing and not args.overwrite:
        raise UserError(f"--out {out} already holds a tokenizer ({existing[0]}); pass --overwrite to replace it, "
                        "or another --out")
    tables = _tables_warning([(path, found.columns) for path, found in facts.items() if found.columns is not None])
    if tables:   # before the training, which may take hours
        say_warning(tables)
    counts = CorpusCounts()
    long_sentences = [0]   # sentences over sentencepiece's 4192 bytes, cut to fit
    read_lines = _line_reader(args.format, args.text_field, counts, facts)
    # the emptiness check reads the first lines once more: with its own counts, so nothing is counted twice;
    # if it finds no text, those counts say why (binary files, ...)
    check_counts = CorpusCounts()
    check_lines = _line_reader(args.format, args.text_field, check_counts, facts)
    # the folders this training makes (--out and any missing parents): removed again if it fails
    created = [folder for folder in (out, *out.parents) if not folder.exists()]
    stats: dict = {}   # sentences read and trained on (SentencePiece)
    staging = out / ".training-tokenizer"
    start = time.perf_counter()
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if args.kind == "wordpiece":
            _train_wordpiece(args, files, staging, read_lines, check_lines, check_counts.describe_skipped)
        else:
            _train_sentencepiece(args, files, staging, read_lines, check_lines, long_sentences,
                                 check_counts.describe_skipped, stats)
        for name in existing:
            (out / name).unlink()
        for path in staging.iterdir():
            path.replace(out / path.name)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write the tokenizer ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:   # innermost first; a folder something else wrote into stays
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(out)
    seconds = time.perf_counter() - start
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    print(f"trained {args.kind} V={tokenizer.vocab_size} on {len(files)} file(s), {megabytes:.1f} MB"
          f"{_sentences(stats, args)}, in {seconds:.1f} s -> {args.out}")
    print(f"special ids: pad={tokenizer.pad_id} unk={tokenizer.unk_id} cls={tokenizer.cls_id} "
          f"sep={tokenizer.sep_id} mask={tokenizer.mask_id}; "
          f"options: {_options_text(_as_dict(tokenizer.options))}")   # as `tokenizer info` shows them
    skipped = {k: getattr(counts, k) for k in ("empty_files", "binary_files", "corrupt_files", "bad_json_lines",
                                                "bad_rows", "empty_records", "transcoded_files", "invalid_utf8_lines", "nul_lines",
                                                "long_lines_cut", "unclosed_documents", "lines_outside_documents")
               if getattr(counts, k)}
    if long_sentences[0]:
        skipped["sentences over 4192 bytes cut"] = long_sentences[0]
    if stats.get("reserved_char_sentences"):   # sentencepiece would have dropped them whole
        skipped["sentences holding U+2585 ▅ trained with a space for it (sentencepiece reserves it)"] = \
            stats["reserved_char_sentences"]
    if skipped:
        print("skipped or changed: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in skipped.items()),
              file=sys.stderr)
    if tokenizer.vocab_size < args.vocab_size:
        say_warning(f"the input gave only {tokenizer.vocab_size} tokens, fewer than --vocab-size "
                    f"{args.vocab_size} (a small corpus)")
    if args.kind == "sentencepiece" and args.model_type == "bpe":
        say_warning(BPE_WARNING)
    if args.kind == "sentencepiece" and args.strip_accents:
        hangul = _stripped_hangul_warning(tokenizer, args.out)
        if hangul:
            say_warning(hangul)
    return 0


HANGUL_WARN_PIECES = 100   # as SentencePieceTokenizer's warning for a model without Hangul composition


def _stripped_hangul_warning(tokenizer, out: str) -> str | None:
    """The warning for a `--strip-accents` SentencePiece model holding HANGUL_WARN_PIECES or more Hangul pieces, or
    None. albertlm and sentencepiece read Korean with it (the model's nmt_nfkc normalizer composes the jamo that
    NFKD makes back into syllables), but transformers 5's AlbertTokenizer, loaded from the output directory as
    it is (`AutoTokenizer.from_pretrained(OUT)`), strips accents without composing them back: every Hangul
    syllable is <unk> there. Only `convert --to hf` said so; the training, where the choice is made, did not."""
    import re

    syllables = re.compile("[\uac00-\ud7a3]")
    pieces = sum(1 for i in range(tokenizer.vocab_size) if syllables.search(tokenizer.id_to_token(i)))
    if pieces < HANGUL_WARN_PIECES:
        return None
    return (f"--strip-accents: transformers 5's AlbertTokenizer (AutoTokenizer.from_pretrained(\"{out}\"), "
            "pipeline) strips accents with NFKD and does not compose Hangul back, so it never gives the "
            f"{pieces:,} Hangul pieces of this vocabulary and reads Korean text as <unk> (albertlm and sentencepiece "
            "compose it: their ids are the model's); train Korean without --strip-accents")


# transformers 5's AlbertTokenizer builds a `tokenizers` Unigram from every spiece.model's pieces and scores
BPE_WARNING = ("transformers 5's AlbertTokenizer reads every spiece.model as a unigram model, so this BPE "
               "model gives other ids there (on most lines); albertlm and sentencepiece give its BPE ids "
               "(--model-type unigram for a model transformers reads alike)")


def _sentences(stats: dict, args: argparse.Namespace) -> str:
    """', 412,345 sentences (a random sample of 50,000 trained on)' for the summary: the sample used to be said
    only on a terminal, before the training, so a log of a short run never said whether the corpus was sampled."""
    if not stats:
        return ""
    read, trained = stats["sentences_read"], stats["sentences_trained"]
    if trained >= read:
        return f", {read:,} sentences"
    if args.no_shuffle:
        return f", the first {trained:,} sentences (--no-shuffle, --input-sentence-size {args.input_sentence_size:,})"
    return (f", {read:,} sentences (a random sample of {trained:,} trained on, --input-sentence-size "
            f"{args.input_sentence_size:,})")


def _train_sentencepiece(args: argparse.Namespace, files: list[Path], out: Path, read_lines, check_lines=None,
                         long_sentences: list[int] | None = None, explain_empty=None, stats: dict | None = None):
    from albertlm.tokenization.sentencepiece import SentencePieceTrainOptions, train_sentencepiece

    train = SentencePieceTrainOptions(
        vocab_size=args.vocab_size, character_coverage=args.character_coverage,
        input_sentence_size=args.input_sentence_size, shuffle_input_sentence=not args.no_shuffle,
        model_type=args.model_type, user_defined_symbols=_symbols(args), num_threads=args.threads, seed=args.seed)
    options = _sentencepiece_options(args)
    def on_cut():
        if long_sentences is not None:
            long_sentences[0] += 1
    terminal = stderr_is_terminal()
    return train_sentencepiece(files, out, train, options, show_progress=terminal, log_progress=not terminal,
                               verbose=args.verbose, read_lines=read_lines, check_lines=check_lines,
                               on_cut=on_cut, explain_empty=explain_empty, stats=stats)


def _train_wordpiece(args: argparse.Namespace, files: list[Path], out: Path, read_lines, check_lines=None,
                     explain_empty=None):
    from albertlm.tokenization.wordpiece import WordPieceOptions, train_wordpiece

    options = WordPieceOptions(do_lower_case=args.lowercase, strip_accents=True if args.strip_accents else False)
    terminal = stderr_is_terminal()
    return train_wordpiece(files, args.vocab_size, out, options, show_progress=terminal, log_progress=not terminal,
                           read_lines=read_lines, check_lines=check_lines, explain_empty=explain_empty)


# -- encode / decode / info ------------------------------------------------------------------------

def _parse_options(items: list[str]) -> dict:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--option expects KEY=VALUE, got {item!r}")
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            options[key.strip()] = True
        elif lowered in ("false", "0", "no"):
            options[key.strip()] = False
        elif lowered == "none":
            options[key.strip()] = None
        else:
            raise UserError(f"--option {key}: expected true/false/none, got {value!r}")
    return options


def _load(args: argparse.Namespace):
    """The tokenizer of --tokenizer/--option; albertlm's own warnings while loading (a Korean vocab.txt with
    accent stripping) are one `albertlm tokenizer: warning:` line each on stderr (`errors.say_warning`), not
    Python's two-line form quoting our source."""
    import warnings

    from albertlm.tokenization import load_tokenizer

    with warnings.catch_warnings(record=True) as caught:   # the filters in force decide what is recorded
        tokenizer = load_tokenizer(args.tokenizer, **_parse_options(args.option))
    for warning in caught:
        if issubclass(warning.category, UserWarning) and "albertlm" in Path(warning.filename).parts:
            say_warning(str(warning.message))
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    return tokenizer


def _stdin_lines():
    """Lines of stdin as `albertlm embed` and `fill-mask` read them (`infer_commands.stdin_lines`): split at "\\n"
    only (a lone "\\r" inside a line is text: universal newlines made one input line two lists), a first-line
    byte order mark dropped, and a line that is not UTF-8 a UserError naming it, with what to do. Its bytes used to
    become U+FFFD without a word, which BERT's text cleaning deletes, so a Korean file in CP949 (or Chinese in GBK)
    encoded with a WordPiece vocab lost most of its text, exit 0."""
    from albertlm.cli.infer_commands import stdin_lines

    return (text for _, text in stdin_lines(NOT_UTF8_HINT))


def _batches(lines, size: int = BATCH_LINES):
    batch = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _encode(args: argparse.Namespace) -> int:
    tokenizer = _load(args)
    out = sys.stdout
    unknown = UnknownCount(tokenizer)
    done = 0   # lines written
    for batch in _batches(_stdin_lines()):
        for line, (ids, types) in zip(batch, _encode_batch(tokenizer, batch, args.pair, args.special, done + 1)):
            unknown.add(ids, line)
            record = {"input_ids": ids, "token_type_ids": types} if args.token_types else ids
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
        done += len(batch)
    out.flush()
    if unknown.tokens:
        print(unknown.note(tokenizer.id_to_token(tokenizer.unk_id)), file=sys.stderr)
    return 0


class UnknownCount:
    """The <unk> ids `encode` wrote: text the vocabulary cannot spell (emoji, Han in a Korean model, jamo)
    that `decode` drops, so the user hears of it once, on stderr, instead of finding characters missing."""

    SAMPLE_LINES = 64   # lines holding <unk> whose characters are looked at (`data.build.tally_unknown_characters`)

    def __init__(self, tokenizer):
        self.tokenizer, self.unk_id = tokenizer, tokenizer.unk_id
        self.tokens, self.lines, self.first, self.seen = 0, 0, 0, 0
        self.characters: dict[str, int] = {}
        self._cache: dict = {}

    def add(self, ids, text: str = "") -> None:
        self.seen += 1
        count = sum(1 for i in ids if i == self.unk_id)
        if count:
            self.tokens += count
            self.lines += 1
            self.first = self.first or self.seen
            if text and self.lines <= self.SAMPLE_LINES:
                from albertlm.data.build import tally_unknown_characters

                tally_unknown_characters(text, self.tokenizer, self._cache, self.characters)

    def note(self, unk: str) -> str:
        """One line; decomposed Hangul (macOS's NFD) is told to convert to NFC, as `data build` and fine-tuning
        say it (`data.build.decomposed_hangul`)."""
        from albertlm.data.build import NFC_ADVICE, decomposed_hangul

        advice = f"; {NFC_ADVICE}" if self.characters and decomposed_hangul(list(self.characters.items())) else ""
        return (f"note: {self.tokens:,} {unk} token(s) in {self.lines:,} of {self.seen:,} lines (first: line "
                f"{self.first}): characters the vocabulary does not hold; decode drops them{advice}")


def _encode_batch(tokenizer, lines: list[str], pair: bool, special: bool, first_line: int = 1):
    """(ids, token types) per line; pairs and specials built around one native batch encode. With `pair`, a
    line of more than two tab-separated fields (`first_line` numbers the first line in the message) is a
    UserError: the third column of a TSV (KorNLI's gold_label) was encoded into segment B without a word."""
    if pair:
        halves = [line.split("\t") for line in lines]
        for number, half in enumerate(halves, start=first_line):
            if len(half) > 2:
                raise UserError(f"stdin line {number}: {len(half)} tab-separated fields; --pair reads 'A<TAB>B' "
                                "(keep the two text columns, e.g. cut -f1,2)")
        flat = tokenizer.encode_batch([part for half in halves for part in half])
        k = 0
        for half in halves:
            a = flat[k]
            b = flat[k + 1] if len(half) == 2 else None
            k += len(half)
            yield _with_specials(tokenizer, a, b)
    else:
        for ids in tokenizer.encode_batch(lines):
            yield _with_specials(tokenizer, ids, None) if special else (ids, [0] * len(ids))


def _with_specials(tokenizer, a: list[int], b: list[int] | None):
    from albertlm.tokenization.base import build_pair

    return build_pair(tokenizer.cls_id, tokenizer.sep_id, a, b)


def _decode(args: argparse.Namespace) -> int:
    tokenizer = _load(args)
    for number, line in enumerate(_stdin_lines(), start=1):
        if not line.strip():
            sys.stdout.write("\n")
            continue
        try:
            ids = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"stdin line {number}: not a JSON list of ids ({exc.msg})") from None
        except ValueError:  # an integer of over 4300 digits (Python's int conversion limit)
            raise UserError(f"stdin line {number}: expected a JSON list of ids in [0, {tokenizer.vocab_size})") \
                from None
        if isinstance(ids, dict):
            ids = ids.get("input_ids")
        # JSON true/false are Python ints (true == 1, the <unk> id of a SentencePiece model): not ids
        if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < tokenizer.vocab_size for i in ids):
            raise UserError(f"stdin line {number}: expected a JSON list of ids in [0, {tokenizer.vocab_size})")
        sys.stdout.write(tokenizer.decode(ids) + "\n")
    sys.stdout.flush()
    return 0


def _as_dict(options) -> dict:
    import dataclasses

    return dataclasses.asdict(options) if dataclasses.is_dataclass(options) else dict(options)


# tokenizer_config.json keys `info` shows for a tokenizer.json (transformers saves dozens; these describe it)
CONFIG_KEYS = ("tokenizer_class", "do_lower_case", "keep_accents", "strip_accents", "tokenize_chinese_chars",
               "model_max_length")
UNSET_LENGTH = 10**12   # transformers writes 1e30 (VERY_LARGE_INTEGER) for "no limit"


def describe(tokenizer, overridden: bool = False) -> dict:
    """What `albertlm tokenizer info` says: the file, kind, vocabulary size, the model's algorithm and own
    settings (a SentencePiece model's type, normalization rule, character coverage, byte fallback and
    user-defined symbols; a tokenizer.json's model and pipeline), the special ids with their tokens, and the
    preprocessing options with where they come from."""
    names = ("pad", "unk", "cls", "sep", "mask")
    info: dict = {"file": None, "kind": tokenizer.kind, "vocab_size": tokenizer.vocab_size, "model": {},
                  "special_ids": {name: getattr(tokenizer, f"{name}_id") for name in names},
                  "special_tokens": {name: tokenizer.id_to_token(getattr(tokenizer, f"{name}_id")) for name in names}}
    if hasattr(tokenizer, "tokenizer_file"):   # a tokenizer.json: its preprocessing is fixed in the file
        info["file"] = str(tokenizer.tokenizer_file)
        info["model"] = tokenizer.pipeline()
        config = tokenizer.options
        info["options"] = {key: config[key] for key in CONFIG_KEYS if key in config
                           and not (key == "model_max_length" and not _set_length(config[key]))}
        config_file = tokenizer.tokenizer_file.parent / "tokenizer_config.json"
        info["options_from"] = str(config_file) if config_file.is_file() else None
        return info
    info["file"] = str(getattr(tokenizer, "model_file", None) or getattr(tokenizer, "vocab_file", ""))
    info["model"] = tokenizer.model_facts() if hasattr(tokenizer, "model_facts") else {"model_type": "wordpiece"}
    info["options"] = _as_dict(tokenizer.options)
    added = getattr(tokenizer, "added_tokens", None)      # a WordPiece directory's tokens added in transformers
    if added:
        info["added_tokens"] = {str(t["id"]): t["content"] for t in added}
    source = getattr(tokenizer, "options_file", None)
    info["options_from"] = str(source) if source is not None else None
    info["options_overridden"] = overridden
    return info


def _set_length(value) -> bool:
    return type(value) is int and 0 < value < UNSET_LENGTH


def _value(value) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def _options_text(options: dict) -> str:
    """Preprocessing options as `info` and `train` print them: `do_lower_case=false keep_accents=true ...`."""
    return " ".join(f"{key}={_value(value)}" for key, value in options.items())


def _info_lines(info: dict) -> list[str]:
    model = info["model"]
    if "normalizer" in model:   # tokenizer.json
        lines = [f"{info['file']}: tokenizer.json, {model['model_type']} model ({info['kind']}), "
                 f"{info['vocab_size']:,} tokens",
                 f"  normalizer: {model['normalizer']}",
                 f"  pre-tokenizer: {model['pre_tokenizer']}; {model['added_tokens']} added tokens matched in text"]
    elif info["kind"] == "sentencepiece" and model:
        symbols = model["user_defined_symbols"]
        lines = [f"{info['file']}: SentencePiece {model['model_type']} model, {info['vocab_size']:,} pieces",
                 f"  normalization: {model['normalization']} (add_dummy_prefix {_value(model['add_dummy_prefix'])}, "
                 f"remove_extra_whitespaces {_value(model['remove_extra_whitespaces'])}); trained with "
                 f"character_coverage {model['character_coverage']}, byte_fallback {_value(model['byte_fallback'])}",
                 f"  user-defined symbols ({len(symbols)}): {' '.join(symbols)}" if symbols
                 else "  user-defined symbols: none"]
    else:
        lines = [f"{info['file']}: {'WordPiece vocab' if info['kind'] == 'wordpiece' else info['kind']}, "
                 f"{info['vocab_size']:,} tokens"]
    if info.get("added_tokens"):
        added = info["added_tokens"]
        lines.append(f"  added tokens ({len(added)}): " + ", ".join(f"{i} {token}" for i, token in added.items()))
    lines.append("  special ids: " + ", ".join(f"{name} {info['special_ids'][name]} {info['special_tokens'][name]}"
                                              for name in info["special_ids"]))
    options = _options_text(info["options"])
    if "normalizer" in model:
        source = f"from {info['options_from']}" if info["options_from"] else "no tokenizer_config.json"
        lines.append(f"  config ({source}; the preprocessing is the file's): {options or 'none'}")
    else:
        source = f"from {info['options_from']}" if info["options_from"] else \
            "defaults: no tokenizer_config.json read"
        if info.get("options_overridden"):
            source += ", with --option"
        lines.append(f"  preprocessing ({source}): {options}")
    return lines


def _info(args: argparse.Namespace) -> int:
    info = describe(_load(args), overridden=bool(args.option))
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        print("\n".join(_info_lines(info)))
    return 0
