"""Window-directed generation: workloads chosen for the rare scheduler windows
their reference-model run opens.

Random workloads seldom reach the states where the subtle rules act: a futile
preemption and the guard that stops its repetition, a bypass count reaching its
limit or counted again after an admission, an abort of a preempted request, a
victim that shares prefix pages. The model is cheap to run, so a round draws many
candidate workloads (Hypothesis, seeded), runs each on the model, reads which
windows it opens, adds trace-guided variants (an abort placed on a step where the
model has the request preempted), and hands the system under test only the
candidates whose rarest window was seen least so far. Rounds are deterministic for a
seed and round number.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from loopcheck.checks.needs import lifetime_blocks
from loopcheck.fuzz.hypothesis_constants import no_local_constants
from loopcheck.fuzz.shrink import with_request
from loopcheck.fuzz.strategies import DEFAULT_SHAPE, OFF, ON, VOCAB, Shape, workloads
from loopcheck.model.config import Config
from loopcheck.model.events import Preempt, Resume
from loopcheck.model.reference import never_fits
from loopcheck.model.simulate import model_steps
from loopcheck.model.state import PREEMPTED, RUNNING, WAITING, SchedState
from loopcheck.model.workload import RequestSpec, Workload

WINDOWS = ("preempt+futile", "guard+recorded", "guard+held", "guard+cleared", "guard+after-clear", "bypass+limit",
           "bypass+again", "abort+preempted", "preempt+shared-pages", "victim+skipped", "resume+restore",
           "preempt+again")
MAX_POOL = 256     # pool sizes tried stay small: contention, and fast runs
MAX_STEPS = 200    # model steps read per candidate
FOLLOW_UPS = 4     # variants drawn after each readmission moment
MAX_FOLLOW_UPS = 48   # readmission variants run on the model per round (they multiply the round's cost)
STEPS_PER_ROUND = 25_000   # model steps a round may spend reading windows (a work bound: same seed, same round)


@dataclass
class Moments:
    """Places in a model run where an added input opens a window: (request, step)
    where a request starts a step preempted; (request, step, first, end) where a
    running request holds prompt pages first..end-1 privately, not yet published
    (the ones before are); steps where a waiting request is skipped while another
    is admitted; (request, step) where a request's admission dropped its guard
    entries or reset its bypass count (what it does when it waits again is a
    rare window)."""

    preempted: list[tuple[int, int]] = field(default_factory=list)
    prefilling: list[tuple[int, int, int, int]] = field(default_factory=list)
    skipping: list[int] = field(default_factory=list)
    readmitted: list[tuple[int, int]] = field(default_factory=list)
    states: dict[int, SchedState] = field(default_factory=dict)   # the state at the start of each step


def windows_of(w: Workload) -> tuple[Counter, Moments]:
    """The windows the model's run of `w` opens (with counts), and its moments."""
    cfg, rid = w.config, {r.rid: i for i, r in enumerate(w.requests)}
    opened: Counter = Counter()
    moments = Moments()
    reset: set[int] = set()          # requests whose bypass count went back to 0 on admission
    ever_preempted: set[int] = set()
    cleared: set[int] = set()        # requests whose guard entries were dropped on admission
    for before, events, after in model_steps(w, MAX_STEPS):
        came_in = {rid[e.rid] for e in events if e.kind in ("admit", "resume")}
        holders = dict(before.cache)
        for e in events:
            i = rid[e.rid]
            if isinstance(e, Preempt) and before.reqs[rid[e.by]].status != RUNNING:   # for a waiting request
                by = rid[e.by]
                opened["preempt+futile"] += by not in came_in
                opened["preempt+again"] += i in ever_preempted
                opened["guard+after-clear"] += by in cleared
                ever_preempted.add(i)
                opened["preempt+shared-pages"] += any(p is not None and holders.get(p, 0) > 1
                                                      for p in before.reqs[i].pages)
                less_urgent = [j for j, r in enumerate(before.reqs) if r.status == RUNNING
                               and w.requests[j].priority > w.requests[by].priority]
                opened["victim+skipped"] += bool(less_urgent) and i != max(less_urgent,
                                                                            key=lambda j: w.requests[j].key)
            elif e.kind == "abort" and before.reqs[i].status == PREEMPTED:
                opened["abort+preempted"] += 1
            elif isinstance(e, Resume) and e.restored > 0:
                opened["resume+restore"] += 1
        opened["guard+recorded"] += len(after.guard - before.guard)
        opened["guard+held"] += sum(1 for i, budget in before.guard
                                    if before.reqs[i].status in (WAITING, PREEMPTED) and i not in came_in
                                    and before.free_count(cfg.planes) == budget)
        opened["guard+cleared"] += sum(1 for i, _ in before.guard if i in came_in)
        for i in sorted({i for i, _ in before.guard if i in came_in}):
            cleared.add(i)
            moments.readmitted.append((i, after.step))
        for i, (r0, r1) in enumerate(zip(before.reqs, after.reqs, strict=True)):
            if r0.bypasses > 0 and r1.bypasses == 0:
                reset.add(i)
                moments.readmitted.append((i, after.step))
            elif r1.bypasses > r0.bypasses and i in reset:
                opened["bypass+again"] += 1
            if r1.status == WAITING and r1.bypasses >= cfg.max_bypasses > r0.bypasses:
                opened["bypass+limit"] += 1
            if r1.status == PREEMPTED:
                moments.preempted.append((i, after.step))
            pending = [k for k, p in enumerate(r1.pages)
                       if p is None and (k + 1) * cfg.block_size <= len(w.requests[i].prompt)]
            if r1.status == RUNNING and pending and cfg.prefix_caching:
                moments.prefilling.append((i, after.step, pending[0], pending[-1] + 1))
        if came_in and any(r.status == WAITING for r in after.reqs):
            moments.skipping.append(after.step)
        moments.states[after.step] = after
    return +opened, moments


