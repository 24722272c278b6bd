"""What a run remembers for its later judgements, in a canonical form: the
trace's view, which requests were aborted, and each check's own memory. Two runs
that remember the same (and whose systems are in the same state) are judged the
same from there on, which is what lets an exploration merge them."""

from __future__ import annotations

from collections.abc import Callable, Hashable

from loopcheck.checks.base import Check, RunView
from loopcheck.checks.liveness import NeverFitRejected, Progress
from loopcheck.checks.lockstep import Lockstep, ModelBounds
from loopcheck.checks.pause import unpaused_steps
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.canonical import canonical


def _progress(check: Progress, run: RunView) -> Hashable:
    # only the quiet steps: the states seen are what an exploration's graph holds (every repeat is found there)
    return min(check.quiet, check.stall_steps)


def _never_fit(check: NeverFitRejected, run: RunView) -> Hashable:
    # each watched request and how long ago it was submitted, which is all that is judged of it
    return tuple(sorted((rid, min(unpaused_steps(run.cfg, t, run.t), check.within))
                        for rid, t in check.submitted.items()))


def _lockstep(check: Lockstep, run: RunView) -> Hashable:
    # the reference model's state but its step counter, and the requests it was given
    if check.model is None:
        return None
    s = check.model.state
    return canonical((s.reqs, s.free, s.cache, s.guard, check.model.env.workload.requests))


def _model_bounds(check: ModelBounds, run: RunView) -> Hashable:
    return run.counters.preemptions   # (judged against the bound at the end)


# The checks that keep step numbers or objects, by what they mean; any other check by all its fields.
_SPECIAL: dict[type, Callable[..., Hashable]] = {
    Progress: _progress, NeverFitRejected: _never_fit, Lockstep: _lockstep, ModelBounds: _model_bounds}


def check_memory(check: Check, run: RunView) -> Hashable:
    """What `check` remembers of the run that its later judgements read, with
    the signatures of the ignored violations it met (after one, a finding is
    taken as its consequence)."""
    special = _SPECIAL.get(type(check))
    own = special(check, run) if special else canonical({k: v for k, v in vars(check).items() if k != "_ignored"})
    return own, tuple(sorted({v.signature for v in check.ignored}))


def asked(run: RunView) -> Hashable:
    """What was asked of each unfinished request that later judgements read: its
    prompt, max_tokens and stop token, its priority where the system claims
    priority scheduling (else no check reads it), whether it was aborted, its
    LoRA adapter, the steps left until its grammar is compiled (0: ready or
    none; None: never), and the KV load it asks for (the view holds one that
    started)."""
    caps = run.caps

    def grammar_left(s: RequestSpec) -> int | None:
        ready = s.ready_at()
        return None if ready is None else max(0, ready - run.t)

    return tuple((s.prompt, s.max_tokens, s.stop_token, s.priority if caps.priorities else None,
                  s.abort_at is not None, s.lora, grammar_left(s))
                 + ((s.kv_load_steps, s.kv_load_fails) if s.kv_load_steps is not None else ())
                 for s in run.specs if run.view.requests[s.rid].finish is None)


def run_memory(run: RunView) -> Hashable:
    """What the run remembers for its later judgements besides the system's
    own state (docs/exploring.md says why a state key is sound with it)."""
    return (run.view.memory(), asked(run), tuple(check_memory(c, run) for c in run.checks),
            max(0, run.cfg.pause_end - run.t))   # (the steps to the end of a pause: judgements read it)
