"""The system's own code: where its files are (from the modules its
capabilities name), and how a place in it is named in a message (a line) and
in a bug's signature (a function)."""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
import sysconfig
from pathlib import Path

STDLIB = tuple(str(Path(sysconfig.get_paths()[k])) for k in ("stdlib", "platstdlib"))


def file_name(filename: str) -> str:
    """The file named from its package down (past site-packages, or its folder
    and name): the same on every machine with the same install."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    return "/".join(parts[-2:])


def site(filename: str, line: int | None) -> str:
    """FILE:LINE (`file_name`), for messages: a line moves when the file changes."""
    return f"{file_name(filename)}:{line}"


def place(filename: str, function: str) -> str:
    """FILE:FUNCTION (`file_name`, the function's qualified name), for signatures:
    it stays while lines move."""
    return f"{file_name(filename)}:{function}"


def code_paths(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The folders (packages) and files (modules) of the named modules, as
    absolute paths; a module that cannot be found is left out (importing a
    parent package to look may run its code, as importing the system does). A
    module already loaded without a spec is found by its __path__ or __file__."""
    paths: list[str] = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
            folders, origin = (spec.submodule_search_locations, spec.origin) if spec else (None, None)
        except ValueError:   # loaded without a spec, as a stub package of an engine run from its source tree
            module = sys.modules[name]
            folders, origin = getattr(module, "__path__", None), getattr(module, "__file__", None)
        except ImportError:
            continue
        if folders:
            paths += [str(Path(p).resolve()) + "/" for p in folders]
        elif origin:
            paths.append(str(Path(origin).resolve()))
    return tuple(paths)


Frame = tuple[str, int | None, str]   # (file, line, function's qualified name)


def innermost(frames: list[Frame], own: tuple[str, ...]) -> Frame | None:
    """Of frames, outermost first, the innermost in the system's own
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


@functools.cache
def functions(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of each function in the Python
    file, an enclosing function before those inside it; none if it does not parse."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.append((first, child.end_lineno or child.lineno, name))
                    name += ".<locals>"
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(found)


def function_at(path: str, line: int) -> str | None:
    """The qualified name (as `co_qualname` gives it) of the innermost function
    of the file holding `line`; None outside any."""
    inside = [name for first, last, name in functions(path) if first <= line <= last]
    return inside[-1] if inside else None
