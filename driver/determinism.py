"""Determinism checked, not assumed: a workload run several times, and the
first step at which the runs differ.

A system is deterministic when the same workload gives the same events, step
by step, the same outputs and the same finding, run after run in one process.
Usual causes when it is not: iteration over sets or over dicts keyed by object
identity (addresses differ from run to run), clocks, random numbers drawn
without a fixed seed, and singletons that outlive a run (a counter, a cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loopcheck.checks.base import Check
from loopcheck.driver.driver import OnStep, Run, run_workload
from loopcheck.model.workload import Workload
from loopcheck.runctl.stop import Deadline
from loopcheck.sut.protocol import SutFactory


def first_difference(a: Run, b: Run) -> int | None:
    """The first step whose events differ between two runs of one workload; if
    none does, the step after the last when their outputs or findings differ;
    None when the runs agree."""
    for t in range(max(len(a.driver.trace), len(b.driver.trace))):
        ours = a.driver.trace[t] if t < len(a.driver.trace) else None
        theirs = b.driver.trace[t] if t < len(b.driver.trace) else None
        if ours != theirs:
            return t
    outputs = [{rid: o.to_json() for rid, o in run.observation.outputs.items()} for run in (a, b)]
    findings = [(run.violation.signature, run.violation.step) if run.violation else None for run in (a, b)]
    return None if outputs[0] == outputs[1] and findings[0] == findings[1] else len(a.driver.trace)


def runs_differ(workload: Workload, factory: SutFactory, checks: Callable[[], Sequence[Check]] = list,
                runs: int = 2, max_steps: int | None = None, on_step: OnStep | None = None,
                deadline: Deadline | None = None) -> tuple[Run, int | None]:
    """The first of `runs` runs of `workload` (fresh checks each; `on_step` sees
    its steps, `deadline` bounds it), and the first step at which a later run
    differs from it (None: all agree). A first run the deadline ended is not
    compared."""
    first = run_workload(workload, factory, checks(), max_steps, on_step, deadline=deadline)
    for _ in range(runs - 1 if not first.out_of_time else 0):
        differs = first_difference(first, run_workload(workload, factory, checks(), max_steps))
        if differs is not None:
            return first, differs
    return first, None
