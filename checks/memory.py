"""What a run remembers for its later judgements, in a canonical form: the
trace's view, which requests were aborted, and each check's own memory. Two runs
that remember the same (and whose systems are in the same state) are judged the
same from there on, which is what lets an exploration merge them."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from loopcheck.checks.base import Check, Ignoring
from loopcheck.checks.liveness import NeverFitRejected, Progress
from loopcheck.checks.lockstep import Lockstep, ModelBounds
from loopcheck.sut.canonical import canonical

if TYPE_CHECKING:
    from loopcheck.sut.driver import Driver


def _progress(check: Progress, driver: Driver) -> Hashable:
    # only the quiet steps: the states seen are what an exploration's graph holds (every repeat is found there)
    return min(check.quiet, check.stall_steps)


def _never_fit(check: NeverFitRejected, driver: Driver) -> Hashable:
    # each watched request and how long ago it was submitted, which is all that is judged of it
    return tuple(sorted((rid, min(driver.t - t, check.within)) for rid, t in check.submitted.items()))


def _lockstep(check: Lockstep, driver: Driver) -> Hashable:
    # the reference model's state but its step counter, and the requests it was given
    if check.model is None:
        return None
    s = check.model.state
    return canonical((s.reqs, s.free, s.cache, s.guard, check.model.env.workload.requests))


def _model_bounds(check: ModelBounds, driver: Driver) -> Hashable:
    return driver.counters.preemptions   # (judged against the bound at the end)


# The checks that keep step numbers or objects, by what they mean; any other check by all its fields.
_SPECIAL: dict[type, Callable[..., Hashable]] = {
    Progress: _progress, NeverFitRejected: _never_fit, Lockstep: _lockstep, ModelBounds: _model_bounds}


def check_memory(check: Check, driver: Driver) -> Hashable:
    """What `check` remembers of `driver`'s run that its later judgements read
    (an ignoring check that broke remembers nothing: it judges no more)."""
    if isinstance(check, Ignoring):
        return None if check.broken else check_memory(check.inner, driver)
    special = _SPECIAL.get(type(check))
    return special(check, driver) if special else canonical(vars(check))


def asked(driver: Driver) -> Hashable:
    """What was asked of each unfinished request that later judgements read: its
    prompt, max_tokens and stop token, its priority where the system claims
    priority scheduling (else no check reads it), and whether it was aborted."""
    caps = driver.sut.capabilities
    return tuple((s.prompt, s.max_tokens, s.stop_token, s.priority if caps.priorities else None,
                  s.abort_at is not None) for s in driver.specs if driver.view.requests[s.rid].finish is None)


def run_memory(driver: Driver) -> Hashable:
    """What `driver`'s run remembers for its later judgements besides the system's
    own state (docs/exploring.md says why a state key is sound with it)."""
    return (driver.view.memory(), asked(driver), tuple(check_memory(c, driver) for c in driver.checks))
