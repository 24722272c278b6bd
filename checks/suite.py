"""Which checks a run uses.

- property mode: checks that need no reference model, for any system;
- lockstep mode: property mode plus conformance with the reference model and the
  proved preemption bound of model/bounds.py (systems that implement
  docs/semantics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from loopcheck.checks.base import DRIVER_PROPERTIES, Check
from loopcheck.checks.blocked import Grammars, KvLoads
from loopcheck.checks.futility import GuardedFutility
from loopcheck.checks.lifecycle import Aborts, CachedPages, Lifecycle, PrefixHits, PromptOnly, Work
from loopcheck.checks.liveness import NeverFitRejected, PriorityVictims, PriorityWaiting, Progress
from loopcheck.checks.lockstep import Lockstep, ModelBounds
from loopcheck.checks.outputs import OutputEquivalence, ReportedOutputs
from loopcheck.checks.pause import Pauses
from loopcheck.checks.rules import DocumentedRules, VictimOrders
from loopcheck.checks.safety import Caps, KvConservation, KvHitBlocks, KvTables
from loopcheck.checks.signatures import PLACED, RULES, current
from loopcheck.model.errors import WorkloadError

MODES = ("property", "lockstep")


def property_checks(outputs: bool = True) -> list[Check]:
    """Fresh instances of every property check (checks hold per-run state)."""
    checks: list[Check] = [Lifecycle(), KvLoads(), Work(), Grammars(), PromptOnly(), PrefixHits(), CachedPages(),
                           Aborts(), Caps(), KvTables(), KvHitBlocks(), KvConservation(), Progress(),
                           NeverFitRejected(), PriorityWaiting(), PriorityVictims(), GuardedFutility(),
                           DocumentedRules(), VictimOrders(), Pauses(), ReportedOutputs()]
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
    """The checks of a run: a mode's (`checks_for`), none reporting a violation
    whose property or signature (`Violation.signature`, or a signature cut at a
    ':') is in `ignore` (counted instead, the check judging on: to look past a
    known bug; see `Check.broke`); signatures by line of an older loopcheck are read as their new
    names (`signatures.current`). A crash or hang is ignored only by signature:
    such a finding then ends its run quietly (`RunEnded`). WorkloadError:
    `ignore` names a property or rule no check reports, or a crash or hang by
    property alone."""

    mode: str
    ignore: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ignore", frozenset(current(entry) for entry in self.ignore))
        known = properties()
        for entry in sorted(self.ignore):
            prop, at, where = entry.partition("@")
            if at and not where:
                raise WorkloadError(f"--ignore: {entry!r} names no place after '@' (PROP@FILE:FUNCTION..., as a "
                                    "summary prints signatures)")
            if prop in PLACED and not at:
                raise WorkloadError(f"--ignore: {prop!r} is the driver's own finding ({', '.join(PLACED)}: "
                                    "the system crashed or hung); ignore one by its signature "
                                    f"({prop}@FILE:FUNCTION..., as a summary prints it), not all of them")
            prop, _, rule = prop.partition(".")
            if prop not in DRIVER_PROPERTIES and prop not in known:
                raise WorkloadError(f"--ignore: unknown property {prop!r} (known: {', '.join(known)})")
            if rule and rule not in RULES.get(prop, ()):
                rules = ", ".join(f"{prop}.{r}" for r in RULES.get(prop, ())) or f"{prop} alone: it has one rule"
                raise WorkloadError(f"--ignore: unknown rule {entry!r} (the rules of {prop}: {rules})")

    def build(self) -> list[Check]:
        """Fresh instances, each ignoring `ignore`."""
        checks = checks_for(self.mode)
        for c in checks:
            c.ignore = self.ignore
        return checks

    def ignoring(self, *more: str) -> CheckSet:
        """These checks, ignoring `more` too."""
        return CheckSet(self.mode, self.ignore | frozenset(more))

    def flags(self) -> list[str]:
        """The command-line flags that select these checks."""
        return ["--check", self.mode] + (["--ignore", ",".join(sorted(self.ignore))] if self.ignore else [])

    @classmethod
    def from_flags(cls, flags: list[str]) -> CheckSet:
        """The checks that `flags()` selects (as a certificate records them)."""
        values = dict(zip(flags[::2], flags[1::2], strict=True))
        return cls(values["--check"], frozenset(filter(None, values.get("--ignore", "").split(","))))

    def __str__(self) -> str:
        return " ".join(self.flags())
