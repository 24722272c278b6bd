"""Request lifecycle: each request's events come in an order any scheduler must
keep, and its outputs agree with its limits. Read from the events alone."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.needs import lifetime_blocks
from loopcheck.model.config import Config
from loopcheck.model.events import Draft, Event, Finish, Preempt, Prefill, Resume, Token
from loopcheck.sut.protocol import Capabilities, Observation
from loopcheck.sut.view import AFTER, FINISHED, PREEMPTED, RUNNING, SUBMITTED, WAITING, TraceView

# The statuses (as the events so far report them) in which each event may come.
ALLOWED = {"arrive": {SUBMITTED}, "reject": {WAITING}, "abort": {SUBMITTED, WAITING, RUNNING, PREEMPTED},
           "admit": {WAITING}, "resume": {PREEMPTED}, "preempt": {RUNNING}, "rewind": {RUNNING},
           "prefill": {RUNNING}, "token": {RUNNING}, "publish": {RUNNING}, "draft": {RUNNING},
           "load": {WAITING, PREEMPTED},
           "finish": {SUBMITTED, WAITING, RUNNING, PREEMPTED}}


class Lifecycle(Check):
    """Per request: it arrives once, first; it is admitted only while waiting and
    resumed only while preempted; it is preempted, and does work, only while
    running; nothing follows its finish. It never gets more than max_tokens tokens;
    `finish(length)` comes with exactly max_tokens, `finish(stop)` right after its
    stop token, and its stop token, once generated, finishes it in that step.
    Under async scheduling a step's tokens are the previous step's batch's: a
    request running when the step started may get one after its preemption
    in the step (its output is kept). A
    request that fits the pool alone is never preempted while no other request is
    in the system (waiting, running or preempted, or finished with its KV load
    still in flight): nobody could need its blocks."""

    props = ("lifecycle", "lone-preemption")

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        view, cfg = run.view, run.cfg
        before = view.before
        status = dict(before)
        for e in events:
            now = status.get(e.rid, SUBMITTED)
            late = cfg.async_scheduling and e.kind == "token" and before.get(e.rid) == RUNNING   # (the batch before's)
            if now not in ALLOWED[e.kind] and not (late and now == PREEMPTED):
                self.broke(Violation("lifecycle", f"{e} while {e.rid} is {now}", rule="transition"))
            if e.kind == "preempt" and self._alone(e.rid, status, view) and (
                    lifetime_blocks(view.requests[e.rid].spec, cfg) + cfg.watermark_blocks <= cfg.num_blocks):
                self.broke(Violation("lone-preemption", f"{e.rid} was preempted while no other request was in the "
                                                        "system, although it fits the pool alone"))
            status[e.rid] = AFTER.get(e.kind, now)
        for e in events:
            r = view.requests[e.rid]
            spec = r.spec
            if isinstance(e, Token) and r.generated > spec.max_tokens:
                self.broke(Violation("lifecycle", f"{e.rid} has {r.generated} tokens, max_tokens is {spec.max_tokens}",
                                     rule="past-max-tokens"))
            if isinstance(e, Finish) and e.reason == "length" and r.generated != spec.max_tokens:
                self.broke(Violation("lifecycle", f"{e.rid} finished for length with {r.generated} of "
                                                  f"{spec.max_tokens} tokens", rule="length-short"))
            if isinstance(e, Token) and spec.stop_token is not None and e.token_id == spec.stop_token and not any(
                    x.kind == "finish" and x.rid == e.rid for x in events):
                self.broke(Violation("lifecycle", f"{e.rid} generated its stop token {spec.stop_token} and did not "
                                                  "finish", rule="stop-not-finished"))
            if isinstance(e, Finish) and e.reason == "stop":
                last = [x for x in events if isinstance(x, Token) and x.rid == e.rid]
                if spec.stop_token is None or not last or last[-1].token_id != spec.stop_token:
                    self.broke(Violation("lifecycle", f"{e.rid} finished for stop without its stop token",
                                         rule="stop-without-token"))

    @staticmethod
    def _alone(rid: str, status: dict[str, str], view: TraceView) -> bool:
        """No other request is in the system, nor holds blocks for a KV load
        still in flight in this step (an aborted request's load keeps its blocks
        until it ends)."""
        return not any(x != rid and s in (WAITING, RUNNING, PREEMPTED) for x, s in status.items()) and not (
            view.loading(view.step - 1, besides=rid))   # (the step being judged: the view has folded it)


class Work(Check):
    """Per request, its work is about positions that exist, in order: a prefill
    covers positions of its prompt and of the tokens it has so far (start < end
    <= prompt + tokens), at a depth from 1 to num_loops, and starts no later than
    what the request has since it was last admitted or resumed reaches
    (`RequestView.reach`: the prefix-cache hit pages and restored positions its
    admission or resumption reported, then its work): no position is skipped. A
    token's index g is the number of tokens the request has so far (counted from 0
    again after a preemption that drops them), its exit depth from min_loops to
    num_loops, and its input position prompt + g - 1 was computed, by a prefill
    of the step that reached past it, or else by the token's own decode, after
    which the request reached it (no token before its prompt is computed).
    A request is in a step's batch once: a prefill chunk, then at most the token
    it samples, or one decode's token, and one more per draft token the decode
    verified (`Draft`), each the input of the next. A resumption restores (past
    its hit pages) no more positions than the request had when a preemption kept its snapshot (none without one). Depths
    come in order: without WCPB a prefill reports num_loops; with it a
    chunk runs depths 1, 2, ... num_loops in turn, and neither another chunk nor
    a token of the request comes before it ran them all (an admission,
    resumption, preemption or rewind drops the chunk). Under async scheduling a
    step's tokens are the previous step's batch's, whose work that step
    reported, the decode's input position too (a prefill of it, once its token
    was known): a token's input position was computed by the time the step
    started, and a token is twice in a batch only beside the step's other
    tokens."""

    props = ("work",)

    def __init__(self) -> None:
        self.in_flight: dict[str, tuple[int, int, int]] = {}   # request -> its WCPB chunk short of num_loops
        self.kept: dict[str, int] = {}   # preempted request -> the positions its CPU snapshot kept

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        view, loops = run.view, run.cfg.num_loops
        late = run.cfg.async_scheduling   # (a step's tokens are of the batch before)
        worked: dict[tuple[str, bool], Event] = {}   # (request, late token) -> its prefill or token so far in the step
        drafts: dict[str, int] = {}      # request -> the draft tokens its decode verified in the step, still unused
        at_start: dict[str, int | None] = {}   # request -> its reach when the step started
        for e, tokens, reach in zip(events, view.tokens_before, view.reach_before, strict=True):
            at_start.setdefault(e.rid, reach)
            batch = (e.rid, late and isinstance(e, Token))
            ran = worked.get(batch) if e.kind in ("prefill", "token") else None
            verified = isinstance(e, Token) and ran is not None and ran.kind == "token" and drafts.get(e.rid, 0) > 0
            if verified:   # (a kept draft: the token after it is the same decode's)
                drafts[e.rid] -= 1
            elif ran is not None and (e.kind == "prefill" or ran.kind == "token"):
                self.broke(Violation("work", f"{e} after {ran} in the same step: a request is in a step's batch once "
                                             "(a prefill chunk, then at most the token it samples, or one decode, "
                                             "with a token more per draft it verified)", rule="twice-in-step"))
            if isinstance(e, Draft):
                drafts[e.rid] = e.count
            if isinstance(e, Prefill):
                worked[batch] = e
                start, end = e.start, e.end
                known = len(view.requests[e.rid].spec.prompt) + tokens
                if not 0 <= start < end <= known:
                    self.broke(Violation("work", f"{e}: positions {start}..{end} of {e.rid}, which has {known} "
                                                 f"(prompt and tokens so far)", rule="prefill-past-known"))
                self._depth_order(e, run.cfg.wcpb, loops)
                if reach is not None and start > reach:
                    self.broke(Violation("work", f"{e}: {e.rid}'s hits, restored positions and work since its "
                                                 f"admission reach only {reach}, so positions {reach}..{start} were "
                                                 "skipped", rule="prefill-skipped"))
            elif isinstance(e, Token):
                index, depth = e.index, e.exit_depth
                if index != tokens:
                    self.broke(Violation("work", f"{e}: token {index} of {e.rid}, which has {tokens} tokens so far",
                                         rule="token-index"))
                input_position = len(view.requests[e.rid].spec.prompt) + tokens - 1
                worked[batch] = e
                # (after a prefill of the step, that prefill computed the input; after a kept draft, the decode did)
                needed = input_position + 1 if ran is not None and not verified else input_position
                if late:   # (its batch ran the step before, the input position included)
                    reach, needed = at_start[e.rid], input_position + 1
                if reach is not None and reach < needed:
                    self.broke(Violation("work", f"{e}: {e.rid}'s hits, restored positions and work since its "
                                                 f"admission reach only {reach}, so positions {reach}..{needed} were "
                                                 f"not computed before its token {index}", rule="token-uncomputed"))
                if not run.cfg.min_loops <= depth <= loops:
                    self.broke(Violation("work", f"{e}: exit depth {depth} outside min_loops..num_loops "
                                                 f"({run.cfg.min_loops}..{loops})", rule="exit-depth"))
                if e.rid in self.in_flight:
                    self.broke(self._unfinished_chunk(e, loops))
            elif e.kind in ("admit", "resume", "preempt", "rewind", "finish"):
                self.in_flight.pop(e.rid, None)
                kept = self.kept.pop(e.rid, 0)
                if isinstance(e, Preempt) and e.keeps_tokens:
                    self.kept[e.rid] = reach or 0
                elif isinstance(e, Resume) and e.restored > max(0, kept - e.hit_pages * run.cfg.block_size):
                    self.broke(Violation("work", f"{e}: {e.rid} restores {e.restored} positions past its hit pages, "
                                                 f"but its preemption kept {kept} in a snapshot",
                                         rule="restore-past-snapshot"))

    def _unfinished_chunk(self, e: Event, loops: int) -> Violation:
        """`e` came while its request's WCPB chunk had depths left to run."""
        start, end, depth = self.in_flight[e.rid]
        return Violation("work", f"{e}: {e.rid}'s chunk {start}..{end} has run {depth} of {loops} depths",
                         rule="chunk-depths")

    def _depth_order(self, e: Prefill, wcpb: bool, loops: int) -> None:
        """A prefill's depth: without WCPB, num_loops (the chunk runs every depth
        at once); with it, 1 for a new chunk, else one more than its chunk's last,
        and no other chunk of the request starts before its chunk ran num_loops."""
        start, end, depth = e.start, e.end, e.depth
        if not wcpb:
            expected = loops
        elif e.rid not in self.in_flight:
            expected = 1
        elif self.in_flight[e.rid][:2] != (start, end):
            self.broke(self._unfinished_chunk(e, loops))
        else:
            expected = self.in_flight[e.rid][2] + 1
        if depth != expected:
            self.broke(Violation("work", f"{e}: depth {depth}, where {expected} comes next (WCPB "
                                         f"{'on' if wcpb else 'off'}, {loops} depths)", rule="depth-order"))
        if depth < loops:
            self.in_flight[e.rid] = (start, end, depth)
        else:
            self.in_flight.pop(e.rid, None)


