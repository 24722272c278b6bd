"""A seed's examples do not depend on what the process imported before."""

from __future__ import annotations

import importlib
import sys
from functools import partial
from pathlib import Path

import pytest
from hypothesis.internal.conjecture import providers

from loopcheck.checks.base import Violation
from loopcheck.fuzz.directed import draw_workloads
from loopcheck.fuzz.pytest_plugin import run_machine
from loopcheck.fuzz.strategies import configs, workloads
from tests.toy_scheduler import ToyScheduler


def _import_module_full_of_constants(folder: Path) -> None:
    """A local module (outside site-packages and the standard library) whose source
    holds many small integers, as an adapter or a user's helper would."""
    folder.mkdir()
    numbers = ", ".join(str(n) for n in range(2, 400, 3))
    (folder / "helper_with_constants.py").write_text(f"SIZES = ({numbers})\n")
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module("helper_with_constants")
    finally:
        sys.path.remove(str(folder))


def _first_finding(out: Path) -> str:
    with pytest.raises(Violation) as caught:
        run_machine(partial(ToyScheduler, bugs=frozenset({"page-key"}), block_tables=False), max_examples=1000,
                    shrink=False, out_dir=out)
    return str(caught.value)


def test_a_seed_finds_the_same_first_bug_after_a_new_local_module_is_imported(tmp_path: Path) -> None:
    """Measured without `no_local_constants`: the first finding changed from
    prefix-hits at step 3 to kv-coverage at step 16 once the module was imported."""
    before = _first_finding(tmp_path / "before")
    _import_module_full_of_constants(tmp_path / "user_code")
    assert _first_finding(tmp_path / "after") == before


def test_hypothesis_keeps_its_local_constants_outside_loopcheck_runs() -> None:
    scan = providers._get_local_constants
    draw_workloads(workloads(configs(), max_requests=2), seed=1, count=3)
    assert providers._get_local_constants is scan
