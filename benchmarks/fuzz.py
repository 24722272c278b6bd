"""Time to the first counterexample of a fuzz campaign: per seed, the property
found, the time to find it (system import and shrinking excluded), the requests
left after shrinking, and whether the written file replays to the same property;
then the median over seeds.

Usage: python -m benchmarks.fuzz [--seeds 5] [--budget 60]
       (the unguarded livelock on loopcheck's engine, regression config)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Collection
from pathlib import Path

from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.suite import CheckSet
from loopcheck.driver.driver import run_workload
from loopcheck.fuzz.campaign import run_campaign
from loopcheck.fuzz.settings import CampaignSettings
from loopcheck.fuzz.strategies import DEFAULT_SHAPE, Shape
from loopcheck.model.workload import load_workload
from loopcheck.report import table
from loopcheck.sut.protocol import SutFactory


def hunt(label: str, expect: Collection[str], seeds: int, budget: float, factory: SutFactory = TorchSUT,
         policy: str = "unguarded", configs: str = "regression", check: str = "lockstep",
         shape: Shape = DEFAULT_SHAPE, ignore: tuple[str, ...] = ()) -> str:
    """A table of one campaign per seed (seeds 1..`seeds`, each campaign's own
    seeds derived from it) and the median time to a counterexample of an
    expected property; `ignore`: properties or signatures not reported (known
    bugs), in the campaign and in the replay."""
    checks = CheckSet(check).ignoring(*ignore)
    rows, times = [], []
    for seed in range(1, seeds + 1):
        with tempfile.TemporaryDirectory() as out:
            r = run_campaign(CampaignSettings(
                policy, budget, seed, Path(out), configs, factory=factory, checks=checks, shape=shape))
            v = r.violation
            replays = "-"
            if v is not None:
                again = run_workload(load_workload(r.counterexample), factory, checks.build()).violation
                replays = "yes" if again is not None and again.prop == v.prop else "NO"
        hit = v is not None and v.prop in expect and r.time_to_failure is not None
        if hit:
            times.append(r.time_to_failure)
        rows.append([seed, v.prop if v else "none", f"{r.time_to_failure:.2f}" if v and r.time_to_failure else "-",
                     r.requests if v else "-", replays, f"{r.seconds:.1f}"])
    text = table(["seed", "property", "time to counterexample s", "requests after shrink", "replays", "total s"],
                 rows)
    median = f"{statistics.median(times):.2f}s" if times else "n/a"
    return (f"{label}\n{text}\nmedian time to {' or '.join(sorted(expect))}: {median} "
            f"({len(times)}/{seeds} seeds found it within {budget:g}s)\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=60.0)
    args = parser.parse_args()
    print(hunt("the unguarded livelock, loopcheck's engine, regression config", {"livelock"}, args.seeds,
               args.budget))


if __name__ == "__main__":
    main()
