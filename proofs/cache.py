"""Obligation results kept across runs (`loopcheck prove --cache DIR`), each keyed
by a content hash of what it depends on, so that a run where nothing changed
answers from the cache and an edit to one rule recomputes exactly the
obligations that read it.

An obligation's dependencies are found statically from its thunk: every
function, class and constant of loopcheck.model and loopcheck.proofs that its
code names, and what those name, transitively (`dependencies`: the names a code
object uses, resolved in its module and in the modules it names; a class brings
every method). The key hashes their source (a constant: its value), the
obligation's label and plan, the z3 version and the Python version. An
over-approximation where names repeat across modules (a name is resolved in
every own module the code names), so an edit never goes unseen; editing a
function nobody names recomputes nothing.

An entry is one JSON file (`loopcheck/proof-cache@1`); one that cannot be read
(truncated, damaged, another schema) is ignored with one warning line and
recomputed. An `unknown` result is never stored, and never reused if found.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import z3

from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, workload_from_json
from loopcheck.proofs.result import UNKNOWN, ProofResult

SCHEMA = "loopcheck/proof-cache@1"
OWN = ("loopcheck.model", "loopcheck.proofs")   # the packages whose code an obligation's result depends on
CONSTANTS = (int, float, str, bool, tuple, list, dict, frozenset, type(None))


def default_dir() -> Path:
    """The user's cache folder for proofs: $XDG_CACHE_HOME/loopcheck/proofs
    (default ~/.cache/loopcheck/proofs)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loopcheck" / "proofs"


def _in_own(module: str) -> bool:
    """Whether the module of this name is one of OWN or inside one."""
    return any(module == p or module.startswith(p + ".") for p in OWN)


def _own(obj: object) -> bool:
    return _in_own(obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None) or "")


def _unwrapped(value: object) -> object:
    """A class member as the function it runs: a staticmethod's or classmethod's
    function, a property's getter; anything else as it is."""
    value = getattr(value, "__func__", value)
    return value.fget if isinstance(value, property) else value


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """A code object and those nested in it (lambdas, comprehensions, inner functions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def source_of(obj: object) -> str:
    """The text a dependency is hashed by: a function's or class's source (a
    function without one, such as a dataclass's generated `__init__`: its
    bytecode and constants), a constant's value (`stable`)."""
    if isinstance(obj, type):   # (by its members as they are now: a method replaced at run time changes the key)
        members = []
        for name, value in vars(obj).items():
            if name.startswith("__") and name != "__init__":
                continue
            value = _unwrapped(value)
            members.append(f"{name} = {source_of(value) if isinstance(value, types.FunctionType) else stable(value)}")
        return f"class {obj.__qualname__}{tuple(b.__qualname__ for b in obj.__bases__)}:\n" + "\n".join(members)
    if isinstance(obj, types.FunctionType):
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            code = obj.__code__
            return f"{obj.__qualname__}:{code.co_code.hex()}:{stable(code.co_consts)}"
    return stable(obj)


def stable(value: object) -> str:
    """A repr that is the same in every process: sets sorted (string hashes
    differ between processes), code objects by their bytecode."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(map(stable, value))) + "}"
    if isinstance(value, (tuple, list)):
        return type(value).__name__ + "(" + ", ".join(map(stable, value)) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stable(k)}: {stable(v)}" for k, v in value.items()) + "}"
    if isinstance(value, types.CodeType):
        return f"code:{value.co_code.hex()}"
    if isinstance(value, (types.FunctionType, type)):   # (by name: its source is a dependency of its own)
        return f"{value.__module__}.{value.__qualname__}"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))   # (an object's address differs in every process)


def _members(value: object) -> Iterator[object]:
    """What a constant holds, nested containers opened."""
    items = value.items() if isinstance(value, dict) else value if isinstance(value, (tuple, list, frozenset)) else ()
    for item in items:
        yield item
        yield from _members(item)


def _functions_of(obj: object) -> list[types.FunctionType]:
    """The functions whose code `obj` runs: itself, or a class's methods."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    return [value for value in map(_unwrapped, vars(obj).values()) if isinstance(value, types.FunctionType)]


