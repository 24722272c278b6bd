"""The z3 encodings agree with model/ on concrete states.

sym_step (the BMC step) is evaluated on every state of random workloads in its
class and must give the model's next state; the admission/preflight encodings
are evaluated on model states and must give the model's decisions."""

from __future__ import annotations

from dataclasses import replace

import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.strategies import configs, workloads
from model.reference import _Step, page_hash, step
from model.simulate import WorkloadEnv
from model.state import PREEMPTED, RUNNING, WAITING, SchedState, initial_state
from model.workload import Workload
from proofs import admission as adm
from proofs.bmc import STATUS_CODES, SymState, SymWorkload, sym_step
from proofs.kv import KVState, conservation

SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much]


def concrete(state: SchedState, K: int) -> SymState:
    ints = lambda xs: tuple(z3.IntVal(x) for x in xs)  # noqa: E731
    r = state.reqs
    return SymState(ints(STATUS_CODES[x.status] for x in r), ints(x.frontier for x in r),
                    ints(x.chunk_end for x in r), ints(x.chunk_depth for x in r),
                    ints(x.generated for x in r), ints(x.bypasses for x in r), z3.IntVal(state.free))


def in_class(w: Workload) -> Workload:
    """Rename requests r0.. in priority-key order; drop stop tokens and aborts."""
    reqs = sorted(w.requests, key=lambda r: (r.priority, r.arrival, w.requests.index(r)))
    return Workload(w.config, tuple(replace(r, rid=f"r{i}", stop_token=None, abort_at=None)
                                    for i, r in enumerate(reqs)))


def bmc_mismatch(w: Workload) -> int | None:
    """The first step at which sym_step and model/ disagree, or None."""
    K = len(w.requests)
    sw = SymWorkload(tuple(z3.IntVal(len(r.prompt)) for r in w.requests),
                     tuple(z3.IntVal(r.max_tokens) for r in w.requests),
                     tuple(z3.IntVal(r.priority) for r in w.requests),
                     tuple(z3.IntVal(r.arrival) for r in w.requests), z3.IntVal(w.config.watermark_blocks))
    env = WorkloadEnv(w)
    state = initial_state(w.config.num_blocks, K)
    for t in range(40):
        nxt, _ = step(state, env)
        got = sym_step(concrete(state, K), t, sw, w.config)
        want = concrete(nxt, K)
        if [z3.simplify(x).as_long() for x in got.fields()] != [
                z3.simplify(x).as_long() for x in want.fields()]:
            return t
        state = nxt
        if all(r.status == "finished" for r in state.reqs):
            break
    return None


@settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW)
@given(workloads(configs(allocation="upfront", prefix_caching=False)))
def test_bmc_step_agrees_with_the_model(w: Workload) -> None:
    assert bmc_mismatch(in_class(w)) is None


def test_an_encoding_that_drifts_is_caught(monkeypatch) -> None:
    from pathlib import Path

    from model.workload import load_workload
    from proofs import bmc

    w = in_class(load_workload(Path(__file__).parent.parent / "examples" / "livelock.json"))
    assert bmc_mismatch(w) is None
    # drift: forget the "- 1" in a request's lifetime positions
    monkeypatch.setattr(bmc, "need", lambda sw, i, cfg: cfg.planes * (
        (sw.prompt[i] + sw.max_tokens[i] + cfg.block_size - 1) / cfg.block_size))
    assert bmc_mismatch(w) is not None


def kv_of(state: SchedState, K: int, hashes: list[int]) -> KVState:
    """The model's pool as a KVState; cache entries in the order of `hashes`."""
    cache = dict(state.cache)
    return KVState(
        free=z3.IntVal(state.free),
        priv=tuple(z3.IntVal(sum(p is None for p in r.pages)) for r in state.reqs),
        hold=tuple(tuple(z3.BoolVal(h in r.pages) for h in hashes) for r in state.reqs),
        present=tuple(z3.BoolVal(h in cache) for h in hashes),
        holders=tuple(z3.IntVal(cache.get(h, 0)) for h in hashes))


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=SLOW)
@given(workloads(configs(allocation="upfront", prefix_caching=True)), st.integers(0, 30))
def test_admission_encoding_agrees_with_the_model(w: Workload, steps: int) -> None:
    env = WorkloadEnv(w)
    cfg = w.config
    state = initial_state(cfg.num_blocks, len(w.requests))
    for _ in range(steps):
        state, _ = step(state, env)
    sim = _Step(state, env)
    sim.reqs = list(state.reqs)
    active = any(r.status == RUNNING for r in state.reqs)
    for i, r in enumerate(state.reqs):
        if r.status not in (WAITING, PREEMPTED) or sim.plan(i) is None:
            continue
        P, bs = len(w.requests[i].prompt), cfg.block_size
        H = (P - 1) // bs
        mine = [page_hash(w.requests[i].prompt[: (k + 1) * bs]) for k in range(H)]
        others = [h for h, _ in state.cache if h not in mine]
        hashes = mine + others
        kv = kv_of(state, len(w.requests), hashes)
        running = tuple(z3.BoolVal(x.status == RUNNING) for x in state.reqs)
        plan = sim.plan(i)
        for v in [None] + [j for j, x in enumerate(state.reqs) if x.status == RUNNING]:
            pend_from = frozenset(j for j, x in enumerate(state.reqs) if x.status == RUNNING and j != v)
            pending = {sim.prompt_hash(j, k) for j in pend_from for k, p in enumerate(state.reqs[j].pages)
                       if p is None and (k + 1) * bs <= len(w.requests[j].prompt)}
            ctx = adm.Ctx(planes=z3.IntVal(cfg.planes), num_blocks=z3.IntVal(cfg.num_blocks),
                          slots=z3.IntVal(cfg.max_num_seqs), watermark=z3.IntVal(cfg.watermark_blocks),
                          active=z3.BoolVal(active), running=running, pages=z3.IntVal(plan.pages),
                          hit_limit=H, pend=tuple(z3.BoolVal(h in pending) for h in mine))
            assert z3.is_true(z3.simplify(conservation(kv, ctx.planes, ctx.num_blocks)))
            if v is None:
                assert z3.is_true(z3.simplify(adm.fits(kv, ctx))) == sim.fits(i, plan, active)
            else:
                want = sim.preflight(i, v, pend_from, active)
                assert z3.is_true(z3.simplify(adm.preflight(kv, ctx, v))) == want
