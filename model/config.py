"""Scheduler configuration: one frozen value shared by model, engine and proofs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from model.errors import WorkloadError

EXECUTIONS = ("refill", "mixed")
POLICIES = ("unguarded", "guarded")
KV_LAYOUTS = ("shared", "last_exited")
ALLOCATIONS = ("upfront", "incremental")


@dataclass(frozen=True)
class Config:
    """Every knob of the scheduling semantics (see docs/semantics.md).

    `vocab_size` and `model_seed` only describe the engine's tiny LM; the
    reference scheduler ignores them except to validate prompt token IDs.
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
    vocab_size: int = 64
    model_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                     "prefill_chunk_size", "num_loops", "min_loops", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkloadError(f"config.{name}: must be a positive integer, got {value!r}")
        for name in ("watermark_blocks", "max_bypasses", "model_seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise WorkloadError(f"config.{name}: must be a non-negative integer, got {value!r}")
        for name in ("wcpb", "priority_preemption", "prefix_caching", "snapshots"):
            if not isinstance(getattr(self, name), bool):
                raise WorkloadError(f"config.{name}: must be true or false")
        for name, allowed in (("execution", EXECUTIONS), ("preemption_policy", POLICIES),
                              ("kv_layout", KV_LAYOUTS), ("allocation", ALLOCATIONS)):
            if getattr(self, name) not in allowed:
                raise WorkloadError(f"config.{name}: must be one of {', '.join(allowed)}, "
                                    f"got {getattr(self, name)!r}")
        if self.min_loops > self.num_loops:
            raise WorkloadError("config.min_loops: must not exceed num_loops")
        if not isinstance(self.exit_threshold, (int, float)) or not 0 <= self.exit_threshold <= 1:
            raise WorkloadError("config.exit_threshold: must be a number in [0, 1]")
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
