"""A recorded workload run again through the driver and checks, step by step:
what each step showed, and the violation it reproduced (`loopcheck replay`, and
each counterexample a campaign writes, for its timeline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loopcheck.checks.base import Violation, ignored, matches
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.determinism import runs_differ
from loopcheck.driver.driver import OnStep
from loopcheck.model.events import Event
from loopcheck.model.workload import Workload
from loopcheck.runctl.stop import Deadline
from loopcheck.sut.protocol import Observation, SutFactory
from loopcheck.timeline import Timeline


@dataclass
class Replay:
    """What a replay saw, per step, and the violation it reproduced."""

    events: list[list[Event]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    violation: Violation | None = None
    drained: bool = False
    skipped: dict[str, str] = field(default_factory=dict)
    ignored: list[tuple[str, Violation]] = field(default_factory=list)   # (check, ignored violation): `Check.broke`
    ended_by: Violation | None = None   # the finding that ended the run: ignored, or after an ignored one
    ended_by_ignored: bool = False      # the run ignores `ended_by` itself (else it came after an ignored one)
    semantics: str | None = None   # the system's capabilities.semantics (None: not loopcheck's, no policy)
    refused: dict[str, str] = field(default_factory=dict)   # requests the system refused at `add` -> why
    never_ready: list[str] = field(default_factory=list)   # requests left waiting for a grammar never compiled
    cached: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)   # the prefix cache's pages per step
    runs: int = 1                 # the runs made
    out_of_time: bool = False     # the first run was stopped by its wall-clock bound (no later run made)
    differs: int | None = None    # the first step at which a later run differed from the first (None: none did)

    def record(self, events: list[Event], obs: Observation) -> None:
        done = sum(e.kind == "finish" for e in events) + (self.finished[-1] if self.finished else 0)
        pre = sum(e.kind == "preempt" for e in events) + (self.preemptions[-1] if self.preemptions else 0)
        self.events.append(events)
        self.held.append(obs.blocks_held)
        self.finished.append(done)
        self.preemptions.append(pre)
        self.cached.append(tuple(obs.cached_pages))

    def timeline(self, workload: Workload, system: str) -> Timeline:
        """This replay as a timeline, headed by the system (an adapter's file by its
        name alone) and what it showed."""
        v = self.violation
        what = (f"{v.prop} at step {v.step}" if v else "drained" if self.drained else
                f"incomplete: --max-seconds passed after {len(self.events)} steps" if self.out_of_time else
                f"not drained after {len(self.events)} steps")
        policy = f", policy {workload.config.preemption_policy}" if self.semantics == "loopcheck" else ""
        return Timeline(workload, self.events, self.held, v.cycle if v else None, v.step if v else None,
                        f"{Path(system).name}, {len(workload.requests)} requests{policy}: {what}",
                        self.cached if any(self.cached) else None)


def replay(workload: Workload, factory: SutFactory, checks: CheckSet, max_steps: int | None = None,
           runs: int = 1, deadline: Deadline | None = None, progress: OnStep | None = None) -> Replay:
    """Run `workload` on the system `factory` builds with `checks` (to their step
    cap, or `max_steps`; stopped where `deadline` passes), recording every
    step (and calling `progress` after it); then, unless it was stopped so,
    `runs - 1` times more, each compared with the first (`Replay.differs`)."""
    rep = Replay(runs=runs)

    def record(events: list[Event], obs: Observation) -> None:
        rep.record(events, obs)
        if progress is not None:
            progress(events, obs)

    run, rep.differs = runs_differ(workload, factory, checks.build, runs, max_steps, record, deadline)
    rep.out_of_time = run.out_of_time
    rep.runs = 1 if run.out_of_time else runs
    rep.violation, rep.drained, rep.skipped = run.violation, run.drained, run.driver.skipped
    rep.ignored = ignored(run.driver.checks)
    rep.ended_by = run.driver.ended_by
    rep.ended_by_ignored = rep.ended_by is not None and matches(rep.ended_by, run.driver.ignore)
    rep.refused = dict(run.driver.refused)
    rep.never_ready = sorted(run.driver.never_ready())
    sut = getattr(run.driver, "sut", None)   # (none when building it crashed)
    rep.semantics = sut.capabilities.semantics if sut is not None else None
    return rep