class Aborts(Check):
    """An abort takes effect at the start of the next step (the protocol's
    contract): a request aborted while unfinished has finished when that step
    ends, as aborted or rejected (a request arriving in that step may be
    rejected first)."""

    props = ("abort",)

    def __init__(self) -> None:
        self.aborted: list[str] = []   # aborted since the last step, unfinished then

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.abort else "the system takes no aborts (capabilities.abort)"

    def on_input(self, run: RunView, kind: str, rid: str) -> None:
        if kind == "abort":
            self.aborted.append(rid)

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        if not self.aborted:
            return
        reasons = {e.rid: e.reason for e in events if isinstance(e, Finish)}
        for rid in self.aborted:
            status = run.view.requests[rid].status
            if status != FINISHED:
                self.broke(Violation("abort", f"{rid} was aborted before step {run.t - 1} and is still {status} "
                                              "after it", rule="not-ended"))
            if rid in reasons and reasons[rid] not in ("abort", "rejected"):
                self.broke(Violation("abort", f"{rid} was aborted before step {run.t - 1} and finished in it for "
                                              f"{reasons[rid]}", rule="wrong-finish"))
        self.aborted = []


class PrefixHits(Check):
    """A prefix-cache hit is of content computed in this run: hit page k of an
    admission or resumption holds the request's tokens at positions 0 to
    (k + 1) * block_size, and some request's prefill or decode completed a page
    of exactly those tokens, in an earlier step or the same one
    (`TraceView.computed_pages`, by the hash of those tokens: two contents whose
    hashes collide, with odds about 2^-64, pass as one). With prefix caching off
    there are no hits. (A cache keyed by a page's own tokens, not its prefix,
    hits pages never computed.)"""

    props = ("prefix-hits",)

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        view, cfg = run.view, run.cfg
        for e, pages in view.hit_pages:
            if pages and not cfg.prefix_caching:
                self.broke(Violation("prefix-hits", f"{e}: {len(pages)} prefix-cache hits with prefix caching off",
                                     rule="caching-off"))
            for k, page in enumerate(pages):
                if len(page) < (k + 1) * cfg.block_size:
                    self.broke(Violation("prefix-hits", f"{e}: hit page {k} of {e.rid} ends past the {len(page)} "
                                                        "positions it has", rule="past-positions"))
                if hash(page) not in view.computed_pages:
                    self.broke(Violation("prefix-hits", f"{e}: hit page {k} of {e.rid} holds tokens {list(page)} at "
                                                        f"positions 0..{len(page)}, which no request has computed",
                                         rule="uncomputed-hit"))


