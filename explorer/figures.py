"""The figures exploring establishes, of one variant or of a whole family."""

from __future__ import annotations

from dataclasses import dataclass

from loopcheck.explorer.liveness import Liveness


@dataclass
class Survey:
    """What exploring a family (or one variant) established: figures over all
    its variants."""

    states: int
    transitions: int
    depth: int
    drained: int
    complete: bool
    liveness: Liveness
    collision_probability: float   # that a fingerprint collision merged two states (upper estimate)
    explored: int   # states of variants surveyed; the others' figures were derived (`survey.translated`)
