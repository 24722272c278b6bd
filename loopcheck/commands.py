"""The registry of subcommands: name -> (argument registration, handler)."""

from __future__ import annotations

from loopcheck import explore_cmd, prove_cmd, replay_cmd, simulate_cmd

REGISTRY = {
    "simulate": (simulate_cmd.register, simulate_cmd.run),
    "prove": (prove_cmd.register, prove_cmd.run),
    "explore": (explore_cmd.register, explore_cmd.run),
    "replay": (replay_cmd.register, replay_cmd.run),
}
