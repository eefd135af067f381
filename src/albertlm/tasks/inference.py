"""Poke a model: fill-mask (top-k tokens with probabilities) and sentence embeddings (mean-pooled, [CLS] or the
trained pooler's).

Both take any checkpoint `albertlm` reads: our model directories, transformers ALBERT directories, and
pretraining run directories (their newest checkpoint). The tokenizer is the one beside the model (for a fine-tuning
run's checkpoints/step_N, the run's: best/'s copy, else the one the run recorded), else the one its pretraining data
was built with (run_config.json -> data meta.json), unless one is given.

    fill = FillMask.load("runs/base")                   # or FillMask(model, tokenizer)
    fill(["The capital of France is [MASK]."], top_k=5)  # [[[{"token": "▁paris", "score": 0.41, ...}, ...]]]
    embed_texts(AlbertModel.from_pretrained(d), tok, texts, pooling="mean")  # (N, H) float32, input order

`precision="bf16"` (both, and `FillMask.load` / `load_encoder`) runs the forward pass under bf16 autocast, as
`predict` / `evaluate --precision bf16` do; scores and embeddings still come out float32.

Without a `device`, `FillMask(model, ...)` and `embed_texts(model, ...)` put their batches where the model's
weights are (a model moved to a GPU works as it is).

Every path here (a model, a run, a tokenizer) is a str or Path, a leading `~` expanded (`model.io.user_path`).
"""
from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from albertlm.errors import UserError
from albertlm.model.io import user_path

MASK_TEXT = "[MASK]"  # what users type; every ALBERT/BERT vocabulary has this mask token
TOKENIZER_FILES = ("spiece.model", "vocab.txt", "tokenizer.json")


# -- finding the model and its tokenizer -------------------------------------------------------------------
def resolve_checkpoint(path: str | Path) -> Path:
    """A model directory -> itself; a pretraining run -> its newest checkpoint; a fine-tuning output
    directory -> its best checkpoint (`best/`)."""
    from albertlm.model.io import resolve_checkpoint as resolve

    return resolve(path, best=True)


def find_tokenizer(model_dir: str | Path) -> Path | None:
    """The tokenizer of a checkpoint: files in its directory, else in its run directory; for a fine-tuning run's
    `checkpoints/step_N` (which holds none) the run's (`run_tokenizer`: best/'s copy, else the one the run
    recorded); else the one its pretraining data was built with (run_config.json -> data.path -> meta.json)."""
    model_dir = user_path(model_dir)
    run_dir = model_dir.parent.parent if model_dir.parent.name == "checkpoints" else model_dir.parent
    for directory in (model_dir, run_dir):
        if any((directory / name).is_file() for name in TOKENIZER_FILES) or list(directory.glob("*.model")):
            return directory
    found = run_tokenizer(model_dir)   # embed / fill-mask on a step said "no tokenizer ... nor recorded by its run"
    if found is not None:
        return found
    for config in (model_dir / "run_config.json", run_dir / "run_config.json"):
        recorded = _data_tokenizer(config)
        if recorded is not None:
            return recorded
    return None


def _data_tokenizer(run_config: Path) -> Path | None:
    """The tokenizer a pretraining run's data was built with (run_config.json -> data.path -> meta.json)."""
    try:
        data_dir = json.loads(run_config.read_text()).get("data", {}).get("path", "")
        meta = json.loads((Path(data_dir) / "meta.json").read_text()) if data_dir else {}
    except (OSError, ValueError, AttributeError):
        return None
    path = meta.get("tokenizer", {}).get("path")
    return Path(path) if path and Path(path).exists() else None


# the key of a fine-tuning run's config (each checkpoints/step_N's run_config.json, best/task.json) that names the
# tokenizer it was fine-tuned with: a step holds no tokenizer files, and best/ (which does) exists only once the
# run has evaluated
RECORDED_TOKENIZER = "tokenizer"


