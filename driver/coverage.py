"""Edge coverage of the system's own code: which arcs (a line to the next line
run, a function's entry and exit) its scheduling code took while the driver was
inside the system's verbs. Guidance for the fuzzer that needs no model of the
system (fuzz/corpus.py).

Measured with coverage.py's C tracer (`coverage.tracer.CTracer`, what `coverage
run --branch` runs on), only inside calls into the system and only in the files
of the modules its capabilities name: it decides once per file whether to trace
it and records an arc in C. A Python trace function costs about 2.5 times as
much per run of vLLM's scheduler (`python -m benchmarks.guidance`). An arc is
recorded once per run, without a hit count.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from pathlib import Path
from types import FrameType
from typing import Any

from coverage.tracer import CFileDisposition, CTracer

Edge = tuple[str, Hashable]   # (file, an arc as the tracer records it: its two lines packed in one number)


class EdgeCoverage:
    """The edges executed in files under `paths` while entered (a context
    manager, re-entrant, one thread). `edges` holds those since the last
    `reset`."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        self._arcs: dict[str, Any] = {}   # file -> the arcs taken in it (the tracer's own record)
        self._tracer = CTracer()
        # its settings, as coverage's own collector gives them (coverage/collector.py, `_start_tracer`): arcs,
        # no plugins, no contexts, one thread; a setting left unset crashes the tracer
        for name, value in dict(data=self._arcs, trace_arcs=True, should_trace=self._disposition,
                                should_trace_cache={}, warn=lambda *args, **kwargs: None,
                                lock_data=lambda: None, unlock_data=lambda: None, file_tracers={},
                                concur_id_func=None, check_include=None, should_start_context=None,
                                switch_context=None, disable_plugin=None).items():
            setattr(self._tracer, name, value)
        self._depth = 0
        self._outer: Any = None

    @property
    def edges(self) -> set[Edge]:
        return {(name, arc) for name, arcs in self._arcs.items() for arc in arcs}

    def reset(self) -> None:
        self._arcs.clear()

    def _is_own(self, name: str) -> bool:
        return name.startswith(self.paths) or (not name.startswith("<")
                                               and str(Path(name).resolve()).startswith(self.paths))

    def _disposition(self, name: str, frame: FrameType) -> CFileDisposition:
        """What the tracer asks once per file: trace it (the system's own) or not."""
        disposition = CFileDisposition()
        disposition.original_filename = disposition.canonical_filename = disposition.source_filename = name
        disposition.trace = self._is_own(name)
        disposition.reason = ""
        disposition.file_tracer = None
        disposition.has_dynamic_filename = False
        return disposition

    def __enter__(self) -> EdgeCoverage:
        if self._depth == 0:
            self._outer = sys.gettrace()
            self._tracer.start()
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._tracer.stop()
            sys.settrace(self._outer)
            self._outer = None
