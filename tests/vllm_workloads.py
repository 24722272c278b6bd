"""Workloads the vLLM feature tests share: a config vLLM's adapter runs."""

from __future__ import annotations

from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload


def vllm_workload(*requests: RequestSpec, **fields: object) -> Workload:
    """The requests on a config of these fields, with the plain-engine profile
    and the fields the vLLM adapter pins (importing the adapter, not vLLM)."""
    from loopcheck.adapters.vllm_sut import PINNED
    from loopcheck.sut.protocol import PLAIN_ENGINE

    return Workload(Config(**{**Config().to_json(), **PLAIN_ENGINE, **PINNED, **fields}), requests)
