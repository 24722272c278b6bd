"""Bind the encodings to model/: check them on concrete model states against
what model/reference.py does there.

The step encoding (proofs/bmc.py) is compared on three kinds of states:
- states solved from z3 models of the drain invariant, each aimed at a rule
  that random runs seldom reach (preemption, a victim skipped by the preflight,
  a waiting request the preflight turns away, the bypass limit, the watermark,
  aborts, stop tokens, rejection, resumption from a snapshot, a refill stage
  conflict, a prompt-only request finishing), for every mode without choices
  and both policies (evaluated);
- every state of seeded random runs in those modes (evaluated);
- every step of seeded runs with prefix caching or incremental allocation,
  some picked for rare windows (`WINDOWS`): z3 must find choices within their
  facts that give the model's next state (`transition_disagreement`).
The admission and preflight encodings (proofs/admission.py) are compared on
every waiting request and victim of seeded random runs with prefix caching,
shared prompt prefixes and tight pools.

The first disagreement is reported by rule; `loopcheck prove` then exits 1.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import z3

from loopcheck.model.config import Config
from loopcheck.model.events import Admit, Event, Preempt, Resume
from loopcheck.model.reference import _Step, page_hash, step, total_pages
from loopcheck.model.simulate import WorkloadEnv, model_steps
from loopcheck.model.state import PREEMPTED, RUNNING, WAITING, ReqState, SchedState
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.proofs import admission as adm
from loopcheck.proofs import bmc
from loopcheck.proofs.bmc import (
    FINISHED,
    PENDING,
    STATUS_CODES,
    StepInputs,
    StepTrace,
    SymConfig,
    SymState,
    SymWorkload,
    modes_of,
    needs_of,
    sym_step_traced,
)
from loopcheck.proofs.drain import DETERMINISTIC_MODES, MODES, invariant
from loopcheck.proofs.kv import KVState, conservation
from loopcheck.proofs.lasso import symbolic_workload
from loopcheck.proofs.result import fresh_solver

RULE_OF_FIELD = {"status": "admission, preemption and finishing", "frontier": "prefill frontier, hits and rewind",
                 "chunk_end": "prefill chunks and rewind", "chunk_depth": "WCPB depth",
                 "generated": "tokens and snapshots", "bypasses": "bypass accounting",
                 "private": "allocation, growth and publication", "shared": "prefix hits and publication",
                 "guarded": "futility guard", "free": "block accounting", "cached": "prefix-cache holders"}
STOP_TOKEN = 1
SIZES = dict(num_blocks=16, block_size=2, max_num_seqs=3, max_num_batched_tokens=5, prefill_chunk_size=3,
             num_loops=3, min_loops=1, watermark_blocks=2, max_bypasses=1)
LIMITS = dict(prompt=8, max_tokens=5, priority=3, steps=6)


@dataclass
class Binding:
    """Outcome: states compared per source, and the first disagreement (or None)."""

    compared: dict[str, int]
    disagreement: str | None = None

    @property
    def agrees(self) -> bool:
        return self.disagreement is None

    def summary(self) -> str:
        counts = ", ".join(f"{n} {what}" for what, n in self.compared.items())
        return f"encoding and model agree on {counts}" if self.agrees else self.disagreement or ""


# ----- the step encoding -------------------------------------------------------------

def spec_of(i: int, prompt: int, max_tokens: int, priority: int, arrival: int, stop: bool,
            abort_at: int | None) -> RequestSpec:
    return RequestSpec(rid=f"r{i}", prompt=tuple((3 * i + k + 2) % 60 + 2 for k in range(prompt)),
                       max_tokens=max_tokens, arrival=arrival, priority=priority,
                       stop_token=STOP_TOKEN if stop else None, abort_at=abort_at, script_tokens=(STOP_TOKEN,))


def ordered(w: Workload) -> Workload:
    """Requests renamed r0.. in priority-key order (the encoding's index order)."""
    reqs = sorted(w.requests, key=lambda r: (r.priority, r.arrival, w.requests.index(r)))
    return Workload(w.config, tuple(replace(r, rid=f"r{i}") for i, r in enumerate(reqs)))


def concrete_sym(w: Workload, state: SchedState) -> tuple[SymWorkload, StepInputs]:
    """The workload as encoding terms, and the inputs of the step from `state`:
    aborts due then, and stops where the token a request would produce next is
    its stop token."""
    ints = lambda xs: tuple(z3.IntVal(x) for x in xs)  # noqa: E731
    rs = w.requests
    prompt, max_tokens = ints(len(r.prompt) for r in rs), ints(r.max_tokens for r in rs)
    sw = SymWorkload(prompt, max_tokens, ints(r.priority for r in rs), ints(r.arrival for r in rs),
                     needs_of(prompt, max_tokens, w.config))
    env = WorkloadEnv(w)
    aborts = env.aborts(state.step)
    return sw, StepInputs(tuple(z3.BoolVal(r.rid in aborts) for r in rs),
                          tuple(z3.BoolVal(r.stop_token is not None
                                           and r.stop_token == env.outcome(r.rid, x.generated).token_id)
                                for r, x in zip(rs, state.reqs, strict=True)))


def sym_of(state: SchedState, cfg: Config) -> SymState:
    """A model state as encoding terms: the pool in blocks (private pages, held
    cache pages, the free count with cache-only pages) and the guard's entries
    per request."""
    ints = lambda xs: tuple(z3.IntVal(x) for x in xs)  # noqa: E731
    r, planes = state.reqs, cfg.planes
    guarded = [sum(1 for j, _ in state.guard if j == i) for i in range(len(r))]
    cached = planes * sum(1 for _, holders in state.cache if holders > 0)
    return SymState(ints(STATUS_CODES[x.status] for x in r), ints(x.frontier for x in r),
                    ints(x.chunk_end for x in r), ints(x.chunk_depth for x in r),
                    ints(x.generated for x in r), ints(x.bypasses for x in r),
                    ints(planes * sum(p is None for p in x.pages) for x in r),
                    ints(planes * sum(p is not None for p in x.pages) for x in r), ints(guarded),
                    z3.IntVal(state.free_count(planes)), z3.IntVal(cached))


def step_disagreement(w: Workload, state: SchedState) -> str | None:
    """Where one model step from `state` and the encoding's step differ, or None
    (modes where the step is deterministic: evaluated)."""
    got, facts = stepped(w, state)
    if facts:
        raise ValueError("step_disagreement: the step leaves choices open under these modes")
    nxt, _ = step(state, WorkloadEnv(w))
    want = sym_of(nxt, w.config)
    for (name, a), (_, b) in zip(got, want.named(), strict=True):
        enc, mod = z3.simplify(a).as_long(), z3.simplify(b).as_long()
        if enc != mod:
            return (f"encoding and model disagree at {rule_of(name)}: {name} is {mod} in "
                    f"model/ and {enc} in the encoding, step {state.step} of {describe(w, state)}")
    return None


def transition_disagreement(w: Workload, state: SchedState, nxt: SchedState) -> str | None:
    """Whether some choices within their facts make the encoding's step from
    `state` give model/'s next state `nxt` (any modes; solved), or where not:
    the first field no choice gives."""
    got, facts = stepped(w, state)
    pairs = [(name, a, b) for (name, a), (_, b) in zip(got, sym_of(nxt, w.config).named(), strict=True)]
    solver = fresh_solver(20_000)
    solver.add(*facts)
    answer = solver.check(*[a == b for _, a, b in pairs])
    if answer == z3.sat:
        return None
    if answer != z3.unsat:
        return (f"encoding and model disagree at a step the solver could not decide ({solver.reason_unknown()}), "
                f"step {state.step} of {describe(w, state)}")
    for name, a, b in pairs:   # the first field, in state order, that no choice matching the earlier ones gives
        solver.add(a == b)
        if solver.check() == z3.unsat:
            return (f"encoding and model disagree at {rule_of(name)}: {name} is {z3.simplify(b)} in model/ and "
                    f"no choice gives it, step {state.step} of {describe(w, state)}")
    raise AssertionError("unreachable: the fields together were unsat")


@dataclass(frozen=True)
class StepTemplate:
    """The encoding's step (`sym_step_traced`, its choices named b_) of one
    config and number of requests, built once over unknowns: the state, the
    step counter, the workload and the step's inputs (`unknowns`, in the order
    `concrete_terms` lists their values), the next state's named fields and
    the choices' facts. The terms the encoding builds branch on the config
    alone, never on the state, so the template with its unknowns substituted
    by a concrete state's values is the step built over those values; z3
    substitutes in one native call what building costs thousands of Python
    calls."""

    unknowns: tuple[z3.ExprRef, ...]
    after: tuple[tuple[str, z3.ArithRef], ...]
    packed: z3.ExprRef   # the next state's fields, then the facts, as the arguments of one term


def step_template(cfg: Config, K: int) -> StepTemplate:
    """The `StepTemplate` of `cfg` with K requests, kept while the encoding's
    code is the same (the binding meets each config over many states; a test
    may replace a phase of the encoding, which then gets templates of its own)."""
    return _template(cfg, K, tuple(map(id, vars(bmc.Pass).values())) + (id(sym_step_traced),))


@functools.lru_cache(maxsize=256)
def _template(cfg: Config, K: int, encoding: tuple[int, ...]) -> StepTemplate:
    s, t = SymState.unknown("bind_s_", K), z3.Int("bind_t")
    w = SymWorkload(*(tuple(z3.Int(f"bind_{name}{i}") for i in range(K))
                      for name in ("prompt", "max_tokens", "priority", "arrival", "need")))
    ins = StepInputs.unknown("bind_in_", K)
    after, trace = sym_step_traced(s, t, w, SymConfig.of(cfg), ins, "b_")
    unknowns = (*s.fields(), t, *w.prompt, *w.max_tokens, *w.priority, *w.arrival, *w.need, *ins.aborts, *ins.stops)
    outputs = [*after.fields(), *trace.facts]
    pack = z3.Function("bind_pack", *(term.sort() for term in outputs), z3.BoolSort())
    return StepTemplate(unknowns, tuple(after.named()), pack(*outputs))


def concrete_terms(w: Workload, state: SchedState) -> tuple[z3.ExprRef, ...]:
    """The values of a `StepTemplate`'s unknowns for one step of w from `state`."""
    sw, ins = concrete_sym(w, state)
    return (*sym_of(state, w.config).fields(), z3.IntVal(state.step), *sw.prompt, *sw.max_tokens, *sw.priority,
            *sw.arrival, *sw.need, *ins.aborts, *ins.stops)


def stepped(w: Workload, state: SchedState) -> tuple[list[tuple[str, z3.ArithRef]], list[z3.BoolRef]]:
    """The encoding's step of w from `state`: the next state's named fields and
    the facts its choices satisfy (`step_template`, substituted in one pass over
    all of them, so that shared subterms are visited once)."""
    template = step_template(w.config, len(w.requests))
    done = z3.substitute(template.packed, *zip(template.unknowns, concrete_terms(w, state), strict=True))
    terms = [done.arg(k) for k in range(done.num_args())]
    names = [name for name, _ in template.after]
    return list(zip(names, terms[:len(names)], strict=True)), terms[len(names):]


def rule_of(field: str) -> str:
    """The rule a state field (`name[i]` or a pool total) belongs to."""
    return RULE_OF_FIELD[field.split("[")[0]]


def describe(w: Workload, state: SchedState) -> str:
    reqs = "; ".join(f"{r.rid} prompt {len(r.prompt)} max {r.max_tokens} prio {r.priority} arr {r.arrival} "
                     f"{s.status} f={s.frontier} ce={s.chunk_end} cd={s.chunk_depth} g={s.generated} "
                     f"byp={s.bypasses} pages={''.join('p' if p is None else 'c' for p in s.pages)}"
                     for r, s in zip(w.requests, state.reqs, strict=True))
    cache = f", cache holders {[h for _, h in state.cache]}, guard {sorted(state.guard)}" if state.cache else ""
    return f"state [{reqs}], free {state.free}{cache}"


def targets(s: SymState, s1: SymState, w: SymWorkload, c: SymConfig, ins: StepInputs,
            trace: StepTrace) -> dict[str, z3.BoolRef]:
    """Conditions on one step that aim a solved state at a rule."""
    K = w.K
    pre = trace.preemptions
    waiting = [z3.Or(x == bmc.WAITING, x == bmc.PREEMPTED) for x in s.status]
    running = [x == bmc.RUNNING for x in s.status]
    no_abort = z3.Not(z3.Or(ins.aborts))
    # a less urgent request runs at i's turn (no abort this step; none preempted earlier in the pass)
    less_urgent_runs = [z3.And(no_abort, z3.Not(z3.Or([h for h, a, _ in pre if a < i] + [False])),
                               z3.Or([z3.And(running[j], w.priority[j] > w.priority[i]) for j in range(i + 1, K)]
                                     + [z3.BoolVal(False)])) for i in range(K)]
    return {
        "preemption": z3.Or([h for h, _, _ in pre]),
        "victim skipped": z3.Or([z3.And(h, no_abort, z3.Or([z3.And(running[k], w.priority[k] > w.priority[i])
                                                  for k in range(j + 1, K)] + [z3.BoolVal(False)]))
                                 for h, i, j in pre]),
        "preemption refused": z3.Or([z3.And(trace.wanted[i], less_urgent_runs[i],
                                            z3.Not(z3.Or([h for h, a, _ in pre if a == i] + [False])))
                                     for i in range(K)]),
        "bypass limit": z3.Or([z3.And(waiting[i], s.bypasses[i] >= c.max_bypasses,
                                      z3.Or([s.status[k] == bmc.WAITING for k in range(i + 1, K)] + [False]))
                               for i in range(K)]),
        "watermark": z3.Or([z3.And(waiting[i], z3.Or(running), s.free - c.watermark < w.need[i],
                                   s.free >= w.need[i]) for i in range(K)]),
        "resume into the watermark": z3.Or([z3.And(s.status[i] == bmc.PREEMPTED, z3.Or(running), no_abort,
                                                   z3.Not(z3.Or([h for h, _, _ in pre] + [False])),
                                                   s.free - c.watermark < w.need[i], s.free >= w.need[i],
                                                   s1.status[i] == bmc.RUNNING) for i in range(K)]),
        "abort": z3.Or([z3.And(ins.aborts[i], running[i]) for i in range(K)]),
        "stop token": z3.Or([z3.And(ins.stops[i], s1.status[i] == FINISHED, s.status[i] != FINISHED,
                                    s1.generated[i] < w.max_tokens[i]) for i in range(K)]),
        "prompt-only finish": z3.Or([z3.And(w.max_tokens[i] == 0, running[i], z3.Not(ins.aborts[i]),
                                            s1.status[i] == FINISHED) for i in range(K)]),
        "rejection": z3.Or([z3.And(s.status[i] == PENDING, w.need[i] > c.num_blocks, s1.status[i] == FINISHED)
                            for i in range(K)]),
        "resume": z3.Or([z3.And(s.status[i] == bmc.PREEMPTED, s.frontier[i] > 0, s1.status[i] == bmc.RUNNING)
                         for i in range(K)]),
        "stage conflict": z3.Or([z3.And(running[i], s.frontier[i] == w.prompt[i],
                                        z3.Or([z3.And(waiting[k], s.frontier[k] < w.prompt[k])
                                               for k in range(K) if k != i] + [False])) for i in range(K)]),
    }


def solved_states(cfg: Config, K: int) -> list[tuple[str, Workload, SchedState]]:
    """One state per target that z3 can reach from the invariant under `cfg`."""
    sc = SymConfig.of(cfg)
    w, _ = symbolic_workload(K, cfg)   # this module's own limits below, not the lasso search's
    s, t = SymState.unknown("s_", K), z3.Int("t")
    ins = StepInputs.unknown("in_", K)
    s1, trace = sym_step_traced(s, t, w, sc, ins)
    base = w.facts() + [invariant(s, w, sc), t >= 0, t <= LIMITS["steps"]]
    for i in range(K):
        base += [w.prompt[i] <= LIMITS["prompt"], w.max_tokens[i] <= LIMITS["max_tokens"],
                 w.priority[i] >= 0, w.priority[i] <= LIMITS["priority"],
                 z3.Implies(s.status[i] == PENDING, w.arrival[i] >= t),
                 z3.Implies(s.status[i] != PENDING, w.arrival[i] < t),
                 z3.Implies(ins.aborts[i], w.arrival[i] <= t)]
        base += [z3.Implies(w.priority[i] == w.priority[j], w.arrival[i] <= w.arrival[j]) for j in range(i + 1, K)]
    out = []
    for label, goal in targets(s, s1, w, sc, ins, trace).items():
        solver = fresh_solver(20_000)
        solver.add(*base, goal)
        if solver.check() != z3.sat:
            continue
        m = solver.model()

        def val(x: z3.ExprRef, m: z3.ModelRef = m) -> z3.ExprRef:
            return m.eval(x, model_completion=True)

        def num(x: z3.ExprRef) -> int:
            return val(x).as_long()
        tt = num(t)
        specs = tuple(spec_of(i, num(w.prompt[i]), num(w.max_tokens[i]), num(w.priority[i]), num(w.arrival[i]),
                              z3.is_true(val(ins.stops[i])), tt if z3.is_true(val(ins.aborts[i])) else None)
                      for i in range(K))
        workload = Workload(cfg, specs)
        reqs = []
        for i, spec in enumerate(specs):
            status = [k for k, v in STATUS_CODES.items() if v == num(s.status[i])][0]
            pages = (None,) * total_pages(spec, cfg) if status == RUNNING else ()
            reqs.append(ReqState(status, num(s.frontier[i]), num(s.chunk_end[i]), num(s.chunk_depth[i]),
                                 num(s.generated[i]), pages, num(s.bypasses[i]),
                                 "length" if status == "finished" else None))
        out.append((label, workload, SchedState(tt, tuple(reqs), num(s.free))))
    return out


def binding_configs(modes: list[dict[str, object]] = DETERMINISTIC_MODES) -> list[Config]:
    """Every mode combination in `modes` under both policies, layouts
    alternating, and resumptions kept out of the watermark or let into it in
    turn."""
    out = []
    for k, m in enumerate(modes):
        for n, policy in enumerate(("guarded", "unguarded")):
            out.append(Config(**SIZES, **m, priority_preemption=True, preemption_policy=policy,
                              kv_layout="shared" if k % 2 else "last_exited", resume_watermark=(k + n) % 2 == 0))
    return out


def random_workload(rng: random.Random, cfg: Config, K: int, prefixes: bool) -> Workload:
    """Requests with short prompts (sharing a prefix when `prefixes`), tight for the pool."""
    shared = tuple(rng.randrange(2, 60) for _ in range(rng.choice((2, 4, 6))))
    reqs = []
    for i in range(K):
        n = rng.randint(1, 9)
        own = tuple(rng.randrange(2, 60) for _ in range(n))
        prompt = (shared + own)[:n] if prefixes and rng.random() < 0.7 else own
        arrival = rng.randint(0, 4)
        abort_at = arrival + rng.randint(0, 8) if rng.random() < 0.15 else None
        reqs.append(RequestSpec(f"r{i}", prompt, rng.randint(1 if prefixes else 0, 5), arrival, rng.randint(0, 3),
                                STOP_TOKEN if rng.random() < 0.2 else None, abort_at,
                                script_tokens=(rng.choice((0, STOP_TOKEN, 5)),)))
    return ordered(Workload(cfg, tuple(reqs)))


def run_disagreement(w: Workload, tally: dict[str, int], steps: int = 40) -> str | None:
    for state, _, _ in model_steps(w, steps):
        tally["random-run states"] += 1
        found = step_disagreement(w, state)
        if found:
            return found
    return None


# ----- the admission and preflight encodings ---------------------------------------------

def kv_of(state: SchedState, hashes: list[int]) -> KVState:
    """The model's pool as a KVState; cache entries in the order of `hashes`."""
    cache = dict(state.cache)
    return KVState(
        free=z3.IntVal(state.free),
        priv=tuple(z3.IntVal(sum(p is None for p in r.pages)) for r in state.reqs),
        hold=tuple(tuple(z3.BoolVal(h in r.pages) for h in hashes) for r in state.reqs),
        present=tuple(z3.BoolVal(h in cache) for h in hashes),
        holders=tuple(z3.IntVal(cache.get(h, 0)) for h in hashes))


def admission_disagreement(w: Workload, state: SchedState, tally: dict[str, int]) -> str | None:
    """Compare fits and the guarded preflight with model/ for every waiting
    request and victim of `state`; count evaluations in `tally`."""
    env = WorkloadEnv(w)
    cfg = w.config
    sim = _Step(state, env)
    active = any(r.status == RUNNING for r in state.reqs)
    for i, r in enumerate(state.reqs):
        plan = sim.plan(i)
        if r.status not in (WAITING, PREEMPTED) or plan is None:
            continue
        watermark = active and (r.status == WAITING or cfg.resume_watermark)   # the step encoding's rule
        P, bs = len(w.requests[i].prompt), cfg.block_size
        H = (P - 1) // bs
        mine = prompt_pages(w, i, H)
        hashes = mine + [h for h, _ in state.cache if h not in mine]
        kv = kv_of(state, hashes)
        running = tuple(z3.BoolVal(x.status == RUNNING) for x in state.reqs)
        if not z3.is_true(z3.simplify(conservation(kv, z3.IntVal(cfg.planes), z3.IntVal(cfg.num_blocks)))):
            return f"encoding and model disagree at block accounting: {describe(w, state)}"
        for v in [None] + [j for j, x in enumerate(state.reqs) if x.status == RUNNING]:
            pend_from = frozenset(j for j, x in enumerate(state.reqs) if x.status == RUNNING and j != v)
            pending = unpublished_pages(w, state, pend_from)
            ctx = adm.Ctx(planes=z3.IntVal(cfg.planes), num_blocks=z3.IntVal(cfg.num_blocks),
                          slots=z3.IntVal(cfg.max_num_seqs), watermark=z3.IntVal(cfg.watermark_blocks),
                          active=z3.BoolVal(watermark), running=running, pages=z3.IntVal(plan.pages),
                          hit_limit=H, pend=tuple(z3.BoolVal(h in pending) for h in mine))
            if v is None:
                enc, want, rule = z3.is_true(z3.simplify(adm.fits(kv, ctx))), sim.fits(i, plan, watermark), "admission"
            else:
                enc = z3.is_true(z3.simplify(adm.preflight(kv, ctx, v)))
                want, rule = sim.preflight(i, v, pend_from, watermark), "guarded preflight"
                tally["preflight rejections"] += not want
                tally["prefix hits in preflight"] += sim.hit_pages(i, pend_from) > 0
                tally["preflights decided by pending pages"] += want != sim.preflight(i, v, frozenset(), watermark)
            tally[rule] += 1
            if enc != want:
                return (f"encoding and model disagree at {rule}: {w.requests[i].rid} "
                        f"{'for victim ' + w.requests[v].rid if v is not None else ''} is {want} in model/ and "
                        f"{enc} in the encoding, {describe(w, state)}")
    return None


def admission_run_disagreement(w: Workload, tally: dict[str, int], steps: int = 30) -> str | None:
    for state, events, nxt in model_steps(w, steps):
        found = admission_disagreement(w, state, tally) or general_step_disagreement(w, state, events, nxt, tally)
        if found:
            return found
    return None


Window = Callable[[Workload, SchedState, list[Event], SchedState], int]


def request_index(w: Workload) -> dict[str, int]:
    """Each request's index in the workload, by id."""
    return {r.rid: i for i, r in enumerate(w.requests)}


def futile_preemptions(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Requesters of a priority preemption not admitted in the same step."""
    admitted = {e.rid for e in events if e.kind in ("admit", "resume")}
    index = request_index(w)
    return len({str(e.by) for e in events if isinstance(e, Preempt)
                and state.reqs[index[str(e.by)]].status != RUNNING} - admitted)


def growth_preemptions(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Preemptions a growing request made of another."""
    index = request_index(w)
    return sum(isinstance(e, Preempt) and e.by != e.rid and state.reqs[index[str(e.by)]].status == RUNNING
               for e in events)


def self_preemptions(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Growing requests that preempted themselves."""
    return sum(isinstance(e, Preempt) and e.by == e.rid for e in events)


def hits(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Admissions and resumptions with prefix hits."""
    return sum(isinstance(e, (Admit, Resume)) and e.hit_pages > 0 for e in events)


def cache_only_hits(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Admissions and resumptions hitting a page no request held."""
    index = request_index(w)
    cache = dict(state.cache)
    return sum(isinstance(e, (Admit, Resume)) and any(cache.get(h) == 0 for h in prompt_pages(
        w, index[e.rid], e.hit_pages)) for e in events)


def wanted_evictions(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Cache-only pages evicted that a request still waiting would hit."""
    evicted = {h for h, holders in state.cache if holders == 0} - {h for h, _ in nxt.cache}
    bs = w.config.block_size
    wanted = {h for i, r in enumerate(nxt.reqs) if r.status in (WAITING, PREEMPTED)
              for h in prompt_pages(w, i, (len(w.requests[i].prompt) - 1) // bs)}
    return len(evicted & wanted)


def in_flight_publications(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Pages published by a request whose WCPB chunk is still in flight."""
    index = request_index(w)
    return sum(e.kind == "publish" and nxt.reqs[index[e.rid]].chunk_end > nxt.reqs[index[e.rid]].frontier
               for e in events)


def guard_clearings(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """Admissions and resumptions of a request the futility guard held entries for."""
    guarded = {w.requests[i].rid for i, _ in state.guard}
    return sum(e.kind in ("admit", "resume") and e.rid in guarded for e in events)


def guard_decisions(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """1 when the step would have done otherwise with the futility guard empty."""
    return int(bool(state.guard) and step(replace(state, guard=frozenset()), WorkloadEnv(w))[1] != events)


WINDOWS: dict[str, Window] = {
    "futile preemptions": futile_preemptions, "hits": hits, "hits on cache-only pages": cache_only_hits,
    "evictions of a page a waiting request would hit": wanted_evictions,
    "publications with a chunk in flight": in_flight_publications, "guard entries cleared": guard_clearings,
    "steps the guard decided": guard_decisions, "growth preemptions": growth_preemptions,
    "self-preemptions": self_preemptions}


def general_step_disagreement(w: Workload, state: SchedState, events: list[Event], nxt: SchedState,
                              tally: dict[str, int]) -> str | None:
    """The step encoding with its choices (`transition_disagreement`) on one
    model step; counts the rare rules the step took (`WINDOWS`) in `tally`."""
    tally["states with choices"] += 1
    for name, count in WINDOWS.items():
        tally[name] += count(w, state, events, nxt)
    return transition_disagreement(w, state, nxt)


def general_workloads(rng: random.Random, plain: int, aimed: int, tries: int = 2000) -> list[Workload]:
    """`plain` random workloads with shared prompt prefixes under the modes whose
    step leaves choices open (incremental allocation, prefix caching), then
    `aimed` more whose run opens each of the rarest windows: a growing request
    preempting itself, a publication while a WCPB chunk is in flight."""
    configs = binding_configs([m for m in MODES if m not in DETERMINISTIC_MODES])

    def draw(n: int) -> Workload:
        return random_workload(rng, configs[n % len(configs)], 4, prefixes=True)

    return [draw(n) for n in range(plain)] + aimed_workloads(
        draw, (self_preemptions, in_flight_publications), aimed, tries)


def aimed_workloads(draw: Callable[[int], Workload], windows: Iterable[Window], aimed: int,
                    tries: int) -> list[Workload]:
    """For each window in turn, the first `aimed` of `tries` workloads drawn
    (`draw(n)`, n counting from 0 for each window) whose model run opens it."""
    out = []
    for window in windows:
        found = 0
        for n in range(tries):
            if found == aimed:
                break
            w = draw(n)
            if opens(window, w):
                out.append(w)
                found += 1
    return out


def bind(K: int = 4, runs: int = 16, seed: int = 0) -> Binding:
    """Compare every encoding with model/ (see the module docstring)."""
    compared = {"solved states": 0, "random-run states": 0}
    for cfg in binding_configs():
        for label, w, state in solved_states(cfg, K):
            compared["solved states"] += 1
            found = step_disagreement(w, state)
            if found:
                return Binding(compared, f"{found} (target: {label}, {mode_text(cfg)})")
    rng = random.Random(seed)
    configs = binding_configs()
    for n in range(runs):
        w = random_workload(rng, configs[n % len(configs)], K + 1, prefixes=False)
        found = run_disagreement(w, compared)
        if found:
            return Binding(compared, f"{found} ({mode_text(w.config)})")
    tally = dict.fromkeys(TALLY, 0)
    found = choice_runs_disagreement(rng, configs, runs, tally)
    return Binding({**compared, **tally}, found)


TALLY = ("admission", "guarded preflight", "preflight rejections", "prefix hits in preflight",
         "preflights decided by pending pages", "futile preemptions", "states with choices", "hits",
         "hits on cache-only pages", "evictions of a page a waiting request would hit",
         "publications with a chunk in flight", "guard entries cleared", "steps the guard decided",
         "growth preemptions", "self-preemptions")


def choice_runs_disagreement(rng: random.Random, configs: list[Config], runs: int,
                             tally: dict[str, int]) -> str | None:
    """The admission and preflight encodings, and the step encoding with its
    choices, on runs with prefix caching (`prefix_workloads`) and on runs under
    every mode with choices (`general_workloads`); the first disagreement."""
    for w in prefix_workloads(rng, configs, runs, aimed=runs // 2):
        found = admission_run_disagreement(w, tally)
        if found:
            return found
    for w in general_workloads(rng, 2 * runs, aimed=runs // 2):
        for state, events, nxt in model_steps(w, 30):
            found = general_step_disagreement(w, state, events, nxt, tally)
            if found:
                return f"{found} ({mode_text(w.config)})"
    return None


def prefix_workloads(rng: random.Random, configs: list[Config], plain: int, aimed: int,
                     tries: int = 4000) -> list[Workload]:
    """`plain` random workloads with prefix caching, then `aimed` more among those
    whose model run makes a futile preemption, and `aimed` among those with a
    guarded preflight that pages pending publication decide (windows random runs
    seldom open: a running request still prefilling pages the waiting request
    hits)."""
    def draw(n: int) -> Workload:
        cfg = replace(configs[n % len(configs)], prefix_caching=True, block_size=2, num_blocks=12,
                      kv_layout="shared", watermark_blocks=n % 3)
        return random_workload(rng, cfg, 4, prefixes=True)

    return [draw(n) for n in range(plain)] + aimed_workloads(    # even indices: the guarded policy
        lambda n: draw(2 * n), (futile_preemptions, pending_pages_wanted), aimed, tries)


def opens(window: Window, w: Workload, steps: int = 30) -> bool:
    """Does the model's run of w take a step that `window` counts?"""
    return any(window(w, *taken) for taken in model_steps(w, steps))


def pending_pages_wanted(w: Workload, state: SchedState, events: list[Event], nxt: SchedState) -> int:
    """1 when a waiting or preempted request would hit a prompt page that a
    running request holds and has not yet published (the pages the guarded
    preflight counts as pending hits). Read from the state alone, not from the
    preflight, so that a preflight changed in model/ still gets these
    workloads."""
    bs = w.config.block_size
    pending = unpublished_pages(w, state, [j for j, x in enumerate(state.reqs) if x.status == RUNNING])
    return int(any(r.status in (WAITING, PREEMPTED) and pending.intersection(
        prompt_pages(w, i, (len(w.requests[i].prompt) - 1) // bs)) for i, r in enumerate(state.reqs)))


def prompt_pages(w: Workload, i: int, pages: int) -> list[int]:
    """The prefix-cache keys of request i's first `pages` prompt pages."""
    bs = w.config.block_size
    return [page_hash(w.requests[i].prompt[: (k + 1) * bs]) for k in range(pages)]


def unpublished_pages(w: Workload, state: SchedState, holders: Iterable[int]) -> set[int]:
    """The keys of the full prompt pages that the requests `holders` hold
    privately (computed or being computed, not yet published)."""
    bs = w.config.block_size
    return {page_hash(w.requests[j].prompt[: (k + 1) * bs]) for j in holders
            for k, page in enumerate(state.reqs[j].pages) if page is None and (k + 1) * bs <= len(w.requests[j].prompt)}


def mode_text(cfg: Config) -> str:
    m = modes_of(cfg)
    return ", ".join(f"{k}={v}" for k, v in m.items())