def run_tokenizer(model_dir: str | Path) -> Path | None:
    """The tokenizer of a fine-tuning run's `checkpoints/step_N` (which holds none): the copy saved in the run's
    best/, else the one the run recorded it was fine-tuned with (its run_config.json), if it is still there.
    None for another directory, or where neither is (`missing_run_tokenizer` says why)."""
    from albertlm.tokenization.load import find_tokenizer as tokenizer_in

    model_dir = user_path(model_dir)
    info = step_record(model_dir)
    if not info:
        return None
    best = model_dir.parent.parent / "best"
    found = tokenizer_in(best) if best.is_dir() else None
    if found is None:
        found = recorded_tokenizer(info)
    return found


def recorded_tokenizer(saved: dict) -> Path | None:
    """The tokenizer a fine-tuning run's config records (`RECORDED_TOKENIZER`), if it is still there."""
    from albertlm.tokenization.load import find_tokenizer as tokenizer_in

    recorded = saved.get(RECORDED_TOKENIZER)
    if not isinstance(recorded, str) or not recorded:
        return None
    path = Path(recorded)
    return path if path.is_file() or (path.is_dir() and tokenizer_in(path) == path) else None


def missing_run_tokenizer(model_dir: str | Path) -> str:
    """Why a fine-tuning run's step_N has no tokenizer (`run_tokenizer` found none), and which one its run used;
    '' for another directory."""
    model_dir = user_path(model_dir)
    info = step_record(model_dir)
    if not info:
        return ""
    best = model_dir.parent.parent / "best"
    said = (f": a fine-tuning run's step checkpoint holds none, and the run's {best} "
            + ("holds none either" if best.is_dir() else
               "does not exist (it is written at the run's first dev evaluation, or it was removed)"))
    recorded = info.get(RECORDED_TOKENIZER)
    if isinstance(recorded, str) and recorded:
        return f"{said}; the run was fine-tuned with the tokenizer {recorded}, not found there now"
    return f"{said}; the run was started from --model {info['model']}" if info.get("model") else said


def step_record(model_dir: str | Path) -> dict:
    """The run_config.json of a fine-tuning run's checkpoints/step_N ({} for any other directory)."""
    from albertlm.model.io import fine_tuning_record

    model_dir = user_path(model_dir)
    if model_dir.parent.name != "checkpoints" or (model_dir / "task.json").is_file():
        return {}
    return fine_tuning_record(model_dir)


def load_tokenizer_for(model_dir: str | Path, explicit: str | Path | None = None, vocab_size: int | None = None):
    """The model's tokenizer (or `explicit`: refused where it is not the checkpoint's own, `check_own_tokenizer`);
    with `vocab_size`, one with more pieces is refused."""
    from albertlm.tokenization import load_tokenizer

    model_dir = user_path(model_dir)   # "~/m" was "no tokenizer beside ~/m"
    found = user_path(explicit) if explicit else find_tokenizer(model_dir)
    if found is None:
        built = _recorded_vocabulary(model_dir).get("path")   # a pretraining checkpoint's, moved or removed
        gone = f": its pretraining data was built with {built}, not found there now" if isinstance(built, str) else ""
        raise UserError(f"no tokenizer beside {model_dir} nor recorded by its run"
                        f"{missing_run_tokenizer(model_dir) or gone}; pass --tokenizer PATH")
    tokenizer = load_tokenizer(found)
    if vocab_size is not None:
        check_tokenizer_fits(tokenizer, vocab_size, found)
    if explicit:
        check_own_tokenizer(model_dir, found, tokenizer)
    elif _replaced_data_tokenizer(model_dir, found, tokenizer):
        raise UserError(f"{found}, the tokenizer the pretraining data of {model_dir} was built with, holds another "
                        f"vocabulary now than when the data was built (meta.json's vocab_sha256): it was replaced "
                        f"since; pass --tokenizer PATH with the one the data was built with")
    return tokenizer


