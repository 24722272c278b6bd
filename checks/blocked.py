"""Requests blocked on something outside the scheduler: a structured-output
grammar still compiling, a KV load from an external store still in flight.
While blocked a request gets no work; once unblocked, a request that fits the
pool is not left waiting beside an idle system."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.needs import lifetime_blocks
from loopcheck.checks.pause import held_by_pause
from loopcheck.model.config import Config
from loopcheck.model.events import Admit, Event, Load, Prefill, Resume, Token
from loopcheck.sut.protocol import Observation
from loopcheck.sut.view import PREEMPTED, WAITING, RequestView


def unblocked(r: RequestView, step: int, cfg: Config) -> bool:
    """Whether `r` waits (or is preempted) and nothing outside the scheduler
    keeps it from running in step `step`: its grammar, if any, is compiled,
    its KV load, if any, has ended, and no pause of the engine holds it back."""
    ready = r.spec.ready_at()
    return (r.status in (WAITING, PREEMPTED) and ready is not None and ready <= step
            and (r.load is None or r.load.ended(step)) and not held_by_pause(r, cfg.paused(step)))


class IdleBeside:
    """Per unblocked request still waiting, the steps in a row in which no
    request computed and no KV load was in flight (a load may hold the blocks
    it needs; `within` of them break the rule: one step is allowed for a
    scheduler that looks for unblocked requests after its pass)."""

    def __init__(self, within: int) -> None:
        self.within = within
        self.idle: dict[str, int] = {}   # an unblocked, still waiting request -> idle steps in a row beside it

    def count(self, run: RunView, unblocked: list[RequestView]) -> list[tuple[str, int]]:
        """Count this step for `unblocked` (waiting requests, blocked no more)
        that fit the pool; those that reached `within`, with their count."""
        fits = [r for r in unblocked if lifetime_blocks(r.spec, run.cfg) <= run.cfg.num_blocks]
        idle = not run.view.worked and not run.view.loading(run.t - 1)
        self.idle = {r.spec.rid: self.idle.get(r.spec.rid, 0) + 1 for r in fits if idle}
        return [(rid, steps) for rid, steps in self.idle.items() if steps >= self.within]


class Grammars(Check):
    """A structured-output request (`RequestSpec.grammar_ready`) gets no token
    before its grammar is compiled (the step `ready_at` names; never, for one
    never compiled); where the system lists block tables, it holds no KV block
    while its grammar is not compiled (waiting for it, it would keep blocks from
    requests that are ready, for ever if it is never ready); and once compiled,
    a request that fits the pool does not stay waiting for `within` steps in a
    row in which no request computes and no KV load is in flight (`IdleBeside`)."""

    props = ("grammar",)

    def __init__(self, within: int = 2) -> None:
        self.idle = IdleBeside(within)

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        step, view = run.t - 1, run.view
        for e in events:
            if isinstance(e, Token):
                ready = view.requests[e.rid].spec.ready_at()
                if ready is None or step < ready:
                    when = "never compiled" if ready is None else f"compiled at step {ready}"
                    self.broke(Violation("grammar", f"{e.rid} got a token at step {step}; its grammar is {when}",
                                         rule="token-before-ready"))
        for rid, pages in obs.block_tables.items():
            ready = view.requests[rid].spec.ready_at() if rid in view.requests else step
            if pages and any(pages) and (ready is None or step < ready):
                self.broke(Violation("grammar", f"{rid} holds KV blocks after step {step} while its grammar is "
                                                "not compiled", rule="holds-blocks-unready"))
        compiled = [r for r in view.open.values() if r.spec.grammar_ready is not None and unblocked(r, step, run.cfg)]
        for rid, steps in self.idle.count(run, compiled):
            self.broke(Violation("grammar", f"{rid}'s grammar is compiled and it fits the pool, but it waited "
                                            f"{steps} steps in a row in which nothing ran", rule="ready-idle"))


class KvLoads(Check):
    """A KV load (`Load`) is one the request asked for (`RequestSpec.kv_load_steps`)
    of positions it has (start < end <= prompt + tokens); while it is in flight
    the request is neither admitted nor resumed and does no work (its blocks
    are being written); once it has ended, loaded or failed, a request that
    fits the pool does not stay waiting for `within` steps in a row in which no
    request computes and no other load is in flight (`IdleBeside`; a load has ended once the system may know
    it, `Config.load_known`): a failed load is recovered from, by
    computing what it did not bring. That a failed load's positions are then
    computed, not taken as loaded, is `work`'s prefill-skipped and
    `prefix-hits`' rules; that its blocks are released, `kv-excess`'s."""

    props = ("kv-load",)

    def __init__(self, within: int = 2) -> None:
        self.idle = IdleBeside(within)

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        step, view = run.t - 1, run.view
        for e, tokens in zip(events, view.tokens_before, strict=True):
            r = view.requests[e.rid]
            if isinstance(e, Load):
                known = len(r.spec.prompt) + tokens
                if r.spec.kv_load_steps is None:
                    self.broke(Violation("kv-load", f"{e}: {e.rid} has no KV in an external store to load",
                                         rule="unasked"))
                elif not 0 <= e.start < e.end <= known:
                    self.broke(Violation("kv-load", f"{e}: positions {e.start}..{e.end} of {e.rid}, which has {known}",
                                         rule="past-known"))
            elif isinstance(e, (Admit, Resume, Prefill, Token)) and r.load is not None and not r.load.ended(step):
                self.broke(Violation("kv-load", f"{e} at step {step}, while {e.rid}'s KV load of positions "
                                                f"{r.load.start}..{r.load.end} is in flight until step "
                                                f"{r.load.ends_at}", rule="before-loaded"))
        ended = [r for r in view.open.values() if r.load is not None and unblocked(r, step, run.cfg)]
        for rid, steps in self.idle.count(run, ended):
            load = view.requests[rid].load
            outcome = "failed" if load is not None and not load.ok else "ended"
            self.broke(Violation("kv-load", f"{rid}'s KV load {outcome} and it fits the pool, but it waited "
                                            f"{steps} steps in a row in which nothing ran", rule="ready-idle"))
