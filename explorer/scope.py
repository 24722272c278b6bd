"""A declared scope of workloads for exhaustive exploration of any system, and its
presets (`tiny`, `small`, `medium`), loaded from JSON under schema `loopcheck/scope@1`.

A scope declares

- the configurations: each listed config field takes every value of its list (the
  cartesian product), the other fields keep `Config()`'s defaults, and a system's
  pinned fields (`Capabilities.pinned`) override both;
- the request shapes: every combination of a prompt, a max_tokens (a number, or
  `"most"`: the largest max_tokens, up to max_steps / (2 max_requests) so that
  every workload can drain in time, with which the request fits the pool and the
  system takes it at `add`, resolved per config and prompt: the boundary where
  admission and intake limits meet), a priority and a stop choice
  (`stops`: None, no stop token; k, the request stops at its token k, resolved to
  the token the system gives there when the request runs alone; `"never"`, a
  stop token the request is never given, so it runs to max_tokens watched for
  one), a LoRA adapter (`loras`: 0 for the base model) and a structured-output
  choice (`grammars`: None, none; k, its grammar is compiled k steps after it
  arrives; `"never"`, never compiled) and a KV load (`kv_loads`: None, none;
  k, its prompt's KV is loaded from an external store in k steps; `"fail"`,
  that load fails after one step) and, under speculative decoding (the config
  field `spec_tokens`), how many of its drafts are right each step in turn
  (`spec_accepts`: a list, `[]` none); shapes using a deployment feature the
  system does not claim (`Capabilities.features`) are left out;
- the inputs: before each of the first `horizon` steps, up to `arrivals_per_step`
  new requests (of any shapes, in any order, `max_requests` in all) and, with
  `aborts`, an abort of at most one submitted request that has not finished;
- `max_steps`: a workload's steps in all, after which an undrained run is a
  `liveness` finding (graphs of systems with a state key show stalls and
  livelocks long before).

The presets are sized so that the tiny scope runs in seconds and the small one in
minutes on every shipped system; docs/exploring.md lists what each covers.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from loopcheck.explorer.explore import family_size
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import SCHEMA as WORKLOAD_SCHEMA
from loopcheck.model.workload import Workload, check_keys, load_workload, parse_json, workload_from_json

SCHEMA = "loopcheck/scope@1"
MOST = "most"   # a max_tokens choice: the largest the request fits the pool and the system takes with
NEVER = "never"   # a stop choice: a stop token the request is never given (it runs to max_tokens, watched)
FAIL = "fail"     # a KV load choice: the load fails after one step
MAX_UNITS = 100_000   # configs x first inputs: beyond, a scope file is a typo


@dataclass(frozen=True)
class Scope:
    """What an exploration covers (see the module's doc)."""

    name: str
    configs: tuple[tuple[str, tuple[Any, ...]], ...]
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int | str, ...]   # numbers, or MOST
    priorities: tuple[int, ...] = (0,)
    stops: tuple[int | str | None, ...] = (None,)   # None, an index k, or NEVER
    loras: tuple[int, ...] = (0,)                    # LoRA adapter ids (0: the base model)
    grammars: tuple[int | str | None, ...] = (None,)  # None (no structured output), k steps to compile, or NEVER
    kv_loads: tuple[int | str | None, ...] = (None,)  # None (nothing to load), k steps to load, or FAIL
    spec_accepts: tuple[tuple[int, ...], ...] = ((),)  # the right drafts of each step in turn (() none)
    max_requests: int = 2
    arrivals_per_step: int = 1
    aborts: bool = False
    horizon: int = 3
    max_steps: int = 40

    def config_list(self, pinned: dict[str, Any]) -> list[Config]:
        """Every config of the scope, in order, the system's pinned fields applied;
        a combination `Config` refuses is left out (each distinct config once)."""
        names = [name for name, _ in self.configs]
        out: list[Config] = []
        for values in itertools.product(*(vals for _, vals in self.configs)):
            try:
                cfg = Config(**{**Config().to_json(), **dict(zip(names, values, strict=True)), **pinned})
            except WorkloadError:
                continue
            if cfg not in out:
                out.append(cfg)
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["configs"] = {name: list(values) for name, values in self.configs}
        data["prompts"] = [list(p) for p in self.prompts]
        for name in ("max_tokens", "priorities", "stops", "loras", "grammars", "kv_loads"):
            data[name] = list(data[name])
        data["spec_accepts"] = [list(a) for a in self.spec_accepts]
        return {"schema": SCHEMA, **data}


WORKLOAD_MAX_STEPS = 500   # a workload scope's steps, by default (as `loopcheck simulate`'s)


