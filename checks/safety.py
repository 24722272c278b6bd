"""Safety properties any LLM scheduler must keep, read from the trace and the
observation: the slot and token caps, KV conservation, the blocks each
request's table lists, and the blocks its prefix-cache hits read."""

from __future__ import annotations

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.needs import covered_blocks, held_at_most
from loopcheck.model.config import Config
from loopcheck.model.events import Draft, Event
from loopcheck.model.invariants import batch_tokens
from loopcheck.sut.protocol import Capabilities, Observation
from loopcheck.sut.view import RUNNING, RequestView, computed

NO_TABLES = "the system reports no block tables (capabilities.block_tables)"   # why the table checks cannot run


class Caps(Check):
    """running <= max_num_seqs, batched tokens <= max_num_batched_tokens (draft
    tokens verified included), the LoRA adapters of the requests that compute
    in a step (a prefill or a token) <= max_loras, and a request's draft tokens
    verified in a step <= spec_tokens, every step, as the events report them.
    Under async scheduling a batch is a step's events but its tokens, with the
    next step's tokens: it is judged then."""

    props = ("seq-cap", "token-cap", "lora-cap", "spec-cap")

    def __init__(self) -> None:
        self.scheduled: list[Event] = []   # under async scheduling: the last step's events but its tokens

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        cfg = run.cfg
        running = run.view.running()
        if running > cfg.max_num_seqs:
            self.broke(Violation("seq-cap", f"{running} requests running > max_num_seqs {cfg.max_num_seqs}"))
        if cfg.async_scheduling:
            events, self.scheduled = (self.scheduled + [e for e in events if e.kind == "token"],
                                      [e for e in events if e.kind != "token"])
        tokens = batch_tokens(events)
        if tokens > cfg.max_num_batched_tokens:
            self.broke(Violation("token-cap", f"batch of {tokens} tokens > max_num_batched_tokens "
                                              f"{cfg.max_num_batched_tokens}"))
        loras = sorted({run.view.requests[e.rid].spec.lora for e in events if e.kind in ("prefill", "token")} - {0})
        if len(loras) > cfg.max_loras:
            self.broke(Violation("lora-cap", f"the batch uses LoRA adapters {loras}, more than max_loras "
                                             f"{cfg.max_loras}"))
        for e in events:
            if isinstance(e, Draft) and e.count > cfg.spec_tokens:
                self.broke(Violation("spec-cap", f"{e}: {e.count} draft tokens verified, spec_tokens is "
                                                 f"{cfg.spec_tokens}"))


class KvConservation(Check):
    """The SUT's KV accounting is sound every step, it holds at least the blocks
    of the KV its running requests have by the trace (`covered_blocks`: a
    request cannot attend to positions it holds no blocks for) and at most
    what they may hold (`held_at_most`: blocks of a finished, preempted or
    unadmitted request, or past the allocation policy's need, are a leak while
    they last, but for those of KV loads), and nothing is held once every
    request has finished (and every KV load has ended)."""

    props = ("kv-conservation", "kv-coverage", "kv-excess")

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.kv else "the system reports no KV accounting (capabilities.kv)"

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        if obs.kv_errors:
            self.broke(Violation("kv-conservation", "; ".join(obs.kv_errors), rule="reported-errors"))
        if obs.blocks_held > run.cfg.num_blocks or obs.blocks_held < 0:
            self.broke(Violation("kv-conservation", f"{obs.blocks_held} blocks held of a pool of "
                                                    f"{run.cfg.num_blocks}", rule="held-out-of-range"))
        released = held_at_most((), run.cfg, run.view.released)   # (async scheduling: blocks of a batch in flight)
        if not run.view.unfinished() and not run.view.in_flight and obs.blocks_held > released:
            self.broke(Violation("kv-conservation", f"every request finished, but {obs.blocks_held} blocks "
                                                    "are still held", rule="held-after-finish"))
        running = [r for r in run.view.open.values() if r.status == RUNNING]

        def reached() -> str:   # for the messages only
            return ", ".join(f"{r.spec.rid} 0..{r.reach}" for r in running if r.reach) or "none"

        covered = covered_blocks(running, run.cfg)
        if obs.blocks_held < covered:
            self.broke(Violation("kv-coverage", f"the running requests have KV for positions ({reached()}) that take "
                                                f"at least {covered} blocks, but {obs.blocks_held} are held"))
        most = held_at_most(run.view.holders(), run.cfg, run.view.released)
        if obs.blocks_held > most:
            loads = [f"{r.spec.rid} 0..{r.load.end}" for r in run.view.holders() if r.load is not None]
            self.broke(Violation("kv-excess", f"{obs.blocks_held} blocks held, but the running requests (positions "
                                              f"{reached()}) hold at most {most} under {run.cfg.allocation} "
                                              "allocation" + (f" with their KV loads ({', '.join(loads)})"
                                                              if loads else "")
                                 + ": the rest is held by no running request"))

    def at_end(self, run: RunView, obs: Observation) -> None:
        if obs.blocks_held:
            self.broke(Violation("kv-conservation", f"drained, but {obs.blocks_held} blocks are still held",
                                 rule="held-after-drain"))


