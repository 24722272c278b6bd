"""loopcheck's own torch engine (engine/) as a system under test."""

from __future__ import annotations

from loopcheck.model.config import Config
from loopcheck.model.events import Event
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.protocol import Capabilities, Internals, Observation

COSTLY_TOKENS = 128      # max_num_batched_tokens past which a step may take seconds on a CPU core
COSTLY_LOOPS = 10_000    # num_loops past which building the engine takes seconds (a gate per depth)


class TorchSUT:
    """`engine.llm_engine.LLMEngine` behind the SUT protocol. batch_invariant=False
    is only for the control test that shows the output checks bite."""

    @staticmethod
    def costly(cfg: Config) -> str | None:
        """Why runs of this config may be slow (`adapters.loader.warn_costly`):
        the engine computes each token of a step row by row (about 25 ms a
        token on one core of the machine it was measured on, docs/checking.md),
        and builds one exit gate per recurrence depth."""
        why = []
        if cfg.max_num_batched_tokens > COSTLY_TOKENS:
            why.append(f"max_num_batched_tokens {cfg.max_num_batched_tokens} lets one step compute that many tokens, "
                       "seconds a step")
        if cfg.num_loops > COSTLY_LOOPS:
            why.append(f"num_loops {cfg.num_loops} makes building the engine take seconds")
        if not why:
            return None
        return ("the torch engine: " + "; ".join(why) + " (a call past 10 s is reported as a hang; "
                "--max-seconds bounds the run)")

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
