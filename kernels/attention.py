"""Reference paged attention over block tables, one fixed shape per call.

Each query row attends to the first `ctx` positions of its own sequence, read from
the KV pool through its block table. Rows are padded to ROWS and contexts to a
fixed `max_pos`, so a row's bits do not depend on its neighbours or on how long the
other rows' contexts are.
"""

from __future__ import annotations

import torch

from loopcheck.kernels.linear import ROWS, pad_rows


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                    tables: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    """Attention for R <= ROWS rows.

    q: [R, H, D]; k_pool, v_pool: [num_blocks, block_size, KVH, D] (one layer);
    tables: [R, pages] block ids (pages * block_size = max_pos, unused entries any
    valid id); ctx: [R] number of positions each row sees (>= 1).
    Returns [R, H, D]. Causality within a chunk comes from each row's ctx.
    """
    R, H, D = q.shape
    kvh = k_pool.shape[2]
    tables = pad_rows(tables)
    ctx = pad_rows(ctx[:, None])[:, 0].clamp(min=1)
    keys = k_pool[tables].reshape(ROWS, -1, kvh, D).repeat_interleave(H // kvh, dim=2)
    vals = v_pool[tables].reshape(ROWS, -1, kvh, D).repeat_interleave(H // kvh, dim=2)
    scores = (pad_rows(q)[:, None] * keys).sum(-1) * (D ** -0.5)   # [ROWS, max_pos, H]
    positions = torch.arange(keys.shape[1])[None, :, None]
    scores = scores.masked_fill(positions >= ctx[:, None, None], float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return (weights[..., None] * vals).sum(1)[:R]
