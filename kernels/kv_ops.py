"""KV pool writes (slot mapping) and whole-block gather / scatter for snapshots."""

from __future__ import annotations

import torch


def write_kv(k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Store k, v ([R, KVH, D]) at flat slots (block * block_size + offset)."""
    k_pool.view(-1, *k_pool.shape[2:])[slots] = k
    v_pool.view(-1, *v_pool.shape[2:])[slots] = v


def gather_blocks(pool: torch.Tensor, blocks: list[int]) -> torch.Tensor:
    """A CPU copy of the given blocks (first dimension of `pool`)."""
    return pool[torch.tensor(blocks, dtype=torch.long)].clone()


def scatter_blocks(pool: torch.Tensor, blocks: list[int], data: torch.Tensor) -> None:
    """Write `data` (from gather_blocks) back into the given blocks."""
    pool[torch.tensor(blocks, dtype=torch.long)] = data
