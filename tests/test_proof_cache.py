"""The proof cache (proofs/cache.py): a run where nothing changed reads every
result back with the same statuses; an edit to one rule recomputes exactly the
obligations that depend on it; a damaged entry is recomputed with one warning
line; an `unknown` result is never kept nor reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopcheck.cli import main
from loopcheck.model.workload import load_workload
from loopcheck.proofs import cache as cache_module
from loopcheck.proofs import drain, obligations
from loopcheck.proofs.cache import ProofCache, dependencies, obligation_key
from loopcheck.proofs.obligations import ProofPlan, run_all
from loopcheck.proofs.result import UNKNOWN

EXAMPLES = Path(__file__).parent.parent / "examples"
PLAN = ProofPlan(load_workload(EXAMPLES / "livelock.json").config, 3, 6, 6)
CHEAP = ("kv-conservation", "admission-atomic", "futility", "preemption-pairs")   # (seconds, not minutes)


def statuses(pairs: list) -> list[tuple[str, str, str]]:
    return [(r.name, r.policy, r.status) for r, _ in pairs]


def test_a_second_run_reads_every_result_back(tmp_path: Path) -> None:
    cache = ProofCache(tmp_path)
    first = run_all(PLAN, workers=1, cache=cache, only=CHEAP)
    second = run_all(PLAN, workers=1, cache=cache, only=CHEAP)
    assert len(first) == 6 and not any(r.cached for r, _ in first)
    assert all(r.cached for r, _ in second) and statuses(second) == statuses(first)
    assert statuses(run_all(PLAN, workers=1, cache=None, only=CHEAP)) == statuses(first)


def test_editing_one_rule_recomputes_exactly_the_obligations_that_read_it(monkeypatch) -> None:
    """An edit to `preemption_pairs` (proofs/drain.py: the source the key reads,
    changed as an editor would) changes the keys of its two obligations and of
    no other; an edit to the model's step (model/reference.py) those of the
    binding and the lasso searches, which run the model, and of no drain proof."""
    labelled = list(obligations.obligations(PLAN))
    before = {label: obligation_key(label, PLAN, thunk) for label, thunk in labelled}
    original = cache_module.source_of

    def changed(edited: object) -> set[str]:
        monkeypatch.setattr(cache_module, "source_of",
                            lambda obj: original(obj) + ("\n    pass  # edited" if obj is edited else ""))
        after = {label: obligation_key(label, PLAN, thunk) for label, thunk in labelled}
        monkeypatch.setattr(cache_module, "source_of", original)
        return {label for label in before if after[label] != before[label]}

    assert changed(drain.preemption_pairs) == {"preemption-pairs/guarded", "preemption-pairs/unguarded"}
    from loopcheck.model import reference
    model_step = changed(reference.step)
    assert model_step == {label for label, thunk in labelled if "loopcheck.model.reference.step" in dependencies(thunk)}
    assert "binding" in model_step and not any(label.startswith("drain/") for label in model_step)


def test_a_damaged_entry_is_computed_again_with_one_warning(tmp_path: Path, capsys) -> None:
    cache = ProofCache(tmp_path)
    first = run_all(PLAN, workers=1, cache=cache, only=("kv-conservation",))
    (entry,) = tmp_path.glob("*.json")
    for damage in (entry.read_text()[:40], "{}", json.dumps({"schema": "other"}), "\x00"):
        entry.write_text(damage)
        capsys.readouterr()
        again = run_all(PLAN, workers=1, cache=cache, only=("kv-conservation",))
        warning = capsys.readouterr().err.strip().splitlines()
        assert len(warning) == 1 and "cannot be read" in warning[0] and "computing it again" in warning[0]
        assert not again[0][0].cached and statuses(again) == statuses(first)
        assert json.loads(entry.read_text())["result"]["status"] == first[0][0].status   # (written again)


def test_an_unknown_result_is_never_kept_nor_reused(tmp_path: Path, monkeypatch) -> None:
    cache = ProofCache(tmp_path)
    (result, workload), = run_all(PLAN, workers=1, cache=None, only=("kv-conservation",))
    result.status = UNKNOWN
    cache.put("key", result, workload)
    assert not list(tmp_path.glob("*.json"))
    (tmp_path / "key.json").write_text(json.dumps({"schema": cache_module.SCHEMA, "workload": None,
                                                  "result": {**result.to_json(), "status": UNKNOWN}}))
    assert cache.get("key") is None


def test_prove_timings_say_what_came_from_the_cache(tmp_path: Path, capsys) -> None:
    argv = ["prove", "--only", "futility", "--timings", "--cache", str(tmp_path)]
    assert main(argv) == 0
    assert "0 of 2 from the cache" in capsys.readouterr().out
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "2 of 2 from the cache" in out and out.count("cached") >= 3
    assert main(["prove", "--only", "nosuch", "--no-cache"]) == 2
    assert "no obligation's label starts so" in capsys.readouterr().err


@pytest.mark.parametrize("label", ["binding", "drain/guarded/upfront", "livelock-search"])
def test_keys_are_the_same_in_every_process(label: str) -> None:
    """Keys hash sources and values that print the same in any process (sets
    sorted), so a cache written by one run is read by the next."""
    code = ("from tests.test_proof_cache import PLAN; from loopcheck.proofs import obligations; "
            "from loopcheck.proofs.cache import obligation_key; "
            f"print(next(obligation_key(l, PLAN, t) for l, t in obligations.obligations(PLAN) if l == {label!r}))")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).parent.parent, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2)}
    assert len(keys) == 1


def test_a_cache_folder_that_cannot_be_made_is_bad_input_or_a_warning(tmp_path: Path, capsys, monkeypatch) -> None:
    """--cache naming a file: one error line, exit 2, before any work; a default
    folder that cannot be written: one warning line, and the proofs still run."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["prove", "--only", "futility", "--cache", str(blocker)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"loopcheck prove: error: --cache: {str(blocker)!r} exists and is not a folder"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))   # (a file: no folder can be made under it)
    assert main(["prove", "--only", "futility", "--timings"]) == 0
    captured = capsys.readouterr()
    assert [line for line in captured.err.splitlines() if "warning" in line] == [
        f"loopcheck: warning: the proof cache {blocker}/loopcheck/proofs cannot be written (Not a directory); "
        "keeping no results this run"]
    assert "0 of 2 from the cache" in captured.out
