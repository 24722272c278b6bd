"""Scoped exploration of any system through the protocol: every input sequence of
a `Scope`, run on the real system by the driver with the checks a fuzz campaign
uses, breadth first, states merged by a key, ending in tallies for a certificate
or in findings (each the shortest input sequence that shows it).

The work is split into units, each a config of the scope and the inputs before
the first step, explored on their own (their own table of states): a single run
explores every unit in order, `--part K/N` the units i with i % N == K - 1, and
parts combined add up to the single run exactly.

A state is the node a run reaches: its key is a stable digest of the system's
`state_key`, what the run remembers for its judgements (`checks.memory.run_memory`) and what
is still to come of the inputs (the step while inputs may come, the requests
submitted). Two runs with equal keys are judged the same from there on, and a
system whose key identifies its scheduling state behaves the same (docs/
exploring.md; `check_key` tests it by replaying merged states). A system without
a state key is explored as a tree, each run to drain or `max_steps`.

Each state is reached by replaying its inputs from the root on a fresh system (a
live system is kept for the last input choice of each state, so that runs past
the inputs, which have one choice a step, are not replayed). Stalls and livelocks
are cycles of the graph past the inputs: a cycle's inputs are replayed with every
check on and what the checks report is the finding (its stall or livelock).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from loopcheck.checks.base import Violation, ignored
from loopcheck.checks.memory import run_memory
from loopcheck.checks.needs import never_fits
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.coverage import EdgeCoverage
from loopcheck.driver.driver import Driver, RunEnded, run_workload
from loopcheck.explorer.explore import family_size, variant
from loopcheck.explorer.scope import FAIL, MOST, NEVER, Scope, WorkloadScope, shapes_upper_bound
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event
from loopcheck.model.workload import NEVER as GRAMMAR_NEVER
from loopcheck.model.workload import InputSchedule, RequestSpec, Workload
from loopcheck.runctl.stop import Deadline, OutOfTime, StopRequest
from loopcheck.sut.canonical import canonical, digest
from loopcheck.sut.protocol import Capabilities, ProtocolError, Refused, SutFactory
from loopcheck.sut.view import SUBMITTED, WAITING

LIVE_LIMIT = 256   # live systems kept for the last input choice of the states waiting to be expanded
PROGRESS_EVERY = 64   # transitions between calls of the progress callback (which decides by the clock)

# before a step: shapes arriving (indices, in submission order), requests aborted, and (where the explorer chooses
# them: `stop_choices`) the requests given their stop token in it
Inputs = tuple[tuple[int, ...], tuple[str, ...], frozenset[str] | None]
NO_INPUTS: Inputs = ((), (), None)


@dataclass(frozen=True)
class Shape:
    """A request shape resolved on a system: its stop token is concrete."""

    prompt: tuple[int, ...]
    max_tokens: int
    priority: int
    stop_token: int | None
    lora: int = 0
    grammar_ready: int | None = None
    kv_load_steps: int | None = None
    kv_load_fails: bool = False
    spec_accepts: tuple[int, ...] = ()

    def spec(self, rid: str) -> RequestSpec:
        return RequestSpec(rid, self.prompt, self.max_tokens, priority=self.priority, stop_token=self.stop_token,
                           lora=self.lora, grammar_ready=self.grammar_ready, kv_load_steps=self.kv_load_steps,
                           kv_load_fails=self.kv_load_fails, spec_accepts=self.spec_accepts)


@dataclass(frozen=True)
class GivenRequest:
    """A request of a given workload (`WorkloadScope`), submitted as it is: its id
    kept (ids break priority ties), its abort an input of its own."""

    request: RequestSpec

    def spec(self, rid: str) -> RequestSpec:
        return replace(self.request, abort_at=None)


@dataclass(frozen=True)
class Unit:
    """What one unit explores: a config of the plan (its position), the inputs
    fixed before each of the first steps (`script`: before step 0 for a
    `Scope`, whose later inputs are chosen; every step's for a workload), and
    the horizon (inputs come before the steps 0 .. horizon-1)."""

    config: int
    script: tuple[Inputs, ...]
    horizon: int


@dataclass(frozen=True)
class ConfigPlan:
    """One config of the scope as the system takes it: its shapes (stops
    resolved; a workload's requests), and the shapes its `add` refuses (each
    with why)."""

    config: Config
    shapes: tuple[Shape | GivenRequest, ...]
    refused: tuple[tuple[Shape, str], ...] = ()


@dataclass(frozen=True)
class Plan:
    """What an exploration covers on one system: the configs it builds (with their
    shapes), the configs it refuses and why, and the units in order."""

    scope: Scope | WorkloadScope
    configs: tuple[ConfigPlan, ...]
    refused: tuple[tuple[Config, str], ...]
    units: tuple[Unit, ...]
    capabilities: Capabilities

    def part(self, k: int, n: int) -> list[int]:
        """The units of part k of n (1-based)."""
        return [i for i in range(len(self.units)) if i % n == k - 1]


def probe_tokens(factory: SutFactory, cfg: Config, prompt: tuple[int, ...], max_tokens: int,
                 max_steps: int, deadline: Deadline | None = None) -> list[int]:
    """The tokens the system gives a request of this prompt running alone, without
    a stop token (none if the run does not finish it); OutOfTime once `deadline`
    passes."""
    run = run_workload(Workload(cfg, (RequestSpec("probe", prompt, max_tokens),)), factory, (), max_steps=max_steps,
                       deadline=deadline)
    if run.out_of_time:
        raise OutOfTime
    out = run.observation.outputs.get("probe")
    return list(out.token_ids) if run.violation is None and out is not None else []


def most_tokens(factory: SutFactory, cfg: Config, prompt: tuple[int, ...], cap: int = 64) -> int | None:
    """The largest max_tokens, up to `cap`, with which a request of this prompt
    fits the pool (`never_fits`) and a fresh system of this config takes it at
    `add`; None if there is none."""
    sut = factory(cfg)
    for max_tokens in range(cap, 0, -1):
        spec = RequestSpec(f"most{max_tokens}", prompt, max_tokens)
        if never_fits(spec, cfg):
            continue
        try:
            sut.add(spec)
        except Refused:
            continue
        return max_tokens
    return None


def resolve_shapes(scope: Scope, cfg: Config, factory: SutFactory, caps: Capabilities,
                   deadline: Deadline | None = None) -> tuple[Shape, ...]:
    """The scope's request shapes on this config of the system, in scope order:
    max_tokens "most" becomes `most_tokens` up to max_steps / (2 max_requests)
    (dropped where there is none), a stop choice k becomes the token the system
    gives at index k when the request runs alone (dropped where that token came
    earlier, was never given, or is outside the vocabulary), NEVER the smallest
    token of the vocabulary it is not given when it runs alone (dropped where the
    run alone does not finish); shapes the system
    refuses (`Capabilities.refuses`), and those using a deployment feature it
    does not claim (`Capabilities.features`), left out; each distinct shape once."""
    out: list[Shape] = []
    probed: dict[tuple[tuple[int, ...], int], list[int]] = {}
    cap = scope.max_steps // (2 * scope.max_requests)   # (so that every workload can drain within max_steps)
    most = {p: most_tokens(factory, cfg, p, cap) for p in scope.prompts} if MOST in scope.max_tokens else {}
    for prompt, choice, priority, stop, lora, grammar, kv_load, accepts in shapes_upper_bound(scope):
        max_tokens = most[prompt] if choice == MOST else choice
        if max_tokens is None:
            continue
        ready = None if grammar is None else GRAMMAR_NEVER if grammar == NEVER else grammar
        load_steps = None if kv_load is None else 1 if kv_load == FAIL else kv_load
        shape = Shape(prompt, max_tokens, priority, None, lora, ready, load_steps, kv_load == FAIL, accepts)
        if not shape.spec("r").features <= set(caps.features):
            continue
        if (max_tokens == 0 and "prompt_only" in caps.refuses) or (stop is not None and "stop_tokens" in caps.refuses):
            continue
        if "oversized" in caps.refuses and never_fits(RequestSpec("r", prompt, max_tokens), cfg):
            continue
        token = None
        if stop is not None:
            key = (prompt, max_tokens)
            if key not in probed:
                probed[key] = probe_tokens(factory, cfg, prompt, max_tokens, scope.max_steps, deadline)
            token = stop_token(stop, probed[key], cfg.vocab_size)
            if token is None:
                continue
        shape = replace(shape, stop_token=token)
        if shape not in out:
            out.append(shape)
    return tuple(out)


def stop_token(stop: int | str, tokens: list[int], vocab_size: int) -> int | None:
    """The stop token of stop choice `stop` (an index k or NEVER) for a request
    given `tokens` when it runs alone (none if it did not finish); None where
    the choice has no token (see `resolve_shapes`)."""
    if not tokens:
        return None
    if stop == NEVER:
        return next((t for t in range(vocab_size) if t not in tokens), None)
    if stop >= len(tokens) or tokens[stop] in tokens[:stop] or tokens[stop] >= vocab_size:
        return None
    return tokens[stop]


def taken_shapes(factory: SutFactory, cfg: Config, shapes: tuple[Shape, ...]
                 ) -> tuple[tuple[Shape, ...], tuple[tuple[Shape, str], ...]]:
    """The shapes a fresh system of this config takes at `add`, and those it
    refuses (`Refused`, as its API would answer them) with why: a refused shape
    is never drawn, as in fuzz, and the certificate says so."""
    sut = factory(cfg)
    taken: list[Shape] = []
    refused: list[tuple[Shape, str]] = []
    for i, shape in enumerate(shapes):
        try:
            sut.add(shape.spec(f"probe{i}"))
        except Refused as exc:
            refused.append((shape, str(exc)))
            continue
        taken.append(shape)
    return tuple(taken), tuple(refused)


def arrival_choices(scope: Scope, shapes: int, submitted: int) -> list[tuple[int, ...]]:
    """The arrivals possible before a step: none, then up to `arrivals_per_step`
    shapes in every order, no more than the requests left."""
    room = min(scope.arrivals_per_step, scope.max_requests - submitted)
    return [()] + [seq for j in range(1, room + 1) for seq in itertools.product(range(shapes), repeat=j)]


def make_plan(factory: SutFactory, scope: Scope, caps: Capabilities, deadline: Deadline | None = None) -> Plan:
    """The plan of `scope` on the system: each config built once (one it refuses,
    with WorkloadError, is listed with why), its shapes resolved, its units;
    OutOfTime once `deadline` passes (the caller cuts the rest: `within`)."""
    if isinstance(scope, WorkloadScope):
        return workload_plan(factory, scope, caps)
    configs: list[ConfigPlan] = []
    refused: list[tuple[Config, str]] = []
    for cfg in scope.config_list(caps.pinned):
        try:
            factory(cfg)
        except WorkloadError as exc:
            refused.append((cfg, str(exc)))
            continue
        taken, refused_shapes = taken_shapes(factory, cfg, resolve_shapes(scope, cfg, factory, caps, deadline))
        configs.append(ConfigPlan(cfg, taken, refused_shapes))
    if not any(plan.shapes for plan in configs):
        why = refused[0][1] if refused else configs[0].refused[0][1] if configs and configs[0].refused else "no shape"
        raise WorkloadError(f"scope {scope.name}: the system takes no request of the scope on any of its configs, "
                            f"so exploring it would cover nothing (for example: {why})")
    # the configs in turn, each one's j-th first arrivals before any config's (j+1)-th, so that an exploration
    # cut short has met every config; the units with nothing before step 0 last (their workloads mostly repeat
    # the others later)
    firsts = [arrival_choices(scope, len(plan.shapes), 0)[1:] for plan in configs]
    units = tuple(Unit(c, ((arrivals[j], (), None),), scope.horizon) for j in range(max(map(len, firsts)))
                  for c, arrivals in enumerate(firsts) if j < len(arrivals))
    units += tuple(Unit(c, (NO_INPUTS,), scope.horizon) for c in range(len(configs)))
    return Plan(scope, tuple(configs), tuple(refused), units, caps)


def workload_plan(factory: SutFactory, scope: WorkloadScope, caps: Capabilities) -> Plan:
    """The plan of a workload scope: its config (WorkloadError if the system
    refuses it: nothing would be covered), its requests, and a unit per variant
    with every step's inputs fixed (`variant`)."""
    (cfg,) = scope.config_list(caps.pinned)
    factory(cfg)
    requests = scope.workload.requests
    index = {r.rid: i for i, r in enumerate(requests)}
    units = []
    for v in range(family_size(scope.workload, scope.spread)):
        shifted = variant(scope.workload, scope.spread, v).requests
        schedule = InputSchedule(shifted)
        horizon = 1 + max((max(r.arrival, r.abort_at or 0) for r in shifted), default=0)
        script = tuple((tuple(index[r.rid] for r in schedule.arrivals.get(t, ())), tuple(schedule.aborts.get(t, ())),
                        None) for t in range(horizon))
        units.append(Unit(0, script, horizon))
    return Plan(scope, (ConfigPlan(cfg, tuple(map(GivenRequest, requests))),), (), tuple(units), caps)


@dataclass
class Finding:
    """A property broken on one transition (or a cycle of the graph): the
    violation, the shortest workload that shows it, its trace, its unit, and
    when it was met: the seconds into the exploration at which its unit's search
    ended (where a search stops at its first finding, when it was met)."""

    violation: Violation
    workload: Workload
    trace: list[list[Event]]
    unit: int
    seconds: float | None = None


@dataclass
class Tally:
    """What a part of an exploration covered (parts add up: `add`)."""

    units: int = 0
    workloads: int = 0
    states: int = 0                     # distinct states explored on from (drained ones apart)
    drained_states: int = 0             # distinct states in which every request has finished, from the horizon on
    transitions: int = 0                # transitions judged: every input choice from every state
    edges: int = 0                      # distinct (state, next state) pairs among them
    steps: int = 0                      # system steps run, replays included
    judged: Counter = field(default_factory=Counter)    # check -> transitions it judged
    not_run: dict[str, str] = field(default_factory=dict)   # check -> why it did not run
    ignored: Counter = field(default_factory=Counter)   # signature -> transitions that met it (ignored)
    met: Counter = field(default_factory=Counter)       # signature -> transitions that met it (reported)
    longest_wait: int = 0               # steps a request waited, from its arrival, before its admission
    most_steps_to_drain: int = 0        # steps of a workload that drained
    most_blocks_held: int = 0
    merges_checked: int = 0             # merged states replayed and compared (`check_key`)
    complete: bool = True

    def add(self, other: Tally) -> None:
        for name in ("units", "workloads", "states", "drained_states", "transitions", "edges", "steps",
                     "merges_checked"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("longest_wait", "most_steps_to_drain", "most_blocks_held"):
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        self.judged.update(other.judged)
        self.ignored.update(other.ignored)
        self.met.update(other.met)
        for label, why in other.not_run.items():
            self.not_run.setdefault(label, why)
        self.complete = self.complete and other.complete


@dataclass
class Limits:
    """Where exploration stops with an incomplete result: states in all, a deadline
    (which also cuts a call into the system short), merged states to check
    (`check_key`; 0: none)."""

    max_states: int = 1_000_000
    deadline: Deadline | None = None
    check_key: int = 0
    max_depth: int | None = None   # explore no transition past this step (set once a finding bounds the search)

    def out_of_time(self) -> bool:
        return self.deadline is not None and self.deadline.over()


class UnitSearch:
    """Breadth-first search of one unit (see the module's doc)."""

    def __init__(self, factory: SutFactory, plan: Plan, unit: int, checks: CheckSet, limits: Limits,
                 tally: Tally, reported: dict[str, Finding], stop_at_first: bool,
                 progress: Callable[[Tally], None] | None = None, coverage: EdgeCoverage | None = None) -> None:
        self.factory, self.plan, self.unit, self.checks = factory, plan, unit, checks
        self.coverage = coverage   # measures the system's code edges in its verbs (benchmarks/reach.py)
        self.limits, self.tally, self.stop_at_first = limits, tally, stop_at_first
        self.reported = reported   # signature -> its first finding (shared by the units of a run)
        self.progress = progress
        self.script, self.horizon = plan.units[unit].script, plan.units[unit].horizon
        self.cfg = plan.configs[plan.units[unit].config].config
        self.shapes = plan.configs[plan.units[unit].config].shapes
        self.scope = plan.scope
        self.given = isinstance(plan.scope, WorkloadScope)   # the unit is a given workload's variant
        self.keyed = plan.capabilities.state_key
        self.paths: list[tuple[Inputs, ...]] = []
        self.counts: list[int] = []          # input sequences reaching each state (before the last input)
        self.ids: dict[str, int] = {}
        self.drained: set[str] = set()       # the keys of the drained states met
        self.edges: set[tuple[int, str]] = set()   # (state, key of the next state) of the transitions judged
        self.after: dict[int, int] = {}      # a state past the inputs -> its one successor (giving no stop token)
        self.live: OrderedDict[int, Driver] = OrderedDict()
        self.merges: list[tuple[tuple[Inputs, ...], int]] = []   # (inputs, state they merged into) to check

    # ----- running -----------------------------------------------------------------------
    def fresh(self) -> Driver:
        d = Driver(self.factory, self.cfg, self.checks.build(), coverage=self.coverage, deadline=self.limits.deadline)
        d.inputs_until = max(d.inputs_until, self.horizon - 1)   # (inputs are scheduled up to the horizon)
        return d

    def submit(self, d: Driver, inputs: Inputs) -> None:
        arrivals, aborted, stopping = inputs
        for s in arrivals:
            d.add(self.shapes[s].spec(f"r{len(d.specs) + len(d.refused)}"))
        for rid in aborted:
            d.abort(rid)
        if stopping is not None:
            d.stop_with(stopping)

    def replayed(self, path: tuple[Inputs, ...]) -> Driver:
        """A fresh system driven along `path` (judged before: any finding now is
        nondeterminism, an adapter fault)."""
        d = self.fresh()
        try:
            for inputs in path:
                self.submit(d, inputs)
                d.step()
        except (Violation, RunEnded) as exc:
            raise ProtocolError("runs are deterministic", f"replaying inputs {list(path)} on {self.cfg} met "
                                f"{exc} where the first run met nothing") from None
        self.tally.steps += len(path)
        return d

    def choices(self, d: Driver) -> list[Inputs]:
        """The inputs possible before the driver's next step: the unit's script,
        then (a `Scope`'s) every choice up to the horizon; in a workload scope
        on a system that lets the explorer choose stop tokens, with every
        choice of which requests with a stop token are given it."""
        if self.given:
            fixed = self.later(d.t)
            if not self.plan.capabilities.stop_choices:
                return [fixed]
            arrivals, aborted, _ = fixed
            arriving = [self.shapes[s].spec("") for s in arrivals]
            watched = sorted(r.rid for r in [*d.specs, *arriving] if r.stop_token is not None
                             and (r.rid not in d.view.requests or d.view.requests[r.rid].finish is None))
            return [(arrivals, aborted, frozenset(itertools.compress(watched, bits)))
                    for bits in itertools.product((False, True), repeat=len(watched))]
        if d.t < len(self.script) or d.t >= self.horizon:
            return [self.later(d.t)]
        submitted = len(d.specs) + len(d.refused)
        arrivals = arrival_choices(self.scope, len(self.shapes), submitted)
        aborts: list[tuple[str, ...]] = [()]
        if self.scope.aborts and self.plan.capabilities.abort:
            aborts += [(s.rid,) for s in d.specs if s.abort_at is None and d.view.requests[s.rid].finish is None]
        return [(a, x, None) for x in aborts for a in arrivals]

    def later(self, t: int) -> Inputs:
        """The inputs the unit fixes before step t (none past its script)."""
        return self.script[t] if t < len(self.script) else NO_INPUTS

    # ----- the search --------------------------------------------------------------------
    def run(self) -> None:
        """Explore the unit, adding what it finds to `reported` (stopping at the
        first finding with `stop_at_first`); a deadline that passes, even in a
        call into the system, leaves it incomplete."""
        self.tally.units += 1
        if self.given:
            self.tally.workloads += 1   # (a workload scope's unit is one workload, whatever the stop choices)
        try:
            self.search()
        except OutOfTime:
            self.tally.complete = False

    def search(self) -> None:
        root = self.fresh()
        self.paths.append(())
        self.counts.append(1)
        self.live[0] = root
        self.tally.states += 1
        queue = deque([0])
        while queue:
            StopRequest.check()
            if self.tally.states >= self.limits.max_states or self.limits.out_of_time():
                self.tally.complete = False
                break
            n = queue.popleft()
            path = self.paths[n]
            if self.limits.max_depth is not None and len(path) >= self.limits.max_depth:
                break   # (breadth first: every state left is as deep)
            at_n = self.live.pop(n, None)
            if at_n is None:
                at_n = self.replayed(path)
            options = self.choices(at_n)
            for i, inputs in enumerate(options):
                d = at_n if i == len(options) - 1 else self.replayed(path)
                m = self.transition(n, d, inputs)
                if m is not None:
                    queue.append(m)
                if self.reported and self.stop_at_first:
                    return
                if self.progress and self.tally.transitions % PROGRESS_EVERY == 0:
                    self.progress(self.tally)
        self.check_merges()

    def transition(self, n: int, d: Driver, inputs: Inputs) -> int | None:
        """Submit `inputs` to the system at state n (driven by `d`), step it and
        judge; the new state's number if it is new and has successors to explore,
        else None."""
        path = self.paths[n] + (inputs,)
        self.tally.transitions += 1
        self.tally.steps += 1
        try:
            self.submit(d, inputs)
            d.step()
            done = d.t >= self.horizon and d.drained()
            if done:
                d.finish()
            elif d.t >= self.scope.max_steps:
                d.finish(max_steps=d.t)   # (not drained by the scope's last step: a liveness finding)
        except Violation as v:
            self.found(Finding(v, d.workload(), d.trace, self.unit), n)
            return None
        except RunEnded as ended:   # (its message is the signature of the ignored finding that ended it)
            self.tally.ignored[str(ended)] += 1
            self.count_ended(n)
            return None
        self.judged(d)
        if d.t == self.horizon and not self.given:
            self.tally.workloads += self.counts[n]
        key = digest((d.obs.state_key, run_memory(d), min(d.t, self.horizon))) if self.keyed else digest(path)
        if (n, key) not in self.edges:
            self.edges.add((n, key))
            self.tally.edges += 1
        if done:
            self.tally.most_steps_to_drain = max(self.tally.most_steps_to_drain, d.t)
            if key not in self.drained:
                self.drained.add(key)
                self.tally.drained_states += 1
            return None
        m = self.ids.get(key)
        if m is not None:
            if d.t <= self.horizon:
                self.counts[m] += self.counts[n]
            self.merged(n, m, path)
            return None
        m = self.ids[key] = len(self.paths)
        self.paths.append(path)
        self.counts.append(self.counts[n] if d.t < self.horizon else 0)
        self.tally.states += 1
        if d.t > self.horizon and not inputs[2]:
            self.after[n] = m
        self.live[m] = d
        if len(self.live) > LIVE_LIMIT:
            self.live.popitem(last=False)
        return m

    def judged(self, d: Driver) -> None:
        """Tally what judged this transition and the worst cases it showed."""
        for label in {c.label for c in d.checks}:
            self.tally.judged[label] += 1
        for label, why in d.skipped.items():
            self.tally.not_run.setdefault(label, why)
        self.count_ignored(d, d.t - 1)
        waits = [d.t - r.spec.arrival for r in d.view.open.values() if r.status in (SUBMITTED, WAITING)]
        self.tally.longest_wait = max(self.tally.longest_wait, *waits, 0)
        self.tally.most_blocks_held = max(self.tally.most_blocks_held, d.obs.blocks_held)

    def count_ignored(self, d: Driver, since: int) -> None:
        """Count the ignored findings of `d`'s checks met at step `since` or later."""
        for _, v in ignored(d.checks):
            if v.step is not None and v.step >= since:
                self.tally.ignored[v.signature] += 1

    def count_ended(self, n: int) -> None:
        """A run ended at state n before the last input: its input sequences end there."""
        if len(self.paths[n]) < self.horizon and not self.given:
            self.tally.workloads += self.counts[n]

    def found(self, finding: Finding, n: int | None) -> None:
        """A finding: reported if its signature is new, counted either way (n: the
        state it was met from, whose input sequences end there)."""
        if n is not None:
            self.count_ended(n)
        signature = finding.violation.signature
        self.tally.met[signature] += 1
        self.reported.setdefault(signature, finding)

    def merged(self, n: int, m: int, path: tuple[Inputs, ...]) -> None:
        """The run from state n reached known state m: past the inputs, a cycle
        closes if m leads back to n (along steps that give no stop token: a
        stop finishes a request, which no cycle undoes); keep the merge for
        `check_key`."""
        if len(path) > self.horizon and not path[-1][2]:
            self.after[n] = m
            chain, at = [], m
            while at in self.after and at not in chain:
                chain.append(at)
                at = self.after[at]
            if at == m and n in chain:
                self.lasso(m)
        if len(self.merges) < self.limits.check_key:
            self.merges.append((path, m))

    def lasso(self, m: int) -> None:
        """The cycle through state m: its inputs replayed with every check on; what
        they report is the finding (an ignored one is counted)."""
        path = self.paths[m]
        d = self.replayed(path)
        workload = d.workload()
        cycle = 1
        at = self.after[m]
        while at != m:
            cycle, at = cycle + 1, self.after[at]
        run = run_workload(workload, self.factory, self.checks.build(), max_steps=len(path) + 2 * cycle + 4)
        self.tally.steps += run.driver.t
        if run.violation is not None:
            self.found(Finding(run.violation, workload, run.driver.trace, self.unit), None)
        elif ignored(run.driver.checks):   # (the cycle of an ignored finding: what it met past the path counted)
            self.count_ignored(run.driver, len(path))
        elif run.driver.ended_by is not None:
            self.tally.ignored[run.driver.ended_by.signature] += 1
        elif run.drained:
            raise ProtocolError("state_key identifies the whole scheduling state",
                                f"the explored states after inputs {list(path)} repeat every {cycle} steps, "
                                "but the run of those inputs drains")

    def check_merges(self) -> None:
        """Each kept merge: the runs of both input sequences, continued with the same
        inputs (every choice of the state, then none to the scope's last step),
        must show the same events and observations; else the key merged states
        that behave differently (ProtocolError: an adapter fault)."""
        for path, m in self.merges:
            StopRequest.check()
            first = self.replayed(self.paths[m])
            for inputs in self.choices(first):
                a, b = self.replayed(self.paths[m]), self.replayed(path)
                self.tally.merges_checked += 1
                for t in range(a.t, self.scope.max_steps):
                    step_inputs = inputs if t == a.t else self.later(t)
                    seen = [self.observed(d, step_inputs) for d in (a, b)]
                    differ = [name for name in seen[0] if seen[0][name] != seen[1][name]]
                    if differ:
                        name = differ[0]
                        raise ProtocolError(
                            "state_key identifies the whole scheduling state",
                            f"inputs {list(self.paths[m])} and {list(path)} reach one key, but with inputs "
                            f"{step_inputs} at step {t} the runs differ in {name}: {seen[0][name]!r:.300} vs "
                            f"{seen[1][name]!r:.300}")
                    if a.drained() and t >= self.horizon:
                        break

    def observed(self, d: Driver, inputs: Inputs) -> dict[str, object]:
        """One more step of `d` after `inputs`: its events and what it reports."""
        try:
            self.submit(d, inputs)
            events = d.step()
        except Violation as v:
            return {"finding": v.signature}
        except RunEnded:
            return {"ending": True}
        obs = d.obs
        return {"events": tuple(events), "blocks held": obs.blocks_held, "unfinished": obs.unfinished,
                "block tables": canonical(obs.block_tables),
                "outputs": tuple(sorted((rid, tuple(o.token_ids), o.finish_reason) for rid, o in obs.outputs.items()))}


@dataclass
class Result:
    """An exploration's (or a part's) tally and findings, in unit order."""

    tally: Tally
    findings: list[Finding]
    seconds: float
    units: list[int]


def explore_units(factory: SutFactory, plan: Plan, units: list[int], checks: CheckSet, limits: Limits,
                  keep_going: bool, progress: Callable[[int, int, Tally], None] | None = None,
                  coverage: EdgeCoverage | None = None) -> Result:
    """Explore `units` of the plan in order: with `keep_going`, every unit, each
    distinct signature reported once (its first in unit order); else the
    shortest finding of all (fewest steps, then the first unit): once one is
    found, the units after it are explored only to fewer steps. `progress(units
    done, units, tally)` is called now and then. `coverage`, if given, is
    entered around every call into the system (each run resets it)."""
    start = time.monotonic()
    tally = Tally()
    found: dict[str, Finding] = {}
    best: Finding | None = None
    with StopRequest.deferred():
        for done, unit in enumerate(units):
            if not tally.complete or (best is not None and shortest(best) <= 1):
                break   # (no unit has a shorter finding than one step)
            tick = (lambda t, done=done: progress(done, len(units), t)) if progress else None
            reported = found if keep_going else {}
            bound = limits if best is None else replace(limits, max_depth=shortest(best) - 1)
            UnitSearch(factory, plan, unit, checks, bound, tally, reported, not keep_going, tick, coverage).run()
            for finding in reported.values():
                if finding.seconds is None:
                    finding.seconds = round(time.monotonic() - start, 1)
            if not keep_going and reported:
                best = next(iter(reported.values()))
    findings = list(found.values()) if keep_going else [best] if best is not None else []
    return Result(tally, findings, time.monotonic() - start, units)


def shortest(finding: Finding) -> int:
    """The steps of the finding's input sequence (what breadth first minimises)."""
    return len(finding.trace)