def check_own_tokenizer(model_dir: str | Path, given: str | Path, tokenizer) -> None:
    """A tokenizer given for a checkpoint that has its own (files beside it, its fine-tuning run's for a step_N, the
    one its pretraining data was built with) must be that one: of the same size and other pieces, or smaller, it
    fed the model other ids and embed / fill-mask gave nonsense without a word (only one with more pieces than the
    model's rows was refused). Where the pretraining data's tokenizer file is gone, its recorded vocabulary hash
    (meta.json's `vocab_sha256`) is compared. The parent folder's tokenizer (`find_tokenizer`'s last guess) is no
    evidence and is not compared; nor is a tokenizer that cannot be read (not this check's to report)."""
    from albertlm.tokenization import load_tokenizer
    from albertlm.tokenization.load import find_tokenizer as tokenizer_in

    model_dir, given = user_path(model_dir), user_path(given)
    own = tokenizer_in(model_dir) or run_tokenizer(model_dir)
    replaced = False
    if own is not None:
        same = _same_tokenizer_path(own, given)
        try:
            reference = tokenizer if same else load_tokenizer(own)
        except (UserError, OSError, ValueError, RuntimeError):
            return
        # the pretraining data's tokenizer file, replaced since the data was built (a tokenizer trained again into
        # the same folder), is no reference: the recorded hash decides, as where the file is gone
        replaced = _replaced_data_tokenizer(model_dir, own, reference)
        if not replaced:
            difference = None if same else tokenizer_difference(reference, tokenizer)
            if difference:
                where = ("the one saved beside it" if _same_tokenizer_path(model_dir, own) else
                         f"its fine-tuning run's, {own}" if step_record(model_dir) else
                         f"the one its pretraining data was built with, {own}")
                raise UserError(f"--tokenizer {given} is not the tokenizer of {model_dir} ({where}): {difference}; "
                                "leave --tokenizer out")
            return
    built = _recorded_vocabulary(model_dir)
    if built.get("vocab_sha256"):
        from albertlm.data.build import vocab_fingerprint

        if vocab_fingerprint(tokenizer) != built["vocab_sha256"]:
            now = " (the file there now holds another vocabulary: it was replaced since)" if replaced else ""
            raise UserError(f"--tokenizer {given} is not the tokenizer {model_dir} was pretrained with: its data was "
                            f"built with {built.get('path', '?')}{now} ({built.get('vocab_size', '?')} pieces, "
                            f"another vocabulary than {tokenizer.vocab_size} pieces given); give that tokenizer")


def _replaced_data_tokenizer(model_dir: Path, found: Path, tokenizer) -> bool:
    """Whether `found` (loaded as `tokenizer`) is the tokenizer path a pretraining checkpoint's data records (meta.json,
    `_recorded_vocabulary`) but holds another vocabulary than the recorded hash: the file was replaced after the data
    was built, so it is not the model's tokenizer. False where nothing is recorded or `found` is another path."""
    built = _recorded_vocabulary(model_dir)
    if not (built.get("vocab_sha256") and isinstance(built.get("path"), str)) or _same_tokenizer_path(model_dir, found):
        return False
    try:
        if Path(built["path"]).resolve() != Path(found).resolve():
            return False
    except OSError:
        return False
    from albertlm.data.build import vocab_fingerprint

    return vocab_fingerprint(tokenizer) != built["vocab_sha256"]


def _same_tokenizer_path(own: Path, given: Path) -> bool:
    """Whether `given` is `own` (a directory) or a file in it, or `own` itself."""
    try:
        own, given = own.resolve(), given.resolve()
    except OSError:
        return False
    return given == own or given.parent == own


