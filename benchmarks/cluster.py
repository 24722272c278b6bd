"""What running on a Ray cluster costs, and the throughput it would give at 16, 64
and 256 cores (docs/cluster.md, "At scale"), from measured costs:

- a task: its round trip on a warm worker, and what a cold worker pays once to
  import loopcheck and the system (a fresh Python process, here);
- a fuzz campaign: its examples per second and what it asks of the hub per
  second (calls by kind, bytes its fetches bring), from `loopcheck fuzz
  --cluster --json` on the cluster against `--workers` of as many processes
  here (the hub's cost per campaign is the gap between the two);
- the hub: its busy time per call (a burst of calls sent without waiting, timed
  to its last answer): a save, a claim, and a fetch of a key as large as the
  campaigns' mean fetch;
- an exploration: the plan's seconds and each unit's seconds, every unit of
  --scope explored alone here.

The estimate: fuzz throughput = cores x a campaign's rate, while the hub is not
busy all the time (its load = cores x calls per campaign-second x busy time per
call; the core count at load 1 is where it stops growing); an exploration's
time = the plan + a task's start + its largest part (units dealt round-robin to
the parts, as --part deals them), its speed-up against one process.

Without --cluster it starts a local cluster of two nodes with a CPU each
(benchmarks/local_cluster.py) and stops it after.

Usage: python -m benchmarks.cluster [--cluster HOST:PORT] [--adapter A] [--scope small] [--seconds 30] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from benchmarks.local_cluster import local_cluster
from loopcheck.adapters.loader import capabilities_of, load_factory
from loopcheck.checks.suite import CheckSet
from loopcheck.cluster import connect
from loopcheck.cluster_share import open_hub
from loopcheck.explorer.scope import load_scope
from loopcheck.explorer.scoped import Limits, explore_units, make_plan
from loopcheck.report import table

MINISCHED = "examples/adapter/minisched_adapter.py:MiniSchedSUT"
CORES = (1, 2, 16, 64, 256)
ROOT = Path(__file__).resolve().parent.parent


def median_seconds(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def task_costs(address: str, adapter: str) -> dict[str, float]:
    """A task's round trip on a warm worker (median of 30) and a cold worker's
    imports (a fresh Python process importing the campaign code and the system,
    median of 3)."""
    ray = connect(address)
    try:
        noop = ray.remote(lambda: None)
        ray.get(noop.remote())
        warm = median_seconds(lambda: ray.get(noop.remote()), 30)
    finally:
        ray.shutdown()
    code = (f"from loopcheck.adapters.loader import load_factory; import loopcheck.fuzz.campaign; "
            f"load_factory({adapter!r})")
    cold = median_seconds(lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT), 3)
    return {"warm round trip": warm, "cold worker imports": cold}


def campaign_costs(address: str, adapter: str, seconds: float, seed: int) -> dict[str, Any]:
    """One fuzz run on the cluster (a campaign per CPU, keep-going) and one of as
    many worker processes here: examples per campaign-second each, and the
    cluster campaigns' calls on the hub per campaign-second by kind."""
    out: dict[str, Any] = {}
    for where, flags in (("cluster", ["--cluster", address]), ("processes", None)):
        with tempfile.TemporaryDirectory() as folder:
            argv = ["fuzz", "--adapter", adapter, "--keep-going", "--budget-seconds", f"{seconds:g}", "--seed",
                    str(seed), "--out", folder, "--json"]
            flags = flags or ["--workers", str(out["cluster"]["workers"])]
            done = subprocess.run([sys.executable, "-m", "loopcheck.cli", *argv, *flags], capture_output=True,
                                  text=True, cwd=ROOT)
            summary = json.loads(done.stdout.splitlines()[-1])
        campaign_seconds = summary["workers"] * seconds
        out[where] = {"workers": summary["workers"], "rate": summary["examples"] / campaign_seconds,
                      "shared": {kind: calls / campaign_seconds for kind, calls in summary["shared"].items()}}
    return out


