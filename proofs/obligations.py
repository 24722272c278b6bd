"""The list of obligations `loopcheck prove` discharges, with expected results.

The binding of the encodings to model/ comes first: when it fails, no result
of an encoding is reported as proved (`demote`)."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed

from loopcheck.model.config import Config
from loopcheck.model.workload import Workload
from loopcheck.proofs.binding import bind
from loopcheck.proofs.bmc import modes_of, supported
from loopcheck.proofs.drain import across_modes, drain, expected_status, preemption_pairs
from loopcheck.proofs.lasso import lasso_search
from loopcheck.proofs.obligations_kv import admission_atomic, futility, kv_conservation, preflight_soundness
from loopcheck.proofs.result import AGREES, DISAGREES, PROVED, UNKNOWN, ProofResult

Thunk = Callable[[], tuple[ProofResult, Workload | None]]


def binding() -> ProofResult:
    """Every encoding evaluated on concrete states against model/ (proofs/binding.py)."""
    start = time.perf_counter()
    b = bind()
    return ProofResult("encodings bound to model/", "both", AGREES if b.agrees else DISAGREES,
                       time.perf_counter() - start, AGREES, detail=b.summary())


def obligations(base: Config, K: int, k: int, drain_K: int) -> Iterator[tuple[str, Thunk]]:
    """(label, thunk) per obligation; a thunk returns the result and, for a
    livelock found, the counterexample workload. K sizes the KV and admission
    encodings and the lasso search, k its steps; drain_K the drain proofs."""
    def plain(fn: Callable[[], ProofResult]) -> Callable[[], tuple[ProofResult, None]]:
        return lambda: (fn(), None)

    C = K
    yield "binding", plain(binding)
    yield "kv-conservation", plain(lambda: kv_conservation(K, C))
    yield "admission-atomic", plain(lambda: admission_atomic(K, C))
    yield "preflight-soundness", plain(lambda: preflight_soundness(K, C, pending=False))
    yield "preflight-soundness-pending", plain(lambda: preflight_soundness(K, C, pending=True))
    yield "futility/guarded", plain(lambda: futility("guarded"))
    yield "futility/unguarded", plain(lambda: futility("unguarded"))
    for policy in ("guarded", "no preemption", "unguarded"):
        yield f"drain/{policy}", plain(lambda policy=policy: across_modes("drain", policy, drain, drain_K))
    for policy in ("guarded", "unguarded"):
        yield f"preemption-pairs/{policy}", plain(
            lambda policy=policy: across_modes("preemption-pairs", policy, preemption_pairs, drain_K))
    yield "drain/config", plain(lambda: config_drain(base, drain_K))
    yield "livelock-search", lambda: lasso_search(base, "unguarded", K, k)
    yield "no-lasso", lambda: lasso_search(base, "guarded", K, k)


def config_drain(cfg: Config, K: int) -> ProofResult:
    """Drain for the given config's own modes, or unknown where it is outside
    the class the step encoding covers (never reported as proved there)."""
    modes = modes_of(cfg)
    policy = cfg.preemption_policy if cfg.priority_preemption else "no preemption"
    why = supported(cfg)
    if why:
        return ProofResult("drain (this config)", policy, UNKNOWN, 0.0, expected_status(policy, K),
                           detail=f"outside the proved class: {why}")
    result = drain(K, modes)
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


def run_all(base: Config, K: int, k: int, drain_K: int = 6,
            progress: Callable[[str], None] | None = None,
            workers: int | None = None) -> list[tuple[ProofResult, Workload | None]]:
    """Every obligation, in list order, on `workers` processes (default: up to
    two, the cores CI has); `progress` hears each one as it finishes."""
    labels = [label for label, _ in obligations(base, K, k, drain_K)]
    jobs = workers or min(2, os.cpu_count() or 1)
    context = multiprocessing.get_context("fork") if jobs > 1 else None
    out: dict[int, tuple[ProofResult, Workload | None]] = {}
    if context is None:
        for n, label in enumerate(labels):
            out[n] = _discharge(base, K, k, drain_K, n)
            if progress:
                progress(f"{label}: {out[n][0].status}")
    else:
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            pending = {pool.submit(_discharge, base, K, k, drain_K, n): n for n in range(len(labels))}
            try:
                for done in as_completed(pending):
                    n = pending[done]
                    out[n] = done.result()
                    if progress:
                        progress(f"{labels[n]}: {out[n][0].status} ({out[n][0].seconds:.1f}s)")
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    ordered = [out[n] for n in range(len(labels))]
    demote([r for r, _ in ordered])
    return ordered


def _discharge(base: Config, K: int, k: int, drain_K: int, n: int) -> tuple[ProofResult, Workload | None]:
    """Obligation number n (run in a worker process)."""
    for index, (_, thunk) in enumerate(obligations(base, K, k, drain_K)):
        if index == n:
            return thunk()
    raise IndexError(n)