@dataclass(frozen=True)
class WorkloadScope:
    """A given workload as a scope: its variants (every request's arrival and
    abort shifted by 0..spread steps, independently, as the model explorer's
    family: `explorer.explore.variant`) are the units, each with its inputs
    fixed by step; `max_steps`, as in a `Scope`."""

    name: str
    workload: Workload
    spread: int = 0
    max_steps: int = WORKLOAD_MAX_STEPS

    def config_list(self, pinned: dict[str, Any]) -> list[Config]:
        """The workload's config, the system's pinned fields applied."""
        return [Config(**{**self.workload.config.to_json(), **pinned})]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "name": self.name, "workload": self.workload.to_json(), "spread": self.spread,
                "max_steps": self.max_steps}


MAX_SPREAD = 16   # a workload scope's arrival shifts: at most


def workload_scope(workload: Workload, name: str, spread: int, max_steps: int = WORKLOAD_MAX_STEPS
                   ) -> WorkloadScope:
    """A workload scope, its size checked (WorkloadError naming the field)."""
    _int("scope.spread", spread, 0, MAX_SPREAD)
    _int("scope.max_steps", max_steps, *_INT_FIELDS["max_steps"])
    variants = family_size(workload, spread)
    if variants > MAX_UNITS:
        raise WorkloadError(f"scope: {variants} variants of the workload ({len(workload.requests)} requests, spread "
                            f"{spread}), more than {MAX_UNITS}: make it smaller")
    return WorkloadScope(name, workload, spread, max_steps)


_INT_FIELDS = {"max_requests": (1, 8), "arrivals_per_step": (1, 4), "horizon": (1, 32), "max_steps": (1, 10_000)}


def _ints(where: str, value: Any, low: int, high: int, none: bool = False, word: str | None = None
          ) -> tuple[Any, ...]:
    """A non-empty list of integers in [low, high] (also None with `none`, and
    the string `word`); WorkloadError naming the entry."""
    if not isinstance(value, list) or not value:
        raise WorkloadError(f"{where}: must be a non-empty list")
    for i, v in enumerate(value):
        if (v is None and none) or (word is not None and v == word):
            continue
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise WorkloadError(f"{where}[{i}]: must be an integer in [{low}, {high}]"
                                f"{' or null' if none else ''}{f' or {word!r}' if word else ''}, got {json.dumps(v)}")
    return tuple(value)


def scope_from_json(data: Any, name: str) -> Scope | WorkloadScope:
    """Validate a scope object field by field (a `WorkloadScope`'s where it has a
    `workload`); WorkloadError naming the field."""
    if not isinstance(data, dict):
        raise WorkloadError("scope: must be a JSON object")
    if data.get("schema") != SCHEMA:
        raise WorkloadError(f"scope.schema: must be {SCHEMA!r}, got {json.dumps(data.get('schema'))}")
    if "workload" in data:
        check_keys("scope", data, {"schema", "name", "workload", "spread", "max_steps"}, ("workload",), "scope")
        try:
            workload = workload_from_json(data["workload"])
        except WorkloadError as exc:
            raise WorkloadError(f"scope.workload: {exc}") from None
        return workload_scope(workload, name, data.get("spread", 0), data.get("max_steps", WORKLOAD_MAX_STEPS))
    check_keys("scope", data, {f.name for f in fields(Scope)} | {"schema"}, ("configs", "prompts", "max_tokens"),
               "scope")
    configs = data["configs"]
    if not isinstance(configs, dict):
        raise WorkloadError("scope.configs: must be an object of config fields, each a list of values")
    config_fields = {f.name for f in fields(Config)}
    for key, values in configs.items():
        if key not in config_fields:
            raise WorkloadError(f"scope.configs.{key}: unknown config field")
        if not isinstance(values, list) or not values:
            raise WorkloadError(f"scope.configs.{key}: must be a non-empty list of values")
        for value in values:
            try:
                Config(**{**Config(num_blocks=MAX_BLOCKS, num_loops=1).to_json(), key: value})
            except WorkloadError as exc:
                raise WorkloadError(f"scope.configs.{key}: {exc}") from None
    prompts = data["prompts"]
    if not isinstance(prompts, list) or not prompts:
        raise WorkloadError("scope.prompts: must be a non-empty list of prompts (lists of token ids)")
    vocab = max(configs.get("vocab_size", [Config().vocab_size]))
    parsed_prompts = tuple(_ints(f"scope.prompts[{i}]", p, 0, vocab - 1) for i, p in enumerate(prompts))
    scope = Scope(
        name=name,
        configs=tuple((key, tuple(values)) for key, values in configs.items()),
        prompts=parsed_prompts,
        max_tokens=_ints("scope.max_tokens", data["max_tokens"], 0, 64, word=MOST),
        priorities=_ints("scope.priorities", data.get("priorities", [0]), -1000, 1000),
        stops=_ints("scope.stops", data.get("stops", [None]), 0, 63, none=True, word=NEVER),
        loras=_ints("scope.loras", data.get("loras", [0]), 0, 64),
        grammars=_ints("scope.grammars", data.get("grammars", [None]), 0, 32, none=True, word=NEVER),
        kv_loads=_ints("scope.kv_loads", data.get("kv_loads", [None]), 1, 32, none=True, word=FAIL),
        spec_accepts=_accepts(data.get("spec_accepts", [[]])),
        aborts=_bool("scope.aborts", data.get("aborts", False)),
        **{key: _int(f"scope.{key}", data.get(key, getattr(Scope, key)), *bounds)
           for key, bounds in _INT_FIELDS.items()})
    units = len(scope.config_list({})) * (1 + len(shapes_upper_bound(scope)))
    if units > MAX_UNITS:
        raise WorkloadError(f"scope: {units} configs x first inputs, more than {MAX_UNITS}: make it smaller")
    return scope


