"""Depth-aware paged KV cache: a block pool with free queue, prefix-cache pages
with holder counts and eviction, the KV tensors themselves, and CPU snapshots.

A page covers block_size positions and owns `planes` blocks: one per recurrence
depth under last_exited, one under shared. Plane p of a page is block
`page.blocks[p]` in every layer's pool.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import torch

from loopcheck.kernels.kv_ops import gather_blocks, scatter_blocks


@dataclass(eq=False)
class Page:
    blocks: tuple[int, ...]
    key: bytes | None = None   # prefix-cache key once published
    holders: int = 1


def prefix_key(tokens: tuple[int, ...] | list[int]) -> bytes:
    """Content key of the page that ends this prompt prefix."""
    return hashlib.sha256(b"".join(t.to_bytes(4, "little") for t in tokens)).digest()


class BlockPool:
    """Block bookkeeping. Contract: free_count() counts the free queue plus
    cache-only pages; new_page() succeeds whenever free_count() >= planes."""

    def __init__(self, num_blocks: int, planes: int) -> None:
        self.num_blocks = num_blocks
        self.planes = planes
        self.free: deque[int] = deque(range(num_blocks))
        self.cached: dict[bytes, Page] = {}
        self.evictable: OrderedDict[bytes, None] = OrderedDict()

    def free_count(self) -> int:
        return len(self.free) + self.planes * len(self.evictable)

    def new_page(self) -> Page:
        while len(self.free) < self.planes:
            key, _ = self.evictable.popitem(last=False)
            self.free.extend(self.cached.pop(key).blocks)
        return Page(tuple(self.free.popleft() for _ in range(self.planes)))

    def lookup(self, key: bytes) -> Page | None:
        return self.cached.get(key)

    def is_cache_only(self, key: bytes) -> bool:
        return key in self.evictable

    def share(self, key: bytes) -> Page:
        page = self.cached[key]
        page.holders += 1
        self.evictable.pop(key, None)
        return page

    def publish(self, page: Page, key: bytes) -> bool:
        """Make a private, fully written prompt page shareable; False if the key is taken."""
        if key in self.cached:
            return False
        page.key = key
        self.cached[key] = page
        return True

    def release(self, page: Page) -> None:
        if page.key is None:
            self.free.extend(page.blocks)
            return
        page.holders -= 1
        if page.holders == 0:
            self.evictable[page.key] = None

    def conservation_errors(self, held: list[Page]) -> list[str]:
        """KV conservation on the real pool, given every page requests hold."""
        errors = []
        private = [p for p in held if p.key is None]
        blocks = list(self.free) + [b for p in private for b in p.blocks]
        blocks += [b for p in self.cached.values() for b in p.blocks]
        if sorted(blocks) != list(range(self.num_blocks)):
            errors.append(f"blocks lost or doubly owned: {len(blocks)} accounted of {self.num_blocks}")
        counts: dict[bytes, int] = {}
        for p in held:
            if p.key is not None:
                counts[p.key] = counts.get(p.key, 0) + 1
        for key, page in self.cached.items():
            if page.holders != counts.get(key, 0):
                errors.append(f"cached page holders {page.holders} != {counts.get(key, 0)} requests")
        return errors


@dataclass
class Snapshot:
    """A preempted request's KV of its written positions, on the CPU."""

    written: int
    keys: list[torch.Tensor] = field(default_factory=list)    # per layer [pages, planes, bs, KVH, D]
    values: list[torch.Tensor] = field(default_factory=list)


class KVStore:
    """The KV tensors: per layer, K and V pools of [num_blocks, block_size, KVH, D],
    zero-initialised."""

    def __init__(self, num_blocks: int, block_size: int, layers: int, kv_heads: int,
                 head_dim: int) -> None:
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k = [torch.zeros(shape) for _ in range(layers)]
        self.v = [torch.zeros(shape) for _ in range(layers)]
        self.block_size = block_size

    def offload(self, pages: list[Page], written: int) -> Snapshot:
        """Copy the pages covering `written` positions to the CPU."""
        n = -(-written // self.block_size)
        blocks = [b for p in pages[:n] for b in p.blocks]
        snap = Snapshot(written)
        for k, v in zip(self.k, self.v, strict=True):
            snap.keys.append(gather_blocks(k, blocks))
            snap.values.append(gather_blocks(v, blocks))
        return snap

    def restore(self, pages: list[Page], snap: Snapshot, first_page: int) -> None:
        """Write the snapshot's pages from `first_page` on into `pages` (same indices)."""
        n = -(-snap.written // self.block_size)
        if first_page >= n:
            return
        planes = len(pages[0].blocks)
        blocks = [b for p in pages[first_page:n] for b in p.blocks]
        lo, hi = first_page * planes, n * planes
        for k, v, sk, sv in zip(self.k, self.v, snap.keys, snap.values, strict=True):
            scatter_blocks(k, blocks, sk[lo:hi])
            scatter_blocks(v, blocks, sv[lo:hi])
