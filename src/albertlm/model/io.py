"""Checkpoints: a directory of `model.safetensors` + `config.json` (the ModelConfig only, no optimizer).

`from_pretrained` also reads a transformers ALBERT directory (`model.safetensors` or
`pytorch_model.bin`, loaded with weights_only=True, or either sharded with its `.index.json`) through the key
map in `hf_format`.
Loading between our classes works like transformers: the backbone (`albert.*`) must match exactly;
head weights the checkpoint lacks, or holds in another shape, are freshly initialised (a warning), heads it has but
the class lacks are dropped: a fine-tuned one with a warning, a pretraining checkpoint's MLM / SOP heads and a pooler
the class has none of quietly (`load_state_into`); a `classifier` saved by another classifier class is freshly
initialised, with a warning (`other_class_head`). `save_pretrained` replaces a directory's model files together
(`save_checkpoint`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albertlm.config import ConfigError, ModelConfig
from albertlm.errors import UserError, json_object_or_empty, read_json_object
from albertlm.model import hf_format
from albertlm.errors import process_alive, user_path

log = logging.getLogger("albertlm.model")
WEIGHTS, CONFIG = "model.safetensors", "config.json"


def init_weights(module: nn.Module, std: float) -> None:
    """BERT / ALBERT initialisation: truncated-free normal(0, std) weights, zero biases, unit LayerNorm."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


# what a model path that does not exist is told (a Hub name given as --model, `albert-base-v2`)
DOWNLOADS_NOTHING = ("albertlm reads local directories and downloads nothing; fetch a Hub model first, e.g. with "
                     "`hf download NAME --local-dir DIR`")


def read_config(directory: str | Path) -> tuple[ModelConfig, bool]:
    """(config, is_transformers_format) of a checkpoint directory. A damaged config.json (not JSON, not an
    object, a field of the wrong type or out of range) is a UserError naming the file and the field."""
    directory = user_path(directory)
    path = directory / CONFIG
    if not path.is_file():
        recover_killed_saves(directory)
    if not path.is_file():
        hint = "" if Path(directory).exists() else f" (no such file or directory here: {DOWNLOADS_NOTHING})"
        if Path(directory).is_file():
            hint = " (a file: give the directory that holds the model's config.json)"
        elif _tf_checkpoint_here(Path(directory)):
            hint = (" (a google-research TF checkpoint: import it with albertlm.interop.tf.import_tf_checkpoint(path), "
                    "or convert it once with `albertlm convert DIR OUT`)")
        elif _run_models(Path(directory)):
            models = _run_models(directory)
            hint = (f" (a training run: load one of its models, {' or '.join(map(str, models))}; "
                    "albertlm.model.io.resolve_checkpoint(path) gives its newest checkpoint"
                    f"{', with best=True its best model' if models[0].name == 'best' else ''})")
        waiting = _waiting_earlier(Path(directory))
        if waiting is not None and not hint:
            hint = (f" (a save_pretrained into it was stopped while it replaced the model's files, by a process "
                    f"still running or on another machine: the earlier model's files wait in {waiting}, numbered "
                    f"in the order of the \"earlier\" names in {waiting.parent / _SWAP_PLAN}; a load or save of the "
                    "directory puts them back once that process is gone, or move them back yourself)")
        raise UserError(f"no {CONFIG} in {directory}: not a model directory{hint}")
    data = read_json_object(path, "a model config")
    try:
        if hf_format.is_hf_config(data):
            return hf_format.config_from_hf(data), True
        hf_format.check_config_types(data)
        config = ModelConfig.from_dict(data)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    _warn_defaulted(path, data)
    return config, False


def _run_models(directory: Path) -> list[Path]:
    """The models of a training run directory a model path was given as: its best model (`best/`, a fine-tuning
    run's) and its newest checkpoint; [] for anything else."""
    found = [directory / "best"] if (directory / "best" / CONFIG).is_file() else []
    latest = latest_checkpoint(directory) if directory.is_dir() else None
    return found + ([latest] if latest is not None else [])


def _tf_checkpoint_here(directory: Path) -> bool:
    """Whether `directory` holds what `import_tf_checkpoint` reads: google's albert_config.json, a TF checkpoint's
    `.index` file or `checkpoint` state file, or a TF-Hub module's variables/."""
    if not directory.is_dir():
        return False
    return ((directory / "albert_config.json").is_file() or (directory / "checkpoint").is_file()
            or (directory / "variables").is_dir() or any(directory.glob("*.ckpt*.index")))


_WARNED: set[str] = set()  # config files already warned about (a command reads its model's config several times)


def defaulted_fields(data: dict[str, Any]) -> list[str]:
    """The ModelConfig fields an albertlm config.json leaves out (they take ModelConfig's defaults)."""
    return [f.name for f in dataclasses.fields(ModelConfig) if f.name not in data]


def _warn_defaulted(path: Path, data: dict[str, Any]) -> None:
    """Warn, once per file, that fields missing from an albertlm config.json take ModelConfig's defaults
    (`save_pretrained` writes every field: an older albertlm's file, or one written by hand)."""
    missing = defaulted_fields(data)
    key = str(path.resolve())
    if not missing or key in _WARNED:
        return
    _WARNED.add(key)
    defaults = ModelConfig()
    values = ", ".join(f"{name}={getattr(defaults, name)!r}" for name in missing)
    log.warning("%s: fields not in the file take ModelConfig's defaults: %s (an older albertlm's config, or one "
                "written by hand; save_pretrained writes every field)", path, values)


PICKLE_WEIGHTS = "pytorch_model.bin"
INDEX = ".index.json"  # transformers' sharded weights: model.safetensors.index.json + model-0000k-of-0000n.safetensors