class PromptOnly(Check):
    """A request with max_tokens 0 (prompt-only) finishes for length only once its
    whole prompt is computed at every depth: since it last ran (admission,
    resumption), a prefill has reached the prompt's end at depth num_loops (a hit
    never covers the prompt's last position). (Kept apart from `Work`, whose
    rules' lines name published signatures.)"""

    props = ("work",)

    def __init__(self) -> None:
        self.computed: dict[str, bool] = {}   # prompt-only request -> its prompt computed at every depth

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        for e in events:
            spec = run.view.requests[e.rid].spec
            if spec.max_tokens != 0:
                continue
            prompt = len(spec.prompt)
            if e.kind in ("admit", "resume", "preempt", "rewind"):
                self.computed[e.rid] = False
            elif isinstance(e, Prefill):
                self.computed[e.rid] = e.end >= prompt and e.depth == run.cfg.num_loops
            elif isinstance(e, Finish) and e.reason == "length" and not self.computed.get(e.rid, False):
                self.broke(Violation("work", f"{e}: {e.rid} has max_tokens 0 and finished for length before its "
                                             f"prompt ({prompt} positions) was computed at every depth",
                                     rule="prompt-not-computed"))


NO_CACHE_VIEW = "the system does not report its prefix cache's pages (capabilities.cached_pages)"


class CachedPages(Check):
    """What a prefix cache holds is content computed in this run: after every
    step, each page the system reports cached (`Observation.cached_pages`, the
    tokens at positions 0 to the page's end) is one some request's prefill or
    decode completed, in that step or before (`TraceView.computed_pages`): a page
    registered for work that was then not done is found when it is cached, not
    only if a later request hits it (`PrefixHits`). Runs where the system reports
    its cache (`capabilities.cached_pages`)."""

    props = ("prefix-hits",)

    @property
    def label(self) -> str:
        """Its property and rule, so that "not run" does not read as the hit rule's."""
        return "prefix-hits (cached pages)"

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.cached_pages else NO_CACHE_VIEW

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        computed, bs = run.view.computed_pages, run.cfg.block_size
        for page in obs.cached_pages:
            if hash(page) not in computed:
                self.broke(Violation("prefix-hits", f"the prefix cache holds page {len(page) // bs - 1} of tokens "
                                                    f"{list(page)} (positions 0..{len(page)}), which no request has "
                                                    f"computed", rule="cached-page"))
