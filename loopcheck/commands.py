"""The registry of subcommands: name -> (argument registration, handler)."""

from __future__ import annotations

from loopcheck import adapter_cmds, explore_cmd, fuzz_cmd, prove_cmd, replay_cmd, scoped_cmd, simulate_cmd, verify_cmd

REGISTRY = {
    "verify": (verify_cmd.register, verify_cmd.run),
    "simulate": (simulate_cmd.register, simulate_cmd.run),
    "prove": (prove_cmd.register, prove_cmd.run),
    "explore": (explore_cmd.register, explore_cmd.run),
    "combine": (scoped_cmd.register_combine, scoped_cmd.run_combine),
    "replay": (replay_cmd.register, replay_cmd.run),
    "fuzz": (fuzz_cmd.register, fuzz_cmd.run),
    "new-adapter": (adapter_cmds.register_new, adapter_cmds.run_new),
    "check-adapter": (adapter_cmds.register_check, adapter_cmds.run_check),
}
