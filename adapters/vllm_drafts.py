"""The fakes behind speculative decoding in the vLLM adapter: vLLM's scheduler
runs with a `SpeculativeConfig` (ngram, `Config.spec_tokens` drafts), schedules
the drafts it is given within its budget, and rolls back the rejected ones;
what would propose and verify them on a GPU is made up here. The proposer
(`Drafter`) gives each decoding request `spec_tokens` drafts a step, of which
the first k are the fake LM's own next tokens and the rest are not, k taken in
turn from the request's `RequestSpec.spec_accepts` (none if empty); the
verifier (`verify`) keeps the drafts up to the first one the fake LM disagrees
with and adds the LM's own token, as a rejection sampler with greedy sampling
does. So a run's tokens are those of the same run without drafts.
"""

from __future__ import annotations

from loopcheck.adapters.fake_lm import fake_token


def continuation(tokens: list[int], length: int) -> list[int]:
    """The fake LM's next `length` tokens after `tokens`."""
    out: list[int] = []
    for _ in range(length):
        out.append(fake_token(tokens + out))
    return out


def verify(tokens: list[int], drafts: list[int]) -> list[int]:
    """The tokens the model run samples for a request with `tokens` so far whose
    decode verifies `drafts`: the drafts the fake LM agrees with, in order up to
    the first it does not, then its own token."""
    out: list[int] = []
    for draft in drafts:
        out.append(fake_token(tokens + out))
        if out[-1] != draft:
            return out
    return out + [fake_token(tokens + out)]


class Drafter:
    """Proposes `spec_tokens` drafts a step for each decoding request, the
    first k right (k: its `spec_accepts` in turn, at most `spec_tokens`), the
    rest wrong (the right token plus one, modulo the vocabulary)."""

    def __init__(self, spec_tokens: int, vocab_size: int) -> None:
        self.spec_tokens, self.vocab_size = spec_tokens, vocab_size
        self.rounds: dict[str, int] = {}   # request -> the drafts proposed to it so far (steps)

    def propose(self, rid: str, tokens: list[int], accepts: tuple[int, ...]) -> list[int]:
        turn = self.rounds.get(rid, 0)
        self.rounds[rid] = turn + 1
        right = min(accepts[turn % len(accepts)], self.spec_tokens) if accepts else 0
        true = continuation(tokens, self.spec_tokens)
        return true[:right] + [(t + 1) % self.vocab_size for t in true[right:]]
