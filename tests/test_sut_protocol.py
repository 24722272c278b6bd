"""The SUT protocol: a system that breaks it gets one error line naming the rule
(exit 2), never a traceback and never a reported scheduling bug; an exception
inside a system is a `crash` violation with a counterexample."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopcheck.checks.suite import checks_for
from loopcheck.cli import main
from loopcheck.driver.driver import run_workload
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload, load_workload
from loopcheck.sut.protocol import ProtocolError
from tests.broken_adapters import (
    GenericWrongArity,
    NegativeBlocksHeld,
    NoneStep,
    OddFinish,
    PlainOutputs,
    PreemptedByStranger,
    StrangerOutputs,
    StrangerTables,
    TextBlocksHeld,
    TextTokenIndex,
    TextUnfinished,
    TupleTables,
    TupleTokens,
    UnhashableKey,
    UnknownKind,
    UnknownRequest,
)

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "livelock_min.json")
BROKEN = str(Path(__file__).parent / "broken_adapters.py")


@pytest.mark.parametrize("adapter,rule", [(NoneStep, "step returns a list of events"),
                                          (UnknownKind, "event kinds"),
                                          (UnknownRequest, "events name submitted requests"),
                                          (GenericWrongArity, "event fields"),
                                          (TextTokenIndex, "event field types"),
                                          (UnhashableKey, "state_key is hashable"),
                                          (TextBlocksHeld, "blocks_held is an int"),
                                          (StrangerOutputs, "outputs name submitted requests"),
                                          (PlainOutputs, "outputs maps request ids to RequestOutput"),
                                          (TupleTokens, "outputs hold lists of int token ids and exit depths "
                                                        "and a finish reason"),
                                          (OddFinish, "outputs hold lists of int token ids and exit depths "
                                                      "and a finish reason"),
                                          (TextUnfinished, "unfinished is a bool"),
                                          (TupleTables, "block_tables maps request ids to lists of pages, each a "
                                                        "list of int block ids"),
                                          (StrangerTables, "block_tables name submitted requests")])
def test_each_broken_rule_is_named(adapter, rule) -> None:
    w = Workload(Config(num_blocks=16), (RequestSpec("a", (1, 2), 2),))
    with pytest.raises(ProtocolError) as caught:
        run_workload(w, adapter, checks_for("property"))
    assert caught.value.rule == rule


def test_blocks_held_out_of_the_pool_is_a_kv_finding_not_a_broken_protocol() -> None:
    """A pool that frees a block twice counts more free blocks than it has: the
    system's bug, reported with a counterexample, not the adapter's."""
    w = Workload(Config(num_blocks=16), (RequestSpec("a", (1, 2), 2),))
    run = run_workload(w, NegativeBlocksHeld, checks_for("property"))
    assert run.violation is not None and run.violation.prop == "kv-conservation"
    assert run.violation.message == "-1 blocks held of a pool of 16"


def test_a_preemption_for_a_request_never_submitted_is_named() -> None:
    with pytest.raises(ProtocolError) as caught:   # the example preempts from its second step on
        run_workload(load_workload(EXAMPLE), PreemptedByStranger, checks_for("property"))
    assert caught.value.rule == "event field types" and "'nobody'" in str(caught.value)


@pytest.mark.parametrize("factory,words", [("NoneStep", "rule 'step returns a list of events'"),
                                           ("PinsNoField", "rule 'capabilities.pinned maps config fields to "
                                                           "values': not config fields: ['colour']"),
                                           ("NoObserve", "rule 'verbs'"),
                                           ("raises_on_build", "builds a system': RuntimeError: cannot build"),
                                           ("missing", "has no callable 'missing'")])
def test_the_cli_gives_one_line_and_exit_2(factory, words, capsys) -> None:
    code = main(["replay", EXAMPLE, "--adapter", f"{BROKEN}:{factory}"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and words in err


def test_a_refused_config_is_bad_input_not_a_broken_protocol(capsys) -> None:
    """A system may refuse a config (WorkloadError): a workload's, and the default
    one loopcheck reads capabilities on, each give one line naming the refusal."""
    assert main(["replay", EXAMPLE, "--adapter", f"{BROKEN}:small_pools_only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "takes pools of up to 16 blocks" in err[0] and "protocol" not in err[0]
    assert main(["fuzz", "--adapter", f"{BROKEN}:small_pools_only", "--budget-seconds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the system refuses the default config, on which loopcheck builds it once" in err[0]


def test_bad_adapter_specs_are_one_line(capsys) -> None:
    for spec in ("nonsense", "no_such_module_xyz:f", "nowhere.py:f"):
        assert main(["simulate", EXAMPLE, "--adapter", spec]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("loopcheck simulate: error: --adapter:")
