"""app/ talks to other objects through their public names: no `other._private` reads or writes,
no `from module import _private` (the canvas's overlay, a stage's view and the like each have a
public property). Scanned with ast, so comments and strings do not count."""
from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def private_reaches(source: str) -> list[str]:
    """`x._name` where x is not self/cls, and imports of underscore names, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_scan_finds_a_reach_into_another_object():
    source = "from .graph_items import _fonts\ndef f(self, canvas):\n    self._ok = canvas._overlay\n"
    assert sorted(private_reaches(source)) == ["1: import _fonts", "3: canvas._overlay"]


def test_no_app_module_reaches_into_another_objects_private_names():
    found = [f"{path.relative_to(APP.parent)}:{hit}" for path in sorted(APP.rglob("*.py"))
             for hit in private_reaches(path.read_text(encoding="utf-8"))]
    assert not found, "app/ reads another object's private names: " + "; ".join(found)
