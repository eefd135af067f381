"""`albertlm data build`: documents -> tokenized chunks -> pairs -> masked records -> shards + meta.json.

Streaming and parallel, yet deterministic:
- the main process reads documents in input order and groups them into chunks of about `chunk_chars`
  characters (a chunk never splits a document). Chunking depends only on the input, never on `workers`;
- a chunk is a job: tokenize its sentences in native batches, make `dupe_factor` passes of pairs, shuffle
  them into records, mask blocks of records at once (2**17 positions per block). Every document pass has
  its own rng seeded by (seed, document index, dupe), the shuffle one seeded by (seed, chunk index) and
  each mask block one seeded by (seed, chunk index, block), so the output is byte-identical for any
  number of workers;
- results are written in chunk order while at most `workers + 1` chunks are in flight, so memory is bounded
  by a few chunks plus the largest document, whatever the corpus size;
- `num_shards K, shard_index i` keeps the chunks with index % K == i: K machines build K disjoint parts
  whose union is exactly the single-machine build (the loader merges the part metas);
- NSP negatives come from the other documents of the same chunk plus excerpts (64 sentences) of the
  previous chunk's last 8 documents: a bounded buffer of recent documents. A first chunk that is one document
  (a book) has no previous chunk: it gets excerpts of the next chunk's first 8 documents instead.
- the tokenizer's unknown token is counted per chunk in the workers (`count_unknown`) and summed: the summary
  reports its share of the text's tokens and the characters behind it, and warns at UNK_WARN_SHARE (in
  `unknown_token_warning`'s words, shared with fine-tuning's features: decomposed Hangul is told to convert to NFC);
- Ctrl-C (or any error) ends the worker processes at once; they ignore SIGINT themselves, so one line is printed;
- text inputs that are tables of tab-separated columns (a GLUE/classification .tsv) are built as text, after one
  warning line that names them and the command that extracts the text column (`tabular_inputs`).
"""
from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import sys
import time
import unicodedata
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Literal, Sequence

import numpy as np

from albertlm.config.run import SEED_LIMIT
# (the table check's names moved to corpus, where the checks read each head once; still importable from here)
from albertlm.data.corpus import (FORMATS, TABLE_HEADER_NAMES, TABLE_SNIFF_BYTES, TABLE_SNIFF_LINES,  # noqa: F401
                                  CorpusCounts, Document, FileFacts, TableShape, check_inputs, find_input_files,
                                  inspect_file, read_documents, table_columns, unreadable_input)
from albertlm.data.instances import (InstanceConfig, InstanceCounts, Pair, TokenizedDocument, create_pairs,
                                     document_from_lengths)
from albertlm.data.masking import MaskingConfig, MaskingVocab, mask_records
from albertlm.data.shards import (CORPUS_ADVICE, FORMAT_VERSION, META_FILE, WORD_STARTS_FILE, ShardWriter,
                                  corpus_difference, part_meta_name, record_dtype, settings_difference,
                                  write_json_atomic)
from albertlm.errors import UserError, read_json_object, say_warning, stderr_is_terminal

RECORD_BYTES_PER_SHARD = 256 << 20
# meta.json lists the input files of a build of at most this many (`input_record`): ~40 bytes a file, and every
# training process reads meta.json (each DataLoader worker may get a pickled copy); 19,000 files made it 786 KB
META_INPUTS_LISTED = 1000
ENCODE_BATCH = 4096  # sentences per native encode call
MASK_BLOCK_TOKENS = 1 << 17  # records masked together hold this many positions (1024 rows at T=128)
NEGATIVE_DOCUMENTS, NEGATIVE_SENTENCES = 8, 64  # NSP: excerpts of the previous chunk's last documents
UNK_SAMPLE_SENTENCES = 64  # per chunk: sentences holding the unknown token whose characters are looked at
UNK_KEPT_CHARACTERS = 20   # the most frequent unknown characters kept in meta.json
UNK_WARN_SHARE = 0.005     # the build warns when this share of the text's tokens (or more) is unknown
# conjoining Hangul jamo: what a syllable becomes in NFD (as macOS writes file names, and some editors text); a
# vocabulary of syllables encodes none of them
CONJOINING_JAMO = range(0x1100, 0x1200)


@dataclass
class BuildConfig:
    inputs: list[str]                    # text files or directories
    tokenizer: str                       # SentencePiece .model, vocab.txt, tokenizer.json, or a directory holding one
    out: str                             # output directory
    max_seq_length: int = 512            # tokens per instance (T)
    sentence_task: Literal["sop", "nsp", "none"] = "sop"  # sentence-order, next-sentence, or MLM only
    dupe_factor: int = 10                # copies of the corpus, each with its own pairs and masks
    short_seq_prob: float = 0.1          # probability of a shorter target length
    masked_lm_prob: float = 0.15         # share of tokens to predict
    max_predictions_per_seq: int | None = None  # cap on masked tokens; none = min(T, max(20, round(T * p)))
    max_ngram: int = 3                   # longest masked n-gram (words)
    masking: Literal["ngram", "token"] = "ngram"  # whole-word n-grams (ALBERT) or single tokens (BERT)
    workers: int = 1                     # worker processes (the output is identical for any number); at most the CPU cores it may use
    seed: int = 12345                    # same seed, same bytes
    num_shards: int = 1                  # split the build into K parts (one per machine)
    shard_index: int = 0                 # which part this run builds
    format: Literal["auto", "lines", "raw", "jsonl", "wikiextractor", "parquet", "arrow", "csv"] = "auto"  # input format; .gz/.bz2/.xz/.zst text is decompressed (docs/data.md)
    text_field: str = "text"             # JSONL field / CSV, Parquet or Arrow column holding the text
    chunk_chars: int = 500_000           # characters per work unit
    records_per_shard: int | None = None  # instances per shard file; none = about 256 MB per shard
    overwrite: bool = False              # replace an earlier build in --out
    progress: bool = True                # a progress bar (stderr)

    def __post_init__(self):
        if self.dupe_factor < 1:
            raise UserError(f"--dupe-factor must be >= 1, got {self.dupe_factor}")
        if self.workers < 1:
            raise UserError(f"--workers must be >= 1, got {self.workers}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise UserError(f"--seed must be in [0, 2**32), got {self.seed}")
        if self.num_shards < 1:
            raise UserError(f"--num-shards must be >= 1, got {self.num_shards}")
        if self.chunk_chars < 1:
            raise UserError(f"--chunk-chars must be >= 1, got {self.chunk_chars}")
        if self.records_per_shard is not None and self.records_per_shard < 1:
            raise UserError(f"--records-per-shard must be >= 1 (or none), got {self.records_per_shard}")
        if not 0 <= self.shard_index < self.num_shards:
            raise UserError(f"--shard-index must be in [0, {self.num_shards}), got {self.shard_index}")
        if self.format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}")
        try:
            self.instance_config()
            MaskingConfig(self.masked_lm_prob, 1, self.max_ngram, self.masking)  # p first: P's default needs it
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if self.max_ngram > self.max_seq_length:  # n-gram tables are max_ngram wide: 10**8 was a MemoryError
            raise UserError(f"--max-ngram must be <= --max-seq-length {self.max_seq_length}, got {self.max_ngram}")
        if self.max_predictions_per_seq is None:  # at most T: a record cannot mask more tokens than it holds
            self.max_predictions_per_seq = min(self.max_seq_length,
                                               max(20, int(round(self.max_seq_length * self.masked_lm_prob))))
        elif self.max_predictions_per_seq > self.max_seq_length:
            raise UserError(f"--max-predictions-per-seq must be <= --max-seq-length {self.max_seq_length}, "
                            f"got {self.max_predictions_per_seq}")
        try:
            self.masking_config()
        except ValueError as exc:
            raise UserError(str(exc)) from None

    def instance_config(self) -> InstanceConfig:
        return InstanceConfig(self.max_seq_length, self.sentence_task, self.short_seq_prob)

    def masking_config(self) -> MaskingConfig:
        return MaskingConfig(self.masked_lm_prob, self.max_predictions_per_seq, self.max_ngram, self.masking)

    @property
    def part_name(self) -> str | None:
        return None if self.num_shards == 1 else f"part-{self.shard_index:05d}-of-{self.num_shards:05d}"


