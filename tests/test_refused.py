"""Input a system's API refuses (`loopcheck.sut.protocol.Refused` from `add`):
the request is left out of the run, nothing judges it, the run goes on, and a
campaign says how many it refused and why."""

from __future__ import annotations

import json
from pathlib import Path

from loopcheck.checks.suite import checks_for
from loopcheck.cli import main
from loopcheck.driver.driver import run_workload
from loopcheck.model.config import Config
from loopcheck.model.workload import RequestSpec, Workload
from tests.toy_scheduler import PINNED, LongPromptsRefused

TOY = str(Path(__file__).parent / "toy_scheduler.py")


def test_a_refused_request_is_left_out_and_the_rest_runs() -> None:
    cfg = Config(**{**Config().to_json(), **PINNED, "num_blocks": 8, "block_size": 2, "max_num_seqs": 2})
    w = Workload(cfg, (RequestSpec("a", (1, 2), 2), RequestSpec("long", (1, 2, 3, 4, 5, 6), 2, abort_at=2),
                       RequestSpec("b", (3, 4), 2, arrival=1)))
    run = run_workload(w, LongPromptsRefused, checks_for("property"))
    assert run.violation is None and run.drained
    assert run.driver.refused == {"long": "prompt of 6 tokens, the most is 4"}
    assert [r.rid for r in run.driver.workload().requests] == ["a", "b"]   # what replays
    assert "long" not in {e.rid for events in run.driver.trace for e in events}


def test_a_campaign_counts_what_the_system_refused(tmp_path, capsys) -> None:
    code = main(["fuzz", "--adapter", f"{TOY}:LongPromptsRefused", "--max-examples", "150", "--budget-seconds",
                 "600", "--seed", "1", "--out", str(tmp_path), "--json"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert code == 0 and not summary["counterexamples"]
    (why, count), *others = summary["refused"].items()
    assert why.startswith("prompt of ") and count > 0
