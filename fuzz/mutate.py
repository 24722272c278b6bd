"""Structured mutations of a workload: the small edits that turn a run that
reached something new into one that goes a step further (fuzz/corpus.py).

Each mutation changes one thing a scheduler's decisions turn on: a request
added, removed, moved in time or resized; prompts that share a prefix up to a
page boundary, one token before or after it, or all of it; priorities swapped;
an abort placed at a step; the pool, the token budget, the slots or the chunk
size made tighter or looser; the same requests on other pages (the pool keeping
its positions); prefix caching or priority preemption switched. Only what the
shape allows, and only config fields the system does not pin. The page-size
change and the edits read off a run keep every request that fitted the pool
fitting (`fitting_pool`): they move the run, they do not make the system
reject a request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from loopcheck.fuzz.shrink import shifted, with_request
from loopcheck.fuzz.strategies import OFF, ON, VOCAB, Shape, async_drawable, most_drafts
from loopcheck.model.config import PAUSES
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import Event, Preempt, Prefill
from loopcheck.model.reference import never_fits, total_pages
from loopcheck.model.workload import NEVER, RequestSpec, Workload

MAX_REQUESTS = 12
MAX_PROMPT = 48
MAX_TOKENS = 12


@dataclass(frozen=True)
class Limits:
    """What mutants may contain: the shape's features, the config fields the
    system pins, whether it can abort."""

    shape: Shape
    pinned: dict[str, Any]
    can_abort: bool = True

    def allows(self, w: Workload) -> bool:
        """Whether `w` keeps to the shape and to the pinned fields, its drafts to `most_drafts`."""
        s, cfg = self.shape, w.config
        if not w.requests or len(w.requests) > MAX_REQUESTS:
            return False
        if any(getattr(cfg, k) != v for k, v in self.pinned.items()):
            return False
        if s.oversized == OFF and any(never_fits(r, cfg) for r in w.requests):
            return False
        if (s.aborts == OFF or not self.can_abort) and any(r.abort_at is not None for r in w.requests):
            return False
        if s.priorities != ON and len({r.priority for r in w.requests}) > 1:
            return False
        if s.prompt_only == OFF and any(r.max_tokens == 0 for r in w.requests):
            return False
        if s.lora == OFF and any(r.lora for r in w.requests):
            return False
        if s.grammar == OFF and any(r.grammar_ready is not None for r in w.requests):
            return False
        if s.kv_transfer == OFF and any(r.kv_load_steps is not None for r in w.requests):
            return False
        if s.spec == OFF and (cfg.spec_tokens or any(r.spec_accepts for r in w.requests)):
            return False
        if s.pause == OFF and cfg.pause != "off":
            return False
        if cfg.async_scheduling and (s.async_scheduling == OFF or not async_drawable(cfg.spec_tokens, cfg.pause)):
            return False
        if cfg.spec_tokens > most_drafts(cfg.max_positions, cfg.max_num_batched_tokens, cfg.prefill_chunk_size):
            return False
        return all(max(r.prompt) < cfg.vocab_size and 0 < len(r.prompt) <= MAX_PROMPT
                   and (r.stop_token is None or 0 <= r.stop_token < cfg.vocab_size) for r in w.requests)


Mutation = Callable[[Workload, random.Random], Workload | None]


def _pick(w: Workload, rng: random.Random) -> tuple[int, RequestSpec]:
    i = rng.randrange(len(w.requests))
    return i, w.requests[i]


def _fresh_id(w: Workload) -> str:
    taken = {r.rid for r in w.requests}
    n = len(w.requests)
    while f"m{n}" in taken:
        n += 1
    return f"m{n}"


def _near_page(length: int, block_size: int, rng: random.Random) -> int:
    """A length at a page boundary, one before or one after it, at most `length`."""
    pages = max(1, length // block_size)
    cut = rng.randint(1, pages) * block_size + rng.choice((-1, 0, 0, 1))
    return max(1, min(length, cut))


def add_request(w: Workload, rng: random.Random) -> Workload | None:
    """A new request: an exact clone of a prompt, a prompt sharing a prefix near
    a page boundary, or a fresh one; arriving around the others."""
    _, src = _pick(w, rng)
    bs = w.config.block_size
    choice = rng.randrange(3)
    if choice == 0:
        prompt = src.prompt
    elif choice == 1:
        head = src.prompt[:_near_page(len(src.prompt), bs, rng)]
        prompt = head + tuple(rng.randrange(VOCAB) for _ in range(rng.randint(0, 2 * bs)))
    else:
        prompt = tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 3 * bs)))
    last = max(r.arrival for r in w.requests)
    spec = RequestSpec(_fresh_id(w), prompt, rng.randint(1, 6), arrival=rng.randint(0, last + 3),
                       priority=src.priority + rng.choice((-1, 0, 1)), stop_token=src.stop_token)
    return Workload(w.config, w.requests + (spec,))


def remove_request(w: Workload, rng: random.Random) -> Workload | None:
    return with_request(w, rng.randrange(len(w.requests)), None) if len(w.requests) > 1 else None


def shift_request(w: Workload, rng: random.Random) -> Workload | None:
    i, r = _pick(w, rng)
    by = rng.choice((-3, -2, -1, 1, 2, 3))
    if r.arrival + by < 0:
        return None
    return with_request(w, i, shifted(r, by))


def resize_prompt(w: Workload, rng: random.Random) -> Workload | None:
    """A prompt cut near a page boundary, or grown by up to two pages."""
    i, r = _pick(w, rng)
    bs = w.config.block_size
    if rng.random() < 0.5 and len(r.prompt) > 1:
        return with_request(w, i, replace(r, prompt=r.prompt[:_near_page(len(r.prompt) - 1, bs, rng)]))
    grown = r.prompt + tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 2 * bs)))
    return with_request(w, i, replace(r, prompt=grown))


def resize_output(w: Workload, rng: random.Random) -> Workload | None:
    i, r = _pick(w, rng)
    tokens = 0 if rng.random() < 0.2 else rng.randint(1, min(MAX_TOKENS, 2 * r.max_tokens + 1))
    return with_request(w, i, replace(r, max_tokens=tokens))


def share_prefix(w: Workload, rng: random.Random) -> Workload | None:
    """Request j's prompt starts with request i's first tokens, up to a page
    boundary, one before or one after it; or all of i's prompt (a clone)."""
    if len(w.requests) < 2:
        return None
    i, j = rng.sample(range(len(w.requests)), 2)
    src, dst = w.requests[i].prompt, w.requests[j]
    head = src if rng.random() < 0.25 else src[:_near_page(len(src), w.config.block_size, rng)]
    return with_request(w, j, replace(dst, prompt=head + dst.prompt[len(head):]))


