"""The list of obligations `loopcheck prove` discharges, with expected results."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from model.config import Config
from model.workload import Workload
from proofs.lasso import lasso_search
from proofs.obligations_kv import admission_atomic, futility, kv_conservation, preflight_soundness
from proofs.ranking import ranking_decreases
from proofs.result import ProofResult

Thunk = Callable[[], tuple[ProofResult, Workload | None]]


def obligations(base: Config, K: int, k: int) -> Iterator[tuple[str, Thunk]]:
    """(label, thunk) per obligation; a thunk returns the result and, for a
    livelock found, the counterexample workload."""
    def plain(fn: Callable[[], ProofResult]) -> Callable[[], tuple[ProofResult, None]]:
        return lambda: (fn(), None)

    C = K
    yield "kv-conservation", plain(lambda: kv_conservation(K, C))
    yield "admission-atomic", plain(lambda: admission_atomic(K, C))
    yield "preflight-soundness", plain(lambda: preflight_soundness(K, C, pending=False))
    yield "preflight-soundness-pending", plain(lambda: preflight_soundness(K, C, pending=True))
    yield "futility/guarded", plain(lambda: futility(k, "guarded"))
    yield "futility/unguarded", plain(lambda: futility(k, "unguarded"))
    yield "ranking-decreases", plain(lambda: ranking_decreases(K))
    yield "livelock-search", lambda: lasso_search(base, "unguarded", K, k)
    yield "no-lasso", lambda: lasso_search(base, "guarded", K, k)


def run_all(base: Config, K: int, k: int,
            progress: Callable[[str], None] | None = None) -> list[tuple[ProofResult, Workload | None]]:
    out = []
    for label, thunk in obligations(base, K, k):
        if progress:
            progress(label)
        out.append(thunk())
    return out