def read_state(directory: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint directory, found in transformers' order (`weights_source`): `model.safetensors`,
    else its shards (`model.safetensors.index.json` naming the shard file of each tensor, as transformers'
    `save_pretrained(max_shard_size=...)` writes them), else a transformers `pytorch_model.bin` loaded with
    weights_only=True (a pickle holding anything but tensors is refused, never run), else its shards. A truncated or
    damaged file is a UserError naming it."""
    source = weights_source(directory)
    read = read_safetensors if source.name.startswith(WEIGHTS) else read_torch_file
    if source.name.endswith(INDEX):
        return read_sharded(source, read)
    return _checked(read(source), source)


# transformers' from_pretrained takes the first of these a directory holds (safetensors before a pickle, one file
# before shards); a directory re-saved by transformers 5 (always safetensors, sharded by max_shard_size) keeps the
# pytorch_model.bin of an earlier save beside the new shards, which albertlm read in their place. Its sharded save also
# keeps an earlier model.safetensors, which both read before the new shards: `weights_source` warns of that pair (a
# Hub snapshot's model.safetensors beside pytorch_model.bin is one model in two formats: no warning).
WEIGHTS_ORDER = (WEIGHTS, WEIGHTS + INDEX, PICKLE_WEIGHTS, PICKLE_WEIGHTS + INDEX)


def weights_source(directory: str | Path) -> Path:
    """The file a checkpoint directory's weights are read from: the first of `WEIGHTS_ORDER` it holds, the file
    transformers' `from_pretrained` reads there (a sharded `*.index.json` stands for its shards)."""
    directory = Path(directory)
    present = [directory / name for name in WEIGHTS_ORDER if (directory / name).is_file()]
    if not present:
        raise UserError(f"no {WEIGHTS} or {PICKLE_WEIGHTS} (nor their sharded {WEIGHTS}{INDEX} / "
                        f"{PICKLE_WEIGHTS}{INDEX}) in {directory}")
    index = directory / (WEIGHTS + INDEX)
    if present[0].name == WEIGHTS and index.is_file() and str(index.resolve()) not in _WARNED:
        _WARNED.add(str(index.resolve()))   # once per directory: a load reads this several times
        log.warning("%s holds both %s and %s (with its shards), the weights of two saves: reading %s, as "
                    "transformers' from_pretrained does; transformers' sharded save_pretrained leaves an earlier %s "
                    "in place, so if the shards are the newer model, remove %s", directory, WEIGHTS, index.name,
                    WEIGHTS, WEIGHTS, WEIGHTS)
    return present[0]


def _safetensors_files(directory: str | Path) -> list[Path] | None:
    """The safetensors files holding a directory's weights (one, or the shards), or None where they are a pickle."""
    source = weights_source(directory)
    if source.name == WEIGHTS:
        return [source]
    return _shards(source)[1] if source.name == WEIGHTS + INDEX else None


def state_keys(directory: str | Path) -> list[str]:
    """The tensor names of a checkpoint directory, without reading its tensors where the format allows (a
    safetensors header, a sharded index); a pickle is read whole."""
    source = weights_source(directory)
    if source.name == WEIGHTS:
        from safetensors import safe_open

        try:
            with safe_open(str(source), framework="pt") as f:
                return list(f.keys())
        except Exception as exc:  # SafetensorError: a damaged header
            raise _unreadable_safetensors(source, exc) from None
    if source.name == WEIGHTS + INDEX:
        return list(_shards(source)[0])
    return list(read_state(directory))


def read_sharded(index: Path, read) -> dict[str, torch.Tensor]:
    """The tensors of transformers' sharded weights: `index` (JSON) maps each tensor name to the file in its
    directory that holds it (`weight_map`); every shard is read with `read`. A shard that is missing, outside the
    directory or lacks a tensor the index lists is a UserError naming it."""
    weight_map, shards = _shards(index)
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(_checked(read(shard), shard))
    missing = [key for key, name in weight_map.items() if key not in state]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise UserError(f"{index}: tensors it lists are in no shard: {', '.join(missing[:3])}{more}")
    return state


def _shards(index: Path) -> tuple[dict[str, str], list[Path]]:
    """(weight_map, the shard files) of transformers' index of sharded weights; a UserError for an index without a
    weight_map, or one naming a shard that is not a file in its directory."""
    weight_map = read_json_object(index, "a sharded-weights index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(v, str) for v in weight_map.values()):
        raise UserError(f"{index}: no weight_map (tensor name -> shard file) in this index of sharded weights")
    shards = []
    for name in sorted(set(weight_map.values())):
        if Path(name).name != name or name in ("", ".", ".."):
            raise UserError(f"{index}: the shard {name!r} is not a file name in its directory")
        if not (index.parent / name).is_file():
            raise UserError(f"{index}: names the shard {name}, which is not in {index.parent}")
        shards.append(index.parent / name)
    return weight_map, shards


def stored_shapes(directory: str | Path) -> dict[str, tuple[int, ...]]:
    """Each stored tensor's shape in a checkpoint directory, from the safetensors headers alone where the weights are
    safetensors (one file or transformers' shards); a pickle (`pytorch_model.bin`, sharded or not) is read whole, and
    a tensor it holds under two names (transformers 4's tied MLM decoder is the word embeddings) is listed once. A
    damaged file is a UserError naming it."""
    from safetensors import safe_open

    files = _safetensors_files(directory)
    if files is None:
        shapes, seen = {}, set()
        for key, value in read_state(directory).items():
            where = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.stride())
            if value.numel() == 0 or where not in seen:   # a tied tensor shares its storage with the one it is tied to
                seen.add(where)
                shapes[key] = tuple(value.shape)
        return shapes
    shapes = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})
        except Exception as exc:  # SafetensorError: a damaged header
            raise _unreadable_safetensors(path, exc) from None
    return shapes


SAFETENSORS_FLOATS = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


def stored_float_dtype(directory: str | Path) -> torch.dtype | None:
    """The one floating dtype of a checkpoint directory's weights (safetensors headers, or a pickle's tensors), or
    None where they mix several (or hold none)."""
    from safetensors import safe_open

    files = _safetensors_files(directory)
    if files is None:
        found = {v.dtype for v in read_state(directory).values() if v.is_floating_point()}
    else:
        found = set()
        for path in files:
            try:
                with safe_open(str(path), framework="pt") as f:
                    found |= {f.get_slice(k).get_dtype() for k in f.keys()}
            except Exception as exc:  # SafetensorError: a damaged header
                raise _unreadable_safetensors(path, exc) from None
        found = {SAFETENSORS_FLOATS[name] for name in found if name in SAFETENSORS_FLOATS}
    return found.pop() if len(found) == 1 else None


# The LogRecord attributes (`extra=`) of `load_state_into`'s notes naming the model's weights it freshly initialised:
# those the checkpoint lacks, and head weights it holds in another shape. Readers of the notes (`load_backbone`,
# `albertlm convert`) take the names from here, not by parsing the message, whose wording names the checkpoint.
FRESH_WEIGHTS, RESHAPED_WEIGHTS = "albertlm_fresh_weights", "albertlm_reshaped_weights"


def fresh_weights(record: logging.LogRecord) -> tuple[str, ...]:
    """The weights a loader's note (`load_state_into`) says were freshly initialised: not in the checkpoint, or
    held there in another shape; () for any other record."""
    return tuple(getattr(record, FRESH_WEIGHTS, ())) + tuple(getattr(record, RESHAPED_WEIGHTS, ()))


class _MissingPoolerNote(logging.Filter):
    """Drops the loader's notes about pooler weights a checkpoint lacks (`load_backbone` leaves the pooler out)."""

    def filter(self, record: logging.LogRecord) -> bool:
        names = fresh_weights(record)
        return not (names and all(name.startswith("pooler.") for name in names))


