"""Scoped exploration (`loopcheck explore --scope`): planted bugs found with their
shortest workloads, a certificate for a clean system, parts that combine into
the single run, a too coarse state key caught by --check-key, determinism, bad
input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loopcheck.adapters.loader import capabilities_of, load_factory
from loopcheck.cli import main
from loopcheck.driver.driver import Driver, run_workload
from loopcheck.explorer.certificate import adapter_sha256
from loopcheck.explorer.scope import PRESETS, load_scope, scope_from_json
from loopcheck.model.config import Config
from loopcheck.model.errors import WorkloadError
from loopcheck.model.workload import Workload, load_workload
from loopcheck.sut.model_sut import ModelSUT

ROOT = Path(__file__).parent.parent
TOY = "tests/toy_scheduler.py"
MINISCHED = "examples/adapter/minisched_adapter.py:MiniSchedSUT"


def explore(out: Path, adapter: str, *flags: str, scope: str = "tiny") -> int:
    return main(["explore", "--adapter", adapter, "--scope", scope, "--out", str(out), *flags])


def certificate(out: Path) -> dict:
    return json.loads((out / "certificate.json").read_text())


def test_a_planted_bug_is_found_with_its_shortest_workload_which_replays(tmp_path: Path, capsys) -> None:
    assert explore(tmp_path, f"{TOY}:leaky_over_slots") == 1
    (finding,) = certificate(tmp_path)["findings"]
    assert finding["signature"].startswith("kv-conservation.")
    assert (finding["steps"], finding["requests"]) == (1, 1)   # (a request finishing in one step leaks its block)
    assert "FOUND 1 finding" in capsys.readouterr().out
    assert (tmp_path / "report.md").read_text().count("![timeline") == 1
    assert main(["replay", finding["file"], "--adapter", f"{TOY}:leaky_over_slots", "--check", "property"]) == 1
    assert load_workload(Path(finding["file"])).extra["signature"] == finding["signature"]


def test_keep_going_reports_each_distinct_bug_once(tmp_path: Path) -> None:
    assert explore(tmp_path, f"{TOY}:leaky_over_slots", "--keep-going") == 1
    props = sorted(f["property"] for f in certificate(tmp_path)["findings"])
    assert props == ["kv-conservation", "seq-cap"]


def test_the_same_scope_gives_the_same_counterexample_byte_for_byte(tmp_path: Path) -> None:
    files = []
    for run in ("a", "b"):
        assert explore(tmp_path / run, f"{TOY}:leaky_over_slots", "--keep-going") == 1
        files.append(sorted((p.name, p.read_bytes()) for p in (tmp_path / run).glob("counterexample-*.json")))
    assert files[0] == files[1] and len(files[0]) == 2


def test_a_clean_system_gets_a_certificate_of_what_was_covered(tmp_path: Path, capsys) -> None:
    assert explore(tmp_path, MINISCHED) == 0
    cert = certificate(tmp_path)
    assert cert["findings"] == [] and cert["tally"]["complete"] and cert["covered"] == [1] and cert["parts"] == 1
    assert cert["scope"] == PRESETS["tiny"].to_json()
    assert cert["adapter_sha256"] == adapter_sha256(load_factory(str(ROOT / MINISCHED)))
    tally = cert["tally"]
    assert tally["workloads"] > tally["states"] / 2 > 100 and tally["transitions"] > tally["states"]
    assert tally["judged"]["kv-tables"] == tally["transitions"]   # (every transition judged by every check run)
    assert "priority-inversion" in tally["not_run"]   # (minisched claims no priority scheduling)
    assert 0 < tally["most_blocks_held"] <= 6 and tally["most_steps_to_drain"] >= 3   # (pools of 4 and 6 blocks)
    out = capsys.readouterr().out
    assert out.startswith("CERTIFICATE: no finding in any workload of scope tiny")


def tally_without_time(out: Path) -> dict:
    cert = certificate(out)
    return {k: v for k, v in cert.items() if k not in ("seconds", "covered")}


@pytest.mark.parametrize("scope, flags", [("tiny", ()), ("examples/livelock_min.json", ("--spread", "1"))])
def test_parts_combined_are_the_single_run(scope: str, flags: tuple[str, ...], tmp_path: Path) -> None:
    """A preset, and a workload as a scope (its variants the units)."""
    assert explore(tmp_path / "one", MINISCHED, *flags, scope=scope) == 0
    for k in (1, 2, 3):   # (a part is not a certificate)
        assert explore(tmp_path / f"p{k}", MINISCHED, "--part", f"{k}/3", *flags, scope=scope) == 1
    parts = [str(tmp_path / f"p{k}" / "certificate.json") for k in (3, 1, 2)]
    assert main(["combine", *parts, "--out", str(tmp_path / "all")]) == 0
    single, combined = tally_without_time(tmp_path / "one"), tally_without_time(tmp_path / "all")
    assert combined.pop("parts") == 3 and single.pop("parts") == 1
    assert combined == single
    assert certificate(tmp_path / "all")["covered"] == [1, 2, 3]
    assert main(["combine", parts[0], parts[0], "--out", str(tmp_path / "twice")]) == 2
    assert explore(tmp_path / "w", MINISCHED, "--workers", "2", *flags, scope=scope) == 0
    workers = tally_without_time(tmp_path / "w")
    assert workers.pop("parts") == 2 and workers == single


def test_a_workload_as_a_scope_explores_each_variant_of_it(tmp_path: Path, capsys) -> None:
    """A workload file as the scope: one unit, and one workload, per variant
    (arrivals shifted by 0..spread); on the model, the unguarded livelock is
    found, its counterexample replays; a workload the scope names with --spread
    and a scope file with a workload in it are one scope."""
    assert explore(tmp_path / "m", MINISCHED, "--spread", "1", scope="examples/livelock_min.json") == 0
    tally = certificate(tmp_path / "m")["tally"]
    assert tally["units"] == tally["workloads"] == 2 ** 3 and tally["drained_states"] > 0
    assert explore(tmp_path / "model", "model", "--spread", "1", scope="examples/livelock_min.json") == 1
    (finding,) = certificate(tmp_path / "model")["findings"]
    assert finding["property"] == "livelock"
    capsys.readouterr()
    assert main(finding["replay"].split()[1:]) == 1
    assert "REPRODUCED livelock" in capsys.readouterr().out
    saved = certificate(tmp_path / "m")["scope"]
    assert saved["spread"] == 1 and saved["workload"] == load_workload(ROOT / "examples/livelock_min.json").to_json()
    (tmp_path / "scope.json").write_text(json.dumps(saved))
    assert explore(tmp_path / "again", MINISCHED, scope=str(tmp_path / "scope.json")) == 0
    assert certificate(tmp_path / "again")["tally"] == tally


def test_stop_choices_are_written_so_that_the_run_replays(tmp_path: Path) -> None:
    """A run whose stop tokens the explorer chose (`stop_with`) is written with
    each request's tokens scripted: its replay gives the same trace. A system
    that does not let the explorer choose refuses the choice (bad input)."""
    w = load_workload(ROOT / "examples" / "livelock_min.json").with_config(preemption_policy="guarded")
    w = Workload(w.config, tuple(replace(r, stop_token=7) for r in w.requests))
    d = Driver(ModelSUT, w.config)
    for t in range(60):
        for r in w.requests:
            if r.arrival == t:
                d.add(r)
        d.stop_with(frozenset(r.rid for r in w.requests if t % 3 == 0))
        d.step()
    stopped = {rid for rid, out in d.obs.outputs.items() if out.finish_reason == "stop"}
    assert stopped and all(s.script_tokens for s in d.workload().requests if s.rid in d.obs.outputs)
    again = run_workload(d.workload(), ModelSUT, max_steps=60)   # (to its drain; the run above stepped on, idle)
    assert again.drained and again.driver.trace == d.trace[:len(again.driver.trace)]
    assert not any(d.trace[len(again.driver.trace):]) and again.observation.outputs == d.obs.outputs
    with pytest.raises(WorkloadError, match="stop_choices"):
        factory = load_factory(MINISCHED)
        Driver(factory, Config(**{**Config().to_json(), **capabilities_of(factory).pinned})).stop_with(frozenset())


def test_a_too_coarse_state_key_is_caught_by_check_key(tmp_path: Path, capsys) -> None:
    # CoarseKey leaves request priorities out of its key and out of its claims: exploring merges states that
    # later admit requests in another order; replaying merged states from the root shows it
    assert explore(tmp_path, f"{TOY}:CoarseKey") == 0
    capsys.readouterr()
    assert explore(tmp_path, f"{TOY}:CoarseKey", "--check-key", "20") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "state_key identifies the whole scheduling state" in err and "reach one key" in err
    assert explore(tmp_path, f"{TOY}:ToyScheduler", "--check-key", "20") == 0


def test_the_shortest_finding_is_chosen_over_all_configs(tmp_path: Path) -> None:
    # in tiny, vLLM-like queue-head stalls need a request larger than the pool: the leak shows in one step first
    assert explore(tmp_path, f"{TOY}:leaky", scope="small") == 1
    (finding,) = certificate(tmp_path)["findings"]
    assert finding["steps"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--scope", "huge"], "--scope: expected one of tiny, small, medium"),
    (["--scope", "tiny", "examples/livelock.json"], "not both"),
    (["examples/livelock.json", "--adapter", "model"], "needs --scope"),
    (["--adapter", "model"], "give a workload JSON"),
    (["--scope", "tiny", "--spread", "2"], "--spread shifts a workload's arrivals: with --scope naming a workload"),
    (["--scope", "examples/livelock.json", "--spread", "4"], "more than 100000: make it smaller"),
    (["--scope", "tiny", "--part", "3/2"], "--part: expected K/N"),
    (["--scope", "tiny", "--part", "1/2", "--workers", "2"], "leave out --workers"),
    (["--scope", "tiny", "--max-seconds", "0"], "--max-seconds a number > 0"),
    (["--scope", "tiny", "--adapter", "tests/broken_adapters.py:raises_on_build"], "factory(config) builds"),
    (["--scope", "tiny", "--adapter", "nosuch"], "--adapter"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert main(["explore", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("loopcheck explore: error:")


@pytest.mark.parametrize("data, message", [
    ({"configs": {"num_blocks": [4]}, "prompts": [[1]]}, "scope.max_tokens: missing"),
    ({"configs": {"num_blocks": [4]}, "prompts": [[1]], "max_tokens": [1], "horizon": 0}, "scope.horizon"),
    ({"configs": {"pool": [4]}, "prompts": [[1]], "max_tokens": [1]}, "scope.configs.pool: unknown"),
    ({"configs": {"num_blocks": [0]}, "prompts": [[1]], "max_tokens": [1]}, "scope.configs.num_blocks"),
    ({"configs": {}, "prompts": [[1, 99]], "max_tokens": [1]}, "scope.prompts[0][1]"),
    ({"configs": {}, "prompts": [[1]], "max_tokens": [1], "stops": ["a"]}, "scope.stops[0]"),
    ({"configs": {}, "prompts": [[1]], "max_tokens": [1], "colour": 1}, "scope.colour: unknown"),
])
def test_a_bad_scope_file_names_its_field(data: dict, message: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "scope.json"
    path.write_text(json.dumps({"schema": "loopcheck/scope@1", **data}))
    assert main(["explore", "--scope", str(path), "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_a_scope_file_is_what_its_json_says(tmp_path: Path) -> None:
    for name, scope in PRESETS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(scope.to_json()))
        assert load_scope(str(path)) == scope
        assert scope_from_json(scope.to_json(), name) == scope


def test_most_tokens_is_the_boundary_of_the_pool_and_of_what_the_system_takes() -> None:
    from loopcheck.explorer.scoped import most_tokens
    from loopcheck.model.config import Config
    from tests.toy_scheduler import PINNED, LongPromptsRefused, ToyScheduler

    cfg = Config(**{**Config().to_json(), "num_blocks": 4, "block_size": 2, **PINNED})
    assert most_tokens(ToyScheduler, cfg, (1, 1)) == 7   # (2 + 7 - 1 positions: the 4 blocks of 2, full)
    assert most_tokens(ToyScheduler, cfg, (1,) * 9) is None   # (larger than the pool whatever max_tokens)
    assert most_tokens(LongPromptsRefused, cfg, (1,) * 5) is None   # (refused at add whatever max_tokens)
    assert most_tokens(LongPromptsRefused, cfg, (1,) * 4) == 5


def test_stop_choices_resolve_to_the_tokens_a_request_is_given_or_never_given() -> None:
    from loopcheck.adapters.loader import capabilities_of
    from loopcheck.explorer.scope import NEVER
    from loopcheck.explorer.scoped import probe_tokens, resolve_shapes, stop_token
    from loopcheck.model.config import Config
    from tests.toy_scheduler import PINNED, ToyScheduler

    assert stop_token(1, [5, 0, 7], 64) == 0 and stop_token(NEVER, [0, 1, 3], 64) == 2
    assert stop_token(2, [5, 0, 5], 64) is None   # (token 5 came earlier: the request would stop at index 0)
    assert stop_token(1, [5, 70], 64) is None and stop_token(NEVER, [], 64) is None   # (outside; did not finish)
    cfg = Config(**{**Config().to_json(), "num_blocks": 8, "block_size": 2, **PINNED})
    scope = scope_from_json({"schema": "loopcheck/scope@1", "configs": {"num_blocks": [8]}, "prompts": [[1, 2]],
                             "max_tokens": [3], "stops": [None, 0, NEVER]}, "stops")
    shapes = resolve_shapes(scope, cfg, ToyScheduler, capabilities_of(ToyScheduler))
    given = probe_tokens(ToyScheduler, cfg, (1, 2), 3, 40)
    assert [s.stop_token for s in shapes] == [None, given[0], min(set(range(64)) - set(given))]


def test_a_scope_the_system_takes_nothing_of_is_bad_input_not_a_certificate(tmp_path: Path, capsys) -> None:
    path = tmp_path / "long.json"   # (LongPromptsRefused refuses prompts longer than 4 tokens at add)
    path.write_text(json.dumps({"schema": "loopcheck/scope@1", "configs": {"num_blocks": [8]},
                                "prompts": [[1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2]], "max_tokens": [1]}))
    assert explore(tmp_path / "out", f"{TOY}:LongPromptsRefused", scope=str(path)) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "takes no request of the scope on any of its configs" in err and "the most is 4" in err


def test_a_limit_makes_an_incomplete_verdict_never_a_certificate(tmp_path: Path, capsys) -> None:
    assert explore(tmp_path, MINISCHED, "--max-states", "50") == 1
    assert capsys.readouterr().out.startswith("INCOMPLETE: a limit")
    assert not certificate(tmp_path)["tally"]["complete"]


@pytest.mark.parametrize("system, scope", [("Spins", "tiny"), ("Spins", "small"),   # (small's stops are probed)
                                           ("BuildsForever", "tiny")])
def test_max_seconds_cuts_a_call_that_never_ends(system: str, scope: str, tmp_path: Path, capsys) -> None:
    """A step that spins (long before the hang timeout), or a build that never
    ends, is cut at --max-seconds: INCOMPLETE, exit 1, never a certificate."""
    adapter = f"{Path(__file__).parent / 'broken_adapters.py'}:{system}"
    assert explore(tmp_path, adapter, "--max-seconds", "0.5", scope=scope) == 1   # (it would never end otherwise)
    out = capsys.readouterr().out
    if system == "BuildsForever":   # (cut while loopcheck builds one to read its capabilities, before any work)
        assert out == "INCOMPLETE: --max-seconds 0.5 passed while the system was being built: nothing explored\n"
    else:
        assert out.startswith("INCOMPLETE: a limit") and not certificate(tmp_path)["tally"]["complete"]
