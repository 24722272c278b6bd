"""`loopcheck check-adapter`'s judgement: a system driven through a few fixed
workloads on two configs, each run twice. Every run must keep the protocol,
break no property, and give the same trace and outputs both times."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from loopcheck.checks.base import Violation
from loopcheck.checks.suite import checks_for, default_mode
from loopcheck.driver.determinism import runs_differ
from loopcheck.driver.driver import Run
from loopcheck.fuzz.strategies import DEFAULT_SHAPE, OFF
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import RequestSpec, Workload
from loopcheck.sut.protocol import Capabilities, ProtocolError, SutFactory

# The small config (besides the default one); the system's pinned fields override both.
SMALL = {"num_blocks": 12, "block_size": 2, "max_num_seqs": 2, "max_num_batched_tokens": 6, "prefill_chunk_size": 4,
         "prefix_caching": True}


@dataclass(frozen=True)
class Outcome:
    """One workload on one config: `problem` is "" when the runs kept the protocol,
    broke no property and agreed; else what went wrong, with the violation (if a
    property broke) and the steps the first run took."""

    config: str
    workload: str
    steps: int
    problem: str = ""
    violation: Violation | None = None
    run: Run | None = None


def configs_for(caps: Capabilities) -> list[tuple[str, Config]]:
    """The default config and the small one, with the system's pinned fields."""
    return [("default", Config(**{**Config().to_json(), **caps.pinned})), ("small", Config(**{**SMALL, **caps.pinned}))]


def workloads_for(cfg: Config, caps: Capabilities) -> Iterator[tuple[str, Workload]]:
    """The fixed workloads, each named; those with a feature the system cannot
    take (`Shape.for_system`: what it refuses, aborts where it takes none) left out."""
    taken = DEFAULT_SHAPE.for_system(caps)
    burst = cfg.max_num_seqs + 2
    pages = max(1, cfg.num_blocks // (2 * cfg.planes))   # about half the pool a request
    candidates: list[tuple[str, str | None, tuple[RequestSpec, ...]]] = [
        ("one request", None, (RequestSpec("a", (1, 2, 3, 4, 5), 3),)),
        ("shared prefix", "prefixes", (RequestSpec("a", (1, 2, 3, 4, 5, 6), 3),
                                       RequestSpec("b", (1, 2, 3, 4, 7), 2, arrival=1))),
        ("more than max_num_seqs", None, tuple(RequestSpec(f"r{k}", (k, k + 1, k + 2), 2, priority=k % 2)
                                               for k in range(burst))),
        ("tight pool", None, tuple(RequestSpec(f"t{k}", tuple((k + i) % 50 for i in range(pages * cfg.block_size - 1)),
                                               2) for k in range(3))),
        ("never fits", "oversized", (RequestSpec("big", tuple(i % 50 for i in range(cfg.num_blocks * cfg.block_size
                                                                                      + 1)), 1),
                                     RequestSpec("small", (9, 8, 7), 2))),
        ("aborts", "aborts", (RequestSpec("run", (1, 2, 3), 6, abort_at=2),
                              *(RequestSpec(f"w{k}", (k, 3, 5), 2, abort_at=1 if k == burst - 1 else None)
                                for k in range(burst)))),
        ("stop tokens", "stop_tokens", tuple(RequestSpec(f"s{k}", (k, 7, 11), 6, stop_token=k) for k in range(5))),
        ("prompt only", "prompt_only", (RequestSpec("p", (4, 5, 6, 7), 0), RequestSpec("q", (4, 5, 6, 8), 2))),
    ]
    for name, feature, requests in candidates:
        if feature is None or getattr(taken, feature) != OFF:
            yield name, Workload(cfg, requests)


def judge(factory: SutFactory, caps: Capabilities) -> list[Outcome]:
    """Every fixed workload on each config the system takes; a config it refuses
    is one outcome saying so (both refused: a problem)."""
    outcomes = []
    checks = default_mode(caps.semantics)
    for label, cfg in configs_for(caps):
        for name, workload in workloads_for(cfg, caps):
            try:
                outcomes.append(_twice(label, name, workload, factory, checks))
            except WorkloadError as refused:
                outcomes.append(Outcome(label, "(config)", 0, f"refused: {refused}"))
                break
    return outcomes


def _twice(label: str, name: str, workload: Workload, factory: SutFactory, mode: str) -> Outcome:
    try:
        first, differs = runs_differ(workload, factory, lambda: checks_for(mode))
    except ProtocolError as broken:
        return Outcome(label, name, 0, f"protocol: {broken.rule}: {broken.detail}")
    steps = first.driver.t
    if differs is not None:   # (first: a finding of a run that differs may be its consequence)
        return Outcome(label, name, steps, f"not deterministic: the two runs differ from step {differs}")
    if first.violation is not None:
        return Outcome(label, name, steps, f"{first.violation.signature}: {first.violation.message}",
                       first.violation, first)
    return Outcome(label, name, steps, run=first)
