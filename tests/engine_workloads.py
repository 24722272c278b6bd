"""Workloads the engine tests share."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from loopcheck.model.workload import Workload, load_workload

EXAMPLES = Path(__file__).parent.parent / "examples"
SHARED = (7, 7, 9, 11, 13, 2)


def livelock_example() -> Workload:
    return load_workload(EXAMPLES / "livelock.json")


def busy(**cfg: object) -> Workload:
    """The livelock example, guarded, with prefix caching and a shared prompt prefix
    on half the requests: preemptions, snapshots, prefix hits and WCPB in one run."""
    w = livelock_example()
    reqs = tuple(replace(r, prompt=SHARED + r.prompt[:4]) if i % 2 else r
                 for i, r in enumerate(w.requests))
    return Workload(w.config, reqs).with_config(preemption_policy="guarded",
                                                prefix_caching=True, **cfg)
