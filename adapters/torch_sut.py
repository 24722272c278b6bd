"""loopcheck's own torch engine (engine/) as a system under test."""

from __future__ import annotations

from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Internals, Observation


class TorchSUT:
    """`engine.llm_engine.LLMEngine` behind the SUT protocol. batch_invariant=False
    is only for the control test that shows the output checks bite."""

    def __init__(self, cfg: Config, batch_invariant: bool = True) -> None:
        from loopcheck.engine.llm_engine import LLMEngine

        self.engine = LLMEngine(cfg, batch_invariant)
        self.capabilities = Capabilities(kv=True, state_key=True, fingerprints=True,
                                         priorities=cfg.priority_preemption, semantics="loopcheck",
                                         internals=True, block_tables=True, looped=True,
                                         code=("loopcheck.engine.scheduler", "loopcheck.engine.kv_cache"))

    def add(self, spec: RequestSpec) -> None:
        self.engine.add_request(spec)

    def abort(self, rid: str) -> None:
        self.engine.abort_request(rid)

    def step(self) -> list[Event]:
        return self.engine.step()

    def observe(self) -> Observation:
        e = self.engine
        return Observation(blocks_held=e.blocks_held(), kv_errors=e.conservation_errors(), outputs=e.outputs(),
                           fingerprints=e.fingerprints(), unfinished=e.has_unfinished(), state_key=e.state_key(),
                           block_tables={s.rid: [list(p.blocks) for p in s.pages]
                                         for s in e.scheduler.seqs if s.pages})

    def internals(self) -> Internals:
        from loopcheck.engine.sequence import PREEMPTED, WAITING

        sched = self.engine.scheduler
        return Internals(guard=frozenset(sched.guard),
                         bypasses={s.rid: s.bypasses for s in sched.seqs if s.status in (WAITING, PREEMPTED)},
                         snapshots=frozenset(s.rid for s in sched.seqs if s.snapshot is not None))
