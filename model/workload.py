"""Requests and workloads, with JSON load/save under schema `loopcheck/workload@1`."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from loopcheck.model.config import MAX_SPEC_TOKENS, Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.record import check_record

SCHEMA = "loopcheck/workload@1"


@dataclass(frozen=True)
class RequestSpec:
    """One request as submitted.

    Priority: lower number is more urgent; ties by arrival, then id.
    `max_tokens` 0: a prompt-only request (its prompt is computed, it finishes
    with `length` and no token).
    `abort_at` aborts the request at the start of that step. `script_tokens` and
    `script_exit_depths` only drive the reference model's environment (the
    engine's LM decides for itself); both are cycled when shorter than needed.
    The deployment features (`features`; a system runs only those its
    capabilities claim): `lora`, the LoRA adapter it is served with (0: the
    base model); `grammar_ready`, for a request with structured output, the
    steps after its arrival at which its grammar is compiled and it may be
    scheduled (NEVER: the grammar is never ready; None: no structured output);
    `kv_load_steps`, for a request whose prompt's KV is in an external store
    (a KV connector: another instance's prefill, an offload tier), the steps
    its load takes once the system starts it (None: nothing to load), and
    `kv_load_fails`, that load fails when it ends (nothing of it is valid);
    `spec_accepts`, under speculative decoding (`Config.spec_tokens`), how many
    of the draft tokens proposed for it each step are right, cycled (empty:
    none is).
    """

    rid: str
    prompt: tuple[int, ...]
    max_tokens: int
    arrival: int = 0
    priority: int = 0
    stop_token: int | None = None
    abort_at: int | None = None
    script_tokens: tuple[int, ...] = ()
    script_exit_depths: tuple[int, ...] = ()
    lora: int = 0
    grammar_ready: int | None = None
    kv_load_steps: int | None = None
    kv_load_fails: bool = False
    spec_accepts: tuple[int, ...] = ()

    @property
    def features(self) -> frozenset[str]:
        """The deployment features this request uses (names of `FEATURES`)."""
        return frozenset(name for name, used in (("lora", self.lora != 0), ("grammar", self.grammar_ready is not None),
                                                  ("kv_transfer", self.kv_load_steps is not None),
                                                  ("spec", bool(self.spec_accepts))) if used)

    def ready_at(self) -> int | None:
        """The step from which it may be scheduled, by its own inputs (its
        grammar compiled); None: never."""
        if self.grammar_ready == NEVER:
            return None
        return self.arrival + (self.grammar_ready or 0)

    def submitted_at(self, step: int) -> RequestSpec:
        """This request as submitted to a live system at `step`: it arrives then, and
        any abort is the submitter's own later input."""
        return self if self.arrival == step and self.abort_at is None else replace(self, arrival=step, abort_at=None)

    @cached_property
    def key(self) -> tuple[int, int, str]:
        """Priority order: smaller key is more urgent (computed once: schedulers
        compare keys many times per step)."""
        return (self.priority, self.arrival, self.rid)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.rid, "prompt": list(self.prompt),
                               "max_tokens": self.max_tokens, "arrival": self.arrival,
                               "priority": self.priority}
        if self.stop_token is not None:
            out["stop_token"] = self.stop_token
        if self.abort_at is not None:
            out["abort_at"] = self.abort_at
        if self.script_tokens:
            out["script_tokens"] = list(self.script_tokens)
        if self.script_exit_depths:
            out["script_exit_depths"] = list(self.script_exit_depths)
        if self.lora:
            out["lora"] = self.lora
        if self.grammar_ready is not None:
            out["grammar_ready"] = self.grammar_ready
        if self.kv_load_steps is not None:
            out["kv_load_steps"] = self.kv_load_steps
        if self.kv_load_fails:
            out["kv_load_fails"] = True
        if self.spec_accepts:
            out["spec_accepts"] = list(self.spec_accepts)
        return out


_REQUEST_KEYS = {"id", "prompt", "max_tokens", "arrival", "priority", "stop_token",
                 "abort_at", "script_tokens", "script_exit_depths", "lora", "grammar_ready",
                 "kv_load_steps", "kv_load_fails", "spec_accepts"}
# the deployment features a system may run: those a request may use (`RequestSpec.features`), "pause", an
# operator pausing the engine (the config's `pause` fields), and "async_scheduling", asynchronous scheduling
# (the config's field of that name)
FEATURES = ("lora", "grammar", "kv_transfer", "spec", "pause", "async_scheduling")
NEVER = -1                       # `grammar_ready`: the grammar is never compiled