def diverge_prefix(w: Workload, rng: random.Random) -> Workload | None:
    """One token changed near a page boundary of a prompt."""
    i, r = _pick(w, rng)
    at = min(len(r.prompt) - 1, _near_page(len(r.prompt), w.config.block_size, rng) - rng.randint(0, 1))
    prompt = list(r.prompt)
    prompt[at] = (prompt[at] + rng.randint(1, VOCAB - 1)) % VOCAB
    return with_request(w, i, replace(r, prompt=tuple(prompt)))


def swap_priorities(w: Workload, rng: random.Random) -> Workload | None:
    if len(w.requests) < 2:
        return None
    i, j = rng.sample(range(len(w.requests)), 2)
    a, b = w.requests[i], w.requests[j]
    if rng.random() < 0.5:
        return with_request(with_request(w, i, replace(a, priority=b.priority)), j, replace(b, priority=a.priority))
    return with_request(w, i, replace(a, priority=min(r.priority for r in w.requests) - 1))


def place_abort(w: Workload, rng: random.Random) -> Workload | None:
    i, r = _pick(w, rng)
    if r.abort_at is not None and rng.random() < 0.3:
        return with_request(w, i, replace(r, abort_at=None))
    return with_request(w, i, replace(r, abort_at=r.arrival + rng.randint(0, 8)))


def _config(w: Workload, **changes: Any) -> Workload | None:
    try:
        return Workload(replace(w.config, **changes), w.requests)
    except WorkloadError:
        return None


