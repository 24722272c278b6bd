"""What guidance from the system costs: the same workloads run on a system plain,
with coverage of its own code measured (driver/coverage.py), and with the run's
features computed too (fuzz/features.py); microseconds per step (the median of
3 passes over the workloads) and the ratio to plain, per system.

Usage: python -m benchmarks.guidance [--workloads 150] [--seed 1]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

from benchmarks.subjects.hashsched import clean
from loopcheck.adapters.loader import capabilities_of
from loopcheck.checks.suite import checks_for
from loopcheck.driver.coverage import EdgeCoverage
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.directed import draw_workloads
from loopcheck.fuzz.features import run_features
from loopcheck.fuzz.strategies import configs, workloads
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload
from loopcheck.report import table
from loopcheck.sut.code import code_paths
from loopcheck.sut.protocol import SutFactory


def per_step(factory: SutFactory, ws: list[Workload], mode: str) -> float:
    """Microseconds per step over the workloads, property checks on: `plain`,
    `coverage` or `features` (coverage and the run's features)."""
    caps = capabilities_of(factory)
    coverage = EdgeCoverage(code_paths(caps.code)) if mode != "plain" and caps.code else None
    steps, start = 0, time.perf_counter()
    for w in ws:
        held: list[int] = []
        run = run_workload(w, factory, checks_for("property"), on_step=lambda e, o, held=held: held.append(
            o.blocks_held), coverage=coverage)
        steps += run.driver.t
        if mode == "features":
            cfg = w.config
            run_features(cfg.num_blocks, cfg.block_size, run.driver.specs, run.driver.trace, held,
                         coverage.edges if coverage else None)
    return 1e6 * (time.perf_counter() - start) / max(steps, 1)


def accepts(factory: SutFactory, w: Workload) -> bool:
    """Whether the system takes the workload's config (vLLM refuses some)."""
    try:
        capabilities_of(factory, w.config)
    except WorkloadError:
        return False
    return True


def systems() -> list[tuple[str, Callable[[], SutFactory]]]:
    from loopcheck.adapters.torch_sut import TorchSUT

    out: list[tuple[str, Callable[[], SutFactory]]] = [("hashsched (benchmarks/subjects)", lambda: clean),
                                                       ("torch engine", lambda: TorchSUT)]
    if importlib.util.find_spec("vllm") is not None:
        from loopcheck.adapters.vllm_sut import VllmSUT
        out.append(("vLLM 0.33 v1 scheduler", lambda: VllmSUT))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for name, make in systems():
        factory = make()
        pinned = capabilities_of(factory).pinned
        ws = [w for w in draw_workloads(workloads(configs(**pinned), max_requests=6), args.seed, args.workloads)
              if accepts(factory, w)]
        cost = {mode: statistics.median(per_step(factory, ws, mode) for _ in range(3))
                for mode in ("plain", "coverage", "features")}
        rows.append([name, f"{cost['plain']:.0f}", f"{cost['coverage']:.0f}", f"{cost['features']:.0f}",
                     f"{cost['coverage'] / cost['plain']:.2f}x", f"{cost['features'] / cost['plain']:.2f}x"])
    print(table(["system", "us/step plain", "us/step coverage", "us/step coverage+features", "coverage / plain",
                 "guided / plain"], rows))


if __name__ == "__main__":
    main()
