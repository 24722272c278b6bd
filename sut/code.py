"""The system's own code: where its files are (from the modules its
capabilities name), and how a line of code is named in a bug's signature."""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path

STDLIB = tuple(str(Path(sysconfig.get_paths()[k])) for k in ("stdlib", "platstdlib"))


def site(filename: str, line: int | None) -> str:
    """FILE:LINE, the file named from its package down (past site-packages, or
    its folder and name): the same on every machine with the same install."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return f"{'/'.join(parts[len(parts) - parts[::-1].index(marker):])}:{line}"
    return f"{'/'.join(parts[-2:])}:{line}"


def code_paths(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The folders (packages) and files (modules) of the named modules, as
    absolute paths; a module that cannot be found is left out (importing a
    parent package to look may run its code, as importing the system does)."""
    paths: list[str] = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            paths += [str(Path(p).resolve()) + "/" for p in spec.submodule_search_locations]
        elif spec.origin:
            paths.append(str(Path(spec.origin).resolve()))
    return tuple(paths)


def innermost(frames: list[tuple[str, int | None]], own: tuple[str, ...]) -> tuple[str, int | None] | None:
    """Of (file, line) frames, outermost first, the innermost in the system's own
    code (files under the paths `own`), else the innermost outside the standard
    library, else the innermost; None for no frames."""
    def resolved(filename: str) -> str:
        return str(Path(filename).resolve()) if not filename.startswith("<") else filename

    for wanted in (lambda f: resolved(f).startswith(own) if own else False,
                   lambda f: not f.startswith(STDLIB) and not f.startswith("<"),
                   lambda f: True):
        chosen = [fr for fr in frames if wanted(fr[0])]
        if chosen:
            return chosen[-1]
    return None
