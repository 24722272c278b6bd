"""KV need of a request as the contract defines it (docs/semantics.md, KV
accounting; the rules themselves live in model/reference.py), for checks that
judge any scheduler against it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from loopcheck.model.config import Config
from loopcheck.model.reference import ceil_div, never_fits, total_pages
from loopcheck.model.workload import RequestSpec
from loopcheck.sut.view import RUNNING, RequestView

__all__ = ["admission_blocks", "covered_blocks", "held_at_most", "lifetime_blocks", "never_fits"]


def lifetime_blocks(spec: RequestSpec, cfg: Config) -> int:
    """Blocks the request holds at its largest: every page of prompt + max_tokens - 1
    positions (the prompt's alone at max_tokens 0), times the planes a page costs."""
    return total_pages(spec, cfg) * cfg.planes


def admission_blocks(spec: RequestSpec, generated: int, cfg: Config) -> int:
    """An upper bound on the blocks admitting the request takes now, before any
    prefix hit: its lifetime need under upfront allocation, else the pages of the
    positions it has (prompt plus kept tokens)."""
    if cfg.allocation == "upfront":
        return lifetime_blocks(spec, cfg)
    return ceil_div(len(spec.prompt) + generated, cfg.block_size) * cfg.planes


def covered_blocks(running: Iterable[RequestView], cfg: Config) -> int:
    """The fewest blocks that hold the KV the trace says running requests have:
    every page under a request's `reach`, each costing `planes` blocks, a page
    counted once per request, or, with prefix caching, a full page once per
    content (the tokens up to its end), as requests with the same prefix may
    share it (a partial page is never shared)."""
    pages: set[object] = set()
    bs = cfg.block_size
    for r in running:
        reach = r.reach or 0
        for k in range(ceil_div(reach, bs)):
            end = (k + 1) * bs
            pages.add(r.content(end) if cfg.prefix_caching and end <= reach else (r.spec.rid, k))
    return len(pages) * cfg.planes


def held_at_most(requests: Iterable[RequestView], cfg: Config, released: Mapping[str, int] | None = None) -> int:
    """The most blocks `requests` may hold by the trace. A running request:
    under upfront allocation its lifetime's, else the pages under its `reach`
    (those of the positions its work so far wrote, which incremental allocation
    grows to before each work item) or under the end of the KV load it was
    admitted with (`RequestView.load`), if further, and, under speculative
    decoding, twice `spec_tokens` positions past it (the drafts it verified and
    may verify next, rejected ones included). Any other request: the pages
    under the end of its KV load, while it waits for it or after it, or while
    the load of a finished one is still in flight (the store writes them);
    else none (waiting, preempted, recomputed or snapshotted to the CPU,
    finished). Under async scheduling, besides, a request that stopped running
    in the step (finished or preempted; `released`, by the reach it had) may
    keep the pages under that reach and one position more (a decode the batch
    in flight runs for nothing) until that batch, which may still write them,
    has come back. Each page `planes` blocks, none shared; cache-only pages
    count as free."""
    most = 0
    for r in requests:
        loaded = r.load.end if r.load is not None else 0
        if r.status != RUNNING:
            most += ceil_div(loaded, cfg.block_size) * cfg.planes
        elif cfg.allocation == "upfront":
            most += lifetime_blocks(r.spec, cfg)
        else:
            most += ceil_div(max(r.reach or 0, loaded) + 2 * cfg.spec_tokens, cfg.block_size) * cfg.planes
    if cfg.async_scheduling:
        most += sum(ceil_div(reach + 1, cfg.block_size) * cfg.planes for reach in (released or {}).values())
    return most
