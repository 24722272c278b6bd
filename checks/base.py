"""What a check is, and the violation it raises."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from loopcheck.checks.signatures import signature_of
from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.simulate import Counters
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.sut.protocol import Capabilities, Internals, Observation
from loopcheck.sut.view import TraceView

DRIVER_PROPERTIES = ("crash", "hang", "liveness")   # what the driver itself reports (no check does)



@dataclass
class Violation(AssertionError):
    """A property found broken: its name, what happened, the step that showed it
    (numbered from 0 as arrivals and traces number steps: the step whose inputs,
    events or observation broke the property, the last one run for a check at
    the end of a run), for a livelock the cycle (first step and length), the
    `rule` that broke (a check's name for one of the property's rules, "" where
    the property has one: checks/signatures.py lists them), and `where` in the
    system the driver found it (a crash: FILE:FUNCTION:TYPE:SHAPE; a hang:
    FILE:FUNCTION; "" for a check's finding). `signature` (PROPERTY,
    PROPERTY.RULE or PROPERTY@WHERE) tells one bug from another of the same
    property, and stays when lines move."""

    prop: str
    message: str
    cycle: dict[str, int] | None = None
    step: int | None = None
    where: str = ""
    rule: str = ""

    @property
    def signature(self) -> str:
        return signature_of(self.prop, self.rule, self.where)

    def __str__(self) -> str:
        where = f" (step {self.step})" if self.step is not None else ""
        return f"{self.prop}{where}: {self.message}"


@dataclass(frozen=True)
class Reference:
    """What output equivalence reads of a run on the unconstrained config."""

    violation: Violation | None
    drained: bool
    observation: Observation


class RunView(Protocol):
    """What a check reads of the run it judges (the driver is one; checks never
    import it). Attributes are read, never written, but for `skipped`."""

    cfg: Config                    # the run's config
    caps: Capabilities             # the system's capabilities
    t: int                         # steps run so far (a hook of step t - 1 runs with t)
    inputs_until: int              # inputs are scheduled up to this step (recorded workloads; -1: none)
    view: TraceView                # per request, what the events say so far
    counters: Counters             # preemptions and resumptions so far
    specs: Sequence[RequestSpec]   # the requests submitted, in order
    checks: Sequence[Check]        # the checks that run
    skipped: dict[str, str]        # a check that cannot judge this run records why, by its label

    def workload(self) -> Workload:
        """What was submitted so far, as a replayable workload."""

    def drained(self) -> bool:
        """Every submitted request finished, by the events and by the system's word."""

    def default_cap(self) -> int:
        """The run's work-based step cap."""

    def internals(self) -> Internals:
        """The system's `Internals` now (where its capabilities say internals)."""

    def reference(self, workload: Workload, max_steps: int) -> Reference:
        """The run of `workload` on a fresh system of the same factory, without
        checks, to `max_steps`."""


def matches(violation: Violation, ignore: frozenset[str]) -> bool:
    """Whether `ignore` names the violation's property, its signature, or its
    signature cut at one of its ':' (crash@FILE:FUNCTION: every crash there)."""
    signature = violation.signature
    return violation.prop in ignore or any(signature == entry or signature.startswith(f"{entry}:")
                                           for entry in ignore)


class Check:
    """One property, fed by the run. Subclasses override the hooks they need and
    report a broken rule with `broke`, which raises the Violation unless the run
    ignores its signature (`ignore`, set by `CheckSet.build`): an ignored one is
    kept in `ignored` and the check goes on judging, every other rule included."""

    props: tuple[str, ...] = ()   # the properties its violations name
    ignore: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """How output names this check: by the properties it checks."""
        return ", ".join(self.props)

    @property
    def ignored(self) -> list[Violation]:
        """The violations it met that the run ignores, in the order met."""
        return self.__dict__.setdefault("_ignored", [])

    def broke(self, violation: Violation) -> None:
        """Report a broken rule: raise it, or keep it in `ignored` if the run
        ignores it (`matches`); then the hook goes on."""
        if not matches(violation, self.ignore):
            raise violation
        self.ignored.append(violation)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        """Why this check cannot run on a SUT with these capabilities (None: it runs)."""
        return None

    def on_input(self, run: RunView, kind: str, rid: str) -> None:
        """At step run.t a request was submitted (kind "add"; run.view holds it)
        or aborted (kind "abort")."""

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        """One step ran; `events` are its events, `obs` the observation after it."""

    def step_cap(self, run: RunView) -> int | None:
        """The step by which a run must have drained (None: no opinion)."""
        return None

    def at_end(self, run: RunView, obs: Observation) -> None:
        """The run drained; `obs` is the last observation."""


def ignored(checks: Iterable[Check]) -> list[tuple[str, Violation]]:
    """Of a run's checks, each violation one met that the run ignores, with the
    check's label."""
    return [(c.label, v) for c in checks for v in c.ignored]
