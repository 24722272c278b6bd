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
    """Small configs covering every switch; keyword arguments pin fields (fields
    that depend on them, such as min_loops or the watermark, are drawn within the
    pinned values)."""
    def pick(name: str, strategy: st.SearchStrategy[Any]) -> Any:
        return fixed[name] if name in fixed else draw(strategy)

    num_loops = pick("num_loops", st.integers(1, 4))
    layout = pick("kv_layout", st.sampled_from(["shared", "last_exited"]))
    planes = num_loops if layout == "last_exited" else 1
    num_blocks = pick("num_blocks", st.integers(planes * 2, planes * 8))
    values: dict[str, Any] = dict(
        block_size=pick("block_size", st.integers(1, 4)),
        num_blocks=num_blocks,
        max_num_seqs=pick("max_num_seqs", st.integers(1, 4)),
        max_num_batched_tokens=pick("max_num_batched_tokens", st.integers(1, 8)),
        prefill_chunk_size=pick("prefill_chunk_size", st.integers(1, 6)),
        num_loops=num_loops,
        min_loops=pick("min_loops", st.integers(1, num_loops)),
        execution=pick("execution", st.sampled_from(["refill", "mixed"])),
        wcpb=pick("wcpb", st.booleans()),
        priority_preemption=pick("priority_preemption", st.booleans()),
        preemption_policy=pick("preemption_policy", st.sampled_from(["unguarded", "guarded"])),
        prefix_caching=pick("prefix_caching", st.booleans()),
        kv_layout=layout,
        allocation=pick("allocation", st.sampled_from(["upfront", "incremental"])),
        snapshots=pick("snapshots", st.booleans()),
        max_bypasses=pick("max_bypasses", st.integers(0, 4)),
        watermark_blocks=pick("watermark_blocks", st.integers(0, max(0, num_blocks // 4))),
    )
    return Config(**{**values, **fixed})


@st.composite
def request_bodies(draw: st.DrawFn, prefixes: tuple[tuple[int, ...], ...] = (), max_prompt: int = 6,
                   max_tokens: int = 5, stop_tokens: bool = True) -> dict[str, Any]:
    """The parts of a request that do not depend on time: prompt (maybe starting
    with one of `prefixes`, for prefix sharing), max_tokens, priority, stop token."""
    head: tuple[int, ...] = draw(st.sampled_from(prefixes)) if prefixes and draw(st.booleans()) else ()
    tail = tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=0 if head else 1, max_size=max_prompt)))
    return dict(prompt=(head + tail)[: max(max_prompt, len(head))], max_tokens=draw(st.integers(1, max_tokens)),
                priority=draw(st.integers(0, 3)),
                stop_token=draw(st.none() | st.integers(0, 4)) if stop_tokens else None)


@st.composite
def requests(draw: st.DrawFn, rid: str, max_arrival: int = 6,
             prefixes: tuple[tuple[int, ...], ...] = ()) -> RequestSpec:
    """One request with an arrival step and maybe an abort step."""
    arrival = draw(st.integers(0, max_arrival))
    return RequestSpec(rid=rid, arrival=arrival, abort_at=draw(st.none() | st.integers(arrival, arrival + 12)),
                       **draw(request_bodies(prefixes)))


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
