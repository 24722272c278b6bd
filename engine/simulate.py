"""Running a workload file on the engine, with the model's result shape."""

from __future__ import annotations

from engine.llm_engine import LLMEngine
from model.events import Event
from model.simulate import SimResult
from model.workload import Workload, submit_due


def drive(engine: LLMEngine, workload: Workload) -> list[Event]:
    """One engine step with the workload's arrivals and aborts for that step."""
    submit_due(workload.requests, engine.step_count, engine.add_request, engine.abort_request)
    return engine.step()


def simulate_engine(workload: Workload, max_steps: int, keep_trace: bool = False,
                    batch_invariant: bool = True) -> SimResult:
    """Run the workload on a fresh engine until drained or `max_steps` steps."""
    engine = LLMEngine(workload.config, batch_invariant)
    last_arrival = max((r.arrival for r in workload.requests), default=0)
    trace = []
    while engine.step_count < max_steps:
        events = drive(engine, workload)
        if keep_trace:
            trace.append(events)
        if engine.step_count > last_arrival and not engine.has_unfinished():
            break
    drained = engine.step_count > last_arrival and not engine.has_unfinished()
    return SimResult(workload, "torch", engine.counters, engine.outputs(), engine.blocks_held(),
                     drained, trace, engine.fingerprints())