MAX_BLOCKS = 4096   # (only to validate one field at a time against a config that fits it: one loop)


def shapes_upper_bound(scope: Scope) -> list[tuple]:
    """The request shapes before stop choices are resolved on a system."""
    return list(itertools.product(scope.prompts, scope.max_tokens, scope.priorities, scope.stops, scope.loras,
                                  scope.grammars, scope.kv_loads, scope.spec_accepts))


def _accepts(value: Any) -> tuple[tuple[int, ...], ...]:
    """`spec_accepts`: a non-empty list of lists of draft counts (0 to 8)."""
    if not isinstance(value, list) or not value:
        raise WorkloadError("scope.spec_accepts: must be a non-empty list of lists")
    for i, accepts in enumerate(value):
        if not isinstance(accepts, list):
            raise WorkloadError(f"scope.spec_accepts[{i}]: must be a list of integers in [0, 8]")
    return tuple(_ints(f"scope.spec_accepts[{i}]", a, 0, 8) if a else () for i, a in enumerate(value))


def _int(where: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise WorkloadError(f"{where}: must be an integer in [{low}, {high}], got {json.dumps(value)}")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise WorkloadError(f"{where}: must be true or false, got {json.dumps(value)}")
    return value


def _preset(name: str, **fields_: Any) -> Scope:
    return scope_from_json({"schema": SCHEMA, **fields_}, name)


# Prompts over a two-token alphabet so that prefixes are shared and pages repeat; one prompt longer than the
# tightest pool (a request that can never fit); priorities 0 and 1 (more and less urgent).
PRESETS: dict[str, Scope] = {
    "tiny": _preset(
        "tiny",
        configs={"num_blocks": [4, 6], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True]},
        prompts=[[1, 1], [1, 1, 2], [2, 2, 2, 2, 2, 2, 2, 2, 2]], max_tokens=[1, MOST], priorities=[0, 1],
        max_requests=2, horizon=3, max_steps=40),
    "small": _preset(
        "small",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4, 6],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True, False],
                 "execution": ["mixed", "refill"]},
        prompts=[[1, 1], [1, 1, 2], [1, 1, 1, 1, 2], [2, 2, 2, 2, 2, 2, 2, 2, 2]], max_tokens=[1, MOST],
        priorities=[0, 1], stops=[None, 0], max_requests=2, aborts=True, horizon=4, max_steps=60),
    "medium": _preset(
        "medium",
        configs={"num_blocks": [4, 7, 10], "block_size": [2, 4], "max_num_seqs": [1, 3],
                 "max_num_batched_tokens": [4, 8], "prefill_chunk_size": [2, 4], "prefix_caching": [False, True],
                 "priority_preemption": [True, False]},
        prompts=[[1, 1], [1, 1, 2], [1, 1, 1, 1, 2], [2, 2, 2, 2, 2, 2, 2, 2, 2]], max_tokens=[1, 3, MOST],
        priorities=[0, 1], stops=[None, 0], max_requests=3, aborts=True, horizon=5, max_steps=80),
    # the deployment features (LoRA adapters, grammars compiled later or never) on small's tighter configs;
    # on a system that claims none of them it is small's first configs with fewer shapes
    "features": _preset(
        "features",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True],
                 "max_loras": [1]},
        prompts=[[1, 1], [1, 1, 2]], max_tokens=[1, MOST], loras=[0, 1, 2], grammars=[None, 1, NEVER],
        max_requests=2, aborts=True, horizon=3, max_steps=40),
    # KV transfer (loads of one or two steps, failed loads) on features' configs, beside grammars compiled a
    # step late: a request blocked on one input beside one blocked on another
    "kv": _preset(
        "kv",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True]},
        prompts=[[1, 1], [1, 1, 2]], max_tokens=[1, MOST], grammars=[None, 1], kv_loads=[None, 1, 2, FAIL],
        max_requests=2, aborts=True, horizon=3, max_steps=40),
    # speculative decoding (one or two drafts a step, none, some or all of them right) on features' configs, with a
    # chunk as large as the budget, so that a verify step fits both
    "spec": _preset(
        "spec",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [4], "prefix_caching": [False, True], "priority_preemption": [True],
                 "spec_tokens": [1, 2]},
        prompts=[[1, 1], [1, 1, 2]], max_tokens=[1, MOST], spec_accepts=[[], [1], [2, 0]],
        max_requests=2, aborts=True, horizon=3, max_steps=40),
    # the operator's pause ("new" or "all", from step 1 for two steps) on features' configs, beside KV loads of one
    # step, which let a request hold blocks through a pause for new requests
    "pause": _preset(
        "pause",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True],
                 "pause": ["new", "all"], "pause_at": [1], "pause_steps": [2]},
        prompts=[[1, 1], [1, 1, 2]], max_tokens=[1, MOST], kv_loads=[None, 1],
        max_requests=2, aborts=True, horizon=3, max_steps=40),
    # asynchronous scheduling (a batch scheduled before the last one's outputs came) on features' configs, with stop
    # tokens and aborts, which end a request while its next decode is in flight
    "async": _preset(
        "async",
        configs={"num_blocks": [4, 7], "block_size": [2], "max_num_seqs": [1, 2], "max_num_batched_tokens": [4],
                 "prefill_chunk_size": [2], "prefix_caching": [False, True], "priority_preemption": [True],
                 "async_scheduling": [True]},
        prompts=[[1, 1], [1, 1, 2]], max_tokens=[1, MOST], stops=[None, 0],
        max_requests=2, aborts=True, horizon=3, max_steps=40),
    # memory pressure: three requests whose decodes (20 tokens, a stop token never given, so that an admission
    # estimate may count on an early stop) outgrow the pool together though any two fit
    "pressure": _preset(
        "pressure",
        configs={"num_blocks": [24, 30], "block_size": [2], "max_num_seqs": [3], "max_num_batched_tokens": [8],
                 "prefill_chunk_size": [8], "prefix_caching": [False, True], "priority_preemption": [False]},
        prompts=[[1, 2], [1, 1, 2]], max_tokens=[12, 20], stops=[NEVER],
        max_requests=3, arrivals_per_step=2, horizon=2, max_steps=100),
    # focused presets: three requests, few configs, each explored in minutes on every shipped system
    "prefix": _preset(
        "prefix",
        configs={"num_blocks": [5, 7], "block_size": [2], "max_num_seqs": [2], "max_num_batched_tokens": [5, 6],
                 "prefill_chunk_size": [2], "prefix_caching": [True], "priority_preemption": [True]},
        prompts=[[2, 2, 1], [1, 2, 2, 2, 2, 2], [1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1]], max_tokens=[1, 2],
        priorities=[0, 1], max_requests=3, horizon=5, max_steps=60),
    "burst": _preset(
        "burst",
        configs={"num_blocks": [5, 8], "block_size": [4], "max_num_seqs": [3], "max_num_batched_tokens": [8],
                 "prefill_chunk_size": [4], "prefix_caching": [False, True], "execution": ["mixed"]},
        prompts=[[1], [1, 2, 2, 1], [1, 2, 2, 1, 1]], max_tokens=[1, 3], stops=[None, NEVER],
        max_requests=3, arrivals_per_step=2, horizon=2, max_steps=40),
}


def load_scope(spec: str, spread: int = 0) -> Scope | WorkloadScope:
    """A preset by name, a scope file (`loopcheck/scope@1`), or a workload file
    (`loopcheck/workload@1`: its variants with arrivals shifted by 0..`spread`);
    WorkloadError naming --scope or the field."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.suffix == ".json":
        raise WorkloadError(f"--scope: expected one of {', '.join(PRESETS)} or a scope file (.json), got {spec!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"--scope: cannot read {spec!r}: {exc}") from None
    data = parse_json(text, str(path))
    if isinstance(data, dict) and data.get("schema") == WORKLOAD_SCHEMA:
        return workload_scope(load_workload(path), path.stem, spread)
    return scope_from_json(data, path.stem)
