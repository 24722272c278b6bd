"""What a check is, and the violation it raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.config import Config
from model.events import Event
from sut.protocol import Capabilities, Observation

if TYPE_CHECKING:
    from sut.driver import Driver


@dataclass
class Violation(AssertionError):
    """A property found broken: its name, what happened, the step that showed it
    (numbered from 0 as arrivals and traces number steps: the step whose inputs,
    events or observation broke the property, the last one run for a check at
    the end of a run), and for a livelock the cycle (first step and length)."""

    prop: str
    message: str
    cycle: dict[str, int] | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = f" (step {self.step})" if self.step is not None else ""
        return f"{self.prop}{where}: {self.message}"


class Check:
    """One property, fed by the driver. Subclasses override the hooks they need and
    raise Violation when the property breaks."""

    name = "check"
    props: tuple[str, ...] = ()   # the properties its violations name

    def unavailable(self, caps: Capabilities, cfg: Config) -> str | None:
        """Why this check cannot run on a SUT with these capabilities (None: it runs)."""
        return None

    def on_input(self, driver: Driver, kind: str, rid: str) -> None:
        """At step driver.t a request was submitted (kind "add"; driver.view holds it)
        or aborted (kind "abort")."""

    def after_step(self, driver: Driver, events: list[Event], obs: Observation) -> None:
        """One step ran; `events` are its events, `obs` the observation after it."""

    def step_cap(self, driver: Driver) -> int | None:
        """The step by which a run must have drained (None: no opinion)."""
        return None

    def at_end(self, driver: Driver, obs: Observation) -> None:
        """The run drained; `obs` is the last observation."""
