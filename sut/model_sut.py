"""The reference model (model/reference.py) as a system under test."""

from __future__ import annotations

from loopcheck.model.config import Config
from loopcheck.model.events import Event, RequestOutput
from loopcheck.model.invariants import state_violations
from loopcheck.model.reference import index_of, step
from loopcheck.model.simulate import WorkloadEnv, fold_outputs
from loopcheck.model.state import PREEMPTED, RUNNING, SchedState, initial_state, with_requests
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.sut.protocol import Capabilities, Internals, Observation


class ModelSUT:
    """The pure reference scheduler behind the SUT protocol.

    Token outcomes are scripted by each request (see model.simulate.WorkloadEnv),
    or, for a lockstep run, fed with `feed(events)` from the system it is paired
    with before each `step()`.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.capabilities = Capabilities(kv=True, state_key=True, priorities=cfg.priority_preemption,
                                         semantics="loopcheck", internals=True, looped=True, stop_choices=True,
                                         code=("loopcheck.model.reference",))
        self.env = WorkloadEnv(Workload(cfg, ()))
        self._state: SchedState = initial_state(cfg.num_blocks, 0)
        self.outputs: dict[str, RequestOutput] = {}

    def add(self, spec: RequestSpec) -> None:
        spec = spec.submitted_at(self._state.step)
        self.env.submit(spec)
        self.outputs[spec.rid] = RequestOutput(spec.rid, [], [], None)

    def abort(self, rid: str) -> None:
        self.env.abort_now(rid, self._state.step)

    @property
    def state(self) -> SchedState:
        """The model's state, with a pending record for every request submitted."""
        self._state = with_requests(self._state, len(self.env.workload.requests))
        return self._state

    def feed(self, events: list[Event]) -> None:
        self.env.feed(events)

    def stop_with(self, rids: frozenset[str]) -> None:
        """In the next step, the requests in `rids` given a token are given
        their stop token; the others with a stop token, one that is not."""
        self.env.stop_with(rids)

    def step(self) -> list[Event]:
        self._state, events = step(self.state, self.env)
        self.env.stop_with(None)
        fold_outputs(self.outputs, events)
        return events

    def observe(self) -> Observation:
        s, cfg = self.state, self.cfg
        index = index_of(self.env.workload.requests, s.reqs)
        return Observation(blocks_held=s.blocks_held(cfg.num_blocks, cfg.planes),
                           kv_errors=state_violations(s, cfg, sorted(index.running.union(index.touched))),
                           outputs=self.outputs,
                           unfinished=bool(index.live or index.pending),
                           state_key=(s.reqs, s.free, s.cache, s.guard))

    def internals(self) -> Internals:
        """The guard, the bypass counts of waiting and preempted requests, and the
        snapshots: with snapshots on, every preempted request keeps one."""
        s, specs = self.state, self.env.workload.requests
        index = index_of(specs, s.reqs)
        queued = [i for i in index.live if s.reqs[i].status != RUNNING]
        return Internals(guard=frozenset((specs[i].rid, budget) for i, budget in s.guard),
                         bypasses={specs[i].rid: s.reqs[i].bypasses for i in queued},
                         snapshots=frozenset(specs[i].rid for i in queued
                                             if self.cfg.snapshots and s.reqs[i].status == PREEMPTED))
