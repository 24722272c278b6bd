"""Hypothesis strategies for configs, requests and workloads, sized to run fast.

Exported for users' own tests: `configs()`, `requests()`, `workloads()`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from model.config import Config
from model.workload import RequestSpec, Workload

VOCAB = 64


@st.composite
def configs(draw: st.DrawFn, **fixed: Any) -> Config:
    """Small configs covering every switch; keyword arguments pin fields."""
    num_loops = draw(st.integers(1, 4))
    layout = draw(st.sampled_from(["shared", "last_exited"]))
    planes = num_loops if layout == "last_exited" else 1
    values: dict[str, Any] = dict(
        block_size=draw(st.integers(1, 4)),
        num_blocks=draw(st.integers(planes * 2, planes * 12)),
        max_num_seqs=draw(st.integers(1, 4)),
        max_num_batched_tokens=draw(st.integers(1, 8)),
        prefill_chunk_size=draw(st.integers(1, 6)),
        num_loops=num_loops,
        min_loops=draw(st.integers(1, num_loops)),
        execution=draw(st.sampled_from(["refill", "mixed"])),
        wcpb=draw(st.booleans()),
        priority_preemption=draw(st.booleans()),
        preemption_policy=draw(st.sampled_from(["unguarded", "guarded"])),
        prefix_caching=draw(st.booleans()),
        kv_layout=layout,
        allocation=draw(st.sampled_from(["upfront", "incremental"])),
        snapshots=draw(st.booleans()),
        max_bypasses=draw(st.integers(0, 4)),
    )
    values.update(fixed)
    values["watermark_blocks"] = fixed.get(
        "watermark_blocks", draw(st.integers(0, max(0, values["num_blocks"] // 4))))
    return Config(**values)


@st.composite
def requests(draw: st.DrawFn, rid: str, max_arrival: int = 6,
             prefixes: tuple[tuple[int, ...], ...] = ()) -> RequestSpec:
    """One request; its prompt may start with one of `prefixes` (prefix sharing)."""
    head: tuple[int, ...] = draw(st.sampled_from(prefixes)) if prefixes and draw(
        st.booleans()) else ()
    tail = tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=0 if head else 1,
                               max_size=6)))
    arrival = draw(st.integers(0, max_arrival))
    return RequestSpec(
        rid=rid, prompt=head + tail, max_tokens=draw(st.integers(1, 5)),
        arrival=arrival, priority=draw(st.integers(0, 3)),
        stop_token=draw(st.none() | st.integers(0, 4)),
        abort_at=draw(st.none() | st.integers(arrival, arrival + 12)),
    )


@st.composite
def workloads(draw: st.DrawFn, config: st.SearchStrategy[Config] | None = None,
              max_requests: int = 5) -> Workload:
    """A config and 1..max_requests requests, some sharing prompt prefixes."""
    cfg = draw(config if config is not None else configs())
    prefixes = tuple(tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=6)))
                     for _ in range(2))
    n = draw(st.integers(1, max_requests))
    reqs = tuple(draw(requests(f"r{i}", prefixes=prefixes)) for i in range(n))
    return Workload(cfg, reqs)
