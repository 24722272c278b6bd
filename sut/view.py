"""What the trace says about each request: its status as the events report it.

Any SUT that speaks the event vocabulary gets this view for free; the property
checks read it instead of the SUT's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from loopcheck.model.events import Admit, Event, Finish, Load, Preempt, Prefill, Resume, Rewind, Token
from loopcheck.model.workload import RequestSpec

SUBMITTED, WAITING, RUNNING, PREEMPTED, FINISHED = "submitted", "waiting", "running", "preempted", "finished"
# The status each event leaves its request in.
AFTER = {"arrive": WAITING, "admit": RUNNING, "resume": RUNNING, "preempt": PREEMPTED, "finish": FINISHED}


@dataclass(frozen=True)
class LoadState:
    """A KV load a `Load` event started: positions [start, end), ended from
    step `ends_at` on (the start step plus the request's `kv_load_steps`, or
    later, once the system may first know it: `Config.load_known`), valid then unless
    it failed (`ok` False)."""

    start: int
    end: int
    ends_at: int
    ok: bool

    def ended(self, step: int) -> bool:
        """Whether the load has ended by the start of step `step`."""
        return self.ends_at <= step

    def relative(self, step: int) -> tuple[int, int, int, bool]:
        """The load as seen from step `step` (its end counted from there: a part of a state's memory)."""
        return self.start, self.end, self.ends_at - step, self.ok


@dataclass
class RequestView:
    spec: RequestSpec
    status: str = SUBMITTED
    token_ids: list[int] = field(default_factory=list)     # its tokens (since a preemption that dropped them)
    exit_depths: list[int] = field(default_factory=list)
    finish: str | None = None
    # The positions its KV covers by the trace while it runs: from its admission or
    # resumption, its prefix-cache hit pages and restored positions (the event's
    # args), then the furthest of its prefills' ends and, for its token g, prompt
    # + g (the positions before the token's own), back to the frontier a rewind
    # names; None: not running.
    reach: int | None = None
    # Its latest KV load (`Load`), from its start until the request is preempted,
    # or finishes with the load ended: the blocks of positions 0..end it may hold.
    load: LoadState | None = None

    @property
    def generated(self) -> int:
        return len(self.token_ids)

    def content(self, end: int) -> tuple[int, ...]:
        """Its tokens at positions 0..end (prompt, then its tokens so far)."""
        prompt = self.spec.prompt
        return prompt[:end] if end <= len(prompt) else prompt + tuple(self.token_ids[:end - len(prompt)])


def computed(e: Event, prompt_len: int, tokens: int) -> tuple[int, int]:
    """The positions [start, end) whose KV a prefill or token event computed, of a
    request with `prompt_len` prompt positions and `tokens` tokens before the
    event: a prefill's own range; a token's decode computed its input position."""
    if isinstance(e, Prefill):
        return e.start, e.end
    return prompt_len + tokens - 1, prompt_len + tokens


class TraceView:
    """Request statuses and per-step facts, folded from submissions and events
    (`block_size`: the positions of a prefix-cache hit page; `keep_pages`: keep
    the pages computed, which hits are checked against; `load_known`: the
    earliest step from which the system may know that a KV load ending at a
    step has ended, `Config.load_known`, until which the load is in flight)."""

    def __init__(self, block_size: int, keep_pages: bool, load_known: Callable[[int], int] = int) -> None:
        self.block_size, self.keep_pages, self.load_known = block_size, keep_pages, load_known
        self.requests: dict[str, RequestView] = {}
        self.open: dict[str, RequestView] = {}    # the unfinished ones, in submission order
        self.changed: dict[str, str] = {}         # statuses at the start of the last step, of its events' requests
        self.worked: set[str] = set()             # requests that ran prefill or decode in the last step
        self.tokens_before: list[int] = []        # per event of the last step, its request's tokens before it
        self.reach_before: list[int | None] = []  # per event of the last step, its request's reach before it
        self.released: dict[str, int] = {}        # the requests that stopped running in the last step -> their reach
        # The hashes of the contents (tokens from position 0 to its end) of every
        # full page some request's prefill or decode computed so far (if kept),
        # and, per admission or resumption of the last step, the contents of the
        # pages it reports as hits.
        self.computed_pages: set[int] = set()
        self.hit_pages: list[tuple[Event, list[tuple[int, ...]]]] = []
        self.step = 0                               # the steps folded so far
        self.in_flight: dict[str, RequestView] = {}  # the requests whose KV load has not ended

    def submit(self, spec: RequestSpec) -> None:
        self.requests[spec.rid] = self.open[spec.rid] = RequestView(spec)

    @property
    def before(self) -> dict[str, str]:
        """Every request's status at the start of the last step (built on demand)."""
        return {rid: self.changed.get(rid, r.status) for rid, r in self.requests.items()}

    def fold(self, events: list[Event]) -> None:
        self.changed = {}
        self.worked = set()
        self.tokens_before = []
        self.reach_before = []
        self.released = {}
        self.hit_pages = []
        bs = self.block_size
        self._end_loads()
        for e in events:
            r = self.requests[e.rid]
            self.tokens_before.append(r.generated)
            self.reach_before.append(r.reach)
            self.changed.setdefault(e.rid, r.status)
            if e.kind in ("prefill", "token"):
                self.worked.add(e.rid)
                start, end = computed(e, len(r.spec.prompt), r.generated)
                self._computed(r, start, end)
                if r.status == RUNNING:   # (not the late token of a request preempted since: async scheduling)
                    r.reach = max(end, r.reach or 0)
            elif isinstance(e, (Admit, Resume)):
                self.hit_pages.append((e, [r.content(k * bs) for k in range(1, e.hit_pages + 1)]))
                r.reach = e.hit_pages * bs + (e.restored if isinstance(e, Resume) else 0)   # restored past the hits
                if r.load is not None and r.load.ok and r.load.ended(self.step):
                    r.reach = max(r.reach, r.load.end)
            elif isinstance(e, Load):
                steps = r.spec.kv_load_steps
                ok = steps is not None and not r.spec.kv_load_fails
                r.load = LoadState(e.start, e.end, self.load_known(self.step + (steps or 1)), ok)
                self.in_flight[e.rid] = r
            elif isinstance(e, Rewind) and r.reach is not None:
                r.reach = min(r.reach, e.frontier)
            elif e.kind in AFTER:
                if r.status == RUNNING and e.kind in ("preempt", "finish"):
                    self.released[e.rid] = r.reach or 0
                r.reach = None
            if isinstance(e, Token):
                r.token_ids.append(e.token_id)
                r.exit_depths.append(e.exit_depth)
            elif isinstance(e, Preempt) and not e.keeps_tokens:
                r.token_ids, r.exit_depths = [], []
            if isinstance(e, Preempt) or (isinstance(e, Finish) and e.rid not in self.in_flight):
                r.load = None
            if e.kind in AFTER and r.status != FINISHED:
                r.status = AFTER[e.kind]
                if isinstance(e, Finish):
                    r.finish = e.reason
                    del self.open[e.rid]
        self.step += 1

    def _computed(self, r: RequestView, start: int, end: int) -> None:
        """Positions [start, end) of `r` hold KV: the full pages they complete are computed content (if kept)."""
        if self.keep_pages:
            bs = self.block_size
            self.computed_pages.update(hash(r.content(k)) for k in range(start // bs * bs + bs, end + 1, bs))

    def _end_loads(self) -> None:
        """At the start of a step: the loads that have ended leave `in_flight`;
        the pages of each that succeeded are computed content from now on; a
        finished request's ended load holds nothing more."""
        for rid, r in list(self.in_flight.items()):
            load = r.load
            if load is None or load.ended(self.step):
                del self.in_flight[rid]
            if load is None or not load.ended(self.step):
                continue
            if load.ok:
                self._computed(r, load.start, load.end)
            if r.status == FINISHED:
                r.load = None

    def loading(self, step: int, besides: str | None = None) -> bool:
        """Whether a KV load (of a request other than `besides`) is in flight in
        step `step` (it has not ended by its start)."""
        return any(r.load is not None and not r.load.ended(step) for rid, r in self.in_flight.items()
                   if rid != besides)

    def holders(self) -> list[RequestView]:
        """The requests that may hold blocks: the unfinished ones and the
        finished ones whose KV load is still in flight."""
        return [*self.open.values(), *(r for r in self.in_flight.values() if r.status == FINISHED)]

    def running(self) -> int:
        return sum(r.status == RUNNING for r in self.requests.values())

    def memory(self) -> tuple:
        """What the view holds that later steps' judgements read: per request in
        submission order, its status, tokens, exit depths, finish reason and
        reach and KV load (its end counted from now); and the pages computed so
        far."""
        return (tuple((rid, r.status, tuple(r.token_ids), tuple(r.exit_depths), r.finish, r.reach)
                      + ((r.load.relative(self.step),) if r.load else ()) for rid, r in self.requests.items()),
                tuple(sorted(self.computed_pages)))

    def unfinished(self) -> list[RequestView]:
        return list(self.open.values())
