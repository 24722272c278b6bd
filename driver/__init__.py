"""The one driver loop: steps a system through the protocol, validates what it
returns, and feeds the checks; crashes, hangs and coverage are caught here."""