def load_backbone(directory: str | Path) -> nn.Module:
    """The backbone (`AlbertModel`) of any checkpoint, heads dropped: with its trained pooler, or without a pooler
    (`pooler_output` None) where the checkpoint has none (token classification, QA, masked-LM). A pooler made up at
    load time exported random `pooler_output` values to ONNX, and its "freshly initialised" note told `embed` users
    (who never read the pooler) that their vectors came from random weights."""
    from albertlm.model.albert import AlbertModel

    if any(key.removeprefix("albert.") == "pooler.weight" for key in state_keys(directory)):
        return AlbertModel.from_pretrained(directory)
    note = _MissingPoolerNote()
    log.addFilter(note)
    try:
        model = AlbertModel.from_pretrained(directory)
    finally:
        log.removeFilter(note)
    model.pooler = None
    return model


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file; a truncated or damaged file is a UserError naming it."""
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception as exc:  # safetensors raises SafetensorError (a bare Exception) on damaged files
        raise _unreadable_safetensors(path, exc) from None


def read_torch_file(path: Path):
    """`torch.load(path, weights_only=True)` on the CPU: a pickle holding anything but tensors and plain
    containers is refused (its payload never runs), a truncated or damaged file is a UserError naming it.
    For any torch-saved file (weights, a trainer state)."""
    import pickle
    import warnings

    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": noise next to the error below
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        detail = next((line.strip() for line in str(exc).splitlines() if "global" in line.lower()), "")
        if not detail:   # not a forbidden object: bytes that are no pickle at all (random, another format)
            why = str(exc).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0]
            why = " ".join(why.split())[:200] or type(exc).__name__
            raise UserError(f"{path}: not a readable PyTorch checkpoint, truncated or damaged ({why})") from None
        raise UserError(f"{path}: refused: the pickle holds Python objects other than tensors, which could run "
                        f"code when loaded (loaded with weights_only=True{'; ' + detail if detail else ''})") from None
    except Exception as exc:  # torch raises RuntimeError, EOFError, KeyError, ... on damaged files
        raise UserError(f"{path}: not a readable PyTorch checkpoint, truncated or damaged ({_first_line(exc)})") from None


def _unreadable_safetensors(path, exc: BaseException) -> UserError:
    """The error for a safetensors file the library could not open: damaged, or (its message says "not valid
    UTF-8") a good file at a path whose bytes are not UTF-8, which the library cannot open at all (a folder named
    in another encoding, e.g. CP949 unzipped from a Windows archive): that one said "truncated or damaged", and a
    user could delete a good model over it."""
    if "not valid UTF-8" in str(exc):
        shown = os.fsencode(str(path)).decode("utf-8", "backslashreplace")
        return UserError(f"{shown}: its path is not UTF-8 (a folder named in another encoding, e.g. unzipped from a "
                         "Windows archive), which the safetensors library cannot open; the file itself was not "
                         "read: rename the folder to UTF-8 (e.g. `convmv -f cp949 -t utf8 -r --notest DIR`)")
    return UserError(f"{path}: not a readable safetensors file, truncated or damaged ({_first_line(exc)})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _checked(state, path: Path) -> dict[str, torch.Tensor]:
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise UserError(f"{path}: expected a state dict (tensor names -> tensors), got {type(state).__name__}")
    return state


def check_shapes(model: nn.Module, state: dict[str, torch.Tensor], source: object) -> None:
    """Every tensor of `state` that `model` has must have the model's shape; else a UserError naming `source`
    and the first mismatches (e.g. resuming a run whose model config changed)."""
    own = model.state_dict()
    wrong = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items() if k in own
             and tuple(own[k].shape) != tuple(v.shape)]
    if wrong:
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        raise UserError(f"{source}: tensors do not fit this model's config (checkpoint vs model): "
                        f"{'; '.join(wrong[:3])}{more}")


def read_metadata(path: str | Path) -> dict[str, str]:
    """The string metadata of a safetensors file ({} if none); a damaged file is a UserError naming it."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as exc:  # SafetensorError
        raise _unreadable_safetensors(path, exc) from None


# an earlier model's weights in the forms albertlm never writes (transformers' pickle, either index of shards, the
# shards): a save of model.safetensors beside them left two models in one directory, the older under a config.json
# that no longer describes it (transformers' save_pretrained removes only its own stale shards)
EARLIER_WEIGHTS = (PICKLE_WEIGHTS, WEIGHTS + INDEX, PICKLE_WEIGHTS + INDEX)
SHARD = re.compile(r"^(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)$")


def earlier_weights(directory: str | Path) -> list[str]:
    """The names of an earlier model's weight files in `directory` that a save of `model.safetensors` does not
    replace (EARLIER_WEIGHTS and transformers' shard files), sorted; [] where there is no such directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if (p.name in EARLIER_WEIGHTS or SHARD.match(p.name))
                  and p.is_file())


def remove_earlier_weights(directory: str | Path) -> list[str]:
    """Remove `earlier_weights(directory)` (after a new `model.safetensors` is written there) and log their names;
    returns them."""
    names = earlier_weights(directory)
    for name in names:
        (Path(directory) / name).unlink(missing_ok=True)
    if names:
        log.warning("%s: removed the earlier model's weight files the new model.safetensors replaces: %s",
                 directory, ", ".join(names))
    return names


def sort_metadata(path: Path) -> None:
    """Rewrite a safetensors file's header in place with its `__metadata__` keys sorted, so the same weights saved
    twice are the same bytes (a checksum tells runs apart only where the weights differ). safetensors serialises
    the metadata from a Rust HashMap with a random seed per save: `format` and `albertlm_class` came in either
    order. The header keeps its length (serde_json's compact form, padded with spaces to 8 bytes as safetensors
    pads it); a header that would not (an escape written otherwise) is left as it is."""
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        raw = f.read(size)
        header = json.loads(raw)
        meta = header.get("__metadata__")
        if not isinstance(meta, dict) or len(meta) < 2 or list(meta) == sorted(meta):
            return
        header["__metadata__"] = dict(sorted(meta.items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(text) > size or text.rstrip() != text or len(raw.rstrip(b" ")) != len(text):
            return
        f.seek(8)
        f.write(text.ljust(size, b" "))


class WriteError(UserError, OSError):
    """A file albertlm could not write (a full disk, a quota, a read-only folder): a UserError, whose message the
    CLI says in one line, that is also the OSError it comes from (`errno`, `strerror`, `filename`), so a library
    caller's `except OSError` handler (free space, retry elsewhere) catches it as it catches any failed write."""

    def __init__(self, message: str, errno: int | None, filename: str | Path) -> None:
        super().__init__(errno, os.strerror(errno) if errno else message, str(filename))
        self.message = message

    def __str__(self) -> str:
        return self.message


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _as_os_error(exc: BaseException, path: str | Path) -> OSError | None:
    """The OSError a library's own write error stands for, naming `path`: safetensors' SafetensorError says
    "I/O error: File too large (os error 27)" (its errno in the text); torch.save's RuntimeError ("unexpected pos
    ...") was raised while the file object's OSError was handled (`__context__`). None where it is no write error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return OSError(seen.errno, seen.strerror or str(seen), str(path))
        found = _OS_ERROR.search(str(seen)) if type(seen).__name__ == "SafetensorError" else None
        if found:
            code = int(found.group(1))
            return OSError(code, os.strerror(code), str(path))
        seen = seen.__context__
    return None


def write_safetensors(state: dict[str, torch.Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' `save_file`, whose write errors (a full disk, a quota, a read-only folder) are the OSError they
    are (errno set, `path` named): safetensors raised its own SafetensorError, no OSError, so a caller's `except
    OSError` missed a full disk. safetensors writes through a temporary file renamed into place: an earlier file
    at `path` is kept whole when the write fails."""
    from safetensors.torch import save_file

    try:
        save_file(state, str(path), metadata=metadata)
    except Exception as exc:  # noqa: BLE001 (SafetensorError, a bare Exception; anything else is re-raised)
        error = _as_os_error(exc, path)
        if error is None:
            raise
        raise error from None


def write_torch_file(obj: Any, path: str | Path) -> None:
    """`torch.save(obj, path)`, whose write errors are the OSError they are (errno set, `path` named): torch.save
    to a path said a full disk as RuntimeError "[enforce fail at inline_container.cc:672] . unexpected pos 832 vs
    726". Written through a Python file object, whose failed write leaves its OSError to find."""
    try:
        with open(path, "wb") as f:
            torch.save(obj, f)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except RuntimeError as exc:
        error = _as_os_error(exc, path)
        if error is None:
            raise
        raise error from None


SAVE_TMP_PREFIX = ".albertlm-save-"   # the folder inside the target a save writes its files into first


