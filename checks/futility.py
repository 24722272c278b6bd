"""The guarded policy's promise about futile preemptions, read from the trace."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.rules import turn_preemptions
from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.sut.protocol import Capabilities, Observation
from loopcheck.sut.view import RUNNING


class GuardedFutility(Check):
    """Under the guarded policy (docs/semantics.md), a waiting request preempts only
    after the preflight says it then fits; the preflight is exact except that it
    counts as hits the prompt pages that other running requests hold but have not
    published yet. So a futile preemption (its requester not admitted in the same
    step) needs prefix caching and a request running in that step, other than the
    victim, whose prompt starts with the requester's first page. Any other futile
    preemption is one the preflight should have refused (a watermark or a page it
    counted wrongly)."""

    props = ("futile-preemption",)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        if caps.semantics != "loopcheck":
            return "the system does not claim loopcheck's guarded preflight (capabilities.semantics)"
        if not (cfg.priority_preemption and cfg.preemption_policy == "guarded"):
            return "only the guarded policy promises preflight-checked preemptions"
        return None

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        came_in = {e.rid for e in events if e.kind in ("admit", "resume")}
        if not any(e.kind == "preempt" for e in events):
            return
        view, bs = run.view, run.cfg.block_size
        before = view.before
        futile = [e for e in turn_preemptions(events, before) if e.by not in came_in]
        running = {rid for rid, status in before.items() if status == RUNNING} | came_in
        for e in futile:
            by = e.by
            head = view.requests[by].spec.prompt[:bs]
            sharers = [rid for rid in running - {by, e.rid}
                       if len(view.requests[rid].spec.prompt) >= bs and view.requests[rid].spec.prompt[:bs] == head]
            if not (run.cfg.prefix_caching and len(view.requests[by].spec.prompt) > bs and sharers):
                self.broke(Violation("futile-preemption", f"{e}: the guarded policy preempted {e.rid} for {by}, "
                                                          "which was not admitted in the same step, and no pending "
                                                          "prefix pages explain it"))
