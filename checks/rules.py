"""The documented scheduling rules that events alone do not settle, checked on a
system's trace and its reported internals (docs/semantics.md): one victim per
turn, victim order, the bypass count and limit, the futility guard, CPU
snapshots."""

from __future__ import annotations

from collections import Counter
from typing import Any

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.needs import lifetime_blocks
from loopcheck.model.config import Config
from loopcheck.model.events import Event, Preempt
from loopcheck.sut.protocol import Capabilities, Internals, Observation
from loopcheck.sut.view import AFTER, PREEMPTED, RUNNING, SUBMITTED, WAITING

QUEUED = (WAITING, PREEMPTED)
NO_SEMANTICS = "the system does not claim loopcheck's semantics (capabilities.semantics)"


def turn_preemptions(events: list[Event], before: dict[str, str]) -> list[Preempt]:
    """The preemptions a step's waiting or preempted requests made on their turn
    (not a running request growing into pages): those whose requester, by the
    events so far in the step, is not running (a request preempted earlier in the
    step can preempt on its later turn)."""
    status = dict(before)
    out = []
    for e in events:
        if isinstance(e, Preempt) and e.by != e.rid and status.get(e.by, SUBMITTED) != RUNNING:
            out.append(e)
        status[e.rid] = AFTER.get(e.kind, status.get(e.rid, SUBMITTED))
    return out