class KvTables(Check):
    """The blocks a running request's table lists (`Observation.block_tables`)
    hold its KV and nobody else's: each page lists `planes` blocks, no block
    twice; the pages cover the positions the request has by the trace
    (`RequestView.reach`); every listed block is counted held (a listed block
    counted free is reused while the request reads it); and a block in two
    tables is the same page of both, full (the same index, one of them past its
    end, the same tokens up to it): a request may join a page another has
    written (a prefix hit, or a system that deduplicates a page it is still
    computing onto the copy another finished: it then writes the same KV as
    is there), but sharing any other lets one request write KV that another
    reads. Tables of requests not running are not judged (`kv-excess` counts
    their blocks)."""

    props = ("kv-tables",)

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.block_tables else NO_TABLES

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        cfg = run.cfg
        first_holder: dict[int, tuple[RequestView, int]] = {}   # block -> the first table and page listing it
        for r in run.view.open.values():
            if r.status != RUNNING:
                continue
            pages, rid = obs.block_tables.get(r.spec.rid, []), r.spec.rid
            if len(pages) * cfg.block_size < (r.reach or 0):
                self.broke(Violation("kv-tables", f"{rid} has positions 0..{r.reach} by the trace, but its table lists "
                                                  f"{len(pages)} pages of {cfg.block_size}", rule="page-count"))
            listed: set[int] = set()
            for k, page in enumerate(pages):
                if len(page) != cfg.planes:
                    self.broke(Violation("kv-tables", f"page {k} of {rid} lists {len(page)} blocks, a page takes "
                                                      f"{cfg.planes} under kv_layout={cfg.kv_layout}",
                                         rule="page-blocks"))
                for block in page:
                    if block in listed:
                        self.broke(Violation("kv-tables", f"{rid}'s table lists block {block} twice",
                                             rule="block-twice"))
                    listed.add(block)
                    if block not in first_holder:
                        first_holder[block] = (r, k)
                        continue
                    found = _shared(block, *first_holder[block], r, k, cfg.block_size)
                    if found is not None:
                        self.broke(found)
        if 0 <= obs.blocks_held < len(first_holder):   # (a count out of the pool's range: kv-conservation)
            self.broke(Violation("kv-tables", f"the running requests' tables list {len(first_holder)} blocks, but "
                                              f"{obs.blocks_held} are held: a listed block is counted free",
                                 rule="listed-counted-free"))


def _shared(block: int, a: RequestView, j: int, b: RequestView, k: int, block_size: int) -> Violation | None:
    """Block `block`, page j of a's table and page k of b's, may be shared: the
    same page of both, of the same tokens, which one of them has written in
    full; else the Violation it is (None: it may)."""
    if j != k:
        return Violation("kv-tables", f"block {block} is page {j} of {a.spec.rid} and page {k} of {b.spec.rid}",
                        rule="block-two-pages")
    end = (k + 1) * block_size
    if max(a.reach or 0, b.reach or 0) < end:
        return Violation("kv-tables", f"block {block}, page {k} of {a.spec.rid} and {b.spec.rid}, is shared but "
                                     f"they have only positions 0..{a.reach or 0} and 0..{b.reach or 0} of it "
                                     "(a page is shared once one of them has written it in full)",
                        rule="shared-unwritten")
    if a.content(end) != b.content(end):
        return Violation("kv-tables", f"block {block}, page {k} of {a.spec.rid} and {b.spec.rid}, is shared but "
                                     f"their tokens at positions 0..{end} differ: {list(a.content(end))} and "
                                     f"{list(b.content(end))}", rule="shared-differ")
    return None