@dataclass
class ChunkContext:
    """Everything a worker needs to turn a chunk into records (picklable, built once per worker)."""

    tokenizer_path: str
    instance: InstanceConfig
    masking: MaskingConfig
    dupe_factor: int
    seed: int
    vocab_size: int = 0
    tokenizer: object = field(default=None, repr=False)
    vocab: MaskingVocab | None = None
    random_ids: np.ndarray | None = None
    vocab_sha256: str = ""
    unknown_characters: dict = field(default_factory=dict, repr=False)  # tally_unknown_characters's cache

    def load(self, num_threads: int | None = None) -> "ChunkContext":
        from albertlm.tokenization import load_tokenizer

        tok = load_tokenizer(self.tokenizer_path)
        if hasattr(tok, "special_tokens_as_text"):  # "[SEP]" in the corpus is text, as in google's builder
            tok.special_tokens_as_text()
        if num_threads is not None and hasattr(tok, "num_threads"):
            tok.num_threads = num_threads  # one thread per worker process: the processes are the parallelism
        special = (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id)
        self.tokenizer, self.vocab_size = tok, tok.vocab_size
        self.vocab_sha256 = vocab_fingerprint(tok)
        self.vocab = MaskingVocab(np.asarray(tok.word_start_mask(), dtype=bool), tok.mask_id, special)
        self.random_ids = self.vocab.random_ids
        return self

    @property
    def dtype(self) -> np.dtype:
        return record_dtype(self.instance.max_seq_length, self.masking.max_predictions_per_seq, self.vocab_size)


def vocab_fingerprint(tok) -> str:
    """sha256 of the vocabulary (every token in id order): the same ids mean the same tokens exactly when it
    is equal, wherever the tokenizer file lies. Recorded in meta.json, compared by pretraining and parts."""
    import hashlib

    digest = hashlib.sha256()
    for token_id in range(tok.vocab_size):
        digest.update(str(tok.id_to_token(token_id)).encode("utf-8", errors="surrogatepass") + b"\0")
    return digest.hexdigest()


def document_rng(seed: int, document_index: int, dupe: int) -> np.random.Generator:
    return np.random.default_rng([seed, 0, document_index, dupe])


def chunk_rng(seed: int, chunk_index: int) -> np.random.Generator:
    return np.random.default_rng([seed, 1, chunk_index])


def mask_block_rows(max_seq_length: int) -> int:
    """Rows per vectorised masking block: its temporaries stay ~10 MB whatever T (part of the output's
    definition, like the seed)."""
    return max(1, MASK_BLOCK_TOKENS // max_seq_length)


def mask_rng(seed: int, chunk_index: int, first_record: int) -> np.random.Generator:
    return np.random.default_rng([seed, 2, chunk_index, first_record])


def chunk_documents(documents: Iterable[Document], chunk_chars: int) -> Iterator[list[Document]]:
    chunk, size = [], 0
    for doc in documents:
        chunk.append(doc)
        size += doc.num_chars
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


@dataclass
class Chunk:
    """A work unit: documents in input order, plus (for NSP) excerpts of the previous chunk's documents
    as extra random-next candidates, so a chunk holding one big document still has other documents."""

    index: int
    documents: list[Document]
    negatives: list[list[str]] = field(default_factory=list)
    read_bytes: int = 0   # bytes of input (as stored) the reader had consumed when the chunk was complete


def process_chunk(chunk: Chunk, ctx: ChunkContext) -> tuple[np.ndarray, InstanceCounts]:
    """Tokenize a chunk in native batches, make dupe_factor passes of pairs, mask them, shuffle the records."""
    counts, scratch = InstanceCounts(), InstanceCounts()
    tokenized = []
    for doc in chunk.documents:
        tokens = tokenize_document(doc.sentences, ctx, counts)
        if tokens is not None:
            tokenized.append((doc.index, tokens))
    negatives = [t for t in (tokenize_document(s, ctx, scratch) for s in chunk.negatives) if t is not None]
    pool = [tokens for _, tokens in tokenized] + negatives
    pairs: list[Pair] = []
    for dupe in range(ctx.dupe_factor):
        for position, (index, doc) in enumerate(tokenized):
            rng = document_rng(ctx.seed, index, dupe)
            pick = _other_document_picker(pool, position)
            for pair in create_pairs(doc, ctx.instance, rng, ctx.vocab.word_start, pick, counts):
                pairs.append(pair)
    # the chunk's shuffle decides where each record goes, so no shuffled copy is made
    slots = np.argsort(chunk_rng(ctx.seed, chunk.index).permutation(len(pairs))).tolist()
    columns = RecordColumns(len(pairs), ctx.dtype)
    for slot, pair in zip(slots, pairs):
        fill_record(columns, slot, pair, ctx)
    del pairs
    rows = mask_block_rows(ctx.instance.max_seq_length)
    for block in range(0, len(slots), rows):
        mask_block(columns, slice(block, block + rows), ctx, mask_rng(ctx.seed, chunk.index, block))
    records = columns.records()
    return records, counts


def tokenize_document(sentences: list[str], ctx: ChunkContext, counts: InstanceCounts) -> TokenizedDocument | None:
    """Native batch encoding, ENCODE_BATCH sentences at a time, each batch packed into numpy at once:
    Python lists of ids (~40 bytes a token) never hold more than one batch."""
    arrays, lengths = [], []
    for start in range(0, len(sentences), ENCODE_BATCH):
        ids = ctx.tokenizer.encode_batch(sentences[start:start + ENCODE_BATCH])
        sizes = [len(row) for row in ids]
        arrays.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=sum(sizes)))
        lengths.extend(sizes)
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
    count_unknown(tokens, lengths, sentences, ctx, counts)
    return document_from_lengths(tokens, lengths, ctx.instance.max_num_tokens, counts)