class DocumentedRules(Check):
    """For systems that claim loopcheck's semantics, every step:

    - one victim per turn: a waiting or preempted request preempts at most one
      request in a step;
    - victim order: the least urgent eligible running request is preempted (for
      a running request growing into pages, and for a waiting one under the
      unguarded policy); under guarded, with upfront allocation and no prefix
      caching, no less urgent candidate than the victim holds at least its
      blocks (it would have passed the preflight too);
    - bypass limit: a fresh admission comes only while no request skipped earlier
      in the pass (a waiting or preempted request that the step leaves waiting or
      preempted, more urgent than the admitted one, not a request that preempted
      itself) has been bypassed `max_bypasses` times; each such request gains one
      bypass per fresh admission past it and goes back to 0 when admitted or
      resumed (the counts are folded from the events).

    Where the system reports its internals (capabilities.internals), also:
    - the reported bypass counts are those folded from the events;
    - the futility guard: a preemption whose requester the step does not admit
      adds a guard entry for that requester (under guarded; a repeat at a budget
      the guard holds adds none, and is the futile repetition the guard forbids);
      entries appear only so, and those of a request go exactly when it is
      admitted or resumed; the unguarded policy keeps none;
    - CPU snapshots: with snapshots on, exactly the preempted requests hold one;
      without, none does (so nothing is held by a finished request)."""

    props = ("one-victim", "bypass-limit", "bypass-count", "futility-guard", "snapshots")

    def __init__(self) -> None:
        self.bypasses: Counter[str] = Counter()
        self.internals: Internals = Internals()

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.semantics == "loopcheck" else NO_SEMANTICS

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        view, cfg = run.view, run.cfg
        before = view.before
        self._one_victim_per_turn(events, before)
        self._fold_bypasses(run, events, before)
        if not run.caps.internals:
            return
        now = run.internals()
        status = {rid: r.status for rid, r in view.open.items()}
        queued = {rid for rid, s in status.items() if s in QUEUED}
        counted = {rid: self.bypasses[rid] for rid in queued}
        told = {rid: now.bypasses.get(rid, 0) for rid in queued}
        if counted != told:
            wrong = sorted(rid for rid in queued if counted[rid] != told[rid])
            self.broke(Violation("bypass-count", "bypass counts reported " + ", ".join(
                     f"{rid}={told[rid]}" for rid in wrong) + ", documented " + ", ".join(
                     f"{rid}={counted[rid]}" for rid in wrong)))
        self._guard(events, before, self.internals.guard, now.guard, cfg)
        preempted = {rid for rid, s in status.items() if s == PREEMPTED} if cfg.snapshots else set()
        if set(now.snapshots) != preempted:
            extra, missing = sorted(set(now.snapshots) - preempted), sorted(preempted - set(now.snapshots))
            mode = "on" if cfg.snapshots else "off"
            self.broke(Violation("snapshots", f"CPU snapshots held by {', '.join(extra) or 'nobody else'}, missing for "
                                              f"{', '.join(missing) or 'nobody'} (snapshots {mode}: exactly the "
                                              "preempted requests hold one)"))
        self.internals = now

    def _one_victim_per_turn(self, events: list[Event], before: dict[str, str]) -> None:
        turns = Counter(e.by for e in turn_preemptions(events, before))
        for by, count in turns.items():
            if count > 1:
                self.broke(Violation("one-victim", f"{by} preempted {count} requests in one step; a waiting request "
                                                   "preempts one victim per turn"))

    def _fold_bypasses(self, run: RunView, events: list[Event], before: dict[str, str]) -> None:
        view, limit = run.view, run.cfg.max_bypasses
        came_in = {e.rid for e in events if e.kind in ("admit", "resume")}
        self_preempted = {e.rid for e in events if isinstance(e, Preempt) and e.by == e.rid}
        skipped = sorted((view.requests[rid].spec.key, rid) for rid, r in view.open.items()
                         if r.status in QUEUED and rid not in came_in and rid not in self_preempted)
        for rid in came_in:
            self.bypasses.pop(rid, None)
        admitted = sorted((view.requests[e.rid].spec.key, e.rid) for e in events if e.kind == "admit")
        for key, rid in admitted:
            passed = [p for k, p in skipped if k < key]
            full = [p for p in passed if self.bypasses[p] >= limit]
            if full:
                self.broke(Violation("bypass-limit", f"{rid} was admitted past {full[0]}, which had been bypassed "
                                                     f"{self.bypasses[full[0]]} times (max_bypasses {limit})"))
            self.bypasses.update(passed)
        for rid in [rid for rid in self.bypasses if view.requests[rid].status not in QUEUED]:
            del self.bypasses[rid]

    def _guard(self, events: list[Event], before: dict[str, str], old: frozenset[tuple[str, int]],
               new: frozenset[tuple[str, int]], cfg: Config) -> None:
        came_in = {e.rid for e in events if e.kind in ("admit", "resume")}
        futile = {e.by for e in turn_preemptions(events, before) if e.by not in came_in}
        added = Counter(rid for rid, _ in new - old)
        guarded = cfg.priority_preemption and cfg.preemption_policy == "guarded"
        for rid in sorted(futile):
            if guarded and not added[rid]:
                self.broke(Violation("futility-guard", f"{rid} preempted and was not admitted, and its guard got "
                                                       "no new entry: a futile preemption at a budget the guard "
                                                       "already held, or one the guard did not record",
                                     rule="futile-unrecorded"))
        for rid in sorted(set(added) - futile):
            self.broke(Violation("futility-guard", f"the guard got entry {sorted(new - old)} for {rid}, which made no "
                                                   "futile preemption in this step", rule="entry-without-futility"))
        for rid, budget in sorted(new):
            if rid in came_in:
                self.broke(Violation("futility-guard",
                                     f"{rid} was admitted but its guard entry ({rid}, {budget}) stays",
                                     rule="entry-stays"))
        for rid, budget in sorted(old - new):
            if rid not in came_in:
                self.broke(Violation("futility-guard", f"guard entry ({rid}, {budget}) was dropped, but {rid} was not "
                                                       "admitted or resumed", rule="entry-dropped"))
        if new and not guarded:
            self.broke(Violation("futility-guard", f"the {cfg.preemption_policy} policy keeps guard entries: "
                                                   f"{sorted(new)}", rule="policy-keeps-entries"))