def variants(w: Workload, moments: Moments, rng: random.Random, shape: Shape = DEFAULT_SHAPE) -> list[Workload]:
    """Trace-guided variants, each aimed at a rule: an abort of a request while
    it is preempted; a more urgent request arriving while another still prefills
    pages of the prompt it shares (the preflight's pending-prefix estimate); a
    burst of small less urgent requests while one waits (bypass counting). Only
    what `shape` allows: no aborts when off, priorities only when on."""
    out: list[Workload] = []
    varied = shape.priorities == ON
    if moments.preempted and shape.aborts == ON:
        i, t = rng.choice(moments.preempted)
        out.append(with_request(w, i, replace(w.requests[i], abort_at=t)))
    for j, t, first, end in rng.sample(moments.prefilling, min(3, len(moments.prefilling))):
        shared = rng.randint(first + 1, end)
        follower = sized_arrival(w, moments.states[t], j, shared, shared - first, rng, varied)
        if follower is not None:
            out.append(_added(w, follower))
    if moments.states and varied:
        t = rng.choice(sorted(moments.states))
        arrival = sized_arrival(w, moments.states[t], None, 0, 0, rng, varied)
        if arrival is not None:
            out.append(_added(w, arrival))
    if moments.skipping:
        t = rng.choice(moments.skipping)
        calm = max(r.priority for r in w.requests) + 1 if varied else w.requests[0].priority
        small = [RequestSpec(f"r{len(w.requests) + k}", (rng.randrange(VOCAB),), 1, arrival=t + k, priority=calm)
                 for k in range(rng.randint(2, 4))]
        out.append(_added(w, *small))
    return out


def readmission_variants(w: Workload, moments: Moments, rng: random.Random, shape: Shape) -> list[Workload]:
    """After up to two moments where a request's admission dropped its guard
    entries or reset its bypass count, FOLLOW_UPS variants each with follow-up
    arrivals (`follow_ups`)."""
    picked = rng.sample(moments.readmitted, min(2, len(moments.readmitted)))
    return [_added(w, *follow_ups(w, moments.states[t], i, rng, shape.priorities == ON))
            for i, t in picked for _ in range(FOLLOW_UPS)]


