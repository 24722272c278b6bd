"""Running a workload on any system to drain or to a step cap, with the result
shape `loopcheck simulate` prints."""

from __future__ import annotations

from loopcheck.checks.base import Violation
from loopcheck.driver.driver import OnStep, run_workload
from loopcheck.model.simulate import SimResult
from loopcheck.model.workload import Workload
from loopcheck.runctl.stop import Deadline
from loopcheck.sut.protocol import SutFactory


def simulate(workload: Workload, factory: SutFactory, max_steps: int, name: str = "model",
             keep_trace: bool = False, on_step: OnStep | None = None, deadline: Deadline | None = None
             ) -> tuple[SimResult, Violation | None, bool]:
    """Run until drained, `max_steps` steps or `deadline` (`on_step` after each
    step); the result, the crash or hang if the system raised or did not return
    (`Driver._call`), and whether the deadline ended the run."""
    run = run_workload(workload, factory, (), max_steps, on_step, deadline=deadline)
    d, obs = run.driver, run.driver.obs
    outputs = {s.rid: obs.outputs[s.rid] for s in d.specs if s.rid in obs.outputs}
    result = SimResult(workload, name, d.counters, outputs, obs.blocks_held, run.drained,
                       d.trace if keep_trace else [], dict(obs.fingerprints))
    return result, run.violation, run.out_of_time


def simulate_model(workload: Workload, max_steps: int, keep_trace: bool = False) -> SimResult:
    """The reference model run (scripted token outcomes)."""
    from loopcheck.sut.model_sut import ModelSUT

    return simulate(workload, ModelSUT, max_steps, "model", keep_trace)[0]


def simulate_engine(workload: Workload, max_steps: int, keep_trace: bool = False,
                    batch_invariant: bool = True) -> SimResult:
    """The torch engine run."""
    from functools import partial

    from loopcheck.adapters.torch_sut import TorchSUT

    return simulate(workload, partial(TorchSUT, batch_invariant=batch_invariant), max_steps, "torch", keep_trace)[0]
