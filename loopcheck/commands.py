"""The registry of subcommands: name -> (argument registration, handler)."""

from __future__ import annotations

from loopcheck import prove_cmd, simulate_cmd

REGISTRY = {
    "simulate": (simulate_cmd.register, simulate_cmd.run),
    "prove": (prove_cmd.register, prove_cmd.run),
}
