"""Kernels against plain torch references."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from loopcheck.kernels.attention import paged_attention
from loopcheck.kernels.kv_ops import gather_blocks, scatter_blocks, write_kv
from loopcheck.kernels.linear import ROWS, bi_linear


def test_bi_linear_matches_f_linear_and_is_position_invariant() -> None:
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    x = torch.randn(19, 16, generator=g)
    out = bi_linear(x, w, b)
    torch.testing.assert_close(out, F.linear(x, w, b))
    row = x[5:6]
    for n in range(1, ROWS + 3):
        batch = torch.cat([torch.randn(n - 1, 16, generator=g), row])
        assert torch.equal(bi_linear(batch, w, b)[-1], out[5])


def naive_attention(q, keys, vals):
    """q [H, D]; keys/vals [ctx, KVH, D]."""
    rep = q.shape[0] // keys.shape[1]
    k = keys.repeat_interleave(rep, dim=1)
    v = vals.repeat_interleave(rep, dim=1)
    scores = torch.einsum("hd,thd->ht", q, k) / q.shape[1] ** 0.5
    return torch.einsum("ht,thd->hd", scores.softmax(-1), v)


def test_paged_attention_matches_a_dense_reference() -> None:
    g = torch.Generator().manual_seed(1)
    blocks, bs, kvh, d, h = 10, 2, 2, 8, 4
    k_pool = torch.randn(blocks, bs, kvh, d, generator=g)
    v_pool = torch.randn(blocks, bs, kvh, d, generator=g)
    tables = torch.tensor([[3, 7, 1, 0, 0], [9, 2, 0, 0, 0], [4, 5, 6, 8, 0]])
    ctx = torch.tensor([5, 1, 8])
    q = torch.randn(3, h, d, generator=g)
    out = paged_attention(q, k_pool, v_pool, tables, ctx)
    for r in range(3):
        keys = k_pool[tables[r]].reshape(-1, kvh, d)[: ctx[r]]
        vals = v_pool[tables[r]].reshape(-1, kvh, d)[: ctx[r]]
        torch.testing.assert_close(out[r], naive_attention(q[r], keys, vals))


def test_kv_write_and_block_round_trip() -> None:
    k_pool, v_pool = torch.zeros(4, 2, 1, 3), torch.zeros(4, 2, 1, 3)
    k, v = torch.ones(2, 1, 3), torch.full((2, 1, 3), 2.0)
    write_kv(k_pool, v_pool, torch.tensor([3, 6]), k, v)  # block 1 offset 1, block 3 offset 0
    assert k_pool[1, 1].sum() == 3 and v_pool[3, 0].sum() == 6 and k_pool.sum() == 6
    saved = gather_blocks(k_pool, [1, 3])
    k_pool.zero_()
    scatter_blocks(k_pool, [2, 0], saved)
    assert k_pool[2, 1].sum() == 3 and k_pool[0, 0].sum() == 3
