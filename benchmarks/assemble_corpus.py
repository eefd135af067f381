"""Assemble the English corpus of the committed ablation report (docs/paper.md), offline.

Sources, each cut into documents (a book chapter, a Wikipedia article, a docstring, a doc page):
  - ../shared/data/text: the Gutenberg books (NLTK layout), WikiText-2 (test split, the only one here)
    and the wiki_text WikiExtractor dump;
  - the Python standard library's docstrings and language reference (`albertlm.demo.stdlib_documents`);
  - this machine's packaged documentation, /usr/share/doc: plain text, Markdown, reStructuredText and
    HTML (tags stripped), gzipped or not. Change logs, copyright files, code and binary formats are skipped;
  - the unlabeled text of the GLUE tasks' *training* files (`--task-text`, ../shared/data/glue: SST-2,
    STS-B, CoLA, MRPC, RTE; never a dev file, never a label), one document per row by default, or
    consecutive rows of one file packed into documents of N+ words (`--task-words-per-doc N`, as the second
    cpu grid had it with N = 200; docs/paper.md's protocol 17 found packing removed the downstream gain),
    all of it in the training part: part of the cpu-scale protocol where pretraining should beat the same
    shape from scratch (docs/paper.md says how far it got); `--task-text ''` leaves it out.
Only prose is kept from the first three: paragraphs of 8+ words, mostly letters, with enough English function words
("the", "of", "and", ...); paragraphs are deduplicated over the whole corpus (licences and pages that
several packages ship are kept once). One document in 20 (by a hash of its name) is held out.

    python benchmarks/assemble_corpus.py --out corpus/en      # writes train.txt, heldout.txt, sources.json
    python benchmarks/assemble_corpus.py --out corpus/en --count-tokens ablate_runs/cpu/prepared/tokenizer
                                                              # (again) + token counts with a tokenizer

Output layout: one sentence per line, a blank line between documents (`albertlm data build --format lines`).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import re
import sys
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

HELD_OUT_EVERY = 20
FUNCTION_WORDS = frozenset("the of and to a in is that it for as with was on be by this are or not from at "
                           "an which have has but can if you its all their they he she his her".split())
SKIP_NAMES = re.compile(r"(changelog|copyright|changes|history|news|authors|thanks|credits|license|licence|"
                        r"makefile|todo|\.css|\.js|\.json|\.png|\.gif|\.jpg|\.svg|\.pdf|\.ps|\.tar|\.c$|\.h$|"
                        r"\.py$|\.pl$|\.sh$|\.log|\.xml|\.dtd|\.pem|\.conf|\.el$)", re.I)
TEXT_NAMES = re.compile(r"(\.(txt|md|rst|html?|text)$|^readme|^faq|^bugs|^install|^usage|^manual|^overview)", re.I)


# ------------------------------------------------------------------------------------------ prose filter
def is_english_prose(paragraph: str) -> bool:
    words = paragraph.split()
    if len(words) < 8:
        return False
    letters = sum(c.isalpha() for c in paragraph)
    if letters < 0.7 * len(paragraph.replace(" ", "")):
        return False
    lower = [w.strip(".,;:!?()\"'").lower() for w in words]
    return sum(w in FUNCTION_WORDS for w in lower) >= 0.12 * len(words)


def paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or lines[0].startswith((">>>", "$ ", "#include", "|", "+--", "```")):
            continue
        joined = re.sub(r"\s+", " ", " ".join(lines)).strip()
        joined = re.sub(r"[`*_]{1,2}([^`*_]+)[`*_]{1,2}", r"\1", joined)       # markdown / rst emphasis
        out.append(joined)
    return out


class _TextOfHtml(HTMLParser):
    BLOCKS = {"p", "div", "li", "h1", "h2", "h3", "h4", "h5", "h6", "br", "tr", "section", "dd", "dt", "pre",
              "table", "blockquote"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "pre", "code"):
            self.skip += 1
        if tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag in ("script", "style", "pre", "code") and self.skip:
            self.skip -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def html_text(raw: str) -> str:
    parser = _TextOfHtml()
    parser.feed(raw)
    return html.unescape("".join(parser.parts))


# ----------------------------------------------------------------------------------------------- sources
def shared_text_documents(root: Path):
    """(name, text) documents of ../shared/data/text: Gutenberg chapters, WikiText-2 and wiki_text articles."""
    for path in sorted((root / "gutenberg").glob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for i, chapter in enumerate(re.split(r"\n(?=CHAPTER |Chapter |BOOK |STAVE )", text)):
            yield f"gutenberg/{path.name}#{i}", chapter
    for path in sorted((root / "wikitext-2-raw").glob("*.raw")):
        text = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        for i, article in enumerate(re.split(r"\n (?= = [^=])", text)):
            body = re.sub(r"^ =+ .* =+ $", "", article, flags=re.M)
            yield f"wikitext-2/{path.name}#{i}", body.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
    for path in sorted((root / "wiki_text").glob("wiki_*")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for i, article in enumerate(re.findall(r"<doc[^>]*>(.*?)</doc>", text, flags=re.S)):
            yield f"wiki_text/{path.name}#{i}", article


def packaged_doc_documents(root: Path):
    """(name, text) for the prose files of /usr/share/doc (one document per file)."""
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        name = path.name[:-3] if path.name.endswith(".gz") else path.name
        if SKIP_NAMES.search(name) or not TEXT_NAMES.search(name) or path.stat().st_size > 4_000_000:
            continue
        try:
            raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        if re.search(r"\.html?$", name, re.I):
            text = html_text(text)
        yield f"usr-share-doc/{path.relative_to(root)}", text


TASK_TEXT_FILES = (  # (folder, training file, text columns, has a header row)
    ("SST-2", "train.tsv", (0,), True), ("STS-B", "train.tsv", (7, 8), True), ("CoLA", "train.tsv", (3,), False),
    ("MRPC", "msr_paraphrase_train.txt", (3, 4), True), ("RTE", "train.tsv", (1, 2), True))


def task_text_documents(root: Path):
    """(name, sentences) of the GLUE training files: each row's text fields, no label; dev files never."""
    for folder, file_name, columns, header in TASK_TEXT_FILES:
        path = root / folder / file_name
        if not path.is_file():
            print(f"task text: no {path}, skipped", file=sys.stderr)
            continue
        lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()[int(header):]
        for i, line in enumerate(lines):
            fields = line.split("\t")
            text = [fields[c].strip() for c in columns if c < len(fields) and fields[c].strip()]
            if text:
                yield f"glue-train/{folder}#{i}", text