def count_unknown(tokens: np.ndarray, lengths: list[int], sentences: list[str], ctx: ChunkContext,
                  counts: InstanceCounts) -> None:
    """Tally the tokenizer's unknown token in a document's tokens (`text_tokens`, `unk_tokens`,
    `unk_sentences`), and for the chunk's first UNK_SAMPLE_SENTENCES sentences holding one, which of their
    characters encode to it on their own (`unk_characters`: the quotes a vocabulary lacks, say). One vector
    compare per document; the characters of a sample sentence are encoded once per worker (cached)."""
    counts.text_tokens += int(tokens.size)
    unknown = tokens == ctx.tokenizer.unk_id
    found = int(np.count_nonzero(unknown))
    if not found:
        return
    counts.unk_tokens += found
    ends = np.cumsum(lengths)
    hit = np.unique(np.searchsorted(ends, np.flatnonzero(unknown), side="right"))
    for sentence_index in hit.tolist():
        if counts.unk_sentences < UNK_SAMPLE_SENTENCES:
            tally_unknown_characters(sentences[sentence_index], ctx.tokenizer, ctx.unknown_characters,
                                     counts.unk_characters)
        counts.unk_sentences += 1


def tally_unknown_characters(text: str, tokenizer, cache: dict, tally: dict) -> None:
    """Count into `tally` the characters of `text` that the tokenizer encodes to its unknown token on their own
    (`cache`: character -> whether it does, filled as characters are first seen; one batch call per text).
    Decomposed Hangul is looked at composed (NFC) when the tokenizer composes it itself (SentencePiece's NFKC): its
    jamo are then not what the vocabulary lacks, and the warning does not tell to convert the text to NFC.
    Shared with the fine-tuning features' check (tasks.features.UnknownTally)."""
    if any(ord(char) in CONJOINING_JAMO for char in text) and _composes_hangul(tokenizer, cache):
        text = unicodedata.normalize("NFC", text)
    new = sorted(set(text) - cache.keys())
    if new:
        for char, ids in zip(new, tokenizer.encode_batch(new)):
            cache[char] = tokenizer.unk_id in ids
    for char in set(text):
        if cache[char]:
            tally[char] = tally.get(char, 0) + text.count(char)


_COMPOSES = ""   # the key, in a tally_unknown_characters cache, of whether the tokenizer composes decomposed Hangul


def _composes_hangul(tokenizer, cache: dict) -> bool:
    """Whether the tokenizer encodes decomposed Hangul (U+1100 U+1161) as the syllable it spells (U+AC00)."""
    if _COMPOSES not in cache:
        decomposed, composed = tokenizer.encode_batch(["\u1100\u1161", "\uac00"])
        cache[_COMPOSES] = list(decomposed) == list(composed)
    return cache[_COMPOSES]


def _other_document_picker(pool: list[TokenizedDocument], position: int):
    if len(pool) < 2:
        return lambda rng: None

    def pick(rng: np.random.Generator) -> TokenizedDocument:
        other = int(rng.integers(0, len(pool) - 1))
        return pool[other + (other >= position)]
    return pick


class RecordColumns:
    """Records under construction: 2-D id arrays written in place, scalars in Python lists (cheaper per
    instance than touching the structured array field by field)."""

    def __init__(self, count: int, dtype: np.dtype):
        self._records = np.zeros(count, dtype=dtype)
        self.input_ids = self._records["input_ids"]
        self.masked_positions = self._records["masked_positions"]
        self.masked_inputs = self._records["masked_inputs"]
        self.scalars = {name: [0] * count for name in ("length", "type_boundary", "num_masked", "label")}

    def records(self) -> np.ndarray:
        for name, values in self.scalars.items():
            self._records[name] = values
        return self._records


def fill_record(columns: RecordColumns, k: int, pair: Pair, ctx: ChunkContext) -> None:
    """Write `[CLS] A [SEP] (B [SEP])` as record k (unmasked; `mask_block` adds the static mask)."""
    tok = ctx.tokenizer
    ids = columns.input_ids[k]
    len_a = pair.a.size
    ids[0], ids[1:1 + len_a], ids[1 + len_a] = tok.cls_id, pair.a, tok.sep_id
    length = len_a + 2
    if pair.b is not None:
        ids[length:length + pair.b.size] = pair.b
        length += pair.b.size + 1
        ids[length - 1] = tok.sep_id
    scalars = columns.scalars
    scalars["length"][k], scalars["type_boundary"][k], scalars["label"][k] = length, len_a + 2, pair.label


def mask_block(columns: RecordColumns, rows: slice, ctx: ChunkContext, rng: np.random.Generator) -> None:
    """Static masks for a block of records, drawn together (`albertlm.data.masking.mask_records`, which the
    loader's dynamic masking uses too)."""
    tokens = columns.input_ids[rows].astype(np.int64)
    lengths = np.array(columns.scalars["length"][rows], dtype=np.int64)
    boundaries = np.array(columns.scalars["type_boundary"][rows], dtype=np.int64)
    masked = mask_records(tokens, lengths, boundaries, ctx.vocab, ctx.masking, rng, ctx.random_ids)
    columns.masked_positions[rows] = masked.positions
    columns.masked_inputs[rows] = masked.inputs
    columns.scalars["num_masked"][rows] = masked.counts.tolist()


# -- the worker pool -----------------------------------------------------------------------------------
# A process pool needs module-level state in each worker: the context is built once by the initializer.
_WORKER_CONTEXT: ChunkContext | None = None


def _init_worker(ctx: ChunkContext, parent: int | None = None) -> None:
    global _WORKER_CONTEXT
    _ignore_interrupts()
    if parent is not None:
        _exit_with_parent(parent)
    limit_heap_growth()
    _WORKER_CONTEXT = ctx.load(num_threads=1)


PARENT_CHECK_SECONDS = 1.0  # how often a worker looks whether the build's main process is still there


