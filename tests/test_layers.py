"""Layers with one-way arrows: every import between top-level folders goes down
the layer table of docs/layers.md, and the test notices a planted cycle."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).parent.parent
TABLE = ROOT / "docs" / "layers.md"
STDLIB_ONLY = "stdlib only"


def layer_table(text: str) -> dict[str, tuple[int, bool]]:
    """Folder -> (layer, stdlib only), read from the table of docs/layers.md."""
    rows = re.findall(r"^\| (\d+) \| `(\w+)/` \|[^|]*\|([^|]*)\|$", text, re.MULTILINE)
    return {folder: (int(layer), third.strip() == STDLIB_ONLY) for layer, folder, third in rows}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative ones resolved to loopcheck's names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def layer_breaks(root: Path, table: dict[str, tuple[int, bool]]) -> list[str]:
    """Each import that points up or sideways between folders, or out of the
    standard library from a stdlib-only folder, as FILE:LINE: what."""
    import sys

    breaks = []
    for folder, (layer, stdlib_only) in table.items():
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root)
            for line, module in imports_of(path):
                parts = module.split(".")
                if parts[0] == "loopcheck":
                    target = parts[1] if len(parts) > 1 and parts[1] in table else "loopcheck"
                    if target != folder and table[target][0] >= layer:
                        breaks.append(f"{where}:{line}: {folder}/ (layer {layer}) imports {module} "
                                      f"({target}/, layer {table[target][0]})")
                elif stdlib_only and parts[0] not in sys.stdlib_module_names and parts[0] != "__future__":
                    breaks.append(f"{where}:{line}: {folder}/ is stdlib only and imports {module}")
    return breaks


def test_the_table_names_every_folder_of_the_package() -> None:
    table = layer_table(TABLE.read_text())
    packaged = set(re.findall(r'^"?loopcheck(?:\.\w+)?"? = "(\w+)"$', (ROOT / "pyproject.toml").read_text(),
                              re.MULTILINE))
    assert set(table) == packaged and len(table) >= 12


def test_every_import_goes_down_the_layers() -> None:
    assert layer_breaks(ROOT, layer_table(TABLE.read_text())) == []


def test_a_planted_cycle_and_an_upward_import_are_found(tmp_path) -> None:
    """A copy of the tree with the checks importing the driver (which imports
    the checks: a cycle) and the model importing torch."""
    table = layer_table(TABLE.read_text())
    for folder in table:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    base = tmp_path / "checks" / "base.py"
    base.write_text(base.read_text() + "\nfrom loopcheck.driver.driver import Driver\n")
    events = tmp_path / "model" / "events.py"
    events.write_text(events.read_text() + "\n\ndef _planted() -> None:\n    import torch\n")
    upward, torch = sorted(layer_breaks(tmp_path, table))
    assert upward.startswith("checks/base.py:") and "imports loopcheck.driver.driver (driver/, layer 4)" in upward
    assert torch.startswith("model/events.py:") and "stdlib only and imports torch" in torch
