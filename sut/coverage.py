"""Edge coverage of the system's own code: which (line -> next line) steps its
scheduling code took, and how often, while the driver was inside the system's
verbs. Guidance for the fuzzer that needs no model of the system (fuzz/corpus.py).

Measured with `sys.settrace`, only inside calls into the system and only in the
files of the modules its capabilities name (`Capabilities.code`): every other
frame gets no line tracing, and what a frame is is decided once per code object.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

Edge = tuple[str, int, int, int]   # (file, first line of the function, line from, line to)


class EdgeCoverage:
    """Counts the edges executed in files under `paths` while entered (a
    context manager, re-entrant, one thread). `edges` holds the counts since
    the last `reset`."""

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        self.edges: Counter[Edge] = Counter()
        self._own: dict[CodeType, bool] = {}
        self._last: dict[int, int] = {}   # id(frame) -> the line it last ran
        self._depth = 0
        self._outer: Any = None

    def reset(self) -> None:
        self.edges = Counter()
        self._last.clear()

    def _is_own(self, code: CodeType) -> bool:
        own = self._own.get(code)
        if own is None:
            name = code.co_filename
            own = name.startswith(self.paths) or (not name.startswith("<")
                                                  and str(Path(name).resolve()).startswith(self.paths))
            self._own[code] = own
        return own

    def _call(self, frame: FrameType, event: str, arg: object) -> Any:
        if not self._is_own(frame.f_code):
            return None
        self._last[id(frame)] = 0   # (0: the function's entry)
        return self._line

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        key = id(frame)
        if event == "line":
            code, line = frame.f_code, frame.f_lineno
            self.edges[(code.co_filename, code.co_firstlineno, self._last.get(key, 0), line)] += 1
            self._last[key] = line
        elif event == "return":
            self._last.pop(key, None)
        return self._line

    def __enter__(self) -> EdgeCoverage:
        if self._depth == 0:
            self._outer = sys.gettrace()
            sys.settrace(self._call)
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            sys.settrace(self._outer)
            self._outer = None