class KvHitBlocks(Check):
    """A prefix-cache hit reads, in place, the block that holds the hit page's
    tokens: hit page k of an admission or resumption, listed in the request's
    table after the step, is a block that no running request lists besides it
    (a shared page is `kv-tables`'), and the block last held, as the tables
    showed it, the same tokens up to the page's end. So a cache whose key
    outlives its block's content (an evicted page's key kept, a freed block
    still keyed) is caught though nobody holds the block any more.

    What a block holds is read off the tables after each step: each page of a
    running request holds its tokens up to the page's end once the request has
    those positions by the trace, a partly written page no full page, an
    unwritten one what it held before. A request that works in a step and no
    longer runs after it wrote blocks no table showed: its pages from its
    previous table forget what they held, and, if it wrote pages that table did
    not list, so does every block no table lists now (never judged rather than
    judged on a guess). Assumes hits are read in place, as vLLM's, SGLang's and
    loopcheck's caches do; a system that loads hits into fresh blocks breaks it
    by design (`--ignore kv-hit-blocks`)."""

    props = ("kv-hit-blocks",)

    def __init__(self) -> None:
        # block -> (hash of the tokens up to its page's end, or None: no full page), writer, page
        self.held: dict[int, tuple[int | None, str, int]] = {}
        self.tables: dict[str, list[list[int]]] = {}   # the running requests' tables after the previous step

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        return None if caps.block_tables else NO_TABLES

    def after_step(self, run: RunView, events: list[Event], obs: Observation) -> None:
        view, bs = run.view, run.cfg.block_size
        running = [r for r in view.open.values() if r.status == RUNNING]
        tables = {r.spec.rid: obs.block_tables.get(r.spec.rid, []) for r in running}
        holders: dict[int, int] = {}
        for pages in tables.values():
            for block in {b for page in pages for b in page}:
                holders[block] = holders.get(block, 0) + 1
        hits = [(e, k, block, contents[k]) for e, contents in view.hit_pages
                for k, page in enumerate(tables.get(e.rid, [])[:len(contents)]) for block in page]
        self._forget_unseen_writes(events, view.tokens_before, view.requests, bs, holders, {h[2] for h in hits})
        for e, k, block, content in hits:
            self._judge_hit(e, k, block, content, holders)
        for r in running:
            for k, page in enumerate(tables[r.spec.rid]):
                end = (k + 1) * bs
                if (r.reach or 0) > k * bs:   # (a page not yet written holds what it held)
                    digest = hash(r.content(end)) if (r.reach or 0) >= end else None
                    self.held.update(dict.fromkeys(page, (digest, r.spec.rid, k)))
        self.tables = tables

    def _forget_unseen_writes(self, events: list[Event], tokens_before: list[int], requests: dict[str, RequestView],
                              bs: int, holders: dict[int, int], hit_blocks: set[int]) -> None:
        """Forget what the blocks hold that a request wrote in this step where no
        table after it shows them: it worked and is not running. Pages its
        previous table listed name their blocks; a page past them is any block
        free in the step: any block no table lists now or that a hit of this step
        reads (a request admitted in the step may hit a page another computes in
        the same step, as vLLM's do, and that one may finish in it), but, when it
        alone wrote such pages, its own other blocks (a request holds its pages
        through a step)."""
        written: dict[str, set[int]] = {}   # request -> pages its work of this step wrote
        for e, before in zip(events, tokens_before, strict=True):
            r = requests[e.rid]
            if r.status == RUNNING or e.kind not in ("prefill", "token"):
                continue
            start, end = computed(e, len(r.spec.prompt), before)
            written.setdefault(e.rid, set()).update(range(start // bs, (end - 1) // bs + 1))
        unlisted = [rid for rid, pages in written.items() if max(pages) >= len(self.tables.get(rid, []))]
        for rid, pages in written.items():
            table = self.tables.get(rid, [])
            for k in pages:
                for block in (table[k] if k < len(table) else ()):
                    self.held.pop(block, None)
        if unlisted:
            keep = set(holders) - hit_blocks
            if len(unlisted) == 1:
                keep.update(b for page in self.tables.get(unlisted[0], []) for b in page)
            self.held = {b: held for b, held in self.held.items() if b in keep}

    def _judge_hit(self, e: Event, k: int, block: int, content: tuple[int, ...], holders: dict[int, int]) -> None:
        held = self.held.get(block)
        if held is None or holders.get(block, 0) > 1:
            return
        digest, writer, page = held
        if digest != hash(content):
            what = f"page {page} of {writer}" if digest is not None else f"part of page {page} of {writer}"
            self.broke(Violation("kv-hit-blocks", f"{e}: hit page {k} of {e.rid} (its tokens at positions "
                                                  f"0..{len(content)}: {list(content)}) is block {block}, which last "
                                                  f"held {what}"))
