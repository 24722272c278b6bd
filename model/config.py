"""Scheduler configuration: one frozen value shared by model, engine and proofs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from loopcheck.model.errors import WorkloadError

EXECUTIONS = ("refill", "mixed")
POLICIES = ("unguarded", "guarded")
KV_LAYOUTS = ("shared", "last_exited")
ALLOCATIONS = ("upfront", "incremental")
PAUSES = ("off", "new", "all")


MAX_SIZE = 2**20   # any size beyond this is a typo, and would exhaust memory somewhere
MAX_SPEC_TOKENS = 8   # spec_tokens: at most
MAX_PAUSE_STEPS = 64  # pause_steps: at most


def _check_int(name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise WorkloadError(f"config.{name}: must be an integer, got {json.dumps(value)}")
    if not minimum <= value <= MAX_SIZE:
        raise WorkloadError(f"config.{name}: must be in [{minimum}, {MAX_SIZE}], got {value}")


@dataclass(frozen=True)
class Config:
    """Every knob of the scheduling semantics (see docs/semantics.md).

    `vocab_size` and `model_seed` only describe the engine's tiny LM; the
    reference scheduler ignores them except to validate prompt token IDs.
    `max_loras`: the most LoRA adapters one step's batch may use, for engines
    that serve LoRA adapters (the "lora" feature, `model.workload.FEATURES`); the
    reference scheduler serves none. `spec_tokens`: the draft tokens proposed for
    each decoding request a step, for engines with speculative decoding (the
    "spec" feature; 0: none), each verified in the next step's batch.
    `pause`, `pause_at`, `pause_steps`: for engines an operator can pause (the
    "pause" feature), the engine is paused from step `pause_at` for
    `pause_steps` steps, "new" (requests running or holding KV blocks go on,
    no other is scheduled) or "all" (nothing is scheduled); "off": never.
    `async_scheduling`: for engines that schedule a step's batch before the
    previous batch's outputs are known (the "async_scheduling" feature): a step reports
    the previous batch's tokens, after its own scheduling (docs/semantics.md).
    """

    num_blocks: int = 40
    block_size: int = 2
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 6
    prefill_chunk_size: int = 4
    num_loops: int = 4
    min_loops: int = 1
    exit_threshold: float = 0.5
    watermark_blocks: int = 0
    execution: str = "mixed"
    wcpb: bool = True
    priority_preemption: bool = True
    preemption_policy: str = "guarded"
    prefix_caching: bool = False
    kv_layout: str = "last_exited"
    allocation: str = "upfront"
    snapshots: bool = True
    max_bypasses: int = 4
    resume_watermark: bool = True
    vocab_size: int = 64
    model_seed: int = 0
    max_loras: int = 1
    spec_tokens: int = 0
    pause: str = "off"
    pause_at: int = 0
    pause_steps: int = 1
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                     "prefill_chunk_size", "num_loops", "min_loops", "vocab_size", "max_loras"):
            _check_int(name, getattr(self, name), 1)
        for name in ("watermark_blocks", "max_bypasses", "model_seed", "pause_at"):
            _check_int(name, getattr(self, name), 0)
        _check_int("spec_tokens", self.spec_tokens, 0)
        if self.spec_tokens > MAX_SPEC_TOKENS:
            raise WorkloadError(f"config.spec_tokens: must be in [0, {MAX_SPEC_TOKENS}], got {self.spec_tokens}")
        _check_int("pause_steps", self.pause_steps, 1)
        if self.pause_steps > MAX_PAUSE_STEPS:
            raise WorkloadError(f"config.pause_steps: must be in [1, {MAX_PAUSE_STEPS}], got {self.pause_steps}")
        for name in ("wcpb", "priority_preemption", "prefix_caching", "snapshots", "resume_watermark",
                     "async_scheduling"):
            if not isinstance(getattr(self, name), bool):
                raise WorkloadError(f"config.{name}: must be true or false, got {json.dumps(getattr(self, name))}")
        for name, allowed in (("execution", EXECUTIONS), ("preemption_policy", POLICIES),
                              ("kv_layout", KV_LAYOUTS), ("allocation", ALLOCATIONS), ("pause", PAUSES)):
            if getattr(self, name) not in allowed:
                raise WorkloadError(f"config.{name}: must be one of {', '.join(allowed)}, "
                                    f"got {getattr(self, name)!r}")
        if self.min_loops > self.num_loops:
            raise WorkloadError("config.min_loops: must not exceed num_loops")
        threshold = self.exit_threshold
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
            raise WorkloadError(f"config.exit_threshold: must be a number in [0, 1], got {json.dumps(threshold)}")
        if self.watermark_blocks >= self.num_blocks:
            raise WorkloadError("config.watermark_blocks: must be smaller than num_blocks")
        if self.planes > self.num_blocks:
            raise WorkloadError("config.num_blocks: smaller than one page "
                                f"({self.planes} blocks under kv_layout={self.kv_layout})")

    @property
    def planes(self) -> int:
        """Blocks one page costs: one KV plane per depth under last_exited, else one."""
        return self.num_loops if self.kv_layout == "last_exited" else 1

    @property
    def max_positions(self) -> int:
        """Most token positions one request can ever hold (the whole pool)."""
        return (self.num_blocks // self.planes) * self.block_size

    def paused(self, step: int) -> str | None:
        """How the engine is paused in step `step` ("new" or "all"), or None."""
        return self.pause if self.pause != "off" and self.pause_at <= step < self.pause_end else None

    @property
    def pause_end(self) -> int:
        """The first step after the pause (0 without one): the operator's resume,
        an input the run waits for."""
        return self.pause_at + self.pause_steps if self.pause != "off" else 0

    def load_known(self, ends_at: int) -> int:
        """The earliest step from which a system may know that a KV load ending
        at step `ends_at` has ended: then, or under async scheduling, whose
        system learns of it with the output of the batch of the load's last
        step, taken a step later, the step after."""
        return ends_at + 1 if self.async_scheduling else ends_at

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Config:
        """Build from a JSON object; unknown keys and bad values raise WorkloadError."""
        if not isinstance(data, dict):
            raise WorkloadError("config: must be a JSON object")
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise WorkloadError(f"config.{key}: unknown config key")
        return cls(**data)


def regression_config(**changes: Any) -> Config:
    """The built-in default: the regression's config (40 blocks of size 2, 4 depths
    under last_exited, max_num_seqs=4, max_num_batched_tokens=6,
    prefill_chunk_size=4, priority preemption, WCPB, snapshots) with a watermark of
    8 blocks, guarded unless changed."""
    return Config(**{**Config(watermark_blocks=8).to_json(), **changes})
