"""The workload files loopcheck ships with (the repository's examples/, installed as
the package data of `loopcheck.examples`), found wherever loopcheck is installed."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def shipped_example(name: str) -> Path:
    """Path of the shipped workload file `name` (e.g. "livelock.json"), in the
    source tree of an editable install or in site-packages of a regular one."""
    return Path(str(files("loopcheck.examples").joinpath(name)))