def _recorded_vocabulary(model_dir: Path) -> dict:
    """meta.json's `tokenizer` record ({path, vocab_size, vocab_sha256}) of the data a pretraining checkpoint was
    trained on (its run_config.json -> data.path), {} where there is none to read."""
    try:
        data_dir = json.loads((model_dir / "run_config.json").read_text(encoding="utf-8"))["data"]["path"]
        meta = json.loads((Path(data_dir) / "meta.json").read_text(encoding="utf-8"))
        built = meta["tokenizer"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return built if isinstance(built, dict) else {}


TOKENIZER_PROBE = "Hello World, ALBERT's café costs $3.50!"


def tokenizer_difference(ours, theirs) -> str | None:
    """How two tokenizers differ (vocabulary size, a piece, or how a probe text is split), or None."""
    if ours.vocab_size != theirs.vocab_size:
        return f"{theirs.vocab_size} pieces, not {ours.vocab_size}"
    for i in range(ours.vocab_size):
        if ours.id_to_token(i) != theirs.id_to_token(i):
            return f"piece {i} is {theirs.id_to_token(i)!r}, not {ours.id_to_token(i)!r}"
    if ours.encode(TOKENIZER_PROBE) != theirs.encode(TOKENIZER_PROBE):
        return f"it splits {TOKENIZER_PROBE!r} differently (casing or normalisation)"
    return None


def check_tokenizer_fits(tokenizer, vocab_size: int, path: str | Path) -> None:
    """A tokenizer with more pieces than the model has embedding rows would give ids past the table."""
    if tokenizer.vocab_size > vocab_size:
        raise UserError(f"tokenizer {path} has {tokenizer.vocab_size} pieces but the model's vocabulary is "
                        f"{vocab_size}: not this model's tokenizer (see --tokenizer)")


def pick_device(name: str = "auto") -> torch.device:
    """auto (the GPU if CUDA is available, else the CPU), cpu, cuda, or cuda:N (one GPU of several, as training's
    `--dist.device` takes; it was refused, so on a machine of several GPUs only the first could be chosen)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name) if isinstance(name, (str, torch.device)) else None
    except (RuntimeError, TypeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise UserError(f"--device must be auto, cpu, cuda or cuda:N, got {name!r}")
    if device.type == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA device is available here (use --device cpu or auto)")
    count = torch.cuda.device_count()
    if (device.index or 0) >= count:
        raise UserError(f"--device {name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return device


def model_device(model: torch.nn.Module) -> torch.device:
    """Where the model's weights are (the CPU for a model without any): where its inputs must go."""
    weight = next(model.parameters(), None)
    return weight.device if weight is not None else torch.device("cpu")


def has_mlm_head(model_dir: str | Path) -> bool:
    """Whether the checkpoint holds masked-LM head weights (ours: mlm_head.*, transformers: predictions.*)."""
    weights = user_path(model_dir) / "model.safetensors"
    if not weights.is_file():
        return True  # pytorch_model.bin: the loader reports a missing head
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="pt") as f:
            return any(k.startswith(("mlm_head.", "predictions.")) for k in f.keys())
    except Exception as exc:  # SafetensorError on a truncated or damaged file
        raise UserError(f"{weights}: not a readable safetensors file, truncated or damaged "
                        f"({str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__})") from None


# -- fill-mask ---------------------------------------------------------------------------------------------
def special_texts(tokenizer) -> dict[str, int]:
    """The written forms of the tokenizer's special tokens -> their ids: `[MASK]` (what users type), the
    tokenizer's own mask token where it is another (a tokenizer.json's `<mask>`), and its [CLS], [SEP], pad and
    unknown tokens (`<pad>`, `<unk>` in ALBERT's SentencePiece model), as transformers' tokenizers match them in
    the raw text ("[SEP]" typed between two sentences is the separator there, not the pieces "▁[", "sep", "]")."""
    texts = {MASK_TEXT: tokenizer.mask_id}
    for token_id in (tokenizer.mask_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.unk_id):
        text = tokenizer.id_to_token(token_id)
        if text and text.strip():
            texts.setdefault(text, token_id)
    return texts


def mask_texts(tokenizer) -> list[str]:
    """How a mask may be written: `[MASK]`, and the tokenizer's own mask token where it is another."""
    return [text for text, token_id in special_texts(tokenizer).items() if token_id == tokenizer.mask_id]