def save_checkpoint(model: nn.Module, config: ModelConfig, directory: str | Path) -> Path:
    """`model`'s weights (model.safetensors) and `config` (config.json) in `directory`, with labels.json for a
    classifier with labels (`save_pretrained`). The files are written into a temporary folder inside `directory`
    and then replace the earlier model's together (`_swap_in`): a failed write, an error or a Ctrl-C between them
    leaves the earlier model's files as they were, never its config.json beside the new weights (a same-shape
    model's weights under another model's config loaded without a word). A save killed on the way (kill -9, the OOM
    killer) cannot clean up: its folder (`.albertlm-save-HOST-PID-*`, held by a lock while it runs) is undone and
    removed by the next save into `directory`, or a load of it that finds no config.json (`recover_killed_saves`).
    A failed write (a full disk, a quota, a read-only folder) is an OSError naming the file (errno set)."""
    directory = user_path(directory)
    on_meta = [k for k, v in model.state_dict().items() if v.is_meta]
    if on_meta:  # was NotImplementedError "Cannot copy out of meta tensor", after creating the directory
        raise UserError(f"cannot save to {directory}: the weights are on the meta device (shapes, no values: "
                        f"{on_meta[0]}{' and more' if len(on_meta) > 1 else ''}); load or initialise them first, "
                        "e.g. model.to_empty(device='cpu') then load_state_dict")
    labels = model_labels(model)   # names of another head: refused before anything is written
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    import shutil
    import tempfile

    try:
        directory.mkdir(parents=True, exist_ok=True)
        recover_killed_saves(directory)
        stage = Path(tempfile.mkdtemp(prefix=_stage_prefix(), dir=directory))
    except OSError as exc:   # were FileExistsError / NotADirectoryError tracebacks, no UserError
        blocked = next((d for d in (directory, *directory.parents) if d.exists() and not d.is_dir()), None)
        why = f"{blocked} is a file, not a directory" if blocked is not None else exc.strerror or str(exc)
        raise WriteError(f"cannot save to {directory}: {why}", exc.errno, directory) from None
    held = _hold_stage(stage)
    try:
        try:
            write_safetensors(state, stage / WEIGHTS, metadata={"format": "pt",
                                                                "albertlm_class": type(model).__name__})
            sort_metadata(stage / WEIGHTS)
            config.to_json(stage / CONFIG)
            mode_like(stage / WEIGHTS, stage / CONFIG)
            wrote_labels = write_labels(labels, stage, directory, type(model).__name__)
        except OSError as exc:   # the file it is written as, not the temporary folder
            name = Path(exc.filename).name if exc.filename else WEIGHTS
            raise OSError(exc.errno, exc.strerror or str(exc), str(directory / name)) from None
        replaced = [WEIGHTS, CONFIG, *([LABELS_FILE] if wrote_labels else [])]
        stale_labels = [] if wrote_labels or not (directory / LABELS_FILE).is_file() else [LABELS_FILE]
        earlier = earlier_weights(directory)
        _swap_in(stage, directory, replaced, [*stale_labels, *earlier])
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if held is not None:
            os.close(held)
    if stale_labels:
        log.warning("%s: removed the earlier model's %s (this model names no labels)", directory, LABELS_FILE)
    if earlier:
        log.warning("%s: removed the earlier model's weight files the new model.safetensors replaces: %s",
                    directory, ", ".join(earlier))
    return directory


def _swap_in(stage: Path, directory: Path, names: list[str], removed: list[str]) -> None:
    """Move the files `names` from `stage` (a folder inside `directory`: the same file system) into `directory` and
    take the files `removed` out of it, as one step: the earlier files are first moved aside into `stage`, then the
    new ones in; an error or a Ctrl-C on the way puts the earlier ones back, so `directory` holds the earlier model
    or the new one, never a mix. `stage` is the caller's to remove (the earlier files wait there).

    A kill on the way (kill -9, the OOM killer) cannot put them back: config.json goes aside first and comes in
    last, so a directory caught half way has none (it is no model, rather than a mix), and `stage` keeps the plan
    (`_SWAP_PLAN`: the new files in order, the earlier ones, numbered in `.earlier/` in that order), from which the
    next save or load of the directory puts the earlier model back (`recover_killed_saves`)."""
    aside = stage / _ASIDE
    placing = sorted(names, key=lambda name: name == CONFIG)   # config.json last
    order = sorted(dict.fromkeys([*names, *removed]), key=lambda name: name != CONFIG)   # config.json first
    earlier = [name for name in order if (directory / name).is_file() or (directory / name).is_symlink()]
    (stage / _SWAP_PLAN).write_text(json.dumps({"names": placing, "earlier": earlier}), encoding="utf-8")
    aside.mkdir()
    kept: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for name in earlier:
            target, waiting = directory / name, aside / str(len(kept))
            os.replace(target, waiting)
            kept.append((target, waiting))
        for name in placing:
            os.replace(stage / name, directory / name)
            placed.append(directory / name)
    except BaseException:
        for target in reversed(placed):
            with contextlib.suppress(OSError):
                target.unlink()
        for target, waiting in reversed(kept):
            with contextlib.suppress(OSError):
                os.replace(waiting, target)
        raise


_ASIDE = ".earlier"          # inside a staging folder: the earlier model's files `_swap_in` moved aside
_SWAP_PLAN = "swap.json"     # inside it: the files `_swap_in` moves in (in order) and those it moves aside
_STAGE_LOCK = ".lock"        # inside it: held (flock) by the saving process for its whole save


def _stage_prefix(pid: int | None = None) -> str:
    """`.albertlm-save-HOST-PID-`: a save's staging folder names its machine and process, so that a later save
    tells a killed save's folder from a running one's (`recover_killed_saves`)."""
    import socket

    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "host"
    return f"{SAVE_TMP_PREFIX}{host}-{os.getpid() if pid is None else pid}-"


