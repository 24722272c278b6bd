"""Hypothesis strategies, the lockstep state machine, campaigns."""
