"""What a run did, as a set of features, for guidance that needs no model of the
system: event patterns of its trace, pool occupancy and queue lengths, and the
edges its own code took (driver/coverage.py). A workload whose run shows a feature
no earlier run showed goes into the corpus (fuzz/corpus.py).

Counts are put in buckets (1, 2, 3, 4-7, 8-15, ...), as AFL does with edge
hits: a request preempted twice is news after once, the 9th time is not.
Each feature is a tuple whose first item names its kind.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Hashable

from loopcheck.driver.coverage import Edge
from loopcheck.model.events import Admit, Event, Finish, Preempt, Prefill, Resume
from loopcheck.model.workload import RequestSpec

Feature = Hashable
# Features that only tell a run is new, too fine to aim at: the ones a target is chosen from are the others.
NOVELTY_ONLY = ("occupancy",)
WORK = ("prefill", "token")


def bucket(n: int) -> int:
    """0, 1, 2, 3, then one bucket per power of two (4-7 -> 4, 8-15 -> 8, ...)."""
    return n if n < 4 else 1 << (n.bit_length() - 1)


class TraceFeatures:
    """Features of one run, folded step by step from its events and
    observations (`fold`), plus its coverage (`add_edges`):

    - within a step, per request, the kinds of its events in order (a request
      admitted, worked and preempted in one step), and each pair of kinds that
      happen in the step at all;
    - per request across steps, the kind of its last event before the step and
      the first in it (resumed, then preempted again), and how often it was
      preempted and resumed (bucketed);
    - who preempts whom: for each preemption, the phase of the victim and of the
      request it was preempted for (in its prompt or past it, by the prefills
      the trace reports), whether the victim came into the running set first,
      which of the two is more urgent (priority, then arrival), and where the
      victim's next chunk would have ended against the pages; and, after
      each step, the same relations for each pair of running requests in the
      order they came in, with the pool's occupancy in quarters (the states
      from which a scheduler preempts a request it has already scheduled);
    - prefix-cache hits on admission and resumption: after a preemption or not,
      in buckets, and whether the request that computed a hit page's tokens
      first had finished or been preempted by then;
    - pages the system's prefix cache registered in a step for positions no
      request had computed by its end, and whether it still held them after
      the step (where the system reports its registrations): one dropped again
      in the step is the near miss of one left cached (`prefix-hits`);
    - pool occupancy in eighths of the pool, and waiting and running counts
      (bucketed), each step;
    - the system's code edges.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = max(num_blocks, 1), block_size
        self.found: set[Feature] = set()
        self.last: dict[str, str] = {}            # request -> kind of its last event
        self.status: dict[str, str] = {}          # request -> waiting | running | preempted | finished
        self.preempted: Counter[str] = Counter()
        self.resumed: Counter[str] = Counter()
        self.first_holder: dict[tuple[int, ...], str] = {}   # a page's tokens -> the request that worked on it first
        self.specs: dict[str, RequestSpec] = {}
        self.prompt_done: dict[str, int] = {}     # request -> prompt positions its prefills reached since it came in
        self.came_in: dict[str, int] = {}         # request -> when it last came in (admissions and resumptions counted)
        self.comings = itertools.count()
        self.chunk: dict[str, int] = {}           # request -> the size of its last prefill chunk

    def submitted(self, spec: RequestSpec) -> None:
        self.specs[spec.rid] = spec
        self.status[spec.rid] = "waiting"

    def phase(self, rid: str | None) -> str:
        """"output" once a running request's prefills reached its prompt's end;
        before, "prompt" and the size of its last prefill chunk against a page
        (1, <page, page, >page: whether its next chunk can complete a page and
        run into the next); "unknown" for no request."""
        if rid not in self.specs:
            return "unknown"
        if self.prompt_done.get(rid, 0) >= len(self.specs[rid].prompt):
            return "output"
        n = self.chunk.get(rid, 0)
        return "prompt " + ("1" if n <= 1 else "<page" if n < self.block_size else "page" if n == self.block_size
                            else ">page")

    def reach(self, rid: str) -> str:
        """Where a request's next prefill chunk would end if it is as long as
        its last one (cut at the prompt's end), against the pages: within the
        page it stands in, at a page's end, or past one ("-" before its first
        chunk and once its prompt is done). A scheduler that takes back a chunk
        it had scheduled, or frees the pages of a half-done prompt, does
        something different in each."""
        done, prompt = self.prompt_done.get(rid, 0), self.specs[rid].prompt
        if rid not in self.chunk or done >= len(prompt):
            return "-"
        end, bs = min(done + self.chunk[rid], len(prompt)), self.block_size
        if end // bs == done // bs:
            return "within a page"
        return "at a page's end" if end % bs == 0 else "past a page's end"

    def relation(self, a: str, b: str | None) -> tuple[bool | None, str]:
        """Whether `a` came into the running set before `b`, and whether it is
        more, less or as urgent (None, "unknown" when `b` is unknown)."""
        if b not in self.specs:
            return None, "unknown"
        first = self.came_in.get(a, -1) < self.came_in.get(b, -1)
        ka, kb = self.specs[a].key[:2], self.specs[b].key[:2]
        return first, "more" if ka < kb else "less" if ka > kb else "same"

    def fold(self, events: list[Event], blocks_held: int, uncomputed: tuple[bool, ...] = ()) -> None:
        """One step's events, the blocks held after it, and, for each page the
        cache registered in it uncomputed, whether it held it after the step."""
        found = self.found
        found.update(("uncomputed-registration", held) for held in uncomputed)
        per_request: dict[str, list[str]] = {}
        kinds = sorted({e.kind for e in events})
        for i, a in enumerate(kinds):
            for b in kinds[i:]:
                found.add(("step-pair", a, b))
        for e in events:
            seq = per_request.setdefault(e.rid, [])
            if not seq and e.rid in self.last:
                found.add(("across-steps", self.last[e.rid], e.kind))
            if not seq or seq[-1] != e.kind:
                seq.append(e.kind)
            self._request_event(e)
            self.last[e.rid] = e.kind
        for kinds_of_request in per_request.values():
            found.add(("in-step", tuple(kinds_of_request)))
        waiting = sum(s in ("waiting", "preempted") for s in self.status.values())
        running = sorted((r for r, s in self.status.items() if s == "running"), key=lambda r: self.came_in.get(r, -1))
        found.add(("occupancy", min(8, 8 * blocks_held // self.num_blocks), bucket(waiting), bucket(len(running))))
        quarter = min(4, 4 * blocks_held // self.num_blocks)
        for i, a in enumerate(running):
            for b in running[i + 1:]:
                found.add(("running-pair", self.phase(a), self.phase(b), self.relation(a, b)[1], quarter))

    def _request_event(self, e: Event) -> None:
        found, rid = self.found, e.rid
        if isinstance(e, (Admit, Resume)):
            hits = e.hit_pages
            self.came_in[rid] = next(self.comings)
            self.prompt_done[rid] = hits * self.block_size
            if e.kind == "resume":
                self.resumed[rid] += 1
                found.add(("resumed", bucket(self.resumed[rid]), bucket(self.preempted[rid])))
            if hits:
                found.add(("hit", e.kind, bucket(hits), self.preempted[rid] > 0))
                for k in range(hits):
                    owner = self.first_holder.get(self.specs[rid].prompt[:(k + 1) * self.block_size])
                    if owner is not None and owner != rid:
                        found.add(("hit-page-of", e.kind, self.status.get(owner)))
            self.status[rid] = "running"
        elif isinstance(e, Preempt):
            self.preempted[rid] += 1
            self.status[rid] = "preempted"
            by = e.by
            found.add(("preempted", bucket(self.preempted[rid]), by == rid, self.last.get(rid)))
            if by != rid:
                found.add(("preempt-of", self.phase(rid), self.phase(by), *self.relation(rid, by), self.reach(rid)))
            self.prompt_done[rid] = 0
        elif e.kind in WORK:
            self.status[rid] = "running"
            if isinstance(e, Prefill):
                prompt = self.specs[rid].prompt
                self.prompt_done[rid] = max(self.prompt_done.get(rid, 0), e.end)
                self.chunk[rid] = e.end - e.start
                for end in range(self.block_size, min(e.end, len(prompt)) + 1, self.block_size):
                    self.first_holder.setdefault(prompt[:end], rid)
        elif isinstance(e, Finish):
            self.status[rid] = "finished"
            found.add(("finish", e.reason, bucket(self.preempted[rid])))
        elif e.kind in ("abort", "reject"):
            found.add((e.kind, self.status.get(rid)))

    def add_edges(self, edges: set[Edge]) -> None:
        """The system's code edges this run took."""
        self.found.update(("edge", edge) for edge in edges)


def run_features(num_blocks: int, block_size: int, specs: list[RequestSpec], trace: list[list[Event]],
                 held: list[int], edges: set[Edge] | None = None,
                 uncomputed: list[tuple[bool, ...]] | None = None) -> set[Feature]:
    """The features of a run: its requests as submitted (each arriving at its
    step), its trace, the blocks held after each step, its code edges, and its
    uncomputed registrations per step (`Driver.uncomputed_registrations`)."""
    features = TraceFeatures(num_blocks, block_size)
    by_step: dict[int, list[RequestSpec]] = {}
    for spec in specs:
        by_step.setdefault(spec.arrival, []).append(spec)
    for t, events in enumerate(trace):
        for spec in by_step.get(t, ()):
            features.submitted(spec)
        registered = uncomputed[t] if uncomputed and t < len(uncomputed) else ()
        features.fold(events, held[t] if t < len(held) else 0, registered)
    if edges:
        features.add_edges(edges)
    return features.found
