"""Canonical forms of what a run remembers, and their stable digests: equal
values give equal digests in every process and on every machine (sets and dicts
are ordered by their members' canonical forms, objects are read field by field,
never by address), so that explorations split over processes agree on states."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Hashable
from enum import Enum
from typing import Any


def canonical(value: Any) -> Hashable:
    """`value` as nested tuples of plain values: lists and tuples as tuples, sets
    and dicts sorted, dataclasses and other objects by their fields (an object
    with a `memory()` method by what it returns)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted((canonical(v) for v in value), key=repr)))
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((canonical(k), canonical(v)) for k, v in value.items()), key=repr)))
    memory = getattr(value, "memory", None)
    if callable(memory):
        return canonical(memory())
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, tuple(canonical(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if hasattr(value, "__dict__"):
        return (type(value).__name__, canonical(vars(value)))
    return repr(value)


def digest(value: Any) -> str:
    """A stable 128-bit digest (hex) of `value`'s canonical form."""
    return hashlib.blake2b(repr(canonical(value)).encode(), digest_size=16).hexdigest()
