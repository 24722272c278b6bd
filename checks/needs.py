"""KV need of a request as the contract defines it (docs/semantics.md, KV
accounting), for checks that judge any scheduler against it."""

from __future__ import annotations

from model.config import Config
from model.workload import RequestSpec


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def lifetime_blocks(spec: RequestSpec, cfg: Config) -> int:
    """Blocks the request holds at its largest: every page of prompt + max_tokens - 1
    positions, times the planes a page costs."""
    return ceil_div(len(spec.prompt) + spec.max_tokens - 1, cfg.block_size) * cfg.planes


def never_fits(spec: RequestSpec, cfg: Config) -> bool:
    """The request cannot complete even with the whole pool to itself."""
    return lifetime_blocks(spec, cfg) > cfg.num_blocks


def admission_blocks(spec: RequestSpec, generated: int, cfg: Config) -> int:
    """An upper bound on the blocks admitting the request takes now, before any
    prefix hit: its lifetime need under upfront allocation, else the pages of the
    positions it has (prompt plus kept tokens)."""
    if cfg.allocation == "upfront":
        return lifetime_blocks(spec, cfg)
    return ceil_div(len(spec.prompt) + generated, cfg.block_size) * cfg.planes
