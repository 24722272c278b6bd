"""The model runner: executes one step's work items on the looped LM over the
paged KV cache, depth by depth, and returns each item's token (if any).

Every row at depth d runs in one core call, whatever request it belongs to; the
kernels are batch-invariant, so a row's bits never depend on its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from loopcheck.engine.kv_cache import KVStore
from loopcheck.engine.lm import LoopedLM
from loopcheck.engine.sequence import WorkItem
from loopcheck.kernels.attention import paged_attention
from loopcheck.kernels.kv_ops import write_kv
from loopcheck.kernels.linear import ROWS
from loopcheck.model.config import Config


class Sampled(NamedTuple):
    """A produced token: greedy ID, exit depth, and the raw bits of its logits."""

    token_id: int
    exit_depth: int
    logit_bits: bytes


@dataclass(eq=False)
class _Rows:
    """The rows one work item contributes: positions, hidden state, decode exit."""

    item: WorkItem
    positions: torch.Tensor
    hidden: torch.Tensor | None = None
    exit_depth: int | None = None


class ModelRunner:
    def __init__(self, cfg: Config, lm: LoopedLM, kv: KVStore) -> None:
        self.cfg = cfg
        self.lm = lm
        self.kv = kv
        self.max_pages = cfg.num_blocks // cfg.planes

    def plane(self, depth: int) -> int:
        return depth - 1 if self.cfg.kv_layout == "last_exited" else 0

    def tables(self, rows: list[_Rows], plane: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-position block tables [N, max_pages] and flat write slots [N]."""
        bs = self.cfg.block_size
        tables, slots = [], []
        for r in rows:
            blocks = [p.blocks[plane] for p in r.item.seq.pages]
            table = torch.tensor(blocks + [blocks[0]] * (self.max_pages - len(blocks)))
            for pos in r.positions.tolist():
                tables.append(table)
                slots.append(blocks[pos // bs] * bs + pos % bs)
        return torch.stack(tables), torch.tensor(slots)

    def run(self, items: list[WorkItem]) -> dict[int, Sampled]:
        """Execute the items; return {index in items: Sampled} for each item that
        yields a token. Updates WCPB hidden state on the sequences."""
        rows = [self.prepare(item) for item in items]
        L = self.cfg.num_loops
        for depth in range(1, L + 1):
            active = [r for r in rows if r.item.first_depth <= depth <= r.item.last_depth
                      and r.exit_depth is None]
            if active:
                self.run_depth(active, depth)
        out: dict[int, Sampled] = {}
        for index, r in enumerate(rows):
            item, seq = r.item, r.item.seq
            if item.kind == "decode":
                assert r.hidden is not None and r.exit_depth is not None
                out[index] = self.sample(r.hidden, r.exit_depth)
            elif item.last_depth == L:
                seq.hidden = None
                if item.end == seq.prompt_len and seq.generated == 0 and seq.spec.max_tokens > 0:
                    assert r.hidden is not None
                    out[index] = self.sample(r.hidden[-1:], L)
            else:
                seq.hidden = r.hidden
        return out

    def sample(self, h: torch.Tensor, depth: int) -> Sampled:
        logits = self.lm.logits(h)[0]
        return Sampled(int(torch.argmax(logits)), depth, bytes(logits.contiguous().view(torch.uint8).tolist()))

    def prepare(self, item: WorkItem) -> _Rows:
        seq = item.seq
        positions = torch.arange(item.start, item.end)
        rows = _Rows(item, positions)
        if item.first_depth == 1:
            if item.kind == "decode":
                tokens = torch.tensor([seq.token_ids[-1]])
            else:
                tokens = torch.tensor(seq.spec.prompt[item.start:item.end])
            rows.hidden = self.lm.prelude_rows(tokens, positions)
        else:
            rows.hidden = seq.hidden
        return rows

    def run_depth(self, active: list[_Rows], depth: int) -> None:
        plane = self.plane(depth)
        tables, slots = self.tables(active, plane)
        ctx = torch.cat([r.positions + 1 for r in active])
        write = self.cfg.kv_layout == "last_exited" or depth == 1

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            k_pool, v_pool = self.kv.k[layer], self.kv.v[layer]
            if write:
                write_kv(k_pool, v_pool, slots, k, v)
            return torch.cat([paged_attention(q[i:i + ROWS], k_pool, v_pool, tables[i:i + ROWS],
                                              ctx[i:i + ROWS]) for i in range(0, q.shape[0], ROWS)])

        h = torch.cat([r.hidden for r in active])  # type: ignore[misc]
        h = self.lm.core_rows(h, depth, attend)
        sizes = [len(r.positions) for r in active]
        for r, part in zip(active, h.split(sizes), strict=True):
            r.hidden = part
        decoding = [r for r in active if r.item.kind == "decode"]
        if not decoding:
            return
        probs = self.lm.exit_prob(torch.cat([r.hidden for r in decoding]), depth)  # type: ignore[misc]
        for r, p in zip(decoding, probs.tolist(), strict=True):
            if depth == self.cfg.num_loops or (depth >= self.cfg.min_loops
                                               and p >= self.cfg.exit_threshold):
                r.exit_depth = depth
                self.fill_skipped_planes(r, depth)

    def fill_skipped_planes(self, r: _Rows, depth: int) -> None:
        """last_exited: a token that exits at depth e leaves its depth-e KV in the
        planes of the depths it skipped."""
        if self.cfg.kv_layout != "last_exited" or depth == self.cfg.num_loops:
            return
        bs = self.cfg.block_size
        pos = int(r.positions[0])
        page = r.item.seq.pages[pos // bs]
        src = page.blocks[depth - 1]
        for layer in range(len(self.kv.k)):
            for d in range(depth, self.cfg.num_loops):
                for pool in (self.kv.k[layer], self.kv.v[layer]):
                    pool[page.blocks[d], pos % bs] = pool[src, pos % bs]