def follow_ups(w: Workload, state: SchedState, i: int, rng: random.Random, varied: bool) -> list[RequestSpec]:
    """Requests arriving within a few steps after `state`'s step, where request i
    was just admitted: one more urgent than i, sized to fit only if i's pages
    are freed (it can push i back to preempted), then one or two small less
    urgent ones, each at most i's size (they can be admitted past i, and i can
    preempt them)."""
    cfg, bs, t = w.config, w.config.block_size, state.step
    base, held = w.requests[i].priority, max(1, len(state.reqs[i].pages))
    spare = max(0, state.free_count(cfg.planes) - cfg.watermark_blocks) // cfg.planes
    pages = rng.randint(spare + 1, spare + held)
    prompt = tuple(rng.randrange(VOCAB) for _ in range(max(1, pages * bs - rng.randrange(bs))))
    urgent_at = t + rng.randint(0, 2)
    out = [RequestSpec(f"r{len(w.requests)}", prompt, 1, arrival=urgent_at, priority=base - 1 if varied else base)]
    for k in range(rng.randint(1, 2)):
        small = tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, bs * held)))
        out.append(RequestSpec(f"r{len(w.requests) + 1 + k}", small, rng.randint(1, 4),
                               arrival=urgent_at + rng.randint(1, 3), priority=base + 1 if varied else base))
    return out


def sized_arrival(w: Workload, state: SchedState, src: int | None, shared: int, pending: int,
                  rng: random.Random, varied: bool) -> RequestSpec | None:
    """A request arriving at `state`'s step, more urgent than every running
    request, sized so that its admission turns on a rule of the guarded preflight.
    With `src`, it shares the first `shared` pages of running request src's
    prompt, `pending` of them not yet published: it fits after preempting the least
    urgent other running request only if those pending pages count as hits, which
    the preflight assumes and admission does not (a futile preemption). Without
    `src`, its prompt is its own and it fits only if the victim's pages shared
    with other requests were freed, which they are not. (Upfront allocation: the
    admission need is the whole lifetime, so the sizes decide.)"""
    cfg, bs, planes = w.config, w.config.block_size, w.config.planes
    if cfg.allocation != "upfront":
        return None
    running = [k for k, r in enumerate(state.reqs) if r.status == RUNNING]
    victims = [k for k in running if k != src]
    if not victims:
        return None
    victim = max(victims, key=lambda k: w.requests[k].key)
    holders = dict(state.cache)
    sole = sum(1 for p in state.reqs[victim].pages if p is None or holders.get(p) == 1)
    spare = (state.free_count(planes) - cfg.watermark_blocks) // planes + sole   # pages once the victim is gone
    if src is None:
        shared_with_others = len(state.reqs[victim].pages) - sole
        if not shared_with_others:
            return None
        total = spare + rng.randint(1, shared_with_others)    # fits only if those pages were freed too
        head: tuple[int, ...] = ()
    else:
        total = spare + (shared - pending) + rng.randint(1, pending)   # fits only with the pending hits
        head = w.requests[src].prompt[:shared * bs]
    if total < shared + 1 or total * planes > cfg.num_blocks:
        return None
    prompt = head + tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, bs) + (0 if head else bs * (total - 1))))
    prompt = prompt[:total * bs]
    urgent = min(w.requests[k].priority for k in running) - 1 if varied else w.requests[0].priority
    return RequestSpec(f"r{len(w.requests)}", prompt, total * bs - len(prompt) + 1, arrival=state.step,
                       priority=urgent)


def pool_sizes(w: Workload, count: int = 12) -> list[Workload]:
    """Copies of `w` with the `count` tightest pools, page by page, from the
    largest request's lifetime need plus the watermark: where contention decides
    what the scheduler does."""
    cfg = w.config
    needs = [n for n in (lifetime_blocks(r, cfg) for r in w.requests) if n <= cfg.num_blocks]
    if not needs:
        return []
    low = max(needs) + cfg.watermark_blocks
    sizes = [low + k * cfg.planes for k in range(count)]
    return [Workload(replace(cfg, num_blocks=n), w.requests) for n in sizes if n <= MAX_POOL and n != cfg.num_blocks]


