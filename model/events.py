"""The event vocabulary shared by the reference model and the engine's trace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

# Kinds, with the meaning of `args`:
#   arrive ()                       request arrived and waits
#   reject (reason)                 can never fit the pool; finished as rejected
#   abort ()                        aborted; everything it held is released
#   admit (hit_pages,)              fresh admission with that many prefix-cache hits
#   resume (hit_pages, restored)    preempted request runs again; restored = positions
#                                   taken back from its CPU snapshot past the hit pages
#   preempt (by, keeps_tokens)      evicted from the running set for request `by` (None: not
#                                   said); keeps_tokens: it keeps its tokens (a CPU snapshot,
#                                   or a recompute of prompt and tokens), else drops them
#   rewind (frontier,)              unfinished WCPB chunk rolled back to the frontier
#   prefill (start, end, depth)     chunk [start, end) ran depth `depth` (1-based);
#                                   without WCPB a chunk runs and reports num_loops
#   token (index, token_id, exit_depth)
#   publish (page,)                 a full prompt page entered the prefix cache
#   finish (reason,)                length | stop | abort | rejected
KINDS = ("arrive", "reject", "abort", "admit", "resume", "preempt", "rewind", "prefill",
         "token", "publish", "finish")


@dataclass(frozen=True)
class Event:
    kind: str
    rid: str
    args: tuple[Any, ...] = ()

    def to_json(self) -> list[Any]:
        return [self.kind, self.rid, *self.args]

    @classmethod
    def from_json(cls, data: list[Any]) -> Event:
        return cls(data[0], data[1], tuple(data[2:]))

    def __str__(self) -> str:
        return f"{self.kind}({self.rid}{''.join(', ' + str(a) for a in self.args)})"


class TokenOutcome(NamedTuple):
    """What the LM produced for one decoded token: its ID and exit depth."""

    token_id: int
    exit_depth: int


@dataclass
class RequestOutput:
    """What a user sees of one request at the end of a run."""

    rid: str
    token_ids: list[int]
    exit_depths: list[int]
    finish_reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"token_ids": self.token_ids, "exit_depths": self.exit_depths,
                "finish_reason": self.finish_reason}