def fitting_pool(w: Workload, num_blocks: int, before: Workload | None = None) -> int:
    """`num_blocks`, raised to the fewest blocks in which every request of `w`
    that fitted the pool of `before` (default `w`) still fits: an edit that cuts
    the pool or grows a prompt moves the run, it does not turn a request into
    one the system must reject."""
    was = before or w
    never = {o.rid for o in was.requests if never_fits(o, was.config)}
    return max([num_blocks] + [total_pages(r, w.config) * w.config.planes for r in w.requests if r.rid not in never])


def tighten_pool(w: Workload, rng: random.Random) -> Workload | None:
    cfg = w.config
    return _config(w, num_blocks=max(cfg.planes, cfg.num_blocks + cfg.planes * rng.choice((-3, -2, -1, -1, 1, 2))))


def tighten_budget(w: Workload, rng: random.Random) -> Workload | None:
    cfg = w.config
    field = rng.choice(("max_num_batched_tokens", "max_num_seqs", "prefill_chunk_size"))
    return _config(w, **{field: max(1, getattr(cfg, field) + rng.choice((-2, -1, -1, 1, 2)))})


def repage(w: Workload, rng: random.Random) -> Workload | None:
    """The same requests on other pages: another page size (1 to twice the
    page and one), the pool holding about as many positions as before (one
    block more or fewer, every request that fitted still fitting). Chunks,
    budgets and arrivals stay, so the run's timing stays close while every page
    boundary moves against the prompts and the chunks: where a scheduler
    registers, shares or frees pages of half-done work, its bookkeeping turns
    on where the boundaries fall."""
    cfg = w.config
    size = rng.choice([b for b in range(1, 2 * cfg.block_size + 2) if b != cfg.block_size])
    positions = cfg.num_blocks // cfg.planes * cfg.block_size
    blocks = cfg.planes * max(1, round(positions / size) + rng.choice((-1, 0, 0, 1)))
    repaged = _config(w, block_size=size)
    return repaged and _config(repaged, num_blocks=fitting_pool(repaged, blocks, before=w))


def switch_lora(w: Workload, rng: random.Random) -> Workload | None:
    """A request's LoRA adapter changed (0 to 3; 0 is the base model), or
    max_loras switched between 1 and 2."""
    if rng.random() < 0.25:
        return _config(w, max_loras=3 - w.config.max_loras if w.config.max_loras <= 2 else 1)
    i, r = _pick(w, rng)
    return with_request(w, i, replace(r, lora=rng.randint(0, 3)))


def switch_grammar(w: Workload, rng: random.Random) -> Workload | None:
    """A request's structured output changed: none, a grammar compiled 0 to 4
    steps after it arrives, or one never compiled."""
    i, r = _pick(w, rng)
    return with_request(w, i, replace(r, grammar_ready=rng.choice((None, NEVER, 0, 1, 2, 4))))


def switch_kv_load(w: Workload, rng: random.Random) -> Workload | None:
    """A request's KV load changed: none, or one taking 1 to 3 steps that
    loads or fails."""
    i, r = _pick(w, rng)
    steps = rng.choice((None, 1, 2, 3))
    return with_request(w, i, replace(r, kv_load_steps=steps, kv_load_fails=steps is not None and rng.random() < 0.5))


def switch_spec(w: Workload, rng: random.Random) -> Workload | None:
    """Speculative decoding changed: spec_tokens 0 to `most_drafts`, or how many of a
    request's drafts are right, each step in turn (none to three steps of 0 to 3)."""
    if rng.random() < 0.25:
        cfg = w.config
        return _config(w, spec_tokens=rng.randint(0, most_drafts(cfg.max_positions, cfg.max_num_batched_tokens,
                                                                 cfg.prefill_chunk_size)))
    i, r = _pick(w, rng)
    return with_request(w, i, replace(r, spec_accepts=tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 3)))))