class VictimOrders(Check):
    """Each preemption picks the victim the system's claimed order picks: for a
    system with loopcheck's semantics, the order of docs/semantics.md (below);
    for another, the `VictimOrder` its capabilities claim for the requests it
    retracts (preemptions naming no requester): no candidate it kept has a
    larger key than one it preempted."""

    props = ("victim-order",)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        if caps.semantics == "loopcheck" or caps.victim_order is not None:
            return None
        return "the system claims no victim order (capabilities.victim_order)"

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        wrong = (self._documented(run, events, run.view.before) if run.caps.semantics == "loopcheck"
                 else self._claimed(run, events))
        if wrong:
            self.broke(Violation("victim-order", wrong))

    @staticmethod
    def _claimed(run: RunView, events: list[Event]) -> str | None:
        """The first victim the claimed order would have kept, said (None: none)."""
        order = run.caps.victim_order
        assert order is not None
        view, before = run.view, run.view.before
        tokens = {}   # each request's tokens when the step started
        for e, had in zip(events, view.tokens_before, strict=True):
            tokens.setdefault(e.rid, had)
        aborted = {e.rid for e in events if e.kind == "abort"}
        candidates = {rid for rid, status in before.items() if status == RUNNING and rid not in aborted
                      and tokens.get(rid, view.requests[rid].generated) >= 1}
        retracted = [e.rid for e in events if isinstance(e, Preempt) and e.by is None and e.rid in candidates]
        if not retracted:
            return None

        def key(rid: str) -> Any:
            spec = view.requests[rid].spec
            return order.key(len(spec.prompt), tokens.get(rid, view.requests[rid].generated), spec.priority)

        for victim in retracted:
            above = [rid for rid in sorted(candidates - set(retracted)) if key(rid) > key(victim)]
            if above:
                return (f"{victim} (key {key(victim)}) was preempted while {above[0]} (key {key(above[0])}) was "
                        f"kept: {order.source} preempts larger keys first")
        return None

    @staticmethod
    def _documented(run: RunView, events: list[Event], before: dict[str, str]) -> str | None:
        """The least urgent eligible running request is the victim: for a running
        request growing, the one with the largest key above its own (else itself);
        for a waiting one under the unguarded policy, the one with the largest key
        among those of a larger priority value. (Every such request is visited
        after the requester, so none is in the batch yet.) Under guarded, the
        victim is the least urgent one the preflight passes; with upfront
        allocation and no prefix caching a candidate holding at least the
        victim's blocks passes whenever the victim does, so no less urgent
        candidate may hold that many. The first victim that breaks it, said
        (None: none)."""
        cfg = run.cfg
        spec = {rid: r.spec for rid, r in run.view.requests.items()}
        unguarded = cfg.preemption_policy == "unguarded"
        exact_blocks = cfg.allocation == "upfront" and not cfg.prefix_caching
        status = dict(before)
        for e in events:
            by = e.by if isinstance(e, Preempt) else None
            if by is not None and by in spec:
                running = [rid for rid, s in status.items() if s == RUNNING and rid != by]
                if status.get(by) == RUNNING:
                    eligible = [rid for rid in running if spec[rid].key > spec[by].key]
                    expected = max(eligible, key=lambda rid: spec[rid].key) if eligible else by
                elif unguarded:
                    eligible = [rid for rid in running if spec[rid].priority > spec[by].priority]
                    expected = max(eligible, key=lambda rid: spec[rid].key) if eligible else None
                else:
                    expected = e.rid
                    if exact_blocks:
                        need = lifetime_blocks(spec[e.rid], cfg)
                        passed_over = [rid for rid in running if spec[rid].priority > spec[by].priority
                                       and spec[rid].key > spec[e.rid].key and lifetime_blocks(spec[rid], cfg) >= need]
                        expected = max(passed_over, key=lambda rid: spec[rid].key) if passed_over else e.rid
                if e.rid != expected:
                    return f"{e}: the least urgent eligible running request is {expected}, not {e.rid}"
            status[e.rid] = AFTER.get(e.kind, status.get(e.rid, SUBMITTED))
        return None
