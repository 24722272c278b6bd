"""Progress lines on long runs: when one is due."""

import time


class Ticker:
    """Says when a progress line is due: about every `seconds` of wall time (a
    progress line is for the person waiting; nothing decided depends on it)."""

    def __init__(self, seconds: float = 2.0) -> None:
        self.start = self.last = time.perf_counter()
        self.seconds = seconds

    def due(self) -> bool:
        """True at most once per `seconds`, when that long has passed."""
        now = time.perf_counter()
        if now - self.last < self.seconds:
            return False
        self.last = now
        return True

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start