def switch_pause(w: Workload, rng: random.Random) -> Workload | None:
    """The operator's pause changed: off, new or all, from one of the first 8
    steps for 1 to 4 steps."""
    return _config(w, pause=rng.choice(PAUSES), pause_at=rng.randint(0, 7), pause_steps=rng.randint(1, 4))


def switch_async(w: Workload, rng: random.Random) -> Workload | None:
    """Asynchronous scheduling switched on or off."""
    return _config(w, async_scheduling=not w.config.async_scheduling)


def flip_switch(w: Workload, rng: random.Random) -> Workload | None:
    field = rng.choice(("prefix_caching", "priority_preemption"))
    return _config(w, **{field: not getattr(w.config, field)})


REQUEST_MUTATIONS: tuple[Mutation, ...] = (add_request, remove_request, shift_request, resize_prompt, resize_output,
                                           share_prefix, diverge_prefix)
CONFIG_MUTATIONS: tuple[Mutation, ...] = (tighten_pool, tighten_budget, repage, flip_switch)


def mutations(limits: Limits) -> tuple[Mutation, ...]:
    """The mutations the limits allow."""
    extra: list[Mutation] = []
    if limits.shape.priorities == ON:
        extra.append(swap_priorities)
    if limits.shape.aborts == ON and limits.can_abort:
        extra.append(place_abort)
    if limits.shape.lora == ON:
        extra.append(switch_lora)
    if limits.shape.grammar == ON:
        extra.append(switch_grammar)
    if limits.shape.kv_transfer == ON:
        extra.append(switch_kv_load)
    if limits.shape.spec == ON:
        extra.append(switch_spec)
    if limits.shape.pause == ON:
        extra.append(switch_pause)
    if limits.shape.async_scheduling == ON:
        extra.append(switch_async)
    return REQUEST_MUTATIONS + tuple(extra) + CONFIG_MUTATIONS


def splice(w: Workload, other: Workload, rng: random.Random) -> Workload:
    """`w` with some of `other`'s requests added (renamed, moved by up to three
    steps), as AFL splices two inputs: two runs that each reached something
    rare, now contending for one pool."""
    taken = rng.sample(other.requests, rng.randint(1, len(other.requests)))
    by = rng.randint(0, 3)
    added = []
    for r in taken[:MAX_REQUESTS - len(w.requests)]:
        rid = _fresh_id(Workload(w.config, w.requests + tuple(added)))
        added.append(replace(shifted(r, by), rid=rid))
    return Workload(w.config, w.requests + tuple(added))


def stop_at_output(w: Workload, outputs: dict[str, tuple[int, ...]], rng: random.Random) -> Workload:
    """A request's stop token set to a token its run produced (the first one
    half the time: a stop token as the first output), read off the run."""
    produced = [i for i, r in enumerate(w.requests) if outputs.get(r.rid)]
    if not produced:
        return w
    i = rng.choice(produced)
    tokens = outputs[w.requests[i].rid]
    stop = tokens[0] if rng.random() < 0.5 else rng.choice(tokens)
    return with_request(w, i, replace(w.requests[i], stop_token=stop))


def follow_up(w: Workload, outputs: dict[str, tuple[int, ...]], rng: random.Random) -> Workload:
    """A next turn of a conversation: a new request whose prompt is a request's
    prompt, the first tokens its run produced (up to near a page boundary) and a
    few fresh tokens, arriving after that request did, read off the run. A
    scheduler that shares pages it has not computed yet, or keeps a page of
    outputs it dropped, hands such a request what it never wrote."""
    produced = [i for i, r in enumerate(w.requests) if outputs.get(r.rid)]
    if not produced or len(w.requests) >= MAX_REQUESTS:
        return w
    src = w.requests[rng.choice(produced)]
    tokens = outputs[src.rid]
    turn = src.prompt + tokens
    head = turn[:max(len(src.prompt) + 1, _near_page(len(turn), w.config.block_size, rng))]
    prompt = head + tuple(rng.randrange(VOCAB) for _ in range(rng.randint(0, 2 * w.config.block_size)))
    spec = RequestSpec(_fresh_id(w), prompt[:MAX_PROMPT], rng.randint(1, 6),
                       arrival=src.arrival + rng.randint(1, len(src.prompt) + len(tokens) + 2),
                       priority=src.priority + rng.choice((-1, 0, 1)), stop_token=src.stop_token)
    return Workload(w.config, w.requests + (spec,))


