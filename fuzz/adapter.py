"""The adapter protocol through which the fuzzer drives an engine, and the
adapter for loopcheck's own torch engine.

An engine under test needs four verbs: add a request (it arrives at the start of
the next step), abort one (at the start of the next step), step (returning that
step's events in model/events.py's vocabulary), and observe (KV accounting and
outputs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from model.config import Config
from model.events import Event, RequestOutput
from model.workload import RequestSpec


@dataclass
class Observation:
    blocks_held: int
    kv_errors: list[str]
    outputs: dict[str, RequestOutput]
    fingerprints: dict[str, str] = field(default_factory=dict)  # optional: exact output bits
    unfinished: bool = False


class EngineAdapter(Protocol):
    def add(self, spec: RequestSpec) -> None: ...

    def abort(self, rid: str) -> None: ...

    def step(self) -> list[Event]: ...

    def observe(self) -> Observation: ...


class TorchEngineAdapter:
    """loopcheck's own engine behind the adapter protocol."""

    def __init__(self, config: Config) -> None:
        from engine.llm_engine import LLMEngine

        self.engine = LLMEngine(config)

    def add(self, spec: RequestSpec) -> None:
        self.engine.add_request(spec)

    def abort(self, rid: str) -> None:
        self.engine.abort_request(rid)

    def step(self) -> list[Event]:
        return self.engine.step()

    def observe(self) -> Observation:
        e = self.engine
        return Observation(e.blocks_held(), e.conservation_errors(), e.outputs(), e.fingerprints(),
                           e.has_unfinished())
