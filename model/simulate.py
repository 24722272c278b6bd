"""The reference model's environment, run totals and the result of a run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loopcheck.model.events import Event, Finish, Preempt, RequestOutput, Token, TokenOutcome
from loopcheck.model.reference import step
from loopcheck.model.state import FINISHED, SchedState, initial_state
from loopcheck.model.workload import RequestSpec, Workload


class WorkloadEnv:
    """The model's environment: the requests submitted so far, aborts, and token
    outcomes.

    Aborts come from each request's `abort_at`, plus those requested through
    `abort_now`. Token outcomes are either fed from another system's events of the
    same step (`feed`, for lockstep runs: any token that system did not produce
    comes out as the impossible outcome (-1, -1), so the comparison fails there), or
    scripted: IDs from `script_tokens` (cycled) or abstract (the token's index mod
    vocab_size); exit depths of tokens after the first from `script_exit_depths`
    (cycled) or num_loops. The first token always exits at full depth. An
    explorer may choose which tokens are stop tokens (`stop_with`).
    """

    def __init__(self, workload: Workload) -> None:
        self._workload: Workload | None = workload
        self._config = workload.config
        self._specs = {r.rid: r for r in workload.requests}
        self._aborts_at: dict[int, set[str]] = {}   # step -> requests aborted then (abort_at and abort_now)
        for r in workload.requests:
            self._note_abort(r)
        self._fed: dict[tuple[str, int], TokenOutcome] | None = None
        self._stopping: frozenset[str] | None = None

    @property
    def workload(self) -> Workload:
        """The requests submitted so far (built again only after a submission)."""
        if self._workload is None:
            self._workload = Workload(self._config, tuple(self._specs.values()))
        return self._workload

    def submit(self, spec: RequestSpec) -> None:
        """Append one request to the workload (its id must be new)."""
        self._specs[spec.rid] = spec
        self._workload = None
        self._note_abort(spec)

    def _note_abort(self, spec: RequestSpec) -> None:
        if spec.abort_at is not None:
            self.abort_now(spec.rid, spec.abort_at)

    def abort_now(self, rid: str, step: int) -> None:
        self._aborts_at.setdefault(step, set()).add(rid)

    def feed(self, events: list[Event]) -> None:
        """Take this step's token outcomes from another system's events."""
        self._fed = {(e.rid, e.index): TokenOutcome(e.token_id, e.exit_depth) for e in events if isinstance(e, Token)}

    def stop_with(self, rids: frozenset[str] | None) -> None:
        """Until called again with None: the requests in `rids` are given their
        stop token, the others with a stop token a token that is not it (the
        scripted one, or the token after the stop token where that is it)."""
        self._stopping = rids

    def aborts(self, step: int) -> frozenset[str]:
        return frozenset(self._aborts_at.get(step, ()))

    def outcome(self, rid: str, index: int) -> TokenOutcome:
        if self._fed is not None:
            return self._fed.get((rid, index), TokenOutcome(-1, -1))
        spec, cfg = self._specs[rid], self.workload.config
        token = (spec.script_tokens[index % len(spec.script_tokens)] if spec.script_tokens
                 else index % cfg.vocab_size)
        if self._stopping is not None and spec.stop_token is not None:
            stop = rid in self._stopping
            token = spec.stop_token if stop else token if token != spec.stop_token else (token + 1) % cfg.vocab_size
        depth = cfg.num_loops
        if index > 0 and spec.script_exit_depths:
            depth = spec.script_exit_depths[(index - 1) % len(spec.script_exit_depths)]
        return TokenOutcome(token, depth)


def model_steps(w: Workload, max_steps: int) -> Iterator[tuple[SchedState, list[Event], SchedState]]:
    """(state before, events, state after) of each reference-model step of a
    recorded workload (scripted outcomes), until every request finished or
    `max_steps` steps."""
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, len(w.requests))
    for _ in range(max_steps):
        after, events = step(state, env)
        yield state, events, after
        state = after
        if all(r.status == FINISHED for r in state.reqs):
            return


@dataclass
class Counters:
    """Run totals, folded from events."""

    steps: int = 0
    preemptions: int = 0
    resumptions: int = 0
    futile_preemptions: int = 0

    def fold(self, events: list[Event]) -> None:
        """Count one step's events. A preemption is futile when the request it was
        made for (when the system names it) does no work in the same step."""
        self.steps += 1
        worked = {e.rid for e in events if e.kind in ("prefill", "token")}
        for e in events:
            if isinstance(e, Preempt):
                self.preemptions += 1
                if e.by is not None and e.by != e.rid and e.by not in worked:
                    self.futile_preemptions += 1
            elif e.kind == "resume":
                self.resumptions += 1


def fold_outputs(outputs: dict[str, RequestOutput], events: list[Event]) -> None:
    """Apply one step's events to per-request outputs (a preemption that does not
    keep the generated tokens discards them; they are generated again)."""
    for e in events:
        out = outputs.setdefault(e.rid, RequestOutput(e.rid, [], [], None))
        if isinstance(e, Token):
            out.token_ids.append(e.token_id)
            out.exit_depths.append(e.exit_depth)
        elif isinstance(e, Preempt) and not e.keeps_tokens:
            out.token_ids.clear()
            out.exit_depths.clear()
        elif isinstance(e, Finish):
            out.finish_reason = e.reason


@dataclass
class SimResult:
    """The outcome of a run, in the shape `loopcheck simulate --json` prints."""

    workload: Workload
    engine: str
    counters: Counters
    outputs: dict[str, RequestOutput]
    kv_blocks_held: int
    drained: bool
    trace: list[list[Event]] = field(default_factory=list)
    fingerprints: dict[str, str] = field(default_factory=dict)  # where the system reports them

    @property
    def finished(self) -> int:
        return sum(o.finish_reason is not None for o in self.outputs.values())

    def to_json(self, with_trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine, "finished": self.finished, "total": len(self.outputs),
            "steps": self.counters.steps, "preemptions": self.counters.preemptions,
            "resumptions": self.counters.resumptions,
            "futile_preemptions": self.counters.futile_preemptions,
            "kv_blocks_held": self.kv_blocks_held, "drained": self.drained,
            "requests": {rid: o.to_json() for rid, o in self.outputs.items()},
        }
        for rid, fp in self.fingerprints.items():
            out["requests"][rid]["logits_sha256"] = fp
        if with_trace:
            out["trace"] = [[e.to_json() for e in evs] for evs in self.trace]
        return out


