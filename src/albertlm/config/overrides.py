"""Dotted `a.b=c` overrides on nested config dataclasses: generated from the fields, never listed by hand.

Order of precedence (lowest first): dataclass defaults < preset < `--config FILE` (JSON) < CLI overrides.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from pathlib import Path
from typing import Any

from albertlm.errors import UserError


def _field_types(obj: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(type(obj))
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(obj)}


def coerce(text: Any, kind: Any, name: str) -> Any:
    """Turn a command-line string into a value of the field's declared type."""
    if not isinstance(text, str):
        return text
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin is typing.Union or (origin is not None and type(None) in args):
        if text.lower() in ("none", "null"):
            return None
        kind = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(kind), typing.get_args(kind)
    try:
        if kind is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if origin is typing.Literal:
            if text not in args:
                raise ValueError(text)
            return text
        if origin in (list, tuple):
            items = [s for s in text.split(",") if s]
            inner = args[0] if args else str
            return origin(coerce(s, inner, name) for s in items)
    except ValueError:
        raise UserError(f"{name}: cannot read {text!r} as {getattr(kind, '__name__', kind)}") from None
    return text


def set_path(root: Any, dotted: str, value: Any) -> None:
    """Set `root.a.b = value`, coercing strings to the field type; unknown names suggest the nearest."""
    obj, parts = root, dotted.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(obj):
            raise UserError(f"{'.'.join(parts[:i])} is not a config section")
        types = _field_types(obj)
        key = part.replace("-", "_")
        if key not in types:
            close = difflib.get_close_matches(key, types, n=1)
            hint = f" (did you mean {'.'.join(parts[:i] + close)}?)" if close else ""
            raise UserError(f"unknown config key {dotted!r}{hint}")
        if i == len(parts) - 1:
            setattr(obj, key, coerce(value, types[key], dotted))
        else:
            obj = getattr(obj, key)


def apply_overrides(root: Any, overrides: list[str]) -> Any:
    """Apply `a.b=c` strings (a leading `--` is allowed) in order, then re-validate every section."""
    for item in overrides:
        item = item[2:] if item.startswith("--") else item
        if "=" not in item:
            raise UserError(f"override {item!r} must look like key=value")
        key, value = item.split("=", 1)
        set_path(root, key, value)
    revalidate(root)
    return root


def apply_dict(root: Any, data: dict[str, Any], prefix: str = "") -> Any:
    """Apply a nested dict (as read from a JSON config file) onto the dataclass tree."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            apply_dict(root, value, dotted + ".")
        else:
            set_path(root, dotted, value)
    return root


def load_config_file(root: Any, path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    apply_dict(root, data)
    revalidate(root)
    return root


def revalidate(root: Any) -> None:
    """Run `validate()` on every dataclass in the tree that has one."""
    if not dataclasses.is_dataclass(root):
        return
    if hasattr(root, "validate"):
        root.validate()
    for f in dataclasses.fields(root):
        revalidate(getattr(root, f.name))


def to_dict(root: Any) -> dict[str, Any]:
    return dataclasses.asdict(root)