def dependencies(fn: Callable[..., Any]) -> dict[str, str]:
    """What `fn` depends on in loopcheck.model and loopcheck.proofs, by qualified
    name: the source of each function and class, the value of each module-level
    constant (see the module's doc)."""
    found: dict[str, str] = {}
    todo: list[object] = [fn]

    def reach(target: object) -> None:
        if isinstance(target, (types.FunctionType, type)) and _own(target):
            text = source_of(target)
            key = f"{target.__module__}.{target.__qualname__}"
            if "<locals>" in key:   # (lambdas and inner functions share names: told apart by their text)
                key += ":" + hashlib.sha256(text.encode()).hexdigest()[:12]
            if key not in found:
                found[key] = text
                todo.append(target)

    while todo:
        obj = todo.pop()
        for function in _functions_of(obj):
            for cell in function.__closure__ or ():
                try:
                    reach(cell.cell_contents)
                except ValueError:   # (an empty cell)
                    continue
            names = {name for code in _codes(function.__code__) for name in code.co_names}
            scopes = [function.__globals__]
            scopes += [vars(v) for v in function.__globals__.values() if isinstance(v, types.ModuleType) and _own(v)
                       and v.__name__.split(".")[-1] in names]
            for name in sorted(names):
                for scope in scopes:
                    if name not in scope:
                        continue
                    target = scope[name]
                    if isinstance(target, CONSTANTS) and _in_own(scope.get("__name__", "")):
                        found.setdefault(f"{scope['__name__']}.{name}", stable(target))
                        for member in _members(target):   # (a table of functions: each is a dependency)
                            reach(member)
                    else:
                        reach(target)
    return found


def obligation_key(label: str, plan: object, thunk: Callable[..., Any]) -> str:
    """The cache key of one obligation: what it is, on what, and everything its
    result depends on (`dependencies`)."""
    text = json.dumps({"label": label, "plan": repr(plan), "z3": z3.get_version_string(),
                       "python": list(sys.version_info[:2]), "depends": sorted(dependencies(thunk).items())},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class ProofCache:
    """A folder of obligation results (None: no cache: nothing kept or read)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{key}.json"

    def get(self, key: str) -> tuple[ProofResult, Workload | None] | None:
        """The kept result of this key, marked cached; None if there is none, it
        cannot be read (one warning line on stderr) or it is `unknown`."""
        if self.folder is None or not self._path(key).exists():
            return None
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                raise ValueError(f"not a {SCHEMA} entry")
            r = data["result"]
            result = ProofResult(r["name"], r["policy"], r["status"], float(r["seconds"]), r["expected"],
                                 r["detail"], cached=True)
            workload = None if data["workload"] is None else workload_from_json(data["workload"])
        except (OSError, ValueError, KeyError, TypeError, WorkloadError) as exc:
            print(f"loopcheck: warning: proof cache entry {self._path(key)} cannot be read ({type(exc).__name__}: "
                  f"{exc}); computing it again", file=sys.stderr)
            return None
        return None if result.status == UNKNOWN else (result, workload)

    def put(self, key: str, result: ProofResult, workload: Workload | None) -> None:
        """Keep a result (never an `unknown` one), written whole or not at all; a
        folder that cannot be written is said once (a warning line) and nothing
        more is kept in this run."""
        if self.folder is None or result.status == UNKNOWN:
            return
        data = {"schema": SCHEMA, "result": {**result.to_json(), "seconds": result.seconds},
                "workload": None if workload is None else workload.to_json()}
        partial = self._path(key).with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(data, sort_keys=True))
            partial.replace(self._path(key))
        except OSError as exc:
            print(f"loopcheck: warning: the proof cache {self.folder} cannot be written ({exc.strerror or exc}); "
                  "keeping no results this run", file=sys.stderr)
            self.folder = None
