"""A deterministic clock for an engine's scheduling modules: engines order
waiting requests by arrival time and evict cached blocks by access time, which
real time would make differ from run to run."""

from __future__ import annotations

import importlib
import time
from typing import Any


class StepClock:
    """`time` as the modules it is installed in see it, with a `perf_counter`
    and a `monotonic` that advance one millisecond per call; everything else is
    the real `time`."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-3
        return self.now

    monotonic = perf_counter

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def install_step_clock(module_names: tuple[str, ...]) -> None:
    """Replace `time` in each named module (imported if need be) by a StepClock,
    once per process."""
    for name in module_names:
        module = importlib.import_module(name)
        if not isinstance(module.time, StepClock):
            module.time = StepClock()
