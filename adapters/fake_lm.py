"""The fake language model of the shipped real-engine adapters: its config (the tiny LM
in tiny_lm/, which vLLM and SGLang read: no weights, no tokenizer, no EOS) and
the token it answers, a hash of the request's whole token sequence so far, so that
a recompute yields the same tokens and a wrong context would not."""

from __future__ import annotations

import hashlib
from pathlib import Path

TINY_LM_DIR = Path(__file__).parent / "tiny_lm"
VOCAB = 128   # vocab_size in tiny_lm/config.json


def fake_token(tokens: list[int]) -> int:
    """A token in [0, VOCAB) determined by `tokens` (the prompt and the tokens so far)."""
    digest = hashlib.blake2b(repr(tokens).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % VOCAB