MAX_STEP = 10**6        # arrival and abort steps: beyond, every run would be that long
MAX_LOAD_STEPS = 64     # kv_load_steps: at most
MAX_VALUE = 2**31 - 1


def _int(where: str, value: Any, minimum: int | None = None, maximum: int = MAX_VALUE) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkloadError(f"{where}: must be an integer, got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise WorkloadError(f"{where}: must be >= {minimum}, got {value}")
    if value > maximum:
        raise WorkloadError(f"{where}: must be <= {maximum}, got {value}")
    return value


def _int_list(where: str, value: Any, low: int, high: int) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise WorkloadError(f"{where}: must be a list of integers")
    out = tuple(_int(f"{where}[{i}]", v, low) for i, v in enumerate(value))
    for i, v in enumerate(out):
        if v > high:
            raise WorkloadError(f"{where}[{i}]: must be <= {high}, got {v}")
    return out



def check_keys(where: str, data: dict, known: Collection[str], required: Iterable[str], what: str) -> None:
    """Every key of the JSON object `data` is known and every required one is
    there; WorkloadError naming `where.KEY` otherwise."""
    for key in data:
        if key not in known:
            raise WorkloadError(f"{where}.{key}: unknown {what} key (known: {', '.join(sorted(known))})")
    for key in required:
        if key not in data:
            raise WorkloadError(f"{where}.{key}: missing")


def request_from_json(data: Any, index: int, config: Config) -> RequestSpec:
    """Validate one request object; raise WorkloadError naming the field."""
    where = f"requests[{index}]"
    if not isinstance(data, dict):
        raise WorkloadError(f"{where}: must be a JSON object")
    check_keys(where, data, _REQUEST_KEYS, ("id", "prompt", "max_tokens"), "request")
    rid = data["id"]
    if not isinstance(rid, str) or not rid:
        raise WorkloadError(f"{where}.id: must be a non-empty string")
    prompt = _int_list(f"{where}.prompt", data["prompt"], 0, config.vocab_size - 1)
    if not prompt:
        raise WorkloadError(f"{where}.prompt: must not be empty")
    stop = data.get("stop_token")
    if stop is not None and _int(f"{where}.stop_token", stop, 0) >= config.vocab_size:
        raise WorkloadError(f"{where}.stop_token: must be < vocab_size ({config.vocab_size}), got {stop}")
    abort_at = data.get("abort_at")
    arrival = _int(f"{where}.arrival", data.get("arrival", 0), 0, MAX_STEP)
    if abort_at is not None and _int(f"{where}.abort_at", abort_at, 0, MAX_STEP) < arrival:
        raise WorkloadError(f"{where}.abort_at: must be >= arrival ({arrival}), got {abort_at}")
    load_steps = data.get("kv_load_steps")
    if load_steps is not None:
        _int(f"{where}.kv_load_steps", load_steps, 1, MAX_LOAD_STEPS)
    load_fails = data.get("kv_load_fails", False)
    if not isinstance(load_fails, bool):
        raise WorkloadError(f"{where}.kv_load_fails: must be true or false, got {json.dumps(load_fails)}")
    if load_fails and load_steps is None:
        raise WorkloadError(f"{where}.kv_load_fails: needs kv_load_steps (a load that fails is one that starts)")
    return RequestSpec(
        rid=rid,
        prompt=prompt,
        max_tokens=_int(f"{where}.max_tokens", data["max_tokens"], 0, 2**20),
        arrival=arrival,
        priority=_int(f"{where}.priority", data.get("priority", 0), -MAX_VALUE),
        stop_token=None if stop is None else _int(f"{where}.stop_token", stop, 0),
        abort_at=abort_at,
        script_tokens=_int_list(f"{where}.script_tokens", data.get("script_tokens", []),
                                0, config.vocab_size - 1),
        script_exit_depths=_int_list(f"{where}.script_exit_depths",
                                     data.get("script_exit_depths", []),
                                     config.min_loops, config.num_loops),
        lora=_int(f"{where}.lora", data.get("lora", 0), 0),
        grammar_ready=None if data.get("grammar_ready") is None
        else _int(f"{where}.grammar_ready", data["grammar_ready"], NEVER, MAX_STEP),
        kv_load_steps=load_steps,
        kv_load_fails=load_fails,
        spec_accepts=_int_list(f"{where}.spec_accepts", data.get("spec_accepts", []), 0, MAX_SPEC_TOKENS),
    )


@dataclass(frozen=True)
class Workload:
    """A config plus requests; `extra` carries counterexample fields verbatim."""

    config: Config
    requests: tuple[RequestSpec, ...]
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if len({req.rid for req in self.requests}) == len(self.requests):
            return
        seen: set[str] = set()
        for i, req in enumerate(self.requests):
            if req.rid in seen:
                raise WorkloadError(f"requests[{i}].id: duplicate request id {req.rid!r}")
            seen.add(req.rid)

    def by_id(self, rid: str) -> RequestSpec:
        """The request with this id (KeyError: none)."""
        try:
            return self._by_id[rid]
        except KeyError:
            raise KeyError(rid) from None

    @cached_property
    def _by_id(self) -> dict[str, RequestSpec]:
        return {req.rid: req for req in self.requests}

    @cached_property
    def aborts_by_step(self) -> dict[int, frozenset[str]]:
        """Per step that aborts any request, the ids of those it aborts."""
        steps: dict[int, set[str]] = {}
        for req in self.requests:
            if req.abort_at is not None:
                steps.setdefault(req.abort_at, set()).add(req.rid)
        return {t: frozenset(rids) for t, rids in steps.items()}

    def to_json(self) -> dict[str, Any]:
        out = {"schema": SCHEMA, "config": self.config.to_json(),
               "requests": [r.to_json() for r in self.requests]}
        out.update(self.extra)
        return out

    def with_config(self, **changes: Any) -> Workload:
        data = self.config.to_json()
        data.update(changes)
        return Workload(Config(**data), self.requests, dict(self.extra))


class InputSchedule:
    """A recorded workload's inputs by step: how it is replayed on an engine. At
    each step, the requests that arrive then, then the aborts due then, each in
    workload order."""

    def __init__(self, requests: tuple[RequestSpec, ...] | list[RequestSpec]) -> None:
        self.arrivals: dict[int, list[RequestSpec]] = {}
        self.aborts: dict[int, list[str]] = {}
        for spec in requests:
            self.arrivals.setdefault(spec.arrival, []).append(spec)
            if spec.abort_at is not None:
                self.aborts.setdefault(spec.abort_at, []).append(spec.rid)

    def submit_due(self, t: int, add: Callable[[RequestSpec], object], abort: Callable[[str], object]) -> None:
        """Hand a driver the inputs of step t."""
        for spec in self.arrivals.get(t, ()):
            add(spec)
        for rid in self.aborts.get(t, ()):
            abort(rid)


def workload_from_json(data: Any) -> Workload:
    """Validate a parsed JSON document (a counterexample's record too:
    model/record.py); raise WorkloadError naming the field."""
    if not isinstance(data, dict):
        raise WorkloadError("document: must be a JSON object")
    if data.get("schema") != SCHEMA:
        raise WorkloadError(f"schema: expected {SCHEMA!r}, got {data.get('schema')!r}")
    if "config" not in data:
        raise WorkloadError("config: missing")
    if not isinstance(data.get("requests"), list):
        raise WorkloadError("requests: must be a list")
    config = Config.from_json(data["config"])
    requests = tuple(request_from_json(r, i, config) for i, r in enumerate(data["requests"]))
    extra = {k: v for k, v in data.items() if k not in ("schema", "config", "requests")}
    check_record(extra, {r.rid: r.arrival for r in requests})
    return Workload(config, requests, extra)


MAX_FILE_BYTES = 64 * 2**20


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise WorkloadError(f"key {k!r}: appears twice in one JSON object")
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise WorkloadError(f"{name}: not a JSON number")


def parse_json(text: str, where: str) -> Any:
    """Strict JSON: no duplicate keys, no NaN or Infinity, bounded nesting."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    except RecursionError as exc:
        raise WorkloadError(f"{where}: JSON nested too deeply") from exc


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload or counterexample file (a regular file of UTF-8
    JSON, at most 64 MiB)."""
    target = Path(path)
    try:
        if not target.is_file():
            raise WorkloadError(f"{path}: {'no such file' if not target.exists() else 'not a regular file'}")
        if target.stat().st_size > MAX_FILE_BYTES:
            raise WorkloadError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB")
        text = target.read_bytes().decode("utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read file ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    return workload_from_json(parse_json(text, str(path)))


def save_workload(workload: Workload, path: str | Path) -> None:
    Path(path).write_text(json.dumps(workload.to_json(), indent=1) + "\n")
