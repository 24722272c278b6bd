"""Which checks a run uses.

- property mode: checks that need no reference model, for any system;
- lockstep mode: property mode plus conformance with the reference model and the
  proved preemption bound of model/bounds.py (systems that implement
  docs/semantics.md).
"""

from __future__ import annotations

from checks.base import Check
from checks.futility import GuardedFutility
from checks.lifecycle import Aborts, Lifecycle, PrefixHits, Work
from checks.liveness import NeverFitRejected, PriorityVictims, PriorityWaiting, Progress
from checks.lockstep import Lockstep, ModelBounds
from checks.outputs import OutputEquivalence, ReportedOutputs
from checks.rules import DocumentedRules
from checks.safety import Caps, KvConservation, KvTables

MODES = ("property", "lockstep")


def property_checks(outputs: bool = True) -> list[Check]:
    """Fresh instances of every property check (checks hold per-run state)."""
    checks: list[Check] = [Lifecycle(), Work(), PrefixHits(), Aborts(), Caps(), KvTables(), KvConservation(),
                           Progress(), NeverFitRejected(), PriorityWaiting(), PriorityVictims(), GuardedFutility(),
                           DocumentedRules(), ReportedOutputs()]
    return checks + ([OutputEquivalence()] if outputs else [])


def checks_for(mode: str, outputs: bool = True) -> list[Check]:
    """The checks of a mode, fresh."""
    extra: list[Check] = [Lockstep(), ModelBounds()] if mode == "lockstep" else []
    return extra + property_checks(outputs)
