"""Hypothesis strategies for configs, requests and workloads, sized to run fast,
and the workload shape a user can set.

Exported for users' own tests: `configs()`, `requests()`, `workloads()`, `Shape`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from loopcheck.model.config import PAUSES, Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import FEATURES, NEVER, RequestSpec, Workload
from loopcheck.sut.protocol import Capabilities

VOCAB = 64
ON, OFF = "on", "off"


@dataclass(frozen=True)
class Shape:
    """Which workload features the fuzzer draws: each "on" (drawn), "off" (never)
    or, where it takes a value, pinned to an integer.

    priorities: request priorities 0..3, or all one value;
    stop_tokens: stop tokens 0..4 on some requests, or one stop token on all;
    aborts: aborts of submitted requests (on/off);
    oversized: requests larger than the pool (on/off);
    prefixes: prompts that share prefixes, or nearly (on/off);
    prompt_only: requests with max_tokens 0, whose prompt is computed and which
      generate no token (on/off);
    lora: requests served with LoRA adapters 1..3 beside base-model ones, and
      max_loras 1 or 2 (on/off; drawn only for a system whose capabilities
      claim the feature, as is each deployment feature);
    grammar: structured-output requests whose grammar is compiled 0 to 4 steps
      after they arrive, or never (on/off);
    kv_transfer: requests whose prompt's KV is loaded from an external store,
      the load taking 1 to 3 steps, one in three of them failing (on/off);
    spec: speculative decoding, 0 to 3 draft tokens a step (`spec_tokens`),
      of which each request has 0 to 3 right in turn (on/off);
    pause: the engine paused by its operator ("new" or "all") from one of the
      first 8 steps for 1 to 4 steps (on/off);
    async_scheduling: a step's batch scheduled before the previous batch's
      outputs are known, in configs without speculative decoding or a pause
      of all (on/off).
    """

    priorities: str | int = ON
    stop_tokens: str | int = ON
    aborts: str = ON
    oversized: str = ON
    prefixes: str = ON
    prompt_only: str = ON
    lora: str = ON
    grammar: str = ON
    kv_transfer: str = ON
    spec: str = ON
    pause: str = ON
    async_scheduling: str = ON

    @classmethod
    def parse(cls, text: str) -> Shape:
        """From "name=value,..." (value on, off, or an integer where allowed)."""
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = item.partition("=")
            if not sep or name not in cls.__dataclass_fields__:
                raise WorkloadError(f"--shape: expected NAME=on|off|INT with NAME one of "
                                    f"{', '.join(cls.__dataclass_fields__)}, got {item!r}")
            if value in (ON, OFF):
                values[name] = value
            elif name in ("priorities", "stop_tokens") and value.lstrip("-").isdigit():
                values[name] = int(value)
                if name == "stop_tokens" and values[name] < 0:
                    raise WorkloadError(f"--shape: stop_tokens must be >= 0, got {value}")
            else:
                raise WorkloadError(f"--shape: {name} takes on, off"
                                    f"{' or an integer' if name in ('priorities', 'stop_tokens') else ''}, "
                                    f"got {value!r}")
        return cls(**values)

    def swarm(self) -> st.SearchStrategy[Shape]:
        """Swarm testing: shapes in which each feature that is on is switched off
        with probability 1/4, so that examples exercise varied subsets of the
        features and combinations that one feature masks come up too."""
        # (a deployment feature that is off is left out of the draw: it would change other systems' examples)
        names = [n for n in self.__dataclass_fields__ if n not in FEATURES or getattr(self, n) == ON]
        picks = [st.sampled_from([ON, ON, ON, OFF]) if getattr(self, n) == ON else st.just(getattr(self, n))
                 for n in names]
        return st.tuples(*picks).map(lambda values: replace(self, **dict(zip(names, values, strict=True))))

    def without(self, *features: str) -> Shape:
        """This shape with `features` off (those a system cannot take); an unknown
        feature is a WorkloadError naming it."""
        unknown = [name for name in features if name not in self.__dataclass_fields__]
        if unknown:
            raise WorkloadError(f"unknown workload feature {unknown[0]!r}: expected one of "
                                f"{', '.join(self.__dataclass_fields__)}")
        return replace(self, **{name: OFF for name in features})

    def for_system(self, caps: Capabilities) -> Shape:
        """This shape with what the system cannot take off: the features its API
        refuses, aborts where it takes none, and the deployment features
        (`FEATURES`) it does not claim."""
        missing = [name for name in FEATURES if name not in caps.features]
        return self.without(*caps.refuses, *(() if caps.abort else ("aborts",)), *missing)

    def __str__(self) -> str:
        return ",".join(f"{k}={getattr(self, k)}" for k in self.__dataclass_fields__)


def _feature(value: str | int, drawn: st.SearchStrategy[Any], off: Any) -> st.SearchStrategy[Any]:
    if value == ON:
        return drawn
    return st.just(off if value == OFF else value)


DEFAULT_SHAPE = Shape()   # a campaign's, before `Shape.for_system`
PLAIN_SHAPE = DEFAULT_SHAPE.without(*FEATURES)   # the strategies' own: no deployment feature unless asked


def page_scale(block_size: int | None) -> int:
    """How many times loopcheck's usual sizes (prompts, budgets, tokens) a system
    is drawn with: 1, or for a system pinned to pages larger than the drawn
    ones (1 to 4 positions), its page size over 4, rounded up, so that its
    prompts still span pages and share them."""
    return 1 if block_size is None else max(1, -(-block_size // 4))


def request_sizes(block_size: int | None, max_prompt: int = 6, max_tokens: int = 5) -> dict[str, int]:
    """The stateful machine's request sizes (`machine_class`'s max_prompt,
    max_tokens and prefix_scale) for a system pinned to `block_size` (None: not
    pinned): the given usual sizes, scaled by `page_scale`."""
    scale = page_scale(block_size)
    return dict(max_prompt=max_prompt * scale, max_tokens=max_tokens * scale, prefix_scale=scale)


def async_drawable(spec_tokens: int, pause: str) -> bool:
    """Whether fuzz may draw async scheduling beside these fields: not with
    speculative decoding (the vLLM adapter does not run both) nor with a pause
    of all (not judged: docs/semantics.md)."""
    return not spec_tokens and pause != "all"


def most_drafts(positions: int, budget: int, chunk: int) -> int:
    """The most draft tokens a step (at most 3) for which a verify step, its
    input and its drafts, fits a pool of `positions`, the token budget and a
    prefill chunk (vLLM stalls or crashes below that: examples/vllm/spec_pad_*.json)."""
    return min(4, positions, budget, chunk) - 1


@st.composite
def configs(draw: st.DrawFn, features: Collection[str] = (), **fixed: Any) -> Config:
    """Small configs covering every switch; keyword arguments pin fields (fields
    that depend on them, such as min_loops or the watermark, are drawn within the
    pinned values; token budgets scale with a pinned page, `page_scale`).
    The config fields of deployment features are drawn only for those in
    `features` (of a system that runs them): `max_loras` (1 or 2) for "lora",
    `spec_tokens` (0 to `most_drafts`) for "spec", the `pause` fields (off,
    new or all, from one of the first 8 steps for 1 to 4 steps) for "pause",
    `async_scheduling` (where `spec_tokens` is 0 and the pause is not "all",
    docs/semantics.md) for "async_scheduling"; else
    they keep the values every other system runs (1, 0, off and False)."""
    def pick(name: str, strategy: st.SearchStrategy[Any]) -> Any:
        return fixed[name] if name in fixed else draw(strategy)

    scale = page_scale(fixed.get("block_size"))
    num_loops = pick("num_loops", st.integers(1, 4))
    layout = pick("kv_layout", st.sampled_from(["shared", "last_exited"]))
    planes = num_loops if layout == "last_exited" else 1
    num_blocks = pick("num_blocks", st.integers(planes * 2, planes * 8))
    values: dict[str, Any] = dict(
        block_size=pick("block_size", st.integers(1, 4)),
        num_blocks=num_blocks,
        max_num_seqs=pick("max_num_seqs", st.integers(1, 4)),
        max_num_batched_tokens=pick("max_num_batched_tokens", st.integers(1, 8 * scale)),
        prefill_chunk_size=pick("prefill_chunk_size", st.integers(1, 6 * scale)),
        num_loops=num_loops,
        min_loops=pick("min_loops", st.integers(1, num_loops)),
        execution=pick("execution", st.sampled_from(["refill", "mixed"])),
        wcpb=pick("wcpb", st.booleans()),
        priority_preemption=pick("priority_preemption", st.booleans()),
        preemption_policy=pick("preemption_policy", st.sampled_from(["unguarded", "guarded"])),
        prefix_caching=pick("prefix_caching", st.booleans()),
        kv_layout=layout,
        allocation=pick("allocation", st.sampled_from(["upfront", "incremental"])),
        snapshots=pick("snapshots", st.booleans()),
        max_bypasses=pick("max_bypasses", st.integers(0, 4)),
        watermark_blocks=pick("watermark_blocks", st.integers(0, max(0, num_blocks // 4))),
        resume_watermark=pick("resume_watermark", st.booleans()),
    )
    # (drawn only then: a draw more would change every other system's examples for a seed)
    if "lora" in features:
        values["max_loras"] = pick("max_loras", st.integers(1, 2))
    if "spec" in features:
        most = most_drafts(num_blocks // planes * values["block_size"], values["max_num_batched_tokens"],
                           values["prefill_chunk_size"])
        values["spec_tokens"] = pick("spec_tokens", st.integers(0, most))
    if "pause" in features:
        values["pause"] = pick("pause", st.sampled_from(PAUSES))
        values["pause_at"] = pick("pause_at", st.integers(0, 7))
        values["pause_steps"] = pick("pause_steps", st.integers(1, 4))
    if "async_scheduling" in features and async_drawable(fixed.get("spec_tokens", values.get("spec_tokens", 0)),
                                                         fixed.get("pause", values.get("pause", "off"))):
        values["async_scheduling"] = pick("async_scheduling", st.booleans())
    return Config(**{**values, **fixed})


@st.composite
def request_bodies(draw: st.DrawFn, prefixes: tuple[tuple[int, ...], ...] = (), max_prompt: int = 6,
                   max_tokens: int = 5, shape: Shape = PLAIN_SHAPE, pool_positions: int = 0) -> dict[str, Any]:
    """The parts of a request that do not depend on time: prompt (maybe starting
    with one of `prefixes`, for prefix sharing, or with a near miss of one: the
    prefix without its first tokens, or with one token changed, so that its later
    pages hold the same tokens after a different prefix), max_tokens, priority,
    stop token.
    With `pool_positions` (the most positions one request can hold) given, some
    prompts are long (past `max_prompt`, up to the pool: they span many pages and
    chunks, where prefix-cache and preemption windows open), shape oversized on
    makes some longer than the pool, and off keeps every request within it."""
    use_prefix = prefixes and shape.prefixes == ON and draw(st.booleans())
    head: tuple[int, ...] = draw(st.sampled_from(prefixes)) if use_prefix else ()
    twist = draw(st.integers(0, 5)) if use_prefix else 5
    if twist < 2:   # near misses: its pages hold the prefix's tokens but after other tokens
        j = draw(st.integers(1, len(head) - 1))
        head = head[j:] if twist == 0 else head[:j - 1] + ((head[j - 1] + 1) % VOCAB,) + head[j:]
    longest = max(max_prompt, len(head))
    size = draw(st.integers(0, 7)) if pool_positions else 1   # 0: oversized, 7: long, else usual
    if shape.oversized == ON and size == 0:
        longest = pool_positions + 3
        tail_len = st.integers(max(1, pool_positions + 1 - len(head)), longest)
    elif size == 7 and pool_positions > longest:   # long: up to the whole pool, many pages and chunks
        longest = pool_positions
        tail_len = st.integers(max_prompt + 1 - len(head) if len(head) <= max_prompt else 0,
                               pool_positions - len(head))
    else:
        tail_len = st.integers(0 if head else 1, max_prompt)
    n = draw(tail_len)
    tail = tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)))
    prompt, tokens = (head + tail)[:longest], draw(st.integers(1, max_tokens))
    if shape.prompt_only == ON and draw(st.integers(0, 7)) == 7:   # (shrinks towards requests with tokens)
        tokens = 0
    if shape.oversized == OFF and pool_positions:   # every request fits the pool: prompt + tokens - 1 positions
        prompt = prompt[:pool_positions]
        tokens = min(tokens, max(1, pool_positions + 1 - len(prompt)))
    body = dict(prompt=prompt, max_tokens=tokens, priority=draw(_feature(shape.priorities, st.integers(0, 3), 0)),
                stop_token=draw(_feature(shape.stop_tokens, st.none() | st.integers(0, 4), None)))
    # the deployment features are drawn only where on (a draw more would change other systems' examples for a seed)
    if shape.lora == ON:
        body["lora"] = draw(st.integers(0, 3))
    if shape.grammar == ON:
        body["grammar_ready"] = draw(st.none() | st.integers(NEVER, 4))
    if shape.kv_transfer == ON:
        body["kv_load_steps"] = draw(st.none() | st.integers(1, 3))
        body["kv_load_fails"] = body["kv_load_steps"] is not None and draw(st.integers(0, 2)) == 2
    if shape.spec == ON:
        body["spec_accepts"] = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    return body


@st.composite
def requests(draw: st.DrawFn, rid: str, max_arrival: int = 6,
             prefixes: tuple[tuple[int, ...], ...] = (), shape: Shape = PLAIN_SHAPE, max_prompt: int = 6,
             max_tokens: int = 5) -> RequestSpec:
    """One request with an arrival step and maybe an abort step."""
    arrival = draw(st.integers(0, max_arrival))
    abort_at = draw(st.none() | st.integers(arrival, arrival + 12)) if shape.aborts == ON else None
    return RequestSpec(rid=rid, arrival=arrival, abort_at=abort_at,
                       **draw(request_bodies(prefixes, max_prompt, max_tokens, shape=shape)))


@st.composite
def workloads(draw: st.DrawFn, config: st.SearchStrategy[Config] | None = None,
              max_requests: int = 5, shape: Shape = PLAIN_SHAPE, max_prompt: int = 6, max_tokens: int = 5,
              max_arrival: int = 6, max_prefix: int = 6) -> Workload:
    """A config and 1..max_requests requests, some sharing prompt prefixes (of 2
    to max_prefix tokens)."""
    cfg = draw(config if config is not None else configs())
    prefixes = tuple(tuple(draw(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=max_prefix)))
                     for _ in range(2))
    n = draw(st.integers(1, max_requests))
    reqs = tuple(draw(requests(f"r{i}", max_arrival, prefixes, shape, max_prompt, max_tokens)) for i in range(n))
    return Workload(cfg, reqs)
