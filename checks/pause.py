"""An operator's pause of the engine (the config's `pause` fields, the "pause"
feature): what may be scheduled while it lasts, and which requests it holds
back, so that the liveness rules do not count those steps against the system."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.model.config import Config
from loopcheck.model.events import Admit, Draft, Event, Finish, Load, Preempt, Prefill, Publish, Resume, Rewind, Token
from loopcheck.sut.protocol import Observation
from loopcheck.sut.view import RUNNING, RequestView

# what a step paused "all" has none of
_SCHEDULED = (Admit, Resume, Load, Preempt, Rewind, Prefill, Token, Draft, Publish)


def held_by_pause(r: RequestView, mode: str | None) -> bool:
    """Whether a waiting or preempted request `r` may not be admitted or resumed
    under the pause `mode` of a step: under "all" none may; under "new" only
    one holding KV blocks, those of a KV load it started (`RequestView.load`)."""
    return mode == "all" or (mode == "new" and r.load is None)


def unpaused_steps(cfg: Config, start: int, end: int) -> int:
    """The steps from `start` to `end` (excluded) in which the engine was not paused."""
    return sum(cfg.paused(step) is None for step in range(start, end))


class Pauses(Check):
    """While the engine is paused "all", nothing is scheduled: no request is
    admitted, resumed or preempted, none starts a KV load, does work or
    publishes a page. While it is paused "new", the running requests go on
    (`quiet` steps in a row with requests running at their start in which
    nothing is scheduled are a hold, as they would be a stall unpaused) and a
    request holding KV blocks (its load started) may be admitted, but no other
    is admitted or resumed and no KV load starts. (Arrivals, aborts and
    rejections come as in any step, and under async scheduling the tokens of
    the batch scheduled before.)"""

    props = ("pause",)

    def __init__(self, quiet: int = 3) -> None:
        self.quiet = quiet
        self.held = 0   # steps in a row paused "new" with requests running and nothing scheduled
        self.loaded: set[str] = set()   # the requests holding the blocks of a KV load they started, before the step

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        step, mode = run.t - 1, run.cfg.paused(run.t - 1)
        holding = set(self.loaded)
        for e in events:
            if isinstance(e, Load):
                self.loaded.add(e.rid)
            elif isinstance(e, (Preempt, Finish)):
                self.loaded.discard(e.rid)
        if mode is None:
            self.held = 0
            return
        running = sorted(rid for rid, status in run.view.before.items() if status == RUNNING)
        worked = any(isinstance(e, _SCHEDULED) for e in events)
        self.held = self.held + 1 if mode == "new" and running and not worked else 0
        if self.held >= self.quiet:
            self.broke(Violation("pause", f"nothing was scheduled in {self.held} steps in a row up to step {step} "
                                          f"while the engine is paused (new), though {', '.join(running)} ran",
                                 rule="running-held"))
        for e in events:
            late = run.cfg.async_scheduling and isinstance(e, Token)   # (the output of a batch before the pause)
            if mode == "all" and isinstance(e, _SCHEDULED) and not late:
                self.broke(Violation("pause", f"{e} at step {step}, while the engine is paused (all) from step "
                                              f"{run.cfg.pause_at} to {run.cfg.pause_end - 1}", rule="scheduled"))
            new = isinstance(e, Load) or (isinstance(e, (Admit, Resume)) and e.rid not in holding)
            if mode == "new" and new:
                self.broke(Violation("pause", f"{e} at step {step}, while the engine is paused (new) from step "
                                              f"{run.cfg.pause_at} to {run.cfg.pause_end - 1}: {e.rid} holds no KV "
                                              "blocks", rule="admitted"))
