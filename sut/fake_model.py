"""The token a shipped adapter's fake model answers: a hash of the request's whole
token sequence so far, so that a recompute yields the same tokens and a wrong
context would not."""

from __future__ import annotations

import hashlib


def fake_token(tokens: list[int], vocab: int) -> int:
    """A token in [0, vocab) determined by `tokens` (the prompt and the tokens so far)."""
    digest = hashlib.blake2b(repr(tokens).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % vocab
