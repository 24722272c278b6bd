"""Adapters that break the SUT protocol, each in one way, and one that never
returns (loaded by path in the tests, the way a user passes --adapter
FILE.py:FACTORY)."""

from __future__ import annotations

from model.events import Event
from sut.model_sut import ModelSUT


class NoneStep(ModelSUT):
    def step(self):
        super().step()
        return None


class UnknownKind(ModelSUT):
    def step(self):
        return super().step() + [Event("teleport", next(iter(self.outputs)))] if self.outputs else super().step()


class UnknownRequest(ModelSUT):
    def step(self):
        return super().step() + [Event("arrive", "nobody")]


class WrongArity(ModelSUT):
    def step(self):
        return [Event(e.kind, e.rid, e.args + (0,)) if e.kind == "admit" else e for e in super().step()]


class NoObserve:
    capabilities = None

    def __init__(self, cfg) -> None:
        pass


def raises_on_build(cfg):
    raise RuntimeError("cannot build")


class Spins(ModelSUT):
    def step(self):
        while True:
            pass
