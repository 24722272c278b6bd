"""`LLMEngine`: the engine's public face. add_request / step / abort_request /
has_unfinished, outputs, counters, and a per-step trace in the model's event
vocabulary, so that the two can be compared step by step.
"""

from __future__ import annotations

import torch

from loopcheck.engine.kv_cache import BlockPool, KVStore
from loopcheck.engine.lm import LMShape, LoopedLM
from loopcheck.engine.runner import ModelRunner
from loopcheck.engine.scheduler import Scheduler
from loopcheck.engine.sequence import FINISHED, PREEMPTED, RUNNING, Sequence
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event, RequestOutput
from loopcheck.model.simulate import Counters
from loopcheck.model.workload import RequestSpec


class LLMEngine:
    """Serves the tiny looped LM under its own scheduler.

    Deterministic: the same config and the same calls give the same trace. Runs
    with one torch thread (set on construction) so outputs are bit-reproducible.
    """

    MAX_POSITIONS = 2**16   # attention is padded to the whole pool: beyond this a step takes seconds

    def __init__(self, cfg: Config, batch_invariant: bool = True) -> None:
        if cfg.max_positions > self.MAX_POSITIONS:
            raise WorkloadError(f"config.num_blocks: the torch engine holds at most {self.MAX_POSITIONS} token "
                                f"positions, this pool has {cfg.max_positions} (num_blocks x block_size / planes)")
        if cfg.vocab_size > self.MAX_POSITIONS:
            raise WorkloadError(f"config.vocab_size: the torch engine's LM takes at most {self.MAX_POSITIONS}, "
                                f"got {cfg.vocab_size}")
        torch.set_num_threads(1)
        self.cfg = cfg
        shape = LMShape(vocab=cfg.vocab_size, max_positions=cfg.max_positions)
        self.lm = LoopedLM(shape, cfg.num_loops, cfg.model_seed, batch_invariant)
        self.pool = BlockPool(cfg.num_blocks, cfg.planes)
        self.kv = KVStore(cfg.num_blocks, cfg.block_size, shape.layers, shape.kv_heads, shape.head_dim)
        self.runner = ModelRunner(cfg, self.lm, self.kv)
        self.scheduler = Scheduler(cfg, self.pool, self._offload, self._restore)
        self.counters = Counters()
        self.step_count = 0

    # ----- public API ---------------------------------------------------------------
    def add_request(self, spec: RequestSpec) -> None:
        """Queue a request; it arrives at the start of the next step. Bad input
        raises WorkloadError and leaves the engine unchanged."""
        where = f"request {spec.rid!r}"
        if any(s.rid == spec.rid for s in self.scheduler.seqs):
            raise WorkloadError(f"{where}: duplicate request id")
        if not spec.prompt:
            raise WorkloadError(f"{where}: prompt must not be empty")
        if spec.max_tokens < 0:
            raise WorkloadError(f"{where}: max_tokens must be >= 0")
        bad = [t for t in spec.prompt if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise WorkloadError(f"{where}: token id {bad[0]} outside vocab [0, {self.cfg.vocab_size})")
        seq = Sequence(spec)
        self.scheduler.seqs.append(seq)
        self.scheduler.arrived.append(seq)

    def abort_request(self, rid: str) -> None:
        """Abort at the start of the next step (unknown or finished ids are ignored)."""
        self.scheduler.abort_requests.add(rid)

    def has_unfinished(self) -> bool:
        return any(s.status != FINISHED for s in self.scheduler.seqs)

    def step(self) -> list[Event]:
        """One step: arrivals and aborts, schedule, execute, update. Returns its events."""
        sched = self.scheduler
        sched.events = []
        sched.admit_arrivals()
        batch = sched.schedule()
        tokens = self.runner.run(batch)
        for index, item in sorted(enumerate(batch), key=lambda p: p[1].seq.spec.key):
            sched.complete(item, tokens.get(index))
        events = sched.events
        self.counters.fold(events)
        self.step_count += 1
        return events

    def outputs(self) -> dict[str, RequestOutput]:
        return {s.rid: RequestOutput(s.rid, list(s.token_ids), list(s.exit_depths), s.finish_reason)
                for s in self.scheduler.seqs}

    def fingerprints(self) -> dict[str, str]:
        """Per request, a hash of the exact bits of every emitted token's logits."""
        return {s.rid: s.fingerprint for s in self.scheduler.seqs}

    def state_key(self) -> tuple:
        """A hashable value equal exactly when two scheduling states are equal: each
        sequence's progress, its pages (private, or the prefix key it shares) and
        snapshot, the prefix cache with its eviction order, free blocks and the
        futility guard. (Token values and KV contents are outputs, not state the
        scheduler decides on.)"""
        seqs = tuple((s.status, s.frontier, s.chunk_end, s.chunk_depth, s.generated, s.bypasses,
                      tuple(p.key for p in s.pages), s.snapshot is not None) for s in self.scheduler.seqs)
        cache = tuple((k, p.holders) for k, p in self.pool.cached.items())
        return seqs, len(self.pool.free), cache, tuple(self.pool.evictable), frozenset(self.scheduler.guard)

    def blocks_held(self) -> int:
        return self.cfg.num_blocks - self.pool.free_count()

    def conservation_errors(self) -> list[str]:
        """KV conservation on the real pool, and nothing held where it must not be:
        pages only by running sequences, CPU snapshots only by preempted ones, WCPB
        rows only by running ones."""
        errors = self.pool.conservation_errors(self.scheduler.held_pages())
        for s in self.scheduler.seqs:
            if s.pages and s.status != RUNNING:
                errors.append(f"{s.rid} is {s.status} but holds {len(s.pages)} pages")
            if s.snapshot is not None and s.status != PREEMPTED:
                errors.append(f"{s.rid} is {s.status} but holds a CPU snapshot")
            if s.hidden is not None and s.status != RUNNING:
                errors.append(f"{s.rid} is {s.status} but holds WCPB hidden rows")
        return errors

    # ----- snapshot hooks -----------------------------------------------------------
    def _offload(self, seq: Sequence) -> None:
        seq.snapshot = self.kv.offload(seq.pages, seq.written)

    def _restore(self, seq: Sequence, first_page: int) -> None:
        assert seq.snapshot is not None
        self.kv.restore(seq.pages, seq.snapshot, first_page)
