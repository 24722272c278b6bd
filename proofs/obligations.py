"""The list of obligations `loopcheck prove` discharges, with expected results.

The binding of the encodings to model/ comes first: when it fails, no result
of an encoding is reported as proved (`demote`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace

from loopcheck.model.config import Config
from loopcheck.model.workload import Workload
from loopcheck.proofs.binding import bind
from loopcheck.proofs.bmc import modes_of
from loopcheck.proofs.cache import ProofCache, obligation_key
from loopcheck.proofs.drain import DETERMINISTIC_MODES, MODES, across_modes, drain, preemption_pairs
from loopcheck.proofs.lasso import lasso_search
from loopcheck.proofs.obligations_kv import admission_atomic, futility, kv_conservation, preflight_soundness
from loopcheck.proofs.result import AGREES, DISAGREES, PROVED, UNKNOWN, ProofResult
from loopcheck.runctl.pool import in_processes

Thunk = Callable[[], tuple[ProofResult, Workload | None]]


def binding() -> ProofResult:
    """Every encoding evaluated on concrete states against model/ (proofs/binding.py)."""
    start = time.perf_counter()
    b = bind()
    return ProofResult("encodings bound to model/", "both", AGREES if b.agrees else DISAGREES,
                       time.perf_counter() - start, AGREES, detail=b.summary())


PREFIX_DRAIN_REQUESTS = 4   # drain with prefix caching at most this many requests unless `full`


def mode_groups() -> list[tuple[str, list[dict[str, object]]]]:
    """The drain rows: one per allocation and prefix caching, each over every
    execution x WCPB x snapshots combination."""
    out = []
    for allocation in ("upfront", "incremental"):
        for prefix in (False, True):
            label = allocation + (" + prefix caching" if prefix else "")
            out.append((label, [m for m in MODES if m["allocation"] == allocation and m["prefix_caching"] == prefix]))
    return out


def drain_size(modes: dict[str, object], drain_requests: int, full: bool) -> int:
    """Requests the drain proof of these modes covers: `drain_requests`, or with
    prefix caching at most PREFIX_DRAIN_REQUESTS unless `full` (its step is
    larger)."""
    return drain_requests if full or not modes["prefix_caching"] else min(drain_requests, PREFIX_DRAIN_REQUESTS)


DRAIN_POLICIES = ("guarded", "no preemption", "unguarded")


@dataclass(frozen=True)
class ProofPlan:
    """What a run of the obligations covers: `base` the config of the config
    drain and the lasso searches; `requests` sizes the KV and admission
    encodings and the lasso search, `steps` its steps; `drain_requests` the
    drain proofs (see `drain_size`, with `full` their whole size), one row per
    mode group for each of `policies`."""

    base: Config
    requests: int
    steps: int
    drain_requests: int = 6
    full: bool = False
    policies: tuple[str, ...] = DRAIN_POLICIES


def obligations(plan: ProofPlan) -> Iterator[tuple[str, Thunk]]:
    """(label, thunk) per obligation of the plan; a thunk returns the result
    and, for a livelock found, the counterexample workload."""
    def plain(fn: Callable[[], ProofResult]) -> Callable[[], tuple[ProofResult, None]]:
        return lambda: (fn(), None)

    base, K, k, drain_K, C = plan.base, plan.requests, plan.steps, plan.drain_requests, plan.requests
    yield "binding", plain(binding)
    yield "kv-conservation", plain(lambda: kv_conservation(K, C))
    yield "admission-atomic", plain(lambda: admission_atomic(K, C))
    yield "preflight-soundness", plain(lambda: preflight_soundness(K, C, pending=False))
    yield "preflight-soundness-pending", plain(lambda: preflight_soundness(K, C, pending=True))
    yield "futility/guarded", plain(lambda: futility("guarded"))
    yield "futility/unguarded", plain(lambda: futility("unguarded"))
    for policy in plan.policies:
        for label, modes in mode_groups():
            n = drain_size(modes[0], drain_K, plan.full)
            yield f"drain/{policy}/{label}", plain(
                lambda policy=policy, label=label, modes=modes, n=n:
                across_modes(f"drain {label}", policy, drain, n, modes))
    for policy in ("guarded", "unguarded"):
        yield f"preemption-pairs/{policy}", plain(
            lambda policy=policy: across_modes("preemption-pairs", policy, preemption_pairs, drain_K,
                                               DETERMINISTIC_MODES))
    yield "drain/config", plain(lambda: config_drain(base, drain_K, plan.full))
    yield "livelock-search", lambda: lasso_search(replace(base, allocation="upfront"), "unguarded", K, k)
    yield "livelock-search-incremental", lambda: lasso_search(
        replace(base, allocation="incremental"), "unguarded", K, k, name="livelock-search-incremental")
    yield "no-lasso", lambda: lasso_search(base, "guarded", K, k)


def config_drain(cfg: Config, drain_requests: int, full: bool = False) -> ProofResult:
    """Drain for the given config's own modes (every config switch is covered)."""
    modes = modes_of(cfg)
    result = drain(drain_size(modes, drain_requests, full), modes)
    result.name = "drain (this config)"
    return result


