"""What a fuzz campaign and each of its examples run with: frozen before the run
starts, passed whole (no class attributes set at run time, no long parameter lists)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopcheck.adapters.torch_sut import TorchSUT
from loopcheck.checks.suite import CheckSet
from loopcheck.fuzz.share import Share
from loopcheck.fuzz.strategies import DEFAULT_SHAPE, Shape
from loopcheck.sut.protocol import SutFactory

LOCKSTEP = CheckSet("lockstep")


@dataclass(frozen=True)
class MachineSettings:
    """One example of the fuzz state machine: the system and its checks, where a
    failure is written (None: nowhere) and named from (`source`), and the workload
    shape: prompts of up to `max_prompt` tokens sharing prefixes drawn
    `prefix_scale` times their usual length, up to `max_tokens` tokens each."""

    factory: SutFactory = TorchSUT
    checks: CheckSet = LOCKSTEP
    out_dir: Path | None = None
    source: str = "loopcheck fuzz"
    shape: Shape = DEFAULT_SHAPE
    max_prompt: int = 6
    max_tokens: int = 5
    prefix_scale: int = 1


@dataclass(frozen=True)
class CampaignSettings:
    """One campaign (`fuzz.campaign.run_campaign`): the preemption `policy`, the
    wall-clock budget, the seed, the output folder; `mode` "regression" (the
    regression config) or "random" (drawn configs); `db` the example database
    (a folder or redis:// URL; None: under `out`); the system and its checks;
    the workload shape; examples per seeded batch; `max_replays` (shrinking's
    exact work bound, for byte-identical files); `fixed` config fields pinned
    beyond those the system pins; `keep_going` (every distinct bug, not the
    first); `max_examples` (a work bound on the search); `guidance` (one of
    fuzz.campaign.GUIDANCE; None: the default for the system); `share` what
    the run's campaigns on other machines share with this one (fuzz/share.py;
    its example database then replaces `db`)."""

    policy: str
    budget_seconds: float
    seed: int
    out: Path
    mode: str = "regression"
    db: str | None = None
    factory: SutFactory = TorchSUT
    checks: CheckSet = LOCKSTEP
    shape: Shape = DEFAULT_SHAPE
    batch_examples: int = 20
    max_replays: int | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    keep_going: bool = False
    max_examples: int | None = None
    guidance: str | None = None
    share: Share | None = None
