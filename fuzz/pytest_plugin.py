"""A pytest plugin: the `loopcheck_machine` fixture runs the lockstep state
machine against any engine behind the adapter protocol (fuzz/adapter.py).

    def test_my_engine(loopcheck_machine):
        loopcheck_machine(MyAdapter, max_examples=50)

Registered through the `pytest11` entry point, so installing loopcheck makes the
fixture available to a user's own suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from fuzz.machine import Stats, machine_class
from fuzz.session import AdapterFactory
from fuzz.strategies import configs
from model.config import Config


def run_machine(adapter: AdapterFactory, config_strategy: st.SearchStrategy[Config] | None = None,
                max_examples: int = 50, steps: int = 20, derandomize: bool = True, shrink: bool = True,
                **kw: Any) -> Stats:
    """Run the lockstep machine; raise the first violated property (a
    fuzz.session.Violation). Returns coverage. shrink=False skips Hypothesis'
    shrinking (faster; the failing program is then not minimal)."""
    stats = Stats()
    machine = machine_class(config_strategy if config_strategy is not None else configs(), adapter, stats=stats,
                            **kw)
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(machine, settings=settings(
        max_examples=max_examples, stateful_step_count=steps, deadline=None, derandomize=derandomize,
        database=None, suppress_health_check=list(HealthCheck), phases=phases, report_multiple_bugs=False))
    return stats


@pytest.fixture
def loopcheck_machine() -> Callable[..., Stats]:
    """A function: loopcheck_machine(adapter_factory, config_strategy=None, max_examples=50, ...)."""
    return run_machine
