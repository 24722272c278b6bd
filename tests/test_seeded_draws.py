"""A seed's examples do not depend on what the process imported before."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from hypothesis.internal.conjecture import providers

from loopcheck.fuzz.directed import draw_workloads
from loopcheck.fuzz.pytest_plugin import run_machine
from loopcheck.fuzz.strategies import configs, workloads
from tests.toy_scheduler import ToyScheduler


@pytest.fixture
def module_full_of_constants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """A function importing a local module (outside site-packages and the
    standard library) whose source holds many small integers, as an adapter or a
    user's helper would. Afterwards the module is gone and Hypothesis' pool of
    local constants is as before, so that later tests' own draws do not see it."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    numbers = ", ".join(str(n) for n in range(2, 400, 3))
    (folder / "helper_with_constants.py").write_text(f"SIZES = ({numbers})\n")
    monkeypatch.setattr(providers, "_local_constants", providers._local_constants)
    monkeypatch.setattr(providers, "_sys_modules_len", providers._sys_modules_len)
    monkeypatch.syspath_prepend(str(folder))
    yield lambda: importlib.import_module("helper_with_constants") and None
    sys.modules.pop("helper_with_constants", None)
    providers.CONSTANTS_CACHE.cache.clear()


def _what_ran(out: Path) -> tuple:
    """What 300 examples on the clean toy ran: examples, steps, rules and branches
    (any example drawn otherwise shows in them)."""
    stats = run_machine(partial(ToyScheduler, bugs=frozenset()), max_examples=300, shrink=False, out_dir=out)
    return stats.examples, stats.steps, sorted(stats.rules.items()), sorted(stats.branches.items())


def test_a_seed_runs_the_same_examples_after_a_new_local_module_is_imported(
        tmp_path: Path, module_full_of_constants: Callable[[], None]) -> None:
    """Measured without `no_local_constants`: 455 examples and 6,042 steps before
    the import, 472 and 5,615 after."""
    before = _what_ran(tmp_path / "before")
    module_full_of_constants()
    assert _what_ran(tmp_path / "after") == before


def test_hypothesis_keeps_its_local_constants_outside_loopcheck_runs() -> None:
    scan = providers._get_local_constants
    draw_workloads(workloads(configs(), max_requests=2), seed=1, count=3)
    assert providers._get_local_constants is scan
