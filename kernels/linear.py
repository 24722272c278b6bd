"""A batch-invariant linear layer.

On CPU, `F.linear` gives a row different bits depending on how many rows share the
call. Every call here runs on exactly ROWS rows (zero padded), so a row's result
depends only on the row, not on the batch it came in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ROWS = 8


def pad_rows(x: torch.Tensor, rows: int = ROWS) -> torch.Tensor:
    """x with zero rows appended up to `rows` (x has at most `rows` rows)."""
    if x.shape[0] == rows:
        return x
    pad = x.new_zeros((rows - x.shape[0],) + tuple(x.shape[1:]))
    return torch.cat([x, pad])


def bi_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` computed ROWS rows at a time. Assumes 2-D x."""
    out = [F.linear(pad_rows(x[i:i + ROWS]), weight, bias)[: min(ROWS, x.shape[0] - i)]
           for i in range(0, x.shape[0], ROWS)]
    return torch.cat(out) if out else x.new_zeros((0, weight.shape[0]))
