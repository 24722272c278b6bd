"""Livelock search: unroll `sym_step_traced` k times and ask for a lasso, a state that
repeats after every request has arrived while some request is unfinished. A
found lasso becomes a `loopcheck/workload@1` counterexample file. Finding none
is a bounded result (no lasso within k steps), never a proof: proofs/drain.py
proves drain with no step bound."""

from __future__ import annotations

import time
from dataclasses import replace

import z3

from loopcheck.model.config import Config
from loopcheck.model.reference import step
from loopcheck.model.simulate import WorkloadEnv, model_steps
from loopcheck.model.state import initial_state
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.proofs.bmc import FINISHED, SymConfig, SymWorkload, initial, needs_of, sym_step_traced
from loopcheck.proofs.result import BOUNDED, COUNTEREXAMPLE, UNKNOWN, ProofResult, solve

LIMITS = dict(prompt=(1, 10), max_tokens=(0, 6), priority=(0, 3), arrival=(0, 4))


def symbolic_workload(K: int, cfg: Config) -> tuple[SymWorkload, list[z3.BoolRef]]:
    ints = lambda name: tuple(z3.Int(f"{name}{i}") for i in range(K))  # noqa: E731
    prompt, max_tokens = ints("prompt"), ints("max_tokens")
    w = SymWorkload(prompt, max_tokens, ints("priority"), ints("arrival"), needs_of(prompt, max_tokens, cfg))
    facts = []
    for name, (lo, hi) in LIMITS.items():
        facts += [z3.And(x >= lo, x <= hi) for x in getattr(w, name)]
    for i in range(K - 1):  # index order is priority-key order
        facts.append(z3.Or(w.priority[i] < w.priority[i + 1],
                           z3.And(w.priority[i] == w.priority[i + 1], w.arrival[i] <= w.arrival[i + 1])))
    return w, facts


def lasso_search(base: Config, policy: str, K: int, k: int, name: str | None = None,
                 timeout_ms: int = 120_000) -> tuple[ProofResult, Workload | None]:
    """Search lassos of length <= k within k steps, K requests, the base config
    with `policy`, prefix caching off (the lasso's prompts share nothing; it is
    then replayed with prefix caching on too) and a free watermark. Unguarded
    is expected to have one; guarded is expected to have none within the bound
    (`bounded`, not proved). Vacuity guard: some state after the last arrival
    with an unfinished request must lie within the k steps, or the result is
    unknown. Under incremental allocation the step's growth is a choice that
    its page facts pin; a lasso counts only once it repeats on model/."""
    cfg = Config(**{**base.to_json(), "preemption_policy": policy, "prefix_caching": False})
    name = name or ("livelock-search" if policy == "unguarded" else f"no-lasso@{k}")
    expected = COUNTEREXAMPLE if policy == "unguarded" else BOUNDED
    watermark = z3.Int("watermark")
    sc = SymConfig.of(cfg, watermark)
    w, facts = symbolic_workload(K, cfg)
    facts += [watermark >= 0, watermark < cfg.num_blocks]
    states = [initial(K, sc)]
    for t in range(k):
        after, trace = sym_step_traced(states[-1], t, w, sc, prefix=f"step{t}_")
        states.append(after)
        facts += trace.facts
    lassos, open_states = [], []
    for t0 in range(k):
        arrived = z3.And([a <= t0 for a in w.arrival])
        unfinished = z3.Or([x != FINISHED for x in states[t0].status])
        open_states.append(z3.And(arrived, unfinished))
        for t1 in range(t0 + 1, k + 1):
            same = z3.And([a == b for a, b in zip(states[t0].fields(), states[t1].fields(), strict=True)])
            lassos.append(z3.And(arrived, unfinished, same))
    start = time.perf_counter()
    if solve([*facts, z3.Or(open_states)], timeout_ms)[0] != z3.sat:
        return ProofResult(name, policy, UNKNOWN, time.perf_counter() - start, expected,
                           detail=f"vacuous: no unfinished request after the last arrival within {k} steps"), None
    answer, solver = solve([*facts, z3.Or(lassos)], timeout_ms)
    seconds = time.perf_counter() - start
    if answer == z3.unsat:
        return ProofResult(name, policy, BOUNDED, seconds, expected,
                           detail=f"no lasso within {k} steps for {K} requests (bounded; drain is proved "
                                  f"unbounded by the drain obligation)"), None
    if answer != z3.sat:
        return ProofResult(name, policy, UNKNOWN, seconds, expected,
                           detail=f"solver: {solver.reason_unknown()}"), None
    model = solver.model()
    workload = extract(model, w, cfg, watermark)
    cycle = find_cycle(workload, k)
    if cycle is None:
        return ProofResult(name, policy, UNKNOWN, seconds, expected,
                           detail="the encoding's lasso does not repeat on model/: encoding drift"), None
    trace = [events for _, events, _ in model_steps(workload, cycle["start"] + cycle["length"] + 1)]
    workload.extra.update({"property": "livelock", "source": f"loopcheck prove --requests {K} --steps {k}",
                           "cycle": cycle,
                           "trace": [[e.to_json() for e in evs] for evs in trace]})
    cached = find_cycle(workload.with_config(prefix_caching=True), k) is not None
    detail = (f"lasso: {len(workload.requests)} requests, {cfg.allocation} allocation, watermark "
              f"{workload.config.watermark_blocks}, cycle from step {cycle['start']} of length {cycle['length']} "
              f"(repeats on model/{', also with prefix caching on' if cached else ''})")
    return ProofResult(name, policy, COUNTEREXAMPLE, seconds, expected, detail=detail,
                       counterexample=workload.to_json()), workload


def extract(model: z3.ModelRef, w: SymWorkload, cfg: Config, watermark: z3.ArithRef) -> Workload:
    def val(x: z3.ArithRef) -> int:
        return model.eval(x, model_completion=True).as_long()

    reqs = tuple(RequestSpec(rid=f"r{i}", prompt=tuple((7 * i + j + 1) % 64 for j in range(val(w.prompt[i]))),
                             max_tokens=val(w.max_tokens[i]), arrival=val(w.arrival[i]),
                             priority=val(w.priority[i])) for i in range(w.K))
    return Workload(replace(cfg, watermark_blocks=val(watermark)), reqs, {})


def find_cycle(workload: Workload, k: int) -> dict[str, int] | None:
    """Where the reference model's state first repeats after the last arrival when
    replaying the workload, or None if it does not within k + 1 steps."""
    env = WorkloadEnv(workload)
    state = initial_state(workload.config.num_blocks, len(workload.requests))
    last_arrival = max(r.arrival for r in workload.requests)
    seen: dict[object, int] = {}
    for t in range(k + 2):
        key = (state.reqs, state.free, state.cache, state.guard)
        if t > last_arrival:
            if key in seen:
                return {"start": seen[key], "length": t - seen[key]}
            seen[key] = t
        state, _ = step(state, env)
    return None
