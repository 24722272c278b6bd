"""Output equivalence: what a contended run produced equals what the same system
produces for the same workload on an unconstrained config."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loopcheck.checks.base import Check, RunView, Violation
from loopcheck.checks.needs import lifetime_blocks, never_fits
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.events import RequestOutput
from loopcheck.model.workload import Workload
from loopcheck.sut.protocol import Observation


def roomy(n: int) -> int:
    """`n` rounded up to a power of two: as unconstrained as `n`, from a few
    values in all (an adapter that builds state per config, as vLLM's does,
    builds it once per value)."""
    return 1 << max(0, n - 1).bit_length()


def unconstrained(workload: Workload, pinned: dict[str, Any]) -> Config:
    """The workload's config with a pool, slots and a token budget large enough that
    nothing contends (slots and budget rounded up to a power of two: `roomy`), and
    priority preemption off; pinned fields stay."""
    cfg, reqs = workload.config, workload.requests
    fitting = [r for r in reqs if not never_fits(r, cfg)]
    blocks = max(cfg.num_blocks, sum(lifetime_blocks(r, cfg) for r in fitting) + cfg.watermark_blocks + cfg.planes)
    changes: dict[str, Any] = dict(num_blocks=blocks, max_num_seqs=roomy(max(cfg.max_num_seqs, len(reqs))),
                                   max_num_batched_tokens=roomy(max(cfg.max_num_batched_tokens,
                                                                    sum(len(r.prompt) for r in reqs) + len(reqs))),
                                   priority_preemption=False)
    return replace(cfg, **{k: v for k, v in changes.items() if k not in pinned})


class OutputEquivalence(Check):
    """Token IDs, exit depths and finish reasons of every request that was not
    aborted, fits the pool and is not left waiting for a grammar never compiled
    equal those of the same system on the unconstrained
    config (and the exact output bits too, where the system reports them and the
    pool is unchanged). A system that refuses the unconstrained config (raises
    WorkloadError building it, e.g. a pool larger than it supports) or does not
    drain it there leaves nothing to compare with: the check is listed as not
    run for that run (`Driver.skipped`). A crash or hang there is reported as
    itself (its property and place), so it is one bug with the same crash met
    directly."""

    props = ("output-equivalence",)

    def at_end(self, run: RunView, obs: Observation) -> None:
        workload = run.workload()
        if not workload.requests:
            return
        caps = run.caps
        ref_cfg = unconstrained(workload, caps.pinned)
        try:
            ref = run.reference(Workload(ref_cfg, workload.requests), run.default_cap())
        except WorkloadError as exc:
            run.skipped[self.label] = f"the system refuses the unconstrained config: {exc}"
            return
        if ref.violation is not None:   # the system's own crash or hang there: named as where it happened
            self.broke(Violation(ref.violation.prop, f"on the unconstrained config of this workload: {ref.violation}",
                                 where=ref.violation.where, rule=ref.violation.rule))
        if not ref.drained:
            run.skipped[self.label] = "the run on the unconstrained config did not drain (a liveness bug there)"
            return
        want = ref.observation
        same_pool = ref_cfg.num_blocks == run.cfg.num_blocks
        for s in workload.requests:
            if s.abort_at is not None or never_fits(s, run.cfg) or s.ready_at() is None:   # (never ready: no output)
                continue
            got_o, want_o = obs.outputs[s.rid].to_json(), want.outputs[s.rid].to_json()
            if got_o != want_o:
                self.broke(Violation("output-equivalence",
                                     f"{s.rid}: {got_o} differs from the unconstrained run {want_o}", rule="tokens"))
            if caps.fingerprints and same_pool and obs.fingerprints.get(s.rid) != want.fingerprints.get(s.rid):
                self.broke(Violation("output-equivalence", f"{s.rid}: output bits differ from the unconstrained run",
                                     rule="bits"))


class ReportedOutputs(Check):
    """At the end of a run, what the system reports of each request (its
    observation's outputs) is what its events said: the token IDs and exit
    depths of its token events (since a preemption that dropped its tokens) and
    the reason of its finish event."""

    props = ("reported-outputs",)

    def at_end(self, run: RunView, obs: Observation) -> None:
        for rid, r in run.view.requests.items():
            out = obs.outputs.get(rid)
            if out is None:
                continue
            events = RequestOutput(rid, r.token_ids, r.exit_depths, r.finish).to_json()
            if out.to_json() != events:
                self.broke(Violation("reported-outputs", f"{rid}: the system reports {out.to_json()}, its events "
                                                         f"said {events}"))
