"""Adapters that break the SUT protocol, each in one way, and one that never
returns (loaded by path in the tests, the way a user passes --adapter
FILE.py:FACTORY)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Admit, Arrive, Event, RequestOutput
from loopcheck.sut.model_sut import ModelSUT


class NoneStep(ModelSUT):
    def step(self):
        super().step()
        return None


@dataclass(frozen=True)
class Teleport(Event):
    """An event kind of the adapter's own, not one of model/events.py."""

    kind: ClassVar[str] = "teleport"


class UnknownKind(ModelSUT):
    def step(self):
        return super().step() + [Teleport(next(iter(self.outputs)))] if self.outputs else super().step()


class UnknownRequest(ModelSUT):
    def step(self):
        return super().step() + [Arrive("nobody")]


class Rewriting(ModelSUT):
    """The model, with the fields of its events of one kind rewritten (`rewrite`
    maps the event to the changes, passed to dataclasses.replace)."""

    kind = ""
    rewrite = staticmethod(lambda e: {})

    def step(self):
        return [replace(e, **self.rewrite(e)) if e.kind == self.kind else e for e in super().step()]


class GenericWrongArity(ModelSUT):
    """An adapter of the earlier generic events: an admission with one argument too many."""

    def step(self):
        return [Event("admit", e.rid, (e.hit_pages, 0)) if isinstance(e, Admit) else e for e in super().step()]


class GenericEvents(ModelSUT):
    """An adapter of the earlier generic events, every one well formed."""

    def step(self):
        return [Event(e.kind, e.rid, e.values()) for e in super().step()]


class TextTokenIndex(Rewriting):
    kind, rewrite = "token", staticmethod(lambda e: {"index": str(e.index)})


class PreemptedByStranger(Rewriting):
    kind, rewrite = "preempt", staticmethod(lambda e: {"by": "nobody"})


class Observing(ModelSUT):
    """The model, with one field of its observation replaced (`broken`)."""

    broken: dict = {}

    def observe(self):
        obs = super().observe()
        for name, value in self.broken.items():
            setattr(obs, name, value(obs) if callable(value) else value)
        return obs


class UnhashableKey(Observing):
    broken = {"state_key": [1, 2]}


class TextBlocksHeld(Observing):
    broken = {"blocks_held": "lots"}


class NegativeBlocksHeld(Observing):
    broken = {"blocks_held": -1}


class StrangerOutputs(Observing):
    broken = {"outputs": lambda obs: {**obs.outputs, "nobody": RequestOutput("nobody", [], [], None)}}


class PlainOutputs(Observing):
    broken = {"outputs": lambda obs: {rid: out.token_ids for rid, out in obs.outputs.items()}}


class TupleTokens(Observing):
    broken = {"outputs": lambda obs: {rid: replace(out, token_ids=tuple(out.token_ids))
                                      for rid, out in obs.outputs.items()}}


class OddFinish(Observing):
    broken = {"outputs": lambda obs: {rid: replace(out, finish_reason="done") for rid, out in obs.outputs.items()}}


class TextUnfinished(Observing):
    broken = {"unfinished": "yes"}


class TupleTables(Observing):
    broken = {"block_tables": lambda obs: {rid: ((0,),) for rid in obs.outputs}}


class StrangerTables(Observing):
    broken = {"block_tables": {"nobody": [[0]]}}


class PinsNoField(ModelSUT):
    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.capabilities = replace(self.capabilities, pinned={"colour": "red"})


class NoObserve:
    capabilities = None

    def __init__(self, cfg) -> None:
        pass


def raises_on_build(cfg):
    raise RuntimeError("cannot build")


def small_pools_only(cfg):
    """Refuses pools past 16 blocks (the default config's and the example's are larger)."""
    if cfg.num_blocks > 16:
        raise WorkloadError("config.num_blocks: this system takes pools of up to 16 blocks")
    return ModelSUT(cfg)


class Spins(ModelSUT):
    """Spins in its first step, after creating the file the environment variable
    LOOPCHECK_TEST_SPINNING names (if set), so a test knows it is spinning."""

    def step(self):
        marker = os.environ.get("LOOPCHECK_TEST_SPINNING")
        if marker:
            Path(marker).touch()
        while True:
            pass


class BuildsForever(ModelSUT):
    """Never finishes being built (a build loop in Python, as an engine that
    makes one weight per recurrence depth of a huge config)."""

    def __init__(self, cfg):
        while True:
            pass


class ByIdentity(ModelSUT):
    """The model behind a singleton that outlives its runs, as a scheduler that
    iterates over requests keyed by object identity or a counter: every other
    system built on a config reports a step's arrivals in reverse order and one
    block held more than it holds (a KV finding in every other run)."""

    built: Counter = Counter()

    def __init__(self, cfg):
        super().__init__(cfg)
        ByIdentity.built[cfg] += 1
        self.odd = ByIdentity.built[cfg] % 2 == 0

    def step(self):
        events = super().step()
        if not self.odd:
            return events
        arrivals = [e for e in events if e.kind == "arrive"][::-1]
        return arrivals + [e for e in events if e.kind != "arrive"]

    def observe(self):
        obs = super().observe()
        if self.odd and obs.blocks_held:
            obs.blocks_held += 1
        return obs