def hub_costs(address: str, fetch_bytes: float) -> dict[str, float]:
    """The hub's busy seconds per save, per claim and per fetch of a key holding
    `fetch_bytes` (in entries of 700 bytes, a corpus entry's usual size): a
    burst of 2,000 saves, 200 claims and 100 fetches, each sent without waiting
    and timed to the last answer."""
    ray = connect(address)
    try:
        with tempfile.TemporaryDirectory() as folder:
            hub = open_hub(ray, str(Path(folder) / "db"), Path(folder))
            ray.get(hub.fetch.remote(b"warm"))
            entries = max(1, round(fetch_bytes / 700))
            key = b"loopcheck:corpus:bench"
            ray.get([hub.save.remote(key, b"%06d" % k + b"x" * 694) for k in range(entries)])

            def burst(calls: Callable[[int], Any], count: int) -> float:
                start = time.perf_counter()
                ray.get([calls(k) for k in range(count)])
                return (time.perf_counter() - start) / count

            return {"save": burst(lambda k: hub.save.remote(b"bench", b"v%d" % k), 2000),
                    "claim": burst(lambda k: hub.claim.remote(f"sig-{k}", "w0", CheckSet("property"),
                                                               str(Path(folder) / "f" / f"{k}.json"), b"{}"), 200),
                    "fetch": burst(lambda k: hub.fetch.remote(key), 100)}
    finally:
        ray.shutdown()


def unit_costs(adapter: str, scope_name: str) -> tuple[float, list[float]]:
    """The plan's seconds and each unit's, every unit explored alone here."""
    factory = load_factory(adapter)
    caps = capabilities_of(factory)
    scope = load_scope(scope_name, 0)
    start = time.perf_counter()
    plan = make_plan(factory, scope, caps)
    plan_seconds = time.perf_counter() - start
    checks = CheckSet("property")
    units = []
    for unit in range(len(plan.units)):
        start = time.perf_counter()
        explore_units(factory, plan, [unit], checks, Limits(), keep_going=True)
        units.append(time.perf_counter() - start)
    return plan_seconds, units


def explore_time(plan: float, units: list[float], parts: int, task: float) -> float:
    """Seconds of an exploration in `parts` parts (units dealt round-robin), each
    paying the plan and a task's start; one part pays no task."""
    largest = max(sum(units[k::parts]) for k in range(min(parts, len(units))))
    return plan + largest + (task if parts > 1 else 0.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.splitlines()[0])
    p.add_argument("--cluster", help="a running head's HOST:PORT (default: a local two-node cluster for the run)")
    p.add_argument("--adapter", default=MINISCHED)
    p.add_argument("--scope", default="small")
    p.add_argument("--seconds", type=float, default=30.0, help="each fuzz run's budget")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    with nullcontext(args.cluster) if args.cluster else local_cluster((1, 1)) as cluster:
        address = cluster if isinstance(cluster, str) else cluster.address
        tasks = task_costs(address, args.adapter)
        campaigns = campaign_costs(address, args.adapter, args.seconds, args.seed)
        shared = campaigns["cluster"]["shared"]
        fetch_bytes = shared.get("fetched bytes", 0.0) / max(shared.get("fetch", 0.0), 1e-9)
        hub = hub_costs(address, fetch_bytes)
    plan, units = unit_costs(args.adapter, args.scope)
    print(f"task: warm round trip {tasks['warm round trip'] * 1e3:.1f} ms; a cold worker's imports "
          f"{tasks['cold worker imports']:.2f} s")
    cluster, here = campaigns["cluster"], campaigns["processes"]
    print(f"fuzz campaign ({args.adapter}, {args.seconds:g} s, {cluster['workers']} at once): "
          f"{cluster['rate']:.1f} examples/s on the cluster, {here['rate']:.1f} in processes here "
          f"(ratio {cluster['rate'] / max(here['rate'], 1e-9):.2f})")
    print("hub calls per campaign-second: " + ", ".join(f"{kind} {rate:.2f}" for kind, rate in shared.items()))
    print(f"hub busy time per call: save {hub['save'] * 1e3:.2f} ms, claim {hub['claim'] * 1e3:.2f} ms, "
          f"fetch of {fetch_bytes / 1e3:.0f} kB {hub['fetch'] * 1e3:.2f} ms")
    print(f"exploration ({args.scope}): plan {plan:.2f} s, {len(units)} units, {sum(units):.1f} s in all, the largest "
          f"{max(units):.2f} s")
    per_second = sum(shared.get(kind, 0.0) * hub[kind] for kind in ("save", "claim", "fetch"))
    per_second += (shared.get("delete", 0.0) + shared.get("move", 0.0)) * hub["save"]
    one = explore_time(plan, units, 1, 0.0)
    rows = []
    for cores in CORES:
        load = cores * per_second
        seconds = explore_time(plan, units, cores, tasks["warm round trip"] + tasks["cold worker imports"])
        rows.append([cores, f"{cores * cluster['rate']:,.0f}", f"{load:.2f}", f"{seconds:.1f}",
                     f"{one / seconds:.1f}x"])
    print(table(["cores", "fuzz examples/s", "hub load", f"explore {args.scope} s", "speed-up"], rows))
    if per_second > 0:
        print(f"the hub is busy all the time at about {1 / per_second:,.0f} campaigns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
