"""A tiny Ouro-style looped LM: embedding, prelude, one recurrent core run up to
num_loops times, an exit gate, coda and LM head. FP32, weights from a seeded
generator; every matrix product goes through the batch-invariant linear.

The attention context is supplied by the caller (the model runner), which owns the
paged KV cache; this module only holds weights and per-row math.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from loopcheck.kernels.linear import bi_linear

Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class LMShape:
    vocab: int = 64
    hidden: int = 32
    mlp: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    max_positions: int = 64
    gate_scale: float = 6.0


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


class LoopedLM:
    """Weights and the per-row functions of the looped LM."""

    def __init__(self, shape: LMShape, num_loops: int, seed: int,
                 batch_invariant: bool = True) -> None:
        """batch_invariant=False uses plain F.linear: only for the control test that
        shows the invariance check bites."""
        self.shape = shape
        self.linear = bi_linear if batch_invariant else F.linear
        g = torch.Generator().manual_seed(seed)
        s = shape

        def w(*size: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*size, generator=g) * scale / size[-1] ** 0.5

        self.embed = torch.randn(s.vocab, s.hidden, generator=g)
        # Position embeddings come from their own generator, so that every other weight
        # is the same whatever the pool size (max_positions) is; a position's row is
        # the same in any table long enough to hold it.
        self.pos = torch.randn(s.max_positions, s.hidden, generator=torch.Generator().manual_seed(seed + 1)) * 0.5
        self.depth = torch.randn(num_loops + 1, s.hidden, generator=g) * 0.5
        self.prelude = (w(s.mlp, s.hidden), w(s.hidden, s.mlp))
        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.core = [dict(qkv=w(qkv, s.hidden), o=w(s.hidden, s.heads * s.head_dim),
                          up=w(s.mlp, s.hidden), down=w(s.hidden, s.mlp))
                     for _ in range(s.layers)]
        self.gate = [w(1, s.hidden, scale=s.gate_scale) for _ in range(num_loops + 1)]
        self.head = w(s.vocab, s.hidden)

    def prelude_rows(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """h0 for each row from its input token and position: [R] -> [R, hidden]."""
        x = self.embed[tokens] + self.pos[positions]
        up, down = self.prelude
        return x + self.linear(torch.tanh(self.linear(_rms(x), up)), down)

    def core_rows(self, h: torch.Tensor, depth: int, attend: Attend) -> torch.Tensor:
        """One recurrence depth (1-based) for rows h [R, hidden].

        attend(layer, q [R,H,D], k [R,KVH,D], v [R,KVH,D]) stores this depth's K/V
        as the KV layout requires and returns attention output [R, H, D].
        """
        s = self.shape
        x = h + self.depth[depth]
        for layer, p in enumerate(self.core):
            qkv = self.linear(_rms(x), p["qkv"])
            q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim,
                                 s.kv_heads * s.head_dim], dim=-1)
            out = attend(layer, q.reshape(-1, s.heads, s.head_dim),
                         k.reshape(-1, s.kv_heads, s.head_dim), v.reshape(-1, s.kv_heads, s.head_dim))
            x = x + self.linear(out.reshape(out.shape[0], -1), p["o"])
            x = x + self.linear(torch.relu(self.linear(_rms(x), p["up"])), p["down"])
        return x

    def exit_prob(self, h: torch.Tensor, depth: int) -> torch.Tensor:
        """Exit-gate probability per row after `depth` loops: [R]. Each depth has its
        own (large) gate weights, so exit depths vary."""
        return torch.sigmoid(self.linear(_rms(h), self.gate[depth]))[:, 0]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Coda and LM head: [R, hidden] -> [R, vocab]; the greedy token is the argmax."""
        return self.linear(_rms(h), self.head)
