"""A pytest plugin: the `loopcheck_machine` fixture runs the stateful fuzzer
against any system behind the SUT protocol (sut/protocol.py).

    def test_my_scheduler(loopcheck_machine):
        loopcheck_machine(MySchedulerAdapter, max_examples=50)

Registered through the `pytest11` entry point, so installing loopcheck makes the
fixture available to a user's own suite. On a failure it writes the shrunk
counterexample file and names the command that replays it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from loopcheck.adapters.loader import capabilities_of
from loopcheck.checks.base import Violation
from loopcheck.checks.counterexample import counterexample_path
from loopcheck.checks.suite import CheckSet, default_mode
from loopcheck.fuzz.hypothesis_constants import no_local_constants
from loopcheck.fuzz.machine import LAST_FAILURE, Stats, machine_class
from loopcheck.fuzz.settings import MachineSettings
from loopcheck.fuzz.strategies import DEFAULT_SHAPE, configs, request_sizes
from loopcheck.model.config import Config
from loopcheck.sut.protocol import SutFactory


def factory_name(factory: SutFactory) -> str:
    """How `--adapter` names this factory: MODULE:NAME where that names this very
    object, else a placeholder for the user to fill in."""
    import sys

    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    if module and name and getattr(sys.modules.get(module), name, None) is factory:
        return f"{module}:{name}"
    return "MODULE:FACTORY"


def run_machine(factory: SutFactory, config_strategy: st.SearchStrategy[Config] | None = None,
                max_examples: int = 50, steps: int = 20, derandomize: bool = True, shrink: bool = True,
                mode: str | None = None, out_dir: Path | str = "loopcheck-failures",
                ignore: frozenset[str] = frozenset(), **kw: Any) -> Stats:
    """Run the stateful fuzzer on a system; raise the first violated property (a
    checks.base.Violation) after writing it to OUT_DIR/counterexample-PROP.json.
    mode: "lockstep" (the system implements loopcheck's semantics) or "property";
    default: lockstep exactly when the system declares those semantics. Configs are
    drawn with the system's pinned fields, requests sized to its pinned page
    (`request_sizes`; `kw` may set the sizes). shrink=False skips Hypothesis' shrinking.
    `ignore`: properties whose violations are not raised (`checks.suite.CheckSet`).
    Returns coverage."""
    caps = capabilities_of(factory)
    mode = mode or default_mode(caps.semantics)
    stats = Stats()
    out = Path(out_dir)
    strategy = config_strategy if config_strategy is not None else configs(caps.features, **caps.pinned)
    checks = CheckSet(mode, frozenset(ignore))
    sizes = {**request_sizes(caps.pinned.get("block_size")), **kw}   # (scaled to a pinned page)
    machine = machine_class(strategy, MachineSettings(factory, checks, out, f"pytest loopcheck_machine ({mode})",
                                                      DEFAULT_SHAPE.for_system(caps), **sizes), stats)
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    try:
        with no_local_constants():
            run_state_machine_as_test(machine, settings=settings(
                max_examples=max_examples, stateful_step_count=steps, deadline=None, derandomize=derandomize,
                database=None, suppress_health_check=list(HealthCheck), phases=phases, report_multiple_bugs=False))
    except Violation as v:
        path = counterexample_path(out, v.prop)
        (out / LAST_FAILURE).replace(path)   # the last failing example Hypothesis ran: its shrunk one
        print(f"\nloopcheck: {v}\n  counterexample: {path}\n"
              f"  replay: loopcheck replay {path} --adapter {factory_name(factory)} {checks}")
        raise
    return stats


@pytest.fixture
def loopcheck_machine() -> Callable[..., Stats]:
    """A function: loopcheck_machine(factory, config_strategy=None, max_examples=50, ...)."""
    return run_machine
