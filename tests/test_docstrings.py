"""Every public class and function of `lsm`, `compaction` and `formats` has a docstring.

Public: a module-level class or function, or a method of a public class, whose name does not start
with an underscore. Property setters share their getter's docstring and are not counted. The check
reads the source (no import), so it covers modules that need optional dependencies too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lsm", "compaction", "formats")


def _is_setter(node: ast.AST) -> bool:
    return any(
        isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter")
        for d in getattr(node, "decorator_list", ())
    )


def public_definitions(path: Path) -> list[tuple[str, ast.AST]]:
    """(qualified name, node) of each public class, function and method in the module at `path`."""
    out: list[tuple[str, ast.AST]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name.startswith("_") or _is_setter(node):
                    continue
                out.append((prefix + node.name, node))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(path.read_text(), str(path)).body, "")
    return out


MODULES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_the_check_sees_every_package() -> None:
    names = {p.relative_to(ROOT).parts[0] for p in MODULES}
    assert names == set(PACKAGES)
    assert sum(len(public_definitions(p)) for p in MODULES) > 250  # the packages' public surface


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_public_names_have_docstrings(path: Path) -> None:
    assert ast.get_docstring(ast.parse(path.read_text())), f"{path.relative_to(ROOT)}: no module docstring"
    missing = [
        f"{path.relative_to(ROOT)}:{node.lineno} {name}"
        for name, node in public_definitions(path)
        if ast.get_docstring(node) is None
    ]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)