def demote(results: list[ProofResult]) -> list[ProofResult]:
    """Where the binding failed, proofs over the encodings are not reported as proved."""
    if all(r.status != DISAGREES for r in results):
        return results
    for r in results:
        if r.status == PROVED:
            r.status, r.detail = UNKNOWN, "not reported as proved: the encodings disagree with model/"
    return results


def run_all(plan: ProofPlan, progress: Callable[[str], None] | None = None, workers: int | None = None,
            cache: ProofCache | None = None, only: Collection[str] = ()) -> list[tuple[ProofResult, Workload | None]]:
    """Every obligation of the plan (or those whose label starts with one of
    `only`), in list order, on `workers` processes (default: the machine's
    cores, at most one per obligation); those `cache` holds for what they
    depend on are read from it (`ProofResult.cached`), the others computed and
    kept there. `progress` hears each one as it finishes."""
    labelled = [(n, label, thunk) for n, (label, thunk) in enumerate(obligations(plan))
                if not only or any(label.startswith(prefix) for prefix in only)]
    scope = replace(plan, policies=())   # (the policies choose which obligations there are, not what one holds)
    keys = {n: obligation_key(label, scope, thunk) for n, label, thunk in labelled} if cache else {}
    out: dict[int, tuple[ProofResult, Workload | None]] = {}
    for n, label, _ in labelled:
        kept = cache.get(keys[n]) if cache else None
        if kept is not None:
            out[n] = kept
            if progress:
                progress(f"{label}: {kept[0].status} (cached)")
    todo = [(n, label) for n, label, _ in labelled if n not in out]
    jobs = min(workers or os.cpu_count() or 1, max(len(todo), 1))

    def finished(k: int, found: tuple[ProofResult, Workload | None]) -> None:
        n, label = todo[k]
        out[n] = found
        if cache:
            cache.put(keys[n], *found)
        if progress:
            progress(f"{label}: {found[0].status} ({found[0].seconds:.1f}s)")

    if jobs == 1:
        for k, (n, _) in enumerate(todo):
            finished(k, _discharge((plan, n)))
    else:   # (forks: the workers are inside z3, which no signal interrupts, so a stop kills them)
        in_processes(_discharge, [(plan, n) for n, _ in todo], jobs, done=finished, fork=True, kill=True)
    ordered = [out[n] for n, _, _ in labelled]
    demote([r for r, _ in ordered])
    return ordered


def _discharge(job: tuple[ProofPlan, int]) -> tuple[ProofResult, Workload | None]:
    """Obligation number n of the plan (`job`: the plan and n; run in a worker process)."""
    plan, n = job
    for index, (_, thunk) in enumerate(obligations(plan)):
        if index == n:
            return thunk()
    raise IndexError(n)