def encode_masked(tokenizer, text: str) -> list[int]:
    """`[CLS] text [SEP]` with every `[MASK]` (or the tokenizer's own mask token) as the mask id, and the other
    special tokens written in the text ([SEP], [CLS], <pad>, <unk>) as their ids. The spans between them are
    encoded on their own, as transformers' tokenizers do around a special token (so "[MASK]." gives "." its own
    word-start piece, the same ids as `pipeline("fill-mask")` on the exported model)."""
    specials = special_texts(tokenizer)
    pattern = re.compile("(" + "|".join(map(re.escape, sorted(specials, key=len, reverse=True))) + ")")
    parts = pattern.split(text)   # text, special, text, special, ..., text
    if not any(specials[part] == tokenizer.mask_id for part in parts[1::2]):
        raise UserError(f"no {' or '.join(mask_texts(tokenizer))} in {text!r}")
    pieces = tokenizer.encode_batch(parts[0::2])
    ids = [tokenizer.cls_id, *pieces[0]]
    for special, span_ids in zip(parts[1::2], pieces[1:]):
        ids += [specials[special], *span_ids]
    return ids + [tokenizer.sep_id]


@dataclass
class FillMask:
    """A masked-LM model (any class with `albert` and `mlm_head`) and its tokenizer, on one device: `device`,
    by default the one the model's weights are on."""

    model: torch.nn.Module
    tokenizer: object
    device: torch.device | None = None
    precision: str = "fp32"   # the forward pass's autocast (`training.precision.autocast`): fp32, bf16, fp16 (CUDA)

    def __post_init__(self) -> None:
        from albertlm.training.precision import check_precision

        # was always the CPU: FillMask(model.cuda(), tok) sent CPU batches to a GPU model ("Expected all
        # tensors to be on the same device")
        self.device = model_device(self.model) if self.device is None else torch.device(self.device)
        check_precision(self.precision, self.device, training=False)

    @classmethod
    def load(cls, path: str | Path, tokenizer: str | Path | None = None, device: str = "auto",
             precision: str = "fp32") -> "FillMask":
        from albertlm.model.heads import AlbertForMaskedLM
        from albertlm.training.precision import check_precision

        target = pick_device(device)
        check_precision(precision, target, training=False)   # fp16 on a CPU: before the model loads
        model_dir = resolve_checkpoint(path)
        if not has_mlm_head(model_dir):
            raise UserError(f"{model_dir} has no masked-LM head (a fine-tuned model?); fill-mask needs a "
                            "pretrained or masked-LM checkpoint")
        model = with_fast_paths(AlbertForMaskedLM.from_pretrained(model_dir), target, precision).eval().to(target)
        return cls(model, load_tokenizer_for(model_dir, tokenizer, model.config.vocab_size), target, precision)

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str], top_k: int = 5, batch_size: int = 32) -> list[list[list[dict]]]:
        """For each text, for each [MASK] in it (left to right), the top_k predictions
        {"token", "token_id", "token_str", "score"}, best first; scores are softmax probabilities. A lone string
        is one text (it was read character by character: "text 1: no [MASK] in 'T'")."""
        if isinstance(texts, str):
            texts = [texts]
        if top_k < 1:
            raise UserError(f"--top-k must be >= 1, got {top_k}")
        if batch_size < 1:
            raise UserError(f"--batch-size must be >= 1, got {batch_size}")
        encoded = [self.encode(t, f"text {k + 1}" if len(texts) > 1 else "") for k, t in enumerate(texts)]
        return self.predict_encoded(encoded, top_k, batch_size)

    @torch.inference_mode()
    def predict_encoded(self, encoded: Sequence[Sequence[int]], top_k: int = 5,
                        batch_size: int = 32) -> list[list[list[dict]]]:
        """`__call__` on texts already encoded by `encode`."""
        if top_k < 1:
            raise UserError(f"--top-k must be >= 1, got {top_k}")
        if batch_size < 1:
            raise UserError(f"--batch-size must be >= 1, got {batch_size}")
        results: list[list[list[dict]]] = []
        with evaluating(self.model):   # no dropout: the same text, the same scores
            for start in range(0, len(encoded), batch_size):
                results += self._batch(encoded[start:start + batch_size], min(top_k, self.tokenizer.vocab_size))
        return results

    def encode(self, text: str, name: str = "") -> list[int]:
        """The ids of `text` ([CLS] ... [SEP], its [MASK]s as the mask id); a text without [MASK], or longer than
        the model's positions, is a UserError, prefixed with `name` ("text 3", "stdin line 7") when given."""
        prefix = f"{name}: " if name else ""
        try:
            ids = encode_masked(self.tokenizer, text)
        except UserError as exc:
            raise UserError(f"{prefix}{exc}") from None
        limit = self.model.config.max_position_embeddings
        if len(ids) > limit:
            raise UserError(f"{prefix}the text has {len(ids)} tokens; the model reads at most {limit}")
        return ids

    def _batch(self, encoded: list[list[int]], top_k: int) -> list[list[list[dict]]]:
        from albertlm.model.fused import cast_once
        from albertlm.training.precision import autocast

        input_ids, attention_mask = pad_batch(encoded, self.tokenizer.pad_id, self.device)
        where = input_ids == self.tokenizer.mask_id  # (B, T)
        # cast_once: the fused bf16 linears cast each shared weight once per batch, as a whole model's forward does
        # (its hooks open that scope, and the backbone and the head are called here, not the model)
        with autocast(self.precision, self.device), cast_once():
            hidden = self.model.albert(input_ids, attention_mask).last_hidden_state  # (B, T, H)
            logits = self.model.mlm_head(hidden[where], self.model.albert.embeddings.word.weight)  # (M, V)
        # probabilities over the model's whole vocabulary (as transformers' pipeline), ranked among the ids the
        # tokenizer has: a model may be wider than its tokenizer (padded rows, `check_tokenizer_fits`), and an id
        # past the tokenizer's end has no text (an IndexError traceback from SentencePiece, "" from WordPiece)
        probs = logits.float().softmax(-1)[:, :self.tokenizer.vocab_size]
        scores, ids = probs.topk(min(top_k, probs.shape[-1]), dim=-1)  # (M, k)
        scores, ids = scores.cpu().tolist(), ids.cpu().tolist()
        per_text = where.sum(1).cpu().tolist()
        out, m = [], 0
        for count in per_text:
            out.append([[self._prediction(i, s) for i, s in zip(ids[j], scores[j])] for j in range(m, m + count)])
            m += count
        return out

    def _prediction(self, token_id: int, score: float) -> dict:
        return {"token": self.tokenizer.id_to_token(token_id), "token_id": token_id,
                "token_str": self.tokenizer.decode([token_id]), "score": score}