def _exit_with_parent(parent: int) -> None:
    """End this worker when the build's main process is gone (killed outright: SIGKILL, the out-of-memory
    killer). A pool worker waits for work forever, so without this the workers of a killed build stayed
    behind, each holding its memory, until someone found and killed them. A daemon thread looks at the
    parent process id every PARENT_CHECK_SECONDS (an orphan is adopted by another process)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(1)
    threading.Thread(target=watch, name="albertlm-parent-watch", daemon=True).start()


def limit_heap_growth() -> None:
    """Serve allocations >= 1 MiB (numpy arrays of a chunk) by mmap, so freeing them returns the memory.

    glibc otherwise raises its mmap threshold after each large free (up to 32 MiB) and later arrays land in
    the heap, whose fragmentation made peak RSS creep up with the number of chunks (+12% on a 10x corpus).
    A no-op where glibc's mallopt is missing."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def _ignore_interrupts() -> None:
    """A worker leaves Ctrl-C to the main process, which stops the pool: a terminal sends SIGINT to every
    process of the job, and each worker would otherwise print a KeyboardInterrupt traceback of its own.
    SIGTERM keeps its default action (the main process ends the workers with it, `_stop_pool`). The workers
    start with both blocked (`_interrupts_blocked`): a SIGINT sent while they start is dropped, a SIGTERM
    ends them here."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _stop_signals())


def _stop_signals() -> set:
    import signal

    return {signal.SIGINT, signal.SIGTERM}


# While worker processes are spawned: the stop signals (Ctrl-C, SIGTERM) received, acted on once they are all started.
_DEFERRED_STOPS: list[int] | None = None


def _defer_interrupt(signum, frame) -> None:
    if _DEFERRED_STOPS is not None:
        _DEFERRED_STOPS.append(signum)


def _interrupts_blocked():
    """Hold Ctrl-C and SIGTERM back while worker processes are spawned, and stop (KeyboardInterrupt) once they
    are all started if one came: stopping mid-spawn cut off a new process's start-up data, and it printed an
    EOFError traceback. The main thread blocks both signals, which the new processes inherit until
    `_ignore_interrupts`; as another thread of the process (a library's) may still take a signal, whose Python
    handler then runs in the main thread all the same, the handlers only note it meanwhile (`_DEFERRED_STOPS`)."""
    import contextlib
    import signal
    import threading

    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def blocked():
        global _DEFERRED_STOPS
        _DEFERRED_STOPS = []
        interrupt = signal.getsignal(signal.SIGINT)
        if interrupt is signal.default_int_handler:
            signal.signal(signal.SIGINT, _defer_interrupt)
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _stop_signals())
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            if interrupt is signal.default_int_handler:
                signal.signal(signal.SIGINT, interrupt)
            received, _DEFERRED_STOPS = _DEFERRED_STOPS, None
        if received:
            raise KeyboardInterrupt
    return blocked()


def _run_in_worker(chunk: Chunk):
    return process_chunk(chunk, _WORKER_CONTEXT)


def _noop() -> None:
    return None


def _results(chunks: Iterator[Chunk], ctx: ChunkContext, workers: int):
    """(records, counts) per chunk in chunk order; at most workers + 1 chunks in flight.

    If the build stops early (Ctrl-C, an error, a full disk) the workers are stopped at once instead of
    finishing the chunks in flight; a worker that dies (killed by the system when memory runs out) is a
    UserError, not a BrokenProcessPool traceback."""
    if workers == 1:
        for chunk in chunks:
            yield process_chunk(chunk, ctx)
        return
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    spawn = multiprocessing.get_context("spawn")  # safe even if the parent holds threads (torch, tqdm)
    shipped = ChunkContext(ctx.tokenizer_path, ctx.instance, ctx.masking, ctx.dupe_factor, ctx.seed)
    pool = ProcessPoolExecutor(workers, mp_context=spawn, initializer=_init_worker,
                               initargs=(shipped, os.getpid()))
    try:
        with _interrupts_blocked():     # the pool spawns a process per submit until it has `workers`
            for _ in range(workers):
                pool.submit(_noop)
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.submit(_run_in_worker, chunk))
            if len(pending) > workers:  # one chunk queued per busy worker: bounded and still never idle
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool:
        raise UserError(f"a worker process of the build died (killed by the system: out of memory?); nothing "
                        f"was installed in --out; try fewer --workers than {workers} or a smaller --chunk-chars") from None
    except BaseException:
        _stop_pool(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """End the workers now: their chunks are not wanted any more. The `finally` of `_results` then shuts the
    pool down (cancelling the queued chunks) and joins its manager thread, which sees the workers gone."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.terminate()
        except (OSError, AttributeError, ValueError):
            pass


# -- the build -----------------------------------------------------------------------------------------
@dataclass
class BuildSummary:
    out: str
    num_instances: int
    num_shards: int
    seconds: float
    counts: dict

    @property
    def instances_per_second(self) -> float:
        return self.num_instances / max(self.seconds, 1e-9)


def build(cfg: BuildConfig) -> BuildSummary:
    """Build the shards and meta of `cfg.out`; raises UserError on bad input or an empty result.

    Everything is checked before --out is touched (the inputs, the tokenizer, what --out holds), and the new
    build is written into a staging directory inside --out (`.building-...`) that replaces the files of an
    earlier build only once it is complete: a failed or refused build leaves --out as it was. SIGTERM (`kill`,
    `timeout`, a scheduler cancelling the job) stops it as Ctrl-C does (`_terminate_interrupts`)."""
    with _terminate_interrupts():
        return _build(cfg)


def _terminate_interrupts():
    """While a build runs, SIGTERM raises KeyboardInterrupt, as Ctrl-C does: the workers are ended, the staging
    directory is removed and an earlier build in --out is kept, with one line (`interrupted`, exit 130). By
    default SIGTERM ended the main process at once, leaving `.building-*` with its partial shards and the worker
    processes waiting for work forever. Only where SIGTERM has its default action, in the main thread (a
    caller's own handler, a training loop's or a suite worker's, is left alone); a second SIGTERM during the
    cleanup is ignored. The earlier handler comes back when the build ends."""
    import contextlib
    import signal
    import threading

    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def handled():
        signal.signal(signal.SIGTERM, _stop_build)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return handled()


def _stop_build(signum, frame) -> None:
    """The build's SIGTERM handler: stop as Ctrl-C does (later while workers are spawned, `_interrupts_blocked`)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the cleanup runs once
    if _DEFERRED_STOPS is not None:
        _DEFERRED_STOPS.append(signum)
        return
    raise KeyboardInterrupt


def _build(cfg: BuildConfig) -> BuildSummary:
    started = time.perf_counter()
    limit_heap_growth()
    files = find_input_files(cfg.inputs)
    if cfg.progress and len(files) >= CHECK_NOTE_FILES:   # the checks below read the head of every file
        print(f"data build: checking {len(files):,} input files (formats, encodings, tables) before the build",
              file=sys.stderr, flush=True)
    facts: list[FileFacts] = []   # what each file's head said: the table check and the reader take it from here
    check_inputs(files, cfg.format, cfg.text_field, facts)  # a wrong --text-field fails now, not mid-build
    out = Path(cfg.out)
    replaced = _check_output(out, cfg, files)
    ctx = ChunkContext(str(cfg.tokenizer), cfg.instance_config(), cfg.masking_config(), cfg.dupe_factor,
                       cfg.seed).load()
    _check_other_parts(out, cfg, _meta(cfg, ctx, files, [], {}))
    warning = tables_warning(tabular_inputs(files, cfg.format, facts))
    if warning:
        say_warning(warning)
    workers = usable_workers(cfg.workers)
    created = not out.exists()
    staging = out / f".building-{cfg.part_name or 'all'}"
    try:
        shutil.rmtree(staging, ignore_errors=True)    # a killed build of this part left it
        staging.mkdir(parents=True)
        summary = _build_into(staging, cfg, ctx, files, started, workers, facts)
        # what this part read is known now: the parts already in --out must have read the same corpus
        _check_other_parts(out, cfg, json.loads((staging / _meta_name(cfg)).read_text(encoding="utf-8")),
                           corpus=True)
        _install(staging, out, replaced)
        fsync_path(out)   # the renames into --out last through a crash (the files were fsynced before them)
    except OSError as exc:            # a full disk or a quota while writing, a read-only or forbidden --out
        raise UserError(f"--out {out}: cannot write the data ({write_error(exc)}); what this build had written "
                        "was removed") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
    summary.out = str(out)
    return summary


def available_cores() -> int:
    """The CPU cores this process may run on: its affinity mask (what taskset, a container or a batch scheduler
    grants), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def usable_workers(workers: int) -> int:
    """`--workers`, at most the cores this process may use (`available_cores`), with one warning line when it is
    cut. The output is the same for any number of workers, so a cut changes no byte; more worker processes than
    cores only ran in turns, each holding ~70 MB plus its chunks (--workers 64 on a 2-core machine started 64)."""
    cores = available_cores()
    if workers <= cores:
        return workers
    say_warning(f"--workers {workers} is more than the {cores} CPU core(s) this process may use; using {cores} "
                "(the output is the same for any number of workers)")
    return cores


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory: the names renamed into it), so that a crash or power cut right
    after the build cannot leave an empty meta.json or lose a rename. A directory is best effort: some systems
    cannot open or fsync one, and --out is already installed when it is synced (an error then must not say that
    the build was removed)."""
    directory = path.is_dir()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if directory:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def write_error(exc: OSError) -> str:
    """Why writing --out failed, in words: the system's message plus what to do where the cause is known. Only
    a full disk or a quota is called one (a read-only mount used to be asked "is the disk full?")."""
    space, elsewhere = "free some space or choose another --out", "choose another --out"
    advice = {errno.ENOSPC: space, errno.EDQUOT: space, errno.EROFS: elsewhere, errno.EACCES: elsewhere,
              errno.EPERM: elsewhere}.get(exc.errno)
    reason = exc.strerror or str(exc)
    return f"{reason}: {advice}" if advice else reason


def _input_size(path: Path) -> int:
    """An input file's size for the progress bar; one gone since the inputs were listed is named (it was "--out ...:
    cannot write the data (No such file or directory)", the build's error for its own writes)."""
    try:
        return path.stat().st_size
    except OSError as exc:
        raise UserError(unreadable_input(path, exc)) from None


