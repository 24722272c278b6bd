"""A deterministic stand-in for the thread pool an engine compiles grammars
in: each job finishes at the step the workload names, or never. Shared by the
vLLM and SGLang adapters (adapters/vllm_grammar.py, adapters/sglang_grammar.py)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class StepExecutor:
    """Stands in for a grammar thread pool: a job submitted while `due` is a
    step runs, in submission order, when `run_due` reaches that step; one
    submitted while `due` is None never runs (a grammar never compiled). Each
    job keeps the `label` set when it was submitted (the request it is for),
    so that `pending` can say what is still to come."""

    def __init__(self) -> None:
        self.due: int | None = None
        self.label = ""
        self.jobs: list[tuple[str, int | None, Future, Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self.jobs.append((self.label, self.due, future, fn, args))
        return future

    def run_due(self, step: int) -> None:
        """Run every job due at or before `step`, its result (or exception) set on
        its future; a job whose future was cancelled is dropped unrun, as a
        thread pool drops it."""
        later = []
        for job in self.jobs:
            _, due, future, fn, args = job
            if future.cancelled():
                continue
            if due is None or due > step:
                later.append(job)
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except Exception as exc:   # (the engine fails only that request, as with a thread pool)
                future.set_exception(exc)
        self.jobs = later

    def pending(self, step: int) -> tuple[tuple[str, int | None], ...]:
        """The jobs not run yet, by label: (label, steps from `step` until it is
        due; None: never), sorted (a part of a state key)."""
        return tuple(sorted(((label, None if due is None else due - step) for label, due, *_ in self.jobs),
                            key=lambda pair: pair[0]))
