"""Another version of loopcheck run beside this one: a commit checked out in a
temporary git worktree, and its command line run from there in a fresh
process, its packages imported from that checkout under their installed names
(whatever version is installed), as its own pyproject.toml maps them."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# code that makes a fresh process started in a checkout import loopcheck from that checkout: each package its
# pyproject.toml maps, from the folder it maps it to (what an installed loopcheck is, left aside)
FROM_CHECKOUT = """
import importlib.util, pathlib, sys, tomllib
root = pathlib.Path.cwd()
mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

class Checkout:   # first on the meta path: the packages from the checkout, their modules through their __path__
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in mapping:
            return None
        folder = root / mapping[name]
        return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])

sys.meta_path.insert(0, Checkout)
"""
RUN_CLI = FROM_CHECKOUT + """
from loopcheck.cli import main
sys.exit(main(sys.argv[1:]))
"""

@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """Commit `rev` of this repository checked out in a temporary worktree,
    removed after."""
    with tempfile.TemporaryDirectory(prefix="loopcheck-base-") as tmp:
        path = Path(tmp) / "checkout"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--quiet", "--detach", str(path), rev], check=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)


def cli_command(args: list[str]) -> list[str]:
    """The command that, run in a checkout (its working folder), runs
    `loopcheck ARGS` as that checkout's code."""
    return [sys.executable, "-c", RUN_CLI, *args]


def changed() -> bool:
    """Whether this checkout has changes not committed."""
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True, check=True).stdout
    return bool(out.strip())