@contextlib.contextmanager
def evaluating(model: torch.nn.Module):
    """`model` in eval mode for the block (no dropout), its own mode restored after. A model built in code is in
    training mode (torch's default; `from_pretrained` returns eval mode, but a caller may have called `.train()`),
    so `embed_texts(model, ...)` and `FillMask(model, ...)` ran its dropout: on a checkpoint trained with dropout
    (the -v1 and bert-* presets) the same text gave another vector or other scores at each call."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both (B, T) with T the longest row."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, row in enumerate(rows):
        ids[k, :len(row)] = torch.as_tensor(row, dtype=torch.long)
        mask[k, :len(row)] = 1
    return ids.to(device), mask.to(device)


# -- embeddings --------------------------------------------------------------------------------------------
POOLINGS = ("mean", "cls", "pooler")


def length_buckets(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first, so memory peaks at once); every
    index appears once. Less padding than input order, and the caller scatters results back."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[k:k + batch_size] for k in range(0, len(order), batch_size)]


@torch.inference_mode()
def embed_batch(model, rows: Sequence[Sequence[int]], pad_id: int, pooling: str, device: torch.device,
                precision: str = "fp32") -> np.ndarray:
    """(B, H) float32: the mean of the last hidden states over real tokens ([CLS]/[SEP] included, as
    sentence-transformers' mean pooling), the [CLS] hidden state, or the trained pooler's tanh(W [CLS] + b)
    (transformers' `pooler_output`: what a sequence classifier's head reads). `precision` "bf16" (or "fp16" on
    CUDA): the encoder runs under autocast, as `predict --precision` runs it; the pooling is float32."""
    from albertlm.training.precision import autocast

    input_ids, attention_mask = pad_batch(rows, pad_id, device)
    encoder = getattr(model, "albert", model)   # the backbone of any of our classes
    with autocast(precision, device):
        output = encoder(input_ids, attention_mask)
    if pooling == "pooler":
        return output.pooler_output.float().cpu().numpy()
    hidden = output.last_hidden_state.float()  # (B, T, H)
    if pooling == "cls":
        pooled = hidden[:, 0]
    else:
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
    return pooled.cpu().numpy()


POOLER_MISSING = ("--pooling pooler: this checkpoint holds no trained pooler (a masked-LM, token-classification or "
                  "question-answering model has none; a pretraining checkpoint with a SOP/NSP head and a sequence "
                  "classifier have one); use --pooling mean or cls")


def embed_texts(model, tokenizer, texts: Iterable[str], *, pooling: str = "mean", batch_size: int = 32,
                max_length: int | None = None, device: torch.device | str | None = None, normalize: bool = False,
                window: int = 0, out: np.ndarray | None = None,
                progress: Callable[[int], None] | None = None, stats: dict | None = None,
                precision: str = "fp32") -> np.ndarray:
    """Embeddings of `texts` in input order, (N, H) float32 (written into `out` if given, e.g. a memmap).
    `model`: an `AlbertModel` or any of our classes holding one (its heads are not used); the batches go to
    `device`, by default the one the model's weights are on. A lone string is one text (it was embedded
    character by character, one row per character, without a word).

    With `out`, the texts must fill its rows exactly: more texts than rows, or fewer, is a UserError (more
    raised a numpy broadcast error mid-way; fewer left the last rows zero without a word).

    Texts are read `window` at a time (default 64 batches), tokenized, sorted into length buckets and run
    batch by batch, so memory is bounded whatever N (`embed_windows` hands out each window as it is done). Texts
    longer than `max_length` (default: the model's positions) are truncated, keeping the final [SEP]; with `stats`
    (a dict), the texts cut are counted in stats["truncated"] and the longest one's tokens in stats["longest"], and
    the texts that gave no token (empty, blank) in stats["empty"], so the caller can say so.

    `precision`: fp32 (default), bf16, or fp16 on CUDA: the forward pass's autocast (`embed_batch`); the
    embeddings are float32 whatever it is. `progress` is called with each batch's number of texts, once per
    batch (`batch_count` batches in all)."""
    windows = embed_windows(model, tokenizer, texts, pooling=pooling, batch_size=batch_size, max_length=max_length,
                            device=device, normalize=normalize, window=window, progress=progress, stats=stats,
                            precision=precision)
    chunks: list[np.ndarray] = []
    row = 0
    for _, vectors in windows:
        if out is not None:
            if row + len(vectors) > len(out):
                raise UserError(f"more texts than the {len(out)} rows of the output array "
                                f"(at least {row + len(vectors)})")
            out[row:row + len(vectors)] = vectors
        else:
            chunks.append(vectors)
        row += len(vectors)
    if out is not None:
        if row != len(out):
            raise UserError(f"{row} texts for the {len(out)} rows of the output array: its last "
                            f"{len(out) - row} rows would be left unwritten")
        return out
    return np.concatenate(chunks) if chunks else np.zeros((0, model.config.hidden_size), dtype=np.float32)


def embed_windows(model, tokenizer, texts: Iterable[str], *, pooling: str = "mean", batch_size: int = 32,
                  max_length: int | None = None, device: torch.device | str | None = None, normalize: bool = False,
                  window: int = 0, progress: Callable[[int], None] | None = None,
                  stats: dict | None = None, precision: str = "fp32") -> Iterator[tuple[list[str], np.ndarray]]:
    """`embed_texts` a window at a time: (the window's texts, their (n, H) float32 embeddings), in input order,
    each as soon as it is done, so a writer can put it out (a Parquet row group, JSON lines) and memory stays
    bounded by one window. The options are checked here, before the first window is read."""
    from albertlm.training.precision import check_precision

    if pooling not in POOLINGS:
        raise UserError(f"--pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    if pooling == "pooler" and getattr(getattr(model, "albert", model), "pooler", None) is None:
        raise UserError(POOLER_MISSING)
    if batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {batch_size}")
    if max_length is not None and max_length < 3:
        raise UserError(f"--max-length must be >= 3 ([CLS], at least one token of the text, [SEP]), got {max_length}")
    device = model_device(model) if device is None else torch.device(device)
    check_precision(precision, device, training=False)   # fp16 is CUDA's, as predict refuses it
    if isinstance(texts, str):
        texts = [texts]
    positions = model.config.max_position_embeddings
    limit = positions if max_length is None else min(max_length, positions)
    return _embedded_windows(model, tokenizer, texts, pooling, batch_size, limit, device, normalize,
                             window or default_window(batch_size), progress, stats, precision)


def default_window(batch_size: int) -> int:
    """The texts `embed_windows` reads at a time without a `window`: 64 batches."""
    return batch_size * 64


def batch_count(count: int, batch_size: int, window: int = 0) -> int:
    """The batches `embed_windows` runs for `count` texts (each window cut into batches on its own): what a progress
    report's total is (its `progress` callback is called once per batch)."""
    window = window or default_window(batch_size)
    full, rest = divmod(count, window)
    return full * -(-window // batch_size) + -(-rest // batch_size)


def _embedded_windows(model, tokenizer, texts: Iterable[str], pooling: str, batch_size: int, limit: int,
                      device: torch.device, normalize: bool, window: int,
                      progress: Callable[[int], None] | None,
                      stats: dict | None, precision: str = "fp32") -> Iterator[tuple[list[str], np.ndarray]]:
    with evaluating(model):   # no dropout: the same text, the same vector
        for texts_window in _windows(texts, window):
            rows = [[tokenizer.cls_id, *ids, tokenizer.sep_id] for ids in tokenizer.encode_batch(texts_window)]
            if stats is not None:
                cut = [len(r) for r in rows if len(r) > limit]
                stats["truncated"] = stats.get("truncated", 0) + len(cut)
                stats["longest"] = max([stats.get("longest", 0), *cut])
                stats["empty"] = stats.get("empty", 0) + sum(len(r) == 2 for r in rows)   # [CLS] [SEP] alone
            rows = [_truncate(r, limit) for r in rows]
            vectors = np.zeros((len(rows), model.config.hidden_size), dtype=np.float32)
            for batch in length_buckets([len(r) for r in rows], batch_size):
                vectors[batch] = embed_batch(model, [rows[i] for i in batch], tokenizer.pad_id, pooling, device,
                                             precision)
                if progress is not None:
                    progress(len(batch))
            if normalize:
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
            yield texts_window, vectors


def _truncate(ids: list[int], limit: int) -> list[int]:
    return ids if len(ids) <= limit else ids[:limit - 1] + ids[-1:]


def _windows(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    window: list[str] = []
    for text in texts:
        window.append(text)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def load_encoder(path: str | Path, device: str = "auto", precision: str = "fp32"):
    """(AlbertModel, model_dir, device) for embeddings: the backbone of any checkpoint (heads dropped; no pooler
    where the checkpoint has none: embeddings never read it), with the fast paths of `precision` (`with_fast_paths`:
    for bf16 on a CPU without bf16 hardware, the emulation warning)."""
    from albertlm.model.io import load_backbone
    from albertlm.training.precision import check_precision

    target = pick_device(device)
    check_precision(precision, target, training=False)   # fp16 on a CPU: before the model loads
    model_dir = resolve_checkpoint(path)
    model = load_backbone(model_dir)
    return with_fast_paths(model, target, precision).eval().to(target), model_dir, target


def with_fast_paths(model: torch.nn.Module, device: torch.device, precision: str = "fp32") -> torch.nn.Module:
    """The model with the CPU fast paths this CPU supports for inference in `precision` (fp32: the same numbers,
    faster; bf16: the fused bf16 linears where bf16 runs in hardware), and for bf16 on a CPU without bf16 hardware
    the one-line warning that it runs emulated, slower than fp32: the probe and the line of training, `predict` and
    `evaluate` (`training.precision.warn_emulated_bf16`, `model.fast_paths.choose_fast_path`)."""
    from albertlm.model.fast_paths import apply_fast_paths
    from albertlm.training.precision import warn_emulated_bf16

    warn_emulated_bf16(precision, device)
    apply_fast_paths(model, device, precision)
    return model
