"""Seeds of a campaign's parts, derived independently from its seed."""

from __future__ import annotations

import hashlib


def derived_seed(seed: int, *labels: object) -> int:
    """The seed of one part of a campaign (a worker, a batch, a round), from the
    campaign's seed and the part's labels, by SHA-256: seeds S and S+1, or
    batch b of seed S and batch b-1 of seed S+1, share no part's seed (as
    S + b did), and the same seed and labels give the same part on any machine."""
    text = "/".join(map(str, (seed, *labels)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
