"""Signatures by rule name (checks/signatures.py): every rule is named once and
listed in the docs, and a signature does not move when the lines of the checks
do."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from loopcheck.checks.signatures import BY_LINE, RULES, signature_of

ROOT = Path(__file__).parent.parent

# explore a small scope on the toy with each of these bugs (keep-going) and print every signature met, with
# loopcheck.checks taken from the folder given (a copy with moved lines), or as installed ('-')
SIGNATURES_MET = """
import importlib.util, json, pathlib, sys
if sys.argv[1] != "-":
    spec = importlib.util.spec_from_file_location("loopcheck.checks", pathlib.Path(sys.argv[1], "__init__.py"),
                                                  submodule_search_locations=[sys.argv[1]])
    sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[spec.name])
from functools import partial
from loopcheck.checks.suite import CheckSet
from loopcheck.explorer.scope import scope_from_json
from loopcheck.explorer.scoped import Limits, explore_units, make_plan
from loopcheck.adapters.loader import capabilities_of
from tests.toy_scheduler import ToyScheduler
assert sys.modules["loopcheck.checks.base"].__file__.startswith(sys.argv[1]) or sys.argv[1] == "-"
scope = scope_from_json({"schema": "loopcheck/scope@1", "configs": {"num_blocks": [4], "block_size": [2],
    "max_num_seqs": [2], "max_num_batched_tokens": [4], "prefix_caching": [True]},
    "prompts": [[1, 1], [1, 1, 2], [2] * 9], "max_tokens": [1, "most"], "priorities": [0, 1], "horizon": 2,
    "max_steps": 30}, "signatures")
met = {}
for bug in ("leak", "no-reject", "slot-cap", "budget", "no-priority", "batch-dependent-token", "keep-on-preempt"):
    factory = partial(ToyScheduler, bugs=frozenset({bug}))
    plan = make_plan(factory, scope, capabilities_of(factory))
    result = explore_units(factory, plan, list(range(len(plan.units))), CheckSet("property"), Limits(),
                           keep_going=True)
    met[bug] = sorted(result.tally.met)
print(json.dumps(met))
"""


def signatures_met(checks_folder: str) -> dict[str, list[str]]:
    done = subprocess.run([sys.executable, "-c", SIGNATURES_MET, checks_folder], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout)


def test_a_blank_line_atop_each_checks_module_keeps_every_signature(tmp_path: Path) -> None:
    shifted = tmp_path / "checks"
    shifted.mkdir()
    for module in (ROOT / "checks").glob("*.py"):
        (shifted / module.name).write_text("\n" + module.read_text())
    before, after = signatures_met("-"), signatures_met(str(shifted))
    assert before == after
    met = {signature for signatures in before.values() for signature in signatures}
    assert len(met) >= 4 and any("." in signature for signature in met)   # (several rules, named ones among them)
    assert not any(".py:" in signature for signature in met)


def rule_sites() -> list[tuple[str, str, str]]:
    """(property, rule, file) of every Violation a check builds with a literal
    property (a rule given as a conditional counts each of its values)."""
    sites = []
    for path in sorted((ROOT / "checks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Violation" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                continue
            rule = next((k.value for k in node.keywords if k.arg == "rule"), ast.Constant(""))
            values = [rule.body, rule.orelse] if isinstance(rule, ast.IfExp) else [rule]
            sites += [(node.args[0].value, value.value, path.name) for value in values
                      if isinstance(value, ast.Constant)]
    return sites


def test_every_rule_is_built_once_and_registered() -> None:
    sites = rule_sites()
    by_prop: dict[str, list[str]] = {}
    for prop, rule, _ in sites:
        by_prop.setdefault(prop, []).append(rule)
    by_prop.setdefault("kv-conservation", []).append("lockstep")   # (checks/lockstep.py names its property by case)
    for prop, rules in by_prop.items():
        assert len(rules) == len(set(rules)), f"{prop}: a rule name used twice: {sorted(rules)}"
        if prop in RULES:
            assert sorted(rules) == sorted(RULES[prop]), prop
        else:
            assert rules == [""], f"{prop} has several rules but checks/signatures.py lists none"
    assert set(RULES) <= set(by_prop)


def test_docs_name_every_rule_and_every_old_signature_maps_to_one() -> None:
    docs = (ROOT / "docs" / "checking.md").read_text()
    for prop, rules in RULES.items():
        for rule in rules:
            assert f"`{signature_of(prop, rule, '')}`" in docs, f"docs/checking.md does not list {prop}.{rule}"
    names = {signature_of(prop, rule, "") for prop, rule, _ in rule_sites()}
    names |= {"liveness", "conformance", "kv-conservation.lockstep"}   # (the driver's; lockstep's, named by case)
    assert set(BY_LINE.values()) <= names
