"""The stateful machine: Hypothesis adds requests, aborts them and steps a system
under test through the one driver (driver/driver.py), which runs the checks of the
chosen mode (checks/suite.py) after every step and, at teardown, drains and runs
the end-of-run checks.

The first violation is the one reported: once a check fails, later rules and
teardown do nothing, so a teardown failure can never replace it. A finding that
ended the run only after an ignored one is reported at teardown where the run
without one of its requests shows it alone (`Stats.separate`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import reject
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, precondition, rule

from loopcheck.adapters.loader import capabilities_of
from loopcheck.checks.base import Check, Violation, ignored, matches
from loopcheck.checks.counterexample import write_counterexample
from loopcheck.driver.coverage import Edge, EdgeCoverage
from loopcheck.driver.driver import Driver, Run, RunEnded
from loopcheck.fuzz.corpus import Corpus
from loopcheck.fuzz.features import run_features
from loopcheck.fuzz.mutate import RunNotes
from loopcheck.fuzz.settings import MachineSettings
from loopcheck.fuzz.shrink import separated
from loopcheck.fuzz.strategies import VOCAB, Shape, request_bodies
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Admit, Event, Finish, Preempt, Resume
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.runctl.stop import StopRequest
from loopcheck.runctl.ticker import Ticker
from loopcheck.sut.protocol import Observation, SutFactory

SEPARATIONS = 3   # runs tried per signature met only after an ignored finding (`Stats.separate`)



@dataclass
class Stats:
    """What a campaign has covered so far (shared by every machine run)."""

    examples: int = 0
    steps: int = 0
    rules: Counter = field(default_factory=Counter)
    branches: Counter = field(default_factory=Counter)
    windows: Counter = field(default_factory=Counter)   # rare windows opened by the directed workloads run
    not_run: Counter = field(default_factory=Counter)   # (check, why it did not run) -> runs it did not run in
    refused: Counter = field(default_factory=Counter)   # why the system refused a request (`Refused`) -> requests
    ignored: Counter = field(default_factory=Counter)   # ignored finding's signature -> runs that broke it
    after_ignored: Counter = field(default_factory=Counter)   # signature -> runs it broke after an ignored finding
    found_elsewhere: Counter = field(default_factory=Counter)   # signature -> finds after another campaign claimed it
    shared: Counter = field(default_factory=Counter)   # kind -> calls the campaign made on its share (fuzz/share.py)
    separations: Counter = field(default_factory=Counter)    # signature -> runs tried to separate it (`separate`)
    separated: dict[str, Run] = field(default_factory=dict)   # signature + workload (JSON) -> the run that separated it
    failure_at: float | None = None   # seconds into the campaign of the failure being handled (None: none)
    ticker: Callable[[], None] | None = None   # called when `clock` says a progress line is due, while stepping
    clock: Ticker = field(default_factory=Ticker)
    deadline: float | None = None   # time.monotonic() after which no new action starts (until a failure)
    max_examples: int | None = None   # examples after which no new one starts (a work bound)
    preempted: set[str] = field(default_factory=set)         # requests preempted and not back yet
    ever_preempted: set[str] = field(default_factory=set)
    held: list[int] = field(default_factory=list)            # blocks held after each step of the current run
    coverage: EdgeCoverage | None = None   # the system's code edges in the current run, where guidance measures them
    corpus: Corpus | None = None           # where runs' features are noted (guidance from the system itself)
    guidance: dict[str, int] = field(default_factory=dict)   # what the corpus held at the end, for the summary
    edges: frozenset[Edge] = frozenset()   # the system's code edges the campaign's runs took (with guidance)

    def spent(self) -> bool:
        """Past the deadline, or the examples bound reached."""
        return ((self.deadline is not None and time.monotonic() >= self.deadline)
                or (self.max_examples is not None and self.examples >= self.max_examples))

    def new_example(self) -> None:
        self.preempted, self.ever_preempted, self.held = set(), set(), []

    def rare_branches(self, events: list[Event]) -> list[str]:
        """Branches only a sequence of events shows: a preemption whose requester is
        not admitted in the same step (futile), a request preempted again, an
        abort of a preempted request."""
        came_in = {e.rid for e in events if e.kind in ("admit", "resume")}
        out = []
        for e in events:
            if isinstance(e, Preempt):
                if e.by != e.rid and e.by not in came_in:
                    out.append("preempt+futile")
                if e.rid in self.ever_preempted:
                    out.append("preempt+again")
                self.preempted.add(e.rid)
                self.ever_preempted.add(e.rid)
            elif e.kind in ("admit", "resume"):
                self.preempted.discard(e.rid)
            elif e.kind == "abort" and e.rid in self.preempted:
                out.append("abort+preempted")
        return out

    def note_run(self, driver: Driver) -> None:
        """A run's checks that did not run, with why (`Driver.skipped`), the
        requests the system refused, by why, the signatures of the ignored
        findings it met (by its checks, or the crash, hang or liveness finding
        that ended it), and of the finding after one."""
        self.not_run.update(driver.skipped.items())
        self.refused.update(driver.refused.values())
        if self.corpus is not None and driver.specs:
            cfg, workload = driver.cfg, driver.workload()
            self.corpus.note(workload, run_features(cfg.num_blocks, cfg.block_size, driver.specs, driver.trace,
                                                    self.held, driver.coverage and driver.coverage.edges,
                                                    driver.uncomputed_registrations),
                             RunNotes.of(workload, driver.trace,
                                         {rid: tuple(r.token_ids) for rid, r in driver.view.requests.items()},
                                         self.held))
        broken, ended = ignored(driver.checks), driver.ended_by
        direct = ended is not None and matches(ended, driver.ignore) and not broken
        self.ignored.update({v.signature for _, v in broken} | ({ended.signature} if direct else set()))
        if ended is not None and not direct:
            self.after_ignored[ended.signature] += 1

    def separate(self, driver: Driver, factory: SutFactory, checks: Callable[[], list[Check]]) -> Run | None:
        """For a run that a finding ended after an ignored one (and that is not
        ignored itself): a run of its workload with a request fewer that shows
        that finding as its own (`shrink.separated`), tried in SEPARATIONS runs
        per signature at most; None otherwise. The same finding of the same
        workload gets the same answer again (Hypothesis replays a failing
        example to report it); once its signature is ignored, none."""
        ended = driver.ended_by
        if ended is None or not ignored(driver.checks) or matches(ended, driver.ignore):
            return None
        workload = driver.workload()
        key = ended.signature + json.dumps(workload.to_json(), sort_keys=True)
        if key in self.separated or self.separations[ended.signature] >= SEPARATIONS:
            return self.separated.get(key)
        self.separations[ended.signature] += 1
        alone = separated(workload, ended.signature, factory, checks)
        if alone is not None:
            self.separated[key] = alone
        return alone

    def note_step(self, events: list[Event], obs: Observation) -> None:
        """Scheduler branches, as far as events show them; and the ticker, when due."""
        self.steps += 1
        self.held.append(obs.blocks_held)
        if self.ticker is not None and self.clock.due():
            self.ticker()
        for e in events:
            name = e.kind
            if isinstance(e, (Admit, Resume)) and e.hit_pages > 0:
                name += "+prefix-hit"
            elif isinstance(e, Resume) and e.restored > 0:
                name += "+snapshot-restore"
            elif isinstance(e, Preempt):
                name += "+self" if e.by == e.rid else ("+snapshot" if e.keeps_tokens else "+restart")
            elif isinstance(e, Finish):
                name += f"({e.reason})"
            self.branches[name] += 1
        for name in self.rare_branches(events):
            self.branches[name] += 1


LAST_FAILURE = "last-failure.json"   # the failure being handled, unshrunk, as soon as it is found


def record_failure(out: Path | None, workload: Workload, violation: Violation, trace: list[list[Event]],
                   source: str, stats: Stats, clock_start: float) -> None:
    """Note a failure the moment it is found: its time in `stats` and, in `out`,
    its counterexample file as found (LAST_FAILURE)."""
    if stats.failure_at is None:
        stats.failure_at = time.monotonic() - clock_start
    if out is not None:
        write_counterexample(out / LAST_FAILURE, workload, violation, trace, source)


class LoopcheckMachine(RuleBasedStateMachine):
    """Bind with `machine_class`, whose subclass defines the class attributes below."""

    run_settings = MachineSettings()
    stats: Stats = Stats()
    clock_start: float = 0.0
    can_abort: bool = True

    requests = Bundle("requests")

    def setup(self, config: Config, prefixes: tuple[tuple[int, ...], ...], shape: Shape) -> None:
        cls = type(self)
        self.prefixes = tuple(prefix * self.run_settings.prefix_scale for prefix in prefixes)
        self.example_shape, self.config = shape, config
        self.spent = False
        if self.budget_spent():
            return
        try:
            bound = self.run_settings
            self.driver = Driver(bound.factory, config, bound.checks.build(), cls.stats.note_step, cls.stats.coverage)
        except WorkloadError:
            reject()   # the system refuses this config: draw another
        self.guarded(self.driver.raise_failure)   # a crash while building the system is a finding
        cls.stats.examples += 1
        cls.stats.new_example()

    def guarded(self, action, *args) -> None:
        """Run a driver action; on the first violation write the counterexample (the
        final, shrunk failure overwrites earlier ones) and fail the test case; a run
        that an ignored finding ended does nothing more. A stop request (Ctrl-C,
        SIGTERM) that Hypothesis swallowed is raised again here."""
        StopRequest.check()
        try:
            action(*args)
        except RunEnded:
            self.spent = True
        except Violation as v:
            cls = type(self)
            record_failure(cls.run_settings.out_dir, self.driver.workload(), v, self.driver.trace,
                           cls.run_settings.source, cls.stats, cls.clock_start)
            raise

    def budget_spent(self) -> bool:
        """Past the campaign's budget (before any failure): the rest of this example
        still draws its data, the same way, but runs nothing (ending an example
        early would make Hypothesis see the same choices draw differently)."""
        stats = type(self).stats
        if stats.failure_at is None and stats.spent():
            self.spent = True
        return self.spent

    def ok(self) -> bool:
        return self.spent or (hasattr(self, "driver") and self.driver.failure is None)

    @precondition(lambda self: self.ok())
    @rule(target=requests, data=st.data())
    def add(self, data: st.DataObject) -> str:
        cls = type(self)
        bound = cls.run_settings
        room = max(1, self.config.max_positions - self.config.spec_tokens)   # (drafts may take the rest: total_pages)
        fields = data.draw(request_bodies(self.prefixes, bound.max_prompt, bound.max_tokens, self.example_shape, room))
        if self.budget_spent():
            return "spent"
        spec = RequestSpec(rid=f"q{len(self.driver.specs) + len(self.driver.refused)}", **fields)
        self.guarded(self.driver.add, spec)
        cls.stats.rules["add"] += 1
        return spec.rid

    @precondition(lambda self: self.ok() and self.example_shape.aborts == "on" and type(self).can_abort)
    @rule(rid=requests)
    def abort(self, rid: str) -> None:
        if self.budget_spent():
            return
        self.guarded(self.driver.abort, rid)
        type(self).stats.rules["abort"] += 1

    @precondition(lambda self: self.ok())
    @rule(n=st.integers(1, 4))
    def advance(self, n: int) -> None:
        if self.budget_spent():
            return
        for _ in range(n):
            self.guarded(self.driver.step)
        type(self).stats.rules["step"] += 1

    def teardown(self) -> None:
        cls = type(self)
        try:
            if not self.budget_spent() and self.ok():
                self.guarded(self.driver.finish)
        finally:   # a failing run is noted too
            if hasattr(self, "driver"):
                cls.stats.note_run(self.driver)
        bound = cls.run_settings
        alone = cls.stats.separate(self.driver, bound.factory, bound.checks.build) if hasattr(self, "driver") else None
        if alone is not None and alone.violation is not None:   # a finding of its own, shown by a request fewer
            record_failure(bound.out_dir, alone.driver.workload(), alone.violation, alone.driver.trace, bound.source,
                           cls.stats, cls.clock_start)
            raise alone.violation


PREFIXES = st.lists(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=6).map(tuple),
                    min_size=1, max_size=2).map(tuple)


def machine_class(configs: st.SearchStrategy[Config], run_settings: MachineSettings,
                  stats: Stats | None = None) -> type[LoopcheckMachine]:
    """A machine class bound to a config strategy and the settings of its
    examples (each draws a swarm subset of their shape), counting into `stats`."""
    shared, settings_bound = stats or Stats(), run_settings   # (a class body reads no enclosing name it assigns)

    class BoundLoopcheckMachine(LoopcheckMachine):
        run_settings = settings_bound
        stats = shared
        clock_start = time.monotonic()
        can_abort = capabilities_of(settings_bound.factory).abort

        @initialize(config=configs, prefixes=PREFIXES, example_shape=settings_bound.shape.swarm())
        def start(self, config: Config, prefixes: tuple[tuple[int, ...], ...], example_shape: Shape) -> None:
            self.setup(config, prefixes, example_shape)

    return BoundLoopcheckMachine
