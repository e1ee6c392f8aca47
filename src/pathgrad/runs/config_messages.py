"""One-line messages for config errors: the key path, what is wrong, what was expected.

From pydantic's validation errors, with "did you mean" for an unknown key (a
key of a section below is named by its whole path).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["did_you_mean", "known_keys", "section_model", "validation_message"]


def known_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """Keys accepted at ``loc`` (the location of an unknown key) in ``model``.

    Keys of the sections one level below count too (``optimizer.learning_rate``
    for a ``learning_rate`` given beside it).
    """
    for part in loc[:-1]:
        model = section_model(model, str(part))
        if model is None:
            return []
    keys = list(model.model_fields)
    for name in list(keys):
        nested = section_model(model, name)
        if nested is not None:
            keys += [f"{name}.{key}" for key in nested.model_fields]
    return keys


def section_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model of field ``name`` when it is a section (optional sections too)."""
    field = model.model_fields.get(name)
    annotation = field.annotation if field is not None else None
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def did_you_mean(key: str, candidates: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate (a nested one by its last part)."""
    nested = [name for name in candidates if name.rsplit(".", 1)[-1] == key and "." in name]
    if nested:
        return f" (did you mean '{nested[0]}'?)"
    flat = [name for name in candidates if "." not in name]
    matches = difflib.get_close_matches(key, flat, n=1, cutoff=0.6)
    return f" (did you mean '{matches[0]}'?)" if matches else ""


def validation_message(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """One line for the first problem: key path, what is wrong, what is expected."""
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    path = ".".join([prefix, *loc] if prefix else loc)
    if first["type"] == "extra_forbidden":
        hint = did_you_mean(loc[-1], known_keys(model, loc))
        if "." in hint:  # a key of a section below: named by its whole path
            above = ".".join(part for part in (prefix, *loc[:-1]) if part)
            hint = hint.replace(" '", f" '{above}." if above else " '", 1)
        return f"{path}: unknown key{hint}"
    if first["type"] == "value_error":
        message = str(first["msg"]).removeprefix("Value error, ")
        return f"{path}: {message}" if path else message
    return f"{path}: {first['msg'].lower()} (got {first['input']!r})"
