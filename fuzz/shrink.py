"""Shrinking a failing recorded workload directly: drop requests, then shorten
prompts and max_tokens, keeping each change only if replaying still breaks the
same property. Cheaper than re-running Hypothesis' shrinker through whole
stateful runs, and bounded in time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

from fuzz.session import AdapterFactory, Violation, replay_workload
from model.workload import Workload


def _candidates(w: Workload) -> Iterator[Workload]:
    reqs = list(w.requests)
    for i in range(len(reqs)):
        yield Workload(w.config, tuple(reqs[:i] + reqs[i + 1:]))
    for i, r in enumerate(reqs):
        if r.abort_at is not None:
            yield Workload(w.config, tuple(reqs[:i] + [replace(r, abort_at=None)] + reqs[i + 1:]))
        for shorter in {len(r.prompt) // 2, len(r.prompt) - 1} - {0, len(r.prompt)}:
            yield Workload(w.config, tuple(reqs[:i] + [replace(r, prompt=r.prompt[:shorter])] + reqs[i + 1:]))
        for fewer in {r.max_tokens // 2, r.max_tokens - 1} - {0, r.max_tokens}:
            yield Workload(w.config, tuple(reqs[:i] + [replace(r, max_tokens=fewer)] + reqs[i + 1:]))


def shrink(w: Workload, prop: str, adapter_factory: AdapterFactory,
           seconds: float = 30.0) -> tuple[Workload, Violation]:
    """The smallest workload found (within `seconds`) that still violates `prop`."""
    best, _ = replay_workload(w, adapter_factory)
    if best is None or best.prop != prop:
        raise ValueError(f"the workload does not reproduce {prop!r}")
    deadline = time.monotonic() + seconds
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for cand in _candidates(w):
            if time.monotonic() >= deadline or not cand.requests:
                continue
            v, _ = replay_workload(cand, adapter_factory)
            if v is not None and v.prop == prop:
                w, best, improved = cand, v, True
                break
    return w, best
