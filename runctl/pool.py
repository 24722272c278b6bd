"""Work spread over worker processes, stopped cleanly: one function called on
each job in a process of its own, results in job order, and on Ctrl-C, SIGTERM
or a failed job every worker stopped before the error is raised."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

STOP_WAIT = 30.0   # seconds a worker sent SIGTERM has to stop before it is killed

Job = TypeVar("Job")
Result = TypeVar("Result")


def in_processes(fn: Callable[[Job], Result], jobs: Sequence[Job], workers: int,
                 done: Callable[[int, Result], None] | None = None, fork: bool = False,
                 kill: bool = False) -> list[Result]:
    """fn(job) for every job on `workers` processes (at most one per job), the
    results in job order; `done(k, result)` hears job k as it finishes. `fork`:
    the workers are forks of this process, inheriting what it has built (else
    the platform's default start). On an interrupt or a failed job, the workers
    are sent SIGTERM, so that they stop at their next safe point and keep their
    files, or with `kill` SIGKILL (for work inside native code, such as z3,
    that no signal interrupts); once every worker has ended, the error is
    raised."""
    context = multiprocessing.get_context("fork") if fork else None
    out: dict[int, Any] = {}
    with ProcessPoolExecutor(min(workers, max(len(jobs), 1)), mp_context=context) as pool:
        pending: dict[Future, int] = {pool.submit(fn, job): k for k, job in enumerate(jobs)}
        try:
            for finished in as_completed(pending):
                k = pending[finished]
                out[k] = finished.result()
                if done is not None:
                    done(k, out[k])
        except BaseException:
            processes = list(getattr(pool, "_processes", {}).values())
            for process in processes:
                process.kill() if kill else process.terminate()
            for process in processes:   # (a worker that does not stop within STOP_WAIT is killed)
                process.join(STOP_WAIT)
                if process.is_alive():
                    process.kill()
                    process.join()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return [out[k] for k in range(len(jobs))]