def _added(w: Workload, *specs: RequestSpec) -> Workload:
    return Workload(w.config, w.requests + specs)


def draw_workloads(strategy: st.SearchStrategy[Workload], seed: int, count: int) -> list[Workload]:
    """`count` workloads drawn from a strategy, the same for the same seed."""
    drawn: list[Workload] = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(w: Workload) -> None:
        drawn.append(w)

    collect._hypothesis_internal_use_seed = seed
    with no_local_constants():
        collect()
    return drawn


def window_workloads(configs: st.SearchStrategy[Config], max_prompt: int,
                     shape: Shape = DEFAULT_SHAPE) -> st.SearchStrategy[Workload]:
    """Workloads shaped to open windows: up to 8 requests arriving in bursts over
    a few steps, prompts up to twice the usual length, sharing prefixes of up to
    `max_prompt` tokens (so prefill spans steps while others hit its pages)."""
    return workloads(configs, max_requests=8, shape=shape, max_prompt=2 * max_prompt, max_tokens=6, max_arrival=4,
                     max_prefix=max(2, max_prompt))


class Director:
    """Rounds of window-directed candidates, drawn in equal shares from each
    config strategy given; `seen` counts the windows opened by the candidates
    handed out so far (each window once per candidate)."""

    def __init__(self, configs: list[st.SearchStrategy[Config]], max_prompt: int, seed: int,
                 shape: Shape = DEFAULT_SHAPE, per_round: int = 60, runs: int = 12) -> None:
        self.strategies = [window_workloads(c, max_prompt, shape) for c in configs]
        self.shape = shape
        self.seed, self.per_round, self.runs, self.round = seed, per_round, runs, 0
        self.rng = random.Random(seed)
        self.seen: Counter = Counter()

    def next_round(self, deadline: float | None = None) -> list[tuple[Workload, Counter]]:
        """The candidates of the next round to run on the system, with the windows
        each opens: of the drawn workloads, their trace-guided variants, each at
        the tightest pools, and the readmission variants of the first of those
        (MAX_FOLLOW_UPS in all), the `runs` whose rarest window has been seen
        least (ties in draw order). Drawn workloads stop being read once the
        round has spent STEPS_PER_ROUND model steps on windows. Past the
        `deadline` (time.monotonic()) it stops and returns none: a round is
        either whole or not run."""
        share = -(-self.per_round // len(self.strategies))
        drawn = [w for k, strategy in enumerate(self.strategies)
                 for w in draw_workloads(strategy, self.seed * 7919 + self.round * 31 + k, share)]
        self.round += 1
        found: list[tuple[Workload, Counter]] = []
        follow_ups_left, steps_left = MAX_FOLLOW_UPS, STEPS_PER_ROUND

        def read(w: Workload) -> tuple[Counter, Moments]:
            nonlocal steps_left
            opened, moments = windows_of(w)
            steps_left -= len(moments.states)
            return opened, moments

        def kept(w: Workload) -> bool:   # the shape may promise only requests that fit the pool
            return self.shape.oversized != OFF or not any(never_fits(r, w.config) for r in w.requests)

        for w in drawn:
            if deadline is not None and time.monotonic() >= deadline:
                return []
            if steps_left <= 0:
                break
            opened, moments = read(w)
            for variant in [w] + variants(w, moments, self.rng, self.shape):
                for candidate in filter(kept, [variant] + pool_sizes(variant)):
                    windows, later = (opened, moments) if candidate is w else read(candidate)
                    extra = readmission_variants(candidate, later, self.rng, self.shape) if follow_ups_left > 0 else []
                    follow_ups_left -= len(extra)
                    extra = list(filter(kept, extra))
                    found += [(c, o) for c, o in [(candidate, windows)] + [(f, read(f)[0]) for f in extra] if o]
        chosen = []
        for _ in range(min(self.runs, len(found))):
            best = min(range(len(found)), key=lambda k: min(self.seen[name] for name in found[k][1]))
            candidate, windows = found.pop(best)
            self.seen.update(windows.keys())
            chosen.append((candidate, windows))
        return chosen
