"""Installed from a wheel (not editable), loopcheck is one top-level package, it
finds the workload files it ships, and its command line and pytest plugin work
from a project that has packages of its own named model, engine, fuzz, checks
and sut."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USERS_PACKAGES = ("model", "engine", "explorer", "fuzz", "checks", "sut", "proofs", "kernels", "runctl", "driver",
                  "adapters")

USERS_TEST = """
import loopcheck
from hypothesis import strategies as st
from loopcheck.model.config import Config
from loopcheck.adapters.torch_sut import TorchSUT


def test_the_installed_loopcheck_checks_an_engine(loopcheck_machine):
    assert loopcheck.__file__.startswith({site!r}), loopcheck.__file__
    stats = loopcheck_machine(TorchSUT, st.just(Config(num_blocks=12, kv_layout="shared")), max_examples=3)
    assert stats.examples >= 3 and stats.steps > 0
"""

# the workload files `loopcheck verify` and `loopcheck prove` read, found in the installed package
SHIPPED_FILES = """
from loopcheck.prove_cmd import DEFAULT_CONFIG
from loopcheck.shipped import shipped_example
from loopcheck.verify_cmd import EXPLORE_CASES
for name in ("livelock.json", *(name for name, _ in EXPLORE_CASES)):
    assert shipped_example(name).is_file(), name
    print(shipped_example(name))
assert DEFAULT_CONFIG == "livelock.json"
"""


def test_a_wheel_installs_one_package_that_works_beside_a_users_own_packages(tmp_path: Path) -> None:
    source, wheels, site, project = (tmp_path / name for name in ("source", "wheels", "site", "project"))
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                ".hypothesis", "loopcheck-*"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)], check=True,
                   capture_output=True)
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), *map(str, wheels.glob("*.whl"))],
                   check=True, capture_output=True)
    top = sorted(p.name for p in site.iterdir() if not p.name.endswith(".dist-info") and p.name != "bin")
    assert top == ["loopcheck"]
    for name in USERS_PACKAGES:   # importing any of them is loopcheck importing the user's code by mistake
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(f"raise ImportError('the project\\'s own {name} was imported')\n")
    (project / "test_users_engine.py").write_text(USERS_TEST.format(site=str(site)))
    env = {**os.environ, "PYTHONPATH": str(site)}

    cli = subprocess.run([sys.executable, "-m", "loopcheck.cli", "simulate", str(ROOT / "examples/livelock_min.json"),
                          "--adapter", "torch", "--max-steps", "40"], cwd=project, env=env, capture_output=True,
                         text=True)
    assert cli.returncode in (0, 1), cli.stderr
    assert "Traceback" not in cli.stderr and "steps" in cli.stdout + cli.stderr

    shipped = subprocess.run([sys.executable, "-c", SHIPPED_FILES], cwd=project, env=env, capture_output=True,
                             text=True)
    assert shipped.returncode == 0, shipped.stderr[-2000:]
    assert shipped.stdout.split() == [str(site / "loopcheck" / "examples" / name)
                                      for name in ("livelock.json", "livelock_min.json", "livelock.json")]

    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_users_engine.py"],
                           cwd=project, env=env, capture_output=True, text=True)
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    assert "1 passed" in suite.stdout


def test_the_spec_imports_only_the_standard_library_and_itself() -> None:
    """model/ is the executable spec: nothing of the explorer, torch, z3 or hypothesis."""
    import ast

    outside = {}
    for path in sorted((ROOT / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if (top == "loopcheck" and not name.startswith("loopcheck.model")) or (
                        top != "loopcheck" and top not in sys.stdlib_module_names):
                    outside.setdefault(path.name, []).append(name)
    assert outside == {}
