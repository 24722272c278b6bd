"""Which checks a run uses.

- property mode: checks that need no reference model, for any system;
- lockstep mode: property mode plus conformance with the reference model and the
  proved preemption bound of model/bounds.py (systems that implement
  docs/semantics.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from checks.base import Check, Violation
from checks.futility import GuardedFutility
from checks.lifecycle import Aborts, Lifecycle, PrefixHits, Work
from checks.liveness import NeverFitRejected, PriorityVictims, PriorityWaiting, Progress
from checks.lockstep import Lockstep, ModelBounds
from checks.outputs import OutputEquivalence, ReportedOutputs
from checks.rules import DocumentedRules
from checks.safety import Caps, KvConservation, KvHitBlocks, KvTables
from model.errors import WorkloadError
from sut.driver import DRIVER_PROPERTIES

if TYPE_CHECKING:
    from model.config import Config
    from model.events import Event
    from sut.driver import Driver
    from sut.protocol import Capabilities, Observation

MODES = ("property", "lockstep")


def property_checks(outputs: bool = True) -> list[Check]:
    """Fresh instances of every property check (checks hold per-run state)."""
    checks: list[Check] = [Lifecycle(), Work(), PrefixHits(), Aborts(), Caps(), KvTables(), KvHitBlocks(),
                           KvConservation(), Progress(), NeverFitRejected(), PriorityWaiting(), PriorityVictims(),
                           GuardedFutility(), DocumentedRules(), ReportedOutputs()]
    return checks + ([OutputEquivalence()] if outputs else [])


def checks_for(mode: str, outputs: bool = True) -> list[Check]:
    """The checks of a mode, fresh."""
    extra: list[Check] = [Lockstep(), ModelBounds()] if mode == "lockstep" else []
    return extra + property_checks(outputs)


def default_mode(semantics: str | None) -> str:
    """Lockstep for a system that claims loopcheck's semantics, else property."""
    return "lockstep" if semantics == "loopcheck" else "property"


def properties() -> list[str]:
    """Every property a check can report (the names of counterexample files)."""
    return sorted({p for c in checks_for("lockstep") for p in c.props})


@dataclass(frozen=True)
class CheckSet:
    """The checks of a run: a mode's (`checks_for`), none reporting a violation of
    the properties in `ignore` (counted instead: to look past a known bug; see
    `Ignoring`). WorkloadError: `ignore` names something no check reports."""

    mode: str
    ignore: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.ignore:
            return
        unknown = sorted(self.ignore - set(properties()))
        driven = [p for p in unknown if p in DRIVER_PROPERTIES]
        if driven:
            raise WorkloadError(f"--ignore: {driven[0]!r} is the driver's own finding ({', '.join(DRIVER_PROPERTIES)}: "
                                "the system crashed, hung or did not drain), which cannot be ignored")
        if unknown:
            raise WorkloadError(f"--ignore: unknown property {unknown[0]!r} (known: {', '.join(properties())})")

    def build(self) -> list[Check]:
        """Fresh instances."""
        checks = checks_for(self.mode)
        return [Ignoring(c, self.ignore) for c in checks] if self.ignore else checks

    def flags(self) -> list[str]:
        """The command-line flags that select these checks."""
        return ["--check", self.mode] + (["--ignore", ",".join(sorted(self.ignore))] if self.ignore else [])

    def __str__(self) -> str:
        return " ".join(self.flags())


class Ignoring(Check):
    """`inner`, but its first violation of a property in `ignore` is kept in
    `broken` instead of raised, and switches it off for the rest of the run: a
    check stopped in the middle of a hook holds a state it cannot be trusted to
    judge from, so its other properties go unjudged from there too."""

    def __init__(self, inner: Check, ignore: frozenset[str]) -> None:
        self.inner, self.ignore = inner, ignore
        self.name, self.props = inner.name, inner.props
        self.broken: Violation | None = None

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return self.inner.unavailable(caps, cfg)

    def on_input(self, driver: Driver, kind: str, rid: str) -> None:
        self._guarded(lambda: self.inner.on_input(driver, kind, rid), driver.t)

    def after_step(self, driver: Driver, events: list[Event], obs: Observation) -> None:
        self._guarded(lambda: self.inner.after_step(driver, events, obs), driver.t - 1)

    def step_cap(self, driver: Driver) -> int | None:
        return None if self.broken else self.inner.step_cap(driver)

    def at_end(self, driver: Driver, obs: Observation) -> None:
        self._guarded(lambda: self.inner.at_end(driver, obs), max(driver.t - 1, 0))

    def _guarded(self, hook: Callable[[], None], step: int) -> None:
        """Run the hook of step `step` (the step a violation is pinned to, as the
        driver pins them) unless the check is off."""
        if self.broken:
            return
        try:
            hook()
        except Violation as v:
            if v.prop not in self.ignore:
                raise
            v.step = step if v.step is None else v.step
            self.broken = v


def ignored(checks: Iterable[Check]) -> list[tuple[str, Violation]]:
    """Of a run's checks, each `Ignoring` one that broke: its name and the
    violation it kept."""
    return [(c.name, c.broken) for c in checks if isinstance(c, Ignoring) and c.broken]