def _build_into(staging: Path, cfg: BuildConfig, ctx: ChunkContext, files: list[Path], started: float,
                workers: int | None = None, facts: Sequence[FileFacts] | None = None) -> BuildSummary:
    prefix = "shard" if cfg.part_name is None else f"{cfg.part_name}-shard"
    per_shard = cfg.records_per_shard or max(1, RECORD_BYTES_PER_SHARD // ctx.dtype.itemsize)
    writer = ShardWriter(staging, ctx.dtype, per_shard, prefix)
    corpus, instances, stats = CorpusCounts(), InstanceCounts(), _RecordStats()
    # the plain lines' wait counts from the build's start: the checks of many files alone take minutes
    progress = BuildProgress(sum(_input_size(f) for f in files), cfg.progress,
                             started=time.monotonic() - (time.perf_counter() - started))
    in_flight: deque = deque()   # read_bytes of the chunks handed out, in chunk order (= the results' order)

    def handed_out(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        for chunk in chunks:
            in_flight.append(chunk.read_bytes)
            yield chunk
    try:
        try:
            seen = [0]   # the corpus's chunks (every part reads them all)
            for records, counts in _results(handed_out(_my_chunks(files, cfg, corpus, progress, seen, facts)), ctx,
                                            workers or cfg.workers):
                writer.write(records)
                instances.add(counts)
                stats.add(records)
                progress.written(in_flight.popleft(), instances.instances)
            shards = writer.close()
        except BaseException:
            writer.abort()
            raise
        counts = {"corpus": asdict(corpus), "instances": _instance_counts_dict(instances, ctx),
                  "tokens": asdict(stats)}
        if instances.instances == 0 and (cfg.num_shards == 1 or seen[0] == 0 or _owned_chunks(seen[0], cfg)):
            named = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            raise UserError(f"no instances were built from {len(files)} file(s) ({named}): "
                            f"{_why_empty(corpus, instances)}")
        meta = _meta(cfg, ctx, files, shards, counts)
        np.save(staging / WORD_STARTS_FILE, ctx.vocab.word_start)
        write_json_atomic(staging / _meta_name(cfg), meta)
        for name in (WORD_STARTS_FILE, _meta_name(cfg)):   # the shards are fsynced as they are closed
            fsync_path(staging / name)
        progress.finish()
    finally:
        progress.close()
    return BuildSummary(str(staging), instances.instances, len(shards), time.perf_counter() - started, counts)


def _owned_chunks(chunks: int, cfg: BuildConfig) -> int:
    """How many of the corpus's chunks this part owned: an empty part of a K-part build is an error only when
    it had chunks (a corpus of fewer chunks than parts leaves the last parts empty, and the union of the parts
    is still the single build)."""
    return len(range(cfg.shard_index, chunks, cfg.num_shards))


def _my_chunks(files, cfg: BuildConfig, corpus: CorpusCounts, progress: "BuildProgress",
               seen: list[int], facts: Sequence[FileFacts] | None = None) -> Iterator[Chunk]:
    """This part's chunks, each with how far the reader had got (`Chunk.read_bytes`). Every chunk is read
    (and gives negatives to the next), whichever part owns it; `seen[0]` counts them. `facts`: `check_inputs`'s,
    so that the reader reads no file's head again."""
    documents = read_documents(files, cfg.format, cfg.text_field, corpus, progress=progress.read, facts=facts)
    negatives: list[list[str]] = []
    first: Chunk | None = None   # NSP: a first chunk of one document waits for the next chunk's excerpts
    for index, docs in enumerate(chunk_documents(documents, cfg.chunk_chars)):
        seen[0] = index + 1
        chunk = Chunk(index, docs, negatives, progress.read_bytes)
        if first is not None:   # no previous chunk gave it negatives: the next one's first documents do
            first.negatives = [_excerpt(doc.sentences) for doc in docs[:NEGATIVE_DOCUMENTS]]
            if first.index % cfg.num_shards == cfg.shard_index:
                yield first
            first = None
        if index == 0 and cfg.sentence_task == "nsp" and len(docs) == 1:
            first = chunk   # else all of its random-next segments would come from that document itself
        elif index % cfg.num_shards == cfg.shard_index:
            yield chunk
        if cfg.sentence_task == "nsp":
            negatives = [_excerpt(doc.sentences) for doc in docs[-NEGATIVE_DOCUMENTS:]]
    if first is not None and first.index % cfg.num_shards == cfg.shard_index:   # the corpus is one chunk
        yield first


def _excerpt(sentences: list[str]) -> list[str]:
    middle = max(0, len(sentences) // 2 - NEGATIVE_SENTENCES // 2)
    return sentences[middle:middle + NEGATIVE_SENTENCES]


class BuildProgress:
    """The build's progress bar, over the input files' bytes as stored (compressed or not): the bytes whose
    instances are written, not the bytes read. The reader runs ahead of the work (it cuts a chunk long
    before its instances are made, and keeps up to workers + 1 chunks in flight), so a bar over the bytes
    read reached 100% while the workers still had the last chunks to do. Here the bar moves when a chunk's
    records are written, to how far the reader had got when that chunk was complete (`Chunk.read_bytes`),
    and stays 1% short of its total until the shards are closed and meta.json is written (`finish`).

    `read_bytes` (what the reader reported), `done` (the bar's position) and `instances` (written so far,
    shown beside the bar) are the state; `done` never goes back and reaches `total` only in `finish`.

    Where stderr is no terminal (a log: nohup, a batch scheduler, a pipe), where tqdm draws nothing, a build
    that has run PLAIN_PROGRESS_AFTER seconds prints a plain line at each tenth of the input it gets past
    (`data build: 30% of 2.1 GB of input, 1,234,567 instances, 12.5 min`, as predict prints `predict: 12/120
    batches`): an hours-long build in a log said nothing until its summary. Short builds stay silent."""

    def __init__(self, total: int, enabled: bool = True, started: float | None = None):
        """`started`: when the build started (`time.monotonic()`; default now), from which PLAIN_PROGRESS_AFTER
        counts: a build whose checks of its inputs took long (a million small files) prints its lines at once."""
        from tqdm import tqdm

        self.total, self.read_bytes, self.done, self.instances = total, 0, 0, 0
        self._started = time.monotonic() if started is None else started
        self._plain = enabled and not stderr_is_terminal()
        self._tenths = 0   # tenths of the input the plain lines have reported
        self._bar = tqdm(total=total, unit="B", unit_scale=True, desc="albertlm data build",
                         disable=not enabled or None, leave=False)

    def read(self, num_bytes: int) -> None:
        """The reader's callback: `num_bytes` more of the input were read."""
        self.read_bytes += num_bytes

    def written(self, read_bytes: int, instances: int) -> None:
        """A chunk's records are written: the input up to `read_bytes` is done, and `instances` have been
        written in all. The last 1% waits for `finish` (tqdm rounds 99.9% to "100%")."""
        self.instances = instances
        self._advance(min(read_bytes, self.total - max(1, self.total // 100)))
        self._bar.set_postfix_str(f"{instances:,} instances")

    def finish(self) -> None:
        """Everything is written (shards closed, meta.json): the bar shows 100%, then goes."""
        self._advance(self.total)
        self.close()

    def close(self) -> None:
        self._bar.close()

    def _advance(self, position: int) -> None:
        if position > self.done:
            self._bar.update(position - self.done)
            self.done = position
            self._plain_line()

    def _plain_line(self) -> None:
        """A progress line in a log at the tenth of the input just passed (see the class docstring)."""
        tenths = 10 * self.done // max(self.total, 1)
        if not self._plain or tenths <= self._tenths or self.done >= self.total:
            return
        self._tenths = tenths
        elapsed = time.monotonic() - self._started
        if elapsed < PLAIN_PROGRESS_AFTER:
            return
        print(f"data build: {10 * tenths}% of {_size(self.total)} of input, {self.instances:,} instances, "
              f"{elapsed / 60:.1f} min", file=sys.stderr, flush=True)


PLAIN_PROGRESS_AFTER = 30.0   # seconds a build runs before it prints progress lines in a log (BuildProgress)
# a build of this many input files or more says so before it checks them (each file's head is read and its format
# guessed: 0.3 ms a small file on a busy 2-core machine, minutes for a million files, which said nothing before the
# build's progress began)
CHECK_NOTE_FILES = 10_000


def _size(num_bytes: int) -> str:
    """1.2 GB, 340.5 MB, 12.0 kB, 512 B (decimal units, as the bar's)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} B"


@dataclass
class _RecordStats:
    tokens: int = 0
    masked: int = 0

    def add(self, records: np.ndarray) -> None:
        self.tokens += int(records["length"].sum())
        self.masked += int(records["num_masked"].sum())


def _instance_counts_dict(counts: InstanceCounts, ctx: ChunkContext) -> dict:
    out = asdict(counts)
    out["labels"] = {str(k): v for k, v in sorted(counts.labels.items())}
    out["unk_token"] = str(ctx.tokenizer.id_to_token(ctx.tokenizer.unk_id))
    top = sorted(counts.unk_characters.items(), key=lambda item: (-item[1], item[0]))[:UNK_KEPT_CHARACTERS]
    out["unk_characters"] = dict(top)
    return out


def unknown_token_report(instance_counts: dict) -> tuple[str, str | None]:
    """The summary's line about the unknown token, and a warning when its share of the text's tokens is
    UNK_WARN_SHARE or more (else None), from the `counts.instances` of a build's meta ("" and None for a
    build recorded before these counts existed, and for one without text: a part of a `--num-shards` build that
    owns none of the corpus's chunks said `unknown tokens (<unk>) 0 of 0 tokens of text (0.00%)`)."""
    if "unk_tokens" not in instance_counts or not (instance_counts["unk_tokens"]
                                                    or instance_counts.get("text_tokens")):
        return "", None
    unk, total = instance_counts["unk_tokens"], instance_counts.get("text_tokens", 0)
    name, share = instance_counts.get("unk_token", "unk"), unk / max(total, 1)
    line = f"unknown tokens ({name}) {unk:,} of {total:,} tokens of text ({share:.2%})"
    if not unk:
        return line, None
    line += f" in {instance_counts.get('unk_sentences', 0):,} sentence(s)"
    chars = sorted(instance_counts.get("unk_characters", {}).items(), key=lambda item: (-item[1], item[0]))
    if chars:
        line += "; characters the vocabulary lacks (in a sample): " + ", ".join(
            f"{_show_character(char)} {count:,}" for char, count in chars[:10])
    if share < UNK_WARN_SHARE:
        return line, None
    return line, unknown_token_warning(share, name, chars)


NFC_ADVICE = "decomposed Hangul (NFD, as macOS writes it): convert the text to NFC"


def decomposed_hangul(chars: list[tuple[str, int]]) -> bool:
    """Whether most of the unknown characters `chars` (with their counts) are conjoining Hangul jamo: the text is
    decomposed Hangul, which the vocabulary holds composed."""
    jamo = sum(count for char, count in chars if len(char) == 1 and ord(char) in CONJOINING_JAMO)
    return 2 * jamo > sum(count for _, count in chars)


def unknown_token_warning(share: float, name: str, chars: list[tuple[str, int]]) -> str:
    """The warning for text whose tokens are `share` the unknown token `name`; `chars`: the characters the
    vocabulary lacks with their counts, most frequent first (a sample; may be empty). When most of them are
    conjoining Hangul jamo the text is decomposed Hangul, and the advice is to convert it to NFC. Used by `data
    build` and by the fine-tuning / prediction features (tasks.features.UnknownTally)."""
    which = (" (" + " ".join(_show_character(char, code=False) for char, _ in chars[:8])
             + (" ..." if len(chars) > 8 else "") + ")") if chars else ""
    if decomposed_hangul(chars):
        advice = NFC_ADVICE
    else:
        advice = "normalize those characters or use a tokenizer that covers them"
    return f"{share:.2%} of the text's tokens are the unknown token {name}{which}: the model never sees what they " \
           f"were; {advice}"


def _show_character(char: str, code: bool = True) -> str:
    """A character for a summary line: itself and its code point, or only the code point if it does not print."""
    point = f"U+{ord(char):04X}" if len(char) == 1 else repr(char)
    if not (char.isprintable() and not char.isspace()):
        return point
    return f"{char} ({point})" if code else char


def _why_empty(corpus: CorpusCounts, instances: InstanceCounts) -> str:
    skipped = [f"{getattr(corpus, kind)} {kind.replace('_', ' ')}, first: {example}"
               for kind, example in corpus.examples.items()]
    return (f"{corpus.documents} documents with text ({corpus.empty_files} empty and {corpus.binary_files} binary "
            f"files skipped, {instances.empty_documents} documents without tokens, "
            f"{instances.dropped_chunks} one-token chunks dropped" + "".join(f"; {s}" for s in skipped) + ")")


# -- what --out holds ----------------------------------------------------------------------------------
# The exact names a build writes (plus .tmp while writing): nothing else in --out is ever removed.
_BUILD_FILE = re.compile(r"(meta\.json|meta\.part-\d{5}-of-\d{5}\.json|(part-\d{5}-of-\d{5}-)?shard-\d{5}\.bin"
                         r"|word_starts\.npy)(\.tmp)?")
def tabular_inputs(files: Iterable[Path], fmt: str = "auto",
                   facts: Sequence[FileFacts] | None = None) -> list[tuple[Path, TableShape]]:
    """The text inputs whose first TABLE_SNIFF_BYTES (decompressed) `table_columns` finds to be tables (JSONL, CSV,
    WikiExtractor, Parquet, Arrow and binary files are not looked at). `facts`: what `check_inputs(files, fmt,
    text_field, facts)` learned of each file (their `columns`), so that no file is read again; without them each
    file's head is read here."""
    if fmt not in ("auto", "lines", "raw"):
        return []
    files = list(map(Path, files))
    if facts is None:
        facts = [inspect_file(path, fmt, columns=True) for path in files]
    return [(path, found.columns) for path, found in zip(files, facts) if found.columns is not None]


def tables_warning(tables: list[tuple[Path, TableShape]], done: str = "built", purpose: str = "pretrain") -> str | None:
    """The one warning line about inputs that are tables (`tabular_inputs`), or None. Such a file is read as
    text like any other: every line, the header's column names, the labels and the ids included. `done` /
    `purpose`: what is done with the text ("built" / "pretrain" for `data build`, "trained on" / "train" for
    `tokenizer train`)."""
    if not tables:
        return None

    def described(path: Path, shape: TableShape) -> str:
        header = f", header: {', '.join(shape.header)}" if shape.header else ""
        return f"{path} ({shape.columns} columns{header})"
    named = "; ".join(described(path, shape) for path, shape in tables[:3])
    more = f"; and {len(tables) - 3} more" if len(tables) > 3 else ""
    path, shape = tables[0]
    extract = f"extract it first (`{_column_command(path, shape)} > text.txt`)"
    if len(shape.text_columns) >= 2:   # a pair task's file: `cut -f` of one column dropped the other sentence
        columns = shape.text_columns
        named_columns = ", ".join(map(str, columns[:-1])) + f" and {columns[-1]}"
        extract = (f"its sentences, extract them first (`{_rows_command(path, shape)} > text.txt`: columns "
                   f"{named_columns} {'both' if len(columns) == 2 else 'all'} hold sentences (a pair task's file?), "
                   f"and each row becomes a document of its {len(columns)}; `{_column_command(path, shape)} > "
                   f"text.txt` keeps column {shape.text_column} alone)")
    else:
        extract = f"a column, {extract}"
    return (f"{len(tables)} input file(s) look like tables of tab-separated columns (a GLUE or classification "
            f"file?), not text: {named}{more}; every line is {done} as text, "
            f"{'column names, ' if any(s.header for _, s in tables) else ''}labels and ids too; to {purpose} on "
            f"{extract}")


# the commands that write a compressed or UTF-16/UTF-32 table's text out as it is read (`tables_warning`)
_DECOMPRESS = {"gz": "gzip -dc", "bz2": "bzip2 -dc", "xz": "xz -dc", "zst": "zstd -dc"}


def _table_text(path: Path, shape: TableShape) -> str | None:
    """A shell pipeline's start that writes the table's UTF-8 text (a compressed or UTF-16 file), or None where the
    file is that text and a command can read it by name."""
    steps = [f"{_DECOMPRESS[shape.compression]} {path}"] if shape.compression in _DECOMPRESS else []
    if shape.encoding:
        steps.append(f"iconv -f {shape.encoding} -t UTF-8" + ("" if steps else f" {path}"))
    return " | ".join(steps) or None


def _column_command(path: Path, shape: TableShape) -> str:
    """The command that writes the table's `text_column` (its header line left out): `cut -f`."""
    text = _table_text(path, shape)
    if text is None:
        return f"tail -n +2 {path} | cut -f{shape.text_column}" if shape.header else f"cut -f{shape.text_column} {path}"
    return f"{text} | tail -n +2 | cut -f{shape.text_column}" if shape.header else f"{text} | cut -f{shape.text_column}"


def _rows_command(path: Path, shape: TableShape) -> str:
    """The command that writes each row's `text_columns` one a line, a blank line after each row (a document in
    `lines`: a sentence pair stays together), the header line left out."""
    prints = "; ".join(f"print ${k}" for k in shape.text_columns)
    program = f"'{'NR > 1 ' if shape.header else ''}{{{prints}; print \"\"}}'"
    text = _table_text(path, shape)
    return f"awk -F'\\t' {program} {path}" if text is None else f"{text} | awk -F'\\t' {program}"


_META_FILE = re.compile(r"meta(\.part-\d{5}-of-\d{5})?\.json")


def _meta_name(cfg: BuildConfig) -> str:
    return META_FILE if cfg.part_name is None else part_meta_name(cfg.shard_index, cfg.num_shards)


def _check_output(out: Path, cfg: BuildConfig, files: list[Path]) -> list[Path]:
    """Refuse an --out that is (or is inside) an input directory, that holds an input file, that is a
    non-empty directory without a build, or that holds a finished build of this part, or parts of another
    --num-shards (which can never join this part), without `overwrite`. Returns the files of --out the new build
    replaces (an earlier build of this part, a single build, another --num-shards' parts, leftovers of a crashed
    one); nothing is changed yet."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    target = out.resolve()
    for item in cfg.inputs:
        directory = Path(item).resolve()
        if directory.is_dir() and (target == directory or directory in target.parents):
            raise UserError(f"--out {out} is inside the input directory {item}; pick an --out outside the inputs")
    if not out.is_dir():   # (a new --out holds no input file: no resolve per file, seconds for a million files)
        return []
    for path in files:
        if target in path.resolve().parents:
            raise UserError(f"--out {out} holds the input file {path}; pick an --out outside the inputs")
    names = [p.name for p in out.iterdir() if not p.name.startswith(".")]
    metas = sorted(n for n in names if _META_FILE.fullmatch(n))
    others = sorted(n for n in names if not _BUILD_FILE.fullmatch(n))
    if others and not metas:
        raise UserError(f"--out {out} is not empty and holds no data build ({others[0]}, ...); pick a new or "
                        "empty directory")
    if cfg.part_name is None:
        replaced = [out / n for n in names if _BUILD_FILE.fullmatch(n)]
    else:    # this part's files, a single build's (which would hide the parts) and another --num-shards' parts
        mine = (META_FILE, _meta_name(cfg), f"{cfg.part_name}-shard-", "shard-")
        replaced = [out / n for n in names if _BUILD_FILE.fullmatch(n) and n.startswith(mine)]
        other = _other_part_files(names, cfg.num_shards)
        other_metas = [n for n in other if _META_FILE.fullmatch(n)]
        if other_metas and not cfg.overwrite:    # (its shards alone, without a meta, are a crash's leftovers)
            k = int(_PART_OF.match(other_metas[0]).group(1))
            more = ", ..." if len(other_metas) > 1 else ""
            raise UserError(f"--out {out} holds parts of a {k}-part build ({other_metas[0]}{more}), which a part of "
                            f"--num-shards {cfg.num_shards} cannot join (num_shards {cfg.num_shards} vs {k} there); "
                            f"pass --overwrite to remove that build's files (meta.part-*-of-{k:05d}.json and "
                            f"part-*-of-{k:05d}-shard-*.bin), or use another --out")
        replaced += [out / n for n in other]
    finished = [p.name for p in replaced if _META_FILE.fullmatch(p.name)]
    if finished and not cfg.overwrite:
        raise UserError(f"{out} already holds a build ({finished[0]}); pass --overwrite or another --out")
    return replaced


_PART_OF = re.compile(r"^(?:meta\.)?part-\d{5}-of-(\d{5})")


def _other_part_files(names: list[str], num_shards: int) -> list[str]:
    """The files of `names` that a build of parts of another --num-shards wrote (its part metas and shards, by
    their exact names): they can never join these parts, so --overwrite removes them."""
    return sorted(n for n in names if _BUILD_FILE.fullmatch(n) and _PART_OF.match(n)
                  and int(_PART_OF.match(n).group(1)) != num_shards)


def _check_other_parts(out: Path, cfg: BuildConfig, meta: dict, corpus: bool = False) -> None:
    """A part must match the parts already in --out (same tokenizer and settings), or the merged build
    would mix them. With `corpus` (after the build, when its counts are known), the corpus it read too: every
    part reads the whole corpus, so a part that read other text (a share of the files) is refused before it
    is installed."""
    if cfg.part_name is None or not out.is_dir():
        return
    for path in sorted(out.glob("meta.part-*-of-*.json")):
        if path.name == _meta_name(cfg) or (cfg.overwrite and _other_part_files([path.name], cfg.num_shards)):
            continue    # this part's, or another --num-shards' that --overwrite removes
        other = read_json_object(path, "a data build's meta.json", hint="remove it or use another --out")
        if corpus:
            difference = corpus_difference(meta, other)
            if difference:
                raise UserError(f"--out {out} holds {path.name}, which read another corpus ({difference} there); "
                                f"{CORPUS_ADVICE}; nothing of this part was written")
            continue
        difference = settings_difference(meta, other)
        if difference:
            raise UserError(f"--out {out} holds {path.name}, built with other settings ({difference} there); "
                            "build every part with the same settings, or use another --out")


def _install(staging: Path, out: Path, replaced: list[Path]) -> None:
    """Replace the earlier build's files by the new ones: its metas go first (so --out never looks complete
    with the wrong shards), then its shards, then the new shards come in and the new meta last."""
    for path in sorted(replaced, key=lambda p: not _META_FILE.fullmatch(p.name)):
        path.unlink(missing_ok=True)
    new = sorted(staging.iterdir(), key=lambda p: (_META_FILE.fullmatch(p.name) is not None, p.name))
    for path in new:
        os.replace(path, out / path.name)


def _meta(cfg: BuildConfig, ctx: ChunkContext, files, shards, counts) -> dict:
    tok = ctx.tokenizer
    return {
        "format_version": FORMAT_VERSION,
        "tokenizer": {"path": str(Path(cfg.tokenizer).resolve()), "kind": tok.kind, "vocab_size": tok.vocab_size,
                      "vocab_sha256": ctx.vocab_sha256, "pad_id": tok.pad_id, "unk_id": tok.unk_id,
                      "cls_id": tok.cls_id, "sep_id": tok.sep_id, "mask_id": tok.mask_id},
        "max_seq_length": cfg.max_seq_length,
        "max_predictions_per_seq": cfg.max_predictions_per_seq,
        "sentence_task": cfg.sentence_task,
        "masking": asdict(ctx.masking),
        "short_seq_prob": cfg.short_seq_prob,
        "dupe_factor": cfg.dupe_factor,
        "seed": cfg.seed,
        "chunk_chars": cfg.chunk_chars,
        "num_shards": cfg.num_shards,
        "shard_index": cfg.shard_index,
        **input_record(cfg, files),
        "num_instances": sum(s["num_instances"] for s in shards),
        "shards": shards,
        "counts": counts,
        # `workers` is left out on purpose: it does not change a byte of the output
    }


def input_record(cfg: BuildConfig, files: list[Path]) -> dict:
    """What meta.json records of the input: `input_arguments` (the --input arguments as given: files, directories,
    patterns), `num_input_files` (the files read, each once), `inputs_sha256` (sha256 of their paths as found, one
    a line in reading order: the same digest, the same files in the same order) and, for a build of at most
    META_INPUTS_LISTED files, `inputs`, the files themselves. A build of more files leaves the list out: it grew
    ~40 bytes a file (786 KB for 19,000 files, ~40 MB for a million) in a file every training process reads.
    Older builds recorded `inputs` alone, whatever their size."""
    import hashlib

    names = [str(f) for f in files]
    digest = hashlib.sha256()
    for name in names:
        digest.update(os.fsencode(name) + b"\n")
    record = {"input_arguments": [str(item) for item in cfg.inputs], "num_input_files": len(names),
              "inputs_sha256": digest.hexdigest()}
    if len(names) <= META_INPUTS_LISTED:
        record["inputs"] = names
    return record