@dataclass(frozen=True)
class MidPromptPreemption:
    """A request preempted for another with its prompt half done: the step, the
    victim, where its prefills since it came in started and reached, and in how
    many chunks."""

    step: int
    victim: str
    start: int
    reached: int
    chunks: int


@dataclass(frozen=True)
class RunNotes:
    """What edits read off a run (`run_edits` in fuzz/corpus.py): the tokens it
    gave each request; (step, request) where a request computed part of its
    prompt, not its end (a prompt half done); (step, victim, requester) of each
    preemption (requester None where the system does not name it), and of those
    whose victim was preempted with its prompt half done for another request;
    the blocks held after each step."""

    outputs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    mid_prompt: list[tuple[int, str]] = field(default_factory=list)
    preemptions: list[tuple[int, str, str | None]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    mid_prompt_preemptions: list[MidPromptPreemption] = field(default_factory=list)

    @classmethod
    def of(cls, w: Workload, trace: list[list[Event]], outputs: dict[str, tuple[int, ...]],
           held: list[int]) -> RunNotes:
        lengths = {r.rid: len(r.prompt) for r in w.requests}
        prefills: dict[str, list[tuple[int, int]]] = {}   # request -> its prefill chunks since it came in
        mid_prompt, preemptions, mid_prompt_preemptions = [], [], []
        for t, events in enumerate(trace):
            for e in events:
                if isinstance(e, Prefill):
                    prefills.setdefault(e.rid, []).append((e.start, e.end))
                    if e.end < lengths.get(e.rid, 0):
                        mid_prompt.append((t, e.rid))
                elif isinstance(e, Preempt):
                    preemptions.append((t, e.rid, e.by))
                    chunks = prefills.get(e.rid, [])
                    if chunks and chunks[-1][1] < lengths.get(e.rid, 0) and e.by != e.rid:
                        mid_prompt_preemptions.append(MidPromptPreemption(t, e.rid, chunks[0][0], chunks[-1][1],
                                                                          len(chunks)))
                if e.kind in ("preempt", "finish"):
                    prefills.pop(e.rid, None)
        return cls(outputs, mid_prompt, preemptions, list(held), mid_prompt_preemptions)


def abort_after_preemption(w: Workload, preemptions: list[tuple[int, str, str | None]],
                           rng: random.Random) -> Workload:
    """An abort, the step after a preemption in the parent's run, of the request
    it was for (what that request held goes back to the pool while the victim
    waits: the pool stays as the preemption left it until the victim comes back)
    or of the victim (an abort of a preempted request)."""
    t, victim, requester = rng.choice(preemptions)
    rid = requester if requester not in (None, victim) and rng.random() < 0.5 else victim
    i = next(i for i, r in enumerate(w.requests) if r.rid == rid)   # (the run's requests are the workload's)
    return with_request(w, i, replace(w.requests[i], abort_at=t + 1))


def arrive_mid_prompt(w: Workload, moments: list[tuple[int, str]], held: list[int], rng: random.Random,
                      limits: Limits) -> Workload:
    """Contention while a prompt is half done: a new request arriving after a step
    where a request computed part of its prompt, not its end, in the parent's run
    (read off its trace; so it comes in after that request, whose prompt is still
    in flight), more urgent than it where the shape draws priorities (priority
    preemption switched on, unless the system pins it), with a prompt of up to
    two pages that shares that request's first pages or not; and the pool cut
    to the most the run held up to that step (so the run up to it stays as it
    was) plus up to the new request's pages and one, so that the two contend for
    it while the first prompt is in flight."""
    if not moments or len(w.requests) >= MAX_REQUESTS:
        return w
    t, rid = rng.choice(moments)
    src = next(r for r in w.requests if r.rid == rid)
    cfg, bs = w.config, w.config.block_size
    fresh = tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 2 * bs)))
    prompt = (src.prompt[:_near_page(len(src.prompt), bs, rng)] + fresh if rng.random() < 0.3 else fresh)[:MAX_PROMPT]
    urgent = limits.shape.priorities == ON
    spec = RequestSpec(_fresh_id(w), prompt, rng.choice((1, 1, rng.randint(1, 6))), arrival=t + 1,
                       priority=src.priority - urgent, stop_token=src.stop_token)
    changes: dict[str, Any] = {}
    if t < len(held) and "num_blocks" not in limits.pinned:
        pages = -(-len(prompt) // bs)
        peak = max(held[:t + 1])   # the most the run held up to the moment: the run up to it stays as it was
        blocks = max(cfg.planes, cfg.planes * (peak // cfg.planes + rng.randint(0, pages + 1)))
        changes["num_blocks"] = fitting_pool(Workload(cfg, w.requests + (spec,)), blocks, w)
    if urgent and "priority_preemption" not in limits.pinned:
        changes["priority_preemption"] = True
    return _config(Workload(cfg, w.requests + (spec,)), **changes) or w


def regeometry_preemption(w: Workload, preemptions: list[MidPromptPreemption], rng: random.Random,
                          limits: Limits) -> Workload:
    """A preemption of a request whose prompt was half done, in the parent's
    run, again with other numbers of pages and chunks. Half the time (always
    where the chunk size is pinned) the pages move under the same chunks
    (`repage`: the timing stays, so the preemption most often still comes);
    otherwise a chunk size that completes a page and runs into the next (2 to
    two pages and one; the token budget left room beside it for the request it
    is preempted for), the victim's prompt grown so that as many chunks of the
    new size leave it half done again with a chunk to go, and the pool grown by
    the blocks those chunks hold more, then one block smaller or larger or as it
    is (whether the requester is short of exactly the blocks the victim frees).
    Where a scheduler registers or frees the pages of a half-done prompt when it
    preempts, its bookkeeping turns on exactly these numbers. Fields the system
    pins are left; every request that fitted the pool still fits."""
    chunk_pinned = bool({"prefill_chunk_size", "max_num_batched_tokens"} & limits.pinned.keys())
    if "block_size" not in limits.pinned and (chunk_pinned or rng.random() < 0.5):
        return repage(w, rng) or w
    p = rng.choice(preemptions)
    i = next(i for i, r in enumerate(w.requests) if r.rid == p.victim)   # (the run's requests are the workload's)
    before, cfg, bs, v = w, w.config, w.config.block_size, w.requests[i]
    changes: dict[str, Any] = {}
    more = 0   # the blocks the victim holds at the moment beyond what it held in the parent's run
    if not chunk_pinned:
        chunk = rng.randint(2, 2 * bs + 1)
        reached = p.start + p.chunks * chunk
        tail = max(0, reached + chunk + rng.randint(0, bs) - len(v.prompt))
        grown = (v.prompt + tuple(rng.randrange(VOCAB) for _ in range(tail)))[:MAX_PROMPT]
        w = with_request(w, i, replace(v, prompt=grown))
        changes.update(prefill_chunk_size=chunk,
                       max_num_batched_tokens=max(cfg.max_num_batched_tokens, chunk + rng.randint(1, bs + 1)))
        more = -(-min(reached, len(grown)) // bs) - -(-p.reached // bs)   # (a prompt cut at MAX_PROMPT: its end)
    if "num_blocks" not in limits.pinned:
        blocks = max(cfg.planes, cfg.num_blocks + cfg.planes * (more + rng.choice((-1, 0, 0, 1))))
        changes["num_blocks"] = fitting_pool(w, blocks, before)
    return _config(w, **changes) or w


def mutate(w: Workload, rng: random.Random, limits: Limits, tries: int = 20) -> Workload | None:
    """`w` with one to three mutations stacked, kept to the limits (None if no
    try gave an allowed, different workload)."""
    chosen = mutations(limits)
    for _ in range(tries):
        out: Workload | None = w
        for _ in range(rng.choice((1, 1, 2, 3))):
            out = rng.choice(chosen)(out, rng) if out is not None else None
        if out is not None and out != w and limits.allows(out):
            return out
    return None