def stdlib_docs():
    from albertlm.demo import stdlib_documents

    for name, sentences in stdlib_documents():
        yield f"python-stdlib/{name}", " ".join(sentences)


# ---------------------------------------------------------------------------------------------- assemble
def assemble(out: Path, shared_text: Path | None, usr_share_doc: Path | None, task_text: Path | None = None,
             task_words_per_doc: int = 0) -> dict:
    from albertlm.data.corpus import split_sentences

    out.mkdir(parents=True, exist_ok=True)
    seen: set[bytes] = set()
    files = {split: (out / f"{split}.txt").open("w", encoding="utf-8") for split in ("train", "heldout")}
    stats: dict = {}
    sources = [("shared_text", shared_text_documents(shared_text))] if shared_text is not None else []
    sources.append(("python_stdlib", stdlib_docs()))
    if usr_share_doc is not None and usr_share_doc.is_dir():
        sources.append(("usr_share_doc", packaged_doc_documents(usr_share_doc)))
    for source, documents in sources:
        s = stats[source] = Counter()
        for name, text in documents:
            s["documents_read"] += 1
            sentences = []
            for paragraph in paragraphs(text):
                key = hashlib.blake2b(paragraph.lower().encode(), digest_size=12).digest()
                if key in seen:
                    s["duplicate_paragraphs"] += 1
                    continue
                seen.add(key)
                if not is_english_prose(paragraph):
                    s["non_prose_paragraphs"] += 1
                    continue
                sentences += split_sentences(paragraph)
            if len(sentences) < 2:
                continue
            split = "heldout" if zlib.crc32(name.encode()) % HELD_OUT_EVERY == 0 else "train"
            files[split].write("\n".join(sentences) + "\n\n")
            s[f"{split}_documents"] += 1
            s[f"{split}_words"] += sum(len(x.split()) for x in sentences)
            s[f"{split}_chars"] += sum(len(x) for x in sentences)
        print(f"{source}: {dict(s)}", file=sys.stderr, flush=True)
    if task_text is not None:
        s = stats["glue_train_text"] = Counter()
        pending: list[str] = []                 # rows of one task file packed into one document
        pending_words = 0

        def flush():
            nonlocal pending_words
            if pending:
                files["train"].write("\n".join(pending) + "\n\n")
                s["train_documents"] += 1
                pending.clear()
                pending_words = 0

        folder = None
        for name, sentences in task_text_documents(task_text):
            s["rows_read"] += 1
            key = hashlib.blake2b("\n".join(sentences).lower().encode(), digest_size=12).digest()
            if key in seen:                     # SST-2 repeats phrases; kept once
                s["duplicate_rows"] += 1
                continue
            seen.add(key)
            if name.split("#")[0] != folder:    # never pack rows of two tasks together
                flush()
                folder = name.split("#")[0]
            words = sum(len(x.split()) for x in sentences)
            pending.extend(sentences)
            pending_words += words
            s["train_words"] += words
            s["train_chars"] += sum(len(x) for x in sentences)
            if pending_words >= task_words_per_doc:
                flush()
        flush()
        print(f"glue_train_text: {dict(s)}", file=sys.stderr, flush=True)
    for f in files.values():
        f.close()
    total = {key: sum(s.get(key, 0) for s in stats.values()) for key in
             ("train_documents", "heldout_documents", "train_words", "heldout_words", "train_chars", "heldout_chars")}
    summary = {"sources": {k: dict(v) for k, v in stats.items()}, "total": total,
               "files": {split: {"path": str(out / f"{split}.txt"), "MB": round((out / f"{split}.txt").stat().st_size / 1e6, 2)}
                         for split in ("train", "heldout")}}
    (out / "sources.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def count_tokens(out: Path, tokenizer: str) -> dict:
    """Tokens of train.txt and heldout.txt with a tokenizer (no [CLS]/[SEP]), added to sources.json."""
    from albertlm.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer)
    counts = {}
    for split in ("train", "heldout"):
        lines = [line for line in (out / f"{split}.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
        counts[split] = sum(len(ids) for i in range(0, len(lines), 4096) for ids in tok.encode_batch(lines[i:i + 4096]))
    summary = json.loads((out / "sources.json").read_text())
    summary["tokens"] = {"tokenizer": str(tokenizer), "vocab_size": tok.vocab_size, **counts}
    (out / "sources.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary["tokens"]


SHARED_TEXT_PARTS = ("gutenberg/*.txt", "wikitext-2-raw/*.raw", "wiki_text/wiki_*")   # what shared_text_documents reads


def missing_sources(args: argparse.Namespace) -> str | None:
    """What is missing of the folders the corpus is read from (the defaults are ../shared/data's, read from the
    repository root), said before anything is written; None when each is there or skipped ('')."""
    where = f"(from {Path.cwd()}: run from the repository root, beside ../shared, or give the folder)"
    if args.shared_text:
        root = Path(args.shared_text)
        if not root.is_dir():
            return (f"--shared-text {root}: no such folder {where}; '' leaves the Gutenberg, WikiText-2 and "
                    "wiki_text documents out")
        if not any(any(root.glob(part)) for part in SHARED_TEXT_PARTS):
            return f"--shared-text {root} holds none of {', '.join(SHARED_TEXT_PARTS)}"
    if args.task_text and not Path(args.task_text).is_dir():
        return f"--task-text {args.task_text}: no such folder {where}; '' leaves the GLUE training text out"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="corpus/en", help="output directory (train.txt, heldout.txt, sources.json)")
    p.add_argument("--shared-text", default="../shared/data/text", help="the shared text folder ('' = skip)")
    p.add_argument("--usr-share-doc", default="/usr/share/doc", help="packaged documentation ('' = skip)")
    p.add_argument("--task-text", default="../shared/data/glue",
                   help="GLUE folder whose training files' text (no labels) joins the training part ('' = skip)")
    p.add_argument("--task-words-per-doc", type=int, default=0,
                   help="pack consecutive rows of one GLUE file into documents of at least this many words "
                        "(0, the default = one document per row; docs/paper.md's protocol 17: packing "
                        "removed the downstream gain)")
    p.add_argument("--count-tokens", metavar="TOKENIZER", help="also count tokens with this tokenizer")
    args = p.parse_args(argv)
    problem = missing_sources(args)
    if problem:      # the corpus was written without them, exit 0, `shared_text: {}` its only sign
        print(f"assemble_corpus.py: error: {problem}", file=sys.stderr)
        return 2
    if args.usr_share_doc and not Path(args.usr_share_doc).is_dir():
        print(f"assemble_corpus.py: warning: --usr-share-doc {args.usr_share_doc}: no such folder; the corpus has no "
              "packaged documentation (the committed report's had this machine's)", file=sys.stderr)
    summary = assemble(Path(args.out), Path(args.shared_text) if args.shared_text else None,
                       Path(args.usr_share_doc) if args.usr_share_doc else None,
                       Path(args.task_text) if args.task_text else None, args.task_words_per_doc)
    if args.count_tokens:
        summary["tokens"] = count_tokens(Path(args.out), args.count_tokens)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
