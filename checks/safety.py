"""Safety properties any LLM scheduler must keep, read from the trace and the
observation: the slot and token caps, and KV conservation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from checks.base import Check, Violation
from checks.needs import covered_blocks, held_at_most
from model.config import Config
from model.events import Event
from model.invariants import batch_tokens
from sut.protocol import Capabilities, Observation
from sut.view import RUNNING

if TYPE_CHECKING:
    from sut.driver import Driver


class Caps(Check):
    """running <= max_num_seqs and batched tokens <= max_num_batched_tokens, every
    step, as the events report them."""

    name = "caps"

    def after_step(self, driver: Driver, events: list[Event], obs: Observation) -> None:
        cfg = driver.cfg
        running = driver.view.running()
        if running > cfg.max_num_seqs:
            raise Violation("caps", f"{running} requests running > max_num_seqs {cfg.max_num_seqs}")
        tokens = batch_tokens(events)
        if tokens > cfg.max_num_batched_tokens:
            raise Violation("caps", f"batch of {tokens} tokens > max_num_batched_tokens "
                                    f"{cfg.max_num_batched_tokens}")


class KvConservation(Check):
    """The SUT's KV accounting is sound every step, it holds at least the blocks
    of the KV its running requests have by the trace (`covered_blocks`: a
    request cannot attend to positions it holds no blocks for) and at most
    what they may hold (`held_at_most`: blocks of a finished, preempted or
    unadmitted request, or past the allocation policy's need, are a leak while
    they last), and nothing is held once every request has finished."""

    name = "kv-conservation"

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.kv else "the system reports no KV accounting (capabilities.kv)"

    def after_step(self, driver: Driver, events: list[Event], obs: Observation) -> None:
        if obs.kv_errors:
            raise Violation("kv-conservation", "; ".join(obs.kv_errors))
        if not driver.view.unfinished() and obs.blocks_held:
            raise Violation("kv-conservation", f"every request finished, but {obs.blocks_held} blocks "
                                               "are still held")
        if obs.blocks_held > driver.cfg.num_blocks or obs.blocks_held < 0:
            raise Violation("kv-conservation", f"{obs.blocks_held} blocks held of a pool of "
                                               f"{driver.cfg.num_blocks}")
        running = [r for r in driver.view.open.values() if r.status == RUNNING]

        def reached() -> str:   # for the messages only
            return ", ".join(f"{r.spec.rid} 0..{r.reach}" for r in running if r.reach) or "none"

        covered = covered_blocks(running, driver.cfg)
        if obs.blocks_held < covered:
            raise Violation("kv-coverage", f"the running requests have KV for positions ({reached()}) that take "
                                           f"at least {covered} blocks, but {obs.blocks_held} are held")
        most = held_at_most(running, driver.cfg)
        if obs.blocks_held > most:
            raise Violation("kv-excess", f"{obs.blocks_held} blocks held, but the running requests (positions "
                                         f"{reached()}) hold at most {most} under {driver.cfg.allocation} "
                                         "allocation: the rest is held by no running request")

    def at_end(self, driver: Driver, obs: Observation) -> None:
        if obs.blocks_held:
            raise Violation("kv-conservation", f"drained, but {obs.blocks_held} blocks are still held")
