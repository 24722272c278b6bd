"""Draws that depend on the seed alone, not on what the process imported.

Hypothesis (6.155, pinned in constraints.txt) sometimes draws a constant it parsed
from the source of every *local* module in `sys.modules` (a module outside
site-packages and the standard library: loopcheck itself when installed editable,
a user's adapter, whatever a test imported first). So the same seed gave other
examples in a process that had imported one module more, and in an editable install
than in a regular one. Within `no_local_constants()` that pool is empty: Hypothesis
still draws its own fixed constants, and the examples of a seed are the same in any
process. Outside it Hypothesis is untouched (a user's own tests keep their draws).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis.internal.conjecture import providers


@contextmanager
def no_local_constants() -> Iterator[None]:
    """Within: Hypothesis draws no constant from local modules' source. Its cache
    of permitted constants is emptied on entry and exit, so no pool drawn before
    leaks in or out. Re-entrant."""
    scan = getattr(providers, "_get_local_constants", None)
    if scan is None:   # a Hypothesis without local constants: nothing to fix
        yield
        return
    empty = type(providers.GLOBAL_CONSTANTS)()
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = scan
        providers.CONSTANTS_CACHE.cache.clear()
