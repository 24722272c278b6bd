"""Liveness properties any LLM scheduler must keep: no livelock, no stall, a
request that can never fit is rejected, and (for schedulers that claim priority
preemption) a more urgent request does not wait behind less urgent work, nor is
it preempted for it."""

from __future__ import annotations

from collections.abc import Hashable

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.blocked import unblocked
from loopcheck.checks.needs import admission_blocks, lifetime_blocks, never_fits
from loopcheck.checks.pause import unpaused_steps
from loopcheck.model.config import Config
from loopcheck.model.events import Event, Finish, Preempt
from loopcheck.sut.protocol import Capabilities, Observation
from loopcheck.sut.view import FINISHED, PREEMPTED, RUNNING, WAITING, RequestView


class Progress(Check):
    """After the last input (known or scheduled), with requests unfinished: where
    the system reports a state key, a step with no event that leaves the state as
    it was is a stall, and any other repeated state a livelock; for any system,
    `stall_steps` steps in a row with no event at all are a stall."""

    props = ("stall", "livelock")

    def __init__(self, stall_steps: int = 3) -> None:
        self.stall_steps = stall_steps
        self.seen: dict[Hashable, int] = {}
        self.quiet = 0

    def on_input(self, run: RunView, kind: str, rid: str) -> None:
        self.seen.clear()
        self.quiet = 0

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        if run.drained() or run.t <= run.inputs_until:
            return
        key = obs.state_key
        if key is not None and run.caps.state_key:
            if not events and self.seen.get(key) == run.t - 1:
                self.broke(Violation("stall", f"nothing happens and nothing changes after step {run.t - 1}; "
                                              f"unfinished: {_names(run)}", {"start": run.t - 1, "length": 1},
                                     rule="state-repeats"))
            if key in self.seen:
                start = self.seen[key]
                self.broke(Violation("livelock", f"the state after step {run.t - 1} repeats the state after step "
                                                 f"{start - 1}; unfinished: {_names(run)}",
                                     {"start": start, "length": run.t - start}))
            self.seen[key] = run.t
        self.quiet = 0 if events else self.quiet + 1
        if self.quiet >= self.stall_steps:
            self.broke(Violation("stall", f"{self.quiet} steps in a row with no event; unfinished: {_names(run)}",
                                 rule="quiet-steps"))


class NeverFitRejected(Check):
    """A request that can never fit the pool (its lifetime positions need
    more blocks than there are) finishes, rejected, within `within` steps of its
    submission (steps the engine was paused not counted), instead of waiting or
    running on while it blocks others; a request that fits is never rejected."""

    props = ("never-fit-not-rejected", "fit-rejected")

    def __init__(self, within: int = 3) -> None:
        self.within = within
        self.submitted: dict[str, int] = {}   # unfinished requests that never fit -> submission step

    def on_input(self, run: RunView, kind: str, rid: str) -> None:
        if kind == "add" and never_fits(run.view.requests[rid].spec, run.cfg):
            self.submitted[rid] = run.t

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        cfg = run.cfg
        for e in events:
            spec = run.view.requests[e.rid].spec
            if isinstance(e, Finish) and e.reason == "rejected" and not never_fits(spec, cfg):
                self.broke(Violation("fit-rejected", f"{e.rid} was rejected although it needs "
                                                     f"{lifetime_blocks(spec, cfg)} of {cfg.num_blocks} blocks"))
        for rid, t in list(self.submitted.items()):
            r = run.view.requests[rid]
            if r.status == FINISHED:
                del self.submitted[rid]
                continue
            waited = unpaused_steps(cfg, t, run.t)
            if waited >= self.within:
                others = [x.spec.rid for x in run.view.unfinished() if x.spec.rid != rid]
                self.broke(Violation("never-fit-not-rejected",
                                     f"{rid} needs {lifetime_blocks(r.spec, cfg)} blocks, the pool has "
                                     f"{cfg.num_blocks}; still {r.status} {waited} steps "
                                     "after submission" + (" (the engine not paused)" if cfg.pause != "off" else "")
                                     + (f", with {', '.join(others)} unfinished" if others else "")))


class PriorityWaiting(Check):
    """For schedulers that claim priority preemption: the most urgent waiting
    request w, whose admission would fit in the blocks free at the start of the
    step (watermark included, no preemption needed for blocks), must not stay
    waiting for `within` steps in a row in which a request of strictly larger
    priority value ran and no request more urgent than w did. A request whose
    grammar is not compiled, or whose LoRA adapter is not among the max_loras
    ones the running requests use (those running as the step starts, and
    those that ran in it), is not waiting for the scheduler's choice and is
    passed over."""

    props = ("priority-inversion",)

    def __init__(self, within: int = 3) -> None:
        self.within = within
        self.streak: tuple[str, int] | None = None   # (request, qualifying steps in a row)
        self.free_before: int | None = None

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        if not caps.priorities:
            return "the system claims no priority preemption (capabilities.priorities)"
        return None if caps.kv else "the system reports no KV accounting (capabilities.kv)"

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        cfg, view = run.cfg, run.view
        free = cfg.num_blocks - obs.blocks_held
        free_before, self.free_before = (self.free_before if self.free_before is not None else cfg.num_blocks), free
        before = view.before
        running = set(view.worked) | {rid for rid, status in before.items() if status == RUNNING}
        loras = {view.requests[x].spec.lora for x in running} - {0}

        def may_run(r: RequestView) -> bool:   # unblocked (its grammar, its KV load, a pause) and by its LoRA adapter
            return unblocked(r, run.t - 1, cfg) and (r.spec.lora in loras | {0} or len(loras) < cfg.max_loras)

        waiting = [r for r in view.requests.values() if before.get(r.spec.rid) in (WAITING, PREEMPTED)
                   and r.status in (WAITING, PREEMPTED) and may_run(r)]
        if not waiting:
            self.streak = None
            return
        w = min(waiting, key=lambda r: r.spec.key)
        rid = w.spec.rid
        blocks = admission_blocks(w.spec, w.generated, cfg) + cfg.watermark_blocks
        more_urgent_ran = any(view.requests[x].spec.key < w.spec.key for x in view.worked)
        less_urgent_ran = [x for x in view.worked if view.requests[x].spec.priority > w.spec.priority]
        if not (blocks <= free_before and less_urgent_ran and not more_urgent_ran):
            self.streak = None
            return
        self.streak = (rid, self.streak[1] + 1 if self.streak and self.streak[0] == rid else 1)
        if self.streak[1] >= self.within:
            self.broke(Violation("priority-inversion",
                                 f"{rid} (priority {w.spec.priority}) waited {self.within} steps in a row while less "
                                 f"urgent {', '.join(sorted(less_urgent_ran))} ran, although it needs {blocks} blocks "
                                 f"and {free_before} were free"))


class PriorityVictims(Check):
    """For schedulers that claim priority preemption, under it: a request is not
    preempted for a strictly less urgent one (larger priority value), where the
    preemption names the request it was for."""

    props = ("priority-victim",)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.priorities else "the system claims no priority preemption (capabilities.priorities)"

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        if not run.cfg.priority_preemption:
            return
        requests = run.view.requests
        for e in events:
            by = e.by if isinstance(e, Preempt) else None
            if by is not None and requests[by].spec.priority > requests[e.rid].spec.priority:
                self.broke(Violation("priority-victim", f"{e}: {e.rid} (priority {requests[e.rid].spec.priority}) was "
                                                        f"preempted for less urgent {by} (priority "
                                                        f"{requests[by].spec.priority})"))


def _names(run: RunView) -> str:
    names = [r.spec.rid for r in run.view.unfinished()]
    return ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