def _hold_stage(stage: Path) -> int | None:
    """Create `stage`'s lock file and hold an exclusive `fcntl.flock` on it (the descriptor to close once `stage`
    is removed); None elsewhere than POSIX or where it cannot be created. On a file system without locks the file
    is made but not locked, and `recover_killed_saves` leaves a folder alone whose lock it cannot take."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(stage / _STAGE_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _take_stage(stage: Path) -> int | None:
    """The descriptor of `stage`'s lock file, locked by this process, where no live save holds it (`_hold_stage`);
    None where it is held, missing (a save before this one's, or one killed before it made the file), on a file
    system without locks, or elsewhere than POSIX."""
    try:
        import fcntl
    except ImportError:
        return None
    lock = stage / _STAGE_LOCK
    try:
        fd = os.open(lock, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.path.samestat(os.fstat(fd), os.lstat(lock)):   # still the folder's file: not removed meanwhile
            return fd
    except OSError:   # held by a live save (BlockingIOError), no locks here, or removed meanwhile
        pass
    os.close(fd)
    return None


def _killed_stages(directory: Path) -> list[Path]:
    """The staging folders in `directory` of saves on this machine whose process is gone, sorted."""
    prefix = _stage_prefix(0)[:-2]   # `.albertlm-save-HOST-`
    try:
        found = [p for p in directory.iterdir() if p.name.startswith(prefix)]
    except OSError:   # no folder (or none readable): nothing to recover
        return []
    killed = []
    for stage in sorted(found):
        match = re.fullmatch(r"(\d+)-[A-Za-z0-9_]+", stage.name[len(prefix):])
        if (match and int(match.group(1)) != os.getpid() and not process_alive(int(match.group(1)))
                and stage.is_dir() and not stage.is_symlink()):
            killed.append(stage)
    return killed


def recover_killed_saves(directory: str | Path) -> list[str]:
    """Undo the saves into `directory` that were killed (kill -9, the OOM killer, a lost session): their staging
    folders (`.albertlm-save-HOST-PID-*`, a whole model.safetensors) are removed, and where one was killed while it
    replaced the files (`_swap_in`), the earlier model's files are put back first and the new ones it had moved in
    taken out. Only the folders of this machine's processes that are gone, and whose lock (`_hold_stage`) this
    process can take: a running save's (in another container of this host name too), another machine's, or one on a
    file system without locks stay. A save and a load of a directory without config.json call it; returns the names
    of the files put back."""
    import shutil

    directory = user_path(directory)
    restored: list[str] = []
    for stage in _killed_stages(directory):
        fd = _take_stage(stage)
        if fd is None:
            # killed between making its folder and its lock file: it moved nothing aside yet (no `.earlier`),
            # so the dead process's folder holds nothing to put back; it stayed for good
            if not (stage / _STAGE_LOCK).exists() and not (stage / _ASIDE).exists():
                shutil.rmtree(stage, ignore_errors=True)
            continue
        try:
            put_back, left = _undo_swap(stage, directory)
            restored += put_back
            if put_back:
                log.warning("%s: put back the earlier model's %s, which a killed save_pretrained had moved aside",
                            directory, ", ".join(put_back))
            if left:   # files of those names written since the kill (or no plan to read): the folder stays
                log.warning("%s: a killed save_pretrained's folder %s is left as it is: it holds the earlier "
                            "model's %s, and the directory has files of those names written since", directory,
                            stage, ", ".join(left))
            else:
                shutil.rmtree(stage, ignore_errors=True)
        except OSError as exc:   # a read-only folder, a file system gone: left for a later save
            log.warning("%s: cannot undo the killed save in %s (%s)", directory, stage, exc.strerror or exc)
        finally:
            os.close(fd)
    return restored


def _undo_swap(stage: Path, directory: Path) -> tuple[list[str], list[str]]:
    """Put `directory` back as it was before a killed save's `_swap_in` (from `stage`'s plan), unless the swap had
    moved every new file in (the save was complete: the earlier files only wait to be removed). Returns the names
    put back and those left in `stage` (a file of that name is in `directory` again, not this save's)."""
    aside = stage / _ASIDE
    if not aside.is_dir():   # killed while it wrote: the directory was not touched
        return [], []
    try:
        plan = json.loads((stage / _SWAP_PLAN).read_text(encoding="utf-8"))
        names = [Path(name).name for name in plan["names"]]
        waiting = {Path(name).name: aside / str(i) for i, name in enumerate(plan["earlier"])}
    except (OSError, ValueError, KeyError, TypeError):   # not ours to judge: left as it is
        return [], [p.name for p in aside.iterdir()]
    if not any(os.path.lexists(stage / name) for name in names):   # every new file moved in
        return [], []
    restored: list[str] = []
    for name in names:
        if os.path.lexists(stage / name):   # not moved in
            continue
        if name in waiting and os.path.lexists(waiting[name]):   # the new file in the earlier one's place
            os.replace(waiting[name], directory / name)
            restored.append(name)
        elif name not in waiting:           # a new file the earlier model had none of
            (directory / name).unlink(missing_ok=True)
    left = []
    for name, path in waiting.items():
        if not os.path.lexists(path):       # put back above, or by the stopped save itself
            continue
        if os.path.lexists(directory / name):
            left.append(name)
        else:
            os.replace(path, directory / name)
            restored.append(name)
    return restored, left


def _waiting_earlier(directory: Path) -> Path | None:
    """The `.earlier` folder of a stopped save in `directory` that holds an earlier model's files (`_swap_in`)."""
    try:
        return next((p / _ASIDE for p in sorted(directory.glob(SAVE_TMP_PREFIX + "*"))
                     if (p / _ASIDE).is_dir() and any((p / _ASIDE).iterdir())), None)
    except OSError:
        return None


def mode_like(path: Path, reference: Path) -> None:
    """Give `path` the permission bits of `reference` (a file written the usual way, so with the umask's mode):
    safetensors writes through a temporary file of mode 0600 whatever the umask, so a model saved for a team or a
    serving process of another user was the one file of its directory only its owner could read."""
    try:
        mode = reference.stat().st_mode & 0o777
        if path.stat().st_mode & 0o777 != mode:
            path.chmod(mode)
    except OSError:      # a file system without modes (some network mounts): nothing to match
        pass


def load_state_into(model: nn.Module, state: dict[str, torch.Tensor], prefix: str,
                    strict_heads: bool = False, source: object = "the checkpoint") -> list[str]:
    """Load a full-model state (backbone under `albert.`) into `model` whose backbone is under `prefix`; returns the
    names of the model's tensors the checkpoint did not give (missing, or of another shape), which keep their values.
    Backbone weights must match exactly; heads (and the pooler, which some heads lack) may differ: a head weight
    of another shape is freshly initialised, or with `strict_heads` a UserError (the checkpoint's own class, whose
    config does not fit its weights: that head would come back random). What a user should hear of (warnings,
    one line each, naming `source`): weights freshly initialised, head weights of another shape, and a fine-tuned
    head the class has no place for (`_dropped_heads`); a pretraining checkpoint's MLM / SOP heads and a pooler the
    class lacks are dropped as expected when fine-tuning (logged at info level)."""
    state = {(prefix + k.removeprefix("albert.") if k.startswith("albert.") else k): v for k, v in state.items()
             if k.startswith("albert.") or prefix}  # a bare AlbertModel drops every head

    def is_backbone(key: str) -> bool:
        return key.startswith(prefix) and not key.startswith(prefix + "pooler.")

    own = model.state_dict()
    reshaped = [k for k in own if k in state and own[k].shape != state[k].shape]   # in the model's order
    for key in reshaped:
        if is_backbone(key):
            raise UserError(f"checkpoint tensor {key} has shape {tuple(state[key].shape)}, "
                            f"the model expects {tuple(own[key].shape)}")
        if strict_heads:
            shapes = f"checkpoint head weight {key} has shape {tuple(state[key].shape)}, {type(model).__name__} "
            if key.startswith(("sop_head.", "qa_outputs.")):   # transformers sizes these by num_labels, ours are 2 wide
                raise UserError(shapes + f"has {tuple(own[key].shape)}: albertlm's {key.split('.')[0]} is always 2 "
                                "wide (transformers sizes it by num_labels), so this head cannot be loaded")
            raise UserError(shapes + f"of its config.json has {tuple(own[key].shape)}: the config (num_labels / "
                            "id2label) does not fit the weights, and that head would come back random")
    if reshaped:   # one line for the head (weight and bias were a line each): a head trained for another task
        log.warning("%s: head weights of another shape than %s's are freshly initialised (a head trained for another "
                    "number of labels or task): %s", source, type(model).__name__,
                    "; ".join(f"{key} has another shape, {tuple(state[key].shape)} vs {tuple(own[key].shape)}"
                              for key in reshaped), extra={RESHAPED_WEIGHTS: tuple(reshaped)})
    for key in reshaped:
        del state[key]
    missing, unexpected = model.load_state_dict(state, strict=False)
    for keys, what in ((missing, "checkpoint lacks model weights"),
                       (unexpected, "checkpoint has weights this config does not")):
        if [k for k in keys if is_backbone(k)]:
            raise UserError(f"{what}: {', '.join([k for k in keys if is_backbone(k)][:5])}")
    missing = [k for k in missing if k not in reshaped]  # those were named above
    if missing:   # named with the checkpoint and the class (a bare AlbertModel loaded as a classifier said neither)
        log.warning("%s: freshly initialised weights of %s, not in the checkpoint (random until trained): %s",
                    source, type(model).__name__, ", ".join(missing), extra={FRESH_WEIGHTS: tuple(missing)})
    dropped = _dropped_heads(unexpected, prefix)
    if dropped:   # transformers warns "Some weights of the model checkpoint ... were not used"
        modules = list(dict.fromkeys(key.rpartition(".")[0] for key in dropped))   # classifier.weight -> classifier
        log.warning("%s: the checkpoint's fine-tuned head (%s) is not used: %s has none (a head trained for another "
                    "task)", source, ", ".join(modules), type(model).__name__)
    expected = [k for k in unexpected if k not in dropped]
    if expected:
        log.info("ignored checkpoint weights of other heads: %s", ", ".join(expected))
    return reshaped + missing


# A pretraining checkpoint's heads (AlbertForPreTraining, AlbertForMaskedLM), and a pooler the class has none of, are
# dropped by every fine-tuning from it: expected, not warned. Any other head in a checkpoint is a fine-tuned one.
PRETRAINING_HEADS = ("mlm_head.", "sop_head.")


def _dropped_heads(unexpected: list[str], prefix: str) -> list[str]:
    """The checkpoint's fine-tuned head weights (a classifier, a QA head, google's SQuAD v2.0 head) among the weights
    `unexpected` that the loading class has no place for."""
    return [k for k in unexpected if not k.startswith(PRETRAINING_HEADS) and not k.startswith(prefix + "pooler.")]


def to_full_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A bare AlbertModel checkpoint (no `albert.` prefix) -> full-model form."""
    if any(k.startswith("albert.") for k in state):
        return state
    return {"albert." + k: v for k, v in state.items()}


def loading_dtype(dtype: torch.dtype | str | None, directory: str | Path) -> torch.dtype | None:
    """transformers' `from_pretrained(dtype=...)`: a torch dtype (or its name, "bfloat16"), "auto" for the stored
    one (float32 where the weights mix several), None to keep float32. Anything else is a UserError."""
    if dtype is None or isinstance(dtype, torch.dtype):
        pass
    elif dtype == "auto":
        dtype = stored_float_dtype(directory) or torch.float32
    elif isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        dtype = getattr(torch, dtype)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise UserError(f"dtype={dtype!r}: give a floating torch dtype (torch.bfloat16, 'float16', ...) or 'auto' "
                        "(the dtype the weights are stored in)")
    return dtype


LABELS_FILE = "labels.json"   # a classifier's label names and problem type beside an albertlm checkpoint
LABELLED = ("AlbertForSequenceClassification", "AlbertForTokenClassification")   # the classes whose labels travel


def read_labels(directory: str | Path) -> dict:
    """{"id2label": {...}, "problem_type": ...} for a classifier: from a transformers config, our labels.json
    (written by `save_pretrained` or a conversion from transformers), or what the albertlm fine-tuning it came from
    recorded (`fine_tuning_record`: best/'s task.json, a run's `checkpoints/step_N`'s run_config.json). Names that
    are not index -> name, or a problem_type transformers does not know, are a UserError naming the file."""
    directory = Path(directory)
    config = json_object_or_empty(directory / CONFIG)
    if config.get("model_type") == "albert":
        names = config.get("id2label") if isinstance(config.get("id2label"), dict) else {}
        hf_format.check_id2label(names, f"{directory / CONFIG}: id2label")
        default = all(v == f"LABEL_{k}" for k, v in names.items())
        out = {} if default else {"id2label": {str(k): v for k, v in names.items()}}
        out |= {"problem_type": config["problem_type"]} if config.get("problem_type") else {}
        return hf_format.check_labels(out, str(directory / CONFIG))
    found = json_object_or_empty(directory / LABELS_FILE)
    if found or _names_no_labels(directory / LABELS_FILE):
        return hf_format.check_labels(found, str(directory / LABELS_FILE))
    return recorded_labels(directory)


def recorded_labels(directory: str | Path) -> dict:
    """The labels the albertlm fine-tuning a checkpoint came from recorded (`fine_tuning_record`, else the task.json
    of the run directory it is in), as `read_labels` gives them; {} where none is recorded."""
    directory = Path(directory)
    task = fine_tuning_record(directory)
    if not task:   # the task.json of the run directory it is in
        run_dir = directory.parent.parent if directory.parent.name == CHECKPOINT_DIR else directory.parent
        task = json_object_or_empty(run_dir / "task.json")
    if task.get("regression"):
        return {"problem_type": "regression"}
    if task.get("labels"):
        return {"id2label": {str(i): str(name) for i, name in enumerate(task["labels"])},
                "problem_type": "single_label_classification"}
    return {}


NO_LABELS = "{}\n"   # labels.json of a classifier that names no labels, saved where a fine-tuning record names some


def _names_no_labels(path: Path) -> bool:
    """Whether `path` is the labels.json `write_labels` writes for a model without labels (`NO_LABELS`), which
    outranks a fine-tuning record beside it (another model's)."""
    try:
        return path.read_text(encoding="utf-8").strip() == NO_LABELS.strip()
    except (OSError, UnicodeDecodeError):
        return False


def fine_tuning_record(directory: str | Path) -> dict[str, Any]:
    """What an albertlm fine-tuning recorded beside a checkpoint: best/'s task.json (family, task, labels,
    regression, max_seq_length, ...), or for a run's `checkpoints/step_N`, which has none, the run_config.json saved
    in it (the same keys beside the training settings; the step's own record: best/ may be another step's model,
    or not written yet). {} for anything else (a pretraining checkpoint's run_config.json names no family)."""
    directory = Path(directory)
    task = json_object_or_empty(directory / "task.json")
    if task or directory.parent.name != CHECKPOINT_DIR:
        return task
    saved = json_object_or_empty(directory / "run_config.json")
    return saved if saved.get("family") else {}


def model_labels(model: nn.Module) -> dict[str, Any]:
    """A sequence or token classifier's `labels`, checked against its head ({} for other classes or none)."""
    labels = getattr(model, "labels", None) if type(model).__name__ in LABELLED else None
    return hf_format.check_labels(labels, f"{type(model).__name__}.labels", model.config.num_labels) if labels else {}


def write_labels(labels: dict[str, Any], stage: Path, directory: Path, class_name: str) -> bool:
    """Write labels.json into `stage` (the new files of a save into `directory`) for a saved classifier: its
    `model_labels` (from `from_pretrained`, or set by the caller), so a transformers classifier's names and problem
    type survive `save_pretrained` -> `from_pretrained` -> `export_hf`. A classifier without them saved where
    `directory`'s fine-tuning record (`recorded_labels`: task.json, a step's run_config.json, another model's) names
    labels gets `NO_LABELS`, which `read_labels` takes over that record: `from_pretrained` gave it the earlier
    model's class names. Returns whether a labels.json was written (else the caller removes an earlier one)."""
    if not labels and (class_name not in LABELLED or not recorded_labels(directory)):
        return False
    text = json.dumps(labels, indent=2, ensure_ascii=False) + "\n" if labels else NO_LABELS
    (stage / LABELS_FILE).write_text(text, encoding="utf-8")
    if not labels:
        log.warning("%s: this model names no labels, so a labels.json says so: the fine-tuning record there (%s) "
                    "names the classes of the model saved there before", directory,
                    ", ".join(name for name in ("task.json", "run_config.json") if (directory / name).is_file())
                    or "the run's task.json")
    return True


# transformers' from_pretrained keywords that albertlm's does not need: it reads local files only, runs no code
# from the directory, and loads one tensor at a time
ACCEPTED_KEYWORDS = ("local_files_only", "trust_remote_code", "low_cpu_mem_usage")
REFUSED_KEYWORDS = {   # transformers' keyword -> what albertlm does instead
    **dict.fromkeys(("revision", "cache_dir", "token", "use_auth_token", "force_download", "proxies", "subfolder",
                     "resume_download", "mirror"),
                    "albertlm reads a local directory and downloads nothing (fetch it first, e.g. `hf download NAME "
                    "--revision REV --local-dir DIR`)"),
    "config": "albertlm reads the directory's config.json: give the fields to change as keywords "
              "(num_labels=3, hidden_dropout=0.1)",
    "ignore_mismatched_sizes": "albertlm freshly initialises head weights of another shape (with a warning), as "
                               "ignore_mismatched_sizes=True does; strict_heads=True refuses them",
    "output_attentions": "albertlm's forwards return no attention probabilities (output_hidden_states=True is a "
                         "forward argument)",
    "output_hidden_states": "give output_hidden_states=True to the forward call",
    "attn_implementation": "albertlm picks its attention kernels itself (docs/model.md)",
    "use_safetensors": "albertlm reads the weights file transformers' from_pretrained reads (model.safetensors "
                       "first), a pickle with weights_only=True",
    **dict.fromkeys(("quantization_config", "load_in_8bit", "load_in_4bit"),
                    "albertlm loads floating weights (dtype=); quantise with torch or `albertlm export onnx "
                    "--quantize int8`"),
    **dict.fromkeys(("max_memory", "offload_folder"),
                    "albertlm loads the whole model onto one device (device_map='cuda:0', or model.to(device))"),
}


def loading_keywords(overrides: dict[str, Any]) -> tuple[torch.device | None, dict[str, Any] | None]:
    """Take transformers' loading keywords out of `overrides` (the rest are config fields): (the device
    `device_map` names, or None; the labels given as id2label / label2id / problem_type, or None). A keyword albertlm
    cannot honour is a ConfigError saying what it does instead."""
    for name in ACCEPTED_KEYWORDS:
        overrides.pop(name, None)
    if overrides.get("ignore_mismatched_sizes") is True:   # what albertlm does anyway
        del overrides["ignore_mismatched_sizes"]
    refused = [name for name in overrides if name in REFUSED_KEYWORDS]
    if refused:
        name = refused[0]
        raise ConfigError(f"from_pretrained({name}=...) is transformers' keyword: {REFUSED_KEYWORDS[name]}")
    device = None
    if "device_map" in overrides:
        where = overrides.pop("device_map")
        if isinstance(where, int) and not isinstance(where, bool):
            where = f"cuda:{where}"
        try:
            device = torch.device(where) if where is not None else None
        except (TypeError, RuntimeError):   # "auto", "balanced", a dict of modules
            raise ConfigError(f"device_map={where!r}: albertlm loads the whole model onto one device; give one "
                              "(device_map='cuda:0', 'cpu'), or call model.to(device)") from None
    given = {name: overrides.pop(name) for name in ("id2label", "label2id", "problem_type") if name in overrides}
    if not given:
        return device, None
    label2id = given.pop("label2id", None)
    if label2id is not None:
        if not isinstance(label2id, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                     for v in label2id.values()):
            raise ConfigError(f"label2id={label2id!r}: give an object mapping names to class indices, "
                              '{"negative": 0, "positive": 1}')
        inverse = {str(v): k for k, v in label2id.items()}
        if given.get("id2label") is None:
            given["id2label"] = inverse
        elif hf_format.check_labels(given, "from_pretrained")["id2label"] != inverse:
            raise ConfigError("id2label and label2id name other classes: give id2label alone (label2id is its inverse)")
    labels = hf_format.check_labels(given, "from_pretrained")
    if "id2label" in labels:   # transformers: num_labels follows id2label
        if overrides.setdefault("num_labels", len(labels["id2label"])) != len(labels["id2label"]):
            raise ConfigError(f"num_labels={overrides['num_labels']} but id2label names {len(labels['id2label'])} "
                              "classes")
    return device, labels


class PretrainedMixin:
    """`save_pretrained(dir)` / `Cls.from_pretrained(dir, **config_overrides)` for our model classes.
    `base_prefix` is where the AlbertModel lives in the class ("" for AlbertModel itself)."""

    base_prefix = "albert."
    config: ModelConfig
    # a sequence or token classifier's {"id2label": {"0": name, ...}, "problem_type": ...}: the checkpoint's, from
    # `from_pretrained`, or set by the caller; `save_pretrained` keeps it in labels.json, `export_hf` in config.json
    labels: dict[str, Any] | None = None

    def save_pretrained(self, directory: str | Path, *, safe_serialization: bool = True, **kwargs: Any) -> Path:
        """model.safetensors + config.json (the ModelConfig), and labels.json for a classifier with `labels`, in
        `directory` (a str or Path, a leading `~` expanded; made if missing), replacing an earlier model's files
        there together (`save_checkpoint`); returns the directory as a Path.
        transformers' keywords: safe_serialization=True (the only format written) is accepted; the others
        (max_shard_size, push_to_hub, ...) are a ConfigError, not a TypeError (`export_hf` writes a transformers
        directory)."""
        if safe_serialization is not True or kwargs:
            name = next(iter(kwargs), "safe_serialization")
            raise ConfigError(f"save_pretrained({name}=...) is transformers' keyword: albertlm's save_pretrained "
                              "writes one model.safetensors + config.json, locally (albertlm.interop.hf.export_hf "
                              "writes a transformers directory)")
        return save_checkpoint(self, self.config, directory)

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """The number of parameters, a shared tensor counted once (transformers' `num_parameters`):
        `only_trainable` those with requires_grad, `exclude_embeddings` without the embedding tables' weights."""
        embeddings = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)} if exclude_embeddings \
            else set()
        return sum(p.numel() for p in self.parameters()
                   if (p.requires_grad or not only_trainable) and id(p) not in embeddings)

    @classmethod
    def from_pretrained(cls, directory: str | Path, *, strict_heads: bool = False,
                        dtype: torch.dtype | str | None = None, torch_dtype: torch.dtype | str | None = None,
                        **overrides: Any):
        """The model of a checkpoint directory (ours or transformers'), in eval mode as transformers' is (call
        `model.train()` to train it; the training loops do). `overrides`: config fields. `dtype` (or its older
        name `torch_dtype`): a torch dtype, or "auto" for the one the weights are stored in; float32 by default.
        `strict_heads`: a head weight the checkpoint holds in another shape than this class of its config is
        a UserError, not freshly initialised (loading the class a checkpoint holds: `load_saved_model`).
        transformers' keywords: `id2label` / `label2id` / `problem_type` set the classifier's `labels` (and
        num_labels), `device_map` one device to load onto, `local_files_only` / `trust_remote_code` /
        `low_cpu_mem_usage` change nothing; the rest are a ConfigError saying what albertlm does instead.
        A sequence or token classifier loaded without a num_labels keyword carries the checkpoint's labels
        (`read_labels`: id2label, problem_type) as `model.labels`, which `save_pretrained` and `export_hf` write.
        The caller's torch random stream is left as it was, unless the checkpoint lacks weights the class has:
        only those are drawn from it (as transformers does), so a seed still fixes a new head. A classifier saved
        from another classifier class (sequence, token, multiple choice: `CLASSIFIER_CLASSES`) gives its backbone
        only: its `classifier` is freshly initialised with a warning, whatever its shape (transformers loads one of
        the same shape). `directory`: a str or Path, a leading `~` expanded; a training run directory is refused
        with the paths of its models (`resolve_checkpoint` picks one)."""
        if dtype is not None and torch_dtype is not None:
            raise UserError("give dtype or torch_dtype (its older name), not both")
        directory = user_path(directory)
        device, given_labels = loading_keywords(overrides)
        config, is_hf = read_config(directory)
        dtype = loading_dtype(dtype if dtype is not None else torch_dtype, directory)
        state = read_state(directory)
        with torch.random.fork_rng(devices=_initialised_cuda_devices()):   # every weight is about to be replaced
            model = cls(config.replace(**overrides) if overrides else config)
        try:  # a mismatch names the checkpoint: the caller may be loading several
            if is_hf:  # transformers' layer-per-group keys follow the config and plan the model was built with
                plan = model.get_submodule(cls.base_prefix + "encoder").plan
                state = hf_format.state_from_hf(state, model.config, plan)  # overrides included (the E->H projection)
            else:
                state = to_full_state(state)
            fresh = load_state_into(model, state, cls.base_prefix, strict_heads, source=directory)
        except UserError as exc:
            raise UserError(f"{directory}: {exc}") from None
        fresh += other_class_head(model, directory, is_hf, fresh)
        if cls.__name__ in LABELLED:   # (read_labels names the file of a bad entry)
            labels = _checkpoint_labels(directory, model.config.num_labels, "num_labels" in overrides)
            if given_labels is not None:   # problem_type= alone keeps the checkpoint's names, as transformers
                labels = hf_format.check_labels({**labels, **given_labels}, "from_pretrained", model.config.num_labels)
            model.labels = labels
        init_fresh(model, fresh)
        model = model.to(dtype) if dtype is not None else model
        if device is not None:
            try:
                model = model.to(device)
            except (RuntimeError, AssertionError) as exc:   # "Torch not compiled with CUDA enabled", no such device
                raise UserError(f"device_map={str(device)!r}: {_first_line(exc)}") from None
        return model.eval()


# The classes whose head is one `classifier` Linear, each reading other features: the pooled [CLS] output (a class per
# row), every token's state, each choice's pooled output (one row scoring it). A checkpoint of one loaded as another
# took its classifier whenever the shapes matched (2 labels as 2 token labels, a 1-output regression as a choice
# scorer): without a word, and unlike a head of another shape, which is freshly initialised.
CLASSIFIER_CLASSES = ("AlbertForSequenceClassification", "AlbertForTokenClassification", "AlbertForMultipleChoice")


def checkpoint_class(directory: Path, is_hf: bool) -> str | None:
    """The class a checkpoint directory was saved from, where it says so: the albertlm class in its safetensors
    metadata, a transformers config's first `architectures`; None where it does not (an older save, a pickle)."""
    if is_hf:
        names = json_object_or_empty(directory / CONFIG).get("architectures")
        name = names[0] if isinstance(names, list) and names else names
        return name if isinstance(name, str) else None
    if not (directory / WEIGHTS).is_file():
        return None
    return read_metadata(directory / WEIGHTS).get("albertlm_class")


def other_class_head(model: nn.Module, directory: Path, is_hf: bool, fresh: list[str]) -> list[str]:
    """The `classifier` weights `model` took from a checkpoint of another classifier class (`CLASSIFIER_CLASSES`),
    which read other features than this class's: they are to be freshly initialised as a head of another shape is
    (one warning naming both classes). [] for anything else."""
    own = type(model).__name__
    if own not in CLASSIFIER_CLASSES:
        return []
    taken = [name for name, _ in model.named_parameters() if name.startswith("classifier.") and name not in fresh]
    saved = checkpoint_class(directory, is_hf) if taken else None
    if saved is None or saved == own or saved not in CLASSIFIER_CLASSES:
        return []
    log.warning("%s: its classifier was trained as %s's, on other features than %s's: freshly initialised (random "
                "until trained), as a head of another shape is", directory, saved, own,
                extra={RESHAPED_WEIGHTS: tuple(taken)})
    return taken


def _initialised_cuda_devices() -> list[int]:
    """The CUDA devices whose random streams a model built now could draw from (torch.set_default_device('cuda')):
    those of an initialised CUDA context (none otherwise, and no context is created to find out)."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []


def _checkpoint_labels(directory: str | Path, num_labels: int, sized_by_caller: bool) -> dict[str, Any]:
    """The labels a classifier loaded from `directory` carries: the checkpoint's (`read_labels`), unless the caller
    sized the head (a num_labels keyword: a head for another task, whose names the checkpoint does not know, such as
    fine-tuning's, which may put the rows in its task's order); names of another number of classes are dropped."""
    if sized_by_caller:
        return {}
    labels = read_labels(directory)
    if len(labels.get("id2label") or {}) not in (0, num_labels):
        labels = {k: v for k, v in labels.items() if k != "id2label"}
    return labels


def init_fresh(model: nn.Module, names: list[str]) -> None:
    """Initialise the weights `names` a checkpoint did not give as the model's constructor does (`init_weights`),
    drawing from the caller's random stream in the model's parameter order: a Linear or Embedding weight normal(0,
    std), biases zero, LayerNorm weights one; any other tensor keeps its constructed value."""
    wanted = set(names)
    std = model.config.initializer_range
    with torch.no_grad():
        for module_name, module in model.named_modules():
            for name, param in module.named_parameters(recurse=False):
                if f"{module_name}.{name}".lstrip(".") not in wanted:
                    continue
                if name == "weight" and isinstance(module, (nn.Linear, nn.Embedding)):
                    param.normal_(mean=0.0, std=std)
                elif name == "weight" and isinstance(module, nn.LayerNorm):
                    param.fill_(1.0)
                elif name == "bias" and isinstance(module, (nn.Linear, nn.LayerNorm)):
                    param.zero_()


# ------------------------------------------------------------------------------------ finding checkpoints
# A training run keeps its checkpoints in RUN_DIR/checkpoints/step_00001000/ (see training/checkpoint.py).
CHECKPOINT_DIR = "checkpoints"
STEP_RE = re.compile(r"^step_(\d+)$")


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (half-written `.tmp-*` directories are ignored)."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_RE.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def resolve_checkpoint(path: str | Path, best: bool = False) -> Path:
    """A model directory (ours or transformers': it has config.json) is itself; a training run directory
    (pretraining or fine-tuning) means its newest checkpoint, or with `best` a fine-tuning run's best model
    (`best/`, what predict and the inference commands read). A path that is none of them is a UserError saying
    what it is (a file, nothing: albertlm downloads nothing, a TF checkpoint to convert). A leading `~` is the
    home directory."""
    path = user_path(path)
    if (path / CONFIG).is_file() or (path.is_dir() and recover_killed_saves(path) and (path / CONFIG).is_file()):
        return path
    if path.is_file():
        raise UserError(f"{path}: a file, not a model directory (give the directory holding {CONFIG} and the "
                        "weights, or a run directory)")
    if not path.is_dir():
        raise UserError(f"{path}: no such model directory ({DOWNLOADS_NOTHING})")
    if best and (path / "best" / CONFIG).is_file():     # a fine-tuning run (it also has checkpoints/)
        return path / "best"
    latest = latest_checkpoint(path)
    if latest is None:
        hint = (" (a google-research TF checkpoint: convert it once with `albertlm convert DIR OUT`)"
                if _tf_checkpoint_here(path) else "")
        raise UserError(f"{path}: not a model directory (no {CONFIG}) nor a training run with checkpoints{hint}")
    return latest
