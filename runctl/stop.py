"""Stopping a run cleanly: a signal becomes a request to stop, raised at the
next safe point, with the shell's exit code."""

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so that
    long runs stop the same clean way (exit 143 instead of 130)."""


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's exit code for a run stopped by this interrupt."""
    return 143 if isinstance(interrupt, Terminated) else 130


class StopRequest:
    """A stop asked for by a signal (Ctrl-C, SIGTERM). Outside `deferred()` the
    handler raises the interrupt at once; inside, it only records it, and the code
    raises it at its next safe point (`check`), so that no library is interrupted
    halfway through its own bookkeeping. A second signal while a stop is pending
    raises at once: the way out when no safe point comes (`clear` forgets the
    stop once it was handled)."""

    pending: KeyboardInterrupt | None = None
    _deferring = 0

    @classmethod
    def request(cls, interrupt: KeyboardInterrupt) -> None:
        again = cls.pending is not None
        cls.pending = interrupt
        if not cls._deferring or again:
            raise interrupt

    @classmethod
    def clear(cls) -> None:
        cls.pending = None

    @classmethod
    def check(cls) -> None:
        if cls.pending is not None:
            raise cls.pending

    @classmethod
    @contextmanager
    def deferred(cls) -> Iterator[None]:
        cls._deferring += 1
        try:
            yield
        finally:
            cls._deferring -= 1


class OutOfTime(Exception):
    """A run's wall-clock bound (`--max-seconds`) passed: raised by the driver
    between two steps or, cutting it short, inside a call into the system
    (`Deadline`), it ends the run there, neither drained nor failed
    (`driver.run_workload`'s `Run.out_of_time`)."""


class Deadline:
    """A run's wall-clock bound from now (None: never), on `time.monotonic()`,
    the same clock in every process of the machine (a deadline handed to worker
    processes is theirs too): `left` is how many seconds remain, `over` whether
    none do, `check` raises OutOfTime once none do."""

    def __init__(self, seconds: float | None) -> None:
        self.until = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.until is None else self.until - time.monotonic()

    def over(self) -> bool:
        return self.until is not None and time.monotonic() >= self.until

    def check(self) -> None:
        if self.over():
            raise OutOfTime
